"""``collsim bench --ddp``: time real ``DistributedDataParallel`` iterations (Gloo over loopback; CPU tensors, or CUDA
tensors with ``--device cuda``).

What runs
---------
``nprocs`` local processes (or the ranks of a torchrun job), one intra-op thread each (``torch.set_num_threads``,
what torchrun's ``OMP_NUM_THREADS=1`` default gives), a Gloo process group over TCP loopback, and one model, an MLP
of ``nn.Linear`` layers with ReLU between them (:func:`build_mlp`), trained with plain SGD (no momentum, no weight
decay) on an MSE loss against a fixed random target: one fixed batch per rank, no data loading. Every rank builds
these models, all alive at once (identical initial weights, seed ``cfg.seed``):

* ``compute`` (and ``compute_kK`` with ``--no-sync K``): the plain model without DDP, ``K`` forward+backward
  micro-steps then ``optimizer.step()`` and ``optimizer.zero_grad()``: no communication at all, but both ranks
  compute at the same time, so they share the cores, caches and memory bandwidth as the DDP ranks do. This is the
  baseline the DDP iterations are compared with (the simulator's *compute*).
* ``layers``: the same plain model with timing hooks (below), one micro-step per iteration: per-layer forward and
  backward seconds for the model YAML, in the same concurrent setting.
* ``ddp_capC`` for each ``--bucket-cap-mb C``: ``DistributedDataParallel(model, bucket_cap_mb=C)``, defaults
  otherwise (``gradient_as_bucket_view=False``, ``find_unused_parameters=False``; the MLP has no buffers, so
  ``broadcast_buffers`` sends nothing); ``ddp_capC_kK``: ``--no-sync K`` at ``--no-sync-cap-mb C``: ``K - 1``
  micro-steps under ``ddp.no_sync()`` and one synchronised, then the optimizer.
* ``fsdp_S`` for each ``--fsdp S`` (``full_shard``, ``shard_grad_op``, ``no_shard``): ``FullyShardedDataParallel(model,
  auto_wrap_policy=ModuleWrapPolicy({nn.Linear}), sharding_strategy=S, device_id=<the rank's device>)``, FSDP1's
  defaults otherwise (``BACKWARD_PRE`` prefetch, ``limit_all_gathers=True``, no mixed precision): every ``fcN`` is a
  unit (collsim's ``training.fsdp.wrap: "fc*"``), the ReLUs and the loss are the root's. FSDP's collectives on the
  Gloo group are synchronous calls that return when the worker thread is done (``collsim.training.fsdp``).
* ``fsdp2_full_shard`` and ``fsdp2_shard_grad_op`` (``--fsdp fsdp2_full_shard``): FSDP2, ``fully_shard(linear,
  mesh=mesh, reshard_after_forward=True or False)`` on every ``nn.Linear``, then ``fully_shard(model, mesh=mesh)``
  on the MLP (the root, which ``fully_shard`` does not reshard after forward), ``mesh`` a 1-D DeviceMesh of every
  rank (``init_device_mesh``); defaults otherwise (implicit prefetching, no mixed precision: ``ReduceOp.AVG``, which
  ProcessGroupGloo accepts for its reduce-scatter in torch 2.13). collsim's ``training.fsdp.version: 2``.
* ``fsdp_S_kK`` and ``fsdp2_S_kK`` with ``--no-sync K``: each FSDP configuration again with ``K`` micro-steps per
  step, the first ``K - 1`` under FSDP1's ``no_sync()`` or after FSDP2's ``set_requires_gradient_sync(False)``
  (``True`` again for the last): collsim's ``training.accumulation`` with FSDP.
* ``compute_ac``, ``ddp_capC_ac``, ``fsdp_S_ac``, ``fsdp2_S_ac`` with ``--checkpoint``: the computation, each DDP cap
  and each FSDP configuration again (one micro-step) with activation checkpointing on every ``nn.Linear``
  (``apply_activation_checkpointing`` with the non-reentrant ``checkpoint_wrapper``, ``check_fn`` an
  ``isinstance(module, nn.Linear)``): on the MLP before DDP wraps it; with FSDP1 after the wrapping, so each
  checkpointed ``Linear`` sits inside its unit; with FSDP2 before ``fully_shard``, which then shards each
  ``CheckpointWrapper`` (torchtitan's order). collsim's ``training.activation_checkpointing: "fc*"``.
* ``compute_clip``, ``ddp_capC_clip``, ``fsdp_S_clip``, ``fsdp2_S_clip`` with ``--clip``: the same configurations
  with gradient-norm clipping before ``optimizer.step()``: FSDP1's ``model.clip_grad_norm_(1.0)``, else
  ``torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)`` (FSDP2's DTensor gradients included). collsim's
  ``training.gradient_clipping: true``.

DDP behaviours this relies on (torch 2.13 source):

* ``torch/nn/parallel/distributed.py``, ``_BucketCapacityConfig.create``: ``bucket_cap_mb`` is in MiB
  (``_MB_TO_BYTES = 1024 * 1024``); an explicit value caps every bucket, the first included (the 1 MiB
  ``dist._DEFAULT_FIRST_BUCKET_BYTES`` first bucket applies only when ``bucket_cap_mb`` is None).
* ``torch/csrc/distributed/c10d/reducer.cpp``, ``Reducer::rebuild_buckets`` (called from
  ``DistributedDataParallel._pre_forward`` through ``_rebuild_buckets``): the first iteration runs with the buckets
  built at construction, then they are rebuilt in the order the gradients became ready. The warm-up (at least one
  iteration, :class:`DdpBenchConfig` checks it) absorbs this; the buckets recorded are the rebuilt ones, read from
  ``DistributedDataParallel._get_ddp_logging_data()`` (``rebuilt_bucket_sizes``,
  ``rebuilt_per_bucket_param_indices``; a private, "prototype" interface: None when absent).
* ``reducer.cpp``, ``Reducer::autograd_hook`` / ``mark_variable_ready`` / ``finalize_backward``: the allreduces
  are launched from the autograd hooks during backward and ``finalize_backward`` (queued to run at the end of
  backward) waits for every bucket's work, so ``loss.backward()`` returns after the last allreduce has finished: the
  wall time of an iteration includes all communication. CPU tensors: nothing runs asynchronously after it.
* ``distributed.py``, ``DistributedDataParallel.no_sync``: sets ``require_backward_grad_sync = False``, so
  ``_pre_forward`` skips ``reducer.prepare_for_forward`` and ``_post_forward`` skips
  ``reducer.prepare_for_backward``; the Reducer's hooks then return at once (``expect_autograd_hooks_`` is false)
  and the gradients accumulate in ``param.grad`` without communication.
* ``torch/csrc/distributed/c10d/ProcessGroupGloo.hpp``, ``ProcessGroupGloo::Options::threads`` (default 2): the
  worker threads that run the allreduces; recorded per rank (``options._threads``).

CUDA tensors (``device="cuda"``, ``--device cuda``)
-------------------------------------------------
The same models on a GPU: rank r (of ``nprocs`` on the node) on GPU ``r // k`` with ``k = ceil(nprocs / GPUs)``
processes per GPU, in blocks as collsim's ``cluster.ranks_per_gpu`` numbers them; several processes may share one
GPU (Gloo allows it; NCCL does not). ``DistributedDataParallel(model, device_ids=[gpu])`` on the Gloo group: each
bucket's allreduce is ProcessGroupGloo's ``AsyncAllreduceCUDAWork`` (``torch/csrc/distributed/c10d/
ProcessGroupGloo.cpp``): a copy of the bucket into pinned host memory on a side stream, the CPU ring on a worker
thread after ``cudaStreamSynchronize``, the copy back. Every clock reading is preceded by
``torch.cuda.synchronize()`` (the iteration's start and end, and each per-layer hook), so what is timed has run on
the GPU; the per-layer hooks therefore serialise the ``layers`` configuration's kernels, as on CPU they are anyway.

Timing
------
Per iteration on every rank: a Gloo barrier, ``time.perf_counter()``, the iteration (``K`` micro-steps, the
optimizer step, ``zero_grad``), ``time.perf_counter()`` again. The iteration's time is the slowest rank's (maximum
over ranks, per iteration, as :mod:`collsim.bench.worker` does for collectives). Each model first runs ``warmup``
untimed iterations (the same barrier each time); then the ``iters`` timed iterations are spread over ``rounds``
rounds, each round running every model in turn, so that slow drifts of a shared machine fall on every
configuration alike instead of on the last ones.

Per-layer times (the ``layers`` model): forward hooks on the model's top-level children (``nn.Sequential``:
``fc1``, ``relu1``, ...) time each child's forward (pre-hook to hook). In the forward hook a tensor hook is put on
the child's output: it fires when the gradient of that output is ready, i.e. just before the child's backward nodes
run (``Tensor.register_hook`` on a non-leaf runs as a pre-hook of its ``grad_fn``), so a child's backward is the
time from its output's gradient to its input's gradient (the previous child's output), and for the first child up to
``loss.backward()``'s return. On CPU every operation is synchronous and the autograd engine runs the
``AccumulateGrad`` of a weight as soon as it is ready (priority by sequence number, ``torch/csrc/autograd/engine.cpp``
``CompareNodeTaskTime``), so the weight's gradient accumulation falls in its layer's backward. The loss is a layer of
its own (``loss``: its forward, and its backward from ``backward()``'s call to the last child's gradient). Hooks were
chosen over running each layer alone because they time the layers inside the real iteration (same caches, same
allocator state, the other rank computing at the same time); their cost is a few Python calls per layer, visible as
the difference between the ``layers`` and ``compute`` iteration times. Per layer, per iteration the ranks' times are
averaged; the model YAML has the median over iterations. The optimizer step plus ``zero_grad`` is timed the same way
(not a layer: it is in the measurement JSON, ``summary.optimizer_s``).

Examples
--------
>>> parse_widths("1024,2048x3,512")
(1024, 2048, 2048, 2048, 512)
>>> cfg = DdpBenchConfig(bucket_caps_mb=(1.0, 25.0), accumulation=4, widths=(8, 16, 8))
>>> [r.name for r in planned_runs(cfg)]
['compute', 'compute_k4', 'layers', 'ddp_cap1', 'ddp_cap25', 'ddp_cap25_k4']
>>> [r.name for r in planned_runs(DdpBenchConfig(bucket_caps_mb=(25.0,), fsdp=("full_shard",)))]
['compute', 'layers', 'ddp_cap25', 'fsdp_full_shard']
>>> cfg.n_params  # (8*16 + 16) + (16*8 + 8)
280
"""

