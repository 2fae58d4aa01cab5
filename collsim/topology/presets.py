"""Read the preset libraries under ``topologies/presets/`` (links, GPUs, CPUs, NICs, fabric defaults).

Every preset is a mapping of field to value; quantities are unit strings (``"25GB/s"``, ``"0.2us"``) read with
:mod:`collsim.units` and stored in SI (bytes/s, seconds). The schemas below name the fields and their types only:
all numbers live in the YAML files next to their sources.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from collsim.files import FileReadError, read_text_file
from collsim.topology.errors import TopologyError
from collsim.units import DTYPE_SIZES, UnitError, parse_bandwidth, parse_size, parse_time
from collsim.vocab import LINK_KINDS

__all__ = [
    "PresetLibrary",
    "load_presets",
    "parse_field",
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
    """Read one YAML file, turning every failure into a :class:`TopologyError` naming the file.

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
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise TopologyError(f"broken YAML: {where}{problem}", file=path) from None
    if data is None:
        raise TopologyError("empty file; expected a YAML mapping", file=path)
    return data


# --------------------------------------------------------------------------------------------------------------
# Field parsing


def _positive_bandwidth(value: Any) -> float:
    if value is None:
        raise ValueError("missing bandwidth; expected a positive bandwidth such as '25GB/s' or '200Gb/s'")
    try:
        bw = parse_bandwidth(value)
    except UnitError as exc:
        raise ValueError(f"{exc}; expected a positive bandwidth such as '25GB/s' or '200Gb/s'") from None
    if not bw > 0:
        raise ValueError(f"bandwidth must be positive, got {value!r}")
    return bw


def _time(value: Any) -> float:
    try:
        t = parse_time(value)
    except UnitError as exc:
        raise ValueError(f"{exc}; expected a duration such as '0.2us'") from None
    if t < 0:
        raise ValueError(f"duration must not be negative, got {value!r}")
    return t


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"expected a number in (0, 1], got {value!r}")
    return float(value)


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"expected a positive integer, got {value!r}")
    return value


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r}")
    return value


def _positive_size(value: Any) -> int:
    if value is None or isinstance(value, bool):
        raise ValueError(f"expected a positive size such as '80GB' or '24GiB', got {value!r}")
    try:
        nbytes = parse_size(value)
    except UnitError as exc:
        raise ValueError(f"{exc}; expected a positive size such as '80GB' or '24GiB'") from None
    if nbytes <= 0:
        raise ValueError(f"size must be positive, got {value!r}")
    return nbytes


#: PCIe generations a GPU preset may name (``pcie_gen``).
PCIE_GENERATIONS: tuple[int, ...] = (3, 4, 5, 6)
#: PCIe link widths a GPU preset may name (``pcie_lanes``).
PCIE_LANE_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


def _int_choice(choices: tuple[int, ...], what: str) -> Callable[[Any], int]:
    """A parser accepting an integer (not a bool) among ``choices``; errors say it expected ``what``."""

    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value not in choices:
            raise ValueError(f"expected {what}, one of {', '.join(map(str, choices))}; got {value!r}")
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
            f"expected a mapping of dtype to dense TFLOP/s (e.g. {{float32: 19.5, bfloat16: 312}}), got {value!r}"
        )
    out: dict[str, float] = {}
    for key, tflops in value.items():
        dtype = PEAK_TFLOPS_ALIASES.get(str(key), str(key))
        if dtype not in PEAK_TFLOPS_DTYPES:
            raise ValueError(f"unknown dtype {key!r}; valid dtypes: {names} (or {', '.join(PEAK_TFLOPS_ALIASES)})")
        if dtype in out:
            raise ValueError(f"dtype {dtype!r} given twice")
        if isinstance(tflops, bool) or not isinstance(tflops, (int, float)) or not math.isfinite(tflops) or tflops <= 0:
            raise ValueError(f"{key}: expected a positive number of TFLOP/s, got {tflops!r}")
        out[dtype] = float(tflops)
    return out


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value


def _link_kind(value: Any) -> str:
    if value not in LINK_KINDS:
        raise ValueError(f"unknown link kind {value!r}; valid kinds: {', '.join(LINK_KINDS)}")
    return str(value)


