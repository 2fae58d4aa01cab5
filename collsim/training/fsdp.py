"""One FSDP training iteration (PyTorch ``FullyShardedDataParallel``) with NCCL: units, all-gathers, reduce-scatters.

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
* **Optimizer.** On the shard only: 1/world of the parameters.

The CPU (Python, autograd) is assumed to run ahead of the GPU, as it does in a GPU-bound step: it issues in program
order at once, and only the rate limiter's ``synchronize`` makes it wait for the GPU. All-gathers and reduce-scatters
that run at once (different streams) share the network: each takes half while they overlap (:meth:`_Gpu.nccl`,
``shared``). Each collective's time alone is NCCL's simulation of it on the cluster.

Not modelled: mixed-precision casts (``MixedPrecision``: give ``param_dtype`` for the collectives' bytes), CPU
offload, HYBRID_SHARD, ``no_sync``, FSDP2 (``fully_shard``), the CPU's own time (a CPU-bound step).
"""

from __future__ import annotations

import math
import re
from collections import Counter, deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import simpy

from collsim.training.model import DTYPE_BYTES, ModelSpec
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
)

__all__ = ["FsdpConfig", "FsdpUnit", "NcclCollective", "fsdp_units", "simulate_fsdp_step"]

Proc = Generator[simpy.Event, Any, None]

#: ``(collective, nbytes) -> (seconds, channels)``: NCCL's simulation of one ``allgather`` or ``reduce_scatter`` of
#: ``nbytes`` (nccl-tests' size: the whole unsharded buffer) on the cluster.
NcclCollective = Callable[[str, int], tuple[float, int]]

SHARDINGS = ("full_shard", "shard_grad_op")
PREFETCHES = ("backward_pre", "backward_post", "none")
_AG_LANE = "NCCL all-gather stream"
_RS_LANE = "NCCL reduce-scatter stream"


@dataclass(frozen=True)
class FsdpConfig:
    """One FSDP configuration (``FullyShardedDataParallel``'s arguments).

    Parameters
    ----------
    batch_size : int
        Samples per GPU.
    sharding : str
        ``full_shard`` (FSDP's default: parameters freed after forward, all-gathered again in backward) or
        ``shard_grad_op`` (kept from forward to backward).
    backward_prefetch : str
        ``backward_pre`` (default), ``backward_post`` or ``none``.
    forward_prefetch : bool
        FSDP's ``forward_prefetch`` (default False).
    limit_all_gathers : bool
        FSDP's rate limiter (default True): at most two freed-but-not-yet-synchronised units.
    comm_dtype : str, optional
        dtype of the all-gathered parameters and reduce-scattered gradients (``MixedPrecision``); default: each
        parameter's own.
    optimizer : str
        A key of the step constants' ``optimizer_traffic``.
    wrap : str, optional
        The wrapped modules, as a layer-name pattern with ``*`` for the block index (``transformer.h.*``); default:
        the most common ``prefix.N`` in the layer names (:func:`fsdp_units`).
    """

    batch_size: int = 32
    sharding: str = "full_shard"
    backward_prefetch: str = "backward_pre"
    forward_prefetch: bool = False
    limit_all_gathers: bool = True
    comm_dtype: str | None = None
    optimizer: str = "sgd"
    wrap: str | None = None


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


_BLOCK = re.compile(r"^(.*?)\.(\d+)(?:[.:]|$)")


def _auto_prefix(names: Sequence[str]) -> str | None:
    """The most common ``prefix`` of ``prefix.N...`` layer names (``transformer.h``, ``model.layers``), or None."""
    counts: Counter[str] = Counter()
    for name in names:
        m = _BLOCK.match(name)
        if m:
            counts[m.group(1)] += 1
    if not counts:
        return None
    best = max(counts.items(), key=lambda kv: (len({n for n in names if n.startswith(kv[0] + ".")}), kv[1]))
    return best[0]


