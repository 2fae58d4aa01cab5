"""Load scenarios from YAML files, built-in names or dicts; apply ``--set`` overrides; report clear errors.

Every failure becomes one :class:`~collsim.scenario.errors.ScenarioError` naming the file, the dotted field and
what was expected (pydantic's errors are translated), never a traceback from inside a library.
"""

from __future__ import annotations

import copy
import difflib
import os
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from collsim.files import FileReadError, read_text_file
from collsim.safeyaml import YamlInputError, load_yaml, short_repr
from collsim.scenario.errors import ScenarioError
from collsim.scenario.models import Scenario

__all__ = [
    "apply_overrides",
    "builtin_scenarios",
    "load_scenario",
    "scenario_json_schema",
    "scenarios_dir",
    "validation_error_to_scenario_error",
]

DICT_SOURCE = "<dict>"
OVERRIDE_SOURCE = "--set"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def scenarios_dir() -> Path:
    """Folder of the built-in scenarios: ``$COLLSIM_SCENARIOS`` if set, else ``<repo>/scenarios``."""
    env = os.environ.get("COLLSIM_SCENARIOS")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[2] / "scenarios"


def builtin_scenarios() -> list[str]:
    """Names of the built-in scenarios (file stems of ``scenarios_dir()/*.yaml``), sorted."""
    folder = scenarios_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.yaml") if p.is_file())


def scenario_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a scenario file, for editors (``yaml-language-server``)."""
    schema = Scenario.model_json_schema()
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}


# ----------------------------------------------------------------------------------------------------- YAML reading


def _find_source(source: str | Path) -> Path:
    try:
        path = Path(source).expanduser()
    except RuntimeError:  # ~user without such a user: the path as written
        path = Path(source)
    if path.is_file():
        return path
    text = str(source)
    if path.is_dir():
        raise ScenarioError("is a folder, expected a scenario YAML file", file=text)
    if "/" not in text and "\\" not in text and not text.endswith((".yaml", ".yml")):
        builtin = scenarios_dir() / f"{text}.yaml"
        if builtin.is_file():
            return builtin
    known = ", ".join(builtin_scenarios()) or "none found"
    raise ScenarioError(f"scenario file not found (built-in scenarios: {known})", file=text)


def _read_yaml(path: Path) -> dict[str, Any]:
    file = str(path)
    try:
        text = read_text_file(path)
    except FileReadError as exc:
        raise ScenarioError(str(exc), file=file) from None
    if not text.strip():
        raise ScenarioError("empty file, expected a scenario mapping (name, cluster, workload, backends)", file=file)
    try:
        data = load_yaml(text)  # YAML 1.2 numbers, duplicate keys refused, bounded size, depth and aliases
    except YamlInputError as exc:
        raise ScenarioError(str(exc), file=file) from None
    if data is None:
        raise ScenarioError("empty file (only comments), expected a scenario mapping (name, cluster, ...)", file=file)
    if not isinstance(data, dict):
        raise ScenarioError(
            f"top level must be a mapping of fields (name, cluster, workload, backends, engine), "
            f"got {_type_name(data)}",
            file=file,
        )
    return data


def _type_name(value: Any) -> str:
    names = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


# ---------------------------------------------------------------------------------------------------------- overrides


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``KEY=VALUE`` overrides to raw scenario data and return a new dict (``data`` is not changed).

    Parameters
    ----------
    data : dict
        Raw scenario data (before validation).
    overrides : sequence of str
        Items like ``"backends.nccl.env.NCCL_ALGO=Ring"`` or ``"cluster.nodes=2"``. KEY is a dotted path;
        missing intermediate mappings are created; an integer part indexes an existing list. VALUE is read as a
        YAML scalar or flow collection (``2`` -> 2, ``true`` -> True, ``[1,2]`` -> list, empty -> null).

    Raises
    ------
    ScenarioError
        With ``file="--set"`` and the KEY as field when an item cannot be applied.
    """
    if not isinstance(data, dict):
        raise ScenarioError(f"top level must be a mapping, got {_type_name(data)}", file=OVERRIDE_SOURCE)
    if isinstance(overrides, str):
        overrides = [overrides]
    result = copy.deepcopy(data)
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ScenarioError(
                "expected KEY=VALUE, e.g. cluster.nodes=2 or backends.nccl.env.NCCL_ALGO=Ring",
                file=OVERRIDE_SOURCE,
                field=str(item),
            )
        key, _, raw = item.partition("=")
        key = key.strip()
        parts = [p.strip() for p in key.split(".")]
        if not key or any(not p for p in parts):
            raise ScenarioError(
                f"bad field path {key!r} in {item!r}; expected dotted names like cluster.nodes",
                file=OVERRIDE_SOURCE,
                field=key or item,
            )
        try:
            value = load_yaml(raw) if raw.strip() else None
        except YamlInputError as exc:
            raise ScenarioError(
                f"cannot read value {short_repr(raw)}: {exc}", file=OVERRIDE_SOURCE, field=key
            ) from None
        _set_path(result, parts, value, key)
    return result


