"""The Gloo backend: every allreduce algorithm and collective on real topologies, staging, ibverbs, errors."""

from __future__ import annotations

from functools import cache

import pytest
import yaml

from collsim.backends import BackendError, GlooConstants, GlooOptions, simulate_gloo
from collsim.topology import Topology, load_topology

MiB = 2**20
ALGORITHMS = ["ring", "ring_chunked", "halving_doubling", "bcube"]
COLLECTIVES = ["allgather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv"]


@cache
def consts() -> GlooConstants:
    with open("topologies/software/gloo.yaml") as fh:
        return GlooConstants.from_mapping(yaml.safe_load(fh))


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


@pytest.mark.parametrize("size", [MiB, 64 * MiB])
@pytest.mark.parametrize("collective", COLLECTIVES)
def test_collective_symmetry_on_equals_off(collective: str, size: int) -> None:
    on = simulate_gloo(hgx(), GlooOptions(), consts(), size, collective=collective)
    off = simulate_gloo(hgx(), GlooOptions(), consts(), size, collective=collective, symmetry=False)
    assert on.time_s == pytest.approx(off.time_s, rel=1e-9)
    assert on.collective == collective


@pytest.mark.parametrize(
    ("collective", "algorithm"), [("allreduce", a) for a in ALGORITHMS] + [(c, "ring") for c in COLLECTIVES]
)
def test_breakdown_adds_up_to_the_time(collective: str, algorithm: str) -> None:
    out = simulate_gloo(hgx(), GlooOptions(algorithm=algorithm), consts(), 16 * MiB, collective=collective, record=True)
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
            if r.tag in ("D2H copy (PCIe)", "H2D copy (PCIe)"):
                got.setdefault(r.owner, {})[r.tag[:3]] = r.size
        return got

    ag = staged("allgather")  # nbytes is the whole output: each rank sends in 1/8 and receives all
    assert ag["3"] == {"D2H": size / 8, "H2D": size}
    rs = staged("reduce_scatter")  # the whole input goes down, only the rank's slice comes back
    assert rs["3"] == {"D2H": size, "H2D": size / 8}
    bc = staged("broadcast")
    assert bc["0"] == {"D2H": size} and bc["5"] == {"H2D": size}
    rd = staged("reduce")
    assert rd["0"] == {"D2H": size, "H2D": size} and rd["5"] == {"D2H": size}
    sr = staged("sendrecv")
    assert sr == {"0": {"D2H": size}, "1": {"H2D": size}}


def test_reduce_scatter_costs_about_an_allreduce_on_gloo() -> None:
    # PyTorch allreduces the whole input and keeps a slice: busbw (x (P-1)/P) comes out at about half an allreduce's
    size = 64 * MiB
    ar = simulate_gloo(hgx(), GlooOptions(), consts(), size)
    rs = simulate_gloo(hgx(), GlooOptions(), consts(), size, collective="reduce_scatter")
    assert 0.85 * ar.time_s < rs.time_s < ar.time_s  # only the H2D copy is smaller
    assert any("2x the bytes" in note for note in rs.notes)
    ag = simulate_gloo(hgx(), GlooOptions(), consts(), size, collective="allgather")
    assert ag.time_s < 0.6 * rs.time_s  # a true ring half-collective moves half the bytes


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
    red = [r for r in out.records if r.tag == "GPU reduction (HBM)" and r.owner == "0"]
    hbm = dgx2().gpus()[0].spec["hbm_bandwidth"]
    assert red and all(r.t_end - r.t_start == pytest.approx(3 * r.size / hbm, rel=1e-6) for r in red)


def test_ibverbs_needs_rdma_nics() -> None:
    with pytest.raises(BackendError, match=r"needs an RDMA NIC.*cpu-host.*transport: tcp"):
        simulate_gloo(cpu4(), GlooOptions(device="cpu", transport="ibverbs"), consts(), MiB)
    tcp_fabric = load_topology("dgx-a100", nodes=2, fabric={"topology": "single_switch", "transport": "tcp"})
    with pytest.raises(BackendError, match="RDMA"):
        simulate_gloo(tcp_fabric, GlooOptions(transport="ibverbs"), consts(), MiB)


def test_unknown_collective_and_algorithm_name_the_valid_ones() -> None:
    with pytest.raises(BackendError, match=r"'gather'.*valid: allreduce, allgather, reduce_scatter, broadcast"):
        simulate_gloo(hgx(), GlooOptions(), consts(), MiB, collective="gather")
    with pytest.raises(BackendError, match=r"'tree'.*valid: ring, ring_chunked, halving_doubling, bcube"):
        simulate_gloo(hgx(), GlooOptions(algorithm="tree"), consts(), MiB)
    with pytest.raises(BackendError, match="transport"):
        simulate_gloo(hgx(), GlooOptions(transport="nvlink"), consts(), MiB)


def test_gloo_is_slower_with_more_data_for_every_collective() -> None:
    for coll in ["allreduce", *COLLECTIVES]:
        small = simulate_gloo(hgx(), GlooOptions(), consts(), MiB, collective=coll).time_s
        big = simulate_gloo(hgx(), GlooOptions(), consts(), 16 * MiB, collective=coll).time_s
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
