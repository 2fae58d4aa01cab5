"""Text tables: nccl-tests' layout for records, and the tables of ``collsim run``, ``compare`` and ``explain``.

Times are printed in microseconds and bandwidths in GB/s (1e9 bytes/s), as nccl-tests prints them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import TypeVar

from collsim.results.compare import AlgorithmComparison, Comparison, Explanation
from collsim.results.records import Record
from collsim.units import NCCL_TESTS_TYPE_NAMES, format_size

R = TypeVar("R", bound=Record)

#: How a record's note starts where its time breakdown was left out (more flows than ``engine.max_records``)
NO_BREAKDOWN = "no time breakdown"

__all__ = [
    "NO_BREAKDOWN",
    "agreement",
    "format_algorithm_comparison",
    "format_comparison",
    "format_explain_perturbation",
    "format_explanation",
    "format_nccl_tests",
    "format_perturbation",
    "format_sweep",
    "share_text",
]


def _fit(value: float, width: int) -> str:
    """Format like nccl-tests' ``getFloatStr``: 2 decimals, else 1, else 0, else exponent, to fit ``width``."""
    for spec in (".2f", ".1f", ".0f"):
        text = f"{value:{width}{spec}}"
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"


def _word(name: str, value: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"{name} {value!r} cannot be a column of nccl-tests text: it must be one non-empty word")
    return value


def format_nccl_tests(records: Sequence[Record], *, header: str | None = None) -> str:
    """Write records as nccl-tests' text table (out-of-place columns only).

    Widths follow nccl-tests 2.19 (``src/util.cu``): ``%12li  %12li  %8s  %6s  %6s`` for size, count, type,
    redop, root, then time (7 characters, 2 decimals while they fit, then 1, then 0) and algbw/busbw (6 characters,
    same rule). ``#wrong`` is ``N/A``: a simulation checks no data. The footer gives the mean busbw over the rows as
    ``# Avg bus bandwidth    : X`` (``%g``, as nccl-tests). Every data row splits on whitespace into 9 columns.

    Parameters
    ----------
    records : sequence of Record
        Rows, printed in the given order.
    header : str, optional
        Comment lines printed first (each prefixed with ``# `` unless it already starts with ``#``).

    Returns
    -------
    str
        The text, ending with a newline.

    Examples
    --------
    >>> from collsim.results import make_record
    >>> r = make_record(backend="nccl", collective="allreduce", algorithm="ring", protocol="simple", nranks=8,
    ...                 dtype="float32", size_bytes=1024**3, time_s=4643.20e-6)
    >>> print(format_nccl_tests([r]))  # doctest: +NORMALIZE_WHITESPACE
    #                                                      out-of-place
    #       size         count      type   redop    root     time   algbw   busbw  #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)
      1073741824     268435456     float     sum      -1  4643.20  231.25  404.69     N/A
    # Avg bus bandwidth    : 404.688
    <BLANKLINE>
    """
    lines: list[str] = []
    if header:
        for line in header.splitlines():
            lines.append(line if line.startswith("#") else f"# {line}".rstrip())
        lines.append("#")
    lines.append(f"# {'':>10s}  {'':>12s}  {'':>8s}  {'':>6s}  {'':>6s}           out-of-place")
    lines.append(
        f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}"
        f"  {'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}"
    )
    lines.append(
        f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}"
        f"  {'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}"
    )
    for r in records:
        type_name = NCCL_TESTS_TYPE_NAMES.get(r.dtype)
        if type_name is None:
            raise ValueError(
                f"record dtype {r.dtype!r} has no nccl-tests type name; expected one of: "
                f"{', '.join(NCCL_TESTS_TYPE_NAMES)}"
            )
        lines.append(
            f"{r.size_bytes:12d}  {r.count:12d}  {type_name:>8s}  {_word('redop', r.redop):>6s}  {r.root:6d}"
            f"  {_fit(r.time_us, 7):>7s}  {_fit(r.algbw_gbps, 6):>6s}  {_fit(r.busbw_gbps, 6):>6s}    N/A"
        )
    avg = math.fsum(r.busbw_gbps for r in records) / len(records) if records else 0.0
    lines.append(f"# Avg bus bandwidth    : {avg:g}")
    return "\n".join(lines) + "\n"


def groups(
    records: Sequence[R], backends: Sequence[str], collectives: Sequence[str]
) -> Iterator[tuple[str, str, list[R]]]:
    """``(backend, collective, records)`` for each pair that has records, in the order given (one table each)."""
    for b in backends:
        for coll in collectives:
            recs = [r for r in records if r.backend == b and r.collective == coll]
            if recs:
                yield b, coll, recs


