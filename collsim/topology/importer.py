"""Node templates from what a machine reports: NCCL's topology dump and ``nvidia-smi topo -m``.

Two readers build a node template mapping (the schema of ``topologies/nodes/*.yaml``, see
:mod:`collsim.topology.template`) and :func:`write_template` writes it as YAML with a comment on every inferred
number saying where it comes from. ``collsim import`` is the command line of this module.

NCCL's topology XML
-------------------
What NCCL writes to ``NCCL_TOPO_DUMP_FILE`` (NCCL v2.30.7-1, ``src/graph/xml.cc`` ``ncclTopoDumpXmlRec``, lines
275-293: one element per line, attributes ``key="value"``, no DTD, no text)::

    <system version="1">
      <cpu numaid="0" affinity="..." arch="x86_64" vendor="AuthenticAMD" familyid="23" modelid="49">
        <pci busid="0000:0b:00.0" class="0x060400" vendor="0x1000" device="0xc010" ... link_speed="16.0 GT/s PCIe"
             link_width="16">
          <pci busid="0000:0e:00.0" class="0x030200" vendor="0x10de" device="0x20b2" ...>
            <gpu dev="0" sm="80" rank="0" gdr="1">
              <nvlink target="0000:c9:00.0" count="2" tclass="0x068000"/>
            </gpu>
          </pci>
          <pci busid="0000:0f:00.0" class="0x020700" ...><nic><net name="mlx5_0" dev="0" speed="200000"/></nic></pci>
        </pci>
      </cpu>
    </system>

Which element may hold which is NCCL's loader's (xml.cc lines 344-405, ``ncclTopoXmlLoad*``): system > cpu >
pci | nic; pci > pci | gpu | nic | pcilink; gpu > nvlink | c2c; nic > net. ``version`` must be 1 (xml.h line 50,
``NCCL_TOPO_XML_VERSION``; xml.cc lines 392-396). How NCCL reads it (``src/graph/topo.cc``), and so this module:

- a ``<pci>`` is a PCIe switch (its upstream port; xml.cc lines 748-790 climb two sysfs levels per switch and stop
  at the root complex, the ``<cpu>``) unless it holds a ``<gpu>`` or a ``<nic>``; its ``class`` is matched by prefix
  against ``kvDictPciClass`` (topo.cc lines 538-544: 0x060400 bridge, 0x080100 CX8 data direct, 0x068000 NVSwitch,
  0x068001 CPU, 0x03 GPU, 0x02 NIC, anything else a bridge; ``kvConvertToInt``, xml.h lines 425-438, compares
  prefixes). Its ``link_speed`` and ``link_width`` give the link to its parent: ``width * speed / 80`` GB/s with
  ``speed`` from ``kvDictPciGen`` in units of 100 Mb/s per lane (topo.cc lines 545-556 and 650-658; an empty
  speed is NCCL's fallback 60 = Gen3, a width of 0 is 16). Broadcom PEX Gen4/Gen5 switches that present
  themselves as two levels are flattened into one (``ncclTopoFlattenBcmSwitches``, topo.cc lines 195-268).
- ``<gpu>``: ``dev`` (the CUDA/NVML index, our GPU order) and ``sm`` (compute capability x 10; topo.cc lines
  511-518). ``<nvlink count=.. tclass=..>``: ``count`` links to ``target``; a target whose class is a GPU is a
  GPU-to-GPU link, 0x068001 a CPU (IBM POWER; not modelled), anything else the NVSwitch fabric, all of a node's
  NVSwitches being one NVS node (``ncclTopoAddNvLinks``, topo.cc lines 811-871).
- ``<net>``: ``dev`` (NCCL's network device index, our NIC order), ``speed`` in Mb/s (NCCL: ``bw = mbps / 8000``
  GB/s, 10000 when missing or <= 0; topo.cc lines 415-418), ``gdr`` (GPUDirect RDMA support).
- ``<cpu>``: ``numaid``; ``arch``, ``vendor``, ``familyid``, ``modelid`` give NCCL's CPU class (topo.cc lines
  744-751) and with it the inter-socket bandwidth NCCL assumes (topo.cc lines 60-84, topo.h lines 25-34); every two
  CPUs of one host are joined (``ncclTopoConnectCpus``, topo.cc lines 270-283).

Static topology files (``NCCL_TOPO_FILE``, as clouds ship them) hold the PCIe tree for NCCL to fill in at run time:
GPUs and NICs may be bare ``<pci>`` of class 0x03 and 0x02, and GPUs list no NVLink (NVML gives them). Their devices
are numbered in bus-id order with the ``--gpu`` and ``--nic`` models, and ``--nvswitch`` wires the NVLinks
(:func:`_static_endpoints`, :func:`_unlisted_nvlinks`). A NIC's protocol comes from rdma-core's device names or
Amazon's PCI vendor id, and EFA devices are grouped per GPU as aws-ofi-nccl presents them (:func:`_group_efa_nics`).

``nvidia-smi topo -m``
----------------------
The text matrix: a header of ``GPU0 .. GPUn NIC0 .. NICm CPU Affinity NUMA Affinity GPU NUMA ID`` (older drivers
name NIC columns by device, ``mlx5_0``), one row per GPU and per NIC with ``X``, ``NV#``, ``PIX``, ``PXB``, ``PHB``,
``NODE``, ``SYS`` (``SOC`` on old drivers), and a ``NIC Legend:`` mapping ``NIC0`` to ``mlx5_0``. It names no GPU,
NIC or CPU model and no link speed, so the GPU preset is required, the NIC preset too when there are NICs, and the
PCIe generation is the GPU preset's. The PCIe tree is rebuilt to give exactly the matrix's classes (see
:func:`template_from_nvidia_smi`) and checked against it.
"""

from __future__ import annotations

import re
import textwrap
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collsim.files import write_atomic
from collsim.topology.errors import TopologyError, TopologyWarning
from collsim.topology.generators import NVSWITCH_BY_NVLINK
from collsim.topology.presets import PresetLibrary, load_presets
from collsim.topology.template import topology_from_template

__all__ = [
    "MAX_INPUT_CHARS",
    "NCCL_SOURCE",
    "format_template",
    "template_from_nccl_xml",
    "template_from_nvidia_smi",
    "write_template",
]

#: The NCCL release whose sources this module follows (file and line numbers in the docstrings are of this tag).
NCCL_SOURCE = "NCCL v2.30.7-1"
#: Largest input read, in characters (an NCCL dump of a 72-GPU rack is well under 1 MiB).
MAX_INPUT_CHARS = 4 * 1024 * 1024
#: Most XML elements and nesting depth accepted (NCCL's own parser: xml.h MAX_SUBS 640 children per element).
MAX_ELEMENTS = 100_000
MAX_DEPTH = 64

# ---------------------------------------------------------------------------------------------------- shared parts
#: NCCL's PCIe per-lane rates by ``link_speed`` string, in 100 Mb/s per lane, in NCCL's order (its lookup takes the
#: first key that is a prefix of the value): ``kvDictPciGen``, NCCL v2.30.7-1 src/graph/topo.cc lines 545-556.
_NCCL_PCI_GEN: tuple[tuple[str, int], ...] = (
    ("2.5 GT/s", 15),
    ("5 GT/s", 30),
    ("8 GT/s", 60),
    ("16 GT/s", 120),
    ("32 GT/s", 240),
    ("2.5 GT/s PCIe", 15),
    ("5.0 GT/s PCIe", 30),
    ("8.0 GT/s PCIe", 60),
    ("16.0 GT/s PCIe", 120),
    ("32.0 GT/s PCIe", 240),
    ("64.0 GT/s PCIe", 480),
)
_NCCL_PCI_FALLBACK = 60  # kvDictPciGen's {NULL, 60}: an unknown speed is taken as Gen3 (topo.cc line 556)
#: PCIe generation of each NCCL per-lane rate (100 Mb/s units): Gen1 2.5 GT/s ... Gen6 64 GT/s.
_GEN_OF_RATE = {15: 1, 30: 2, 60: 3, 120: 4, 240: 5, 480: 6}
_RATE_OF_GEN = {gen: rate for rate, gen in _GEN_OF_RATE.items()}
_PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)

#: NCCL's PCI class prefixes (``kvDictPciClass``, topo.cc lines 538-544), matched in this order; no match: a bridge.
_NCCL_PCI_CLASS: tuple[tuple[str, str], ...] = (
    ("0x060400", "pci"),
    ("0x080100", "pci"),
    ("0x068000", "nvswitch"),
    ("0x068001", "cpu"),
    ("0x03", "gpu"),
    ("0x02", "nic"),
)
#: The NVLink target NCCL writes when the remote device is not visible (a VM): taken as an NVSwitch (xml.cc 1044).
_INVISIBLE_TARGET = "fffffff:ffff:ff"

#: Which elements each element may hold: NCCL's loader (xml.cc lines 344-405, the handlers of ncclTopoXmlLoad*).
_CHILDREN: dict[str, tuple[str, ...]] = {
    "system": ("cpu",),
    "cpu": ("pci", "nic"),
    "pci": ("pci", "gpu", "nic", "pcilink"),
    "gpu": ("nvlink", "c2c"),
    "nic": ("net",),
    "net": (),
    "nvlink": (),
    "pcilink": (),
    "c2c": (),
}

#: The CPU preset whose socket link is the inter-socket bandwidth NCCL gives a CPU class (topo.cc lines 60-84 with
#: topo.h lines 26-30: AMD 16, Intel ERP 40, SRP 22, SKL 10, BDW 6 GB/s; the link presets carry the same values):
#: NCCL class -> (preset, why).
_CPU_BY_NCCL_CLASS: dict[str, tuple[str, str]] = {
    "amd": ("epyc-7742", "AMD: NCCL AMD_BW 16 GB/s between sockets = amd-if"),
    "amd-gen5": (
        "epyc-9654",
        "AMD with PCIe Gen5 links in the dump (Zen 4 and later; the EPYC 7742 is Gen4): NCCL AMD_BW 16 GB/s between "
        "sockets = amd-if; the EPYC 9654 stands in: pass --cpu for your part",
    ),
    "intel-erp": (
        "xeon-8480",
        "Intel Emerald Rapids (family 6, model >= 0xCF): NCCL ERP_QPI_BW 40 GB/s; no preset, the Sapphire Rapids "
        "xeon-8480 (upi-spr, 22 GB/s) stands in: pass --cpu for your part",
    ),
    "intel-srp": ("xeon-8480", "Intel Sapphire Rapids (family 6, model >= 0x8F): NCCL SRP_QPI_BW 22 GB/s = upi-spr"),
    "intel-skl": ("generic-x86", "Intel Skylake class (family 6, model >= 0x55): NCCL SKL_QPI_BW 10 GB/s = upi-skl"),
    "intel-bdw": ("xeon-e5-2680v4", "Intel Broadwell class (older models): NCCL BDW_QPI_BW 6 GB/s = qpi-bdw"),
    "arm": ("grace", "Arm (arch arm64): NCCL ARM_BW 6 GB/s between sockets = grace-socket; the grace preset (GH200, "
            "GB200) stands in for any Arm host: pass --cpu for another part"),
}
#: The CPU preset standing in where nvidia-smi names no CPU and --cpu is not given.
_DEFAULT_SMI_CPU = "generic-x86"


