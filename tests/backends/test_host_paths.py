"""NCCL's host-memory paths against their closed forms (issue 12, systematic error 3; docs/host-paths.md).

SHM (P2P unavailable). NCCL's defaults (shm.cc) put each hop's buffer in the receiver's host memory; the sender's
SMs store into it over PCIe and the receiver's SMs load from it over PCIe. A ring allreduce over N GPUs moves, per
GPU and per byte of busbw R (bytes/s), R out of the GPU's PCIe link, R into it, and 2R through host memory (one
write, one read). So the plateau is the smallest of

    B_link                     the GPU's PCIe link per direction (NCCL's x16 figure: 12/24/48 GB/s, Gen3/4/5)
    B_uplink / G               a PCIe switch's uplink, shared by the G GPUs under it (when there is a switch)
    M / (2 N)                  the socket's memory bandwidth, 2 bytes of traffic per byte for each of N GPUs
    C x T x U x 16 B / (2 L)   C channels, each with T threads x U loads of 16 B in flight over a read round trip
                               of twice the PCIe latency L from the CPU to the GPU (Little's law)

Sockets (NCCL_NET=Socket, no RDMA). With NCCL_SOCKET_NTHREADS unset, each GPU's proxy thread moves the bytes of all
its network connections, at one core's TCP rate t (bytes/s): a ring leaves a node through one GPU on all C channels
(one NIC), so the plateau is t whatever C is, unless the NIC binds. With NCCL_SOCKET_NTHREADS = h, each connection
gets h threads: C x h x t, again unless the NIC binds.

Each slice a Simple ring sends is followed by its post (the fence and flag store that tell the receiver the slice
is there), which the sender pays before its next slice: NCCL's per-ring-step hwLat of the hop class (PCI, Ring,
Simple: 5.7 us) split over the step's 2 slices, P = 2.85 us. The C channels run in step, so per cycle every channel
streams one slice of S bytes (1 MiB: half a 2 MiB chunk) and then posts, and the plateau of a bound R above is

    C x S / (C x S / R + P)

The simulated plateau is measured as the marginal busbw between 1 and 2 GiB (launch, latency and pipeline fill
cancel), and must equal the closed form to 1e-6.
"""

from __future__ import annotations

import dataclasses

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import plan_nccl, simulate_nccl
from collsim.backends.nccl.chunking import step_chunking

GiB = 2**30
WORKSTATION = ["cluster.node_params.gpus=4", "cluster.node_params.p2p=false"]
CONSUMER = {4: "rtx-4090", 5: "rtx-5090"}


def _plateau(sim: Simulator) -> float:
    """Marginal allreduce busbw between 1 and 2 GiB, bytes/s."""
    one, two = sim.simulate_one("nccl", GiB), sim.simulate_one("nccl", 2 * GiB)
    n = one.nranks
    return GiB * 2 * (n - 1) / n / (two.time_s - one.time_s)


def _workstation(gen: int, switch: bool, cpu: str | None = None) -> Simulator:
    sets = [*WORKSTATION, f"cluster.node_params.pcie_gen={gen}", f"cluster.node_params.gpu={CONSUMER[gen]}"]
    sets.append(f"cluster.node_params.pcie_switch={'true' if switch else 'false'}")
    if cpu is not None:
        sets.append(f"cluster.node_params.cpu={cpu}")
    return Simulator.from_source("pcie-2gpu-nop2p", sets)


def _with_posts(sim: Simulator, bound: float) -> float:
    """The plateau of a Simple ring whose copies are bound at ``bound`` (bytes/s) once every slice pays its post."""
    consts, plan = sim.nccl_constants, sim.nccl_plan
    chunking = step_chunking(plan, consts, "Ring", "Simple", "allreduce", GiB, plan.channels)
    post = consts.hw_latency["PCI"]["Ring"]["Simple"] * consts.sim_step_latency_scale * chunking.steps_per_post
    cycle = plan.channels * chunking.chunk_bytes / chunking.slices_per_chunk  # every channel's slice, bytes
    return cycle / (cycle / bound + post)


def _shm_closed_form(sim: Simulator) -> float:
    """The SHM ring's plateau from the hardware (bytes/s), as in the module docstring."""
    return _with_posts(sim, _shm_copies_bound(sim))


def _shm_copies_bound(sim: Simulator) -> float:
    """The bound of the SHM ring's copies (bytes/s): the smallest of the four in the module docstring."""
    topo, consts = sim.topology, sim.nccl_constants
    hp = consts.host_paths
    plan = sim.nccl_plan
    gpus = plan.ranks
    n = len(gpus)
    cpu = topo.host_cpu(gpus[0])
    up = topo.pcie_route(gpus[0], cpu.name)  # GPU -> (switch ->) CPU
    down = topo.pcie_route(cpu.name, gpus[0])
    bounds = [up[0].bandwidth, down[-1].bandwidth, float(cpu.spec["memory_bandwidth"]) / (hp.shm_memory_traffic * n)]
    if len(up) > 1:  # under a PCIe switch: its uplink carries every GPU's writes, its downlink every GPU's reads
        under = sum(1 for g in gpus if topo.pcie_route(g, cpu.name)[-1] == up[-1])
        bounds += [up[-1].bandwidth / under, down[0].bandwidth / under]
    gpu = topo.device(gpus[0])
    threads = hp.simple_channel_threads(min(up[0].bandwidth, float(cpu.spec["memory_bandwidth"]) / 2))
    in_flight = threads * hp.unroll(int(gpu.spec["sm"])) * hp.load_bytes
    bounds.append(plan.channels * in_flight / (2 * sum(ln.latency for ln in down)))
    return min(bounds)


