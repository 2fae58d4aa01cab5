"""NCCL's tuner constants by release (``tuner_history`` in topologies/software/nccl.yaml, tuning.cc at each tag): a
scenario that names its NCCL prices the choice with that release's baseLat, hwLat and per-architecture caps; the
simulation takes the latest tables whatever the version."""

from __future__ import annotations

import math

import pytest
import yaml

from collsim.api import Simulator
from collsim.backends.common import BackendError
from collsim.backends.nccl.constants import NcclConstants

US = 1e-6
KIB = 1024
TWO_NODES = "scenarios/validation/hgx_h100_2node_ib_ndr_issue309.yaml"
#: two one-GPU nodes (a PCIe workstation each, one 100 GbE NIC): one rank per node
ONE_PER_NODE = ["cluster.node=pcie-workstation", "cluster.node_params.gpus=1", "cluster.node_params.nic=eth-100g"]


def _sim(source: str, version: str, *more: str) -> Simulator:
    return Simulator.from_source(source, [f'backends.nccl.version="{version}"', *more])


@pytest.mark.parametrize(("version", "net"), [("2.28.3", 14.0), ("2.28.7", 14.0), ("2.28.9", 20.9), ("2.30.7", 20.9)])
def test_nvlstree_network_latency_by_release(version: str, net: float) -> None:
    """hwLat[NET][NVLS_TREE] is 14 us from v2.19.1-1 to v2.28.7-1 and 20.9 us from v2.28.9-1: on two nodes NVLSTree's
    model latency is intra + 2 x log2(2) x inter, so it moves by 2 x (20.9 - 14) us; the simulated time does not.
    (Releases before 2.28.3 price NVLSTree's bandwidth with another formula too: test_tuner_formulas.py.)"""
    sims = {v: _sim(TWO_NODES, v) for v in (version, "2.30.7")}
    out = {v: s.simulate_one("nccl", 4096 * KIB, choice=("NVLSTree", "Simple")) for v, s in sims.items()}
    predicted = {v: o.predicted_s for v, o in out.items()}
    assert predicted[version] is not None and predicted["2.30.7"] is not None
    assert predicted["2.30.7"] - predicted[version] == pytest.approx(2 * (20.9 - net) * US, abs=1e-12)
    assert out[version].time_s == out["2.30.7"].time_s


def test_tree_simple_latency_before_2_23() -> None:
    """v2.19.1-1 .. v2.22.3-1 price a Tree/Simple step at 28 us on NVLink with baseLat 0 (from v2.23.4-1: 4.0 and
    8.4): one HGX H100 node (a chain of 8, 2 x 7 steps) at 8 bytes, where the bandwidth term is nothing."""
    t = {v: _sim("hgx-h100", v).simulate_one("nccl", 8, choice=("Tree", "Simple")) for v in ("2.22.3", "2.23.4")}
    old, new = t["2.22.3"].predicted_s, t["2.23.4"].predicted_s
    assert old is not None and new is not None
    assert old - new == pytest.approx((0.0 + 2 * 7 * 28.0 - (8.4 + 2 * 7 * 4.0)) * US, rel=1e-3)
    assert t["2.22.3"].time_s == t["2.23.4"].time_s


def test_nvls_link_latency_and_2_18s_base() -> None:
    """NVLS on one node costs its hwLat[NVLINK]: 23 us in 2.19-2.20, 25 from 2.21; 2.18 put its 23 us in baseLat."""
    t = {
        v: _sim("hgx-h100", v).simulate_one("nccl", 8, choice=("NVLS", "Simple")).predicted_s
        for v in ("2.18.5", "2.20.3", "2.21.5")
    }
    assert t["2.21.5"] is not None and t["2.20.3"] is not None and t["2.18.5"] is not None
    assert t["2.21.5"] - t["2.20.3"] == pytest.approx(2.0 * US, abs=1e-9)
    assert t["2.20.3"] == pytest.approx(t["2.18.5"], abs=1e-12)


def test_one_rank_per_node_takes_the_trees_network_latency_from_2_23() -> None:
    """tuning.cc from v2.23.4-1: with ppn = 1 every algorithm's network step is priced at Tree's hwLat[NET]: two
    one-GPU nodes, Ring/LL's two network steps go from 2.7 to 5.0 us each."""
    t = {v: _sim("2node-a100-tcp", v, *ONE_PER_NODE) for v in ("2.22.3", "2.23.4")}
    assert all(s.nccl_plan.ppn == 1 and s.nccl_plan.nnodes == 2 for s in t.values())
    out = {v: s.simulate_one("nccl", 8, choice=("Ring", "LL")) for v, s in t.items()}
    old, new = out["2.22.3"].predicted_s, out["2.23.4"].predicted_s
    assert old is not None and new is not None
    assert new - old == pytest.approx(2 * (5.0 - 2.7) * US, abs=1e-12)
    assert out["2.22.3"].time_s == out["2.23.4"].time_s


def test_hoppers_one_node_ll_cap_before_2_21() -> None:
    """llMaxBws Hopper one node: 87.7 GB/s up to v2.20.5-1, 141 from v2.21.5-1. Ring/LL on one HGX H100 at 16 MiB,
    where llMaxBw binds (busBw = min(llMaxBw, busBw / 2)): the model's time scales by 141 / 87.7 past latency."""
    size = 16 << 20
    t = {}
    for v in ("2.20.3", "2.21.5"):
        sim = _sim("hgx-h100", v)
        small, big = (sim.simulate_one("nccl", s, choice=("Ring", "LL")).predicted_s for s in (size, 2 * size))
        assert small is not None and big is not None
        t[v] = big - small  # the bandwidth term of `size` bytes
    assert t["2.20.3"] / t["2.21.5"] == pytest.approx(141.0 / 87.7, rel=1e-9)


