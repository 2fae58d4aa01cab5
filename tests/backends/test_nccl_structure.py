"""The NCCL backend's structure: one module per algorithm behind one registry, constants from YAML only, the GPU
arch checked against the tuner tables, NVLS decided by the arch and the NVSwitch's multicast, races by deadline."""

from __future__ import annotations

import dataclasses
import math
import shutil
from pathlib import Path

import pytest
import yaml

from collsim.api import Simulator
from collsim.backends import BackendError
from collsim.backends.nccl import REGISTRY, NcclConstants, algorithm, enabled_pairs, plan_nccl, simulate_nccl
from collsim.backends.nccl.base import NcclAlgorithm
from collsim.scenario import ScenarioError
from collsim.topology import TopologyError, available_templates, topologies_dir
from collsim.vocab import NCCL_ALGORITHMS

MiB = 2**20
NCCL_YAML = topologies_dir() / "software" / "nccl.yaml"


def _yaml() -> dict:  # type: ignore[type-arg]
    return yaml.safe_load(NCCL_YAML.read_text())


def test_every_registered_algorithm_is_an_nccl_name_with_its_yaml_rows() -> None:
    data = _yaml()
    for name, alg in REGISTRY.items():
        assert isinstance(alg, NcclAlgorithm)
        table = alg.table or name
        assert name in (*NCCL_ALGORITHMS, "P2P")
        assert table in data["base_latency_us"], name
        assert all(table in data["hw_latency_us"][hw] for hw in ("NVLINK", "PCI", "NET")), name
    # every algorithm NCCL_ALGO can name is modelled
    assert set(NCCL_ALGORITHMS) <= set(REGISTRY)
    with pytest.raises(KeyError, match="modelled: P2P, Ring"):
        algorithm("Ringg")


def test_a_missing_constant_is_named() -> None:
    data = _yaml()
    del data["tree_ll_bw_divisor"]
    with pytest.raises(BackendError, match="missing field 'tree_ll_bw_divisor'"):
        NcclConstants.from_mapping(data)


def test_constants_come_from_yaml_and_change_the_model() -> None:
    # the numbers that used to be written as code are read from nccl.yaml: changing one there changes the model
    data = _yaml()
    sim = Simulator.from_source("2node-h100-ib")
    plan = sim.nccl_plan
    from collsim.backends.nccl import tuner_times

    base = tuner_times(plan, NcclConstants.from_mapping(data), "allreduce", 4 * MiB)
    data["tree_ll_bw_divisor"] = 15.2  # 4x: below llMaxBw (39 GB/s, two nodes of Intel hosts), so it binds
    data["tree_ll128_fraction"]["several_nodes"] = [60, 128]
    slower = tuner_times(plan, NcclConstants.from_mapping(data), "allreduce", 4 * MiB)
    assert slower[("Tree", "LL")] > base[("Tree", "LL")]
    assert slower[("Tree", "LL128")] > base[("Tree", "LL128")]
    assert slower[("Ring", "Simple")] == base[("Ring", "Simple")]


def test_an_unknown_gpu_arch_is_an_error_not_amperes_tables() -> None:
    sim = Simulator.from_source("hgx-h100")
    gpu = sim.topology.gpus()[0]
    consts = sim.nccl_constants
    assert consts.archs == ("volta", "turing", "ampere", "hopper", "blackwell")
    bad = dataclasses.replace(gpu, spec={**dict(gpu.spec), "arch": "Blackwell"})
    topo = sim.topology
    topo.graph.nodes[gpu.name]["device"] = bad
    with pytest.raises(BackendError, match="unknown GPU arch 'Blackwell': NCCL's tuner tables know volta, turing"):
        plan_nccl(topo, sim.nccl_options, consts, sim.fabric)


def test_nvls_needs_the_nvswitch_multicast_its_preset_declares(tmp_path: Path) -> None:
    on = Simulator.from_source("hgx-h100")
    assert ("NVLS", "Simple") in enabled_pairs(on.nccl_plan, on.nccl_options, "allreduce")
    assert on.simulate_one("nccl", 1 << 30).algorithm == "NVLS"
    # the same node with an NVSwitch that cannot multicast: NCCL has no NVLS there
    node = yaml.safe_load((topologies_dir() / "nodes" / "hgx-h100.yaml").read_text())
    text = yaml.safe_dump(node).replace("multicast: true", "multicast: false")
    assert "multicast: false" in text
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes" / "hgx-h100-nomc.yaml").write_text(text)
    off = Simulator.from_source(
        {"name": "no-multicast", "cluster": {"node": str(tmp_path / "nodes" / "hgx-h100-nomc.yaml")},
         "backends": {"nccl": {}}}
    )  # fmt: skip
    assert off.nccl_plan.nvls_refusal is not None and "multicast" in off.nccl_plan.nvls_refusal
    assert all(a != "NVLS" for a, _ in enabled_pairs(off.nccl_plan, off.nccl_options, "allreduce"))
    assert off.simulate_one("nccl", 1 << 30).algorithm != "NVLS"
    forced = dataclasses.replace(off.nccl_options, algorithms=frozenset({"NVLS"}), env={"NCCL_ALGO": "NVLS"})
    with pytest.raises(BackendError, match="NCCL would refuse it here: NVLS needs an NVSwitch with multicast"):
        enabled_pairs(off.nccl_plan, forced, "allreduce")


