"""NCCL-style collectives: channels, rings, protocols, transports, NCCL's tuner, and the simulation.

The backend turns a topology and NCCL's environment knobs into a plan (how many channels, which ring each channel
follows, which transport and path each hop uses: P2P over NVLink or PCIe, SHM through host memory, NET over a NIC with
or without GPUDirect RDMA, or sockets), picks the protocol with NCCL's cost model when ``NCCL_PROTO`` is unset, and
simulates the pipelined ring chunk by chunk on the fluid engine.

Constants come from ``topologies/software/nccl.yaml`` through :meth:`NcclConstants.from_mapping` (this layer does
not read YAML).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simpy.events import AllOf

from collsim.algorithms import EventBoard, RingChunking, nccl_ring_allreduce
from collsim.algorithms.nccl_algos import (
    nccl_chain,
    nccl_nvls_allgather,
    nccl_nvls_reduce_scatter,
    nccl_nvls_tree,
    nccl_pat,
    nccl_tree_down,
    nccl_tree_up,
)
from collsim.backends.common import BackendError, Outcome, Path, ResourceCatalog, link_uses, new_network, run_until_done
from collsim.engine import attribute_time, build_quotient
from collsim.topology import Topology
from collsim.topology.model import PATH_CLASS_ORDER, path_class_rank

__all__ = [
    "ALGORITHMS",
    "COLLECTIVES",
    "PROTOCOLS",
    "NcclConstants",
    "NcclOptions",
    "NcclPlan",
    "choose",
    "enabled_pairs",
    "plan_nccl",
    "simulate_nccl",
    "tuner_times",
]

ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")
_US = 1e-6  # microseconds to seconds
_GBPS = 1e9  # GB/s (1e9 bytes/s) to bytes/s


@dataclass(frozen=True)
class ProtocolConstants:
    """One NCCL protocol: buffer (wire bytes), data fraction of the wire, chunk and slice in steps."""

    name: str
    buffer_bytes: int
    data_per_wire: float
    chunk_steps: int
    slice_steps: int
    threshold_per_thread: int


@dataclass(frozen=True)
class NcclConstants:
    """NCCL's tuning and protocol constants in SI units (seconds, bytes/s, bytes)."""

    base_latency: Mapping[str, Mapping[str, float]]
    hw_latency: Mapping[str, Mapping[str, Mapping[str, float]]]
    ll_max_bw: Mapping[str, tuple[float, float, float]]
    per_channel_max_ring_ll128_bw: Mapping[str, tuple[float, float, float]]
    ll128_tuner_efficiency: float
    steps: int
    protocols: Mapping[str, ProtocolConstants]
    nthreads: int
    max_channels: int
    default_p2p_level: str
    default_gdr_level: str
    shm_channel_bw: float
    per_channel_max_tree_bw: Mapping[str, tuple[float, float, float]]
    per_channel_max_tree_ll128_bw: Mapping[str, tuple[float, float, float]]
    per_channel_max_nvls_tree_bw: Mapping[str, tuple[float, float, float]]
    nvls_efficiency: Mapping[str, float]
    nvls_channels: int
    nvls_chunk_bytes: int
    tree_correction: Mapping[str, tuple[float, ...]]
    tree_allreduce_efficiency: float
    ring_plateau_latency_factor: Mapping[str, float] = field(default_factory=dict)  # by GPU arch; 1 when absent
    # Calibration (collsim.scenario.profile): what the simulated system pays beyond NCCL's constants. They change
    # the simulated time only, never the cost model's choice (NCCL's tuner uses its own fixed table).
    group_launch_gap: float = 0.0  # seconds between kernel launches of GPUs driven by one thread (nccl-tests -g)
    sim_step_latency_scale: float = 1.0  # factor on the per-step latency (hwLat) a simulated hop pays
    sim_launch_overhead: float = 0.0  # seconds added to each simulated collective's base latency
    sim_ll_bw_scale: float = 1.0  # factor on the per-channel rate LL reaches (llMaxBw / nChannels) as simulated
    sim_ll128_bw_scale: float = 1.0  # factor on the per-channel rate LL128 reaches as simulated
    sim_max_chunks: int = 512  # chunks per channel beyond which a tree/chain/NVLS pipeline merges chunks

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> NcclConstants:
        """Build from the mapping in ``topologies/software/nccl.yaml`` (us and GB/s there, SI here)."""

        def us(table: Mapping[str, Any]) -> dict[str, Any]:
            return {k: (us(v) if isinstance(v, Mapping) else float(v) * _US) for k, v in table.items()}

        def gbps3(table: Mapping[str, Any]) -> dict[str, tuple[float, float, float]]:
            return {k: (float(v[0]) * _GBPS, float(v[1]) * _GBPS, float(v[2]) * _GBPS) for k, v in table.items()}

        return cls(
            base_latency=us(data["base_latency_us"]),
            hw_latency=us(data["hw_latency_us"]),
            ll_max_bw=gbps3(data["ll_max_bw_gbps"]),
            per_channel_max_ring_ll128_bw=gbps3(data["per_channel_max_ring_ll128_bw_gbps"]),
            ll128_tuner_efficiency=float(data["ll128_tuner_efficiency"]),
            steps=int(data["steps"]),
            protocols={
                name: ProtocolConstants(
                    name,
                    int(p["buffer_bytes"]),
                    float(p["data_per_wire"]),
                    int(p["chunk_steps"]),
                    int(p["slice_steps"]),
                    int(p["threshold_per_thread"]),
                )
                for name, p in data["protocols"].items()
            },
            nthreads=int(data["nthreads"]),
            max_channels=int(data["max_channels"]),
            default_p2p_level=str(data["default_p2p_level"]),
            default_gdr_level=str(data["default_gdr_level"]),
            shm_channel_bw=float(data["shm_channel_bw_gbps"]) * _GBPS,
            per_channel_max_tree_bw=gbps3(data["per_channel_max_tree_bw_gbps"]),
            per_channel_max_tree_ll128_bw=gbps3(data["per_channel_max_tree_ll128_bw_gbps"]),
            per_channel_max_nvls_tree_bw=gbps3(data["per_channel_max_nvls_tree_bw_gbps"]),
            nvls_efficiency={k: float(v) for k, v in data["nvls_efficiency"].items()},
            nvls_channels=int(data["nvls_channels"]),
            nvls_chunk_bytes=int(data["nvls_chunk_bytes"]),
            tree_correction={k: tuple(float(x) for x in v) for k, v in data["tree_correction"].items()},
            tree_allreduce_efficiency=float(data["tree_allreduce_efficiency"]),
            ring_plateau_latency_factor={k: float(v) for k, v in data.get("ring_plateau_latency_factor", {}).items()},
            group_launch_gap=float(data["group_launch_gap_us"]) * _US,
            sim_max_chunks=int(data.get("sim_max_chunks_per_channel", 512)),
        )


_LEVELS_BY_INT = ("LOC", "PIX", "PXB", "PHB", "SYS")  # NCCL's integer forms of P2P_LEVEL / NET_GDR_LEVEL (0..4)


def _level(value: str | None, default: str, name: str) -> str:
    if value is None or value == "":
        return default
    v = str(value).strip().upper()
    if v.isdigit():
        i = int(v)
        return _LEVELS_BY_INT[min(i, len(_LEVELS_BY_INT) - 1)]
    if v not in PATH_CLASS_ORDER:
        raise BackendError(f"{name}={value!r}: expected one of {', '.join(PATH_CLASS_ORDER)} or 0..5")
    return v


