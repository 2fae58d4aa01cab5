"""`collsim import`: node templates from NCCL's topology dump and from `nvidia-smi topo -m`
(collsim/topology/importer.py, collsim/cli.py `import`).

Acceptance: the dumps in tests/topology/data/ (a DGX A100 and an HGX H100, written from the documented formats; see
the README there) import to templates whose path matrix (Topology.path_type over GPU x GPU and GPU x NIC, what
`collsim topo` prints) is the shipped template's, and whose simulated times are the shipped template's. Every shipped
template written out as NCCL XML and as an nvidia-smi matrix imports back to its own path matrix; random PCIe trees
too (hypothesis). Malformed inputs are one-line errors with exit status 2 naming the file and the element, line or
option.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsim.cli import main
from collsim.topology import (
    Topology,
    TopologyError,
    available_templates,
    format_topo_matrix,
    load_presets,
    load_topology,
    topology_from_template,
)
from collsim.topology.errors import TopologyWarning
from collsim.topology.importer import (
    format_template,
    template_from_nccl_xml,
    template_from_nvidia_smi,
    write_template,
)
from collsim.topology.presets import PresetSource, merge_presets

DATA = Path(__file__).resolve().parent / "data"
REPO = Path(__file__).resolve().parents[2]
#: shipped template -> (NCCL XML, nvidia-smi text, the presets nvidia-smi needs: gpu, nic, cpu)
CASES = {
    "dgx-a100": (
        "dgx-a100.nccl-topo.xml",
        "dgx-a100.nvidia-smi-topo.txt",
        ("a100-sxm4-80gb", "connectx-6-hdr", "epyc-7742"),
    ),
    "hgx-h100": (
        "hgx-h100.nccl-topo.xml",
        "hgx-h100.nvidia-smi-topo.txt",
        ("h100-sxm5-80gb", "connectx-7-ndr", "xeon-8480"),
    ),
}


def _import_xml(shipped: str, **kw: Any) -> dict[str, Any]:
    path = DATA / CASES[shipped][0]
    return template_from_nccl_xml(path.read_text(), file=path, **kw)


def _import_smi(shipped: str, **kw: Any) -> dict[str, Any]:
    path = DATA / CASES[shipped][1]
    gpu, nic, cpu = CASES[shipped][2]
    return template_from_nvidia_smi(path.read_text(), file=path, **{"gpu": gpu, "nic": nic, "cpu": cpu, **kw})


def _matrix(topo: Topology, node: int = 0) -> dict[tuple[str, str], str]:
    """Path types GPU x GPU and GPU x NIC by local names (what `collsim topo` prints)."""
    gpus, nics = topo.devices("gpu", node), topo.nics(node)
    return {(a.local_name, b.local_name): topo.path_type(a.name, b.name) for a in gpus for b in [*gpus, *nics]}


def _classes(topo: Topology) -> dict[tuple[str, str], str]:
    """NCCL path classes GPU x GPU and GPU x NIC."""
    gpus, nics = topo.devices("gpu", 0), topo.nics(0)
    return {(a.local_name, b.local_name): topo.path_class(a.name, b.name) for a in gpus for b in [*gpus, *nics]}


# ------------------------------------------------------------------------------------------------ acceptance
@pytest.mark.parametrize("shipped", sorted(CASES))
@pytest.mark.parametrize("reader", ["nccl-xml", "nvidia-smi"])
def test_import_gives_the_shipped_path_matrix(shipped: str, reader: str) -> None:
    template = _import_xml(shipped) if reader == "nccl-xml" else _import_smi(shipped)
    imported = topology_from_template(template)
    ref = load_topology(shipped)
    assert _matrix(imported) == _matrix(ref)
    assert _classes(imported) == _classes(ref)
    # the whole `collsim topo` view but its title line: matrix, CPU affinity, NIC legend and the links by kind
    assert format_topo_matrix(imported).split("\n", 1)[1] == format_topo_matrix(ref).split("\n", 1)[1]


@pytest.mark.parametrize("shipped", sorted(CASES))
def test_both_readers_agree_with_each_other(shipped: str) -> None:
    xml_t, smi_t = _import_xml(shipped), _import_smi(shipped)

    def strip(entries: list[dict[str, Any]]) -> list[str]:
        return sorted(repr({k: v for k, v in e.items() if k != "notes"}) for e in entries)

    assert strip(xml_t["devices"]) == strip(smi_t["devices"])
    assert strip(xml_t["links"]) == strip(smi_t["links"])


def test_inferred_presets_and_their_sources() -> None:
    t = _import_xml("dgx-a100")
    dev = {d["name"]: d for d in t["devices"]}
    assert dev["gpu0"]["preset"] == "a100-sxm4-80gb" and "10de:20b2" in dev["gpu0"]["notes"]
    assert dev["nic3"]["preset"] == "connectx-6-hdr" and "200000 Mb/s" in dev["nic3"]["notes"]
    assert dev["cpu1"]["preset"] == "epyc-7742" and "AMD_BW" in dev["cpu1"]["notes"]
    assert dev["nvswitch"]["spec"] == {"physical_switches": 6, "generation": 2, "multicast": False}
    # the two-level Broadcom PEX switches are flattened as NCCL does
    assert "ncclTopoFlattenBcmSwitches" in t["notes"]
    assert sum(1 for d in t["devices"] if d["kind"] == "pcie_switch") == 4
    h = _import_xml("hgx-h100")
    hdev = {d["name"]: d for d in h["devices"]}
    assert hdev["cpu0"]["preset"] == "xeon-8480" and hdev["nic0"]["preset"] == "connectx-7-ndr"
    assert hdev["nvswitch"]["spec"] == {"physical_switches": 4, "generation": 3, "multicast": True}
    nvl = [lk for lk in h["links"] if lk["b"] == "nvswitch"]
    assert nvl[0]["count"] == 18 and "summed: 18" in nvl[0]["notes"]  # 5 + 4 + 4 + 5 NVLinks over 4 NVSwitches
    pcie = [lk for lk in h["links"] if lk["preset"] == "pcie5"]
    assert pcie and all("16 x 240 / 80 = 48 GB/s" in lk["notes"] for lk in pcie)


def test_an_amd_host_with_gen5_links_gets_a_gen5_amd_preset() -> None:
    # NCCL's CPU class for AMD has no generation; the dump's Gen5 links say the root ports are Zen 4 or later, so the
    # EPYC 9654 stands in (the EPYC 7742 is Gen4, and its ports would train the links down: test_pcie_training.py)
    path = DATA / CASES["hgx-h100"][0]
    text = path.read_text().replace('vendor="GenuineIntel" familyid="6" modelid="143"',
                                    'vendor="AuthenticAMD" familyid="25" modelid="17"')  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = template_from_nccl_xml(text, file=path)
        topo = topology_from_template(t)
    assert {d["preset"] for d in t["devices"] if d["kind"] == "cpu"} == {"epyc-9654"}
    assert topo.link("n0/pcie0", "n0/cpu0").preset == "pcie5"
    assert not [w for w in caught if issubclass(w.category, TopologyWarning)]
    assert {d["preset"] for d in _import_xml("dgx-a100")["devices"] if d["kind"] == "cpu"} == {"epyc-7742"}  # Gen4


def test_without_flattening_nccl_would_see_pxb() -> None:
    """The same dump with non-Broadcom switch ids keeps both levels: the GPU and the NIC of the other half of the
    switch are PXB apart (two switches), as nvidia-smi shows on a real DGX A100."""
    text = (DATA / CASES["dgx-a100"][0]).read_text().replace('vendor="0x1000"', 'vendor="0x10b5"')
    topo = topology_from_template(template_from_nccl_xml(text, file="x.xml"))
    assert topo.path_type("n0/gpu0", "n0/nic0") == "PIX"
    assert topo.path_type("n0/gpu0", "n0/nic1") == "PXB"
    assert topo.path_type("n0/gpu0", "n0/nic2") == "PHB"


@pytest.mark.parametrize("shipped", sorted(CASES))
def test_written_template_reads_back(shipped: str, tmp_path: Path) -> None:
    template = _import_xml(shipped)
    out = tmp_path / "node.yaml"
    text = write_template(template, out)
    assert out.read_text() == text == format_template(template)
    assert not list(tmp_path.glob(".*.tmp")), "the temporary file is gone"
    data = yaml.safe_load(text)
    assert data["devices"] == [{k: v for k, v in d.items() if k != "notes"} for d in template["devices"]]
    assert data["links"] == [{k: v for k, v in lk.items() if k != "notes"} for lk in template["links"]]
    # every entry has the comment with its source; every line fits
    assert text.count("\n  # ") >= len(template["devices"]) + len(template["links"])
    assert max(len(line) for line in text.splitlines() if line.lstrip().startswith("#")) <= 120
    assert _matrix(load_topology(out)) == _matrix(load_topology(shipped))


# ------------------------------------------------------------------------------------------------ end to end
def _run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict[str, Any]]:
    rc = main(["run", *argv, "--format", "json", "--quiet", "--jobs", "1", "--sizes", "1KiB,1MiB"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return list(json.loads(out)["results"])


def _times(records: list[dict[str, Any]]) -> list[tuple[str, int, str, str, float]]:
    return [(r["backend"], r["size_bytes"], r["algorithm"], r["protocol"], r["time_us"]) for r in records]


@pytest.mark.parametrize(
    ("shipped", "reader", "scenario"),
    [
        ("dgx-a100", "nccl-xml", "2node-a100-ib"),
        ("dgx-a100", "nvidia-smi", "dgx-a100"),
        ("hgx-h100", "nccl-xml", "hgx-h100"),
        ("hgx-h100", "nvidia-smi", "hgx-h100"),
    ],
)
def test_imported_template_runs_with_the_shipped_times(
    shipped: str, reader: str, scenario: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The GPU, NIC and CPU presets and every link are the shipped template's, so the times are equal, not close."""
    src, smi, (gpu, nic, cpu) = CASES[shipped]
    out = tmp_path / "imported.yaml"
    args = ["import", reader, str(DATA / (src if reader == "nccl-xml" else smi)), "-o", str(out)]
    if reader == "nvidia-smi":
        args += ["--gpu", gpu, "--nic", nic, "--cpu", cpu]
    assert main(args) == 0
    printed, err = capsys.readouterr()
    assert err == ""
    assert "cluster: {node: " in printed and "GPU0" in printed
    ref = _run_json(capsys, scenario)
    got = _run_json(capsys, scenario, "--set", f"cluster.node={out}")
    assert _times(got) == _times(ref)
    assert {r["backend"] for r in ref} == {"nccl", "gloo"}