def _set_path(root: dict[str, Any], parts: list[str], value: Any, key: str) -> None:
    cur: Any = root
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        where = ".".join(parts[: i + 1])
        if isinstance(cur, dict):
            if last:
                cur[part] = value
            else:
                if cur.get(part) is None:
                    cur[part] = {}
                cur = cur[part]
        elif isinstance(cur, list):
            try:
                index = int(part)
            except ValueError:
                raise ScenarioError(
                    f"{'.'.join(parts[:i])} is a list; {part!r} is not an index", file=OVERRIDE_SOURCE, field=key
                ) from None
            if not -len(cur) <= index < len(cur):
                raise ScenarioError(
                    f"index {index} out of range for a list of {len(cur)} items ({where})",
                    file=OVERRIDE_SOURCE,
                    field=key,
                )
            if last:
                cur[index] = value
            else:
                cur = cur[index]
        else:
            raise ScenarioError(
                f"cannot set {key}: {'.'.join(parts[:i])} is {_type_name(cur)}, not a mapping",
                file=OVERRIDE_SOURCE,
                field=key,
            )


# ------------------------------------------------------------------------------------------- pydantic error handling


def _field_path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _user_loc(loc: Sequence[int | str]) -> tuple[int | str, ...]:
    """``loc`` as the user's path: the tags pydantic adds after a field whose type is a union of plain types (the
    ``float`` of ``cluster.fabric.oversubscription.float``) are dropped; keys of the user's own mappings are kept."""
    out: list[int | str] = []
    model: type[BaseModel] | None = Scenario
    union_next = False
    for part in loc:
        if union_next and isinstance(part, str):
            union_next = False
            continue  # the union member pydantic tried
        union_next = False
        out.append(part)
        if model is not None and isinstance(part, str) and part in model.model_fields:
            annotation = model.model_fields[part].annotation
            model = _model_in(annotation)
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            union_next = model is None and _is_union(annotation) and len(members) > 1
        else:
            model = None
    return tuple(out)


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


def _model_fields_at(loc: Sequence[int | str]) -> list[str] | None:
    """Field names of the model found by walking ``loc`` from Scenario (list indices step into a list's items), or
    None when not a model.

    >>> _model_fields_at(("perturb", "links", 0))
    ['device', 'scale', 'kind', 'choose']
    """
    model: type[BaseModel] = Scenario
    annotation: Any = None
    for part in loc:
        if isinstance(part, int):
            if annotation is None:
                return None
            options = typing.get_args(annotation) if _is_union(annotation) else (annotation,)
            nested = next((m for m in map(_item_model, options) if m is not None), None)
        elif part in model.model_fields:
            annotation = model.model_fields[part].annotation
            nested = _model_in(annotation)
            if nested is None:
                continue  # a list of models: the index that follows steps in
        else:
            return None
        if nested is None:
            return None
        model, annotation = nested, None
    return list(model.model_fields) if annotation is None else None


def _item_model(annotation: Any) -> type[BaseModel] | None:
    """The model a list (or tuple) annotation holds, if any."""
    if typing.get_origin(annotation) in (list, tuple):
        return next((m for m in map(_model_in, typing.get_args(annotation)) if m is not None), None)
    return None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _short(value: Any) -> str:
    return short_repr(value)


def _error_message(err: Mapping[str, Any]) -> str:
    kind = err["type"]
    loc = tuple(err["loc"])
    ctx = err.get("ctx") or {}
    if kind == "scenario":
        return str(ctx.get("text", err["msg"]))
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        allowed = _model_fields_at(loc[:-1]) or []
        near = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        return f"unknown field{hint}, expected one of: {', '.join(allowed)}" if allowed else f"unknown field{hint}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        fields = _model_fields_at(loc)
        what = f"a mapping with fields {', '.join(fields)}" if fields else "a mapping"
        return f"expected {what}, got {_short(err.get('input'))}"
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return f"{msg}, got {_short(err.get('input'))}"


