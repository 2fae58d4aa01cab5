"""The Gloo backend: every allreduce algorithm and collective on real topologies, staging, ibverbs, errors, the
worker-thread pool, and the constants of ``topologies/software/gloo.yaml``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.api import Simulator
from collsim.backends import BackendError, GlooConstants, GlooOptions, simulate_gloo
from collsim.backends.gloo import simulate_gloo_many
from collsim.backends.gloo.tags import D2H_TAG, GPU_REDUCTION_TAG, H2D_TAG
from collsim.backends.nccl import plan_nccl
from collsim.scenario import ScenarioError
from collsim.topology import Topology, load_topology
from collsim.vocab import COLLECTIVES as ALL_COLLECTIVES
from collsim.vocab import GLOO_ALGORITHMS

MiB = 2**20
ALGORITHMS = list(GLOO_ALGORITHMS)
COLLECTIVES = [c for c in ALL_COLLECTIVES if c != "allreduce"]


@cache
def consts() -> GlooConstants:
    with open("topologies/software/gloo.yaml") as fh, open("topologies/software/training.yaml") as tr:
        wa = yaml.safe_load(tr)["cpu_write_allocate_bytes_per_byte"]
        return GlooConstants.from_mapping(yaml.safe_load(fh), write_allocate=wa)


@cache
def hgx() -> Topology:
    return load_topology("hgx-h100")


@cache
def cpu4() -> Topology:
    return load_topology("cpu-host", node_params={"processes": 4})


@cache
def dgx2() -> Topology:
    return load_topology("dgx-a100", nodes=2, fabric={"topology": "rail_optimized", "transport": "rdma"})


@pytest.mark.parametrize("size", [MiB, 64 * MiB])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce_symmetry_on_equals_off(algorithm: str, size: int) -> None:
    opts = GlooOptions(algorithm=algorithm)
    on = simulate_gloo(hgx(), opts, consts(), size)
    off = simulate_gloo(hgx(), opts, consts(), size, symmetry=False)
    assert on.time_s == pytest.approx(off.time_s, rel=1e-9)
    assert off.classes == 8 and on.classes <= 4
    assert on.algorithm == algorithm


def _opts_for(collective: str, **kwargs: Any) -> GlooOptions:
    """Gloo's options for ``collective`` on hgx(): CPU tensors for sendrecv (refused on CUDA tensors)."""
    return GlooOptions(device="cpu", **kwargs) if collective == "sendrecv" else GlooOptions(**kwargs)


@pytest.mark.parametrize("size", [MiB, 64 * MiB])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_collective_symmetry_on_equals_off(collective: str, size: int) -> None:
    opts = _opts_for(collective)
    on = simulate_gloo(hgx(), opts, consts(), size, collective=collective)
    off = simulate_gloo(hgx(), opts, consts(), size, collective=collective, symmetry=False)
    assert on.time_s == pytest.approx(off.time_s, rel=1e-9)
    assert on.collective == collective


@pytest.mark.parametrize(
    ("collective", "algorithm"), [("allreduce", a) for a in ALGORITHMS] + [(c, "ring") for c in COLLECTIVES]
)
def test_breakdown_adds_up_to_the_time(collective: str, algorithm: str) -> None:
    out = simulate_gloo(hgx(), _opts_for(collective, algorithm=algorithm), consts(), 16 * MiB, collective=collective,
                        record=True)  # fmt: skip
    assert sum(out.breakdown.values()) == pytest.approx(out.time_s, rel=1e-9)
    assert out.breakdown.get("TCP over loopback", 0.0) > 0
    if collective not in ("broadcast", "sendrecv"):  # a broadcast's or sendrecv's last rank only receives
        assert "D2H copy (PCIe)" in out.breakdown


def test_staging_copies_the_bytes_each_rank_holds() -> None:
    size = 8 * MiB

    def staged(collective: str) -> dict[str, dict[str, float]]:
        out = simulate_gloo(hgx(), GlooOptions(), consts(), size, collective=collective, record=True, symmetry=False)
        got: dict[str, dict[str, float]] = {}
        for r in out.records:
            if r.tag in (D2H_TAG, H2D_TAG):
                assert r.owner.rank is not None and r.owner.channel is None
                got.setdefault(str(r.owner.rank), {})[r.tag.label[:3]] = r.size
        return got

    ag = staged("allgather")  # nbytes is the whole output: each rank sends in 1/8 and receives all
    assert ag["3"] == {"D2H": size / 8, "H2D": size}
    rs = staged("reduce_scatter")  # reduce_scatter_tensor all-reduces a clone of the whole input: all down, all back
    assert rs["3"] == {"D2H": size, "H2D": size}
    # ProcessGroupGloo's AsyncBroadcastCUDAWork copies the root's tensor out and every rank's back, the root's too;
    # AsyncReduceCUDAWork every rank's out and back (the root had the copy back alone)
    bc = staged("broadcast")
    assert bc["0"] == {"D2H": size, "H2D": size} and bc["5"] == {"H2D": size}
    rd = staged("reduce")
    assert rd["0"] == {"D2H": size, "H2D": size} == rd["5"]
    # send/recv hand Gloo the tensor's own memory: on CUDA tensors over TCP, refused
    with pytest.raises(BackendError, match="gloo runs send/recv on CPU tensors only"):
        staged("sendrecv")


