"""FSDP with Gloo (ProcessGroupGloo, torch 2.13): every all-gather and reduce-scatter blocks the thread issuing it;
reduce_scatter_tensor is a clone, an allreduce of the whole buffer and a chunk copy. Closed forms on tiny models
(measured layer times, so every time is exact)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from collsim.api import Simulator
from collsim.training import GpuCompute, Layer, ModelSpec, Param, StepConstants
from collsim.training.fsdp import FsdpConfig, fsdp_units, predivide_factor, simulate_fsdp_step

MB4 = 1 << 20  # float32 elements of a 4 MiB parameter
BARE = StepConstants(0.0, 0.0, {"none": (0.0, 0.0), "sgd": (3.0, 0.0)}, 0.0)
GPU = GpuCompute("test", 1e14, 1e12, 10**9, 1.0, 1.0)  # 1e12 B/s of HBM
CPU = GpuCompute("cpu", 1e12, 1e10, 0, 1.0, 1.0, cores=1.0)  # a CPU rank: 1e10 B/s of memory, one core


def _model(blocks: int = 2, fwd: float = 1e-3, bwd: float = 2e-3) -> ModelSpec:
    """An embedding, ``blocks`` blocks ``h.N`` and a head, one 4 MiB float32 parameter each."""
    names = ["embed", *[f"h.{i}" for i in range(blocks)], "head"]
    params = tuple(Param(f"{n}.weight", MB4) for n in names)
    layers = tuple(Layer(n, (i,), 0.0, 0.0, 0.0, fwd_time_s=fwd, bwd_time_s=bwd) for i, n in enumerate(names))
    return ModelSpec("tiny", params, layers, "test")


def _gloo(ag: float, ar: float, calls: list[tuple[str, int]] | None = None):  # type: ignore[no-untyped-def]
    def cost(kind: str, nbytes: int) -> tuple[float, float]:
        if calls is not None:
            calls.append((kind, nbytes))
        return (ag if kind == "allgather" else ar, 0.0)

    return cost


def _cpu_closed_form(
    model: ModelSpec, cfg: FsdpConfig, world: int, ag: float, ar: float, bw: float, wa: float = 0.0,
    touch: float = 0.0, fresh: float = math.inf,
) -> float:  # fmt: skip
    """The iteration on CPU ranks: one thread runs every layer, copy and collective in turn (``wa``: the CPU's
    write-allocate bytes per byte, paid by the clone and the chunk copy, not by the in-place divisions; ``touch``:
    bytes/s of page faults, paid by every new allocation of at least ``fresh`` bytes)."""

    def faults(nbytes: float) -> float:
        return nbytes / touch if touch > 0 and nbytes >= fresh else 0.0

    units = fsdp_units(model, world, cfg.wrap)
    layers = sum(ly.fwd_time_s + ly.bwd_time_s for ly in model.layers)  # type: ignore[operator]
    total = layers
    if cfg.sharding == "no_shard":  # no all-gather, no clone, no chunk: the whole gradient all-reduced and divided
        for u in units:
            n = u.nbytes
            total += faults(n) + (2 + wa) * n / bw  # the flat gradient, a new tensor
            total += 2 * n / bw if predivide_factor(world) > 1 else 0.0  # pre-divide
            total += ar + (2 * n / bw if world / predivide_factor(world) > 1 else 0.0)  # allreduce, post-divide
        return total
    for u in units:
        n = u.nbytes
        # all-gathers: every unit in forward; the blocks again in backward (FULL_SHARD frees them after forward)
        gathers = 1 + (1 if u.index != 0 and cfg.sharding == "full_shard" else 0)
        # Gloo's allgather (its copy of the flat output into the views included) into a new unsharded storage
        total += gathers * (ag + faults(n))
        pre = predivide_factor(world)
        total += faults(n) + (2 + wa) * n / bw  # SplitWithSizesBackward's cat of the unit's gradients: a new tensor
        total += 2 * n / bw if pre > 1 else 0.0  # pre-divide
        total += faults(n) + (2 + wa) * n / bw  # reduce_scatter's clone: a new tensor
        total += ar + faults(n / world) + (2 + wa) * n / world / bw  # the allreduce; the chunk into a new shard
        total += 2 * n / world / bw if world / pre > 1 else 0.0  # post-divide
    return total


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("sharding", ["full_shard", "shard_grad_op", "no_shard"])
@pytest.mark.parametrize(("wa", "touch"), [(0.0, 0.0), (1.0, 0.0), (1.0, 2e9)])
def test_on_cpu_ranks_the_iteration_is_the_sum_of_everything(world: int, sharding: str, wa: float,
                                                              touch: float) -> None:  # fmt: skip
    # touch: fresh mappings from 2 MiB fault in at 2 GB/s (the 4 MiB units always; a shard only on 2 ranks)
    m = _model(3)
    cfg = FsdpConfig(batch_size=1, sharding=sharding, optimizer="none")
    cpu = dataclasses.replace(CPU, write_allocate=wa, first_touch_bw=touch, fresh_mapping_bytes=2 * 2**20)
    r = simulate_fsdp_step(m, cfg, cpu, BARE, world, gloo=_gloo(1e-3, 3e-3))
    assert r.backend == "gloo"
    expected = _cpu_closed_form(m, cfg, world, 1e-3, 3e-3, 1e10, wa, touch, 2 * 2**20)
    assert r.iteration_s == pytest.approx(expected, rel=1e-9)
    assert r.compute_s == pytest.approx(5 * 3e-3, rel=1e-12)
    faults = [s for s in r.spans if s.label.startswith("page faults")]
    assert bool(faults) == (touch > 0)
    if touch and sharding == "no_shard":  # per unit: the flat gradient only
        assert len(faults) == len(fsdp_units(m, world, cfg.wrap))
    elif touch:  # per unit: one per all-gather, the flat gradient, the clone, and the shard where it is 2 MiB or more
        units = fsdp_units(m, world, cfg.wrap)
        gathers = len(units) + (len(units) - 1 if sharding == "full_shard" else 0)
        assert len(faults) == gathers + sum(2 + (u.nbytes / world >= 2 * 2**20) for u in units)


def test_a_gpu_ranks_allocations_never_fault() -> None:
    """GPU memory comes from PyTorch's caching allocator: no page faults, whatever the CPU figures say."""
    m = _model(2)
    cfg = FsdpConfig(batch_size=1, optimizer="none")
    gpu = dataclasses.replace(GPU, first_touch_bw=1e9, fresh_mapping_bytes=1.0)
    r = simulate_fsdp_step(m, cfg, gpu, BARE, 2, gloo=_gloo(1e-3, 3e-3))
    assert r.iteration_s == simulate_fsdp_step(m, cfg, GPU, BARE, 2, gloo=_gloo(1e-3, 3e-3)).iteration_s
    assert not [s for s in r.spans if s.label.startswith("page faults")]


