"""Where one participant's time went: attribute every instant of an interval to one activity."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from collsim.engine.fluid import FlowRecord

__all__ = ["attribute_time"]


def attribute_time(
    records: Iterable[FlowRecord],
    owner: str,
    start: float,
    end: float,
    priority: Sequence[str],
    *,
    latency_label: str = "latency",
    idle_label: str = "waiting",
) -> dict[str, float]:
    """Split ``[start, end]`` (seconds) among the activities of ``owner``; the parts add up to ``end - start``.

    Each record contributes its streaming interval under its tag and its latency interval (after streaming) under
    ``latency_label``. At every instant the first active category in ``priority`` (then ``latency_label``) gets the
    time; instants with nothing active go to ``idle_label`` (waiting for peers or for contended resources).

    Examples
    --------
    >>> recs = [FlowRecord("r0", "copy", 1.0, 0.0, 2.0, 1.0, ()), FlowRecord("r0", "net", 1.0, 1.0, 4.0, 0.0, ())]
    >>> attribute_time(recs, "r0", 0.0, 6.0, ["net", "copy"])
    {'net': 3.0, 'copy': 1.0, 'latency': 0.0, 'waiting': 2.0}
    """
    order = [*priority, latency_label]
    rank = {c: i for i, c in enumerate(order)}
    bounds: list[tuple[float, int, int]] = []  # (time, +1/-1, category index)
    for r in records:
        if r.owner != owner:
            continue
        cat = rank.get(r.tag)
        if cat is None:
            rank[r.tag] = cat = len(order)
            order.append(r.tag)
        if r.t_end > r.t_start:
            bounds += [(r.t_start, 1, cat), (r.t_end, -1, cat)]
        if r.latency > 0:
            li = rank[latency_label]
            bounds += [(r.t_end, 1, li), (r.t_end + r.latency, -1, li)]
    out = dict.fromkeys(order, 0.0)
    out[idle_label] = 0.0
    bounds.sort()
    active = [0] * len(order)
    t = start
    i = 0
    while i <= len(bounds):
        nxt = bounds[i][0] if i < len(bounds) else end
        lo, hi = max(t, start), min(nxt, end)
        if hi > lo:
            cat = next((c for c, n in enumerate(active) if n > 0), None)
            out[order[cat] if cat is not None else idle_label] += hi - lo
        if i == len(bounds):
            break
        t = nxt
        while i < len(bounds) and bounds[i][0] == t:
            _, d, c = bounds[i]
            active[c] += d
            i += 1
    return out