from __future__ import annotations

import gc
import json
import math
import os
import shlex
import socket
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from collsim.bench.config import BenchError, require_torch
from collsim.bench.launch import launch_ranks
from collsim.bench.metadata import host_facts, now_iso, relevant_env
from collsim.bench.worker import PROGRESS_MARK, exit_rank, rank_env, serve_rank
from collsim.files import write_atomic

__all__ = [
    "DEFAULT_BUCKET_CAPS_MB",
    "DEFAULT_WIDTHS",
    "FORMAT",
    "FSDP_SHARDINGS",
    "DdpBenchConfig",
    "DdpBenchOutput",
    "DdpRun",
    "LayerTiming",
    "RunResult",
    "build_mlp",
    "format_summary",
    "model_yaml",
    "parse_caps",
    "parse_widths",
    "planned_runs",
    "run_ddp",
    "run_ddp_command",
    "run_ddp_rank",
    "to_json",
]

#: FSDP sharding strategies ``--fsdp`` runs: ``torch.distributed.fsdp.ShardingStrategy`` members, lower case, for
#: FSDP1; ``fsdp2_full_shard`` and ``fsdp2_shard_grad_op`` for FSDP2 (``fully_shard`` with ``reshard_after_forward``
#: True and False).
FSDP_SHARDINGS = ("full_shard", "shard_grad_op", "no_shard", "fsdp2_full_shard", "fsdp2_shard_grad_op")
#: ``format`` of the measurement JSON ``collsim bench --ddp -o`` writes.
FORMAT = "collsim-ddp-measurement/1"
#: ``--bucket-cap-mb`` without a value, MiB.
DEFAULT_BUCKET_CAPS_MB: tuple[float, ...] = (1.0, 25.0, 100.0)
#: ``--mlp`` without a value: 10 linears, 1024 -> 2048 (x 9 hidden) -> 1024, 37,768,192 float32 parameters
#: (151 MB): 16 MiB weights, so that caps of 1, 25 and 100 MiB give 10, 5 and 2 buckets.
DEFAULT_WIDTHS: tuple[int, ...] = (1024,) + (2048,) * 9 + (1024,)
#: ``--mlp`` as written in commands.
DEFAULT_WIDTHS_TEXT = "1024,2048x9,1024"
#: Bytes per float32 element (parameters, gradients, activations).
_F32 = 4
#: Bytes per MiB (DDP's ``bucket_cap_mb`` unit, ``_MB_TO_BYTES`` in ``torch/nn/parallel/distributed.py``).
_MIB = 1024 * 1024

#: Called with one line of progress text.
SayFn = Callable[[str], None]


# ----------------------------------------------------------------------------------------------------------------
# Configuration


def _fmt_num(x: float) -> str:
    """``25.0`` -> ``25``, ``0.5`` -> ``0.5`` (for names and commands)."""
    return f"{x:g}"


def parse_caps(text: str) -> tuple[float, ...]:
    """``--bucket-cap-mb``: comma-separated positive MiB values (``1,25,100``), duplicates removed, order kept.

    Raises
    ------
    BenchError
        Naming ``--bucket-cap-mb``.
    """
    out: list[float] = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise BenchError(f"--bucket-cap-mb: expected MiB values like 1,25,100, got {text!r}") from None
        if not 0 < value < math.inf:
            raise BenchError(f"--bucket-cap-mb: expected positive MiB values, got {part.strip()!r}")
        if value not in out:
            out.append(value)
    return tuple(out)


def parse_widths(text: str) -> tuple[int, ...]:
    """``--mlp``: layer widths, input first, ``WxN`` repeating ``W`` N times (``1024,2048x9,1024``).

    Raises
    ------
    BenchError
        Naming ``--mlp``; at least two widths (one linear layer) are needed.
    """
    out: list[int] = []
    for part in text.split(","):
        width, _, times = part.strip().partition("x")
        try:
            w, n = int(width), int(times) if times else 1
        except ValueError:
            raise BenchError(f"--mlp: expected widths like 1024,2048x9,1024, got {text!r}") from None
        if w < 1 or n < 1:
            raise BenchError(f"--mlp: widths and repeat counts must be positive, got {part.strip()!r}")
        out += [w] * n
    if len(out) < 2:
        raise BenchError(f"--mlp: expected at least two widths (input and output of one layer), got {text!r}")
    return tuple(out)


def _widths_text(widths: tuple[int, ...]) -> str:
    """Inverse of :func:`parse_widths`, runs of equal widths as ``WxN``."""
    parts: list[str] = []
    i = 0
    while i < len(widths):
        j = i
        while j < len(widths) and widths[j] == widths[i]:
            j += 1
        parts.append(str(widths[i]) if j - i == 1 else f"{widths[i]}x{j - i}")
        i = j
    return ",".join(parts)


