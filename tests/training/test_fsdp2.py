"""FSDP2 (``fully_shard``) iterations against closed forms on tiny models (measured layer times: every time exact)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.api import Simulator
from collsim.scenario import ScenarioError
from collsim.training import GpuCompute, Layer, ModelSpec, Param, StepConstants, StepResult
from collsim.training.fsdp import FsdpConfig, fsdp_units, reduces_with_average, simulate_fsdp_step

MB4 = 1 << 20  # float32 elements of a 4 MiB parameter
BARE = StepConstants(0.0, 0.0, {"none": (0.0, 0.0), "sgd": (3.0, 0.0)}, 0.0)
GPU = GpuCompute("test", 1e14, 1e12, 10**9, 1.0, 1.0)  # 1e12 B/s of HBM: a copy of n bytes takes 2n / 1e12 s
CPU = GpuCompute("cpu", 1e12, 1e10, 0, 1.0, 1.0, cores=1.0)  # a CPU rank: 1e10 B/s of memory, one core
AG_LANE, RS_LANE, COPY_IN = "NCCL all-gather stream", "NCCL reduce-scatter stream", "FSDP2 all-gather copy-in stream"


def _model(blocks: int = 2, fwd: float = 1e-3, bwd: float = 2e-3, dtype: str = "float32") -> ModelSpec:
    """An embedding, ``blocks`` blocks ``h.N`` and a head, one 4 MiB parameter each (float32)."""
    names = ["embed", *[f"h.{i}" for i in range(blocks)], "head"]
    params = tuple(Param(f"{n}.weight", MB4, dtype) for n in names)
    layers = tuple(Layer(n, (i,), 0.0, 0.0, 0.0, fwd_time_s=fwd, bwd_time_s=bwd) for i, n in enumerate(names))
    return ModelSpec("tiny", params, layers, "test")


def _nccl(ag: float, rs: float, calls: list[tuple[str, int]] | None = None):  # type: ignore[no-untyped-def]
    def cost(kind: str, nbytes: int) -> tuple[float, int]:
        if calls is not None:
            calls.append((kind, nbytes))
        return ({"allgather": ag, "reduce_scatter": rs}.get(kind, 0.9e-3), 0)

    return cost


def _v2(**kw: object) -> FsdpConfig:
    return FsdpConfig(batch_size=1, optimizer="none", version=2, **kw)  # type: ignore[arg-type]


def _spans(r: StepResult, lane: str, prefix: str = "") -> list:  # type: ignore[type-arg]
    return sorted((s for s in r.spans if s.lane == lane and s.label.startswith(prefix)), key=lambda s: s.start)


def _copy(nbytes: float) -> float:
    """A copy of ``nbytes`` bytes on GPU: a read and a write at 1e12 B/s."""
    return 2 * nbytes / 1e12


def test_each_parameter_is_padded_on_its_own() -> None:
    # 5 and 3 elements over 4 ranks: FSDP1 pads the unit's 8 elements once (8), FSDP2 each parameter (8 + 4)
    m = ModelSpec("odd", (Param("a", 5), Param("b", 3)),
                  (Layer("l", (0, 1), 0.0, 0.0, 0.0, fwd_time_s=1.0, bwd_time_s=1.0),), "t")  # fmt: skip
    assert fsdp_units(m, 4)[0].nbytes == 8 * 4
    assert fsdp_units(m, 4, per_param=True)[0].nbytes == 12 * 4


def test_one_module_pays_the_copies_around_its_collectives_and_no_division() -> None:
    # nothing wrapped, world 2, float32: copy-in of the 8 MiB shard, the all-gather, the copy-out of the 16 MiB into
    # the parameters, the layers, the reduce-scatter's copy-in (chunk_cat) of the 16 MiB of gradients, the
    # reduce-scatter with ReduceOp.AVG: no flat gradient, no division kernels (FSDP1 pays both)
    m = _model(2)
    calls: list[tuple[str, int]] = []
    r = simulate_fsdp_step(m, _v2(wrap="nothing.*"), GPU, BARE, 2, _nccl(0.5e-3, 0.7e-3, calls))
    unit = 4 * 4 * MB4
    layers = 4 * (1e-3 + 2e-3)
    expected = _copy(unit / 2) + 0.5e-3 + _copy(unit) + layers + _copy(unit) + 0.7e-3
    assert r.iteration_s == pytest.approx(expected, rel=1e-9)
    assert calls == [("allgather", unit), ("reduce_scatter", unit)]
    assert not [s for s in r.spans if "divide" in s.label or "flat gradient" in s.label]
    assert [s.label for s in _spans(r, COPY_IN)] == ["all-gather copy-in unit 0"]
    assert r.notes[0].startswith("FSDP2 fully_shard, reshard_after_forward=True")


def test_float16_gradients_are_divided_before_and_after() -> None:
    # _get_gradient_divide_factors: float16 risks overflow, so pre-divide by 2 and post-divide by 2 at 4 ranks
    m = _model(1, dtype="float16")
    r = simulate_fsdp_step(m, _v2(wrap="nothing.*"), GPU, BARE, 4, _nccl(0.0, 0.0))
    assert [s.label for s in _spans(r, RS_LANE)] == ["pre-divide unit 0", "reduce-scatter unit 0", "post-divide unit 0"]
    bf16 = simulate_fsdp_step(_model(1, dtype="bfloat16"), _v2(wrap="nothing.*"), GPU, BARE, 4, _nccl(0.0, 0.0))
    assert [s.label for s in _spans(bf16, RS_LANE)] == ["reduce-scatter unit 0"]


def test_float64_gradients_are_divided_like_float16() -> None:
    # torch 2.13's overflow_risk is "reduce dtype not float32 or bfloat16": float64 gradients (or a float64
    # reduce_dtype) take the pre- and post-division around a ReduceOp.SUM too, each a read and a write of float64
    m = _model(1, dtype="float64")
    r = simulate_fsdp_step(m, _v2(wrap="nothing.*"), GPU, BARE, 4, _nccl(0.0, 0.0))
    assert [s.label for s in _spans(r, RS_LANE)] == ["pre-divide unit 0", "reduce-scatter unit 0", "post-divide unit 0"]
    assert not reduces_with_average(m, _v2(), 4)
    assert reduces_with_average(_model(1), _v2(), 4)
    assert not reduces_with_average(_model(1), _v2(reduce_dtype="float64"), 4)
    assert not reduces_with_average(_model(1), _v2(), 1)  # one rank: ReduceOp.SUM, nothing to divide


def test_forward_all_gathers_run_at_most_two_modules_ahead() -> None:
    # slow blocks, instant all-gathers: the copy-in of block k waits for the copy-out of block k-2 (the saved
    # AllGatherState, freed by block k-1's wait_for_unshard), so block k's all-gather starts once block k-2's
    # forward has begun, and not before
    m = _model(5, fwd=1e-3)
    r = simulate_fsdp_step(m, _v2(), GPU, BARE, 4, _nccl(1e-6, 1e-6))
    outs = {int(s.label.split()[-1]): s for s in _spans(r, "compute", "all-gather copy-out")[:7]}  # forward's
    ins = [s for s in _spans(r, COPY_IN)][:6]  # root, then h.0 .. h.4 (units 1..5)
    for k in range(3, 6):  # unit k waits for unit k-2's copy-out
        assert ins[k].start >= outs[k - 2].end - 1e-12
        assert ins[k].start < outs[k - 1].end  # and not for the one after it
    fwd_start = {s.label.split()[1]: s.start for s in r.spans if s.label.startswith("fwd ")}
    assert ins[4].start < fwd_start["h.2"]  # two ahead of the forward: h.3 gathers while h.1 computes


def test_backward_prefetches_one_module_after_its_own_copy_out() -> None:
    # in backward wait_for_unshard makes the all-gather streams wait for the module's own copy-out at once, then
    # _backward_prefetch gathers the module before it: one ahead
    m = _model(3, bwd=2e-3)
    r = simulate_fsdp_step(m, _v2(), GPU, BARE, 4, _nccl(1e-6, 1e-6))
    outs = _spans(r, "compute", "all-gather copy-out")[4:]  # backward's: h.2 (unit 3), h.1, h.0
    ins = _spans(r, COPY_IN)[4:]  # backward's: h.2, h.1 (prefetched by h.2), h.0 (by h.1)
    assert [s.label.split()[-1] for s in ins] == ["3", "2", "1"]
    assert ins[1].start >= outs[0].end - 1e-12 and ins[2].start >= outs[1].end - 1e-12
    bwd_end = {s.label.split()[1]: s.end for s in r.spans if s.label.startswith("bwd ")}
    assert ins[2].start < bwd_end["h.1"]  # h.0 is gathered while h.1's backward runs


def test_the_compute_stream_waits_for_the_previous_reduce_scatter() -> None:
    # reduce-scatters far slower than a block's backward: each copy-in (on the compute stream) waits for the
    # previous reduce-scatter (reduce_scatter_max_input_buffers 1), so backward stalls where FSDP1's does not
    m = _model(3)
    r = simulate_fsdp_step(m, _v2(), GPU, BARE, 4, _nccl(1e-6, 5e-3))
    rss = _spans(r, RS_LANE, "reduce-scatter unit")
    copy_ins = _spans(r, "compute", "reduce-scatter copy-in")
    assert len(rss) == len(copy_ins) == 4
    for prev, nxt in zip(rss, copy_ins[1:], strict=False):
        assert nxt.start >= prev.end - 1e-12
    fsdp1 = simulate_fsdp_step(m, FsdpConfig(batch_size=1, optimizer="none"), GPU, BARE, 4, _nccl(1e-6, 5e-3))
    bwd_end = max(s.end for s in r.spans if s.label.startswith("bwd "))
    bwd_end1 = max(s.end for s in fsdp1.spans if s.label.startswith("bwd "))
    # h.1's and h.0's backward each wait 5 - 2 ms for the reduce-scatter before them (the copies are microseconds)
    assert bwd_end - bwd_end1 == pytest.approx(2 * 3e-3, abs=0.1e-3)
    root_copy_in = copy_ins[-1]
    assert root_copy_in.start == pytest.approx(rss[-2].end, abs=1e-12)  # after the embedding: waits for h.0's


def test_shard_grad_op_gathers_once_and_hybrid_shard_all_reduces_the_shard() -> None:
    m = _model(3)
    sgo = simulate_fsdp_step(m, _v2(sharding="shard_grad_op"), GPU, BARE, 4, _nccl(1e-4, 1e-4))
    assert len(_spans(sgo, AG_LANE)) == 1 + 3
    calls: list[tuple[str, int]] = []
    hsdp = simulate_fsdp_step(m, _v2(sharding="hybrid_shard", wrap="nothing.*"), GPU, BARE, 8,
                              _nccl(1e-4, 1e-4, calls), shard_world=4)  # fmt: skip
    unit = 5 * 4 * MB4
    assert calls == [("allgather", unit), ("reduce_scatter", unit), ("allreduce_replicas", unit // 4)]
    (ar,) = _spans(hsdp, "NCCL allreduce stream (HSDP)")
    (rs,) = _spans(hsdp, RS_LANE, "reduce-scatter")
    assert ar.start >= rs.end - 1e-12


def test_with_gloo_one_call_at_a_time_and_the_reduce_scatter_is_gloos_clone_allreduce_and_chunk() -> None:
    m = _model(2)
    calls: list[tuple[str, int]] = []

    def gloo(kind: str, nbytes: int) -> tuple[float, float]:
        calls.append((kind, nbytes))
        return (1e-3, 0.0)

    r = simulate_fsdp_step(m, _v2(), GPU, BARE, 4, gloo=gloo)
    spans = [s for s in r.spans if s.lane.startswith("Gloo")]
    spans.sort(key=lambda s: s.start)
    assert all(b.start >= a.end - 1e-12 for a, b in itertools.pairwise(spans))  # never two at once
    assert ("allreduce", 4 * MB4) in calls  # a block's reduce-scatter all-reduces its whole 4 MiB gradient
    labels = [s.label.split()[0] for s in _spans(r, "Gloo reduce-scatter (blocking)")]
    assert labels[:3] == ["clone", "reduce-scatter", "chunk"]


def test_on_a_cpu_rank_the_iteration_is_the_sum_of_its_parts() -> None:
    # one module on a CPU rank with Gloo: every kernel and call blocks the thread, so the iteration is the sum:
    # copy-in, all-gather, copy-out, layers, reduce-scatter copy-in, clone, all-reduce, chunk copy
    m = _model(1)
    r = simulate_fsdp_step(m, _v2(wrap="nothing.*"), CPU, BARE, 2, gloo=lambda kind, n: (1e-3, 0.0))
    unit = 3 * 4 * MB4
    copy = 2 / 1e10
    expected = copy * unit / 2 + 1e-3 + copy * unit + 3 * 3e-3 + copy * unit + copy * unit + 1e-3 + copy * unit / 2
    assert r.iteration_s == pytest.approx(expected, rel=1e-9)


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="no_shard"):
        simulate_fsdp_step(_model(), _v2(sharding="no_shard"), GPU, BARE, 2, _nccl(0, 0))
    with pytest.raises(ValueError, match="version"):
        simulate_fsdp_step(_model(), FsdpConfig(version=3), GPU, BARE, 2, _nccl(0, 0))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 5), st.floats(0.0, 5e-3), st.floats(0.0, 5e-3), st.sampled_from(["full_shard", "shard_grad_op"]))
def test_bounds_and_monotone_in_collective_time(blocks: int, ag: float, rs: float, sharding: str) -> None:
    m = _model(blocks)
    cfg = _v2(sharding=sharding)
    r = simulate_fsdp_step(m, cfg, GPU, BARE, 4, _nccl(ag, rs))
    slower_ag = simulate_fsdp_step(m, cfg, GPU, BARE, 4, _nccl(ag * 1.5 + 1e-4, rs))
    slower_rs = simulate_fsdp_step(m, cfg, GPU, BARE, 4, _nccl(ag, rs * 1.5 + 1e-4))
    layers = (blocks + 2) * 3e-3
    assert r.iteration_s >= layers + ag - 1e-12  # the root's all-gather is never hidden
    assert slower_ag.iteration_s >= r.iteration_s - 1e-12
    assert slower_rs.iteration_s >= r.iteration_s - 1e-12
    copies = sum(s.end - s.start for s in r.spans if "copy" in s.label)
    assert r.iteration_s <= layers + 2 * r.comm_s + copies + 1e-9  # everything serialised bounds it


# ---- through the scenario: training.fsdp.version
SCENARIO = "fsdp-gpt2xl-2node-h100"


def test_the_scenarios_version_2_runs_both_backends_and_says_so() -> None:
    nccl, gloo = Simulator.from_source(SCENARIO, ["training.fsdp.version=2"]).step()
    v1, _ = Simulator.from_source(SCENARIO).step()
    assert nccl.notes[0].startswith("FSDP2 fully_shard, reshard_after_forward=True, 48 wrapped module(s) + root")
    assert "ReduceOp.AVG" in nccl.notes[0]  # the scenario's parameters are bfloat16
    assert COPY_IN in {s.lane for s in nccl.spans} and COPY_IN not in {s.lane for s in v1.spans}
    assert len(nccl.buckets) == len(v1.buckets) and gloo.iteration_s > nccl.iteration_s
    # what FSDP2 adds: a copy-out of each block's 61.5 MB (bf16) at every all-gather, on the compute stream
    outs = [s for s in nccl.spans if s.label.startswith("all-gather copy-out")]
    assert len(outs) == 1 + 2 * 48


@pytest.mark.parametrize(
    ("sets", "ops"),
    [
        (["training.fsdp.version=2"], {("reduce_scatter", "avg")}),  # bfloat16 gradients: ReduceOp.AVG
        (["training.fsdp.version=2", "training.fsdp.reduce_dtype=float16"], {("reduce_scatter", None)}),
        ([], {("reduce_scatter", None)}),  # FSDP1 sums after its own division kernels
    ],
)
def test_fsdp2_reduces_with_nccls_average(
    monkeypatch: pytest.MonkeyPatch, sets: list[str], ops: set[tuple[str, str | None]]
) -> None:
    # torch 2.13 _get_gradient_divide_factors: float32 and bfloat16 reduce with ReduceOp.AVG, which NCCL runs as a
    # scaled sum that NVLS cannot (device.h ncclNvlsSupported): the step's reduce-scatters are simulated with it
    seen: set[tuple[str, str | None]] = set()
    run = Simulator.simulate_one

    def spy(self: Simulator, backend: str, size: int, **kw: object) -> object:
        seen.add((str(kw.get("collective")), kw.get("op")))  # type: ignore[arg-type]
        return run(self, backend, size, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Simulator, "simulate_one", spy)
    Simulator.from_source(SCENARIO, sets).step(["nccl"])
    assert {c for c in seen if c[0] == "reduce_scatter"} == ops


@pytest.mark.parametrize(
    ("sets", "field", "message"),
    [
        (["training.fsdp.sharding=no_shard"], "training.fsdp.sharding", "has no no_shard"),
        (["training.fsdp.backward_prefetch=none"], "training.fsdp.backward_prefetch", "FSDP1's"),
        (["training.fsdp.limit_all_gathers=false"], "training.fsdp.limit_all_gathers", "FSDP1's"),
    ],
)
def test_what_fsdp2_does_not_have_is_refused_with_its_field(sets: list[str], field: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message) as err:
        Simulator.from_source(SCENARIO, ["training.fsdp.version=2", *sets]).step()
    assert err.value.field == field


# ---- an integer reshard_after_forward: the post-forward mesh
def test_an_integer_reshard_after_forward_keeps_a_slice_and_gathers_it_within_its_group() -> None:
    # 4 ranks, reshard_after_forward=2: after each block's forward a copy of its half (2 MiB of 4) on the compute
    # stream; in backward the copy-in of that half and the all-gather within the 2-rank post-forward mesh
    # (allgather_post), which waits for the slice's copy; the forward all-gathers stay on all 4 ranks
    calls: list[tuple[str, int]] = []
    r = simulate_fsdp_step(_model(2), _v2(reshard_after_forward=2), GPU, BARE, 4, _nccl(1e-6, 1e-6, calls))
    block = 4 * MB4
    assert [k for k, _ in calls if k.startswith("allgather")] == ["allgather"] * 3 + ["allgather_post"] * 2
    slices = _spans(r, "compute", "post-forward shard")
    assert [s.end - s.start for s in slices] == pytest.approx([_copy(block / 2)] * 2, rel=1e-9)
    backward_ins = _spans(r, COPY_IN)[3:]
    assert [s.end - s.start for s in backward_ins] == pytest.approx([_copy(block / 2)] * 2, rel=1e-9)
    post = [s for s in r.spans if s.label.startswith("all-gather (post-forward mesh)")]
    assert len(post) == 2 and all(p.start >= max(x.end for x in slices) - 1e-12 for p in post[:1])
    assert "reshard_after_forward=2" in r.notes[0]


@pytest.mark.parametrize(("cfg", "world", "message"), [
    (FsdpConfig(reshard_after_forward=2), 4, "FSDP2's"),
    (FsdpConfig(version=2, sharding="shard_grad_op", reshard_after_forward=2), 4, "full_shard or hybrid_shard"),
    (FsdpConfig(version=2, reshard_after_forward=3), 4, "must divide"),
    (FsdpConfig(version=2, reshard_after_forward=4), 4, "neither 1 nor all"),
])
def test_an_integer_reshard_after_forward_that_fully_shard_refuses_is_refused(cfg: FsdpConfig, world: int,
                                                                              message: str) -> None:
    with pytest.raises(ValueError, match=message):
        simulate_fsdp_step(_model(), cfg, GPU, BARE, world, _nccl(0, 0))


def test_the_scenario_gathers_backward_within_a_node() -> None:
    sets = ["training.fsdp.version=2", "training.fsdp.reshard_after_forward=8"]
    nccl, gloo = Simulator.from_source(SCENARIO, sets).step()
    full_nccl, full_gloo = Simulator.from_source(SCENARIO, ["training.fsdp.version=2"]).step()
    # GPT-2 XL on 2 x HGX H100: the 48 blocks' backward all-gathers run on one node's NVLink instead of across both
    assert len([s for s in nccl.spans if s.label.startswith("all-gather (post-forward mesh)")]) == 48
    assert nccl.comm_s < full_nccl.comm_s and gloo.iteration_s < full_gloo.iteration_s
    with pytest.raises(ScenarioError) as err:
        Simulator.from_source(SCENARIO, ["training.fsdp.reshard_after_forward=8"]).step()
    assert err.value.field == "training.fsdp.reshard_after_forward"
    with pytest.raises(ScenarioError, match="must divide the 16 ranks"):
        Simulator.from_source(SCENARIO, [*sets[:1], "training.fsdp.reshard_after_forward=6"]).step()


# ---- explicit prefetching
def _by_unit(spans: list) -> dict[int, object]:  # type: ignore[type-arg]
    """The first span of each unit, by the unit index that ends its label."""
    out: dict[int, object] = {}
    for s in spans:
        out.setdefault(int(s.label.split()[-1]), s)
    return out


def test_explicit_forward_prefetch_gathers_further_ahead() -> None:
    # set_modules_to_forward_prefetch(next 2): block j's copy-in is issued in block j-2's pre-forward, after the
    # all-gather streams were told to wait for block j-3's copy-out: three modules ahead, where implicit
    # prefetching waits for block j-2's copy-out
    m = _model(6, fwd=1e-3)
    r = simulate_fsdp_step(m, _v2(modules_to_forward_prefetch=2), GPU, BARE, 4, _nccl(1e-6, 1e-6))
    outs = _by_unit(_spans(r, "compute", "all-gather copy-out"))  # forward's come first
    ins = _by_unit(_spans(r, COPY_IN))
    for j in range(4, 7):
        assert ins[j].start >= outs[j - 3].end - 1e-12  # type: ignore[attr-defined]
        assert ins[j].start < outs[j - 2].end  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="FSDP2's"):
        simulate_fsdp_step(m, FsdpConfig(modules_to_forward_prefetch=1), GPU, BARE, 4, _nccl(0, 0))


def test_explicit_backward_prefetch_gathers_two_modules_ahead() -> None:
    # set_modules_to_backward_prefetch(previous 2): in block j's pre-backward, after its copy-out, blocks j-1 and
    # j-2 are gathered; implicit prefetching gathers j-1 only
    m = _model(5, bwd=2e-3)
    r = simulate_fsdp_step(m, _v2(modules_to_backward_prefetch=2), GPU, BARE, 4, _nccl(1e-6, 1e-6))
    bwd_outs = _by_unit(list(reversed(_spans(r, "compute", "all-gather copy-out"))))  # backward's: the last ones
    bwd_ins = _by_unit(list(reversed(_spans(r, COPY_IN))))
    # block h.1 (unit 2) is gathered by h.3's (unit 4) pre-backward: after h.3's copy-out, before h.2's
    assert bwd_ins[2].start >= bwd_outs[4].end - 1e-12  # type: ignore[attr-defined]
    assert bwd_ins[2].start < bwd_outs[3].end  # type: ignore[attr-defined]
    implicit = simulate_fsdp_step(m, _v2(), GPU, BARE, 4, _nccl(1e-6, 1e-6))
    imp_outs = _by_unit(list(reversed(_spans(implicit, "compute", "all-gather copy-out"))))
    imp_ins = _by_unit(list(reversed(_spans(implicit, COPY_IN))))
    assert imp_ins[2].start >= imp_outs[3].end - 1e-12  # type: ignore[attr-defined]


def test_explicit_prefetching_is_fsdp2s_in_the_scenario() -> None:
    with pytest.raises(ScenarioError) as err:
        Simulator.from_source(SCENARIO, ["training.fsdp.modules_to_backward_prefetch=2"]).step()
    assert err.value.field == "training.fsdp.modules_to_backward_prefetch"
    (r,) = Simulator.from_source(SCENARIO, ["training.fsdp.version=2", "training.fsdp.modules_to_forward_prefetch=2",
                                            "training.fsdp.modules_to_backward_prefetch=2"]).step(["nccl"])  # fmt: skip
    assert r.iteration_s > 0


def test_more_reduce_scatter_buffers_let_backward_run_on() -> None:
    # set_reduce_scatter_max_input_buffers(2): a block's gradient copy-in waits only for the reduce-scatter two
    # blocks back, so 5 ms reduce-scatters behind 2 ms blocks no longer stall the next block's backward (with 1 they
    # do: test_the_compute_stream_waits_for_the_previous_reduce_scatter); the reduce-scatters themselves still run
    # one after another
    m = _model(3)
    one = simulate_fsdp_step(m, _v2(), GPU, BARE, 4, _nccl(1e-6, 5e-3))
    two = simulate_fsdp_step(m, _v2(reduce_scatter_max_input_buffers=2), GPU, BARE, 4, _nccl(1e-6, 5e-3))
    copy_ins = _spans(two, "compute", "reduce-scatter copy-in")
    rss = _spans(two, RS_LANE, "reduce-scatter unit")
    assert copy_ins[1].start < rss[0].end  # h.1's copy-in does not wait for h.2's reduce-scatter
    assert copy_ins[2].start >= rss[0].end - 1e-12  # h.0's waits for h.2's (two back)
    end = {r: max(s.end for s in r.spans if s.label.startswith("bwd ")) for r in (one, two)}
    assert end[two] < end[one] - 3e-3
    assert two.iteration_s <= one.iteration_s + 1e-12
    assert "reduce_scatter_max_input_buffers 2" in two.notes[0]
    with pytest.raises(ScenarioError) as err:
        Simulator.from_source(SCENARIO, ["training.fsdp.reduce_scatter_max_input_buffers=2"]).step()
    assert err.value.field == "training.fsdp.reduce_scatter_max_input_buffers"
