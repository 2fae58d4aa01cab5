"""Seeded noise (scenario ``noise``): per-rank launch skew and per-message jitter, drawn per repetition.

Both are off unless a scenario sets them, and both are deterministic: every draw comes from a
:class:`random.Random` seeded with a string built from the scenario's seed (``engine.seed``), the repetition
index and what is drawn for (``"skew"``, or the sending entity and its role). The order in which the simulation
happens to send messages therefore does not change the draws: a message's jitter depends only on the seed, the
repetition, its sender's role and how many messages that role sent before it.

* **Launch skew** ``S`` (seconds): in each repetition every rank's launch offset is drawn uniformly in ``[0, S]``,
  independently; the earliest is then subtracted, so that the collective's clock starts when its first rank
  launches (as a straggler's delay counts from the others' launch). The skew added to a latency-bound collective
  is therefore between 0 and ``S``. A uniform draw because ``S`` then reads as the spread between the first and
  the last rank, a bound a user can measure (host timestamps before the launch), with no tail to invent.
* **Jitter** ``J`` (seconds): every message's arrival is delayed by an extra amount drawn from an exponential
  distribution of mean ``J``, independently per message. An exponential because per-message delays (interrupts,
  proxy-thread scheduling, a switch queue) are mostly small with a long tail; its one parameter is the mean a
  user can read off repeated latency runs.

Examples
--------
>>> launch_skews(4, 10e-6, seed=0, repetition=0) == launch_skews(4, 10e-6, seed=0, repetition=0)
True
>>> all(0 <= s <= 10e-6 for _rank, s in launch_skews(4, 10e-6, seed=0, repetition=1))
True
>>> draw = jitter_stream(1e-6, repetition_seed(0, 0), (0, "n0/gpu0"), "send")
>>> a = [draw() for _ in range(3)]
>>> draw = jitter_stream(1e-6, repetition_seed(0, 0), (0, "n0/gpu0"), "send")
>>> a == [draw() for _ in range(3)]
True
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterable

__all__ = ["add_delays", "jitter_stream", "launch_skews", "repetition_seed"]


def repetition_seed(seed: int, repetition: int) -> int:
    """The seed of one repetition's draws: a 64-bit integer hashed from (``seed``, ``repetition``).

    Parameters
    ----------
    seed : int
        The scenario's seed (``engine.seed``, 0 when unset), >= 0.
    repetition : int
        Index of the repetition (``collsim run --repeat K`` runs 0 .. K-1), >= 0.

    Returns
    -------
    int
        Different for every (seed, repetition) pair in practice; the same on every platform and Python version.
    """
    digest = hashlib.sha256(f"collsim-noise/{seed}/{repetition}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def launch_skews(nranks: int, skew: float, *, seed: int, repetition: int) -> tuple[tuple[int, float], ...]:
    """Per-rank launch offsets of one repetition: uniform in ``[0, skew]``, the earliest subtracted.

    Parameters
    ----------
    nranks : int
        Ranks of the communicator.
    skew : float
        Seconds, >= 0: the largest spread between the first and the last rank's launch.
    seed, repetition : int
        As :func:`repetition_seed`.

    Returns
    -------
    tuple of (int, float)
        (rank, seconds) for every rank launching after the first, in rank order; empty for ``skew <= 0`` or one
        rank. The same form as the stragglers' ``launch_delay`` (:func:`add_delays` merges the two).
    """
    if skew <= 0 or nranks <= 1:
        return ()
    rng = random.Random(f"skew/{repetition_seed(seed, repetition)}")
    draws = [rng.uniform(0.0, skew) for _ in range(nranks)]
    first = min(draws)
    return tuple((rank, d - first) for rank, d in enumerate(draws) if d > first)


def add_delays(*delays: Iterable[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """(rank, seconds) pairs merged, one rank's delays added, sorted by rank.

    >>> add_delays(((3, 2.0),), ((1, 0.5), (3, 0.25)))
    ((1, 0.5), (3, 2.25))
    """
    out: dict[int, float] = {}
    for pairs in delays:
        for rank, seconds in pairs:
            out[rank] = out.get(rank, 0.0) + seconds
    return tuple(sorted(out.items()))


def jitter_stream(mean: float, seed: int, *key: object) -> Callable[[], float]:
    """A function drawing one message's extra latency (seconds) per call: exponential with mean ``mean``.

    Parameters
    ----------
    mean : float
        Mean extra latency, seconds, > 0.
    seed : int
        The repetition's seed (:func:`repetition_seed`).
    *key
        What sends the messages (e.g. the entity and its role); its ``repr`` must be stable across runs (tuples of
        ints and strings are).

    Returns
    -------
    callable
        ``draw() -> seconds``; successive calls give the role's successive messages' jitter.
    """
    if mean <= 0:
        raise ValueError(f"jitter mean must be > 0 seconds, got {mean!r}")
    rng = random.Random(f"jitter/{seed}/{key!r}")
    rate = 1.0 / mean
    return lambda: rng.expovariate(rate)