def test_gloo_is_asked_for_allgathers_of_the_unit_and_allreduces_of_its_whole_gradient() -> None:
    m = _model(2)
    calls: list[tuple[str, int]] = []
    simulate_fsdp_step(m, FsdpConfig(batch_size=1, optimizer="none"), GPU, BARE, 4, gloo=_gloo(1e-4, 1e-4, calls))
    root, block = 2 * 4 * MB4, 4 * MB4
    # forward: the root, h.0, h.1; backward: the head's hook prefetches h.1, h.1's prefetches h.0 (BACKWARD_PRE),
    # then each unit's reduce-scatter (an allreduce of its whole gradient) once its layers' gradients are in
    assert calls == [("allgather", root), ("allgather", block), ("allgather", block),
                     ("allgather", block), ("allgather", block),
                     ("allreduce", block), ("allreduce", block), ("allreduce", root)]  # fmt: skip


def test_on_gpus_one_gloo_call_at_a_time_and_each_reduce_scatter_after_its_gradients() -> None:
    m = _model(3)
    r = simulate_fsdp_step(m, FsdpConfig(batch_size=1, optimizer="none"), GPU, BARE, 4, gloo=_gloo(2e-3, 5e-3))
    calls = sorted((s for s in r.spans if s.lane.startswith("Gloo") and ("all-gather unit" in s.label
                                                                         or "reduce-scatter unit" in s.label)),
                   key=lambda s: s.start)  # fmt: skip
    assert len(calls) == 4 + 3 + 4  # forward 4, backward 3 blocks again, a reduce-scatter per unit
    for a, b in itertools.pairwise(calls):
        assert b.start >= a.end - 1e-15, (a, b)  # never two in flight: each blocks the thread that would issue the next
    for b in r.buckets:
        assert b.ready_s <= b.start_s
    # blocking: the iteration pays every collective; the GPU only runs what was queued before each
    assert r.iteration_s >= r.comm_s + 2e-3  # at least the first layer's forward and backward are not hidden
    assert r.comm_s == pytest.approx(7 * 2e-3 + 4 * 5e-3, rel=1e-12)