@dataclass(frozen=True)
class DdpBenchConfig:
    """What ``collsim bench --ddp`` runs.

    Attributes
    ----------
    bucket_caps_mb : tuple of float
        One DDP configuration per cap, MiB (``bucket_cap_mb``).
    accumulation : int
        ``--no-sync K``: with K >= 2, also run ``K - 1`` micro-steps under ``no_sync()`` and one synchronised per
        optimizer step (and the compute-only baseline with K micro-steps); 1: not run.
    accumulation_cap_mb : float
        Bucket cap of the ``no_sync`` configuration, MiB.
    widths : tuple of int
        MLP widths, input first (:func:`build_mlp`).
    batch : int
        Samples per rank per micro-step.
    warmup : int
        Untimed iterations per configuration (>= 1: DDP's first iteration uses unrebuilt buckets).
    iters : int
        Timed iterations per configuration.
    rounds : int
        The timed iterations are split into this many rounds over all configurations (1 <= rounds <= iters).
    nprocs : int
        Local ranks to launch (ignored under torchrun).
    threads : int
        Intra-op threads per rank (``torch.set_num_threads``; ``OMP_NUM_THREADS`` of the launched ranks).
    lr : float
        SGD learning rate (small: the weights must stay finite over every iteration; it does not change the time).
    seed : int
        Seed of the weights (all ranks alike) and of each rank's batch (``seed + 1 + rank``).
    timeout_s : float
        torch.distributed timeout, seconds.
    device : str
        ``cpu`` or ``cuda`` (tensors and models on the rank's GPU; see the module docstring).
    fsdp : tuple of str
        ``--fsdp``: one FSDP configuration per sharding strategy (``full_shard``, ``shard_grad_op``,
        ``no_shard``; FSDP2's ``fsdp2_full_shard``, ``fsdp2_shard_grad_op``); none: not run.
    checkpoint : bool
        ``--checkpoint``: also run the computation, each DDP cap and each FSDP configuration with activation
        checkpointing on every ``nn.Linear`` (one micro-step).
    clip : bool
        ``--clip``: also run them with gradient-norm clipping before the optimizer (one micro-step).
    """

    bucket_caps_mb: tuple[float, ...] = DEFAULT_BUCKET_CAPS_MB
    accumulation: int = 1
    accumulation_cap_mb: float = 25.0
    widths: tuple[int, ...] = DEFAULT_WIDTHS
    batch: int = 32
    warmup: int = 5
    iters: int = 20
    rounds: int = 4
    nprocs: int = 2
    threads: int = 1
    lr: float = 1e-4
    seed: int = 0
    timeout_s: float = 300.0
    device: str = "cpu"
    fsdp: tuple[str, ...] = ()
    checkpoint: bool = False
    clip: bool = False

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise BenchError(f"--device: expected cpu or cuda, got {self.device!r}")
        fsdp = tuple(self.fsdp)
        bad = [x for x in fsdp if x not in FSDP_SHARDINGS]
        if bad or len(set(fsdp)) != len(fsdp):
            raise BenchError(f"--fsdp: expected distinct strategies among {', '.join(FSDP_SHARDINGS)}, got "
                             f"{','.join(fsdp)!r}")  # fmt: skip
        object.__setattr__(self, "fsdp", fsdp)
        caps = tuple(float(c) for c in self.bucket_caps_mb)
        if not caps or any(not 0 < c < math.inf for c in caps):
            raise BenchError(f"--bucket-cap-mb: expected positive MiB values, got {self.bucket_caps_mb!r}")
        object.__setattr__(self, "bucket_caps_mb", caps)
        object.__setattr__(self, "widths", tuple(int(w) for w in self.widths))
        if len(self.widths) < 2 or min(self.widths) < 1:
            raise BenchError(f"--mlp: expected at least two positive widths, got {self.widths!r}")
        limits = (("accumulation", 1, "--no-sync"), ("batch", 1, "--batch"), ("warmup", 1, "-w/--warmup"),
                  ("iters", 1, "-n/--iters"), ("rounds", 1, "--rounds"), ("nprocs", 1, "--nprocs"),
                  ("threads", 1, "--threads"), ("seed", 0, "seed"))
        for name, low, flag in limits:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                extra = " (DDP's first iteration runs before its buckets are rebuilt)" if name == "warmup" else ""
                raise BenchError(f"{flag}: expected an integer >= {low}, got {value!r}{extra}")
        if self.rounds > self.iters:
            raise BenchError(f"--rounds: expected at most -n/--iters ({self.iters}) rounds, got {self.rounds}")
        if not 0 < self.accumulation_cap_mb < math.inf:
            raise BenchError(f"--no-sync-cap-mb: expected a positive MiB value, got {self.accumulation_cap_mb!r}")
        if not 0 < self.lr < math.inf or not 0 < self.timeout_s < math.inf:
            raise BenchError(f"lr and --timeout: expected positive numbers, got {self.lr!r} and {self.timeout_s!r}")

    @property
    def n_params(self) -> int:
        """Parameters of the MLP (weights and biases), elements."""
        return sum(a * b + b for a, b in pairwise(self.widths))

    def iters_in_round(self, r: int) -> int:
        """Timed iterations of every configuration in round ``r`` (0-based); they add up to :attr:`iters`."""
        return self.iters // self.rounds + (1 if r < self.iters % self.rounds else 0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        d = asdict(self)
        d["bucket_caps_mb"], d["widths"], d["fsdp"] = list(self.bucket_caps_mb), list(self.widths), list(self.fsdp)
        return d

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DdpBenchConfig:
        """Inverse of :meth:`to_dict`."""
        d = dict(data)
        d["bucket_caps_mb"], d["widths"] = tuple(d["bucket_caps_mb"]), tuple(d["widths"])
        d["fsdp"] = tuple(d.get("fsdp", ()))
        return cls(**d)


@dataclass(frozen=True)
class DdpRun:
    """One timed configuration.

    Attributes
    ----------
    name : str
        ``compute``, ``compute_k4``, ``layers``, ``ddp_cap25``, ``ddp_cap25_k4``, ``fsdp_full_shard``.
    kind : str
        ``compute`` (no DDP), ``layers`` (no DDP, per-layer hooks), ``ddp`` or ``fsdp``.
    bucket_cap_mb : float or None
        DDP's ``bucket_cap_mb``, MiB (None without DDP).
    accumulation : int
        Micro-steps per optimizer step (all but the last under ``no_sync`` with DDP and FSDP1, without gradient
        sync with FSDP2).
    sharding : str or None
        FSDP's sharding strategy (``full_shard``, ``shard_grad_op``, ``no_shard``); None without FSDP.
    checkpoint : bool
        Activation checkpointing on every ``nn.Linear`` (``--checkpoint``).
    clip : bool
        Gradient-norm clipping before the optimizer (``--clip``).
    """

    name: str
    kind: str
    bucket_cap_mb: float | None
    accumulation: int = 1
    sharding: str | None = None
    checkpoint: bool = False
    clip: bool = False


def planned_runs(cfg: DdpBenchConfig) -> list[DdpRun]:
    """The configurations ``cfg`` times, in the order each round runs them."""
    k = cfg.accumulation
    runs = [DdpRun("compute", "compute", None)]
    if k > 1:
        runs.append(DdpRun(f"compute_k{k}", "compute", None, k))
    runs.append(DdpRun("layers", "layers", None))
    runs += [DdpRun(f"ddp_cap{_fmt_num(c)}", "ddp", c) for c in cfg.bucket_caps_mb]
    if k > 1:
        runs.append(DdpRun(f"ddp_cap{_fmt_num(cfg.accumulation_cap_mb)}_k{k}", "ddp", cfg.accumulation_cap_mb, k))
    fsdp = [(x if x.startswith("fsdp2_") else f"fsdp_{x}", x) for x in cfg.fsdp]
    runs += [DdpRun(name, "fsdp", None, sharding=x) for name, x in fsdp]
    if k > 1:  # the same FSDP configurations with k micro-steps, all but the last without gradient sync
        runs += [DdpRun(f"{name}_k{k}", "fsdp", None, k, sharding=x) for name, x in fsdp]
    plain = [r for r in runs if r.kind != "layers" and r.accumulation == 1]
    if cfg.checkpoint:  # one micro-step each, with activation checkpointing on every Linear
        runs += [replace(r, name=f"{r.name}_ac", checkpoint=True) for r in plain]
    if cfg.clip:  # one micro-step each, clipping the gradients' norm before the optimizer
        runs += [replace(r, name=f"{r.name}_clip", clip=True) for r in plain]
    return runs


# ----------------------------------------------------------------------------------------------------------------
# Results


def _stats(times: list[float]) -> dict[str, float]:
    """Median, 10th and 90th percentiles (linear interpolation), mean, min and max, seconds."""
    a = np.asarray(times, dtype=float)
    p10, med, p90 = (float(x) for x in np.percentile(a, [10, 50, 90]))
    return {"median_s": med, "p10_s": p10, "p90_s": p90, "mean_s": float(a.mean()), "min_s": float(a.min()),
            "max_s": float(a.max())}