def format_sweep(
    records: Sequence[Record],
    *,
    name: str,
    backends: Sequence[str],
    collectives: Sequence[str],
    nccl_notes: Sequence[str] = (),
) -> str:
    """``collsim run``'s tables: one nccl-tests table per backend and collective, with a header line saying what ran.

    Parameters
    ----------
    records : sequence of Record
        A sweep's records (any order within a table is kept).
    name : str
        The scenario's name.
    backends, collectives : sequence of str
        Tables in this order; a (backend, collective) without records is left out.
    nccl_notes : sequence of str
        Extra header lines of NCCL's tables (e.g. what a network plugin set).

    Returns
    -------
    str
        The tables, separated by a blank line.
    """
    parts = []
    for b, coll, recs in groups(records, backends, collectives):
        r0 = recs[0]
        channels = max(r.channels or 0 for r in recs)
        # a size of no elements runs nothing (Gloo's "empty", NCCL's pick unused): not an algorithm of the table
        ran = {r.algorithm for r in recs if r.size_bytes > 0} or {r.algorithm for r in recs}
        head = (
            f"collsim {b}: {name}, {r0.nranks} ranks, {coll} {r0.dtype}, "
            f"algorithms {', '.join(sorted(ran))}"
            + (f", up to {channels} channels" if channels else "")
        )
        if b == "nccl":
            head += "".join(f"\n{note}" for note in nccl_notes)
        parts.append(format_nccl_tests(recs, header=head))
    return "\n".join(parts)


def share_text(rec: Record) -> str:
    """Where a record's time goes, as text: ``"62% transfer/nvlink, 38% latency"``; shares under 0.5% are summed
    into ``other``.

    >>> from collsim.results import make_record
    >>> r = make_record(backend="gloo", collective="allreduce", algorithm="ring", protocol="-", nranks=2,
    ...                 dtype="float32", size_bytes=400, time_s=1.0, breakdown={"tcp": 0.7, "d2h": 0.298, "x": 0.002})
    >>> share_text(r)
    '70% tcp, 30% d2h, 0.2% other'
    """
    shares = Comparison.shares(rec)
    if not shares:  # not recorded: Simulator._with_breakdown's note says why
        too_many = any(n.startswith(NO_BREAKDOWN) for n in rec.notes)
        return "not recorded" + (": more flows than engine.max_records (raise it to see it)" if too_many else "")
    shown = [(k, f) for k, f in shares if f >= 0.005]
    other = 1.0 - sum(f for _, f in shown)
    text = ", ".join(f"{100 * f:.0f}% {k}" for k, f in shown)
    if other > 0.0005:
        text += f", {100 * other:.1f}% other"
    return text


def format_comparison(
    rows: Sequence[Comparison],
    *,
    name: str,
    collectives: Sequence[str],
    dtype: str,
    gloo_algorithm: str,
    gloo_transport: str,
    gloo_device: str,
    nccl_notes: Sequence[str] = (),
    peers: Sequence[int] | None = None,
) -> str:
    """``collsim compare``'s table: per size NCCL's and Gloo's time (us), busbw (GB/s) and the speedup, then where
    each one's time goes.

    Parameters
    ----------
    rows : sequence of Comparison
        One per (collective, size).
    name : str
        The scenario's name.
    collectives : sequence of str
        The scenario's collectives (with several, each row is labelled with its collective).
    dtype : str
        Element type.
    gloo_algorithm, gloo_transport, gloo_device : str
        How Gloo runs (for the header).
    nccl_notes : sequence of str
        Lines about NCCL's run for the header (what a network plugin set, which tuner picks), as ``run`` prints them.
    peers : sequence of int, optional
        ``workload.peers``: with it both backends' sendrecv is one send; without it the header says they differ.
    """
    n = rows[0].nccl.nranks if rows else 0
    many = len(collectives) > 1

    def label(r: Comparison) -> str:
        size = format_size(r.size_bytes)
        return f"{r.nccl.collective} {size}" if many else size

    width = max([10, *(len(label(r)) for r in rows)])
    # the algorithm Gloo ran for each collective (backends.gloo.algorithm is allreduce's; broadcast is binomial,
    # alltoall direct, sendrecv one send), from the rows themselves
    ran: dict[str, str] = {}
    for r in rows:
        ran.setdefault(r.gloo.collective, r.gloo.algorithm)
    if ran and len(set(ran.values())) == 1:
        gloo_algorithm = next(iter(ran.values()))
    elif ran:
        gloo_algorithm = ", ".join(f"{c} {a}" for c, a in ran.items())
    pair_note = []
    if "sendrecv" in ran and peers is None:
        pair_note = ["# sendrecv: NCCL every rank to the next (nccl-tests' sendrecv_perf), Gloo one send between two "
                     "ranks (workload.peers): set workload.peers to compare one send with one send"]  # fmt: skip
    lines = [
        f"# collsim compare: {name} ({n} ranks, {', '.join(collectives)} {dtype})",
        f"# NCCL: the (algorithm/protocol) its cost model picks; Gloo: {gloo_algorithm} over {gloo_transport} "
        f"({gloo_device} tensors)",
        *pair_note,
        *(f"# {note}" for note in nccl_notes),
        f"# {'size':>{width}} {'nccl us':>12} {'busbw':>7} {'nccl algo':>12} {'gloo us':>12} {'busbw':>7} "
        f"{'speedup':>8}",
    ]
    for r in rows:
        algo = f"{r.nccl.algorithm}/{r.nccl.protocol}"
        lines.append(
            f"  {label(r):>{width}} {r.nccl.time_us:12.2f} {r.nccl.busbw_gbps:7.2f} {algo:>12} "
            f"{r.gloo.time_us:12.2f} {r.gloo.busbw_gbps:7.2f} {r.speedup:7.1f}x"
        )
    lines.append("")
    lines.append("# Where the time goes (share of each collective's time; the parts add up to 100%), and the most "
                 "loaded link where one is busy half the time or more (its bytes over its bandwidth: where a faster "
                 "part helps first)")
    for r in rows:
        lines.append(f"  {label(r):>{width}}  NCCL: {share_text(r.nccl)}{_bound(r.nccl_bottleneck)}")
        lines.append(f"  {'':>{width}}  Gloo: {share_text(r.gloo)}{_bound(r.gloo_bottleneck)}")
    return "\n".join(lines) + "\n"


