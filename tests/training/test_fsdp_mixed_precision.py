"""FSDP's mixed precision (``param_dtype``, ``reduce_dtype``) in both versions: which bytes each collective moves and
which casts each rank pays, against closed forms on a one-unit model (measured layer times: every time exact)."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.scenario import ScenarioError
from collsim.training import GpuCompute, Layer, ModelSpec, Param, StepConstants, StepResult
from collsim.training.fsdp import FsdpConfig, predivide_factor, simulate_fsdp_step

MB4 = 1 << 20  # elements of one parameter (4 MiB in float32)
BARE = StepConstants(0.0, 0.0, {"none": (0.0, 0.0)}, 0.0)
GPU = GpuCompute("test", 1e14, 1e12, 10**9, 1.0, 1.0)  # 1e12 B/s of HBM: r bytes read and w written take (r + w) / 1e12
LAYERS = 4 * (1e-3 + 2e-3)
F32 = 4 * 4 * MB4  # the unit's four parameters in float32, bytes (4 B an element)
B16 = F32 // 2  # the same in bfloat16 (2 B an element)


def _model() -> ModelSpec:
    names = ["embed", "h.0", "h.1", "head"]
    params = tuple(Param(f"{n}.weight", MB4) for n in names)
    layers = tuple(Layer(n, (i,), 0.0, 0.0, 0.0, fwd_time_s=1e-3, bwd_time_s=2e-3) for i, n in enumerate(names))
    return ModelSpec("tiny", params, layers, "test")


def _run(version: int, world: int = 2, **mp: str) -> tuple[StepResult, list[tuple[str, int]]]:
    calls: list[tuple[str, int]] = []

    def nccl(kind: str, nbytes: int) -> tuple[float, int]:
        calls.append((kind, nbytes))
        return ({"allgather": 0.5e-3}.get(kind, 0.7e-3), 0)

    cfg = FsdpConfig(batch_size=1, optimizer="none", wrap="nothing.*", version=version, **mp)  # type: ignore[arg-type]
    return simulate_fsdp_step(_model(), cfg, GPU, BARE, world, nccl), calls


def _moved(r: StepResult, label: str) -> float:
    """Seconds of the kernels whose label starts with ``label``."""
    return sum(s.end - s.start for s in r.spans if s.label.startswith(label))


def test_fsdp2_gathers_in_param_dtype_and_reduces_in_reduce_dtype() -> None:
    # float32 parameters, MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32), 2 ranks: a foreach cast of
    # the float32 shard (read 2 x 4 MiB, write 2 x 2 MiB) and the copy-in of the bf16 shard, the all-gather of 8 MiB,
    # the bf16 copy-out, the layers, chunk_cat reading the bf16 gradients and writing float32, the float32
    # reduce-scatter (ReduceOp.AVG: no division); no cast back, float32 is the parameters' dtype
    r, calls = _run(2, param_dtype="bfloat16", reduce_dtype="float32")
    assert calls == [("allgather", B16), ("reduce_scatter", F32)]
    cast = (F32 / 2 + B16 / 2) / 1e12
    expected = cast + 2 * B16 / 2 / 1e12 + 0.5e-3 + 2 * B16 / 1e12 + LAYERS + (B16 + F32) / 1e12 + 0.7e-3
    assert r.iteration_s == pytest.approx(expected, rel=1e-9)
    assert not [s for s in r.spans if "cast gradient back" in s.label]
    assert [b.nbytes for b in r.buckets] == [F32]  # the unit's reduce-scatter, in float32


def test_fsdp2_reduce_dtype_defaults_to_param_dtype_and_casts_the_shard_back() -> None:
    # param_dtype bfloat16 alone: the reduction in bf16 too, and the reduced 4 MiB bf16 shard cast back to float32
    r, calls = _run(2, param_dtype="bfloat16")
    assert calls == [("allgather", B16), ("reduce_scatter", B16)]
    assert _moved(r, "cast gradient back") == pytest.approx((B16 / 2 + F32 / 2) / 1e12, rel=1e-9)
    # float16 risks overflow: divided before and after (2 ranks: pre-divide by 2 only), in float16
    r16, _ = _run(2, param_dtype="float16")
    assert _moved(r16, "pre-divide") == pytest.approx(2 * B16 / 1e12, rel=1e-9)


def test_fsdp1_casts_the_shard_before_each_all_gather_and_the_gradient_before_the_reduction() -> None:
    # FSDP1, MixedPrecision(param_dtype=bfloat16, reduce_dtype=float32), 2 ranks: _use_low_precision_shard's cast
    # of the shard, the bf16 all-gather, the layers, the bf16 flat gradient, its cast to float32 on the
    # post-backward stream, the float32 pre-division (by 2) and reduce-scatter; no post-division at 2 ranks and no
    # cast back
    r, calls = _run(1, param_dtype="bfloat16", reduce_dtype="float32")
    assert calls == [("allgather", B16), ("reduce_scatter", F32)]
    cast_shard = (F32 / 2 + B16 / 2) / 1e12
    flat = 2 * B16 / 1e12
    cast_grad = (B16 + F32) / 1e12
    pre = 2 * F32 / 1e12
    expected = cast_shard + 0.5e-3 + LAYERS + flat + cast_grad + pre + 0.7e-3
    assert predivide_factor(2) == 2
    assert r.iteration_s == pytest.approx(expected, rel=1e-9)
    # param_dtype alone: FSDP1 reduces in it too (FlatParamHandle's "infer gradient reduction mixed precision")
    # and casts the reduced shard back to float32 (_cast_grad_to_param_dtype)
    r2, calls2 = _run(1, param_dtype="bfloat16")
    assert calls2 == [("allgather", B16), ("reduce_scatter", B16)]
    assert not [s for s in r2.spans if s.label.startswith("cast gradient unit")]
    assert _moved(r2, "cast gradient back") == pytest.approx((B16 / 2 + F32 / 2) / 1e12, rel=1e-9)


def test_without_mixed_precision_nothing_is_cast() -> None:
    for version in (1, 2):
        r, calls = _run(version)
        assert calls == [("allgather", F32), ("reduce_scatter", F32)]
        assert not [s for s in r.spans if "cast" in s.label]


def test_an_unknown_dtype_is_refused() -> None:
    with pytest.raises(ValueError, match="reduce_dtype 'fp8'"):
        _run(2, reduce_dtype="fp8")


def test_the_scenario_takes_them_and_a_float32_reduction_doubles_the_reduce_scatters() -> None:
    sim = Simulator.from_source("fsdp-gpt2xl-2node-h100", ["training.param_dtype=float32",
                                                            "training.fsdp.param_dtype=bfloat16",
                                                            "training.fsdp.reduce_dtype=float32"])  # fmt: skip
    nccl, _gloo = sim.step()
    bf16 = Simulator.from_source("fsdp-gpt2xl-2node-h100").step()[0]
    block = next(b for b in nccl.buckets if b.index == 1)
    assert block.nbytes == 2 * next(b for b in bf16.buckets if b.index == 1).nbytes  # float32 against bfloat16
    assert any(s.label.startswith("cast shard") for s in nccl.spans)
    with pytest.raises(ScenarioError) as err:
        Simulator.from_source("fsdp-gpt2xl-2node-h100", ["training.fsdp.reduce_dtype=float8"])
    assert err.value.field is not None and "reduce_dtype" in err.value.field


def test_fsdp1_no_shard_casts_the_whole_parameters_before_each_forward() -> None:
    # NO_SHARD keeps whole flat parameters, but _unshard still runs pre_unshard before each unit's forward: a cast of
    # the whole unit (read 16 MiB float32, write 8 MiB bf16), which the compute stream waits for; the gradients are
    # all-reduced in bf16 and cast back whole
    r, calls = _run(1, sharding="no_shard", param_dtype="bfloat16")
    assert calls == [("allreduce", B16)]
    (cast,) = [s for s in r.spans if s.label.startswith("cast parameters")]
    assert cast.end - cast.start == pytest.approx((F32 + B16) / 1e12, rel=1e-9)
    first = min(s.start for s in r.spans if s.label.startswith("fwd "))
    assert first == pytest.approx(cast.end, abs=1e-12)
    assert _moved(r, "cast gradient back") == pytest.approx((B16 + F32) / 1e12, rel=1e-9)