@dataclass
class RunResult:
    """What one configuration measured.

    Attributes
    ----------
    run : DdpRun
    rank_times_s : list of list of float
        Per rank, per timed iteration (in the order they ran), seconds.
    buckets : list of dict or None
        DDP's rebuilt buckets in reduction order: ``{"bytes": int, "params": [names]}``; None without DDP or when
        torch did not report them.
    """

    run: DdpRun
    rank_times_s: list[list[float]]
    buckets: list[dict[str, Any]] | None = None

    @property
    def times_s(self) -> list[float]:
        """Per timed iteration, the slowest rank's time, seconds."""
        return [max(ts) for ts in zip(*self.rank_times_s, strict=True)]

    @property
    def stats(self) -> dict[str, float]:
        """:func:`_stats` of :attr:`times_s`, seconds."""
        return _stats(self.times_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return {"run": asdict(self.run), "rank_times_s": self.rank_times_s, "buckets": self.buckets}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunResult:
        """Inverse of :meth:`to_dict`."""
        return cls(DdpRun(**d["run"]), [list(ts) for ts in d["rank_times_s"]], d.get("buckets"))


@dataclass
class LayerTiming:
    """One layer of the model, in forward order, with its measured times.

    Attributes
    ----------
    name : str
        ``fc1``, ``relu1``, ..., ``loss``.
    params : list of str
        Its parameters' ``named_parameters()`` names.
    fwd_flops, bwd_flops : float
        Per sample (2 per multiply-add): a linear ``din -> dout`` is ``2 din dout`` forward and twice that
        backward, except the first (no gradient for the input: once).
    act_bytes : float
        Per sample, bytes of the activations the forward reads and writes (float32: 4 B per element).
    rank_fwd_s, rank_bwd_s : list of list of float
        Per rank, per timed iteration, seconds for the whole batch.
    saves : str
        What its backward keeps from the forward (:attr:`collsim.training.Layer.saves`): ``inputs`` for a
        ``Linear`` (``addmm`` saves the input and the weight), ``outputs`` for a ReLU (its result) and the loss.
    """

    name: str
    params: list[str]
    fwd_flops: float
    bwd_flops: float
    act_bytes: float
    rank_fwd_s: list[list[float]] = field(default_factory=list)
    rank_bwd_s: list[list[float]] = field(default_factory=list)
    saves: str = "outputs"

    @staticmethod
    def _median_of_rank_mean(rank_times: list[list[float]]) -> float:
        return float(np.median(np.mean(np.asarray(rank_times, dtype=float), axis=0)))

    @property
    def fwd_time_s(self) -> float:
        """Median over iterations of the ranks' mean forward time, seconds."""
        return self._median_of_rank_mean(self.rank_fwd_s)

    @property
    def bwd_time_s(self) -> float:
        """Median over iterations of the ranks' mean backward time, seconds."""
        return self._median_of_rank_mean(self.rank_bwd_s)


def _mlp_layers(widths: tuple[int, ...]) -> list[LayerTiming]:
    """The layers :func:`build_mlp` makes, forward order, loss last, with FLOPs and bytes per sample (no times)."""
    out: list[LayerTiming] = []
    n = len(widths) - 1
    for i, (a, b) in enumerate(pairwise(widths), start=1):
        flops = 2.0 * a * b  # one multiply-add per weight and sample
        out.append(LayerTiming(f"fc{i}", [f"fc{i}.weight", f"fc{i}.bias"], flops, flops if i == 1 else 2 * flops,
                               float((a + b) * _F32), saves="inputs"))  # reads the input, writes the output
        if i < n:
            out.append(LayerTiming(f"relu{i}", [], 0.0, 0.0, float(2 * b * _F32)))
    out.append(LayerTiming("loss", [], 0.0, 0.0, float(2 * widths[-1] * _F32)))  # output and target read
    return out


@dataclass
class DdpBenchOutput:
    """Everything rank 0 reports.

    Attributes
    ----------
    config : DdpBenchConfig
    nranks : int
    runs : list of RunResult
        In :func:`planned_runs` order.
    layers : list of LayerTiming
        From the ``layers`` configuration.
    rank_optimizer_s : list of list of float
        Per rank, per timed iteration of ``layers``: ``optimizer.step()`` + ``zero_grad()``, seconds.
    params : list of (str, int)
        ``named_parameters()`` in registration order: name, elements.
    ranks : list of dict
        Per rank: hostname, pid, thread counts.
    hardware, software : dict
        Host facts; torch version, Python, environment.
    launcher : str
        ``collsim`` (local processes) or ``torchrun``.
    started, finished : str
        ISO 8601 UTC.
    """

    config: DdpBenchConfig
    nranks: int
    runs: list[RunResult]
    layers: list[LayerTiming]
    rank_optimizer_s: list[list[float]]
    params: list[tuple[str, int]]
    ranks: list[dict[str, Any]] = field(default_factory=list)
    hardware: dict[str, Any] = field(default_factory=dict)
    software: dict[str, Any] = field(default_factory=dict)
    launcher: str = "collsim"
    started: str = ""
    finished: str = ""

    def run(self, name: str) -> RunResult:
        """The result of the configuration called ``name``."""
        for r in self.runs:
            if r.run.name == name:
                return r
        raise KeyError(name)

    @property
    def optimizer_s(self) -> float:
        """Median over iterations of the ranks' mean optimizer step + ``zero_grad``, seconds."""
        return LayerTiming._median_of_rank_mean(self.rank_optimizer_s)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (what the launched rank 0 hands back)."""
        d = asdict(self)
        d["config"] = self.config.to_dict()
        d["runs"] = [r.to_dict() for r in self.runs]
        d["params"] = [list(p) for p in self.params]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DdpBenchOutput:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        d["config"] = DdpBenchConfig.from_dict(d["config"])
        d["runs"] = [RunResult.from_dict(r) for r in d["runs"]]
        d["layers"] = [LayerTiming(**x) for x in d["layers"]]
        d["params"] = [(str(n), int(k)) for n, k in d["params"]]
        return cls(**d)


def _model_name(cfg: DdpBenchConfig) -> str:
    return f"mlp-{_widths_text(cfg.widths).replace(',', '-')}"


def _summary(out: DdpBenchOutput) -> dict[str, float]:
    """Sums of the per-layer medians and the time the hooks do not attribute.

    ``unattributed_s`` is taken per iteration and rank (the ``layers`` iteration minus its layers and optimizer),
    averaged over ranks, then the median over iterations: the sum of per-part medians is not the median of sums
    when the machine's noise moves whole iterations.
    """
    iteration = np.asarray(out.run("layers").rank_times_s, dtype=float)  # rank x iteration, seconds
    parts = np.asarray(out.rank_optimizer_s, dtype=float)
    for x in out.layers:
        parts = parts + np.asarray(x.rank_fwd_s, dtype=float) + np.asarray(x.rank_bwd_s, dtype=float)
    return {
        "compute_median_s": out.run("compute").stats["median_s"],
        "layers_run_median_s": out.run("layers").stats["median_s"],
        "sum_layer_fwd_s": sum(x.fwd_time_s for x in out.layers),
        "sum_layer_bwd_s": sum(x.bwd_time_s for x in out.layers),
        "optimizer_s": out.optimizer_s,
        "unattributed_s": float(np.median((iteration - parts).mean(axis=0))),
    }


def to_json(out: DdpBenchOutput, *, command: str, argv: str | None = None,
            machine: str | None = None) -> dict[str, Any]:
    """The measurement file (``format`` :data:`FORMAT`): configuration, model, per-configuration statistics and
    samples, per-layer times, thread counts, host and software.

    Parameters
    ----------
    out : DdpBenchOutput
    command : str
        The command that reproduces the run (one line).
    argv : str, optional
        The command line as typed.
    machine : str, optional
        One line about the host.
    """
    cfg = out.config
    runs = []
    for r in out.runs:
        entry: dict[str, Any] = {
            "name": r.run.name,
            "kind": r.run.kind,
            "bucket_cap_mb": r.run.bucket_cap_mb,
            "accumulation": r.run.accumulation,
            "sharding": r.run.sharding,
            "checkpoint": r.run.checkpoint,
            "clip": r.run.clip,
            "buckets": len(r.buckets) if r.buckets is not None else None,
            "bucket_bytes": [b["bytes"] for b in r.buckets] if r.buckets is not None else None,
            "bucket_params": [b["params"] for b in r.buckets] if r.buckets is not None else None,
        }
        entry.update(r.stats)
        entry["times_s"] = r.times_s
        entry["rank_times_s"] = r.rank_times_s
        runs.append(entry)
    layers = [{"name": x.name, "params": x.params, "fwd_flops": x.fwd_flops, "bwd_flops": x.bwd_flops,
               "act_bytes": x.act_bytes, "fwd_time_s": x.fwd_time_s, "bwd_time_s": x.bwd_time_s,
               "rank_fwd_s": x.rank_fwd_s, "rank_bwd_s": x.rank_bwd_s, "saves": x.saves} for x in out.layers]
    return {
        "format": FORMAT,
        "source": {"command": command, "argv": argv, "machine": machine, "date": out.started,
                   "finished": out.finished, "launcher": out.launcher},
        "model": {"name": _model_name(cfg), "kind": "mlp", "widths": list(cfg.widths),
                  "layers": "Linear with ReLU between (collsim.bench.ddp.build_mlp)", "n_params": cfg.n_params,
                  "param_bytes": cfg.n_params * _F32, "dtype": "float32",
                  "params": [{"name": n, "numel": k} for n, k in out.params]},
        "batch": cfg.batch,
        "optimizer": {"name": "SGD", "lr": cfg.lr, "momentum": 0.0, "weight_decay": 0.0,
                      "zero_grad": "set_to_none=True (torch default)"},
        "loss": "mse_loss against a fixed random target",
        "ddp": {"backend": "gloo", "device": cfg.device, "gradient_as_bucket_view": False,
                "find_unused_parameters": False, "broadcast_buffers": "True (the model has no buffers)",
                "bucket_cap_mb_unit": "MiB (1048576 B)"},
        "nranks": out.nranks,
        "config": cfg.to_dict(),
        "timing": ("per iteration on every rank: Gloo barrier, perf_counter, K micro-steps + optimizer.step + "
                   "zero_grad, perf_counter; the iteration's time is the max over ranks; warm-up iterations "
                   f"untimed; {cfg.iters} timed iterations per configuration in {cfg.rounds} interleaved rounds; "
                   "per-layer times from hooks in the 'layers' configuration, mean over ranks, median over "
                   "iterations"),
        "threads": out.ranks,
        "hardware": out.hardware,
        "software": out.software,
        "runs": runs,
        "summary": _summary(out),
        "layers": layers,
        "optimizer_rank_s": out.rank_optimizer_s,
    }


def model_yaml(out: DdpBenchOutput, *, command: str | None = None) -> str:
    """The model with its measured per-layer times, as a collsim model YAML
    (:mod:`collsim.training.model` schema: ``params`` in registration order, ``layers`` in forward order with
    ``fwd_time_s``/``bwd_time_s`` for the whole batch)."""
    cfg = out.config
    host = out.hardware.get("cpu", "unknown CPU")
    data: dict[str, Any] = {
        "name": _model_name(cfg),
        "source": (f"collsim bench --ddp MLP (collsim/bench/ddp.py build_mlp), widths {list(cfg.widths)}, float32; "
                   f"per-layer times measured {out.started} on {host} with {out.nranks} ranks computing at once "
                   f"(no DDP), {cfg.threads} intra-op thread(s) per rank, batch {cfg.batch}"),
        "dtype": "float32",
        "batch_size": cfg.batch,  # the batch the times are for: a step at another is refused
        "layers_source": ("fwd_time_s/bwd_time_s: forward hooks and output-gradient hooks in the real iteration, "
                          f"mean over {out.nranks} ranks, median over {cfg.iters} iterations, seconds per batch of "
                          f"{cfg.batch}; FLOPs per sample, 2 per multiply-add"),
        "params": [{"name": n, "numel": k} for n, k in out.params],
        "layers": [{"name": x.name, "params": x.params, "fwd_flops": x.fwd_flops, "bwd_flops": x.bwd_flops,
                    "act_bytes": x.act_bytes, "fwd_time_s": float(f"{x.fwd_time_s:.6g}"),
                    "bwd_time_s": float(f"{x.bwd_time_s:.6g}"), "saves": x.saves} for x in out.layers],
    }
    head = [f"# collsim model: {data['name']}, per-layer times measured by collsim bench --ddp",
            f"# batch {cfg.batch}; optimizer SGD (step + zero_grad, not a layer): {out.optimizer_s:.6g} s"]
    if command:
        head.append(f"# command: {command}")
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False, width=120)


def format_summary(out: DdpBenchOutput, *, command: str | None = None) -> str:
    """A short human summary: per configuration the median, p10 and p90 iteration time and buckets; the layers."""
    cfg = out.config
    s = _summary(out)
    ranks = out.ranks[0] if out.ranks else {}
    lines = [
        f"# collsim bench --ddp: {out.nranks} ranks, Gloo over TCP loopback, CPU tensors; {out.started} .. "
        f"{out.finished}",
        f"# model {_model_name(cfg)}: {cfg.n_params:,} float32 parameters ({cfg.n_params * _F32 / 1e6:.1f} MB), "
        f"batch {cfg.batch}, SGD lr {cfg.lr:g}, MSE loss",
        f"# threads per rank: intra-op {ranks.get('intra_op_threads')}, inter-op {ranks.get('inter_op_threads')}, "
        f"Gloo workers {ranks.get('gloo_threads')}; host: {out.hardware.get('cpu')} "
        f"({out.hardware.get('cpu_count')} logical CPUs)",
        f"# {cfg.warmup} warm-up + {cfg.iters} timed iterations per configuration in {cfg.rounds} rounds; "
        "time = slowest rank's, ms",
    ]
    if command:
        lines.append(f"# command: {command}")
    w = max(16, *(len(r.run.name) for r in out.runs))
    lines += ["#", f"# {'configuration':<{w}} {'cap MiB':>7} {'K':>2} {'buckets':>7} {'median':>9} {'p10':>9} "
                   f"{'p90':>9} {'vs compute':>10}"]
    base = {(r.run.accumulation, r.run.checkpoint, r.run.clip): r.stats["median_s"] for r in out.runs
            if r.run.kind == "compute"}  # fmt: skip
    for r in out.runs:
        st = r.stats
        cap = _fmt_num(r.run.bucket_cap_mb) if r.run.bucket_cap_mb is not None else "-"
        nb = str(len(r.buckets)) if r.buckets is not None else "-"
        ref = base.get((r.run.accumulation, r.run.checkpoint, r.run.clip))
        rel = f"{st['median_s'] / ref:.3f}x" if ref and r.run.kind != "compute" else "-"
        lines.append(f"  {r.run.name:<{w}} {cap:>7} {r.run.accumulation:>2} {nb:>7} {st['median_s'] * 1e3:>9.2f} "
                     f"{st['p10_s'] * 1e3:>9.2f} {st['p90_s'] * 1e3:>9.2f} {rel:>10}")
    lines += ["#", "# per layer (the 'layers' configuration: mean over ranks, median over iterations), ms",
              f"# {'layer':<10} {'fwd':>8} {'bwd':>8}"]
    for x in out.layers:
        lines.append(f"  {x.name:<10} {x.fwd_time_s * 1e3:>8.3f} {x.bwd_time_s * 1e3:>8.3f}")
    lines.append(f"# sum: fwd {s['sum_layer_fwd_s'] * 1e3:.2f} ms, bwd {s['sum_layer_bwd_s'] * 1e3:.2f} ms, "
                 f"optimizer {s['optimizer_s'] * 1e3:.2f} ms, unattributed {s['unattributed_s'] * 1e3:.2f} ms per "
                 f"iteration; 'layers' iteration {s['layers_run_median_s'] * 1e3:.2f} ms, compute-only "
                 f"{s['compute_median_s'] * 1e3:.2f} ms")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# One rank


def build_mlp(widths: tuple[int, ...]) -> Any:
    """``nn.Sequential`` of ``fc1, relu1, fc2, ..., fcN`` (``nn.Linear`` with bias, ``nn.ReLU`` between; none
    after the last), in the current default dtype and device."""
    torch = require_torch()
    nn = torch.nn
    mods: OrderedDict[str, Any] = OrderedDict()
    n = len(widths) - 1
    for i, (a, b) in enumerate(pairwise(widths), start=1):
        mods[f"fc{i}"] = nn.Linear(a, b)
        if i < n:
            mods[f"relu{i}"] = nn.ReLU()
    return nn.Sequential(mods)


class _LayerClock:
    """Forward and backward times of a ``nn.Sequential``'s children in one iteration (see the module docstring)."""

    def __init__(self, model: Any, sync: Callable[[], Any] = lambda: None) -> None:
        self.sync = sync  # torch.cuda.synchronize on a GPU: a clock reads after the work before it has run
        self.names = [name for name, _ in model.named_children()]
        n = len(self.names)
        self.f0, self.f1, self.g = [0.0] * n, [0.0] * n, [0.0] * n
        for i, (_, mod) in enumerate(model.named_children()):
            mod.register_forward_pre_hook(partial(self._pre, i))
            mod.register_forward_hook(partial(self._post, i))

    def _now(self) -> float:
        self.sync()
        return time.perf_counter()

    def _pre(self, i: int, mod: Any, args: Any) -> None:
        self.f0[i] = self._now()

    def _post(self, i: int, mod: Any, args: Any, out: Any) -> None:
        self.f1[i] = self._now()
        if out.requires_grad:
            out.register_hook(partial(self._grad, i))

    def _grad(self, i: int, grad: Any) -> None:
        self.g[i] = self._now()  # the gradient of child i's output: its backward starts

    def step(self, model: Any, x: Any, y: Any, opt: Any, mse: Any) -> tuple[list[float], list[float], float]:
        """One iteration; returns per layer (children, then the loss) forward and backward seconds, and the
        optimizer step + zero_grad seconds."""
        out = model(x)
        t_l0 = self._now()
        loss = mse(out, y)
        t_l1 = self._now()
        t_b0 = self._now()
        loss.backward()
        t_b1 = self._now()
        opt.step()
        opt.zero_grad()
        t_o = self._now()
        n = len(self.names)
        fwd = [self.f1[i] - self.f0[i] for i in range(n)] + [t_l1 - t_l0]
        ends = [t_b1, *self.g[:-1]]  # child i's backward ends when child i-1's output gradient is ready
        bwd = [ends[i] - self.g[i] for i in range(n)] + [self.g[-1] - t_b0]
        return fwd, bwd, t_o - t_b1


def _threads_line(torch: Any, pg_threads: int | None) -> dict[str, Any]:
    proc = None
    try:
        with open("/proc/self/status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("Threads:"):
                    proc = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        proc = None
    return {"intra_op_threads": int(torch.get_num_threads()), "inter_op_threads": int(torch.get_num_interop_threads()),
            "gloo_threads": pg_threads, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "process_threads": proc}


def _gloo_threads(dist: Any, torch: Any) -> int | None:
    """ProcessGroupGloo's worker threads (``Options::threads``), or None when this torch does not say."""
    try:
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        return int(backend.options._threads)
    except Exception:  # private attributes: not worth failing a measurement over
        return None


def _ddp_buckets(ddp: Any, names: list[str]) -> list[dict[str, Any]] | None:
    """The rebuilt buckets from DDP's logging data, in reduction order, or None."""
    try:
        data = ddp._get_ddp_logging_data()
        sizes = [int(s) for s in str(data["rebuilt_bucket_sizes"]).split(",") if s.strip()]
        groups = [[int(i) for i in g.split()] for g in str(data["rebuilt_per_bucket_param_indices"]).split(",")]
    except Exception:  # a private, prototype interface
        return None
    if len(sizes) != len(groups):
        return None
    return [{"bytes": b, "params": [names[i] for i in g]} for b, g in zip(sizes, groups, strict=True)]


def run_ddp_rank(cfg: DdpBenchConfig, *, say: SayFn | None = None, launcher: str = "torchrun") -> DdpBenchOutput | None:
    """Run every configuration as this process's rank (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT`` set, as torchrun does); the result on rank 0, None on the others.

    Raises
    ------
    BenchError
        torch missing, rank variables unset, no Gloo in this torch.
    """
    torch = require_torch()
    import torch.distributed as dist
    from torch.nn.functional import mse_loss

    ids = rank_env()
    if ids is None:
        raise BenchError("RANK, WORLD_SIZE and LOCAL_RANK must be set (torchrun sets them)")
    rank, world, local = ids
    if not dist.is_available() or not dist.is_gloo_available():
        raise BenchError(f"--ddp: this torch ({torch.__version__}) has no Gloo backend")
    device, sync = _rank_device(cfg, torch, local, world)
    torch.set_num_threads(cfg.threads)
    started = now_iso()
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=cfg.timeout_s))
    try:
        runs = planned_runs(cfg)
        gen = torch.Generator().manual_seed(cfg.seed + 1 + rank)
        x = torch.randn(cfg.batch, cfg.widths[0], generator=gen).to(device)
        y = torch.randn(cfg.batch, cfg.widths[-1], generator=gen).to(device)
        plain, layers_model, models, opts = _build_models(cfg, runs, torch, device)
        names = [n for n, _ in plain.named_parameters()]
        params = [(n, int(p.numel())) for n, p in plain.named_parameters()]
        clock = _LayerClock(layers_model, sync)

        def iteration(r: DdpRun) -> None:
            _train_step(r, models[r.name], opts[id(models[r.name])], lambda m: mse_loss(m(x), y))

        times: dict[str, list[float]] = {r.name: [] for r in runs}
        layer_fwd: list[list[float]] = []
        layer_bwd: list[list[float]] = []
        opt_s: list[float] = []

        def timed(r: DdpRun, record: bool) -> None:
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            if r.kind == "layers":
                fwd, bwd, o = clock.step(layers_model, x, y, opts[id(layers_model)], mse_loss)
            else:
                iteration(r)
            sync()
            dt = time.perf_counter() - t0
            if record:
                times[r.name].append(dt)
                if r.kind == "layers":
                    layer_fwd.append(fwd)
                    layer_bwd.append(bwd)
                    opt_s.append(o)

        for r in runs:
            for _ in range(cfg.warmup):
                timed(r, record=False)
            if say:
                say(f"warm-up done: {r.name}")
        for k in range(cfg.rounds):
            for r in runs:
                for _ in range(cfg.iters_in_round(k)):
                    timed(r, record=True)
            if say:
                med = {n: float(np.median(ts)) * 1e3 for n, ts in times.items()}
                say(f"round {k + 1}/{cfg.rounds}: " + ", ".join(f"{n} {v:.1f} ms" for n, v in med.items()))
        buckets = {r.name: _ddp_buckets(models[r.name], names) for r in runs if r.kind == "ddp"}
        mine = {"times": times, "fwd": layer_fwd, "bwd": layer_bwd, "opt": opt_s,
                "info": {"rank": rank, "hostname": socket.gethostname(), "pid": os.getpid(), "device": str(device),
                         **_threads_line(torch, _gloo_threads(dist, torch))}}
        everyone: list[Any] = [None] * world
        dist.all_gather_object(everyone, mine)
        # the DDP wrappers (each reducer holds the process group) go while the group is still there
        models.clear()
        opts.clear()
        gc.collect()
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return None
    return _assemble(cfg, world, runs, everyone, buckets, params, torch, launcher, started)


