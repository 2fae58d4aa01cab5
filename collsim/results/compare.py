"""Result records of ``compare`` and ``explain``: NCCL against Gloo at one size, and NCCL's choice at one size.

Like :class:`~collsim.results.Record`, they hold what a simulation produced and know nothing of how.

Examples
--------
>>> from collsim.results import make_record
>>> kw = dict(collective="allreduce", protocol="-", nranks=2, dtype="float32", size_bytes=1024)
>>> row = Comparison(1024, make_record(backend="nccl", algorithm="Ring", time_s=1e-5, **kw),
...                  make_record(backend="gloo", algorithm="ring", time_s=4e-5, breakdown={"tcp": 3e-5, "wait": 1e-5},
...                              **kw))
>>> round(row.speedup, 6), Comparison.shares(row.gloo)
(4.0, [('tcp', 0.75), ('wait', 0.25)])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from collsim.results.records import Record

__all__ = ["AlgorithmComparison", "Comparison", "Explanation"]


@dataclass(frozen=True)
class Comparison:
    """NCCL against Gloo at one size: both records, the speedup, and where each spends its time.

    Attributes
    ----------
    size_bytes : int
        Message size, bytes.
    nccl, gloo : Record
        The two backends' records at that size (times in us, bandwidths in GB/s, breakdowns in seconds).
    nccl_bottleneck, gloo_bottleneck : tuple of (str, str, float), optional
        Each one's most loaded link: (name, kind, load share of the time), where a faster part would help first.
    """

    size_bytes: int
    nccl: Record
    gloo: Record
    nccl_bottleneck: tuple[str, str, float] | None = None
    gloo_bottleneck: tuple[str, str, float] | None = None

    @property
    def speedup(self) -> float:
        """Gloo time / NCCL time (dimensionless); infinite when NCCL's time is 0."""
        return self.gloo.time_us / self.nccl.time_us if self.nccl.time_us > 0 else math.inf

    @staticmethod
    def shares(rec: Record) -> list[tuple[str, float]]:
        """Breakdown as (category, fraction of the time), largest first; the fractions add up to 1.

        Parameters
        ----------
        rec : Record
            A record with a ``breakdown`` (seconds per category); none gives an empty list.
        """
        total = sum(rec.breakdown.values())
        if total <= 0:
            return []
        return sorted(((k, v / total) for k, v in rec.breakdown.items()), key=lambda kv: -kv[1])

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form: ``size_bytes``, ``speedup`` (None where NCCL's time is 0) and both records
        (:meth:`Record.to_dict`)."""
        out: dict[str, Any] = {"size_bytes": self.size_bytes,
                               "speedup": self.speedup if math.isfinite(self.speedup) else None,
                               "nccl": self.nccl.to_dict(), "gloo": self.gloo.to_dict()}  # fmt: skip
        for name, b in (("nccl_bottleneck", self.nccl_bottleneck), ("gloo_bottleneck", self.gloo_bottleneck)):
            if b is not None:
                out[name] = {"link": b[0], "kind": b[1], "load_share": b[2]}
        return out


@dataclass(frozen=True)
class Explanation:
    """NCCL's choice at one size: the cost model's time for every enabled (algorithm, protocol) pair, the pair it
    picks, and simulated times (of the choice, or of every pair).

    Attributes
    ----------
    collective : str
        Canonical collective name.
    size_bytes : int
        Message size, bytes.
    model_s : dict of (str, str) to float
        NCCL's cost model per enabled (algorithm, protocol), seconds, in the cost model's order.
    choice : tuple of str
        The (algorithm, protocol) NCCL picks.
    simulated_s : dict of (str, str) to float
        Simulated seconds per pair: the choice's, or every pair's.
    """

    collective: str
    size_bytes: int
    model_s: dict[tuple[str, str], float]
    choice: tuple[str, str]
    simulated_s: dict[tuple[str, str], float]

    @property
    def simulated_best(self) -> tuple[str, str] | None:
        """The pair the simulation finds fastest (when every pair was simulated), else None."""
        if len(self.simulated_s) < 2:
            return None
        return min(self.simulated_s, key=lambda k: self.simulated_s[k])

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form; times in microseconds (``simulated_us`` null for a pair not simulated)."""
        return {
            "collective": self.collective,
            "size_bytes": self.size_bytes,
            "choice": {"algorithm": self.choice[0], "protocol": self.choice[1]},
            "pairs": [
                {
                    "algorithm": a,
                    "protocol": p,
                    "model_us": t * 1e6,
                    "simulated_us": (self.simulated_s[(a, p)] * 1e6 if (a, p) in self.simulated_s else None),
                }
                for (a, p), t in self.model_s.items()
            ],
        }


@dataclass(frozen=True)
class AlgorithmComparison:
    """One backend's algorithms against each other at one size: what ``collsim compare`` shows when only one
    backend is enabled.

    Attributes
    ----------
    collective : str
        Canonical collective name.
    size_bytes : int
        Message size, bytes.
    backend : str
        ``"nccl"`` or ``"gloo"``.
    records : dict of str to Record
        Per variant (NCCL: the algorithm, ``"Ring"``, run with the protocol NCCL's cost model prices fastest for it,
        which its record names; Gloo: the allreduce algorithm, ``"ring"``, ``"bcube"`` ...), its record, in the
        backend's order.
    default : str
        The variant the backend runs when nothing is forced (NCCL: its cost model's pick; Gloo: the scenario's
        ``backends.gloo.algorithm``, ``ring`` as PyTorch runs it).

    Examples
    --------
    >>> from collsim.results import make_record
    >>> kw = dict(backend="gloo", collective="allreduce", protocol="-", nranks=4, dtype="float32", size_bytes=4096)
    >>> row = AlgorithmComparison("allreduce", 4096, "gloo", {"ring": make_record(algorithm="ring", time_s=4e-5,
    ...     **kw), "bcube": make_record(algorithm="bcube", time_s=2e-5, **kw)}, "ring")
    >>> row.best, round(row.against_default("bcube"), 6)
    ('bcube', 0.5)
    """

    collective: str
    size_bytes: int
    backend: str
    records: dict[str, Record]
    default: str

    @property
    def best(self) -> str:
        """The fastest variant (the first in order on a tie)."""
        return min(self.records, key=lambda k: self.records[k].time_us)

    def against_default(self, variant: str) -> float:
        """A variant's time over the default's (dimensionless; below 1 = faster than the default)."""
        base = self.records[self.default].time_us
        return self.records[variant].time_us / base if base > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form: collective, size, backend, default, best and each variant's record."""
        return {
            "collective": self.collective,
            "size_bytes": self.size_bytes,
            "backend": self.backend,
            "default": self.default,
            "best": self.best,
            "variants": {k: r.to_dict() for k, r in self.records.items()},
        }