def test_a_staging_copy_alone_runs_at_the_links_dma_rate() -> None:
    # broadcast: only the root copies down, every rank copies back; HGX H100's GPUs sit on PCIe Gen5 x16 links,
    # whose copy engines move 0.8727 x 63.015 GB/s (links.yaml pcie5 dma_efficiency, the H200 probe), not NCCL's 48
    size = 64 * MiB
    out = simulate_gloo(hgx(), GlooOptions(), consts(), size, collective="broadcast", record=True, symmetry=False)
    copies = [r for r in out.records if (r.tag, str(r.owner.rank)) in ((D2H_TAG, "0"), (H2D_TAG, "5"))]
    assert len(copies) == 2
    pcie5 = 32e9 * 16 * 128 / 130 / 8  # bytes/s: 32 GT/s x 16 lanes, 128b/130b encoding, 8 bits per byte
    for r in copies:
        assert r.size / (r.t_end - r.t_start) == pytest.approx(0.8727 * pcie5, rel=1e-9)


@pytest.mark.parametrize("k", [1, 2, 3, 8])
def test_ranks_sharing_a_gpu_share_its_pcie_link_for_their_copies(k: int) -> None:
    # k processes on one Gen5 GPU (cluster.ranks_per_gpu): the same CPU ring as CPU tensors, plus each way k copies
    # of n bytes through the one link at its copy rate, each paying the GPU's memcpy latency: exact, to 1e-9
    n = 16 * MiB
    params = {"gpus": 1, "gpu": "h200-sxm-141gb", "pcie_gen": 5, "pcie_switch": False, "cpu": "xeon-8480"}
    topo = load_topology("pcie-workstation", node_params=params, ranks_per_gpu=k)
    assert [d.name for d in topo.rank_devices()] == ["n0/gpu0"] * k
    cuda = simulate_gloo(topo, GlooOptions(device="cuda"), consts(), n)
    cpu = simulate_gloo(topo, GlooOptions(device="cpu"), consts(), n)
    assert cuda.nranks == cpu.nranks == k
    gpu = topo.device("n0/gpu0")
    up = topo.pcie_route("n0/gpu0", topo.host_cpu("n0/gpu0").name)
    rate = min(lk.bandwidth * lk.dma_ratio for lk in up)  # bytes/s
    copy = float(gpu.spec["memcpy_latency"]) + k * n / rate
    assert cuda.time_s - cpu.time_s == pytest.approx(2 * copy, rel=1e-9)
    off = simulate_gloo(topo, GlooOptions(), consts(), n, symmetry=False)
    assert off.time_s == pytest.approx(cuda.time_s, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(
    k=st.integers(1, 5),
    gpus=st.integers(1, 2),
    size=st.integers(1, 64 * MiB),
    device=st.sampled_from(["cuda", "cpu"]),
)
def test_more_ranks_on_the_same_gpus_never_finish_sooner(k: int, gpus: int, size: int, device: str) -> None:
    # one more process on each GPU adds ring steps and, with CUDA tensors, copies on the same links; symmetry (which
    # merges the ranks sharing a GPU) changes nothing
    params = {"gpus": gpus, "gpu": "h200-sxm-141gb", "pcie_gen": 5, "pcie_switch": False, "cpu": "xeon-8480"}
    opts = GlooOptions(device=device)
    times = []
    for kk in (k, k + 1):
        topo = load_topology("pcie-workstation", node_params=params, ranks_per_gpu=kk)
        on = simulate_gloo(topo, opts, consts(), size)
        off = simulate_gloo(topo, opts, consts(), size, symmetry=False)
        assert on.nranks == kk * gpus and on.time_s == pytest.approx(off.time_s, rel=1e-9)
        times.append(on.time_s)
    assert times[1] >= times[0] * (1 - 1e-12)


def test_nccl_refuses_ranks_sharing_a_gpu() -> None:
    topo = load_topology("hgx-h100", ranks_per_gpu=2)
    assert len(topo.rank_devices()) == 16 and len(topo.gpus()) == 8
    sim = Simulator.from_source("hgx-h100", ["cluster.ranks_per_gpu=2", "backends.nccl.enabled=false"])
    assert sim.simulate_one("gloo", MiB).nranks == 16
    nccl = Simulator.from_source("hgx-h100")
    with pytest.raises(BackendError, match="Duplicate GPU detected"):
        plan_nccl(topo, nccl.nccl_options, nccl.nccl_constants, nccl.fabric)
    with pytest.raises(ScenarioError, match=r"backends\.nccl\.enabled: NCCL runs one rank per GPU"):
        Simulator.from_source("hgx-h100", ["cluster.ranks_per_gpu=2"])


def test_reduce_scatter_costs_about_an_allreduce_on_gloo() -> None:
    # PyTorch all-reduces a clone of the whole input and copies its chunk out: busbw (x (P-1)/P) comes out at about
    # half an allreduce's; with CUDA tensors the clone and the chunk copy are GPU kernels, so it costs the allreduce
    size = 64 * MiB
    ar = simulate_gloo(hgx(), GlooOptions(), consts(), size)
    rs = simulate_gloo(hgx(), GlooOptions(), consts(), size, collective="reduce_scatter")
    assert rs.time_s == pytest.approx(ar.time_s, rel=1e-12)
    assert any("2x the bytes" in note for note in rs.notes)
    ag = simulate_gloo(hgx(), GlooOptions(), consts(), size, collective="allgather")
    # a true ring half-collective moves half the bytes; ProcessGroupGloo then copies the whole output out of the
    # flat tensor Gloo filled (AsyncAllgatherWork), a host copy the allreduce does not make
    assert 0.6 * rs.time_s < ag.time_s < 0.75 * rs.time_s
    assert any("copies the flat output" in note for note in ag.notes)


def test_alltoall_on_a_shared_nic_is_bounded_by_it() -> None:
    # 2 DGX A100 with one 100 GbE NIC each: half of every rank's data crosses the one NIC per direction
    topo = load_topology(
        "dgx-a100",
        nodes=2,
        fabric={"topology": "single_switch", "transport": "tcp", "nic": "eth-100g", "nics_per_node": 1},
    )
    size = 16 * MiB
    out = simulate_gloo(topo, GlooOptions(), consts(), size, collective="alltoall", record=True)
    nic = 12.5e9  # 100 Gb/s / 8 bits per byte
    cross = 8 * 8 * size / 16  # 8 ranks x 8 remote peers x S/16 each, per direction
    assert out.time_s > cross / nic
    assert max(out.breakdown, key=out.breakdown.__getitem__) == "TCP over network"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_cpu_tensors_skip_the_copies(algorithm: str) -> None:
    out = simulate_gloo(cpu4(), GlooOptions(algorithm=algorithm, device="cpu"), consts(), 8 * MiB, record=True)
    assert out.nranks == 4 and out.protocol == "tcp/cpu"
    assert not any("copy (PCIe)" in k for k in out.breakdown)
    assert out.breakdown["CPU reduction"] > 0
    off = simulate_gloo(cpu4(), GlooOptions(algorithm=algorithm, device="cpu"), consts(), 8 * MiB, symmetry=False)
    assert off.time_s == pytest.approx(out.time_s, rel=1e-9)


def test_halving_doubling_and_bcube_choices_are_reported() -> None:
    hd = simulate_gloo(dgx2(), GlooOptions(algorithm="halving_doubling"), consts(), MiB)
    assert hd.notes[0] == "4 halving + 4 doubling steps over 16 ranks"
    bc = simulate_gloo(dgx2(), GlooOptions(algorithm="bcube"), consts(), MiB)
    assert bc.notes[0] == "base 8: 2 steps in groups of 8x2"  # ranks per node, then across nodes
    one = simulate_gloo(hgx(), GlooOptions(algorithm="bcube"), consts(), MiB)
    assert one.notes[0] == "base 2: 3 steps in groups of 2x2x2"  # one node: Gloo's default base


@pytest.mark.parametrize("algorithm", ["ring", "halving_doubling"])
def test_ibverbs_gpudirect_has_no_host_copies_and_beats_tcp(algorithm: str) -> None:
    size = 64 * MiB
    ib = simulate_gloo(dgx2(), GlooOptions(algorithm=algorithm, transport="ibverbs"), consts(), size, record=True)
    tcp = simulate_gloo(dgx2(), GlooOptions(algorithm=algorithm), consts(), size)
    assert ib.protocol == "ibverbs/cuda"
    assert not any("PCIe)" in k or "CPU" in k or "TCP" in k for k in ib.breakdown)
    assert ib.breakdown["GPU reduction (HBM)"] > 0
    assert any(k.startswith("RDMA over network (GPUDirect)") for k in ib.breakdown)
    assert sum(ib.breakdown.values()) == pytest.approx(ib.time_s, rel=1e-9)
    assert ib.time_s < tcp.time_s / 2
    off = simulate_gloo(dgx2(), GlooOptions(algorithm=algorithm, transport="ibverbs"), consts(), size, symmetry=False)
    assert off.time_s == pytest.approx(ib.time_s, rel=1e-9)


def test_ibverbs_ring_is_gloos_gpu_ring_chunked() -> None:
    out = simulate_gloo(dgx2(), GlooOptions(transport="ibverbs"), consts(), 16 * MiB)
    assert out.algorithm == "ring_chunked"
    assert "CudaAllreduceRingChunked" in out.notes[0]


def test_ibverbs_gpu_reduction_runs_at_hbm_speed() -> None:
    out = simulate_gloo(dgx2(), GlooOptions(transport="ibverbs"), consts(), 64 * MiB, record=True, symmetry=False)
    red = [r for r in out.records if r.tag == GPU_REDUCTION_TAG and r.owner.rank == 0]
    hbm = dgx2().gpus()[0].spec["hbm_bandwidth"]
    assert red and all(r.t_end - r.t_start == pytest.approx(3 * r.size / hbm, rel=1e-6) for r in red)


def test_ibverbs_needs_rdma_nics() -> None:
    with pytest.raises(BackendError, match=r"needs an RDMA NIC.*cpu-host.*transport: tcp"):
        simulate_gloo(cpu4(), GlooOptions(device="cpu", transport="ibverbs"), consts(), MiB)
    tcp_fabric = load_topology("dgx-a100", nodes=2, fabric={"topology": "single_switch", "transport": "tcp"})
    with pytest.raises(BackendError, match="RDMA"):
        simulate_gloo(tcp_fabric, GlooOptions(transport="ibverbs"), consts(), MiB)


def test_a_rank_leaves_by_its_own_hosts_nic() -> None:
    """A node of several hosts (GB200 NVL72's compute trays): a rank's TCP socket leaves by its own host's first NIC,
    not the node's first NIC, which sits on another tray; on a one-host node it is the first NIC, as before."""
    from collsim.backends.gloo.paths import _tcp_nic

    nvl = load_topology("gb200-nvl72")
    gpu = "n0/gpu71"
    # the last tray holds GPUs 68-71 under Graces 34 and 35 (one host): its first NIC, not the rack's
    assert nvl.host_cpu(gpu).name == "n0/cpu35"
    assert _tcp_nic(nvl, gpu, nvl.host_cpu(gpu)).name == "n0/nic68"
    two = load_topology("hgx-h100", nodes=2, fabric={"topology": "single_switch", "transport": "tcp"})
    assert _tcp_nic(two, "n1/gpu7", two.host_cpu("n1/gpu7")).name == "n1/nic0"


@pytest.mark.parametrize(("nodes", "collective"), [(1, "allreduce"), (2, "reduce"), (2, "allreduce")])
def test_gloo_between_hosts_of_one_node_is_a_clear_error(nodes: int, collective: str) -> None:
    # two NVL72 racks: ranks on different compute trays of one rack meet the same error whatever the collective
    # (a reduce on two racks once stopped at 'no route from n1/nic0 to n1/cpu35')
    fabric = {"topology": "single_switch", "transport": "tcp"} if nodes > 1 else None
    topo = load_topology("gb200-nvl72", nodes=nodes, fabric=fabric)
    with pytest.raises(BackendError, match=r"joined by no socket link .*describe each host as a node of a fabric"):
        simulate_gloo(topo, GlooOptions(), consts(), MiB, collective=collective)


def test_unknown_collective_and_algorithm_name_the_valid_ones() -> None:
    with pytest.raises(BackendError, match=r"'gather'.*valid: allreduce, allgather, reduce_scatter, broadcast"):
        simulate_gloo(hgx(), GlooOptions(), consts(), MiB, collective="gather")
    with pytest.raises(BackendError, match=r"'tree'.*valid: ring, ring_chunked, halving_doubling, bcube"):
        simulate_gloo(hgx(), GlooOptions(algorithm="tree"), consts(), MiB)
    with pytest.raises(BackendError, match="transport"):
        simulate_gloo(hgx(), GlooOptions(transport="nvlink"), consts(), MiB)


def test_gloo_is_slower_with_more_data_for_every_collective() -> None:
    for coll in ["allreduce", *COLLECTIVES]:
        small = simulate_gloo(hgx(), _opts_for(coll), consts(), MiB, collective=coll).time_s
        big = simulate_gloo(hgx(), _opts_for(coll), consts(), 16 * MiB, collective=coll).time_s
        assert 0 < small < big, coll


def test_merged_ring_segments_keep_the_time_and_report_gloos_segments() -> None:
    # 8 GiB on two HGX H100 nodes: Gloo's 8192 segments (512 per rank) simulated as 16 per rank; the ring is
    # bandwidth-bound there, so the time moves by well under 0.1%, and the notes still give Gloo's own segments
    import dataclasses

    from collsim.api import Simulator

    sim = Simulator.from_source("2node-h100-ib")
    size = 8 * 2**30
    merged = simulate_gloo(sim.topology, sim.gloo_options, sim.gloo_constants, size)
    real = simulate_gloo(
        sim.topology, sim.gloo_options, dataclasses.replace(sim.gloo_constants, sim_max_segments_per_rank=None), size
    )
    assert merged.time_s == pytest.approx(real.time_s, rel=1e-3)
    assert merged.solves < real.solves / 10
    assert any("8192 segments" in n and "simulated as 256" in n for n in merged.notes)


# ---------------------------------------------------------------------------------------------- worker threads
def test_pytorch_default_is_two_worker_threads() -> None:
    assert GlooOptions().threads == 2


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_two_collectives_on_one_thread_take_exactly_the_sum(algorithm: str) -> None:
    # CPU tensors: nothing outlives the thread, so the second collective starts when the first is done everywhere
    opts = GlooOptions(algorithm=algorithm, device="cpu", threads=1)
    one = simulate_gloo(cpu4(), opts, consts(), 8 * MiB).time_s
    two = simulate_gloo_many(cpu4(), opts, consts(), [8 * MiB, 8 * MiB]).time_s
    assert two == pytest.approx(2 * one, rel=1e-9)


def test_on_one_thread_the_copy_back_overlaps_the_next_collective() -> None:
    # CUDA tensors: the worker frees its thread once it has issued the H2D copy (PyTorch copies back non-blocking),
    # so the second collective starts when the first's copy back starts, and nothing else slows it here
    size = 16 * MiB
    one = simulate_gloo(hgx(), GlooOptions(), consts(), size, record=True, symmetry=False)
    h2d_start = max(r.t_start for r in one.records if r.tag == H2D_TAG)
    two = simulate_gloo_many(hgx(), GlooOptions(threads=1), consts(), [size, size]).time_s
    assert two < 2 * one.time_s
    assert two == pytest.approx(one.time_s + h2d_start, rel=1e-6)


@pytest.mark.parametrize(("topo", "device"), [(cpu4, "cpu"), (hgx, "cuda")])
def test_two_threads_overlap_two_small_collectives(topo: Callable[[], Topology], device: str) -> None:
    def time(threads: int, count: int) -> float:
        opts = GlooOptions(device=device, threads=threads)
        return simulate_gloo_many(topo(), opts, consts(), [64 * 1024] * count).time_s

    one, serial, both = time(2, 1), time(1, 2), time(2, 2)
    assert one < both < serial <= 2 * one * (1 + 1e-12)  # their latencies overlap


@pytest.mark.parametrize(("topo", "device"), [(cpu4, "cpu"), (hgx, "cuda")])
def test_two_large_collectives_overlap_only_on_two_contexts(topo: Callable[[], Topology], device: str) -> None:
    # one Gloo context (GLOO_SOCKET_IFNAME unset): one connection to each peer and one event-loop thread reading
    # them all, so two collectives on two worker threads share each rank's receiving thread and take about as long
    # as one after the other; with two interfaces (eth0,eth0: two contexts, four worker threads, round robin) each
    # has a connection and a receiving thread of its own
    def time(threads: int, count: int, interfaces: int = 1) -> float:
        opts = GlooOptions(device=device, threads=threads, interfaces=interfaces)
        return simulate_gloo_many(topo(), opts, consts(), [16 * MiB] * count).time_s

    one, serial, both = time(2, 1), time(1, 2), time(2, 2)
    assert serial == pytest.approx(both, rel=0.05)
    assert one < time(4, 2, interfaces=2) < 0.85 * serial


@pytest.mark.parametrize("count", [2, 3])
def test_threads_at_least_the_count_is_unlimited(count: int) -> None:
    sizes = [MiB, 4 * MiB, 2 * MiB][:count]

    def time(threads: int) -> float:
        return simulate_gloo_many(hgx(), GlooOptions(threads=threads), consts(), sizes).time_s

    assert time(count) == time(count + 1) == time(1 << 20)
    # one thread fewer queues a collective; that is not always slower: a queued collective's D2H copy no longer
    # competes with the others' for PCIe, and its copy back overlaps them
    assert time(count - 1) != time(count)


def test_one_collective_never_waits_for_a_thread() -> None:
    times = {simulate_gloo(hgx(), GlooOptions(threads=t), consts(), 4 * MiB).time_s for t in (1, 2, 64)}
    assert len(times) == 1
    assert simulate_gloo_many(hgx(), GlooOptions(threads=1), consts(), [4 * MiB]).time_s in times


@pytest.mark.parametrize("collective", ["allreduce", "broadcast", "reduce", "sendrecv"])
def test_concurrent_collectives_symmetry_on_equals_off(collective: str) -> None:
    sizes = [MiB, 8 * MiB, 2 * MiB]
    opts = _opts_for(collective, threads=2)
    on = simulate_gloo_many(hgx(), opts, consts(), sizes, collective=collective, record=True)
    off = simulate_gloo_many(hgx(), opts, consts(), sizes, collective=collective, symmetry=False)
    assert on.time_s == pytest.approx(off.time_s, rel=1e-9)
    assert sum(on.breakdown.values()) == pytest.approx(on.time_s, rel=1e-9)
    assert on.size_bytes == sum(sizes)


def test_queued_collectives_finish_in_issue_order_and_say_when() -> None:
    out = simulate_gloo_many(hgx(), GlooOptions(threads=1), consts(), [MiB, 4 * MiB, MiB])
    note = next(n for n in out.notes if "issued at once" in n)
    assert "1 worker thread(s) per rank" in note
    ends = [float(x) for x in note.split("done at ")[1].removesuffix(" us").split(", ")]
    assert ends == sorted(ends) and len(ends) == 3
    assert ends[-1] == pytest.approx(out.time_s * 1e6, abs=0.01)


@pytest.mark.parametrize("threads", [0, -1, 1.5, True])
def test_threads_must_be_a_positive_integer(threads: object) -> None:
    with pytest.raises(BackendError, match="threads must be an integer >= 1"):
        simulate_gloo(hgx(), GlooOptions(threads=threads), consts(), MiB)  # type: ignore[arg-type]


def test_many_needs_at_least_one_size() -> None:
    with pytest.raises(BackendError, match="sizes is empty"):
        simulate_gloo_many(hgx(), GlooOptions(), consts(), [])


# ---------------------------------------------------------------------------------------------- gloo.yaml constants
def _outcome_with(**changes: float | None) -> tuple[float, tuple[str, ...], int]:
    c = dataclasses.replace(consts(), **changes)  # type: ignore[arg-type]  # each field gets a value of its type
    out = simulate_gloo(cpu4(), GlooOptions(device="cpu"), c, 64 * MiB)
    bc = simulate_gloo(cpu4(), GlooOptions(device="cpu", algorithm="bcube"), c, MiB)
    return out.time_s, (*out.notes, *bc.notes), out.solves


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_segment_bytes", 2 * MiB),
        ("min_segments_per_rank", 32),
        ("segments_in_flight", 1),
        ("preamble_bytes", 1 << 20),
        ("work_enqueue_latency", 1e-3),
        ("bcube_base", 4),
        ("sim_max_segments_per_rank", 2),
    ],
)
def test_every_gloo_yaml_constant_changes_the_outcome(field: str, value: float) -> None:
    assert _outcome_with(**{field: value}) != _outcome_with()