def test_blackwells_ll128_and_tree_caps_by_release() -> None:
    consts = Simulator.from_source("hgx-h100").nccl_constants
    gb = 1e9
    ring = {v: consts.for_tuner(v).per_channel_max_ring_ll128_bw["blackwell"] for v in
            ((2, 26, 2), (2, 28, 7), (2, 29, 2), (2, 30, 7))}
    assert [tuple(round(x / gb, 2) for x in r) for r in ring.values()] == [
        (73.4, 73.4, 73.4), (73.4, 34.6, 73.4), (34.5, 34.6, 34.5), (40.0, 40.0, 40.0)]
    assert consts.for_tuner((2, 27, 7)).per_channel_max_tree_bw["blackwell"][1] == pytest.approx(82.8 * gb)
    assert consts.for_tuner((2, 28, 3)).per_channel_max_tree_bw["blackwell"][1] == pytest.approx(42.8 * gb)
    assert consts.for_tuner((2, 26, 2)).per_channel_max_ring_ll128_bw["hopper"] == \
        consts.per_channel_max_ring_ll128_bw["hopper"]  # rows no entry names stay


def test_unset_version_and_the_latest_release_price_alike() -> None:
    consts = Simulator.from_source("hgx-h100").nccl_constants
    assert consts.for_tuner(None) is consts
    assert consts.for_tuner((2, 30, 7)) is consts
    assert consts.for_tuner((2, 28, 9)).hw_latency["NET"]["NVLSTree"]["Simple"] == pytest.approx(20.9 * US)
    assert consts.for_tuner((2, 26, 2)) is consts.for_tuner((2, 27, 7))  # one entry's span: cached once
    old = consts.for_tuner((2, 10, 3))  # before 2.18.3: 2.18.3's figures
    assert (old.base_latency, old.hw_latency) == (
        consts.for_tuner((2, 18, 5)).base_latency, consts.for_tuner((2, 18, 5)).hw_latency)


def test_the_history_must_be_latest_first() -> None:
    with open("topologies/software/nccl.yaml") as fh:
        data = yaml.safe_load(fh)
    data["tuner_history"] = list(reversed(data["tuner_history"]))
    with pytest.raises(BackendError, match="latest first"):
        NcclConstants.from_mapping(data)


def test_every_history_entry_names_known_rows() -> None:
    """Each change is to a (hardware, algorithm, protocol) or architecture the latest tables have: no typo adds a
    new row."""
    consts = Simulator.from_source("hgx-h100").nccl_constants
    for change in consts.tuner_history:
        for name, rows in change.tables.items():
            assert set(rows) <= set(getattr(consts, name))
        for a, row in change.base_latency.items():
            assert set(row) <= set(consts.base_latency[a])
        for h, table in change.hw_latency.items():
            for a, row in table.items():
                assert set(row) <= set(consts.hw_latency[h][a])
                assert all(math.isfinite(x) and x >= 0 for x in row.values())


def test_tree_pattern_factor_for_one_gpu_per_node_in_every_release() -> None:
    """tuning.cc: Tree's bandwidth x0.85 when the tree graph has the TREE pattern, which search.cc gives one GPU per
    node: v2.18.3-1 to v2.25.1-1 test graphs[a]->pattern, 2.26 on comm->maxTreePattern (collsim read that rename as
    the factor's start, so 2.18-2.25 priced such trees 1/0.85 too fast). Eight GPUs a node (BALANCED_TREE): none."""
    import dataclasses

    from collsim.backends.nccl import tuner_table

    def tree_bw(version: str, *more: str, factor: bool = True) -> float:
        sim = _sim("2node-a100-tcp", version, *more)
        consts = sim.nccl_constants if factor else dataclasses.replace(sim.nccl_constants, tree_pattern_since=(9, 9))
        return tuner_table(sim.nccl_plan, consts, "allreduce", sim.nccl_options)[("Tree", "Simple")][1]

    for version in ("2.18.5", "2.22.3", "2.25.1", "2.26.2"):
        assert tree_bw(version, *ONE_PER_NODE) == pytest.approx(0.85 * tree_bw(version, *ONE_PER_NODE, factor=False))
        assert tree_bw(version) == tree_bw(version, factor=False)
    assert tree_bw("2.25.1", *ONE_PER_NODE) == pytest.approx(tree_bw("2.26.2", *ONE_PER_NODE), rel=1e-12)


def test_nvlstree_correction_on_blackwell_from_2_29() -> None:
    """tuning.cc from 2.29.2: NVLSTree's allreduce bandwidth on Blackwell x86 hosts takes the tree correction table
    (Simple row; 0.7 at 4-6 MiB, logSize 16): NCCL's model slope there is 1/0.7 of 2.28.9's; Hopper is untouched."""
    mib = 1 << 20

    def slope(source: str, version: str) -> float:
        sim = _sim(source, version)
        t = [sim.simulate_one("nccl", s * mib, choice=("NVLSTree", "Simple")).predicted_s for s in (4, 6)]
        assert t[0] is not None and t[1] is not None
        return t[1] - t[0]

    b200 = "scenarios/published/gcp_a4_b200_2node_roce.yaml"
    assert slope(b200, "2.29.2") / slope(b200, "2.28.9") == pytest.approx(1 / 0.7, rel=1e-9)
    assert slope(TWO_NODES, "2.29.2") == pytest.approx(slope(TWO_NODES, "2.28.9"), rel=1e-12)