def test_scenario_names_the_template_by_a_relative_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The hint's form: `cluster: {node: ./node.yaml}` resolved against the scenario's folder."""
    assert main(["import", "nccl-xml", str(DATA / CASES["hgx-h100"][0]), "-o", str(tmp_path / "node.yaml")]) == 0
    capsys.readouterr()
    scen = yaml.safe_load((REPO / "scenarios" / "hgx-h100.yaml").read_text())
    scen["cluster"]["node"] = "./node.yaml"
    scen["backends"]["gloo"]["enabled"] = False
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(scen))
    assert main(["topo", str(tmp_path / "mine.yaml")]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines()[0].startswith("hgx-h100.nccl-topo: node 0 of 1")
    assert _times(_run_json(capsys, str(tmp_path / "mine.yaml"))) == _times(
        _run_json(capsys, "hgx-h100", "--backend", "nccl")
    )


def test_cli_without_output_prints_the_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "nccl-xml", str(DATA / CASES["dgx-a100"][0]), "--name", "my-dgx"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("# collsim node template")
    data = yaml.safe_load(out)
    assert data["name"] == "my-dgx"
    assert _matrix(topology_from_template(data)) == _matrix(load_topology("dgx-a100"))


def test_cli_user_presets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--presets: a user's GPU preset (with its own pci_device_ids) is found by the XML's PCI id."""
    gpu = dict(yaml.safe_load((REPO / "topologies" / "presets" / "gpus.yaml").read_text())["a100-sxm4-80gb"])
    gpu["pci_device_ids"] = ["10de:20f3"]  # an A800-SXM4-80GB (pci.ids), for the test
    gpu["model"] = "lab A800"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"gpus": {"lab-a800": gpu}}))
    text = (DATA / CASES["dgx-a100"][0]).read_text().replace('device="0x20b2"', 'device="0x20f3"')
    (tmp_path / "t.xml").write_text(text)
    out = tmp_path / "n.yaml"
    assert (
        main(["import", "nccl-xml", str(tmp_path / "t.xml"), "-o", str(out), "--presets", str(tmp_path / "p.yaml")])
        == 0
    )
    printed, _ = capsys.readouterr()
    assert "preset_files" in printed
    assert {d.get("preset") for d in yaml.safe_load(out.read_text())["devices"] if d["kind"] == "gpu"} == {"lab-a800"}


# ------------------------------------------------------------------------------------------------ details of reading
def _dgx_xml() -> str:
    return (DATA / CASES["dgx-a100"][0]).read_text()


def test_pcie_width_and_generation_follow_nccls_formula() -> None:
    """A NIC at Gen4 x8, a GPU at Gen5 x16 and one at an empty speed (NCCL's Gen3 fallback): bandwidth x efficiency is
    NCCL's width x rate / 80 GB/s (topo.cc)."""
    text = _dgx_xml()
    text = text.replace(
        'busid="0000:05:00.0" class="0x020700" vendor="0x15b3" device="0x101b" subsystem_vendor="0x15b3" '
        'subsystem_device="0x0007" link_speed="16.0 GT/s PCIe" link_width="16"',
        'busid="0000:05:00.0" class="0x020700" vendor="0x15b3" device="0x101b" subsystem_vendor="0x15b3" '
        'subsystem_device="0x0007" link_speed="16.0 GT/s PCIe" link_width="8"',
    )
    text = re.sub(r'(busid="0000:07:00.0" [^>]*)link_speed="16.0 GT/s PCIe"', r'\1link_speed="64.0 GT/s PCIe"', text)
    text = re.sub(r'(busid="0000:0e:00.0" [^>]*)link_speed="16.0 GT/s PCIe"', r'\1link_speed=""', text)
    t = template_from_nccl_xml(text, file="w.xml")
    topo = topology_from_template(t)
    assert topo.link("n0/nic0", "n0/pcie0").bandwidth == pytest.approx(8 * 120 / 80 * 1e9)  # 12 GB/s
    assert topo.link("n0/gpu0", "n0/pcie0").bandwidth == pytest.approx(16 * 480 / 80 * 1e9)  # Gen6: 96 GB/s
    assert topo.link("n0/gpu1", "n0/pcie0").bandwidth == pytest.approx(16 * 60 / 80 * 1e9)  # fallback Gen3: 12 GB/s
    assert topo.link("n0/gpu2", "n0/pcie1").bandwidth == pytest.approx(24e9)
    assert "NCCL's fallback" in t["notes"]


