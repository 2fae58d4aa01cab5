"""Gradient accumulation with FSDP (``training.accumulation``): FSDP1's ``no_sync()`` and FSDP2's
``set_requires_gradient_sync(False)`` micro-steps before the one that reduces, against closed forms on a one-unit
model (measured layer times: every time exact)."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.training import GpuCompute, Layer, ModelSpec, Param, StepConstants, StepResult
from collsim.training.fsdp import FsdpConfig, simulate_fsdp_step

MB4 = 1 << 20  # elements of one 4 MiB float32 parameter
BARE = StepConstants(0.0, 0.0, {"none": (0.0, 0.0)}, 0.0)
GPU = GpuCompute("test", 1e14, 1e12, 10**9, 1.0, 1.0)  # 1e12 B/s of HBM: moving n bytes takes n / 1e12 s
LAYERS = 4 * (1e-3 + 2e-3)  # one micro-step's forward and backward
UNIT = 4 * 4 * MB4  # the unit's four float32 parameters, bytes
AG, RS = 0.5e-3, 0.7e-3


def _model(blocks: int = 2) -> ModelSpec:
    names = ["embed", *[f"h.{i}" for i in range(blocks)], "head"]
    params = tuple(Param(f"{n}.weight", MB4) for n in names)
    layers = tuple(Layer(n, (i,), 0.0, 0.0, 0.0, fwd_time_s=1e-3, bwd_time_s=2e-3) for i, n in enumerate(names))
    return ModelSpec("tiny", params, layers, "test")


def _run(version: int, accumulation: int, sharding: str = "full_shard", wrap: str | None = "nothing.*",
         blocks: int = 2) -> tuple[StepResult, list[str]]:  # fmt: skip
    calls: list[str] = []

    def nccl(kind: str, nbytes: int) -> tuple[float, int]:
        calls.append(kind)
        return (AG if kind == "allgather" else RS, 0)

    cfg = FsdpConfig(batch_size=1, optimizer="none", wrap=wrap, version=version, accumulation=accumulation,
                     sharding=sharding)  # fmt: skip
    return simulate_fsdp_step(_model(blocks), cfg, GPU, BARE, 2, nccl), calls


def test_fsdp1_no_sync_gathers_again_accumulates_and_reduces_once() -> None:
    # full_shard, 2 micro-steps, 2 ranks, one unit: the first all-gathers, computes and makes its flat gradient;
    # no_sync's hook frees the unit (full_shard frees after backward) and returns; the second gathers again (after
    # the compute stream: _root_pre_forward), computes, makes its flat gradient and adds it to the first
    # (AccumulateGrad: read both, write one), then pre-divides by 2 and reduce-scatters
    r, calls = _run(1, 2)
    assert calls == ["allgather", "allgather", "reduce_scatter"]
    flat = 2 * UNIT / 1e12
    second = AG + LAYERS + flat + 3 * UNIT / 1e12 + 2 * UNIT / 1e12 + RS
    assert r.iteration_s == pytest.approx(AG + LAYERS + flat + second, rel=1e-9)
    # two micro-steps on one GPU, the second adding its gradients into .grad as FSDP's does (AccumulateGrad)
    assert r.compute_s == pytest.approx(2 * LAYERS + 3 * UNIT / 1e12, rel=1e-12)
    assert any("1 micro-step(s) under no_sync()" in n for n in r.notes)
    assert len(r.buckets) == 1  # one reduction per unit, in the last micro-step


def test_fsdp1_shard_grad_op_keeps_the_unit_through_no_sync() -> None:
    # _should_free_in_backward: under no_sync a strategy that keeps its parameters after forward keeps them after
    # backward too, so the second micro-step gathers nothing
    _r, calls = _run(1, 3, sharding="shard_grad_op")
    assert calls == ["allgather", "reduce_scatter"]


def test_fsdp2_reshards_after_every_backward_and_reduces_once() -> None:
    # FSDP2 reshards after backward whether or not it reduces (reshard_after_backward), so each micro-step gathers,
    # shard_grad_op included; the gradients add up from the second micro-step; one reduce-scatter at the end
    r, calls = _run(2, 3)
    assert calls == ["allgather"] * 3 + ["reduce_scatter"]
    adds = [s for s in r.spans if s.label.startswith("accumulate gradient")]
    assert len(adds) == 2 and all(s.end - s.start == pytest.approx(3 * UNIT / 1e12, rel=1e-9) for s in adds)
    _r2, sgo = _run(2, 3, sharding="shard_grad_op")
    assert sgo == ["allgather"] * 3 + ["reduce_scatter"]
    one, _ = _run(2, 1)
    per_step = AG + LAYERS + 2 * UNIT / 2 / 1e12 + 2 * UNIT / 1e12  # all-gather, layers, copy-in, copy-out
    assert r.iteration_s == pytest.approx(one.iteration_s + 2 * per_step + 2 * 3 * UNIT / 1e12, rel=1e-9)


def test_the_next_micro_steps_all_gathers_wait_for_the_last_backward() -> None:
    # _root_pre_forward: the all-gather streams wait for the compute stream, so no all-gather of micro-step 2
    # starts before micro-step 1's backward has ended (the CPU issues far ahead)
    for version in (1, 2):
        r, _ = _run(version, 2, wrap=None, blocks=3)
        bwd = sorted((s for s in r.spans if s.label.startswith("bwd ")), key=lambda s: s.start)
        first_backward_end = bwd[len(bwd) // 2 - 1].end
        roots = sorted((s for s in r.spans if s.label == "all-gather unit 0"), key=lambda s: s.start)
        assert len(roots) == 2  # the root is freed after backward (full_shard) and gathered again
        assert roots[1].start >= first_backward_end - 1e-12


def test_monotone_in_micro_steps() -> None:
    for version in (1, 2):
        times = [_run(version, k, wrap=None)[0].iteration_s for k in (1, 2, 3, 4)]
        assert times == sorted(times) and times[3] - times[2] == pytest.approx(times[2] - times[1], rel=1e-6)


def test_the_scenario_runs_fsdp_with_accumulation() -> None:
    one = Simulator.from_source("fsdp-gpt2xl-2node-h100").step(["nccl"])[0]
    four = Simulator.from_source("fsdp-gpt2xl-2node-h100", ["training.accumulation=4"]).step(["nccl"])[0]
    assert 3.5 * one.iteration_s < four.iteration_s < 4.5 * one.iteration_s
    assert len(four.buckets) == len(one.buckets)
