"""The one exception type of the topology layer."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["TopologyError", "TopologyWarning", "display_path"]


def display_path(path: str | Path | None) -> str | None:
    """Return ``path`` as a person would like to read it: relative to the working directory when inside it.

    Parameters
    ----------
    path : str or Path or None
        A file path.

    Returns
    -------
    str or None
        The path to show in messages, or None when ``path`` is None.
    """
    if path is None:
        return None
    p = Path(path)
    try:
        rel = os.path.relpath(p.resolve(), Path.cwd())
    except ValueError:  # another drive on Windows
        return str(p)
    return str(p) if rel.startswith("..") else rel


class TopologyError(ValueError):
    """A topology that cannot be built, with the file and the dotted field that is wrong.

    ``str(err) == f"{file}: {field}: {message}"``; the file and the field are left out when unknown.

    Parameters
    ----------
    message : str
        What is wrong and what was expected.
    file : str or Path, optional
        The YAML file holding the bad value.
    field : str, optional
        The dotted path of the bad value inside that file (``links.3.b``, ``params.gpus``, ``fabric.topology``).

    Attributes
    ----------
    file : str or None
    field : str or None
    message : str
    """

    def __init__(self, message: str, file: str | Path | None = None, field: str | None = None) -> None:
        self.file: str | None = display_path(file)
        self.field: str | None = field
        self.message: str = message
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join([*parts, self.message])

    def __reduce__(self) -> tuple[type[TopologyError], tuple[str, str | None, str | None]]:
        return (TopologyError, (self.message, self.file, self.field))


class TopologyWarning(UserWarning):
    """A template that builds but not as written: a number the hardware described cannot reach (e.g. a PCIe link
    faster than one of its ends). The message names the file and the devices; the scenario layer re-issues it as a
    scenario warning."""
