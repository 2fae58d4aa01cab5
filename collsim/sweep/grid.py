"""Grid files: a base scenario, axes over any scenario field (the paths of ``--set``), product or zip, sizes.

A grid is a what-if question as data::

    base: 2node-h100-ib                 # a built-in name, a scenario file (relative to this file) or a mapping
    set: [backends.gloo.enabled=false]  # optional: overrides every point gets, before the axes
    backends: [nccl]                    # optional: default each point's enabled backends
    mode: product                       # product (default: every combination) or zip (the i-th of each axis)
    axes:
      cluster.nodes: [2, 4, 8]
      cluster.fabric.nic_speed: [200Gb/s, 400Gb/s]
      perturb.links:                    # a mapping names its values (the label is what tables show)
        healthy: []
        one slow NIC: [{device: n1/nic2, kind: ib, scale: 0.5}]
    sizes: 1MiB:1GiB:x4                 # the size axis, always crossed with the others (default: workload.sizes)

An axis path is exactly what ``--set`` takes (``backends.nccl.env.NCCL_ALGO``, ``cluster.node_params.gpus``); the
axis ``scenario`` varies the base itself (built-in names or files). :meth:`Grid.resolve` validates every point's
scenario before anything runs and raises one :class:`~collsim.scenario.ScenarioError` naming the grid file, the
point and the field.

Examples
--------
>>> g = grid_from_mapping({"base": "pcie-2gpu-nop2p", "axes": {"cluster.node_params.pcie_gen": [3, 4]},
...                        "sizes": "1MiB,1GiB", "backends": ["nccl"]})
>>> [v.params for v in g.variants()]
[{'cluster.node_params.pcie_gen': 3}, {'cluster.node_params.pcie_gen': 4}]
>>> resolved = g.resolve()
>>> len(resolved.points), resolved.points[1].label()
(4, 'cluster.node_params.pcie_gen=3, nccl, 1GiB')
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from collsim.api import Simulator
from collsim.files import FileReadError, read_text_file
from collsim.scenario import Scenario, ScenarioError, ScenarioWarning, load_scenario
from collsim.units import UnitError, format_size, parse_size, parse_size_range
from collsim.vocab import BACKENDS

__all__ = [
    "GRID_KEYS",
    "MODES",
    "SCENARIO_AXIS",
    "Axis",
    "Grid",
    "GridPoint",
    "ResolvedGrid",
    "Variant",
    "grid_from_mapping",
    "load_grid",
]

#: The keys a grid file may hold.
GRID_KEYS = ("name", "description", "base", "set", "backends", "mode", "axes", "sizes", "breakdown", "store")
#: How axes combine: every combination, or the i-th value of each.
MODES = ("product", "zip")
#: The axis that varies the base scenario itself.
SCENARIO_AXIS = "scenario"
#: Scenario fields whose values name files: an axis value is taken from the grid's folder where such a file is there.
FILE_FIELDS = frozenset({"calibration", "preset_files", "cluster.node", "training.model",
                         "backends.nccl.env.NCCL_TUNER_CONFIG_FILE"})  # fmt: skip
#: Where a grid given as a mapping says it came from.
DICT_SOURCE = "<grid>"


def _yaml_value(value: Any) -> str:
    """``value`` as the text of a ``--set`` item's VALUE (YAML flow style) that reads back as ``value``."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf, sort_keys=False).strip()
    if text.endswith("\n..."):
        text = text[: -len("\n...")].strip()
    elif text.endswith("..."):
        text = text[:-3].strip()
    return text