def _bound(b: tuple[str, str, float] | None) -> str:
    """``; most loaded: upi n0/cpu0->n0/cpu1 95%`` for a comparison row's bottleneck, or nothing where none is at
    least half loaded (the time is then latency's, or the CPU's: Gloo's TCP and reductions are not links)."""
    if b is None or b[2] < 0.5:
        return ""
    return f"; most loaded: {b[1]} {b[0]} {100 * b[2]:.0f}%"


def _perturbed_head(sizes: Sequence[int], tail: str, what: Sequence[str]) -> tuple[int, list[str]]:
    """The size column's width and the first lines of a perturbed-against-healthy section (title + ``tail``, then
    the perturbations, one line each)."""
    width = max([10, *(len(format_size(s)) for s in sizes)])
    head = f"# Perturbed against healthy (the same scenario without perturb){tail}"
    return width, [head, *(f"#   {w}" for w in what)]


def format_perturbation(rows: Sequence[Comparison], healthy: Sequence[Comparison], what: Sequence[str]) -> str:
    """``collsim compare``'s section for a perturbed scenario: per size each backend's time on the healthy cluster
    and on the perturbed one (us) and the slowdown (perturbed / healthy).

    Parameters
    ----------
    rows, healthy : sequence of Comparison
        The perturbed and the healthy comparisons, matched by (collective, size).
    what : sequence of str
        The perturbations, one line each (the scenario's ``perturb`` entries).
    """
    base = {(r.nccl.collective, r.size_bytes): r for r in healthy}
    width, lines = _perturbed_head([r.size_bytes for r in rows], ":", what)
    lines.append(
        f"# {'size':>{width}} {'nccl healthy':>13} {'perturbed':>12} {'slowdown':>9} "
        f"{'gloo healthy':>13} {'perturbed':>12} {'slowdown':>9}"
    )
    for r in rows:
        h = base.get((r.nccl.collective, r.size_bytes))
        if h is None:
            continue
        lines.append(
            f"  {format_size(r.size_bytes):>{width}} {h.nccl.time_us:13.2f} {r.nccl.time_us:12.2f} "
            f"{r.nccl.time_us / h.nccl.time_us:8.3f}x {h.gloo.time_us:13.2f} {r.gloo.time_us:12.2f} "
            f"{r.gloo.time_us / h.gloo.time_us:8.3f}x"
        )
    return "\n".join(lines) + "\n"