def _vendor(value: Any) -> str:
    if value not in ("intel", "amd"):
        raise ValueError(f"expected 'intel' or 'amd', got {value!r}")
    return str(value)


def _nccl_env(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping) or not value:
        raise ValueError(f"expected a mapping of NCCL_* variables to values, got {value!r}")
    out: dict[str, str] = {}
    for key, v in value.items():
        if not isinstance(key, str) or not key.startswith("NCCL_"):
            raise ValueError(f"expected NCCL_* variable names, got {key!r}")
        if isinstance(v, (Mapping, list)) or v is None:
            raise ValueError(f"{key}: expected a string or a number, got {v!r}")
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
}
FABRIC_SCHEMA: dict[str, tuple[str, bool]] = {
    "radix": ("positive_int", True),
    "ipoib_link": ("link_preset", True),
    "source": ("text", True),
}

#: Schemas of the presets that devices use, by device kind.
DEVICE_SCHEMAS: dict[str, dict[str, tuple[str, bool]]] = {"gpu": GPU_SCHEMA, "cpu": CPU_SCHEMA, "nic": NIC_SCHEMA}


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
                f"unknown field {key!r}; valid fields: {', '.join(schema)} (and <field>_source, notes)",
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
    """All presets of one ``topologies/`` folder, parsed into SI values.

    Attributes
    ----------
    root : Path
        The ``topologies/`` folder.
    links, gpus, cpus, nics : dict[str, dict[str, Any]]
        Preset name to parsed fields (each also has ``preset``: its own name).
    fabric : dict[str, Any]
        Fabric defaults (``radix``, ``ipoib_link``).
    files : dict[str, Path]
        Library name (``links``, ``gpus``, ...) to its file.
    """

    root: Path
    links: dict[str, dict[str, Any]]
    gpus: dict[str, dict[str, Any]]
    cpus: dict[str, dict[str, Any]]
    nics: dict[str, dict[str, Any]]
    fabric: dict[str, Any]
    files: dict[str, Path]

    def library(self, name: str) -> dict[str, dict[str, Any]]:
        """Return the library ``links``, ``gpus``, ``cpus`` or ``nics``."""
        libs: dict[str, dict[str, dict[str, Any]]] = {
            "links": self.links,
            "gpus": self.gpus,
            "cpus": self.cpus,
            "nics": self.nics,
        }
        return libs[name]

    def get(self, library: str, name: Any, file: Path | str | None, field: str) -> dict[str, Any]:
        """Look up a preset by name, raising a :class:`TopologyError` that lists the known names."""
        lib = self.library(library)
        if not isinstance(name, str) or name not in lib:
            raise TopologyError(
                f"unknown {library[:-1]} preset {name!r}; known: {', '.join(sorted(lib))} "
                f"(in {self.files[library].name})",
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
        Parsed presets. Results are cached per folder and file modification times.
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
    # Cross-references between libraries.
    for gname, g in gpus.items():
        if g["nvlink"] is not None:
            lib.get("links", g["nvlink"], files["gpus"], f"{gname}.nvlink")
    for cname, c in cpus.items():
        link = lib.get("links", c["socket_link"], files["cpus"], f"{cname}.socket_link")
        if link["kind"] != "upi":
            raise TopologyError(
                f"link preset {c['socket_link']!r} has kind {link['kind']!r}; a socket link needs kind 'upi'",
                file=files["cpus"],
                field=f"{cname}.socket_link",
            )
    for nname, n in nics.items():
        link = lib.get("links", n["link"], files["nics"], f"{nname}.link")
        if link["kind"] not in ("ib", "roce", "eth"):
            raise TopologyError(
                f"link preset {n['link']!r} has kind {link['kind']!r}; a NIC port needs ib, roce or eth",
                file=files["nics"],
                field=f"{nname}.link",
            )
        if n["rdma"] and link["kind"] == "eth":
            raise TopologyError(
                "an RDMA NIC needs an ib or roce link preset", file=files["nics"], field=f"{nname}.link"
            )
    ipoib = lib.get("links", fabric["ipoib_link"], files["fabric"], "defaults.ipoib_link")
    if ipoib["kind"] != "eth":
        raise TopologyError(
            "the IPoIB link preset must have kind 'eth'", file=files["fabric"], field="defaults.ipoib_link"
        )
    _CACHE.clear()
    _CACHE[key] = lib
    return lib
