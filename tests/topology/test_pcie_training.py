"""A PCIe link runs at the highest generation both of its ends support (PCIe link training): the CPU presets'
``pcie_gen``, the GPU presets' and a PCIe switch's ``gen`` cap a template's ``pcie<gen>`` link, with a warning."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from collsim.cli import main
from collsim.topology import load_presets, load_topology
from collsim.topology.errors import TopologyWarning

RAW = {g: float(load_presets().links[f"pcie{g}"]["bandwidth"]) for g in (3, 4, 5)}  # bytes/s, one direction


def _load(name: str, **params: object) -> tuple[object, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        topo = load_topology(name, node_params=params or None)
    return topo, [str(w.message) for w in caught if issubclass(w.category, TopologyWarning)]


def test_a_cpu_with_older_root_ports_slows_its_links_and_says_so() -> None:
    # pcie-workstation's default CPU is a Broadwell Xeon (PCIe 3.0): a Gen5 box's switch uplinks train at Gen3
    topo, said = _load("pcie-workstation", gpus=8, gpu="h100-pcie-80gb", pcie_gen=5, sockets=2)
    assert topo.link("n0/pcie0", "n0/cpu0").raw_bandwidth == RAW[3]
    assert topo.link("n0/gpu0", "n0/pcie0").raw_bandwidth == RAW[5]  # GPU and switch both Gen5
    assert said == [
        "topologies/nodes/pcie-workstation.yaml: the PCIe links of pcie0-cpu0, pcie1-cpu1 run at Gen3, not Gen5 "
        "(pcie5): the cpu preset xeon-e5-2680v4 supports PCIe Gen3, and a link trains to the highest generation both "
        "ends support"
    ]
    # with a Gen5 host nothing is slowed and nothing is said
    topo, said = _load("pcie-workstation", gpus=8, gpu="h100-pcie-80gb", pcie_gen=5, sockets=2, cpu="xeon-8480")
    assert topo.link("n0/pcie0", "n0/cpu0").raw_bandwidth == RAW[5] and said == []


def test_a_gpu_of_an_older_generation_slows_its_own_links() -> None:
    topo, said = _load("pcie-workstation", gpus=2, gpu="rtx-2080ti", pcie_gen=4, cpu="epyc-7742")
    assert topo.link("n0/gpu0", "n0/pcie0").raw_bandwidth == RAW[3]  # the 2080 Ti is a Gen3 card
    assert topo.link("n0/pcie0", "n0/cpu0").raw_bandwidth == RAW[4]  # the switch and the EPYC are Gen4
    assert len(said) == 1 and "gpu0-pcie0, gpu1-pcie0 run at Gen3, not Gen4" in said[0] and "rtx-2080ti" in said[0]


def test_links_with_their_own_bandwidth_and_consistent_templates_are_left_alone() -> None:
    p5, said = _load("aws-p5")
    assert p5.link("n0/nic0", "n0/pcie0").raw_bandwidth == pytest.approx(63.0153846154e9) and said == []
    # AWS p4de: its switches' uplinks are Gen3 in the template itself (Cascade Lake), so no warning
    p4de, said = _load("aws-p4de")
    assert p4de.link("n0/pcie0", "n0/cpu0").raw_bandwidth == RAW[3] and said == []
    assert p4de.link("n0/gpu0", "n0/pcie0").raw_bandwidth == RAW[4]
    for name in ("hgx-h100", "hgx-b200", "dgx-a100", "dgx1-v100", "rtx5090-4gpu", "l40s-8gpu", "pcie-workstation"):
        assert _load(name)[1] == [], name


def test_the_cli_warns_once_naming_the_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "box.yaml"
    path.write_text(
        "name: box\ncluster:\n  node: pcie-workstation\n  node_params: {gpus: 4, gpu: rtx-4090, pcie_gen: 4}\n"
        "workload: {collective: allreduce, sizes: 1MiB}\nbackends: {nccl: {enabled: true}, gloo: {enabled: false}}\n"
    )
    assert main(["run", str(path), "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"collsim: warning: {path}: cluster.node_params: ")
    assert "run at Gen3, not Gen4 (pcie4): the cpu preset xeon-e5-2680v4 supports PCIe Gen3" in err[0]


def test_a_slowed_link_keeps_the_entrys_own_efficiency_and_latency() -> None:
    from collsim.topology import topology_from_template

    template = {
        "name": "t",
        "devices": [{"name": "gpu", "count": 1, "kind": "gpu", "preset": "rtx-2080ti"},
                    {"name": "cpu", "count": 1, "kind": "cpu", "preset": "xeon-8480"}],
        "links": [{"a": "gpu0", "b": "cpu0", "preset": "pcie5", "efficiency": 0.5, "latency": "2us"}],
    }  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        link = topology_from_template(template).link("n0/gpu0", "n0/cpu0")
    assert (link.preset, link.raw_bandwidth, link.efficiency, link.latency) == ("pcie3", RAW[3], 0.5, 2e-6)
    assert [str(w.message) for w in caught if issubclass(w.category, TopologyWarning)] == [
        "the PCIe links of gpu0-cpu0 run at Gen3, not Gen5 (pcie5): the gpu preset rtx-2080ti supports PCIe Gen3, "
        "and a link trains to the highest generation both ends support"
    ]


def test_a_gpu_of_fewer_lanes_narrows_its_own_links(tmp_path: Path) -> None:
    """``pcie_lanes`` below 16 (a card on a x1 riser, an x8 slot) scales its links by lanes / 16, after the
    generation's training: NCCL's PCI bandwidth is width x rate (topo.cc ncclTopoGetPciLink)."""
    from collsim.topology import topology_from_template
    from collsim.topology.presets import merge_presets, read_preset_files, read_yaml, topologies_dir

    template = topologies_dir() / "nodes" / "pcie-workstation.yaml"
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "gpus:\n  x1-card: {base: rtx-4090, pcie_lanes: 1, source: test}\n  x8-gen3: {base: rtx-2080ti, pcie_lanes: 8,"
        " source: test}\n"
    )
    presets = merge_presets(load_presets(), read_preset_files(path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        topo, narrow = (
            topology_from_template(read_yaml(template), file=template, presets=presets,
                                   node_params={"gpus": 2, "gpu": gpu, "pcie_gen": 4, "cpu": "epyc-7742"})
            for gpu in ("x1-card", "x8-gen3")
        )  # fmt: skip
    assert topo.link("n0/gpu0", "n0/pcie0").raw_bandwidth == pytest.approx(RAW[4] / 16)
    assert topo.link("n0/pcie0", "n0/cpu0").raw_bandwidth == RAW[4]  # the switch's uplink keeps its width
    assert narrow.link("n0/gpu1", "n0/pcie0").raw_bandwidth == pytest.approx(RAW[3] / 2)  # Gen3 (the 2080 Ti) x8
    said = [str(w.message) for w in caught if issubclass(w.category, TopologyWarning)]
    assert said[0].endswith(
        "the PCIe links of gpu0-pcie0, gpu1-pcie0 run at Gen4 x1, not x16: the gpu preset x1-card supports x1, and a "
        "link trains to the highest width both ends support"
    )
    assert any("run at Gen3 x8, not x16" in s for s in said) and any("run at Gen3, not Gen4" in s for s in said)
