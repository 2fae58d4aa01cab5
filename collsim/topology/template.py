"""Node templates (``topologies/nodes/<name>.yaml``) and :func:`load_topology`.

Template format
---------------
A template is a YAML mapping::

    name: dgx-a100                      # optional, default: the file name
    description: 8x A100 SXM4 ...
    source: where the layout comes from
    params:                             # optional: parameters a user may set (node_params / --set)
      gpus: {default: 2, type: int, min: 2, max: 8, description: ...}
    generator: pcie_workstation         # optional: a builder in collsim/topology/generators.py
    devices:                            # static templates: devices and links
      - {name: gpu, count: 8, kind: gpu, preset: a100-sxm4-80gb}     # gpu0 .. gpu7
      - {name: nvswitch, kind: nvswitch, spec: {physical_switches: 6}}
    links:                              # full duplex; `a` (or `b`) may be a list or a range such as gpu[0-7]
      - {a: "gpu[0-7]", b: nvswitch, preset: nvlink3, count: 12}
    nic_population: spread              # optional: the order NIC slots are filled when a fabric uses fewer
                                        # (spread | index | a list of NIC names; collsim/topology/nic_placement.py)
    instance_type: p5.48xlarge          # optional: the cloud instance type the template describes (what a network
                                        # plugin reads from the machine, e.g. aws-ofi-nccl's tuner)

A device entry with ``count`` expands to ``name0 .. name{count-1}``; without it the name is used as it is.
Device kinds: gpu, cpu, pcie_switch, nic, nvswitch, switch. ``gpu``, ``cpu`` and ``nic`` need a ``preset``
(gpus.yaml, cpus.yaml, nics.yaml); ``spec`` overrides preset fields (same units as the preset files). A NIC
entry may give ``ib_names``, one verbs device name per NIC of the entry (what ``NCCL_IB_HCA`` matches; default
``mlx5_<its slot>``, :func:`~collsim.topology.ib_device_name`).
A link entry names a links.yaml ``preset`` and may override ``count`` (parallel links, default 1),
``bandwidth`` (raw per link), ``efficiency``, ``latency``, ``kind`` and ``source``. A PCIe link (preset
``pcie<gen>``, no ``bandwidth`` of its own) runs at the highest generation both ends support, as PCIe link training
sets it: a GPU or CPU preset's ``pcie_gen`` caps it, with a :class:`~collsim.topology.errors.TopologyWarning`
(:func:`_trained_pcie`).

Parameter types: ``int``, ``bool``, ``str``, ``gpu`` / ``cpu`` / ``nic`` (a preset name of that library); ``choices``,
``min``, ``max`` restrict values; a ``default`` of null makes the parameter optional (null = not set).
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import networkx as nx

from collsim.topology.errors import TopologyError, TopologyWarning, display_path
from collsim.topology.layout import NodeLayout
from collsim.topology.model import NO_TRANSIT_KINDS, UNDER_CPU_KINDS, Device, FrozenMap, Link, Topology
from collsim.topology.names import expand_names
from collsim.topology.nic_placement import NicSlot, nic_slots_of, population_order, select_nics
from collsim.topology.presets import (
    DEVICE_SCHEMAS,
    LINK_SCHEMA,
    NODE_TEMPLATE_KEYS,
    PresetLibrary,
    check_gpu_arch,
    check_named_links,
    dma_ratio,
    load_presets,
    parse_record,
    read_yaml,
    topologies_dir,
)
from collsim.vocab import DEVICE_KINDS

__all__ = ["NodeLayout", "available_templates", "load_topology", "resolve_params", "topology_from_template"]

_DEVICE_KEYS = ("name", "kind", "count", "preset", "spec", "source", "notes", "ib_names")
_LINK_KEYS = ("a", "b", "preset", "count", "bandwidth", "efficiency", "latency", "kind", "source", "notes")
_PARAM_KEYS = ("default", "type", "choices", "min", "max", "description")
_PARAM_TYPES = ("int", "bool", "str", "gpu", "cpu", "nic")
_PRESET_KINDS = {"gpu": "gpus", "cpu": "cpus", "nic": "nics"}
# Which device kinds each link kind may join (structural rules, not numbers).
_LINK_ENDS: dict[str, frozenset[str]] = {
    "nvlink": frozenset({"gpu", "nvswitch"}),
    "pcie": frozenset({"gpu", "nic", "pcie_switch", "cpu", "nvswitch"}),
    "upi": frozenset({"cpu"}),
    "c2c": frozenset({"gpu", "cpu"}),  # NVLink-C2C: a GPU and its Grace CPU (checked: one of each)
    "ib": frozenset({"nic", "switch"}),
    "roce": frozenset({"nic", "switch"}),
    "eth": frozenset({"nic", "switch"}),
}
_NAME = re.compile(r"^[A-Za-z_][\w-]*$")


def available_templates() -> list[str]:
    """Return the names of the node templates under ``topologies_dir()/nodes``, sorted."""
    ndir = topologies_dir() / "nodes"
    if not ndir.is_dir():
        return []
    return sorted(p.stem for p in ndir.glob("*.yaml"))


def _template_path(node: str | Path) -> Path:
    p = Path(node)
    if isinstance(node, Path) or p.suffix in (".yaml", ".yml") or len(p.parts) > 1:
        if p.is_file():
            return p
        shipped = topologies_dir() / "nodes" / p.name
        if len(p.parts) == 1 and shipped.is_file():
            return shipped
        raise TopologyError("template file not found", file=p)
    candidate = topologies_dir() / "nodes" / f"{node}.yaml"
    if not candidate.is_file():
        known = available_templates()
        raise TopologyError(
            f"unknown node template {str(node)!r}; known templates: {', '.join(known) or '(none)'} "
            f"(in {topologies_dir() / 'nodes'})",
            field="node",
        )
    return candidate


# ------------------------------------------------------------------------------------------------------ params
def resolve_params(
    decl: Any, given: Mapping[str, Any] | None, presets: PresetLibrary, file: str | Path | None
) -> dict[str, Any]:
    """Check ``given`` against the template's parameter declarations and fill in defaults.

    Parameters
    ----------
    decl : Any
        The template's ``params`` mapping (name to declaration).
    given : Mapping, optional
        Values set by the user.
    presets : PresetLibrary
        For parameters naming presets.
    file : str or Path, optional
        The template file, for messages.

    Returns
    -------
    dict
        Every declared parameter with its value.
    """
    decl = {} if decl is None else decl
    if not isinstance(decl, Mapping):
        raise TopologyError("expected a mapping of parameter name to declaration", file=file, field="params")
    given = dict(given or {})
    unknown = sorted(set(given) - set(decl))
    if unknown:
        known = ", ".join(sorted(decl)) or "none"
        raise TopologyError(
            f"unknown parameter(s) {', '.join(unknown)}; this template takes: {known}",
            file=file,
            field=f"params.{unknown[0]}",
        )
    out: dict[str, Any] = {}
    for pname, d in decl.items():
        dfield = f"params.{pname}"
        if not isinstance(d, Mapping) or "type" not in d or "default" not in d:
            raise TopologyError("a parameter declaration needs 'type' and 'default'", file=file, field=dfield)
        for key in d:
            if key not in _PARAM_KEYS:
                raise TopologyError(f"unknown key {key!r}; valid: {', '.join(_PARAM_KEYS)}", file=file, field=dfield)
        if d["type"] not in _PARAM_TYPES:
            raise TopologyError(
                f"unknown parameter type {d['type']!r}; valid: {', '.join(_PARAM_TYPES)}", file=file, field=dfield
            )
        value = given.get(pname, d["default"])
        out[pname] = _check_param(pname, value, d, presets, file)
    return out


def _check_param(name: str, value: Any, d: Mapping[str, Any], presets: PresetLibrary, file: str | Path | None) -> Any:
    field = f"params.{name}"
    ptype = d["type"]
    if value is None:
        if d["default"] is None:
            return None
        raise TopologyError(f"parameter {name} must be set ({ptype})", file=file, field=field)
    if ptype == "int":
        if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
            value = int(value)  # from a --set override
        if isinstance(value, bool) or not isinstance(value, int):
            raise TopologyError(f"expected an integer, got {value!r}", file=file, field=field)
        lo, hi = d.get("min"), d.get("max")
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise TopologyError(f"expected an integer from {lo} to {hi}, got {value}", file=file, field=field)
    elif ptype == "bool":
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            value = value.strip().lower() == "true"
        if not isinstance(value, bool):
            raise TopologyError(f"expected true or false, got {value!r}", file=file, field=field)
    elif ptype == "str":
        if not isinstance(value, str):
            raise TopologyError(f"expected a string, got {value!r}", file=file, field=field)
    else:
        presets.get(_PRESET_KINDS[ptype], value, file, field)
    choices = d.get("choices")
    if choices is not None and value not in choices:
        raise TopologyError(f"expected one of {', '.join(map(str, choices))}, got {value!r}", file=file, field=field)
    return value


# ------------------------------------------------------------------------------------------------------ building
def _check_entry(entry: Any, keys: Sequence[str], needs: str, file: str | Path | None, field: str) -> None:
    """A device or link entry must be a mapping with known keys only."""
    if not isinstance(entry, Mapping):
        raise TopologyError(f"expected a mapping with {needs}", file=file, field=field)
    for key in entry:
        if key not in keys:
            raise TopologyError(f"unknown key {key!r}; valid: {', '.join(keys)}", file=file, field=f"{field}.{key}")


def _ib_names(entry: Mapping[str, Any], kind: str, count: int, file: str | Path | None, field: str) -> list[str]:
    """A NIC entry's ``ib_names``: the names its devices have in the IB verbs library (``ibv_get_device_list``, what
    ``NCCL_IB_HCA`` matches), one per device in order; empty when the entry gives none."""
    raw = entry.get("ib_names")
    if raw is None:
        return []
    if kind != "nic":
        raise TopologyError(f"only NICs have IB device names, not a {kind}", file=file, field=f"{field}.ib_names")
    if not isinstance(raw, list) or len(raw) != count or not all(isinstance(x, str) and x for x in raw):
        raise TopologyError(
            f"expected a list of {count} device name(s) such as mlx5_0, one per NIC of the entry, got {raw!r}",
            file=file,
            field=f"{field}.ib_names",
        )
    return [str(x) for x in raw]


def _build_layout(data: Mapping[str, Any], presets: PresetLibrary, file: str | Path | None) -> NodeLayout:
    """One node's devices and links from a template's ``devices`` and ``links`` entries (generated or written)."""
    layout = NodeLayout()
    raw_devices = data.get("devices")
    if not isinstance(raw_devices, list) or not raw_devices:
        raise TopologyError("expected a non-empty list of devices", file=file, field="devices")
    first_entry = _add_devices(layout, raw_devices, presets, file)
    raw_links = data.get("links")
    if not isinstance(raw_links, list):
        raise TopologyError("expected a list of links", file=file, field="links")
    slowed = _add_links(layout, raw_links, presets, file)
    for name, dev in layout.devices.items():
        if dev.kind in ("gpu", "nic") and not any(name in pair for pair in layout.links):
            what = "GPU" if dev.kind == "gpu" else "NIC"
            raise TopologyError(
                f"{what} {name!r} is connected to nothing; add a link"
                + (" (a NIC reaches its GPUs over PCIe: to a PCIe switch or a CPU)" if dev.kind == "nic" else ""),
                file=file,
                field=first_entry[name],
            )
    if any(d.kind == "cpu" for d in layout.devices.values()):
        for name in _off_the_host(layout):
            raise TopologyError(
                f"GPU {name!r} reaches no CPU over PCIe (or NVLink-C2C): every GPU hangs under a CPU socket, "
                "through PCIe switches or directly (its host memory, its NICs' paths and NCCL's topology start there); "
                "add a pcie link to a PCIe switch or a CPU",
                file=file,
                field=first_entry[name],
            )
    where = display_path(file)
    for (limit, what, how), ends in slowed.items():
        warnings.warn(
            f"{where + ': ' if where else ''}the PCIe links of {', '.join(ends)} run at {what}: {limit} supports "
            f"{how}, and a link trains to the highest {'width' if how.startswith('x') else 'generation'} both ends "
            "support",
            TopologyWarning,
            stacklevel=2,
        )
    return layout


def _off_the_host(layout: NodeLayout) -> list[str]:
    """The GPUs of ``layout`` with no path of PCIe or NVLink-C2C links to a CPU (through PCIe switches, never
    through another GPU or a NIC), as :meth:`Topology.host_cpu` looks for one."""
    adj: dict[str, set[str]] = {}
    for (a, b), lk in layout.links.items():
        if lk.kind in UNDER_CPU_KINDS:
            adj.setdefault(a, set()).add(b)
            adj.setdefault(b, set()).add(a)
    reached = {n for n, d in layout.devices.items() if d.kind == "cpu"}
    frontier = list(reached)
    while frontier:  # from the CPUs outwards, passing PCIe switches only
        u = frontier.pop()
        if layout.devices[u].kind in NO_TRANSIT_KINDS:
            continue
        for v in adj.get(u, ()):
            if v not in reached:
                reached.add(v)
                frontier.append(v)
    return [n for n, d in layout.devices.items() if d.kind == "gpu" and n not in reached]


def _add_devices(
    layout: NodeLayout, raw_devices: list[Any], presets: PresetLibrary, file: str | Path | None
) -> dict[str, str]:
    """Add every device entry's devices to ``layout``; returns each device's entry field (``devices.<i>``)."""
    first_entry: dict[str, str] = {}
    for i, entry in enumerate(raw_devices):
        field = f"devices.{i}"
        _check_entry(entry, _DEVICE_KEYS, "name and kind", file, field)
        name, kind = entry.get("name"), entry.get("kind")
        if not isinstance(name, str) or not _NAME.match(name):
            raise TopologyError(
                f"expected a device name of letters, digits, '_' or '-', got {name!r}", file=file, field=f"{field}.name"
            )
        if kind not in DEVICE_KINDS:
            raise TopologyError(
                f"unknown device kind {kind!r}; valid kinds: {', '.join(DEVICE_KINDS)}",
                file=file,
                field=f"{field}.kind",
            )
        spec: dict[str, Any]
        if kind in _PRESET_KINDS:
            preset_name = entry.get("preset")
            if preset_name is None:
                raise TopologyError(
                    f"a {kind} needs a preset from {_PRESET_KINDS[kind]}.yaml", file=file, field=f"{field}.preset"
                )
            spec = dict(presets.get(_PRESET_KINDS[kind], preset_name, file, f"{field}.preset"))
            if entry.get("spec") is not None:
                spec.update(parse_record(entry["spec"], DEVICE_SCHEMAS[kind], file, f"{field}.spec", partial=True))
                check_named_links(presets, str(kind), spec, file, f"{field}.spec")  # a link it names exists
                if kind == "gpu":
                    check_gpu_arch(spec, file, f"{field}.spec")
        else:
            if entry.get("preset") is not None:
                raise TopologyError(f"a {kind} takes no preset; use spec", file=file, field=f"{field}.preset")
            raw_spec = entry.get("spec") or {}
            if not isinstance(raw_spec, Mapping):
                raise TopologyError("expected a mapping", file=file, field=f"{field}.spec")
            spec = {str(k): v for k, v in raw_spec.items()}
            _check_switch_spec(str(kind), spec, file, f"{field}.spec")
        if entry.get("source") is not None:
            spec["source"] = str(entry["source"])
        count = entry.get("count")
        if count is None:
            names = [name]
        else:
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise TopologyError(f"expected a positive integer, got {count!r}", file=file, field=f"{field}.count")
            names = [f"{name}{k}" for k in range(count)]
        ib_names = _ib_names(entry, str(kind), len(names), file, field)
        for k, n in enumerate(names):
            if n in layout.devices:
                raise TopologyError(
                    f"duplicate device name {n!r} (first in {first_entry[n]})", file=file, field=f"{field}.name"
                )
            first_entry[n] = field
            own = FrozenMap({**spec, "ib_name": ib_names[k]}) if ib_names else FrozenMap(spec)
            layout.devices[n] = Device(n, str(kind), 0, layout.kind_count(str(kind)), own)
    return first_entry


#: The ``spec`` keys of the devices without a preset: key -> (what it must be, the check). A misspelt key
#: (``multicst``) would otherwise be read as absent: NVLS silently off.
_SWITCH_SPECS: dict[str, dict[str, tuple[str, Callable[[Any], bool]]]] = {
    "nvswitch": {
        "physical_switches": ("a positive integer (NVSwitch chips)", lambda v: _is_int(v) and v >= 1),
        "generation": ("a positive integer (the NVSwitch generation: 2 A100, 3 H100, 4 B200)",
                       lambda v: _is_int(v) and v >= 1),
        "multicast": ("true or false (NVLink SHARP: NVLS)", lambda v: isinstance(v, bool)),
    },
    "pcie_switch": {"gen": ("a PCIe generation, an integer >= 0 (0: unknown)", lambda v: _is_int(v) and v >= 0)},
}  # fmt: skip


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_switch_spec(kind: str, spec: Mapping[str, Any], file: str | Path | None, field: str) -> None:
    """Refuse an unknown key or a wrong value in an NVSwitch's or a PCIe switch's ``spec``, naming the field
    (``source``, ``notes`` and ``description`` are free text)."""
    known = _SWITCH_SPECS.get(kind)
    if known is None:
        return
    for key, value in spec.items():
        if key in ("source", "notes", "description"):
            continue
        if key not in known:
            raise TopologyError(f"unknown {kind} spec key {key!r}; valid: {', '.join(known)}", file=file,
                                field=f"{field}.{key}")  # fmt: skip
        what, ok = known[key]
        if not ok(value):
            raise TopologyError(f"expected {what}, got {value!r}", file=file, field=f"{field}.{key}")


def _add_links(
    layout: NodeLayout, raw_links: list[Any], presets: PresetLibrary, file: str | Path | None
) -> dict[tuple[str, str, str], list[str]]:
    """Add every link entry's links to ``layout``; returns the PCIe links slowed by an end's generation or width
    (:func:`_trained_pcie`)."""
    nvlinks_used: dict[str, int] = {}
    slowed: dict[tuple[str, str, str], list[str]] = {}
    for i, entry in enumerate(raw_links):
        field = f"links.{i}"
        _check_entry(entry, _LINK_KEYS, "a, b and preset", file, field)
        for end in ("a", "b"):
            if end not in entry:
                raise TopologyError("missing link endpoint (a device name)", file=file, field=f"{field}.{end}")
        a_list = expand_names(entry["a"], file, f"{field}.a")
        b_list = expand_names(entry["b"], file, f"{field}.b")
        if len(a_list) > 1 and len(b_list) > 1:
            raise TopologyError(
                "give a list on one side only (each of a to b, or a to each of b)", file=file, field=field
            )
        for end, lst in (("a", a_list), ("b", b_list)):
            for n in lst:
                if n not in layout.devices:
                    raise TopologyError(
                        f"link endpoint {n!r} is not a device; devices: {', '.join(layout.devices)}",
                        file=file,
                        field=f"{field}.{end}",
                    )
        if "preset" not in entry:
            raise TopologyError("missing link preset (a name from links.yaml)", file=file, field=f"{field}.preset")
        base = dict(presets.get("links", entry["preset"], file, f"{field}.preset"))
        overrides = {k: entry[k] for k in ("bandwidth", "efficiency", "latency", "kind", "source") if k in entry}
        base.update(parse_record(overrides, LINK_SCHEMA, file, field, partial=True))
        count = entry.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise TopologyError(f"expected a positive integer, got {count!r}", file=file, field=f"{field}.count")
        kind = base["kind"]
        for a in a_list:
            for b in b_list:
                trained = base if "bandwidth" in entry else _trained_pcie(layout, a, b, entry, base, presets, slowed)
                _add_layout_link(layout, a, b, kind, trained, count, file, field, nvlinks_used)
    return slowed


_PCIE_PRESET = re.compile(r"pcie(\d)")
#: The width of the ``pcie<gen>`` link presets (links.yaml: "PCIe Gen<n> x16").
_PRESET_LANES = 16


def _pcie_gen_of(dev: Device) -> tuple[int | None, str]:
    """The highest PCIe generation a GPU's or CPU's preset gives its ports (None: not known, or another kind of
    device) and how to name that limit. A PCIe switch's ``gen`` is not one: an imported template gives a switch the
    generation of its own uplink, while its ports towards the GPUs may run faster (a Gen4 switch on a Gen3 socket)."""
    gen = dev.spec.get("pcie_gen") if dev.kind in ("gpu", "cpu") else None
    return (int(gen) if gen is not None else None), f"the {dev.kind} preset {dev.spec.get('preset', dev.name)}"


def _trained_pcie(
    layout: NodeLayout,
    a: str,
    b: str,
    entry: Mapping[str, Any],
    base: Mapping[str, Any],
    presets: PresetLibrary,
    slowed: dict[tuple[str, str, str], list[str]],
) -> Mapping[str, Any]:
    """``base`` (a link preset with the entry's overrides), or the ``pcie<gen>`` preset of the lower generation
    where an end of the ``a``-``b`` link supports less than the link's: a PCIe link trains to the highest
    generation both ends support (PCI Express Base Specification, link training). Ends: a GPU's or CPU's preset
    ``pcie_gen``; PCIe switches, NICs and ends without a generation do not limit. Likewise the width: the
    ``pcie<gen>`` presets are x16 links, and a GPU preset's ``pcie_lanes`` below 16 scales the link's bandwidth by
    lanes / 16 (link training settles on the widest width both ends have; NCCL's PCI bandwidth is width x rate,
    ``ncclTopoGetPciLink``). Each slowed link is recorded in ``slowed`` under (the limiting end, what the link runs
    at, what that end supports)."""
    m = _PCIE_PRESET.fullmatch(str(entry.get("preset")))
    if base.get("kind") != "pcie" or m is None:
        return base
    gen = int(m.group(1))
    trained = dict(base)
    ends = [_pcie_gen_of(layout.devices[n]) for n in (a, b)]
    known = [(g, who) for g, who in ends if g is not None and g < gen]
    run_gen = gen
    if known:
        cap, who = min(known)
        lower = f"pcie{cap}"
        if lower in presets.links:
            trained = dict(presets.links[lower])
            trained.update({k: v for k, v in base.items() if k in ("efficiency", "latency", "kind", "source")
                            and k in entry})  # fmt: skip
            run_gen = cap
            slowed.setdefault((who, f"Gen{cap}, not Gen{gen} (pcie{gen})", f"PCIe Gen{cap}"), []).append(f"{a}-{b}")
    widths = [(int(d.spec["pcie_lanes"]), n) for n in (a, b) if (d := layout.devices[n]).kind == "gpu"
              and d.spec.get("pcie_lanes") is not None and int(d.spec["pcie_lanes"]) < _PRESET_LANES]  # fmt: skip
    if widths:
        lanes, gpu = min(widths)
        trained["bandwidth"] = float(trained["bandwidth"]) * lanes / _PRESET_LANES
        who = f"the gpu preset {layout.devices[gpu].spec.get('preset', gpu)}"
        slowed.setdefault((who, f"Gen{run_gen} x{lanes}, not x{_PRESET_LANES}", f"x{lanes}"), []).append(
            f"{a}-{b}"
        )
    return trained


def _add_layout_link(
    layout: NodeLayout,
    a: str,
    b: str,
    kind: str,
    base: Mapping[str, Any],
    count: int,
    file: str | Path | None,
    field: str,
    nvlinks_used: dict[str, int],
) -> None:
    if a == b:
        raise TopologyError(f"a link from {a!r} to itself", file=file, field=field)
    if (a, b) in layout.links or (b, a) in layout.links:
        raise TopologyError(
            f"duplicate link between {a!r} and {b!r}; use count for parallel links", file=file, field=field
        )
    for n in (a, b):
        dk = layout.devices[n].kind
        if dk not in _LINK_ENDS[kind]:
            raise TopologyError(
                f"a {kind} link cannot attach to {n!r} (a {dk}); it joins: {', '.join(sorted(_LINK_ENDS[kind]))}",
                file=file,
                field=field,
            )
        if kind == "c2c" and {layout.devices[a].kind, layout.devices[b].kind} != {"gpu", "cpu"}:
            raise TopologyError(
                f"a c2c link (NVLink-C2C) joins a GPU to its CPU; {a!r} and {b!r} are a {layout.devices[a].kind} and "
                f"a {layout.devices[b].kind}",
                file=file,
                field=field,
            )
        if kind == "nvlink" and dk == "gpu":
            used = nvlinks_used.get(n, 0) + count
            have = layout.devices[n].spec.get("nvlinks") or 0
            if used > have:
                raise TopologyError(
                    f"GPU {n!r} would use {used} NVLinks; its preset {layout.devices[n].spec.get('preset')} has {have}",
                    file=file,
                    field=f"{field}.count",
                )
            nvlinks_used[n] = used
    raw = float(base["bandwidth"]) * count
    layout.links[(a, b)] = Link(
        src=a,
        dst=b,
        kind=kind,
        bandwidth=raw * float(base["efficiency"]),
        raw_bandwidth=raw,
        latency=float(base["latency"]),
        count=count,
        preset=str(base["preset"]),
        source=str(base["source"]),
        dma_ratio=dma_ratio(base),
    )


def _prefixed(lk: Link, pa: str, pb: str) -> Link:
    return dataclasses.replace(lk, src=pa, dst=pb)


def _check_template(data: Any, file: str | Path | None) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise TopologyError(f"expected a mapping with devices and links, got {type(data).__name__}", file=file)
    for key in data:
        if key not in NODE_TEMPLATE_KEYS:
            valid = ", ".join(NODE_TEMPLATE_KEYS)
            raise TopologyError(f"unknown key {key!r}; valid: {valid}", file=file, field=str(key))
    return data


def topology_from_template(
    data: Mapping[str, Any],
    nodes: int = 1,
    fabric: Mapping[str, Any] | None = None,
    node_params: Mapping[str, Any] | None = None,
    file: str | Path | None = None,
    presets: PresetLibrary | None = None,
    ranks_per_gpu: int = 1,
) -> Topology:
    """Build a cluster Topology from a template mapping (as read from a node template file).

    Parameters
    ----------
    data : Mapping
        The template (see the module docstring for the format).
    nodes : int
        Number of identical nodes.
    fabric : Mapping, optional
        Fabric configuration (see :mod:`collsim.topology.fabric`); required when ``nodes > 1``.
    node_params : Mapping, optional
        Values for the template's parameters.
    file : str or Path, optional
        Where ``data`` came from, for messages.
    presets : PresetLibrary, optional
        Preset library (default: :func:`load_presets`).
    ranks_per_gpu : int
        Processes sharing each GPU (:attr:`Topology.ranks_per_gpu`); more than 1 needs a template with GPUs.

    Returns
    -------
    Topology
    """
    from collsim.topology.fabric import add_fabric, parse_fabric

    presets = load_presets() if presets is None else presets
    data = _check_template(data, file)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise TopologyError(f"expected a positive integer number of nodes, got {nodes!r}", field="nodes")
    if nodes > 1 and fabric is None:
        raise TopologyError(
            f"{nodes} nodes need a fabric: give fabric.topology (single_switch | rail_optimized | fat_tree)",
            field="fabric",
        )
    params = resolve_params(data.get("params"), node_params, presets, file)
    layout = _node_layout(data, params, presets, file)
    cfg = parse_fabric(fabric, presets) if fabric is not None else None
    population = None
    if data.get("nic_population") is not None or cfg is not None:
        population = population_order(nic_slots_of(layout), data.get("nic_population"), file)

    if cfg is not None:
        assert population is not None
        _apply_fabric_to_node(layout, cfg, presets, file, population, data.get("params") or {}, params)

    g: nx.DiGraph = nx.DiGraph()
    for n in range(nodes):
        prefix = f"n{n}/"
        for local, dev in layout.devices.items():
            g.add_node(prefix + local, device=Device(prefix + local, dev.kind, n, dev.index, dev.spec))
        for (a, b), lk in layout.links.items():
            g.add_edge(prefix + a, prefix + b, link=_prefixed(lk, prefix + a, prefix + b))
            g.add_edge(prefix + b, prefix + a, link=_prefixed(lk, prefix + b, prefix + a))
    resolved: dict[str, Any] | None = None
    if cfg is not None:
        resolved = add_fabric(g, nodes, cfg, presets)
    name = str(data.get("name") or (Path(file).stem if file is not None else "topology"))
    src = None if file is None else str(file)
    instance = data.get("instance_type")
    if instance is not None and not (isinstance(instance, str) and instance.strip()):
        raise TopologyError(
            f"expected an instance type name such as p5.48xlarge, got {instance!r}", file=file, field="instance_type"
        )
    if ranks_per_gpu != 1 and not any(d.kind == "gpu" for d in layout.devices.values()):
        raise TopologyError(
            f"ranks_per_gpu {ranks_per_gpu} needs GPUs; template {name!r} has none (a CPU-only node's processes per "
            "node are its 'processes' parameter)",
            field="ranks_per_gpu",
        )
    return Topology(
        name, g, nodes=nodes, params=params, source_file=src, fabric=resolved,
        instance_type=instance.strip() if instance else None, ranks_per_gpu=ranks_per_gpu,
    )  # fmt: skip


def _node_layout(
    data: Mapping[str, Any], params: Mapping[str, Any], presets: PresetLibrary, file: str | Path | None
) -> NodeLayout:
    """One node's devices and links: its generator's output for ``params`` (a generator template) or the
    template's own lists."""
    from collsim.topology.generators import GENERATORS, check_generator_params

    gen = data.get("generator")
    if gen is None:
        return _build_layout(data, presets, file)
    if gen not in GENERATORS:
        raise TopologyError(
            f"unknown generator {gen!r}; known: {', '.join(sorted(GENERATORS))}", file=file, field="generator"
        )
    if "devices" in data or "links" in data:
        raise TopologyError("a template with a generator lists no devices or links", file=file, field="generator")
    try:
        check_generator_params(gen, params)
        built = GENERATORS[gen](params, presets)
    except TopologyError as err:
        if err.file is not None:
            raise
        raise TopologyError(err.message, file=file, field=err.field) from None
    return _build_layout(built, presets, file)


def _apply_fabric_to_node(
    layout: NodeLayout,
    cfg: dict[str, Any],
    presets: PresetLibrary,
    file: Any,
    population: list[NicSlot],
    declared: Mapping[str, Any] | None = None,
    params: Mapping[str, Any] | None = None,
) -> None:
    """Apply fabric.nic, fabric.nic_speed and the NIC selection (fabric.nics, nics_per_node, nics_per_switch,
    nics_per_socket, in the template's population order) to the node's NICs. ``declared``: the template's
    parameter declarations, ``params`` their values (for the message when the node has no NIC).

    The NICs not kept are removed with their links; the kept ones keep their names and are renumbered 0 .. k-1
    in template order (:mod:`collsim.topology.nic_placement`).
    """
    nics = sorted((d for d in layout.devices.values() if d.kind == "nic"), key=lambda d: d.index)
    if not nics:
        declared, params = declared or {}, params or {}
        no_nics = [k for k in declared if k.startswith("nics_per") and params.get(k) == 0]  # a count set to 0
        if no_nics:
            hint = " and ".join(f"cluster.node_params.{k} is 0" for k in no_nics) + ": set it to 1 or more"
        elif "nic" in declared:
            hint = (
                "this template takes one: set cluster.node_params.nic to a NIC preset (nics.yaml), e.g. connectx-7-ndr"
            )
        else:
            hint = "pcie-workstation, l40s-8gpu, rtx5090-4gpu and cpu-host take a 'nic' param"
        raise TopologyError(
            f"the node template has no NIC to attach to the fabric ({hint})",
            file=file,
            field="fabric",
        )
    kept = {s.name for s in select_nics(population, cfg)}
    for dev in nics:
        if dev.local_name not in kept:
            del layout.devices[dev.local_name]
            for pair in [p for p in layout.links if dev.local_name in p]:
                del layout.links[pair]
    for index, dev in enumerate(d for d in nics if d.local_name in kept):
        spec = dict(presets.nics[cfg["nic"]]) if cfg.get("nic") else dict(dev.spec)
        if "ib_name" in dev.spec:  # the device keeps its name when fabric.nic changes its model
            spec["ib_name"] = dev.spec["ib_name"]
        spec["template_index"] = dev.index  # its slot on the template, which the kept NICs' renumbering loses
        if cfg.get("nic_speed") is not None:
            spec["speed"] = cfg["nic_speed"]
        layout.devices[dev.local_name] = Device(dev.name, dev.kind, dev.node, index, FrozenMap(spec))


def load_topology(
    node: str | Path,
    nodes: int = 1,
    fabric: Mapping[str, Any] | None = None,
    node_params: Mapping[str, Any] | None = None,
    ranks_per_gpu: int = 1,
) -> Topology:
    """Load a node template and build a cluster of ``nodes`` copies joined by ``fabric``.

    Parameters
    ----------
    node : str or Path
        A template name (``topologies/nodes/<name>.yaml``, see :func:`available_templates`) or a template file path.
    nodes : int
        Number of nodes (default 1).
    fabric : Mapping, optional
        Fabric configuration, required when ``nodes > 1``; see :func:`collsim.topology.fabric.parse_fabric`.
    node_params : Mapping, optional
        Values for a parametrised template's parameters (``{"gpus": 4, "pcie_gen": 4}``).
    ranks_per_gpu : int
        Processes sharing each GPU (default 1; see :attr:`Topology.ranks_per_gpu`).

    Returns
    -------
    Topology
        Device names are ``n{node}/{local}``; fabric switches are ``fabric/...``.

    Raises
    ------
    TopologyError
        Naming the file and the dotted field that is wrong.
    """
    path = _template_path(node)
    data = read_yaml(path)
    return topology_from_template(
        data, nodes=nodes, fabric=fabric, node_params=node_params, file=path, ranks_per_gpu=ranks_per_gpu
    )
