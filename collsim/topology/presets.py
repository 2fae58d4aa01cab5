"""Read the preset libraries under ``topologies/presets/`` (links, GPUs, CPUs, NICs, fabric defaults).

Every preset is a mapping of field to value; quantities are unit strings (``"25GB/s"``, ``"0.2us"``) read with
:mod:`collsim.units` and stored in SI (bytes/s, seconds). The schemas below name the fields and their types only:
all numbers live in the YAML files next to their sources.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collsim.files import FileReadError, read_text_file
from collsim.safeyaml import YamlInputError, load_yaml, short_repr
from collsim.topology.errors import TopologyError, TopologyWarning, display_path
from collsim.units import DTYPE_SIZES, UnitError, parse_bandwidth, parse_size, parse_time
from collsim.vocab import LINK_KINDS

__all__ = [
    "NODE_TEMPLATE_KEYS",
    "PRESET_FILE_KEYS",
    "PresetLibrary",
    "PresetSource",
    "check_gpu_arch",
    "check_named_links",
    "gpu_preset_for_name",
    "load_presets",
    "merge_presets",
    "parse_field",
    "read_preset_files",
    "read_yaml",
    "topologies_dir",
]


def topologies_dir() -> Path:
    """Return the folder holding ``presets/`` and ``nodes/``.

    Returns
    -------
    Path
        ``$COLLSIM_TOPOLOGIES`` when set, else ``<repository>/topologies``.
    """
    env = os.environ.get("COLLSIM_TOPOLOGIES")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "topologies"


def read_yaml(path: Path) -> Any:
    """Read one YAML file with collsim's rules and limits (:mod:`collsim.safeyaml`), every failure a
    :class:`TopologyError` naming the file.

    Parameters
    ----------
    path : Path
        File to read.

    Returns
    -------
    Any
        The parsed document (never None: an empty file is an error).
    """
    try:
        text = read_text_file(path)
    except FileReadError as exc:
        raise TopologyError(str(exc), file=path) from None
    try:
        data = load_yaml(text)
    except YamlInputError as exc:
        raise TopologyError(f"broken YAML: {str(exc).removeprefix('invalid YAML: ')}", file=path) from None
    if data is None:
        raise TopologyError("empty file; expected a YAML mapping", file=path)
    return data


# --------------------------------------------------------------------------------------------------------------
# Field parsing


def _quantity_text(value: Any, what: str, example: str) -> str:
    """A quantity as YAML gave it: a string, or a number turned into one (so that it needs a unit like a string)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"expected a {what} such as {example}, got {short_repr(value)}")
    return value if isinstance(value, str) else repr(value)


def _positive_bandwidth(value: Any) -> float:
    if value is None:
        raise ValueError("missing bandwidth; expected a positive bandwidth such as '25GB/s' or '200Gb/s'")
    try:
        bw = parse_bandwidth(_quantity_text(value, "bandwidth", "'25GB/s' or '200Gb/s'"))
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    if not bw > 0:
        raise ValueError(f"bandwidth must be positive, got {short_repr(value)}")
    return bw


def _time(value: Any) -> float:
    try:
        t = parse_time(_quantity_text(value, "duration", "'0.2us'"))
    except UnitError as exc:
        raise ValueError(str(exc)) from None
    if t < 0:
        raise ValueError(f"duration must not be negative, got {short_repr(value)}")
    return t


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"expected a number in (0, 1], got {short_repr(value)}")
    return float(value)


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected a positive integer, got {short_repr(value)}")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {short_repr(value)}")
    return value


def _positive_size(value: Any) -> int:
    if value is None or isinstance(value, bool):
        raise ValueError(f"expected a positive size such as '80GB' or '24GiB', got {short_repr(value)}")
    try:
        nbytes = parse_size(value)
    except UnitError as exc:
        raise ValueError(f"{exc}; expected a positive size such as '80GB' or '24GiB'") from None
    if nbytes <= 0:
        raise ValueError(f"size must be positive, got {short_repr(value)}")
    return nbytes


#: PCIe generations a GPU or CPU preset may name (``pcie_gen``).
PCIE_GENERATIONS: tuple[int, ...] = (3, 4, 5, 6)
#: PCIe link widths a GPU preset may name (``pcie_lanes``).
PCIE_LANE_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


def _int_choice(choices: tuple[int, ...], what: str) -> Callable[[Any], int]:
    """A parser accepting an integer (not a bool) among ``choices``; errors say it expected ``what``."""

    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value not in choices:
            raise ValueError(f"expected {what}, one of {', '.join(map(str, choices))}; got {short_repr(value)}")
        return value

    return parse