def test_nic_speed_from_the_file_overrides_a_given_preset() -> None:
    t = template_from_nccl_xml(_dgx_xml(), file="n.xml", nic="connectx-7-ndr")
    nic0 = next(d for d in t["devices"] if d["name"] == "nic0")
    assert nic0["preset"] == "connectx-7-ndr" and nic0["spec"] == {"speed": "200Gb/s", "ib_name": "mlx5_0"}
    assert topology_from_template(t).device("n0/nic0").spec["speed"] == 25e9  # 200e9 bits/s / 8


@pytest.mark.parametrize("source", ["nccl-xml", "nvidia-smi"])
def test_an_imported_nic_keeps_its_verbs_name(source: str) -> None:
    """NCCL's <net name=...> and nvidia-smi's NIC legend name the device NCCL_IB_HCA matches: the import keeps it,
    so an imported HGX H100 (DGX H100 names, its User Guide's Table 6) lists the names of the shipped template."""
    from collsim.topology import ib_device_name

    text = (DATA / f"hgx-h100.{'nccl-topo.xml' if source == 'nccl-xml' else 'nvidia-smi-topo.txt'}").read_text()
    if source == "nccl-xml":
        t = template_from_nccl_xml(text, file="h.xml")
    else:
        t = template_from_nvidia_smi(text, file="h.txt", gpu="h100-sxm5-80gb", nic="connectx-7-ndr")
    imported = [ib_device_name(d) for d in topology_from_template(t).nics(0)]
    assert imported == [ib_device_name(d) for d in load_topology("hgx-h100").nics(0)]
    assert imported[1] == "mlx5_3"


def test_missing_speed_and_no_gdr_give_the_10g_ethernet_preset() -> None:
    text = re.sub(r' speed="200000"', "", _dgx_xml()).replace('gdr="1"/>', 'gdr="0"/>')
    t = template_from_nccl_xml(text, file="e.xml")
    nic0 = next(d for d in t["devices"] if d["name"] == "nic0")
    assert nic0["preset"] == "eth-10g" and "NCCL's 10000" in nic0["notes"]


def _mesh_xml(n: int, links: int, sm: int = 80, device: str = "0x20b2") -> str:
    """n GPUs on one switch, every pair joined by `links` direct NVLinks (an HGX 4-GPU board without NVSwitch)."""
    pcis = []
    for i in range(n):
        nv = "".join(
            f'<nvlink target="0000:{0x10 + j:02x}:00.0" count="{links}" tclass="0x030200"/>' for j in range(n) if j != i
        )
        pcis.append(
            f'<pci busid="0000:{0x10 + i:02x}:00.0" class="0x030200" vendor="0x10de" device="{device}" '
            f'link_speed="16.0 GT/s PCIe" link_width="16"><gpu dev="{i}" sm="{sm}" rank="{i}" gdr="1">{nv}</gpu></pci>'
        )
    return (
        '<system version="1"><cpu numaid="0" arch="x86_64" vendor="AuthenticAMD" familyid="23" modelid="49">'
        '<pci busid="0000:01:00.0" class="0x060400" vendor="0x10b5" device="0x8747" link_speed="16.0 GT/s PCIe" '
        f'link_width="16">{"".join(pcis)}</pci></cpu></system>'
    )


def test_direct_nvlinks_between_gpus() -> None:
    t = template_from_nccl_xml(_mesh_xml(4, 4), file="mesh.xml")
    topo = topology_from_template(t)
    assert not topo.devices("nvswitch")
    assert {topo.path_type(f"n0/gpu{a}", f"n0/gpu{b}") for a in range(4) for b in range(4) if a != b} == {"NV4"}


def test_smi_direct_mesh_and_nvswitch_are_told_apart() -> None:
    """NV4 between 4 A100s (12 NVLinks: 3 peers x 4) is direct wiring; NV12 between 8 is an NVSwitch."""
    rows = [f"GPU{i}\t" + "\t".join(" X " if i == j else "NV4" for j in range(4)) + "\t0-7\t0\tN/A" for i in range(4)]
    text = "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n" + "\n".join(rows) + "\n"
    topo = topology_from_template(template_from_nvidia_smi(text, file="m.txt", gpu="a100-sxm4-80gb"))
    assert not topo.devices("nvswitch") and topo.link("n0/gpu0", "n0/gpu3").count == 4
    assert topology_from_template(_import_smi("dgx-a100")).devices("nvswitch")


def test_a_dump_nccl_fused_over_two_hosts_repeats_their_bus_ids_and_devs() -> None:
    """A multi-node NVLink domain's dump (MNNVL: topo.cc ncclTopoFuseXml) holds every host's CPUs, each tray's GPUs
    and NICs at the same bus ids and CUDA/net devs; it was 'busid ... given twice'. Each host's own are unique;
    GPUs and NICs are numbered host by host, their NVLink targets read within their host."""
    text = (DATA / CASES["hgx-h100"][0]).read_text()
    head, _, rest = text.partition("<cpu ")
    body, _, tail = rest.rpartition("</system>")
    other = ("<cpu " + body).replace('host_hash="0x3f9d6e1a27c4b580"', 'host_hash="0x1111"')
    fused = head + "<cpu " + body + other + "</system>" + tail
    one, two = _import_xml("hgx-h100"), template_from_nccl_xml(fused, file="fused.xml")
    kinds = [(d["kind"]) for d in two["devices"]]
    assert kinds.count("gpu") == 2 * [d["kind"] for d in one["devices"]].count("gpu") == 16
    assert kinds.count("nic") == 2 * [d["kind"] for d in one["devices"]].count("nic")
    topo = topology_from_template(two)
    assert topo.path_type("n0/gpu0", "n0/gpu7") != "NET" and topo.path_type("n0/gpu0", "n0/nic8") == "NET"
    dup = fused.replace('host_hash="0x1111"', 'host_hash="0x3f9d6e1a27c4b580"', 1)
    with pytest.raises(TopologyError, match="given twice"):  # one host's bus ids twice: still an error
        template_from_nccl_xml(dup, file="dup.xml")


