"""NCCL backend: plans (channels, transports), the tuner's choice, and knobs."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.scenario import ScenarioError

MiB = 2**20


@pytest.mark.parametrize("scenario", ["dgx-a100", "hgx-h100"])
def test_nvswitch_systems_get_24_channels_over_nvlink(scenario: str) -> None:
    plan = Simulator.from_source(scenario).nccl_plan
    assert plan.channels == 24
    assert {h.transport for h in plan.hops.values()} == {"P2P/NVLink"}


def test_two_node_ib_uses_gpudirect_on_every_rail() -> None:
    plan = Simulator.from_source("2node-h100-ib").nccl_plan
    net = [h for h in plan.hops.values() if h.hw == "NET"]
    assert {h.transport for h in net} == {"NET/GDR"}
    nics = {k for h in net for k, _ in h.path.uses if k[0] == "link" and "nic" in k[1] and "fabric" in k[2]}
    assert len(nics) == 16  # 8 rails, both nodes


def test_tcp_fabric_uses_sockets_staged_through_host() -> None:
    plan = Simulator.from_source("2node-a100-tcp").nccl_plan
    net = [h for h in plan.hops.values() if h.hw == "NET"]
    assert {h.transport for h in net} == {"NET/socket"}
    assert any(k[0] == "mem" for h in net for k, _ in h.path.uses)


def test_nop2p_box_uses_shm() -> None:
    plan = Simulator.from_source("pcie-2gpu-nop2p").nccl_plan
    assert {h.transport for h in plan.hops.values()} == {"SHM"}


def test_protocol_follows_the_cost_model_and_is_honoured_when_set() -> None:
    sim = Simulator.from_source("hgx-h100")
    assert sim.simulate_one("nccl", 8).protocol == "LL"
    assert sim.simulate_one("nccl", 1024 * MiB).protocol == "Simple"
    forced = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_PROTO=LL"])
    out = forced.simulate_one("nccl", 1024 * MiB)
    assert out.protocol == "LL"
    # LL moves 8 data bytes per 16 and is capped by llMaxBw: far below Simple
    assert out.time_s > 2 * sim.simulate_one("nccl", 1024 * MiB).time_s
    excl = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_PROTO=^LL,LL128"])
    assert excl.simulate_one("nccl", 8).protocol == "Simple"


def test_ll128_only_on_nvlink_by_default() -> None:
    pcie = Simulator.from_source("pcie-2gpu-nop2p")
    assert {pcie.simulate_one("nccl", s).protocol for s in (8, MiB, 64 * MiB)} <= {"LL", "Simple"}


def test_p2p_disable_moves_traffic_to_host_memory() -> None:
    # the rings' traffic (NVLS keeps its own NVLink path and is not what this checks)
    ring = "backends.nccl.env.NCCL_ALGO=Ring"
    base = Simulator.from_source("hgx-h100", [ring])
    off = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_P2P_DISABLE=1", ring])
    assert {h.transport for h in off.nccl_plan.hops.values()} == {"SHM"}
    assert off.simulate_one("nccl", 256 * MiB).time_s > 5 * base.simulate_one("nccl", 256 * MiB).time_s


def test_channel_limits_change_bandwidth() -> None:
    ring = "backends.nccl.env.NCCL_ALGO=Ring"
    few = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_MAX_NCHANNELS=4", ring])
    assert few.nccl_plan.channels == 4
    many = Simulator.from_source("hgx-h100", [ring])
    assert few.simulate_one("nccl", 256 * MiB).time_s > 2 * many.simulate_one("nccl", 256 * MiB).time_s


def _nvls_channels(*env: str) -> tuple[int, float]:
    """NVLS's channels and time at 256 MiB on one HGX H100 with ``env`` (``NAME=value`` NCCL settings)."""
    sets = ["backends.nccl.env.NCCL_ALGO=NVLS", *(f"backends.nccl.env.{e}" for e in env)]
    out = Simulator.from_source("hgx-h100", sets).simulate_one("nccl", 256 * MiB, record=True, symmetry=False)
    return len({r.owner.channel for r in out.records if r.size > 0}), out.time_s


def test_nvls_channels_follow_the_cta_bounds_not_the_channel_graphs() -> None:
    # nvls.cc: nvlsChannels = max(minCTAs, min(maxCTAs, NCCL_NVLS_NCHANNELS or 16 on Hopper)); NCCL_MAX_NCHANNELS
    # bounds only the ring and tree graphs (connect.cc)
    default = _nvls_channels()
    assert default[0] == 16
    assert _nvls_channels("NCCL_MAX_NCHANNELS=4") == default
    few = _nvls_channels("NCCL_MAX_CTAS=4")
    assert few[0] == 4 and few[1] > 2 * default[1]
    assert _nvls_channels("NCCL_NVLS_NCHANNELS=8")[0] == 8
    assert _nvls_channels("NCCL_NVLS_NCHANNELS=8", "NCCL_MIN_CTAS=12")[0] == 12
    assert _nvls_channels("NCCL_MIN_CTAS=24")[0] == 24
    assert _nvls_channels("NCCL_MIN_CTAS=0") == default  # NCCL leaves 0 unset
    env = "backends.nccl.env"
    ring = Simulator.from_source("hgx-h100", [f"{env}.NCCL_MAX_CTAS=6", f"{env}.NCCL_MIN_NCHANNELS=2"])
    assert ring.nccl_plan.channels == 6