#: Data types ``peak_tflops`` may name: collsim's floating-point dtypes (``collsim.units.DTYPE_SIZES``) plus the
#: Tensor Core formats that have no storage dtype in collsim.
PEAK_TFLOPS_DTYPES: tuple[str, ...] = (
    *(d for d in DTYPE_SIZES if d.startswith(("float", "bfloat"))),
    "tf32",
    "fp8",
)
#: Short names accepted in ``peak_tflops`` for collsim's dtypes (``fp32: 19.5`` is stored as ``float32``).
PEAK_TFLOPS_ALIASES: dict[str, str] = {"fp64": "float64", "fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def _peak_tflops(value: Any) -> dict[str, float]:
    names = ", ".join(PEAK_TFLOPS_DTYPES)
    if not isinstance(value, Mapping) or not value:
        raise ValueError(
            "expected a mapping of dtype to dense TFLOP/s (e.g. {float32: 19.5, bfloat16: 312}), "
            f"got {short_repr(value)}"
        )
    out: dict[str, float] = {}
    for key, tflops in value.items():
        dtype = PEAK_TFLOPS_ALIASES.get(str(key), str(key))
        if dtype not in PEAK_TFLOPS_DTYPES:
            raise ValueError(
                f"unknown dtype {short_repr(key)}; valid dtypes: {names} (or {', '.join(PEAK_TFLOPS_ALIASES)})"
            )
        if dtype in out:
            raise ValueError(f"dtype {dtype!r} given twice")
        if isinstance(tflops, bool) or not isinstance(tflops, (int, float)) or not math.isfinite(tflops) or tflops <= 0:
            raise ValueError(f"{key}: expected a positive number of TFLOP/s, got {short_repr(tflops)}")
        out[dtype] = float(tflops)
    return out


_PCI_ID = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{4}$")


def _pci_device_ids(value: Any) -> tuple[str, ...]:
    """PCI ``vendor:device`` ids in hex as ``lspci -n`` prints them (``["10de:20b2"]``), stored lower-case."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"expected a list of PCI ids such as ['10de:20b2'] (vendor:device), got {short_repr(value)}")
    out: list[str] = []
    for item in value:
        if not isinstance(item, str) or not _PCI_ID.match(item):
            raise ValueError(f"expected a PCI id vendor:device, 4 hex digits each, got {short_repr(item)}")
        if item.lower() in out:
            raise ValueError(f"PCI id {item!r} given twice")
        out.append(item.lower())
    return tuple(out)


def _cuda_names(value: Any) -> tuple[str, ...]:
    """The names CUDA and NVML give the part (``cudaDeviceProp.name``, ``nvidia-smi -L``: ``["NVIDIA B200"]``), as
    nccl-tests prints them on its ``#  Rank`` lines; matched without regard to case."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"expected a list of device names such as ['NVIDIA B200'], got {short_repr(value)}")
    out: list[str] = []
    for item in value:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"expected a device name as CUDA prints it, got {short_repr(item)}")
        if item.strip().lower() in (o.lower() for o in out):
            raise ValueError(f"device name {item!r} given twice")
        out.append(item.strip())
    return tuple(out)


_PCI_VENDOR = re.compile(r"^0x[0-9a-f]{4}$")


def _pci_vendor(value: Any) -> str:
    """A PCI vendor id as Linux's sysfs ``device/vendor`` file holds it (``0x1d0f``), lower-case hex."""
    if not isinstance(value, str) or not _PCI_VENDOR.match(value.lower()):
        raise ValueError(f"expected a PCI vendor id such as '0x1d0f' (sysfs device/vendor), got {short_repr(value)}")
    return value.lower()


def _release(value: Any) -> tuple[int, int]:
    """An NCCL release as [major, minor] (``[2, 20]``)."""
    ok = isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, int) and v >= 0 for v in value)
    if not ok:
        raise ValueError(f"expected an NCCL release as [major, minor] such as [2, 20], got {short_repr(value)}")
    return int(value[0]), int(value[1])


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {short_repr(value)}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {short_repr(value)}")
    return value


def _link_kind(value: Any) -> str:
    if value not in LINK_KINDS:
        raise ValueError(f"unknown link kind {short_repr(value)}; valid kinds: {', '.join(LINK_KINDS)}")
    return str(value)


#: CPU vendors as NCCL tells hosts apart (src/graph/topo.cc: the CPU's arch, then on x86 its vendor): Intel and AMD
#: are x86; ``arm`` is an Arm host (NVIDIA Grace), NCCL_TOPO_CPU_ARCH_ARM.
CPU_VENDORS: tuple[str, ...] = ("intel", "amd", "arm")


def _vendor(value: Any) -> str:
    if value not in CPU_VENDORS:
        raise ValueError(f"expected one of {', '.join(map(repr, CPU_VENDORS))}, got {short_repr(value)}")
    return str(value)


def _nccl_env(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"expected a mapping of NCCL_* variables to values, got {short_repr(value)}")
    out: dict[str, str] = {}
    for key, v in value.items():
        if not isinstance(key, str) or not key.startswith("NCCL_"):
            raise ValueError(f"expected NCCL_* variable names, got {short_repr(key)}")
        if isinstance(v, (Mapping, list)) or v is None:
            raise ValueError(f"{key}: expected a string or a number, got {short_repr(v)}")
        out[key] = str(v)
    return out


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "bandwidth": _positive_bandwidth,
    "time": _time,
    "fraction": _fraction,
    "positive_int": _positive_int,
    "count": _count,
    "bool": _bool,
    "text": _text,
    "link_kind": _link_kind,
    "vendor": _vendor,
    "nccl_env": _nccl_env,
    "size": _positive_size,
    "pcie_gen": _int_choice(PCIE_GENERATIONS, "a PCIe generation"),
    "pcie_lanes": _int_choice(PCIE_LANE_COUNTS, "a PCIe link width"),
    "peak_tflops": _peak_tflops,
    "pci_device_ids": _pci_device_ids,
    "cuda_names": _cuda_names,
    "pci_vendor": _pci_vendor,
    "release": _release,
    "link_preset": _text,  # checked against links.yaml after loading
    "optional_link_preset": lambda v: None if v is None else _text(v),
}