def test_smi_text_captured_from_a_terminal_keeps_its_escapes() -> None:
    """nvidia-smi underlines the header on a terminal; a kubectl exec -t or tmux log keeps ESC[4m ... ESC[0m, which
    was 'no nvidia-smi topo -m matrix'. The escapes are no cells: the same template as without them."""
    path = DATA / CASES["hgx-h100"][1]
    gpu, nic, cpu = CASES["hgx-h100"][2]
    lines = path.read_text().splitlines()
    head = next(i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"])
    lines[head] = "\x1b[4m" + lines[head] + "\x1b[0m"
    lines[head + 1] = "\x1b[1;32m" + lines[head + 1]
    shown = template_from_nvidia_smi("\n".join(lines), file=path, gpu=gpu, nic=nic, cpu=cpu)
    assert shown == _import_smi("hgx-h100")


def test_old_smi_format_without_nic_legend() -> None:
    """Drivers before the NIC legend name NIC columns by device (mlx5_0) and print SOC for SYS."""
    text = (
        "\tGPU0\tGPU1\tmlx5_0\tmlx5_1\tCPU Affinity\n"
        "GPU0\t X \tSOC\tPIX\tSOC\t0-7\n"
        "GPU1\tSOC\t X \tSOC\tPIX\t8-15\n"
        "mlx5_0\tPIX\tSOC\t X \tSOC\n"
        "mlx5_1\tSOC\tPIX\tSOC\t X \n"
    )
    t = template_from_nvidia_smi(text, file="old.txt", gpu="l40s", nic="connectx-6-hdr")
    topo = topology_from_template(t)
    assert topo.path_type("n0/gpu0", "n0/nic0") == "PIX" and topo.path_type("n0/gpu0", "n0/gpu1") == "SYS"
    assert "(mlx5_1)" in next(d for d in t["devices"] if d["name"] == "nic1")["notes"]


# ------------------------------------------------------------------------------------------------ every shipped node
_SOCKET_CPUID = {  # CPU preset's socket link -> (vendor, family, model) NCCL classifies as that link (topo.cc)
    "amd-if": ("AuthenticAMD", 23, 49),
    "upi-spr": ("GenuineIntel", 6, 0x8F),
    "upi-skl": ("GenuineIntel", 6, 0x55),
    "upi": ("GenuineIntel", 6, 0x8F),
    "qpi-bdw": ("GenuineIntel", 6, 0x4F),
    "grace-socket": ("", 0, 0),  # arm64: NCCL reads no vendor, family or model
}


def _pcie_children(topo: Topology, node: str, parent: str | None) -> list[str]:
    g = topo.graph
    return sorted(v for v in g.successors(node) if v != parent and g.edges[node, v]["link"].kind in ("pcie", "c2c"))


def xml_from_topology(topo: Topology) -> str:
    """Node 0 of a collsim topology as NCCL would dump it (the format of NCCL's xml.cc, written by this test)."""
    presets = load_presets()
    busid: dict[str, str] = {}

    def bid(name: str) -> str:
        if name not in busid:
            busid[name] = f"{len(busid) // 256:04x}:{len(busid) % 256:02x}:00.0"
        return busid[name]

    def link_attrs(a: str, b: str) -> str:
        lk = topo.link(a, b)
        if lk.kind == "c2c":  # a GPU on its Grace: no PCIe link of its own (the <c2c> element says what it has)
            return 'link_speed="" link_width="0"'
        gen = int(lk.preset[4:])
        width = round(16 * lk.raw_bandwidth / presets.links[lk.preset]["bandwidth"])
        speed = {3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0"}[gen]
        return f'link_speed="{speed} GT/s PCIe" link_width="{width}"'

    switch = next(iter(topo.devices("nvswitch", 0)), None)
    nsw = int(switch.spec.get("physical_switches") or 1) if switch else 0

    def emit(name: str, parent: str, out: list[str]) -> None:
        dev = topo.device(name)
        attrs = f'busid="{bid(name)}"'
        if dev.kind == "pcie_switch":
            out.append(f'<pci {attrs} class="0x060400" vendor="0x10b5" device="0x8747" {link_attrs(name, parent)}>')
            for child in _pcie_children(topo, name, parent):
                emit(child, name, out)
            out.append("</pci>")
        elif dev.kind == "gpu":
            ids = presets.gpus[dev.spec["preset"]]["pci_device_ids"] or ("10de:ffff",)  # none known: --gpu names it
            pid = ids[0].split(":")
            nv = []
            for other in sorted(topo.graph.successors(name)):
                lk = topo.link(name, other)
                if lk.kind == "c2c":  # NVML's C2C link count and per-link bandwidth (MB/s), as NCCL dumps them
                    nv.append('<c2c bw="45000" count="10"/>')
                if lk.kind != "nvlink":
                    continue
                if topo.device(other).kind == "nvswitch":
                    for k in range(nsw):  # the links spread over the physical switches, as NCCL lists them
                        c = lk.count // nsw + (1 if k < lk.count % nsw else 0)
                        if c:
                            nv.append(f'<nvlink target="ffff:{k:02x}:00.0" count="{c}" tclass="0x068000"/>')
                else:
                    nv.append(f'<nvlink target="{bid(other)}" count="{lk.count}" tclass="0x030200"/>')
            out.append(
                f'<pci {attrs} class="0x030200" vendor="0x{pid[0]}" device="0x{pid[1]}" '
                f'{link_attrs(name, parent)}><gpu dev="{dev.index}" sm="{dev.spec["sm"]}" rank="{dev.index}" '
                f'gdr="1">{"".join(nv)}</gpu></pci>'
            )
        elif dev.kind == "nic":
            mbps = round(float(dev.spec["speed"]) * 8 / 1e6)  # bytes/s x 8 bits / 1e6 = Mb/s
            out.append(
                f'<pci {attrs} class="0x020700" vendor="0x15b3" device="0x1021" {link_attrs(name, parent)}>'
                f'<nic><net name="mlx5_{dev.index}" dev="{dev.index}" speed="{mbps}" port="1" '
                f'gdr="{int(bool(dev.spec["rdma"]))}"/></nic></pci>'
            )

    cpus = topo.devices("cpu", 0)
    host: dict[str, int] = {}
    for c in cpus:  # CPUs joined by socket links are one host (one host_hash)
        if c.name in host:
            continue
        host[c.name] = len(set(host.values()))
        stack = [c.name]
        while stack:
            u = stack.pop()
            for v in topo.graph.successors(u):
                if topo.link(u, v).kind == "upi" and v not in host:
                    host[v] = host[c.name]
                    stack.append(v)
    out = ['<system version="1">']
    for c in cpus:
        vendor, fam, model = _SOCKET_CPUID[str(c.spec["socket_link"])]
        cpuid = f'arch="x86_64" vendor="{vendor}" familyid="{fam}" modelid="{model}"' if vendor else 'arch="arm64"'
        out.append(f'<cpu host_hash="0x{host[c.name] + 1:x}" numaid="{c.index}" {cpuid}>')
        for child in _pcie_children(topo, c.name, None):
            emit(child, c.name, out)
        out.append("</cpu>")
    out.append("</system>")
    return "\n".join(out) + "\n"


def smi_from_topology(topo: Topology, node_word: Callable[[int], str] = lambda i: "NODE") -> str:
    """Node 0 as `nvidia-smi topo -m` prints it (PHB written as NODE or PHB by `node_word`)."""
    gpus, nics = topo.devices("gpu", 0), topo.nics(0)
    devs = [*gpus, *nics]
    labels = [f"GPU{g.index}" for g in gpus] + [f"NIC{n.index}" for n in nics]
    lines = ["\t" + "\t".join(labels) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for i, a in enumerate(devs):
        cells = []
        for j, b in enumerate(devs):
            pt = topo.path_type(a.name, b.name)
            if pt == "PHB":  # the same word both ways: the matrix is symmetric
                pt = node_word(min(i, j) * len(devs) + max(i, j))
            cells.append(" X " if pt == "X" else pt)
        tail = (
            [
                f"{8 * topo.host_cpu(a.name).index}-{8 * topo.host_cpu(a.name).index + 7}",
                str(topo.host_cpu(a.name).index),
                "N/A",
            ]
            if i < len(gpus)
            else []
        )
        lines.append(labels[i] + "\t" + "\t".join(cells + tail))
    lines += ["", "Legend:", "", "  X    = Self", "", "NIC Legend:", ""]
    lines += [f"  NIC{n.index}: mlx5_{n.index}" for n in nics]
    return "\n".join(lines) + "\n"


SHIPPED = [t for t in available_templates() if t != "cpu-host"]  # cpu-host has no GPU


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_node_round_trips_through_nccl_xml(name: str) -> None:
    ref = load_topology(name)
    preset = ref.gpus()[0].spec["preset"]
    gpu = None if load_presets().gpus[preset]["pci_device_ids"] else preset  # a GPU without a known PCI id: --gpu
    t = template_from_nccl_xml(xml_from_topology(ref), file=f"{name}.xml", gpu=gpu)
    got = topology_from_template(t)
    assert _matrix(got) == _matrix(ref)
    gpu = ref.gpus()[0].name
    assert [got.path_class(gpu, n.name) for n in got.nics(0)] == [ref.path_class(gpu, n.name) for n in ref.nics(0)]


@pytest.mark.parametrize("name", [t for t in SHIPPED if t != "gb200-nvl72"])  # NET cells: no nvidia-smi view
def test_every_shipped_node_round_trips_through_nvidia_smi(name: str) -> None:
    ref = load_topology(name)
    gpu = ref.gpus()[0].spec["preset"]
    nic = ref.nics(0)[0].spec["preset"] if ref.nics(0) else None
    t = template_from_nvidia_smi(smi_from_topology(ref), file=f"{name}.txt", gpu=gpu, nic=nic)
    assert _matrix(topology_from_template(t)) == _matrix(ref)


# ------------------------------------------------------------------------------------------------ random PCIe trees
@st.composite
def pcie_trees(draw: st.DrawFn) -> dict[str, Any]:
    """A node: 1-3 CPU sockets, each a random tree of PCIe switches (depth <= 3) with GPUs and NICs anywhere."""
    counter = {"gpu": 0, "nic": 0, "pcie": 0}
    budget = [draw(st.integers(2, 10))]

    def subtree(depth: int) -> list[Any]:
        items: list[Any] = []
        for _ in range(draw(st.integers(0 if depth else 1, 3))):
            if budget[0] <= 0:
                break
            kind = draw(st.sampled_from(["gpu", "nic", "switch"] if depth < 3 else ["gpu", "nic"]))
            if kind == "switch":
                counter["pcie"] += 1
                items.append(("pcie_switch", f"pcie{counter['pcie'] - 1}", subtree(depth + 1)))
            else:
                budget[0] -= 1
                counter[kind] += 1
                items.append((kind, f"{kind}{counter[kind] - 1}", []))
        return items

    cpus = [subtree(0) for _ in range(draw(st.integers(1, 3)))]
    if counter["gpu"] == 0:
        cpus[0].append(("gpu", "gpu0", []))
        counter["gpu"] = 1
    return {"cpus": cpus, "counts": dict(counter)}


def _tree_template(tree: dict[str, Any]) -> dict[str, Any]:
    """The reference: the tree as a collsim template (L40S GPUs, ConnectX-5 NICs, PCIe Gen4 x16 everywhere)."""
    c = tree["counts"]
    devices: list[dict[str, Any]] = [{"name": f"gpu{i}", "kind": "gpu", "preset": "l40s"} for i in range(c["gpu"])]
    devices += [{"name": f"pcie{i}", "kind": "pcie_switch"} for i in range(c["pcie"])]
    devices += [{"name": f"nic{i}", "kind": "nic", "preset": "connectx-5-edr"} for i in range(c["nic"])]
    ncpu = len(tree["cpus"])
    devices += [{"name": f"cpu{i}", "kind": "cpu", "preset": "xeon-8480"} for i in range(ncpu)]
    links: list[dict[str, Any]] = [
        {"a": f"cpu{i}", "b": f"cpu{j}", "preset": "upi-spr"} for i in range(ncpu) for j in range(i + 1, ncpu)
    ]

    def walk(items: list[Any], parent: str) -> None:
        for _kind, name, kids in items:
            links.append({"a": name, "b": parent, "preset": "pcie4"})
            walk(kids, name)

    for i, items in enumerate(tree["cpus"]):
        walk(items, f"cpu{i}")
    return {"name": "tree", "devices": devices, "links": links}


def _tree_xml(tree: dict[str, Any]) -> str:
    n = [0]

    def bus() -> str:
        n[0] += 1
        return f"0000:{n[0] // 256:02x}:{n[0] % 256:02x}.0"

    link = 'link_speed="16.0 GT/s PCIe" link_width="16"'

    def walk(items: list[Any]) -> str:
        out = ""
        for kind, name, kids in items:
            i = int(re.sub(r"\D", "", name))
            if kind == "pcie_switch":
                out += (
                    f'<pci busid="{bus()}" class="0x060400" vendor="0x10b5" device="0x8747" {link}>{walk(kids)}</pci>'
                )
            elif kind == "gpu":
                out += (
                    f'<pci busid="{bus()}" class="0x030000" vendor="0x10de" device="0x26b9" {link}>'
                    f'<gpu dev="{i}" sm="89" rank="{i}" gdr="1"/></pci>'
                )
            else:
                out += (
                    f'<pci busid="{bus()}" class="0x020000" vendor="0x15b3" device="0x1017" {link}><nic>'
                    f'<net name="mlx5_{i}" dev="{i}" speed="100000" port="1" gdr="1"/></nic></pci>'
                )
        return out

    cpus = "".join(
        f'<cpu numaid="{i}" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">{walk(items)}</cpu>'
        for i, items in enumerate(tree["cpus"])
    )
    return f'<system version="1">{cpus}</system>'


def _endpoint_types(topo: Topology) -> dict[tuple[str, str], str]:
    eps = [*topo.devices("gpu", 0), *topo.nics(0)]
    return {(a.local_name, b.local_name): topo.path_type(a.name, b.name) for a in eps for b in eps}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pcie_trees())
def test_random_pcie_trees_survive_nccl_xml(tree: dict[str, Any]) -> None:
    ref = topology_from_template(_tree_template(tree))
    t = template_from_nccl_xml(_tree_xml(tree), file="tree.xml")
    assert _endpoint_types(topology_from_template(t)) == _endpoint_types(ref)
    # the YAML written reads back to the same template
    data = yaml.safe_load(format_template(t))
    assert data["links"] == [{k: v for k, v in lk.items() if k != "notes"} for lk in t["links"]]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pcie_trees())
def test_random_pcie_trees_survive_as_static_topology_files(tree: dict[str, Any]) -> None:
    """The same trees as a cloud's NCCL_TOPO_FILE gives them (bare GPU- and NIC-class <pci>, no models): with --gpu
    and --nic every class between endpoints is the original's, the endpoints numbered in bus-id order."""
    ref = topology_from_template(_tree_template(tree))
    static = re.sub(r"<gpu [^>]*/>|<nic>.*?</nic>", "", _tree_xml(tree))
    assert "<gpu" not in static and "<nic" not in static
    t = template_from_nccl_xml(static, file="tree.xml", gpu="l40s", nic="connectx-5-edr")
    assert _endpoint_types(topology_from_template(t)) == _endpoint_types(ref)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pcie_trees(), st.lists(st.sampled_from(["NODE", "PHB"]), min_size=1, max_size=8))