def test_every_gloo_yaml_key_is_a_constant() -> None:
    with open("topologies/software/gloo.yaml") as fh:
        keys = set(yaml.safe_load(fh)) - {"source"}
    fields = {f.name for f in dataclasses.fields(GlooConstants)} - {"write_allocate"}  # training.yaml's
    assert {k.removesuffix("_us") for k in keys} == fields


def test_min_segments_per_rank_sets_the_ring_segments() -> None:
    # 1 MiB on 8 ranks: max(1, m x 8) segments, rounded up to a multiple of 8
    two = simulate_gloo(hgx(), GlooOptions(), consts(), MiB)
    three = simulate_gloo(hgx(), GlooOptions(), dataclasses.replace(consts(), min_segments_per_rank=3), MiB)
    assert two.notes[0].startswith("16 segments of 65536 B")
    assert three.notes[0].startswith("24 segments of")


@pytest.mark.parametrize("collective", ["allreduce", "reduce"])
def test_fewer_segments_in_flight_is_slower(collective: str) -> None:
    # one operation in flight: a segment's transfer no longer overlaps the previous one's reduction and notice
    opts = GlooOptions(device="cpu")
    two = simulate_gloo(cpu4(), opts, consts(), 16 * MiB, collective=collective).time_s
    one = simulate_gloo(
        cpu4(), opts, dataclasses.replace(consts(), segments_in_flight=1), 16 * MiB, collective=collective
    )
    assert one.time_s > two


