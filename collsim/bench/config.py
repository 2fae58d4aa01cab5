"""What one ``collsim bench`` sweep runs: the collective, backend, device, dtype, sizes and iteration counts.

This module needs no torch: it validates a configuration and turns it into JSON for the worker processes.

Examples
--------
>>> cfg = BenchConfig(sizes=(1024, 4096), nprocs=2)
>>> cfg.collective, cfg.backend, cfg.device, cfg.warmup, cfg.iters
('allreduce', 'gloo', 'cpu', 5, 20)
>>> BenchConfig.from_dict(cfg.to_dict()) == cfg
True
>>> cfg.effective_sizes()   # allreduce: any multiple of the element size
[1024, 4096]
>>> BenchConfig(collective="allgather", sizes=(1000, 1024), nprocs=3).effective_sizes()  # count * nranks * 4 B
[996, 1020]
"""

from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field
from typing import Any

from collsim.results import nccl_tests_bytes
from collsim.units import DTYPE_SIZES
from collsim.vocab import BACKENDS, PER_RANK_COUNT_COLLECTIVES, TENSOR_DEVICES, canonical_collective
from collsim.vocab import COLLECTIVES as SIMULATED_COLLECTIVES

__all__ = [
    "COLLECTIVES",
    "DTYPES",
    "INSTALL_HINT",
    "TIMINGS",
    "BenchConfig",
    "BenchError",
    "TorchMissingError",
    "require_torch",
]

#: Collectives ``collsim bench`` can run with torch.distributed: every simulated one but ``sendrecv`` (nccl-tests'
#: names for the rest are not wired). Backends and tensor devices are :data:`collsim.vocab.BACKENDS` and
#: :data:`collsim.vocab.TENSOR_DEVICES`.
COLLECTIVES: tuple[str, ...] = tuple(c for c in SIMULATED_COLLECTIVES if c != "sendrecv")
#: Element types torch.distributed reduces on both backends (collsim's names, see collsim.units.DTYPE_SIZES).
DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int32", "int64")
#: ``iteration``: barrier, then time each iteration on every rank, max over ranks, median over iterations.
#: ``block``: nccl-tests' way: barrier, time ``iters`` back-to-back collectives, mean per iteration, averaged over
#: ranks (nccl-tests' default ``-a 1``).
TIMINGS: tuple[str, ...] = ("iteration", "block")

#: What the command says when torch is missing.
INSTALL_HINT = "collsim bench needs PyTorch; install it with: pip install 'collsim[bench]'"


class BenchError(ValueError):
    """A benchmark that cannot run or failed; the message names the option or the rank and says what to do."""


class TorchMissingError(BenchError):
    """torch is not installed (the ``bench`` extra)."""


def require_torch() -> Any:
    """Import and return ``torch``, or raise :class:`TorchMissingError` with the install command.

    Raises
    ------
    TorchMissingError
        When ``import torch`` fails; the message is :data:`INSTALL_HINT`.
    """
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise TorchMissingError(INSTALL_HINT) from None