def test_an_algorithm_nccl_lacks_for_the_collective_is_a_clear_error() -> None:
    sim = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_ALGO=PAT"])
    no_pat = r"backends\.nccl: NCCL_ALGO=PAT: NCCL has no algorithm left .*: NCCL has no PAT allreduce$"
    with pytest.raises(ScenarioError, match=no_pat):
        sim.simulate_one("nccl", MiB)


def test_choices_nccl_would_refuse_are_errors() -> None:
    a100 = Simulator.from_source("dgx-a100", ["backends.nccl.env.NCCL_ALGO=NVLS"])
    with pytest.raises(ScenarioError, match=r"NVLS.*Hopper"):
        a100.simulate_one("nccl", MiB)
    collnet = Simulator.from_source("2node-h100-ib", ["backends.nccl.env.NCCL_ALGO=CollNetDirect,CollNetChain"])
    with pytest.raises(ScenarioError, match="in-network reduction"):
        collnet.simulate_one("nccl", MiB)


def test_tuner_prediction_close_to_simulation_at_large_sizes() -> None:
    sim = Simulator.from_source("dgx-a100")
    out = sim.simulate_one("nccl", 1024 * MiB)
    assert out.predicted_s == pytest.approx(out.time_s, rel=0.05)


def test_tree_allreduce_model_follows_tuning_cc() -> None:
    # tuning.cc, two nodes: busBw = the graph's channels x bwIntra (plan.tree_bw, within the NVLinks), x0.92 for a
    # tree allreduce in every protocol ("AllReduce pipelines two operations") and at most the graph's channels x
    # perChMaxTreeBw, LL128 x120/128 across nodes and at most channels x perChMaxTreeLL128Bw, algBw = busBw / 2; the
    # tree correction factor applies below 512 MiB only (tuning.cc: Tree for logSize = log2(bytes / 64) < 23)
    from collsim.backends.nccl import tuner_times

    sim = Simulator.from_source("2node-a100-ib")
    plan, consts = sim.nccl_plan, sim.nccl_constants
    size = 4 * 1024 * MiB
    times = tuner_times(plan, consts, "allreduce", size, sim.nccl_options)
    assert (plan.tuner_channels, plan.tree_bw) == (8, 240e9)  # 8 HDR NICs: 8 graph channels, bwIntra 24 -> 30 GB/s
    nch, idx = plan.tuner_channels, 1  # the tuner tables' two-node column
    bus = min(min(plan.intra_bw, plan.tree_bw) * 0.92, nch * consts.per_channel_max_tree_bw["ampere"][idx])
    assert bus == pytest.approx(8 * 23.6e9)  # Ampere's perChMaxTreeBw on two nodes binds: 188.8 GB/s
    ll128 = min(bus * 120 / 128, nch * consts.per_channel_max_tree_ll128_bw["ampere"][idx])
    for proto, b in (("Simple", bus), ("LL128", ll128)):
        lat = times[("Tree", proto)] - size / (b * 0.5)
        assert 0 < lat < 100e-6  # what is left is the tree's latency, tens of us
    small = tuner_times(plan, consts, "allreduce", 64 * 2**9, sim.nccl_options)  # bucket 9: LL128 factor 0.7
    big = tuner_times(plan, consts, "allreduce", 64 * 2**23, sim.nccl_options)  # 512 MiB, bucket 23: factor 1
    lat9 = small[("Tree", "Simple")] - 64 * 2**9 / (bus * 0.5 * 0.6)  # Simple's factor at bucket 9 is 0.6 ...
    lat23 = big[("Tree", "Simple")] - 64 * 2**23 / (bus * 0.5)  # ... and 0.9 at bucket 23, which NCCL skips:
    assert big[("Tree", "Simple")] < 64 * 2**23 / (bus * 0.5 * 0.9)  # with x0.9 the transfer alone takes longer
    assert lat9 == pytest.approx(lat23, rel=1e-9)


@pytest.mark.parametrize("collective", ["allreduce", "allgather", "broadcast"])
def test_one_rank_copies_its_input_to_its_output(collective: str) -> None:
    """One rank alone: NCCL's ncclLaunchOneRank copies the input to the output buffer (cudaMemcpyAsync, nccl-tests'
    out-of-place call), each byte read and written once in the GPU's memory: the base latency plus 2 x size at the
    preset's HBM bandwidth. Before, every size took the base latency alone (1 GiB at 162,688 GB/s)."""
    sim = Simulator.from_source("hgx-h100", ["cluster.visible_gpus=[0]", f"workload.collective={collective}"])
    small = sim.simulate_one("nccl", 1024, record=True)
    big = sim.simulate_one("nccl", 1 << 30, record=True)
    hbm = 3.35e12  # H100 SXM's HBM3, bytes/s (gpus.yaml)
    assert big.time_s - small.time_s == pytest.approx(2 * ((1 << 30) - 1024) / hbm, rel=1e-9)
    assert big.breakdown["one rank: copy to the output (GPU memory)"] == pytest.approx(2 * (1 << 30) / hbm, rel=1e-9)
