"""One rank of a ``collsim bench`` sweep: torch.distributed setup, buffers, timed collectives, data check.

Run as ``python -m collsim.bench.worker CONFIG.json RESULT.json`` by :mod:`collsim.bench.launch` (one process per
rank, rank taken from ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` like torchrun sets them), or called in-process by
:func:`run_rank` under torchrun. Rank 0 returns (or writes) a :class:`collsim.bench.report.SweepOutput`.

Timing (``iteration``, the default): per size, ``warmup`` untimed collectives, then ``iters`` times: a barrier
(Gloo's barrier; for NCCL a one-element allreduce and a device synchronise), the host clock
(``time.perf_counter``), the collective, a device synchronise (CUDA tensors), the clock again. Every rank times
every iteration; the per-iteration times are reduced with MAX over ranks (the collective is over when the slowest
rank is done). ``block``: after a barrier, ``iters`` collectives back to back, one synchronise, the elapsed time
divided by ``iters``, averaged over ranks, as nccl-tests does by default.

Buffers are zero-filled so that repeated in-place reductions stay finite; the optional data check then runs each
collective once more on known values (rank r contributes ``r % 4 + 1``) and counts wrong elements.

torch is imported inside the functions: this module imports without it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

from collsim.bench.config import BenchConfig, BenchError, require_torch
from collsim.bench.metadata import host_facts, now_iso, relevant_env
from collsim.bench.report import RankInfo, SizeResult, SweepOutput

__all__ = ["ERROR_MARK", "PROGRESS_MARK", "Progress", "exit_rank", "rank_env", "run_rank", "serve_rank"]

#: Prefix of the one-line error a worker process prints on stderr before exiting with status 1.
ERROR_MARK = "collsim-bench-error: "
#: Prefix of the progress lines rank 0 prints on stdout when launched by collsim (JSON after it).
PROGRESS_MARK = "collsim-bench-progress: "

#: Called on rank 0 after each size: (index, number of sizes, result).
Progress = Callable[[int, int, SizeResult], None]


def rank_env(environ: dict[str, str] | None = None) -> tuple[int, int, int] | None:
    """``(rank, world_size, local_rank)`` from torchrun's variables, or None when they are not all set.

    Examples
    --------
    >>> rank_env({"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}), rank_env({"RANK": "0"})
    ((1, 4, 1), None)
    """
    env = os.environ if environ is None else environ
    try:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"])
    except (KeyError, ValueError):
        return None


def _torch_dtype(torch: Any, name: str) -> Any:
    return getattr(torch, name)


def _fill_value(rank: int) -> int:
    return rank % 4 + 1


class _Collective:
    """Buffers and the call of one collective at one size."""

    def __init__(self, torch: Any, dist: Any, cfg: BenchConfig, count: int, nranks: int, rank: int,
                 device: Any) -> None:
        self.torch, self.dist, self.cfg = torch, dist, cfg
        self.count, self.n, self.rank = count, nranks, rank
        dtype = _torch_dtype(torch, cfg.dtype)
        coll = cfg.collective
        big = count * nranks  # elements of the gathered/scattered buffer
        if coll in ("allreduce", "broadcast", "reduce"):
            self.inp = torch.zeros(count, dtype=dtype, device=device)
            self.out = self.inp
        elif coll == "allgather":
            self.inp = torch.zeros(count, dtype=dtype, device=device)
            self.out = torch.zeros(big, dtype=dtype, device=device)
        elif coll == "reduce_scatter":
            self.inp = torch.zeros(big, dtype=dtype, device=device)
            self.out = torch.zeros(count, dtype=dtype, device=device)
        else:  # alltoall
            self.inp = torch.zeros(big, dtype=dtype, device=device)
            self.out = torch.zeros(big, dtype=dtype, device=device)
        # torch 2.13 renamed the *_into_tensor / *_tensor calls; older versions only have the old names.
        self._allgather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def __call__(self) -> None:
        dist, coll = self.dist, self.cfg.collective
        if coll == "allreduce":
            dist.all_reduce(self.inp)
        elif coll == "allgather":
            self._allgather(self.out, self.inp)
        elif coll == "reduce_scatter":
            self._reduce_scatter(self.out, self.inp)
        elif coll == "broadcast":
            dist.broadcast(self.inp, src=self.cfg.root)
        elif coll == "reduce":
            dist.reduce(self.inp, dst=self.cfg.root)
        else:
            dist.all_to_all_single(self.out, self.inp)

    def check(self) -> int:
        """Run once on known values; return this rank's number of wrong elements."""
        torch, coll, n = self.torch, self.cfg.collective, self.n
        self.inp.fill_(_fill_value(self.rank))
        self()
        values = [float(_fill_value(r)) for r in range(n)]
        if coll in ("allreduce", "reduce_scatter") or (coll == "reduce" and self.rank == self.cfg.root):
            expected = torch.full_like(self.out, sum(values))
        elif coll == "reduce":
            return 0  # non-root buffers are unspecified after a reduce
        elif coll == "broadcast":
            expected = torch.full_like(self.out, values[self.cfg.root])
        else:  # allgather, alltoall: block j comes from rank j
            expected = torch.tensor(values, dtype=self.out.dtype, device=self.out.device).repeat_interleave(self.count)
        got = self.out.double()
        want = expected.double()
        bad = (got - want).abs() > 1e-2 * want.abs()  # bfloat16 keeps 8 significant bits: 0.4% rounding
        self.inp.zero_()
        if self.out is not self.inp:
            self.out.zero_()
        return int(bad.sum().item())


def _versions(torch: Any, dist: Any, cfg: BenchConfig) -> dict[str, Any]:
    sw: dict[str, Any] = {"torch_version": str(torch.__version__)}
    if cfg.device == "cuda":
        sw["cuda_version"] = torch.version.cuda
    if cfg.backend == "nccl" or cfg.device == "cuda":
        try:
            v = torch.cuda.nccl.version()
            sw["nccl_version"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        except Exception:  # no NCCL in this build
            sw["nccl_version"] = None
    if cfg.backend == "gloo":
        sw["gloo"] = f"bundled with torch {torch.__version__}"  # Gloo has no version of its own
    sw["env"] = relevant_env()
    return sw


def _pin(cores: int, local_rank: int) -> None:
    """Pin this process, and the threads it starts afterwards (Gloo's, torch's), to the ``local_rank``-th block of
    ``cores`` CPUs among those it may use (Linux ``sched_setaffinity``, as ``taskset`` does)."""
    if not hasattr(os, "sched_setaffinity"):
        raise BenchError("--cores-per-rank: this platform cannot pin processes (no os.sched_setaffinity)")
    allowed = sorted(os.sched_getaffinity(0))
    block = allowed[local_rank * cores : (local_rank + 1) * cores]
    if len(block) < cores:
        raise BenchError(f"--cores-per-rank {cores}: local rank {local_rank} needs CPUs {local_rank * cores}-"
                         f"{(local_rank + 1) * cores - 1} of the {len(allowed)} this process may use")
    os.sched_setaffinity(0, block)


def run_rank(cfg: BenchConfig, *, progress: Progress | None = None, launcher: str = "torchrun") -> SweepOutput | None:
    """Run the sweep as this process's rank; return the result on rank 0, None on the others.

    The rank comes from ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and the rendezvous from ``MASTER_ADDR`` and
    ``MASTER_PORT`` (``env://``), as torchrun sets them.

    Raises
    ------
    BenchError
        torch missing, no CUDA for ``device: cuda``, a backend this torch lacks, or rank variables unset.
    """
    torch = require_torch()
    import torch.distributed as dist

    ids = rank_env()
    if ids is None:
        raise BenchError("RANK, WORLD_SIZE and LOCAL_RANK must be set (torchrun sets them)")
    rank, world, local_rank = ids
    if cfg.cores_per_rank is not None:
        _pin(cfg.cores_per_rank, local_rank)
    if not dist.is_available():
        raise BenchError(f"this torch ({torch.__version__}) was built without torch.distributed")
    if cfg.backend == "nccl" and not dist.is_nccl_available():
        raise BenchError(f"--backend nccl: this torch ({torch.__version__}) has no NCCL; use --backend gloo")
    if cfg.backend == "gloo" and not dist.is_gloo_available():
        raise BenchError(f"--backend gloo: this torch ({torch.__version__}) has no Gloo")
    gpu_name = None
    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise BenchError(f"--device cuda: no CUDA device (torch {torch.__version__}, "
                             f"torch.cuda.is_available() is False); use --device cpu")
        index = cfg.device_index if cfg.device_index is not None else local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
        gpu_name = torch.cuda.get_device_name(index)
        dev_text = f"cuda:{index} {gpu_name}"
    else:
        device = torch.device("cpu")
        dev_text = "cpu"
    started = now_iso()
    kwargs: dict[str, Any] = {"timeout": timedelta(seconds=cfg.timeout_s)}
    if cfg.backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(cfg.backend, init_method="env://", rank=rank, world_size=world, **kwargs)
    try:
        infos: list[Any] = [None] * world
        dist.all_gather_object(infos, (socket.gethostname(), os.getpid(), dev_text, local_rank))
        results = _sweep(torch, dist, cfg, rank, world, device, progress if rank == 0 else None)
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    ranks = [RankInfo(rank=r, hostname=h, pid=p, device=d, local_rank=lr) for r, (h, p, d, lr) in enumerate(infos)]
    hosts = sorted({i.hostname for i in ranks})
    facts = host_facts()
    hardware: dict[str, Any] = {
        "cpu": facts["cpu"],
        "cpu_count": facts["cpu_count"],
        "memory_gib": facts["memory_gib"],
        "gpu": gpu_name,
        "nodes": len(hosts),
        "hostnames": hosts,
        "ranks_per_node": world // len(hosts) if world % len(hosts) == 0 else None,
        "os": facts["os"],
    }
    if hasattr(os, "sched_getaffinity"):  # taskset around the launcher, or --cores-per-rank, show here
        hardware["rank0_cpus_allowed"] = sorted(os.sched_getaffinity(0))
    if cfg.device == "cuda":
        hardware["gpus_per_node"] = len({i.device for i in ranks if i.hostname == facts["hostname"]})
    if cfg.backend == "gloo" and len(hosts) == 1:
        hardware["interconnect"] = "TCP over loopback (one host; Gloo has no shared-memory transport)"
    software = _versions(torch, dist, cfg)
    software["python"] = facts["python"]
    return SweepOutput(config=cfg, nranks=world, results=results, ranks=ranks, hardware=hardware,
                       software=software, launcher=launcher, started=started, finished=now_iso())


def _sweep(torch: Any, dist: Any, cfg: BenchConfig, rank: int, world: int, device: Any,
           progress: Progress | None) -> list[SizeResult]:
    cuda = cfg.device == "cuda"
    flag = torch.zeros(1, device=device)
    gather_dev = device if cfg.backend == "nccl" else torch.device("cpu")  # where the timing tensors are reduced

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def barrier() -> None:
        if cfg.backend == "nccl":
            dist.all_reduce(flag)
            sync()
        else:
            dist.barrier()

    sizes = cfg.effective_sizes(world)
    out: list[SizeResult] = []
    for i, size in enumerate(sizes):
        count = cfg.elements(size, world)
        op = _Collective(torch, dist, cfg, count, world, rank, device)
        for _ in range(cfg.warmup):
            op()
        sync()
        if cfg.timing == "block":
            barrier()
            t0 = time.perf_counter()
            for _ in range(cfg.iters):
                op()
            sync()
            per = (time.perf_counter() - t0) / cfg.iters
            t = torch.tensor([per], dtype=torch.float64, device=gather_dev)
            dist.all_reduce(t)  # sum over ranks, divided below: nccl-tests' default average
            times = [float(t.item()) / world]
        else:
            local: list[float] = []
            for _ in range(cfg.iters):
                barrier()
                t0 = time.perf_counter()
                op()
                sync()
                local.append(time.perf_counter() - t0)
            t = torch.tensor(local, dtype=torch.float64, device=gather_dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times = [float(x) for x in t.tolist()]
        wrong = None
        if cfg.check:
            w = torch.tensor([op.check()], dtype=torch.int64, device=gather_dev)
            dist.all_reduce(w)
            wrong = int(w.item())
        del op
        res = SizeResult(size_bytes=size, count=count, times_s=times, wrong=wrong)
        out.append(res)
        if progress is not None:
            progress(i, len(sizes), res)
    return out


def serve_rank(result_path: str, produce: Callable[[], Any]) -> int:
    """One launched rank's main: ``produce()`` the result (an object with ``to_dict()``, or None on ranks other than
    0), write it to ``result_path`` whole (beside, then renamed), and return the exit status: 0, 130 on Ctrl-C, 1 on
    an error, whose one line (marked :data:`ERROR_MARK`) the launcher quotes; the traceback stays in this rank's
    log."""
    try:
        out = produce()
        if out is not None:
            tmp = Path(result_path + ".tmp")
            tmp.write_text(json.dumps(out.to_dict()))
            tmp.replace(result_path)
        return 0
    except KeyboardInterrupt:
        print(ERROR_MARK + "interrupted", file=sys.stderr, flush=True)
        return 130
    except BaseException as exc:  # one line for the launcher; the traceback stays in this rank's log
        traceback.print_exc()
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"{ERROR_MARK}{type(exc).__name__}: {message[:500]}", file=sys.stderr, flush=True)
        return 1


def exit_rank(status: int) -> NoReturn:
    """End a launched rank with ``status`` once its result is written: flush stdout and stderr, then leave without
    the interpreter's teardown, where torch's C++ objects (Gloo's threads, DDP's reducers) are destroyed in an
    order that can abort the process ("terminate called without an active exception", status -6, seen once in a
    full test run after the rank had finished its work)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _main(argv: list[str]) -> int:
    """``python -m collsim.bench.worker CONFIG.json RESULT.json``: one rank launched by collsim."""
    cfg_path, result_path = argv

    def produce() -> Any:
        cfg = BenchConfig.from_dict(json.loads(Path(cfg_path).read_text()))

        def report(i: int, total: int, res: SizeResult) -> None:
            event = {"i": i, "total": total, "size_bytes": res.size_bytes, "median_us": res.median_us,
                     "wrong": res.wrong}
            print(PROGRESS_MARK + json.dumps(event), flush=True)

        return run_rank(cfg, progress=report, launcher="collsim")

    return serve_rank(result_path, produce)


if __name__ == "__main__":  # pragma: no cover - run in the worker processes
    exit_rank(_main(sys.argv[1:]))