# field -> (type, required)
LINK_SCHEMA: dict[str, tuple[str, bool]] = {
    "kind": ("link_kind", True),
    "bandwidth": ("bandwidth", True),
    "efficiency": ("fraction", True),
    "latency": ("time", True),
    "source": ("text", True),
    "description": ("text", False),
    # PCIe: the fraction of the raw rate a copy engine's DMA achieves (Gloo's staging copies), where measured
    "dma_efficiency": ("fraction", False),
}
GPU_SCHEMA: dict[str, tuple[str, bool]] = {
    "model": ("text", True),
    "arch": ("text", True),
    "sm": ("positive_int", True),
    "hbm_bandwidth": ("bandwidth", True),
    "nccl_channel_bw": ("bandwidth", True),
    "kernel_launch_latency": ("time", True),
    "memcpy_latency": ("time", True),
    "p2p": ("bool", True),
    "nvlinks": ("count", True),
    "nvlink": ("optional_link_preset", False),
    "source": ("text", True),
    # Optional device facts (None when a preset leaves them out); see topologies/README.md for units.
    "sm_count": ("positive_int", False),  # streaming multiprocessors (not the compute capability `sm`)
    "pcie_gen": ("pcie_gen", False),  # PCIe generation of the GPU's host interface, 3..6
    "pcie_lanes": ("pcie_lanes", False),  # its link width (16 for x16)
    "hbm_capacity": ("size", False),  # device memory, bytes
    "peak_tflops": ("peak_tflops", False),  # dtype -> dense (no sparsity) peak, TFLOP/s
    "pci_device_ids": ("pci_device_ids", False),  # PCI vendor:device ids of the part (collsim import nccl-xml)
    "cuda_names": ("cuda_names", False),  # the part's CUDA device names (collsim import nccl-tests)
    "hbm_latency": ("time", False),  # a load from device memory (beyond L2), unloaded: NVLS's local copies' rate
    "gpudirect_rdma": ("bool", False),  # NICs may read and write its memory (GPUDirect RDMA); absent: yes
}
CPU_SCHEMA: dict[str, tuple[str, bool]] = {
    "model": ("text", True),
    "vendor": ("vendor", True),
    "cores": ("positive_int", True),
    "memory_bandwidth": ("bandwidth", True),
    "reduce_bw_per_core": ("bandwidth", True),
    "tcp_loopback_bw_per_core": ("bandwidth", True),
    "tcp_bw_per_core": ("bandwidth", True),
    "tcp_message_latency": ("time", True),
    "nccl_net_overhead": ("time", True),
    "socket_link": ("link_preset", True),
    "source": ("text", True),
    # Optional host-memory facts (None when a preset leaves them out; collsim bench --host-memory measures them)
    "copy_bw_per_core": ("bandwidth", False),  # bytes one thread copies per second (torch's copy_); absent: reduce's
    "first_touch_bw": ("bandwidth", False),  # bytes/s one thread faults fresh pages in at; absent: not charged
    "pcie_gen": ("pcie_gen", False),  # PCIe generation of the socket's root ports; absent: no limit
    # the link a GPU attached straight to this socket has instead of PCIe (a Grace superchip's NVLink-C2C): what an
    # import from nvidia-smi, whose matrix does not show it, wires; absent: PCIe
    "gpu_link": ("link_preset", False),
}
NIC_SCHEMA: dict[str, tuple[str, bool]] = {
    "model": ("text", True),
    "speed": ("bandwidth", True),
    "rdma": ("bool", True),
    "link": ("link_preset", True),
    "latency": ("time", True),
    "source": ("text", True),
    # NCCL variables the NIC's network plugin sets when the user leaves them unset (setenv without overwriting)
    "nccl_plugin_env": ("nccl_env", False),
    # the NCCL network plugin the NIC is driven by (its bundled tuner: topologies/software/nccl.yaml tuner_plugins)
    "nccl_net_plugin": ("text", False),
    # the network latency that plugin reports to NCCL (ncclNetProperties latency): NCCL's cost model adds it
    "nccl_net_latency": ("time", False),
    # the time a network message occupies the NIC's port beyond its bytes (a per-message cost of the NIC's path)
    "message_overhead": ("time", False),
    # one device's name in the IB verbs library (what NCCL_IB_HCA matches; a template's ib_names sets it per NIC)
    "ib_name": ("text", False),
    # the rate one TCP or UDP flow (a 5-tuple) may reach through this NIC where its provider caps flows (clouds);
    # absent: no cap beyond the port's speed
    "flow_bw": ("bandwidth", False),
    # the PCI vendor id Linux shows for the NIC (sysfs device/vendor): NCCL's socket transport picks its default
    # threads and sockets by it (topologies/software/nccl.yaml socket_vendor_defaults)
    "pci_vendor": ("pci_vendor", False),
    # a card of several ports that NCCL opens as one device from this release (NCCL_IB_MERGE_NICS, net_ib.cc); the
    # preset is that merged device; a run on an older release says so (NCCL_IB_MERGE_NICS=0 warns as unmodelled)
    "nccl_merged_since": ("release", False),
}
FABRIC_SCHEMA: dict[str, tuple[str, bool]] = {
    "radix": ("positive_int", True),
    "ipoib_link": ("link_preset", True),
    "source": ("text", True),
}

#: Schemas of the presets that devices use, by device kind.
DEVICE_SCHEMAS: dict[str, dict[str, tuple[str, bool]]] = {"gpu": GPU_SCHEMA, "cpu": CPU_SCHEMA, "nic": NIC_SCHEMA}


