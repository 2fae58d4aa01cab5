"""Another job's traffic during a collective (scenario ``perturb.background``): greedy streams on fabric links.

The topology carries the streams (:attr:`~collsim.topology.Topology.background`: ``(src, dst, rate)``, one directed
link each, offered rate in bytes/s; :func:`collsim.topology.perturb.add_background`). Each becomes an entity of the
symmetry quotient with a colour of its own (its rate), so the colour refinement splits the links it loads from the
others and the quotient stays exact (a stream on every one of a class of identical links is simulated once, like a
rank). While the collective runs, each representative stream sends back to back on its link, capped at its offered
rate: a greedy bulk flow that takes its max-min fair share, up to that rate, at every instant. It starts with the
collective (time 0) and stops sending once every participant of the collective is done; the message it is sending
then finishes after the collective's end time, which is read from the participants' own events, so the streams
change that time only through the bandwidth they take.

Messages double in length (1 us of offered traffic, then 2, 4 ... : ``_FIRST_MESSAGE_S``), so a stream costs a few
dozen rate solves however long the collective, and its last message ends at most about twice the collective's time
after the start. Between two messages of one stream no time passes (the next starts at the instant the last
ended), so the stream's load is continuous.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from typing import Any

import simpy

from collsim.engine import FluidNetwork, Owner, Quotient, Tag

__all__ = ["BACKGROUND_TAG", "background_colors", "background_usage", "is_background", "start_background"]

#: The tag of another job's flows; never in a collective's breakdown (a different owner), listed in the registry so
#: that traces and figures of a recorded run can name it.
BACKGROUND_TAG = Tag("background traffic", "send", "waiting (peers, contention)")

#: Offered seconds of a stream's first message (doubling after): short against any collective collsim simulates
#: (8 B on NVLink takes ~10 us), so the stream loads its link from the first microsecond; a choice, not a measurement.
_FIRST_MESSAGE_S = 1e-6


def is_background(entity: Hashable) -> bool:
    """Whether a quotient entity is a background stream (``("background", i)``), not a rank or a channel."""
    return isinstance(entity, tuple) and len(entity) == 2 and entity[0] == "background"


def background_usage(streams: Sequence[tuple[str, str, float]]) -> dict[Hashable, dict[str, list[tuple[Any, float]]]]:
    """Quotient usage of the streams: entity ``("background", i)`` uses link ``(src, dst)`` once per byte."""
    return {("background", i): {"bg": [(("link", s, d), 1.0)]} for i, (s, d, _) in enumerate(streams)}


def background_colors(streams: Sequence[tuple[str, str, float]]) -> dict[Hashable, Hashable]:
    """Quotient colours of the streams: their offered rate (bytes/s), apart from every rank's and channel's."""
    return {("background", i): ("background", rate) for i, (_, _, rate) in enumerate(streams)}


def start_background(
    env: simpy.Environment,
    net: FluidNetwork,
    quotient: Quotient,
    streams: Sequence[tuple[str, str, float]],
    done: Sequence[simpy.Event],
) -> None:
    """Start every representative stream of ``quotient``; they send until all ``done`` events have fired.

    Parameters
    ----------
    env, net : simpy.Environment, FluidNetwork
        The collective's clock and network.
    quotient : Quotient
        Built over the collective's usage plus :func:`background_usage` (colours from :func:`background_colors`).
    streams : sequence of (str, str, float)
        The topology's background: source, destination, offered rate in bytes/s.
    done : sequence of simpy.Event
        The collective's participants' completion events.
    """
    if not streams or not done:
        return
    stop = simpy.AllOf(env, list(done))
    for e in quotient.reps():
        if is_background(e):
            src, dst, rate = streams[int(e[1])]  # type: ignore[index]
            owner = Owner(None, None, "background", f"{src}->{dst}")
            env.process(_stream(net, quotient.uses(e, "bg"), rate, owner, stop))


def _stream(
    net: FluidNetwork, uses: Any, rate: float, owner: Owner, stop: simpy.Event
) -> Generator[simpy.Event, Any, None]:
    """Back-to-back messages at most ``rate`` bytes/s until ``stop`` has fired."""
    seconds = _FIRST_MESSAGE_S
    while not stop.triggered:
        streamed, _ = net.transfer(rate * seconds, uses, max_rate=rate, tag=BACKGROUND_TAG, owner=owner)
        yield streamed
        seconds *= 2