def _q(value: Any, limit: int = 60) -> str:
    """A value for a message, cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class _Device:
    name: str
    kind: str
    preset: str | None = None
    spec: dict[str, Any] | None = None
    notes: str = ""

    def entry(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.preset is not None:
            out["preset"] = self.preset
        if self.spec:
            out["spec"] = dict(self.spec)
        if self.notes:
            out["notes"] = self.notes
        return out


@dataclass
class _Link:
    a: str
    b: str
    preset: str
    count: int = 1
    bandwidth: str | None = None  # raw bandwidth override per link, a unit string
    notes: str = ""


@dataclass
class _PcieLink:
    """One PCIe link as NCCL sees it: preset, raw-bandwidth override and the note saying why."""

    preset: str
    bandwidth: str | None
    notes: str


def _pcie_link(rate: int, width: int, presets: PresetLibrary, what: str) -> _PcieLink:
    """The links.yaml PCIe preset (and bandwidth override) for ``width`` lanes at NCCL's per-lane ``rate``.

    Parameters
    ----------
    rate : int
        Per-lane rate in NCCL's unit, 100 Mb/s (``kvDictPciGen``: 60 Gen3 ... 480 Gen6).
    width : int
        Lanes.
    presets : PresetLibrary
        For the ``pcie3`` .. ``pcie5`` presets (x16 each).
    what : str
        Where the rate and width come from, for the note.

    Returns
    -------
    _PcieLink
        The preset of the generation (Gen1/2 use pcie3's, Gen6 pcie5's figures) and, where the link is not that
        preset's x16, a raw ``bandwidth`` such that bandwidth x efficiency is NCCL's ``width * rate / 80`` GB/s.
    """
    gen = _GEN_OF_RATE[rate]
    nccl_bw = width * rate / 80 * 1e9  # bytes/s: lanes x (rate x 100e6 bit/s) / 8 bits per byte = width*rate/80 GB/s
    preset = f"pcie{min(max(gen, 3), 5)}"
    lk = presets.get("links", preset, None, "links")
    effective = float(lk["bandwidth"]) * float(lk["efficiency"])
    note = f"{what}: PCIe Gen{gen} x{width}; NCCL: {width} x {rate} / 80 = {nccl_bw / 1e9:g} GB/s (topo.cc 657)"
    if abs(effective - nccl_bw) <= 1e-6 * nccl_bw:
        return _PcieLink(
            preset,
            None,
            f"{note} = {preset} ({float(lk['bandwidth']) / 1e9:.4g} GB/s raw x {float(lk['efficiency']):.4g})",
        )
    raw = nccl_bw / float(lk["efficiency"])  # raw bytes/s whose achieved part (x efficiency) is NCCL's figure
    return _PcieLink(
        preset,
        f"{raw / 1e9:.10g}GB/s",
        f"{note}: {preset} with bandwidth {raw / 1e9:.6g} GB/s raw (x {float(lk['efficiency']):.4g} = NCCL's figure)",
    )


def _nvswitch_spec(nvlink: str, switches: int | None, gpu_preset: str) -> tuple[dict[str, Any], str]:
    """The spec of the aggregated NVSwitch device for GPUs whose NVLink preset is ``nvlink``, and its note."""
    known = NVSWITCH_BY_NVLINK.get(nvlink)
    if known is None:
        spec: dict[str, Any] = {"physical_switches": switches or 1, "multicast": False}
        return spec, (
            f"NVSwitch of {nvlink} GPUs ({gpu_preset}): collsim knows no generation for it (NVSWITCH_BY_NVLINK in "
            "collsim/topology/generators.py); multicast false (no NVLS)"
        )
    spec = dict(known["spec"])
    note = f"generation and multicast from the GPU preset's NVLink ({gpu_preset}: {nvlink}): {known['source']}"
    if switches is not None and switches != spec["physical_switches"]:
        board = spec["physical_switches"]
        note += f"; physical_switches {switches}: the distinct NVSwitch targets in the file (the board: {board})"
        spec["physical_switches"] = switches
    return spec, note


def _cpu_links(cpus: Sequence[_Device], hosts: Sequence[int], presets: PresetLibrary) -> list[_Link]:
    """Every two CPUs of one host joined by the first one's socket link (NCCL's ncclTopoConnectCpus, topo.cc 270)."""
    out: list[_Link] = []
    for i, a in enumerate(cpus):
        for j in range(i + 1, len(cpus)):
            if hosts[i] != hosts[j]:
                continue
            b = cpus[j]
            assert a.preset is not None
            link = str(presets.cpus[a.preset]["socket_link"])
            out.append(
                _Link(
                    a.name, b.name, link, notes=f"between sockets: {a.preset}'s socket_link (NCCL ncclTopoConnectCpus)"
                )
            )
    return out


def _group_links(links: Sequence[_Link]) -> list[dict[str, Any]]:
    """Template link entries: links that differ only in ``a`` share one entry with a list of ``a``."""
    groups: dict[tuple[str, str, int, str | None, str], list[str]] = {}
    for lk in links:
        groups.setdefault((lk.b, lk.preset, lk.count, lk.bandwidth, lk.notes), []).append(lk.a)
    out: list[dict[str, Any]] = []
    for (b, preset, count, bandwidth, notes), members in groups.items():
        entry: dict[str, Any] = {"a": members[0] if len(members) == 1 else members, "b": b, "preset": preset}
        if count != 1:
            entry["count"] = count
        if bandwidth is not None:
            entry["bandwidth"] = bandwidth
        if notes:
            entry["notes"] = notes
        out.append(entry)
    return out


def _assemble(
    name: str, description: str, source: str, notes: Sequence[str], devices: Sequence[_Device], links: Sequence[_Link]
) -> dict[str, Any]:
    order = {"gpu": 0, "nvswitch": 1, "pcie_switch": 2, "nic": 3, "cpu": 4}
    devs = sorted(devices, key=lambda d: order[d.kind])  # stable: each kind keeps its order
    return {
        "name": name,
        "description": description,
        "source": source,
        "notes": "\n".join(notes),
        "devices": [d.entry() for d in devs],
        "links": _group_links(links),
    }


def _check_builds(template: Mapping[str, Any], presets: PresetLibrary, file: str | Path | None) -> Any:
    """Build the template (one node) and return the Topology; a failure names the input file."""
    try:
        return topology_from_template(template, file=file, presets=presets)
    except TopologyError as exc:
        raise TopologyError(
            f"the imported template does not build: {exc.message}", file=file, field=exc.field
        ) from None


def _preset(presets: PresetLibrary, library: str, name: str, file: str | Path | None, option: str) -> dict[str, Any]:
    return presets.get(library, name, file, option)


# ------------------------------------------------------------------------------------------------------------- XML
def _refuse_declarations(text: str, file: str | Path | None) -> None:
    """Refuse ``<!DOCTYPE``, ``<!ENTITY`` (and any other ``<!`` declaration but comments and CDATA): entity
    expansion (billion laughs, external entities) needs them, and NCCL's files have none (its parser, xml.cc lines
    142-195, knows elements and comments only)."""
    m = re.search(r"<!(?!--|\[CDATA\[)", text)
    if m:
        line = text.count("\n", 0, m.start()) + 1
        decl = text[m.start() : m.start() + 12].split()[0] if text[m.start() :].strip() else "<!"
        raise TopologyError(
            f"{_q(decl, 20)}: DOCTYPE and ENTITY declarations are refused (entity expansion); an NCCL topology "
            "dump has none",
            file=file,
            field=f"line {line}",
        )


def _parse_xml(text: str, file: str | Path | None) -> ET.Element:
    if len(text) > MAX_INPUT_CHARS:
        raise TopologyError(f"{len(text)} characters; at most {MAX_INPUT_CHARS} are read", file=file)
    if not text.strip():
        raise TopologyError('empty file; expected NCCL\'s topology XML (<system version="1">...)', file=file)
    _refuse_declarations(text, file)
    text = re.sub(r"^\s*<\?xml[^>]*\?>", "", text, count=1)  # the declaration's encoding does not apply to text
    try:
        try:
            import defusedxml.ElementTree as defused  # optional: the same guard, from the package that names it
        except ImportError:
            root = ET.fromstring(text)
        else:
            root = defused.fromstring(text, forbid_dtd=True)
    except ET.ParseError as exc:
        line, col = exc.position
        msg = re.sub(r": line \d+, column \d+$", "", str(exc))
        raise TopologyError(f"malformed XML: {msg}", file=file, field=f"line {line}, column {col + 1}") from None
    except ValueError as exc:  # defusedxml's DTD/entity refusals
        raise TopologyError(f"refused XML: {exc}", file=file) from None
    return root


def _el_path(parent: str, el: ET.Element, index: int) -> str:
    key = {"cpu": "numaid", "pci": "busid", "gpu": "dev", "net": "name", "nvlink": "target"}.get(el.tag)
    value = el.get(key) if key else None
    label = (
        f"{el.tag}[{key}={value}]" if value is not None else (f"{el.tag}[{index}]" if el.tag != "system" else el.tag)
    )
    return f"{parent}/{label}" if parent else label


@dataclass
class _XNode:
    """An element of the NCCL XML kept for building: a PCIe switch, a GPU, a NIC (one per <net>) or a CPU."""

    kind: str  # "cpu", "switch", "gpu", "nic"
    path: str
    el: ET.Element
    parent: _XNode | None
    children: list[_XNode] = field(default_factory=list)
    link: tuple[int, int, str] | None = None  # (rate, width, what) of the link to the parent; None: CPU-local
    name: str = ""
    busid: str = ""  # of the <pci> (GPUs; bare GPUs and NICs of a static file)
    pci_id: str = ""  # vendor:device of the <pci> (GPUs, NICs)
    host: int = 0  # the host (its CPU's host_hash, in order of appearance) of a dump NCCL fused over several (MNNVL)


def _check_tree(root: ET.Element, file: str | Path | None) -> None:
    """Tags, nesting, text and size: every element one NCCL's loader knows where it is."""
    if root.tag != "system":
        raise TopologyError(
            f"the root element is <{_q(root.tag, 30)}>; NCCL's topology XML starts with <system>",
            file=file,
            field=root.tag,
        )
    count = 0
    stack: list[tuple[ET.Element, str, int]] = [(root, "system", 1)]
    while stack:
        el, path, depth = stack.pop()
        count += 1
        if count > MAX_ELEMENTS:
            raise TopologyError(f"more than {MAX_ELEMENTS} elements", file=file)
        if depth > MAX_DEPTH:
            raise TopologyError(f"nested deeper than {MAX_DEPTH} levels", file=file, field=path)
        if el.text and el.text.strip():
            raise TopologyError(
                f"unexpected text {_q(el.text.strip(), 30)} (NCCL's elements hold none)", file=file, field=path
            )
        allowed = _CHILDREN[el.tag]
        children = list(el)
        pushed: list[tuple[ET.Element, str, int]] = []
        for i, child in enumerate(children):
            if child.tail and child.tail.strip():
                raise TopologyError(f"unexpected text {_q(child.tail.strip(), 30)}", file=file, field=path)
            if not isinstance(child.tag, str) or child.tag not in allowed:
                valid = ", ".join(f"<{t}>" for t in allowed) or "nothing"
                tag = str(child.tag)[:30]
                raise TopologyError(
                    f"unknown element <{tag}> in <{el.tag}>; valid here: {valid} (NCCL's loader, "
                    "xml.cc lines 344-405)",
                    file=file,
                    field=path,
                )
            pushed.append((child, _el_path(path, child, i), depth + 1))
        stack.extend(reversed(pushed))  # document order: the first bad element is the one reported


def _attr(el: ET.Element, key: str, path: str, file: str | Path | None, why: str = "") -> str:
    value = el.get(key)
    if value is None:
        have = ", ".join(el.attrib) or "none"
        raise TopologyError(
            f"missing attribute {key!r}{f' ({why})' if why else ''}; it has: {have}", file=file, field=path
        )
    return value


_INT = re.compile(r"^\s*(-?)(0[xX][0-9a-fA-F]{1,16}|\d{1,18})\s*$")


def _int_attr(
    el: ET.Element,
    key: str,
    path: str,
    file: str | Path | None,
    *,
    default: int | None = None,
    lo: int | None = None,
    why: str = "",
) -> int:
    """An integer attribute, decimal or 0x hex (NCCL reads them with strtol base 0, xml.h lines 112-117)."""
    raw = el.get(key)
    if raw is None:
        if default is not None:
            return default
        _attr(el, key, path, file, why)
    assert raw is not None
    m = _INT.match(raw)
    if not m:
        raise TopologyError(f"{key}={_q(raw)}: expected an integer", file=file, field=path)
    digits = m.group(2)
    value = int(digits, 16) if digits[:2].lower() == "0x" else int(digits)
    value = -value if m.group(1) else value
    if lo is not None and value < lo:
        raise TopologyError(f"{key}={_q(raw)}: expected an integer >= {lo}", file=file, field=path)
    return value


_HEX = re.compile(r"^0x[0-9a-fA-F]{1,8}$")
_BUSID = re.compile(r"^[0-9a-fA-F]{1,8}:[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}\.[0-7]$")


def _pci_class(el: ET.Element, path: str, file: str | Path | None) -> str:
    """NCCL's device type of a <pci> by its class (kvDictPciClass prefixes): pci, nvswitch, cpu, gpu or nic."""
    why = ""
    if el.get("class") is None and not list(el):  # NCCL fills the class in from sysfs (xml.cc ncclTopoGetXmlFromSys)
        why = ("a file that only places PCI addresses on NUMA nodes, as some NCCL_TOPO_FILEs do, names no devices to "
               "import: dump the machine's own view with NCCL_TOPO_DUMP_FILE, or use nvidia-smi topo -m")  # fmt: skip
    cls = _attr(el, "class", path, file, why).strip().lower()
    if not _HEX.match(cls):
        raise TopologyError(f"class={_q(cls)}: expected a PCI class such as 0x060400", file=file, field=path)
    for prefix, kind in _NCCL_PCI_CLASS:
        if cls.startswith(prefix):
            return kind
    return "pci"


def _link_of(el: ET.Element, path: str, file: str | Path | None, notes: list[str]) -> tuple[int, int, str]:
    """(rate, width, what) of a <pci>'s link to its parent (topo.cc lines 650-658)."""
    speed = _attr(el, "link_speed", path, file, "NCCL reads it for every <pci>, topo.cc line 653").strip()
    width_raw = _attr(el, "link_width", path, file, "NCCL reads it for every <pci>, topo.cc line 652").strip()
    rate = None
    for key, value in _NCCL_PCI_GEN:
        if speed.startswith(key):
            rate = value
            break
    if rate is None:
        if speed and not speed.lower().startswith("unknown"):
            known = ", ".join(sorted({k for k, _ in _NCCL_PCI_GEN}))
            raise TopologyError(
                f"link_speed={_q(speed)}: expected one of {known} (NCCL's kvDictPciGen)", file=file, field=path
            )
        rate = _NCCL_PCI_FALLBACK
        notes.append(f"{path}: link_speed {speed!r} taken as Gen3, NCCL's fallback (kvDictPciGen {{NULL, 60}})")
    if width_raw == "":
        width = 0
    else:
        m = _INT.match(width_raw)
        if not m or m.group(1):
            raise TopologyError(f"link_width={_q(width_raw)}: expected a lane count", file=file, field=path)
        width = int(m.group(2), 0) if m.group(2)[:2].lower() == "0x" else int(m.group(2))
    if width == 0:
        width = 16  # NCCL: "if (width == 0) width = 16" (topo.cc line 655)
    if width not in _PCIE_WIDTHS:
        raise TopologyError(
            f"link_width={width}: expected one of {', '.join(map(str, _PCIE_WIDTHS))}", file=file, field=path
        )
    return rate, width, f"link_speed {speed!r}, link_width {width_raw!r}"