@pytest.mark.parametrize(
    ("scenario", "collective", "algo", "why"),
    [
        ("hgx-h100", "allgather", "Tree", "NCCL runs allgather with PAT, Ring, NVLS or CollNetDirect only"),
        ("hgx-h100", "reduce", "NVLS", "NCCL runs reduce with Ring only"),
        ("hgx-h100", "allreduce", "NVLSTree", "NCCL disables NVLSTree on one node"),
        ("hgx-h100", "reduce_scatter", "PAT", "NCCL runs PAT with one GPU per node only"),
        ("2node-h100-ib", "allreduce", "NVLS", "NCCL runs NVLS across nodes only with CollNet (NVLS + SHARP"),
    ],
)
def test_an_algorithm_nccl_never_runs_there_says_nccls_rule(
    scenario: str, collective: str, algo: str, why: str
) -> None:
    """NCCL_ALGO naming only algorithms NCCL's tuner skips for the collective (tuning.cc) is NCCL's own "No
    algorithm/protocol available" (enqueue.cc), not something collsim lacks: the error says NCCL's rule."""
    sim = Simulator.from_source(scenario, [f"workload.collective={collective}", f"backends.nccl.env.NCCL_ALGO={algo}"])
    with pytest.raises(ScenarioError) as ei:
        sim.simulate_one("nccl", 1 << 20)
    assert f"NCCL_ALGO={algo}: NCCL has no algorithm left for {collective} here and stops" in str(ei.value)
    assert why in str(ei.value)


def test_a_deadline_stops_a_slower_pair_without_changing_a_faster_one() -> None:
    sim = Simulator.from_source("dgx-a100")
    args = (sim.topology, sim.nccl_options, sim.nccl_constants, 256 * MiB)
    kw = {"fabric": sim.fabric, "plan": sim.nccl_plan}
    simple = simulate_nccl(*args, choice=("Ring", "Simple"), **kw).time_s  # type: ignore[arg-type]
    ll = simulate_nccl(*args, choice=("Ring", "LL"), **kw).time_s  # type: ignore[arg-type]
    assert ll > 2 * simple
    raced = simulate_nccl(*args, choice=("Ring", "LL"), deadline=simple, **kw)  # type: ignore[arg-type]
    assert math.isinf(raced.time_s)
    again = simulate_nccl(*args, choice=("Ring", "Simple"), deadline=ll, **kw)  # type: ignore[arg-type]
    assert again.time_s == simple


def test_an_unknown_arch_in_a_gpu_preset_names_the_preset_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "topologies"
    shutil.copytree(topologies_dir(), root)
    gpus = root / "presets" / "gpus.yaml"
    gpus.write_text(gpus.read_text().replace("arch: hopper", "arch: Hopper"))
    monkeypatch.setenv("COLLSIM_TOPOLOGIES", str(root))
    # refused where the presets are read (the arch must be the row NCCL picks for the sm), before any plan
    with pytest.raises(ScenarioError) as err:
        Simulator.from_source("hgx-h100")
    text = str(err.value)
    assert str(gpus) in text and "h100-sxm5-80gb.arch" in text
    assert "arch 'Hopper' is not the row NCCL picks for sm 90 (hopper" in text


#: every node template with GPUs (cpu-host has none): a new template is checked without being listed here
GPU_TEMPLATES = [t for t in available_templates() if t != "cpu-host"]