def dma_ratio(preset: Mapping[str, Any]) -> float:
    """A link preset's copy-engine rate over its modelled bandwidth: ``dma_efficiency / efficiency``, else 1.0.

    >>> round(dma_ratio({"efficiency": 0.76171875, "dma_efficiency": 0.8727}), 4)
    1.1457
    >>> dma_ratio({"efficiency": 0.8})
    1.0
    """
    dma = preset.get("dma_efficiency")
    return 1.0 if dma is None else float(dma) / float(preset["efficiency"])


def gpu_preset_for_name(library: PresetLibrary, name: str) -> str | None:
    """The GPU preset whose ``cuda_names`` list ``name`` (the device name CUDA reports, as nccl-tests prints it;
    case and surrounding spaces ignored), or None.

    >>> lib = load_presets()
    >>> gpu_preset_for_name(lib, "nvidia b200"), gpu_preset_for_name(lib, "NVIDIA A10G")
    ('b200-sxm-180gb', None)
    """
    wanted = name.strip().lower()
    for preset in sorted(library.gpus):
        if any(n.lower() == wanted for n in library.gpus[preset].get("cuda_names") or ()):
            return str(preset)
    return None


def parse_field(ftype: str, value: Any) -> Any:
    """Parse one preset value of type ``ftype``; raises ValueError with a readable message."""
    return _PARSERS[ftype](value)


def _is_free_key(key: str) -> bool:
    # `<field>_source` and `notes` carry documentation next to any number.
    return key == "notes" or key.endswith("_source")


def parse_record(
    raw: Any,
    schema: Mapping[str, tuple[str, bool]],
    file: Path | str | None,
    field: str,
    partial: bool = False,
) -> dict[str, Any]:
    """Parse a mapping against ``schema`` into SI values.

    Parameters
    ----------
    raw : Any
        The mapping read from YAML.
    schema : Mapping
        Field name to (type, required).
    file : Path or str or None
        File for error messages.
    field : str
        Dotted path of ``raw`` for error messages.
    partial : bool
        When True (spec overrides), required fields may be absent.

    Returns
    -------
    dict
        Parsed values; free documentation keys are kept as they are.
    """
    if not isinstance(raw, Mapping):
        raise TopologyError(f"expected a mapping, got {type(raw).__name__}", file=file, field=field)
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if _is_free_key(str(key)):
            out[str(key)] = value
            continue
        if key not in schema:
            raise TopologyError(
                f"unknown field {short_repr(key)}; valid fields: {', '.join(schema)} (and <field>_source, notes)",
                file=file,
                field=f"{field}.{key}",
            )
        ftype, _ = schema[key]
        try:
            out[key] = parse_field(ftype, value)
        except ValueError as exc:
            raise TopologyError(str(exc), file=file, field=f"{field}.{key}") from None
    if not partial:
        for key, (ftype, required) in schema.items():
            if key not in out:
                if required:
                    what = "missing bandwidth" if ftype == "bandwidth" else f"missing required field ({ftype})"
                    raise TopologyError(what, file=file, field=f"{field}.{key}")
                out[key] = None
    return out


@dataclass(frozen=True)
class PresetLibrary:
    """All presets of one ``topologies/`` folder, parsed into SI values, with the user's presets merged in.

    Attributes
    ----------
    root : Path
        The ``topologies/`` folder.
    links, gpus, cpus, nics : dict[str, dict[str, Any]]
        Preset name to parsed fields (each also has ``preset``: its own name).
    fabric : dict[str, Any]
        Fabric defaults (``radix``, ``ipoib_link``).
    files : dict[str, Path]
        Library name (``links``, ``gpus``, ...) to its shipped file.
    nodes : dict[str, dict[str, Any]]
        User node templates (name to the template mapping, as a template file holds it); the shipped ones are files
        under ``root/nodes``.
    origins : dict[tuple[str, str], tuple[str, str]]
        For each user entry, (library, name) to (file, dotted field) where it was defined: messages about it name
        the user's file and field (see :meth:`origin`).
    """

    root: Path
    links: dict[str, dict[str, Any]]
    gpus: dict[str, dict[str, Any]]
    cpus: dict[str, dict[str, Any]]
    nics: dict[str, dict[str, Any]]
    fabric: dict[str, Any]
    files: dict[str, Path]
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    origins: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)

    def library(self, name: str) -> dict[str, dict[str, Any]]:
        """Return the library ``links``, ``gpus``, ``cpus`` or ``nics``."""
        libs: dict[str, dict[str, dict[str, Any]]] = {
            "links": self.links,
            "gpus": self.gpus,
            "cpus": self.cpus,
            "nics": self.nics,
        }
        return libs[name]

    def origin(self, library: str, name: str) -> tuple[str, str]:
        """Where the preset ``name`` of ``library`` (``gpus``, ..., ``nodes``) was defined: (file, dotted field).

        A user's entry gives its file and field (``scenario.yaml``, ``presets.gpus.my-gpu``); a shipped one its
        preset file and its name (``topologies/presets/gpus.yaml``, ``rtx-4090``) or its template file.
        """
        if (library, name) in self.origins:
            return self.origins[(library, name)]
        if library == "nodes":
            return str(self.root / "nodes" / f"{name}.yaml"), ""
        return str(self.files[library]), name

    def get(self, library: str, name: Any, file: Path | str | None, field: str) -> dict[str, Any]:
        """Look up a preset by name, raising a :class:`TopologyError` that lists the known names."""
        lib = self.library(library)
        if not isinstance(name, str) or name not in lib:
            user = sorted(n for (kind, n) in self.origins if kind == library)
            where = f"in {self.files[library].name}" + (f" and the user's presets ({', '.join(user)})" if user else "")
            raise TopologyError(
                f"unknown {library[:-1]} preset {short_repr(name)}; known: {', '.join(sorted(lib))} ({where})",
                file=file,
                field=field,
            )
        return lib[name]