def _bcm_gen(el: ET.Element, level: int) -> int:
    """NCCL's getBcmGen (topo.cc lines 199-203) on a <pci>'s vendor/device/subsystem ids: 4, 5 or 0."""
    ids = []
    for key in ("vendor", "device", "subsystem_vendor", "subsystem_device"):
        raw = (el.get(key) or "0").strip()
        try:
            ids.append(int(raw, 16) if raw.lower().startswith("0x") else int(raw))
        except ValueError:
            return 0
    dev_id = (ids[0] << 48) + (ids[1] << 32) + (ids[2] << 16) + ids[3]
    if dev_id & 0xFFFFFFFFFFFFF000 == 0x1000C0101000A000:
        return 4
    if dev_id & 0xFFFFFFFFFFFFF000 == (0x1000C03010000000 | level * 0x1000):
        return 5
    return 0


def _flatten_bcm(node: _XNode, notes: list[str]) -> None:
    """Merge Broadcom PEX sub-switches into their parent switch as NCCL does (ncclTopoFlattenBcmSwitches)."""
    stack = [node]
    while stack:
        sw = stack.pop()
        if sw.kind == "switch":
            gen = _bcm_gen(sw.el, 0)
            if gen:
                merged: list[_XNode] = []
                for child in sw.children:
                    if child.kind == "switch" and _bcm_gen(child.el, 1) == gen:
                        notes.append(
                            f"{child.path}: Broadcom PEX Gen{gen} sub-switch merged into its parent switch, "
                            "as NCCL does (ncclTopoFlattenBcmSwitches, topo.cc lines 195-268)"
                        )
                        for grand in child.children:
                            grand.parent = sw
                            merged.append(grand)
                    else:
                        merged.append(child)
                sw.children = merged
        stack.extend(sw.children)


def _has_endpoint(node: _XNode, kinds: tuple[str, ...] = ("gpu", "nic")) -> bool:
    """Whether ``node`` or a node below it is of one of ``kinds``."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.kind in kinds:
            return True
        stack.extend(n.children)
    return False


def _gpu_preset_by_pci(presets: PresetLibrary, file: str | Path | None) -> dict[str, str]:
    """PCI ``vendor:device`` id -> GPU preset, from the presets' ``pci_device_ids``."""
    out: dict[str, str] = {}
    for name in sorted(presets.gpus):
        for pid in presets.gpus[name].get("pci_device_ids") or ():
            if pid in out:
                raise TopologyError(
                    f"PCI id {pid} is claimed by GPU presets {out[pid]} and {name}", file=file, field="pci_device_ids"
                )
            out[pid] = name
    return out


def _hexid(el: ET.Element, key: str) -> str | None:
    raw = (el.get(key) or "").strip().lower()
    if not _HEX.match(raw):
        return None
    return f"{int(raw, 16):04x}"


def _nccl_cpu_class(el: ET.Element, path: str, file: str | Path | None) -> str:
    """NCCL's CPU class of a <cpu> (ncclTopoAddCpu, topo.cc lines 738-751) for the preset table."""
    why = "to infer the CPU preset; or give --cpu"
    arch = _attr(el, "arch", path, file, why).strip()
    if arch.startswith("arm64"):
        return "arm"
    if not arch.startswith("x86_64"):
        raise TopologyError(
            f"arch={_q(arch)}: collsim has CPU presets for x86_64 and arm64 only (NCCL's kvDictCpuArch: x86_64, "
            "arm64, ppc64); give --cpu PRESET",
            file=file,
            field=path,
        )
    vendor = _attr(el, "vendor", path, file, why)
    if vendor.startswith("AuthenticAMD"):
        return "amd"
    if not vendor.startswith("GenuineIntel"):
        raise TopologyError(
            f"vendor={_q(vendor)}: no CPU preset for it (GenuineIntel and AuthenticAMD have); give --cpu PRESET",
            file=file,
            field=path,
        )
    family = _int_attr(el, "familyid", path, file, why=why)
    model = _int_attr(el, "modelid", path, file, why=why)
    if family == 6 and model >= 0xCF:
        return "intel-erp"
    if family == 6 and model >= 0x8F:
        return "intel-srp"
    if family == 6 and model >= 0x55:
        return "intel-skl"
    return "intel-bdw"


#: RDMA device names by rdma-core's persistent naming (udev ``rdma_rename``, kernel-boot/rdma-persistent-naming.rules:
#: "Infiniband - ib*, RoCE - roce*, iWARP - iw*, OPA - opa*, Default (unknown protocol) - rdma*", then o/s/p/v
#: for onboard, slot, PCI path and guid names, P<domain> before p for a PCI domain other than 0, as Azure's):
#: the protocol the prefix says. ``mlx5_0`` (the kernel's name) says none.
_RDMA_NAME = re.compile(r"^(ib|roce|iw|opa|rdma)[ospvgP][0-9a-f]")
#: Amazon's PCI vendor id, which EFA devices carry (the id NCCL's net_socket.cc tests for AWS).
_AMAZON_PCI_VENDOR = "1d0f"


def _nic_protocol(name: str, pci_id: str) -> str | None:
    """What a NIC's <net name> (rdma-core's persistent names) or its PCI vendor says of its protocol: ``ib``,
    ``roce``, ``efa`` (an ``rdma*`` name, no protocol the kernel knows, or Amazon's vendor id) or None."""
    if pci_id.split(":")[0] == _AMAZON_PCI_VENDOR:
        return "efa"
    m = _RDMA_NAME.match(name)
    if m is None:
        return None
    return {"ib": "ib", "roce": "roce", "rdma": "efa"}.get(m.group(1))


def _nic_preset_for(
    speed: float, gdr: bool, presets: PresetLibrary, file: str | Path | None, path: str, protocol: str | None = None
) -> tuple[str, str]:
    """The one shipped NIC preset of the XML's speed, and why: with ``protocol`` (:func:`_nic_protocol`) among
    that protocol's RDMA presets (``efa``: those reached through aws-ofi-nccl); otherwise link kind ``ib`` when the
    NIC does GPUDirect RDMA, else ``eth`` (the dump does not tell InfiniBand from RoCE, nor a NIC's model)."""

    def kind_of(rec: Mapping[str, Any]) -> str:
        return str(presets.links[rec["link"]]["kind"])

    if protocol == "efa":
        match = [n for n, r in presets.nics.items() if r.get("nccl_net_plugin") == "aws-ofi-nccl"]
        what = "EFA (an rdma* device name, rdma-core's name for a protocol it does not know, or Amazon's PCI vendor)"
    elif protocol in ("ib", "roce"):
        match = [n for n, r in presets.nics.items()
                 if kind_of(r) == protocol and r.get("rdma") and not r.get("nccl_net_plugin")]  # fmt: skip
        what = f"{'InfiniBand' if protocol == 'ib' else 'RoCE'} (the device name's prefix, rdma-core's naming)"
    else:
        kind = "ib" if gdr else "eth"
        match = [n for n, r in presets.nics.items() if kind_of(r) == kind]
        what = kind
    found = sorted(n for n in match if abs(float(presets.nics[n]["speed"]) - speed) <= 1e-9 * speed)
    if len(found) != 1:
        said = f"{' with GPUDirect RDMA' if gdr else ''}: shipped {what}" if protocol is None else f", {what}: shipped"
        hint = ("; gdr=\"0\" only says GPUDirect RDMA is off (nvidia-peermem or dma-buf missing), not that the card "
                "is Ethernet: an InfiniBand or RoCE card is its RDMA preset (--nic, e.g. connectx-5-edr), with "
                "cluster.fabric.gpudirect: false" if protocol is None and not gdr else "")  # fmt: skip
        raise TopologyError(
            f"NIC of {speed * 8 / 1e9:g} Gb/s{said} NIC presets of that speed: {', '.join(found) or 'none'}; "
            f"give --nic PRESET{hint}",  # bytes/s x 8 bits / 1e9 = Gb/s
            file=file,
            field=path,
        )
    return found[0], f"the shipped {what} NIC preset of that speed"


@dataclass
class _XmlTree:
    """What :func:`_walk_nccl_xml` keeps of an NCCL topology dump: its CPUs (each with its PCIe tree as
    :class:`_XNode` children), GPUs, NICs and PCIe switches, and each ``host_hash``'s host index."""

    cpus: list[_XNode]
    gpus: list[_XNode]
    nics: list[_XNode]
    switches: list[_XNode]
    hosts: dict[str, int]
    #: <pci> of GPU (0x03) or NIC (0x02) class without a <gpu> or <nic>, not attached to their parents: the devices of
    #: a static topology file (NCCL_TOPO_FILE), which NCCL fills in at run time; see :func:`_static_endpoints`
    bare: list[_XNode] = field(default_factory=list)


def _pci_busid(el: ET.Element, path: str, file: str | Path | None, busids: dict[str, str]) -> str:
    """A <pci>'s bus id, lower case, recorded in ``busids`` (bus id -> path); a malformed or repeated one is an
    error naming the element."""
    busid = _attr(el, "busid", path, file).strip().lower()
    if not _BUSID.match(busid):
        raise TopologyError(f"busid={_q(busid)}: expected a PCI bus id such as 0000:0b:00.0", file=file, field=path)
    if busid in busids:
        raise TopologyError(f"busid {busid} given twice (first at {busids[busid]})", file=file, field=path)
    busids[busid] = path
    return busid


def _xml_endpoint(
    el: ET.Element,
    path: str,
    parent: _XNode,
    link: tuple[int, int, str],
    busid: str,
    file: str | Path | None,
    notes: list[str],
    gpus: list[_XNode],
    nics: list[_XNode],
) -> None:
    """The GPU or the NIC (one node per <net> port) a <pci> holds, added under ``parent`` and to ``gpus`` or
    ``nics``; a <pci> holding anything beside its one GPU or NIC is an error naming it."""
    subs = list(el)
    tags = [s.tag for s in subs]
    if tags.count("gpu") + tags.count("nic") > 1 or "pci" in tags:
        raise TopologyError(
            "a <pci> holding a <gpu> or a <nic> holds nothing else (one GPU or one NIC per PCI device; "
            "MLOPart GPUs are not supported)",
            file=file,
            field=path,
        )
    sub = subs[tags.index("gpu" if "gpu" in tags else "nic")]
    if sub.tag == "gpu":
        pci_id = f"{_hexid(el, 'vendor')}:{_hexid(el, 'device')}"
        gnode = _XNode("gpu", _el_path(path, sub, 0), sub, parent, link=link, busid=busid, pci_id=pci_id,
                       host=parent.host)
        parent.children.append(gnode)
        gpus.append(gnode)
        return
    nets = list(sub)
    if not nets:
        notes.append(f"{path}: a <nic> without <net> is ignored (NCCL adds no network device)")
    if len(nets) > 1:
        # NCCL merges the ports of one NIC into one network device of their summed speed (NCCL_NET_MERGE_LEVEL,
        # default PORT: topo.cc ncclTopoAutoMerge; net_ib.cc names it "mlx5_0+mlx5_1" and sums the speeds) except
        # while it writes a dump (topo.cc ncclTopoProcessNet: usePhysicalDevices), and the ports share the card's
        # one PCIe link: one collsim NIC on that link
        names = [str(net.get("name") or "") for net in nets]
        speeds = [int(float(net.get("speed") or 0)) for net in nets]
        merged = ET.Element("net", {**nets[0].attrib, "name": "+".join(names), "speed": str(sum(speeds))})
        notes.append(
            f"{path}: {len(nets)} ports of one NIC ({', '.join(names)}): one NIC of their summed speed "
            f"({sum(speeds)} Mb/s) on the card's one PCIe link, as NCCL merges a NIC's ports (NCCL_NET_MERGE_LEVEL "
            "default PORT; set NCCL_NET_MERGE_LEVEL=LOC and model a NIC a port if yours does not)"
        )
        nets = [merged]
    for ni, net in enumerate(nets):
        nnode = _XNode("nic", _el_path(path, net, ni), net, parent, link=link,
                       pci_id=f"{_hexid(el, 'vendor')}:{_hexid(el, 'device')}", host=parent.host)  # fmt: skip
        parent.children.append(nnode)
        nics.append(nnode)


