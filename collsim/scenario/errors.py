"""Errors and warnings raised while reading a scenario.

Every problem with a scenario is reported as one :class:`ScenarioError` naming the file, the dotted field path
(``backends.nccl.env.NCCL_ALGO``) and what was expected, so the user can fix the YAML without reading a traceback.
"""

from __future__ import annotations

__all__ = ["ScenarioError", "ScenarioWarning"]


class ScenarioError(ValueError):
    """A scenario that cannot be used.

    ``str(err)`` is ``"{file}: {field}: {message}"``; the file or field part is left out when unknown.

    Attributes
    ----------
    file : str or None
        The scenario file (``"<dict>"`` for a dict source, ``"--set"`` for a bad override).
    field : str or None
        Dotted path of the offending field, e.g. ``"cluster.fabric"``.
    message : str
        What is wrong and what was expected.
    """

    def __init__(self, message: str, file: str | None = None, field: str | None = None) -> None:
        self.file = file
        self.field = field
        self.message = message
        super().__init__(self._text())

    def __reduce__(self) -> tuple[type[ScenarioError], tuple[str, str | None, str | None]]:
        # keep file and field across processes (a parallel sweep raises in a worker)
        return (ScenarioError, (self.message, self.file, self.field))

    def _text(self) -> str:
        parts = [p for p in (self.file, self.field) if p]
        return ": ".join([*parts, self.message])

    def __str__(self) -> str:
        return self._text()


class ScenarioWarning(UserWarning):
    """Something in a scenario that is allowed but probably a mistake (e.g. an unknown ``NCCL_*`` variable)."""