def _read_library(path: Path, schema: Mapping[str, tuple[str, bool]]) -> dict[str, dict[str, Any]]:
    data = read_yaml(path)
    if not isinstance(data, Mapping):
        raise TopologyError("expected a mapping of preset name to fields", file=path)
    out: dict[str, dict[str, Any]] = {}
    for name, raw in data.items():
        rec = parse_record(raw, schema, path, str(name))
        rec["preset"] = str(name)
        out[str(name)] = rec
    return out


def _check_references(lib: PresetLibrary, only: set[tuple[str, str]] | None = None) -> None:
    """Check the links GPUs, CPUs, NICs and the fabric defaults name (exist, right kind); errors name the entry's
    file and field (:meth:`PresetLibrary.origin`). ``only``: check just these (library, name) entries."""

    def wanted(library: str, name: str) -> bool:
        return only is None or (library, name) in only

    for library, kind in (("gpus", "gpu"), ("cpus", "cpu"), ("nics", "nic")):
        for name, rec in getattr(lib, library).items():
            if wanted(library, name):
                file, base = lib.origin(library, name)
                check_named_links(lib, kind, rec, file, base)
                if kind == "gpu":
                    check_gpu_arch(rec, file, base)
    if only is None:
        ipoib = lib.get("links", lib.fabric["ipoib_link"], lib.files["fabric"], "defaults.ipoib_link")
        if ipoib["kind"] != "eth":
            raise TopologyError(
                "the IPoIB link preset must have kind 'eth'", file=lib.files["fabric"], field="defaults.ipoib_link"
            )


def check_gpu_arch(rec: Mapping[str, Any], file: str | Path | None, base: str | None) -> None:
    """Refuse a GPU record whose ``arch`` is not the row NCCL picks for its ``sm``: NCCL chooses its tuning tables
    by compute capability (src/graph/tuning.cc ncclTopoTuneModel: >= 100 Blackwell, >= 90 Hopper, >= 80 Ampere,
    else Volta, whose values collsim's ``turing`` row repeats), and NVLS needs sm >= 90, so the two must agree (a
    user preset ``base: h100-sxm5-80gb`` with ``sm: 80`` would otherwise keep Hopper's NVLS)."""
    sm, arch = rec.get("sm"), rec.get("arch")
    if sm is None or arch is None:
        return
    sm = int(sm)
    want = (("blackwell",) if sm >= 100 else ("hopper",) if sm >= 90 else ("ampere",) if sm >= 80
            else ("volta", "turing"))  # fmt: skip
    if arch not in want:
        raise TopologyError(
            f"arch {arch!r} is not the row NCCL picks for sm {sm} ({' or '.join(want)}: NCCL chooses its tuning "
            "tables by compute capability, tuning.cc ncclTopoTuneModel); set arch and sm alike",
            file=file,
            field=f"{base}.arch" if base else "arch",
        )


def check_named_links(lib: PresetLibrary, kind: str, rec: Mapping[str, Any], file: str | Path | None,
                      base: str | None) -> None:  # fmt: skip
    """Check the link presets a GPU (``nvlink``), CPU (``socket_link``) or NIC (``link``) record names: they exist
    in ``lib`` and are of the right kind (an RDMA NIC's an ib or roce port). Errors name ``file`` and
    ``base.<field>`` (a preset entry, or a node template device's ``spec`` that overrides one)."""

    def fld(sub: str) -> str:
        return f"{base}.{sub}" if base else sub

    if kind == "gpu" and rec.get("nvlink") is not None:
        link = lib.get("links", rec["nvlink"], file, fld("nvlink"))
        if link["kind"] != "nvlink":
            raise TopologyError(
                f"link preset {rec['nvlink']!r} has kind {link['kind']!r}; a GPU's nvlink needs kind 'nvlink'",
                file=file,
                field=fld("nvlink"),
            )
    elif kind == "cpu":
        link = lib.get("links", rec["socket_link"], file, fld("socket_link"))
        if link["kind"] != "upi":
            raise TopologyError(
                f"link preset {rec['socket_link']!r} has kind {link['kind']!r}; a socket link needs kind 'upi'",
                file=file,
                field=fld("socket_link"),
            )
        if rec.get("gpu_link") is not None:
            link = lib.get("links", rec["gpu_link"], file, fld("gpu_link"))
            if link["kind"] not in ("c2c", "pcie"):
                raise TopologyError(
                    f"link preset {rec['gpu_link']!r} has kind {link['kind']!r}; a GPU's link to its CPU is c2c or "
                    "pcie",
                    file=file,
                    field=fld("gpu_link"),
                )
    elif kind == "nic":
        link = lib.get("links", rec["link"], file, fld("link"))
        if link["kind"] not in ("ib", "roce", "eth"):
            raise TopologyError(
                f"link preset {rec['link']!r} has kind {link['kind']!r}; a NIC port needs ib, roce or eth",
                file=file,
                field=fld("link"),
            )
        if rec["rdma"] and link["kind"] == "eth":
            raise TopologyError("an RDMA NIC needs an ib or roce link preset", file=file, field=fld("link"))


