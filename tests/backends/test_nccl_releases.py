"""Which NCCL release a scenario names (``backends.nccl.version``) and what that release has: the algorithms and
protocols it does not have yet are not offered (``algorithms_since``, ``protocols_since`` in
topologies/software/nccl.yaml, each from the tag where NCCL first defines it), and a release outside the tuner tables
collsim holds (``tuner_tables_span``) is said to be priced as the nearest end."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import candidates, tuner_times
from collsim.cli import main
from collsim.scenario import ScenarioError

MIB = 1 << 20
TWO_NODES = "scenarios/validation/hgx_h100_2node_ib_ndr_issue309.yaml"
#: two one-GPU nodes (a PCIe workstation each, one 100 GbE NIC): one rank per node, where PAT runs
ONE_PER_NODE = ["cluster.node=pcie-workstation", "cluster.node_params.gpus=1", "cluster.node_params.nic=eth-100g"]


def _sim(source: str, version: str | None, *more: str) -> Simulator:
    return Simulator.from_source(source, ([f'backends.nccl.version="{version}"'] if version else []) + list(more))


def _algorithms(sim: Simulator, collective: str = "allreduce") -> set[str]:
    return {a for a, _p in candidates(sim.nccl_plan, sim.nccl_options, collective)}


def test_each_algorithm_from_the_release_that_brought_it() -> None:
    """NVLS from 2.17 (devcomm.h v2.17.1-1), NVLSTree from 2.18 (v2.18.1-1), PAT from 2.23 (nccl_common.h
    v2.23.4-1), CollNet's two variants from 2.14, Tree from 2.4: one minor release earlier each is without it."""
    consts = Simulator.from_source("hgx-h100").nccl_constants
    assert consts.algorithms_since == {
        "Tree": (2, 4), "P2P": (2, 7), "CollNetDirect": (2, 14), "CollNetChain": (2, 14), "NVLS": (2, 17),
        "NVLSTree": (2, 18), "PAT": (2, 23),
    }  # fmt: skip
    assert consts.protocols_since == {"LL128": (2, 5)}
    for name, (major, minor) in {**consts.algorithms_since, **consts.protocols_since}.items():
        assert name in consts.unreleased((major, minor - 1, 9))
        assert name not in consts.unreleased((major, minor, 0))
    assert consts.unreleased(None) == {}


def test_one_node_nvls_only_from_2_17() -> None:
    """HGX H100 at 1 MiB: NCCL's cost model picks NVLS with 2.17 and 2.18 tables alike; 2.16 has no NVLS, so its
    pick is among Ring and Tree, and the cost model is not asked about NVLS at all."""
    old, new = _sim("hgx-h100", "2.16.5"), _sim("hgx-h100", "2.17.1")
    assert "NVLS" not in _algorithms(old) and "NVLS" in _algorithms(new)
    priced = tuner_times(old.nccl_plan, old.nccl_constants, "allreduce", MIB, old.nccl_options)
    assert all(a != "NVLS" for a, _p in priced)
    assert new.simulate_one("nccl", MIB).algorithm == "NVLS"
    assert old.simulate_one("nccl", MIB).algorithm in ("Ring", "Tree")


def test_nvlstree_only_from_2_18() -> None:
    """Two HGX H100 nodes at 64 MiB: NVLSTree with 2.18.5, Tree or Ring with 2.17.1 (whose NVLS is one node
    only: v2.17.1-1 src/transport/nvls.cc line 232 returns for nNodes > 1)."""
    assert _sim(TWO_NODES, "2.18.5").simulate_one("nccl", 64 * MIB).algorithm == "NVLSTree"
    old = _sim(TWO_NODES, "2.17.1")
    assert "NVLSTree" not in _algorithms(old)
    assert old.simulate_one("nccl", 64 * MIB).algorithm in ("Ring", "Tree")


def test_pat_only_from_2_23() -> None:
    """One rank per node: all-gather may run PAT from 2.23, not in 2.22."""
    assert "PAT" in _algorithms(_sim("2node-a100-tcp", "2.23.4", *ONE_PER_NODE), "allgather")
    assert "PAT" not in _algorithms(_sim("2node-a100-tcp", "2.22.3", *ONE_PER_NODE), "allgather")