def _rank_device(cfg: DdpBenchConfig, torch: Any, local: int, world: int) -> tuple[Any, Callable[[], Any]]:
    """This rank's device and the call that waits for its work: the CPU and nothing, or GPU ``local // k`` (``k =
    ceil(ranks on this node / GPUs)`` ranks per GPU, in blocks) and ``torch.cuda.synchronize``."""
    if cfg.device == "cpu":
        return torch.device("cpu"), lambda: None
    if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
        raise _no_gpu(torch)
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))  # torchrun sets it; the local launcher: one node
    per_gpu = -(-local_world // torch.cuda.device_count())  # ceil: processes sharing each GPU
    device = torch.device("cuda", local // per_gpu)
    torch.cuda.set_device(device)
    return device, torch.cuda.synchronize


def _no_gpu(torch: Any) -> BenchError:
    """``--device cuda`` where this torch sees no GPU."""
    return BenchError(f"--device cuda: this torch ({torch.__version__}) sees no GPU; leave --device out for CPU")


def _build_models(
    cfg: DdpBenchConfig, runs: list[DdpRun], torch: Any, device: Any = None
) -> tuple[Any, Any, dict[str, Any], dict[int, Any]]:
    """The models the configurations iterate, each seeded with ``cfg.seed`` (built on the CPU, then moved to
    ``device``): one plain MLP that the compute-only configurations share, one for the per-layer clocks, a
    DistributedDataParallel wrapper per DDP configuration (its own bucket cap; ``device_ids`` the rank's GPU on
    CUDA); and an SGD optimizer per distinct model, by ``id``. Returns (plain, layers model, model per configuration
    name, optimizer per model id); call with the process group initialised."""
    from torch.nn.parallel import DistributedDataParallel

    device = torch.device("cpu") if device is None else device
    fsdp_wrap = _fsdp_wrapper(torch, device) if any(r.kind == "fsdp" for r in runs) else None
    ids = [device.index] if device.type == "cuda" else None
    torch.manual_seed(cfg.seed)
    plain = build_mlp(cfg.widths).to(device)
    torch.manual_seed(cfg.seed)
    layers_model = build_mlp(cfg.widths).to(device)
    models: dict[str, Any] = {}
    for r in runs:
        if r.kind == "ddp":
            torch.manual_seed(cfg.seed)
            mlp = build_mlp(cfg.widths).to(device)
            models[r.name] = DistributedDataParallel(_checkpointed(torch, mlp) if r.checkpoint else mlp,
                                                     device_ids=ids, bucket_cap_mb=r.bucket_cap_mb)  # fmt: skip
        elif r.kind == "fsdp":
            assert fsdp_wrap is not None and r.sharding is not None
            torch.manual_seed(cfg.seed)
            models[r.name] = fsdp_wrap(build_mlp(cfg.widths).to(device), r.sharding, r.checkpoint)
        elif r.checkpoint:
            torch.manual_seed(cfg.seed)
            models[r.name] = _checkpointed(torch, build_mlp(cfg.widths).to(device))
        elif r.clip:
            torch.manual_seed(cfg.seed)
            models[r.name] = build_mlp(cfg.widths).to(device)  # its own: clipping changes the weights' path
        else:
            models[r.name] = layers_model if r.kind == "layers" else plain
    opts: dict[int, Any] = {}
    for model in models.values():
        if id(model) not in opts:
            opts[id(model)] = torch.optim.SGD(model.parameters(), lr=cfg.lr)
    return plain, layers_model, models, opts


def _train_step(r: DdpRun, model: Any, opt: Any, loss: Callable[[Any], Any]) -> None:
    """One optimizer step of configuration ``r``: ``r.accumulation`` forwards and backwards of ``loss(model)``, all
    but the last without gradient sync (DDP's and FSDP1's ``no_sync()``, FSDP2's
    ``set_requires_gradient_sync(False)``; the plain model has none to skip), then the optimizer."""
    fsdp2 = r.kind == "fsdp" and r.sharding is not None and r.sharding.startswith("fsdp2_")
    no_sync = r.kind == "ddp" or (r.kind == "fsdp" and not fsdp2)
    for _ in range(r.accumulation - 1):
        if no_sync:
            with model.no_sync():
                loss(model).backward()
        else:
            if fsdp2:
                model.set_requires_gradient_sync(False)
            loss(model).backward()
    if fsdp2 and r.accumulation > 1:
        model.set_requires_gradient_sync(True)
    loss(model).backward()
    if r.clip:  # FSDP1 all-reduces the local norms itself; elsewhere torch's (FSDP2: on DTensor gradients)
        if r.kind == "fsdp" and not fsdp2:
            model.clip_grad_norm_(1.0)
        else:
            import torch

            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()


def _checkpointed(torch: Any, model: Any) -> Any:
    """``model`` with every ``nn.Linear`` under the non-reentrant ``checkpoint_wrapper``
    (``apply_activation_checkpointing``, in place); returned for chaining."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    def wrapper(module: Any) -> Any:
        return checkpoint_wrapper(module, checkpoint_impl=CheckpointImpl.NO_REENTRANT)

    apply_activation_checkpointing(model, checkpoint_wrapper_fn=wrapper,
                                   check_fn=lambda m: isinstance(m, torch.nn.Linear))  # fmt: skip
    return model


def _fsdp_wrapper(torch: Any, device: Any) -> Callable[[Any, str, bool], Any]:
    """``(model, sharding, checkpoint) -> FullyShardedDataParallel``, every ``nn.Linear`` a unit, on ``device``;
    for ``fsdp2_*`` the model with ``fully_shard`` applied to every ``nn.Linear`` and then to the model (FSDP2). With
    ``checkpoint`` every ``nn.Linear`` is checkpointed (:func:`_checkpointed`): FSDP1 after the wrapping (the
    checkpoint inside each unit), FSDP2 before it (``fully_shard`` on each ``CheckpointWrapper``)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy, fully_shard
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    def wrap(model: Any, sharding: str, checkpoint: bool = False) -> Any:
        if sharding.startswith("fsdp2_"):
            mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
            reshard = sharding == "fsdp2_full_shard"
            block = CheckpointWrapper if checkpoint else torch.nn.Linear
            if checkpoint:
                _checkpointed(torch, model)
            for module in list(model.modules()):
                if isinstance(module, block):
                    fully_shard(module, mesh=mesh, reshard_after_forward=reshard)
            return fully_shard(model, mesh=mesh)
        fsdp = FullyShardedDataParallel(model, auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}),
                                        sharding_strategy=getattr(ShardingStrategy, sharding.upper()),
                                        device_id=device)  # fmt: skip
        return _checkpointed(torch, fsdp) if checkpoint else fsdp

    return wrap


