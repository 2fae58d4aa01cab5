"""Garbage collection paused for the length of a simulation.

A simulation makes millions of short-lived objects (SimPy events, flows, closures) while hundreds of thousands stay
alive (pending events, processes, the plan). CPython's cyclic collector is triggered by allocation counts and each
of its older-generation passes walks every live container object, so with the default thresholds (700, 10, 10) a
large run spends about half its time in the collector (measured: 32 GPUs, Ring, 16 MiB, symmetry off: 20.2 s with
the default thresholds, 10.5 s with the objects alive before the run frozen and a young threshold of 100 000, 9.2 s
with the collector off; peak RSS the same in all three: the event loop leaves no cyclic garbage worth collecting
early). The collector stays on (a cycle made per event would still be freed), only less often.

The backends hold it over a whole simulation, set-up included, and again over its run: building the plan, the
machines and their routes for 1024 GPUs makes millions of long-lived objects, which the default thresholds walked
again at every older-generation pass (1024 GPUs, NVLSTree, 1 GiB, symmetry off: 15 full passes, 4.3 s, and 4,411
young ones, 2.7 s, of a 119 s simulation, finding 31 cyclic objects in all), and the run's own entry freezes what
the set-up made, so that the run's passes do not walk it either.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_relaxed"]

#: Allocations between two young-generation collections during a run (CPython's default: 700).
YOUNG_THRESHOLD = 100_000

_depth = 0


@contextmanager
def gc_relaxed() -> Iterator[None]:
    """Freeze the objects alive now (never scanned until the end) and collect the young generation less often.

    Re-entrant: every use freezes what is alive at its entry (a run inside its set-up: what the set-up made); only
    the outermost sets the thresholds and, on exit, restores them and returns every frozen object to the oldest
    generation.

    >>> import gc
    >>> before = gc.get_threshold()
    >>> with gc_relaxed():
    ...     gc.get_threshold()[0] >= 100_000
    True
    >>> gc.get_threshold() == before
    True
    """
    global _depth
    if _depth:  # nested (a simulation's run inside its set-up): what the set-up made is frozen too
        gc.freeze()
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
        return
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(old[0], YOUNG_THRESHOLD), old[1], old[2])
    _depth = 1
    try:
        yield
    finally:
        _depth = 0
        gc.set_threshold(*old)
        gc.unfreeze()
