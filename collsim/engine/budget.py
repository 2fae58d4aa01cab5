"""How much work one simulation may do, and a heartbeat while it runs (issue 16, "Unbounded work").

A run's cost is its flows: every message of every simulated rank and channel is one flow, and each costs tens of
microseconds of Python (about 23 us on the 2-core machine of ``docs/performance.md``), while a recorded flow (for
traces, timelines and breakdowns) is kept, about 1.5 KB with its bars. :class:`WorkBudget` states the limits a
:class:`~collsim.engine.FluidNetwork` enforces as it starts flows (a simulation that passes one stops with
:class:`WorkLimitExceeded`, naming the limit and how far it got), and an optional heartbeat, called every few
seconds of wall time with the flows so far, so that a long run shows it is moving.

The budget in force is a context variable (:func:`work_budget`), set by whoever runs simulations (the API from the
scenario's ``engine.max_flows`` and ``engine.max_records``, whose defaults and their reasons are the scenario's;
the command line for the heartbeat); outside one there is no limit. A network reads it once, when it is made.
Forked workers inherit it.

Tests: ``tests/engine/test_budget.py`` (a limit stops a run at the flow that passes it, naming the field; a
heartbeat comes every ``heartbeat_s``; the budget reaches forked workers and its error crosses back whole).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

__all__ = [
    "Heartbeat",
    "WorkBudget",
    "WorkLimitExceeded",
    "current_budget",
    "work_budget",
]

#: ``heartbeat(label, flows, simulated seconds, wall seconds)``: called every ``heartbeat_s`` of wall time during
#: a run (``label``: :attr:`WorkBudget.label`, what is being simulated).
Heartbeat = Callable[[str, int, float, float], None]


class WorkLimitExceeded(RuntimeError):
    """A simulation passed its :class:`WorkBudget`; the message names the limit and how far the run got.

    Attributes
    ----------
    flows : int
        Flows started when it stopped.
    limit : int
        The limit passed.
    field : str
        The scenario field that sets it (``engine.max_flows`` or ``engine.max_records``).
    simulated_s : float
        Simulated seconds reached.
    """

    def __init__(self, flows: int, limit: int, field: str, simulated_s: float) -> None:
        # args are the fields: SimPy re-raises a process's exception as type(exc)(*exc.args), and pickling (a
        # worker sending it back) rebuilds it the same way
        super().__init__(flows, limit, field, simulated_s)
        self.flows, self.limit, self.field, self.simulated_s = flows, limit, field, simulated_s

    def __str__(self) -> str:
        return f"more than {self.limit} flows ({self.field}) at {self.simulated_s * 1e6:.6g} us of simulated time"


@dataclass(frozen=True)
class WorkBudget:
    """Limits on one simulation and its heartbeat.

    Attributes
    ----------
    max_flows : int or None
        Flows one simulation may start (None: no limit).
    max_records : int or None
        Flows one recorded simulation may start (they are all kept; None: no limit).
    heartbeat : callable or None
        :data:`Heartbeat`, called every ``heartbeat_s`` seconds of wall time while a simulation runs.
    heartbeat_s : float
        Wall seconds between heartbeats.
    label : str
        What is being simulated, for the heartbeat (``"nccl allreduce 1GiB"``).
    """

    max_flows: int | None = None
    max_records: int | None = None
    heartbeat: Heartbeat | None = None
    heartbeat_s: float = 5.0
    label: str = ""

    def limit(self, record: bool) -> tuple[int | None, str]:
        """The flow limit of a simulation (the smaller one when it records) and the field that sets it."""
        if record and self.max_records is not None and (self.max_flows is None or self.max_records < self.max_flows):
            return self.max_records, "engine.max_records"
        return self.max_flows, "engine.max_flows"


_NONE = WorkBudget()
_BUDGET: contextvars.ContextVar[WorkBudget | None] = contextvars.ContextVar("collsim_work_budget", default=None)


def current_budget() -> WorkBudget:
    """The budget in force (no limit and no heartbeat outside any :func:`work_budget`)."""
    return _BUDGET.get() or _NONE


@contextmanager
def work_budget(**changes: object) -> Iterator[WorkBudget]:
    """Change the budget in force for the block: the given fields of :class:`WorkBudget` replace the current ones
    (the others, such as an outer heartbeat, stay)."""
    budget = replace(current_budget(), **changes)  # type: ignore[arg-type]
    token = _BUDGET.set(budget)
    try:
        yield budget
    finally:
        _BUDGET.reset(token)


class Meter:
    """What a network uses to keep its budget: the limit, and when the next heartbeat is due (wall clock)."""

    __slots__ = ("budget", "field", "limit", "next_beat", "started")

    #: Flows between looks at the wall clock for a heartbeat.
    EVERY = 4096

    def __init__(self, record: bool) -> None:
        self.budget = current_budget()
        limit, self.field = self.budget.limit(record)
        self.limit = limit if limit is not None else -1
        self.started = time.monotonic()
        self.next_beat = self.started + self.budget.heartbeat_s

    def over(self, flows: int, now: float) -> None:
        """Called by the network at every flow it starts, once ``flows`` passed ``limit`` or is a multiple of
        :attr:`EVERY`: raises :class:`WorkLimitExceeded` past the limit, else beats when one is due."""
        if 0 <= self.limit < flows:
            raise WorkLimitExceeded(flows, self.limit, self.field, now)
        beat = self.budget.heartbeat
        if beat is not None:
            wall = time.monotonic()
            if wall >= self.next_beat:
                self.next_beat = wall + self.budget.heartbeat_s
                beat(self.budget.label, flows, now, wall - self.started)
