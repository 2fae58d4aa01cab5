"""Reading the YAML collsim is given (scenarios, ``--set`` values, presets, node templates), within stated limits.

One loader for every YAML input, so that the same text means the same thing everywhere and no input can exhaust
time or memory:

* **Numbers follow YAML 1.2** (core schema): ``2e0``, ``1e9``, ``.5`` and ``-3.`` are numbers (YAML 1.1, PyYAML's
  default, reads ``2e0`` as a string); integers are decimal, ``0x1F`` or ``0o17`` (``1_000``, ``0b101`` and the
  sexagesimal ``1:30`` are strings); ``.inf`` and ``.nan`` are floats (fields that need a finite number refuse
  them). Booleans and null stay YAML 1.1's (``true``/``false``/``yes``/``no``/``on``/``off``, ``null``/``~``), dates
  stay strings (YAML 1.2 has no implicit timestamps).
* **Limits** (:data:`LIMITS`): a file of at most 4 MiB, nesting at most 64 levels deep, at most 100,000 nodes once
  aliases are expanded (a "billion laughs" alias bomb is refused when it is read, before anything expands it),
  integers of at most 20 digits (64 bits), finite floats unless written ``.inf``/``.nan``.
* **Duplicate keys** in a mapping are an error instead of silently keeping the last one.

Every failure is one :class:`YamlInputError` whose message says what and where (line and column); the caller names
the file.

Examples
--------
>>> load_yaml("x: 2e0\\ny: 1_000\\nz: 0x10")
{'x': 2.0, 'y': '1_000', 'z': 16}
>>> load_yaml("a: 1\\na: 2")
Traceback (most recent call last):
...
collsim.safeyaml.YamlInputError: line 2, column 1: duplicate key 'a'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

__all__ = ["LIMITS", "YamlInputError", "YamlLimits", "load_yaml", "short_repr"]


@dataclass(frozen=True)
class YamlLimits:
    """Bounds on one YAML document.

    Attributes
    ----------
    max_bytes : int
        Largest text read, bytes (UTF-8).
    max_depth : int
        Deepest nesting of mappings and sequences.
    max_nodes : int
        Most nodes (scalars, mappings, sequences) the document holds once every alias is expanded.
    max_int_digits : int
        Most digits of an integer (20: every 64-bit integer fits).
    """

    max_bytes: int = 4 * 1024 * 1024
    max_depth: int = 64
    max_nodes: int = 100_000
    max_int_digits: int = 20


#: The limits every YAML input of collsim is read with.
LIMITS = YamlLimits()


class YamlInputError(ValueError):
    """YAML that cannot be read or exceeds :data:`LIMITS`; the message says what and where (the caller names the
    file)."""


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (an error message never carries a whole hostile value).

    >>> short_repr("x" * 100, 12)
    "'xxxxxxxx..."
    """
    if isinstance(value, (list, dict, tuple, set)):
        # a shared (aliased) structure can be huge once expanded: describe it instead of printing it
        text = _bounded_repr(value, limit + 1)
    else:
        text = repr(value) if not isinstance(value, str) or len(value) <= 4 * limit else repr(value[: 4 * limit])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounded_repr(value: Any, limit: int) -> str:
    """repr of nested containers, stopping once ``limit`` characters are written."""
    out: list[str] = []
    size = 0

    def emit(text: str) -> bool:
        nonlocal size
        out.append(text)
        size += len(text)
        return size < limit

    def walk(v: Any, depth: int) -> bool:
        if depth > 8:
            return emit("...")
        if isinstance(v, dict):
            if not emit("{"):
                return False
            for i, (k, item) in enumerate(v.items()):
                if (i and not emit(", ")) or not emit(f"{short_repr(k, limit)}: ") or not walk(item, depth + 1):
                    return False
            return emit("}")
        if isinstance(v, (list, tuple, set)):
            open_, close = ("[", "]") if isinstance(v, list) else ("(", ")") if isinstance(v, tuple) else ("{", "}")
            if not emit(open_):
                return False
            for i, item in enumerate(v):
                if (i and not emit(", ")) or not walk(item, depth + 1):
                    return False
            return emit(close)
        return emit(short_repr(v, limit))

    walk(value, 0)
    return "".join(out)


# ------------------------------------------------------------------------------------------------------- resolver

# YAML 1.2 core schema (yaml.org/spec/1.2.2/#1032-tag-resolution), numbers only.
_INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_12 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"


