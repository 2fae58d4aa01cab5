"""One FSDP training iteration (PyTorch ``FullyShardedDataParallel``) with NCCL or Gloo: units, all-gathers,
reduce-scatters.

The iteration runs on the same GPU model as DDP's (:class:`~collsim.training.step._Gpu`: SMs and HBM as engine
resources, NCCL kernels holding one SM per channel and their HBM traffic). What FSDP does differs, after PyTorch's
``torch/distributed/fsdp/_runtime_utils.py`` (torch 2.13, FSDP1):

* **Units.** The model is cut into FSDP units (one per wrapped module, e.g. each transformer block with
  ``transformer_auto_wrap_policy``); the parameters outside every wrapped module belong to the root unit. Each unit
  keeps a 1/world shard of its flat parameter (padded to a multiple of world, ``FlatParamHandle``).
* **Streams.** All-gathers run on ``_unshard_stream`` and reduce-scatters on ``_post_backward_stream``
  (``_init_streams``), each in issue order; the compute stream waits for the unshard stream before a unit computes
  (``current_stream.wait_stream(state._unshard_stream)`` in ``_pre_forward_unshard`` and ``_pre_backward_hook``),
  and for the post-backward stream at the end of backward (``_wait_for_post_backward``).
* **Forward.** The root unit is all-gathered first and never freed after forward (``_post_forward_reshard``: not
  the root with FULL_SHARD); every other unit is all-gathered before its forward and, with FULL_SHARD, freed after
  it (``_reshard``). ``forward_prefetch`` issues the next unit's all-gather after the current one's wait.
* **Backward.** Each unit's pre-backward hook all-gathers it again (FULL_SHARD; not with SHARD_GRAD_OP) unless it was
  prefetched, waits for the unshard stream, then with ``BACKWARD_PRE`` (the default) prefetches the next unit in
  backward order; its post-backward hook (when all its gradients are ready) frees it, and issues on the
  post-backward stream the gradient pre-division (``_div_if_needed`` by ``_get_gradient_predivide_factor``), the
  reduce-scatter, and the post-division of the shard. ``BACKWARD_POST`` prefetches in the post-backward hook instead.
* **Rate limiter.** With ``limit_all_gathers`` (default) every free records an event in a queue, and an all-gather
  waits (the CPU blocks in ``event.synchronize()``) for the oldest one when two or more are queued
  (``_FreeEventQueue``, ``_max_num_inflight_all_gathers = 2``).
* **Flat gradient.** A unit's parameters are views of its flat parameter (``_use_unsharded_views``:
  ``torch.split`` of the flat parameter, then ``view``, ``_flat_param.py``; ``use_orig_params=False``, the
  default), so autograd's ``SplitWithSizesBackward`` concatenates their gradients into the flat parameter's
  gradient once they are all computed: a copy of the unit's bytes on the compute stream before the post-backward
  hook (profiled on this machine: one ``aten::cat`` per unit per iteration).
* **Optimizer.** On the shard only: 1/world of the parameters.

The CPU (Python, autograd) is assumed to run ahead of the GPU, as it does in a GPU-bound step: it issues in program
order at once, and only the rate limiter's ``synchronize`` makes it wait for the GPU. All-gathers and reduce-scatters
that run at once (different streams) share the network: each takes half while they overlap (:meth:`_Gpu.nccl`,
``shared``). Each collective's time alone is NCCL's simulation of it on the cluster.

**Gloo** (``ProcessGroupGloo``, torch 2.13, ``torch/csrc/distributed/c10d/ProcessGroupGloo.cpp``). FSDP gathers with
``dist.all_gather_single`` (on CPU tensors ``dist.all_gather`` of the output's chunks; ``FlatParamHandle.
_all_gather_flat_param``) and reduces with ``dist.reduce_scatter_single`` (``_reduce_grad``), both without
``async_op``: c10d waits on the work it gets back. Gloo's work runs on one of the group's worker threads, and its
``wait`` blocks the calling thread until that thread has finished, where NCCL's only makes the stream wait. So with
Gloo the thread issuing FSDP's program (the Python thread in forward, autograd's in backward) stops at every
collective until it is done, and at most one Gloo collective is in flight: the GPU runs what was queued before and
then idles. What each call does:

* the all-gather (``_allgather_base``: the output chunked into ``world`` views, then ``allgather``): with
  CUDA tensors the input is copied to pinned host memory, Gloo's allgather fills one flat host tensor, which is
  copied into the pinned output chunks, and those go back to the GPU (``AsyncAllgatherCUDAWork``); with CPU tensors
  the same without the device copies (``AsyncAllgatherWork``: ``flatOutputTensor``, then ``copy_`` into each
  output). All of it is Gloo's simulation of the allgather (:mod:`collsim.backends.gloo`).
* the reduce-scatter (``_reduce_scatter_base`` -> ``reduce_scatter_tensor_coalesced``): ``input.clone()`` on
  the calling stream, an ``allreduce`` of the clone (the whole buffer, staged through the host with CUDA tensors),
  then in ``wait`` a copy of this rank's chunk into the output: two kernels here, the allreduce from Gloo's
  simulation.
* CPU ranks (``gpu.cores > 0``): the layers run on the calling thread, so every kernel also blocks it; the
  iteration is then the sum of every kernel and every collective, in program order (a closed form the tests check).
  The collectives take the rank's cores as Gloo's simulation of them alone says (nothing else runs meanwhile).
  Four new tensors per unit and iteration (the unsharded storage at each all-gather, ``_alloc_storage``; the flat
  gradient; the reduce-scatter's clone and its output, ``_get_reduce_scatter_tensors``) are fresh mappings from
  ``GpuCompute.fresh_mapping_bytes`` (glibc's largest mmap threshold): their page faults at ``first_touch_bw``,
  paid on the lane that first writes them (:meth:`GpuCompute.fault_seconds`). A GPU's come from the caching
  allocator.

**NO_SHARD** (``ShardingStrategy.NO_SHARD``): each rank keeps whole flat parameters (not padded:
``FlatParamHandle.shard`` keeps the flat parameter when the strategy does not shard), so nothing is all-gathered or
freed, and the post-backward hook all-reduces the unit's flat gradient on the post-backward stream
(``_reduce_grad_no_shard``: pre-divide, ``dist.all_reduce``, post-divide, all of the whole gradient; with Gloo a
blocking CUDA allreduce staged through the host, no clone and no chunk copy); the optimizer updates every parameter.

**HYBRID_SHARD** (HSDP, ``ShardingStrategy.HYBRID_SHARD``): FULL_SHARD within a shard group of ``shard_world``
ranks (FSDP1's intra-node group), flat parameters padded to a multiple of it; after each unit's reduce-scatter its
``_all_reduce_stream`` waits for the post-backward stream, all-reduces the shard across the replica groups and
post-divides it (``_reduce_grad``); the division factors are the whole world's; the end of backward waits for both
streams; the optimizer updates the group's shard. Shard groups spanning nodes (a device mesh's) cross the NICs the
all-reduce takes: with ``shard_crosses_network`` it shares the "NCCL network" resource with their collectives.
The caller's collective callable gets ``allreduce_replicas`` for the all-reduce across the groups (and simulates it
on that group).

**FSDP2** (``FsdpConfig.version`` 2: ``fully_shard``, torch 2.13 ``torch/distributed/fsdp/_fully_shard/``;
:meth:`_Fsdp._program2`): the same units, each parameter padded on its own. An all-gather is a copy of the shard into
a new output on the copy-in stream (``foreach_all_gather``), the all-gather on its stream, and a copy of the output
into the parameters on the compute stream (``foreach_all_gather_copy_out``); nothing blocks the CPU, but in forward
the copy-in and all-gather streams wait for the copy-out two modules back (``AllGatherState``), in backward for the
current module's copy-out before the one module ``_backward_prefetch`` gathers. The root keeps its parameters after
forward. After a module's backward the compute stream waits for the previous reduce-scatter
(``reduce_scatter_max_input_buffers``, 1 by default; with k, for the one k modules back), copies the gradients into
a new reduce-scatter input (``chunk_cat``), and the reduce-scatter stream reduces it with ``ReduceOp.AVG`` (no
division kernels but for float16 and float64 gradients).

**Mixed precision** (``FsdpConfig.param_dtype``, ``reduce_dtype``; FSDP1 ``MixedPrecision``, FSDP2
``MixedPrecisionPolicy``): the parameters (and the optimizer) keep the model's dtype; each shard is cast to
``param_dtype`` before its all-gather (FSDP1 ``_use_low_precision_shard``, FSDP2's foreach cast before the copy-in),
the all-gather and the gradients are in ``param_dtype``, the gradients are cast to ``reduce_dtype`` before the
reduction (FSDP1 ``flat_param.grad.to(_reduce_dtype)`` on the post-backward stream; FSDP2 in ``chunk_cat``), which
moves ``reduce_dtype``, and the reduced shard is cast back to the parameters' dtype where they differ.

With an integer ``reshard_after_forward`` n each block keeps 1/n of itself after forward (a copy) and is gathered
back within its n-rank post-forward mesh in backward (the collective callable's ``allgather_post``).

FSDP2's explicit prefetching (``modules_to_forward_prefetch``, ``modules_to_backward_prefetch``) gathers the next
n blocks from each block's pre-forward, and the n before it from its pre-backward.

Activation checkpointing (``FsdpConfig.activation_checkpointing``): a checkpointed block's forward runs again on the
compute stream after its unit's pre-backward hook, right before the block's first backward kernel (both versions).

Not modelled: CPU offload, the CPU's own time (a CPU-bound step).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import simpy

from collsim.training.model import DTYPE_BYTES, ModelSpec, layer_blocks
from collsim.training.step import (
    BucketTiming,
    DdpConfig,
    GpuCompute,
    Span,
    StepConstants,
    StepResult,
    _Gpu,
    _layer_costs,
    _optimizer_bytes,
    _Plan,
    _run_compute_only,
    checkpoint_note,
    checkpoint_regions,
    clip_costs,
    compute_gaps,
    recompute_kernels,
)

__all__ = ["FsdpConfig", "FsdpUnit", "GlooCollective", "NcclCollective", "check_checkpoint_blocks", "fsdp_dtypes",
           "fsdp_units", "reduces_with_average", "simulate_fsdp_step"]

Proc = Generator[simpy.Event, Any, None]

#: ``(collective, nbytes) -> (seconds, channels)``: NCCL's simulation of one ``allgather`` or ``reduce_scatter`` of
#: ``nbytes`` (nccl-tests' size: the whole unsharded buffer) on the cluster.
NcclCollective = Callable[[str, int], tuple[float, int]]
#: ``(collective, nbytes) -> (seconds, core_seconds)``: Gloo's simulation of one ``allgather`` of ``nbytes`` (the
#: whole output) or ``allreduce`` of ``nbytes`` (what the reduce-scatter runs), alone on the cluster, with
#: ProcessGroupGloo's host staging on GPU ranks; ``core_seconds``: what it spends of a CPU rank's cores (0 on GPU
#: ranks).
GlooCollective = Callable[[str, int], tuple[float, float]]

SHARDINGS = ("full_shard", "shard_grad_op", "no_shard", "hybrid_shard")
#: the strategies that free a unit after its forward and all-gather it again in backward (torch's
#: NO_RESHARD_AFTER_FORWARD_STRATEGIES are the others)
_RESHARD_AFTER_FORWARD = ("full_shard", "hybrid_shard")
# FSDP2's reduce dtypes without overflow risk, reduced with ReduceOp.AVG and no division kernels (torch 2.13
# _fsdp_collectives.py _get_gradient_divide_factors: overflow_risk = reduce_dtype not in (float32, bfloat16)).
_AVG_DTYPES = ("float32", "bfloat16")
PREFETCHES = ("backward_pre", "backward_post", "none")
#: what the timeline calls each collective
_KIND_LABELS = {"allgather": "all-gather", "allgather_post": "all-gather (post-forward mesh)",
                "reduce_scatter": "reduce-scatter", "allreduce": "allreduce",
                "allreduce_replicas": "allreduce across groups"}
#: the timeline's lanes of the all-gathers and the reduce-scatters, per backend
_LANES = {"nccl": ("NCCL all-gather stream", "NCCL reduce-scatter stream"),
          "gloo": ("Gloo all-gather (blocking)", "Gloo reduce-scatter (blocking)")}
#: NO_SHARD's post-backward lane, per backend (it all-reduces)
_NO_SHARD_LANES = {"nccl": "NCCL allreduce stream", "gloo": "Gloo allreduce (blocking)"}
#: HYBRID_SHARD's lane of the all-reduces across the replica groups, per backend
_HSDP_LANES = {"nccl": "NCCL allreduce stream (HSDP)", "gloo": "Gloo allreduce across groups (blocking)"}
#: FSDP2's all-gather copy-in stream (``FSDPCommContext.all_gather_copy_in_stream``)
_COPY_IN_LANE = "FSDP2 all-gather copy-in stream"


@dataclass(frozen=True)
class FsdpConfig:
    """One FSDP configuration (``FullyShardedDataParallel``'s arguments).

    Parameters
    ----------
    batch_size : int
        Samples per GPU.
    sharding : str
        ``full_shard`` (FSDP's default: parameters freed after forward, all-gathered again in backward),
        ``shard_grad_op`` (kept from forward to backward), ``no_shard`` (never sharded: each unit's gradient is
        all-reduced after its backward, as DDP does per bucket) or ``hybrid_shard`` (HSDP: ``full_shard`` within
        a shard group, each sharded gradient then all-reduced across the groups; :func:`simulate_fsdp_step`'s
        ``shard_world``).
    backward_prefetch : str
        ``backward_pre`` (default), ``backward_post`` or ``none``.
    forward_prefetch : bool
        FSDP's ``forward_prefetch`` (default False).
    limit_all_gathers : bool
        FSDP's rate limiter (default True): at most two freed-but-not-yet-synchronised units.
    param_dtype : str, optional
        Mixed precision's ``param_dtype`` (FSDP1 ``MixedPrecision``, FSDP2 ``MixedPrecisionPolicy``): the dtype the
        shard is cast to before each all-gather, of the all-gathered parameters and of the gradients; default:
        the parameters' own (the model's dtype, which the optimizer keeps).
    optimizer : str
        A key of the step constants' ``optimizer_traffic``.
    wrap : str, optional
        The wrapped modules, as a layer-name pattern with ``*`` for the block index (``transformer.h.*``,
        ``fc*``); default: the most common ``prefix.N`` in the layer names (:func:`fsdp_units`).
    version : int
        1: ``FullyShardedDataParallel`` (FSDP1, the default); 2: ``fully_shard`` (FSDP2: per-parameter sharding,
        copy-in and copy-out around each all-gather, stream-side limits instead of the CPU-side rate limiter; see
        the module docstring). With 2, ``sharding`` is ``full_shard`` (``reshard_after_forward=True``),
        ``shard_grad_op`` (``False``) or ``hybrid_shard`` (a 2-D mesh), and the FSDP1 knobs
        ``backward_prefetch``, ``forward_prefetch`` and ``limit_all_gathers`` must keep their defaults.
    reduce_dtype : str, optional
        Mixed precision's ``reduce_dtype``: the gradients are cast to it before the reduce-scatter (FSDP1 on the
        post-backward stream, FSDP2 in the ``chunk_cat`` copy-in) and the reduced shard back to the parameters'
        dtype after it; default: ``param_dtype`` where given, else the parameters' own (both versions:
        ``FlatParamHandle._init_param_reduce_dtypes``, ``MixedPrecisionPolicy``).
    accumulation : int
        Micro-steps per optimizer step (gradient accumulation): the first ``accumulation - 1`` without gradient
        synchronisation (FSDP1 ``no_sync()``, FSDP2 ``set_requires_gradient_sync(False)``), the last reducing
        what they accumulated.
    reshard_after_forward : int, optional
        FSDP2 only, with ``full_shard`` or ``hybrid_shard``: ``fully_shard(..., reshard_after_forward=n)``. After a
        module's forward each rank keeps 1/n of it (``_to_sharded_post_forward``: a copy of that slice), and its
        backward all-gather runs within the n consecutive ranks of the post-forward mesh (the collective callable's
        ``allgather_post``). A divisor of the shard group other than 1 and the group itself.
    modules_to_forward_prefetch, modules_to_backward_prefetch : int
        FSDP2 only: explicit prefetching, as ``block.set_modules_to_forward_prefetch(next n blocks)`` and
        ``set_modules_to_backward_prefetch(previous n blocks)`` on every block give it; default none forward and
        the implicit one module backward.
    reduce_scatter_max_input_buffers : int
        FSDP2: ``set_reduce_scatter_max_input_buffers``, the reduce-scatter inputs kept in flight (default 1): before
        a module's copy-in the compute stream waits for the oldest reduce-scatters until fewer than this remain.
    activation_checkpointing : bool
        The blocks ``checkpoint_blocks`` names run under ``torch.utils.checkpoint`` (``apply_activation_checkpointing``
        on blocks inside the wrapped modules: FSDP's hooks outside the checkpoint): each block's forward runs again
        in the backward, on its unit's gathered parameters, right before its first backward kernel
        (:func:`~collsim.training.step.checkpoint_regions`). Each block must lie within one unit
        (:func:`check_checkpoint_blocks`).
    checkpoint_blocks : str, optional
        The checkpointed blocks as a layer-name pattern; default the most common ``prefix.N`` blocks.
    checkpoint_early_stop : bool
        The non-reentrant checkpoint's early stop (torch's default); False: each block's whole forward again.
    gradient_clipping : bool
        Gradient-norm clipping after the backward, before the optimizer: FSDP1's ``clip_grad_norm_``, FSDP2's
        ``torch.nn.utils.clip_grad_norm_`` on DTensor gradients (:meth:`_Fsdp._clip`).
    """

    batch_size: int = 32
    sharding: str = "full_shard"
    backward_prefetch: str = "backward_pre"
    forward_prefetch: bool = False
    limit_all_gathers: bool = True
    param_dtype: str | None = None
    optimizer: str = "sgd"
    wrap: str | None = None
    version: int = 1
    reduce_dtype: str | None = None
    accumulation: int = 1
    reshard_after_forward: int | None = None
    modules_to_forward_prefetch: int = 0
    modules_to_backward_prefetch: int | None = None
    reduce_scatter_max_input_buffers: int = 1
    activation_checkpointing: bool = False
    checkpoint_blocks: str | None = None
    checkpoint_early_stop: bool = True
    gradient_clipping: bool = False


@dataclass(frozen=True)
class FsdpUnit:
    """One FSDP unit: its ``name`` (the wrapped module, ``""`` for the root), its ``layers`` (indices, forward
    order) and ``params`` (indices) and the bytes of its flat parameter (padded to a multiple of the world size, in
    ``comm_dtype``)."""

    index: int
    name: str
    layers: tuple[int, ...]
    params: tuple[int, ...]
    nbytes: int


def fsdp_units(
    model: ModelSpec, world: int, wrap: str | None = None, comm_dtype: str | None = None, *, per_param: bool = False
) -> list[FsdpUnit]:
    """Cut ``model`` into FSDP units: one per block matched by ``wrap``, the rest in the root unit (index 0).

    Parameters
    ----------
    model : ModelSpec
        Parameters and layers.
    world : int
        Ranks the flat parameters are sharded over (padding).
    wrap : str, optional
        A layer-name pattern whose ``*`` stands for a block index: with ``prefix.*`` every layer named ``prefix.N``
        or ``prefix.N.<...>`` belongs to block N's unit (as ``transformer_auto_wrap_policy`` wraps each block);
        with ``fc*`` every layer ``fcN`` is a unit of its own (``ModuleWrapPolicy({nn.Linear})`` on an
        ``nn.Sequential`` of ``fc1, relu1, fc2, ...``). Default: the most common ``prefix.N`` prefix; none: one
        unit.
    comm_dtype : str, optional
        dtype of the flat parameter in the collectives (default: each parameter's own).
    per_param : bool
        FSDP2 (``fully_shard``): each parameter is padded to a multiple of ``world`` on its own
        (``_get_dim0_padded_size``; the model gives no shapes, so each is padded as if one-dimensional), where FSDP1
        pads the unit's flat parameter once.

    Returns
    -------
    list of FsdpUnit
        The root first, then the blocks in forward order. A parameter belongs to the unit of the first layer using
        it (FSDP: the first wrapped module that owns it).

    Examples
    --------
    >>> from collsim.training import load_model
    >>> units = fsdp_units(load_model("gpt2-xl"), 8)
    >>> len(units), units[1].name, units[0].name
    (49, 'transformer.h.0', '')
    """
    block_of = layer_blocks([ly.name for ly in model.layers], wrap)
    order = ["", *dict.fromkeys(k for k in block_of if k)]
    owner: dict[int, str] = {}
    for i, layer in enumerate(model.layers):
        for p in layer.params:
            owner.setdefault(p, block_of[i])
    units = []
    for u, key in enumerate(order):
        params = tuple(p for p in range(len(model.params)) if owner.get(p, "") == key)
        layers = tuple(i for i, k in enumerate(block_of) if k == key)
        if per_param:
            padded = sum(math.ceil(model.params[p].numel / world) * world for p in params)
        else:
            elems = sum(model.params[p].numel for p in params)
            padded = math.ceil(elems / world) * world if elems else 0
        item = DTYPE_BYTES[comm_dtype] if comm_dtype else (DTYPE_BYTES[model.params[params[0]].dtype] if params else 4)
        units.append(FsdpUnit(u, key, layers, params, padded * item))
    return units


def predivide_factor(world: int) -> float:
    """FSDP's gradient pre-division factor (``torch/distributed/algorithms/_comm_hooks/default_hooks.py``
    ``DefaultState._get_gradient_predivide_factor``, set in ``fsdp/_init_utils.py``): doubled while it divides the
    world size and world / factor exceeds it; the post-division is world / factor.

    >>> [predivide_factor(n) for n in (2, 8, 16, 64)]
    [2.0, 4.0, 4.0, 8.0]
    """
    factor = 1
    while world % factor == 0 and world / factor > factor:
        factor *= 2
    return float(factor)


def simulate_fsdp_step(
    model: ModelSpec,
    cfg: FsdpConfig,
    gpu: GpuCompute,
    consts: StepConstants,
    world: int,
    nccl: NcclCollective | None = None,
    *,
    gloo: GlooCollective | None = None,
    shard_world: int | None = None,
    shard_crosses_network: bool = False,
    straggle_s: float = 0.0,
) -> StepResult:
    """Simulate one FSDP iteration with NCCL or with Gloo (exactly one of ``nccl``, ``gloo``).

    Parameters
    ----------
    model : ModelSpec
        Parameters (registration order) and layers (forward order).
    cfg : FsdpConfig
        Sharding, prefetching, the rate limiter, the batch.
    gpu : GpuCompute
        Each rank's GPU (all alike), or its CPU (``cores > 0``: the layers run on the calling thread).
    consts : StepConstants
        ``topologies/software/training.yaml``.
    world : int
        Ranks.
    nccl : NcclCollective, optional
        NCCL's time and channels for an all-gather or reduce-scatter of n bytes (with ``hybrid_shard`` within a
        shard group), or an allreduce (``no_shard``: of all ranks; ``hybrid_shard``: of one replica group).
    gloo : GlooCollective, optional
        Gloo's time (and a CPU rank's core-seconds) for an all-gather or an allreduce of n bytes: each call blocks
        the thread issuing it (see the module docstring); with ``hybrid_shard`` as for ``nccl``.
    shard_world : int, optional
        ``hybrid_shard``: ranks of a shard group (FSDP's intra-node group: a node's GPUs), dividing ``world``;
        the replica groups have ``world / shard_world`` ranks. Default (and for the other strategies): ``world``.
    shard_crosses_network : bool
        ``hybrid_shard`` with NCCL: the shard groups span nodes (a device mesh's), so their all-gathers and
        reduce-scatters cross the NICs the all-reduce across the replica groups takes, and it shares the "NCCL
        network" resource with them as they share it with each other. Default: within a node (NVLink), apart.

    Returns
    -------
    StepResult
        ``buckets`` are the units' reduce-scatters (ready: the unit's post-backward hook; ``comm_s``: the
        collective's time alone); the timeline has the compute stream, the all-gather lane and the reduce-scatter
        lane.
    """
    if (nccl is None) == (gloo is None):
        raise ValueError("give exactly one of nccl and gloo")
    # torch's FSDP1 on one rank (fsdp/_init_utils.py, torch 2.13 line 430): "FSDP is switching to use `NO_SHARD`
    # instead of ... since the world size is 1"; FSDP2 keeps its strategy and skips its collectives there
    alone = cfg.version == 1 and world == 1 and cfg.sharding != "no_shard"
    shard = _checked_shard(cfg, consts, world, shard_world)
    if alone:
        cfg = replace(cfg, sharding="no_shard")
    # the flat parameters are padded to a multiple of the ranks they are sharded over (NO_SHARD: not split, not padded)
    units = fsdp_units(model, 1 if cfg.sharding == "no_shard" else shard, cfg.wrap, cfg.param_dtype,
                       per_param=cfg.version == 2)  # fmt: skip
    base = _Plan.build(model, DdpConfig(cfg.batch_size, accumulation=cfg.accumulation, optimizer=cfg.optimizer,
                                        activation_checkpointing=cfg.activation_checkpointing,
                                        checkpoint_blocks=cfg.checkpoint_blocks,
                                        checkpoint_early_stop=cfg.checkpoint_early_stop,
                                        gradient_clipping=cfg.gradient_clipping), consts)  # fmt: skip
    if cfg.activation_checkpointing:
        check_checkpoint_blocks(model, units, cfg.checkpoint_blocks)
    compute_s = _run_compute_only(gpu, base)
    result = _Fsdp(model, cfg, gpu, consts, world, nccl, gloo, units, shard, shard_crosses_network,
                   base.regions, straggle_s).run(compute_s)  # fmt: skip
    if alone:
        result = replace(result, notes=(*result.notes, "one rank: FSDP1 switches to no_shard, as torch does"))
    return result


def _checked_shard(cfg: FsdpConfig, consts: StepConstants, world: int, shard_world: int | None) -> int:
    """Raise ValueError for a configuration FSDP (or this model of it) does not take; return the ranks a unit is
    sharded over (``shard_world`` with ``hybrid_shard``, else ``world``)."""
    if cfg.sharding not in SHARDINGS:
        raise ValueError(f"unknown sharding {cfg.sharding!r}; expected one of {', '.join(SHARDINGS)}")
    if cfg.backward_prefetch not in PREFETCHES:
        raise ValueError(
            f"unknown backward_prefetch {cfg.backward_prefetch!r}; expected one of {', '.join(PREFETCHES)}"
        )
    if cfg.optimizer not in consts.optimizer_traffic:
        raise ValueError(f"unknown optimizer {cfg.optimizer!r}; expected one of {', '.join(consts.optimizer_traffic)}")
    if cfg.batch_size < 1 or world < 1 or cfg.accumulation < 1:
        raise ValueError("batch_size, accumulation and world must be at least 1")
    if cfg.version not in (1, 2):
        raise ValueError(f"unknown FSDP version {cfg.version!r}; expected 1 (FullyShardedDataParallel) or 2 "
                         "(fully_shard)")  # fmt: skip
    if cfg.version == 2 and cfg.sharding == "no_shard":
        raise ValueError("FSDP2 (fully_shard) has no no_shard; DDP is the unsharded data parallelism")
    explicit = cfg.modules_to_forward_prefetch or cfg.modules_to_backward_prefetch is not None
    if explicit and cfg.version != 2:
        raise ValueError("modules_to_forward_prefetch and modules_to_backward_prefetch are FSDP2's (version 2)")
    if cfg.reduce_scatter_max_input_buffers < 1:
        raise ValueError("reduce_scatter_max_input_buffers must be at least 1")
    if cfg.modules_to_forward_prefetch < 0 or (cfg.modules_to_backward_prefetch or 0) < 0:
        raise ValueError("modules_to_forward_prefetch and modules_to_backward_prefetch must be at least 0")
    shard = world if shard_world is None or cfg.sharding != "hybrid_shard" else shard_world
    if shard < 1 or world % shard:
        raise ValueError(f"shard_world must divide world ({world}), got {shard_world}")
    post = cfg.reshard_after_forward
    if post is not None:
        if cfg.version != 2 or cfg.sharding not in _RESHARD_AFTER_FORWARD:
            raise ValueError("an integer reshard_after_forward is FSDP2's (version 2) with full_shard or hybrid_shard")
        if not 1 < post < shard or shard % post:
            raise ValueError(f"reshard_after_forward {post} must divide the {shard} ranks a module is sharded "
                             "over and be neither 1 nor all of them")  # fmt: skip
    for name, dtype in (("param_dtype", cfg.param_dtype), ("reduce_dtype", cfg.reduce_dtype)):
        if dtype is not None and dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown {name} {dtype!r}; expected one of {', '.join(DTYPE_BYTES)}")
    return shard


def fsdp_dtypes(model: ModelSpec, cfg: FsdpConfig) -> tuple[str, str, str]:
    """Mixed precision's dtypes: (the parameters' own, the optimizer's; the all-gathers' and gradients',
    ``param_dtype``; the reductions', ``reduce_dtype``), each defaulting to the one before."""
    orig = model.params[0].dtype if model.params else "float32"
    gathered = cfg.param_dtype or orig
    return orig, gathered, cfg.reduce_dtype or gathered


def reduces_with_average(model: ModelSpec, cfg: FsdpConfig, world: int) -> bool:
    """Whether FSDP's reduce-scatter (and HSDP's all-reduce) run ``ReduceOp.AVG``: FSDP2 in torch 2.13 does for a
    float32 or bfloat16 reduce dtype on more than one rank (``_get_gradient_divide_factors`` in
    ``_fsdp_collectives.py``: "we use NCCL's built-in division"); float16, float64 and FSDP1 divide with kernels of
    their own and sum."""
    return cfg.version == 2 and fsdp_dtypes(model, cfg)[2] in _AVG_DTYPES and world > 1


def check_checkpoint_blocks(model: ModelSpec, units: Sequence[FsdpUnit], blocks: str | None) -> None:
    """Raise ValueError when a checkpointed block (``blocks``, a layer-name pattern; None: the default blocks) has
    layers in more than one FSDP unit: collsim models checkpointing inside the wrapped modules, where FSDP's hooks do
    not run again in the recomputation."""
    unit_of = {i: u.index for u in units for i in u.layers}
    for layers in checkpoint_regions(model, blocks, early_stop=False).values():
        if len({unit_of[i] for i in layers}) > 1:
            names = sorted({units[unit_of[i]].name or "(root)" for i in layers})
            raise ValueError(f"activation checkpointing: block {model.layers[layers[0]].name!r}.. spans FSDP units "
                             f"{', '.join(names)}; checkpoint blocks that lie within one wrapped module (or wrap "
                             "the checkpointed blocks)")  # fmt: skip


class _Fsdp:
    """One iteration: the CPU's program (a process issuing in order, blocking in the rate limiter and, with Gloo, in
    every collective; on CPU ranks in every kernel too), the compute stream, and the two collective lanes (processes
    taking their ops in issue order)."""

    def __init__(
        self,
        model: ModelSpec,
        cfg: FsdpConfig,
        gpu: GpuCompute,
        consts: StepConstants,
        world: int,
        nccl: NcclCollective | None,
        gloo: GlooCollective | None,
        units: list[FsdpUnit],
        shard_world: int,
        shard_crosses_network: bool = False,
        regions: dict[int, tuple[int, ...]] | None = None,
        straggle_s: float = 0.0,
    ) -> None:
        self.model, self.cfg, self.consts, self.world, self.units = model, cfg, consts, world, units
        self.straggle_s = straggle_s  # NCCL: the slowest rank launches each collective this late after its issue
        self.regions = regions or {}  # activation checkpointing: a block's last layer -> its layers, recomputed
        self.shard_world = shard_world  # ranks a unit is sharded over (a shard group with HSDP, else every rank)
        self.shard_crosses = shard_crosses_network  # HSDP: shard groups across nodes share the NICs
        self.hybrid = cfg.sharding == "hybrid_shard"
        self.sharded = cfg.sharding != "no_shard"  # NO_SHARD: whole parameters, nothing to gather or free
        self.nccl, self.gloo = nccl, gloo
        self.backend = "nccl" if nccl is not None else "gloo"
        self.ag_lane, self.rs_lane = _LANES[self.backend]
        if cfg.sharding == "no_shard":
            self.rs_lane = _NO_SHARD_LANES[self.backend]
        # HSDP's all-reduce of each sharded gradient across the replica groups: its own stream (_all_reduce_stream);
        # with Gloo the calling thread waits for it like every Gloo call
        self.ar_lane = _HSDP_LANES[self.backend]
        self.blocking = gloo is not None  # a Gloo call's wait() holds the calling thread until the work is done
        self.cpu_rank = gpu.cores > 0  # the layers run on the calling thread: every kernel blocks it
        self.env = simpy.Environment()
        self.spans: list[Span] = []
        self.g = _Gpu(self.env, gpu, self.spans)
        self.unit_of = {i: u.index for u in units for i in u.layers}
        # mixed precision: the parameters' own dtype (the optimizer's), the all-gather's and the reduction's
        self.orig_dtype, self.ag_dtype, self.reduce_dtype = fsdp_dtypes(model, cfg)
        #: a unit's reduced bytes per all-gathered byte, and the parameters' bytes per all-gathered byte
        self.rs_scale = DTYPE_BYTES[self.reduce_dtype] / DTYPE_BYTES[self.ag_dtype]
        self.orig_scale = DTYPE_BYTES[self.orig_dtype] / DTYPE_BYTES[self.ag_dtype]
        self.v2 = cfg.version == 2
        self.copy_in_lane = _COPY_IN_LANE  # FSDP2's all_gather_copy_in_stream
        lanes = ("compute", self.ag_lane, self.rs_lane) + ((self.ar_lane,) if self.hybrid else ())
        lanes += (self.copy_in_lane,) if self.v2 else ()
        self.streams: dict[str, simpy.Store] = {name: simpy.Store(self.env) for name in lanes}
        self.tail: dict[str, simpy.Event] = {}  # the last op issued on each stream: what wait_stream waits for
        self.durations: list[float] = []
        self.rs: dict[int, list[float]] = {}  # unit -> [ready, start, end, seconds]

    # -------------------------------------------------------------------------------------------------- streams
    def _issue(self, stream: str, op: Callable[[], Proc], after: Sequence[simpy.Event] = ()) -> simpy.Event:
        """Enqueue ``op`` on ``stream`` behind everything issued there, once ``after`` have fired; return its end."""
        done = self.env.event()
        self.streams[stream].put((op, tuple(after), done))
        self.tail[stream] = done
        return done

    def _stream(self, name: str) -> Proc:
        """A CUDA stream: its ops one after another in issue order, each after the events it waits for."""
        store = self.streams[name]
        while True:
            op, after, done = yield store.get()
            if after:
                yield simpy.AllOf(self.env, list(after))
            yield from op()
            done.succeed()

    def _wait_stream(self, stream: str) -> tuple[simpy.Event, ...]:
        """``wait_stream``: everything issued on ``stream`` so far."""
        last = self.tail.get(stream)
        return (last,) if last is not None else ()

    def _blocked(self, done: simpy.Event, blocks: bool) -> Proc:
        """The calling thread waits for ``done`` when ``blocks`` (a Gloo call's wait; any kernel on a CPU rank)."""
        if blocks and not done.processed:
            yield done

    # ------------------------------------------------------------------------------------------------------ ops
    def _collective(self, kind: str, u: FsdpUnit, lane: str) -> Callable[[], Proc]:
        """One collective of unit ``u``: ``allgather``, ``reduce_scatter`` (both within the shard group),
        ``allreduce`` (NO_SHARD: of every rank) or ``allreduce_replicas`` (HSDP: the sharded gradient, 1/shard_world
        of the unit, across the replica groups)."""
        issued = self.env.now  # the host issues it now; a straggler's host that much later
        replicas = kind == "allreduce_replicas"
        gathers = kind in ("allgather", "allgather_post")
        nbytes = u.nbytes if gathers else u.nbytes * self.rs_scale  # the reduction's in reduce_dtype
        nbytes = nbytes / self.shard_world if replicas else nbytes
        # the ranks it spans: one per HSDP group across them, every rank for NO_SHARD's allreduce, else a shard group
        spans = {"allreduce_replicas": self.world // self.shard_world, "allreduce": self.world,
                 "allgather_post": self.cfg.reshard_after_forward or self.shard_world}
        group = spans.get(kind, self.shard_world)
        phases = 2 if kind.startswith("allreduce") else 1  # ring phases of (group-1)/group of the buffer each
        hbm = self.consts.nccl_hbm_bytes_per_step_byte * phases * (group - 1) / group * nbytes

        def op() -> Proc:
            start = self.env.now
            # all-gathers and reduce-scatters ride the same links; HSDP's all-reduce those across the groups, which
            # are the same NICs where the shard groups span nodes
            # torch all-reduces on any group (FSDP1's _reduce_grad_no_shard, FSDP2's HSDP all-reduce): with Gloo
            # on CUDA tensors one rank still copies to the host and back; NCCL's in-place one-rank call moves
            # nothing, and FSDP2 skips its all-gathers and reduce-scatters on one rank (_fsdp_param_group.py,
            # _fsdp_collectives.py: "if world_size > 1")
            called = group > 1 or (self.nccl is None and kind.startswith("allreduce"))
            seconds = yield from self._on_backend(f"{_KIND_LABELS[kind]} unit {u.index}", lane, kind,
                                                  int(nbytes) if called else 0, hbm, u.index,
                                                  not replicas or self.shard_crosses, issued)  # fmt: skip
            timing = self.rs.get(u.index)
            if replicas and timing is not None:  # the reduction ends with the all-reduce across the groups
                timing[2], timing[3] = self.env.now, timing[3] + seconds
            elif not gathers:  # the post-backward reduction
                self.rs[u.index][1:] = [start, self.env.now, seconds]

        return op

    def _on_backend(self, label: str, lane: str, kind: str, size: int, hbm: float, bucket: int | None,
                    shares_network: bool, issued: float = -math.inf) -> Generator[simpy.Event, Any, float]:  # fmt: skip
        """One collective of ``size`` bytes (0: none, a bar of no length) on ``lane``, as the backend's simulation
        prices it: NCCL's kernel holding its channels' SMs and ``hbm`` bytes, or Gloo's call on a worker thread
        (ProcessGroupGloo's reduce_scatter_tensor all-reduces the whole cloned input). Returns its seconds. A
        straggler (``straggle_s``) launches NCCL's kernel that late after the host issued it (``issued``): the
        others' kernels wait inside until then, once, not after each collective before."""
        if self.nccl is not None:
            seconds, channels = self.nccl(kind, size) if size else (0.0, 0)
            if size and self.straggle_s > 0:
                seconds += max(0.0, issued + self.straggle_s - self.env.now)
            self.durations.append(seconds)
            yield from self.g.nccl(label, seconds, channels, hbm, bucket, lane, shares_network)
            return seconds
        assert self.gloo is not None
        gloo_kind = kind if kind in ("allgather", "allgather_post", "allreduce_replicas") else "allreduce"
        seconds, core_s = self.gloo(gloo_kind, size) if size else (0.0, 0.0)
        self.durations.append(seconds)
        yield from self.g.gloo_thread(label, lane, seconds, core_s, bucket)
        return seconds

    def _kernel(self, label: str, flops: float, nbytes: float, seconds: float | None = None,
                lane: str = "compute") -> Callable[[], Proc]:  # fmt: skip
        def op() -> Proc:
            yield from self.g.kernel(lane, label, flops, nbytes, seconds)

        return op

    def _cast(self, label: str, read: float, write: float, lane: str) -> Callable[[], Proc]:
        """A kernel that reads ``read`` bytes and writes ``write`` bytes (a dtype cast, ``Tensor.to``): the write's
        destination lines are read first where the rank's memory write-allocates (as :meth:`GpuCompute.copy_bytes`)."""
        return self._kernel(label, 0.0, read + (1.0 + self.g.gpu.write_allocate) * write, lane=lane)

    def _fresh(self, lane: str, what: str, nbytes: float) -> None:
        """A CPU rank's new allocation of ``nbytes`` that is a fresh mapping (:meth:`GpuCompute.fault_seconds`):
        its page faults as one op on ``lane`` before the op that first writes it, blocking the calling thread like
        every CPU kernel (a GPU rank's allocations come from the caching allocator: nothing)."""
        seconds = self.g.gpu.fault_seconds(nbytes) if self.cpu_rank else 0.0
        if seconds > 0:
            self._issue(lane, self._kernel(f"page faults: {what}", 0.0, 0.0, seconds, lane=lane))

    def _marker(self) -> Callable[[], Proc]:
        """An op that takes no time: an event recorded on the stream (FSDP's free event)."""

        def op() -> Proc:
            return
            yield  # pragma: no cover - a generator that yields nothing

        return op

    # ------------------------------------------------------------------------------------------------ the program
    def run(self, compute_s: float) -> StepResult:
        env = self.env
        for name in self.streams:
            env.process(self._stream(name))
        env.run(env.process(self._program2() if self.v2 else self._program()))
        iteration = float(env.now)
        buckets = tuple(  # in the order the reduce-scatters were issued (backward order)
            BucketTiming(u, len(self.units[u].params), round(self.units[u].nbytes * self.rs_scale), *self.rs[u])
            for u in self.rs
        )
        optimizer = "the optimizer updates " + ("the 1/world shard" if self.sharded else "every parameter")
        if self.hybrid:
            optimizer = (f"HSDP: shard groups of {self.shard_world} rank(s), each unit's shard all-reduced across "
                         f"{self.world // self.shard_world} group(s) on its own stream; the optimizer updates the "
                         f"1/{self.shard_world} shard")
        if not self.sharded:
            how = ("no all-gathers; each unit's flat gradient is all-reduced after its backward" if not self.blocking
                   else "Gloo: each unit's all-reduce blocks the thread issuing it until it is done (one in flight)")
        elif not self.blocking:
            how = "the CPU issues ahead of the GPU"
        else:
            how = ("Gloo: every all-gather and reduce-scatter blocks the thread issuing it until it is done (one in "
                   "flight); a reduce-scatter is a clone, an allreduce of the whole buffer and a copy of this rank's "
                   "chunk")
        notes: tuple[str, ...] = (
            f"FSDP {self.cfg.sharding}, {len(self.units) - 1} wrapped unit(s) + root, backward_prefetch "
            f"{self.cfg.backward_prefetch}" + (", limit_all_gathers" if self.cfg.limit_all_gathers else ""),
            f"{how}; {optimizer}",
        )
        if self.v2:
            strategy = {"full_shard": "reshard_after_forward=True", "shard_grad_op": "reshard_after_forward=False",
                        "hybrid_shard": "a 2-D mesh (replicate, shard), reshard_after_forward=True"}[self.cfg.sharding]
            if self.cfg.reshard_after_forward:
                n = self.cfg.reshard_after_forward
                strategy = strategy.replace("reshard_after_forward=True", f"reshard_after_forward={n} (each block "
                                            f"kept 1/{n} after forward, gathered in backward within {n} ranks)")
            divide = ("ReduceOp.AVG (no division kernels)" if not self._divides() else
                      "gradient division kernels around the reduce-scatter (float16, float64: pre- and post-divide)")
            notes = (
                f"FSDP2 fully_shard, {strategy}, {len(self.units) - 1} wrapped module(s) + root (not resharded after "
                f"forward); implicit prefetching: all-gathers at most two modules ahead in forward, one in backward; "
                f"the compute stream waits for the oldest reduce-scatters before the next copy-in "
                f"(reduce_scatter_max_input_buffers {self.cfg.reduce_scatter_max_input_buffers}); {divide}",
                f"{how}; {optimizer}",
            )  # fmt: skip
        if self.cfg.accumulation > 1:
            how_not = "no_sync()" if not self.v2 else "set_requires_gradient_sync(False)"
            notes += (f"gradient accumulation: {self.cfg.accumulation - 1} micro-step(s) under {how_not} (no "
                      "reduction; all-gathers as the strategy frees) before the one that reduces",)  # fmt: skip
        if self.regions:
            notes += (checkpoint_note(self.model, self.regions) + " (on the unit's gathered parameters)",)
        if self.cfg.gradient_clipping:
            what = "an all-reduce of the norm (4 bytes) between" if self.sharded and self.shard_world > 1 else (
                "no collective")
            notes += (f"clip_grad_norm_ before the optimizer: the local gradients read (the norm), {what}, then "
                      "read and written (the scaling)",)  # fmt: skip
        if (self.ag_dtype, self.reduce_dtype) != (self.orig_dtype, self.orig_dtype):
            notes += (f"mixed precision: parameters (and the optimizer) in {self.orig_dtype}, all-gathers and "
                      f"gradients in {self.ag_dtype}, reductions in {self.reduce_dtype}",)  # fmt: skip
        reduction = {"no_shard": "allreduce", "hybrid_shard": "reduce-scatter and allreduce across groups"}.get(
            self.cfg.sharding, "reduce-scatter")
        # what the compute stream waits for (the collectives, and the host the rate limiter ties to them): compute_s
        # is the unsharded step on one GPU, so iteration - compute_s nets the sharded optimizer's saving against it
        waited = sum(b - a for a, b in compute_gaps(self.spans, iteration))
        notes += (f"overlap: 1 - the compute stream's {waited * 1e3:.3f} ms waiting for collectives / their wall time "
                  "(exposed nets the sharded optimizer's saving)",)  # fmt: skip
        return StepResult(self.backend, self.world, iteration, compute_s, sum(self.durations), buckets,
                          tuple(self.spans), notes, reduction, waited_s=waited)  # fmt: skip

    def _program(self) -> Proc:
        """The CPU thread: forward and backward in program order, issuing kernels and collectives, once per
        micro-step of ``cfg.accumulation``, then the optimizer step."""
        gathers = _Gathers1(self)
        fwd_units = [0] + [self.unit_of[i] for i in range(len(self.model.layers)) if self.unit_of[i] != 0]
        fwd_order = list(dict.fromkeys(fwd_units))
        for step in range(self.cfg.accumulation):
            first, sync = step == 0, step == self.cfg.accumulation - 1
            yield from self._forward1(gathers, fwd_order, first)
            yield from self._backward1(gathers, first, sync)
        yield from self._optimizer_step()

    def _forward1(self, g: _Gathers1, fwd_order: list[int], first: bool) -> Proc:
        """FSDP1's forward of one micro-step: the root's all-gather, then each unit's before its first layer (or
        the forward prefetch's), each unit freed after its forward where the strategy says; from the second
        micro-step the root's pre-forward first makes the (pre-)unshard stream wait for the compute stream
        (``_root_pre_forward``: ``_wait_for_computation_stream``)."""
        model, cfg, sharded = self.model, self.cfg, self.sharded
        if not first:
            self._issue(self.ag_lane, self._marker(), self._wait_stream("compute"))
        yield from g.unshard(0) if sharded else g.cast_whole(0)
        g.wait_unshard()
        current = 0
        for i, layer in enumerate(model.layers):
            u = self.unit_of[i]
            if u != current:
                if current != 0 and cfg.sharding in _RESHARD_AFTER_FORWARD:
                    g.reshard(current)  # post-forward of the unit just left (the root is never freed after forward)
                if sharded and u != 0 and u not in g.prefetched:
                    yield from g.unshard(u)
                elif not sharded and u != 0:
                    yield from g.cast_whole(u)
                g.wait_unshard()
                if sharded and u != 0 and cfg.forward_prefetch:
                    nxt = fwd_order.index(u) + 1
                    if nxt < len(fwd_order) and fwd_order[nxt] != 0:
                        yield from g.unshard(fwd_order[nxt])
                        g.prefetched.add(fwd_order[nxt])
                current = u
            yield from g.compute(f"fwd {layer.name}", _layer_costs(model, i, cfg.batch_size, False))
        if current != 0 and cfg.sharding in _RESHARD_AFTER_FORWARD:
            g.reshard(current)

    def _backward1(self, g: _Gathers1, first: bool, sync: bool) -> Proc:
        """FSDP1's backward of one micro-step, units in reverse order of their last layer: each unit's
        pre-backward hook gathers it (unless prefetched) and prefetches as ``backward_prefetch`` says; once all its
        gradients are ready, the flat gradient and the post-backward hook. The last of ``cfg.accumulation``
        micro-steps reduces (``sync``); the others run under ``no_sync()`` (``_sync_gradients`` false: the hook
        frees as ``_should_free_in_backward`` says and returns, the flat gradient accumulates)."""
        model, cfg, units = self.model, self.cfg, self.units
        reshard_fwd = cfg.sharding in _RESHARD_AFTER_FORWARD
        bwd_order = list(dict.fromkeys(self.unit_of[i] for i in reversed(range(len(model.layers)))))
        remaining = {u.index: len(u.layers) for u in units}
        started: set[int] = set()
        for i in reversed(range(len(model.layers))):
            u = self.unit_of[i]
            if u not in started:  # the unit's pre-backward hook
                started.add(u)
                if u != 0 and reshard_fwd and u not in g.prefetched:
                    yield from g.unshard(u)
                if u != 0 and reshard_fwd:
                    g.wait_unshard()
                if cfg.backward_prefetch == "backward_pre":
                    yield from g.prefetch(bwd_order, u)
            for label, costs in recompute_kernels(model, self.regions, i, cfg.batch_size):  # checkpointing
                yield from g.compute(label, costs)
            yield from g.compute(f"bwd {model.layers[i].name}", _layer_costs(model, i, cfg.batch_size, True))
            remaining[u] -= 1
            if remaining[u] == 0:  # all of the unit's gradients are ready
                yield from self._flat_gradient(units[u], first)
                # the post-backward hook, on the flat parameter's AccumulateGrad
                if self.sharded and (sync or reshard_fwd):
                    g.reshard(u)  # _should_free_in_backward: under no_sync only the strategies freed after forward
                if sync:  # no_sync's hook returns after the reshard: no reduction
                    yield from self._reduce_scatter(units[u])
                if cfg.backward_prefetch == "backward_post":
                    yield from g.prefetch(bwd_order, u)

    def _compute(self, label: str, nbytes: float) -> Proc:
        """A memory-bound kernel of ``nbytes`` bytes on the compute stream; a CPU rank's thread waits for it."""
        done = self._issue("compute", self._kernel(label, 0.0, nbytes))
        yield from self._blocked(done, self.cpu_rank)

    def _flat_gradient(self, u: FsdpUnit, first: bool) -> Proc:
        """FSDP1: autograd's ``SplitWithSizesBackward`` concatenates the views' gradients into a new flat gradient
        (a copy of the unit's bytes; a fresh mapping on a CPU rank from its threshold), and from the second
        micro-step ``AccumulateGrad`` adds it to the one ``no_sync`` kept (read both, write one in place)."""
        if u.nbytes > 0:
            self._fresh("compute", f"flat gradient unit {u.index}", u.nbytes)  # torch.cat's new tensor
            yield from self._compute(f"flat gradient unit {u.index}", self.g.gpu.copy_bytes(u.nbytes))
            if not first:
                yield from self._compute(f"accumulate gradient unit {u.index}", 3.0 * u.nbytes)

    def _post_backward2(self, u: FsdpUnit, first: bool, sync: bool, rs_state: list[simpy.Event]) -> Proc:
        """FSDP2's ``post_backward`` after the reshard: the gradients kept between micro-steps (in reduce_dtype
        where it differs, ``unsharded_accumulated_grad``; else in the parameter's ``.grad``) get the new ones added
        from the second micro-step (``accumulate_unsharded_grad_if_needed`` or ``AccumulateGrad``), or are cast to
        reduce_dtype in the first of several (``to_accumulated_grad_if_needed``); the micro-step that syncs
        reduces them (:meth:`_reduce_scatter2`)."""
        nbytes = u.nbytes
        kept = nbytes * self.rs_scale if self.reduce_dtype != self.ag_dtype else nbytes
        if not first and nbytes:
            yield from self._compute(f"accumulate gradient unit {u.index}", 2.0 * kept + nbytes)
        elif not sync and kept != nbytes:
            yield from self._compute(f"cast gradient unit {u.index}", nbytes + (1.0 + self.g.gpu.write_allocate) * kept)
        if sync:  # set_requires_gradient_sync(False): no reduction
            yield from self._reduce_scatter2(u, rs_state, nbytes if first else kept)

    def _optimizer_step(self) -> Proc:
        """The end of backward: the compute stream waits for the reduce-scatter (post-backward) stream and HSDP's
        all-reduce stream, then (with ``gradient_clipping``, :meth:`_clip`) the gradients are clipped, then the
        optimizer updates the rank's shard (every parameter without sharding)."""
        shard = 1.0 / self.shard_world if self.sharded else 1.0
        opt = _optimizer_bytes(self.model, self.consts, self.cfg.optimizer) * shard
        label = "optimizer (shard)" if self.sharded else "optimizer"
        ends = self._wait_stream(self.rs_lane) + (self._wait_stream(self.ar_lane) if self.hybrid else ())
        if self.cfg.gradient_clipping:
            yield from self._clip(ends, shard)
            ends = ()
        self._issue("compute", self._kernel(label, 0.0, opt), ends)
        yield self.tail["compute"]

    def _clip(self, after: tuple[simpy.Event, ...], shard: float) -> Proc:
        """Gradient-norm clipping of the local gradients (the rank's shards; whole gradients without sharding).
        FSDP1's ``FullyShardedDataParallel.clip_grad_norm_`` (torch 2.13 ``fully_sharded_data_parallel.py``): the
        local norm (``_get_grad_norm``: each gradient read once), ``dist.all_reduce`` of that one float32 over the
        process group (the shard group with HSDP, whose replicas hold the same shards), then ``grad.mul_`` by the
        clamped coefficient on each (a read and a write); with NO_SHARD everywhere it is
        ``torch.nn.utils.clip_grad_norm_``, no collective. FSDP2: ``torch.nn.utils.clip_grad_norm_`` on the
        DTensor gradients, whose norm is partial over the mesh's shard dimension until the coefficient's arithmetic
        redistributes it (one all-reduce of a scalar); the same costs. Waits for: ``after`` (the reductions), then
        the compute stream; with NCCL the all-reduce runs on the process group's stream (the reduce-scatters'),
        which the compute stream waits for before scaling (``work.wait()`` makes the stream, not the thread, wait);
        with Gloo the call blocks the thread until it returns. Pays: the two passes over the gradients at HBM rate,
        the all-reduce of 4 bytes as the backend's simulation says."""
        grads = sum(u.nbytes for u in self.units) * self.orig_scale * shard  # the local gradients, the params' dtype
        norm, scale = clip_costs(grads)
        self._issue("compute", self._kernel("clip: gradient norm", 0.0, norm), after)
        if self.sharded and self.shard_world > 1:
            done = self._issue(self.rs_lane, self._norm_allreduce(), self._wait_stream("compute"))
            yield from self._blocked(done, self.blocking)
        waits = self._wait_stream(self.rs_lane) if self.sharded else ()
        done = self._issue("compute", self._kernel("clip: scale gradients", 0.0, scale), waits)
        yield from self._blocked(done, self.cpu_rank)

    def _norm_allreduce(self) -> Callable[[], Proc]:
        """The all-reduce of the gradient norm (one float32) within the shard group, on the reduce-scatters' lane."""
        issued = self.env.now

        def op() -> Proc:
            yield from self._on_backend("allreduce gradient norm", self.rs_lane, "allreduce", DTYPE_BYTES["float32"],
                                        0.0, None, True, issued)  # fmt: skip

        return op

    # ------------------------------------------------------------------------------------------------ FSDP2
    def _divides(self) -> bool:
        """FSDP2's gradient division kernels (``_get_gradient_divide_factors``, torch 2.13
        ``_fsdp_collectives.py``: ``overflow_risk = reduce_dtype not in (torch.float32, torch.bfloat16)``): every
        reduce dtype but float32 and bfloat16 (float16, float64) pre- and post-divides around a ``ReduceOp.SUM``;
        float32 and bfloat16 reduce with ``ReduceOp.AVG`` and no kernel of FSDP's own."""
        return self.reduce_dtype not in _AVG_DTYPES

    def _param_faults(self, u: FsdpUnit) -> float:
        """Seconds a CPU rank spends faulting in the unsharded parameters of ``u`` that are fresh mappings: FSDP2
        allocates each parameter's own tensor (``alloc_all_gather_outputs``), so each is compared with the threshold
        alone."""
        if not self.cpu_rank:
            return 0.0
        params = self.model.params
        item = {p: DTYPE_BYTES[self.cfg.param_dtype or params[p].dtype] for p in u.params}
        return sum(self.g.gpu.fault_seconds(math.ceil(params[p].numel / self.shard_world) * self.shard_world * item[p])
                   for p in u.params)  # fmt: skip

    def _program2(self) -> Proc:
        """The CPU thread under FSDP2 (``fully_shard``, torch 2.13 ``torch/distributed/fsdp/_fully_shard/``):
        forward and backward in program order. Waits for: the GPU only where a Gloo call or a CPU rank's kernel
        blocks the thread; FSDP2 itself never synchronises the CPU. Pays: per all-gather a copy-in of the shard
        (copy-in stream) and a copy-out of the module's bytes (compute stream); per reduce-scatter a copy-in of the
        module's gradients (compute stream, after the previous reduce-scatter); see :meth:`_reduce_scatter2`."""
        model, units = self.model, self.units
        batch = self.cfg.batch_size
        reshard_fwd = self.cfg.sharding in _RESHARD_AFTER_FORWARD
        gathers = _Gathers2(self)
        unshard, wait_for_unshard, post_forward = gathers.unshard, gathers.wait_for_unshard, gathers.post_forward
        rs_state: list[simpy.Event] = []  # reduce_scatter_states: the last reduce-scatter's end
        blocks = [u for u in dict.fromkeys(self.unit_of[i] for i in range(len(model.layers))) if u != 0]

        def compute(label: str, costs: tuple[float, float, float | None]) -> Proc:
            done = self._issue("compute", self._kernel(label, *costs))
            yield from self._blocked(done, self.cpu_rank)

        def micro_step(first: bool, sync: bool) -> Proc:
            """One forward and backward: the last of ``cfg.accumulation`` reduces (``sync``); before it,
            ``set_requires_gradient_sync(False)`` (``reduce_grads`` false: the post-backward reshards and keeps the
            gradients, from the second micro-step adding to them)."""
            # ---- forward: the root's pre-forward all-gathers it first; each module's pre-forward its own; from
            # the second micro-step the all-gather streams first wait for the compute stream (_root_pre_forward)
            if not first:
                after = self._wait_stream("compute")
                self._issue(self.copy_in_lane, self._marker(), after)
                self._issue(self.ag_lane, self._marker(), after)
            yield from unshard(0)
            yield from wait_for_unshard(0, True)
            current = 0
            for i, layer in enumerate(model.layers):
                u = self.unit_of[i]
                if u != current:
                    if current != 0 and reshard_fwd:
                        yield from post_forward(current)  # post_forward: reshard (no event, but to a smaller mesh)
                    if u != 0:
                        yield from unshard(u)
                        yield from wait_for_unshard(u, True)
                        # set_modules_to_forward_prefetch: FSDPState._pre_forward unshards the next n blocks
                        k = blocks.index(u) + 1
                        for target in blocks[k : k + self.cfg.modules_to_forward_prefetch]:
                            yield from unshard(target)
                    current = u
                yield from compute(f"fwd {layer.name}", _layer_costs(model, i, batch, False))
            if current != 0 and reshard_fwd:
                yield from post_forward(current)
            gathers.end_forward()
            # ---- backward: each module's pre-backward all-gathers it (unless prefetched), waits, and prefetches the
            # module before it in post-forward order (_backward_prefetch); its post-backward reduces its gradients
            bwd_order = list(dict.fromkeys(self.unit_of[i] for i in reversed(range(len(model.layers)))))
            remaining = {u.index: len(u.layers) for u in units}
            started: set[int] = set()
            for i in reversed(range(len(model.layers))):
                u = self.unit_of[i]
                if u not in started:  # pre_backward
                    started.add(u)
                    if u != 0 and reshard_fwd:
                        yield from unshard(u)
                    yield from wait_for_unshard(u, False)
                    k = bwd_order.index(u) + 1
                    # _backward_prefetch: the module before it (default_prefetch), or the blocks
                    # set_modules_to_backward_prefetch names (the next n in backward; the root keeps the default)
                    n = self.cfg.modules_to_backward_prefetch
                    n = 1 if u == 0 or not n else n  # an empty list leaves the default (default_prefetch)
                    for target in bwd_order[k : k + n] if reshard_fwd else ():
                        if target != 0:
                            yield from unshard(target)
                for label, costs in recompute_kernels(model, self.regions, i, batch):  # checkpointing
                    yield from compute(label, costs)
                yield from compute(f"bwd {model.layers[i].name}", _layer_costs(model, i, batch, True))
                remaining[u] -= 1
                if remaining[u] == 0:  # post_backward: reshard (reshard_after_backward), then reduce
                    gathers.unsharded.discard(u)
                    yield from self._post_backward2(units[u], first, sync, rs_state)

        for step in range(self.cfg.accumulation):
            yield from micro_step(step == 0, step == self.cfg.accumulation - 1)
        yield from self._optimizer_step()  # finalize_backward waits for the last post-reduce events

    def _reduce_scatter2(self, u: FsdpUnit, rs_state: list[simpy.Event], grads: float | None = None) -> Proc:
        """FSDP2's ``post_backward`` -> ``foreach_reduce``. Waits for: the previous module's reduce-scatter (the
        compute stream waits for it before this copy-in: ``reduce_scatter_max_input_buffers`` 1), then the
        compute stream. Pays: on the compute stream a new reduce-scatter input of the module's bytes and
        ``chunk_cat`` of the gradients into it (the reduce dtype); on the reduce-scatter stream a pre-division
        (float16 and float64), the reduce-scatter (``ReduceOp.AVG`` for float32 and bfloat16), with HSDP the all-reduce
        across the groups on the all-reduce stream after it, then the post-division (float16 and float64) on whichever
        stream reduced last. With Gloo each call blocks the thread, and ProcessGroupGloo's reduce-scatter is its
        clone, all-reduce and chunk copy (as for FSDP1). ``grads``: the bytes ``chunk_cat`` reads (accumulated
        gradients in reduce_dtype; default the module's bytes in param_dtype)."""
        if u.nbytes == 0:
            return
        lane = self.rs_lane
        # reclaim the oldest reduce-scatter inputs until fewer than max_input_buffers remain: the compute stream
        # waits for their reduce-scatters
        waits = []
        while rs_state and len(rs_state) >= self.cfg.reduce_scatter_max_input_buffers:
            waits.append(rs_state.pop(0))
        reduced = u.nbytes * self.rs_scale  # the reduce-scatter's input, in reduce_dtype
        self._fresh("compute", f"reduce-scatter input unit {u.index}", reduced)
        # chunk_cat reads the gradients (param_dtype) and writes the input, casting where the dtypes differ
        copy_in = self._cast(f"reduce-scatter copy-in unit {u.index}", u.nbytes if grads is None else grads, reduced,
                             "compute")  # fmt: skip
        done = self._issue("compute", copy_in, tuple(waits))
        yield from self._blocked(done, self.cpu_rank)
        timing = self.rs[u.index] = [math.nan, math.nan, math.nan, 0.0]

        def ready(event: simpy.Event) -> None:
            timing[0] = self.env.now

        if done.callbacks is None:
            ready(done)
        else:
            done.callbacks.append(ready)
        divides = self._divides()
        pre = predivide_factor(self.world) if divides else 1.0
        first = self._kernel(f"pre-divide unit {u.index}", 0.0, 2.0 * reduced, lane=lane) if pre > 1 else None
        done = self._issue(lane, first or self._marker(), self._wait_stream("compute"))
        yield from self._blocked(done, self.cpu_rank)
        kept = reduced / self.shard_world
        self._fresh(lane, f"reduce-scatter output unit {u.index}", kept)
        lane = yield from self._reduce(u, reduced, lane, self.blocking and self.shard_world > 1, False, rs_state)
        if divides and self.world / pre > 1:
            done = self._issue(lane, self._kernel(f"post-divide unit {u.index}", 0.0, 2.0 * kept, lane=lane))
            yield from self._blocked(done, self.cpu_rank)
        yield from self._cast_back(u, kept, lane)

    def _reduce_scatter(self, u: FsdpUnit) -> Proc:
        """The post-backward stream waits for the compute stream, pre-divides the unit's gradient, reduce-scatters
        it and post-divides the shard (``_post_backward_hook`` / ``_reduce_grad``). With Gloo the call clones the
        gradient first, returns when the allreduce is done, and then copies this rank's chunk out (in ``wait``).
        NO_SHARD all-reduces the whole gradient instead and post-divides all of it (``_reduce_grad_no_shard``;
        with Gloo no clone and no chunk copy). HYBRID_SHARD reduce-scatters within the shard group, then, on its
        all-reduce stream once the post-backward stream is there, all-reduces the shard across the replica groups
        and post-divides it (``_reduce_grad``: ``_all_reduce_stream``); the division factors are the whole world's
        (``_init_utils.py``: ``data_parallel_world_size *= _inter_node_pg.size()``)."""
        lane = self.rs_lane
        shard = self.shard_world
        reduced = u.nbytes * self.rs_scale  # the gradient in reduce_dtype
        kept = reduced / shard if self.sharded else reduced  # what the post-division touches
        after = self._wait_stream("compute")
        timing = self.rs[u.index] = [math.nan, math.nan, math.nan, 0.0]

        def ready(event: simpy.Event) -> None:
            timing[0] = self.env.now

        for event in after:
            if event.callbacks is None:  # already processed (a CPU rank waited for it): ready now
                ready(event)
            else:
                event.callbacks.append(ready)
        if self.reduce_dtype != self.ag_dtype and u.nbytes:  # _post_backward_hook: flat_param.grad.to(_reduce_dtype)
            done = self._issue(lane, self._cast(f"cast gradient unit {u.index}", u.nbytes, reduced, lane), after)
            after = ()
            yield from self._blocked(done, self.cpu_rank)
        pre = predivide_factor(self.world)
        first = self._kernel(f"pre-divide unit {u.index}", 0.0, 2.0 * reduced, lane=lane) if pre > 1 else None
        done = self._issue(lane, first or self._marker(), after)
        yield from self._blocked(done, self.cpu_rank)
        gloo_copies = self.sharded and self.blocking and shard > 1 and u.nbytes > 0
        lane = yield from self._reduce(u, reduced, lane, gloo_copies, True)
        if self.world / pre > 1:
            done = self._issue(lane, self._kernel(f"post-divide unit {u.index}", 0.0, 2.0 * kept, lane=lane))
            yield from self._blocked(done, self.cpu_rank)
        yield from self._cast_back(u, kept, lane)

    def _reduce(self, u: FsdpUnit, reduced: float, lane: str, gloo_copies: bool, fresh_output: bool,
                rs_state: list[simpy.Event] | None = None) -> Generator[simpy.Event, Any, str]:
        """The reduction of ``u``'s gradient (``reduced`` bytes) issued on ``lane``; returns the lane that reduces
        last. With ``gloo_copies`` (ProcessGroupGloo's ``reduce_scatter_tensor_coalesced``) the call clones the
        input on the calling stream first and, in ``wait``, copies this rank's chunk out (``fresh_output``: into a
        new tensor, FSDP1's ``_get_reduce_scatter_tensors``); then the reduce-scatter (NO_SHARD: the all-reduce),
        whose end joins ``rs_state`` where given (FSDP2's ``reduce_scatter_states``); with HSDP the all-reduce
        stream waits for this one and all-reduces the shard across the replica groups. Waits for: each Gloo call and
        each of a CPU rank's kernels (the calling thread). Pays: the copies and the collectives' simulated times."""
        kept = reduced / self.shard_world if self.sharded else reduced
        if gloo_copies:  # reduce_scatter_tensor_coalesced: inputTensors[i].clone() on the calling stream
            self._fresh(lane, f"clone unit {u.index}", reduced)
            done = self._issue(lane, self._kernel(f"clone unit {u.index}", 0.0, self.g.gpu.copy_bytes(reduced),
                                                  lane=lane))  # fmt: skip
            yield from self._blocked(done, self.cpu_rank)
        done = self._issue(lane, self._collective("reduce_scatter" if self.sharded else "allreduce", u, lane))
        if rs_state is not None:
            rs_state.append(done)
        yield from self._blocked(done, self.blocking)
        if gloo_copies:  # LambdaWork's wait: outputTensors[i].copy_(buffers[i].chunk(world)[rank])
            if fresh_output:
                self._fresh(lane, f"sharded gradient unit {u.index}", kept)
            done = self._issue(lane, self._kernel(f"chunk copy unit {u.index}", 0.0, self.g.gpu.copy_bytes(kept),
                                                  lane=lane))  # fmt: skip
            yield from self._blocked(done, self.cpu_rank)
        if self.hybrid:  # the all-reduce stream waits for the reduce-scatter (post-backward) stream
            lane = self.ar_lane
            done = self._issue(lane, self._collective("allreduce_replicas", u, lane), self._wait_stream(self.rs_lane))
            yield from self._blocked(done, self.blocking)
        return lane

    def _cast_back(self, u: FsdpUnit, kept: float, lane: str) -> Proc:
        """The reduced gradient (``kept`` bytes in reduce_dtype) cast to the parameters' dtype for the optimizer
        where they differ (FSDP1 ``_cast_grad_to_param_dtype``, FSDP2 ``_to_dtype_if_needed(reduce_output,
        orig_dtype)``), on the stream that reduced last."""
        if self.reduce_dtype != self.orig_dtype and kept > 0:
            write = kept * DTYPE_BYTES[self.orig_dtype] / DTYPE_BYTES[self.reduce_dtype]
            done = self._issue(lane, self._cast(f"cast gradient back unit {u.index}", kept, write, lane))
            yield from self._blocked(done, self.cpu_rank)


class _Gathers1:
    """FSDP1's all-gathers for one iteration of :class:`_Fsdp` (``_unshard``, ``_reshard``, the rate limiter,
    ``_prefetch_handle`` and the hooks' ``wait_stream``): which units are unsharded or prefetched, the free events
    the rate limiter holds, and the events the next kernel on the compute stream waits for."""

    def __init__(self, fsdp: _Fsdp) -> None:
        self.f = fsdp
        self.free_queue: deque[simpy.Event] = deque()  # the rate limiter's free events, oldest first
        self.unsharded: set[int] = set()
        self.prefetched: set[int] = set()
        self.waits: list[simpy.Event] = []  # a hook's wait_stream(unshard stream), applied to the next kernel issued

    def unshard(self, u: int) -> Proc:
        """``_unshard``: the rate limiter (the CPU blocks on the oldest free when two are queued), then the
        all-gather on the unshard stream (with Gloo, the call returns when it is done)."""
        f = self.f
        if u in self.unsharded:
            return
        if f.cfg.limit_all_gathers and len(self.free_queue) >= 2:
            event = self.free_queue.popleft()
            if not event.processed:
                yield event
        unit = f.units[u]
        f._fresh(f.ag_lane, f"unsharded unit {u}", unit.nbytes)  # _alloc_storage: filled by the gather
        if f.ag_dtype != f.orig_dtype and unit.nbytes:
            # pre_unshard -> _use_low_precision_shard: _mp_shard.copy_(_local_shard), a cast of the shard on the
            # pre-unshard stream, which the all-gather waits for
            shard = unit.nbytes / f.shard_world
            done = f._issue(f.ag_lane, f._cast(f"cast shard unit {u}", shard * f.orig_scale, shard, f.ag_lane))
            yield from f._blocked(done, f.cpu_rank)
        done = f._issue(f.ag_lane, f._collective("allgather", unit, f.ag_lane))
        self.unsharded.add(u)
        yield from f._blocked(done, f.blocking)

    def reshard(self, u: int) -> None:
        """``_reshard``: the unit's parameters freed, an event on the compute stream the rate limiter holds."""
        self.unsharded.discard(u)
        self.prefetched.discard(u)
        marker = self.f._issue("compute", self.f._marker())
        if self.f.cfg.limit_all_gathers:
            self.free_queue.append(marker)

    def wait_unshard(self) -> None:
        """A hook's ``current_stream().wait_stream(unshard stream)``: the next kernel issued waits for it."""
        self.waits[:] = list(self.f._wait_stream(self.f.ag_lane))

    def compute(self, label: str, costs: tuple[float, float, float | None]) -> Proc:
        """A layer's kernel on the compute stream, after the waits a hook set; a CPU rank's thread waits for it."""
        f = self.f
        done = f._issue("compute", f._kernel(label, *costs), tuple(self.waits))
        self.waits.clear()
        yield from f._blocked(done, f.cpu_rank)

    def cast_whole(self, u: int) -> Proc:
        """NO_SHARD with mixed precision: ``_unshard`` still runs ``pre_unshard`` before each forward, which
        casts the whole flat parameter (``_use_low_precision_shard``) on the pre-unshard stream."""
        f = self.f
        nbytes = f.units[u].nbytes
        if f.ag_dtype != f.orig_dtype and nbytes:
            done = f._issue(f.ag_lane, f._cast(f"cast parameters unit {u}", nbytes * f.orig_scale, nbytes, f.ag_lane))
            yield from f._blocked(done, f.cpu_rank)

    def prefetch(self, order: list[int], u: int) -> Proc:
        """``_prefetch_handle``: the unit after ``u`` in backward order, if it needs an all-gather."""
        k = order.index(u) + 1
        if k < len(order) and self.f.cfg.sharding in _RESHARD_AFTER_FORWARD and order[k] != 0:
            yield from self.unshard(order[k])
            self.prefetched.add(order[k])


class _Gathers2:
    """FSDP2's all-gathers for one iteration of :class:`_Fsdp` (``FSDPParamGroup.unshard``, ``wait_for_unshard``,
    ``reshard``): which modules are unsharded or being gathered, and the events the copy-in and all-gather streams
    were told to wait on (``wait_event``), applied to the next op issued there (the streams run in order)."""

    def __init__(self, fsdp: _Fsdp) -> None:
        self.f = fsdp
        self.gate: list[simpy.Event] = []  # events the all-gather streams wait on before their next op
        self.pending: dict[int, simpy.Event] = {}  # module -> its all-gather's end, until wait_for_unshard
        self.unsharded: set[int] = set()
        self.state: list[simpy.Event] = []  # AllGatherState: the last forward copy-out, freed by the next wait
        self.post_world = fsdp.cfg.reshard_after_forward or 0  # ranks of the post-forward mesh (0: none)
        self.post_sharded: dict[int, simpy.Event] = {}  # module -> its post-forward slice's copy (reshard event)

    def unshard(self, u: int) -> Proc:
        """``FSDPParamGroup.unshard`` -> ``foreach_all_gather``: on the copy-in stream (after the events the
        all-gather streams were told to wait on) a new output of the module's bytes and a copy of this rank's
        shard into it; the all-gather stream waits for the copy-in stream and all-gathers."""
        f, gate = self.f, self.gate
        unit = f.units[u]
        if u in self.unsharded or u in self.pending or unit.nbytes == 0:
            return
        nbytes = unit.nbytes
        shard = nbytes / f.shard_world
        kind = "allgather"
        if u in self.post_sharded:  # resharded to the post-forward mesh: gathered within it, from its slice (kept in
            # param_dtype) once the slice's copy is done (_reshard_after_forward_event)
            gate.append(self.post_sharded.pop(u))
            shard, kind = nbytes / self.post_world, "allgather_post"
        elif f.ag_dtype != f.orig_dtype:  # _get_param_all_gather_inputs: a foreach copy casting the shards
            cast = f._cast(f"cast shard unit {u}", shard * f.orig_scale, shard, f.copy_in_lane)
            done = f._issue(f.copy_in_lane, cast, tuple(gate))
            gate.clear()
            yield from f._blocked(done, f.cpu_rank)
        f._fresh(f.copy_in_lane, f"all-gather output unit {u}", nbytes)
        copy_in = f._kernel(f"all-gather copy-in unit {u}", 0.0, f.g.gpu.copy_bytes(shard), lane=f.copy_in_lane)
        done = f._issue(f.copy_in_lane, copy_in, tuple(gate))
        gate.clear()
        yield from f._blocked(done, f.cpu_rank)
        done = f._issue(f.ag_lane, f._collective(kind, unit, f.ag_lane), f._wait_stream(f.copy_in_lane))
        self.pending[u] = done
        yield from f._blocked(done, f.blocking)

    def wait_for_unshard(self, u: int, forward: bool) -> Proc:
        """``wait_for_unshard``: in forward the all-gather streams first wait for the previous module's
        copy-out (the saved ``AllGatherState``); the compute stream waits for the all-gather and copies the
        output into the parameters (``split_with_sizes_copy``); in forward that copy-out becomes the saved
        state, in backward the all-gather streams wait for it at once."""
        f = self.f
        done = self.pending.pop(u, None)
        if done is None:
            return
        if forward and self.state:
            self.gate.extend(self.state)
            self.state.clear()
        seconds = f._param_faults(f.units[u])
        if seconds > 0:
            f._issue("compute", f._kernel(f"page faults: parameters unit {u}", 0.0, 0.0, seconds))
        copy_out = f._kernel(f"all-gather copy-out unit {u}", 0.0, f.g.gpu.copy_bytes(f.units[u].nbytes))
        out = f._issue("compute", copy_out, (done,))
        self.unsharded.add(u)
        (self.state if forward else self.gate).append(out)
        yield from f._blocked(out, f.cpu_rank)

    def post_forward(self, u: int) -> Proc:
        """``post_forward`` -> ``reshard``: free the module, or with an integer ``reshard_after_forward`` keep
        this rank's slice of the post-forward mesh (``_to_sharded_post_forward``: a copy of 1/n of the module
        on the compute stream, whose end the all-gather streams wait for before gathering it again)."""
        f = self.f
        self.unsharded.discard(u)
        if self.post_world and f.units[u].nbytes:
            part = f.units[u].nbytes / self.post_world
            f._fresh("compute", f"post-forward shard unit {u}", part)
            copy = f._kernel(f"post-forward shard unit {u}", 0.0, f.g.gpu.copy_bytes(part))
            self.post_sharded[u] = done = f._issue("compute", copy)
            yield from f._blocked(done, f.cpu_rank)

    def end_forward(self) -> None:
        """The root's post-forward frees the last all-gather result after its copy-out: the all-gather streams
        wait for it."""
        self.gate.extend(self.state)
        self.state.clear()
