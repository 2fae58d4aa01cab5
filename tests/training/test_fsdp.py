"""One FSDP iteration against closed forms on tiny models (measured layer times, so every time is exact)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.training import GpuCompute, Layer, ModelSpec, Param, StepConstants, StepResult, load_model
from collsim.training.fsdp import FsdpConfig, fsdp_units, predivide_factor, simulate_fsdp_step

MB4 = 1 << 20  # float32 elements of a 4 MiB parameter
BARE = StepConstants(0.0, 0.0, {"none": (0.0, 0.0), "sgd": (3.0, 0.0)}, 0.0)
GPU = GpuCompute("test", 1e14, 1e12, 10**9, 1.0, 1.0)  # 1e12 B/s of HBM: the gradient divisions are exact passes


def _model(blocks: int = 2, fwd: float = 1e-3, bwd: float = 2e-3) -> ModelSpec:
    """An embedding, ``blocks`` blocks ``h.N`` and a head, one 4 MiB float32 parameter each."""
    names = ["embed", *[f"h.{i}" for i in range(blocks)], "head"]
    params = tuple(Param(f"{n}.weight", MB4) for n in names)
    layers = tuple(Layer(n, (i,), 0.0, 0.0, 0.0, fwd_time_s=fwd, bwd_time_s=bwd) for i, n in enumerate(names))
    return ModelSpec("tiny", params, layers, "test")


def _nccl(ag: float, rs: float):  # type: ignore[no-untyped-def]
    return lambda kind, nbytes: (ag if kind == "allgather" else rs, 0)


def _spans(r, lane: str) -> list:  # type: ignore[no-untyped-def]
    return sorted((s for s in r.spans if s.lane == lane), key=lambda s: s.start)


def test_units_follow_the_wrapped_blocks_and_the_root_keeps_the_rest() -> None:
    units = fsdp_units(_model(3), world=4)
    assert [(u.name, u.layers) for u in units] == [("", (0, 4)), ("h.0", (1,)), ("h.1", (2,)), ("h.2", (3,))]
    assert [u.nbytes for u in units] == [2 * 4 * MB4, 4 * MB4, 4 * MB4, 4 * MB4]
    gpt = fsdp_units(load_model("gpt2-xl"), 8)  # GPT2Block x 48 under transformer.h
    assert len(gpt) == 49 and gpt[1].name == "transformer.h.0"
    assert sum(len(u.params) for u in gpt) == len(load_model("gpt2-xl").params)
    llama = fsdp_units(load_model("llama-7b"), 8, wrap="model.layers.*")
    assert len(llama) == 33
    # padding: a flat parameter of 5 elements over 4 ranks is 8 elements
    odd = ModelSpec("odd", (Param("w", 5),), (Layer("l", (0,), 0.0, 0.0, 0.0, fwd_time_s=1.0, bwd_time_s=1.0),), "t")
    assert fsdp_units(odd, 4)[0].nbytes == 8 * 4


def test_predivide_factor_follows_torch() -> None:
    assert [predivide_factor(n) for n in (1, 2, 4, 8, 16, 32, 64, 128)] == [1, 2, 2, 4, 4, 8, 8, 16]


def test_one_unit_cannot_overlap_anything() -> None:
    # nothing wrapped: the root all-gathers everything before the forward and reduce-scatters after the backward;
    # world 2: the views' gradients concatenated into the flat gradient, then pre-divide by 2 (each a read + write
    # of the 16 MiB gradient at 1e12 B/s), no post-division
    m = _model(2)
    cfg = FsdpConfig(batch_size=1, optimizer="none", wrap="nothing.*")
    r = simulate_fsdp_step(m, cfg, GPU, BARE, 2, _nccl(0.5e-3, 0.7e-3))
    layers = 4 * (1e-3 + 2e-3)
    flat = divide = 2 * 4 * 4 * MB4 / 1e12
    assert r.iteration_s == pytest.approx(0.5e-3 + layers + flat + divide + 0.7e-3, rel=1e-9)
    assert r.compute_s == pytest.approx(layers, rel=1e-12)
    assert r.comm_s == pytest.approx(1.2e-3, rel=1e-12)


def test_short_collectives_hide_but_the_first_all_gather_and_the_roots_reduce_scatter() -> None:
    # world 4: pre-divide by 2 of each unit's gradient, post-divide by 2 of its quarter
    m = _model(2)
    cfg = FsdpConfig(batch_size=1, optimizer="none")
    r = simulate_fsdp_step(m, cfg, GPU, BARE, 4, _nccl(0.1e-3, 0.2e-3))
    root, block = 2 * 4 * MB4, 4 * MB4
    # each block's flat gradient after its backward (on the compute stream); after the embed's backward the root's
    # flat gradient, pre-division, reduce-scatter and post-division
    flats = 2 * (2 * block / 1e12) + 2 * root / 1e12
    tail = 2 * root / 1e12 + 0.2e-3 + 2 * root / 4 / 1e12
    assert r.iteration_s == pytest.approx(0.1e-3 + 4 * 3e-3 + flats + tail, rel=1e-9)
    ags = _spans(r, "NCCL all-gather stream")
    assert [s.bucket for s in ags] == [0, 1, 2, 2, 1]  # root, then each block before its forward and its backward
    assert [b.index for b in r.buckets] == [2, 1, 0]  # reduce-scatters in backward order


def test_shard_grad_op_all_gathers_each_unit_once() -> None:
    m = _model(3)
    full = simulate_fsdp_step(m, FsdpConfig(batch_size=1, optimizer="none"), GPU, BARE, 4, _nccl(1e-4, 1e-4))
    sgo = simulate_fsdp_step(m, FsdpConfig(batch_size=1, optimizer="none", sharding="shard_grad_op"), GPU, BARE, 4,
                             _nccl(1e-4, 1e-4))  # fmt: skip
    assert len(_spans(full, "NCCL all-gather stream")) == 1 + 2 * 3
    assert len(_spans(sgo, "NCCL all-gather stream")) == 1 + 3


def test_the_rate_limiter_keeps_at_most_two_unit_all_gathers_ahead_in_forward() -> None:
    # slow-to-compute blocks, instant all-gathers: without the limiter every block's all-gather runs at once; with
    # it the all-gather of block k waits for block k-2's forward to end (its free event)
    m = _model(5, fwd=1e-3)
    limited = simulate_fsdp_step(m, FsdpConfig(batch_size=1, optimizer="none"), GPU, BARE, 4, _nccl(1e-5, 1e-5))
    free = simulate_fsdp_step(m, FsdpConfig(batch_size=1, optimizer="none", limit_all_gathers=False), GPU, BARE, 4,
                              _nccl(1e-5, 1e-5))  # fmt: skip
    fwd_end = {s.label.split()[1]: s.end for s in limited.spans if s.label.startswith("fwd ")}
    starts = [s.start for s in _spans(limited, "NCCL all-gather stream")[1:6]]  # blocks h.0 .. h.4, forward
    for k in range(2, 5):
        assert starts[k] >= fwd_end[f"h.{k - 2}"] - 1e-12
    assert max(s.start for s in _spans(free, "NCCL all-gather stream")[1:6]) < fwd_end["h.0"]


def test_all_gathers_and_reduce_scatters_at_once_share_the_network() -> None:
    # a long reduce-scatter of the last block overlaps the all-gathers of backward: whatever overlaps runs at half
    # speed, so the collectives' spans add up to more than their times alone, and never less
    m = _model(3)
    r = simulate_fsdp_step(m, FsdpConfig(batch_size=1, optimizer="none", backward_prefetch="none"), GPU, BARE, 4,
                           _nccl(2e-3, 3e-3))  # fmt: skip
    spans = _spans(r, "NCCL all-gather stream") + [s for s in r.spans if s.label.startswith("reduce-scatter")]
    busy = sum(s.end - s.start for s in spans)
    assert busy >= r.comm_s - 1e-12
    overlapped = any(
        a.start < b.end and b.start < a.end
        for a in _spans(r, "NCCL all-gather stream")
        for b in spans
        if b.label.startswith("reduce-scatter")
    )
    assert overlapped and busy > r.comm_s * 1.01


def test_the_optimizer_updates_the_shard() -> None:
    consts = StepConstants(0.0, 0.0, {"sgd": (3.0, 0.0)}, 0.0)
    m = _model(1)
    one = simulate_fsdp_step(m, FsdpConfig(batch_size=1), GPU, consts, 2, _nccl(0.0, 0.0))
    four = simulate_fsdp_step(m, FsdpConfig(batch_size=1), GPU, consts, 4, _nccl(0.0, 0.0))
    opt = [s.end - s.start for s in one.spans if s.label.startswith("optimizer")]
    opt4 = [s.end - s.start for s in four.spans if s.label.startswith("optimizer")]
    assert opt[0] == pytest.approx(3 * 4 * 3 * MB4 / 2 / 1e12, rel=1e-9)
    assert opt4[0] == pytest.approx(opt[0] / 2, rel=1e-9)


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="sharding"):
        simulate_fsdp_step(_model(), FsdpConfig(sharding="hybrid"), GPU, BARE, 2, _nccl(0, 0))
    with pytest.raises(ValueError, match="backward_prefetch"):
        simulate_fsdp_step(_model(), FsdpConfig(backward_prefetch="early"), GPU, BARE, 2, _nccl(0, 0))


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 5),
    st.floats(0.0, 5e-3),
    st.floats(0.0, 5e-3),
    st.sampled_from(["backward_pre", "backward_post", "none"]),
    st.booleans(),
)
def test_bounds_and_monotone_in_collective_time(blocks: int, ag: float, rs: float, prefetch: str, limit: bool) -> None:
    m = _model(blocks)
    cfg = FsdpConfig(batch_size=1, optimizer="none", backward_prefetch=prefetch, limit_all_gathers=limit)
    r = simulate_fsdp_step(m, cfg, GPU, BARE, 4, _nccl(ag, rs))
    slower = simulate_fsdp_step(m, cfg, GPU, BARE, 4, _nccl(ag * 1.5 + 1e-4, rs))
    layers = (blocks + 2) * 3e-3
    assert r.iteration_s >= layers + ag - 1e-12  # the first all-gather is never hidden
    assert slower.iteration_s >= r.iteration_s - 1e-12
    # every collective and kernel serialised is an upper bound (sharing the network never beats running alone)
    assert r.iteration_s <= layers + 2 * r.comm_s + 1e-3


def test_no_shard_all_reduces_each_units_gradient_and_gathers_nothing() -> None:
    # NO_SHARD: no all-gather; after each unit's backward its flat gradient is pre-divided, all-reduced whole and
    # post-divided whole on the post-backward stream; with instant allreduces only the root's tail is exposed
    m = _model(2)
    calls: list[tuple[str, int]] = []

    def nccl(kind: str, nbytes: int) -> tuple[float, int]:
        calls.append((kind, nbytes))
        return (0.3e-3, 0)

    r = simulate_fsdp_step(m, FsdpConfig(batch_size=1, optimizer="none", sharding="no_shard"), GPU, BARE, 4, nccl)
    root, block = 2 * 4 * MB4, 4 * MB4
    assert calls == [("allreduce", block), ("allreduce", block), ("allreduce", root)]  # backward order, whole
    assert not _spans(r, "NCCL all-gather stream")
    lane = _spans(r, "NCCL allreduce stream")
    assert [s.label for s in lane if s.label.startswith("allreduce")] == ["allreduce unit 2", "allreduce unit 1",
                                                                          "allreduce unit 0"]  # fmt: skip
    # world 4: pre-divide by 2 and post-divide by 2, each a read + write of the whole gradient
    flats = 2 * (2 * block / 1e12) + 2 * root / 1e12
    tail = 2 * root / 1e12 + 0.3e-3 + 2 * root / 1e12
    assert r.iteration_s == pytest.approx(4 * 3e-3 + flats + tail, rel=1e-9)
    assert [b.index for b in r.buckets] == [2, 1, 0] and all(b.nbytes for b in r.buckets)


def test_no_shard_keeps_whole_flat_parameters_and_updates_every_parameter() -> None:
    consts = StepConstants(0.0, 0.0, {"sgd": (3.0, 0.0)}, 0.0)
    odd = ModelSpec("odd", (Param("w", 5),), (Layer("l", (0,), 0.0, 0.0, 0.0, fwd_time_s=1.0, bwd_time_s=1.0),), "t")
    seen: list[int] = []
    simulate_fsdp_step(odd, FsdpConfig(batch_size=1, sharding="no_shard"), GPU, consts, 4,
                       lambda kind, n: (seen.append(n), (0.0, 0))[1])  # fmt: skip
    assert seen == [5 * 4]  # not padded to 8 elements as a sharded flat parameter over 4 ranks is
    m = _model(1)
    shard = simulate_fsdp_step(m, FsdpConfig(batch_size=1), GPU, consts, 4, _nccl(0.0, 0.0))
    whole = simulate_fsdp_step(m, FsdpConfig(batch_size=1, sharding="no_shard"), GPU, consts, 4, _nccl(0.0, 0.0))
    opt = {r.spans[-1].label: r.spans[-1].end - r.spans[-1].start for r in (shard, whole)}
    assert opt["optimizer"] == pytest.approx(4 * opt["optimizer (shard)"], rel=1e-9)


def test_hybrid_shard_reduce_scatters_in_the_group_then_all_reduces_the_shard_across_groups() -> None:
    # 8 ranks in 2 shard groups of 4, nothing wrapped (one unit, the root): the all-gather and reduce-scatter of the
    # unit's 16 MiB in the group, then on the all-reduce stream the 4 MiB shard's all-reduce across the 2 groups and
    # its post-division; the pre-division factor is the whole world's (8: 4, post-division 2)
    m = _model(2)
    calls: list[tuple[str, int]] = []

    def nccl(kind: str, nbytes: int) -> tuple[float, int]:
        calls.append((kind, nbytes))
        return ({"allgather": 0.5e-3, "reduce_scatter": 0.7e-3, "allreduce_replicas": 0.9e-3}[kind], 0)

    cfg = FsdpConfig(batch_size=1, optimizer="none", wrap="nothing.*", sharding="hybrid_shard")
    r = simulate_fsdp_step(m, cfg, GPU, BARE, 8, nccl, shard_world=4)
    unit = 4 * 4 * MB4
    assert calls == [("allgather", unit), ("reduce_scatter", unit), ("allreduce_replicas", unit // 4)]
    layers = 4 * (1e-3 + 2e-3)
    flat = divide = 2 * unit / 1e12
    post = 2 * (unit / 4) / 1e12
    assert r.iteration_s == pytest.approx(0.5e-3 + layers + flat + divide + 0.7e-3 + 0.9e-3 + post, rel=1e-9)
    (ar,) = [s for s in r.spans if s.label.startswith("allreduce across groups")]
    assert ar.lane == "NCCL allreduce stream (HSDP)"
    assert [s.label for s in _spans(r, "NCCL allreduce stream (HSDP)")][-1] == "post-divide unit 0"
    (b,) = r.buckets
    assert b.comm_s == pytest.approx(0.7e-3 + 0.9e-3, rel=1e-12)  # the reduction: reduce-scatter and all-reduce


def test_shard_groups_across_nodes_share_the_network_with_the_all_reduce_across_groups() -> None:
    # a device mesh's shard groups spanning nodes: a unit's all-reduce across the groups and the next unit's
    # reduce-scatter both cross the NICs, so while they overlap each runs at half speed (the "NCCL network"
    # resource); within a node (the default) the reduce-scatter keeps its time
    m = _model(3)
    consts = StepConstants(0.0, 0.0, {"sgd": (3.0, 0.0)}, 0.0)

    def nccl(kind: str, nbytes: int) -> tuple[float, int]:
        return ({"allgather": 1e-6, "reduce_scatter": 1e-3, "allreduce_replicas": 2e-3}[kind], 0)

    cfg = FsdpConfig(batch_size=1, sharding="hybrid_shard")
    runs = {c: simulate_fsdp_step(m, cfg, GPU, consts, 16, nccl, shard_world=8, shard_crosses_network=c)
            for c in (False, True)}  # fmt: skip

    def busy(r: StepResult, lane: str, label: str) -> float:
        return sum(s.end - s.start for s in _spans(r, lane) if s.label.startswith(label))

    rs = {c: busy(r, "NCCL reduce-scatter stream", "reduce-scatter") for c, r in runs.items()}
    ar = {c: busy(r, "NCCL allreduce stream (HSDP)", "allreduce") for c, r in runs.items()}
    units = len(runs[False].buckets)  # 3 blocks and the root
    assert units == 4
    assert rs[False] == pytest.approx(units * 1e-3, rel=1e-3) and ar[False] == pytest.approx(units * 2e-3, rel=1e-3)
    assert rs[True] > rs[False] + 0.5e-3 and ar[True] > ar[False]
    assert runs[True].iteration_s > runs[False].iteration_s


def test_hybrid_shard_overlaps_the_all_reduce_with_the_next_reduce_scatter_and_shards_over_the_group() -> None:
    m = _model(3)
    consts = StepConstants(0.0, 0.0, {"sgd": (3.0, 0.0)}, 0.0)

    def nccl(kind: str, nbytes: int) -> tuple[float, int]:
        return (2e-3 if kind == "allreduce_replicas" else 1e-5, 0)

    r = simulate_fsdp_step(m, FsdpConfig(batch_size=1, sharding="hybrid_shard"), GPU, consts, 16, nccl,
                           shard_world=8)  # fmt: skip
    ars = _spans(r, "NCCL allreduce stream (HSDP)")
    rss = [s for s in _spans(r, "NCCL reduce-scatter stream") if s.label.startswith("reduce-scatter")]
    # the all-reduce stream is its own: a unit's all-reduce runs while the next unit's reduce-scatter does
    assert any(a.start < b.end and b.start < a.end for a in ars if a.label.startswith("allreduce") for b in rss)
    # the optimizer after the last all-reduce, on 1/8 (the shard group) of the parameters, as full_shard on 8 ranks
    opt = next(s for s in r.spans if s.label.startswith("optimizer"))
    assert opt.start >= max(a.end for a in ars) - 1e-12
    eight = simulate_fsdp_step(m, FsdpConfig(batch_size=1), GPU, consts, 8, _nccl(0.0, 0.0))
    opt8 = next(s for s in eight.spans if s.label.startswith("optimizer"))
    assert opt.end - opt.start == pytest.approx(opt8.end - opt8.start, rel=1e-12)
    # full_shard's all-gathers again in backward; the same count as full_shard
    assert len(_spans(r, "NCCL all-gather stream")) == 1 + 2 * 3
    with pytest.raises(ValueError, match="shard_world must divide world"):
        simulate_fsdp_step(m, FsdpConfig(batch_size=1, sharding="hybrid_shard"), GPU, consts, 16, nccl, shard_world=6)


def test_a_straggler_delays_each_collective_from_its_issue_not_from_the_last_ones_end() -> None:
    """One unit (nothing wrapped): the root's all-gather is issued at the start and the GPU waits for it, so a
    straggler launching each collective 5 ms late adds 5 ms; its reduce-scatter is issued when the host has queued
    the backward, 12 ms before the GPU gets there, so the same 5 ms hide behind it. Before, every collective paid the
    delay after the one before it ended (the GPT-2 XL scenario with a 10 ms straggler: 1492 ms an iteration, now
    567)."""
    m = _model(2)
    cfg = FsdpConfig(batch_size=1, optimizer="none", wrap="nothing.*")
    base = simulate_fsdp_step(m, cfg, GPU, BARE, 2, _nccl(0.5e-3, 0.7e-3))
    late = simulate_fsdp_step(m, cfg, GPU, BARE, 2, _nccl(0.5e-3, 0.7e-3), straggle_s=5e-3)
    assert late.iteration_s == pytest.approx(base.iteration_s + 5e-3, rel=1e-9)
    # wrapped blocks: all-gathers issued ahead of the compute that needs them; their delays overlap
    cfg = FsdpConfig(batch_size=1, optimizer="none", wrap="h.*")
    base = simulate_fsdp_step(m, cfg, GPU, BARE, 2, _nccl(0.5e-3, 0.7e-3))
    late = simulate_fsdp_step(m, cfg, GPU, BARE, 2, _nccl(0.5e-3, 0.7e-3), straggle_s=5e-3)
    collectives = sum(1 for s in late.spans if s.lane.startswith("NCCL"))
    assert base.iteration_s + 5e-3 <= late.iteration_s < base.iteration_s + collectives * 5e-3 / 2