@pytest.mark.parametrize("gen", [4, 5])
@pytest.mark.parametrize(("switch", "cpu"), [(True, None), (False, None), (False, "threadripper-pro-7985wx")])
def test_shm_plateau_is_the_closed_form_of_the_copies(gen: int, switch: bool, cpu: str | None) -> None:
    sim = _workstation(gen, switch, cpu)
    plan = sim.nccl_plan
    assert {h.transport for h in plan.hops.values()} == {"SHM"}
    out = sim.simulate_one("nccl", GiB)
    assert (out.algorithm, out.protocol) == ("Ring", "Simple")
    assert _plateau(sim) == pytest.approx(_shm_closed_form(sim), rel=1e-6)


def test_shm_plateau_numbers() -> None:
    # the copies' bounds spelled out (GB/s, GB = 1e9 B): 4 GPUs, one socket; the plateau is that bound with the
    # posts (2 channels x 1 MiB slices then 2.85 us: 1.4% below the bound at 6 GB/s)
    cases = {
        # one Gen4 switch on an EPYC 7742 (PCIe Gen4): 24 GB/s uplink / 4 GPUs = 6.0
        (4, True, "epyc-7742"): 6.0,
        # on the default Xeon E5-2680 v4 its uplink trains at Gen3 (the CPU's root ports): 12 / 4 = 3.0
        (4, True, None): 3.0,
        # each GPU on the CPU, Xeon E5-2680 v4 (4 x DDR4-2400 = 76.8 GB/s): 76.8 / (2 x 4) = 9.6 (their links train
        # at Gen3, 12 GB/s, above it)
        (4, False, None): 9.6,
        (5, False, None): 9.6,
        # Threadripper PRO 7985WX (8 x DDR5-5200 = 332.8 GB/s): Gen4 link 24.0; Gen5 link 48 > 332.8 / 8 = 41.6
        (4, False, "threadripper-pro-7985wx"): 24.0,
        (5, False, "threadripper-pro-7985wx"): 41.6,
        # one Gen5 switch: 48 / 4 = 12.0
        (5, True, "threadripper-pro-7985wx"): 12.0,
    }
    for (gen, switch, cpu), gbps in cases.items():
        sim = _workstation(gen, switch, cpu)
        assert _shm_copies_bound(sim) / 1e9 == pytest.approx(gbps, rel=1e-9), (gen, switch, cpu)
        assert _plateau(sim) == pytest.approx(_with_posts(sim, gbps * 1e9), rel=1e-6), (gen, switch, cpu)
    assert _with_posts(sim, 6e9) / 1e9 == pytest.approx(2 * 2**20 / (2 * 2**20 / 6.0 + 2.85e-6 * 1e9), rel=1e-12)


@pytest.mark.parametrize(("switch", "cpu"), [(True, "threadripper-pro-7985wx"), (False, "threadripper-pro-7985wx")])
def test_shm_plateau_grows_with_the_pcie_generation(switch: bool, cpu: str | None) -> None:
    sets = [*WORKSTATION, "cluster.node_params.gpu=rtx-4090", f"cluster.node_params.pcie_switch={str(switch).lower()}"]
    if cpu is not None:
        sets.append(f"cluster.node_params.cpu={cpu}")
    plateaus = [_plateau(Simulator.from_source("pcie-2gpu-nop2p", [*sets, f"cluster.node_params.pcie_gen={g}"]))
                for g in (3, 4, 5)]
    assert plateaus[0] < plateaus[1] <= plateaus[2]


def test_shm_channel_cap_binds_when_few_loads_are_in_flight() -> None:
    # Little's law: with 1-byte loads in place of 16-byte ones the channels' reads bind before the Gen4 link (24 GB/s)
    # and the host memory (41.6 GB/s): plateau = C x T x U x 1 B / (2 L) = 2 x 512 x 8 B / 0.5 us = 16.384 GB/s
    sim = _workstation(4, False, "threadripper-pro-7985wx")
    hp = dataclasses.replace(sim.nccl_constants.host_paths, load_bytes=1)
    consts = dataclasses.replace(sim.nccl_constants, host_paths=hp)
    plan = plan_nccl(sim.topology, sim.nccl_options, consts, sim.fabric)
    times = [simulate_nccl(sim.topology, sim.nccl_options, consts, s, plan=plan, fabric=sim.fabric).time_s
             for s in (GiB, 2 * GiB)]
    hop = plan.hops[(0, 0)]
    expected = _with_posts(sim, plan.channels * hop.max_rate)  # bytes/s
    cpu = sim.topology.host_cpu(plan.ranks[0]).name
    latency = sum(ln.latency for ln in sim.topology.pcie_route(cpu, plan.ranks[0]))
    assert hop.max_rate == pytest.approx(512 * 8 * 1 / (2 * latency), rel=1e-12)  # sm89: unroll 8; Gen4 > PCI_BW
    assert GiB * 1.5 / (times[1] - times[0]) == pytest.approx(expected, rel=1e-6)