def _assemble(cfg: DdpBenchConfig, world: int, runs: list[DdpRun], everyone: list[Any],
              buckets: dict[str, list[dict[str, Any]] | None], params: list[tuple[str, int]], torch: Any,
              launcher: str, started: str) -> DdpBenchOutput:
    results = [RunResult(r, [list(e["times"][r.name]) for e in everyone], buckets.get(r.name)) for r in runs]
    layers = _mlp_layers(cfg.widths)
    for j, layer in enumerate(layers):
        layer.rank_fwd_s = [[it[j] for it in e["fwd"]] for e in everyone]
        layer.rank_bwd_s = [[it[j] for it in e["bwd"]] for e in everyone]
    facts = host_facts()
    hosts = sorted({e["info"]["hostname"] for e in everyone})
    hardware = {"cpu": facts["cpu"], "cpu_count": facts["cpu_count"], "memory_gib": facts["memory_gib"],
                "nodes": len(hosts), "hostnames": hosts, "os": facts["os"],
                "interconnect": "TCP over loopback (one host)" if len(hosts) == 1 else "TCP"}
    if cfg.device == "cuda":
        # ranks per GPU: the most ranks on one (host, device); device names repeat from host to host
        per_gpu: dict[tuple[str, str], int] = {}
        for e in everyone:
            key = (str(e["info"]["hostname"]), str(e["info"].get("device")))
            per_gpu[key] = per_gpu.get(key, 0) + 1
        hardware.update({"gpu": torch.cuda.get_device_name(0), "gpus_used": sorted({d for _, d in per_gpu}),
                         "ranks_per_gpu": max(per_gpu.values())})
    software = {"torch_version": str(torch.__version__), "gloo": f"bundled with torch {torch.__version__}",
                "python": facts["python"], "env": relevant_env()}
    return DdpBenchOutput(config=cfg, nranks=world, runs=results, layers=layers,
                          rank_optimizer_s=[list(e["opt"]) for e in everyone], params=params,
                          ranks=[e["info"] for e in everyone], hardware=hardware, software=software,
                          launcher=launcher, started=started, finished=now_iso())


