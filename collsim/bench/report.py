"""What a sweep measured, and how it is written: collsim measurement JSON/CSV and nccl-tests text (no torch needed).

A sweep's rank 0 returns a :class:`SweepOutput`: per size, the time of every timed iteration (seconds, the slowest
rank's time in ``iteration`` timing), plus the ranks, hardware and software it ran on. :func:`to_measurement` and
:func:`format_text` turn it into the files ``collsim bench`` writes.

Examples
--------
>>> cfg = BenchConfig(sizes=(1024,), iters=4, nprocs=2)
>>> out = SweepOutput(config=cfg, nranks=2, results=[SizeResult(1024, 256, [10e-6, 11e-6, 12e-6, 30e-6])])
>>> r = out.results[0]
>>> r.median_us, r.spread_us, r.min_us, r.max_us
(11.5, 5.75, 10.0, 30.0)
>>> m = to_measurement(out, command="collsim bench --sizes 1KiB")
>>> m.rows[0].time_us, m.rows[0].statistic, m.rows[0].iterations, m.backend, m.source["command"]
(11.5, 'median', 4, 'gloo', 'collsim bench --sizes 1KiB')
>>> print(format_text(out).splitlines()[-4])
        1024           256     float     sum      -1    11.50    0.09    0.09    N/A
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from collsim.bench.config import BenchConfig
from collsim.calibration.measurement import Measurement, MeasurementRow, summarise_times
from collsim.results import Record, format_nccl_tests, make_record
from collsim.vocab import ROOTED_COLLECTIVES

__all__ = ["RankInfo", "SizeResult", "SweepOutput", "format_text", "nccl_tests_binary", "to_measurement", "to_records"]

#: nccl-tests' binary for each collective (the text names it so that parsers find the collective).
_BINARIES = {
    "allreduce": "all_reduce_perf",
    "allgather": "all_gather_perf",
    "reduce_scatter": "reduce_scatter_perf",
    "broadcast": "broadcast_perf",
    "reduce": "reduce_perf",
    "alltoall": "alltoall_perf",
}


def nccl_tests_binary(collective: str) -> str:
    """nccl-tests' ``*_perf`` binary measuring ``collective`` (e.g. ``all_reduce_perf``)."""
    return _BINARIES[collective]


@dataclass
class SizeResult:
    """One measured size.

    Attributes
    ----------
    size_bytes : int
        nccl-tests' size, bytes (the larger buffer).
    count : int
        nccl-tests' count, elements (per rank for allgather, reduce_scatter, alltoall).
    times_s : list of float
        Per timed iteration, seconds: the slowest rank's time (``iteration`` timing), or one value, the mean per
        iteration averaged over ranks (``block`` timing).
    wrong : int or None
        Wrong elements in the data check, summed over ranks; None when not checked.
    """

    size_bytes: int
    count: int
    times_s: list[float]
    wrong: int | None = None

    @property
    def median_us(self) -> float:
        """Median over iterations, microseconds."""
        return summarise_times(self.times_s)[0]

    @property
    def spread_us(self) -> float:
        """Interquartile range over iterations, microseconds (0 for one value)."""
        return summarise_times(self.times_s)[1]

    @property
    def mean_us(self) -> float:
        """Mean over iterations, microseconds."""
        return statistics.fmean(self.times_s) * 1e6  # seconds to microseconds

    @property
    def min_us(self) -> float:
        """Fastest iteration, microseconds."""
        return min(self.times_s) * 1e6  # seconds to microseconds

    @property
    def max_us(self) -> float:
        """Slowest iteration, microseconds."""
        return max(self.times_s) * 1e6  # seconds to microseconds


@dataclass
class RankInfo:
    """Where one rank ran: its host, process id and device (``cpu`` or ``cuda:N <GPU name>``)."""

    rank: int
    hostname: str
    pid: int
    device: str
    local_rank: int = 0