def _parse_list(value: str | None, valid: tuple[str, ...], name: str) -> set[str] | None:
    """NCCL's list syntax: ``a,b`` enables, ``^a,b`` disables; case-insensitive."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    exclude = text.startswith("^")
    names = [t.strip() for t in text.lstrip("^").split(",") if t.strip()]
    canon = {v.lower(): v for v in valid}
    if "collnet" in canon or name == "NCCL_ALGO":
        canon["collnet"] = "CollNetDirect"
    picked = set()
    for n in names:
        if n.lower() not in canon:
            raise BackendError(f"{name}={value!r}: unknown {n!r}; expected names from {', '.join(valid)}")
        picked.add(canon[n.lower()])
        if n.lower() == "collnet":
            picked.add("CollNetChain")
    return set(valid) - picked if exclude else picked


@dataclass(frozen=True)
class NcclOptions:
    """NCCL's environment knobs, parsed. Built from ``backends.nccl.env`` by :meth:`from_env`."""

    algorithms: frozenset[str] | None = None
    protocols: frozenset[str] | None = None
    p2p_disable: bool = False
    p2p_level: str | None = None
    shm_disable: bool = False
    ib_disable: bool = False
    gdr_level: str | None = None
    pxn_disable: bool = False
    min_channels: int | None = None
    max_channels: int | None = None
    buffsize: int | None = None
    socket_threads: int = 1
    nvls_enable: bool = True
    env: Mapping[str, str] = field(default_factory=dict)
    gpus_per_process: int = 1  # not an NCCL knob: the workload's GPUs per process (nccl-tests -g)

    @classmethod
    def from_env(cls, env: Mapping[str, Any]) -> NcclOptions:
        """Parse NCCL_* variables (values as strings or numbers) the way NCCL reads them."""

        def as_int(name: str) -> int | None:
            v = env.get(name)
            if v is None or str(v).strip() == "":
                return None
            try:
                return int(str(v).strip())
            except ValueError:
                raise BackendError(f"{name}={v!r}: expected an integer") from None

        algos = _parse_list(env.get("NCCL_ALGO"), ALGORITHMS, "NCCL_ALGO")
        protos = _parse_list(env.get("NCCL_PROTO"), PROTOCOLS, "NCCL_PROTO")
        threads = (as_int("NCCL_SOCKET_NTHREADS") or 1) * (as_int("NCCL_NSOCKS_PERTHREAD") or 1)
        return cls(
            algorithms=frozenset(algos) if algos is not None else None,
            protocols=frozenset(protos) if protos is not None else None,
            p2p_disable=bool(as_int("NCCL_P2P_DISABLE")),
            p2p_level=env.get("NCCL_P2P_LEVEL"),
            shm_disable=bool(as_int("NCCL_SHM_DISABLE")),
            ib_disable=bool(as_int("NCCL_IB_DISABLE")),
            gdr_level=env.get("NCCL_NET_GDR_LEVEL"),
            pxn_disable=bool(as_int("NCCL_PXN_DISABLE")),
            min_channels=as_int("NCCL_MIN_NCHANNELS"),
            max_channels=as_int("NCCL_MAX_NCHANNELS"),
            buffsize=as_int("NCCL_BUFFSIZE"),
            socket_threads=max(1, threads),
            nvls_enable=(as_int("NCCL_NVLS_ENABLE") if "NCCL_NVLS_ENABLE" in env else 1) != 0,
            env={k: str(v) for k, v in env.items()},
        )


@dataclass(frozen=True)
class Hop:
    """One ring edge of one channel: the transport NCCL would pick and the path it takes."""

    src: str
    dst: str
    transport: str  # "P2P/NVLink", "P2P/PCIe", "SHM", "NET/GDR", "NET/staged", "NET/socket"
    hw: str  # latency class for the tuner tables: NVLINK, PCI or NET
    path: Path
    max_rate: float  # cap on one connection (e.g. socket threads), bytes/s; inf when none