@pytest.mark.parametrize("template", GPU_TEMPLATES)
def test_one_process_per_node_composes_with_every_gpu_template(template: str) -> None:
    # nccl-tests -g N (issue 12): one thread launching a host's N GPUs adds (N - 1) launch gaps, on any node template
    # (a host: the GPUs joined by PCIe, socket links or NVLink-C2C; a GB200 NVL72 rack holds 18 hosts of 4)
    scenario = {"name": "g", "cluster": {"node": template}, "backends": {"nccl": {}}}
    one = Simulator.from_source(scenario)
    devs = [d for d in one.topology.rank_devices() if d.node == 0]
    ppn = sum(1 for d in devs if _same_host(one, devs[0].name, d.name))
    assert len(devs) % ppn == 0 and (ppn == len(devs)) == (template != "gb200-nvl72")
    many = Simulator.from_source({**scenario, "workload": {"gpus_per_process": ppn}})
    gap = one.nccl_constants.group_launch_gap
    assert many.simulate_one("nccl", 8).time_s - one.simulate_one("nccl", 8).time_s == pytest.approx((ppn - 1) * gap)


def _same_host(sim: Simulator, a: str, b: str) -> bool:
    try:
        sim.topology.pcie_route(a, b)
    except TopologyError:
        return False
    return True


def test_a_process_drives_gpus_of_its_own_host_only() -> None:
    # a GB200 NVL72 rack is one node of 18 compute trays, each its own host of 4 GPUs joined to the others by NVLink
    # alone: -g 4 is one process a tray; -g 8 would have one process drive two hosts' GPUs, which no process can
    scenario = {"name": "g", "cluster": {"node": "gb200-nvl72"}, "backends": {"nccl": {}}}
    assert Simulator.from_source({**scenario, "workload": {"gpus_per_process": 4}}).simulate_one("nccl", 8).time_s > 0
    with pytest.raises(ScenarioError, match=r"workload.gpus_per_process: 8 GPUs a process, but ranks 0 and 4 "
                       r"\(n0/gpu0, n0/gpu4\) sit on separate hosts of node template 'gb200-nvl72'"):
        Simulator.from_source({**scenario, "workload": {"gpus_per_process": 8}}).simulate_one("nccl", 8)


@pytest.mark.parametrize("size", [8, 32 << 10, 4 << 20, 1 << 30])
def test_host_overhead_adds_the_same_time_at_every_size_without_changing_the_choice(size: int) -> None:
    # workload.host_overhead (a benchmark timing one torch.distributed call on an idle GPU): the kernel starts that
    # much later on every rank, so the time grows by exactly it; NCCL's own choice does not see it
    scenario = {"name": "h", "cluster": {"node": "hgx-b200"}, "backends": {"nccl": {}}}
    runs = {
        h: Simulator.from_source({**scenario, "workload": {"host_overhead": h}}).simulate_one("nccl", size)
        for h in ("none", "torch", "18us")
    }
    torch_s = Simulator.from_source(scenario).nccl_constants.torch_host_overhead
    assert torch_s == pytest.approx(25e-6)  # nccl.yaml: "some 20-30us" (stas00/ml-engineering), the midpoint
    assert runs["torch"].time_s - runs["none"].time_s == pytest.approx(torch_s, rel=1e-9)
    assert runs["18us"].time_s - runs["none"].time_s == pytest.approx(18e-6, rel=1e-9)
    assert {(o.algorithm, o.protocol, o.channels) for o in runs.values()} == {
        (runs["none"].algorithm, runs["none"].protocol, runs["none"].channels)
    }


def test_hgx_b200_runs_nvls_on_nvlink5() -> None:
    # issue 12: B200 (sm100, arch blackwell): 18 NVLink 5 links at NCCL's 40.1 GB/s each; 2 x 721.8 // 60 = 24 channels
    # (one channel ~60 GB/s, gpus.yaml); the NVSwitch says multicast: true, so NCCL's model picks NVLS at large sizes
    sim = Simulator.from_source({"name": "b200", "cluster": {"node": "hgx-b200"}, "backends": {"nccl": {}}})
    plan = sim.nccl_plan
    assert plan.arch == "blackwell" and plan.nvls_refusal is None
    assert plan.nvl_bw == pytest.approx(18 * 40.1e9) and plan.channels == 24
    out = sim.simulate_one("nccl", 1 << 30)
    # NVLS on Blackwell runs 24 CTAs in one node (nvls.cc NVLS_NCHANNELS_SM100_NVL, from 2.27), 32 before 2.27 and
    # across nodes (NVLS_NCHANNELS_SM100)
    assert (out.algorithm, out.protocol, out.channels) == ("NVLS", "Simple", 24)
    scen = {"name": "b200", "cluster": {"node": "hgx-b200"}, "backends": {"nccl": {"version": "2.26.2"}}}
    assert Simulator.from_source(scen).simulate_one("nccl", 1 << 30).channels == 32


def test_every_nccl_transport_has_its_tag() -> None:
    from collsim.backends.nccl.tags import TRANSPORT_TAG
    from collsim.vocab import NCCL_TRANSPORTS

    assert tuple(TRANSPORT_TAG) == NCCL_TRANSPORTS