def test_ibverbs_with_cpu_tensors_runs_the_host_ring() -> None:
    # issue 12's bug: CPU tensors over ibverbs ran the GPU path's chunked ring; Gloo runs its host ring for them
    base = ["backends.gloo.transport=ibverbs"]
    cuda = Simulator.from_source("2node-h100-ib", base).simulate_one("gloo", 64 * MiB)
    cpu_sim = Simulator.from_source("2node-h100-ib", [*base, "backends.gloo.device=cpu"])
    cpu = cpu_sim.simulate_one("gloo", 64 * MiB)
    assert cuda.algorithm == "ring_chunked" and any("CudaAllreduceRingChunked" in n for n in cuda.notes)
    assert cpu.algorithm == "ring" and not any("CudaAllreduceRingChunked" in n for n in cpu.notes)
    assert cpu.notes[0].startswith("64 segments")  # PyTorch's segmented host ring: 64 MiB / 1 MiB segments
    tcp = Simulator.from_source("2node-h100-ib", ["backends.gloo.device=cpu"]).simulate_one("gloo", 64 * MiB)
    assert tcp.algorithm == cpu.algorithm == "ring"


@pytest.mark.parametrize("write_allocate", [None, 0.0, 2.0])
def test_a_cpu_copy_pays_the_write_allocate_read_of_its_destination(write_allocate: float | None) -> None:
    # a reduction reads two operands and writes into one of them (3 B per byte); a copy reads one, and its stores
    # to the destination's lines read them first on a write-allocate CPU (3 B per byte with training.yaml's 1, not 2)
    from collsim.backends.common import ResourceCatalog
    from collsim.backends.gloo.plan import _compute_roles

    sim = Simulator.from_source("scenarios/measurements/fsdp-cpu-2proc-mlp.scenario.yaml")
    wa = sim.gloo_constants.write_allocate if write_allocate is None else write_allocate
    topo = sim.topology
    rank = topo.rank_devices()[0]
    roles, compute = _compute_roles(topo, ResourceCatalog(topo), rank.name, False, wa)
    mem = {role: sum(c for key, c in uses if key[0] == "mem") for role, uses in roles.items()}
    # touch: the zeroed page written once
    assert mem == {"reduce": 3.0, "copy": 3.0 if write_allocate is None else 2.0 + wa, "touch": 1.0}
    cores = {role: sum(c for key, c in uses if key[0] == "cores") for role, uses in roles.items()}
    assert cores["reduce"] == pytest.approx(1.0 / compute.cap)
    assert cores["copy"] == pytest.approx(1.0 / compute.copy_cap) and compute.copy_cap == pytest.approx(20.55e9)


