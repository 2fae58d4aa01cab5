"""A sweep's results as text: an aligned table, CSV, JSON; and the progress line on stderr.

Examples
--------
>>> short_names(["cluster.nodes", "backends.nccl.env.NCCL_ALGO", "cluster.fabric.nodes"])
['cluster.nodes', 'NCCL_ALGO', 'fabric.nodes']
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from collsim.results import mark_partial, partial_fields
from collsim.sweep.runner import SweepOutcome
from collsim.units import format_size

__all__ = ["CSV_COLUMNS", "ProgressLine", "format_duration", "format_table", "short_names", "to_csv", "to_json"]

#: The columns of ``--format csv`` after the axes (JSON has every column of the DataFrame).
CSV_COLUMNS = (
    "backend", "collective", "size_bytes", "algorithm", "protocol", "nranks", "dtype", "count", "time_us",
    "algbw_gbps", "busbw_gbps", "channels", "error", "key",
)  # fmt: skip


def short_names(paths: Sequence[str]) -> list[str]:
    """Each axis path by its shortest tail of components that no other path ends with (for column headers)."""
    out = []
    for path in paths:
        parts = path.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(o != path and (o == tail or o.endswith("." + tail)) for o in paths):
                break
        out.append(tail)
    return out


def format_duration(seconds: float) -> str:
    """``"42 s"``, ``"3m05s"``, ``"2h04m"``.

    >>> format_duration(42.4), format_duration(185), format_duration(7440)
    ('42 s', '3m05s', '2h04m')
    """
    if not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def _summary(out: SweepOutcome) -> str:
    g = out.grid
    where = "no store"
    if out.store is not None:
        path = out.store.path
        with contextlib.suppress(ValueError):  # under the current folder: the path as the user would type it
            path = path.resolve().relative_to(Path.cwd().resolve())
        where = f"store {path}"
    text = (f"# collsim sweep: {g.name} ({g.file}): {len(out.points)} points, {out.ran} run, {out.skipped} from the "
            f"store; {where}")  # fmt: skip
    if out.ran:
        text += f"; {out.executor}, {out.run_seconds:.1f} s"
    return text


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return str(value)


def format_table(out: SweepOutcome) -> str:
    """One line per point and collective: the axes, backend, size, algorithm/protocol, time (us), busbw (GB/s);
    points without a result say why below the table."""
    df = out.dataframe()
    axes = out.axes
    heads = [*short_names(axes), "backend", "collective", "size", "algo/proto", "time us", "busbw GB/s"]
    rows: list[list[str]] = []
    for r in df.to_dict("records"):
        failed = isinstance(r.get("error"), str) and r["error"]
        algo = "error" if failed else f"{r['algorithm']}/{r['protocol']}"
        rows.append([
            *(_cell(r[a]) for a in axes),
            str(r["backend"]),
            _cell(r["collective"]),
            format_size(r["size_bytes"]),
            algo,
            "-" if failed else f"{r['time_us']:.2f}",
            "-" if failed else f"{r['busbw_gbps']:.2f}",
        ])  # fmt: skip
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(heads)]
    lines = [_summary(out), "# " + "  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    for p, err in out.errors():
        lines.append(f"# point {p.index} ({p.label()}): {err}")
    if out.lost:
        lines.append(f"# {len(out.lost)} points lost with their workers (not stored; run again to retry)")
    if out.partial:  # as collsim.results.mark_partial marks a table
        why = "interrupted" if out.interrupted else "lost"
        lines.append(f"# {why}: {out.finished} of {len(out.points)} points finished (stored; run again to "
                     "continue); this output is partial")  # fmt: skip
    return "\n".join(lines) + "\n"


def to_csv(out: SweepOutcome) -> str:
    """The axes (full paths) and :data:`CSV_COLUMNS`, one row per point and collective; a partial output (points
    interrupted or lost) starts with a ``# partial: {...}`` comment line (:func:`collsim.results.mark_partial`)."""
    df = out.dataframe()
    text: str = df[[*out.axes, *CSV_COLUMNS]].to_csv(index=False)
    if out.partial:
        text = mark_partial(text, "csv", out.finished, len(out.points), "points",
                            "interrupted" if out.interrupted else "lost")  # fmt: skip
    return text


def _plain(value: Any) -> Any:
    """A DataFrame cell as plain JSON data: NumPy scalars as Python's, a missing value (NaN, None, pandas' NA) as
    None."""
    import pandas

    if isinstance(value, (list, dict, str)):
        return value
    if hasattr(value, "item"):
        value = value.item()  # a NumPy scalar
    return None if pandas.isna(value) else value


def to_json(out: SweepOutcome) -> str:
    """The grid, what ran and every row (all columns; ``breakdown`` and ``notes`` as JSON data); ``partial``,
    ``points_done`` and ``points_total`` say whether points are missing (:func:`collsim.results.partial_fields`)."""
    df = out.dataframe()
    df["finished_at"] = df["finished_at"].astype(str)
    # every value as Python writes it (repr: a float read back is the same float); pandas' to_json keeps 10
    # decimals, so the JSON's figures differed from the store's, the CSV's and run's (725.4478499137 for ...7344)
    rows = [{k: _plain(v) for k, v in r.items()} for r in df.to_dict(orient="records")]
    for row in rows:
        for col in ("breakdown", "notes"):
            if isinstance(row.get(col), str):
                row[col] = json.loads(row[col])
    doc = {
        "grid": out.grid.name,
        "file": out.grid.file,
        "axes": out.axes,
        "points": len(out.points),
        "ran": out.ran,
        "skipped": out.skipped,
        "lost": [p.index for p in out.lost],
        "interrupted": out.interrupted,
        "store": str(out.store.path) if out.store is not None else None,
        **partial_fields(out.partial, out.finished, len(out.points), "points"),
        "rows": rows,
    }
    return json.dumps(doc, indent=1) + "\n"


class ProgressLine:
    """``[done/total] rate points/s, ETA`` on one line of stderr, only when stderr is a terminal.

    Parameters
    ----------
    quiet : bool
        Print nothing.
    stream : text stream
        Default stderr.
    """

    def __init__(self, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.on = not quiet and self.stream.isatty()
        self._t0 = time.monotonic()
        self._last = 0.0

    def text(self, done: int, total: int, elapsed: float) -> str:
        """The line's text.

        >>> ProgressLine(quiet=True).text(50, 200, 10.0)
        '[50/200] 5 points/s, ETA 30 s'
        """
        if done == 0 or elapsed <= 0:
            return f"[{done}/{total}] starting"
        rate = done / elapsed
        return f"[{done}/{total}] {rate:.3g} points/s, ETA {format_duration((total - done) / rate)}"

    def __call__(self, done: int, total: int) -> None:
        if done == 0:
            self._t0 = time.monotonic()
        if not self.on:
            return
        now = time.monotonic()
        if done not in (0, total) and now - self._last < 0.1:
            return
        self._last = now
        self.stream.write("\r\x1b[K" + self.text(done, total, now - self._t0))
        self.stream.flush()

    def done(self) -> None:
        """Clear the line."""
        if self.on:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
