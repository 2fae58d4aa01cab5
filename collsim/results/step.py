"""Training-step results (``collsim step``): one row per (configuration, backend), the bucket table, text, JSON,
CSV and a DataFrame. Times in the rows are seconds; the text prints milliseconds."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from collsim.training import StepResult

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["STEP_FIELDS", "StepRow", "format_step", "step_rows_to_csv", "step_rows_to_dataframe", "step_rows_to_json"]

#: Columns of a step row, in order (seconds for times, fractions for shares).
STEP_FIELDS = (
    "label",
    "backend",
    "world",
    "iteration_s",
    "compute_s",
    "comm_s",
    "exposed_s",
    "overlap",
    "scaling_efficiency",
    "buckets",
)
_MS = 1e3  # seconds -> milliseconds


@dataclass(frozen=True)
class StepRow:
    """A step result under a label (the sweep value that produced it, ``""`` without a sweep)."""

    label: str
    result: StepResult

    def flat(self) -> dict[str, Any]:
        """The row as :data:`STEP_FIELDS` -> value."""
        r = self.result
        return {
            "label": self.label,
            "backend": r.backend,
            "world": r.world,
            "iteration_s": r.iteration_s,
            "compute_s": r.compute_s,
            "comm_s": r.comm_s,
            "exposed_s": r.exposed_s,
            "overlap": r.overlap,
            "scaling_efficiency": r.scaling_efficiency,
            "buckets": len(r.buckets),
        }


def format_step(
    rows: Sequence[StepRow], *, name: str, model: str, buckets: bool = True, style: str = "ddp"
) -> str:
    """The text of ``collsim step``: one line per row, then each row's bucket table (``buckets``; with ``style``
    ``fsdp``, the units' reduce-scatters) and notes; without the tables the rows' notes, each once.

    Examples
    --------
    >>> from collsim.training import StepResult
    >>> r = StepResult("nccl", 8, 0.110, 0.100, 0.020, (), ())
    >>> print(format_step([StepRow("", r)], name="x", model="m").splitlines()[3])
                    nccl      8      110.000      100.000       20.000       10.000    50.0%     90.9%        0
    """
    fsdp = style == "fsdp"
    what = "FSDP" if fsdp else "DDP"
    out = [f"# collsim step: {name}, model {model}, one {what} iteration per backend (times in ms)"]
    width = max([16, *(len(row.label) for row in rows)])  # the config column fits the longest label
    out.append(f"# {'config':>{width - 2}} {'backend':>7} {'ranks':>6} {'iteration':>12} {'compute':>12} "
               f"{'comm':>12} {'exposed':>12} {'overlap':>8} {'scaling':>9} {'buckets':>8}")  # fmt: skip
    out.append("#")
    for row in rows:
        r = row.result
        out.append(
            f"{row.label:>{width}} {r.backend:>7} {r.world:>6} {r.iteration_s * _MS:12.3f} {r.compute_s * _MS:12.3f} "
            f"{r.comm_s * _MS:12.3f} {r.exposed_s * _MS:12.3f} {r.overlap:8.1%} {r.scaling_efficiency:9.1%} "
            f"{len(r.buckets):8d}"
        )
    if buckets:
        for row in rows:
            r = row.result
            head = f"{row.label + ': ' if row.label else ''}{r.backend}"
            coll = r.reduction or ("reduce-scatter" if fsdp else "allreduce")
            table = "units' reduce-scatters" if coll == "reduce-scatter" else "units' reductions"
            table = table if fsdp else "buckets"
            comm = (f"comm: from a worker thread taking the {coll} to its end, beside the others"
                    if r.backend == "gloo" and not fsdp else f"comm: the {coll} alone")  # fmt: skip
            out += ["", f"# {table}, {head} (ms from the iteration's start; {comm})"]
            out.append(f"# {'unit' if fsdp else 'bucket':>6} {'params':>7} {'bytes':>12} {'ready':>10} {'start':>10} "
                       f"{'end':>10} {'comm':>10}")  # fmt: skip
            for b in r.buckets:
                out.append(f"  {b.index:>6} {b.params:>7} {b.nbytes:>12} {b.ready_s * _MS:10.3f} "
                           f"{b.start_s * _MS:10.3f} {b.end_s * _MS:10.3f} {b.comm_s * _MS:10.3f}")  # fmt: skip
            out += [f"# {n}" for n in r.notes]
    else:  # no bucket tables: the rows' notes still said once each (a setting not used, a strategy switched)
        notes = list(dict.fromkeys(n for row in rows for n in row.result.notes))
        out += [""] + [f"# {n}" for n in notes] if notes else []
    return "\n".join(out) + "\n"


def step_rows_to_json(rows: Sequence[StepRow], scenario: dict[str, Any] | None = None) -> str:
    """Rows as JSON: ``{"scenario": ..., "steps": [row + "bucket_table" + "timeline" + "notes"]}``, seconds."""
    steps = []
    for row in rows:
        d = row.flat()
        d["bucket_table"] = [b.__dict__ for b in row.result.buckets]
        d["timeline"] = [s.__dict__ for s in row.result.spans]
        d["notes"] = list(row.result.notes)
        steps.append(d)
    return json.dumps({"scenario": scenario, "steps": steps}, indent=1) + "\n"


def step_rows_to_csv(rows: Sequence[StepRow]) -> str:
    """Rows as CSV with the :data:`STEP_FIELDS` header."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(STEP_FIELDS), lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow(row.flat())
    return buf.getvalue()


def step_rows_to_dataframe(rows: Sequence[StepRow]) -> pd.DataFrame:
    """Rows as a pandas DataFrame with the :data:`STEP_FIELDS` columns."""
    import pandas as pd

    return pd.DataFrame([row.flat() for row in rows], columns=list(STEP_FIELDS))
