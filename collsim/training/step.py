"""One data-parallel training iteration (PyTorch DDP) with NCCL or Gloo: compute, the Reducer's buckets, overlap.

The iteration is simulated on the fluid engine, as the rest of collsim: the GPU is two resources, its SMs (FLOP/s
at the compute dtype's peak times an efficiency) and its HBM (bytes/s times an efficiency). A layer is a flow of
its FLOPs that also consumes its memory traffic, so it runs at the roofline ``max(F / flops, M / bandwidth)`` and
slows when something else takes SMs or HBM. The collectives themselves come from the backends' simulations
(callables the caller passes, :class:`NcclCosts` and :class:`GlooRunner`), so this layer never knows a link.

What runs, after PyTorch (``torch/nn/parallel/distributed.py`` and ``torch/csrc/distributed/c10d/reducer.cpp``):

* forward, layer by layer; backward in reverse; when a layer's backward ends its parameters' gradients are ready
  and the Reducer copies each into its bucket, divided by the world size (``mark_variable_ready_dense``), on the
  compute stream;
* a bucket is all-reduced when all its gradients are ready, strictly in bucket order (``mark_bucket_ready`` only
  launches from ``next_bucket_``);
* NCCL: each allreduce is a kernel on NCCL's own stream, in launch order, for as long as NCCL's simulation of that
  bucket says; while it runs its CTAs hold ``channels`` SMs (one thread block per channel) and it moves its HBM
  traffic, so a layer overlapping it computes on the other SMs and the HBM bandwidth left;
* Gloo (CUDA tensors): each allreduce goes to ProcessGroupGloo's worker threads (D2H copy, CPU ring over TCP, H2D
  copy; :func:`~collsim.backends.gloo.simulate_gloo_many` with the buckets' issue times), and the GPU keeps
  computing at full speed;
* at the end of backward ``finalize_backward`` waits for every bucket, then copies the reduced buckets back into
  the gradients (not with ``gradient_as_bucket_view``); then the optimizer step (memory-bound, per element).

Activation checkpointing (``DdpConfig.activation_checkpointing``): each checkpointed block's forward runs again on
the compute stream right before its first backward kernel (:func:`checkpoint_regions`), which moves every later
bucket's readiness by it.

Not modelled: data loading, the forward's buffer broadcast (``broadcast_buffers``, BatchNorm statistics), the
autograd engine's CPU overheads, kernel launch gaps between layers, unused parameters.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import simpy

from collsim.engine import FluidNetwork, Owner, Resource, Tag
from collsim.training.model import DTYPE_BYTES, ModelSpec, block_pattern_hint, layer_blocks
from collsim.training.reducer import Bucket, ddp_buckets

__all__ = [
    "BucketTiming",
    "DdpConfig",
    "GlooCpuWork",
    "GlooRunner",
    "GlooTimes",
    "GpuCompute",
    "NcclCosts",
    "Span",
    "StepConstants",
    "StepResult",
    "checkpoint_note",
    "checkpoint_regions",
    "clip_costs",
    "simulate_ddp_step",
]

Proc = Generator[simpy.Event, Any, None]

_COMPUTE = Tag("compute", "reduce", "")
_COMM = Tag("NCCL kernel", "send", "")
_GLOO = Tag("Gloo allreduce (CPU)", "reduce", "")
_OWNER = Owner(0, None, "rank", "")
COMPRESSIONS = {"none": None, "fp16": "float16", "bf16": "bfloat16"}


@dataclass(frozen=True)
class GpuCompute:
    """What one GPU computes with.

    Parameters
    ----------
    name : str
        The GPU preset, for reports.
    peak_flops : float
        Dense peak of the compute dtype, FLOP/s (the preset's ``peak_tflops`` x 1e12).
    hbm_bandwidth : float
        Device memory bandwidth, bytes/s.
    sm_count : int
        Streaming multiprocessors.
    compute_efficiency, memory_efficiency : float
        Fractions of ``peak_flops`` and ``hbm_bandwidth`` a training step sustains (0 < x <= 1).
    cores : float
        CPU ranks only: the cores one rank's process has (the host's cores over its processes), which its compute
        thread(s) and Gloo's worker threads share; 0 for a GPU rank (its kernels do not run on CPU cores).
    compute_threads : float
        CPU ranks: cores one compute kernel keeps busy at full speed (torch's intra-op threads; torchrun sets
        ``OMP_NUM_THREADS=1``).
    write_allocate : float
        Bytes of memory read per byte a kernel stores to memory it did not read (a copy's destination): 0 on a GPU,
        whose stores of whole sectors fetch nothing; on a CPU rank ``cpu_write_allocate_bytes_per_byte`` of
        ``topologies/software/training.yaml`` (a store that misses the cache reads the line first).
    first_touch_bw : float
        CPU ranks: bytes/s at which one thread faults in the pages of a fresh mapping (the CPU preset's
        ``first_touch_bw``); 0: not given, and fresh allocations cost nothing more.
    fresh_mapping_bytes : float
        CPU ranks: host allocations of at least this many bytes are new mappings every time (``gloo.yaml``
        ``fresh_mapping_bytes``: glibc's largest mmap threshold, 32 MiB), bytes.
    """

    name: str
    peak_flops: float
    hbm_bandwidth: float
    sm_count: int
    compute_efficiency: float
    memory_efficiency: float
    cores: float = 0.0
    compute_threads: float = 1.0
    write_allocate: float = 0.0
    first_touch_bw: float = 0.0
    fresh_mapping_bytes: float = math.inf

    def fault_seconds(self, nbytes: float) -> float:
        """Seconds one thread spends faulting in a new allocation of ``nbytes`` bytes as it first writes it: its
        size over ``first_touch_bw`` where it is a fresh mapping (at least ``fresh_mapping_bytes``), else 0 (heap
        memory the process has touched before, or no figure).

        >>> cpu = GpuCompute("cpu", 1e12, 60e9, 0, 1.0, 1.0, 2.0, 1.0, 1.0, 2.5e9, 2**25)
        >>> cpu.fault_seconds(2**26), cpu.fault_seconds(2**24)
        (0.0268435456, 0.0)
        """
        if self.first_touch_bw <= 0 or nbytes < self.fresh_mapping_bytes:
            return 0.0
        return nbytes / self.first_touch_bw

    def copy_bytes(self, nbytes: float) -> float:
        """Memory traffic of copying ``nbytes`` bytes into a destination the kernel does not read, bytes: one read,
        one write, and the write-allocate reads of the destination's lines (``write_allocate``)."""
        return (2.0 + self.write_allocate) * nbytes

    @property
    def flops(self) -> float:
        """Sustained FLOP/s."""
        return self.peak_flops * self.compute_efficiency

    @property
    def bandwidth(self) -> float:
        """Sustained HBM bytes/s."""
        return self.hbm_bandwidth * self.memory_efficiency


@dataclass(frozen=True)
class StepConstants:
    """``topologies/software/training.yaml``: bytes of HBM traffic per byte or element of DDP's kernels."""

    copy_in_bytes_per_byte: float
    copy_out_bytes_per_byte: float
    optimizer_traffic: dict[str, tuple[float, float]]  # name -> (parameter, state) passes per element
    nccl_hbm_bytes_per_step_byte: float

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> StepConstants:
        """From the YAML file's mapping."""
        opt = {k: (float(v["param"]), float(v["state"])) for k, v in data["optimizer_traffic"].items()}
        return cls(
            float(data["copy_in_bytes_per_byte"]),
            float(data["copy_out_bytes_per_byte"]),
            opt,
            float(data["nccl_hbm_bytes_per_step_byte"]),
        )


@dataclass(frozen=True)
class DdpConfig:
    """One DDP configuration.

    Parameters
    ----------
    batch_size : int
        Samples per GPU per micro-step.
    bucket_cap_mb : float, optional
        DDP's ``bucket_cap_mb`` (MiB). ``None``, DDP's default: 25 MiB after a first bucket of 1 MiB; any value
        given, even 25, caps every bucket alike (torch 2.13 ``_BucketCapacityConfig``; see
        :func:`~collsim.training.ddp_buckets`).
    gradient_as_bucket_view : bool
        DDP's flag: no copy back after the allreduce.
    accumulation : int
        Micro-steps per optimizer step; the first ``accumulation - 1`` run under ``no_sync`` (no communication).
    compression : str
        ``none``, ``fp16`` or ``bf16`` (PyTorch's ``fp16_compress_hook`` / ``bf16_compress_hook``).
    optimizer : str
        A key of the constants' ``optimizer_traffic``: ``none``, ``sgd``, ``momentum``, ``adam``.
    first_iteration : bool
        Simulate DDP's first iteration (one bucket: no overlap) instead of a steady one (rebuilt buckets).
    activation_checkpointing : bool
        The blocks ``checkpoint_blocks`` names run under ``torch.utils.checkpoint``: their forward is recomputed in
        the backward (:func:`checkpoint_regions`).
    checkpoint_blocks : str, optional
        The checkpointed blocks as a layer-name pattern (:func:`~collsim.training.model.layer_blocks`); default the
        most common ``prefix.N`` blocks.
    checkpoint_early_stop : bool
        The non-reentrant checkpoint's early stop (torch's default); False: each block's whole forward again.
    gradient_clipping : bool
        ``torch.nn.utils.clip_grad_norm_`` after the backward, before the optimizer (:func:`clip_costs`).
    """

    batch_size: int = 32
    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool = False
    accumulation: int = 1
    compression: str = "none"
    optimizer: str = "sgd"
    first_iteration: bool = False
    activation_checkpointing: bool = False
    checkpoint_blocks: str | None = None
    checkpoint_early_stop: bool = True
    gradient_clipping: bool = False


#: An NCCL allreduce of ``nbytes`` (per rank) on the cluster -> (seconds, channels), as NCCL's simulation says.
NcclCosts = Callable[[int], tuple[float, int]]


class GlooTimes(NamedTuple):
    """One Gloo allreduce of a training step, in seconds from the iteration's start: when a worker thread took it
    (the earliest rank's), when that thread was free again (ProcessGroupGloo frees it before the non-blocking copy
    back of CUDA tensors), and when it was done on every rank (the copy back included)."""

    start: float
    freed: float
    end: float


#: Gloo allreduces of ``sizes`` bytes issued at ``issue_at`` seconds on every rank -> each one's :class:`GlooTimes`.
GlooRunner = Callable[[Sequence[int], Sequence[float]], Sequence[GlooTimes]]
#: CPU ranks: core-seconds one rank's Gloo allreduce of ``nbytes`` spends (reduction, TCP stack), as Gloo's model says.
GlooCpuWork = Callable[[int], float]


@dataclass(frozen=True)
class Span:
    """One bar of the iteration's timeline: ``lane`` (``compute``, ``NCCL stream``, ``Gloo thread 0`` ...),
    ``label``, ``start`` and ``end`` in seconds from the start of the iteration, and ``bucket``: the index of the
    bucket a Reducer copy, a compression cast or an allreduce works on (None for layers and the optimizer)."""

    lane: str
    label: str
    start: float
    end: float
    bucket: int | None = None


def compute_gaps(spans: Sequence[Span], iteration_s: float) -> list[tuple[float, float]]:
    """When the compute stream waits (seconds from the iteration's start): the gaps between its kernels (``spans``
    on the ``compute`` lane), from the start of the iteration to its end (``iteration_s``).

    >>> compute_gaps([Span("compute", "a", 1.0, 2.0), Span("compute", "b", 1.5, 3.0)], 4.0)
    [(0.0, 1.0), (3.0, 4.0)]
    """
    eps = 1e-9 * max(iteration_s, 1e-12)  # float noise, seconds
    gaps: list[tuple[float, float]] = []
    t = 0.0
    for s in sorted((s for s in spans if s.lane == "compute"), key=lambda s: (s.start, s.end)):
        if s.start - t > eps:
            gaps.append((t, s.start))
        t = max(t, s.end)
    if iteration_s - t > eps:
        gaps.append((t, iteration_s))
    return gaps


@dataclass(frozen=True)
class BucketTiming:
    """A bucket's life in the iteration: parameters, bytes all-reduced (after compression), when its gradients were
    all ready, when its allreduce started and ended (s), and the allreduce (``comm_s``, s: NCCL's simulation of it
    alone; Gloo: from a worker thread taking it to the end of the copy back, sharing the host with the other
    thread's bucket)."""

    index: int
    params: int
    nbytes: int
    ready_s: float
    start_s: float
    end_s: float
    comm_s: float


@dataclass(frozen=True)
class StepResult:
    """One simulated iteration of one backend.

    Attributes
    ----------
    iteration_s : float
        Seconds per optimizer step (``accumulation`` micro-steps, the last one synchronised).
    compute_s : float
        The same step on one GPU without DDP (no copies, no communication), seconds.
    comm_s : float
        Sum of the buckets' allreduce times, seconds.
    exposed_s : float
        ``iteration_s - compute_s``: what communication and DDP cost on top of the computation.
    overlap : float
        Share of the communication's wall time hidden behind computation: ``1 - exposed_s / comm_wall_s`` clipped
        to [0, 1]; with ``waited_s``, ``1 - waited_s / comm_wall_s``.
    waited_s : float or None
        FSDP: the compute stream's idle time in the iteration, waiting for collectives (its ``exposed_s`` nets the
        sharded optimizer's saving against the unsharded ``compute_s``); None for DDP, whose ``exposed_s`` it is.
    scaling_efficiency : float
        ``compute_s / iteration_s``: throughput per GPU against one GPU without DDP (weak scaling).
    reduction : str
        What each bucket's ``comm_s`` times (``"allreduce"``, FSDP's ``"reduce-scatter"``, ...); empty: the
        style's usual one.
    """

    backend: str
    world: int
    iteration_s: float
    compute_s: float
    comm_s: float
    buckets: tuple[BucketTiming, ...]
    spans: tuple[Span, ...]
    notes: tuple[str, ...] = field(default=())
    reduction: str = ""
    waited_s: float | None = None

    @property
    def exposed_s(self) -> float:
        """Seconds the iteration takes beyond the computation alone."""
        return self.iteration_s - self.compute_s

    @property
    def comm_wall_s(self) -> float:
        """``comm_s`` with the time buckets spent communicating at once counted once (Gloo's worker threads run two
        buckets together; NCCL's run one after another on its stream): seconds.

        >>> b = [BucketTiming(i, 1, 8, 0.0, s, s + 2.0, 2.0) for i, s in enumerate((0.0, 1.0))]  # 1 s together
        >>> StepResult("gloo", 2, 10.0, 9.0, 4.0, tuple(b), ()).comm_wall_s
        3.0
        """
        spans = sorted((b.end_s - b.comm_s, b.end_s) for b in self.buckets if b.comm_s > 0)
        together, reach = 0.0, -math.inf
        for start, end in spans:
            together += max(0.0, min(end, reach) - start)
            reach = max(reach, end)
        return self.comm_s - together

    @property
    def overlap(self) -> float:
        """Share of the communication's wall time hidden behind computation (0..1)."""
        wall = self.comm_wall_s
        if wall <= 0:
            return 1.0
        exposed = self.exposed_s if self.waited_s is None else self.waited_s
        return min(1.0, max(0.0, 1.0 - exposed / wall))

    @property
    def scaling_efficiency(self) -> float:
        """One GPU's iteration time over this one's (per-GPU throughput against one GPU)."""
        return self.compute_s / self.iteration_s if self.iteration_s > 0 else 1.0


# ------------------------------------------------------------------------------------------------------ the GPU
class _Gpu:
    """The GPU's two resources on a fluid network, and the kernels that run on them.

    A compute kernel of ``flops`` FLOPs and ``nbytes`` bytes of HBM traffic is one flow of its FLOPs (or, with no
    FLOPs, of its bytes) over both resources: its rate is the roofline, less what other flows take. An NCCL kernel
    is a flow capped at a rate ``c`` a million times below the GPU's FLOP/s, of ``seconds x c`` units, each unit
    holding ``1 / c`` of its SMs' share of the FLOP/s and of its HBM traffic rate: progressive filling raises every
    flow's rate together, so it freezes the NCCL flow at its cap long before any compute flow (whose rates are
    FLOP/s or bytes/s), and the kernel runs at its own speed while the compute flows share what it leaves. (Its
    coefficients stay within a few orders of magnitude of the compute flows' 1, as the engine's tolerances expect.)

    On a CPU rank (``gpu.cores > 0``) a third resource, the rank's cores (core-seconds per second), is shared by
    every compute kernel (``compute_threads`` cores at its full speed) and Gloo's worker threads
    (:meth:`gloo_thread`): when they ask for more cores than the rank has, max-min fairness splits them as the
    kernel's fair scheduler does between runnable threads.
    """

    def __init__(self, env: simpy.Environment, gpu: GpuCompute, spans: list[Span]) -> None:
        self.env = env
        self.gpu = gpu
        self.net = FluidNetwork(env)
        self.sm: Resource = self.net.resource("SMs", gpu.flops, "sm")
        self.hbm: Resource = self.net.resource("HBM", gpu.bandwidth, "hbm")
        self.cores: Resource | None = self.net.resource("cores", gpu.cores, "cpu") if gpu.cores > 0 else None
        self.spans = spans

    def kernel(
        self,
        lane: str,
        label: str,
        flops: float,
        nbytes: float,
        seconds: float | None = None,
        bucket: int | None = None,
    ) -> Proc:
        """Run one kernel. Waits for: nothing but its own streaming. Pays: its FLOPs and HBM bytes at the rate the
        other flows leave (a measured ``seconds`` stands for ``seconds`` of the whole GPU's FLOP/s). ``bucket``: the
        bucket it works on, for its span."""
        if seconds is not None:
            flops, nbytes = seconds * self.gpu.flops, 0.0
        start = self.env.now
        if flops > 0:
            uses = [(self.sm, 1.0)] + ([(self.hbm, nbytes / flops)] if nbytes > 0 else [])
            size = flops
        elif nbytes > 0:
            uses, size = [(self.hbm, 1.0)], nbytes
        else:
            return
        if self.cores is not None:  # the kernel alone runs at its roofline, keeping compute_threads cores busy
            alone = min(r.capacity / c for r, c in uses)  # units/s
            uses.append((self.cores, self.gpu.compute_threads / alone))
        _streamed, arrived = self.net.transfer(size, uses, tag=_COMPUTE, owner=_OWNER)
        yield arrived
        self.spans.append(Span(lane, label, start, self.env.now, bucket))

    def gloo_thread(
        self, label: str, lane: str, seconds: float, core_seconds: float, bucket: int | None = None
    ) -> Proc:
        """One Gloo allreduce on a worker thread of a CPU rank. Waits for: nothing. Pays: ``core_seconds`` of the
        rank's cores at most ``core_seconds / seconds`` cores at a time (its demand when it has the CPU it wants:
        then it takes ``seconds``, as Gloo's own simulation says), longer when the compute thread and the other
        worker thread leave it less."""
        start = self.env.now
        if seconds > 0 and core_seconds > 0 and self.cores is not None:
            # in units of core-seconds x the compute flows' FLOP/s, so that both kinds of flow have rates of one
            # scale (the engine's tolerances are absolute in units)
            unit = self.gpu.flops
            _s, arrived = self.net.transfer(core_seconds * unit, [(self.cores, 1.0 / unit)],
                                            max_rate=core_seconds / seconds * unit, tag=_GLOO,
                                            owner=_OWNER)  # fmt: skip
            yield arrived
        elif seconds > 0:
            yield self.env.timeout(seconds)
        self.spans.append(Span(lane, label, start, self.env.now, bucket))

    def nccl(
        self,
        label: str,
        seconds: float,
        channels: int,
        hbm_bytes: float,
        bucket: int | None = None,
        lane: str = "NCCL stream",
        shared: bool = False,
    ) -> Proc:
        """Run one NCCL kernel of ``seconds``. Waits for: nothing. Pays: ``seconds``, holding ``channels`` SMs' share
        of the FLOP/s and ``hbm_bytes / seconds`` of HBM bandwidth the whole time. ``shared``: the kernel also takes
        all of one "NCCL network" resource while it runs, so that two collectives on different streams at once (FSDP's
        all-gather and reduce-scatter) split it max-min fairly and each runs at half speed while they overlap (both
        ride the same rings, links and NICs)."""
        start = self.env.now
        if seconds > 0:
            share = min(0.999, channels / self.gpu.sm_count) if self.gpu.sm_count > 0 else 0.0
            cap = 1e-6 * self.gpu.flops * (1.0 - share)  # units/s: far below any compute flow's rate
            hbm_rate = min(hbm_bytes / seconds, 0.99 * self.gpu.bandwidth)  # bytes/s, never all of it
            uses = [(self.sm, share * self.gpu.flops / cap), (self.hbm, hbm_rate / cap)]
            if shared:
                uses.append((self.net.resource("NCCL network", 1e-6 * self.gpu.flops, "net"), 1.0 / (1.0 - share)))
            _s, arrived = self.net.transfer(seconds * cap, [(r, c) for r, c in uses if c > 0], max_rate=cap,
                                            tag=_COMM, owner=_OWNER)  # fmt: skip
            yield arrived
        self.spans.append(Span(lane, label, start, self.env.now, bucket))


# ------------------------------------------------------------------------------------------------- the iteration
@dataclass
class _Plan:
    """What one iteration does, derived once: per-layer kernels, buckets, and when each bucket becomes ready."""

    model: ModelSpec
    cfg: DdpConfig
    consts: StepConstants
    buckets: list[Bucket]
    bucket_of: dict[int, int]  # param index -> bucket index
    wire_bytes: list[int]  # per bucket: bytes all-reduced (compressed)
    regions: dict[int, tuple[int, ...]]  # activation checkpointing: a region's last layer -> its layers

    @classmethod
    def build(cls, model: ModelSpec, cfg: DdpConfig, consts: StepConstants) -> _Plan:
        sizes = [(p.nbytes, p.dtype) for p in model.params]
        ready = _ready_order(model)
        buckets = ddp_buckets(sizes, cfg.bucket_cap_mb, first_iteration=cfg.first_iteration, ready_order=ready)
        bucket_of = {i: b.index for b in buckets for i in b.params}
        target = COMPRESSIONS[cfg.compression]
        wire = []
        for b in buckets:
            if target is None:
                wire.append(b.nbytes)
            else:
                elems = sum(model.params[i].numel for i in b.params)
                wire.append(elems * min(DTYPE_BYTES[target], DTYPE_BYTES[b.dtype]))
        regions = (checkpoint_regions(model, cfg.checkpoint_blocks, cfg.checkpoint_early_stop)
                   if cfg.activation_checkpointing else {})  # fmt: skip
        return cls(model, cfg, consts, buckets, bucket_of, wire, regions)


def _ready_order(model: ModelSpec) -> list[int]:
    """Parameter indices in the order their gradients become ready: layers in reverse, and within a layer its
    parameters in reverse registration order (an assumption: autograd's order inside one layer is not modelled)."""
    return [i for layer in reversed(model.layers) for i in sorted(layer.params, reverse=True)]


def _layer_costs(model: ModelSpec, i: int, batch: int, backward: bool) -> tuple[float, float, float | None]:
    """(FLOPs, HBM bytes, measured seconds or None) of layer ``i``'s forward or backward for ``batch`` samples.

    Forward reads the layer's weights once and moves ``act_bytes`` per sample; backward computes ``bwd_flops`` per
    sample, reads the weights and writes their gradients, and moves twice the forward's activation bytes (reads the
    saved activations and the incoming gradient, writes the outgoing one): an estimate, stated in the README."""
    layer = model.layers[i]
    weights = float(model.layer_param_bytes(i))
    if backward:
        return batch * layer.bwd_flops, 2 * weights + 2 * batch * layer.act_bytes, layer.bwd_time_s
    return batch * layer.fwd_flops, weights + batch * layer.act_bytes, layer.fwd_time_s


def checkpoint_regions(
    model: ModelSpec, blocks: str | None = None, early_stop: bool = True
) -> dict[int, tuple[int, ...]]:
    """Activation checkpointing's recomputation: for each checkpointed block, its last layer (forward order) and
    the layers whose forward the backward runs again right before that layer's backward.

    ``torch.utils.checkpoint`` (torch 2.13 ``torch/utils/checkpoint.py``; ``checkpoint_wrapper`` and
    ``apply_activation_checkpointing`` use it, non-reentrant by default) keeps only a block's inputs in the
    forward; when the backward reaches the block (its output's gradient arrives, before the backward of its last
    layer) the block's forward runs again, then its backward. The reentrant variant (``use_reentrant=True``) reruns
    the whole forward. The non-reentrant one with ``early_stop`` (its default) stops as soon as every tensor the
    block saved has been saved again: its recomputation hook raises ``_StopRecomputationError`` from the pack hook
    of the last one, and autograd packs an operation's saved inputs before running its kernel, its saved outputs
    after. So the recomputation ends at the block's last layer that saves anything (:attr:`Layer.saves`): before
    its kernel when it saves only inputs (a linear: a GPT-2 block's ``mlp.c_proj``, one of its two largest matmuls,
    is not run again), after it when it saves outputs; the layers after it, which save nothing, are not run again.

    Parameters
    ----------
    model : ModelSpec
        The layers.
    blocks : str, optional
        The checkpointed blocks, a layer-name pattern (:func:`~collsim.training.model.layer_blocks`); default the
        most common ``prefix.N`` blocks.
    early_stop : bool
        The non-reentrant checkpoint's early stop (torch's default); False: the whole block again (the reentrant
        variant, or ``set_checkpoint_early_stop(False)``).

    Returns
    -------
    dict of int to tuple of int
        The last layer of each block -> the layers run again, forward order (empty where nothing needs to be).

    Raises
    ------
    ValueError
        When the pattern names no layer of the model.

    Examples
    --------
    >>> from collsim.training import load_model
    >>> gpt = load_model("gpt2-xl")
    >>> regions = checkpoint_regions(gpt)
    >>> len(regions), [gpt.layers[i].name for i in regions[min(regions)]][-2:]
    (48, ['transformer.h.0.mlp.c_fc', 'transformer.h.0.mlp.act'])
    >>> [gpt.layers[i].name for i in checkpoint_regions(gpt, early_stop=False)[min(regions)]][-1]
    'transformer.h.0:add2'
    """
    keys = layer_blocks([ly.name for ly in model.layers], blocks)
    members: dict[str, list[int]] = {}
    for i, key in enumerate(keys):
        if key:
            members.setdefault(key, []).append(i)
    if not members:
        what = f"pattern {blocks!r}" if blocks is not None else "no prefix.N blocks in its layer names; the default"
        names = [ly.name for ly in model.layers]
        raise ValueError(f"activation checkpointing: {what} matches no layer of model {model.name!r} "
                         f"({block_pattern_hint(names)})")  # fmt: skip
    out = {}
    for layers in members.values():
        again = layers
        if early_stop:  # up to the last layer that saves anything: its kernel too if it saves what it computes
            saving = [k for k, i in enumerate(layers) if model.layers[i].saves != "nothing"]
            if not saving:
                again = []
            else:
                last = saving[-1]
                again = layers[: last + 1] if model.layers[layers[last]].saves == "outputs" else layers[:last]
        out[layers[-1]] = tuple(again)
    return out


def recompute_kernels(
    model: ModelSpec, regions: dict[int, tuple[int, ...]], i: int, batch: int
) -> list[tuple[str, tuple[float, float, float | None]]]:
    """The kernels activation checkpointing runs right before layer ``i``'s backward, as (label, costs of
    :func:`_layer_costs`): the forward again of the block ``i`` ends (:func:`checkpoint_regions`), none otherwise."""
    return [(f"recompute {model.layers[j].name}", _layer_costs(model, j, batch, False)) for j in regions.get(i, ())]


def _recompute(gpu: _Gpu, plan: _Plan, i: int) -> Proc:
    """The forward of layer ``i``'s checkpointed block again, on the compute stream, if ``i`` ends one (the backward
    reaches it next)."""
    for label, costs in recompute_kernels(plan.model, plan.regions, i, plan.cfg.batch_size):
        yield from gpu.kernel("compute", label, *costs)


def clip_costs(grad_bytes: float) -> tuple[float, float]:
    """Memory traffic of ``clip_grad_norm_`` over ``grad_bytes`` bytes of gradients, bytes: (the norm, the scaling).

    torch 2.13 ``torch/nn/utils/clip_grad.py``: ``_get_total_norm`` reads every gradient once
    (``torch._foreach_norm``, then the norm of the per-tensor norms), ``_clip_grads_with_norm_`` multiplies each in
    place by the clamped coefficient (``torch._foreach_mul_``: a read and a write), with no host synchronisation
    (the clamp avoids ``if clip_coef < 1``). FSDP's own ``clip_grad_norm_`` does the same on the local shards, with
    an all-reduce of the norm between (:mod:`collsim.training.fsdp`).

    >>> clip_costs(100.0)
    (100.0, 200.0)
    """
    return grad_bytes, 2.0 * grad_bytes


def _clip_kernels(gpu: _Gpu, model: ModelSpec) -> Proc:
    """``clip_grad_norm_`` over every gradient on the compute stream (DDP, or one GPU): the norm, then the scaling
    (:func:`clip_costs`); no collective, DDP's gradients being the same on every rank."""
    norm, scale = clip_costs(sum(p.nbytes for p in model.params))
    yield from gpu.kernel("compute", "clip: gradient norm", 0.0, norm)
    yield from gpu.kernel("compute", "clip: scale gradients", 0.0, scale)


def _optimizer_bytes(model: ModelSpec, consts: StepConstants, optimizer: str) -> float:
    """HBM bytes of one optimizer step over every parameter: the parameter's and gradient's passes and the state
    buffers', all in the parameter's dtype (torch/optim/adam.py ``_init_group``: ``exp_avg`` and ``exp_avg_sq`` are
    ``torch.zeros_like(p)``; sgd.py's momentum buffer ``torch.clone(grad)``): bf16 parameters keep bf16 state."""
    per_param, per_state = consts.optimizer_traffic[optimizer]
    return sum(p.numel * (per_param + per_state) * DTYPE_BYTES[p.dtype] for p in model.params)


def _accumulate_grads(gpu: _Gpu, model: ModelSpec, i: int) -> Proc:
    """Autograd's ``AccumulateGrad`` for layer ``i``'s parameters in a micro-step after the first: the new gradient
    is added in place into the ``.grad`` the earlier micro-steps left (``zero_grad`` sets it to None, so the first
    micro-step keeps the new one as it is), reading both and writing one: 3 bytes per gradient byte. On one GPU, and
    under DDP's ``no_sync`` and in its synchronised micro-step alike (the Reducer's hook runs after it)."""
    nbytes = sum(model.params[p].nbytes for p in model.layers[i].params)
    yield from gpu.kernel("compute", f"accumulate gradient {model.layers[i].name}", 0.0, 3.0 * nbytes)


def _micro_step(gpu: _Gpu, plan: _Plan, accumulate: bool) -> Proc:
    """One forward and backward with nothing else (one GPU, or DDP under ``no_sync``); ``accumulate``: not the
    first micro-step, the gradients add into ``.grad`` (:func:`_accumulate_grads`)."""
    model, batch = plan.model, plan.cfg.batch_size
    for i, layer in enumerate(model.layers):
        yield from gpu.kernel("compute", f"fwd {layer.name}", *_layer_costs(model, i, batch, False))
    for i in reversed(range(len(model.layers))):
        yield from _recompute(gpu, plan, i)
        yield from gpu.kernel("compute", f"bwd {model.layers[i].name}", *_layer_costs(model, i, batch, True))
        if accumulate:
            yield from _accumulate_grads(gpu, model, i)


def _compute_only(env: simpy.Environment, gpu: _Gpu, plan: _Plan, micro_steps: int) -> Proc:
    """``micro_steps`` forwards and backwards and one optimizer step, nothing else: one GPU without DDP."""
    model = plan.model
    for step in range(micro_steps):
        yield from _micro_step(gpu, plan, step > 0)
    if plan.cfg.gradient_clipping:  # one GPU clips its own gradients too: the two passes, no collective
        yield from _clip_kernels(gpu, model)
    yield from gpu.kernel("compute", "optimizer", 0.0, _optimizer_bytes(model, plan.consts, plan.cfg.optimizer))


def _ddp_iteration(
    env: simpy.Environment,
    gpu: _Gpu,
    plan: _Plan,
    launch: Callable[[int], object],
    all_done: Callable[[], simpy.Event],
    ready_at: list[float],
) -> Proc:
    """The synchronised micro-step on the compute stream (the ``no_sync`` ones run before it: the layers and, from
    the second micro-step, ``AccumulateGrad``'s adds, :func:`_micro_step`).

    Waits for: each layer's kernels in order; at the end, every bucket's allreduce (``all_done``). Pays: the layers,
    with several micro-steps each gradient's add into ``.grad`` (:func:`_accumulate_grads`), the Reducer's copy-in
    (divided by the world size, or the compression hook's cast and divide) as each gradient is ready, the copy back
    after the last allreduce, and the optimizer. ``launch(b)`` hands bucket ``b`` to the backend the moment it is
    next in order and complete; ``ready_at[b]`` records that moment.
    """
    model, cfg, consts = plan.model, plan.cfg, plan.consts
    batch = cfg.batch_size
    for step in range(cfg.accumulation - 1):  # no_sync: gradients accumulate in param.grad, no Reducer work
        yield from _micro_step(gpu, plan, step > 0)
    for i, layer in enumerate(model.layers):
        yield from gpu.kernel("compute", f"fwd {layer.name}", *_layer_costs(model, i, batch, False))
    pending = [len(b.params) for b in plan.buckets]
    nxt = 0
    compress = COMPRESSIONS[cfg.compression]
    for i in reversed(range(len(model.layers))):
        layer = model.layers[i]
        yield from _recompute(gpu, plan, i)
        yield from gpu.kernel("compute", f"bwd {layer.name}", *_layer_costs(model, i, batch, True))
        if cfg.accumulation > 1:  # AccumulateGrad adds into what no_sync kept, then the Reducer's hook copies it
            yield from _accumulate_grads(gpu, model, i)
        for p in sorted(layer.params, reverse=True):
            nbytes = model.params[p].nbytes
            # copy into the bucket and divide by the world size (no hook), or a plain copy (hook registered; a
            # bucket-view gradient needs none: the hook divides the compressed copy)
            copy = consts.copy_in_bytes_per_byte * nbytes
            if not cfg.gradient_as_bucket_view:  # the bucket is stored to, not read: a CPU reads its lines first
                copy += gpu.gpu.write_allocate * nbytes
            elif compress is not None:
                copy = 0.0
            yield from gpu.kernel("compute", f"copy-in {model.params[p].name}", 0.0, copy, bucket=plan.bucket_of[p])
            pending[plan.bucket_of[p]] -= 1
        while nxt < len(plan.buckets) and pending[nxt] == 0:
            if compress is not None:  # the hook: buffer.to(half).div_(world): read full, write half, read+write half
                full, half = plan.buckets[nxt].nbytes, plan.wire_bytes[nxt]
                cast = full + (3 + gpu.gpu.write_allocate) * half  # the cast's output is stored to, not read
                yield from gpu.kernel("compute", f"compress bucket {nxt}", 0.0, cast, bucket=nxt)
            ready_at[nxt] = env.now
            launch(nxt)
            nxt += 1
    yield all_done()
    if not cfg.gradient_as_bucket_view:
        grads = sum(p.nbytes for p in model.params)
        copy_out = (consts.copy_out_bytes_per_byte + gpu.gpu.write_allocate) * grads  # param.grad: stored, not read
        yield from gpu.kernel("compute", "copy-out", 0.0, copy_out)
    if cfg.gradient_clipping:
        yield from _clip_kernels(gpu, model)
    yield from gpu.kernel("compute", "optimizer", 0.0, _optimizer_bytes(model, consts, cfg.optimizer))


def simulate_ddp_step(
    model: ModelSpec,
    cfg: DdpConfig,
    gpu: GpuCompute,
    consts: StepConstants,
    world: int,
    *,
    nccl: NcclCosts | None = None,
    gloo: GlooRunner | None = None,
    gloo_threads: int = 2,
    gloo_cpu: GlooCpuWork | None = None,
    straggle_s: float = 0.0,
) -> StepResult:
    """Simulate one DDP iteration with NCCL (``nccl`` given) or Gloo (``gloo`` given).

    Parameters
    ----------
    model : ModelSpec
        Parameters (registration order) and layers (forward order).
    cfg : DdpConfig
        Batch, buckets, hooks, optimizer.
    gpu : GpuCompute
        Each rank's GPU (all alike).
    consts : StepConstants
        ``topologies/software/training.yaml``.
    world : int
        Ranks (one GPU each).
    nccl, gloo
        Exactly one: the backend's allreduce times.
    gloo_threads : int
        ProcessGroupGloo's worker threads per rank (for the timeline's lanes; ``gloo`` already queues on them).
    gloo_cpu : callable, optional
        CPU ranks (``gpu.cores > 0``): core-seconds of one rank's Gloo allreduce of n bytes. Then the compute
        thread and Gloo's worker threads share the rank's cores (:func:`_with_gloo_on_cpu`); without it, or on GPU
        ranks, the computation runs undisturbed by Gloo.
    straggle_s : float
        NCCL: the slowest rank's launch delay, seconds (``perturb.ranks``), with ``nccl`` pricing the buckets
        without it: each bucket launches that late after it is ready (:func:`_with_nccl`). Gloo's runner carries
        its stragglers itself.

    Returns
    -------
    StepResult
    """
    if (nccl is None) == (gloo is None):
        raise ValueError("simulate_ddp_step: give exactly one of nccl= and gloo=")
    if cfg.optimizer not in consts.optimizer_traffic:
        raise ValueError(f"unknown optimizer {cfg.optimizer!r}; expected one of {', '.join(consts.optimizer_traffic)}")
    if cfg.compression not in COMPRESSIONS:
        raise ValueError(f"unknown compression {cfg.compression!r}; expected one of {', '.join(COMPRESSIONS)}")
    if cfg.accumulation < 1 or cfg.batch_size < 1:
        raise ValueError("accumulation and batch_size must be at least 1")
    plan = _Plan.build(model, cfg, consts)
    compute_s = _run_compute_only(gpu, plan)
    if nccl is not None:
        return _with_nccl(plan, gpu, consts, world, nccl, compute_s, straggle_s)
    assert gloo is not None
    if gpu.cores > 0 and gloo_cpu is not None and world > 1:
        return _with_gloo_on_cpu(plan, gpu, world, gloo, gloo_cpu, compute_s, gloo_threads)
    return _with_gloo(plan, gpu, world, gloo, compute_s, gloo_threads)


def _run_compute_only(gpu: GpuCompute, plan: _Plan) -> float:
    env = simpy.Environment()
    proc = env.process(_compute_only(env, _Gpu(env, gpu, []), plan, plan.cfg.accumulation))
    env.run(proc)
    return float(env.now)


def _with_nccl(
    plan: _Plan, gpu: GpuCompute, consts: StepConstants, world: int, nccl: NcclCosts, compute_s: float,
    straggle_s: float = 0.0,
) -> StepResult:
    """The synchronised micro-step with NCCL's stream: kernels in launch order, each holding its SMs and HBM.

    A straggler (``straggle_s``, the largest rank's launch delay; ``nccl`` then prices each bucket without it)
    launches each bucket that late after it is ready; the others' kernels, launched on time, wait inside for it: a
    bucket's kernel ends at max(ready + straggle_s, the previous one's end) + its time, so the delay is paid once
    where the buckets queue, not once a bucket."""
    env = simpy.Environment()
    spans: list[Span] = []
    g = _Gpu(env, gpu, spans)
    n = len(plan.buckets)
    launched = [env.event() for _ in range(n)]
    finished = env.event()
    ready_at = [math.nan] * n
    starts, ends, durations = [math.nan] * n, [math.nan] * n, [0.0] * n
    steps = 2.0 * (world - 1) / world if world > 1 else 0.0  # ring allreduce: 2(n-1) steps of S/n per byte

    def stream() -> Proc:
        for b in range(n):
            yield launched[b]
            seconds, channels = nccl(plan.wire_bytes[b]) if world > 1 else (0.0, 0)
            if world > 1 and straggle_s > 0:  # waiting inside the kernel for the straggler's launch
                seconds += max(0.0, ready_at[b] + straggle_s - env.now)
            durations[b] = seconds
            starts[b] = env.now
            hbm = consts.nccl_hbm_bytes_per_step_byte * steps * plan.wire_bytes[b]
            yield from g.nccl(f"allreduce bucket {b}", seconds, channels, hbm, bucket=b)
            target = COMPRESSIONS[plan.cfg.compression]
            if target is not None:  # the hook's decompression (buffer.copy_(fut.value()[0])): read half, write full
                yield from g.kernel("NCCL stream", f"decompress bucket {b}", 0.0,
                                    plan.wire_bytes[b] + plan.buckets[b].nbytes, bucket=b)  # fmt: skip
            ends[b] = env.now
        finished.succeed()

    env.process(stream())
    main = env.process(_ddp_iteration(env, g, plan, lambda b: launched[b].succeed(), lambda: finished, ready_at))
    env.run(main)
    buckets = tuple(
        BucketTiming(k, len(b.params), plan.wire_bytes[k], ready_at[k], starts[k], ends[k], durations[k])
        for k, b in enumerate(plan.buckets)
    )
    return StepResult("nccl", world, float(env.now), compute_s, sum(durations), buckets, tuple(spans),
                      _notes(plan))  # fmt: skip


def _with_gloo(
    plan: _Plan, gpu: GpuCompute, world: int, gloo: GlooRunner, compute_s: float, threads: int
) -> StepResult:
    """The synchronised micro-step with Gloo: the GPU computes undisturbed; buckets go to the worker threads when
    ready (their ends from Gloo's simulation of all of them together), then the copy back and the optimizer."""
    # pass 1: when each bucket is ready (the compute stream does not wait for Gloo until the end)
    env = simpy.Environment()
    spans: list[Span] = []
    g = _Gpu(env, gpu, spans)
    n = len(plan.buckets)
    ready_at = [math.nan] * n
    gate = env.event()
    env.process(_ddp_iteration(env, g, plan, lambda b: None, lambda: gate, ready_at))
    env.run()  # stops at the all_done wait: every bucket is ready by then
    backward_end = float(env.now)
    # also with one rank: DDP all-reduces every bucket whatever the world size (a comm hook sees each call, torch
    # 2.13), and ProcessGroupGloo still copies CUDA tensors to the host and back around its one-rank allreduce
    times = list(gloo([plan.wire_bytes[b] for b in range(n)], ready_at))
    ends = [t.end for t in times]
    # pass 2: the same iteration, the final wait released when the last allreduce is done
    env = simpy.Environment()
    spans = []
    g = _Gpu(env, gpu, spans)
    last = max([backward_end, *ends])

    def release() -> simpy.Event:
        return env.timeout(max(0.0, last - env.now))

    main = env.process(_ddp_iteration(env, g, plan, lambda b: None, release, [math.nan] * n))
    env.run(main)
    buckets = []
    for b, k in enumerate(_thread_lanes(times, threads)):
        # a bucket's comm runs from when a worker thread takes it to the end of its copy back (Gloo's simulation)
        start = times[b].start
        buckets.append(BucketTiming(b, len(plan.buckets[b].params), plan.wire_bytes[b], ready_at[b], start,
                                    ends[b], ends[b] - start))  # fmt: skip
        spans.append(Span(f"Gloo thread {k}", f"allreduce bucket {b}", start, ends[b], b))
    return StepResult("gloo", world, float(env.now), compute_s, sum(x.comm_s for x in buckets), tuple(buckets),
                      tuple(spans), _notes(plan))  # fmt: skip


#: Rounds of the fixed point between Gloo's simulation and the cores the computation leaves it (CPU ranks); the
#: ready times typically settle in two or three.
_CPU_ROUNDS = 6


def _thread_lanes(times: Sequence[GlooTimes], threads: int) -> list[int]:
    """Which worker thread (0 .. ``threads`` - 1) runs each allreduce, for the timeline's lanes: in issue order
    (ProcessGroupGloo's queue is first come, first served) the thread free first, free again when Gloo's
    simulation freed it.

    >>> _thread_lanes([GlooTimes(0, 2, 3), GlooTimes(0, 1, 1.5), GlooTimes(1, 4, 5)], 2)
    [0, 1, 1]
    """
    free = [0.0] * max(1, threads)
    lanes = []
    for t in times:
        k = min(range(len(free)), key=lambda j: (free[j], j))
        lanes.append(k)
        free[k] = t.freed
    return lanes


def _with_gloo_on_cpu(
    plan: _Plan, gpu: GpuCompute, world: int, gloo: GlooRunner, cpu_work: GlooCpuWork, compute_s: float,
    threads: int,
) -> StepResult:  # fmt: skip
    """The synchronised micro-step on CPU ranks: the compute thread and Gloo's worker threads share the cores.

    Gloo's simulation of the buckets, issued when they are ready, gives each allreduce's duration when it has the
    CPU it wants and :data:`GlooCpuWork` its core-seconds; on the rank's cores (:class:`_Gpu`) each allreduce is
    then a demand of ``core-seconds / duration`` cores on its worker thread beside the compute kernels, and
    max-min fairness slows both while they overlap. The computation's new ready times go back to Gloo's
    simulation until they settle (at most :data:`_CPU_ROUNDS` rounds; the last is kept and said in the notes).
    """
    n = len(plan.buckets)
    lanes = max(1, threads)
    ready = _gloo_pass_ready(plan, gpu)
    work = [cpu_work(w) for w in plan.wire_bytes]
    settled = False
    for _ in range(_CPU_ROUNDS):
        durations = [t.end - t.start for t in gloo(plan.wire_bytes, ready)]
        result, new_ready = _cpu_coupled(plan, gpu, world, durations, work, compute_s, lanes)
        settled = all(math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for a, b in zip(ready, new_ready, strict=True))
        ready = new_ready
        if settled:
            break
    note = ("CPU ranks: the compute thread and Gloo's worker threads share the process's cores "
            f"({gpu.cores:g} cores, {gpu.compute_threads:g} compute thread(s))")  # fmt: skip
    if not settled:
        note += f"; the ready times had not settled after {_CPU_ROUNDS} rounds"
    return dataclasses.replace(result, notes=(*result.notes, note)) if n else result


def _gloo_pass_ready(plan: _Plan, gpu: GpuCompute) -> list[float]:
    """When each bucket is ready with the computation undisturbed (the compute stream waits only at the end)."""
    env = simpy.Environment()
    ready_at = [math.nan] * len(plan.buckets)
    gate = env.event()
    env.process(_ddp_iteration(env, _Gpu(env, gpu, []), plan, lambda b: None, lambda: gate, ready_at))
    env.run()
    return ready_at


def _cpu_coupled(
    plan: _Plan, gpu: GpuCompute, world: int, durations: Sequence[float], work: Sequence[float], compute_s: float,
    threads: int,
) -> tuple[StepResult, list[float]]:  # fmt: skip
    """One iteration with Gloo's allreduces on worker threads sharing the rank's cores with the computation: each
    thread takes the next ready bucket (first come, first served) and spends its core-seconds
    (:meth:`_Gpu.gloo_thread`); the compute stream waits for all of them at the end."""
    env = simpy.Environment()
    spans: list[Span] = []
    g = _Gpu(env, gpu, spans)
    n = len(plan.buckets)
    queue: simpy.Store = simpy.Store(env)
    ready_at = [math.nan] * n
    starts, ends = [math.nan] * n, [math.nan] * n
    done = [env.event() for _ in range(n)]

    def worker(k: int) -> Proc:
        while True:
            b = yield queue.get()
            starts[b] = env.now
            yield from g.gloo_thread(f"allreduce bucket {b}", f"Gloo thread {k}", durations[b], work[b], b)
            ends[b] = env.now
            done[b].succeed()

    for k in range(threads):
        env.process(worker(k))
    main = env.process(_ddp_iteration(env, g, plan, queue.put, lambda: simpy.AllOf(env, done), ready_at))
    env.run(main)
    buckets = tuple(
        BucketTiming(
            b, len(plan.buckets[b].params), plan.wire_bytes[b], ready_at[b], starts[b], ends[b], ends[b] - starts[b]
        )
        for b in range(n)
    )
    result = StepResult("gloo", world, float(env.now), compute_s, sum(x.comm_s for x in buckets), buckets,
                        tuple(spans), _notes(plan))  # fmt: skip
    return result, ready_at


def _notes(plan: _Plan) -> tuple[str, ...]:
    cfg = plan.cfg
    out = [
        f"{len(plan.buckets)} bucket(s)"
        + (" (first iteration: one bucket per dtype, no overlap)" if cfg.first_iteration else "")
        + (f", bucket_cap_mb {cfg.bucket_cap_mb:g}" if cfg.bucket_cap_mb is not None else ", DDP's default buckets")
    ]
    if cfg.accumulation > 1:
        out.append(f"{cfg.accumulation - 1} no_sync micro-step(s) before the synchronised one")
    if cfg.compression != "none":
        out.append(f"{cfg.compression} compression hook: allreduce of half the bytes, a cast each way")
    if plan.regions:
        out.append(checkpoint_note(plan.model, plan.regions))
    if cfg.gradient_clipping:
        out.append("clip_grad_norm_ before the optimizer: a read of every gradient (the norm), a read and write (the "
                   "scaling); no collective, the gradients are the same on every rank")
    return tuple(out)


def checkpoint_note(model: ModelSpec, regions: dict[int, tuple[int, ...]]) -> str:
    """What a step's note says of activation checkpointing: the blocks and the share of the forward run again."""
    again = sum(model.layers[j].fwd_flops for layers in regions.values() for j in layers)
    total = sum(layer.fwd_flops for layer in model.layers)
    share = f" ({again / total:.0%} of the forward's FLOPs)" if total > 0 else ""
    return (f"activation checkpointing: {len(regions)} block(s) run their forward again in the backward{share}, "
            "before their first backward kernel")  # fmt: skip