def _vm_allgather(nbytes: int, *overrides: str) -> float:
    """Gloo's allgather on the development VM's scenario (2 ranks, CPU tensors, TCP loopback), seconds."""
    sim = Simulator.from_source("scenarios/measurements/fsdp-cpu-2proc-mlp.scenario.yaml", list(overrides))
    return sim.simulate_one("gloo", nbytes, collective="allgather").time_s


def test_the_allgathers_flat_output_faults_in_from_glibcs_largest_mmap_threshold() -> None:
    # ProcessGroupGloo allocates the flat output every call: from 32 MiB a fresh mapping whose pages fault in at
    # the preset's first_touch_bw (2.89 GB/s), first, while nothing else runs; below it reused heap memory
    cpu = "presets.cpus.epyc-2vcpu-vm"
    for size, faults in ((32 << 20, True), (64 << 20, True), ((32 << 20) - 4096, False), (16 << 20, False)):
        slower, preset = _vm_allgather(size, f"{cpu}.first_touch_bw=1.445GB/s"), _vm_allgather(size)
        expected = size / 1.445e9 - size / 2.89e9 if faults else 0.0
        assert slower - preset == pytest.approx(expected, rel=1e-9, abs=1e-12), size


def test_gloos_host_copies_run_at_the_presets_copy_rate() -> None:
    # the allgather copies its own S/2 into the output first and the whole S out of the flat tensor last, nothing
    # else running meanwhile: at 20 against 40 GB/s per thread, above the reduction's 15 GB/s (memory not binding)
    cpu = "presets.cpus.epyc-2vcpu-vm"
    size = 16 << 20
    slow, fast = (_vm_allgather(size, f"{cpu}.copy_bw_per_core={r}GB/s", f"{cpu}.memory_bandwidth=1TB/s")
                  for r in (20, 40))  # fmt: skip
    assert slow - fast == pytest.approx(1.5 * size * (1 / 20e9 - 1 / 40e9), rel=1e-9)


