"""Loading shipped scenarios, dict sources, accessors and to_dict."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from collsim.scenario import (
    Scenario,
    ScenarioError,
    builtin_scenarios,
    load_scenario,
    scenarios_dir,
)

SHIPPED = [
    "16node-h100-ib",
    "2node-a100-ib",
    "2node-a100-tcp",
    "2node-h100-ib",
    "ddp-resnet50-dgx1-v100",
    "dgx-a100",
    "fsdp-gpt2xl-2node-h100",
    "hgx-h100",
    "loopback-gloo-cpu",
    "pcie-2gpu-nop2p",
]


def test_builtin_scenarios_listed() -> None:
    assert builtin_scenarios() == SHIPPED
    assert scenarios_dir() == Path(__file__).resolve().parents[2] / "scenarios"


GPU_SCENARIOS = [n for n in SHIPPED if n != "loopback-gloo-cpu"]


@pytest.mark.parametrize("name", GPU_SCENARIOS)
def test_shipped_scenario_loads(name: str) -> None:
    path = scenarios_dir() / f"{name}.yaml"
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=./scenario.schema.json"
    s = load_scenario(path)
    assert s.name == name
    assert s.source_file == str(path)
    assert s.base_dir == path.resolve().parent
    assert s.collectives() == ["allreduce"]
    assert s.dtype_size() == 4
    assert s.backend_names() == ["nccl", "gloo"]
    assert s.backends.gloo is not None and s.backends.gloo.algorithm == "ring"
    assert s.backends.gloo.device == "cuda" and s.backends.gloo.threads == 2


def test_loopback_scenario_is_gloo_on_cpu_with_two_ranks() -> None:
    s = load_scenario("loopback-gloo-cpu")
    assert s.backend_names() == ["gloo"]
    assert s.backends.gloo is not None and s.backends.gloo.device == "cpu"
    topo = s.build_topology()
    assert topo.gpus() == [] and len(topo.rank_devices()) == 2


@pytest.mark.parametrize("name", GPU_SCENARIOS)
def test_shipped_scenario_builds_topology(name: str, needs_topology: list[str]) -> None:
    s = load_scenario(name)
    topo = s.build_topology()
    expected_gpus = {
        "pcie-2gpu-nop2p": 2,
        "2node-a100-tcp": 16,
        "2node-a100-ib": 16,
        "2node-h100-ib": 16,
        "16node-h100-ib": 128,
        "ddp-resnet50-dgx1-v100": 16,
        "fsdp-gpt2xl-2node-h100": 16,
    }.get(name, 8)
    assert len(topo.gpus()) == expected_gpus


def test_hgx_h100_values() -> None:
    s = load_scenario("hgx-h100")
    sizes = s.sizes()
    assert len(sizes) == 31
    assert sizes[:3] == [8, 16, 32]
    assert sizes[-1] == 8 * 1024**3  # 8 GiB
    assert s.backends.nccl is not None
    assert s.backends.nccl.algorithms() is None  # NCCL chooses (NVLS for large sizes)
    assert s.backends.nccl.protocols() is None
    assert s.cluster.nodes == 1 and s.cluster.fabric is None
    assert s.topology_kwargs() == {"node": "hgx-h100", "nodes": 1, "fabric": None, "node_params": {}}


def test_dgx_a100_algorithm_unset() -> None:
    s = load_scenario("dgx-a100")
    assert s.backends.nccl is not None
    assert s.backends.nccl.env == {}
    assert s.backends.nccl.algorithms() is None


def test_pcie_scenario_params_and_sizes() -> None:
    s = load_scenario("pcie-2gpu-nop2p")
    assert s.cluster.node == "pcie-workstation"
    assert s.cluster.node_params == {"gpus": 2, "pcie_gen": 3, "pcie_switch": True, "gpu": "rtx-2080ti", "p2p": False}
    sizes = s.sizes()
    assert (sizes[0], sizes[-1], len(sizes)) == (8, 1024**3, 28)  # 8 B .. 1 GiB by x2, as the measurement


def test_two_node_fabrics() -> None:
    ib = load_scenario("2node-h100-ib")
    assert ib.topology_kwargs()["fabric"] == {
        "topology": "rail_optimized",
        "transport": "rdma",
        "gpudirect": True,
        "oversubscription": 1.0,
        "in_network_reduction": False,
    }
    tcp = load_scenario("2node-a100-tcp")
    assert tcp.cluster.nodes == 2
    assert tcp.topology_kwargs()["fabric"] == {
        "topology": "single_switch",
        "transport": "tcp",
        "nic": "eth-100g",
        "nics_per_node": 1,
        "gpudirect": False,
        "oversubscription": 1.0,
        "in_network_reduction": False,
    }


def test_dict_source(
    minimal: dict[str, Any], write: Callable[[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = write("x.yaml", "").parent
    monkeypatch.chdir(folder)
    s = load_scenario(minimal)
    assert isinstance(s, Scenario)
    assert s.source_file == "<dict>"
    assert s.base_dir == folder
    assert s.node_template() == folder / "node.yaml"
    assert s.sizes()[0] == 8 and s.sizes()[-1] == 8 * 1024**3  # default sweep 8B:8GiB:x2
    assert s.collectives() == ["allreduce"]
    assert s.backend_names() == []
    assert minimal == {"name": "t", "cluster": {"node": "./node.yaml"}}  # not modified


def test_dict_source_with_a_base_dir(minimal: dict[str, Any], write: Callable[[str, str], Path]) -> None:
    """``base_dir`` places a dict as if it were a file there: its relative paths resolve in that folder."""
    folder = write("x.yaml", "").parent
    s = load_scenario(minimal, base_dir=folder)
    assert s.base_dir == folder.resolve() and s.node_template() == folder.resolve() / "node.yaml"


def test_dict_source_builtin_template(needs_topology: list[str]) -> None:
    s = load_scenario({"name": "t", "cluster": {"node": "dgx-a100"}})
    assert s.node_template() == "dgx-a100"


def test_workload_normalisation(minimal: dict[str, Any], write: Callable[[str, str], Path]) -> None:
    folder = write("x.yaml", "").parent
    data = dict(
        minimal,
        workload={
            "collective": ["all_reduce", "AllGather", "reduce-scatter", "allreduce"],
            "dtype": "half",
            "op": "MAX",
            "sizes": [1024, "1KiB", "2MB"],
        },
    )
    path = write("s.yaml", json.dumps(data))
    s = load_scenario(path)
    assert s.base_dir == folder
    assert s.collectives() == ["allreduce", "allgather", "reduce_scatter"]
    assert s.workload.dtype == "float16" and s.dtype_size() == 2
    assert s.workload.op == "max"
    assert s.sizes() == [1024, 1024, 2_000_000]


def test_single_size_int_and_string(minimal: dict[str, Any], write: Callable[[str, str], Path]) -> None:
    folder = write("x.yaml", "").parent
    for sizes, expected in ((4096, [4096]), ("1MiB", [1048576]), ("1KiB,4KiB", [1024, 4096])):
        s = load_scenario(dict(minimal, cluster={"node": str(folder / "node.yaml")}, workload={"sizes": sizes}))
        assert s.sizes() == expected


def test_to_dict_is_json_and_round_trips(write: Callable[[str, str], Path]) -> None:
    path = write(
        "s.yaml",
        "name: t\ncluster: {node: node.yaml, nodes: 2, fabric: {topology: fat_tree, nic_speed: 100Gb/s}}\n"
        "workload: {sizes: '1KiB:4KiB:x2', collective: broadcast}\n"
        "backends: {nccl: {env: {NCCL_PROTO: LL128, NCCL_MAX_NCHANNELS: 4}}}\n",
    )
    s = load_scenario(path)
    d = s.to_dict()
    json.dumps(d)  # serialisable
    assert d["workload"]["sizes"] == [1024, 2048, 4096]
    assert d["workload"]["collective"] == ["broadcast"]
    assert d["cluster"]["node"] == str(path.parent.resolve() / "node.yaml")
    assert d["cluster"]["fabric"]["nic_speed"] == "100Gb/s"
    assert d["backends"]["nccl"]["env"] == {"NCCL_PROTO": "LL128", "NCCL_MAX_NCHANNELS": "4"}
    again = load_scenario(d)
    assert again.to_dict() == d


def test_to_dict_reads_the_same_from_any_folder(
    write: Callable[[str, str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's workers load the scenario from its to_dict() data in their own folder: preset_files, a model file
    and the tuner's CSV named relative to the scenario came out relative and were looked up there (a point failed
    "presets file or folder not found", or read another folder's file of the same name: silently other numbers)."""
    write("p1.yaml", "gpus: {}\n")
    write("m.yaml", "x: 1\n")
    path = write(
        "s.yaml",
        "name: t\ncluster: {node: node.yaml}\npreset_files: [p1.yaml]\ntraining: {model: m.yaml}\n"
        "backends: {nccl: {env: {NCCL_TUNER_PLUGIN: libnccl-tuner-example.so, NCCL_TUNER_CONFIG_FILE: t.conf}}}\n",
    )
    d = load_scenario(path).to_dict()
    folder = path.parent.resolve()
    assert d["preset_files"] == [str(folder / "p1.yaml")]
    assert d["training"]["model"] == str(folder / "m.yaml")
    assert d["backends"]["nccl"]["env"]["NCCL_TUNER_CONFIG_FILE"] == str(folder / "t.conf")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    again = load_scenario(d)
    assert again.preset_file_paths() == [folder / "p1.yaml"] and again.to_dict() == d


def test_calibration_path_resolved(write: Callable[[str, str], Path]) -> None:
    write("prof.yaml", "a: 1\n")
    path = write("s.yaml", "name: t\ncluster: {node: node.yaml}\ncalibration: prof.yaml\n")
    s = load_scenario(path)
    assert s.calibration_path() == path.parent.resolve() / "prof.yaml"


def test_scenarios_dir_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "node.yaml").write_text("x: 1\n", encoding="utf-8")
    (tmp_path / "mine.yaml").write_text("name: mine\ncluster: {node: ./node.yaml}\n", encoding="utf-8")
    monkeypatch.setenv("COLLSIM_SCENARIOS", str(tmp_path))
    assert scenarios_dir() == tmp_path
    assert builtin_scenarios() == ["mine", "node"]
    s = load_scenario("mine")
    assert s.name == "mine" and s.source_file == str(tmp_path / "mine.yaml")


def test_unknown_builtin_lists_known(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario("no-such-scenario")
    assert str(info.value).startswith("no-such-scenario: scenario file not found (built-in scenarios: 16node-h100-ib")
    assert info.value.file == "no-such-scenario" and info.value.field is None