def test_shm_buffer_lives_on_the_receivers_socket() -> None:
    sim = Simulator.from_source(
        "pcie-2gpu-nop2p", ["cluster.node_params.sockets=2", "cluster.node_params.pcie_switch=false"]
    )
    plan = sim.nccl_plan
    for hop in plan.hops.values():
        cpu = sim.topology.host_cpu(hop.dst).name
        assert ("mem", cpu) in dict(hop.path.uses)


def _socket_closed_form(sim: Simulator, helpers: int) -> float:
    """The socket ring's plateau (bytes/s): one core's TCP rate on the GPU's proxy thread, or C x h cores' rate on
    helper threads; at most what the path's slowest link (the NIC) carries."""
    plan, topo = sim.nccl_plan, sim.topology
    net = next(h for h in plan.hops.values() if h.transport == "NET/socket")
    cpu = topo.host_cpu(net.src)
    tcp = float(cpu.spec["tcp_bw_per_core"])
    links = min(sim.topology.link(*k[1:]).bandwidth for k, _ in net.path.uses if k[0] == "link")
    cpu_bound = tcp if helpers == 0 else plan.channels * helpers * tcp
    return min(cpu_bound, links * plan.nic_count)


@pytest.mark.parametrize("helpers", [0, 2])
def test_socket_plateau_is_the_closed_form(helpers: int) -> None:
    sets = ["backends.nccl.env.NCCL_ALGO=Ring", "backends.nccl.env.NCCL_PROTO=Simple"]
    if helpers:
        sets.append(f"backends.nccl.env.NCCL_SOCKET_NTHREADS={helpers}")
    sim = Simulator.from_source("2node-a100-tcp", sets)
    assert {h.transport for h in sim.nccl_plan.hops.values() if h.hw == "NET"} == {"NET/socket"}
    assert _plateau(sim) == pytest.approx(_socket_closed_form(sim, helpers), rel=1e-6)


def test_socket_memory_traffic_is_four_bytes_per_byte_on_each_host() -> None:
    sim = Simulator.from_source("2node-a100-tcp")
    net = next(h for h in sim.nccl_plan.hops.values() if h.transport == "NET/socket")
    mem = [c for k, c in net.path.uses if k[0] == "mem"]
    proxies = {k[1] for k, _ in net.path.uses if k[0] == "proxy"}
    assert mem == [4.0, 4.0] and proxies == {net.src, net.dst}


@pytest.mark.parametrize(
    ("nic", "env", "layout"),
    [
        ("aws-ena-100g", [], (2, 8)),  # net_socket.cc: AWS's vendor id 0x1d0f, 2 threads x 8 sockets
        ("aws-ena-100g-no-pg", ["NCCL_SOCKET_NTHREADS=4"], (4, 8)),  # a variable set keeps the other's default
        ("aws-ena-100g", ["NCCL_NSOCKS_PERTHREAD=64"], (2, 32)),  # at most 64 sockets a connection
        ("eth-100g", [], (0, 1)),  # no vendor id: the proxy thread, the control socket
    ],
)
def test_a_socket_connection_on_a_cloud_nic_spreads_over_ncclS_threads_and_sockets(
    nic: str, env: list[str], layout: tuple[int, int]
) -> None:
    # each TCP flow is capped at the NIC preset's flow_bw (AWS: 10 Gb/s in a cluster placement group, 5 outside),
    # so a connection reaches min(threads x one core's TCP rate, sockets x the flow cap); without helper threads the
    # one control socket, at most one core's rate and one flow
    sets = [f"cluster.fabric.nic={nic}", *(f"backends.nccl.env.{e}" for e in env)]
    sim = Simulator.from_source("2node-a100-tcp", sets)
    net = next(h for h in sim.nccl_plan.hops.values() if h.transport == "NET/socket")
    tcp = float(sim.topology.host_cpu(net.src).spec["tcp_bw_per_core"])
    flow = float(sim.topology.nics()[0].spec.get("flow_bw") or float("inf"))
    threads, per_thread = layout
    expected = min(tcp, flow) if threads == 0 else min(threads * tcp, threads * per_thread * flow)
    assert net.max_rate == pytest.approx(expected, rel=1e-12)
    assert sim.nccl_constants.host_paths.socket_layout(
        sim.topology.nics()[0].spec.get("pci_vendor"), sim.nccl_options.socket_nthreads,
        sim.nccl_options.socket_nsocks,
    ) == layout  # fmt: skip