def test_nccl_overlaps_what_gloo_cannot() -> None:
    m = _model(3)
    cfg = FsdpConfig(batch_size=1, optimizer="none")
    nccl = simulate_fsdp_step(m, cfg, GPU, BARE, 4, lambda kind, n: (2e-3 if kind == "allgather" else 5e-3, 1))
    gloo = simulate_fsdp_step(m, cfg, GPU, BARE, 4, gloo=_gloo(2e-3, 5e-3))
    assert nccl.comm_s == pytest.approx(gloo.comm_s, rel=1e-12)
    assert gloo.iteration_s > nccl.iteration_s + 5e-3


def test_exactly_one_backend() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        simulate_fsdp_step(_model(1), FsdpConfig(), GPU, BARE, 2)
    with pytest.raises(ValueError, match="exactly one"):
        simulate_fsdp_step(_model(1), FsdpConfig(), GPU, BARE, 2, lambda k, n: (0.0, 1), gloo=_gloo(0.0, 0.0))


def test_a_glob_wraps_every_matching_layer_as_its_own_unit() -> None:
    names = ["fc1", "relu1", "fc2", "relu2", "fc10", "loss"]
    params = tuple(Param(f"{n}.weight", 4) for n in names if n.startswith("fc"))
    idx = {n: i for i, n in enumerate(p.name.split(".")[0] for p in params)}
    layers = tuple(Layer(n, (idx[n],) if n in idx else (), 0.0, 0.0, 0.0, fwd_time_s=1.0, bwd_time_s=1.0)
                   for n in names)  # fmt: skip
    units = fsdp_units(ModelSpec("mlp", params, layers, "t"), 2, wrap="fc*")
    assert [(u.name, u.layers) for u in units] == [("", (1, 3, 5)), ("fc1", (0,)), ("fc2", (2,)), ("fc10", (4,))]
    # a bare prefix is prefix.*, as before patterns
    assert [u.name for u in fsdp_units(_model(2), 2, wrap="h")] == ["", "h.0", "h.1"]


def test_the_api_simulates_both_backends_and_gloo_is_slower() -> None:
    sim = Simulator.from_source("fsdp-gpt2xl-2node-h100", ["cluster.nodes=1", "training.batch_size=2"])
    nccl, gloo = sim.step()
    assert (nccl.backend, gloo.backend) == ("nccl", "gloo")
    assert gloo.iteration_s > nccl.iteration_s
    assert gloo.iteration_s >= gloo.comm_s  # nothing of Gloo's hides: one call at a time, the thread waiting
    assert any("blocks the thread" in n for n in gloo.notes)


@pytest.mark.parametrize("version", [1, 2])
def test_one_rank_calls_what_torch_calls(version: int) -> None:
    # torch 2.13: FSDP1 on one rank switches to NO_SHARD and all-reduces each unit's gradient (Gloo on CUDA tensors
    # copies it to the host and back: the call is priced); FSDP2 skips its all-gathers and reduce-scatters there
    calls: list[tuple[str, int]] = []
    cfg = FsdpConfig(batch_size=1, optimizer="none", version=version)
    r = simulate_fsdp_step(_model(), cfg, GPU, BARE, 1, gloo=_gloo(1e-3, 2e-3, calls))
    if version == 1:
        # units h.0 and h.1 (4 MiB each) and the root (embed and head), in backward order
        assert calls == [("allreduce", 4 * MB4), ("allreduce", 4 * MB4), ("allreduce", 8 * MB4)]
        assert r.comm_s == pytest.approx(3 * 2e-3) and "switches to no_shard" in r.notes[-1]
    else:
        assert calls == [] and r.comm_s == 0.0