def _vm(collective: str, nbytes: int, *overrides: str) -> float:
    sim = Simulator.from_source("scenarios/measurements/fsdp-cpu-2proc-mlp.scenario.yaml", list(overrides))
    return sim.simulate_one("gloo", nbytes, collective=collective).time_s


@pytest.mark.parametrize("size", [16 << 20, 32 << 20])
def test_reduce_scatter_tensor_clones_all_reduces_and_copies_its_chunk_out(size: int) -> None:
    # ProcessGroupGloo's reduce_scatter_tensor (torch 2.13): input.clone() (a new tensor: from 32 MiB its pages
    # fault in at 2.89 GB/s), the allreduce of the clone, then S/2 copied into the output, one after another
    # (memory not binding at 1 TB/s: every copy at one thread's 20.55 GB/s)
    fast_memory = "presets.cpus.epyc-2vcpu-vm.memory_bandwidth=1TB/s"
    extra = _vm("reduce_scatter", size, fast_memory) - _vm("allreduce", size, fast_memory)
    faults = size / 2.89e9 if size >= 32 << 20 else 0.0
    assert extra == pytest.approx(faults + 1.5 * size / 20.55e9, rel=1e-9)


def test_reduce_scatter_with_cuda_tensors_stages_the_whole_clone_both_ways() -> None:
    # CUDA tensors over TCP: the clone and the chunk copy are GPU kernels; the allreduce of the clone copies all of
    # it to the host and all of it back, so the call costs what the allreduce costs
    sim = Simulator.from_source("hgx-h100", ["cluster.nodes=1"])
    rs, ar = (sim.simulate_one("gloo", 8 << 20, collective=c).time_s for c in ("reduce_scatter", "allreduce"))
    assert rs == pytest.approx(ar, rel=1e-12)