# ----------------------------------------------------------------------------------------------------------------
# Launching


def _launch(cfg: DdpBenchConfig, say: SayFn | None) -> DdpBenchOutput:
    """``cfg.nprocs`` local processes running ``python -m collsim.bench.ddp`` (:func:`launch_ranks`), with
    ``OMP_NUM_THREADS`` as the ranks set their intra-op threads; rank 0's result."""

    def event(e: dict[str, Any]) -> None:
        if say is not None and "text" in e:
            say(str(e["text"]))

    result = launch_ranks(cfg.to_dict(), "collsim.bench.ddp", cfg.nprocs, on_event=event,
                          env={"OMP_NUM_THREADS": str(cfg.threads)})  # fmt: skip
    return DdpBenchOutput.from_dict(result)


def run_ddp(cfg: DdpBenchConfig, *, say: SayFn | None = None) -> DdpBenchOutput | None:
    """Run ``cfg``: as this process's rank under torchrun, else by launching ``cfg.nprocs`` local processes.

    Returns
    -------
    DdpBenchOutput or None
        None on ranks other than 0 under torchrun.

    Raises
    ------
    BenchError
        torch missing, bad options, a failed rank (one line per rank).
    """
    torch = require_torch()
    if rank_env() is not None:
        return run_ddp_rank(cfg, say=say, launcher="torchrun")
    if cfg.device == "cuda" and not torch.cuda.is_available():  # before launching ranks that would each fail
        raise _no_gpu(torch)
    return _launch(cfg, say)