_CACHE: dict[tuple[str, tuple[float, ...]], PresetLibrary] = {}


def load_presets(root: Path | None = None) -> PresetLibrary:
    """Read and check every preset file under ``root/presets``.

    Parameters
    ----------
    root : Path, optional
        The ``topologies/`` folder; default :func:`topologies_dir`.

    Returns
    -------
    PresetLibrary
        Parsed presets (no user presets: see :func:`merge_presets`). Results are cached per folder and file
        modification times.
    """
    root = topologies_dir() if root is None else Path(root)
    pdir = root / "presets"
    files = {name: pdir / f"{name}.yaml" for name in ("links", "gpus", "cpus", "nics", "fabric")}
    stamps = tuple(f.stat().st_mtime if f.exists() else -1.0 for f in files.values())
    key = (str(root.resolve()), stamps)
    if key in _CACHE:
        return _CACHE[key]
    links = _read_library(files["links"], LINK_SCHEMA)
    gpus = _read_library(files["gpus"], GPU_SCHEMA)
    cpus = _read_library(files["cpus"], CPU_SCHEMA)
    nics = _read_library(files["nics"], NIC_SCHEMA)
    fabric_raw = read_yaml(files["fabric"])
    if not isinstance(fabric_raw, Mapping) or "defaults" not in fabric_raw:
        raise TopologyError("expected a mapping with a 'defaults' entry", file=files["fabric"])
    fabric = parse_record(fabric_raw["defaults"], FABRIC_SCHEMA, files["fabric"], "defaults")
    lib = PresetLibrary(root, links, gpus, cpus, nics, fabric, files)
    _check_references(lib)
    _CACHE.clear()
    _CACHE[key] = lib
    return lib


# --------------------------------------------------------------------------------------------------------------
# User presets

#: The sections of a user presets file (and of a scenario's ``presets:``): each maps a name to an entry in the
#: schema of the shipped file of that name (``links``, ``gpus``, ``cpus``, ``nics``: ``topologies/presets/*.yaml``;
#: ``nodes``: a node template as ``topologies/nodes/<name>.yaml`` holds it).
PRESET_FILE_KEYS: tuple[str, ...] = ("links", "gpus", "cpus", "nics", "nodes")
_LIBRARY_SCHEMAS: dict[str, dict[str, tuple[str, bool]]] = {
    "links": LINK_SCHEMA,
    "gpus": GPU_SCHEMA,
    "cpus": CPU_SCHEMA,
    "nics": NIC_SCHEMA,
}
#: The keys a node template may have, a user's (presets.nodes) and a shipped one alike (collsim.topology.template
#: checks them again, with the rest, when it builds one).
NODE_TEMPLATE_KEYS = (
    "name", "description", "source", "params", "generator", "devices", "links", "nic_population", "instance_type",
    "notes",
)  # fmt: skip
_PRESET_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
#: Most files one presets folder may hold.
MAX_PRESET_FILES = 256


@dataclass(frozen=True)
class PresetSource:
    """One document of user presets.

    Attributes
    ----------
    data : Any
        The mapping read from YAML (sections :data:`PRESET_FILE_KEYS`).
    file : str
        Its file, for messages (a scenario file for a scenario's ``presets:`` section).
    prefix : str
        Dotted path of ``data`` inside ``file``: ``""`` for a presets file, ``"presets"`` for a scenario's section.
    """

    data: Any
    file: str
    prefix: str = ""

    def field(self, *parts: str) -> str:
        """The dotted field of ``parts`` inside this source's file."""
        return ".".join(p for p in (self.prefix, *parts) if p)


def read_preset_files(path: str | Path) -> list[PresetSource]:
    """Read a user presets file, or every ``*.yaml``/``*.yml`` file of a folder (by name, not recursing).

    Parameters
    ----------
    path : str or Path
        A presets file (sections :data:`PRESET_FILE_KEYS`, e.g. what ``collsim import`` writes) or a folder of them.

    Returns
    -------
    list of PresetSource
        One per file, in the order they apply (later ones override earlier ones).

    Raises
    ------
    TopologyError
        A missing path, an empty folder, or a file that is no YAML mapping (naming the file).
    """
    try:
        p = Path(path).expanduser()
    except RuntimeError:  # ~user without such a user: the path as written
        p = Path(path)
    try:
        p.is_dir()
    except OSError as exc:  # a name too long, a loop of links: Path.is_dir lets these through
        raise TopologyError(f"presets file or folder not found: {exc.strerror or exc}", file=str(p)[:200]) from None
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
        if not files:
            raise TopologyError("a presets folder without .yaml files", file=p)
        if len(files) > MAX_PRESET_FILES:
            raise TopologyError(f"{len(files)} files in a presets folder; at most {MAX_PRESET_FILES}", file=p)
    elif p.is_file():
        files = [p]
    else:
        raise TopologyError("presets file or folder not found", file=p)
    out: list[PresetSource] = []
    for f in files:
        data = read_yaml(f)
        if not isinstance(data, Mapping):
            raise TopologyError(
                f"expected a mapping of sections ({', '.join(PRESET_FILE_KEYS)}), got {type(data).__name__}", file=f
            )
        out.append(PresetSource(data, display_path(f) or str(f)))
    return out