def test_ll128_only_from_2_5() -> None:
    """LL128 came with 2.5 (core.h v2.5.6-1): a 2.4.8 run picks among LL and Simple, and NCCL_PROTO=LL128 alone is
    an error saying why."""
    old = _sim("hgx-h100", "2.4.8")
    assert {p for _a, p in candidates(old.nccl_plan, old.nccl_options, "allreduce")} == {"LL", "Simple"}
    assert "LL128" in {p for _a, p in candidates(_sim("hgx-h100", "2.5.6").nccl_plan, old.nccl_options, "allreduce")}
    forced = _sim("hgx-h100", "2.4.8", "backends.nccl.env.NCCL_PROTO=LL128")
    with pytest.raises(ScenarioError, match=r"LL128 came with NCCL 2\.5 \(backends\.nccl\.version is 2\.4\.8\)"):
        forced.simulate_one("nccl", MIB)


def test_asking_for_an_algorithm_the_release_lacks_is_an_error() -> None:
    forced = _sim("hgx-h100", "2.16.5", "backends.nccl.env.NCCL_ALGO=NVLS")
    with pytest.raises(ScenarioError, match=r"NCCL_ALGO=NVLS: NCCL would refuse it here: NVLS came with NCCL 2\.17"):
        forced.simulate_one("nccl", MIB)
    with pytest.raises(ScenarioError, match=r"sendrecv: send/receive \(ncclSend, ncclRecv\) came with NCCL 2\.7"):
        _sim("hgx-h100", "2.6.4", "workload.collective=sendrecv").simulate_one("nccl", MIB)


def test_release_notes() -> None:
    """The header lines: older than the tables (2.18.3's price the choice), newer (modelled as 2.30.7), the
    algorithms and protocols left out where they would have been candidates, none without a version."""
    notes = _sim("hgx-h100", "2.4.8").nccl_release_notes()
    assert notes[0] == (
        "NCCL 2.4.8 (backends.nccl.version) is older than the oldest release whose tuner tables collsim holds: "
        "2.18.3's tables price the choice; the simulation takes the latest's"
    )
    assert notes[1] == "NCCL 2.4.8 (backends.nccl.version) has no NVLS (from 2.17), LL128 (from 2.5): not offered"
    assert len(notes) == 2  # nothing about NVLS's split before 2.20: there is no NVLS
    assert _sim("hgx-h100", "2.31.0").nccl_release_notes() == [
        "NCCL 2.31.0 (backends.nccl.version) is newer than the latest release collsim follows: modelled as 2.30.7"
    ]
    assert _sim("hgx-h100", "2.30.7").nccl_release_notes() == []
    assert _sim("hgx-h100", None).nccl_release_notes() == []
    # an algorithm the hardware cannot run anyway is not listed: DGX A100 has no NVLS in any release
    assert not any("has no" in n for n in _sim("dgx-a100", "2.16.5").nccl_release_notes())
    # the tables within the span: the release's own, as before
    assert any("its tuner's latency" in n for n in _sim("hgx-h100", "2.26.2").nccl_release_notes())