def format_algorithm_perturbation(
    rows: Sequence[AlgorithmComparison], healthy: Sequence[AlgorithmComparison], what: Sequence[str]
) -> str:
    """``collsim compare``'s section for a perturbed scenario with one backend: per size and variant its time on the
    healthy cluster and on the perturbed one (us) and the slowdown (perturbed / healthy); ``*`` marks the variant
    the backend runs by default on each. ``rows`` and ``healthy`` (one backend's algorithms, matched by collective
    and size) and ``what`` as :func:`format_perturbation` takes them."""
    base = {(r.collective, r.size_bytes): r for r in healthy}
    width, lines = _perturbed_head([r.size_bytes for r in rows], ":", what)
    lines.append(f"# {'size':>{width}} {'variant':>12} {'healthy':>13} {'perturbed':>13} {'slowdown':>9}")
    for r in rows:
        h = base.get((r.collective, r.size_bytes))
        if h is None:
            continue
        for v, rec in r.records.items():
            old = h.records.get(v)
            if old is None:
                continue
            slow = f"{rec.time_us / old.time_us:8.3f}x" if old.time_us > 0 else f"{'-':>9}"
            mark = ("*" if v == h.default else " ") + ("*" if v == r.default else " ")
            lines.append(f"  {format_size(r.size_bytes):>{width}} {v:>12} {old.time_us:12.2f}{mark[0]} "
                         f"{rec.time_us:12.2f}{mark[1]} {slow}")  # fmt: skip
    return "\n".join(lines) + "\n"


def format_explain_perturbation(
    rows: Sequence[Explanation], healthy: Sequence[Explanation], what: Sequence[str]
) -> str:
    """``collsim explain``'s section for a perturbed scenario: per size NCCL's choice and its simulated time (us)
    on the healthy cluster and on the perturbed one, and the slowdown (perturbed / healthy).

    Parameters
    ----------
    rows, healthy : sequence of Explanation
        The perturbed and the healthy explanations, matched by (collective, size).
    what : sequence of str
        The perturbations, one line each (the scenario's ``perturb`` entries).
    """
    base = {(r.collective, r.size_bytes): r for r in healthy}
    width, lines = _perturbed_head([r.size_bytes for r in rows], ", NCCL's choice on each:", what)
    lines.append(f"# {'size':>{width}} {'healthy':>16} {'us':>12} {'perturbed':>16} {'us':>12} {'slowdown':>9}")
    for r in rows:
        h = base.get((r.collective, r.size_bytes))
        if h is None or r.choice not in r.simulated_s or h.choice not in h.simulated_s:
            continue
        t0, t1 = h.simulated_s[h.choice] * 1e6, r.simulated_s[r.choice] * 1e6
        lines.append(
            f"  {format_size(r.size_bytes):>{width}} {'/'.join(h.choice):>16} {t0:12.2f} {'/'.join(r.choice):>16} "
            f"{t1:12.2f} {t1 / t0 if t0 > 0 else math.nan:8.3f}x"
        )
    return "\n".join(lines) + "\n"


def agreement(rows: Sequence[Explanation]) -> tuple[int, int]:
    """(sizes where the cost model's choice is also the fastest simulated pair, sizes where every pair was
    simulated)."""
    judged = [r for r in rows if r.simulated_best is not None]
    return sum(1 for r in judged if r.simulated_best == r.choice), len(judged)


def _cell(seconds: float | None, marked: bool, mark: str) -> str:
    """A time cell of ``explain``'s table in microseconds, ``mark`` after it when ``marked``; ``-`` for a pair not
    priced (or simulated) at this size."""
    if seconds is None:
        return "- "
    return f"{seconds * 1e6:.1f}" + (mark if marked else " ")