def validation_error_to_scenario_error(exc: ValidationError, file: str | None) -> ScenarioError:
    """One ScenarioError for a pydantic ValidationError: the first problem, then the others in the message."""
    problems: list[tuple[str, str]] = []
    for raw in exc.errors():
        err: dict[str, Any] = {**raw, "loc": _user_loc(raw["loc"])}
        field = _field_path(err["loc"])
        sub = (err.get("ctx") or {}).get("subfield")
        if sub:
            field = f"{field}.{sub}" if field else str(sub)
        if any(f == field for f, _ in problems):
            continue  # another member of a union refusing the same value: the first says enough
        problems.append((field, _error_message(err)))
    if not problems:
        return ScenarioError(str(exc), file=file)
    field, message = problems[0]
    if len(problems) > 1:
        more = "; ".join(f"{f}: {m}" for f, m in problems[1:6])
        extra = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
        message = f"{message}; also {more}{extra}"
    error = ScenarioError(message, file=file, field=field or None)
    error.problems = problems  # type: ignore[attr-defined]
    return error


# ----------------------------------------------------------------------------------------------------------- loading


def _known_templates() -> list[str] | None:
    """Node template names from the topology layer, or None when that layer cannot be imported."""
    try:
        from collsim.topology import available_templates
    except ImportError:  # topology layer absent: load_topology will report an unknown template later
        return None
    return available_templates()


def _check_files(scenario: Scenario, file: str) -> None:
    node = scenario.node_template()
    if isinstance(node, Path):
        _must_be_file(node, "node template file", file, "cluster.node")
    else:
        known = _known_templates()
        if known is not None and (scenario.presets is not None or scenario.preset_files):
            known = sorted({*known, *scenario.preset_library().nodes})  # the user's own templates
        if known is not None and node not in known:
            near = difflib.get_close_matches(node, known, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ScenarioError(
                f"unknown node template {node!r}{hint}; known templates: {', '.join(known)}; "
                f"or give a path to a template .yaml file",
                file=file,
                field="cluster.node",
            )
    cal = scenario.calibration_path()
    if cal is not None:
        _must_be_file(cal, "calibration profile", file, "calibration")


def _must_be_file(path: Path, what: str, file: str, field: str) -> None:
    """A ScenarioError naming ``field`` unless ``path`` is a file; a path the system refuses to look up (a name
    too long, a loop of links) says why, instead of an OSError."""
    try:
        found = path.is_file()
    except OSError as exc:  # Path.is_file lets ENAMETOOLONG and the like through
        raise ScenarioError(f"{what} not found: {exc.strerror or exc}: {short_repr(str(path))}", file=file,
                            field=field) from None  # fmt: skip
    if not found:
        raise ScenarioError(f"{what} not found: {path}", file=file, field=field)


def load_scenario(
    source: str | Path | Mapping[str, Any] | Scenario,
    overrides: Sequence[str] = (),
    *,
    base_dir: str | Path | None = None,
) -> Scenario:
    """Load and validate a scenario.

    Parameters
    ----------
    source : str, Path, mapping or Scenario
        A YAML file path, a built-in scenario name (``"hgx-h100"`` -> ``scenarios/hgx-h100.yaml``, used when no
        such file exists), a dict (e.g. from a notebook; relative paths then resolve against the current folder),
        or a loaded scenario (its data, with the overrides applied, validated anew; its file and folder kept).
    overrides : sequence of str
        ``KEY=VALUE`` items (``--set``) applied to the raw data before validation; see :func:`apply_overrides`.
    base_dir : str or Path, optional
        For a dict: the folder its relative paths (``cluster.node``, ``preset_files``, ``calibration``) resolve
        against, as if it were a file there (default: the current folder).

    Returns
    -------
    Scenario
        The validated scenario, with ``source_file`` and ``base_dir`` set.

    Raises
    ------
    ScenarioError
        Naming the file and dotted field for every kind of bad input.
    """
    data: Any
    if isinstance(source, Scenario):
        file = source.source_file or DICT_SOURCE
        folder = source.base_dir if base_dir is None else Path(base_dir).resolve()
        data = source.to_dict()
    elif isinstance(source, Mapping):
        file = DICT_SOURCE
        folder = Path.cwd() if base_dir is None else Path(base_dir).resolve()
        data = copy.deepcopy(dict(source))
    elif isinstance(source, (str, Path)):
        path = _find_source(source)
        file = str(path)
        folder = path.resolve().parent
        data = _read_yaml(path)
    else:
        raise ScenarioError(f"expected a file path, a built-in scenario name or a dict, got {_type_name(source)}")
    data = apply_overrides(data, overrides)
    try:
        scenario = Scenario.model_validate(data, context={"file": file})
    except ValidationError as exc:
        raise validation_error_to_scenario_error(exc, file) from None
    scenario._source_file = file
    scenario._base_dir = folder
    _check_files(scenario, file)
    return scenario