def merge_presets(base: PresetLibrary, sources: Sequence[PresetSource]) -> PresetLibrary:
    """The library ``base`` with the user's presets added, later sources overriding earlier ones.

    Every entry is parsed and checked as a shipped one is (the schemas of this module; the links a GPU, CPU or NIC
    names must exist and be of the right kind); an entry replaces a shipped (or earlier) entry of the same name
    whole. A GPU, CPU, NIC or link entry with ``base: <preset>`` starts from that preset and replaces only the
    fields it gives (:func:`_user_record`). Node templates are kept as given and checked when built
    (:func:`collsim.topology.topology_from_template`).

    Parameters
    ----------
    base : PresetLibrary
        Usually :func:`load_presets`.
    sources : sequence of PresetSource
        User documents, in order.

    Returns
    -------
    PresetLibrary
        ``base`` itself when ``sources`` define nothing, else a new library.

    Raises
    ------
    TopologyError
        Naming the user's file and the dotted field (``presets.gpus.my-gpu.sm`` in a scenario, ``gpus.my-gpu.sm`` in
        a presets file).

    Examples
    --------
    >>> lib = merge_presets(load_presets(), [PresetSource({"links": {"pcie4-x8": {
    ...     "kind": "pcie", "bandwidth": "15.75GB/s", "efficiency": 0.76171875, "latency": "0.25us",
    ...     "source": "PCIe Gen4 x8: half of pcie4"}}}, "my.yaml")])
    >>> lib.links["pcie4-x8"]["bandwidth"], lib.origin("links", "pcie4-x8")
    (15750000000.0, ('my.yaml', 'links.pcie4-x8'))
    """
    if not any(isinstance(s.data, Mapping) and s.data for s in sources):
        return base
    libs: dict[str, dict[str, dict[str, Any]]] = {name: dict(base.library(name)) for name in _LIBRARY_SCHEMAS}
    nodes = dict(base.nodes)
    origins = dict(base.origins)
    touched: set[tuple[str, str]] = set()
    for src in sources:
        if not isinstance(src.data, Mapping):
            raise TopologyError(
                f"expected a mapping of sections ({', '.join(PRESET_FILE_KEYS)}), got {short_repr(src.data)}",
                file=src.file,
                field=src.prefix or None,
            )
        for section, entries in src.data.items():
            if section not in PRESET_FILE_KEYS:
                nodeish = section in NODE_TEMPLATE_KEYS
                hint = " (a node template? put it under nodes: <name>:)" if nodeish else ""
                raise TopologyError(
                    f"unknown section {short_repr(section)}{hint}; valid: {', '.join(PRESET_FILE_KEYS)}",
                    file=src.file,
                    field=src.field(str(section)),
                )
            if entries is None:
                continue
            if not isinstance(entries, Mapping):
                raise TopologyError(
                    f"expected a mapping of preset name to fields, got {short_repr(entries)}",
                    file=src.file,
                    field=src.field(section),
                )
            for name in entries:
                if not isinstance(name, str) or not _PRESET_NAME.match(name):
                    raise TopologyError(
                        f"expected a preset name of letters, digits, '_', '-', '.' or '+', got {short_repr(name)}",
                        file=src.file,
                        field=src.field(section, str(name)),
                    )
            for name, raw in _in_base_order(entries, section, src):
                fld = src.field(section, name)
                _warn_replaced(base, section, name, raw, libs, origins, src.file, fld)
                if section == "nodes":
                    nodes[name] = _node_entry(raw, name, src.file, fld)
                else:
                    rec = _user_record(raw, section, name, libs[section], src.file, fld)
                    rec["preset"] = name
                    libs[section][name] = rec
                origins[(section, name)] = (src.file, fld)
                touched.add((section, name))
    lib = PresetLibrary(
        base.root, libs["links"], libs["gpus"], libs["cpus"], libs["nics"], base.fabric, base.files, nodes, origins
    )
    # A user's link replacing a shipped one may break a shipped entry naming it: check those too.
    replaced_links = {name for (kind, name) in touched if kind == "links"}
    for library in ("gpus", "cpus", "nics"):
        for name, rec in lib.library(library).items():
            if {rec.get("nvlink"), rec.get("socket_link"), rec.get("link")} & replaced_links:
                touched.add((library, name))
    _check_references(lib, touched)
    if lib.fabric["ipoib_link"] in replaced_links:
        _check_references(lib)
    return lib


def _warn_replaced(base: PresetLibrary, section: str, name: str, raw: Any, libs: Mapping[str, Mapping[str, Any]],
                   origins: Mapping[tuple[str, str], tuple[str, str]], file: str, field: str) -> None:  # fmt: skip
    """Warn when a user entry replaces a shipped preset or template, or another user entry, of its name: the
    replaced one is then unreachable, and a shipped name such as ``connectx-7-ndr`` changes every scenario that
    names it. An entry with ``base:`` its own name says it changes that preset, and is not warned about."""
    if _base_of(raw) == name:
        return
    kind = section[:-1] if section != "nodes" else "node template"
    if (section, name) in origins:
        where, what = origins[(section, name)]
        said = f"the {kind} {name!r} of {where} ({what})"
    elif section == "nodes":
        if not (base.root / "nodes" / f"{name}.yaml").is_file():
            return
        said = f"the shipped node template {name!r} (topologies/nodes/{name}.yaml)"
    elif name in libs[section]:
        said = f"the shipped {kind} preset {name!r} (topologies/presets/{section}.yaml)"
    else:
        return
    how = f"; base: {name} changes only the fields given" if section != "nodes" else ""
    warnings.warn(f"{file}: {field}: replaces {said} wherever it is named (another name keeps both{how})",
                  TopologyWarning, stacklevel=3)  # fmt: skip