# ----------------------------------------------------------------------------------------------------------------
# The command


def _config_from_args(args: Any) -> DdpBenchConfig:
    if getattr(args, "probe", False):
        raise BenchError("--probe and --ddp are different modes; give one of them")
    if getattr(args, "sizes", None):
        raise BenchError("--sizes: --ddp times training iterations, not collective sizes; leave --sizes out")
    if getattr(args, "collective", "allreduce") not in (None, "allreduce", "all_reduce"):
        raise BenchError(f"--collective {args.collective}: --ddp times training iterations, whose DDP buckets are "
                         "all-reduced; leave --collective out")
    if getattr(args, "backend", None) not in (None, "gloo"):
        raise BenchError(f"--backend {args.backend}: --ddp runs Gloo (on CPU tensors, or CUDA with --device cuda)")
    device = getattr(args, "device", None) or "cpu"  # --ddp's default: CPU tensors, whatever the machine has
    caps = parse_caps(args.bucket_cap_mb) if args.bucket_cap_mb else DEFAULT_BUCKET_CAPS_MB
    widths = parse_widths(args.mlp) if args.mlp else DEFAULT_WIDTHS
    nprocs = args.nprocs if args.nprocs is not None else 2
    ids = rank_env()
    if ids is not None:
        nprocs = ids[1]
    fsdp = tuple(x.strip() for x in args.fsdp.split(",")) if getattr(args, "fsdp", None) else ()
    return DdpBenchConfig(bucket_caps_mb=caps, accumulation=args.no_sync, accumulation_cap_mb=args.no_sync_cap_mb,
                          widths=widths, batch=args.batch, warmup=args.warmup, iters=args.iters, rounds=args.rounds,
                          nprocs=nprocs, threads=args.threads, timeout_s=args.timeout, device=device, fsdp=fsdp,
                          checkpoint=bool(getattr(args, "checkpoint", False)), clip=bool(getattr(args, "clip", False)))


def _command(cfg: DdpBenchConfig, args: Any, under_torchrun: bool) -> str:
    parts = ["collsim", "bench", "--ddp"]
    if cfg.device != "cpu":
        parts += ["--device", cfg.device]
    if not under_torchrun:
        parts += ["--nprocs", str(cfg.nprocs)]
    parts += ["--bucket-cap-mb", ",".join(_fmt_num(c) for c in cfg.bucket_caps_mb)]
    if cfg.accumulation > 1:
        parts += ["--no-sync", str(cfg.accumulation), "--no-sync-cap-mb", _fmt_num(cfg.accumulation_cap_mb)]
    if cfg.fsdp:
        parts += ["--fsdp", ",".join(cfg.fsdp)]
    if cfg.checkpoint:
        parts += ["--checkpoint"]
    if cfg.clip:
        parts += ["--clip"]
    parts += ["--mlp", _widths_text(cfg.widths), "--batch", str(cfg.batch), "--threads", str(cfg.threads),
              "-w", str(cfg.warmup), "-n", str(cfg.iters), "--rounds", str(cfg.rounds)]
    for flag, value in (("-o", args.output), ("--model-out", args.model_out), ("--text", args.text)):
        if value:
            parts += [flag, value]
    text = shlex.join(parts)
    return f"torchrun ... {text} (WORLD_SIZE={cfg.nprocs})" if under_torchrun else text


def _write(path: str, text: str) -> None:
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise BenchError(f"{path}: cannot write: {exc.strerror or exc}") from None


def run_ddp_command(args: Any) -> int:
    """``collsim bench --ddp``: time the configurations, print the summary (or ``--text FILE``), write
    ``-o FILE.json`` (:func:`to_json`) and ``--model-out FILE.yaml`` (:func:`model_yaml`); returns the exit status.

    Raises
    ------
    BenchError
        For everything the user can fix (the CLI prints it as one line and exits with 2).
    """
    if args.output and Path(args.output).suffix.lower() != ".json":
        raise BenchError(f"-o {args.output}: --ddp writes JSON; expected a file name ending in .json")
    if args.model_out and Path(args.model_out).suffix.lower() not in (".yaml", ".yml"):
        raise BenchError(f"--model-out {args.model_out}: expected a file name ending in .yaml or .yml")
    for option, path in (("-o", args.output), ("--model-out", args.model_out), ("--text", args.text)):
        folder = Path(path).resolve().parent if path else None
        if folder is not None and not folder.is_dir():  # before minutes of timing, not after
            raise BenchError(f"{option} {path}: folder {folder} does not exist")
    cfg = _config_from_args(args)
    require_torch()
    ids = rank_env()
    quiet = args.quiet or (ids is not None and ids[0] != 0)

    def say(text: str) -> None:
        if not quiet:
            print(f"collsim bench --ddp: {text}", file=sys.stderr, flush=True)

    out = run_ddp(cfg, say=say)
    if out is None:
        return 0
    command = _command(cfg, args, ids is not None)
    facts = host_facts()
    machine = (f"{', '.join(out.hardware.get('hostnames', [facts['hostname']]))}: {facts['cpu']} "
               f"({facts['cpu_count']} logical CPUs, {facts['memory_gib']} GiB); {facts['os']}")
    if args.output:
        _write(args.output, json.dumps(to_json(out, command=command, argv=shlex.join(sys.argv), machine=machine),
                                       indent=1) + "\n")
    if args.model_out:
        _write(args.model_out, model_yaml(out, command=command))
    text = format_summary(out, command=command)
    if args.text:
        _write(args.text, text)
    else:
        sys.stdout.write(text)
    return 0


def _main(argv: list[str]) -> int:
    """``python -m collsim.bench.ddp CONFIG.json RESULT.json``: one rank launched by :func:`run_ddp`."""
    cfg_path, result_path = argv

    def produce() -> DdpBenchOutput | None:
        cfg = DdpBenchConfig.from_dict(json.loads(Path(cfg_path).read_text()))

        def say(text: str) -> None:
            print(PROGRESS_MARK + json.dumps({"text": text}), flush=True)

        return run_ddp_rank(cfg, say=say, launcher="collsim")

    return serve_rank(result_path, produce)


if __name__ == "__main__":  # pragma: no cover - run in the worker processes
    exit_rank(_main(sys.argv[1:]))