@dataclass(frozen=True)
class BenchConfig:
    """One sweep of one collective.

    Attributes
    ----------
    collective : str
        One of :data:`COLLECTIVES` (aliases such as ``all_reduce`` accepted, stored canonical).
    backend : str
        ``"nccl"`` or ``"gloo"``.
    device : str
        ``"cuda"`` or ``"cpu"`` tensors; NCCL needs ``cuda``.
    dtype : str
        One of :data:`DTYPES`.
    sizes : tuple of int
        Requested sizes in bytes, nccl-tests' ``size`` (the larger buffer: the whole gathered buffer for allgather,
        reduce_scatter and alltoall). Rounded down to whole elements per rank, see :meth:`effective_sizes`.
    warmup : int
        Untimed iterations per size (nccl-tests ``-w``).
    iters : int
        Timed iterations per size (nccl-tests ``-n``).
    timing : str
        One of :data:`TIMINGS`.
    check : bool
        After timing each size, run the collective once on known values and count wrong elements.
    nprocs : int
        Ranks to launch locally (ignored under torchrun, which sets WORLD_SIZE).
    device_index : int or None
        Put every rank on this CUDA device (ranks sharing one GPU); None: local rank modulo the device count.
    root : int
        Root rank of broadcast and reduce.
    timeout_s : float
        torch.distributed timeout for setup and each collective, seconds.
    cores_per_rank : int or None
        Pin each local rank's process to its own ``cores_per_rank`` CPUs (local rank r: the r-th block of that many
        of the CPUs the launcher may use, ``os.sched_setaffinity``), as ``taskset`` would; None: not pinned.
    """

    collective: str = "allreduce"
    backend: str = "gloo"
    device: str = "cpu"
    dtype: str = "float32"
    sizes: tuple[int, ...] = field(default=(1024,))
    warmup: int = 5
    iters: int = 20
    timing: str = "iteration"
    check: bool = True
    nprocs: int = 2
    device_index: int | None = None
    root: int = 0
    timeout_s: float = 300.0
    cores_per_rank: int | None = None

    def __post_init__(self) -> None:
        try:
            coll = canonical_collective(self.collective)
        except ValueError:  # the choices bench has, not every collective a measurement may name
            raise BenchError(f"--collective: unknown collective {self.collective!r}; expected one of: "
                             f"{', '.join(COLLECTIVES)}") from None
        if coll not in COLLECTIVES:
            raise BenchError(f"--collective: {coll!r} is not wired to torch.distributed; expected one of: "
                             f"{', '.join(COLLECTIVES)}")
        object.__setattr__(self, "collective", coll)
        if self.backend not in BACKENDS:
            raise BenchError(f"--backend: expected one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.device not in TENSOR_DEVICES:
            raise BenchError(f"--device: expected one of {', '.join(TENSOR_DEVICES)}, got {self.device!r}")
        if self.backend == "nccl" and self.device != "cuda":
            raise BenchError("--backend nccl needs --device cuda (NCCL moves GPU memory only); use gloo for cpu")
        if self.dtype not in DTYPES:
            raise BenchError(f"--dtype: expected one of {', '.join(DTYPES)}, got {self.dtype!r}")
        sizes = tuple(int(s) for s in self.sizes)
        if not sizes:
            raise BenchError("--sizes: no sizes to measure")
        if any(s <= 0 for s in sizes):
            raise BenchError(f"--sizes: sizes must be positive numbers of bytes, got {min(sizes)}")
        object.__setattr__(self, "sizes", sizes)
        for name, low in (("warmup", 0), ("iters", 1), ("nprocs", 1), ("root", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                flag = {"warmup": "-w/--warmup", "iters": "-n/--iters"}.get(name, f"--{name}")
                raise BenchError(f"{flag}: expected an integer >= {low}, got {value!r}")
        if self.timing not in TIMINGS:
            raise BenchError(f"--timing: expected one of {', '.join(TIMINGS)}, got {self.timing!r}")
        if self.device_index is not None and (self.device_index < 0 or self.device != "cuda"):
            raise BenchError("device_index: expected a CUDA device number >= 0 with device cuda")
        if not self.timeout_s > 0:
            raise BenchError(f"--timeout: expected a positive number of seconds, got {self.timeout_s!r}")
        k = self.cores_per_rank
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise BenchError(f"--cores-per-rank: expected an integer >= 1, got {k!r}")

    @property
    def typesize(self) -> int:
        """Bytes per element."""
        return DTYPE_SIZES[self.dtype]

    def elements(self, size_bytes: int, nranks: int) -> int:
        """Elements per rank buffer: nccl-tests' ``count`` (per rank for allgather, reduce_scatter, alltoall; with
        NCCL a multiple of 16 bytes, as nccl-tests from v2.13.12 rounds it and as collsim simulates NCCL:
        :func:`collsim.results.nccl_tests_bytes`; with Gloo whole elements, as collsim simulates Gloo)."""
        if self.collective in PER_RANK_COUNT_COLLECTIVES:
            if self.backend == "nccl":
                return nccl_tests_bytes(size_bytes, self.dtype, self.collective, nranks) // self.typesize // nranks
            return size_bytes // self.typesize // nranks
        return size_bytes // self.typesize

    def effective_sizes(self, nranks: int | None = None) -> list[int]:
        """The sizes measured, bytes: requested sizes rounded down to whole elements (per rank where the count is
        per rank; :meth:`elements`), without duplicates, in increasing order.

        Raises
        ------
        BenchError
            If every size is below one element per rank.
        """
        n = self.nprocs if nranks is None else nranks
        out: set[int] = set()
        for s in self.sizes:
            count = self.elements(s, n)
            if count == 0:
                continue
            per_rank = self.collective in PER_RANK_COUNT_COLLECTIVES
            out.add(count * self.typesize * (n if per_rank else 1))
        if not out:
            need = self.typesize * (n if self.collective in PER_RANK_COUNT_COLLECTIVES else 1)
            raise BenchError(f"--sizes: every size is below one {self.dtype} element per rank ({need} B for "
                             f"{self.collective} over {n} ranks)")
        return sorted(out)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        d = asdict(self)
        d["sizes"] = list(self.sizes)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchConfig:
        """Inverse of :meth:`to_dict`."""
        d = dict(data)
        d["sizes"] = tuple(d.get("sizes", ()))
        return cls(**d)