@dataclass
class NcclPlan:
    """Channels, their rings and hops, and what NCCL's tuner needs to know about the system."""

    ranks: list[str]
    nnodes: int
    channels: int
    rings: list[list[str]]
    hops: dict[tuple[int, int], Hop]
    arch: str
    channel_bw: float
    intra_hw: str
    bus_bw: float  # what the rings can carry per rank (bytes/s), for the tuner
    net_latency: float
    net_overhead: float
    nvl_bw: float = 0.0  # one GPU's NVLink bandwidth per direction (bytes/s)
    nvswitch: str | None = None  # the node's NVSwitch fabric device, when there is one
    ppn: int = 1  # GPUs per node
    intra_bw: float = 0.0  # what the channels carry per rank inside a node (bytes/s)
    nic_count: int = 0  # NICs per node in use
    nic_bw: float = 0.0  # one NIC's bandwidth per direction on the network path (bytes/s)
    fabric: Mapping[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _node_chain(topo: Topology, node: int, nic: str | None) -> list[str]:
    """GPUs of ``node`` in ring order: enter at the GPU nearest the channel's NIC, leave at another near it.

    Among equally near GPUs the one whose index matches the NIC's enters, so that channels on NICs sharing a PCIe
    switch enter and leave through different GPUs and spread over their PCIe links. The GPUs between follow in
    index order from the entry.
    """
    gpus = [d.name for d in topo.gpus() if d.node == node]
    if nic is None or len(gpus) == 1:
        return gpus
    nic_index = topo.device(nic).index
    ngpu = len(gpus)

    def key(g: str) -> tuple[int, int]:
        # nearest first; among equals the GPU whose index matches the NIC's (its "own" rail), then the following
        return path_class_rank(topo.path_class(g, nic)), (topo.device(g).index - nic_index) % ngpu

    ranked = sorted(gpus, key=key)
    entry = ranked[0]
    exit_ = ranked[1]
    i = gpus.index(entry)
    rest = [g for g in gpus[i + 1 :] + gpus[:i] if g != exit_]
    if all(topo.path_class(entry, g) == "NVL" for g in rest):
        # on an NVSwitch any order costs the same; mirror the order on odd rails (indices XOR 1) so that the
        # channels of a NIC pair are images of each other and the symmetry reduction can merge them
        flip = nic_index & 1
        e = topo.device(entry).index ^ flip
        rest.sort(key=lambda g: ((topo.device(g).index ^ flip) - e) % ngpu)
    return [entry, *rest, exit_]


def _pxn_proxy(topo: Topology, gpu: str, nic: str, gdr_level: str) -> str | None:
    """A GPU of ``gpu``'s node, reachable over NVLink, close enough to ``nic`` for GPUDirect (NCCL's PXN), or None."""
    dev = topo.device(gpu)
    for other in topo.gpus():
        if other.node != dev.node or other.name == gpu:
            continue
        close = path_class_rank(topo.path_class(other.name, nic)) <= path_class_rank(gdr_level)
        if close and topo.nvlink_route(gpu, other.name):
            return other.name
    return None


def _hop(
    topo: Topology,
    cat: ResourceCatalog,
    a: str,
    b: str,
    nic_a: str | None,
    nic_b: str | None,
    opts: NcclOptions,
    consts: NcclConstants,
    fabric: Mapping[str, Any],
) -> Hop:
    da, db = topo.device(a), topo.device(b)
    if da.node == db.node:
        p2p_level = _level(opts.p2p_level, consts.default_p2p_level, "NCCL_P2P_LEVEL")
        cls = topo.path_class(a, b)
        if not opts.p2p_disable and topo.p2p_supported(a, b) and path_class_rank(cls) <= path_class_rank(p2p_level):
            nvl = topo.nvlink_route(a, b)
            if nvl:
                return Hop(a, b, "P2P/NVLink", "NVLINK", link_uses(nvl), math.inf)
            return Hop(a, b, "P2P/PCIe", "PCI", link_uses(topo.pcie_route(a, b)), math.inf)
        if opts.shm_disable:
            raise BackendError(f"no transport between {a} and {b}: P2P unavailable and NCCL_SHM_DISABLE=1")
        cpu = topo.host_cpu(a).name
        path = link_uses(topo.pcie_route(a, cpu)) + cat.mem(cpu, 2.0) + link_uses(topo.pcie_route(cpu, b))
        return Hop(a, b, "SHM", "PCI", path, consts.shm_channel_bw)
    # different nodes: the network
    assert nic_a is not None and nic_b is not None
    fabric_path = link_uses(topo.route(nic_a, nic_b))
    rdma = bool(topo.device(nic_a).spec.get("rdma", False)) and fabric.get("transport", "rdma") == "rdma"
    if rdma and not opts.ib_disable:
        gdr_level = _level(opts.gdr_level, consts.default_gdr_level, "NCCL_NET_GDR_LEVEL")
        gdr_ok = bool(fabric.get("gpudirect", True))
        near = all(
            path_class_rank(topo.path_class(g, n)) <= path_class_rank(gdr_level) for g, n in ((a, nic_a), (b, nic_b))
        )
        if gdr_ok and near:
            path = link_uses(topo.pcie_route(a, nic_a)) + fabric_path + link_uses(topo.pcie_route(nic_b, b))
            return Hop(a, b, "NET/GDR", "NET", path, math.inf)
        recv_near = path_class_rank(topo.path_class(b, nic_b)) <= path_class_rank(gdr_level)
        if gdr_ok and recv_near and not opts.pxn_disable:
            # PXN: the sender hands the data over NVLink to a GPU next to the NIC, which sends it (GPUDirect)
            proxy = _pxn_proxy(topo, a, nic_a, gdr_level)
            if proxy is not None:
                path = (
                    link_uses(topo.nvlink_route(a, proxy) or [])
                    + link_uses(topo.pcie_route(proxy, nic_a))
                    + fabric_path
                    + link_uses(topo.pcie_route(nic_b, b))
                )
                return Hop(a, b, "NET/GDR", "NET", path, math.inf)
    ca, cb = topo.host_cpu(a).name, topo.host_cpu(b).name
    staged = (
        link_uses(topo.pcie_route(a, ca))
        + cat.mem(ca, 2.0)
        + link_uses(topo.pcie_route(ca, nic_a))
        + fabric_path
        + link_uses(topo.pcie_route(nic_b, cb))
        + cat.mem(cb, 2.0)
        + link_uses(topo.pcie_route(cb, b))
    )
    if rdma and not opts.ib_disable:
        return Hop(a, b, "NET/staged", "NET", staged, math.inf)
    cpu_a, cpu_b = topo.device(ca).spec, topo.device(cb).spec
    per_core = float(cpu_a["tcp_bw_per_core"])
    sock = staged + cat.cores(da.node, 1.0 / per_core) + cat.cores(db.node, 1.0 / float(cpu_b["tcp_bw_per_core"]))
    return Hop(a, b, "NET/socket", "NET", sock, per_core * opts.socket_threads)


def plan_nccl(
    topo: Topology, opts: NcclOptions, consts: NcclConstants, fabric: Mapping[str, Any] | None = None
) -> NcclPlan:
    """Channels, rings and transports as NCCL would build them for ``topo``.

    Channel count: on NVLink systems 2 x (the GPU's NVLink bandwidth / one channel's bandwidth), NCCL's rings
    duplicated (24 on DGX A100 and HGX H100); on PCIe 2 x (path bottleneck / channel bandwidth), at least 2;
    across nodes at most 2 per NIC used; then NCCL_MIN/MAX_NCHANNELS and MAXCHANNELS.
    Rings: within a node GPUs in index order; across nodes each channel uses one NIC rail (channel mod NICs), enters
    a node at the GPU nearest that NIC and leaves from the next nearest, so GPUDirect RDMA stays within PIX.
    """
    fabric = dict(fabric or {})
    gpus = [d.name for d in topo.gpus()]
    if len(gpus) < 1:
        raise BackendError("the topology has no GPUs: NCCL needs GPUs (use the gloo backend with device: cpu)")
    cat = ResourceCatalog(topo)
    g0 = topo.device(gpus[0])
    arch = str(g0.spec.get("arch", "ampere"))
    channel_bw = float(g0.spec["nccl_channel_bw"])
    nnodes = len({topo.device(g).node for g in gpus})
    nvl_bw = sum(ln.bandwidth for ln in topo.links() if ln.src == gpus[0] and ln.kind == "nvlink")
    node0 = [g for g in gpus if topo.device(g).node == 0]
    notes: list[str] = []
    intra_hw = "NVLINK" if nvl_bw > 0 else "PCI"  # one GPU per node: its class, though no hop uses it
    # intra-node capacity per rank and channel count
    if len(node0) > 1:
        probe = _hop(topo, cat, node0[0], node0[1], None, None, opts, consts, fabric)
        intra_hw = probe.hw
        if probe.transport == "P2P/NVLink":
            intra_cap = nvl_bw
        else:
            specs = cat.specs
            intra_cap = min(specs[k].capacity / c for k, c in probe.path.uses)
            if probe.transport == "SHM":
                notes.append(f"{node0[0]}->{node0[1]}: P2P unavailable, SHM through host memory")
        nch = 2 * max(1, int(intra_cap // channel_bw))
        channel_bw = min(channel_bw, probe.max_rate)
    else:
        intra_cap = math.inf
        nch = 2
    nics_used = 0
    nic_bw = 0.0
    net_latency = 0.0
    if nnodes > 1:
        nics = topo.nics(0)
        if not nics:
            raise BackendError("several nodes but node 0 has no NIC")
        nics_used = len(nics)
        nch = min(nch, 2 * nics_used)
    nch = min(nch, consts.max_channels)
    if opts.max_channels is not None:
        nch = min(nch, max(1, opts.max_channels))
    if opts.min_channels is not None:
        nch = max(nch, min(opts.min_channels, consts.max_channels))
    rings: list[list[str]] = []
    hops: dict[tuple[int, int], Hop] = {}
    for c in range(nch):
        ring: list[str] = []
        nic_of: dict[int, str | None] = {}
        for node in range(nnodes):
            nic = None
            if nnodes > 1:
                node_nics = topo.nics(node)
                nic = node_nics[c % len(node_nics)].name
            nic_of[node] = nic
            ring += _node_chain(topo, node, nic)
        rings.append(ring)
        n = len(ring)
        for i in range(n):
            a, b = ring[i], ring[(i + 1) % n]
            na, nb = topo.device(a).node, topo.device(b).node
            hop = _hop(topo, cat, a, b, nic_of[na], nic_of[nb], opts, consts, fabric)
            hops[(c, i)] = hop
            if hop.hw == "NET":
                net_latency = max(net_latency, hop.path.latency)
    bus_bw = min(intra_cap, nch * channel_bw)
    if nnodes > 1:
        first_net = next(h for h in hops.values() if h.hw == "NET")
        nic_bw = min(cat.specs[k].capacity / c for k, c in first_net.path.uses)
        bus_bw = min(bus_bw, nics_used * nic_bw, nch * min(nic_bw, first_net.max_rate))
        transports = sorted({h.transport for h in hops.values() if h.hw == "NET"})
        notes.append(f"inter-node transport: {', '.join(transports)}")
    cpu0 = topo.host_cpu(gpus[0]).spec
    return NcclPlan(
        ranks=gpus,
        nnodes=nnodes,
        channels=nch,
        rings=rings,
        hops=hops,
        arch=arch,
        channel_bw=channel_bw,
        intra_hw=intra_hw,
        bus_bw=bus_bw,
        net_latency=net_latency,
        net_overhead=float(cpu0.get("nccl_net_overhead", 1e-6)),
        nvl_bw=nvl_bw,
        nvswitch=next((d.name for d in topo.devices("nvswitch", 0)), None),
        ppn=len(node0),
        fabric=fabric,
        intra_bw=min(intra_cap, nch * channel_bw),
        nic_count=nics_used,
        nic_bw=nic_bw,
        notes=notes,
    )


def _node_index(nnodes: int) -> int:
    return 0 if nnodes <= 1 else (1 if nnodes == 2 else 2)


def ll128_enabled(plan: NcclPlan) -> bool:
    """NCCL enables LL128 by default only on NVLink-class intra-node paths (compute capability >= 7.0)."""
    return plan.intra_hw == "NVLINK"


COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv")
_P2P_COLLECTIVES = ("alltoall", "sendrecv")


def nvls_supported(plan: NcclPlan, opts: NcclOptions) -> str | None:
    """None when NVLS can run (NVLS on one node, NVLSTree across nodes); else why not (it needs an NVSwitch and
    Hopper or newer GPUs)."""
    if plan.arch not in ("hopper", "blackwell"):
        return f"NVLS needs Hopper or newer GPUs (this is {plan.arch})"
    if plan.nvswitch is None:
        return "NVLS needs an NVSwitch"
    if not opts.nvls_enable:
        return "NCCL_NVLS_ENABLE=0"
    return None


def candidates(plan: NcclPlan, opts: NcclOptions, collective: str) -> list[tuple[str, str]]:
    """(algorithm, protocol) pairs NCCL could run for ``collective`` here, before NCCL_ALGO/NCCL_PROTO filtering."""
    if collective in _P2P_COLLECTIVES:
        return [("P2P", "Simple")]
    pairs = [("Ring", p) for p in PROTOCOLS]
    n = len(plan.ranks)
    if collective in ("allgather", "reduce_scatter") and plan.ppn == 1 and n > 1:
        pairs.append(("PAT", "Simple"))  # one GPU per node
    if collective == "allreduce" and len(plan.ranks) > 1:
        pairs += [("Tree", p) for p in PROTOCOLS]
        if nvls_supported(plan, opts) is None:
            pairs.append(("NVLS", "Simple") if plan.nnodes == 1 else ("NVLSTree", "Simple"))
        if plan.nnodes > 1 and plan.fabric.get("in_network_reduction") and plan.nic_count:
            pairs += [("CollNetDirect", "Simple"), ("CollNetChain", "Simple")]
    return pairs


def tuner_times(
    plan: NcclPlan, consts: NcclConstants, collective: str, nbytes: int, opts: NcclOptions | None = None
) -> dict[tuple[str, str], float]:
    """NCCL's cost model (tuning.cc): predicted seconds for every modelled (algorithm, protocol) pair.

    time = latency + bytes / algBw. busBw starts from what the channels carry (``plan.bus_bw``) with NCCL's caps per
    protocol and generation (LL: llMaxBw and half the wire; LL128: 92% and a per-channel cap; Tree: 92% and
    perChMaxTreeBw, LL /3.8, LL128 7/9 on one node; NVLS: NVLink x nvlsEfficiency x (nCh-1)/nCh x 2); algBw = busBw x
    n/nsteps for rings and NVLS, busBw / 2 for trees, which also get NCCL's size-bucket correction. Latency = baseLat
    + per-step hwLat (NVLink/PCI in a node, NET + network latency between nodes; Simple pays the network twice).
    """
    if collective not in COLLECTIVES:
        raise BackendError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")
    opts = opts or NcclOptions()
    n = len(plan.ranks)
    out: dict[tuple[str, str], float] = {}
    if collective in _P2P_COLLECTIVES:
        return {("P2P", "Simple"): consts.base_latency["Ring"]["Simple"] + nbytes / max(plan.bus_bw, 1.0)}
    if n == 1:
        return {("Ring", p): consts.base_latency["Ring"][p] for p in PROTOCOLS}
    idx = _node_index(plan.nnodes)
    arch = plan.arch if plan.arch in consts.ll_max_bw else "ampere"
    nch = plan.channels
    if collective == "allreduce":
        nsteps, ninter = 2 * (n - 1), 2 * (plan.nnodes - 1)
    elif collective in ("allgather", "reduce_scatter"):
        nsteps, ninter = n - 1, plan.nnodes - 1
    else:  # broadcast, reduce: a pipelined chain
        nsteps, ninter = n, plan.nnodes - 1
    for algo, proto in candidates(plan, opts, collective):
        intra = consts.hw_latency[plan.intra_hw][algo][proto]
        inter = consts.hw_latency["NET"][algo][proto] + plan.net_latency * (2 if proto == "Simple" else 1)
        lat = consts.base_latency[algo][proto]
        bus = plan.bus_bw
        if algo == "Ring":
            if proto == "LL":
                bus = min(consts.ll_max_bw[arch][idx], 0.5 * bus)
            elif proto == "LL128":
                bus = min(consts.ll128_tuner_efficiency * bus, nch * consts.per_channel_max_ring_ll128_bw[arch][idx])
            algbw = bus * n / nsteps
            if plan.nnodes > 1:
                intra = max(intra, plan.net_overhead * (3 if proto == "Simple" else 1))
            lat += (nsteps - ninter) * intra + ninter * inter
            lat *= _ring_plateau(plan, consts, proto, collective, nbytes)
        elif algo in ("CollNetDirect", "CollNetChain"):
            # the switches reduce: every node sends the buffer once and gets it back once, spread over its NICs
            # (Direct: every GPU a head for its share; Chain: one head per channel, channels on all rails);
            # collsim's reading: tuning.cc gives the latencies
            bus = min(bus, plan.nic_count * plan.nic_bw * 2)
            algbw = bus * 0.5
            hops = 2 if algo == "CollNetDirect" else 2 * (plan.ppn - 1)
            lat += hops * intra + inter
        elif algo == "PAT":
            algbw = 0.75 * bus * n / nsteps  # tuning.cc: PAT's bandwidth x0.75
            lat += math.ceil(math.log2(n)) * inter
        elif algo == "Tree":
            if plan.nnodes == 2:
                # two nodes are a special case (NCCL maintainers, NVIDIA/nccl#946 and nccl-tests#196): a tree sends
                # half the ring's traffic over the network, so it is bound by the intra-node links and can reach
                # ~2x the network speed; tuning.cc takes bwIntra for nNodes <= 2
                bus = min(plan.intra_bw, 2 * plan.bus_bw)
            if collective == "allreduce":  # tuning.cc: "AllReduce pipelines two operations", every protocol
                bus = min(consts.tree_allreduce_efficiency * bus, nch * consts.per_channel_max_tree_bw[arch][idx])
            if proto == "LL":
                bus = min(bus / 3.8, consts.ll_max_bw[arch][idx])
            elif proto == "LL128":
                frac = 7.0 / 9.0 if plan.nnodes == 1 else 120.0 / 128.0
                bus = min(bus * frac, nch * consts.per_channel_max_tree_ll128_bw[arch][idx])
            algbw = bus * 0.5 * _tree_correction(consts, proto, nbytes)
            lat += 2 * ((plan.ppn - 1) * intra + int(math.log2(plan.nnodes)) * inter)
        else:  # NVLS (one node) or NVLSTree (NVLS in each node, trees of NICs between nodes)
            eff = consts.nvls_efficiency.get(plan.arch, 0.85)
            nc = consts.nvls_channels
            bus = plan.nvl_bw * eff * (nc - 1) / nc * 2
            if algo == "NVLSTree":
                inter_bw = plan.nic_count * plan.nic_bw * (2 if plan.nnodes <= 2 else 1)
                bus = min(bus, inter_bw, nc * consts.per_channel_max_nvls_tree_bw[arch][idx])
                lat += intra + 2 * math.log2(plan.nnodes) * inter
            else:
                lat += intra
            algbw = bus * n / nsteps
        out[(algo, proto)] = lat + nbytes / algbw
    return out


def enabled_pairs(plan: NcclPlan, opts: NcclOptions, collective: str) -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs NCCL may pick here after NCCL_ALGO and NCCL_PROTO.

    A choice NCCL would refuse (NVLS without Hopper and NVSwitch, CollNet without in-network reduction) is a
    BackendError saying why; algorithms NCCL has but collsim does not model yet are named as such.
    """
    pairs = candidates(plan, opts, collective)
    if opts.algorithms is not None and collective not in _P2P_COLLECTIVES:
        wanted = set(opts.algorithms)
        if not wanted:
            raise BackendError("NCCL_ALGO excludes every algorithm")
        if wanted <= {"NVLS", "NVLSTree"} and (why := nvls_supported(plan, opts)):
            raise BackendError(f"NCCL_ALGO={opts.env.get('NCCL_ALGO')}: NCCL would refuse it here: {why}")
        if wanted <= {"CollNetDirect", "CollNetChain"} and not plan.fabric.get("in_network_reduction"):
            raise BackendError(
                "NCCL_ALGO=CollNet needs a fabric with in-network reduction (fabric.in_network_reduction)"
            )
        pairs = [(a, p) for a, p in pairs if a in wanted]
        if not pairs:
            raise BackendError(
                f"NCCL_ALGO={opts.env.get('NCCL_ALGO')}: no modelled algorithm left for {collective} "
                f"(collsim models Ring, Tree, and NVLS on one Hopper NVSwitch node or NVLSTree across them; "
                f"{', '.join(sorted(wanted))} not modelled here)"
            )
    protos = set(opts.protocols) if opts.protocols is not None else set(PROTOCOLS)
    if opts.protocols is None and not ll128_enabled(plan):
        protos.discard("LL128")
    pairs = [(a, p) for a, p in pairs if p in protos or a == "P2P"]
    if not pairs:
        raise BackendError(f"NCCL_PROTO={opts.env.get('NCCL_PROTO')}: no protocol left for {collective}")
    return pairs


def choose(
    plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, collective: str, nbytes: int
) -> tuple[str, str, float]:
    """The (algorithm, protocol) NCCL would run and its predicted time: the minimum of NCCL's cost model
    (:func:`tuner_times`) over :func:`enabled_pairs`."""
    pairs = enabled_pairs(plan, opts, collective)
    times = tuner_times(plan, consts, collective, nbytes, opts)
    cands = [(times[(a, p)], a, p) for a, p in pairs if (a, p) in times]
    t, a, p = min(cands, key=lambda x: (x[0], ALGORITHMS.index(x[1]) if x[1] in ALGORITHMS else 0, x[2]))
    return a, p, t


# pipelines whose fill is a few stages deep (a tree's depth, NVLS's reduce and multicast): merging chunks beyond
# NcclConstants.sim_max_chunks costs them little; rings and chains (2(n-1) or n-1 stages) are never merged
_MERGEABLE = ("Tree", "NVLS", "NVLSTree", "CollNetDirect", "CollNetChain")


def _tree_correction(consts: NcclConstants, proto: str, nbytes: int) -> float:
    """NCCL's tree correction factor for an allreduce of ``nbytes``: the table's entry at log2(nbytes / 64) while
    that is below 23 (tuning.cc applies it to Tree only for logSize < 23), and 1 from 512 MiB on.

    >>> from types import SimpleNamespace
    >>> consts = SimpleNamespace(tree_correction={"Simple": [0.9] * 7 + [0.8, 0.7, 0.6, 0.6] + [0.5] * 13})
    >>> [_tree_correction(consts, "Simple", 1 << k) for k in (6, 16, 28, 29, 30)]  # type: ignore[arg-type]
    [0.9, 0.6, 0.5, 1.0, 1.0]
    """
    table = consts.tree_correction[proto]
    bucket = int(math.log2(max(nbytes, 64) / 64))
    return table[bucket] if bucket < min(23, len(table)) else 1.0


def _ring_plateau(plan: NcclPlan, consts: NcclConstants, proto: str, collective: str, nbytes: int) -> float:
    """NCCL's "plateau effect of ring" (tuning.cc): the factor on a Ring/Simple allreduce's latency across nodes
    once it carries at least 64 bytes per rank and channel (x1.4 from sm80 on, x1.9 below); 1 otherwise.

    >>> from types import SimpleNamespace
    >>> plan = NcclPlan(["g"] * 16, 2, 16, [], {}, "ampere", 0.0, "NVLINK", 0.0, 0.0, 0.0)
    >>> consts = SimpleNamespace(ring_plateau_latency_factor={"volta": 1.9, "ampere": 1.4})
    >>> [_ring_plateau(plan, consts, "Simple", "allreduce", b) for b in (16 * 16 * 64 - 1, 16 * 16 * 64)]
    [1.0, 1.4]
    >>> _ring_plateau(plan, consts, "LL128", "allreduce", 1 << 30)
    1.0
    """
    per_rank_channel = nbytes / (plan.channels * len(plan.ranks))
    if plan.nnodes > 1 and proto == "Simple" and collective == "allreduce" and per_rank_channel >= 64:
        return consts.ring_plateau_latency_factor.get(plan.arch, 1.0)
    return 1.0


def _nvls_chunk(algo: str, nbytes: int, concurrent: int, chunk: float, nnodes: int = 1) -> float:
    """NVLS and NVLSTree chunk size in bytes (enqueue.cc): NCCL_NVLS_CHUNKSIZE (128 KiB; NVLSTree at most 64 KiB
    from 4 nodes on, NCCL_NVLSTREE_MAX_CHUNKSIZE's default), cut for sizes that would leave the ``concurrent`` =
    channels x NVLS heads pipelines too few chunks (NVLS down to 16 KiB, NVLSTree down to 32 KiB).

    >>> [_nvls_chunk("NVLS", s << 20, 16 * 8, 131072) // 1024 for s in (2, 16, 128, 1024)]
    [16.0, 32.0, 64.0, 128.0]
    >>> [_nvls_chunk("NVLSTree", s << 20, 16 * 8, 131072, 2) // 1024 for s in (4, 16, 64)]
    [32.0, 64.0, 128.0]
    >>> _nvls_chunk("NVLSTree", 1 << 30, 16 * 8, 131072, 4) // 1024
    64.0
    """
    if algo == "NVLSTree" and nnodes >= 4:
        chunk = min(chunk, 65536)
    steps = (
        ((64, 65536), (8, 32768), (2, 16384))
        if algo == "NVLS"
        else ((32, 262144), (16, 131072), (4, 65536), (1, 32768))
    )
    for times, floor in steps:
        if nbytes < times * concurrent * chunk and chunk > floor:
            chunk = floor
    return float(chunk)


def _tree_ll128_chunk(nbytes: int, nc: int, nnodes: int, ppn: int, chunk: float) -> float:
    """The LL128 tree's chunk in wire bytes (enqueue.cc): halved, down to 128 KiB and then to 32 KiB, until every
    channel has enough chunks for the tree's steps (nstepsLL128 = 1 + log2(nNodes) + 0.1 ppn; at least
    nstepsLL128 x 64 / ppn chunks, then x 16 / ppn).

    >>> step = 4915200 / 8  # an LL128 step: NCCL's LL128 buffer over NCCL_STEPS
    >>> [int(_tree_ll128_chunk(s << 20, 16, 2, 8, step)) // 1024 for s in (1, 8, 64, 1024)]
    [18, 75, 150, 600]
    """
    nsteps = 1 + int(math.log2(nnodes)) + 0.1 * ppn
    for times, floor in ((64, 131072), (16, 32768)):
        while nbytes // (nc * chunk) < nsteps * times / ppn and chunk > floor:
            chunk /= 2
    return chunk


def _channels_for(plan: NcclPlan, consts: NcclConstants, proto: str, nbytes: int, nc: int) -> int:
    """NCCL shrinks the channel count for small sizes: while bytes < nc * nthreads * threshold, nc -= 1."""
    pc = consts.protocols[proto]
    thresh = pc.threshold_per_thread * (len(plan.ranks) if proto == "LL" else 1)
    while nc > 1 and nbytes < nc * consts.nthreads * thresh:
        nc -= 1
    return nc


_TRANSPORT_TAG = {
    "P2P/NVLink": "NVLink",
    "P2P/PCIe": "PCIe P2P",
    "SHM": "SHM via host memory",
    "NET/GDR": "network (GPUDirect RDMA)",
    "NET/staged": "network (staged via host)",
    "NET/socket": "network (TCP sockets)",
}
_PRIORITY = [
    "NVLink (NVLS)",
    "network (TCP sockets)",
    "network (staged via host)",
    "network (GPUDirect RDMA)",
    "SHM via host memory",
    "PCIe P2P",
    "NVLink",
    "launch + base latency",
]


@dataclass
class _Role:
    """What one representative's flows in one role cost: resources (already protocol-scaled), latency, cap, tag."""

    uses: list[tuple[Hashable, float]]
    latency: float
    cap: float
    tag: str
    net: bool = False  # crosses the network: NCCL's proxy forwards it one whole step at a time


def _hop_role(hop: Hop, consts: NcclConstants, plan: NcclPlan, algo: str, proto: str, wire: float, cap: float) -> _Role:
    table = "Ring" if algo in ("P2P", "Ring") else algo
    hw_lat = consts.hw_latency[hop.hw][table][proto]
    if table == "Ring" and plan.nnodes > 1 and hop.hw != "NET":  # tuning.cc: rings across nodes only
        hw_lat = max(hw_lat, plan.net_overhead * (3 if proto == "Simple" else 1))
    prop = hop.path.latency * (2 if (hop.hw == "NET" and proto == "Simple") else 1)
    lat = hw_lat * consts.sim_step_latency_scale + prop
    return _Role(
        [(k, c * wire) for k, c in hop.path.uses],
        lat,
        min(cap, hop.max_rate),
        _TRANSPORT_TAG[hop.transport],
        hop.hw == "NET",
    )


def _btree(nodes: int, m: int) -> tuple[int | None, list[int]]:
    """Parent and children of ``m`` in NCCL's binary tree over ``nodes`` (trees.cc ``ncclGetBtree``): rooted at 0
    with a single child (the highest power of two below ``nodes``); a node's lowest set bit ``b`` gives its parent
    ``(m ^ b) | 2b`` (or ``m ^ b`` when that is out of range) and children ``m - b/2`` and ``m + b/2`` (halving the
    offset until in range); odd nodes are leaves."""
    bit = 1
    while bit < nodes and not bit & m:
        bit <<= 1
    if m == 0:
        return None, ([bit >> 1] if nodes > 1 else [])
    up = (m ^ bit) | (bit << 1)
    parent = up if up < nodes else m ^ bit
    low = bit >> 1
    if low == 0:
        return parent, []
    kids = [m - low]
    while m + low >= nodes and low > 0:
        low >>= 1
    if low > 0:
        kids.append(m + low)
    return parent, kids


def _binary_tree(node: int, nodes: int, mirror: bool) -> tuple[int | None, list[int]]:
    """Parent and children of ``node`` in NCCL's double binary tree over ``nodes`` (trees.cc ``ncclGetDtree``):
    tree 0 is :func:`_btree`; tree 1 is its mirror image for an even node count and the tree shifted by one node
    for an odd count, so no node is an inner node of both trees.

    >>> _binary_tree(0, 4, False), _binary_tree(2, 4, False), _binary_tree(1, 4, False)
    ((None, [2]), (0, [1, 3]), (2, []))
    >>> _binary_tree(3, 4, True), _binary_tree(1, 4, True)
    ((None, [1]), (3, [2, 0]))
    >>> _binary_tree(1, 3, True), _binary_tree(0, 3, True), _binary_tree(2, 3, True)
    ((None, [0]), (1, [2]), (0, []))
    """
    if not mirror:
        return _btree(nodes, node)
    if nodes % 2 == 1:  # shift by one node
        parent, kids = _btree(nodes, (node - 1) % nodes)
        return (None if parent is None else (parent + 1) % nodes), [(k + 1) % nodes for k in kids]
    parent, kids = _btree(nodes, nodes - 1 - node)
    return (None if parent is None else nodes - 1 - parent), [nodes - 1 - k for k in kids]


def _tree_links(plan: NcclPlan, c: int, topo: Topology) -> tuple[dict[str, str | None], dict[str, list[str]]]:
    """Parent and children of every GPU in channel ``c``'s tree: a chain in each node (from the GPU next to the
    channel's NIC) and, across nodes, one of NCCL's two complementary binary trees (even channels tree 0, odd
    channels tree 1; see :func:`_binary_tree`), joined at the chains' heads. Children are listed in a fixed
    order (the next GPU of the chain, then the left and right subtree), so mirrored channels are exact images."""
    nodes = plan.nnodes
    ring = plan.rings[c]
    chains = [[g for g in ring if topo.device(g).node == node] for node in range(nodes)]
    mirror = c % 2 == 1

    parent: dict[str, str | None] = {}
    children: dict[str, list[str]] = {}
    for node, chain in enumerate(chains):
        for k, g in enumerate(chain):
            kids = [chain[k + 1]] if k + 1 < len(chain) else []
            if k == 0:
                pn, node_kids = _binary_tree(node, nodes, mirror)
                parent[g] = None if pn is None else chains[pn][0]
                kids += [chains[x][0] for x in node_kids]
            else:
                parent[g] = chain[k - 1]
            children[g] = kids
    return parent, children


def simulate_nccl(
    topo: Topology,
    opts: NcclOptions,
    consts: NcclConstants,
    nbytes: int,
    *,
    collective: str = "allreduce",
    fabric: Mapping[str, Any] | None = None,
    plan: NcclPlan | None = None,
    symmetry: bool = True,
    record: bool = False,
    check: bool = False,
    choice: tuple[str, str] | None = None,
) -> Outcome:
    """Simulate one NCCL-style collective of ``nbytes`` and return its outcome.

    ``nbytes`` follows nccl-tests: the buffer per rank for allreduce, broadcast, reduce and sendrecv, the whole
    gathered buffer (count x ranks x type) for allgather, reduce_scatter and alltoall. The (algorithm, protocol) is
    NCCL's choice (:func:`choose`) unless ``choice`` forces one.

    Every (channel, rank) is a SimPy process after the base latency (NCCL's baseLat; NVLS its hwLat, once): rings
    (:func:`~collsim.algorithms.nccl_ring_allreduce`, 2(n-1) steps or n-1 for all-gather/reduce-scatter), chains for
    broadcast/reduce/send-recv, the double binary tree (reduce up and broadcast down, concurrently, per slice) or
    NVLS (the NVSwitch reduces and multicasts). Each slice pays its hop's per-step latency (NCCL's hwLat for the
    hop's class plus propagation, twice for Simple over the network) once on arrival and streams at its max-min fair
    rate, capped by one channel, with the protocol's wire overhead on every link. Symmetric (channel, rank) pairs
    are simulated once (exactly; see :mod:`collsim.engine.symmetry`).
    """
    plan = plan or plan_nccl(topo, opts, consts, fabric)
    if collective not in COLLECTIVES:
        raise BackendError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")
    if choice is None:
        algo, proto, predicted = choose(plan, opts, consts, collective, nbytes)
    else:
        algo, proto = choice
        predicted = tuner_times(plan, consts, collective, nbytes, opts).get(choice, math.nan)
    n = len(plan.ranks)
    if nbytes == 0:  # NCCL returns at once for a count of 0 (enqueue.cc), without launching a kernel
        return Outcome("nccl", collective, algo, proto, n, 0, 0.0, notes=["count 0: nothing launched"], predicted_s=0.0)
    pc = consts.protocols[proto]
    nc = plan.channels
    if algo in ("NVLS", "NVLSTree"):  # NVLS runs its own channel count, under NCCL_MAX_NCHANNELS
        nc = min(consts.nvls_channels, opts.max_channels or consts.nvls_channels)
    nc = _channels_for(plan, consts, proto, nbytes, nc)
    buffer = opts.buffsize if (opts.buffsize and proto == "Simple") else pc.buffer_bytes
    step_data = buffer / consts.steps * pc.data_per_wire
    if algo == "Ring" and proto == "Simple":
        chunking = RingChunking(
            step_data * pc.chunk_steps, pc.chunk_steps // pc.slice_steps, consts.steps // pc.slice_steps
        )
    else:  # enqueue.cc: chunkSteps = sliceSteps = 1 unless Ring/Simple
        chunk = step_data
        pieces = 1
        if algo in ("NVLS", "NVLSTree"):
            chunk = _nvls_chunk(algo, nbytes, nc * plan.ppn, consts.nvls_chunk_bytes, plan.nnodes)
        elif algo == "Tree" and proto == "Simple":
            # enqueue.cc: halve the chunk until every channel has enough of them to fill the tree's pipeline
            depth = plan.ppn - 1 + max(0, math.ceil(math.log2(plan.nnodes)))
            per = nbytes / max(1, min(plan.channels, _channels_for(plan, consts, proto, nbytes, plan.channels)))
            for times, floor in ((8, 131072), (4, 65536), (1, 32768)):
                while per / chunk < depth * times and chunk > floor:
                    chunk /= 2
        elif algo == "Tree" and proto == "LL128" and collective == "allreduce":
            chunk = _tree_ll128_chunk(nbytes, nc, plan.nnodes, plan.ppn, chunk / pc.data_per_wire) * pc.data_per_wire
        if proto in ("LL", "LL128") and algo in ("Tree", "Ring"):
            # LL and LL128 carry a flag in every line, so a receiver forwards data as lines arrive instead of waiting
            # for a whole step: model that by cutting a step into up to 16 pieces when a channel has too few steps
            # to fill the pipeline (collsim's modelling choice; NCCL has no such parameter)
            depth = 2 * (plan.ppn - 1 + max(0, math.ceil(math.log2(plan.nnodes)))) if algo == "Tree" else 2 * n
            per = nbytes / max(1, _channels_for(plan, consts, proto, nbytes, plan.channels))
            while per / (chunk / pieces) < 2 * depth and pieces < 16:
                pieces *= 2
        # a step cut in pieces is still one chunk; the connection still holds NCCL_STEPS steps
        chunking = RingChunking(chunk, pieces, consts.steps * pieces)
        # collsim's simulation setting, not NCCL's: beyond sim_max_chunks chunks per channel, consecutive chunks
        # are merged (a pipeline that long is in steady state; merging adds one merged chunk's time per pipeline
        # stage to its fill: +0.66% at most, measured in topologies/software/nccl.yaml)
        if algo in _MERGEABLE and nbytes / nc > consts.sim_max_chunks * chunk:
            chunking = RingChunking(nbytes / nc / consts.sim_max_chunks, pieces, consts.steps * pieces)
    idx = _node_index(plan.nnodes)
    arch = plan.arch if plan.arch in consts.ll_max_bw else "ampere"
    cap = plan.channel_bw
    if proto == "LL":
        cap = min(cap, consts.ll_max_bw[arch][idx] / nc) * consts.sim_ll_bw_scale
        if algo == "Tree":
            # one LL channel of the tree reduces up and broadcasts down with the same threads (NCCL's tree LL
            # kernel runs up and down in one loop); tuning.cc caps the tree's LL busBw at llMaxBw and halves it
            # for algBw: both directions share the channel's LL rate
            cap /= 2
    elif proto == "LL128":
        cap = min(cap, consts.per_channel_max_ring_ll128_bw[arch][idx]) * consts.sim_ll128_bw_scale
    wire = 1.0 / pc.data_per_wire
    if algo == "Tree" and collective == "allreduce":
        # NCCL's tree allreduce kernels reach only a fraction of the link rate: tuning.cc carries it as an efficiency
        # (x0.92, "AllReduce pipelines two operations") and a size-dependent tree correction factor, both fitted to
        # NVIDIA's measurements; the simulation charges the links accordingly
        wire /= consts.tree_allreduce_efficiency * _tree_correction(consts, proto, nbytes)
    base = consts.base_latency[algo if algo in consts.base_latency else "Ring"][proto]
    # tuning.cc's "plateau effect of ring" (x1.4 on a multi-node Ring/Simple allreduce's latency, fitted by NVIDIA
    # like the tree factors above): the simulation charges it on the base latency and on every hop's step latency
    plateau = _ring_plateau(plan, consts, proto, collective, nbytes) if algo == "Ring" else 1.0
    base *= plateau
    if algo in ("NVLS", "NVLSTree"):
        base += consts.hw_latency[plan.intra_hw][algo]["Simple"] * consts.sim_step_latency_scale
    # one thread launching g GPUs' kernels one after another (nccl-tests -g g): the collective cannot finish before
    # the last kernel starts, (g - 1) launch gaps after the first; charged to every rank (keeps ranks symmetric)
    base += (opts.gpus_per_process - 1) * consts.group_launch_gap
    base = max(0.0, base + consts.sim_launch_overhead)
    per_channel = nbytes / nc
    cat = ResourceCatalog(topo)
    env, net = new_network(record, check)
    roles: dict[Hashable, dict[str, _Role]] = {}
    relations: list[tuple[Hashable, str, Hashable]] = []
    extra: dict[Hashable, Any] = {}  # algorithm-specific structure per entity
    fab = plan.fabric

    def hop(a: str, b: str, c: int) -> Hop:
        na, nb = topo.device(a).node, topo.device(b).node
        nics = {}
        if plan.nnodes > 1:
            for node in {na, nb}:
                node_nics = topo.nics(node)
                nics[node] = node_nics[c % len(node_nics)].name
        return _hop(topo, cat, a, b, nics.get(na), nics.get(nb), opts, consts, fab)

    if algo == "Ring" and collective in ("allreduce", "allgather", "reduce_scatter"):
        for c in range(nc):
            ring = plan.rings[c]
            for i, g in enumerate(ring):
                role = _hop_role(plan.hops[(c, i)], consts, plan, algo, proto, wire, cap)
                role.latency *= plateau
                roles[(c, g)] = {"send": role}
                relations.append(((c, g), "pred", (c, ring[i - 1])))
    elif algo == "Ring":  # broadcast / reduce: a chain along the ring, from the root or towards it
        for c in range(nc):
            ring = plan.rings[c]
            root = ring.index(plan.ranks[0])
            order = ring[root:] + ring[:root]  # root first
            if collective == "reduce":
                order = order[1:] + order[:1]  # root last
            for i, g in enumerate(order):
                nxt = order[i + 1] if i + 1 < len(order) else None
                roles[(c, g)] = (
                    {} if nxt is None else {"send": _hop_role(hop(g, nxt, c), consts, plan, algo, proto, wire, cap)}
                )
                extra[(c, g)] = ((c, order[i - 1]) if i > 0 else None, (c, nxt) if nxt else None)
                if i > 0:
                    relations.append(((c, g), "pred", (c, order[i - 1])))
    elif algo == "Tree":
        for c in range(nc):
            parent, children = _tree_links(plan, c, topo)
            for g in plan.rings[c]:
                tree_roles: dict[str, _Role] = {}
                par = parent[g]
                if par is not None:
                    tree_roles["up"] = _hop_role(hop(g, par, c), consts, plan, algo, proto, wire, cap)
                    relations.append(((c, g), "parent", (c, par)))
                for k, ch in enumerate(children[g]):
                    tree_roles[f"down{k}"] = _hop_role(hop(g, ch, c), consts, plan, algo, proto, wire, cap)
                roles[(c, g)] = tree_roles
                extra[(c, g)] = ((c, parent[g]) if parent[g] else None, [(c, ch) for ch in children[g]])
    elif algo == "NVLS":
        eff = consts.nvls_efficiency.get(plan.arch, 0.85)
        for c in range(nc):
            for g in plan.ranks:
                up = link_uses(topo.route(g, plan.nvswitch, kinds=("nvlink",)))  # type: ignore[arg-type]
                down = link_uses(topo.route(plan.nvswitch, g, kinds=("nvlink",)))  # type: ignore[arg-type]
                lat = up.latency + down.latency
                rs = [(k, v / eff) for k, v in up.uses] + [(k, v / (n * eff)) for k, v in down.uses]
                ag = [(k, v / (n * eff)) for k, v in up.uses] + [(k, v / eff) for k, v in down.uses]
                roles[(c, g)] = {
                    "rs": _Role(rs, lat, cap, "NVLink (NVLS)"),
                    "ag": _Role(ag, lat, cap, "NVLink (NVLS)"),
                }
    elif algo in ("CollNetDirect", "CollNetChain"):
        direct = algo == "CollNetDirect"
        for c in range(nc):
            heads: dict[Hashable, list[tuple[str, str]]] = {}
            for g in plan.ranks:
                dev = topo.device(g)
                node_gpus = [h for h in plan.ranks if topo.device(h).node == dev.node]
                chain = _node_chain(topo, dev.node, topo.nics(dev.node)[c % len(topo.nics(dev.node))].name)
                is_head = direct or g == chain[0]
                cn_roles: dict[str, _Role] = {}
                if direct:  # intra-node reduce-scatter / all-gather, every GPU to every other over P2P
                    p2p = hop(g, node_gpus[(node_gpus.index(g) + 1) % len(node_gpus)], c)
                    frac = (len(node_gpus) - 1) / len(node_gpus)
                    fwd = [(k, v * frac) for k, v in p2p.path.uses]
                    # (n-1)/n of the slice leaves each GPU and (n-1)/n arrives (from the others, by symmetry)
                    cn_roles["rs"] = _Role(fwd, p2p.path.latency, cap, _TRANSPORT_TAG[p2p.transport])
                    cn_roles["ag"] = _Role(fwd, p2p.path.latency, cap, _TRANSPORT_TAG[p2p.transport])
                    nic = topo.nics(dev.node)[dev.index % len(topo.nics(dev.node))].name
                else:
                    nic = topo.nics(dev.node)[c % len(topo.nics(dev.node))].name
                    k = chain.index(g)
                    if k + 1 < len(chain):
                        cn_roles["down0"] = _hop_role(hop(g, chain[k + 1], c), consts, plan, algo, proto, wire, cap)
                    if k > 0:
                        cn_roles["up"] = _hop_role(hop(g, chain[k - 1], c), consts, plan, algo, proto, wire, cap)
                        relations.append(((c, g), "parent", (c, chain[k - 1])))
                if is_head:
                    sw = next(
                        d
                        for d in topo.route(nic, topo.nics((dev.node + 1) % plan.nnodes)[0].name)
                        if topo.device(d.dst).kind == "switch"
                    ).dst
                    up_path = link_uses(topo.pcie_route(g, nic)) + link_uses(topo.route(nic, sw))
                    hw_lat = consts.hw_latency["NET"][algo]["Simple"] * consts.sim_step_latency_scale
                    cn_roles["up"] = _Role(
                        [(k, v * wire) for k, v in up_path.uses],
                        hw_lat + up_path.latency,
                        cap,
                        "network (in-network reduction)",
                    )
                    sharp: Hashable = ("sharp", c, sw, dev.index if direct else 0)
                    heads.setdefault(sharp, []).append((g, nic))
                    relations.append(((c, g), "parent", sharp))
                roles[(c, g)] = cn_roles
                cn_kids = (
                    [] if direct else ([(c, chain[chain.index(g) + 1])] if chain.index(g) + 1 < len(chain) else [])
                )
                extra[(c, g)] = (direct, cn_kids, [(c, h) for h in node_gpus])
            for sharp_key, members in heads.items():
                sw = sharp_key[2]  # type: ignore[index]
                sw_roles: dict[str, _Role] = {}
                for k, (g, nic) in enumerate(members):
                    down_path = link_uses(topo.route(sw, nic)) + link_uses(topo.pcie_route(nic, g))
                    sw_roles[f"down{k}"] = _Role(
                        [(kk, v * wire) for kk, v in down_path.uses],
                        down_path.latency,
                        cap,
                        "network (in-network reduction)",
                    )
                roles[sharp_key] = sw_roles
                extra[sharp_key] = ("switch", [(c, g) for g, _nic in members], [])
    elif algo == "NVLSTree":
        eff = consts.nvls_efficiency.get(plan.arch, 0.85)
        ppn = plan.ppn
        for c in range(nc):
            mirror = c % 2 == 1
            for g in plan.ranks:
                dev = topo.device(g)
                sw = topo.devices("nvswitch", dev.node)[0].name
                up = link_uses(topo.route(g, sw, kinds=("nvlink",)))
                down = link_uses(topo.route(sw, g, kinds=("nvlink",)))
                lat = up.latency + down.latency
                rs = [(k, v / eff) for k, v in up.uses] + [(k, v / (ppn * eff)) for k, v in down.uses]
                ag = [(k, v / (ppn * eff)) for k, v in up.uses] + [(k, v / eff) for k, v in down.uses]
                node_roles = {
                    "rs": _Role(rs, lat, cap, "NVLink (NVLS)"),
                    "ag": _Role(ag, lat, cap, "NVLink (NVLS)"),
                }
                same = [h for h in plan.ranks if topo.device(h).index == dev.index]  # this GPU on every node
                pnode, kids = _binary_tree(dev.node, plan.nnodes, mirror)
                rail = dev.index
                par = same[pnode] if pnode is not None else None
                if par is not None:
                    node_roles["up"] = _hop_role(hop(g, par, rail), consts, plan, algo, proto, wire, cap)
                    relations.append(((c, g), "parent", (c, par)))
                for k, kid in enumerate(kids):
                    node_roles[f"down{k}"] = _hop_role(hop(g, same[kid], rail), consts, plan, algo, proto, wire, cap)
                roles[(c, g)] = node_roles
                peers = [(c, h) for h in plan.ranks if topo.device(h).node == dev.node]
                extra[(c, g)] = ((c, par) if par else None, [(c, same[kid]) for kid in kids], peers)
    elif algo == "PAT":
        shifts = [1 << k for k in range(math.ceil(math.log2(n)))]
        if collective == "reduce_scatter":
            shifts.reverse()
        for c in range(nc):
            for r, g in enumerate(plan.ranks):
                targets = [plan.ranks[(r + d) % n] for d in shifts]
                roles[(c, g)] = {
                    f"x{k}": _hop_role(hop(g, t, c), consts, plan, algo, proto, wire, cap)
                    for k, t in enumerate(targets)
                }
                extra[(c, g)] = [(c, plan.ranks[(r - d) % n]) for d in shifts]
                relations.extend(((c, g), f"x{k}", (c, t)) for k, t in enumerate(targets))
    elif collective == "sendrecv":
        src, dst = plan.ranks[0], plan.ranks[min(1, n - 1)]
        for c in range(nc):
            roles[(c, src)] = {"send": _hop_role(hop(src, dst, c), consts, plan, "Ring", proto, wire, cap)}
            roles[(c, dst)] = {}
            extra[(c, src)] = (None, (c, dst))
            extra[(c, dst)] = ((c, src), None)
            relations.append(((c, dst), "pred", (c, src)))
    else:  # alltoall: every rank sends nbytes/n to every peer at once, over its own connection
        for g in plan.ranks:
            roles[g] = {
                f"to{j}": _hop_role(hop(g, h, j % plan.channels), consts, plan, "Ring", proto, wire, cap * nc / n)
                for j, h in enumerate(plan.ranks)
                if h != g
            }
    usage = {e: {name: role.uses for name, role in r.items()} for e, r in roles.items()}
    colors = {
        e: (
            tuple(sorted((k, round(ro.latency * 1e12), ro.cap, ro.tag, ro.net) for k, ro in r.items())),
            str(extra.get(e) is None),
        )
        for e, r in roles.items()
    }
    quotient = build_quotient(net, usage, cat.specs, colors=colors, relations=relations, symmetric=symmetry)
    board = EventBoard(env)
    rep = quotient.rep

    def sender(e: Hashable, role: str) -> Any:
        ro = roles[e][role]
        uses = quotient.uses(e, role)
        owner = str(e)
        return lambda b: net.transfer(b, uses, latency=ro.latency, max_rate=ro.cap, tag=ro.tag, owner=owner)

    def whole(e: Hashable, *names: str) -> bool:
        # LL/LL128 steps cut in pieces are forwarded piece by piece over NVLink/PCIe, a whole step at a time over
        # the network (Simple's slices are already one network send each)
        return proto != "Simple" and any(roles[e][nm].net for nm in names if nm in roles[e])

    def after_base(e: Hashable, body: Any) -> Any:
        yield net.delay(base, tag="launch + base latency", owner=str(e))
        yield from body

    done: list[Any] = []
    reps = quotient.reps()
    for e in reps:
        if n == 1:
            done.append(env.process(_single(net, base, str(e))))
            continue
        if algo == "Ring" and collective in ("allreduce", "allgather", "reduce_scatter"):
            c, g = e  # type: ignore[misc]
            ring = plan.rings[c]
            i = ring.index(g)
            body = nccl_ring_allreduce(
                board,
                e,
                rep((c, ring[i - 1])),
                rep((c, ring[(i + 1) % n])),
                nranks=n,
                data_bytes=per_channel,
                chunking=chunking,
                send=sender(e, "send"),
                nsteps=2 * (n - 1) if collective == "allreduce" else n - 1,
                whole_steps=whole(e, "send"),
            )
            env.process(after_base(e, body))
            done.append(board.get(e, "done"))
        elif algo == "Ring" or collective == "sendrecv":
            pred, succ = extra[e]
            body = nccl_chain(
                board,
                e,
                rep(pred) if pred else None,
                rep(succ) if succ else None,
                data_bytes=per_channel,
                chunking=chunking,
                send=sender(e, "send") if "send" in roles[e] else None,
                whole_steps=whole(e, "send"),
            )
            env.process(after_base(e, body))
            done.append(board.get(e, "done"))
        elif algo == "Tree":
            par, kids = extra[e]
            up_proc = nccl_tree_up(
                board,
                e,
                rep(par) if par else None,
                [rep(k) for k in kids],
                data_bytes=per_channel,
                chunking=chunking,
                send_up=sender(e, "up") if "up" in roles[e] else None,
                whole_steps=whole(e, "up"),
            )
            down_proc = nccl_tree_down(
                board,
                e,
                [rep(k) for k in kids],
                data_bytes=per_channel,
                chunking=chunking,
                send_down=[sender(e, f"down{k}") for k in range(len(kids))],
                whole_steps=whole(e, *(f"down{k}" for k in range(len(kids)))),
            )
            env.process(after_base(e, up_proc))
            env.process(after_base(e, down_proc))
            done.append(board.get(e, "done"))
        elif algo == "NVLS":
            env.process(
                after_base(
                    e,
                    nccl_nvls_reduce_scatter(board, e, data_bytes=per_channel, chunking=chunking, send=sender(e, "rs")),
                )
            )
            env.process(
                after_base(
                    e,
                    nccl_nvls_allgather(
                        board, e, reps, data_bytes=per_channel, chunking=chunking, send=sender(e, "ag")
                    ),
                )
            )
            done.append(board.get(e, "done"))
        elif algo in ("CollNetDirect", "CollNetChain"):
            kind, kids, peers = extra[e]
            direct = algo == "CollNetDirect"
            share = 1.0 / plan.ppn if direct else 1.0
            if kind == "switch":  # the in-network reducer: waits for every head, sends the sum back
                scaled = RingChunking(chunking.chunk_bytes * share, 1, chunking.slots)
                kid_reps = [rep(k) for k in kids]
                env.process(
                    after_base(
                        e,
                        nccl_tree_up(
                            board, e, None, kid_reps, data_bytes=per_channel * share, chunking=scaled, send_up=None
                        ),
                    )
                )
                env.process(
                    after_base(
                        e,
                        nccl_tree_down(
                            board,
                            e,
                            kid_reps,
                            data_bytes=per_channel * share,
                            chunking=scaled,
                            send_down=[sender(e, f"down{k}") for k in range(len(kids))],
                        ),
                    )
                )
                continue
            par_key = next(b for a, lbl, b in relations if a == e and lbl == "parent")
            if direct:
                for body in nccl_nvls_tree(
                    board,
                    e,
                    [rep(p) for p in peers],
                    rep(par_key),
                    [],
                    data_bytes=per_channel,
                    chunking=chunking,
                    share=share,
                    send_rs=sender(e, "rs"),
                    send_up=sender(e, "up"),
                    send_down=[],
                    send_ag=sender(e, "ag"),
                ):
                    env.process(after_base(e, body))
            else:
                kid_reps = [rep(k) for k in kids]
                env.process(
                    after_base(
                        e,
                        nccl_tree_up(
                            board,
                            e,
                            rep(par_key),
                            kid_reps,
                            data_bytes=per_channel,
                            chunking=chunking,
                            send_up=sender(e, "up"),
                        ),
                    )
                )
                env.process(
                    after_base(
                        e,
                        nccl_tree_down(
                            board,
                            e,
                            kid_reps,
                            data_bytes=per_channel,
                            chunking=chunking,
                            send_down=[sender(e, "down0")] if kids else [],
                        ),
                    )
                )
            done.append(board.get(e, "done"))
        elif algo == "NVLSTree":
            par, kids, peers = extra[e]
            for body in nccl_nvls_tree(
                board,
                e,
                [rep(p) for p in peers],
                rep(par) if par else None,
                [rep(k) for k in kids],
                data_bytes=per_channel,
                chunking=chunking,
                share=1.0 / plan.ppn,
                send_rs=sender(e, "rs"),
                send_up=sender(e, "up") if "up" in roles[e] else None,
                send_down=[sender(e, f"down{k}") for k in range(len(kids))],
                send_ag=sender(e, "ag"),
            ):
                env.process(after_base(e, body))
            done.append(board.get(e, "done"))
        elif algo == "PAT":
            # Bruck: exchange k moves min(2^k, n - 2^k) blocks of per_channel/n (reversed for reduce-scatter)
            blocks = [min(1 << k, n - (1 << k)) for k in range(math.ceil(math.log2(n)))]
            if collective == "reduce_scatter":
                blocks.reverse()
            body = nccl_pat(
                board,
                e,
                [rep(p) for p in extra[e]],
                sizes=[per_channel / n * b for b in blocks],
                sends=[sender(e, f"x{k}") for k in range(len(blocks))],
            )
            env.process(after_base(e, body))
            done.append(board.get(e, "done"))
        else:  # alltoall

            def a2a(e: Hashable = e) -> Any:
                arrivals = [sender(e, role)(nbytes / n)[1] for role in roles[e]]
                yield AllOf(env, arrivals)

            done.append(env.process(after_base(e, a2a())))
    t = run_until_done(env, done)
    owner_ent = reps[0]
    breakdown: dict[str, float] = {}
    if record:
        breakdown = attribute_time(
            net.records,
            str(owner_ent),
            0.0,
            t,
            _PRIORITY,
            latency_label="per-step latency",
            idle_label="waiting (peers, slots)",
        )
        breakdown = {k: v for k, v in breakdown.items() if v > 0}
    return Outcome(
        backend="nccl",
        collective=collective,
        algorithm=algo,
        protocol=proto,
        nranks=n,
        size_bytes=nbytes,
        time_s=t,
        channels=nc,
        breakdown=breakdown,
        notes=list(plan.notes),
        predicted_s=predicted,
        classes=quotient.n_classes,
        entities=len(usage),
        records=net.records if record else [],
        solves=net.solves,
    )


def _single(net: Any, base: float, owner: str) -> Any:
    yield net.delay(base, tag="launch + base latency", owner=owner)
