"""What NCCL builds on a topology before any collective: channels, their rings, and the transport of every hop.

:func:`plan_nccl` follows NCCL's init: the channel count (from the GPUs' NVLink or PCIe bandwidth, the NICs, and
NCCL_MIN/MAX_NCHANNELS), the rings (GPU order per node, one NIC rail per channel across nodes), and per ring edge the
transport NCCL's transport selection picks (P2P over NVLink or PCIe, SHM through host memory, NET with or without
GPUDirect RDMA or PXN, sockets) with the path its bytes take.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from collsim.backends.common import BackendError, Path, ResourceCatalog, fabric_uses, flow_cap, link_uses
from collsim.backends.nccl.constants import NcclConstants, ring_simple_threads
from collsim.backends.nccl.p2p_sched import P2pChannels, local_peer_channels, p2p_channels, reverse_bits
from collsim.backends.nccl.plugin_tuner import ActiveTuner, ExampleTuner, example_tuner, resolve_tuner
from collsim.nccl_env import NcclOptions
from collsim.topology import Topology
from collsim.topology.model import gpu_nearness, path_class_rank
from collsim.topology.presets import topologies_dir

__all__ = [
    "NCCL_PATHS", "Hop", "NcclPlan", "cpu_vendor", "gdr_capable", "gdr_flush", "gdr_read", "hop_between",
    "ll128_refusal", "node_chain", "nvls_refusal", "nvls_unreduced", "plan_nccl", "type_inter",
]  # fmt: skip


@dataclass(frozen=True)
class Hop:
    """One directed edge of a channel: the transport NCCL would pick and the path it takes.

    ``transport`` is one of :data:`collsim.vocab.NCCL_TRANSPORTS`; ``hw`` the latency class of NCCL's tuner tables
    (NVLINK, PCI or NET); ``max_rate`` a cap on one connection in bytes/s (socket threads), ``inf`` when none;
    ``per_message`` the NIC ports a network message occupies beyond its bytes, each with that time in seconds (the
    NIC preset's ``message_overhead``: the sender's port into the fabric, the receiver's port out of it).
    """

    src: str
    dst: str
    transport: str
    hw: str
    path: Path
    max_rate: float
    per_message: tuple[tuple[Any, float], ...] = ()


@dataclass
class NcclPlan:
    """Channels, their rings and hops, and what NCCL's tuner needs to know about the system.

    Bandwidths in bytes/s per direction, latencies in seconds.
    """

    ranks: list[str]
    nnodes: int
    channels: int
    rings: list[list[str]]
    hops: dict[tuple[int, int], Hop]
    arch: str
    channel_bw: float
    intra_hw: str
    bus_bw: float  # what the rings can carry per rank, for the tuner (its graphs' channels, before NCCL_MAX_NCHANNELS)
    net_overhead: float
    nvl_bw: float = 0.0  # one GPU's NVLink bandwidth per direction
    nvswitch: str | None = None  # the node's NVSwitch fabric device, when there is one
    ppn: int = 1  # GPUs per node
    intra_bw: float = 0.0  # what the channels carry per rank inside a node (the same graphs' channels)
    nic_count: int = 0  # NICs per node in use
    nic_bw: float = 0.0  # one NIC's bandwidth per direction on the network path
    fabric: Mapping[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    multicast: bool = False  # the NVSwitch can reduce and multicast (NVLink SHARP), as its preset says
    nvls_refusal: str | None = None  # why the hardware cannot run NVLS (None: it can); see nvls_refusal()
    cpu_vendor: str = "intel"  # the ranks' host CPUs' vendor as NCCL sees it ("mixed" where they differ); cpu_vendor()
    tuner: ActiveTuner | ExampleTuner | None = None  # a tuner plugin that picks before NCCL's cost model (plugin_tuner)
    tuner_note: str | None = None  # which tuner picks, when a plugin is involved (also in notes)
    net_latency: float = 0.0  # seconds the network plugin reports to NCCL's cost model (latencyInter), 0 for IB
    gdr_flush: bool = True  # NCCL flushes a GPUDirect RDMA receive before the GPU reads it (Simple); gdr_flush()
    #: the algorithms the run's NCCL release does not have yet (backends.nccl.version), each with why
    unreleased: Mapping[str, str] = field(default_factory=dict)
    #: algorithms NCCL skips on this system beyond what the hardware checks say, each with why (CollNet with more
    #: GPUs per node than it supports)
    unsupported: Mapping[str, str] = field(default_factory=dict)
    #: why NCCL leaves LL128 off by default here (None: on); ll128_refusal()
    ll128_refusal: str | None = None
    #: the collectives NVLS runs here: allreduce, and all-gather and reduce-scatter on one node of at most 32 GPUs
    #: from NCCL 2.19 (``nvls_allgather_reduce_scatter`` in nccl.yaml); the hardware's own checks are nvls_refusal
    nvls_collectives: frozenset[str] = frozenset({"allreduce"})
    #: the reductions NVLink SHARP runs: op -> element types (``nvls_reductions`` in nccl.yaml), and the release
    #: (major, minor) from which NVLS all-gathers any type; None: every reduction (hand-built plans).
    #: :func:`nvls_unreduced` reads them with the run's op and type
    nvls_reductions: tuple[Mapping[str, frozenset[str]], tuple[int, int]] | None = None
    #: NCCL's NVLS tuning on Blackwell across nodes (2.30.3 on): (channels, chunk bytes, tree cap bytes), None each
    #: where it keeps NCCL's default; nvls_sm100_tuning()
    nvls_tuned: tuple[int | None, int | None, int | None] = (None, None, None)
    #: the GPUs' compute capability x 10 (rank 0's; NCCL's cudaCompCap)
    sm: int = 0
    #: NCCL's point-to-point channels and chunk here (p2p_sched.p2p_channels); None only in hand-built plans
    p2p: P2pChannels | None = None
    #: NCCL's NVLS heads per node (nvls_head_count()); 0 in hand-built plans, read as every GPU of the node
    nvls_head_count: int = 0
    #: what NCCL's tree graph carries on two nodes, its channels x bwIntra (bytes/s, net_search()); 0.0 on one node,
    #: on more than two and in hand-built plans
    tree_bw: float = 0.0
    #: NIC presets of multi-port cards NCCL merges from a later release than the run's, a line each (_unmerged_ports)
    unmerged_ports: tuple[str, ...] = ()
    #: a line when node 0's NICs differ in speed (_mixed_nic_speeds): channels spread evenly, not as NCCL's search
    mixed_nic_speeds: tuple[str, ...] = ()
    #: the ring and tree graphs' channels as NCCL's search leaves them, before connect.cc copies them: tuning.cc
    #: prices with graphs[a]->nChannels (net_search()); 0 in hand-built plans, read as channels // 2
    graph_channels: int = 0
    #: channels that are not copies: NCCL_MAX_NCHANNELS keeps the first ones and NCCL_MIN_NCHANNELS then copies them
    #: (connect.cc, "combining max, then min, to only use the first channels, then duplicate them"), channel c
    #: running channel c mod this one's ring and NIC; 0: every channel its own
    distinct_channels: int = 0

    @property
    def tuner_channels(self) -> int:
        """The channels NCCL's cost model multiplies its per-channel caps by (:attr:`graph_channels`)."""
        return self.graph_channels or max(1, self.channels // 2)

    @property
    def nvls_nheads(self) -> int:
        """NCCL's NVLS heads per node (:func:`nvls_head_count`; a plan built by hand: every GPU of the node)."""
        return self.nvls_head_count or self.ppn

    def nic_for(self, topo: Topology, node: int, channel: int) -> str | None:
        """The NIC channel ``channel`` uses on ``node`` (:func:`channel_nic`; a copy: its original's)."""
        return channel_nic(topo, node, channel % (self.distinct_channels or self.channels or 1), self.nnodes)


def channel_nic(topo: Topology, node: int, channel: int, nnodes: int) -> str | None:
    """The NIC channel ``channel`` uses on ``node``: its rail, channel mod the node's NICs; None on one node. A NIC
    taken down (scenario ``perturb.down``) leaves its channels to the NIC that replaces it
    (:meth:`~collsim.topology.Topology.nic_slots`)."""
    if nnodes <= 1:
        return None
    nics = topo.nic_slots(node)
    return nics[channel % len(nics)]


def local_net_index(topo: Topology, gpu: str, channel: int, nics: Sequence[str]) -> int | None:
    """Which of ``nics`` (a node's, by slot) NCCL's ncclTopoGetLocalNetType gives ``gpu`` on ``channel`` (topo.cc
    lines 2039-2075, v2.30.7-1): the NICs on the GPU's best path class, shared by the GPUs on the first one's best
    class, each GPU taking ceil(NICs / GPUs) of them from its device index modulo those GPUs (bit-mirrored when the
    NICs are a power of two), the channel picking among its own; None without a NIC. 2.21 took the device index
    itself rather than modulo the GPUs: the NICs a GPU gets differ, their spread does not.

    >>> from collsim.topology import load_topology
    >>> hgx = load_topology("hgx-h100")  # a NIC per GPU: its own
    >>> [local_net_index(hgx, f"n0/gpu{g}", 0, hgx.nic_slots(0)) for g in range(8)]
    [0, 1, 2, 3, 4, 5, 6, 7]
    >>> oci = load_topology("oci-bm-gpu-h100-8", node_params={"nic": "connectx-6-roce", "nics_per_gpu": 2})
    >>> # OCI's 16 ports a device each (NCCL 2.19): 4 NICs and 2 GPUs per switch, 2 NICs each
    >>> [[local_net_index(oci, f"n0/gpu{g}", c, oci.nic_slots(0)) for c in (0, 1)] for g in range(4)]
    [[0, 1], [2, 3], [4, 5], [6, 7]]
    """
    index: dict[str, int] = {}
    for i, n in enumerate(nics):  # a NIC standing in for one taken down counts at its own (first) slot
        index.setdefault(n, i)
    nets = _closest(topo, gpu, list(index))
    if not nets:
        return None
    node = topo.device(gpu).node
    sharing = len(_closest(topo, nets[0], [d.name for d in topo.gpus() if d.node == node])) or 1
    per_gpu = -(-len(nets) // sharing)
    net = topo.device(gpu).index % sharing
    count = len(nets)
    if count & (count - 1) == 0:  # isPow2: mirrorBits over log2(count) bits
        net = reverse_bits(net & (count - 1), count.bit_length() - 1)
    return index[nets[(net + channel % per_gpu) % count]]


def p2p_net_slot(topo: Topology, gpu: str, channel: int) -> int:
    """The NIC slot (:meth:`~collsim.topology.Topology.nic_slots`) NCCL's point-to-point gives ``gpu`` on
    ``channel`` across nodes (:func:`local_net_index`)."""
    slot = local_net_index(topo, gpu, channel, topo.nic_slots(topo.device(gpu).node))
    if slot is None:
        raise BackendError(f"{gpu} has no NIC on its node for a send to another node")
    return slot


def p2p_send_slots(
    topo: Topology,
    a: str,
    b: str,
    channel: int,
    opts: NcclOptions,
    consts: NcclConstants,
    fabric: Mapping[str, Any] | None = None,
) -> tuple[int, int]:
    """The NIC slots a point-to-point send from ``a`` to ``b`` on another node leaves and arrives through (search.cc
    ``ncclTopoGetNetDev`` without a graph, v2.30.7-1 lines 1400-1475): the receiver its own (:func:`p2p_net_slot`;
    its receive connection asks for itself), the sender the slot its GPU of the receiver's index would use (the
    receiver's rail) where NCCL_CROSS_NIC=0 asks for it or PXN reaches it (NCCL_P2P_PXN_LEVEL's default 2: the NIC's
    local GPU is the sender or a GPU it reaches over NVLink, within PXB of the NIC and able to do GPUDirect,
    :func:`_pxn_proxy`), else its own (NCCL_CROSS_NIC's default 2 lets the two rails differ). PXN needs GPUDirect
    RDMA on the NIC (ncclTopoGetNetDev checks ncclTopoCheckGdr's mode, v2.30.7-1 lines 1455-1461): on a ``fabric``
    where the hop cannot be GPUDirect (:func:`gdr_fabric`: sockets, host-staged) the sender keeps its own NIC, and
    so it does where NCCL_CROSS_NIC=0 names a NIC of another host of the node (a GB200 rack's other tray: NCCL picks
    the rail's NIC among its own host's GPUs).

    >>> from types import SimpleNamespace
    >>> from collsim.topology import load_topology
    >>> two = load_topology("dgx1-v100", nodes=2, fabric={"topology": "rail_optimized"})
    >>> from collsim.backends.nccl.constants import C2cReleases
    >>> consts = SimpleNamespace(default_gdr_level="PXB", c2c=C2cReleases())
    >>> p2p_send_slots(two, "n0/gpu0", "n1/gpu1", 0, NcclOptions(), consts)  # type: ignore[arg-type]
    (0, 0)
    >>> p2p_send_slots(two, "n0/gpu3", "n1/gpu6", 0, NcclOptions(), consts)  # type: ignore[arg-type]
    (1, 3)
    >>> p2p_send_slots(two, "n0/gpu3", "n1/gpu6", 0, NcclOptions(cross_nic=0), consts)  # type: ignore[arg-type]
    (3, 3)
    >>> p2p_send_slots(two, "n0/gpu0", "n1/gpu2", 0, NcclOptions(), consts)  # type: ignore[arg-type]
    (1, 1)
    >>> tcp = {"topology": "rail_optimized", "transport": "tcp"}  # sockets: no GPUDirect, so no PXN
    >>> p2p_send_slots(two, "n0/gpu0", "n1/gpu2", 0, NcclOptions(), consts, tcp)  # type: ignore[arg-type]
    (0, 1)
    """
    recv = p2p_net_slot(topo, b, channel)
    slots = topo.nic_slots(topo.device(a).node)
    nic = slots[recv]
    if nic in _closest(topo, a, slots) or (opts.cross_nic == 0 and topo.path_class(a, nic) != "NET"):
        return recv, recv
    gdr = gdr_fabric(topo, nic, opts, topo.fabric if fabric is None else fabric)
    if gdr and not opts.pxn_disable and _pxn_proxy(topo, a, nic, opts, consts) is not None:
        return recv, recv
    return p2p_net_slot(topo, a, channel), recv


def nvls_head_nics(topo: Topology, node: int) -> dict[str, str]:
    """The NIC each GPU of ``node`` sends NVLSTree's inter-node hops through: its own, as NCCL's NVLS search pairs
    NICs with heads (search.cc, ``ncclTopoSearchRecNet``: a NIC's head is its local GPU, one NIC per head GPU).

    GPUs in index order each take the nearest NIC (best path class) that fewest GPUs took before, then the lowest
    index, over the NIC slots (:meth:`~collsim.topology.Topology.nic_slots`: a NIC taken down is replaced by the NIC
    that carries its channels): on a node with a NIC per GPU every GPU gets its own, with several NICs per GPU
    (OCI's 16) one of them, and NICs shared by GPUs (GCP A3 High's 4) by the GPUs nearest them.

    >>> from collsim.topology import load_topology
    >>> heads = nvls_head_nics(load_topology("aws-p5"), 0)
    >>> heads["n0/gpu0"], heads["n0/gpu7"]
    ('n0/nic0', 'n0/nic7')
    """
    slots = topo.nic_slots(node)
    taken = dict.fromkeys(slots, 0)
    out: dict[str, str] = {}
    for gpu in topo.devices("gpu", node):
        nic = min(
            enumerate(slots), key=lambda kn: (path_class_rank(topo.path_class(gpu.name, kn[1])), taken[kn[1]], kn[0])
        )[1]
        taken[nic] += 1
        out[gpu.name] = nic
    return out


def nvls_heads(topo: Topology, node: int, limit: int | None = None) -> dict[str, str]:
    """NVLSTree's heads on ``node`` and the NIC each sends through: GPU -> NIC.

    NCCL's NVLS search takes one head per NIC, the NIC's local GPU, a GPU with two NICs once (search.cc
    ``ncclTopoSearchRecNet``: "NVLS search only tries to find NIC:GPU combinations to compute the heads", at most
    ``netCount`` heads, duplicates skipped; the local GPU: :func:`nic_local_gpu`). With at least a NIC per GPU
    every GPU is a head, each with its own NIC (:func:`nvls_head_nics`); with fewer NICs (a fabric using fewer,
    ``NCCL_IB_HCA``, a node with a NIC per two GPUs, a NIC taken down: NCCL lists no inactive port, and its slot's
    channels move to another NIC, :meth:`~collsim.topology.Topology.nic_slots`) only the NICs' local GPUs are, in
    NIC order. At most ``limit`` (NCCL_MAX_NVLS_ARITY, the NVLS graph's most channels: ``nvls_max_arity`` in
    nccl.yaml), the first found.

    >>> from collsim.topology import load_topology
    >>> two = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized", "nics": ["nic0", "nic5"]})
    >>> nvls_heads(two, 0)
    {'n0/gpu0': 'n0/nic0', 'n0/gpu4': 'n0/nic5'}
    >>> eight = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized"})
    >>> len(nvls_heads(eight, 1)), list(nvls_heads(eight, 1, limit=2))
    (8, ['n1/gpu0', 'n1/gpu1'])
    """
    slots = topo.nic_slots(node)
    if len(set(slots)) >= len(topo.devices("gpu", node)):
        heads = nvls_head_nics(topo, node)
    else:
        heads = {}
        for nic in dict.fromkeys(slots):
            gpu = nic_local_gpu(topo, nic)
            if gpu is not None and gpu not in heads:
                heads[gpu] = nic
        heads = heads or nvls_head_nics(topo, node)
    return heads if limit is None else dict(list(heads.items())[:limit])


def nvls_heads_by_node(topo: Topology, nodes: Iterable[int], limit: int | None = None) -> dict[int, dict[str, str]]:
    """:func:`nvls_heads` of every node in ``nodes``, each cut to the fewest any node has: NCCL keeps
    ``minHeadNum`` heads, the least over the nodes' searches, and joins head ``c`` of every node in NVLSTree's
    trees, whichever GPU it is on each (``src/graph/connect.cc`` v2.30.7-1 lines 430-440, ``connectNvls`` lines
    248-300). A node that lost a NIC has a head fewer where it then has fewer NICs than GPUs, so every node does
    (2 x HGX H100, n1/nic2 down: 7 heads on both, 470.9 GB/s busbw at 1 GiB, the 8 heads with two sharing the NIC
    that stood in gave 348.0).

    >>> from collsim.topology import load_topology
    >>> from collsim.topology.perturb import DownRule, take_down
    >>> four = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized", "nics_per_node": 4})
    >>> down = take_down(four, [DownRule("n1/nic2")])
    >>> {n: list(h) for n, h in nvls_heads_by_node(down, [0, 1]).items()}
    {0: ['n0/gpu0', 'n0/gpu2', 'n0/gpu4'], 1: ['n1/gpu0', 'n1/gpu4', 'n1/gpu6']}
    """
    heads = {node: nvls_heads(topo, node, limit) for node in nodes}
    count = min((len(h) for h in heads.values()), default=0)
    return {node: dict(list(h.items())[:count]) for node, h in heads.items()}


def nvls_head_count(topo: Topology, nnodes: int, ppn: int, consts: NcclConstants) -> int:
    """NCCL's NVLS heads per node (``nvls.nHeads``): on one node its first min(GPUs, NCCL_MAX_NVLS_ARITY) GPUs (the
    one-node NVLS search gives channel c GPU c and searches every channel: search.cc lines 858-860 and 1126-1138,
    v2.30.7-1), across nodes :func:`nvls_heads` of node 0. Each kernel loop covers nHeads chunks, NCCL sizes the
    chunk by channels x nHeads (enqueue.cc), and only heads load the switch's sums and multicast them
    (all_reduce.h: ``nvls->headRank != -1``): on GB200 NVL72's one node of 72 GPUs, 32 heads.

    >>> from types import SimpleNamespace
    >>> consts = SimpleNamespace(nvls_max_arity=32)
    >>> [nvls_head_count(None, 1, n, consts) for n in (8, 72)]  # type: ignore[arg-type]
    [8, 32]
    """
    if nnodes == 1:
        return min(ppn, consts.nvls_max_arity)
    return len(nvls_heads_by_node(topo, range(nnodes), consts.nvls_max_arity)[0])


def node_chain(topo: Topology, node: int, nic: str | None, channel: int = 0) -> list[str]:
    """GPUs of ``node`` in ring order: enter at the GPU nearest the channel's NIC, leave at another near it.

    Among equally near GPUs the one whose index matches the NIC's enters, so that channels on NICs sharing a PCIe
    switch enter and leave through different GPUs and spread over their PCIe links; where a switch holds more NICs
    than GPUs (OCI's 4 and 2) its GPUs take turns by the NIC's slot, as NCCL's search, which charges each channel's
    bandwidth to the GPU-NIC paths, spreads them. The GPUs between follow in
    index order from the entry. On a node whose GPUs are joined by direct NVLinks without an NVSwitch
    (:func:`nvlink_mesh`, e.g. the DGX-1's hybrid cube-mesh) the order follows NVLinks instead, as NCCL's ring
    search does: channel ``channel``'s ring of :func:`mesh_chains` (channels before it on the same node having taken
    their share of the links).
    """
    mesh = nvlink_mesh(topo, node)
    if mesh is not None:
        seq: list[str | None] = [None] * (channel + 1)
        if nic is not None:
            nics = topo.nic_slots(node)
            seq = [*(nics[k % len(nics)] for k in range(channel)), nic]
        return mesh_chains(topo, node, mesh, seq)[-1]
    gpus = [d.name for d in topo.devices("gpu", node)]
    if nic is None or len(gpus) == 1:
        return gpus
    nic_index = topo.device(nic).index
    ngpu = len(gpus)
    ranked = sorted(gpus, key=gpu_nearness(topo, nic, ngpu))
    entry, exit_ = _turn_ends(topo, node, nic, gpus) or (ranked[0], ranked[1])
    i = gpus.index(entry)
    rest = [g for g in gpus[i + 1 :] + gpus[:i] if g != exit_]
    if all(topo.path_class(entry, g) == "NVL" for g in rest):
        # on an NVSwitch any order costs the same; mirror the order on odd rails (indices XOR 1) so that the
        # channels of a NIC pair are images of each other and the symmetry reduction can merge them
        flip = nic_index & 1
        e = topo.device(entry).index ^ flip
        rest.sort(key=lambda g: ((topo.device(g).index ^ flip) - e) % ngpu)
    return [entry, *rest, exit_]


def _turn_ends(topo: Topology, node: int, nic: str, gpus: list[str]) -> tuple[str, str] | None:
    """The GPUs a channel on ``nic`` enters and leaves ``node`` by where one PCIe switch holds more NICs than GPUs
    (OCI's 4 NICs and 2 GPUs; a 4-GPU board with 2 NICs a GPU): NCCL's ring search charges each channel's bandwidth
    to the NIC -> GPU and GPU -> NIC PCIe paths (search.cc ncclTopoFollowPath), so the GPUs take turns entering and
    leaving the NICs' channels by the NIC's slot, rather than one GPU's link carrying most of them. None elsewhere."""
    near = _closest(topo, nic, gpus)
    if len(near) < 2 or len(_sharing_nics(topo, node, near)) <= len(near):
        return None
    dev = topo.device(nic)
    turn = int(dev.spec.get("template_index", dev.index))
    return near[turn % len(near)], near[(turn + 1) % len(near)]


def _sharing_nics(topo: Topology, node: int, near: Sequence[str]) -> list[str]:
    """The NICs of ``node`` whose closest GPUs are ``near``."""
    gpus = [d.name for d in topo.devices("gpu", node)]
    return [n.name for n in topo.devices("nic", node) if _closest(topo, n.name, gpus) == list(near)]


#: Partial rings the NVLink ring search may extend per attempt before it gives up (NCCL's search is bounded by a
#: budget too, search.cc NCCL_SEARCH_TIMEOUT); far more than an 8-GPU mesh needs.
_RING_SEARCH_BUDGET = 50_000


def nvlink_mesh(topo: Topology, node: int) -> dict[tuple[str, str], int] | None:
    """The direct GPU-to-GPU NVLinks of ``node`` when its GPUs are joined by NVLinks without an NVSwitch.

    Parameters
    ----------
    topo : Topology
        The topology.
    node : int
        The node.

    Returns
    -------
    dict or None
        ``(a, b)`` to the number of NVLinks from GPU ``a`` to GPU ``b`` (both directions listed), for nodes with
        at least 3 GPUs, at least one direct NVLink and no NVSwitch (a hybrid cube-mesh, fully connected 4-GPU
        boards, bridged pairs); None otherwise (NVSwitch and PCIe nodes keep the index order of
        :func:`node_chain`).
    """
    if topo.devices("nvswitch", node):
        return None
    gpus = [d.name for d in topo.devices("gpu", node)]
    if len(gpus) < 3:
        return None
    mesh: dict[tuple[str, str], int] = {}
    for a in gpus:
        for b in gpus:
            if a != b and topo.graph.has_edge(a, b):
                lk = topo.graph.edges[a, b]["link"]
                if lk.kind == "nvlink":
                    mesh[(a, b)] = lk.count
    return mesh or None


def _nvlink_walk(
    gpus: list[str],
    start: str,
    end: str | None,
    cap: Mapping[tuple[str, str], int],
    slack: int,
    avoid: set[tuple[str, ...]],
) -> list[str] | None:
    """Depth-first search for a ring (``end`` None: a Hamiltonian cycle from ``start``) or a chain from ``start``
    to ``end`` visiting every GPU, each hop over an NVLink with capacity left in ``cap`` (at most ``slack`` hops
    over other paths). Next GPUs are tried as NCCL's search.cc sorts them: most NVLinks left first, then by index
    after the current GPU. Returns the first walk not in ``avoid``, else the first found, else None."""
    n = len(gpus)
    pos = {g: i for i, g in enumerate(gpus)}
    first: list[str] | None = None
    budget = _RING_SEARCH_BUDGET
    walk = [start]
    seen = {start}

    def hop_ok(a: str, b: str, left: int) -> tuple[bool, int]:
        if cap.get((a, b), 0) >= 1:
            return True, left
        return left > 0, left - 1

    def rec(left: int) -> list[str] | None:
        nonlocal budget, first
        budget -= 1
        if budget < 0:
            return None
        cur = walk[-1]
        if len(walk) == n:
            if end is None:
                ok, _ = hop_ok(cur, start, left)
                if not ok:
                    return None
            elif cur != end:
                return None
            found = list(walk)
            if first is None:
                first = found
            return found if tuple(found) not in avoid else None
        cands = [g for g in gpus if g not in seen and (g != end or len(walk) == n - 1)]
        cands.sort(key=lambda g: (-cap.get((cur, g), 0), (pos[g] - pos[cur]) % n))
        for g in cands:
            ok, rest = hop_ok(cur, g, left)
            if not ok:
                continue
            walk.append(g)
            seen.add(g)
            got = rec(rest)
            walk.pop()
            seen.discard(g)
            if got is not None:
                return got
        return None

    got = rec(slack)
    return got if got is not None else first


def _first_walk(
    gpus: list[str],
    ends: list[tuple[str, str | None]],
    cap: Mapping[tuple[str, str], int],
    slack: int,
    used: set[tuple[str, ...]],
) -> list[str] | None:
    """The first walk :func:`_nvlink_walk` finds for any of the (start, end) pairs ``ends``, in order; or None."""
    for start, end in ends:
        walk = _nvlink_walk(gpus, start, end, cap, slack, used)
        if walk is not None:
            return walk
    return None


def mesh_chains(
    topo: Topology, node: int, mesh: Mapping[tuple[str, str], int], nics: list[str | None]
) -> list[list[str]]:
    """Per channel, the GPUs of ``node`` in ring order over the direct NVLinks of ``mesh`` (see
    :func:`nvlink_mesh`), as NCCL's ring search builds them (src/graph/search.cc).

    Each channel takes one NVLink per hop out of what the channels before it left, so consecutive channels follow
    different rings and spread over every NVLink (on a DGX-1: the NV2 cycle both ways, then rings over the
    remaining links); when no ring fits in what is left, a new round starts from all links, repeating the rings
    of the first (NCCL duplicates its channels the same way). A channel on one node (NIC None) closes its ring
    inside the node, starting at the lowest GPU; a channel across nodes enters at the GPU nearest its NIC and
    leaves at another GPU as near (as :func:`node_chain`: GPUs behind a switch of more NICs than GPUs take turns),
    over an NVLink path between them. Where no ring over
    NVLinks alone exists, the fewest hops over other paths (PCIe) are used.

    Parameters
    ----------
    topo : Topology
        The topology.
    node : int
        The node.
    mesh : Mapping
        NVLinks per directed GPU pair (:func:`nvlink_mesh`).
    nics : list
        Per channel, its NIC on this node (:func:`channel_nic`), or None on a single node.

    Returns
    -------
    list[list[str]]
        One GPU order per channel.
    """
    gpus = [d.name for d in topo.devices("gpu", node)]
    full = dict(mesh)
    cap = dict(full)
    used: set[tuple[str, ...]] = set()
    out: list[list[str]] = []
    for nic in nics:
        if nic is None:
            ends: list[tuple[str, str | None]] = [(gpus[0], None)]
        else:
            key = gpu_nearness(topo, nic, len(gpus))
            ranked = sorted(gpus, key=key)
            best = key(ranked[1])[0]
            turn = _turn_ends(topo, node, nic, gpus)  # GPUs sharing a switch of more NICs take turns (node_chain)
            entry = turn[0] if turn else ranked[0]
            ends = [(entry, g) for g in ranked if g != entry and key(g)[0] == best]
            if turn:
                ends.sort(key=lambda e: e[1] != turn[1])

        walk = _first_walk(gpus, ends, cap, 0, used)
        if walk is None and cap != full:  # this round's links are taken: start a new round
            cap, used = dict(full), set()
            walk = _first_walk(gpus, ends, cap, 0, used)
        for slack in range(1, len(gpus) + 1):
            if walk is not None:
                break
            walk = _first_walk(gpus, ends, cap, slack, used)
        if walk is None:  # pragma: no cover - a walk with every hop allowed off NVLink always exists
            walk = list(gpus)
        nhops = len(walk) if nic is None else len(walk) - 1
        hops = [(walk[i], walk[(i + 1) % len(walk)]) for i in range(nhops)]
        for a, b in hops:
            if cap.get((a, b), 0) >= 1:
                cap[(a, b)] -= 1
        used.add(tuple(walk))
        out.append(walk)
    return out


def gdr_capable(topo: Topology, gpu: str) -> bool:
    """Whether NICs may read and write ``gpu``'s memory at all (GPUDirect RDMA): the GPU preset's
    ``gpudirect_rdma``, absent meaning yes (NCCL asks the driver: src/plugin/net.cc ncclGpuGdrSupport; GeForce
    parts say no)."""
    return topo.device(gpu).spec.get("gpudirect_rdma") is not False


def gdr_read(topo: Topology, gpu: str, opts: NcclOptions) -> bool:
    """Whether NCCL lets the NIC read ``gpu``'s send buffers (GDR read; src/graph/paths.cc ncclTopoCheckGdr,
    v2.30.7-1 lines 489-508): never with NCCL_NET_GDR_READ=0, always with 1; unset, before compute capability 8.0
    only when the GPU has an NVLink to another GPU of its node or is its node's only GPU ("Disable GDR Reads
    pre-Ampere when we have other PCI flows"). Without it the sender stages its data in host memory."""
    if opts.net_gdr_read is not None:
        return opts.net_gdr_read != 0
    dev = topo.device(gpu)
    if int(dev.spec.get("sm", 0)) >= 80:
        return True
    peers = [g.name for g in topo.devices("gpu", dev.node) if g.name != gpu]
    return not peers or any(topo.path_class(gpu, p) == "NVL" for p in peers)


def gdr_fabric(topo: Topology, nic: str, opts: NcclOptions, fabric: Mapping[str, Any] | None) -> bool:
    """Whether a network hop through ``nic`` may use GPUDirect RDMA as far as the network goes: an RDMA NIC on an
    RDMA ``fabric`` (``transport``, default rdma) with ``gpudirect`` on (default) and NCCL's IB transport enabled
    (NCCL_IB_DISABLE unset). NCCL's socket transport offers host memory only (net_socket.cc: NCCL_PTR_HOST), so
    ncclTopoCheckGdr's mode is off there; the GPUs' side (:func:`gdr_capable`, :func:`gdr_near`) is checked apart."""
    fabric = fabric or {}
    rdma = bool(topo.device(nic).spec.get("rdma", False)) and fabric.get("transport", "rdma") == "rdma"
    return rdma and not opts.ib_disable and bool(fabric.get("gpudirect", True))


def _pxn_proxy(topo: Topology, gpu: str, nic: str, opts: NcclOptions, consts: NcclConstants) -> str | None:
    """The GPU NCCL relays ``gpu``'s sends to ``nic`` through (PXN): the NIC's own local GPU (:func:`nic_local_gpu`)
    when it is another GPU of the node, reachable over NVLink, within PXB of the NIC (P2C where NCCL_PXN_C2C is on:
    :class:`~collsim.backends.nccl.constants.C2cReleases`), able to do GPUDirect (:func:`gdr_capable`) and close
    enough for it (:func:`gdr_near`); else None (graph/paths.cc ncclTopoComputePaths, "Check whether we can access
    the NIC through another NVLink-connected GPU (PXN)", v2.30.7-1 lines 815-840)."""
    local = nic_local_gpu(topo, nic)
    if local is None or local == gpu or not gdr_capable(topo, local):
        return None
    pxn_type = "P2C" if consts.c2c.pxn(opts.version, opts.pxn_c2c) else "PXB"
    within = path_class_rank(nic_path_class(topo, local, nic, opts, consts)) <= path_class_rank(pxn_type)
    close = within and gdr_near(topo, local, nic, opts, consts)
    return local if close and topo.nvlink_route(gpu, local) else None


def nic_path_class(topo: Topology, gpu: str, nic: str, opts: NcclOptions, consts: NcclConstants) -> str:
    """NCCL's class of the path from ``gpu`` to ``nic`` in the run's release: a GPU reaching a NIC through its Grace
    CPU (NVLink-C2C then PCIe) is P2C from NCCL 2.27 and PHB before (``c2c`` in nccl.yaml)."""
    cls = topo.path_class(gpu, nic)
    return "PHB" if cls == "P2C" and not consts.c2c.p2c(opts.version) else cls


def gdr_near(topo: Topology, gpu: str, nic: str, opts: NcclOptions, consts: NcclConstants) -> bool:
    """Whether ``gpu`` is close enough to ``nic`` for GPUDirect RDMA (paths.cc ncclTopoCheckGdr's distance test):
    its path class within NCCL_NET_GDR_LEVEL (default PXB). A path through the GPU's Grace CPU (P2C) passes where
    NCCL_NET_GDR_C2C is on (its default from 2.27; settable from 2.26), which makes the default level P2C (2.27 on)
    or counts the path as C2C (2.26); off, it is compared as P2C (PHB before 2.27) with the level."""
    level = opts.gdr_level or consts.default_gdr_level
    cls = nic_path_class(topo, gpu, nic, opts, consts)
    if topo.path_class(gpu, nic) == "P2C" and consts.c2c.gdr(opts.version, opts.net_gdr_c2c):
        if opts.gdr_level is None:
            return True
        cls = "P2C" if consts.c2c.p2c(opts.version) else "C2C"
    return path_class_rank(cls) <= path_class_rank(level)


def _closest(topo: Topology, src: str, targets: Sequence[str]) -> list[str]:
    """The ``targets`` with the best path class from ``src`` (NCCL's ncclTopoGetLocal), in index order."""
    if not targets:
        return []
    ranks = {t: path_class_rank(topo.path_class(src, t)) for t in targets}
    best = min(ranks.values())
    return [t for t in targets if ranks[t] == best]


def nic_local_gpu(topo: Topology, nic: str) -> str | None:
    """The GPU NCCL takes as ``nic``'s local GPU (topo.cc ncclTopoGetLocalGpu, v2.30.7-1): of the GPUs closest to the
    NIC, the first whose own NIC choice (ncclTopoGetLocalNetType: its CUDA device index modulo the GPUs sharing its
    closest NICs, bit-mirrored when their count is a power of two, plus the channel modulo the NICs each GPU takes)
    lands on it, trying channels 0, 1, ...; None when none does.

    On HGX H100 (two GPUs and two NICs a PCIe switch) NIC 1's local GPU is GPU 1, not GPU 0."""
    memo = _NIC_LOCAL_GPU.setdefault(topo, {})
    if nic not in memo:
        memo[nic] = _nic_local_gpu(topo, nic)
    return memo[nic]


#: nic_local_gpu's answers by topology (a topology's graph does not change), dropped with the topology
_NIC_LOCAL_GPU: weakref.WeakKeyDictionary[Topology, dict[str, str | None]] = weakref.WeakKeyDictionary()


def _nic_local_gpu(topo: Topology, nic: str) -> str | None:
    """:func:`nic_local_gpu`, uncached."""
    node = topo.device(nic).node
    gpus = [d.name for d in topo.gpus() if d.node == node]
    nics = [d.name for d in topo.nics(node)]
    local_gpus = _closest(topo, nic, gpus)
    for channel in range(max(1, len(nics))):
        for g in local_gpus:
            k = local_net_index(topo, g, channel, nics)
            if k is not None and nics[k] == nic:
                return g
    return None


def _intra_hop(
    topo: Topology, cat: ResourceCatalog, a: str, b: str, opts: NcclOptions, consts: NcclConstants
) -> Hop:
    """A hop inside a node: P2P (NVLink, else PCIe) when the GPUs can and the path class is within NCCL_P2P_LEVEL,
    else SHM through host memory (:func:`_shm_hop`). NCCL_P2P_LEVEL's default is PXB, and SYS on an AMD host with at
    most two GPUs (src/graph/paths.cc ncclTopoCheckP2p, "Allow P2P between pairs of GPUs on AMD systems":
    v2.26.2-1 lines 301-302, v2.30.7-1 lines 360-362)."""
    p2p_level = opts.p2p_level or consts.default_p2p_level
    amd = opts.p2p_level is None and topo.host_cpu(a).spec.get("vendor") == "amd"
    if amd and len(topo.devices("gpu", topo.device(a).node)) <= 2:
        p2p_level = "SYS"
    cls = topo.path_class(a, b)
    if not opts.p2p_disable and topo.p2p_supported(a, b) and path_class_rank(cls) <= path_class_rank(p2p_level):
        nvl = topo.nvlink_route(a, b) or (_nvb_route(topo, a, b) if cls == "NVB" else None)
        if nvl:
            return Hop(a, b, "P2P/NVLink", "NVLINK", link_uses(nvl), math.inf)
        return Hop(a, b, "P2P/PCIe", "PCI", link_uses(topo.pcie_route(a, b)), math.inf)
    if opts.shm_disable:
        raise BackendError(f"{a} and {b} have neither P2P nor SHM (NCCL_SHM_DISABLE=1): NCCL then connects them "
                           "through its network transport (transport.cc tries P2P, SHM, then NET; "
                           "NCCL_NET_DISABLE_INTRA=0), which collsim does not model inside a node")  # fmt: skip
    return _shm_hop(topo, cat, a, b, consts, opts)


def _nvb_route(topo: Topology, a: str, b: str) -> list[Any] | None:
    """GPU ``a`` to GPU ``b`` over NVLink through an intermediate GPU (path class NVB, the DGX-1's GPUs two NVLinks
    apart): NCCL's P2P/indirect transport puts the connection's buffer on that GPU, which ``a`` writes and ``b``
    reads over their NVLinks (src/transport/p2p.cc P2P_INTERMEDIATE, the intermediate rank from
    src/graph/paths.cc ncclTopoCheckP2p, v2.30.7-1). The intermediate is the GPU both reach over a direct NVLink with
    the most links on the narrower side (NCCL's path search keeps the widest of the shortest), then the lowest index;
    None when there is none."""
    node = topo.device(a).node
    best: tuple[int, int, list[Any]] | None = None
    for d in topo.devices("gpu", node):
        if d.name in (a, b):
            continue
        first, second = topo.nvlink_route(a, d.name), topo.nvlink_route(d.name, b)
        if not first or not second:
            continue
        width = min(lk.count for lk in (*first, *second))
        if best is None or width > best[0]:
            best = (width, d.index, [*first, *second])
    return best[2] if best is not None else None


def _shm_hop(topo: Topology, cat: ResourceCatalog, a: str, b: str, consts: NcclConstants, opts: NcclOptions) -> Hop:
    """SHM as NCCL runs it by default (shm.cc): the sender's SMs store each byte into a buffer in the receiver's
    host memory (NCCL_SHM_LOCALITY=2) over PCIe, the receiver's SMs load it back over PCIe. Path: PCIe from ``a``
    to the buffer's CPU socket, ``shm_memory_traffic`` (2) bytes of that socket's memory traffic per byte, PCIe to
    ``b``.

    One channel's rate is capped by its receive loads, which are non-posted PCIe reads (Little's law)::

        cap = threads x unroll x load_bytes / round_trip

    threads: a Ring/Simple channel's (256 when the path carries at most NCCL's PCI_BW, else 512, tuning.cc; or
    NCCL_NTHREADS as NCCL takes it: :func:`~collsim.backends.nccl.constants.ring_simple_threads`),
    unroll: loads in flight per thread (device.h ncclCollUnroll for the receiver's compute capability),
    load_bytes: 16, round_trip: twice the PCIe latency from the receiver to the buffer's socket (seconds).
    """
    hp = consts.host_paths
    cpu = topo.host_cpu(b if hp.shm_buffer_on_receiver else a).name
    to_host, from_host = topo.pcie_route(a, cpu), topo.pcie_route(cpu, b)
    path = link_uses(to_host) + cat.mem(cpu, hp.shm_memory_traffic) + link_uses(from_host)
    path_bw = min(cat.specs[k].capacity / c for k, c in path.uses)  # bytes/s the path carries alone
    threads = ring_simple_threads(consts, path_bw, opts.nthreads)
    unroll = hp.unroll(int(topo.device(b).spec.get("sm", 0)))
    round_trip = 2.0 * sum(ln.latency for ln in from_host)
    in_flight = threads * unroll * hp.load_bytes  # bytes of loads one channel has outstanding
    cap = in_flight / round_trip if round_trip > 0 else math.inf
    return Hop(a, b, "SHM", "PCI", path, cap)


def _gdr_hop(
    topo: Topology,
    cat: ResourceCatalog,
    a: str,
    b: str,
    nic_a: str,
    nic_b: str,
    opts: NcclOptions,
    consts: NcclConstants,
) -> Hop | None:
    """A network hop with GPUDirect RDMA: both GPUs able to (:func:`gdr_capable`) and close enough to their NICs
    (:func:`gdr_near`), or (PXN) the receiver is and the sender hands the data over NVLink to a GPU near its NIC;
    None when neither holds. A sender NCCL keeps from GDR reads (:func:`gdr_read`) stages its side in host memory
    (``staged_memory_traffic`` bytes of memory traffic per byte, as a staged hop) and the receiver's NIC still
    writes the GPU: a NET/staged hop."""
    if not (gdr_capable(topo, a) and gdr_capable(topo, b)):
        return None
    fabric_path = fabric_uses(topo, nic_a, nic_b)
    near = all(gdr_near(topo, g, n, opts, consts) for g, n in ((a, nic_a), (b, nic_b)))
    if near and not gdr_read(topo, a, opts):
        ca = topo.host_cpu(a).name
        path = (
            link_uses(topo.pcie_route(a, ca))
            + cat.mem(ca, consts.host_paths.staged_memory_traffic)
            + link_uses(topo.pcie_route(ca, nic_a))
            + fabric_path
            + link_uses(topo.pcie_route(nic_b, b))
        )
        return Hop(a, b, "NET/staged", "NET", path, math.inf)
    if near:
        path = link_uses(topo.pcie_route(a, nic_a)) + fabric_path + link_uses(topo.pcie_route(nic_b, b))
        return Hop(a, b, "NET/GDR", "NET", path, math.inf)
    if gdr_near(topo, b, nic_b, opts, consts) and not opts.pxn_disable:
        proxy = _pxn_proxy(topo, a, nic_a, opts, consts)
        if proxy is not None:
            path = (
                link_uses(topo.nvlink_route(a, proxy) or [])
                + link_uses(topo.pcie_route(proxy, nic_a))
                + fabric_path
                + link_uses(topo.pcie_route(nic_b, b))
            )
            return Hop(a, b, "NET/GDR", "NET", path, math.inf)
    return None


def _net_hop(
    topo: Topology,
    cat: ResourceCatalog,
    a: str,
    b: str,
    nics: tuple[str, str],
    opts: NcclOptions,
    consts: NcclConstants,
    fabric: Mapping[str, Any],
) -> Hop:
    """A hop between nodes: NET/GDR when possible (:func:`_gdr_hop`), else staged through host memory on an RDMA
    fabric, else TCP sockets.

    Staged: the GPU writes a host buffer over PCIe and the NIC reads it by DMA (the reverse on the receiving host),
    ``staged_memory_traffic`` (2) bytes of memory traffic per byte on each host. Sockets add the kernel's copy
    between user and socket buffers (``socket_memory_traffic``, 4 bytes per byte on each host) and CPU time: one
    TCP stream per connection costs 1 / ``tcp_bw_per_core`` core-seconds per byte at each end (the CPU preset).
    With NCCL_SOCKET_NTHREADS unset (net_socket.cc's default off AWS and GCP NICs: no helper threads) that time is
    spent by the proxy thread of the sending GPU and of the receiving GPU, one thread shared by all the GPU's
    network connections; with helper threads (set, or NCCL's defaults for AWS and GCP NICs by the NIC preset's
    ``pci_vendor``), a connection spreads over its own threads (capped at that many cores' rate) and the node's
    cores. Where the NIC preset caps a TCP flow (``flow_bw``: clouds), a connection reaches at most that times its
    sockets (threads x sockets per thread; one without helper threads).
    """
    nic_a, nic_b = nics
    rdma = bool(topo.device(nic_a).spec.get("rdma", False)) and fabric.get("transport", "rdma") == "rdma"
    if gdr_fabric(topo, nic_a, opts, fabric):
        gdr = _gdr_hop(topo, cat, a, b, nic_a, nic_b, opts, consts)
        if gdr is not None:
            return _with_message_overhead(topo, gdr, nic_a, nic_b)
    hp = consts.host_paths
    ca, cb = topo.host_cpu(a).name, topo.host_cpu(b).name

    def host_staged(copies: float) -> Path:
        return (
            link_uses(topo.pcie_route(a, ca))
            + cat.mem(ca, copies)
            + link_uses(topo.pcie_route(ca, nic_a))
            + fabric_uses(topo, nic_a, nic_b)
            + link_uses(topo.pcie_route(nic_b, cb))
            + cat.mem(cb, copies)
            + link_uses(topo.pcie_route(cb, b))
        )

    if rdma and not opts.ib_disable:
        staged = Hop(a, b, "NET/staged", "NET", host_staged(hp.staged_memory_traffic), math.inf)
        return _with_message_overhead(topo, staged, nic_a, nic_b)
    da, db = topo.device(a), topo.device(b)
    per_core_a = float(topo.device(ca).spec["tcp_bw_per_core"])  # bytes/s one core moves through one TCP stream
    per_core_b = float(topo.device(cb).spec["tcp_bw_per_core"])
    sock = (
        host_staged(hp.socket_memory_traffic)
        + cat.cores(da.node, 1.0 / per_core_a)
        + cat.cores(db.node, 1.0 / per_core_b)
    )
    # helper threads and sockets per connection: NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD as set, else
    # net_socket.cc's defaults by the listening (receiving) NIC's PCI vendor (none: no helper threads)
    vendor = topo.device(nic_b).spec.get("pci_vendor")
    helpers, per_thread = hp.socket_layout(vendor, opts.socket_nthreads, opts.socket_nsocks)
    stream = min(per_core_a, per_core_b)
    flow = min(flow_cap(topo.device(nic_a)), flow_cap(topo.device(nic_b)))  # a provider's cap on each TCP flow
    if helpers == 0:  # the proxy threads of both GPUs move the bytes, over the one control socket
        sock = sock + cat.proxy(a, 1.0 / per_core_a) + cat.proxy(b, 1.0 / per_core_b)
        return Hop(a, b, "NET/socket", "NET", sock, min(stream, flow))
    return Hop(a, b, "NET/socket", "NET", sock, min(stream * helpers, flow * helpers * per_thread))



def _with_message_overhead(topo: Topology, hop: Hop, nic_a: str, nic_b: str) -> Hop:
    """``hop`` with the NICs' per-message occupancy (NIC preset ``message_overhead``) on the sender's port into the
    fabric and the receiver's port out of it (one link between the two NICs: the larger of the two)."""
    t_a, t_b = (float(topo.device(n).spec.get("message_overhead") or 0.0) for n in (nic_a, nic_b))
    if not (t_a or t_b):
        return hop
    ports = link_uses(topo.route(nic_a, nic_b)).uses  # only its first and last link (the NIC ports) count here
    first, last = ports[0][0], ports[-1][0]
    per = ((first, max(t_a, t_b)),) if first == last else ((first, t_a), (last, t_b))
    return dataclasses.replace(hop, per_message=tuple((k, t) for k, t in per if t > 0))


def hop_between(
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
    """The hop from GPU ``a`` to GPU ``b``; across nodes through ``nic_a`` and ``nic_b`` (the channel's rails)."""
    if topo.device(a).node == topo.device(b).node:
        return _intra_hop(topo, cat, a, b, opts, consts)
    assert nic_a is not None and nic_b is not None
    return _net_hop(topo, cat, a, b, (nic_a, nic_b), opts, consts, fabric)


@dataclass(frozen=True)
class _IntraNode:
    """What the first two GPUs of node 0 tell about the node: channels, per-rank capacity, latency class."""

    channels: int
    capacity: float  # bytes/s per rank
    hw: str
    channel_bw: float
    notes: tuple[str, ...]


def _intra_node(
    topo: Topology, cat: ResourceCatalog, node0: list[str], nvl_bw: float, opts: NcclOptions, consts: NcclConstants
) -> _IntraNode:
    """Channel count inside a node: 2 x (NVLink bandwidth, else the P2P/SHM path's bottleneck) / one channel's
    bandwidth, at least 2 (NCCL duplicates its rings); one channel's bandwidth capped by the transport's."""
    channel_bw = float(topo.device(node0[0]).spec["nccl_channel_bw"])
    if len(node0) <= 1:
        return _IntraNode(2, math.inf, "NVLINK" if nvl_bw > 0 else "PCI", channel_bw, ())
    probe = _intra_hop(topo, cat, node0[0], node0[1], opts, consts)
    notes: tuple[str, ...] = ()
    if probe.transport == "P2P/NVLink":
        cap = nvl_bw
        mesh = nvlink_mesh(topo, 0)
        if mesh is not None:  # NVLinks without an NVSwitch: a ring may have to leave them (bridged pairs)
            order = mesh_chains(topo, 0, mesh, [None])[0]
            pairs = zip(order, order[1:] + order[:1], strict=True)
            ring = [_intra_hop(topo, cat, a, b, opts, consts) for a, b in pairs]
            slow = [h for h in ring if h.transport != "P2P/NVLink"]
            if slow:
                # NCCL's search settles on the speed every hop of its ring carries (search.cc ncclTopoCompute
                # lowers the speed until a ring fits): a ring of NVLink pairs joined over PCIe or SHM runs at the
                # slowest such hop, not at the pair's NVLinks
                probe = min(slow, key=lambda h: min(cat.specs[k].capacity / c for k, c in h.path.uses))
                cap = min(cat.specs[k].capacity / c for k, c in probe.path.uses)
                notes = (f"a ring of {len(order)} GPUs leaves the NVLinks between {probe.src}->{probe.dst} "
                         f"({probe.transport}): NCCL's ring runs at that hop's {cap / 1e9:.1f} GB/s",)  # GB = 1e9 B
    else:
        cap = min(cat.specs[k].capacity / c for k, c in probe.path.uses)
        if probe.transport == "SHM":
            notes = (
                f"{node0[0]}->{node0[1]}: P2P unavailable, SHM through host memory "
                f"(one channel's PCIe reads at most {probe.max_rate / 1e9:.1f} GB/s)",  # GB = 1e9 bytes
            )
    nch = 2 * max(1, int(cap // channel_bw))
    return _IntraNode(nch, cap, probe.hw, min(channel_bw, probe.max_rate), notes)


def _channel_count(
    nch: int, net_nch: int, nnodes: int, opts: NcclOptions, consts: NcclConstants, node_unbound: bool = False
) -> tuple[int, int]:
    """Across nodes the network search's channels ``net_nch`` (:func:`net_search`: 2 per NIC on 8 NICs of
    200 or 400 Gb/s, 4 on 4 or fewer of 400 Gb/s). Where nothing inside the node bounds them (``node_unbound``):
    behind an NVSwitch, whose NVLinks carry every such channel whatever one node alone runs (OCI's 16 NICs: 32, where
    one node runs 24), and with one GPU a node (NCCL's search has no path inside the node, typeIntra LOC,
    search.cc); elsewhere the node's own channels ``nch`` bound them too. Then MAXCHANNELS, NCCL_MAX_NCHANNELS and
    NCCL_MAX_CTAS, then NCCL_MIN_NCHANNELS and NCCL_MIN_CTAS (connect.cc: nChannels = min(ncclMaxNchannels(),
    nChannels, maxCTAs), the rings copied up to max(ncclMinNchannels(), minCTAs)). Returns the channels and how many
    of them are not copies (each copy runs its original's ring, channel c mod that count).

    >>> from types import SimpleNamespace
    >>> consts = SimpleNamespace(max_channels=32, channel_limit=lambda version: 32)
    >>> [_channel_count(24, n, 2, NcclOptions(), consts, True)[0] for n in (8, 16, 32, 64)]  # type: ignore[arg-type]
    [8, 16, 32, 32]
    >>> _channel_count(4, 16, 2, NcclOptions(), consts)  # type: ignore[arg-type]
    (4, 4)
    >>> _channel_count(16, 16, 2, NcclOptions(max_channels=2, min_channels=16), consts)  # type: ignore[arg-type]
    (16, 2)
    """
    if nnodes > 1:
        nch = net_nch if node_unbound else min(nch, net_nch)
    nch = min(nch, consts.max_channels)  # what the search finds (collsim's cap: topologies/software/nccl.yaml)
    most = consts.channel_limit(opts.version)  # MAXCHANNELS: what the bounds may ask for
    min_ctas, max_ctas = opts.cta_bounds(most)
    if opts.max_channels is not None:
        nch = min(nch, max(1, opts.max_channels))
    nch = min(nch, max_ctas)
    distinct = nch
    lo = max(opts.min_channels or 0, min_ctas if opts.min_ctas else 0)
    if lo:
        nch = max(nch, min(lo, most))
    return nch, distinct


def _rings(
    topo: Topology,
    cat: ResourceCatalog,
    nch: int,
    nnodes: int,
    opts: NcclOptions,
    consts: NcclConstants,
    fabric: Mapping[str, Any],
    distinct: int | None = None,
) -> tuple[list[list[str]], dict[tuple[int, int], Hop]]:
    """Every channel's ring (node by node, entering each node next to the channel's NIC) and its hops; on nodes of
    direct NVLinks without an NVSwitch the rings follow NVLinks, one ring per channel (:func:`mesh_chains`). A
    channel beyond the first ``distinct`` is a copy: channel c runs channel c mod ``distinct``'s ring and NICs."""
    d = distinct or nch
    rings: list[list[str]] = []
    hops: dict[tuple[int, int], Hop] = {}
    meshes = {node: nvlink_mesh(topo, node) for node in range(nnodes)}
    mesh_rings = {
        node: mesh_chains(topo, node, mesh, [channel_nic(topo, node, c, nnodes) for c in range(d)])
        for node, mesh in meshes.items()
        if mesh is not None
    }
    # channels on the same NIC (channel c and c + NICs) repeat a node's chain and its hops: each computed once
    chains: dict[tuple[int, str | None], list[str]] = {}
    known: dict[tuple[str, str, str | None, str | None], Hop] = {}
    for c in range(nch):
        ring: list[str] = []
        nic_of = {node: channel_nic(topo, node, c % d, nnodes) for node in range(nnodes)}
        for node in range(nnodes):
            if node in mesh_rings:
                ring += mesh_rings[node][c % d]
                continue
            key = (node, nic_of[node])
            if key not in chains:
                chains[key] = node_chain(topo, node, nic_of[node])
            ring += chains[key]
        rings.append(ring)
        n = len(ring)
        for i in range(n):
            a, b = ring[i], ring[(i + 1) % n]
            na, nb = topo.device(a).node, topo.device(b).node
            nics = (nic_of[na], nic_of[nb]) if na != nb else (None, None)  # a hop inside a node uses no NIC
            hop = known.get((a, b, *nics))
            if hop is None:
                hop = known[(a, b, *nics)] = hop_between(topo, cat, a, b, *nics, opts, consts, fabric)
            hops[(c, i)] = hop
    return rings, hops


def nvls_channel_count(
    arch: str, nnodes: int, tuned: int | None, opts: NcclOptions, consts: NcclConstants
) -> int:
    """NVLS's channels, comm->nvlsChannels (:meth:`~collsim.backends.nccl.algos.nvls.NVLS.channels` says how):
    the release's count for the GPU (``nvls_ctas``), NCCL's tuning on Blackwell across nodes (``tuned``, from 2.30.3),
    or NCCL_NVLS_NCHANNELS, within the CTA bounds."""
    arch = consts.arch_as(arch, opts.version)  # a release that did not know the GPU runs its predecessor's
    one, several = consts.nvls_ctas.get(arch, (consts.nvls_channels, consts.nvls_channels))
    nc = one if nnodes == 1 and not opts.before(consts.nvls_ctas_one_node_since) else several
    nc = tuned or nc  # NCCL's tuning on Blackwell across nodes, from 2.30.3 (plan.nvls_sm100_tuning)
    if opts.nvls_channels is not None:  # NCCL_NVLS_NCHANNELS
        nc = opts.nvls_channels
    lo, hi = opts.cta_bounds(consts.channel_limit(opts.version))
    return max(lo, min(hi, nc))


def nvls_refusal(
    arch: str, switch: str | None, multicast: bool, consts: NcclConstants, gpus: int = 2
) -> str | None:
    """Why this hardware cannot run NVLS, or None when it can. The one place that decides it: the GPU generation
    must be one NCCL runs NVLS on (those with an ``nvls_efficiency`` in ``topologies/software/nccl.yaml``: tuning.cc
    defines it from sm90 on), the node's NVSwitch must say ``multicast: true`` in its preset (NVLink SHARP), and the
    communicator must have ``gpus`` >= 2 on the node (``ncclNvlsInit``, ``src/transport/nvls.cc`` v2.30.7-1 line
    262: ``if (!ncclParamNvlsEnable() || gpuCount < 2) return ncclSuccess;``, NVLS support left off; one GPU a node
    of a multi-GPU board, as a network check runs it). NCCL_NVLS_ENABLE=0 is checked with the other knobs
    (:class:`~collsim.backends.nccl.algos.NVLS`).

    >>> from types import SimpleNamespace
    >>> consts = SimpleNamespace(nvls_efficiency={"hopper": 0.85, "blackwell": 0.74})
    >>> nvls_refusal("hopper", "n0/nvswitch", True, consts) is None  # type: ignore[arg-type]
    True
    >>> nvls_refusal("hopper", "n0/nvswitch", False, consts)  # type: ignore[arg-type]
    'NVLS needs an NVSwitch with multicast (NVLink SHARP); n0/nvswitch has multicast: false'
    >>> nvls_refusal("ampere", "n0/nvswitch", True, consts)  # type: ignore[arg-type]
    'NVLS needs Hopper or newer GPUs (this is ampere; NCCL runs NVLS on hopper, blackwell)'
    >>> nvls_refusal("hopper", "n0/nvswitch", True, consts, gpus=1)  # type: ignore[arg-type]
    'NVLS needs two or more GPUs of the communicator on a node (this one has 1)'
    """
    if arch not in consts.nvls_efficiency:
        archs = ", ".join(consts.nvls_efficiency)
        return f"NVLS needs Hopper or newer GPUs (this is {arch}; NCCL runs NVLS on {archs})"
    if switch is None:
        return "NVLS needs an NVSwitch"
    if gpus < 2:
        return f"NVLS needs two or more GPUs of the communicator on a node (this one has {gpus})"
    if not multicast:
        return f"NVLS needs an NVSwitch with multicast (NVLink SHARP); {switch} has multicast: false"
    return None


def plan_nccl(
    topo: Topology, opts: NcclOptions, consts: NcclConstants, fabric: Mapping[str, Any] | None = None
) -> NcclPlan:
    """Channels, rings and transports as NCCL would build them for ``topo``.

    Channel count: on NVLink systems 2 x (the GPU's NVLink bandwidth / one channel's bandwidth), NCCL's rings
    duplicated (24 on DGX A100 and HGX H100); on PCIe 2 x (path bottleneck / channel bandwidth), at least 2;
    across nodes at most 2 per NIC used; then NCCL_MIN/MAX_NCHANNELS and MAXCHANNELS.
    Rings: within a node GPUs in index order; across nodes each channel uses one NIC rail (channel mod NICs), enters
    a node at the GPU nearest that NIC and leaves from the next nearest, so GPUDirect RDMA stays within PIX.

    Raises
    ------
    BackendError
        No GPUs, several nodes without NICs, a GPU arch NCCL's tuner tables do not know, no transport, or NCCL_ALGO /
        NCCL_PROTO entries for one collective before the release that reads them.
    """
    fabric = dict(fabric or {})
    gpus = _nccl_gpus(topo)
    _check_release_knobs(opts, consts)
    cat = ResourceCatalog(topo)
    arch = str(topo.device(gpus[0]).spec.get("arch", "ampere"))
    consts.check_arch(arch)
    nnodes = len({topo.device(g).node for g in gpus})
    nvl_bw = sum(ln.bandwidth for ln in topo.links() if ln.src == gpus[0] and ln.kind == "nvlink")
    node0 = [g for g in gpus if topo.device(g).node == 0]
    intra = _intra_node(topo, cat, node0, nvl_bw, opts, consts)
    nics_used = 0
    if nnodes > 1:
        nics_used = len(topo.nic_slots(0))  # with a NIC down, the healthy count: its channels moved, not dropped
        if not nics_used:
            raise BackendError("several nodes but node 0 has no NIC")
    switch = next(iter(topo.devices("nvswitch", 0)), None)
    sm = int(topo.device(gpus[0]).spec.get("sm", 0))
    net = net_search(topo, node0, nics_used, nnodes, sm, nvl_bw, opts, consts)
    multicast = bool(switch.spec.get("multicast", False)) if switch is not None else False
    refusal = nvls_refusal(arch, switch.name if switch is not None else None, multicast, consts, len(node0))
    ch = _ring_channels(intra.channels, net.channels, nnodes, arch, refusal is None and opts.nvls_enable,
                        switch is not None or len(node0) == 1, opts, consts)  # fmt: skip
    nch, distinct = ch.count, ch.distinct
    rings, hops = _rings(topo, cat, nch, nnodes, opts, consts, fabric, distinct)
    originals = {k: h for k, h in hops.items() if k[0] < distinct}  # a copy's hops are its original's
    notes = list(intra.notes) + ([ch.note] if ch.note else [])
    intra_bw = min(intra.capacity, ch.graph * intra.channel_bw)  # the model's rates: its graphs' channels
    nic_bw, bus_bw, net_latency = 0.0, intra_bw, 0.0
    if nnodes > 1:
        nic_bw, bus_bw, net_latency, transports = _network(topo, cat, hops, nics_used, ch.graph, intra_bw)
        notes.append(f"inter-node transport: {', '.join(transports)}")
    tuner, tuner_note = _tuner(topo, opts, consts)
    if tuner_note:
        notes.append(tuner_note)
    vendor = cpu_vendor(topo, gpus)
    return NcclPlan(
        ranks=gpus,
        nnodes=nnodes,
        channels=nch,
        rings=rings,
        hops=hops,
        arch=arch,
        channel_bw=intra.channel_bw,
        intra_hw=intra.hw,
        bus_bw=bus_bw,
        net_overhead=float(topo.host_cpu(gpus[0]).spec["nccl_net_overhead"]),
        nvl_bw=nvl_bw,
        nvswitch=switch.name if switch is not None else None,
        ppn=len(node0),
        fabric=fabric,
        intra_bw=intra_bw,
        nic_count=nics_used,
        nic_bw=nic_bw,
        notes=notes,
        multicast=multicast,
        nvls_refusal=refusal,
        cpu_vendor=vendor,
        tuner=tuner,
        tuner_note=tuner_note,
        net_latency=net_latency,
        gdr_flush=gdr_flush(sm, opts),
        unreleased=_unreleased(opts, consts),
        unsupported=_unsupported(len(node0), opts, consts),
        ll128_refusal=ll128_refusal(topo, gpus, intra.hw, len(node0), originals, nnodes, opts, consts),
        nvls_tuned=nvls_sm100_tuning(topo, node0, nnodes, opts, consts),
        nvls_collectives=_nvls_collectives(len(gpus), nnodes, opts, consts),
        nvls_reductions=(
            None
            if consts.nvls_reductions is None
            else (consts.nvls_reductions, consts.nvls_allgather_any_reduction_since)
        ),
        tree_bw=net.tree_bw,
        graph_channels=net.graph_channels or max(1, intra.channels // 2),
        distinct_channels=distinct if distinct < nch else 0,
        unmerged_ports=tuple(_unmerged_ports(topo, opts)) if nnodes > 1 else (),
        mixed_nic_speeds=_mixed_nic_speeds(topo) if nnodes > 1 else (),
        sm=sm,
        p2p=_p2p_channels(
            topo, node0, sm, nvl_bw, intra.hw, nch, len(gpus), nnodes, nics_used, nic_bw, vendor == "arm", opts, consts
        ),
        nvls_head_count=nvls_head_count(topo, nnodes, len(node0), consts),
    )


@dataclass(frozen=True)
class _Channels:
    """Ring and Tree's channels: ``count`` the communicator runs, the first ``distinct`` of them not copies,
    ``graph`` the count NCCL's cost model prices (its graphs'), and a note where NVLS raised ``count``."""

    count: int
    distinct: int
    graph: int
    note: str | None


def _ring_channels(
    intra: int, net: int, nnodes: int, arch: str, nvls_on: bool, node_unbound: bool, opts: NcclOptions,
    consts: NcclConstants,
) -> _Channels:  # fmt: skip
    """:func:`_channel_count` with the environment's bounds, then, 2.22 to 2.27 with NVLS on, at least NVLS's
    channels (connect.cc copies the rings up to comm->nvlsChannels after the bounds; enqueue.cc runs them all);
    and the count without the bounds, which NCCL's cost model prices (tuning.cc ``busBw = graphs[a]->nChannels *
    bw``: the search's count; NCCL_MAX_NCHANNELS, NCCL_MIN_NCHANNELS and the CTA bounds act in connect.cc, after)."""
    count, distinct = _channel_count(intra, net, nnodes, opts, consts, node_unbound)
    bounded = count
    first, gone = consts.nvls_ring_copy
    if nvls_on and not opts.before(first) and opts.before(gone):
        count = max(count, nvls_channel_count(arch, nnodes, None, opts, consts))
    uncapped = dataclasses.replace(opts, min_channels=None, max_channels=None, min_ctas=None, max_ctas=None)
    graph, _ = _channel_count(intra, net, nnodes, uncapped, consts, node_unbound)
    note = (f"{count} channels for Ring and Tree where the channel bounds leave {bounded}: NCCL "
            f"{'.'.join(map(str, opts.version or ()))} copies its rings up to NVLS's channels (connect.cc) and runs "
            "them all (enqueue.cc, 2.22 to 2.27)") if count > bounded else None  # fmt: skip
    return _Channels(count, distinct, graph, note)


def _network(
    topo: Topology, cat: ResourceCatalog, hops: Mapping[tuple[int, int], Hop], nics: int, nch: int, intra_bw: float
) -> tuple[float, float, float, list[str]]:
    """Across nodes: one NIC's rate on the rings' network path (bytes/s), what the rings then carry per rank (the
    node's ``intra_bw`` bounded by the ``nics`` NICs and the ``nch`` channels' network rate), the latency the
    network plugin reports to NCCL (NIC preset ``nccl_net_latency``, s; priced on network steps only), and the
    transports the network hops use."""
    first_net = next(h for h in hops.values() if h.hw == "NET")
    nic_bw = min(cat.specs[k].capacity / c for k, c in first_net.path.uses)
    bus_bw = min(intra_bw, nics * nic_bw, nch * min(nic_bw, first_net.max_rate))
    net_latency = max((float(d.spec.get("nccl_net_latency") or 0.0) for d in topo.nics()), default=0.0)
    return nic_bw, bus_bw, net_latency, sorted({h.transport for h in hops.values() if h.hw == "NET"})


def _nccl_gpus(topo: Topology) -> list[str]:
    """The GPUs NCCL's ranks run on, one rank each; a BackendError where there are none or ranks share a GPU."""
    gpus = [d.name for d in topo.gpus()]
    if len(gpus) < 1:
        raise BackendError("the topology has no GPUs: NCCL needs GPUs (use the gloo backend with device: cpu)")
    if topo.ranks_per_gpu > 1:  # NVIDIA/nccl src/init.cc lines 736-739 (v2.27.7-1): ncclInvalidUsage
        raise BackendError(
            f"NCCL runs one rank per GPU ('Duplicate GPU detected' when two share one); this cluster has "
            f"{topo.ranks_per_gpu} ranks per GPU (cluster.ranks_per_gpu): use the gloo backend"
        )
    return gpus


def _p2p_channels(
    topo: Topology,
    node0: Sequence[str],
    sm: int,
    nvl_bw: float,
    intra_hw: str,
    nch: int,
    nranks: int,
    nnodes: int,
    nics_used: int,
    nic_bw: float,
    arm_host: bool,
    opts: NcclOptions,
    consts: NcclConstants,
) -> P2pChannels | None:
    """NCCL's point-to-point channels for this system (:func:`~collsim.backends.nccl.p2p_sched.p2p_channels`);
    ``nvl_bw``: one GPU's NVLink bandwidth (bytes/s, :attr:`NcclPlan.nvl_bw`); ``arm_host``: the ranks' CPUs are
    Arm (NCCL's cpuArch ARM: the net chunk doubles with Blackwell).

    A peer inside the node gets 2 channels per NVLink's worth of path bandwidth: on an NVSwitch node the GPU's NVLink
    bandwidth over NCCL's rate of one NVLink (ncclTopoNVLinkBw), on an NVLink mesh the fewest direct links between
    two of its GPUs (a pair without one goes through another GPU: 2), over PCIe 2 (paths.cc ncclTopoGetNchannels)."""
    p2p = consts.p2p
    if p2p is None:
        return None
    local: int | None = None
    if len(node0) > 1:
        links: int | None = None
        mesh = nvlink_mesh(topo, 0)
        if mesh is not None:
            links = min(mesh.get((a, b), 0) for a in node0 for b in node0 if a != b)
        elif nvl_bw > 0:
            links = int(nvl_bw / p2p.nvlink_link_bw(sm) + 1e-9)
        local = local_peer_channels(links)
    kind = "net" if nnodes > 1 else ("nvl" if intra_hw == "NVLINK" else "pci")
    override = {"net": opts.p2p_net_chunksize, "nvl": opts.p2p_nvl_chunksize, "pci": opts.p2p_pci_chunksize}[kind]
    simple = consts.protocols["Simple"]
    step = (opts.buffsize or simple.buffer_bytes) // consts.steps
    ppn = max(1, len(node0))
    return p2p_channels(
        p2p, ring_channels=nch, nranks=nranks, nnodes=nnodes, local_peer_channels=local,
        all_nvlink=intra_hw == "NVLINK", nics_per_gpu=max(1, nics_used // ppn), nic_bw=nic_bw,
        version=opts.version[:2] if opts.version else None, chunk_override=override,
        net_peer_channels=opts.nchannels_per_net_peer, min_p2p=opts.min_p2p_channels, max_p2p=opts.max_p2p_channels,
        simple_step=int(step), arm_blackwell=sm >= 100 and arm_host,
    )  # fmt: skip


def _mixed_nic_speeds(topo: Topology) -> tuple[str, ...]:
    """A line when node 0's NICs (those NCCL lists) differ in speed: collsim gives every NIC the same number of
    channels, so the slowest paces all of them; NCCL's search, which lowers a channel's bandwidth until the NICs fit
    (search.cc ``ncclTopoCompute``), can give a faster NIC more channels than a slower one, and run faster.

    >>> from collsim.topology import load_topology
    >>> _mixed_nic_speeds(load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized"}))
    ()
    """
    speeds = {float(v) for n in dict.fromkeys(topo.nic_slots(0)) if (v := topo.device(n).spec.get("speed")) is not None}
    if len(speeds) < 2:
        return ()
    gbps = sorted(v * 8 / 1e9 for v in speeds)  # bytes/s to Gb/s
    shown = ", ".join(f"{g:g}" for g in gbps)
    return (f"the NICs differ in speed ({shown} Gb/s): collsim gives each the same channels, so the slowest paces "
            "every channel (a lower bound); NCCL's search can give a faster NIC more channels (search.cc)",)


def _unmerged_ports(topo: Topology, opts: NcclOptions) -> list[str]:
    """A note for each NIC preset of node 0 that is a multi-port card as NCCL merges it (``nccl_merged_since``)
    where the run's release is older than that: NCCL then opens every port as its own device, which the preset
    does not model."""
    out = []
    for preset, spec in {d.spec.get("preset"): d.spec for d in topo.nics(0) if d.spec.get("nccl_merged_since")}.items():
        major, minor = spec["nccl_merged_since"]
        if opts.before((major, minor)):
            out.append(
                f"NIC preset {preset}: NCCL merges the card's ports into one device from {major}.{minor} "
                f"(NCCL_IB_MERGE_NICS); this release opens each port as its own, which the preset does not model "
                "(describe the node with one NIC per port)"
            )
    return out


def _check_release_knobs(opts: NcclOptions, consts: NcclConstants) -> None:
    """Refuse NCCL_ALGO / NCCL_PROTO entries for one collective before the release that reads them (2.24)."""
    if (opts.algorithms_by or opts.protocols_by) and opts.before(consts.env_per_collective_since):
        major, minor = consts.env_per_collective_since
        raise BackendError(
            f"NCCL_ALGO and NCCL_PROTO entries for one collective ('allreduce:...') came with NCCL {major}.{minor} "
            f"(backends.nccl.version is {'.'.join(map(str, opts.version or ()))})"
        )


def _unsupported(ppn: int, opts: NcclOptions, consts: NcclConstants) -> dict[str, str]:
    """CollNet algorithms NCCL skips with more GPUs per node than it supports (``collnet_max_local_gpus``), each
    with why."""
    most = consts.collnet_max_local_gpus
    return {
        a: f"{a} runs with at most {most} GPUs per node (this node has {ppn})"
        for a, since in consts.collnet_max_local_since.items()
        if ppn > most and not opts.before(since)
    }


def _nvls_collectives(nranks: int, nnodes: int, opts: NcclOptions, consts: NcclConstants) -> frozenset[str]:
    """What NVLS runs: allreduce, and all-gather and reduce-scatter on one node of at most ``nvls_max_arity`` GPUs
    (every GPU a head) from ``nvls_ag_rs_since`` on (``nvls_allgather_reduce_scatter`` in nccl.yaml)."""
    ag_rs = nnodes == 1 and nranks <= consts.nvls_max_arity and not opts.before(consts.nvls_ag_rs_since)
    return frozenset({"allreduce", "allgather", "reduce_scatter"} if ag_rs else {"allreduce"})


def nvls_unreduced(plan: NcclPlan, opts: NcclOptions, collective: str) -> str | None:
    """Why NCCL runs ``collective`` without NVLS (and NVLSTree) for ``opts.op`` on ``opts.dtype``, or None: enqueue.cc
    offers NVLS only where NVLink SHARP reduces that type with that operation (device.h ncclNvlsSupported,
    ``plan.nvls_reductions``), but for an all-gather from 2.22 on (before, an all-gather's type had to be one NVLS
    sums).

    >>> from types import SimpleNamespace as NS
    >>> plan = NS(nvls_reductions=({"sum": frozenset({"float32", "bfloat16"}), "max": frozenset({"bfloat16"})},
    ...                            (2, 22)))
    >>> nvls_unreduced(plan, NcclOptions(), "allreduce") is None
    True
    >>> [nvls_unreduced(plan, NcclOptions(op="avg"), c) is None for c in ("allreduce", "reduce_scatter", "allgather")]
    [False, False, True]
    >>> [nvls_unreduced(plan, NcclOptions(dtype="int8", version=v), "allgather") is None for v in [(2, 21, 5), None]]
    [False, True]
    """
    if plan.nvls_reductions is None:
        return None
    table, allgather_any_since = plan.nvls_reductions
    if collective == "allgather":
        if not opts.before(allgather_any_since) or opts.dtype in table.get("sum", frozenset()):
            return None
    elif opts.dtype in table.get(opts.op, frozenset()):
        return None
    op = "sum" if collective == "allgather" else opts.op
    ops = ", ".join(f"{o} on {len(t)} types" for o, t in table.items()) or "nothing"
    return (f"NVLink SHARP has no {op} on {opts.dtype} (NCCL's ncclNvlsSupported: {ops}; avg runs as a scaled sum, "
            "prod not at all), so NCCL offers no NVLS or NVLSTree for it")  # fmt: skip


#: NCCL's path types, best first (src/include/graph.h lines 117-154, v2.30.7-1: PATH_LOC 0 .. PATH_DIS 11)
NCCL_PATHS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS")


def nvls_sm100_tuning(
    topo: Topology, node0: Sequence[str], nnodes: int, opts: NcclOptions, consts: NcclConstants
) -> tuple[int | None, int | None, int | None]:
    """NCCL's NVLS tuning on Blackwell across nodes (src/transport/nvls.cc ncclNvlsTreeSm100Tuning, from 2.30.3;
    ``nvls_sm100_tuning`` in ``topologies/software/nccl.yaml``): (NVLS channels, chunk bytes, NVLSTree's chunk cap
    bytes) of the first rule that matches, None each where NCCL keeps its default (and all three off Blackwell, on
    one node, before 2.30.3 or when no rule matches).

    The rules read NCCL's ``minNetBw``: the least bandwidth, in NCCL's figures (the links' ``bandwidth``, NCCL's own
    PCIe x16 numbers, and the NIC's port ``speed``), of a GPU's path to the NIC NVLS pairs it with
    (:func:`nvls_head_nics`), in GB/s; and the worst of those paths' types."""
    sms = [int(topo.device(g).spec.get("sm", 0)) for g in node0]
    released = opts.version is None or tuple(opts.version) >= consts.nvls_sm100_since
    if nnodes < 2 or not node0 or min(sms) < 100 or not released:
        return None, None, None
    heads = nvls_head_nics(topo, 0)
    bws, worst = [], 0
    for g in node0:
        nic = heads[g]
        bws.append(nic_path_bw(topo, g, nic))
        worst = max(worst, NCCL_PATHS.index(topo.path_class(g, nic)))
    nic_bw = min(bws)
    for rule in consts.nvls_sm100_rules:
        if rule.matches(nnodes, nic_bw, len(node0), worst, NCCL_PATHS.index):
            return rule.channels, rule.chunk, rule.tree_max
    return None, None, None


def nic_path_bw(topo: Topology, gpu: str, nic: str) -> float:
    """A GPU's path to a NIC in NCCL's figures, GB/s: the least of its PCIe links' ``bandwidth`` (NCCL's own numbers,
    48 on Gen5 x16) and the NIC's port ``speed`` (topo.cc, the NET node's bandwidth), rounded to 1e-6 (NCCL's
    figures are whole or tenths of GB/s: no float noise at thresholds)."""
    links = [ln.bandwidth for ln in topo.pcie_route(gpu, nic)]
    speed = float(topo.device(nic).spec.get("speed") or math.inf)
    return round(min([*links, speed]) / 1e9, 6)  # bytes/s to GB/s (GB = 1e9 B)


@dataclass(frozen=True)
class NetSearch:
    """What NCCL's network graph search gives across nodes (:func:`net_search`)."""

    #: the ring channels NCCL runs across nodes, connect.cc's copies included (0 on one node)
    channels: int = 0
    #: the ring and tree graphs' ``nChannels``, before those copies (0 on one node or without ``ring_search``)
    graph_channels: int = 0
    #: the tree graph's channels x bwIntra on two nodes, bytes/s (0.0 elsewhere)
    tree_bw: float = 0.0


def net_search(
    topo: Topology, node0: Sequence[str], nics_used: int, nnodes: int, sm: int, nvl_bw: float, opts: NcclOptions,
    consts: NcclConstants,
) -> NetSearch:
    """NCCL's network search across nodes, from ``nics_used`` NICs of node 0 and the best GPU-NIC path (search.cc
    ``system->maxBw``: the largest :func:`nic_path_bw`, a NIC's from the GPUs closest to it):

    - ``channels``: the ring channels (:meth:`~collsim.backends.nccl.constants.RingSearch.channels`: 2 per NIC on 8
      NICs of 200 or 400 Gb/s, 4 on 4 or fewer of 400 Gb/s or on 800 Gb/s; 2 per NIC with constants that carry no
      ``ring_search``, built by hand);
    - ``graph_channels``: the ring and tree graphs' ``nChannels``
      (:meth:`~collsim.backends.nccl.constants.RingSearch.search`: a channel per NIC, doubled by
      ncclTopoDupChannels where it applies), before connect.cc copies them. init.cc sets ``treeGraph->nChannels =
      ringGraph->nChannels`` to the smaller (v2.26.2-1 line 1010) and tuning.cc multiplies its per-channel caps by
      it (``graphs[a]->nChannels``);
    - ``tree_bw`` on two nodes: the tree graph's channels x bwIntra in NCCL's figures
      (:meth:`~collsim.backends.nccl.constants.RingSearch.tree_bw`, ``nvl_bw`` one GPU's NVLink bandwidth), bytes/s.

    >>> from collsim.api import Simulator
    >>> plan = Simulator.from_source("scenarios/2node-h100-ib.yaml").nccl_plan
    >>> plan.channels, plan.graph_channels, plan.tree_bw / 1e9  # 8 NDR NICs: 8 searched, copied to 16; 8 x 48 GB/s
    (16, 8, 384.0)
    """
    if nnodes <= 1:
        return NetSearch()
    rs = consts.ring_search
    if rs is None:
        return NetSearch(channels=2 * nics_used)
    nics = dict.fromkeys(topo.nic_slots(0))
    best = max((nic_path_bw(topo, g, n) for n in nics for g in _closest(topo, n, list(node0))), default=0.0)
    tree_bw = rs.tree_bw(nics_used, best, nvl_bw / 1e9, sm, opts.version) * 1e9 if nnodes == 2 else 0.0  # GB/s
    return NetSearch(
        channels=rs.channels(nics_used, best, sm, opts.version),
        graph_channels=rs.search(nics_used, best, sm, opts.version)[0],
        tree_bw=tree_bw,
    )


def type_inter(
    topo: Topology, hops: Mapping[tuple[int, int], Hop], nnodes: int, opts: NcclOptions, consts: NcclConstants
) -> str | None:
    """The worst path between a GPU and its channel's NIC over the channels' network hops, by NCCL's path names (its
    graphs' ``typeInter``): each end's path class in the run's release (:func:`nic_path_class`), PXN where a
    GPUDirect hop leaves through a GPU nearer the NIC (:func:`_gdr_hop`); None on one node."""
    worst: str | None = None
    for (c, _i), hop in hops.items():
        if hop.hw != "NET":
            continue
        for g in (hop.src, hop.dst):
            nic = channel_nic(topo, topo.device(g).node, c, nnodes)
            if nic is None:
                continue
            cls = nic_path_class(topo, g, nic, opts, consts)
            if hop.transport == "NET/GDR" and not gdr_near(topo, g, nic, opts, consts):
                cls = "PXN"  # the sender hands the data over NVLink to a GPU within NCCL_NET_GDR_LEVEL of the NIC
            if worst is None or NCCL_PATHS.index(cls) > NCCL_PATHS.index(worst):
                worst = cls
    return worst


def ll128_refusal(
    topo: Topology,
    gpus: Sequence[str],
    intra_hw: str,
    ppn: int,
    hops: Mapping[tuple[int, int], Hop],
    nnodes: int,
    opts: NcclOptions,
    consts: NcclConstants,
) -> str | None:
    """Why NCCL leaves LL128 off by default on this system (NCCL_PROTO can still ask for it), or None when it turns
    it on (tuning.cc; ``ll128_default`` in ``topologies/software/nccl.yaml``): the GPUs' compute capability (by
    release), the paths inside a node beyond NVLink (one GPU per node has none), and the GPU-NIC paths across nodes
    beyond PXB (PXN from compute capability 9.0: :func:`type_inter`). Inside a node every ring hop must be NVLink
    (``intra_hw`` is the first two GPUs' class only)."""
    if ppn > 1 and (intra_hw != "NVLINK" or any(h.hw not in ("NVLINK", "NET") for h in hops.values())):
        return "GPUs inside a node that reach each other beyond NVLink (NCCL's graph typeIntra past NVB)"
    rule = consts.ll128_default
    if rule is None:
        return None
    sms = [int(topo.device(g).spec.get("sm", 0)) for g in gpus]
    why = rule.sm_refusal((min(sms), max(sms)), opts.version)
    if why is not None:
        return why
    inter = type_inter(topo, hops, nnodes, opts, consts)
    limit = rule.max_inter_path_sm90 if min(sms) >= 90 else rule.max_inter_path
    if inter is not None and NCCL_PATHS.index(inter) > NCCL_PATHS.index(limit):
        return f"GPU-NIC paths through {inter} (NCCL's graph typeInter past {limit})"
    return None


def _unreleased(opts: NcclOptions, consts: NcclConstants) -> dict[str, str]:
    """Why each algorithm the run's NCCL release lacks is not offered (``algorithms_since`` in nccl.yaml), e.g.
    ``{"NVLSTree": "NVLSTree came with NCCL 2.18 (backends.nccl.version is 2.17.1)", ...}``."""
    version = ".".join(map(str, opts.version or ()))
    named = {"P2P": "send/receive (ncclSend, ncclRecv)"}
    return {
        a: f"{named.get(a, a)} came with NCCL {since[0]}.{since[1]} (backends.nccl.version is {version})"
        for a, since in consts.unreleased(opts.version).items()
    }


def gdr_flush(sm: int, opts: NcclOptions) -> bool:
    """Whether NCCL flushes a GPUDirect RDMA receive (an extra read through the NIC before the GPU may use Simple
    data): always before Hopper (compute capability < 9.0); on Hopper and later only with NCCL_NET_FORCE_FLUSH=1,
    whose default is 1 up to NCCL 2.18 and 0 from 2.19 (src/graph/paths.cc ncclTopoNeedFlush and
    src/transport/net.cc, v2.18.5-1 and v2.19.3-1; the same rule in v2.27.7-1, which also flushes on C2C hosts, not
    modelled).

    >>> from collsim.nccl_env import NcclOptions
    >>> gdr_flush(80, NcclOptions()), gdr_flush(90, NcclOptions()), gdr_flush(90, NcclOptions(version=(2, 18, 5)))
    (True, False, True)
    >>> old = NcclOptions(version=(2, 18, 5), net_force_flush=False)
    >>> gdr_flush(90, NcclOptions(net_force_flush=True)), gdr_flush(90, old)
    (True, False)
    """
    if sm < 90:
        return True
    if opts.net_force_flush is not None:
        return opts.net_force_flush
    return opts.before((2, 19))


def _tuner(
    topo: Topology, opts: NcclOptions, consts: NcclConstants
) -> tuple[ActiveTuner | ExampleTuner | None, str | None]:
    """The tuner plugin NCCL loads here and a note (:func:`~collsim.backends.nccl.plugin_tuner.resolve_tuner`):
    the network plugin's bundled tuner from ``consts.tuner_from_net_plugin_since`` on (the current NCCL when the
    version is unset), or the one NCCL_TUNER_PLUGIN names: NVIDIA's example tuner
    (:func:`~collsim.backends.nccl.plugin_tuner.example_tuner`) where its library name says so."""
    ex = consts.example_tuner
    if opts.tuner_plugin and ex is not None and ex.env_word in opts.tuner_plugin.rsplit("/", 1)[-1].lower():
        return example_tuner(ex, opts.version, opts.tuner_config_file, opts.tuner_config_base)
    net_plugins = sorted({str(p) for d in topo.nics() if (p := d.spec.get("nccl_net_plugin"))})
    return resolve_tuner(
        consts.tuner_plugins,
        net_plugins,
        topo.instance_type,
        opts.tuner_plugin,
        opts.ofi_tuner_type,
        not opts.before(consts.tuner_from_net_plugin_since),
        topologies_dir() / "software",
    )


def cpu_vendor(topo: Topology, gpus: Sequence[str]) -> str:
    """The CPU vendor NCCL's tuner sees for ranks ``gpus``: their host CPUs' preset ``vendor`` when they agree,
    ``"mixed"`` when they differ (init.cc: a rank whose allgathered cpuVendor differs from its own sets MIXED);
    ``"arm"`` is an Arm host (NCCL's cpuArch ARM: Grace), the others x86."""
    vendors = {str(topo.host_cpu(g).spec.get("vendor", "intel")) for g in gpus}
    return vendors.pop() if len(vendors) == 1 else "mixed"
