"""Where one participant's time went: attribute every instant of an interval to one activity."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from collsim.engine.fluid import FlowRecord, Owner, Tag

__all__ = ["attribute_time"]


def attribute_time(
    records: Iterable[FlowRecord],
    owner: Owner | None,
    start: float,
    end: float,
    priority: Sequence[Tag],
    *,
    latency: Tag,
    idle: Tag,
) -> dict[str, float]:
    """Split ``[start, end]`` (seconds) among the activities of ``owner``; the parts add up to ``end - start``.

    Each record contributes its streaming interval under its tag and its latency interval (after streaming) under
    ``latency``. At every instant the first active tag in ``priority`` (then ``latency``, then the other tags in
    the order they first appear) gets the time; instants with nothing active go to ``idle`` (waiting for peers or
    for contended resources).

    Parameters
    ----------
    records : iterable of FlowRecord
        A recorded simulation's flows and delays.
    owner : Owner or None
        Whose records count; None pools every owner's (an instant then goes to the first tag active on any).
    start, end : float
        The interval, seconds.
    priority : sequence of Tag
        Tags in the order they win an instant.
    latency, idle : Tag
        The pseudo-tags of arrival latency and of idle time (declared like the others).

    Returns
    -------
    dict of str to float
        Seconds per tag label, in priority order, then ``latency``, the undeclared-priority tags, and ``idle``
        last.

    Examples
    --------
    >>> me, copy, net = Owner(0, None, "rank", "g0"), Tag("copy", "copy", "c"), Tag("net", "send", "n")
    >>> lat, idle = Tag("latency", "overhead", "o"), Tag("waiting", "wait", "w")
    >>> recs = [FlowRecord(me, copy, 1.0, 0.0, 2.0, 1.0, ()), FlowRecord(me, net, 1.0, 1.0, 4.0, 0.0, ())]
    >>> attribute_time(recs, me, 0.0, 6.0, [net, copy], latency=lat, idle=idle)
    {'net': 3.0, 'copy': 1.0, 'latency': 0.0, 'waiting': 2.0}
    """
    order = [t.label for t in priority] + [latency.label]
    rank = {c: i for i, c in enumerate(order)}
    li = rank[latency.label]
    bounds: list[tuple[float, int, int]] = []  # (time, +1/-1, category index)
    for r in records:
        if owner is not None and r.owner != owner:
            continue
        label = r.tag.label
        cat = rank.get(label)
        if cat is None:
            rank[label] = cat = len(order)
            order.append(label)
        if r.t_end > r.t_start:
            bounds += [(r.t_start, 1, cat), (r.t_end, -1, cat)]
        if r.latency > 0:
            bounds += [(r.t_end, 1, li), (r.t_end + r.latency, -1, li)]
    out = dict.fromkeys(order, 0.0)
    out[idle.label] = 0.0
    bounds.sort()
    active = [0] * len(order)
    t = start
    i = 0
    while i <= len(bounds):
        nxt = bounds[i][0] if i < len(bounds) else end
        lo, hi = max(t, start), min(nxt, end)
        if hi > lo:
            cat = next((c for c, n in enumerate(active) if n > 0), None)
            out[order[cat] if cat is not None else idle.label] += hi - lo
        if i == len(bounds):
            break
        t = nxt
        while i < len(bounds) and bounds[i][0] == t:
            _, d, c = bounds[i]
            active[c] += d
            i += 1
    return out