def test_gloo_between_hosts_of_one_nvlink_domain_is_refused_by_name() -> None:
    # a GB200 NVL72 rack is one collsim node whose compute trays are separate hosts (no socket link between their
    # CPUs): Gloo's TCP between trays would need their network, so the error says so instead of a missing route
    sim = Simulator.from_source({"name": "x", "cluster": {"node": "gb200-nvl72", "nodes": 1},
                                 "backends": {"nccl": {"enabled": False}, "gloo": {"enabled": True}}})  # fmt: skip
    with pytest.raises(ScenarioError, match=r"backends\.gloo: ranks on n0/gpu3 and n0/gpu4 .* joined by no socket"):
        sim.simulate_one("gloo", 1 << 20)


# ------------------------------------------------------------------ a rank's process confined to some cores
@cache
def hosts(nodes: int) -> Topology:
    """CPU hosts of one rank each on 100 GbE: the NIC (12.5 GB/s) is far above one TCP stream's 2.5 GB/s."""
    return load_topology(
        "cpu-host", nodes=nodes, node_params={"processes": 1, "nic": "eth-100g"},
        fabric={"topology": "single_switch", "transport": "tcp"},
    )  # fmt: skip


def test_a_rank_on_one_core_pays_its_sends_receives_and_reductions_on_it() -> None:
    # PyTorch's ring on 2 ranks: each rank sends S and receives S over TCP (1 / tcp_bw_per_core core-seconds a byte
    # at each end: generic-x86's 2.5 GB/s) and reduces S / 2 (1 / reduce_bw_per_core: 15 GB/s). On one core they
    # add up; unconfined, each end has a core of the node's own.
    size = 256 * 10**6
    opts = GlooOptions(algorithm="ring", device="cpu", cores_per_process=1)
    t1 = simulate_gloo(hosts(2), opts, consts(), size).time_s
    core_seconds = 2 * size / 2.5e9 + size / 2 / 15e9
    assert core_seconds <= t1 <= 1.005 * core_seconds
    half = simulate_gloo(hosts(2), dataclasses.replace(opts, cores_per_process=0.5), consts(), size).time_s
    assert half == pytest.approx(2 * t1, rel=2e-3)  # CPU-bound: half the core, twice the time
    free = simulate_gloo(hosts(2), dataclasses.replace(opts, cores_per_process=None), consts(), size).time_s
    assert free < 0.5 * t1  # one stream each way at 2.5 GB/s: the sends and receives overlap on separate cores


@pytest.mark.parametrize(
    ("algorithm", "collective"),
    [(a, "allreduce") for a in ALGORITHMS] + [("ring", c) for c in ("allgather", "alltoall", "broadcast")],
)
def test_more_cores_per_process_never_slow_a_collective_and_enough_change_nothing(
    algorithm: str, collective: str
) -> None:
    opts = GlooOptions(algorithm=algorithm, device="cpu")
    times = []
    for c in (0.25, 0.5, 1.0, 2.0, 1000.0, None):
        confined = dataclasses.replace(opts, cores_per_process=c)
        times.append(simulate_gloo(cpu4(), confined, consts(), 8 * MiB, collective=collective).time_s)
    assert times == sorted(times, reverse=True)
    assert times[-2] == times[-1]  # more cores than a rank can use: the same run, to the bit


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_confined_processes_symmetry_on_equals_off(algorithm: str) -> None:
    opts = GlooOptions(algorithm=algorithm, device="cpu", cores_per_process=0.5)
    on = simulate_gloo(cpu4(), opts, consts(), 4 * MiB, symmetry=True).time_s
    off = simulate_gloo(cpu4(), opts, consts(), 4 * MiB, symmetry=False).time_s
    assert on == pytest.approx(off, rel=1e-12)


@pytest.mark.parametrize("cores", [0, -1.0])
def test_cores_per_process_must_be_positive(cores: float) -> None:
    with pytest.raises(BackendError, match="cores_per_process must be above 0"):
        simulate_gloo(cpu4(), GlooOptions(device="cpu", cores_per_process=cores), consts(), MiB)


def test_a_scenarios_cores_per_process_reaches_gloo_and_is_checked() -> None:
    src = "scenarios/published/gloo_cpu_2node_40gbe_pinned_issue248.yaml"
    pinned = Simulator.from_source(src).simulate_one("gloo", 20 * 10**6).time_s
    free = Simulator.from_source(src, ["workload.cores_per_process=null"]).simulate_one("gloo", 20 * 10**6).time_s
    assert pinned > 2 * free  # one core for both ends of both streams (2 x 20 MB at 2.0 GB/s) against one each
    with pytest.raises(ScenarioError, match=r"workload\.cores_per_process"):
        Simulator.from_source(src, ["workload.cores_per_process=0"])


# ------------------------------------------------------------------ Gloo contexts: connections and receiving threads


def test_an_alltoalls_receives_share_the_ranks_one_receiving_thread() -> None:
    # each rank receives 3 blocks of S/4 at once, all read by its context's one event-loop thread at generic-x86's
    # 2.5 GB/s a byte: about 3 S/4 / 2.5 GB/s, where three streams of their own would take a third of it
    size = 128 * 10**6
    t = simulate_gloo(hosts(4), GlooOptions(device="cpu"), consts(), size, collective="alltoall").time_s
    alone = 3 * size / 4 / 2.5e9
    assert alone <= t <= 1.1 * alone