def fsdp_units(model: ModelSpec, world: int, wrap: str | None = None, comm_dtype: str | None = None) -> list[FsdpUnit]:
    """Cut ``model`` into FSDP units: one per block matched by ``wrap``, the rest in the root unit (index 0).

    Parameters
    ----------
    model : ModelSpec
        Parameters and layers.
    world : int
        Ranks the flat parameters are sharded over (padding).
    wrap : str, optional
        ``prefix.*``: every layer named ``prefix.N`` or ``prefix.N.<...>`` belongs to block N's unit (as
        ``transformer_auto_wrap_policy`` wraps each block). Default: the most common such prefix; none: one unit.
    comm_dtype : str, optional
        dtype of the flat parameter in the collectives (default: each parameter's own).

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
    names = [ly.name for ly in model.layers]
    prefix = wrap[:-2] if wrap and wrap.endswith(".*") else wrap
    if wrap is None:
        prefix = _auto_prefix(names)
    block_of: list[str] = []
    for name in names:
        key = ""
        if prefix:
            m = re.match(re.escape(prefix) + r"\.(\d+)(?:[.:]|$)", name)
            if m:
                key = f"{prefix}.{m.group(1)}"
        block_of.append(key)
    order = ["", *dict.fromkeys(k for k in block_of if k)]
    owner: dict[int, str] = {}
    for i, layer in enumerate(model.layers):
        for p in layer.params:
            owner.setdefault(p, block_of[i])
    units = []
    for u, key in enumerate(order):
        params = tuple(p for p in range(len(model.params)) if owner.get(p, "") == key)
        layers = tuple(i for i, k in enumerate(block_of) if k == key)
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
    nccl: NcclCollective,
) -> StepResult:
    """Simulate one FSDP iteration with NCCL.

    Parameters
    ----------
    model : ModelSpec
        Parameters (registration order) and layers (forward order).
    cfg : FsdpConfig
        Sharding, prefetching, the rate limiter, the batch.
    gpu : GpuCompute
        Each rank's GPU (all alike).
    consts : StepConstants
        ``topologies/software/training.yaml``.
    world : int
        Ranks.
    nccl : NcclCollective
        NCCL's time and channels for an all-gather or reduce-scatter of n bytes.

    Returns
    -------
    StepResult
        ``buckets`` are the units' reduce-scatters (ready: the unit's post-backward hook); the timeline has the
        compute stream, the all-gather stream and the reduce-scatter stream.
    """
    if cfg.sharding not in SHARDINGS:
        raise ValueError(f"unknown sharding {cfg.sharding!r}; expected one of {', '.join(SHARDINGS)}")
    if cfg.backward_prefetch not in PREFETCHES:
        raise ValueError(
            f"unknown backward_prefetch {cfg.backward_prefetch!r}; expected one of {', '.join(PREFETCHES)}"
        )
    if cfg.optimizer not in consts.optimizer_traffic:
        raise ValueError(f"unknown optimizer {cfg.optimizer!r}; expected one of {', '.join(consts.optimizer_traffic)}")
    if cfg.batch_size < 1 or world < 1:
        raise ValueError("batch_size and world must be at least 1")
    units = fsdp_units(model, world, cfg.wrap, cfg.comm_dtype)
    base = _Plan.build(model, DdpConfig(cfg.batch_size, optimizer=cfg.optimizer), consts)
    compute_s = _run_compute_only(gpu, base)
    return _Fsdp(model, cfg, gpu, consts, world, nccl, units).run(compute_s)


class _Fsdp:
    """One iteration: the CPU's program (a process issuing in order, blocking only in the rate limiter), the compute
    stream, and the two NCCL streams (processes taking their kernels in issue order)."""

    def __init__(
        self,
        model: ModelSpec,
        cfg: FsdpConfig,
        gpu: GpuCompute,
        consts: StepConstants,
        world: int,
        nccl: NcclCollective,
        units: list[FsdpUnit],
    ) -> None:
        self.model, self.cfg, self.consts, self.world, self.nccl, self.units = model, cfg, consts, world, nccl, units
        self.env = simpy.Environment()
        self.spans: list[Span] = []
        self.g = _Gpu(self.env, gpu, self.spans)
        self.unit_of = {i: u.index for u in units for i in u.layers}
        self.streams: dict[str, simpy.Store] = {
            name: simpy.Store(self.env) for name in ("compute", _AG_LANE, _RS_LANE)
        }
        self.tail: dict[str, simpy.Event] = {}  # the last op issued on each stream: what wait_stream waits for
        self.durations: list[float] = []
        self.rs: dict[int, list[float]] = {}  # unit -> [ready, start, end, seconds]
        steps = (world - 1) / world if world > 1 else 0.0  # one ring phase: (n-1)/n of the buffer per rank
        self.hbm_per_byte = consts.nccl_hbm_bytes_per_step_byte * steps

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

    # ------------------------------------------------------------------------------------------------------ ops
    def _collective(self, kind: str, u: FsdpUnit, lane: str) -> Callable[[], Proc]:
        def op() -> Proc:
            seconds, channels = self.nccl(kind, u.nbytes) if self.world > 1 and u.nbytes else (0.0, 0)
            self.durations.append(seconds)
            start = self.env.now
            label = f"{'all-gather' if kind == 'allgather' else 'reduce-scatter'} unit {u.index}"
            yield from self.g.nccl(label, seconds, channels, self.hbm_per_byte * u.nbytes, u.index, lane, True)
            if kind == "reduce_scatter":
                self.rs[u.index][1:] = [start, self.env.now, seconds]

        return op

    def _kernel(self, label: str, flops: float, nbytes: float, seconds: float | None = None,
                lane: str = "compute") -> Callable[[], Proc]:  # fmt: skip
        def op() -> Proc:
            yield from self.g.kernel(lane, label, flops, nbytes, seconds)

        return op

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
        env.run(env.process(self._program()))
        iteration = float(env.now)
        buckets = tuple(  # in the order the reduce-scatters were issued (backward order)
            BucketTiming(u, len(self.units[u].params), self.units[u].nbytes, *self.rs[u]) for u in self.rs
        )
        notes = (
            f"FSDP {self.cfg.sharding}, {len(self.units) - 1} wrapped unit(s) + root, backward_prefetch "
            f"{self.cfg.backward_prefetch}" + (", limit_all_gathers" if self.cfg.limit_all_gathers else ""),
            "the CPU issues ahead of the GPU; the optimizer updates the 1/world shard",
        )
        return StepResult("nccl", self.world, iteration, compute_s, sum(self.durations), buckets, tuple(self.spans),
                          notes)  # fmt: skip

    def _program(self) -> Proc:
        """The CPU thread: forward and backward in program order, issuing kernels and collectives."""
        model, cfg = self.model, self.cfg
        units = self.units
        batch = cfg.batch_size
        free_queue: deque[simpy.Event] = deque()
        unsharded: set[int] = set()
        prefetched: set[int] = set()

        def unshard(u: int) -> Generator[simpy.Event, Any, None]:
            """``_unshard``: the rate limiter (the CPU blocks on the oldest free when two are queued), then the
            all-gather on the unshard stream."""
            if u in unsharded:
                return
            if cfg.limit_all_gathers and len(free_queue) >= 2:
                event = free_queue.popleft()
                if not event.processed:
                    yield event
            self._issue(_AG_LANE, self._collective("allgather", units[u], _AG_LANE))
            unsharded.add(u)

        def reshard(u: int) -> None:
            unsharded.discard(u)
            prefetched.discard(u)
            marker = self._issue("compute", self._marker())
            if cfg.limit_all_gathers:
                free_queue.append(marker)

        waits: list[simpy.Event] = []  # a hook's wait_stream(unshard stream), applied to the next kernel issued

        def wait_unshard() -> None:
            waits[:] = list(self._wait_stream(_AG_LANE))

        def compute(label: str, costs: tuple[float, float, float | None]) -> None:
            self._issue("compute", self._kernel(label, *costs), tuple(waits))
            waits.clear()

        # ---- forward: the root's all-gather, then each unit's before its first layer
        fwd_units = [0] + [self.unit_of[i] for i in range(len(model.layers)) if self.unit_of[i] != 0]
        fwd_order = list(dict.fromkeys(fwd_units))
        yield from unshard(0)
        wait_unshard()
        current = 0
        for i, layer in enumerate(model.layers):
            u = self.unit_of[i]
            if u != current:
                if current != 0 and cfg.sharding == "full_shard":
                    reshard(current)  # post-forward of the unit just left (the root is never freed after forward)
                if u != 0 and u not in prefetched:
                    yield from unshard(u)
                wait_unshard()
                if u != 0 and cfg.forward_prefetch:
                    nxt = fwd_order.index(u) + 1
                    if nxt < len(fwd_order) and fwd_order[nxt] != 0:
                        yield from unshard(fwd_order[nxt])
                        prefetched.add(fwd_order[nxt])
                current = u
            compute(f"fwd {layer.name}", _layer_costs(model, i, batch, False))
        if current != 0 and cfg.sharding == "full_shard":
            reshard(current)
        # ---- backward: units in reverse order of their last layer
        bwd_order = list(dict.fromkeys(self.unit_of[i] for i in reversed(range(len(model.layers)))))
        remaining = {u.index: len(u.layers) for u in units}
        started: set[int] = set()
        for i in reversed(range(len(model.layers))):
            u = self.unit_of[i]
            if u not in started:  # the unit's pre-backward hook
                started.add(u)
                if u != 0 and cfg.sharding == "full_shard" and u not in prefetched:
                    yield from unshard(u)
                if u != 0 and cfg.sharding == "full_shard":
                    wait_unshard()
                if cfg.backward_prefetch == "backward_pre":
                    yield from self._prefetch(bwd_order, u, unshard, prefetched)
            compute(f"bwd {model.layers[i].name}", _layer_costs(model, i, batch, True))
            remaining[u] -= 1
            if remaining[u] == 0:  # the post-backward hook: all of the unit's gradients are ready
                reshard(u)  # _should_free_in_backward: every sharded strategy frees after backward
                self._reduce_scatter(units[u])
                if cfg.backward_prefetch == "backward_post":
                    yield from self._prefetch(bwd_order, u, unshard, prefetched)
        # ---- the end of backward: wait for the post-backward stream, then the optimizer on the shard
        shard = 1.0 / self.world
        opt = _optimizer_bytes(model, self.consts, cfg.optimizer) * shard
        self._issue("compute", self._kernel("optimizer (shard)", 0.0, opt), self._wait_stream(_RS_LANE))
        yield self.tail["compute"]

    def _prefetch(self, order: list[int], u: int, unshard: Callable[[int], Proc], prefetched: set[int]) -> Proc:
        """``_prefetch_handle``: the unit after ``u`` in backward order, if it needs an all-gather."""
        k = order.index(u) + 1
        if k < len(order) and self.cfg.sharding == "full_shard" and order[k] != 0:
            yield from unshard(order[k])
            prefetched.add(order[k])

    def _reduce_scatter(self, u: FsdpUnit) -> None:
        """The post-backward stream waits for the compute stream, pre-divides the unit's gradient, reduce-scatters
        it and post-divides the shard (``_post_backward_hook`` / ``_reduce_grad``)."""
        after = self._wait_stream("compute")
        timing = self.rs[u.index] = [math.nan, math.nan, math.nan, 0.0]

        def ready(event: simpy.Event) -> None:
            timing[0] = self.env.now

        for event in after:
            event.callbacks.append(ready)
        pre = predivide_factor(self.world)
        first = self._kernel(f"pre-divide unit {u.index}", 0.0, 2.0 * u.nbytes, lane=_RS_LANE) if pre > 1 else None
        self._issue(_RS_LANE, first or self._marker(), after)
        self._issue(_RS_LANE, self._collective("reduce_scatter", u, _RS_LANE))
        if self.world / pre > 1:
            self._issue(_RS_LANE, self._kernel(f"post-divide unit {u.index}", 0.0, 2.0 * u.nbytes / self.world,
                                               lane=_RS_LANE))  # fmt: skip