def _walk_nccl_xml(root: ET.Element, file: str | Path | None, notes: list[str]) -> _XmlTree:
    """The CPUs of an NCCL dump and the PCIe tree under each, depth first; duplicate numaids and bus ids, bad bus
    ids and a <pci> holding more than one GPU or NIC are errors naming the element. GPU- and NIC-class <pci> without
    a <gpu> or <nic> are kept apart (``bare``) where the file has no <gpu> at all (a static topology file), else
    ignored as NCCL ignores them."""
    cpus: list[_XNode] = []
    gpus: list[_XNode] = []
    nics: list[_XNode] = []
    switches: list[_XNode] = []
    bare: list[_XNode] = []
    busids: dict[int, dict[str, str]] = {}  # per host: NCCL fuses the dumps of an NVLink domain's hosts (MNNVL,
    hosts: dict[str, int] = {}  # topo.cc ncclTopoFuseXml), whose like trays repeat bus ids and GPU and net devs
    cpu_keys: dict[tuple[int, int], str] = {}
    for ci, cel in enumerate(root):
        cpath = _el_path("system", cel, ci)
        numaid = _int_attr(cel, "numaid", cpath, file, lo=-1)
        host = hosts.setdefault((cel.get("host_hash") or "").strip().lower(), len(hosts))
        if (host, numaid) in cpu_keys:
            raise TopologyError(
                f"numaid {numaid} given twice (first at {cpu_keys[(host, numaid)]})", file=file, field=cpath
            )
        cpu_keys[(host, numaid)] = cpath
        cnode = _XNode("cpu", cpath, cel, None, host=host)
        cpus.append(cnode)
        stack: list[tuple[ET.Element, str, _XNode]] = []
        for i, child in enumerate(cel):
            stack.append((child, _el_path(cpath, child, i), cnode))
        stack.reverse()
        while stack:
            el, path, parent = stack.pop()
            if el.tag == "nic":  # a NIC without a PCI device, straight on the CPU (virtual NICs; topo.cc 762-773)
                for ni, net in enumerate(el):
                    nnode = _XNode("nic", _el_path(path, net, ni), net, parent, link=None, host=parent.host)
                    parent.children.append(nnode)
                    nics.append(nnode)
                continue
            if el.tag == "pcilink":  # BCM switch peer links: NCCL joins the switches with LINK_LOC; not modelled
                notes.append(f"{path}: <pcilink> (a link between two Broadcom switches) is not modelled")
                continue
            # <pci>
            busid = _pci_busid(el, path, file, busids.setdefault(parent.host, {}))
            kind = _pci_class(el, path, file)
            link = _link_of(el, path, file, notes)
            subs = list(el)
            tags = [s.tag for s in subs]
            if "gpu" in tags or "nic" in tags:
                _xml_endpoint(el, path, parent, link, busid, file, notes, gpus, nics)
                continue
            if kind in ("gpu", "nic") and not subs:
                pci_id = f"{_hexid(el, 'vendor')}:{_hexid(el, 'device')}"
                bare.append(_XNode(kind, path, el, parent, link=link, busid=busid, pci_id=pci_id, host=parent.host))
                continue
            if kind != "pci":
                notes.append(
                    f"{path}: a <pci> of class {el.get('class')} without <gpu> or <nic> is ignored, as NCCL "
                    "does (topo.cc ncclTopoAddPci, lines 636-701)"
                )
                continue
            snode = _XNode("switch", path, el, parent, link=link, host=parent.host)
            parent.children.append(snode)
            switches.append(snode)
            kids = [(s, _el_path(path, s, i), snode) for i, s in enumerate(subs)]
            stack.extend(reversed(kids))
    if gpus:
        for b in bare:
            notes.append(
                f"{b.path}: a <pci> of class {b.el.get('class')} without <{b.kind}> is ignored, as NCCL does "
                "(topo.cc ncclTopoAddPci, lines 636-701)"
            )
        bare = []
    return _XmlTree(cpus, gpus, nics, switches, hosts, bare)


def _static_endpoints(
    tree: _XmlTree, gpu: str | None, gpu_opt: Mapping[str, Any] | None, nic: str | None, presets: PresetLibrary,
    file: str | Path | None, notes: list[str],
) -> bool:
    """Make the GPUs and NICs of a static topology file (NCCL_TOPO_FILE, as clouds ship it: the PCIe tree with bare
    ``<pci>`` of class 0x03 and 0x02, no ``<gpu>``) out of ``tree.bare``, as NCCL does at run time: each GPU it
    finds by bus id and fills from NVML (``ncclTopoFillGpu``, xml.cc lines 1065-1073; ``dev`` is NVML's index, in
    bus id order), each NIC its network plugin reports (``ncclTopoFillNet``, topo.cc line 1632). The file names no
    GPU or NIC model, so ``--gpu`` and (with NICs) ``--nic`` are required. Returns whether the file is one; a file
    with neither ``<gpu>`` nor GPU-class ``<pci>`` is an error."""
    if tree.gpus:
        return False
    bare_gpus = sorted((b for b in tree.bare if b.kind == "gpu"), key=lambda b: (b.host, _busid_key(b.busid)))
    bare_nics = sorted((b for b in tree.bare if b.kind == "nic"), key=lambda b: (b.host, _busid_key(b.busid)))
    if not bare_gpus:
        raise TopologyError(
            "no <gpu> and no <pci> of a GPU's class (0x03) in the file: nothing to import (NCCL dumps the GPUs of "
            "the communicator)",
            file=file,
            field="system",
        )
    static = "a static topology file (NCCL_TOPO_FILE: the PCIe tree, no <gpu>; NCCL fills the devices in at run time)"
    if gpu_opt is None:
        raise TopologyError(f"{static} names no GPU model: give --gpu PRESET", file=file, field="system")
    if bare_nics and nic is None:
        raise TopologyError(
            f"{static} names no NIC model or speed for its {len(bare_nics)} NIC(s): give --nic PRESET",
            file=file,
            field=bare_nics[0].path,
        )
    for i, b in enumerate(bare_gpus):
        b.el = ET.Element("gpu", {"dev": str(i), "sm": str(gpu_opt["sm"])})
    for i, b in enumerate(bare_nics):
        assert nic is not None
        rec = presets.nics[nic]
        mbps = round(float(rec["speed"]) * 8 / 1e6)  # bytes/s x 8 bits / 1e6 = Mb/s, the unit of <net speed>
        b.el = ET.Element("net", {"dev": str(i), "speed": str(mbps), "gdr": "1" if rec.get("rdma") else "0"})
    for b in (*bare_gpus, *bare_nics):
        assert b.parent is not None
        b.parent.children.append(b)
    tree.gpus, tree.nics, tree.bare = bare_gpus, bare_nics, []
    notes.append(
        f"{static}: its {len(bare_gpus)} <pci> of class 0x03 are the GPUs and its {len(bare_nics)} of class 0x02 "
        "the NICs, numbered in bus id order (NVML's, which NCCL's dev follows: xml.cc ncclTopoFillGpu, lines "
        f"1065-1073); GPU model {gpu} (--gpu){f', NIC model {nic} (--nic)' if bare_nics else ''}"
    )
    return True