@pytest.mark.parametrize("count", [2, 3])
def test_collectives_take_the_interfaces_contexts_round_robin(count: int) -> None:
    size = 64 * 10**6

    def time(interfaces: int, n: int) -> float:
        opts = GlooOptions(device="cpu", threads=2 * interfaces, interfaces=interfaces)
        return simulate_gloo_many(hosts(4), opts, consts(), [size] * n).time_s

    one = time(1, 1)
    assert time(1, count) == pytest.approx(count * one, rel=0.01)  # one context: one connection, one reader
    assert time(count, count) == pytest.approx(one, rel=0.01)  # a context each: as if alone (the host still shared)
    if count == 3:  # two contexts: the first and third collectives share context 0
        assert time(2, 3) == pytest.approx(2 * one, rel=0.01)


@pytest.mark.parametrize("interfaces", [0, -1, True])
def test_interfaces_must_be_a_positive_integer(interfaces: object) -> None:
    with pytest.raises(BackendError, match="interfaces must be an integer >= 1"):
        simulate_gloo(cpu4(), GlooOptions(device="cpu", interfaces=interfaces), consts(), MiB)  # type: ignore[arg-type]


def test_a_scenarios_interfaces_set_pytorchs_worker_threads() -> None:
    src = "scenarios/loopback-gloo-cpu.yaml"
    assert Simulator.from_source(src).gloo_options.threads == 2  # the shipped scenario names none: PyTorch's 2
    two = Simulator.from_source(src, ["backends.gloo.interfaces=2", "backends.gloo.threads=null"]).gloo_options
    assert (two.interfaces, two.threads) == (2, 4)  # options->threads = devices.size() * 2
    mine = Simulator.from_source(src, ["backends.gloo.interfaces=2", "backends.gloo.threads=3"]).gloo_options
    assert mine.threads == 3
    with pytest.raises(ScenarioError, match=r"backends\.gloo\.interfaces"):
        Simulator.from_source(src, ["backends.gloo.interfaces=0"])


@pytest.mark.parametrize(("nic", "flow"), [("aws-ena-100g", 1.25e9), ("aws-ena-100g-no-pg", 0.625e9)])
def test_gloos_one_socket_a_peer_runs_at_the_clouds_flow_cap(nic: str, flow: float) -> None:
    # AWS caps a TCP flow at 10 Gb/s in a cluster placement group, 5 Gb/s outside one (NIC preset flow_bw), below
    # one core's 2.5 GB/s stream: Gloo's ring of 2 hosts sends S each way on one socket
    topo = load_topology(
        "cpu-host", nodes=2, node_params={"processes": 1, "nic": nic},
        fabric={"topology": "single_switch", "transport": "tcp"},
    )  # fmt: skip
    size = 256 * 10**6
    t = simulate_gloo(topo, GlooOptions(device="cpu"), consts(), size).time_s
    assert size / flow <= t <= 1.01 * size / flow


@settings(max_examples=25, deadline=None)
@given(
    cores=st.one_of(st.none(), st.floats(0.1, 4.0)),
    interfaces=st.integers(1, 3),
    count=st.integers(1, 4),
    size=st.integers(1, 16 * MiB),
    collective=st.sampled_from(["allreduce", "allgather", "alltoall", "broadcast"]),
)
def test_confined_processes_and_contexts_keep_the_engines_invariants(
    cores: float | None, interfaces: int, count: int, size: int, collective: str
) -> None:
    # check=True: no resource above its capacity, every flow's bytes delivered; the quotient equals the full run;
    # a process given fewer cores never finishes sooner
    opts = GlooOptions(device="cpu", threads=2 * interfaces, interfaces=interfaces, cores_per_process=cores)
    topo = hosts(2) if count % 2 else cpu4()
    on = simulate_gloo_many(topo, opts, consts(), [size] * count, collective=collective, check=True)
    off = simulate_gloo_many(topo, opts, consts(), [size] * count, collective=collective, symmetry=False, check=True)
    assert on.time_s == pytest.approx(off.time_s, rel=1e-9)
    if cores is not None:
        fewer = dataclasses.replace(opts, cores_per_process=cores / 2)
        assert simulate_gloo_many(topo, fewer, consts(), [size] * count, collective=collective).time_s >= on.time_s


@pytest.mark.parametrize(("dtype", "op", "collective", "field"), [
    ("uint32", "sum", "allreduce", "workload.dtype"), ("uint64", "sum", "broadcast", "workload.dtype"),
    ("int8", "avg", "allreduce", "workload.op"), ("int64", "avg", "reduce", "workload.op"),
])
def test_what_torchs_gloo_refuses_is_refused(dtype: str, op: str, collective: str, field: str) -> None:
    # checked with torch 2.13's ProcessGroupGloo on two CPU ranks: "Invalid scalar type" for uint32/uint64 in every
    # collective but send/recv, and integer AVG "can't be cast to the desired output type"; collsim gave them times
    over = [f"workload.dtype={dtype}", f"workload.op={op}", f"workload.collective={collective}"]
    sim = Simulator.from_source("loopback-gloo-cpu", over)
    with pytest.raises(ScenarioError) as err:
        sim.simulate_one("gloo", 1 << 20)
    assert err.value.field == field
    ok = Simulator.from_source("loopback-gloo-cpu", ["workload.dtype=uint32", "workload.collective=sendrecv"])
    assert ok.simulate_one("gloo", 1 << 20).time_s > 0


def test_a_collective_names_its_own_schedule_not_the_allreduce_algorithm() -> None:
    # backends.gloo.algorithm picks allreduce's algorithm; a broadcast's record said "bcube" for a binomial tree
    sim = Simulator.from_source("loopback-gloo-cpu", ["backends.gloo.algorithm=bcube"])
    names = {c: sim.simulate_one("gloo", 1 << 20, collective=c).algorithm
             for c in ("allreduce", "broadcast", "allgather", "alltoall", "reduce")}  # fmt: skip
    assert names == {"allreduce": "bcube", "broadcast": "binomial", "allgather": "ring", "alltoall": "direct",
                     "reduce": "ring+gather"}  # fmt: skip