def test_explain_prints_the_release_notes(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["explain", "hgx-h100", "--set", 'backends.nccl.version="2.16.5"', "--sizes", "1MiB", "--quiet"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "# NCCL 2.16.5 (backends.nccl.version) has no NVLS (from 2.17): not offered" in out.splitlines()[:4]
    assert "NVLS/Simple" not in out


def test_blackwell_before_2_25_is_priced_and_run_as_hopper() -> None:
    """NCCL 2.24 knew no compute capability 10.0: its tuner read Hopper's rows (tuning.cc v2.24.3-1 line 210) and
    NVLS ran its default 16 channels (nvls.cc lines 146, 173); 2.25 brought Blackwell's rows and 32 channels."""
    b200 = "scenarios/published/lambda_b200_2node_ib.yaml"
    old, new = _sim(b200, "2.24.3"), _sim(b200, "2.25.1")
    tuned = old.nccl_constants.for_tuner((2, 24, 3))
    for table in ("ll_max_bw", "per_channel_max_ring_ll128_bw", "per_channel_max_tree_ll128_bw",
                  "per_channel_max_tree_bw"):  # fmt: skip
        assert getattr(tuned, table)["blackwell"] == getattr(tuned, table)["hopper"]
    assert new.nccl_constants.for_tuner((2, 25, 1)).ll_max_bw["blackwell"] != tuned.ll_max_bw["hopper"]
    nvls_tree = {s: s.simulate_one("nccl", 64 * MIB, choice=("NVLSTree", "Simple")).channels for s in (old, new)}
    assert (nvls_tree[old], nvls_tree[new]) == (16, 32)
    assert (
        "NCCL 2.24.3 (backends.nccl.version) predates NCCL's blackwell support (2.25): its tuner reads hopper's rows "
        "and NVLS runs hopper's channels"
    ) in old.nccl_release_notes()
    assert not any("predates" in n for n in new.nccl_release_notes())


def test_blackwell_nvls_tuning_across_nodes_from_2_30_3() -> None:
    """ncclNvlsTreeSm100Tuning (nvls.cc, v2.30.3-1 on): B200 nodes with 400G NICs behind Gen5 x16 (minNetBw 48 GB/s,
    the NIC on the GPU's switch): 2 nodes keep 32 channels and cap NVLSTree's chunk at 64 KiB; 4 nodes run 24
    channels; NCCL 2.29.7 and
    Hopper are untouched, and NCCL_NVLS_NCHANNELS / NCCL_NVLSTREE_MAX_CHUNKSIZE set by the user win."""
    b200 = "scenarios/published/gcp_a4_b200_2node_roce.yaml"
    latest = ['backends.nccl.version="2.30.7"']
    assert _sim(b200, None, *latest).nccl_plan.nvls_tuned == (32, None, 64 * 1024)
    four = _sim(b200, None, *latest, "cluster.nodes=4")
    assert four.nccl_plan.nvls_tuned == (24, None, 64 * 1024)
    assert four.simulate_one("nccl", 256 * MIB, choice=("NVLSTree", "Simple")).channels == 24
    assert _sim(b200, "2.29.7", "cluster.nodes=4").nccl_plan.nvls_tuned == (None, None, None)
    assert _sim(TWO_NODES, None).nccl_plan.nvls_tuned == (None, None, None)  # Hopper
    assert (
        "NCCL's NVLS tuning on Blackwell across nodes (2.30.3 on, by the GPUs' network bandwidth): 24 NVLS channels, "
        "NVLSTree's chunk at most 64 KiB"
    ) in four.nccl_release_notes()
    assert not any("NVLS tuning" in n for n in _sim(b200, "2.29.7", "cluster.nodes=4").nccl_release_notes())
    user = _sim(b200, None, *latest, "cluster.nodes=4", "backends.nccl.env.NCCL_NVLS_NCHANNELS=16")
    assert user.simulate_one("nccl", 256 * MIB, choice=("NVLSTree", "Simple")).channels == 16


def test_blackwell_nvls_tuning_caps_the_tree_chunk() -> None:
    """On two B200 nodes 2.30.3's tuning caps NVLSTree's chunk at 64 KiB: the simulated time differs from 2.29.7's
    (no cap below 4 nodes), and NCCL_NVLSTREE_MAX_CHUNKSIZE=131072 set by the user gives 2.29.7's time back."""
    b200 = "scenarios/published/gcp_a4_b200_2node_roce.yaml"
    pick = ("NVLSTree", "Simple")
    old = _sim(b200, "2.29.7").simulate_one("nccl", 256 * MIB, choice=pick).time_s
    new = _sim(b200, "2.30.7").simulate_one("nccl", 256 * MIB, choice=pick).time_s
    user = _sim(b200, "2.30.7", "backends.nccl.env.NCCL_NVLSTREE_MAX_CHUNKSIZE=131072")
    assert new != old
    assert user.simulate_one("nccl", 256 * MIB, choice=pick).time_s == old