#: The key of a user preset that names the preset it starts from (:func:`_user_record`).
BASE_KEY = "base"


def _base_of(raw: Any) -> Any:
    return raw.get(BASE_KEY) if isinstance(raw, Mapping) else None


def _in_base_order(entries: Mapping[str, Any], section: str, src: PresetSource) -> list[tuple[str, Any]]:
    """The entries of one section of one source, each after the entry of the same source its ``base`` names (a base
    of another name defined further down the same file comes first; a base of the entry's own name is the preset
    it replaces). A chain of bases that closes on itself is an error naming the first entry on it."""
    here = {str(n) for n in entries}
    pending = [(str(n), raw) for n, raw in entries.items()]
    done: set[str] = set()
    out: list[tuple[str, Any]] = []
    while pending:
        waiting = []
        for name, raw in pending:
            base = _base_of(raw)
            if isinstance(base, str) and base != name and base in here and base not in done:
                waiting.append((name, raw))
            else:
                out.append((name, raw))
                done.add(name)
        if len(waiting) == len(pending):
            name, raw = waiting[0]
            raise TopologyError(
                f"the bases of {', '.join(n for n, _ in waiting)} name each other in a circle; a base must be a "
                f"shipped {section[:-1]} preset or one defined without it",
                file=src.file,
                field=src.field(section, name, BASE_KEY),
            )
        pending = waiting
    return out


def _user_record(
    raw: Any, section: str, name: str, known: Mapping[str, dict[str, Any]], file: str, field: str
) -> dict[str, Any]:
    """A user's GPU, CPU, NIC or link preset ``name``, parsed; with ``base: <preset>`` it is that preset (shipped,
    or defined earlier) with the fields given replaced whole (a mapping such as ``peak_tflops`` too).

    A replaced field's ``<field>_source`` goes with it (the user's own, if given, takes its place); the fields kept
    keep theirs. ``source`` is required as for any preset: where the fields given come from. Without a ``model``
    of its own the entry's model says it is the base's, changed. The record names the preset it started from
    under ``base``.
    """
    schema = _LIBRARY_SCHEMAS[section]
    if not (isinstance(raw, Mapping) and BASE_KEY in raw):
        return parse_record(raw, schema, file, field)
    base = raw[BASE_KEY]
    if not isinstance(base, str) or base not in known:
        raise TopologyError(
            f"unknown {section[:-1]} preset {short_repr(base)} to start from; known: {', '.join(sorted(known))}",
            file=file,
            field=f"{field}.{BASE_KEY}",
        )
    own = parse_record({k: v for k, v in raw.items() if k != BASE_KEY}, schema, file, field, partial=True)
    if own.get("source") is None:
        raise TopologyError(
            f"missing required field (text): where the fields replacing those of {base!r} come from", file=file,
            field=f"{field}.source",
        )
    suffix = "_source"
    rec = {k: v for k, v in known[base].items() if not (k.endswith(suffix) and k[: -len(suffix)] in own)}
    rec.update(own)
    if "model" in schema and "model" not in own:
        rec["model"] = f"{known[base]['model']}, changed (user preset {name!r} from {base!r})"
    rec[BASE_KEY] = base
    return rec


def _node_entry(raw: Any, name: str, file: str, field: str) -> dict[str, Any]:
    """A user node template: a mapping with the keys of a template file (``name`` defaults to the entry's)."""
    if not isinstance(raw, Mapping):
        raise TopologyError(
            f"expected a node template (a mapping with devices and links, or a generator), got {short_repr(raw)}",
            file=file,
            field=field,
        )
    for key, value in raw.items():
        if key not in NODE_TEMPLATE_KEYS:
            hint = (
                " (a node template has no base: its params, set in cluster.node_params, change its GPUs, NICs and "
                "counts; or copy the template's file)"
                if key == BASE_KEY
                else ""
            )
            raise TopologyError(
                f"unknown key {short_repr(key)}; valid: {', '.join(NODE_TEMPLATE_KEYS)}{hint}",
                file=file,
                field=f"{field}.{key}",
            )
        expected = _NODE_KEY_TYPES.get(key)
        if expected is not None and value is not None and not isinstance(value, expected[0]):
            raise TopologyError(f"expected {expected[1]}, got {short_repr(value)}", file=file, field=f"{field}.{key}")
    params = raw.get("params") or {}
    for pname, decl in params.items():
        if not isinstance(decl, Mapping):
            raise TopologyError(
                f"expected a parameter declaration such as {{type: int, default: 2}}, got {short_repr(decl)}",
                file=file,
                field=f"{field}.params.{pname}",
            )
    return {"name": name, **raw}


#: The type each key of a user node template must have (the template layer checks the rest as it builds it).
_NODE_KEY_TYPES: dict[str, tuple[type | tuple[type, ...], str]] = {
    "name": (str, "a name"),
    "description": (str, "a string"),
    "source": (str, "a string"),
    "notes": (str, "a string"),
    "generator": (str, "a generator name"),
    "params": (Mapping, "a mapping of parameter name to declaration"),
    "devices": (list, "a list of devices"),
    "links": (list, "a list of links"),
    "nic_population": ((str, list), "spread, index or a list of NIC names"),
    "instance_type": (str, "a cloud instance type name such as p5.48xlarge"),
}