def _label(value: Any) -> Any:
    """What a table shows for an axis value: scalars as they are, structures as one line of YAML."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return _yaml_value(value)


@dataclass(frozen=True)
class Axis:
    """One axis: a scenario field (a ``--set`` path, or :data:`SCENARIO_AXIS`) and its values.

    Attributes
    ----------
    path : str
        E.g. ``"cluster.nodes"``.
    values : tuple
        What each point sets the field to (YAML data).
    labels : tuple
        What tables and figures show for each value: the value itself, or the name a mapping gave it.
    """

    path: str
    values: tuple[Any, ...]
    labels: tuple[Any, ...]


@dataclass(frozen=True)
class Variant:
    """One combination of axis values: a scenario, before sizes and backends make it points.

    Attributes
    ----------
    index : int
        Position in the grid (0-based).
    params : dict
        Axis path to label, in axis order.
    source : str or mapping
        The base scenario of this variant.
    overrides : tuple of str
        ``--set`` items: the grid's ``set``, then one per field axis.
    """

    index: int
    params: dict[str, Any]
    source: str | Mapping[str, Any]
    overrides: tuple[str, ...]

    def label(self) -> str:
        """``"cluster.nodes=2, NCCL_ALGO=Ring"`` (the full path of each axis); ``"base"`` without axes."""
        return ", ".join(f"{k}={v}" for k, v in self.params.items()) or "base"


@dataclass(frozen=True)
class GridPoint:
    """One simulation of a sweep: a variant's scenario, one backend, one size.

    Attributes
    ----------
    index : int
        Position in the sweep (variants in grid order, then backends, then sizes).
    variant : Variant
        Its axis values.
    scenario : Scenario
        Its resolved, validated scenario.
    backend : str
        ``"nccl"`` or ``"gloo"``.
    size : int
        Bytes.
    """

    index: int
    variant: Variant
    scenario: Scenario
    backend: str
    size: int

    def label(self) -> str:
        """``"cluster.nodes=2, nccl, 1MiB"``."""
        head = self.variant.label()
        return ", ".join(([head] if self.variant.params else []) + [self.backend, format_size(self.size)])


@dataclass
class ResolvedGrid:
    """A grid whose every point was validated: the variants' scenarios and the points in sweep order."""

    grid: Grid
    scenarios: list[Scenario]
    points: list[GridPoint]