def _mark_text(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 numbers, no implicit timestamps, unique keys, and :data:`LIMITS`."""

    limits: YamlLimits = LIMITS

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> nodes once its aliases are expanded

    # -- limits while composing (aliases resolve to the anchored node: count its expanded size again)
    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            node = super().compose_node(parent, index)
            return node
        self._depth += 1
        if self._depth > self.limits.max_depth:
            mark = self.peek_event().start_mark
            raise YamlInputError(f"{_mark_text(mark)}nested deeper than {self.limits.max_depth} levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None:
            self._count(node)
        return node

    def _count(self, node: Node) -> None:
        size = 1
        if isinstance(node, SequenceNode):
            size += sum(self._sizes.get(id(c), 1) for c in node.value)
        elif isinstance(node, MappingNode):
            size += sum(self._sizes.get(id(k), 1) + self._sizes.get(id(v), 1) for k, v in node.value)
        self._sizes[id(node)] = size
        if size > self.limits.max_nodes:
            raise YamlInputError(
                f"{_mark_text(node.start_mark)}more than {self.limits.max_nodes} values once aliases are expanded "
                "(an alias bomb?)"
            )

    # -- scalars
    def construct_yaml_int(self, node: Node) -> int:  # type: ignore[override]
        text = str(self.construct_scalar(node))  # type: ignore[arg-type]
        digits = text.lstrip("+-")
        if digits.startswith(("0x", "0o")):
            body, base = digits[2:], 16 if digits.startswith("0x") else 8
        else:
            body, base = digits, 10
        if len(body.lstrip("0")) > self.limits.max_int_digits:
            raise YamlInputError(
                f"{_mark_text(node.start_mark)}an integer of {len(body)} digits; at most "
                f"{self.limits.max_int_digits} (64-bit)"
            )
        value = int(body, base)
        return -value if text.startswith("-") else value

    def construct_yaml_float(self, node: Node) -> float:  # type: ignore[override]
        text = str(self.construct_scalar(node))  # type: ignore[arg-type]
        low = text.lower()
        if low.endswith(".inf"):
            return -math.inf if low.startswith("-") else math.inf
        if low == ".nan":
            return math.nan
        value = float(text)
        if not math.isfinite(value):
            raise YamlInputError(f"{_mark_text(node.start_mark)}number {short_repr(text)} is out of range")
        return value

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                raise YamlInputError(f"{_mark_text(key_node.start_mark)}a mapping key must be a scalar") from None
            if duplicate:
                raise YamlInputError(f"{_mark_text(key_node.start_mark)}duplicate key {short_repr(key)}")
        return super().construct_mapping(node, deep=deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT_TAG, _FLOAT_TAG, _TIMESTAMP_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_INT_TAG, _INT_12, list("-+0123456789"))
_Loader.add_implicit_resolver(_FLOAT_TAG, _FLOAT_12, list("-+0123456789."))
_Loader.add_constructor(_INT_TAG, _Loader.construct_yaml_int)
_Loader.add_constructor(_FLOAT_TAG, _Loader.construct_yaml_float)


def _problem_text(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    text = f"{problem} ({context})" if context and problem != str(exc) else problem
    return f"{_mark_text(mark)}{text}"


def load_yaml(text: str, *, limits: YamlLimits = LIMITS) -> Any:
    """Parse one YAML document with collsim's rules (see the module docstring).

    Parameters
    ----------
    text : str
        The document.
    limits : YamlLimits
        Bounds (default :data:`LIMITS`).

    Returns
    -------
    Any
        The document's value (None for an empty document).

    Raises
    ------
    YamlInputError
        Invalid YAML, a duplicate key, or an exceeded limit; the message gives the line and column.
    """
    if len(text) > limits.max_bytes or len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        raise YamlInputError(f"larger than {limits.max_bytes // (1024 * 1024)} MiB")
    try:
        loader = _Loader(text)  # the reader checks the characters at once
    except yaml.YAMLError as exc:
        raise YamlInputError(f"invalid YAML: {_problem_text(exc)}") from None
    loader.limits = limits
    try:
        return loader.get_single_data()
    except YamlInputError:
        raise
    except yaml.YAMLError as exc:
        raise YamlInputError(f"invalid YAML: {_problem_text(exc)}") from None
    except ValueError as exc:  # a constructor's own refusal (e.g. Python's 4300-digit cap on int())
        raise YamlInputError(f"cannot read a value: {short_repr(str(exc), 120)}") from None
    except RecursionError:  # a deeper structure than Python's stack (max_depth set very high)
        raise YamlInputError(f"nested too deeply (at most {limits.max_depth} levels)") from None
    finally:
        loader.dispose()