@dataclass
class SweepOutput:
    """Everything rank 0 knows after a sweep.

    Attributes
    ----------
    config : BenchConfig
        What was run.
    nranks : int
        World size.
    results : list of SizeResult
        One per size, increasing.
    ranks : list of RankInfo
        One per rank.
    hardware, software : dict
        Host and GPU facts; torch/NCCL versions and relevant environment variables.
    launcher : str
        ``"collsim"`` (processes started by ``collsim bench --nprocs``) or ``"torchrun"``.
    started, finished : str
        ISO 8601 UTC times.
    """

    config: BenchConfig
    nranks: int
    results: list[SizeResult] = field(default_factory=list)
    ranks: list[RankInfo] = field(default_factory=list)
    hardware: dict[str, Any] = field(default_factory=dict)
    software: dict[str, Any] = field(default_factory=dict)
    launcher: str = "collsim"
    started: str = ""
    finished: str = ""

    @property
    def statistic(self) -> str:
        """``median`` (iteration timing) or ``mean`` (block timing), as in the measurement format."""
        return "mean" if self.config.timing == "block" else "median"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for the worker processes to hand their result over)."""
        d = asdict(self)
        d["config"] = self.config.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SweepOutput:
        """Inverse of :meth:`to_dict`."""
        return cls(
            config=BenchConfig.from_dict(d["config"]),
            nranks=int(d["nranks"]),
            results=[SizeResult(**r) for r in d.get("results", [])],
            ranks=[RankInfo(**r) for r in d.get("ranks", [])],
            hardware=dict(d.get("hardware", {})),
            software=dict(d.get("software", {})),
            launcher=str(d.get("launcher", "collsim")),
            started=str(d.get("started", "")),
            finished=str(d.get("finished", "")),
        )


def _timing_note(out: SweepOutput) -> str:
    cfg = out.config
    data = "zero-filled buffers" + (", then one checked run on known values per size" if cfg.check else "")
    if cfg.cores_per_rank is not None:  # the pinning, as the text says it, since the machine's CPUs do not show it
        data += f"; each local rank pinned to its own {cfg.cores_per_rank} CPU(s) (--cores-per-rank)"
    if cfg.timing == "block":
        return (
            f"torch.distributed {cfg.backend}, {cfg.device} tensors, {out.nranks} ranks; per size {cfg.warmup} warm-up "
            f"iterations, then after a barrier {cfg.iters} collectives back to back timed as one block (host clock, "
            "device synchronised at the end); time_us = mean per collective, averaged over ranks (nccl-tests' "
            f"default); {data}."
        )
    return (
        f"torch.distributed {cfg.backend}, {cfg.device} tensors, {out.nranks} ranks; per size {cfg.warmup} warm-up "
        f"iterations, then {cfg.iters} timed iterations, each: barrier, host clock, collective, device synchronise; "
        "an iteration's time is the slowest rank's; time_us = median over iterations, spread_us = interquartile "
        f"range; {data}."
    )


def to_measurement(
    out: SweepOutput, *, command: str | None = None, source: dict[str, Any] | None = None
) -> Measurement:
    """The sweep as a collsim measurement (see :mod:`collsim.calibration.measurement`).

    Parameters
    ----------
    out : SweepOutput
        What rank 0 returned.
    command : str, optional
        The command line that produced it (stored as ``source.command``).
    source : dict, optional
        More ``source`` fields (``machine``, ``date``, ``argv`` ...).
    """
    stat = out.statistic
    rows = [
        MeasurementRow(
            size_bytes=r.size_bytes,
            time_us=round(r.median_us if stat == "median" else r.mean_us, 3),  # to the nanosecond
            statistic=stat,
            iterations=out.config.iters,
            spread_us=round(r.spread_us, 3) if stat == "median" else None,
        )
        for r in sorted(out.results, key=lambda r: r.size_bytes)
    ]
    src: dict[str, Any] = {}
    if command is not None:
        src["command"] = command
    src.update(source or {})
    src.setdefault("date", out.started)
    if out.finished:
        src.setdefault("finished", out.finished)
    src.setdefault("launcher", out.launcher)
    software = dict(out.software)
    software.setdefault("benchmark", "collsim bench")
    software["timing"] = out.config.timing
    software["warmup"] = out.config.warmup
    if out.config.collective in ("broadcast", "reduce"):
        software["root"] = out.config.root  # as nccl-tests' root column gives it (validate notes another)
    return Measurement(
        collective=out.config.collective,
        nranks=out.nranks,
        rows=rows,
        backend=out.config.backend,
        device=out.config.device,
        dtype=out.config.dtype,
        hardware=dict(out.hardware),
        software=software,
        source=src,
        notes=_timing_note(out),
    )


def to_records(out: SweepOutput) -> list[Record]:
    """One :class:`collsim.results.Record` per size (time = median, or mean in block timing)."""
    root = out.config.root if out.config.collective in ROOTED_COLLECTIVES else -1
    return [
        make_record(
            backend=out.config.backend,
            collective=out.config.collective,
            algorithm="measured",
            protocol="-",
            nranks=out.nranks,
            dtype=out.config.dtype,
            size_bytes=r.size_bytes,
            time_s=(r.median_us if out.statistic == "median" else r.mean_us) * 1e-6,  # us to seconds
            root=root,
        )
        for r in sorted(out.results, key=lambda r: r.size_bytes)
    ]


def format_text(out: SweepOutput) -> str:
    """nccl-tests style text: a header naming the ``*_perf`` binary it mimics, the ranks, then the table.

    The time column is the median over iterations (``iteration`` timing) or the mean (``block``). Comment lines
    after the table give, per size, the median, spread (interquartile range), min and max in microseconds and the
    data check (``block``: the mean and the check; one block has no iteration's own time).
    :func:`collsim.calibration.parse_nccl_tests` reads the text back (collective and rank count included).
    """
    cfg = out.config
    lines = [
        f"collsim bench, like nccl-tests' {nccl_tests_binary(cfg.collective)}: torch.distributed {cfg.backend}, "
        f"{cfg.device} tensors, {cfg.dtype}",
        f"nranks {out.nranks}  warmup iters: {cfg.warmup}  iters: {cfg.iters}  timing: {cfg.timing} "
        f"(time = {'median over iterations of the slowest rank' if out.statistic == 'median' else 'mean'})",
        "",
        "Using devices",
    ]
    for info in out.ranks:
        lines.append(f" Rank {info.rank:2d} Pid {info.pid:6d} on {info.hostname} device {info.device}")
    text = format_nccl_tests(to_records(out), header="\n".join(f"# {x}" if x else "#" for x in lines))
    if out.statistic == "mean":  # block timing: one time for the whole block, no iteration's own
        tail = [f"# {'size':>10s}  {'mean':>10s}  check   (us; one block of {cfg.iters} iterations: no spread)"]
        for r in sorted(out.results, key=lambda r: r.size_bytes):
            tail.append(f"# {r.size_bytes:10d}  {r.mean_us:10.2f}  {_check(r)}")
        return text + "\n".join(tail) + "\n"
    tail = [f"# {'size':>10s}  {'median':>10s}  {'spread':>10s}  {'min':>10s}  {'max':>10s}  check   (us)"]
    for r in sorted(out.results, key=lambda r: r.size_bytes):
        tail.append(
            f"# {r.size_bytes:10d}  {r.median_us:10.2f}  {r.spread_us:10.2f}  {r.min_us:10.2f}  {r.max_us:10.2f}  "
            f"{_check(r)}"
        )
    return text + "\n".join(tail) + "\n"


def _check(r: SizeResult) -> str:
    """The data check's column: ``-`` (not checked), ``ok`` or how many elements were wrong."""
    return "-" if r.wrong is None else ("ok" if r.wrong == 0 else f"{r.wrong} wrong")