def format_explanation(
    rows: Sequence[Explanation], *, name: str, nranks: int, notes: Sequence[str] = (), all_pairs: bool = False
) -> str:
    """``collsim explain``'s table: NCCL's cost model in us per (algorithm/protocol) and size, its choice (``*``),
    the simulated time of the choice, and with ``all_pairs`` a row of simulated times (``+`` = fastest).

    Parameters
    ----------
    rows : sequence of Explanation
        As :meth:`collsim.api.Simulator.explain` returns them: a table a collective (headed by its name when there
        are several), whose columns are the pairs NCCL's model prices at any of its sizes (``-`` where it does not).
    name : str
        Scenario name for the title line.
    nranks : int
        Ranks of NCCL's communicator.
    notes : sequence of str
        Extra header lines (each printed after ``# ``).
    all_pairs : bool
        Every pair was simulated: print the simulated row and the agreement line.
    """
    lines = [
        f"# collsim explain: {name}, {nranks} ranks, NCCL's cost model in us per "
        "(algorithm/protocol); * = NCCL's choice (a tuner plugin's where a note says so)"
        + ("; simulated times below each row" if all_pairs else ""),
        *[f"# {note}" for note in notes],
    ]
    collectives = list(dict.fromkeys(r.collective for r in rows))
    for coll in collectives:  # one table a collective: each has its own pairs (Tree and NVLSTree only allreduce)
        mine = [r for r in rows if r.collective == coll]
        pairs = list(dict.fromkeys(k for r in mine for k in r.model_s))  # a pair NCCL's model prices at any size
        names = [f"{a}/{p}" for a, p in pairs]
        width = max([11, *(len(x) + 1 for x in names)])
        if len(collectives) > 1:
            lines.append(f"# {coll}")
        lines.append(f"# {'size':>10} " + "".join(f"{x:>{width}}" for x in names) + f" {'choice':>14} "
                     f"{'simulated us':>13}")  # fmt: skip
        for r in mine:
            cells = "".join(f"{_cell(r.model_s.get(k), k == r.choice, '*'):>{width}}" for k in pairs)
            sim_t = r.simulated_s.get(r.choice)
            lines.append(f"  {format_size(r.size_bytes):>10} {cells} {'/'.join(r.choice):>14} "
                         f"{(sim_t or 0) * 1e6:13.2f}")  # fmt: skip
            if all_pairs:
                best = r.simulated_best
                simc = "".join(f"{_cell(r.simulated_s.get(k), k == best, '+'):>{width}}" for k in pairs)
                lines.append(f"  {'simulated':>10} {simc} {'/'.join(best or ('-',)):>14}")
    same, judged = agreement(rows)
    if judged:
        lines.append(
            f"# cost model and simulation pick the same pair at {same} of {judged} sizes (+ = fastest simulated)"
        )
    return "\n".join(lines) + "\n"


def format_algorithm_comparison(
    rows: Sequence[AlgorithmComparison],
    *,
    name: str,
    collectives: Sequence[str],
    dtype: str,
    note: str = "",
    command: str = "compare",
) -> str:
    """``collsim compare``'s table when one backend is enabled: per size each variant's time (us, with NCCL's
    protocol) and busbw (GB/s), ``*`` on the backend's default and ``+`` on the fastest, then the fastest against
    the default.

    Parameters
    ----------
    rows : sequence of AlgorithmComparison
        One per (collective, size), all of one backend.
    name : str
        The scenario's name.
    collectives : sequence of str
        The scenario's collectives (with several, each row is labelled with its collective).
    dtype : str
        Element type.
    note : str
        One more header line (why only one backend, what the default means).
    command : str
        The command the header names (``explain`` prints this table where NCCL is off).
    """
    backend = rows[0].backend if rows else ""
    n = next(iter(rows[0].records.values())).nranks if rows and rows[0].records else 0
    many = len(collectives) > 1
    variants: list[str] = []
    for r in rows:
        variants += [v for v in r.records if v not in variants]

    def label(r: AlgorithmComparison) -> str:
        size = format_size(r.size_bytes)
        return f"{r.collective} {size}" if many else size

    def cell(r: AlgorithmComparison, v: str) -> str:
        rec = r.records.get(v)
        if rec is None:
            return "-"
        mark = ("*" if v == r.default else "") + ("+" if v == r.best else "")
        proto = f" {rec.protocol}" if rec.protocol not in ("", "-") else ""
        return f"{rec.time_us:.2f}{proto}{mark}"

    texts = [[cell(r, v) for v in variants] for r in rows]
    width = max([10, *(len(label(r)) for r in rows)])
    # a column is at least one space wider than its widest cell (six-digit times with Gloo's protocol are 19 wide)
    col = max([18, *(len(v) + 2 for v in variants), *(len(t) + 1 for row in texts for t in row)])
    lines = [
        f"# collsim {command}: {name} ({n} ranks, {', '.join(collectives)} {dtype}), {backend} algorithms against each "
        "other; time in us (busbw GB/s); * = the default, + = the fastest",
        *([f"# {note}"] if note else []),
        f"# {'size':>{width}} " + "".join(f"{v:>{col}}" for v in variants) + f" {'fastest vs default':>19}",
    ]
    for r, row in zip(rows, texts, strict=True):
        cells = [f"{t:>{col}}" for t in row]
        ratio = r.against_default(r.best)
        tail = "the default" if r.best == r.default else f"{r.best} {1 / ratio:.2f}x faster" if ratio > 0 else "-"
        lines.append(f"  {label(r):>{width}} " + "".join(cells) + f" {tail:>19}")
        bws = "".join(
            f"{(f'({r.records[v].busbw_gbps:.2f})' if v in r.records else ''):>{col}}" for v in variants
        )
        lines.append((f"  {'':>{width}} " + bws).rstrip())
    return "\n".join(lines) + "\n"