def test_random_pcie_trees_survive_nvidia_smi(tree: dict[str, Any], words: list[str]) -> None:
    """The matrix alone (PHB printed as NODE or PHB at random) rebuilds a tree with every class of the original."""
    ref = topology_from_template(_tree_template(tree))
    text = smi_from_topology(ref, lambda i: words[i % len(words)])
    t = template_from_nvidia_smi(text, file="tree.txt", gpu="l40s", nic="connectx-5-edr", cpu="xeon-8480")
    assert _endpoint_types(topology_from_template(t)) == _endpoint_types(ref)


# ------------------------------------------------------------------------------------------------ bad input
def _dgx_smi() -> str:
    return (DATA / CASES["dgx-a100"][1]).read_text()


_SMI_OPTS = ["--gpu", "a100-sxm4-80gb", "--nic", "connectx-6-hdr"]

#: (reader, text or a function of the DGX A100 file's text, options, expected field, words of the message)
BAD: list[tuple[str, Any, list[str], str, str]] = [
    ("nccl-xml", "", [], "", "empty file"),
    ("nccl-xml", '<system version="1"><cpu numaid="0"></system>', [], "line 1, column 39", "malformed XML"),
    (
        "nccl-xml",
        '<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;">]>\n'
        '<system version="1">&lol2;</system>',
        [],
        "line 2",
        "DOCTYPE and ENTITY declarations are refused",
    ),
    ("nccl-xml", '<system version="1"><!ENTITY x "y"></system>', [], "line 1", "refused"),
    ("nccl-xml", "<topology/>", [], "topology", "starts with <system>"),
    ("nccl-xml", '<system version="2"/>', [], "system", "version 1"),
    ("nccl-xml", "<system/>", [], "system", "missing attribute 'version'"),
    (
        "nccl-xml",
        lambda s: s.replace('<gpu dev="0" sm="80"', '<gpux dev="0" sm="80"').replace(
            '</gpu>\n        </pci>\n      </pci>\n      <pci busid="0000:09',
            '</gpux>\n        </pci>\n      </pci>\n      <pci busid="0000:09',
            1,
        ),
        [],
        "system/cpu[numaid=0]/pci[busid=0000:01:00.0]/pci[busid=0000:02:00.0]/pci[busid=0000:07:00.0]",
        "unknown element <gpux>",
    ),
    (
        "nccl-xml",
        lambda s: s.replace(' sm="80" rank="0"', ' rank="0"'),
        [],
        "system/cpu[numaid=0]/pci[busid=0000:01:00.0]/pci[busid=0000:02:00.0]/pci[busid=0000:07:00.0]/gpu[dev=0]",
        "missing attribute 'sm'",
    ),
    (
        "nccl-xml",
        lambda s: s.replace(' sm="80" rank="0"', ' sm="eighty" rank="0"'),
        [],
        "gpu[dev=0]",
        "expected an integer",
    ),
    (
        "nccl-xml",
        lambda s: s.replace(
            'link_speed="16.0 GT/s PCIe" link_width="16">\n          <gpu dev="0"',
            'link_width="16">\n          <gpu dev="0"',
        ),
        [],
        "pci[busid=0000:07:00.0]",
        "missing attribute 'link_speed'",
    ),
    (
        "nccl-xml",
        lambda s: s.replace('link_speed="16.0 GT/s PCIe"', 'link_speed="17 GT/s"', 1),
        [],
        "pci[busid=0000:01:00.0]",
        "expected one of",
    ),
    (
        "nccl-xml",
        lambda s: s.replace('link_width="16"', 'link_width="7"', 1),
        [],
        "pci[busid=0000:01:00.0]",
        "link_width=7",
    ),
    (
        "nccl-xml",
        lambda s: s.replace('busid="0000:0e:00.0"', 'busid="0000:07:00.0"'),
        [],
        "pci[busid=0000:07:00.0]",
        "given twice",
    ),
    ("nccl-xml", lambda s: s.replace('<gpu dev="1"', '<gpu dev="0"'), [], "gpu[dev=0]", "GPU dev 0 given twice"),
    ("nccl-xml", lambda s: s.replace('device="0x20b2"', 'device="0x9999"', 1), [], "gpu[dev=0]", "give --gpu PRESET"),
    ("nccl-xml", lambda s: s, ["--gpu", "h100-sxm5-80gb"], "gpu[dev=0]", "sm 90, the file's GPU sm 80"),
    ("nccl-xml", lambda s: s, ["--gpu", "no-such-gpu"], "--gpu", "unknown gpu preset 'no-such-gpu'"),
    (
        "nccl-xml",
        lambda s: s.replace('speed="200000"', 'speed="300000"', 1),
        [],
        "net[name=mlx5_0]",
        "give --nic PRESET",
    ),
    (
        "nccl-xml",
        lambda s: s.replace(
            '<nvlink target="0000:c4:00.0" count="2" tclass="0x068000"/>',
            '<nvlink target="0000:77:00.0" count="2" tclass="0x030200"/>',
            1,
        ),
        [],
        "nvlink[target=0000:77:00.0]",
        "no other GPU",
    ),
    (
        "nccl-xml",
        lambda s: s.replace('count="2" tclass="0x068000"', 'count="3" tclass="0x068000"'),
        [],
        "gpu[dev=0]",
        "18 NVLinks, but GPU preset a100-sxm4-80gb has 12",
    ),
    ("nccl-xml", lambda s: s.replace("<nic>\n", "<nic>hello\n", 1), [], "nic[0]", "unexpected text"),
    (
        "nccl-xml",
        '<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143"/></system>',
        [],
        "system",
        "no <gpu>",
    ),
    (
        "nccl-xml",
        '<system version="1"><cpu numaid="0">'
        + '<pci busid="0000:01:00.0" class="0x060400" link_speed="" link_width="16">' * 70
        + "</pci>" * 70
        + "</cpu></system>",
        [],
        "",
        "nested deeper than 64",
    ),
    ("nccl-xml", lambda s: s.replace('arch="x86_64"', 'arch="ppc64"', 1), [], "cpu[numaid=0]", "give --cpu PRESET"),
    ("nvidia-smi", "", _SMI_OPTS, "line 1", "no `nvidia-smi topo -m` matrix"),
    ("nvidia-smi", "GPU0\tGPU1\nhello\n", _SMI_OPTS, "line 2", "row 'hello'; expected GPU0"),
    ("nvidia-smi", "\tGPU0\tGPU1\nGPU0\t X \tPIX\n\nLegend:\n", ["--gpu", "l40s"], "line 3", "1 rows for 2 columns"),
    (
        "nvidia-smi",
        lambda s: "\n".join(line for line in s.splitlines() if not line.startswith("NIC7")),
        _SMI_OPTS,
        "line 17",
        "not square",
    ),
    (
        "nvidia-smi",
        lambda s: s.replace("GPU3\tNV12\tNV12\tNV12\t X \t", "GPU3\tNV12\tNV12\t X \t"),
        _SMI_OPTS,
        "line 5",
        "X off the diagonal",
    ),
    (
        "nvidia-smi",
        lambda s: s.replace("GPU0\t X \tNV12", "GPU0\t X \tNVX"),
        _SMI_OPTS,
        "line 2",
        "unknown connection 'NVX'",
    ),
    (
        "nvidia-smi",
        lambda s: s.replace(
            "GPU0\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tPIX",
            "GPU0\t X \tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tNV12\tSYS",
        ),
        _SMI_OPTS,
        "line 2",
        "GPU0 x NIC0 is SYS but NIC0 x GPU0 is PIX",
    ),
    ("nvidia-smi", lambda s: s.replace("GPU1\tNV12\t X ", "GPU1\tNV12\tPIX"), _SMI_OPTS, "line 3", "on the diagonal"),
    (
        "nvidia-smi",
        lambda s: s.replace(
            "\tPIX\tPIX\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t0-63", "\tNV2\tPIX\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\t0-63", 1
        ),
        _SMI_OPTS,
        "line 2",
        "between a GPU and a NIC",
    ),
    ("nvidia-smi", lambda s: s, [], "--gpu", "names no GPU model"),
    ("nvidia-smi", lambda s: s, ["--gpu", "a100-sxm4-80gb"], "--nic", "no NIC model or speed"),
    (
        "nvidia-smi",
        "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tPIX\tPXB\nGPU1\tPIX\t X \tPIX\nGPU2\tPXB\tPIX\t X \n",
        ["--gpu", "l40s"],
        "line 2",
        "no tree of PCIe switches gives this matrix",
    ),
    (
        "nvidia-smi",
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tSYS\t0-7\t0\nGPU1\tSYS\t X \t0-7\t0\n",
        ["--gpu", "l40s"],
        "line 2",
        "SYS, yet both are on one socket",
    ),
    (
        "nvidia-smi",
        "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV12\tNV4\nGPU1\tNV12\t X \tNV12\nGPU2\tNV4\tNV12\t X \n",
        ["--gpu", "a100-sxm4-80gb"],
        "line 2",
        "add up to 16 NVLinks",
    ),
    (
        "nvidia-smi",
        "\tGPU0\tGPU1\tFOO BAR\nGPU0\t X \tPIX\nGPU1\tPIX\t X \n",
        ["--gpu", "l40s"],
        "line 2",
        "has 2 cells; the header names 4 devices",
    ),
]