def _group_efa_nics(tree: _XmlTree, nic: str | None, presets: PresetLibrary, notes: list[str]) -> None:
    """Group EFA devices as AWS's network plugin presents them to NCCL (aws-ofi-nccl ``nccl_ofi_topo_group``,
    src/nccl_ofi_topo.cpp): each GPU counts one group at its nearest ancestor with NICs below it, the NICs go up to
    their nearest ancestor with groups and are split there into that many groups (sizes differing by at most one),
    and NCCL sees each group as one device of the members' summed speed (src/nccl_ofi_rdma.cpp: port speed x group
    size). A group's members sharing one parent give it their links in parallel. Applies where every NIC is EFA
    (:func:`_nic_protocol`, or ``--nic`` an aws-ofi-nccl preset); ``tree.nics`` is replaced in place."""
    if not tree.nics:
        return
    if nic is not None:
        efa = presets.nics[nic].get("nccl_net_plugin") == "aws-ofi-nccl"
    else:
        efa = all(_nic_protocol(n.el.get("name", ""), n.pci_id) == "efa" for n in tree.nics)
    if not efa:
        return

    groups: dict[int, int] = {}  # id(ancestor) -> GPUs counted there
    for g in tree.gpus:
        up = g.parent
        while up is not None and not _has_endpoint(up, ("nic",)):
            up = up.parent
        if up is not None:
            groups[id(up)] = groups.get(id(up), 0) + 1
    lists: dict[int, tuple[_XNode, list[_XNode]]] = {}
    for n in sorted(tree.nics, key=lambda n: int(n.el.get("dev", "0"))):
        up = n.parent
        while up is not None and id(up) not in groups:
            up = up.parent
        key = id(up) if up is not None else id(n)
        lists.setdefault(key, (up or n, []))[1].append(n)
    out: list[_XNode] = []
    grouped = 0
    for key, (_anc, members) in lists.items():
        k = min(groups.get(key, len(members)), len(members))
        sizes = [len(members) // k + (1 if i < len(members) % k else 0) for i in range(k)]
        start = 0
        for size in sizes:
            part, start = members[start:start + size], start + size
            if size == 1:
                out.append(part[0])
                continue
            grouped += 1
            lead = part[0]
            mbps = sum(int(m.el.get("speed", "0") or 0) for m in part)
            el = ET.Element("net", {**lead.el.attrib, "speed": str(mbps)})
            link = lead.link
            if link is not None and all(m.parent is lead.parent and m.link and m.link[0] == link[0] for m in part):
                width = sum(m.link[1] for m in part if m.link)
                link = (link[0], width, f"{size} links in parallel ({link[2]} each)")
            node = _XNode("nic", lead.path, el, lead.parent, link=link, pci_id=lead.pci_id, host=lead.host)
            assert lead.parent is not None
            lead.parent.children = [c for c in lead.parent.children if c not in part] + [node]
            out.append(node)
    if grouped:
        notes.append(
            f"EFA: the {len(tree.nics)} devices grouped into {len(out)} NCCL devices as AWS's plugin groups them "
            "(aws-ofi-nccl nccl_ofi_topo_group: each GPU's nearest EFA devices are one device of their summed "
            "speed; NCCL's channels, trees and NVLS heads see the groups)"
        )
        tree.nics = out


def _busid_key(busid: str) -> tuple[int, ...]:
    """A bus id as numbers (domain, bus, device, function), for NVML's order."""
    return tuple(int(x, 16) for x in re.split(r"[:.]", busid))


def _xml_gpu_devices(
    gpus: list[_XNode], gpu: str | None, gpu_opt: Mapping[str, Any] | None, presets: PresetLibrary,
    file: str | Path | None,
) -> tuple[list[_Device], dict[str, str]]:
    """The GPUs in ``dev`` order (sorted in place and named ``gpu0`` ...), each with its preset (``--gpu``, else
    by PCI id); returns their devices and the preset per GPU name."""
    devs: dict[tuple[int, int], str] = {}
    for g in gpus:
        dev = _int_attr(g.el, "dev", g.path, file, lo=0)
        if (g.host, dev) in devs:  # a host's CUDA devices; a fused (MNNVL) dump repeats them host after host
            raise TopologyError(f"GPU dev {dev} given twice (first at {devs[(g.host, dev)]})", file=file,
                                field=g.path)  # fmt: skip
        devs[(g.host, dev)] = g.path
    gpus.sort(key=lambda g: (g.host, _int_attr(g.el, "dev", g.path, file)))
    by_pci = _gpu_preset_by_pci(presets, file)
    devices: list[_Device] = []
    gpu_presets: dict[str, str] = {}
    for i, g in enumerate(gpus):
        g.name = f"gpu{i}"
        sm = _int_attr(g.el, "sm", g.path, file, lo=1)
        pci_id, busid = g.pci_id, g.busid
        dev = _int_attr(g.el, "dev", g.path, file)
        if gpu_opt is not None:
            assert gpu is not None
            if int(gpu_opt["sm"]) != sm:
                raise TopologyError(
                    f"--gpu {gpu} has sm {gpu_opt['sm']}, the file's GPU sm {sm}", file=file, field=g.path
                )
            preset, why = gpu, "--gpu"
        elif pci_id in by_pci:
            preset = by_pci[pci_id]
            why = f"PCI id {pci_id}: pci_device_ids of {preset} (gpus.yaml)"
            if int(presets.gpus[preset]["sm"]) != sm:
                raise TopologyError(
                    f"sm {sm}, but PCI id {pci_id} is {preset} with sm {presets.gpus[preset]['sm']}",
                    file=file,
                    field=g.path,
                )
        else:
            same = sorted(n for n, r in presets.gpus.items() if int(r["sm"]) == sm)
            raise TopologyError(
                f"no GPU preset has PCI id {pci_id} (gpus.yaml pci_device_ids); give --gpu PRESET (GPU presets with "
                f"sm {sm}: {', '.join(same) or 'none'})",
                file=file,
                field=g.path,
            )
        gpu_presets[g.name] = preset
        devices.append(_Device(g.name, "gpu", preset, notes=f"busid {busid}, dev {dev}, sm {sm}; preset from {why}"))
    return devices, gpu_presets


def _xml_nvlink_targets(
    gpus: list[_XNode], file: str | Path | None, notes: list[str]
) -> tuple[dict[tuple[str, str], dict[str, int]], dict[str, int], set[str]]:
    """What each GPU's <nvlink> elements say: per GPU pair (lower name first) each side's link count, per GPU its
    links to NVSwitches (or NCCL's fallback class, topo.cc lines 844-858), and the distinct NVSwitch bus ids; a bad
    class or target, a second <nvlink> to one GPU and NVLink to a CPU are errors naming the element."""
    gpu_by_busid = {(g.host, g.busid): g for g in gpus}
    to_switch: dict[str, int] = {}
    switch_targets: set[str] = set()
    pairs: dict[tuple[str, str], dict[str, int]] = {}
    for g in gpus:
        for li, nvel in enumerate(g.el):
            if nvel.tag != "nvlink":  # <c2c>: the GPU's link to its CPU (_xml_pcie)
                continue
            lpath = _el_path(g.path, nvel, li)
            count = _int_attr(nvel, "count", lpath, file, lo=1)
            tclass = _attr(nvel, "tclass", lpath, file).strip().lower()
            if not _HEX.match(tclass):
                raise TopologyError(
                    f"tclass={_q(tclass)}: expected a PCI class such as 0x068000", file=file, field=lpath
                )
            target = (nvel.get("target") or "").strip().lower()
            ttype = next((k for p, k in _NCCL_PCI_CLASS if tclass.startswith(p)), "pci")
            if ttype == "gpu":
                target = _attr(nvel, "target", lpath, file).strip().lower()
                other = gpu_by_busid.get((g.host, target))
                if other is None or other is g:
                    raise TopologyError(
                        f"target {target}: no other GPU of this file has that busid", file=file, field=lpath
                    )
                key = (g.name, other.name) if int(g.name[3:]) < int(other.name[3:]) else (other.name, g.name)
                side = pairs.setdefault(key, {})
                if g.name in side:
                    raise TopologyError(f"a second <nvlink> to {target}", file=file, field=lpath)
                side[g.name] = count
            elif ttype == "cpu":
                raise TopologyError(
                    "NVLink to a CPU (tclass 0x068001, IBM POWER) is not modelled", file=file, field=lpath
                )
            else:  # NVSwitch, or NCCL's fallback for another class (topo.cc lines 844-858)
                to_switch[g.name] = to_switch.get(g.name, 0) + count
                if target and target != _INVISIBLE_TARGET:
                    switch_targets.add(target)
    return pairs, to_switch, switch_targets


def _xml_nvlinks(
    gpus: list[_XNode], gpu_presets: Mapping[str, str], presets: PresetLibrary, file: str | Path | None,
    notes: list[str],
) -> tuple[list[_Device], list[_Link]]:
    """The GPUs' NVLinks: pairs wired directly, and the links to NVSwitches summed into one ``nvswitch`` device
    (as NCCL joins them into one node); returns the NVSwitch device (if any) and the links."""
    pairs, to_switch, switch_targets = _xml_nvlink_targets(gpus, file, notes)
    links: list[_Link] = []
    devices: list[_Device] = []
    nvlinks_used: dict[str, int] = {}
    nvlink_presets: set[str] = set()

    def nvlink_of(gname: str, path: str) -> str:
        rec = presets.gpus[gpu_presets[gname]]
        if rec["nvlink"] is None:
            raise TopologyError(
                f"{gname}: GPU preset {gpu_presets[gname]} has no NVLink preset (nvlink: null); its "
                "NVLinks cannot be wired",
                file=file,
                field=path,
            )
        nvlink_presets.add(str(rec["nvlink"]))
        return str(rec["nvlink"])

    g_path = {g.name: g.path for g in gpus}
    for (a, b), side in pairs.items():
        counts = set(side.values())
        if len(counts) > 1:
            raise TopologyError(
                f"{a} lists {side.get(a)} NVLinks to {b}, {b} lists {side.get(b)}", file=file, field=g_path[a]
            )
        n = counts.pop()
        preset = nvlink_of(a, g_path[a])
        links.append(
            _Link(
                a,
                b,
                preset,
                count=n,
                notes=f"<nvlink count={n}> between the two GPUs; {preset}: the GPU preset's nvlink",
            )
        )
        for x in (a, b):
            nvlinks_used[x] = nvlinks_used.get(x, 0) + n
    if to_switch:
        first = next(iter(to_switch))
        nvl = nvlink_of(first, g_path[first])
        for gname in to_switch:
            if nvlink_of(gname, g_path[gname]) != nvl:
                raise TopologyError(
                    "GPUs of different NVLink generations on one NVSwitch", file=file, field=g_path[gname]
                )
        spec, why = _nvswitch_spec(nvl, len(switch_targets) or None, gpu_presets[first])
        devices.append(
            _Device(
                "nvswitch",
                "nvswitch",
                spec=spec,
                notes=f"NVLink targets of class 0x068000: {len(switch_targets)} distinct NVSwitch bus id(s); {why}",
            )
        )
        for gname, n in to_switch.items():
            nvlinks_used[gname] = nvlinks_used.get(gname, 0) + n
            links.append(
                _Link(
                    gname,
                    "nvswitch",
                    nvl,
                    count=n,
                    notes=f"the GPU's <nvlink> counts to NVSwitches "
                    f"summed: {n} (NCCL joins all NVSwitches into one node); {nvl}: the GPU preset's nvlink",
                )
            )
    fewer: dict[tuple[str, int, int], list[str]] = {}  # (preset, used, have) -> GPUs
    for gname, used in nvlinks_used.items():
        have = int(presets.gpus[gpu_presets[gname]]["nvlinks"])
        if used > have:
            raise TopologyError(
                f"{used} NVLinks, but GPU preset {gpu_presets[gname]} has {have}", file=file, field=g_path[gname]
            )
        if used < have:
            fewer.setdefault((gpu_presets[gname], used, have), []).append(gname)
    for (preset, used, have), names in fewer.items():
        notes.append(
            f"{', '.join(names)}: {used} NVLinks in the dump where GPU preset {preset} has {have}: "
            + _fewer_nvlinks(preset, used, "a bridged pair; ")
        )
    return devices, links


def _unlisted_nvlinks(
    gpus: list[_XNode], gpu_presets: Mapping[str, str], presets: PresetLibrary, file: str | Path | None,
    notes: list[str], nvswitch: bool, listed: list[_Link],
) -> tuple[list[_Device], list[_Link]]:
    """NVLinks the file does not list. NCCL reads a GPU's NVLinks from NVML when its <gpu> has no <nvlink>
    (``ncclTopoGetXmlFromGpu``, xml.cc lines 930-933), so a static topology file leaves them out. With ``nvswitch``
    every GPU's NVLinks (its preset's ``nvlinks``, at its ``nvlink`` preset) go to one NVSwitch (an HGX or DGX
    board); without it none are wired, and GPUs whose preset has NVLinks and whose <pci> has no PCI ids (no NCCL
    dump: a static file) get a warning saying how to wire them."""
    if nvswitch and listed:
        raise TopologyError(
            f"--nvswitch: the file lists NVLinks ({listed[0].a} to {listed[0].b}); it is for files that list none "
            "(static topology files)",
            file=file,
            field="system",
        )
    capable = {g.name: gpu_presets[g.name] for g in gpus
               if int(presets.gpus[gpu_presets[g.name]].get("nvlinks") or 0) > 0
               and presets.gpus[gpu_presets[g.name]].get("nvlink")}  # fmt: skip
    if not nvswitch:
        # NCCL's own dump gives every <pci> its vendor and device (xml.cc ncclTopoGetXmlFromSys), so a GPU without
        # them is from a hand-written or static file, whose missing NVLinks NVML would have filled in
        unlisted = any(g.pci_id.startswith("None") for g in gpus)
        if capable and len(gpus) > 1 and unlisted:
            names = sorted(set(capable.values()))
            msg = (f"{file or 'the file'}: no <nvlink> in the file, but GPU preset(s) {', '.join(names)} have "
                   "NVLinks: the template wires none (the GPUs talk over PCIe). A static topology file "
                   "(NCCL_TOPO_FILE) leaves NVLinks to NVML at run time (xml.cc lines 930-933); for an HGX or DGX "
                   "board give --nvswitch, or import NCCL_TOPO_DUMP_FILE's dump of the machine")  # fmt: skip
            warnings.warn(msg, TopologyWarning, stacklevel=3)
            notes.append(msg)
        return [], listed
    missing = [g.name for g in gpus if g.name not in capable]
    if missing:
        raise TopologyError(
            f"--nvswitch: {missing[0]}'s GPU preset {gpu_presets[missing[0]]} has no NVLinks", file=file, field="system"
        )
    nvls = {str(presets.gpus[p]["nvlink"]) for p in capable.values()}
    if len(nvls) > 1:
        raise TopologyError(
            f"--nvswitch: GPUs of different NVLink generations ({', '.join(sorted(nvls))}) on one NVSwitch",
            file=file,
            field="system",
        )
    nvl = nvls.pop()
    first = gpus[0].name
    spec, why = _nvswitch_spec(nvl, None, gpu_presets[first])
    note = f"--nvswitch (the file lists no NVLink; NVML gives them to NCCL); {why}"
    device = _Device("nvswitch", "nvswitch", spec=spec, notes=note)
    links = [
        _Link(g.name, "nvswitch", nvl, count=int(presets.gpus[gpu_presets[g.name]]["nvlinks"]),
              notes=f"--nvswitch: every NVLink of GPU preset {gpu_presets[g.name]} to the NVSwitch; {nvl}: its nvlink")
        for g in gpus
    ]  # fmt: skip
    notes.append(f"--nvswitch: each GPU's NVLinks (its preset's count) wired to one NVSwitch ({spec}); the file "
                 "lists none (NCCL reads them from NVML at run time, xml.cc lines 930-933)")  # fmt: skip
    return [device], links


def _fewer_nvlinks(preset: str, used: int, other_cause: str = "") -> str:
    """The end of the note on GPUs with fewer NVLinks than ``preset`` has: what the template does and how to say so."""
    return (
        f"the template wires {used} (an export part such as the H800 has 8 of the H100's 18; {other_cause}or links "
        f"down). A GPU preset of your own says so: base: {preset}, nvlinks: {used} (README, 'User presets')."
    )


def _xml_nic_devices(
    nics: list[_XNode], nic: str | None, presets: PresetLibrary, file: str | Path | None
) -> list[_Device]:
    """The NICs in ``<net dev>`` order (sorted in place and named ``nic0`` ...), with their presets (``--nic``,
    else the shipped preset of their speed) and the file's speed where the preset's differs."""
    devices: list[_Device] = []
    ndevs: dict[tuple[int, int], str] = {}
    for nn in nics:
        ndev = _int_attr(nn.el, "dev", nn.path, file, lo=0)
        if (nn.host, ndev) in ndevs:
            raise TopologyError(f"net dev {ndev} given twice (first at {ndevs[(nn.host, ndev)]})", file=file,
                                field=nn.path)  # fmt: skip
        ndevs[(nn.host, ndev)] = nn.path
    nics.sort(key=lambda nn: (nn.host, _int_attr(nn.el, "dev", nn.path, file)))
    for i, nn in enumerate(nics):
        nn.name = f"nic{i}"
        mbps = _int_attr(nn.el, "speed", nn.path, file, default=0)
        fallback = ""
        if mbps <= 0:
            mbps = 10000  # NCCL: "if (mbps <= 0) mbps = 10000; // Some NICs define speed = -1" (topo.cc 416-417)
            fallback = " (missing or <= 0: NCCL's 10000)"
        speed = mbps * 1e6 / 8  # Mb/s x 1e6 bits / 8 bits per byte = bytes/s (NCCL: mbps / 8000 GB/s)
        gdr = _int_attr(nn.el, "gdr", nn.path, file, default=0) == 1
        label = nn.el.get("name", "?")
        if nic is not None:
            preset, why = nic, "--nic"
        else:
            preset, why = _nic_preset_for(speed, gdr, presets, file, nn.path, _nic_protocol(label, nn.pci_id))
            why += f" ({'gdr=1' if gdr else 'no gdr'})"
        nic_spec: dict[str, Any] | None = None
        pspeed = float(presets.nics[preset]["speed"])
        if abs(pspeed - speed) > 1e-9 * speed:
            nic_spec = {"speed": f"{mbps / 1000:g}Gb/s" if mbps % 1000 == 0 else f"{mbps}Mb/s"}
            why += f"; speed {nic_spec['speed']} from the file (the preset says {pspeed * 8 / 1e9:g} Gb/s)"
        if label != "?":  # the verbs device name NCCL listed it under (what NCCL_IB_HCA matches)
            nic_spec = {**(nic_spec or {}), "ib_name": label}
        devices.append(
            _Device(
                nn.name,
                "nic",
                preset,
                spec=nic_spec,
                notes=f"<net name={label} dev={nn.el.get('dev')}>, "
                f"speed {mbps} Mb/s{fallback} (x 1e6 bit / 8 bit per byte = {speed / 1e9:g} GB/s); preset from {why}",
            )
        )
    return devices


def _max_link_gen(tree: _XmlTree) -> int:
    """The highest PCIe generation among the dump's GPU, NIC and switch links (0 when none gives one)."""
    rates = [n.link[0] for n in (*tree.gpus, *tree.nics, *tree.switches) if n.link]
    return max((_GEN_OF_RATE[r] for r in rates), default=0)


def _xml_cpu_devices(
    tree: _XmlTree, cpu: str | None, presets: PresetLibrary, file: str | Path | None, notes: list[str]
) -> tuple[list[_Device], list[int]]:
    """The CPU sockets by (host, numaid) (sorted in place and named ``cpu0`` ...), with their presets (``--cpu``,
    else by NCCL's CPU class); returns them and each one's host index."""
    cpus, hosts = tree.cpus, tree.hosts
    cpus.sort(
        key=lambda c: (hosts[(c.el.get("host_hash") or "").strip().lower()], _int_attr(c.el, "numaid", c.path, file))
    )
    cpu_devs: list[_Device] = []
    cpu_hosts: list[int] = []
    gen5 = _max_link_gen(tree) >= 5  # Gen5 root ports: an AMD host of Zen 4 or later
    for i, c in enumerate(cpus):
        c.name = f"cpu{i}"
        if cpu is not None:
            preset, why = cpu, "--cpu"
        else:
            cls = _nccl_cpu_class(c.el, c.path, file)
            if cls == "amd" and gen5:
                cls = "amd-gen5"
            preset, why = _CPU_BY_NCCL_CLASS[cls]
            _preset(presets, "cpus", preset, file, c.path)
        cpu_devs.append(_Device(c.name, "cpu", preset, notes=f"<cpu numaid={c.el.get('numaid')}>; preset: {why}"))
        cpu_hosts.append(hosts[(c.el.get("host_hash") or "").strip().lower()])
    if len(hosts) > 1:
        notes.append(
            f"the dump spans {len(hosts)} hosts (host_hash): one collsim node; CPUs of different hosts are "
            "not joined, so devices of different hosts are NET apart"
        )
    return cpu_devs, cpu_hosts


def _xml_pcie(tree: _XmlTree, presets: PresetLibrary, notes: list[str]) -> tuple[list[_Device], list[_Link]]:
    """The PCIe switches that hold a GPU or NIC (named ``pcie0`` ... depth first; NCCL trims the others) and every
    GPU's, NIC's and switch's link to its parent, from its link_speed and link_width."""
    devices: list[_Device] = []
    links: list[_Link] = []
    gpus, nics, switches = tree.gpus, tree.nics, tree.switches
    k = 0
    for c in tree.cpus:
        stack2 = list(reversed(c.children))
        while stack2:
            node = stack2.pop()
            if node.kind == "switch" and not _has_endpoint(node):
                # no GPU or NIC below: NCCL trims it (xml.cc ncclTopoTrimXmlRec, lines 1163-1201), so does the import
                notes.append(f"{node.path}: a PCIe switch with no GPU or NIC below is left out (NCCL trims it)")
                continue
            if node.kind == "switch":
                node.name = f"pcie{k}"
                k += 1
                sgen = _GEN_OF_RATE[node.link[0]] if node.link else 0
                devices.append(
                    _Device(
                        node.name,
                        "pcie_switch",
                        spec={"gen": sgen},
                        notes=f"{node.path}: a PCIe switch (vendor {node.el.get('vendor')}, device "
                        f"{node.el.get('device')}); gen: its own link's",
                    )
                )
                stack2.extend(reversed(node.children))
    for node in [*gpus, *nics, *(s for s in switches if s.name)]:
        assert node.parent is not None
        c2c = next((el for el in node.el if el.tag == "c2c"), None) if node.kind == "gpu" else None
        if c2c is not None and node.parent.kind == "cpu":
            links.append(
                _Link(
                    node.name,
                    node.parent.name,
                    "nvlink-c2c",
                    notes=f"<c2c count={_q(c2c.get('count'))} bw={_q(c2c.get('bw'))}>: the GPU's NVLink-C2C to its "
                    "CPU (topo.cc ncclTopoAddC2c), the nvlink-c2c preset (NCCL's P2C paths to the CPU's NICs)",
                )
            )
            continue
        if node.link is None:
            links.append(
                _Link(
                    node.name,
                    node.parent.name,
                    "pcie5",
                    notes="a NIC without a PCI device on its CPU: "
                    "NCCL joins them with LOC_BW (5000 GB/s, no limit); collsim: one PCIe Gen5 x16 link",
                )
            )
            continue
        rate, width, what = node.link
        pl = _pcie_link(rate, width, presets, what)
        links.append(_Link(node.name, node.parent.name, pl.preset, bandwidth=pl.bandwidth, notes=pl.notes))
    return devices, links


def template_from_nccl_xml(
    text: str,
    *,
    file: str | Path | None = None,
    gpu: str | None = None,
    nic: str | None = None,
    cpu: str | None = None,
    name: str | None = None,
    presets: PresetLibrary | None = None,
    nvswitch: bool = False,
) -> dict[str, Any]:
    """Build a node template from NCCL's topology dump (``NCCL_TOPO_DUMP_FILE``) or a static topology file
    (``NCCL_TOPO_FILE``, as clouds ship them: the PCIe tree only).

    Parameters
    ----------
    text : str
        The XML.
    file : str or Path, optional
        Where it came from, for messages and the template's ``source``.
    gpu, nic, cpu : str, optional
        Presets for every GPU, NIC and CPU socket, replacing what is inferred (GPU: the PCI id's preset,
        ``pci_device_ids`` in gpus.yaml; NIC: the shipped preset of the ``<net speed>``; CPU: by NCCL's CPU class).
    name : str, optional
        The template's name (default: the ``<system name>`` or the file's stem).
    presets : PresetLibrary, optional
        Presets to use (default :func:`load_presets`; user presets merged in by the caller).
    nvswitch : bool
        The file lists no NVLink (a static file: NCCL asks NVML for NVLinks at run time, xml.cc lines 930-933):
        wire every NVLink of each GPU (its preset's ``nvlinks``) to one NVSwitch, as on HGX and DGX boards. Without
        it such a file gives GPUs without NVLink, with a :class:`TopologyWarning` where their preset has NVLinks.

    Returns
    -------
    dict
        A node template (``name``, ``description``, ``source``, ``notes``, ``devices``, ``links``); each device and
        link entry carries ``notes`` saying where its numbers come from (the template builder ignores ``notes``).

    Examples
    --------
    A static file of the kind a cloud ships (one PCIe switch holding a GPU and an InfiniBand card; no ``<gpu>``):

    >>> sw = ('<pci busid="ffff:ff:0{i}.0" class="0x060400" link_speed="32.0 GT/s PCIe" link_width="16">'
    ...       '<pci busid="000{i}:00:00.0" class="0x030200" link_speed="32.0 GT/s PCIe" link_width="16"/>'
    ...       '<pci busid="010{i}:00:00.0" class="0x020700" link_speed="32.0 GT/s PCIe" link_width="16"/></pci>')
    >>> xml = ('<system version="1"><cpu numaid="0" arch="x86_64" vendor="GenuineIntel" familyid="6" '
    ...        'modelid="143">' + sw.format(i=1) + sw.format(i=2) + "</cpu></system>")
    >>> t = template_from_nccl_xml(xml, gpu="h100-sxm5-80gb", nic="connectx-7-ndr", nvswitch=True)
    >>> sorted(d["kind"] for d in t["devices"])
    ['cpu', 'gpu', 'gpu', 'nic', 'nic', 'nvswitch', 'pcie_switch', 'pcie_switch']
    >>> [(x["a"], x["b"], x["count"]) for x in t["links"] if x["b"] == "nvswitch"]
    [(['gpu0', 'gpu1'], 'nvswitch', 18)]

    Raises
    ------
    TopologyError
        Malformed XML, an element NCCL's loader does not know where it is, a missing or bad attribute, a GPU or NIC
        no preset matches: naming ``file`` and the element (``system/cpu[numaid=0]/pci[busid=...]/gpu[dev=0]``).
    """
    presets = load_presets() if presets is None else presets
    root = _xml_root(text, file)
    notes: list[str] = []
    # options first: a bad preset name is an error whatever the file holds
    gpu_opt = _preset(presets, "gpus", gpu, file, "--gpu") if gpu is not None else None
    if nic is not None:
        _preset(presets, "nics", nic, file, "--nic")
    if cpu is not None:
        _preset(presets, "cpus", cpu, file, "--cpu")

    tree = _walk_nccl_xml(root, file, notes)
    static = _static_endpoints(tree, gpu, gpu_opt, nic, presets, file, notes)
    _group_efa_nics(tree, nic, presets, notes)
    for c in tree.cpus:
        _flatten_bcm(c, notes)
    devices, gpu_presets = _xml_gpu_devices(tree.gpus, gpu, gpu_opt, presets, file)
    switch_devices, links = _xml_nvlinks(tree.gpus, gpu_presets, presets, file, notes)
    if nvswitch or not links:
        switch_devices, links = _unlisted_nvlinks(tree.gpus, gpu_presets, presets, file, notes, nvswitch, links)
    devices += switch_devices
    devices += _xml_nic_devices(tree.nics, nic, presets, file)
    cpu_devs, cpu_hosts = _xml_cpu_devices(tree, cpu, presets, file, notes)
    devices += cpu_devs
    pcie_devices, pcie_links = _xml_pcie(tree, presets, notes)
    devices += pcie_devices
    links += pcie_links
    links.extend(_cpu_links(cpu_devs, cpu_hosts, presets))

    tname = name or (root.get("name") or "").strip() or (Path(file).stem if file is not None else "imported")
    counts = (len(tree.gpus), bool(switch_devices), len(pcie_devices), len(tree.nics), len(tree.cpus))
    description, source, header = _xml_provenance(file, static, sorted(set(gpu_presets.values())), counts, notes)
    template = _assemble(tname, description, source, header, devices, links)
    _check_builds(template, presets, file)
    return template


def _xml_root(text: str, file: str | Path | None) -> ET.Element:
    """The parsed ``<system>``, its elements where NCCL's loader has them and its ``version`` NCCL's 1."""
    root = _parse_xml(text, file)
    _check_tree(root, file)
    version = _int_attr(root, "version", "system", file)
    if version != 1:
        raise TopologyError(
            f"version={version}: NCCL reads topology XML version 1 (NCCL_TOPO_XML_VERSION, xml.h line 50)",
            file=file,
            field="system",
        )
    return root


def _xml_provenance(
    file: str | Path | None, static: bool, gpu_presets: Sequence[str], counts: tuple[int, bool, int, int, int],
    notes: Sequence[str],
) -> tuple[str, str, list[str]]:
    """The imported template's description, source and header comment lines (what was read, inferred and not
    known, then ``notes``); ``counts``: GPUs, whether an NVSwitch, PCIe switches, NICs, CPU sockets."""
    ngpus, nvswitch, npcie, nnics, ncpus = counts
    src_name = Path(file).name if file is not None else "NCCL topology XML"
    kind_of_file = "static NCCL topology file" if static else "NCCL topology dump"
    description = (
        f"Imported from {src_name} ({kind_of_file}): {ngpus} GPU(s) ({', '.join(gpu_presets)}), "
        f"{'an NVSwitch, ' if nvswitch else ''}{npcie} PCIe switch(es), {nnics} NIC(s), {ncpus} CPU socket(s)"
    )
    source = (
        f"collsim import nccl-xml {src_name}: "
        + ("a static NCCL topology file (NCCL_TOPO_FILE)" if static else "NCCL's topology dump (NCCL_TOPO_DUMP_FILE)")
        + f", read as {NCCL_SOURCE} "
        "src/graph/xml.cc and topo.cc read it; device numbers from the presets named"
    )
    header = [
        "Read from the file: the PCIe tree (<pci> switches, GPUs, NICs under each <cpu>), each PCIe link's "
        "link_speed and link_width, the GPUs' dev, sm and PCI ids, the NVLink counts and targets, the NICs' dev, "
        "speed and gdr, the CPUs' numaid and NCCL CPU class.",
        "Inferred: GPU presets from PCI ids (gpus.yaml pci_device_ids), NIC presets from speed and gdr, CPU presets "
        "from NCCL's CPU class, the NVSwitch generation and multicast from the GPU preset's NVLink, PCIe presets "
        "from link speed and width (bandwidth x efficiency = NCCL's width x rate / 80 GB/s).",
        "Not in the file: GPU, NIC and CPU numbers (memory bandwidth, cores, latencies: the presets'), InfiniBand vs "
        "RoCE, the PCIe switches' internal bandwidth (only their links).",
        *notes,
    ]
    return description, source, header


# --------------------------------------------------------------------------------------------------------- nvidia-smi
_AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_CELL = re.compile(r"^(X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS|SOC)$")
_LABEL = re.compile(r"^[A-Za-z][\w.:-]{0,63}$")
#: nvidia-smi's classes as collsim's Topology.path_type names them (collsim does not tell NODE from PHB; SOC is old
#: drivers' name of SYS).
_AS_PATH_TYPE = {"NODE": "PHB", "SOC": "SYS"}


@dataclass
class _SmiMatrix:
    labels: list[str]  # device columns: GPU0 .. NIC0 .. (or NIC device names)
    ngpu: int
    cells: list[list[str]]  # square
    lines: list[int]  # the line of each row (1-based)
    affinity: list[dict[str, str]]  # per GPU row: column -> value
    legend: dict[str, str]  # NIC0 -> mlx5_0


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        a, b = self.find(i), self.find(j)
        if a != b:
            self.parent[max(a, b)] = min(a, b)


#: A terminal's escape sequences (SGR colours and underlines, cursor moves): ESC [ parameters final byte.
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def _smi_header(lines: list[str], file: str | Path | None) -> tuple[int, list[str], list[str]]:
    """The matrix's header: its line index, the device labels and the affinity columns after them."""
    start = None
    for i, line in enumerate(lines):
        tok = line.split()
        if tok and tok[0] == "GPU0" and (len(tok) == 1 or tok[1] != "X"):
            start = i
            break
    if start is None:
        raise TopologyError(
            "no `nvidia-smi topo -m` matrix: expected a header line of GPU0 GPU1 ... NIC0 ... CPU Affinity",
            file=file,
            field="line 1",
        )
    header = lines[start]
    cut = len(header)
    for label in _AFFINITY_COLUMNS:
        pos = header.find(label)
        if pos >= 0:
            cut = min(cut, pos)
    labels = header[:cut].split()
    rest = header[cut:]
    columns: list[str] = []
    while rest.strip():
        rest = rest.strip()
        col = next((c for c in _AFFINITY_COLUMNS if rest.startswith(c)), None)
        if col is None:
            raise TopologyError(
                f"unknown header column {_q(rest.split()[0], 30)}; after the devices nvidia-smi "
                f"prints {', '.join(_AFFINITY_COLUMNS)}",
                file=file,
                field=f"line {start + 1}",
            )
        columns.append(col)
        rest = rest[len(col) :]
    return start, labels, columns


def _smi_gpu_count(labels: list[str], file: str | Path | None, hline: str) -> int:
    """Check the header's device labels (names, none twice, GPUs first and in order, NICs in order); the GPUs."""
    ngpu = 0
    seen: set[str] = set()
    for j, lab in enumerate(labels):
        if not _LABEL.match(lab):
            raise TopologyError(f"header column {_q(lab, 30)} is no device name", file=file, field=hline)
        if lab in seen:
            raise TopologyError(f"header column {lab} given twice", file=file, field=hline)
        seen.add(lab)
        if re.fullmatch(r"GPU\d+", lab):
            if lab != f"GPU{j}":
                raise TopologyError(
                    f"header column {j + 1} is {lab}; expected GPU{j} (GPUs first, in order)", file=file, field=hline
                )
            ngpu += 1
        elif re.fullmatch(r"NIC\d+", lab) and lab != f"NIC{j - ngpu}":
            raise TopologyError(f"header column {j + 1} is {lab}; expected NIC{j - ngpu}", file=file, field=hline)
    return ngpu


def _smi_row(
    tok: list[str], r: int, labels: list[str], ngpu: int, ncolumns: int, file: str | Path | None, where: str
) -> tuple[list[str], list[str]]:
    """Row ``r`` of the matrix, checked: its cells and (GPU rows) its affinity values."""
    n = len(labels)
    if r >= n:
        raise TopologyError(
            f"row {_q(tok[0], 30)}: the header names {n} devices, this is row {r + 1} (the matrix is not square)",
            file=file,
            field=where,
        )
    if tok[0] != labels[r]:
        raise TopologyError(
            f"row {_q(tok[0], 30)}; expected {labels[r]} (rows in the header's order)", file=file, field=where
        )
    row = tok[1 : 1 + n]
    if len(row) < n:
        raise TopologyError(
            f"row {labels[r]} has {len(row)} cells; the header names {n} devices (the matrix is not square)",
            file=file,
            field=where,
        )
    extra = tok[1 + n :]
    allowed = ncolumns if r < ngpu else 0
    if len(extra) > allowed:
        raise TopologyError(
            f"row {labels[r]} has {n + len(extra)} cells; expected {n} devices"
            f"{f' and {allowed} affinity columns' if allowed else ''}",
            file=file,
            field=where,
        )
    for j, cell in enumerate(row):
        if not _CELL.match(cell):
            raise TopologyError(
                f"column {labels[j]}: unknown connection {_q(cell, 20)}; expected X, NV#, PIX, "
                "PXB, PHB, NODE or SYS",
                file=file,
                field=where,
            )
        if (cell == "X") != (j == r):
            raise TopologyError(
                f"column {labels[j]}: {cell} {'off' if cell == 'X' else 'on'} the diagonal "
                "(X is a device with itself)",
                file=file,
                field=where,
            )
        if cell.startswith("NV") and (r >= ngpu or j >= ngpu):
            raise TopologyError(
                f"column {labels[j]}: {cell} between a GPU and a NIC (NVLinks join GPUs)", file=file, field=where
            )
        if cell.startswith("NV") and int(cell[2:]) < 1:
            raise TopologyError(f"column {labels[j]}: {cell}: a count of bonded NVLinks is at least 1 (no NVLink "
                                "between two GPUs is a PCIe class: PIX, PXB, NODE, PHB or SYS)", file=file,
                                field=where)  # fmt: skip
    return row, extra


def _parse_smi(text: str, file: str | Path | None) -> _SmiMatrix:
    """Read ``nvidia-smi topo -m`` text: header, square and symmetric matrix of cells, affinity, NIC legend."""
    if len(text) > MAX_INPUT_CHARS:
        raise TopologyError(f"{len(text)} characters; at most {MAX_INPUT_CHARS} are read", file=file)
    # nvidia-smi underlines the header on a terminal (ESC[4m ... ESC[0m): a log of kubectl exec -t, script or tmux
    # keeps the escapes, which are no cell of the matrix
    lines = _ANSI_ESCAPE.sub("", text).splitlines()
    start, labels, columns = _smi_header(lines, file)
    ngpu = _smi_gpu_count(labels, file, f"line {start + 1}")
    n = len(labels)
    cells: list[list[str]] = []
    rows_at: list[int] = []
    affinity: list[dict[str, str]] = []
    i = start + 1
    while i < len(lines) and len(cells) < n + 1:
        tok = lines[i].split()
        if not tok or tok[0].rstrip(":") in ("Legend", "NIC"):
            break
        row, extra = _smi_row(tok, len(cells), labels, ngpu, len(columns), file, f"line {i + 1}")
        cells.append(row)
        rows_at.append(i + 1)
        affinity.append(dict(zip(columns, extra, strict=False)))
        i += 1
    if len(cells) != n:
        raise TopologyError(
            f"the matrix has {len(cells)} rows for {n} columns ({', '.join(labels)}): not square",
            file=file,
            field=f"line {i + 1}",
        )
    for r in range(n):
        for j in range(r + 1, n):
            if cells[r][j] != cells[j][r]:
                raise TopologyError(
                    f"{labels[r]} x {labels[j]} is {cells[r][j]} but {labels[j]} x {labels[r]} is {cells[j][r]}",
                    file=file,
                    field=f"line {rows_at[r]}",
                )
    legend: dict[str, str] = {}
    for line in lines[i:]:
        m = re.match(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", line)
        if m and m.group(1) in labels:
            legend[m.group(1)] = m.group(2)
    return _SmiMatrix(labels, ngpu, cells, rows_at, affinity, legend)


def _numa_of(m: _SmiMatrix, r: int) -> int | None:
    raw = m.affinity[r].get("NUMA Affinity", "") if r < m.ngpu else ""
    return int(raw) if re.fullmatch(r"\d{1,6}", raw) else None


def _smi_sockets(m: _SmiMatrix, known: list[list[str | None]], file: str | Path | None) -> list[list[int]]:
    """The CPU sockets of a matrix: groups of devices not ``SYS`` apart (and GPUs of one ``NUMA Affinity``), merged
    where nothing says they are apart, sorted by NUMA node; contradictions are errors naming the line."""
    n = len(m.labels)
    ngpu = m.ngpu
    hline = f"line {m.lines[0] - 1}"
    uf = _UnionFind(n)
    for a in range(n):
        for b in range(a + 1, n):
            if known[a][b] in ("PIX", "PXB", "PHB", "NODE"):
                uf.union(a, b)
    for a in range(ngpu):
        for b in range(a + 1, ngpu):
            if _numa_of(m, a) is not None and _numa_of(m, a) == _numa_of(m, b):
                uf.union(a, b)
    comps: dict[int, list[int]] = {}
    for i in range(n):
        comps.setdefault(uf.find(i), []).append(i)

    def apart(x: list[int], y: list[int]) -> bool:
        """Evidence that two groups sit on different sockets: a SYS cell or different NUMA nodes."""
        if any(known[a][b] in ("SYS", "SOC") for a in x for b in y):
            return True
        nx_ = {_numa_of(m, a) for a in x} - {None}
        ny_ = {_numa_of(m, a) for a in y} - {None}
        return bool(nx_ and ny_ and nx_ != ny_)

    sockets: list[list[int]] = []
    for comp in comps.values():
        for s in sockets:
            if not apart(s, comp):
                s.extend(comp)
                s.sort()
                break
        else:
            sockets.append(list(comp))
    for s in sockets:
        numas = {x for x in (_numa_of(m, a) for a in s) if x is not None}
        if len(numas) > 1:
            raise TopologyError(
                f"{', '.join(m.labels[a] for a in s)} are not SYS apart but have NUMA affinities "
                f"{', '.join(map(str, sorted(numas)))}",
                file=file,
                field=hline,
            )
        for a in s:
            for b in s:
                if a < b and known[a][b] in ("SYS", "SOC"):
                    raise TopologyError(
                        f"{m.labels[a]} x {m.labels[b]} is {known[a][b]}, yet both are on one socket "
                        "by their other cells",
                        file=file,
                        field=f"line {m.lines[a]}",
                    )
    sockets.sort(key=lambda s: (min((x for x in (_numa_of(m, a) for a in s) if x is not None), default=1 << 30), s[0]))

    return sockets


def _smi_nvlinks(
    m: _SmiMatrix, gpu: str, grec: Mapping[str, Any], dev_name: Sequence[str], file: str | Path | None
) -> tuple[list[_Device], list[_Link]]:
    """The NVLinks of the ``NV#`` cells: an NVSwitch when every GPU pair is ``NV#`` alike and the GPU preset has too
    few links to wire them directly, else pairwise links; returns the NVSwitch device (if any) and the links."""
    ngpu = m.ngpu
    cell = m.cells
    hline = f"line {m.lines[0] - 1}"
    devices: list[_Device] = []
    links: list[_Link] = []
    nv = {(a, b): int(cell[a][b][2:]) for a in range(ngpu) for b in range(a + 1, ngpu) if cell[a][b].startswith("NV")}
    have = int(grec["nvlinks"])
    if nv:
        if grec["nvlink"] is None:
            raise TopologyError(
                f"the matrix has NVLinks, but GPU preset {gpu} has no NVLink preset (nvlink: null)",
                file=file,
                field="--gpu",
            )
        nvl = str(grec["nvlink"])
        counts = set(nv.values())
        all_pairs = len(nv) == ngpu * (ngpu - 1) // 2
        if all_pairs and len(counts) == 1 and counts.pop() * (ngpu - 1) > have:
            k = next(iter(nv.values()))
            if k > have:
                raise TopologyError(f"NV{k}, but GPU preset {gpu} has {have} NVLinks", file=file, field=hline)
            spec, why = _nvswitch_spec(nvl, None, gpu)
            devices.append(
                _Device(
                    "nvswitch",
                    "nvswitch",
                    spec=spec,
                    notes=f"every GPU pair NV{k} and {k} x "
                    f"{ngpu - 1} peers > the preset's {have} NVLinks: an NVSwitch; {why}",
                )
            )
            for g in range(ngpu):
                links.append(
                    _Link(
                        dev_name[g],
                        "nvswitch",
                        nvl,
                        count=k,
                        notes=f"NV{k}: {k} NVLinks to the NVSwitch; {nvl}: the GPU preset's nvlink",
                    )
                )
        else:
            used = [0] * ngpu
            for (a, b), k in nv.items():
                used[a] += k
                used[b] += k
                links.append(
                    _Link(
                        dev_name[a],
                        dev_name[b],
                        nvl,
                        count=k,
                        notes=f"NV{k}: {k} NVLinks between the two GPUs; {nvl}: the GPU preset's nvlink",
                    )
                )
            for g in range(ngpu):
                if used[g] > have:
                    raise TopologyError(
                        f"GPU{g}'s NV# cells add up to {used[g]} NVLinks, GPU preset {gpu} has {have} "
                        "(and not every pair is NV# alike, as on an NVSwitch)",
                        file=file,
                        field=f"line {m.lines[g]}",
                    )

    return devices, links


def _smi_pcie(
    m: _SmiMatrix,
    sockets: Sequence[list[int]],
    known: list[list[str | None]],
    dev_name: Sequence[str],
    pl: _PcieLink,
    gen: int,
    cpu_preset: str,
    cpu: str | None,
    gpu_link: str | None = None,
) -> tuple[list[_Device], list[_Device], list[_Link]]:
    """Each socket's CPU and the fewest PCIe switches that give its devices' classes: one switch per ``PIX``
    group, a root switch above groups ``PXB`` apart, a lone device straight on the CPU (a GPU by the CPU preset's
    ``gpu_link`` where it has one: a Grace superchip's NVLink-C2C, which the matrix does not show); returns the
    CPUs, the switches and the PCIe links."""
    n = len(m.labels)
    devices: list[_Device] = []
    links: list[_Link] = []
    cpu_devs: list[_Device] = []
    k = 0
    for si, s in enumerate(sockets):
        cname = f"cpu{si}"
        numa_ids = sorted({x for x in (_numa_of(m, a) for a in s) if x is not None})
        cpu_devs.append(
            _Device(
                cname,
                "cpu",
                cpu_preset,
                notes=f"socket of {', '.join(m.labels[a] for a in s)}"
                f"{f' (NUMA node {numa_ids[0]})' if numa_ids else ''}; preset: "
                f"{'--cpu' if cpu else 'generic-x86, nvidia-smi names no CPU (give --cpu)'}",
            )
        )
        tuf = _UnionFind(n)
        guf = _UnionFind(n)
        for a in s:
            for b in s:
                if a < b and known[a][b] in ("PIX", "PXB"):
                    tuf.union(a, b)
                if a < b and known[a][b] == "PIX":
                    guf.union(a, b)
        trees: dict[int, list[int]] = {}
        for a in s:
            trees.setdefault(tuf.find(a), []).append(a)
        for tree in trees.values():
            groups: dict[int, list[int]] = {}
            for a in tree:
                groups.setdefault(guf.find(a), []).append(a)
            glist = list(groups.values())
            if len(glist) == 1 and len(glist[0]) == 1:
                a = glist[0][0]
                if gpu_link is not None and a < m.ngpu:
                    links.append(_Link(dev_name[a], cname, gpu_link, notes=f"the CPU preset {cpu_preset}'s gpu_link: "
                                       "the superchip's GPU-CPU link (nvidia-smi's matrix does not show it)"))
                    continue
                links.append(_Link(dev_name[a], cname, pl.preset, bandwidth=pl.bandwidth, notes=pl.notes))
                continue
            if len(glist) == 1:
                sw = f"pcie{k}"
                k += 1
                devices.append(
                    _Device(
                        sw,
                        "pcie_switch",
                        spec={"gen": int(gen)},
                        notes=f"{', '.join(m.labels[a] for a in glist[0])} PIX apart",
                    )
                )
                links.append(_Link(sw, cname, pl.preset, bandwidth=pl.bandwidth, notes=pl.notes))
                for a in glist[0]:
                    links.append(_Link(dev_name[a], sw, pl.preset, bandwidth=pl.bandwidth, notes=pl.notes))
                continue
            root_sw = f"pcie{k}"
            k += 1
            devices.append(
                _Device(
                    root_sw,
                    "pcie_switch",
                    spec={"gen": int(gen)},
                    notes=f"above {', '.join(m.labels[a] for a in tree)}: groups PXB apart",
                )
            )
            links.append(_Link(root_sw, cname, pl.preset, bandwidth=pl.bandwidth, notes=pl.notes))
            for grp in glist:
                sw = f"pcie{k}"
                k += 1
                devices.append(
                    _Device(
                        sw,
                        "pcie_switch",
                        spec={"gen": int(gen)},
                        notes=f"{', '.join(m.labels[a] for a in grp)}"
                        f"{' PIX apart' if len(grp) > 1 else ''}, under {root_sw}",
                    )
                )
                links.append(_Link(sw, root_sw, pl.preset, bandwidth=pl.bandwidth, notes=pl.notes))
                for a in grp:
                    links.append(_Link(dev_name[a], sw, pl.preset, bandwidth=pl.bandwidth, notes=pl.notes))

    return cpu_devs, devices, links


def _smi_check(topo: Any, m: _SmiMatrix, dev_name: Sequence[str], file: str | Path | None) -> None:
    """Every cell of the matrix against the built node's path type: a matrix no PCIe tree gives is an error."""
    n = len(m.labels)
    cell = m.cells
    for a in range(n):
        for b in range(a + 1, n):
            want = _AS_PATH_TYPE.get(cell[a][b], cell[a][b])
            got = topo.path_type(f"n0/{dev_name[a]}", f"n0/{dev_name[b]}")
            if got != want:
                raise TopologyError(
                    f"column {m.labels[b]}: {cell[a][b]}, but the PCIe tree the other cells need gives {got} here (no "
                    "tree of PCIe switches gives this matrix)",
                    file=file,
                    field=f"line {m.lines[a]}",
                )


def _smi_presets(
    presets: PresetLibrary, m: _SmiMatrix, gpu: str | None, nic: str | None, cpu: str | None, file: str | Path | None
) -> tuple[dict[str, Any], str]:
    """The presets ``nvidia-smi topo -m`` cannot name, checked: the GPU's record (``--gpu`` is required), the NIC
    preset when the matrix has NICs, and the CPU preset (default ``generic-x86``) that is returned with it."""
    if gpu is None:
        raise TopologyError(
            "nvidia-smi topo -m names no GPU model: give --gpu PRESET (e.g. a100-sxm4-80gb; the GPU "
            "presets are in topologies/presets/gpus.yaml)",
            file=file,
            field="--gpu",
        )
    grec = _preset(presets, "gpus", gpu, file, "--gpu")
    nnic = len(m.labels) - m.ngpu
    if nnic and nic is None:
        raise TopologyError(
            f"nvidia-smi topo -m shows {nnic} NIC(s) but no NIC model or speed: give --nic PRESET "
            "(e.g. connectx-7-ndr; topologies/presets/nics.yaml)",
            file=file,
            field="--nic",
        )
    if nic is not None:
        _preset(presets, "nics", nic, file, "--nic")
    cpu_preset = cpu if cpu is not None else _DEFAULT_SMI_CPU
    _preset(presets, "cpus", cpu_preset, file, "--cpu")
    return grec, cpu_preset


def _smi_endpoints(m: _SmiMatrix, gpu: str, nic: str | None, dev_name: list[str]) -> list[_Device]:
    """The matrix's GPUs and NICs as devices, each noting its row (line, NUMA affinity, the legend's NIC name)."""
    devices: list[_Device] = []
    for i in range(m.ngpu):
        aff = ", ".join(f"{k} {v}" for k, v in m.affinity[i].items())
        devices.append(
            _Device(
                dev_name[i], "gpu", gpu, notes=f"GPU{i} (line {m.lines[i]}{'; ' + aff if aff else ''}); preset: --gpu"
            )
        )
    for i in range(m.ngpu, len(m.labels)):
        lab = m.labels[i]
        legend = m.legend.get(lab, lab if not re.fullmatch(r"NIC\d+", lab) else "")
        assert nic is not None
        devices.append(
            _Device(
                dev_name[i],
                "nic",
                nic,
                spec={"ib_name": legend} if legend else None,  # the legend's device name: what NCCL_IB_HCA matches
                notes=f"{lab}{f' ({legend})' if legend else ''}, line {m.lines[i]}; preset: --nic",
            )
        )
    return devices


def _smi_provenance(src_name: str, pcie_preset: str, pnotes: list[str]) -> tuple[str, list[str]]:
    """The imported template's ``source`` and header lines: what was read from the matrix, what was inferred and
    what the matrix does not say (``pnotes``: assumptions made on the way)."""
    source = (
        f"collsim import nvidia-smi {src_name}: the path matrix of nvidia-smi topo -m (PCIe tree rebuilt from its "
        "classes; presets named on the command line)"
    )
    header = [
        "Read from the file: GPUs and NICs, the connection class of every pair (NV#, PIX, PXB, PHB, NODE, SYS), "
        "NUMA affinity, the NIC legend.",
        "Inferred: the PCIe tree (the fewest switches that give every class; PHB and NODE both through the CPU), "
        "NVLinks (NV# = # links; an NVSwitch when every pair is NV# alike and the GPU has too few links for direct "
        "wiring), sockets (devices not SYS apart), the NVSwitch generation from the GPU preset's NVLink, PCIe "
        f"links from the GPU preset ({pcie_preset}).",
        "Not in the file: GPU, NIC and CPU models (the presets given), link speeds (NICs' PCIe links are taken as "
        "the GPUs'), the PCIe relation of GPU pairs shown as NV# (placed by their other cells).",
        *pnotes,
    ]
    return source, header


def template_from_nvidia_smi(
    text: str,
    *,
    file: str | Path | None = None,
    gpu: str | None = None,
    nic: str | None = None,
    cpu: str | None = None,
    name: str | None = None,
    presets: PresetLibrary | None = None,
) -> dict[str, Any]:
    """Build a node template from the text of ``nvidia-smi topo -m``.

    The matrix names no models and no link speeds: ``gpu`` is required, ``nic`` too when it has NIC columns;
    ``cpu`` defaults to ``generic-x86``. PCIe links are the GPU preset's generation and width.

    The PCIe tree is rebuilt from the classes: CPU sockets are the groups of devices not ``SYS`` apart (and GPUs of
    one ``NUMA Affinity``); within a socket, devices ``PIX`` or ``PXB`` apart share a tree under one root port,
    devices ``PIX`` apart one switch. A tree of one switch group is one switch (a single device: straight on the
    CPU); a tree of several is a root switch with one switch per group, so that groups are ``PXB`` apart. ``PHB``
    and ``NODE`` both become "through the CPU" (collsim's PHB). NVLinks: ``NV#`` is # links; when every GPU pair is
    ``NV#`` alike and # x (GPUs - 1) exceeds the GPU preset's ``nvlinks``, they meet on an NVSwitch, otherwise
    they are wired pairwise. The rebuilt node is checked against every cell.

    Parameters
    ----------
    text : str
        The output of ``nvidia-smi topo -m``.
    file : str or Path, optional
        Where it came from, for messages and ``source``.
    gpu : str
        GPU preset of every GPU (required).
    nic : str, optional
        NIC preset of every NIC (required when there are NICs).
    cpu : str, optional
        CPU preset of every socket (default ``generic-x86``).
    name : str, optional
        The template's name (default: the file's stem).
    presets : PresetLibrary, optional
        Presets to use (default :func:`load_presets`).

    Returns
    -------
    dict
        A node template, as :func:`template_from_nccl_xml` returns.

    Raises
    ------
    TopologyError
        A matrix that is not square, an unknown cell, cells no PCIe tree gives, a missing preset option: naming
        ``file`` and the line (``line 4``) or the option (``--gpu``).
    """
    presets = load_presets() if presets is None else presets
    m = _parse_smi(text, file)
    grec, cpu_preset = _smi_presets(presets, m, gpu, nic, cpu, file)
    assert gpu is not None  # _smi_presets refused a missing --gpu
    n = len(m.labels)
    ngpu = m.ngpu
    nnic = n - ngpu
    known: list[list[str | None]] = [[None if c.startswith("NV") or c == "X" else c for c in row] for row in m.cells]
    sockets = _smi_sockets(m, known, file)

    dev_name = [f"gpu{i}" if i < ngpu else f"nic{i - ngpu}" for i in range(n)]
    devices = _smi_endpoints(m, gpu, nic, dev_name)
    if nic is not None and nnic == 0:
        _warn_no_nic(nic, file)
    gen, pl, pnotes = _smi_pcie_link(grec, gpu, cpu_preset, presets)
    switch_devices, links = _smi_nvlinks(m, gpu, grec, dev_name, file)
    if switch_devices and links and links[0].count < int(grec["nvlinks"]):
        k, have = links[0].count, int(grec["nvlinks"])
        pnotes.append(
            f"Every GPU has NV{k} to the NVSwitch where GPU preset {gpu} has {have} NVLinks: " + _fewer_nvlinks(gpu, k)
        )
    devices += switch_devices
    gpu_link = presets.cpus[cpu_preset].get("gpu_link")
    cpu_devs, pcie_devices, pcie_links = _smi_pcie(m, sockets, known, dev_name, pl, gen, cpu_preset, cpu,
                                                   gpu_link)  # fmt: skip
    devices += pcie_devices + cpu_devs
    links += pcie_links
    links.extend(_cpu_links(cpu_devs, [0] * len(cpu_devs), presets))

    src_name = Path(file).name if file is not None else "nvidia-smi topo -m"
    tname = name or (Path(file).stem if file is not None else "imported")
    description = (
        f"Imported from {src_name} (nvidia-smi topo -m): {ngpu} x {gpu}, {'an NVSwitch, ' if switch_devices else ''}"
        f"{len(pcie_devices)} PCIe switch(es), {nnic} NIC(s){f' ({nic})' if nic else ''}, "
        f"{len(sockets)} CPU socket(s) ({cpu_preset})"
    )
    template = _assemble(tname, description, *_smi_provenance(src_name, pl.preset, pnotes), devices, links)
    topo = _check_builds(template, presets, file)
    _smi_check(topo, m, dev_name, file)
    return template


def _warn_no_nic(nic: str, file: str | Path | None) -> None:
    """``--nic`` given for a matrix that shows no NIC: nvidia-smi lists RDMA devices only."""
    where = f"{Path(file).name}: " if file is not None else ""
    warnings.warn(
        f"{where}--nic {nic}: the matrix shows no NIC (nvidia-smi topo -m lists RDMA devices only, not an "
        "Ethernet NIC), so the template has none and a cluster of several nodes needs one: add it to the "
        f"template's devices ({{name: nic0, kind: nic, preset: {nic}}}) with a PCIe link to its CPU",
        TopologyWarning,
        stacklevel=3,
    )


def _smi_pcie_link(
    grec: Mapping[str, Any], gpu: str, cpu_preset: str, presets: PresetLibrary
) -> tuple[int, _PcieLink, list[str]]:
    """The PCIe generation and link of the matrix's devices (nvidia-smi does not print them): the GPU preset's
    ``pcie_gen`` and ``pcie_lanes``, else the CPU preset's generation, else Gen4; and the notes saying which."""
    gen = grec.get("pcie_gen")
    lanes = grec.get("pcie_lanes") or 16
    notes = []
    cpu_gen = presets.cpus[cpu_preset].get("pcie_gen")
    if gen is None and cpu_gen is not None:
        gen = cpu_gen
        notes.append(f"GPU preset {gpu} has no pcie_gen: the CPU preset {cpu_preset}'s, Gen{gen}")
    if gen is None:
        gen = 4
        notes.append(f"GPU preset {gpu} has no pcie_gen: PCIe Gen4 assumed")
    pl = _pcie_link(_RATE_OF_GEN[int(gen)], int(lanes), presets, f"{gpu}'s pcie_gen {gen} and pcie_lanes {lanes}")
    return int(gen), pl, notes


# ---------------------------------------------------------------------------------------------------------- writing
_PLAIN = re.compile(r"^[A-Za-z_][\w.+/-]*$")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    import json

    return json.dumps(text)  # a JSON string is a YAML double-quoted scalar


def _comment(text: str, indent: str) -> list[str]:
    out: list[str] = []
    for para in str(text).split("\n"):
        clean = "".join(c if c.isprintable() else " " for c in para)
        out.extend(
            textwrap.wrap(clean, 116 - len(indent), initial_indent=f"{indent}# ", subsequent_indent=f"{indent}#   ")
        )
    return out


def format_template(template: Mapping[str, Any]) -> str:
    """The YAML text of an imported template: header comments from its ``notes``, one flow mapping per device and
    link, each after a comment holding its ``notes`` (where its numbers come from).

    Parameters
    ----------
    template : Mapping
        As :func:`template_from_nccl_xml` or :func:`template_from_nvidia_smi` return it.

    Returns
    -------
    str
        YAML that :func:`collsim.topology.load_topology` reads back to the same devices and links (without the
        ``notes``, which become comments).
    """
    out = [f"# collsim node template written by `collsim import` ({template.get('name')})."]
    if template.get("notes"):
        out.extend(_comment(str(template["notes"]), ""))
    for key in ("name", "description", "source"):
        if template.get(key) is not None:
            out.append(f"{key}: {_scalar(template[key])}")
    for section in ("devices", "links"):
        out.append(f"{section}:")
        for entry in template.get(section) or []:
            if entry.get("notes"):
                out.extend(_comment(str(entry["notes"]), "  "))
            body = {k: v for k, v in entry.items() if k != "notes"}
            out.append(f"  - {_scalar(body)}")
    return "\n".join(out) + "\n"


def write_template(template: Mapping[str, Any], path: str | Path | None = None) -> str:
    """Write an imported template as YAML (:func:`format_template`), atomically (:func:`collsim.files.write_atomic`:
    a temporary file beside ``path``, then ``os.replace``; a new file gets the umask's mode, an old one keeps its).

    Parameters
    ----------
    template : Mapping
        The template.
    path : str or Path, optional
        Where to write it; None only returns the text.

    Returns
    -------
    str
        The YAML text.

    Raises
    ------
    TopologyError
        When the file cannot be written (naming it).
    """
    text = format_template(template)
    if path is None:
        return text
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise TopologyError(f"cannot write the template: {exc.strerror or exc}", file=Path(path)) from None
    return text
