"""The DDP iteration against closed forms on tiny models (measured layer times, so every time is exact)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.results.step import StepRow, format_step
from collsim.training import DdpConfig, GlooTimes, GpuCompute, Layer, ModelSpec, Param, StepConstants, simulate_ddp_step

MB4 = 1 << 20  # float32 elements of a 4 MiB parameter


def _model(n_layers: int = 2, fwd: float = 1e-3, bwd: float = 2e-3, numel: int = MB4) -> ModelSpec:
    """``n_layers`` layers of one float32 parameter each, with measured forward and backward seconds."""
    params = tuple(Param(f"l{i}.weight", numel) for i in range(n_layers))
    layers = tuple(Layer(f"l{i}", (i,), 0.0, 0.0, 0.0, fwd_time_s=fwd, bwd_time_s=bwd) for i in range(n_layers))
    return ModelSpec("tiny", params, layers, "test")


def _gpu(sm_count: int = 10**9) -> GpuCompute:
    return GpuCompute("test", 1e14, 1e12, sm_count, 1.0, 1.0)


#: no copies, no optimizer traffic, no NCCL HBM traffic: only the layers and the allreduces take time
BARE = StepConstants(0.0, 0.0, {"none": (0.0, 0.0), "sgd": (3.0, 0.0)}, 0.0)


def _nccl(seconds_per_byte: float, channels: int = 0, log: list[int] | None = None):  # type: ignore[no-untyped-def]
    def cost(nbytes: int) -> tuple[float, int]:
        if log is not None:
            log.append(nbytes)
        return nbytes * seconds_per_byte, channels

    return cost


def test_one_bucket_cannot_overlap_iteration_is_compute_plus_allreduce() -> None:
    # DDP's first iteration: one bucket, launched after the last gradient: 2 x (1 + 2) ms + 1 ms
    cfg = DdpConfig(batch_size=1, first_iteration=True, optimizer="none")
    r = simulate_ddp_step(_model(), cfg, _gpu(), BARE, 8, nccl=_nccl(1e-3 / (8 << 20)))
    assert len(r.buckets) == 1 and r.buckets[0].nbytes == 8 << 20
    assert r.compute_s == pytest.approx(6e-3, rel=1e-12)
    assert r.iteration_s == pytest.approx(7e-3, rel=1e-12)
    assert r.overlap == pytest.approx(0.0, abs=1e-9)


def test_short_allreduces_hide_behind_backward_but_the_last_bucket() -> None:
    # every 4 MiB parameter is its own bucket (caps 1 MiB then 1 MiB); bucket 0 (layer 1) runs during layer 0's
    # backward; the last one (layer 0) after it: compute + the last bucket's allreduce
    cfg = DdpConfig(batch_size=1, bucket_cap_mb=1, optimizer="none")
    r = simulate_ddp_step(_model(), cfg, _gpu(), BARE, 8, nccl=_nccl(0.5e-3 / (4 << 20)))
    assert [b.params for b in r.buckets] == [1, 1]
    assert r.buckets[0].ready_s == pytest.approx(4e-3) and r.buckets[0].end_s == pytest.approx(4.5e-3)
    assert r.iteration_s == pytest.approx(6e-3 + 0.5e-3, rel=1e-12)
    assert r.exposed_s == pytest.approx(0.5e-3, rel=1e-9)
    assert r.overlap == pytest.approx(0.5, rel=1e-9)


def test_nccl_ctas_take_their_share_of_the_sms_from_the_overlapped_layer() -> None:
    # 8 channels of 80 SMs: layer 0's backward (2 ms) computes at 90% during bucket 0's 0.5 ms: +0.05 ms
    cfg = DdpConfig(batch_size=1, bucket_cap_mb=1, optimizer="none")
    r = simulate_ddp_step(_model(), cfg, _gpu(sm_count=80), BARE, 8, nccl=_nccl(0.5e-3 / (4 << 20), 8))
    assert r.buckets[1].ready_s == pytest.approx(6.05e-3, rel=1e-9)
    assert r.iteration_s == pytest.approx(6.55e-3, rel=1e-9)


def test_no_sync_micro_steps_add_forward_backward_and_the_gradients_accumulation() -> None:
    """3 micro-steps of 6 ms; from the second, autograd's AccumulateGrad adds each new gradient into ``.grad`` (read
    both, write one: 3 x 8 MiB at 1e12 B/s), on one GPU as under DDP (the baseline charged none, DDP none either:
    FSDP, which charges them, then showed them as exposed communication)."""
    cfg = DdpConfig(batch_size=1, first_iteration=True, optimizer="none", accumulation=3)
    r = simulate_ddp_step(_model(), cfg, _gpu(), BARE, 8, nccl=_nccl(1e-3 / (8 << 20)))
    adds = 2 * 3 * (8 << 20) / 1e12
    assert r.compute_s == pytest.approx(18e-3 + adds, rel=1e-12)
    assert r.iteration_s == pytest.approx(19e-3 + adds, rel=1e-12)
    one = simulate_ddp_step(_model(), DdpConfig(batch_size=1, first_iteration=True, optimizer="none"), _gpu(), BARE,
                            8, nccl=_nccl(1e-3 / (8 << 20)))  # fmt: skip
    assert one.compute_s == pytest.approx(6e-3, rel=1e-12)


def test_compression_halves_the_bytes_all_reduced() -> None:
    log: list[int] = []
    cfg = DdpConfig(batch_size=1, bucket_cap_mb=1, optimizer="none", compression="fp16")
    simulate_ddp_step(_model(), cfg, _gpu(), BARE, 8, nccl=_nccl(1e-12, log=log))
    assert log == [2 << 20, 2 << 20]


def test_copies_and_optimizer_are_hbm_passes() -> None:
    # copy-in 2 B/B and copy-out 2 B/B of 8 MiB, SGD 3 x 4 B per element of 2M elements, at 1e12 B/s
    consts = StepConstants(2.0, 2.0, {"sgd": (3.0, 0.0)}, 0.0)
    cfg = DdpConfig(batch_size=1, first_iteration=True, optimizer="sgd")
    r = simulate_ddp_step(_model(), cfg, _gpu(), consts, 8, nccl=_nccl(0.0))
    mib8 = 8 << 20
    assert r.compute_s == pytest.approx(6e-3 + 12 * (2 * MB4) / 1e12, rel=1e-12)
    assert r.iteration_s == pytest.approx(r.compute_s + 4 * mib8 / 1e12, rel=1e-12)


@pytest.mark.parametrize(("dtype", "size"), [("float32", 4), ("bfloat16", 2)])
def test_adams_state_takes_the_parameters_dtype(dtype: str, size: int) -> None:
    # Adam: 3 passes of p and g, 4 of its two states, all in the parameter's dtype (exp_avg = zeros_like(p)):
    # 2M elements, 7 x size bytes each at 1e12 B/s, beside the 6 ms of layers
    consts = StepConstants(0.0, 0.0, {"adam": (3.0, 4.0)}, 0.0)
    params = tuple(Param(f"l{i}.weight", MB4, dtype) for i in range(2))
    layers = tuple(Layer(f"l{i}", (i,), 0.0, 0.0, 0.0, fwd_time_s=1e-3, bwd_time_s=2e-3) for i in range(2))
    model = ModelSpec("tiny", params, layers, "test")
    cfg = DdpConfig(batch_size=1, first_iteration=True, optimizer="adam")
    r = simulate_ddp_step(model, cfg, _gpu(), consts, 8, nccl=_nccl(0.0))
    assert r.compute_s == pytest.approx(6e-3 + 7 * size * (2 * MB4) / 1e12, rel=1e-12)


def test_a_write_allocate_cpu_reads_the_copies_destinations_but_not_in_place_updates() -> None:
    # write_allocate 1 (a CPU): copy-in and copy-out 3 B/B; SGD's in-place update stays 3 x 4 B per element; with
    # gradient_as_bucket_view the Reducer divides in place (2 B/B) and copies nothing back
    consts = StepConstants(2.0, 2.0, {"sgd": (3.0, 0.0)}, 0.0)
    cpu_like = GpuCompute("test", 1e14, 1e12, 10**9, 1.0, 1.0, write_allocate=1.0)
    cfg = DdpConfig(batch_size=1, first_iteration=True, optimizer="sgd")
    r = simulate_ddp_step(_model(), cfg, cpu_like, consts, 8, nccl=_nccl(0.0))
    mib8 = 8 << 20
    assert r.compute_s == pytest.approx(6e-3 + 12 * (2 * MB4) / 1e12, rel=1e-12)
    assert r.iteration_s == pytest.approx(r.compute_s + 6 * mib8 / 1e12, rel=1e-12)
    view = DdpConfig(batch_size=1, first_iteration=True, optimizer="sgd", gradient_as_bucket_view=True)
    v = simulate_ddp_step(_model(), view, cpu_like, consts, 8, nccl=_nccl(0.0))
    assert v.iteration_s == pytest.approx(r.compute_s + 2 * mib8 / 1e12, rel=1e-12)
    assert GpuCompute("gpu", 1.0, 1.0, 1, 1.0, 1.0).copy_bytes(10.0) == 20.0
    assert cpu_like.copy_bytes(10.0) == 30.0


def test_gloo_buckets_go_to_worker_threads_when_ready_and_the_step_waits_for_the_last() -> None:
    seen: dict[str, Sequence[float]] = {}

    def gloo(sizes: Sequence[int], issue_at: Sequence[float]) -> list[GlooTimes]:
        seen["sizes"], seen["issue"] = list(sizes), list(issue_at)
        return [GlooTimes(t, t + 3e-3, t + 3e-3) for t in issue_at]  # each takes 3 ms, threads free

    cfg = DdpConfig(batch_size=1, bucket_cap_mb=1, optimizer="none")
    r = simulate_ddp_step(_model(), cfg, _gpu(sm_count=80), BARE, 8, gloo=gloo)
    assert seen["issue"] == pytest.approx([4e-3, 6e-3])  # Gloo takes no SMs: layer 0's backward is not slowed
    assert r.iteration_s == pytest.approx(9e-3, rel=1e-12)
    assert {s.lane for s in r.spans} >= {"compute", "Gloo thread 0", "Gloo thread 1"}


def test_one_rank_has_nothing_to_reduce_with_nccl_but_gloo_still_runs_each_bucket() -> None:
    cfg = DdpConfig(batch_size=1, optimizer="none")
    r = simulate_ddp_step(_model(), cfg, _gpu(), BARE, 1, nccl=_nccl(1.0))
    assert r.iteration_s == pytest.approx(r.compute_s)
    # DDP all-reduces every bucket at any world size, and ProcessGroupGloo stages CUDA tensors even for one rank:
    # the buckets go to Gloo (whose one-rank simulation is the two copies), here 3 ms each

    def gloo(sizes: Sequence[int], issue_at: Sequence[float]) -> list[GlooTimes]:
        return [GlooTimes(t, t + 3e-3, t + 3e-3) for t in issue_at]

    cfg = DdpConfig(batch_size=1, bucket_cap_mb=1, optimizer="none")
    g = simulate_ddp_step(_model(), cfg, _gpu(sm_count=80), BARE, 1, gloo=gloo)
    assert g.iteration_s == pytest.approx(9e-3, rel=1e-12) and g.comm_s == pytest.approx(6e-3, rel=1e-12)


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        simulate_ddp_step(_model(), DdpConfig(), _gpu(), BARE, 8)
    with pytest.raises(ValueError, match="unknown optimizer"):
        simulate_ddp_step(_model(), DdpConfig(optimizer="lamb"), _gpu(), BARE, 8, nccl=_nccl(0.0))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 6),
    cap=st.sampled_from([0.5, 1.0, 5.0, 25.0]),
    spb=st.floats(0.0, 1e-9),
    sms=st.integers(8, 200),
    extra=st.floats(0.0, 1e-9),
)
def test_iteration_bounds_and_monotone_in_allreduce_time(
    n: int, cap: float, spb: float, sms: int, extra: float
) -> None:
    """Never faster than the computation, never slower than computing and communicating one after the other, and
    a slower allreduce never makes the iteration faster."""
    cfg = DdpConfig(batch_size=1, bucket_cap_mb=cap, optimizer="none")
    model = _model(n_layers=n)
    r = simulate_ddp_step(model, cfg, _gpu(sm_count=sms), BARE, 8, nccl=_nccl(spb, 8))
    slower = simulate_ddp_step(model, cfg, _gpu(sm_count=sms), BARE, 8, nccl=_nccl(spb + extra, 8))
    assert r.iteration_s >= r.compute_s * (1 - 1e-12)
    share = 8 / sms
    assert r.iteration_s <= (r.compute_s + r.comm_s) * (1 + share) + 1e-12
    assert slower.iteration_s >= r.iteration_s * (1 - 1e-12)
    assert sum(b.nbytes for b in r.buckets) == n * 4 * MB4
    assert all(math.isfinite(b.end_s) and b.end_s >= b.ready_s for b in r.buckets)


def _cpu(cores: float) -> GpuCompute:
    return GpuCompute("cpu", 1e14, 1e12, 0, 1.0, 1.0, cores=cores, compute_threads=1.0)


def _gloo_3ms(sizes: Sequence[int], issue_at: Sequence[float]) -> list[GlooTimes]:
    return [GlooTimes(t, t + 3e-3, t + 3e-3) for t in issue_at]  # 3 ms each when it has the CPU it wants


@pytest.mark.parametrize(
    ("cores", "ready", "iteration"),
    [
        # 2 cores: the compute thread (1) and a Gloo thread (0.5) both get what they ask: as on a GPU
        (2.0, [4e-3, 6e-3], 9e-3),
        # 1 core: while bucket 0's allreduce (1.5 core-ms over 3 ms: 0.5 core) overlaps layer 0's 2 ms backward,
        # max-min fairness gives each 0.5 core: 1.5 ms of the backward by 7 ms, the last 0.5 ms alone -> bucket 1
        # ready at 7.5 ms, its allreduce 7.5-10.5 ms with the compute thread idle
        (1.0, [4e-3, 7.5e-3], 10.5e-3),
    ],
)
def test_cpu_ranks_share_their_cores_between_the_computation_and_gloo(
    cores: float, ready: list[float], iteration: float
) -> None:
    cfg = DdpConfig(batch_size=1, bucket_cap_mb=1, optimizer="none")
    r = simulate_ddp_step(_model(), cfg, _cpu(cores), BARE, 2, gloo=_gloo_3ms, gloo_cpu=lambda n: 1.5e-3)
    assert [b.ready_s for b in r.buckets] == pytest.approx(ready, rel=1e-9)
    assert r.iteration_s == pytest.approx(iteration, rel=1e-9)
    assert [b.comm_s for b in r.buckets] == pytest.approx([3e-3, 3e-3], rel=1e-9)
    assert r.compute_s == pytest.approx(6e-3, rel=1e-12)
    assert any("share the process's cores" in note for note in r.notes)


def test_a_gloo_allreduce_wanting_more_cores_than_the_rank_has_takes_longer() -> None:
    # DDP's first iteration: one bucket, all-reduced after the backward. 6 core-ms over 3 ms = 2 cores wanted, one
    # core there: 6 ms instead of 3
    cfg = DdpConfig(batch_size=1, optimizer="none", first_iteration=True)
    r = simulate_ddp_step(_model(), cfg, _cpu(1.0), BARE, 2, gloo=_gloo_3ms, gloo_cpu=lambda n: 6e-3)
    (only,) = r.buckets
    assert (only.start_s, only.end_s) == pytest.approx((6e-3, 12e-3), rel=1e-9)
    assert r.iteration_s == pytest.approx(12e-3, rel=1e-9)


def test_a_straggler_delays_each_nccl_bucket_from_its_ready_time_not_from_the_last_ones_end() -> None:
    """A rank whose host launches every collective 100 ms late: each bucket's kernel ends at max(ready + 100 ms, the
    previous one's end) + the bucket's healthy time, so the delay is paid once where buckets queue. Before, each
    bucket paid it again after the previous one ended (548 ms against Gloo's 247 on this DGX-1 pair, a 2.2x
    Gloo "win" that was the model's)."""
    from collsim.api import Simulator

    base = Simulator.from_source("ddp-resnet50-dgx1-v100").step(["nccl"])[0]
    straggler = "perturb={ranks: [{rank: 3, launch_delay: 100ms}]}"
    nccl, gloo = Simulator.from_source("ddp-resnet50-dgx1-v100", [straggler]).step(["nccl", "gloo"])
    previous = 0.0
    for b, h in zip(nccl.buckets, base.buckets, strict=True):
        healthy = h.end_s - h.start_s
        assert b.end_s == pytest.approx(max(b.ready_s + 0.1, previous) + healthy, abs=1e-9)
        previous = b.end_s
    assert nccl.iteration_s < gloo.iteration_s < 2 * nccl.iteration_s


def test_gloo_buckets_start_when_a_worker_thread_takes_them_not_after_the_last_ones_copy_back() -> None:
    """ProcessGroupGloo frees a worker thread before the non-blocking H2D copy back of CUDA tensors, so with one
    thread a queued bucket starts while the previous one is still copying back, and no bucket takes less than its
    allreduce alone. The table took each start from the previous bucket's end (its copy back included): 29.9 ms of
    comm for a 33.5 ms allreduce on this DGX-1 pair, a start 15 ms late for the last bucket."""
    from collsim.api import Simulator

    sim = Simulator.from_source("ddp-resnet50-dgx1-v100", ["backends.gloo.threads=1"])
    g = sim.step(["gloo"])[0]
    assert len(g.buckets) > 2
    for prev, b in zip(g.buckets, g.buckets[1:], strict=False):
        assert prev.start_s < b.start_s < prev.end_s  # one thread: in order, the copy back overlapping the next
    for b in g.buckets:
        alone = sim.simulate_one("gloo", b.nbytes).time_s
        assert b.comm_s >= alone * (1 - 1e-9)
        assert b.start_s >= b.ready_s
    assert {s.lane for s in g.spans if s.lane.startswith("Gloo")} == {"Gloo thread 0"}
    assert g.comm_s == pytest.approx(sum(b.end_s - b.start_s for b in g.buckets), rel=1e-12)
    table = format_step([StepRow("", g)], name="x", model="m")
    assert "comm: from a worker thread taking the allreduce to its end, beside the others" in table