@dataclass
class Grid:
    """A parsed grid file (see the module docstring); :meth:`resolve` validates and expands it.

    Attributes
    ----------
    base : str or mapping or None
        The base scenario (None when the ``scenario`` axis names every one).
    axes : list of Axis
        In file order (with ``mode: product`` the last varies fastest, as nested loops).
    mode : str
        ``"product"`` or ``"zip"``.
    sizes : list of int or None
        The size axis, bytes; None: each variant's ``workload.sizes``.
    backends : list of str or None
        None: each variant's enabled backends.
    overrides : list of str
        ``--set`` items every point gets before its axes (the file's ``set``, then the command line's).
    breakdown : bool
        Attribute each collective's time to activities (the store's ``breakdown`` column).
    name : str
        For titles; default the file's stem.
    file : str
        The grid file (``"<grid>"`` for a mapping), named in errors.
    folder : Path
        Against which relative paths (base, scenario axis values, store) resolve.
    store : Path or None
        The results store the file names, resolved against :attr:`folder`.
    """

    base: str | Mapping[str, Any] | None
    axes: list[Axis] = field(default_factory=list)
    mode: str = "product"
    sizes: list[int] | None = None
    backends: list[str] | None = None
    overrides: list[str] = field(default_factory=list)
    breakdown: bool = False
    name: str = "grid"
    description: str = ""
    file: str = DICT_SOURCE
    folder: Path = field(default_factory=Path.cwd)
    store: Path | None = None

    def _error(self, message: str, where: str | None = None) -> ScenarioError:
        return ScenarioError(message, file=self.file, field=where)

    def with_overrides(self, overrides: Sequence[str]) -> Grid:
        """A copy with ``overrides`` (``--set`` items) added after the file's ``set``."""
        return dataclasses.replace(self, overrides=[*self.overrides, *overrides])

    def variants(self) -> list[Variant]:
        """The combinations of axis values, in grid order (no validation beyond the file's shape)."""
        if not self.axes:
            combos: list[tuple[int, ...]] = [()]
        elif self.mode == "zip":
            combos = [tuple(i for _ in self.axes) for i in range(len(self.axes[0].values))]
        else:
            combos = list(itertools.product(*(range(len(a.values)) for a in self.axes)))
        out = []
        for n, combo in enumerate(combos):
            source = self.base
            overrides = list(self.overrides)
            params: dict[str, Any] = {}
            for axis, i in zip(self.axes, combo, strict=True):
                params[axis.path] = axis.labels[i]
                if axis.path == SCENARIO_AXIS:
                    source = axis.values[i]
                else:
                    overrides.append(f"{axis.path}={_yaml_value(self._file_value(axis.path, axis.values[i]))}")
            assert source is not None  # checked when parsed
            out.append(Variant(n, params, self._source(source), tuple(overrides)))
        return out

    def _file_value(self, path: str, value: Any) -> Any:
        """An axis value naming a file (:data:`FILE_FIELDS`) relative to the grid's folder, where such a file is
        there (the grid is where it was written); any other value as it is."""
        if path not in FILE_FIELDS:
            return value
        if isinstance(value, list):
            return [self._file_value(path, v) for v in value]
        if isinstance(value, str) and value:
            candidate = Path(value).expanduser()
            if not candidate.is_absolute() and (self.folder / candidate).exists():
                return str(self.folder / candidate)
        return value

    def _axis_of(self, field: str | None) -> str | None:
        """The axis whose path ``field`` (an error's or warning's) is, or lies under."""
        for axis in self.axes:
            if field and (field == axis.path or field.startswith((axis.path + ".", axis.path + "["))):
                return axis.path  # a field under it: a mapping's key or a list's item (perturb.down[0].device)
        return None

    def _axis_warning(self, text: str) -> str:
        """A warning about a field an axis sets (``FILE: FIELD: what``), as the grid's: the base scenario's file
        did not write it."""
        for axis in self.axes:  # the field itself, or one under it (perturb.links[1]: ..., perturb.links.x: ...)
            m = re.search(rf"(?:^|(?<=: )){re.escape(axis.path)}(?=: |\[|\.)", text)
            if m is not None:
                return f"{self.file}: axes.{text[m.start():]}"
        return text

    def _source(self, source: str | Mapping[str, Any]) -> str | Mapping[str, Any]:
        """A scenario source as ``load_scenario`` takes it: a file relative to the grid's folder when one is there,
        else as written (a built-in name, or a path relative to the current folder)."""
        if isinstance(source, str):
            candidate = Path(source).expanduser()
            if not candidate.is_absolute() and (self.folder / candidate).is_file():
                return str(self.folder / candidate)
        return source

    def resolve(
        self, check: bool = True, on_simulator: Callable[[Variant, Simulator], None] | None = None
    ) -> ResolvedGrid:
        """Load and validate every variant's scenario, then list the points (variants x backends x sizes).

        Parameters
        ----------
        check : bool
            Also build each variant's cluster and backends' options (:class:`collsim.api.Simulator`), so that a
            field only the topology or NCCL's environment can judge fails here too, before anything runs.
        on_simulator : callable, optional
            ``on_simulator(variant, sim)`` with each simulator ``check`` built (to keep it for the run).

        Raises
        ------
        ScenarioError
            The first invalid point: ``<grid file>: point <i> (<axis=value, ...>): <field>: <what is wrong>``.
        """
        scenarios: list[Scenario] = []
        points: list[GridPoint] = []
        seen_warnings: set[str] = set()
        for variant in self.variants():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ScenarioWarning)
                scenario, sim = self._load(variant, check)
            if sim is not None and on_simulator is not None:
                on_simulator(variant, sim)
            for w in caught:  # a warning of the base scenario once, not once per point
                text = self._axis_warning(str(w.message))
                if text not in seen_warnings:
                    seen_warnings.add(text)
                    warnings.warn_explicit(type(w.message)(text), w.category, w.filename, w.lineno)
            scenarios.append(scenario)
            backends = self.backends if self.backends is not None else scenario.backend_names()
            if not backends:
                raise self._point_error(variant, ScenarioError(
                    "no backend enabled; enable backends.nccl or backends.gloo, or list `backends` in the grid",
                    field="backends"))  # fmt: skip
            sizes = self.sizes if self.sizes is not None else scenario.sizes()
            for backend in backends:
                for size in sizes:
                    points.append(GridPoint(len(points), variant, scenario, backend, size))
        return ResolvedGrid(self, scenarios, points)

    def _load(self, variant: Variant, check: bool) -> tuple[Scenario, Simulator | None]:
        try:
            scenario = load_scenario(variant.source, variant.overrides)
            sim = Simulator(scenario) if check else None
        except ScenarioError as exc:
            raise self._point_error(variant, exc) from None
        return scenario, sim

    def _point_error(self, variant: Variant, exc: ScenarioError) -> ScenarioError:
        """``exc`` (from one variant's scenario) as an error naming the grid file and the point."""
        inner = f"{exc.field}: {exc.message}" if exc.field else exc.message
        source = variant.source if isinstance(variant.source, str) else None
        axis = self._axis_of(exc.field)
        if axis is not None:  # the grid's axis set it: not the base scenario's file
            inner = f"{inner} (axis {axis})"
        elif source is not None and exc.file == source and not Path(source).expanduser().is_file():
            # the base scenario itself is missing: say where it was looked for (_source)
            inner = f"{inner} ({source}: looked for in the grid's folder {self.folder} and in the current folder)"
        elif exc.file and exc.file not in ("--set", "<dict>") and exc.file != source and not (
            source and Path(exc.file).name == Path(source).name
        ):
            inner = f"{inner} (in {exc.file})"
        return ScenarioError(inner, file=self.file, field=f"point {variant.index} ({variant.label()})")