@pytest.mark.parametrize(
    ("reader", "content", "opts", "field", "words"), BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)]
)
def test_bad_input_is_one_error_line(
    reader: str,
    content: Any,
    opts: list[str],
    field: str,
    words: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = _dgx_xml() if reader == "nccl-xml" else _dgx_smi()
    text = content(base) if callable(content) else content
    path = tmp_path / ("bad.xml" if reader == "nccl-xml" else "bad.txt")
    path.write_text(text)
    assert main(["import", reader, str(path), "-o", str(tmp_path / "out.yaml"), *opts]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    prefix = f"collsim: error: {path}: "
    assert lines[0].startswith(prefix), (lines[0], prefix)
    where = lines[0][len(prefix) :]
    if field:  # the element's path ends with the field named, or the line / option is the field
        assert re.match(rf"^\S*{re.escape(field)}: ", where), (where, field)
    assert words in lines[0], lines[0]
    assert not (tmp_path / "out.yaml").exists(), "nothing is written on an error"
    # the library raises the same TopologyError
    reader_fn = template_from_nccl_xml if reader == "nccl-xml" else template_from_nvidia_smi
    kw = {o[2:]: v for o, v in zip(opts[::2], opts[1::2], strict=True)}
    with pytest.raises(TopologyError, match=re.escape(words)):
        reader_fn(text, file=path, **kw)


@pytest.mark.parametrize("what", ["missing", "binary", "folder"])
def test_unreadable_files(what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.xml"
    if what == "binary":
        path.write_bytes(b"\xff\xfe\x00<system")
    elif what == "folder":
        path.mkdir()
    assert main(["import", "nccl-xml", str(path)]) == 2
    _, err = capsys.readouterr()
    assert err.startswith(f"collsim: error: {path}: ") and len(err.splitlines()) == 1
    assert {"missing": "file not found", "binary": "not a UTF-8 text file", "folder": "cannot read file"}[what] in err


def test_unwritable_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "no-such-dir" / "t.yaml"
    assert main(["import", "nccl-xml", str(DATA / CASES["dgx-a100"][0]), "-o", str(out)]) == 2
    _, err = capsys.readouterr()
    assert err.startswith("collsim: error: ") and str(out) in err and len(err.splitlines()) == 1
    with pytest.raises(TopologyError, match="cannot write the template"):
        write_template(_import_xml("dgx-a100"), out)
    assert not list(tmp_path.rglob("*.tmp"))


def test_billion_laughs_is_refused_quickly() -> None:
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">' for i in range(1, 10))
        + ']><system version="1">&lol9;</system>'
    )
    with pytest.raises(TopologyError, match="DOCTYPE and ENTITY declarations are refused"):
        template_from_nccl_xml(bomb, file="bomb.xml")


def test_pci_device_ids_are_unique_and_well_formed() -> None:
    seen: dict[str, str] = {}
    for name, g in load_presets().gpus.items():
        for pid in g["pci_device_ids"] or ():
            assert re.fullmatch(r"10de:[0-9a-f]{4}", pid), (name, pid)
            assert pid not in seen, f"{pid}: {seen.get(pid)} and {name}"
            seen[pid] = name
    raw = yaml.safe_load((REPO / "topologies" / "presets" / "gpus.yaml").read_text())
    for name, rec in raw.items():
        if "pci_device_ids" in rec:
            assert "pci.ids" in rec["pci_device_ids_source"], name


def _h800_presets() -> Any:
    h800 = {"base": "h100-sxm5-80gb", "nvlinks": 8, "source": "test: the H100 SXM5 with 8 NVLinks"}
    return merge_presets(load_presets(), [PresetSource({"gpus": {"h800": h800}}, "h800.yaml")])


def test_fewer_nvlinks_than_the_gpu_preset_are_wired_and_noted() -> None:
    """An HGX board whose GPUs show NV8 (an H800 node, NVIDIA/nccl#933's matrix) imported with the H100 preset: the
    template wires 8 NVLinks per GPU and says how to describe the part; with a preset of 8 it says nothing."""
    smi = (DATA / CASES["hgx-h100"][1]).read_text().replace("NV18", "NV8")
    t = template_from_nvidia_smi(smi, file="h800.txt", gpu="h100-sxm5-80gb", nic="connectx-7-ndr", cpu="xeon-8480")
    assert "Every GPU has NV8 to the NVSwitch where GPU preset h100-sxm5-80gb has 18 NVLinks" in t["notes"]
    assert "base: h100-sxm5-80gb, nvlinks: 8" in t["notes"]
    assert topology_from_template(t).link("n0/gpu0", "n0/nvswitch").count == 8
    own = template_from_nvidia_smi(smi, file="h800.txt", gpu="h800", nic="connectx-7-ndr", cpu="xeon-8480",
                                   presets=_h800_presets())  # fmt: skip
    assert "Every GPU has" not in own["notes"]
    assert "Every GPU has" not in _import_smi("hgx-h100")["notes"]
    # the same from NCCL's dump: each GPU's <nvlink> counts (5 + 4 + 4 + 5) cut to 2 + 2 + 2 + 2
    xml = (DATA / CASES["hgx-h100"][0]).read_text().replace('count="5"', 'count="2"').replace('count="4"', 'count="2"')
    tx = template_from_nccl_xml(xml, file="h800.xml", gpu="h100-sxm5-80gb")
    assert "8 NVLinks in the dump where GPU preset h100-sxm5-80gb has 18" in tx["notes"]
    assert "gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7" in tx["notes"]  # one note for the eight
    assert "NVLinks in the dump" not in _import_xml("hgx-h100")["notes"]


def test_a_gh200_from_nvidia_smi_is_on_nvlink_c2c_not_pcie() -> None:
    """nvidia-smi's matrix does not show a superchip's NVLink-C2C: a GPU straight on a Grace socket takes the CPU
    preset's ``gpu_link`` (nvlink-c2c), and the NIC's PCIe the Grace's generation (5), as the shipped gh200 template
    has them (it had PCIe Gen4 from both: 24 GB/s where the shipped template and the NCCL XML import give 48)."""
    text = ("\tGPU0\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \tNODE\t0-71\t0\t\t1\n"
            "NIC0\tNODE\t X \t\t\t\t\n\nNIC Legend:\n\n  NIC0: mlx5_0\n")  # fmt: skip
    topo = topology_from_template(
        template_from_nvidia_smi(text, file="gh200.txt", gpu="gh200-96gb", nic="connectx-7-ndr", cpu="grace")
    )
    shipped = load_topology("gh200")
    assert topo.link("n0/gpu0", "n0/cpu0").preset == shipped.link("n0/gpu0", "n0/cpu0").preset == "nvlink-c2c"
    assert topo.link("n0/nic0", "n0/cpu0").preset == shipped.link("n0/nic0", "n0/cpu0").preset == "pcie5"
    # an x86 host keeps PCIe for a GPU straight on its socket
    x86 = template_from_nvidia_smi(text, file="h.txt", gpu="h100-pcie-80gb", nic="connectx-7-ndr", cpu="xeon-8480")
    assert topology_from_template(x86).link("n0/gpu0", "n0/cpu0").kind == "pcie"


def test_the_ports_of_one_nic_are_one_device_on_its_one_link() -> None:
    """A <nic> with two <net> ports (a dump: NCCL writes physical ports) is one NIC of their summed speed on the
    card's one PCIe link, as NCCL merges them at run time (NCCL_NET_MERGE_LEVEL default PORT): each port had the
    card's whole link, and two 200 Gb/s ports on a Gen4 x16 link gave 48 GB/s where the link carries 24."""
    path = DATA / "dualport-nic.nccl-topo.xml"
    template = template_from_nccl_xml(path.read_text(), file=path, gpu="a100-sxm4-80gb")
    nics = [d for d in template["devices"] if d["kind"] == "nic"]
    assert [(d["name"], d["preset"], d["spec"]["ib_name"]) for d in nics] == [
        ("nic0", "connectx-7-ndr", "mlx5_0+mlx5_1")  # 2 x 200000 Mb/s: the shipped 400 Gb/s preset
    ]
    topo = topology_from_template(template)
    assert len(topo.nics()) == 1 and topo.link("n0/nic0", "n0/pcie0").preset == "pcie4"


def test_import_mistakes_and_gaps_are_said_where_they_are() -> None:
    """NV0 names its line and cell (it named a field of the generated template); --nic with no NIC in the matrix
    is warned about (nvidia-smi lists RDMA devices only); a gdr="0" NIC's error says what gdr means."""
    text = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV0\t0-23\nGPU1\tNV0\t X \t0-23\n"
    with pytest.raises(TopologyError) as ei:
        template_from_nvidia_smi(text, file="nv0.txt", gpu="a100-sxm4-80gb")
    assert ei.value.field == "line 2"
    assert "column GPU1: NV0: a count of bonded NVLinks is at least 1" in ei.value.message
    pcie = "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-23\nGPU1\tPIX\t X \t0-23\n"
    with pytest.warns(TopologyWarning, match=r"p.txt: --nic eth-100g: the matrix shows no NIC"):
        template_from_nvidia_smi(pcie, file="p.txt", gpu="rtx-4090", nic="eth-100g")
    xml = (DATA / "dualport-nic.nccl-topo.xml").read_text().replace('gdr="1"/>', 'gdr="0"/>')
    xml = xml.replace('speed="200000"', 'speed="50000"')  # two ports: one 100 Gb/s device
    with pytest.raises(TopologyError, match=r'NIC of 100 Gb/s: shipped eth NIC presets .*gdr="0" only says '
                                            r"GPUDirect RDMA is off"):
        template_from_nccl_xml(xml, file="x.xml", gpu="a100-sxm4-80gb")


def test_an_imported_dgx_with_storage_nics_runs_as_the_shipped_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A DGX A100 whose storage NICs mlx5_4 and mlx5_5 sit on the CPUs between the compute NICs: the import says
    NCCL leaves them out, and two such nodes run a ring as the shipped template does (half as fast before: two
    NICs' channels entered at one GPU)."""
    out = tmp_path / "dgx.yaml"
    assert main(["import", "nvidia-smi", str(DATA / "dgx-a100-storage-nics.nvidia-smi-topo.txt"), "--gpu",
                 "a100-sxm4-80gb", "--nic", "connectx-6-hdr", "--cpu", "epyc-7742", "-o", str(out)]) == 0  # fmt: skip
    said = capsys.readouterr().out
    assert "NCCL's network search leaves out nic4 (mlx5_4), nic5 (mlx5_5): farther from every GPU" in said
    from collsim.api import Simulator

    def busbw(node: str) -> float:
        sim = Simulator.from_source({"name": "s", "cluster": {"node": node, "nodes": 2, "fabric": {
            "topology": "rail_optimized"}}, "backends": {"nccl": {}}})  # fmt: skip
        t = sim.simulate_one("nccl", 1 << 30, choice=("Ring", "Simple")).time_s
        return (1 << 30) / t * 2 * 15 / 16 / 1e9

    assert busbw(str(out)) == pytest.approx(busbw("dgx-a100"), rel=1e-9)
