"""`collsim import nccl-xml` on the topology files clouds ship for NCCL_TOPO_FILE (collsim/topology/importer.py):
the PCIe tree with bare GPU- and NIC-class `<pci>` (no `<gpu>`, no `<nic>`), no NVLink (NCCL reads both from NVML and
its network plugin at run time), EFA devices that AWS's plugin groups per GPU, and NIC protocols from rdma-core's
device names.

The XML here is written for these tests in the layouts the providers document (an Azure ND H100 v5 node: 8 PCIe
switches each holding one GPU and one InfiniBand card, two Sapphire Rapids sockets; an AWS p5.48xlarge: 8 switches each
holding one GPU and four 100 Gb/s EFA devices named `rdmapNNs0`); imported, they give the shipped templates' times.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest

from collsim.cli import main
from collsim.topology import TopologyError, topology_from_template
from collsim.topology.errors import TopologyWarning
from collsim.topology.importer import template_from_nccl_xml

GEN5 = 'link_speed="32.0 GT/s PCIe" link_width="16"'


def _azure_like(gpus: int = 8, bus: list[int] | None = None) -> str:
    """Bare <pci> of class 0x03 (GPU) and 0x020700 (InfiniBand), one pair per switch, half the switches per socket;
    ``bus``: the GPUs' PCI domains in file order (default 1, 2, ...)."""
    doms = bus or list(range(1, gpus + 1))
    per = max(1, gpus // 2)
    out = ['<system version="1">']
    for cpu in range((gpus + per - 1) // per):
        out.append(f'<cpu numaid="{cpu}" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">')
        for k in range(cpu * per, min(gpus, (cpu + 1) * per)):
            out.append(f'<pci busid="ffff:ff:{k + 1:02x}.0" class="0x060400" {GEN5}>')
            out.append(f'<pci busid="{doms[k]:04x}:00:00.0" class="0x030200" {GEN5}/>')
            out.append(f'<pci busid="{0x100 + k + 1:04x}:00:00.0" class="0x020700" {GEN5}/>')
            out.append("</pci>")
        out.append("</cpu>")
    out.append("</system>")
    return "\n".join(out)


def _p5_like(nics_per_switch: int = 4, gpus: int = 8) -> str:
    """<gpu> without <nvlink>, and ``nics_per_switch`` 100 Gb/s NICs named as rdma-core names EFA devices."""
    out = ['<system version="1">', '<cpu numaid="0" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1">']
    dev = 0
    for g in range(gpus):
        b = 0x40 + 0x10 * g
        out.append(f'<pci busid="0000:{g:02x}:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">')
        out.append(f'<pci busid="0000:{b:02x}:00.0" class="0x030200" {GEN5}><gpu dev="{g}" sm="90" rank="{g}" '
                   'gdr="1"/></pci>')  # fmt: skip
        for k in range(nics_per_switch):
            out.append(f'<pci busid="0000:{b + 1 + k:02x}:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" '
                       f'link_width="8"><nic><net name="rdmap{b + 1 + k}s0" dev="{dev}" speed="100000" port="1" '
                       'gdr="1"/></nic></pci>')  # fmt: skip
            dev += 1
        out.append("</pci>")
    out += ["</cpu>", "</system>"]
    return "\n".join(out)


def _nvswitch_links(t: dict[str, Any]) -> list[tuple[Any, int]]:
    return [(lk["a"], lk["count"]) for lk in t["links"] if lk["b"] == "nvswitch"]


# ------------------------------------------------------------------------------------------------ static files
def test_a_static_file_names_no_models_so_gpu_and_nic_are_required() -> None:
    with pytest.raises(TopologyError, match=r"static topology file .* names no GPU model: give --gpu") as e:
        template_from_nccl_xml(_azure_like(), file="ndv5.xml")
    assert "ndv5.xml" in str(e.value)
    with pytest.raises(TopologyError, match=r"names no NIC model or speed for its 8 NIC\(s\): give --nic"):
        template_from_nccl_xml(_azure_like(), file="ndv5.xml", gpu="h100-sxm5-80gb")
    with pytest.raises(TopologyError, match="no <gpu> and no <pci> of a GPU's class"):
        template_from_nccl_xml('<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" '
                               'familyid="6" modelid="143"></cpu></system>', file="e.xml")  # fmt: skip


def test_a_static_file_without_nvswitch_warns_that_its_gpus_have_no_nvlink() -> None:
    with pytest.warns(TopologyWarning, match="no <nvlink> in the file, but GPU preset.* give --nvswitch"):
        t = template_from_nccl_xml(_azure_like(), file="ndv5.xml", gpu="h100-sxm5-80gb", nic="connectx-7-ndr")
    assert not [d for d in t["devices"] if d["kind"] == "nvswitch"]
    topo = topology_from_template(t)
    assert topo.path_type("n0/gpu0", "n0/gpu1") == "PHB" and topo.path_type("n0/gpu0", "n0/gpu4") == "SYS"


def test_nccls_own_dump_without_nvlinks_is_taken_at_its_word() -> None:
    """NCCL's dump gives every <pci> its PCI ids; a dump whose GPUs list no NVLink is GPUs without NVLink (PCIe
    cards, or bridges absent), so no warning."""
    text = (Path(__file__).resolve().parent / "data" / "hgx-h100.nccl-topo.xml").read_text()
    text = re.sub(r"<nvlink [^>]*/>", "", text)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TopologyWarning)
        t = template_from_nccl_xml(text, file="h.xml")
    assert not [d for d in t["devices"] if d["kind"] == "nvswitch"]


def test_a_static_file_with_nvswitch_wires_every_gpu_and_numbers_them_by_bus_id() -> None:
    # GPU domains given out of order in the file: NVML (and NCCL's dev) numbers them by bus id
    text = _azure_like(bus=[3, 1, 2, 4, 8, 6, 7, 5])
    t = template_from_nccl_xml(text, file="ndv5.xml", gpu="h100-sxm5-80gb", nic="connectx-7-ndr", nvswitch=True)
    assert _nvswitch_links(t) == [([f"gpu{i}" for i in range(8)], 18)]
    notes = {d["name"]: d.get("notes", "") for d in t["devices"]}
    assert notes["gpu0"].startswith("busid 0001:00:00.0") and notes["gpu7"].startswith("busid 0008:00:00.0")
    assert "static NCCL topology file" in t["description"] and "NCCL_TOPO_FILE" in t["source"]
    topo = topology_from_template(t)
    nics = topo.nics(0)
    assert len(nics) == 8 and {d["preset"] for d in t["devices"] if d["kind"] == "nic"} == {"connectx-7-ndr"}
    assert all(n.spec["speed"] == 50e9 for n in nics)  # 400e9 bits/s / 8: the preset's, not NCCL's 10 Gb/s fallback


def test_nvswitch_is_refused_where_the_file_lists_nvlinks() -> None:
    text = (Path(__file__).resolve().parent / "data" / "hgx-h100.nccl-topo.xml").read_text()
    with pytest.raises(TopologyError, match="--nvswitch: the file lists NVLinks"):
        template_from_nccl_xml(text, file="h.xml", nvswitch=True)
    with pytest.raises(TopologyError, match="--nvswitch: gpu0's GPU preset rtx-4090 has no NVLinks"):
        template_from_nccl_xml(_azure_like(2), file="a.xml", gpu="rtx-4090", nic="connectx-7-ndr", nvswitch=True)


def test_a_dump_with_bare_pci_devices_still_ignores_them() -> None:
    """In NCCL's own dump the GPUs are <gpu>; a GPU-class <pci> without one is a device outside the communicator."""
    text = (Path(__file__).resolve().parent / "data" / "hgx-h100.nccl-topo.xml").read_text()
    extra = f'<pci busid="00ff:00:00.0" class="0x030200" {GEN5}/>'
    text = text.replace("</cpu>", extra + "</cpu>", 1)
    t = template_from_nccl_xml(text, file="h.xml")
    assert sum(d["kind"] == "gpu" for d in t["devices"]) == 8
    assert "without <gpu> is ignored" in t["notes"]


# ------------------------------------------------------------------------------------------------ NIC protocols, EFA
@pytest.mark.parametrize(
    ("name", "vendor", "expected"),
    [
        ("ibp12s0", None, "connectx-7-ndr"),  # rdma-core: "Infiniband - ib*"
        ("ibP257p0s0", None, "connectx-7-ndr"),  # the same with a PCI domain (P<domain>p<bus>s<slot>)
        ("rdmaP1p0s0", None, "EFA"),  # "Default (unknown protocol) - rdma*", with a domain
        ("mlx5_0", None, "connectx-7-ndr"),  # the kernel's name says nothing: gdr=1 -> the ib preset, as before
        ("rocep12s0f0", None, "RoCE"),  # "RoCE - roce*": more than one RoCE preset at 400 Gb/s -> an error naming them
        ("eth0", "0x1d0f", "EFA"),  # Amazon's PCI vendor id
    ],
)
def test_the_nic_protocol_follows_its_rdma_core_name_or_vendor(name: str, vendor: str | None, expected: str) -> None:
    text = (Path(__file__).resolve().parent / "data" / "hgx-h100.nccl-topo.xml").read_text()
    text = text.replace('name="mlx5_0"', f'name="{name}"')
    if vendor is not None:
        text = text.replace('vendor="0x15b3"', f'vendor="{vendor}"')
    if expected in ("RoCE", "EFA"):
        with pytest.raises(TopologyError, match=f"NIC of 400 Gb/s, {expected} .*shipped NIC presets of that speed: "):
            template_from_nccl_xml(text, file="h.xml")
        return
    t = template_from_nccl_xml(text, file="h.xml")
    assert next(d for d in t["devices"] if d["name"] == "nic0")["preset"] == expected


def test_efa_devices_are_grouped_per_gpu_as_awss_plugin_presents_them() -> None:
    with pytest.raises(TopologyError, match=r"NIC of 400 Gb/s, EFA .*efa-v2-p5"):
        template_from_nccl_xml(_p5_like(), file="p5.xml", gpu="h100-sxm5-80gb", nvswitch=True)
    t = template_from_nccl_xml(_p5_like(), file="p5.xml", gpu="h100-sxm5-80gb", nic="efa-v2", nvswitch=True)
    topo = topology_from_template(t)
    nics = topo.nics(0)
    assert len(nics) == 8 and all(n.spec["speed"] == 50e9 for n in nics)  # 4 x 100e9 bits/s / 8
    # the group's four Gen4 x8 links in parallel: NCCL's width x rate / 80 GB/s, 32 lanes x 120 / 80 (the four
    # links' 4 x 12), as aws-p5's template has them
    assert topo.link("n0/nic0", "n0/pcie0").bandwidth == pytest.approx(32 * 120 / 80 * 1e9)
    assert "grouped into 8 NCCL devices" in t["notes"]
    # three devices for one GPU: one group of three; two GPUs on a switch of three: groups of two and one
    t3 = template_from_nccl_xml(_p5_like(3, 2), file="p.xml", gpu="h100-sxm5-80gb", nic="efa-v2", nvswitch=True)
    assert [d.spec["speed"] for d in topology_from_template(t3).nics(0)] == [37.5e9, 37.5e9]


def test_efa_groups_split_among_the_gpus_of_one_switch() -> None:
    """nccl_ofi_topo_group: a switch with 2 GPUs and 3 devices makes groups of 2 and 1; a switch with devices and no
    GPU sends them up to the CPU, which no GPU counted, so each is a device of its own."""

    def net(b: int, dev: int) -> str:
        return (f'<pci busid="0000:{b:02x}:00.0" class="0x020000" link_speed="16.0 GT/s PCIe" link_width="8"><nic>'
                f'<net name="rdmap{b}s0" dev="{dev}" speed="100000" gdr="1"/></nic></pci>')  # fmt: skip

    def gpu(b: int, dev: int) -> str:
        return f'<pci busid="0000:{b:02x}:00.0" class="0x030200" {GEN5}><gpu dev="{dev}" sm="90" gdr="1"/></pci>'

    sw = '<pci busid="0000:{:02x}:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">'
    text = ('<system version="1"><cpu numaid="0" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1">'
            + sw.format(1) + gpu(0x10, 0) + gpu(0x11, 1) + net(0x12, 0) + net(0x13, 1) + net(0x14, 2) + "</pci>"
            + sw.format(2) + net(0x22, 3) + net(0x23, 4) + net(0x24, 5) + "</pci></cpu></system>")  # fmt: skip
    t = template_from_nccl_xml(text, file="p.xml", gpu="h100-sxm5-80gb", nic="efa-v2", nvswitch=True)
    assert sorted(d.spec["speed"] for d in topology_from_template(t).nics(0)) == [12.5e9] * 4 + [25e9]


# ------------------------------------------------------------------------------------------------ end to end
def _times(capsys: pytest.CaptureFixture[str], *argv: str) -> list[tuple[Any, ...]]:
    rc = main(["run", *argv, "--format", "json", "--quiet", "--jobs", "1", "--sizes", "1MiB,256MiB"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return [(r["backend"], r["size_bytes"], r["algorithm"], r["protocol"], r["time_us"])
            for r in json.loads(out)["results"]]  # fmt: skip


@pytest.mark.parametrize(
    ("make", "options", "scenario"),
    [
        (_azure_like, ["--gpu", "h100-sxm5-80gb", "--nic", "connectx-7-ndr"], "2node-h100-ib"),
        (_p5_like, ["--gpu", "h100-sxm5-80gb", "--nic", "efa-v2"], "scenarios/published/aws_p5_2node_efa.yaml"),
    ],
)
def test_a_clouds_file_imported_gives_the_shipped_templates_times(
    make: Any, options: list[str], scenario: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Azure-like file with --nvswitch is the shipped hgx-h100; the p5-like one, its EFA devices grouped, is
    aws-p5 (whose NICs are the efa-v2-p5 preset: efa-v2's numbers at the group's 400 Gb/s)."""
    src = tmp_path / "topo.xml"
    src.write_text(make())
    out = tmp_path / "node.yaml"
    assert main(["import", "nccl-xml", str(src), "-o", str(out), "--nvswitch", *options]) == 0
    _, err = capsys.readouterr()
    assert err == ""
    repo = Path(__file__).resolve().parents[2]
    path = str(repo / scenario) if scenario.endswith(".yaml") else scenario
    ref = _times(capsys, path, "--backend", "nccl")
    got = _times(capsys, path, "--backend", "nccl", "--set", f"cluster.node={out}")
    assert got == ref


def test_cli_warns_and_refuses_nvswitch_for_nvidia_smi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "ndv5.xml"
    src.write_text(_azure_like())
    assert main(["import", "nccl-xml", str(src), "--gpu", "h100-sxm5-80gb", "--nic", "connectx-7-ndr"]) == 0
    _, err = capsys.readouterr()
    assert err.startswith("collsim: warning: ") and "give --nvswitch" in err and err.count("\n") == 1
    smi = Path(__file__).resolve().parent / "data" / "hgx-h100.nvidia-smi-topo.txt"
    assert main(["import", "nvidia-smi", str(smi), "--gpu", "h100-sxm5-80gb", "--nic", "connectx-7-ndr",
                 "--nvswitch"]) == 2  # fmt: skip
    assert "--nvswitch is for nccl-xml" in capsys.readouterr().err


def test_a_file_that_only_places_root_ports_says_what_to_import_instead() -> None:
    """Some NCCL_TOPO_FILEs only put PCI addresses on NUMA nodes (<pci busid=...> alone; NCCL reads the rest from
    sysfs): nothing to import, and the error says what would do."""
    text = '<system version="1"><cpu numaid="0"><pci busid="0000:00:16.0"/></cpu></system>'
    with pytest.raises(TopologyError, match=r"missing attribute 'class' \(a file that only places PCI addresses on "
                       r"NUMA nodes.*NCCL_TOPO_DUMP_FILE, or use nvidia-smi topo -m\)") as e:  # fmt: skip
        template_from_nccl_xml(text, file="g5.xml", gpu="l40s")
    assert "system/cpu[numaid=0]/pci[busid=0000:00:16.0]" in str(e.value)