# ---------------------------------------------------------------------------------------------------------- parsing


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file (YAML); see the module docstring for its keys.

    Raises
    ------
    ScenarioError
        Naming the file and the key (``axes.cluster.nodes``) when the file cannot be read or is malformed.
    """
    file = str(path)
    try:
        text = read_text_file(Path(path).expanduser())
    except FileReadError as exc:
        raise ScenarioError(str(exc), file=file) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ScenarioError(f"invalid YAML{where}: {getattr(exc, 'problem', None) or exc}", file=file) from None
    folder = Path(path).expanduser().resolve().parent
    return grid_from_mapping(data, file=file, folder=folder, name=Path(path).stem)


def grid_from_mapping(
    data: Any, *, file: str = DICT_SOURCE, folder: Path | None = None, name: str | None = None
) -> Grid:
    """A :class:`Grid` from the data of a grid file (a dict, e.g. in a notebook).

    Parameters
    ----------
    data : mapping
        The keys of :data:`GRID_KEYS`; ``axes`` maps paths to lists (or to mappings label -> value).
    file : str
        Named in errors.
    folder : Path, optional
        Against which relative paths resolve (default: the current folder).
    name : str, optional
        Default for the ``name`` key.

    Raises
    ------
    ScenarioError
        Naming ``file`` and the key.
    """
    folder = folder or Path.cwd()
    if not isinstance(data, Mapping):
        raise ScenarioError(f"expected a mapping with keys {', '.join(GRID_KEYS)}", file=file)
    for key in data:
        if key not in GRID_KEYS:
            near = difflib.get_close_matches(str(key), GRID_KEYS, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ScenarioError(f"unknown key{hint}; expected one of: {', '.join(GRID_KEYS)}", file=file,
                                field=str(key))  # fmt: skip
    mode = data.get("mode", "product")
    if mode not in MODES:
        raise ScenarioError(f"expected one of {', '.join(MODES)}, got {mode!r}", file=file, field="mode")
    axes = _axes(data.get("axes"), file)
    base = data.get("base")
    if base is None and not any(a.path == SCENARIO_AXIS for a in axes):
        raise ScenarioError("required: the base scenario (a built-in name, a file or a mapping), or a "
                            f"`{SCENARIO_AXIS}` axis", file=file, field="base")  # fmt: skip
    if base is not None and not isinstance(base, (str, Mapping)):
        raise ScenarioError(f"expected a scenario name, file or mapping, got {base!r}", file=file, field="base")
    if mode == "zip" and len({len(a.values) for a in axes}) > 1:
        lengths = ", ".join(f"{a.path}: {len(a.values)}" for a in axes)
        raise ScenarioError(f"mode zip needs axes of one length, got {lengths}", file=file, field="axes")
    store = data.get("store")
    if store is not None and not isinstance(store, str):
        raise ScenarioError(f"expected a folder path, got {store!r}", file=file, field="store")
    breakdown = data.get("breakdown", False)
    if not isinstance(breakdown, bool):
        raise ScenarioError(f"expected true or false, got {breakdown!r}", file=file, field="breakdown")
    return Grid(
        base=base,
        axes=axes,
        mode=mode,
        sizes=_sizes(data.get("sizes"), file),
        backends=_backends(data.get("backends"), file),
        overrides=_overrides(data.get("set"), file),
        breakdown=breakdown,
        name=str(data.get("name") or name or "grid"),
        description=str(data.get("description") or ""),
        file=file,
        folder=folder,
        store=(folder / Path(store).expanduser()) if store else None,
    )


def _axes(raw: Any, file: str) -> list[Axis]:
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        raise ScenarioError("expected a mapping of field paths to lists of values, e.g. cluster.nodes: [2, 4]",
                            file=file, field="axes")  # fmt: skip
    out = []
    for path, values in raw.items():
        where = f"axes.{path}"
        if not isinstance(path, str) or not path.strip() or any(not p.strip() for p in path.split(".")):
            raise ScenarioError("expected a dotted field path as --set takes it, e.g. cluster.nodes", file=file,
                                field=f"axes.{path}")  # fmt: skip
        if path in ("workload.sizes", "sizes"):
            raise ScenarioError("sizes are the grid's own axis: write them under the top-level key `sizes`",
                                file=file, field=where)  # fmt: skip
        if isinstance(values, Mapping):
            labels, vals = tuple(str(k) for k in values), tuple(values.values())
        elif isinstance(values, list):
            labels, vals = tuple(_label(v) for v in values), tuple(values)
        else:
            raise ScenarioError(f"expected a list of values (or a mapping label: value), got {values!r}",
                                file=file, field=where)  # fmt: skip
        if not vals:
            raise ScenarioError("expected at least one value", file=file, field=where)
        if path == SCENARIO_AXIS and not all(isinstance(v, (str, Mapping)) for v in vals):
            raise ScenarioError("expected scenario names, files or mappings", file=file, field=where)
        out.append(Axis(path, vals, labels))
    return out


def _sizes(raw: Any, file: str) -> list[int] | None:
    if raw is None:
        return None
    try:
        if isinstance(raw, str):
            sizes = parse_size_range(raw)
        elif isinstance(raw, int) and not isinstance(raw, bool):
            sizes = [parse_size(raw)]
        elif isinstance(raw, list) and all(isinstance(s, (int, str)) and not isinstance(s, bool) for s in raw):
            sizes = [parse_size(s) for s in raw]
        else:
            raise UnitError(f"cannot read {raw!r} as sizes")
    except UnitError as exc:
        raise ScenarioError(f"{exc} (expected e.g. '8B:8GiB:x2', '1MiB', or a list of sizes)", file=file,
                            field="sizes") from None  # fmt: skip
    if not sizes:
        raise ScenarioError(f"no sizes in {raw!r}", file=file, field="sizes")
    return sizes


def _backends(raw: Any, file: str) -> list[str] | None:
    if raw is None:
        return None
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items or any(b not in BACKENDS for b in items):
        raise ScenarioError(f"expected a list of backends among {', '.join(BACKENDS)}, got {raw!r}", file=file,
                            field="backends")  # fmt: skip
    return list(dict.fromkeys(items))


def _overrides(raw: Any, file: str) -> list[str]:
    if raw is None:
        return []
    if isinstance(raw, Mapping):  # set: {cluster.nodes: 2} reads as cluster.nodes=2
        return [f"{k}={_yaml_value(v)}" for k, v in raw.items()]
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(i, str) and "=" in i for i in items):
        raise ScenarioError("expected PATH=VALUE items (as --set takes them) or a mapping of paths to values",
                            file=file, field="set")  # fmt: skip
    return list(items)
