"""Device names in node templates: ranges such as ``gpu[0-7]`` (used by the template and NIC-population code)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from collsim.topology.errors import TopologyError

__all__ = ["expand_names"]

_RANGE = re.compile(r"^([A-Za-z_][\w-]*)\[(\d+)-(\d+)\]$")


def expand_names(ref: Any, file: str | Path | None, field: str) -> list[str]:
    """A template's device reference as names: one name, a list of names, or ranges such as ``gpu[0-7]``.

    >>> expand_names(["gpu[0-2]", "nic0"], None, "links[0].a")
    ['gpu0', 'gpu1', 'gpu2', 'nic0']

    Raises
    ------
    TopologyError
        For an empty list, a name that is no string or an empty range, naming ``file`` and ``field``.
    """
    items = ref if isinstance(ref, list) else [ref]
    if not items:
        raise TopologyError("expected a device name or a non-empty list of names", file=file, field=field)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TopologyError(f"expected a device name, got {item!r}", file=file, field=field)
        m = _RANGE.match(item.strip())
        if m:
            lo, hi = int(m.group(2)), int(m.group(3))
            if hi < lo:
                raise TopologyError(f"empty range {item!r}", file=file, field=field)
            out.extend(f"{m.group(1)}{i}" for i in range(lo, hi + 1))
        else:
            out.append(item.strip())
    return out
