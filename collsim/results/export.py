"""Records and comparisons as JSON, CSV and pandas DataFrames (machine-readable forms).

Units: record times in microseconds, bandwidths in GB/s (1e9 bytes/s), breakdowns in seconds.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from collsim.results.compare import AlgorithmComparison, Comparison, Explanation
from collsim.results.records import FLAT_FIELDS, Record
from collsim.results.repeat import REPEAT_FIELDS, RepeatedRecord

if TYPE_CHECKING:
    import pandas

__all__ = [
    "algorithm_comparisons_to_csv",
    "algorithm_comparisons_to_json",
    "comparisons_to_csv",
    "comparisons_to_json",
    "explanations_to_json",
    "mark_partial",
    "partial_fields",
    "records_to_csv",
    "records_to_dataframe",
    "records_to_json",
]


def _nulls(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by None: strict JSON (RFC 8259) has no ``Infinity``, which
    JavaScript's, Go's and serde's readers refuse (a comparison's speedup where NCCL's time is 0: a size of no
    elements)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _nulls(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nulls(v) for v in obj]
    return obj


def _json_default(obj: Any) -> Any:
    """Turn NumPy scalars/arrays, paths, sets and records into JSON values; refuse anything else clearly."""
    if isinstance(obj, Record):
        return obj.to_dict()
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if hasattr(obj, "tolist") and callable(obj.tolist):  # NumPy scalars and arrays
        return obj.tolist()
    if hasattr(obj, "model_dump") and callable(obj.model_dump):  # pydantic v2 models
        return obj.model_dump(mode="json")
    raise TypeError(f"cannot write a {type(obj).__name__} as JSON: {obj!r}")


def partial_fields(partial: bool, done: int, total: int, unit: str = "rows") -> dict[str, Any]:
    """The top-level JSON keys that say whether an output is partial: ``partial`` and ``<unit>_done`` /
    ``<unit>_total`` (rows that finished, rows a complete run has); written whether partial or not.

    >>> partial_fields(True, 9, 46)
    {'partial': True, 'rows_done': 9, 'rows_total': 46}
    """
    return {"partial": partial, f"{unit}_done": done, f"{unit}_total": total}


def mark_partial(text: str, fmt: str, done: int, total: int, unit: str = "rows", reason: str = "interrupted") -> str:
    """Mark a partial output (``reason``: ``interrupted``, ...) in its format.

    * ``table``: a last comment line ``# interrupted: 9 of 46 rows finished; this output is partial``.
    * ``csv``: a first comment line ``# partial: {"reason": "interrupted", "rows_done": 9, "rows_total": 46}`` (the
      ``# key: <JSON>`` form of collsim's measurement CSV): ``pandas.read_csv(f, comment="#")`` reads the rows, and
      a reader that does not skip comments stops at once instead of taking a partial file for a whole one.
    * ``json``: unchanged (its writer puts :func:`partial_fields` in the object).

    >>> print(mark_partial("a,b\\n1,2\\n", "csv", 1, 4), end="")
    # partial: {"reason": "interrupted", "rows_done": 1, "rows_total": 4}
    a,b
    1,2
    >>> print(mark_partial("# table\\n", "table", 1, 4, "sizes"), end="")
    # table
    # interrupted: 1 of 4 sizes finished; this output is partial
    """
    if fmt == "csv":
        counts = {"reason": reason, f"{unit}_done": done, f"{unit}_total": total}
        return f"# partial: {json.dumps(counts)}\n{text}"
    if fmt == "json":
        return text
    sep = "" if not text or text.endswith("\n") else "\n"
    return f"{text}{sep}# {reason}: {done} of {total} {unit} finished; this output is partial\n"


def records_to_json(records: Sequence[Record], scenario: Mapping[str, Any] | None = None, **extra: Any) -> str:
    """Write records as one JSON object ``{"scenario": ..., "results": [...], **extra}`` (indent 2).

    Parameters
    ----------
    records : sequence of Record
        Each becomes :meth:`Record.to_dict` (time in us, bandwidths in GB/s, breakdown in seconds).
    scenario : mapping, optional
        The scenario that produced them (``null`` if not given). NumPy values, paths and pydantic models in it
        are converted.
    **extra
        More top-level keys (e.g. ``collsim_version``); ``results`` is reserved.

    Returns
    -------
    str
        The JSON text (strict: no NaN or Infinity).

    Raises
    ------
    ValueError
        If ``extra`` uses the key ``results`` or a value is NaN/infinite.
    TypeError
        If a value cannot be written as JSON; the message names its type.

    Examples
    --------
    >>> from collsim.results import make_record
    >>> r = make_record(backend="nccl", collective="reduce", algorithm="ring", protocol="ll", nranks=2,
    ...                 dtype="float64", size_bytes=64, time_s=1e-6, root=0)
    >>> doc = json.loads(records_to_json([r], {"name": "demo"}, collsim_version="0.1.0"))
    >>> list(doc), doc["results"][0]["count"], doc["results"][0]["busbw_gbps"]
    (['scenario', 'results', 'collsim_version'], 8, 0.064)
    """
    if "results" in extra:
        raise ValueError("records_to_json: 'results' is reserved for the records; pass other keys in **extra")
    doc: dict[str, Any] = {"scenario": scenario, "results": [r.to_dict() for r in records], **extra}
    try:
        return json.dumps(doc, indent=2, allow_nan=False, default=_json_default)
    except ValueError as exc:
        raise ValueError(f"records_to_json: {exc} (JSON has no NaN or Infinity; replace them with null)") from exc


def _flat_rows(records: Sequence[Record]) -> tuple[list[str], list[dict[str, Any]]]:
    categories: dict[str, None] = {}  # insertion-ordered set of breakdown categories, first seen first
    for r in records:
        for key in r.breakdown:
            categories.setdefault(key, None)
    # repeated runs' statistics (RepeatedRecord: --repeat's CSV columns) after the flat fields
    stats = [*REPEAT_FIELDS] if any(isinstance(r, RepeatedRecord) for r in records) else []
    columns = [*FLAT_FIELDS, *stats, *(f"breakdown_{c}" for c in categories)]
    rows: list[dict[str, Any]] = []
    for r in records:
        d = r.to_dict()
        row = {name: d.get(name) for name in (*FLAT_FIELDS, *stats)}
        for c in categories:
            row[f"breakdown_{c}"] = r.breakdown.get(c)
        rows.append(row)
    return columns, rows


def records_to_csv(records: Sequence[Record]) -> str:
    """Write records as CSV: the flat Record fields, then one ``breakdown_<category>`` column per category.

    Breakdown columns are in seconds, in the order categories are first seen; a record without a category
    leaves its cell empty, as does ``channels`` when unknown. ``notes`` are not written.

    Parameters
    ----------
    records : sequence of Record
        Rows in the given order.

    Returns
    -------
    str
        CSV text with a header line and ``\\n`` line endings.

    Examples
    --------
    >>> from collsim.results import make_record
    >>> r = make_record(backend="gloo", collective="allreduce", algorithm="ring", protocol="-", nranks=2,
    ...                 dtype="float32", size_bytes=400, time_s=3e-6, breakdown={"net": 2e-6, "reduce": 1e-6})
    >>> print(records_to_csv([r]).splitlines()[0])
    backend,collective,algorithm,protocol,nranks,dtype,size_bytes,count,time_us,algbw_gbps,busbw_gbps,redop,root,channels,breakdown_net,breakdown_reduce
    """
    columns, rows = _flat_rows(records)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def records_to_dataframe(records: Sequence[Record]) -> pandas.DataFrame:
    """Return one DataFrame row per record (in order), with the columns of :func:`records_to_csv` (and, for
    repeated runs' records, :data:`~collsim.results.repeat.REPEAT_FIELDS` after the flat fields).

    Missing breakdown categories (seconds) and unknown ``channels`` are NaN/None. pandas is imported here, so the
    rest of this package works without it.

    Examples
    --------
    >>> from collsim.results import make_record
    >>> r = make_record(backend="nccl", collective="allreduce", algorithm="tree", protocol="ll", nranks=2,
    ...                 dtype="float32", size_bytes=8, time_s=1e-6)
    >>> df = records_to_dataframe([r])
    >>> df.shape, float(df.loc[0, "busbw_gbps"])
    ((1, 14), 0.008)
    """
    import pandas as pd

    columns, rows = _flat_rows(records)
    return pd.DataFrame(rows, columns=columns)


def comparisons_to_json(
    rows: Sequence[Comparison],
    scenario: Mapping[str, Any] | None,
    interrupted: bool,
    healthy: Sequence[Comparison] | None = None,
    **extra: Any,
) -> str:
    """``collsim compare --format json``: ``{"scenario", "comparison": [...], "interrupted"}`` (indent 2, newline),
    and ``"healthy": [...]`` (the same rows without the scenario's perturbations) when ``healthy`` is given.

    Parameters
    ----------
    rows : sequence of Comparison
        Each becomes :meth:`Comparison.to_dict`.
    scenario : mapping, optional
        The resolved scenario (``Scenario.to_dict()``).
    interrupted : bool
        Whether Ctrl-C stopped the sweep (the rows are those that finished).
    **extra
        More top-level keys (:func:`partial_fields`).
    """
    doc: dict[str, Any] = {"scenario": scenario, "comparison": [r.to_dict() for r in rows], "interrupted": interrupted}
    if healthy is not None:
        doc["healthy"] = [r.to_dict() for r in healthy]
    doc.update(extra)
    return json.dumps(_nulls(doc), indent=2, allow_nan=False) + "\n"


def _csv_number(x: float | None) -> float | str:
    """A CSV cell: empty where JSON writes null (no value, or none that is finite)."""
    return "" if x is None or not math.isfinite(x) else x


def comparisons_to_csv(rows: Sequence[Comparison], healthy: Sequence[Comparison] | None = None) -> str:
    """``collsim compare --format csv``: size (bytes), each backend's time (us) and busbw (GB/s), the speedup
    (empty where NCCL takes no time, as JSON's null); with ``healthy`` (a perturbed scenario's healthy sweep) each
    backend's healthy time (us) and slowdown (perturbed / healthy) too."""
    buf = io.StringIO()
    w = csv.writer(buf)
    head = ["size_bytes", "nccl_time_us", "nccl_busbw_gbps", "gloo_time_us", "gloo_busbw_gbps", "speedup"]
    base = {(h.nccl.collective, h.size_bytes): h for h in healthy or ()}
    extra = ["nccl_healthy_time_us", "nccl_slowdown", "gloo_healthy_time_us", "gloo_slowdown"]
    w.writerow(head + (extra if healthy is not None else []))
    for r in rows:
        row: list[Any] = [r.size_bytes, r.nccl.time_us, r.nccl.busbw_gbps, r.gloo.time_us, r.gloo.busbw_gbps,
                          _csv_number(r.speedup)]  # fmt: skip
        if healthy is not None:
            h = base.get((r.nccl.collective, r.size_bytes))
            for now, then in ((r.nccl, h.nccl if h else None), (r.gloo, h.gloo if h else None)):
                slow = now.time_us / then.time_us if then is not None and then.time_us > 0 else None
                row += [_csv_number(then.time_us if then is not None else None), _csv_number(slow)]
        w.writerow(row)
    return buf.getvalue()


def explanations_to_json(
    rows: Sequence[Explanation],
    scenario: Mapping[str, Any] | None,
    interrupted: bool,
    agreement: tuple[int, int] | None = None,
    **extra: Any,
) -> str:
    """``collsim explain --format json``: ``{"scenario", "explain": [...], "interrupted"[, "agreement"]}``.

    Parameters
    ----------
    rows : sequence of Explanation
        Each becomes :meth:`Explanation.to_dict` (times in us).
    scenario : mapping, optional
        The resolved scenario.
    interrupted : bool
        Whether Ctrl-C stopped the sweep.
    agreement : (int, int), optional
        (sizes where the cost model and the simulation pick the same pair, sizes judged); written when sizes
        were judged (see :func:`collsim.results.text.agreement`).
    **extra
        More top-level keys (:func:`partial_fields`).
    """
    payload: dict[str, Any] = {"scenario": scenario, "explain": [r.to_dict() for r in rows], "interrupted": interrupted}
    if agreement and agreement[1]:
        payload["agreement"] = {"same_choice": agreement[0], "sizes": agreement[1]}
    payload.update(extra)
    return json.dumps(_nulls(payload), indent=2, allow_nan=False) + "\n"


def algorithm_comparisons_to_json(
    rows: Sequence[AlgorithmComparison], scenario: Mapping[str, Any] | None, interrupted: bool, **extra: Any
) -> str:
    """``collsim compare --format json`` with one backend enabled: ``{"scenario", "backend", "algorithms": [...],
    "interrupted"}`` (each row :meth:`AlgorithmComparison.to_dict`; indent 2, newline); ``extra``: more top-level
    keys (:func:`partial_fields`)."""
    doc: dict[str, Any] = {
        "scenario": scenario,
        "backend": rows[0].backend if rows else None,
        "algorithms": [r.to_dict() for r in rows],
        "interrupted": interrupted,
    }
    doc.update(extra)
    return json.dumps(_nulls(doc), indent=2, allow_nan=False, default=_json_default) + "\n"


def algorithm_comparisons_to_csv(
    rows: Sequence[AlgorithmComparison], healthy: Sequence[AlgorithmComparison] | None = None
) -> str:
    """``collsim compare --format csv`` with one backend enabled: a row per (collective, size, variant) with its
    time (us), busbw (GB/s), the algorithm and protocol run, and whether it is the default or the fastest; with
    ``healthy`` (a perturbed scenario's healthy sweep) the variant's healthy time (us) and slowdown too."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["collective", "size_bytes", "backend", "variant", "algorithm", "protocol", "time_us",
                "busbw_gbps", "default", "fastest"] + (["healthy_time_us", "slowdown"] if healthy is not None else []))
    base = {(h.collective, h.size_bytes): h for h in healthy or ()}
    for r in rows:
        for v, rec in r.records.items():
            row: list[Any] = [r.collective, r.size_bytes, r.backend, v, rec.algorithm, rec.protocol, rec.time_us,
                              rec.busbw_gbps, v == r.default, v == r.best]  # fmt: skip
            if healthy is not None:
                h = base.get((r.collective, r.size_bytes))
                then = h.records.get(v) if h is not None else None
                slow = rec.time_us / then.time_us if then is not None and then.time_us > 0 else None
                row += [_csv_number(then.time_us if then is not None else None), _csv_number(slow)]
            w.writerow(row)
    return buf.getvalue()
