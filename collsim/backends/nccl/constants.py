"""NCCL's constants, typed: what ``topologies/software/nccl.yaml`` holds, in SI units.

Every number NCCL's tuner, enqueue and protocol code uses lives in that YAML file with the NCCL source file it
comes from; this module only converts units (us to s, GB/s to bytes/s) and checks that every field is there. This
layer does not read YAML: the API reads the file and passes the mapping to :meth:`NcclConstants.from_mapping`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from collsim.backends.common import BackendError
from collsim.vocab import COLLECTIVES

__all__ = [
    "C2cReleases", "ChunkRules", "ExampleTunerReleases", "HostPathConstants", "Ll128Default", "NcclConstants",
    "NvlsChunkHistory", "NvlsTuneRule", "NvlsWarps", "P2pConstants", "ProtocolConstants", "ThreadLimits",
    "ring_simple_threads",
]  # fmt: skip

_US = 1e-6  # microseconds to seconds
_GBPS = 1e9  # GB/s (GB = 1e9 bytes) to bytes/s

#: (times, floor): while ``bytes < times x concurrency x chunk`` and ``chunk > floor``, the chunk drops to the floor
#: (or halves towards it); see :mod:`collsim.backends.nccl.chunking`.
Steps = tuple[tuple[float, int], ...]


@dataclass(frozen=True)
class ExampleTunerReleases:
    """NVIDIA's example tuner plugin by NCCL release (``topologies/software/nccl.yaml`` ``example_tuner``): the word
    NCCL_TUNER_PLUGIN names it by, the first version (major, minor, patch) of the plugin, of its one-channel
    default, of its CSV and of its edits to NCCL's tuner constants, and the CSV's default file name."""

    env_word: str
    since: tuple[int, int, int]
    one_channel_since: tuple[int, int, int]
    csv_since: tuple[int, int, int]
    edits_constants_since: tuple[int, int, int]
    default_config_file: str
    #: its edits of NCCL's tuner constants: hwLat entries (seconds) by hw, algorithm, protocol, and rows of
    #: :data:`TUNER_TABLES` (bytes/s) by table, architecture, node-count index
    hw_latency_edits: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)
    table_edits: Mapping[str, Mapping[str, Mapping[int, float]]] = field(default_factory=dict)


@dataclass(frozen=True)
class ProtocolConstants:
    """One NCCL protocol: buffer (wire bytes), data fraction of the wire, chunk and slice in steps, the per-thread
    threshold of the channel-shrink rule, what the tuner multiplies the network latency by, and (LL, LL128) the data
    bytes a receiver forwards at once."""

    name: str
    buffer_bytes: int
    data_per_wire: float
    chunk_steps: int
    slice_steps: int
    threshold_per_thread: int
    net_latency_factor: float = 1.0  # tuning.cc: Simple pays the network's latency twice
    ring_net_overhead_factor: float = 1.0  # tuning.cc: a multi-node ring's intra step >= netOverhead x this
    #: data bytes a receiver forwards at once, once all of them are in (LL 8: a thread's 16-byte line; LL128 1,920:
    #: a warp's slice of 16 lines, prims_ll128.h); None for Simple (it posts whole slices)
    forward_grain: int | None = None
    #: collectives whose chunk and slice differ from :attr:`chunk_steps` and :attr:`slice_steps`: (collective,
    #: chunk steps, slice steps) (Simple: broadcast and reduce, one step each, collectives.h)
    steps_by_collective: tuple[tuple[str, int, int], ...] = ()

    def steps_for(self, collective: str) -> tuple[int, int]:
        """Chunk and slice, in steps, of ``collective`` (what collectives.cc passes as ncclInfo's chunkSteps and
        sliceSteps; enqueue.cc's calcCollChunking uses them for Ring/Simple only).

        >>> p = ProtocolConstants("Simple", 4 << 20, 1.0, 4, 2, 64, steps_by_collective=(("broadcast", 1, 1),))
        >>> p.steps_for("allreduce"), p.steps_for("broadcast")
        ((4, 2), (1, 1))
        """
        for name, chunk, slice_ in self.steps_by_collective:
            if name == collective:
                return chunk, slice_
        return self.chunk_steps, self.slice_steps


@dataclass(frozen=True)
class ChunkRules:
    """enqueue.cc's chunk-size rules per algorithm (bytes); see :mod:`collsim.backends.nccl.chunking`."""

    tree_simple: Steps
    tree_ll128: Steps
    tree_ll128_steps_per_gpu: float
    nvls: Steps
    nvls_tree: Steps
    nvls_tree_max_chunk: int
    nvls_tree_max_chunk_from_nodes: int


@dataclass(frozen=True)
class ThreadLimits:
    """Threads per channel (one CTA) NCCL gives each algorithm and protocol, ``comm->maxThreads`` (tuning.cc
    ``ncclTopoTuneModel``; device.h), and the bounds NCCL_NTHREADS and NCCL_LL128_NTHREADS must keep.

    Ring/Simple takes :attr:`HostPathConstants.simple_threads` (NCCL_SIMPLE_MAX_NTHREADS), or ``simple_threads_pci``
    where the ring graph carries at most PCI_BW; Tree/Simple the former; LL ``ll``; LL128 ``ll128``; NVLS,
    NVLSTree and CollNet ``all`` (NCCL_MAX_NTHREADS, no variable changes it); PAT none (tuning.cc never sets it).

    Attributes
    ----------
    warp : int
        WARP_SIZE: a set thread count must be a multiple of it.
    least : int
        NCCL_NTHREADS' minimum (2 x WARP_SIZE).
    ll, ll128, all : int
        NCCL_LL_MAX_NTHREADS, NCCL_LL128_MAX_NTHREADS (NCCL_LL128_NTHREADS' minimum is a quarter of it),
        NCCL_MAX_NTHREADS.
    collnet_threshold : int
        CollNet's bytes per thread in the channel shrink (tuning.cc threadThresholds[COLLNET_*][SIMPLE]).
    """

    warp: int
    least: int
    ll: int
    ll128: int
    all: int
    collnet_threshold: int

    def resolve(self, name: str, value: int | None, lo: int, hi: int, default: int) -> tuple[int, str | None]:
        """NCCL's ``getNthreads``: ``value`` (None or <= 0: unset) checked against the warp size and [lo, hi].
        Returns the thread count NCCL uses and, when it corrected a set value, the line it logs (as a note).

        >>> t = ThreadLimits(32, 64, 512, 640, 640, 512)
        >>> t.resolve("NCCL_NTHREADS", None, 64, 512, 512), t.resolve("NCCL_NTHREADS", 256, 64, 512, 512)
        ((512, None), (256, None))
        >>> t.resolve("NCCL_NTHREADS", 100, 64, 512, 512)[0], t.resolve("NCCL_NTHREADS", 32, 64, 512, 256)[0]
        (512, 64)
        """
        if value is None or value <= 0:
            return default, None
        if value % self.warp:
            return hi, f"{name}={value} is not a multiple of {self.warp}: NCCL uses {hi} threads"
        if value > hi:
            return hi, f"{name}={value} is above its maximum: NCCL uses {hi} threads"
        if value < lo:
            return lo, f"{name}={value} is below its minimum: NCCL uses {lo} threads"
        return value, None


@dataclass(frozen=True)
class HostPathConstants:
    """What NCCL's host-memory paths (SHM inside a node, sockets and staged RDMA across nodes) are made of.

    Only NCCL's own numbers live here (threads, unroll, bytes per load, copies its transports make, socket
    threads); the hardware's (PCIe rates and latencies, host memory bandwidth, TCP throughput per core) are in the
    topology presets. See ``docs/host-paths.md``.

    Attributes
    ----------
    shm_buffer_on_receiver : bool
        shm.cc NCCL_SHM_LOCALITY default (2): the SHM buffer lives in the receiver's host memory.
    shm_memory_traffic : float
        Bytes of host-memory traffic per byte over SHM: the sender's SMs write it, the receiver's SMs read it.
    simple_threads, simple_threads_pci : int
        Threads of a Ring/Simple channel: tuning.cc uses ``simple_threads_pci`` when the ring's bandwidth is at
        most ``pci_bw``, else ``simple_threads`` (NCCL_SIMPLE_MAX_NTHREADS).
    pci_bw : float
        topo.h PCI_BW in bytes/s (NCCL's Gen3 x16 figure).
    coll_unroll : tuple of (int, int)
        device.h ncclCollUnroll as (from compute capability x 10, loads per thread in flight), ascending.
    load_bytes : int
        Bytes one thread loads per instruction in Simple's copy loop (one 16-byte pack).
    staged_memory_traffic : float
        Bytes of host-memory traffic per byte on each host of a staged RDMA hop (GPU write + NIC DMA read, or NIC
        DMA write + GPU read).
    socket_memory_traffic : float
        The same on each host of a socket hop: the GPU's write or read, the kernel's copy (read + write) and the
        NIC's DMA.
    socket_default_threads : int
        net_socket.cc's default NCCL_SOCKET_NTHREADS off AWS and GCP NICs: 0, the proxy thread moves the data.
    socket_vendor_defaults : tuple of (str, int, int)
        net_socket.cc's defaults by the NIC's PCI vendor id: (vendor, threads, sockets per thread).
    socket_max_threads, socket_max_sockets : int
        net_socket.cc MAX_THREADS and MAX_SOCKETS: NCCL clamps the threads and the sockets per connection to them.
    """

    shm_buffer_on_receiver: bool
    shm_memory_traffic: float
    simple_threads: int
    simple_threads_pci: int
    pci_bw: float
    coll_unroll: tuple[tuple[int, int], ...]
    load_bytes: int
    staged_memory_traffic: float
    socket_memory_traffic: float
    socket_default_threads: int
    socket_vendor_defaults: tuple[tuple[str, int, int], ...] = ()
    socket_max_threads: int = 16
    socket_max_sockets: int = 64

    def socket_layout(self, vendor: str | None, nthreads: int | None, nsocks: int | None) -> tuple[int, int]:
        """NCCL's (helper threads, sockets per thread) for a socket connection whose listening NIC has PCI vendor
        ``vendor``, given NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD as set (None: unset), as
        ``ncclNetSocketGetNsockNthread`` picks them: the unset ones from the vendor's defaults, threads clamped to
        MAX_THREADS, sockets per thread cut so that the connection has at most MAX_SOCKETS.

        >>> hp = HostPathConstants(True, 2.0, 512, 256, 12e9, ((0, 4),), 16, 2.0, 4.0, 0, (("0x1d0f", 2, 8),))
        >>> hp.socket_layout("0x1d0f", None, None), hp.socket_layout(None, None, None), hp.socket_layout(None, 4, 32)
        ((2, 8), (0, 1), (4, 16))
        """
        auto_nt, auto_ns = self.socket_default_threads, 1
        for v, nt, ns in self.socket_vendor_defaults:
            if v == vendor:
                auto_nt, auto_ns = nt, ns
        threads = min(auto_nt if nthreads is None else nthreads, self.socket_max_threads)
        per_thread = auto_ns if nsocks is None else nsocks
        if threads > 0 and threads * per_thread > self.socket_max_sockets:
            per_thread = self.socket_max_sockets // threads
        return max(0, threads), max(1, per_thread)

    def unroll(self, sm: int) -> int:
        """Loads per thread in flight on a GPU of compute capability ``sm`` (x 10, e.g. 75, 89, 120).

        >>> hp = HostPathConstants(True, 2.0, 512, 256, 12e9, ((0, 4), (80, 8), (120, 6), (130, 8)), 16, 2.0, 4.0, 0)
        >>> [hp.unroll(sm) for sm in (75, 80, 89, 90, 100, 120, 121)]
        [4, 8, 8, 8, 8, 6, 6]
        """
        return next(u for lo, u in reversed(self.coll_unroll) if sm >= lo)

    def simple_channel_threads(self, ring_bw: float) -> int:
        """Threads of a Ring/Simple channel on a ring that carries ``ring_bw`` bytes/s (tuning.cc)."""
        return self.simple_threads_pci if ring_bw <= self.pci_bw else self.simple_threads


@dataclass(frozen=True)
class P2pConstants:
    """NCCL's point-to-point schedule (``p2p`` in nccl.yaml): chunks, parts per peer, LL threshold, channels.

    Attributes
    ----------
    chunk_bytes : mapping of str to int
        NCCL_P2P_NET_CHUNKSIZE, NCCL_P2P_PCI_CHUNKSIZE, NCCL_P2P_NVL_CHUNKSIZE defaults (``net``, ``pci``, ``nvl``),
        bytes.
    net_chunk_arm_blackwell_factor : int
        The net chunk's factor for Blackwell GPUs on ARM hosts.
    part_min_divisor, part_max_factor : tuple of (int, int)
        (one node, several nodes): a part is at least chunk / divisor and at most chunk x factor bytes.
    ll_threshold : int
        NCCL_P2P_LL_THRESHOLD default, bytes per part.
    ll_threshold_per_peer_channels : tuple of ((int, int), (int, int))
        The releases [since, until) that compare a peer's bytes with p2pnChannelsPerPeer x threshold.
    net_chunk_divisors : tuple of (int, int)
        A Simple network chunk's divisor below one step and below 8 steps of the peer's bytes.
    works_per_batch : int
        Sends and receives one channel runs at once (NCCL_MAX_DEV_WORK_P2P_PER_BATCH).
    max_channels : tuple of ((int, int), int, int)
        (since release, MAXCHANNELS from it, MAXCHANNELS before it).
    nvlink_bw : tuple of (int, int, float)
        (lowest sm, highest sm, one NVLink's bandwidth in bytes/s), first match (ncclTopoNVLinkBw).
    per_channel_net_bw : float
        NCCL_P2P_PER_CHANNEL_NET_BW default, bytes/s.
    net_channels_by_bw_since : tuple of (int, int)
        The release from which a network peer's channels follow the NICs' bandwidth.
    """

    chunk_bytes: Mapping[str, int]
    net_chunk_arm_blackwell_factor: int
    part_min_divisor: tuple[int, int]
    part_max_factor: tuple[int, int]
    ll_threshold: int
    ll_threshold_per_peer_channels: tuple[tuple[int, int], tuple[int, int]]
    net_chunk_divisors: tuple[int, int]
    works_per_batch: int
    max_channels: tuple[tuple[int, int], int, int]
    nvlink_bw: tuple[tuple[int, int, float], ...]
    per_channel_net_bw: float
    net_channels_by_bw_since: tuple[int, int]

    def nvlink_link_bw(self, sm: int) -> float:
        """One NVLink's bandwidth (bytes/s) as NCCL rates it for a GPU of compute capability ``sm`` (x 10).

        >>> rows = ((100, 999, 40.1e9), (90, 99, 20.6e9), (86, 86, 12e9), (0, 89, 20e9))
        >>> p = P2pConstants({}, 1, (8, 2), (32, 1), 16384, ((2, 22), (2, 29)), (4, 2), 8, ((2, 25), 64, 32), rows,
        ...                  14e9, (2, 29))
        >>> [p.nvlink_link_bw(sm) / 1e9 for sm in (80, 86, 89, 90, 100)]
        [20.0, 12.0, 20.0, 20.6, 40.1]
        """
        return next(bw for lo, hi, bw in self.nvlink_bw if lo <= sm <= hi)

@dataclass(frozen=True)
class NvlsTuneRule:
    """One rule of NCCL's NVLS tuning for Blackwell across nodes (``nccl.yaml`` ``nvls_sm100_tuning``): conditions
    (None: any) on the node count, the GPUs' network bandwidth (GB/s, NCCL's figures), the GPUs per node and the NVLS
    graph's GPU-NIC path type, and what it sets (None: NCCL's default)."""

    nodes: int | None = None
    nic_bw_min: float | None = None
    nic_bw_below: float | None = None
    ppn_min: int | None = None
    ppn_max: int | None = None
    max_path: str | None = None
    channels: int | None = None
    chunk: int | None = None  # bytes
    tree_max: int | None = None  # bytes

    def matches(self, nodes: int, nic_bw: float, ppn: int, path_rank: int, rank_of: Callable[[str], int]) -> bool:
        """Whether a system of ``nodes`` nodes, ``nic_bw`` GB/s, ``ppn`` GPUs per node and a GPU-NIC path of rank
        ``path_rank`` (``rank_of`` gives a path type's) meets every condition."""
        return (
            (self.nodes is None or nodes == self.nodes)
            and (self.nic_bw_min is None or nic_bw >= self.nic_bw_min)
            and (self.nic_bw_below is None or nic_bw < self.nic_bw_below)
            and (self.ppn_min is None or ppn >= self.ppn_min)
            and (self.ppn_max is None or ppn <= self.ppn_max)
            and (self.max_path is None or path_rank <= rank_of(self.max_path))
        )


@dataclass(frozen=True)
class Ll128Default:
    """When NCCL turns LL128 on by default (``nccl.yaml`` ``ll128_default``; tuning.cc): the worst path across nodes
    its graphs may take (NCCL's path names), that from compute capability 9.0, and the compute capabilities (x 10):
    every one from ``min_sm`` from release ``min_sm_since`` on, before it those of ``sm_since``, each from its
    release (major, minor)."""

    max_inter_path: str
    max_inter_path_sm90: str
    min_sm: int
    min_sm_since: tuple[int, int]
    sm_since: Mapping[int, tuple[int, int]]

    def sm_refusal(self, sms: tuple[int, int], version: tuple[int, ...] | None) -> str | None:
        """Why LL128 stays off for GPUs of compute capabilities ``sms`` = (lowest, highest), x 10, under NCCL release
        ``version`` (None: the latest), or None.

        >>> rule = Ll128Default("PXB", "PXN", 70, (2, 27), {70: (2, 0), 80: (2, 0), 100: (2, 25)})
        >>> rule.sm_refusal((86, 86), (2, 26, 2)), rule.sm_refusal((86, 86), None), rule.sm_refusal((61, 61), None)
        ('compute capability 8.6 before NCCL 2.27', None, 'compute capability 6.1')
        >>> rule.sm_refusal((100, 100), (2, 24, 3)), rule.sm_refusal((100, 100), (2, 25, 1))
        ('compute capability 10.0 before NCCL 2.25', None)
        """
        low, high = sms
        if low < self.min_sm:
            return f"compute capability {low / 10:.1f}"
        if version is None or tuple(version[:2]) >= self.min_sm_since:
            return None
        since = self.sm_since.get(low)
        if low != high:  # before 2.27 NCCL wants every GPU of one compute capability
            major, minor = self.min_sm_since
            return f"compute capabilities {low / 10:.1f} and {high / 10:.1f} mixed before NCCL {major}.{minor}"
        if since is None or tuple(version[:2]) < since:
            major, minor = since or self.min_sm_since
            return f"compute capability {low / 10:.1f} before NCCL {major}.{minor}"
        return None


def _from(version: tuple[int, ...] | None, since: tuple[int, int]) -> bool:
    """Whether release ``version`` (None: the latest) is ``since`` (major, minor) or later."""
    return version is None or tuple(version[:2]) >= since


@dataclass(frozen=True)
class C2cReleases:
    """How NCCL reads a GPU-NIC path through NVLink-C2C (a GH200 or GB200 GPU, the NIC on its Grace's PCIe;
    ``c2c`` in ``nccl.yaml``, paths.cc by release): NCCL_NET_GDR_C2C from ``gdr_param_since`` (default on from
    ``gdr_default_since``), the P2C path class from ``p2c_since`` (before it such a path is PHB), NCCL_PXN_C2C from
    ``pxn_param_since`` (default on from ``pxn_default_since``); each (major, minor).

    >>> rel = C2cReleases()
    >>> [rel.gdr(v, None) for v in ((2, 25, 1), (2, 26, 2), (2, 27, 3), None)], rel.gdr((2, 26, 2), True)
    ([False, False, True, True], True)
    >>> rel.gdr((2, 25, 1), True), rel.gdr(None, False), rel.p2c((2, 26, 2)), rel.pxn((2, 27, 3), None)
    (False, False, False, False)
    """

    gdr_param_since: tuple[int, int] = (2, 26)
    gdr_default_since: tuple[int, int] = (2, 27)
    p2c_since: tuple[int, int] = (2, 27)
    pxn_param_since: tuple[int, int] = (2, 27)
    pxn_default_since: tuple[int, int] = (2, 28)

    def gdr(self, version: tuple[int, ...] | None, setting: bool | None) -> bool:
        """Whether GPUDirect RDMA runs over a C2C-then-PCIe path under NCCL_NET_GDR_C2C ``setting`` (None:
        unset)."""
        if setting is not None and _from(version, self.gdr_param_since):
            return setting
        return _from(version, self.gdr_default_since)

    def p2c(self, version: tuple[int, ...] | None) -> bool:
        """Whether the release has the P2C path class (earlier: such a path is PHB)."""
        return _from(version, self.p2c_since)

    def pxn(self, version: tuple[int, ...] | None, setting: bool | None = None) -> bool:
        """Whether PXN may relay through a GPU whose path to the NIC is P2C (NCCL_PXN_C2C ``setting``)."""
        if setting is not None and _from(version, self.pxn_param_since):
            return setting
        return _from(version, self.pxn_default_since)


@dataclass(frozen=True)
class NvlsWarps:
    """How the NVLS and NVLSTree allreduce kernels split one channel's warps into groups (``nccl.yaml``
    ``nvls_warps``; src/device/all_reduce.h, without registered buffers).

    Attributes
    ----------
    total : int
        Warps of a channel: NCCL_MAX_NTHREADS / WARP_SIZE (640 / 32).
    reduce, reduce_few_ranks, few_ranks : int
        The reduce group's warps: ``reduce_few_ranks`` when the communicator has at most ``few_ranks`` ranks, else
        ``reduce``.
    tree_reduce, tree_bcast : int
        NVLSTree with a parent in the tree: the reduce group's warps and the broadcast group's (0 otherwise).
    """

    total: int
    reduce: int
    reduce_few_ranks: int
    few_ranks: int
    tree_reduce: int
    tree_bcast: int

    def copy_workers(self, nranks: int, tree_parent: bool) -> tuple[int, int]:
        """Threads copying in the scatter and the gather group of a channel: (scatter, gather).

        ``nranks``: the communicator's ranks; ``tree_parent``: an NVLSTree rank whose node has a parent. The
        scatter group sends, so one of its warps stays out of the copy loop (prims_simple.h ``nworkers``).

        >>> w = NvlsWarps(20, 5, 7, 6, 5, 4)
        >>> w.copy_workers(8, False), w.copy_workers(16, True), w.copy_workers(16, False), w.copy_workers(4, False)
        ((224, 224), (160, 160), (224, 224), (192, 192))
        """
        reduce = self.reduce_few_ranks if nranks <= self.few_ranks else self.reduce
        if tree_parent:
            reduce = self.tree_reduce
        bcast = self.tree_bcast if tree_parent else 0
        scatter = (self.total - reduce - bcast + 1) >> 1
        gather = (self.total - reduce - bcast) >> 1
        warp = 32
        return (scatter * warp - (warp if scatter >= 3 else 0), gather * warp)


LatencyTable = Mapping[str, Mapping[str, float]]  # algorithm -> protocol -> seconds
HwLatencyTable = Mapping[str, LatencyTable]  # NVLINK / PCI / NET -> algorithm -> protocol -> seconds


#: the per-architecture tuner tables a :class:`TunerChange` may change (fields of :class:`NcclConstants`)
TUNER_TABLES = (
    "ll_max_bw", "per_channel_max_ring_ll128_bw", "per_channel_max_tree_ll128_bw", "per_channel_max_tree_bw",
)  # fmt: skip


@dataclass(frozen=True)
class NvlsChunkHistory:
    """Where NVLS's and NVLSTree's chunk starts, by NCCL release (``nvls_chunk_history`` in nccl.yaml; each the first
    release, (major, minor, patch), with the change): NCCL_NVLS_CHUNKSIZE from ``nvls_chunksize_since`` (before,
    the Simple step, NVLS capped at 128 KiB); NCCL_NVLSTREE_MAX_CHUNKSIZE read from ``tree_max_variable_since``;
    NVLSTree capped at 64 KiB from 4 nodes on from ``tree_cap_since`` (before, no cap)."""

    nvls_chunksize_since: tuple[int, int, int]
    tree_max_variable_since: tuple[int, int, int]
    tree_cap_since: tuple[int, int, int]


@dataclass(frozen=True)
class RingSearch:
    """NCCL's network graph search and its copies (``ring_search`` in nccl.yaml): the speed ladders by the GPUs'
    compute capability (GB/s, best first) and by release, and the rules that double the channels."""

    #: (least compute capability x 10, its ladder), highest first: the latest release's
    speeds: tuple[tuple[int, tuple[float, ...]], ...]
    dup_min_bw: float
    dup_skip: tuple[int, float, int]  # sm above, bandwidth below (GB/s), channels above
    compute_copy: tuple[int, float, int, tuple[int, int]]  # sm at least, bandwidth above, channels below, any sm since
    #: earlier ladders: (the first release without it (major, minor, patch), least compute capability x 10, its
    #: ladder), oldest release first; a release before ``until`` reads the first entry it is before
    history: tuple[tuple[tuple[int, int, int], int, tuple[float, ...]], ...] = ()

    def ladder(self, sm: int, version: tuple[int, ...] | None) -> tuple[float, ...]:
        """The speeds NCCL's search tries on GPUs of compute capability ``sm`` in release ``version`` (None: the
        latest).

        >>> rs = RingSearch(((100, (96.0, 48.0)), (0, (48.0, 24.0))), 25.0, (80, 50.0, 4), (90, 45.0, 16, (2, 26)),
        ...                 (((2, 27, 6), 100, (48.0, 24.0)),))
        >>> rs.ladder(100, (2, 26, 2)), rs.ladder(100, (2, 27, 6)), rs.ladder(100, None), rs.ladder(90, (2, 26, 2))
        ((48.0, 24.0), (96.0, 48.0), (96.0, 48.0), (48.0, 24.0))
        """
        if version is not None:
            v = tuple(version[:3]) + (0,) * (3 - len(version[:3]))
            for until, least, ladder in self.history:
                if sm >= least and v < until:
                    return ladder
        return next(sp for least, sp in self.speeds if sm >= least)

    def search(self, nics: int, best_bw: float, sm: int, version: tuple[int, ...] | None) -> tuple[int, float]:
        """The search's channels and their bandwidth (GB/s) after ncclTopoDupChannels: a channel per NIC at the
        ladder's first speed at most ``best_bw``, doubled (the speed halved) where that speed is at least
        ``dup_min_bw``, but not on GPUs newer than sm80 below 50 GB/s with more than 4 channels. The channels are the
        graph's ``nChannels``, which tuning.cc prices with; connect.cc's copies (:meth:`channels`) are not.

        >>> rs = RingSearch(((90, (48.0, 24.0)), (0, (48.0, 24.0, 12.0))), 25.0, (80, 50.0, 4), (90, 45.0, 16, (2, 26)))
        >>> rs.search(8, 50.0, 90, None), rs.search(8, 25.0, 80, None), rs.search(4, 50.0, 80, None)
        ((8, 48.0), (8, 24.0), (8, 24.0))
        """
        ladder = self.ladder(sm, version)
        speed = next((v for v in ladder if v <= best_bw), ladder[-1])
        search = max(1, nics)
        skip_sm, skip_bw, skip_channels = self.dup_skip
        if speed >= self.dup_min_bw and not (sm > skip_sm and speed < skip_bw and search > skip_channels):
            search, speed = 2 * search, speed / 2
        return search, speed

    def channels(self, nics: int, best_bw: float, sm: int, version: tuple[int, ...] | None) -> int:
        """NCCL's ring channels across nodes for ``nics`` NICs whose best GPU-NIC path carries ``best_bw`` GB/s.

        The search's channels (:meth:`search`); connect.cc copies them once, and on sm90 and newer once more while
        the speed is above 45 GB/s and the channels fewer than 16.

        >>> rs = RingSearch(((100, (96.0, 48.0, 24.0)), (90, (48.0, 24.0)), (0, (48.0, 24.0, 12.0))), 25.0,
        ...                 (80, 50.0, 4), (90, 45.0, 16, (2, 26)))
        >>> [rs.channels(n, 50.0, 90, None) for n in (1, 2, 4, 8)]  # 400G NICs on Hopper
        [4, 8, 16, 16]
        >>> [rs.channels(8, bw, 80, None) for bw in (25.0, 12.5)], rs.channels(8, 100.0, 100, None)  # 200G, 100G; 800G
        ([16, 16], 32)
        """
        search, speed = self.search(nics, best_bw, sm, version)
        nch = 2 * search
        least_sm, bw_above, below, any_since = self.compute_copy
        newer = version is None or tuple(version[:2]) >= any_since
        if (sm >= least_sm if newer else sm == least_sm) and speed > bw_above and nch < below:
            nch *= 2
        return nch

    def tree_bw(self, nics: int, best_bw: float, nvlink_bw: float, sm: int, version: tuple[int, ...] | None) -> float:
        """What NCCL's tree graph carries on two nodes in its own figures (GB/s): its channels x bwIntra, the number
        tuning.cc prices a tree with on at most two nodes (``nNodes <= 2 ? bwIntra``).

        The search's channels and speed (:meth:`search`, the ring's), then search.cc's second pass raises bwIntra
        rung by rung up the release's ladder ("increase bwIntra for trees (2 nodes or collnet)") while it is below
        twice bwInter and every channel still fits on a GPU's NVLinks (``nvlink_bw`` GB/s per direction, NCCL's
        figure): where the NIC's speed is the ladder's top, there is no rung to climb.

        >>> rs = RingSearch(((100, (96.0, 86.0, 80.0, 48.0, 24.0)), (90, (48.0, 24.0)),
        ...                  (0, (48.0, 30.0, 28.0, 24.0, 12.0))), 25.0, (80, 50.0, 4), (90, 45.0, 16, (2, 26)),
        ...                 (((2, 27, 6), 100, (48.0, 24.0)),))
        >>> rs.tree_bw(8, 25.0, 240.0, 80, None)  # DGX A100, 8 x HDR: 24 -> 28 -> 30 (8 x 48 > 240)
        240.0
        >>> rs.tree_bw(8, 48.0, 370.8, 90, None), rs.tree_bw(8, 48.0, 721.8, 100, (2, 26, 2))  # 8 x NDR: no rung
        (384.0, 384.0)
        >>> rs.tree_bw(8, 48.0, 721.8, 100, None)  # 2.27.6 on, Blackwell: 80, 86 (8 x 96 > 721.8)
        688.0
        """
        ladder = self.ladder(sm, version)
        search, speed = self.search(nics, best_bw, sm, version)
        i = next((k for k, v in enumerate(ladder) if v <= speed), len(ladder) - 1)
        bw = ladder[i]
        while bw < 2 * speed and i > 0 and search * ladder[i - 1] <= nvlink_bw + 1e-9:
            i -= 1
            bw = ladder[i]
        return search * bw


@dataclass(frozen=True)
class TunerChange:
    """What NCCL's tuner constants were before release ``until`` ((major, minor, patch)): the ``base_latency`` and
    ``hw_latency`` entries (seconds) and the per-architecture rows of :data:`TUNER_TABLES` (bytes/s, one per node
    count 1, 2, 3+) that differ from the release after it."""

    until: tuple[int, int, int]
    base_latency: LatencyTable
    hw_latency: HwLatencyTable
    tables: Mapping[str, Mapping[str, tuple[float, float, float]]] = field(default_factory=dict)


@dataclass(frozen=True)
class NcclConstants:
    """NCCL's tuning and protocol constants in SI units (seconds, bytes/s, bytes).

    The tuner tables (``ll_max_bw``, ``per_channel_max_*``, ``ring_plateau_latency_factor``) are keyed by GPU
    architecture; :meth:`check_arch` says which architectures they know. ``nvls_efficiency``'s keys are the
    architectures that can run NVLS (tuning.cc defines it from sm90 on).
    """

    base_latency: Mapping[str, Mapping[str, float]]
    hw_latency: Mapping[str, Mapping[str, Mapping[str, float]]]
    ll_max_bw: Mapping[str, tuple[float, float, float]]
    #: the ``ll_max_bw`` row NCCL reads across nodes, by CPU vendor (``"intel"``: every vendor but AMD; ``"amd"``: AMD
    #: or mixed)
    ll_max_bw_multi_node_rows: Mapping[str, str]
    per_channel_max_ring_ll128_bw: Mapping[str, tuple[float, float, float]]
    ll128_tuner_efficiency: float
    steps: int
    protocols: Mapping[str, ProtocolConstants]
    threads: ThreadLimits
    max_channels: int
    max_channels_from: tuple[tuple[int, int], int]
    default_p2p_level: str
    default_gdr_level: str
    host_paths: HostPathConstants
    per_channel_max_tree_bw: Mapping[str, tuple[float, float, float]]
    per_channel_max_tree_ll128_bw: Mapping[str, tuple[float, float, float]]
    per_channel_max_nvls_tree_bw: Mapping[str, tuple[float, float, float]]
    nvls_efficiency: Mapping[str, float]
    nvls_channels: int
    nvls_ctas: Mapping[str, tuple[int, int]]
    nvls_ctas_one_node_since: tuple[int, int]
    nvls_chunk_bytes: int
    nvls_split_since: tuple[int, int]
    nvls_ring_copy: tuple[tuple[int, int], tuple[int, int]]
    nvls_chunk_history: NvlsChunkHistory
    nvls_warps: NvlsWarps
    tree_correction: Mapping[str, tuple[float, ...]]
    tree_allreduce_efficiency: float
    tree_direction_share: float
    ring_ll_bw_fraction: float = 0.5
    tree_ll_bw_divisor: float = 3.8
    tree_ll128_fraction: tuple[float, float] = (7.0 / 9.0, 120.0 / 128.0)  # (one node, several nodes)
    pat_bw_factor: float = 0.75
    #: NCCL's PAT latency: log2(nodes) x (the network step / ``pat_log_divisor``) + ranks x ``pat_per_rank`` (seconds)
    pat_log_divisor: float = 3.5
    pat_per_rank: float = 2.8e-6
    #: NCCL's CollNetDirect latency: seconds of arity serialization per GPU beyond the first, twice (tuning.cc)
    collnet_direct_arity: float = 0.4e-6
    chunk_rules: ChunkRules | None = None
    ring_plateau_latency_factor: Mapping[str, float] = field(default_factory=dict)  # by GPU arch; 1 when absent
    #: NCCL's cell scheduling of Ring and Tree channels (:func:`~collsim.backends.nccl.chunking.cell_channels`):
    #: first version (None: never), MinTrafficPerChannel bytes, LL's cell factor and its first version
    cells_since: tuple[int, int] | None = None
    min_traffic_per_channel: int = 32768
    cells_ll_factor: int = 1
    cells_ll_factor_since: tuple[int, int] = (2, 26)
    #: tuner plugins collsim models: network plugin name -> (file under topologies/software/, the word an
    #: NCCL_TUNER_PLUGIN value names it by); the first NCCL version that loads the network plugin's bundled tuner
    tuner_plugins: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    tuner_from_net_plugin_since: tuple[int, int] = (2, 21)
    #: NVIDIA's example tuner plugin by release (nccl.yaml ``example_tuner``): the word NCCL_TUNER_PLUGIN names it
    #: by, and the first (major, minor, patch) of: the plugin at all, its one-channel default, its CSV, its edits of
    #: NCCL's constants; the CSV's default file name
    example_tuner: ExampleTunerReleases | None = None
    #: NCCL's tuner constants of earlier releases, latest first (:meth:`for_tuner`)
    tuner_history: tuple[TunerChange, ...] = ()
    #: the first version whose tuner prices a one-rank-per-node network step at Tree's hwLat[NET] (tuning.cc)
    tuner_ppn1_tree_net_since: tuple[int, int] = (2, 23)
    #: NCCL's tuner factor on Tree's bandwidth for a plain TREE-pattern graph (one GPU per node), and its release
    tree_pattern_factor: float = 1.0
    tree_pattern_since: tuple[int, int] = (2, 18)
    #: the first release whose cost model applies the tree correction table to NVLSTree on Blackwell x86 hosts
    nvlstree_correction_since: tuple[int, int] = (2, 29)
    #: the release (major, minor) from which tuning.cc prices with each formula collsim's cost model writes
    #: (``tuner_formulas_since`` in nccl.yaml); an older release gets the formula before it
    tuner_formulas_since: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: the factors of those earlier formulas (``tuner_formulas_before``), by name
    tuner_formulas_before: Mapping[str, float] = field(default_factory=dict)
    #: NVLink-C2C hosts (GH200, GB200): the releases that read GPU-NIC paths through C2C (``c2c`` in nccl.yaml)
    c2c: C2cReleases = field(default_factory=lambda: C2cReleases())
    #: NCCL_MAX_NVLS_ARITY: the most NVLS heads per node (the GPUs that load the switch's sums and multicast them),
    #: and the most GPUs NVLS all-gather and reduce-scatter run on
    nvls_max_arity: int = 32
    #: NVLS all-gather and reduce-scatter on one node: the first release (major, minor) and the warps of their copy
    #: group
    nvls_ag_rs_since: tuple[int, int] = (2, 19)
    nvls_ag_rs_copy_warps: int = 8
    #: CollNet's limit of GPUs per node and, per CollNet algorithm, the first release (major, minor) that applies it
    collnet_max_local_gpus: int = 8
    collnet_max_local_since: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: the first release (major, minor) whose NCCL_ALGO / NCCL_PROTO take entries for one collective
    env_per_collective_since: tuple[int, int] = (2, 24)
    #: NCCL's NVLS tuning for Blackwell across nodes: the first release (major, minor, patch) and its rules in order
    nvls_sm100_since: tuple[int, int, int] = (2, 30, 3)
    nvls_sm100_rules: tuple[NvlsTuneRule, ...] = ()
    #: NCCL's network ring search (speed ladders) and the rules that copy its channels
    ring_search: RingSearch | None = None
    #: GPU generations NCCL learnt late: arch -> (the release (major, minor) that brought its rows, the arch whose
    #: rows NCCL read before)
    arch_since: Mapping[str, tuple[tuple[int, int], str]] = field(default_factory=dict)
    #: when NCCL turns LL128 on by default (None: wherever the intra-node paths are NVLink)
    ll128_default: Ll128Default | None = None
    #: the releases whose tuner tables collsim holds, (oldest, latest), each (major, minor, patch)
    tuner_tables_span: tuple[tuple[int, int, int], tuple[int, int, int]] = ((2, 18, 3), (2, 30, 7))
    #: the reductions NVLS runs: op -> the element types it runs it on (``nvls_reductions`` in nccl.yaml; device.h
    #: ncclNvlsSupported); None: every one (hand-built constants)
    nvls_reductions: Mapping[str, frozenset[str]] | None = None
    #: the release from which NVLS all-gathers any element type (enqueue.cc: ``|| func == ncclFuncAllGather``)
    nvls_allgather_any_reduction_since: tuple[int, int] = (2, 22)
    #: the release (major, minor) that brought each algorithm and protocol (absent: every release, as Ring, Simple)
    algorithms_since: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    protocols_since: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    _tuner_cache: dict[tuple[tuple[int, ...], tuple[str, ...]], NcclConstants] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # Calibration (collsim.profile): what the simulated system pays beyond NCCL's constants. They change
    # the simulated time only, never the cost model's choice (NCCL's tuner uses its own fixed table).
    group_launch_gap: float = 0.0  # seconds between kernel launches of GPUs driven by one thread (nccl-tests -g)
    torch_host_overhead: float = 0.0  # seconds of PyTorch's per-call host work inside a one-call timing
    sim_step_latency_scale: float = 1.0  # factor on the per-step latency (hwLat) a simulated hop pays
    sim_launch_overhead: float = 0.0  # seconds added to each simulated collective's base latency
    sim_ll_bw_scale: float = 1.0  # factor on the per-channel rate LL reaches (llMaxBw / nChannels) as simulated
    sim_ll128_bw_scale: float = 1.0  # factor on the per-channel rate LL128 reaches as simulated
    sim_max_chunks: int = 512  # chunks per channel beyond which a tree/chain/NVLS pipeline merges chunks
    sim_max_ring_steps: int = 512  # ring steps per channel beyond which a ring merges loops (keeping >= 1 loop)
    sim_max_pieces: int = 16  # pieces an LL/LL128 step may be cut into so that receivers forward data early
    #: NCCL's point-to-point schedule (send/receive, all-to-all); None only in hand-built constants
    p2p: P2pConstants | None = None

    def for_tuner(self, version: tuple[int, ...] | None) -> NcclConstants:
        """These constants as NCCL release ``version``'s tuner has them: its ``base_latency`` and ``hw_latency`` and
        its rows of the per-architecture tables (:data:`TUNER_TABLES`).

        The tables loaded are the latest release's; every entry of ``tuner_history`` whose ``until`` is later than
        ``version`` changes them, the latest entry first. An unset version is the latest release. Only NCCL's choice
        (its cost model, :func:`~collsim.backends.nccl.tuner.tuner_times`) reads these: the simulation takes the
        latest tables whatever the version.

        >>> from collsim.api import Simulator
        >>> consts = Simulator.from_source("hgx-h100").nccl_constants
        >>> [consts.for_tuner(v).hw_latency["NET"]["Tree"]["Simple"] for v in ((2, 20, 3), (2, 23, 4), None)]
        [2.8e-05, 1.4e-05, 1.4e-05]
        >>> [round(consts.for_tuner(v).ll_max_bw["hopper"][0] / 1e9, 1) for v in ((2, 20, 3), (2, 21, 5))]
        [87.7, 141.0]
        """
        changes = [c for c in self.tuner_history if version is not None and version < c.until]
        if not changes:
            return self
        late = tuple(a for a in self.arch_since if self.arch_as(a, version) != a)
        # the versions one entry's `until` separates from the next are priced alike, with the same generations known
        key = (changes[-1].until, late)
        cached = self._tuner_cache.get(key)
        if cached is None:
            base = {a: dict(row) for a, row in self.base_latency.items()}
            hw = _copy_hw_latency(self.hw_latency)
            tables: dict[str, Any] = {}
            for change in changes:  # latest first, so that the earliest release's figure is the one left
                for a, row in change.base_latency.items():
                    base.setdefault(a, {}).update(row)
                _update_hw_latency(hw, change.hw_latency)
                for name, rows in change.tables.items():
                    tables.setdefault(name, dict(getattr(self, name))).update(rows)
            for arch in late:  # a generation the release did not know reads its predecessor's rows
                for name in TUNER_TABLES:
                    rows = tables.setdefault(name, dict(getattr(self, name)))
                    rows[arch] = rows[self.arch_since[arch][1]]
            cached = self._tuner_cache[key] = replace(self, base_latency=base, hw_latency=hw, **tables)
        return cached

    def with_example_tuner_edits(self) -> NcclConstants:
        """These constants with NVIDIA's example tuner's edits (:attr:`ExampleTunerReleases.hw_latency_edits` and
        ``table_edits``) applied, as its init makes them before NCCL prices anything (2.28.3 on); call it on the
        release's constants (:meth:`for_tuner`)."""
        ex = self.example_tuner
        if ex is None or not (ex.hw_latency_edits or ex.table_edits):
            return self
        cached = self._tuner_cache.get(((-1,), ("example-tuner",)))
        if cached is not None:
            return cached
        hw = _copy_hw_latency(self.hw_latency)
        _update_hw_latency(hw, ex.hw_latency_edits)
        tables: dict[str, Any] = {}
        for name, rows in ex.table_edits.items():
            merged = dict(getattr(self, name))
            for arch, entries in rows.items():
                values = list(merged[arch])
                for i, v in entries.items():
                    values[i] = v
                merged[arch] = tuple(values)
            tables[name] = merged
        out = self._tuner_cache[((-1,), ("example-tuner",))] = replace(self, hw_latency=hw, **tables)
        return out

    def channel_limit(self, version: tuple[int, ...] | None) -> int:
        """MAXCHANNELS of NCCL release ``version`` (unset: the newest): the most channels the channel bounds and
        NVLS may ask for.

        >>> from collsim.api import Simulator
        >>> consts = Simulator.from_source("hgx-h100").nccl_constants
        >>> [consts.channel_limit(v) for v in ((2, 24, 3), (2, 25, 1), None)]
        [32, 64, 64]
        """
        since, count = self.max_channels_from
        return count if version is None or tuple(version[:2]) >= since else self.max_channels

    def arch_as(self, arch: str, version: tuple[int, ...] | None) -> str:
        """The GPU generation whose rows NCCL release ``version`` reads for ``arch``: ``arch`` itself, or for a
        generation the release did not know yet (``arch_since``) the one before it.

        >>> from collsim.api import Simulator
        >>> consts = Simulator.from_source("hgx-h100").nccl_constants
        >>> [consts.arch_as("blackwell", v) for v in ((2, 24, 3), (2, 25, 1), None)]
        ['hopper', 'blackwell', 'blackwell']
        """
        since = self.arch_since.get(arch)
        if since is None or version is None or tuple(version[:2]) >= since[0]:
            return arch
        return since[1]

    def unreleased(self, version: tuple[int, ...] | None) -> dict[str, tuple[int, int]]:
        """The algorithms and protocols NCCL release ``version`` does not have yet, each with the release (major,
        minor) that brought it (``algorithms_since``, ``protocols_since``); none when the version is unset (the
        latest release).

        >>> from collsim.api import Simulator
        >>> consts = Simulator.from_source("hgx-h100").nccl_constants
        >>> consts.unreleased((2, 17, 1))
        {'NVLSTree': (2, 18), 'PAT': (2, 23)}
        >>> consts.unreleased((2, 4, 8))["LL128"], consts.unreleased(None), consts.unreleased((2, 23, 4))
        ((2, 5), {}, {})
        """
        if version is None:
            return {}
        since = {**self.algorithms_since, **self.protocols_since}
        return {a: v for a, v in since.items() if tuple(version[:2]) < v}

    def tables_outside(self, version: tuple[int, ...] | None) -> tuple[int, int, int] | None:
        """The end of ``tuner_tables_span`` a version outside it is priced as (the oldest release's tables for an
        older NCCL, the latest's for a newer one), None when the span holds it or it is unset.

        >>> from collsim.api import Simulator
        >>> consts = Simulator.from_source("hgx-h100").nccl_constants
        >>> consts.tables_outside((2, 14, 3)), consts.tables_outside((2, 26, 2)), consts.tables_outside((2, 31, 0))
        ((2, 18, 3), None, (2, 30, 7))
        """
        if version is None:
            return None
        oldest, latest = self.tuner_tables_span
        v = tuple(version) + (0,) * (3 - len(version))
        return oldest if v < oldest else latest if v > latest else None

    @property
    def archs(self) -> tuple[str, ...]:
        """GPU architectures the tuner tables know (the keys of every per-generation table)."""
        tables = (
            self.ll_max_bw,
            self.per_channel_max_ring_ll128_bw,
            self.per_channel_max_tree_bw,
            self.per_channel_max_tree_ll128_bw,
            self.per_channel_max_nvls_tree_bw,
        )
        return tuple(a for a in self.ll_max_bw if all(a in t for t in tables))

    def ll_bw(self, arch: str, cpu_vendor: str, idx: int) -> float:
        """NCCL's llMaxBw (bytes/s) for GPUs of ``arch`` on ``idx`` (:func:`~collsim.backends.nccl.base.node_index`:
        0 one node, 1 two, 2 more) with ranks' CPUs of ``cpu_vendor`` (``"intel"``, ``"amd"``, ``"mixed"`` or
        another vendor): one node reads the GPU's row, several nodes the CPU's (tuning.cc: ``index1 = nNodes == 1 ?
        compCapIndex : (AMD or MIXED ? 1 : 0)``).

        >>> consts = NcclConstants.__new__(NcclConstants)
        >>> object.__setattr__(consts, "ll_max_bw", {"volta": (39e9, 39e9, 20.4e9), "ampere": (87.7e9, 22.5e9, 19e9),
        ...                                          "hopper": (141e9, 45e9, 35e9)})
        >>> object.__setattr__(consts, "ll_max_bw_multi_node_rows", {"intel": "volta", "amd": "ampere"})
        >>> [consts.ll_bw("hopper", v, i) / 1e9 for v, i in (("intel", 0), ("intel", 1), ("amd", 2), ("mixed", 1))]
        [141.0, 39.0, 19.0, 22.5]
        >>> consts.ll_bw("hopper", "arm", 2) / 1e9  # every vendor but AMD reads the first row
        20.4
        """
        if idx == 0:
            return self.ll_max_bw[arch][0]
        return self.ll_max_bw[self.ll_max_bw_multi_node_rows["amd" if cpu_vendor in ("amd", "mixed") else "intel"]][idx]

    def host_overhead(self, setting: float | str) -> float:
        """Seconds of host work per call inside a timed collective: ``setting`` in seconds (NcclOptions and scenario
        ``workload.host_overhead``), or ``"torch"`` for PyTorch's per-call figure (``torch_host_overhead``)."""
        return self.torch_host_overhead if setting == "torch" else float(setting)

    def check_arch(self, arch: str) -> None:
        """Raise :class:`BackendError` unless the tuner tables know ``arch``.

        >>> consts = NcclConstants.__new__(NcclConstants)
        >>> object.__setattr__(consts, "ll_max_bw", {"ampere": (1.0, 1.0, 1.0)})
        >>> for name in ("per_channel_max_ring_ll128_bw", "per_channel_max_tree_bw", "per_channel_max_tree_ll128_bw",
        ...              "per_channel_max_nvls_tree_bw"):
        ...     object.__setattr__(consts, name, {"ampere": (1.0, 1.0, 1.0)})
        >>> consts.check_arch("Blackwell")
        Traceback (most recent call last):
        ...
        collsim.backends.common.BackendError: unknown GPU arch 'Blackwell': NCCL's tuner tables know ampere
        """
        if arch not in self.archs:
            raise BackendError(f"unknown GPU arch {arch!r}: NCCL's tuner tables know {', '.join(self.archs)}")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> NcclConstants:
        """Build from the mapping in ``topologies/software/nccl.yaml`` (us and GB/s there, SI here).

        Raises
        ------
        BackendError
            A missing or malformed field; the message names it.
        """
        try:
            return cls._from_mapping(data)
        except KeyError as exc:
            raise BackendError(f"missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError, IndexError) as exc:
            raise BackendError(f"malformed constants: {exc}") from None

    @classmethod
    def _from_mapping(cls, data: Mapping[str, Any]) -> NcclConstants:
        def us(table: Mapping[str, Any]) -> dict[str, Any]:
            return {k: (us(v) if isinstance(v, Mapping) else float(v) * _US) for k, v in table.items()}

        def gbps3(table: Mapping[str, Any]) -> dict[str, tuple[float, float, float]]:
            return {k: (float(v[0]) * _GBPS, float(v[1]) * _GBPS, float(v[2]) * _GBPS) for k, v in table.items()}

        def ratio(pair: Any) -> float:
            return float(pair[0]) / float(pair[1])  # written as numerator/denominator, as NCCL writes them

        protos = data["protocols"]
        ll128 = data["tree_ll128_fraction"]
        return cls(
            base_latency=us(data["base_latency_us"]),
            hw_latency=us(data["hw_latency_us"]),
            ll_max_bw=gbps3(data["ll_max_bw_gbps"]),
            ll_max_bw_multi_node_rows=_multi_node_rows(data["ll_max_bw_multi_node_rows"], data["ll_max_bw_gbps"]),
            per_channel_max_ring_ll128_bw=gbps3(data["per_channel_max_ring_ll128_bw_gbps"]),
            ll128_tuner_efficiency=float(data["ll128_tuner_efficiency"]),
            steps=int(data["steps"]),
            protocols={name: _protocol(name, p) for name, p in protos.items()},
            threads=ThreadLimits(**{k: int(v) for k, v in data["threads"].items()}),
            max_channels=int(data["max_channels"]),
            max_channels_from=(
                _major_minor(data["max_channels_from"]["since"]), int(data["max_channels_from"]["count"])
            ),
            default_p2p_level=str(data["default_p2p_level"]),
            default_gdr_level=str(data["default_gdr_level"]),
            host_paths=_host_paths(data["host_paths"]),
            per_channel_max_tree_bw=gbps3(data["per_channel_max_tree_bw_gbps"]),
            per_channel_max_tree_ll128_bw=gbps3(data["per_channel_max_tree_ll128_bw_gbps"]),
            per_channel_max_nvls_tree_bw=gbps3(data["per_channel_max_nvls_tree_bw_gbps"]),
            nvls_efficiency={k: float(v) for k, v in data["nvls_efficiency"].items()},
            nvls_channels=int(data["nvls_channels"]),
            nvls_ctas={k: (int(v[0]), int(v[1])) for k, v in data["nvls_ctas"].items()},
            nvls_ctas_one_node_since=_major_minor(data["nvls_ctas_one_node_since"]),
            nvls_reductions={str(k): frozenset(str(t) for t in v) for k, v in data["nvls_reductions"].items()},
            nvls_allgather_any_reduction_since=_major_minor(data["nvls_allgather_any_reduction_since"]),
            nvls_chunk_bytes=int(data["nvls_chunk_bytes"]),
            nvls_split_since=_major_minor(data["nvls_split_since"]),
            nvls_ring_copy=(_major_minor(data["nvls_ring_copy"][0]), _major_minor(data["nvls_ring_copy"][1])),
            nvls_chunk_history=NvlsChunkHistory(
                *(_release(data["nvls_chunk_history"][k]) for k in ("nvls_chunksize_since", "tree_max_variable_since",
                                                                     "tree_cap_since"))
            ),
            nvls_warps=_nvls_warps(data["nvls_warps"]),
            cells_since=_major_minor(data["cells"]["since"]),
            min_traffic_per_channel=int(data["cells"]["min_traffic_per_channel_bytes"]),
            cells_ll_factor=int(data["cells"]["ll_factor"]),
            cells_ll_factor_since=_major_minor(data["cells"]["ll_factor_since"]),
            tree_correction={k: tuple(float(x) for x in v) for k, v in data["tree_correction"].items()},
            tree_allreduce_efficiency=float(data["tree_allreduce_efficiency"]),
            tree_direction_share=float(data["tree_direction_share"]),
            ring_ll_bw_fraction=float(data["ring_ll_bw_fraction"]),
            tree_ll_bw_divisor=float(data["tree_ll_bw_divisor"]),
            tree_ll128_fraction=(ratio(ll128["one_node"]), ratio(ll128["several_nodes"])),
            pat_bw_factor=float(data["pat_bw_factor"]),
            pat_log_divisor=float(data["pat_latency"]["log_divisor"]),
            pat_per_rank=float(data["pat_latency"]["per_rank_us"]) * _US,
            collnet_direct_arity=float(data["collnet_direct_arity_us"]) * _US,
            chunk_rules=_chunk_rules(data["chunk_rules"]),
            ring_plateau_latency_factor={k: float(v) for k, v in data["ring_plateau_latency_factor"].items()},
            group_launch_gap=float(data["group_launch_gap_us"]) * _US,
            torch_host_overhead=float(data["torch_call_host_overhead_us"]) * _US,
            sim_max_chunks=int(data["sim_max_chunks_per_channel"]),
            sim_max_ring_steps=int(data["sim_max_ring_steps_per_channel"]),
            sim_max_pieces=int(data["sim_max_pieces_per_step"]),
            tuner_plugins={str(k): (str(v["file"]), str(v["env_word"])) for k, v in data["tuner_plugins"].items()},
            tuner_from_net_plugin_since=_major_minor(data["tuner_from_net_plugin_since"]),
            example_tuner=_example_tuner(data["example_tuner"]),
            tuner_history=_tuner_history(data["tuner_history"], us, gbps3),
            tuner_ppn1_tree_net_since=_major_minor(data["tuner_ppn1_tree_net_latency_since"]),
            tuner_tables_span=_span(data["tuner_tables_span"]),
            ll128_default=_ll128_default(data["ll128_default"]),
            env_per_collective_since=_major_minor(data["env_per_collective_since"]),
            nvls_ag_rs_since=_major_minor(data["nvls_allgather_reduce_scatter"]["since"]),
            nvls_max_arity=int(data["nvls_max_arity"]),
            nvls_ag_rs_copy_warps=int(data["nvls_allgather_reduce_scatter"]["copy_warps"]),
            collnet_max_local_gpus=int(data["collnet_max_local_gpus"]["count"]),
            collnet_max_local_since={
                str(a): _major_minor(v) for a, v in data["collnet_max_local_gpus"].items() if a != "count"
            },
            tree_pattern_factor=float(data["tree_pattern_tree"]["factor"]),
            tree_pattern_since=_major_minor(data["tree_pattern_tree"]["since"]),
            nvlstree_correction_since=_major_minor(data["nvlstree_blackwell_correction_since"]),
            tuner_formulas_since={k: _major_minor(v) for k, v in data["tuner_formulas_since"].items()},
            tuner_formulas_before={k: ratio(v) for k, v in data["tuner_formulas_before"].items()},
            nvls_sm100_since=_release(data["nvls_sm100_tuning"]["since"]),
            nvls_sm100_rules=tuple(_nvls_rule(r) for r in data["nvls_sm100_tuning"]["rules"]),
            ring_search=_ring_search(data["ring_search"]),
            arch_since={
                str(a): (_major_minor(v["since"]), str(v["before_as"])) for a, v in data["arch_since"].items()
            },
            algorithms_since={str(a): _major_minor(v) for a, v in data["algorithms_since"].items()},
            protocols_since={str(p): _major_minor(v) for p, v in data["protocols_since"].items()},
            p2p=_p2p(data["p2p"]),
            c2c=C2cReleases(**{k: _major_minor(v) for k, v in data["c2c"].items()}),
        )


def ring_simple_threads(consts: NcclConstants, ring_bw: float, nthreads: int | None) -> int:
    """A Ring/Simple channel's threads, NCCL's maxThreads[RING][SIMPLE] (tuning.cc ncclTopoTuneModel): NCCL_NTHREADS
    (``nthreads``, None when unset) as getNthreads takes it (:meth:`ThreadLimits.resolve`), else 256 on a ring that
    carries at most PCI_BW (``ring_bw`` bytes/s, NCCL's bwIntra x nChannels) and 512 above. Both the channel shrink
    and an SHM channel's loads in flight use it."""
    hp, t = consts.host_paths, consts.threads
    return t.resolve("NCCL_NTHREADS", nthreads, t.least, hp.simple_threads, hp.simple_channel_threads(ring_bw))[0]


def _multi_node_rows(rows: Mapping[str, Any], table: Mapping[str, Any]) -> dict[str, str]:
    """``ll_max_bw_multi_node_rows``: an ``intel`` and an ``amd`` entry, each naming a row of ``ll_max_bw_gbps``."""
    out = {str(k): str(v) for k, v in rows.items()}
    if set(out) != {"intel", "amd"} or any(v not in table for v in out.values()):
        raise ValueError(f"ll_max_bw_multi_node_rows must map intel and amd to rows of ll_max_bw_gbps, got {out}")
    return out


def _protocol(name: str, p: Mapping[str, Any]) -> ProtocolConstants:
    if name in ("LL", "LL128") and "forward_grain_bytes" not in p:
        raise ValueError(f"protocols.{name}.forward_grain_bytes is missing: the data bytes a receiver forwards at once")
    return ProtocolConstants(
        name,
        int(p["buffer_bytes"]),
        float(p["data_per_wire"]),
        int(p["chunk_steps"]),
        int(p["slice_steps"]),
        int(p["threshold_per_thread"]),
        float(p["net_latency_factor"]),
        float(p["ring_net_overhead_factor"]),
        int(p["forward_grain_bytes"]) if "forward_grain_bytes" in p else None,
        _steps_by_collective(name, p.get("steps_by_collective") or {}),
    )


def _steps_by_collective(proto: str, table: Mapping[str, Any]) -> tuple[tuple[str, int, int], ...]:
    """``protocols.<proto>.steps_by_collective``: collective -> [chunk steps, slice steps], the slice dividing the
    chunk."""
    out: list[tuple[str, int, int]] = []
    for coll, pair in table.items():
        ok = isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(x, int) for x in pair)
        chunk, slice_ = (int(pair[0]), int(pair[1])) if ok else (0, 0)
        if not ok or str(coll) not in COLLECTIVES or slice_ < 1 or chunk % slice_:
            raise ValueError(
                f"protocols.{proto}.steps_by_collective.{coll}: expected a collective and [chunk, slice] steps with "
                f"the slice dividing the chunk, got {pair!r}"
            )
        out.append((str(coll), chunk, slice_))
    return tuple(out)


def _host_paths(h: Mapping[str, Any]) -> HostPathConstants:
    locality = str(h["shm_locality"])
    if locality not in ("sender", "receiver"):
        raise ValueError(f"host_paths.shm_locality must be sender or receiver, got {locality!r}")
    return HostPathConstants(
        shm_buffer_on_receiver=locality == "receiver",
        shm_memory_traffic=float(h["shm_memory_traffic"]),
        simple_threads=int(h["simple_threads"]),
        simple_threads_pci=int(h["simple_threads_pci"]),
        pci_bw=float(h["pci_bw_gbps"]) * _GBPS,
        coll_unroll=tuple(sorted((int(lo), int(u)) for lo, u in h["coll_unroll"])),
        load_bytes=int(h["load_bytes"]),
        staged_memory_traffic=float(h["staged_memory_traffic"]),
        socket_memory_traffic=float(h["socket_memory_traffic"]),
        socket_default_threads=int(h["socket_default_threads"]),
        socket_vendor_defaults=tuple(
            (str(v).lower(), int(t), int(n)) for v, (t, n) in dict(h.get("socket_vendor_defaults") or {}).items()
        ),
        socket_max_threads=int(h.get("socket_max_threads", 16)),
        socket_max_sockets=int(h.get("socket_max_sockets", 64)),
    )


def _nvls_warps(w: Mapping[str, Any]) -> NvlsWarps:
    return NvlsWarps(
        int(w["total"]),
        int(w["reduce"]),
        int(w["reduce_few_ranks"]),
        int(w["few_ranks"]),
        int(w["tree_reduce"]),
        int(w["tree_bcast"]),
    )


def _chunk_rules(c: Mapping[str, Any]) -> ChunkRules:
    def steps(rows: Any) -> Steps:
        return tuple((float(times), int(floor)) for times, floor in rows)

    return ChunkRules(
        tree_simple=steps(c["tree_simple"]),
        tree_ll128=steps(c["tree_ll128"]),
        tree_ll128_steps_per_gpu=float(c["tree_ll128_steps_per_gpu"]),
        nvls=steps(c["nvls"]),
        nvls_tree=steps(c["nvls_tree"]),
        nvls_tree_max_chunk=int(c["nvls_tree_max_chunk"]),
        nvls_tree_max_chunk_from_nodes=int(c["nvls_tree_max_chunk_from_nodes"]),
    )


def _tuner_history(
    entries: Any,
    us: Callable[[Mapping[str, Any]], dict[str, Any]],
    gbps3: Callable[[Mapping[str, Any]], dict[str, tuple[float, float, float]]],
) -> tuple[TunerChange, ...]:
    """``tuner_history``: entries latest first, each ``until: [major, minor, patch]`` with the tables it changes
    (``base_latency_us``, ``hw_latency_us`` and the ``<table>_gbps`` rows of :data:`TUNER_TABLES`)."""
    out = []
    for e in entries:
        until = (int(e["until"][0]), int(e["until"][1]), int(e["until"][2]))
        known = {"until", "base_latency_us", "hw_latency_us", *(f"{t}_gbps" for t in TUNER_TABLES)}
        if set(e) - known:
            raise ValueError(f"tuner_history entry until {list(until)}: unknown fields {sorted(set(e) - known)}")
        tables = {t: gbps3(e[f"{t}_gbps"]) for t in TUNER_TABLES if f"{t}_gbps" in e}
        out.append(TunerChange(until, us(e.get("base_latency_us", {})), us(e.get("hw_latency_us", {})), tables))
    if [c.until for c in out] != sorted((c.until for c in out), reverse=True):
        raise ValueError("tuner_history must list its entries latest first")
    return tuple(out)


def _ll128_default(d: Mapping[str, Any]) -> Ll128Default:
    return Ll128Default(
        str(d["max_inter_path"]),
        str(d["max_inter_path_sm90"]),
        int(d["min_sm"]),
        _major_minor(d["min_sm_since"]),
        {int(sm): _major_minor(v) for sm, v in d["sm_since"].items()},
    )


def _p2p(d: Mapping[str, Any]) -> P2pConstants:
    """The ``p2p`` section (GB/s there, bytes/s here)."""
    mc, nc = d["max_channels"], d["net_chunk_divisors"]
    per = d["ll_threshold_per_peer_channels"]
    return P2pConstants(
        chunk_bytes={str(k): int(v) for k, v in d["chunk_bytes"].items()},
        net_chunk_arm_blackwell_factor=int(d["net_chunk_arm_blackwell_factor"]),
        part_min_divisor=(int(d["part_min_divisor"]["one_node"]), int(d["part_min_divisor"]["several_nodes"])),
        part_max_factor=(int(d["part_max_factor"]["one_node"]), int(d["part_max_factor"]["several_nodes"])),
        ll_threshold=int(d["ll_threshold_bytes"]),
        ll_threshold_per_peer_channels=(_major_minor(per["since"]), _major_minor(per["until"])),
        net_chunk_divisors=(int(nc["below_one_step"]), int(nc["below_eight_steps"])),
        works_per_batch=int(d["works_per_batch"]),
        max_channels=(_major_minor(mc["since"]), int(mc["count"]), int(mc["before"])),
        nvlink_bw=tuple((int(lo), int(hi), float(bw) * _GBPS) for lo, hi, bw in d["nvlink_bw_gbps"]),
        per_channel_net_bw=float(d["per_channel_net_bw_gbps"]) * _GBPS,
        net_channels_by_bw_since=_major_minor(d["net_channels_by_bw_since"]),
    )

def _release(value: Any) -> tuple[int, int, int]:
    """An NCCL release given in the YAML as [major, minor, patch]."""
    return int(value[0]), int(value[1]), int(value[2])


def _nvls_rule(r: Mapping[str, Any]) -> NvlsTuneRule:
    known = {"nodes", "nic_bw_min", "nic_bw_below", "ppn_min", "ppn_max", "max_path", "channels", "chunk_kib",
             "tree_max_kib"}  # fmt: skip
    if set(r) - known:
        raise ValueError(f"nvls_sm100_tuning rule {dict(r)}: unknown fields {sorted(set(r) - known)}")

    def opt(key: str, kind: Callable[[Any], Any]) -> Any:
        return None if r.get(key) is None else kind(r[key])

    kib = 1024  # KiB to bytes
    return NvlsTuneRule(
        nodes=opt("nodes", int), nic_bw_min=opt("nic_bw_min", float), nic_bw_below=opt("nic_bw_below", float),
        ppn_min=opt("ppn_min", int), ppn_max=opt("ppn_max", int), max_path=opt("max_path", str),
        channels=opt("channels", int), chunk=opt("chunk_kib", lambda v: int(v) * kib),
        tree_max=opt("tree_max_kib", lambda v: int(v) * kib),
    )  # fmt: skip


def _ring_search(d: Mapping[str, Any]) -> RingSearch:
    """``ring_search`` of nccl.yaml."""
    speeds = sorted(((int(k.removeprefix("sm")), tuple(float(v) for v in vs)) for k, vs in d["speeds"].items()),
                    reverse=True)  # fmt: skip
    speeds[-1] = (0, speeds[-1][1])  # the oldest ladder serves every older GPU
    skip, copy = d["dup_skip"], d["compute_copy"]
    history = tuple(
        (_release(h["until"]), int(str(h["sm"]).removeprefix("sm")), tuple(float(v) for v in h["speeds"]))
        for h in d.get("speeds_before", ())
    )
    return RingSearch(
        tuple(speeds),
        float(d["dup_min_bw"]),
        (int(skip["sm_above"]), float(skip["bw_below"]), int(skip["channels_above"])),
        (int(copy["sm_min"]), float(copy["bw_above"]), int(copy["channels_below"]), _major_minor(copy["any_sm_since"])),
        history,
    )


def _span(value: Any) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """``tuner_tables_span``: [[major, minor, patch] of the oldest release, the same of the latest]."""
    oldest, latest = ((int(v[0]), int(v[1]), int(v[2])) for v in value)
    if oldest > latest:
        raise ValueError(f"tuner_tables_span: the oldest release {list(oldest)} is after the latest {list(latest)}")
    return oldest, latest


def _copy_hw_latency(hw: Mapping[str, Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """A copy of an hwLat table (hw -> algorithm -> protocol -> seconds) whose rows can be updated."""
    return {h: {a: dict(row) for a, row in table.items()} for h, table in hw.items()}


def _update_hw_latency(
    hw: dict[str, dict[str, dict[str, float]]], changes: Mapping[str, Mapping[str, Mapping[str, float]]]
) -> None:
    """Overwrite the entries of ``hw`` that ``changes`` (hw -> algorithm -> protocol -> seconds) gives."""
    for h, table in changes.items():
        for a, row in table.items():
            hw.setdefault(h, {}).setdefault(a, {}).update(row)


def _example_tuner(data: Mapping[str, Any]) -> ExampleTunerReleases:
    """nccl.yaml's ``example_tuner``: versions as [major, minor, patch]."""

    def version(key: str) -> tuple[int, int, int]:
        v = data[key]
        return int(v[0]), int(v[1]), int(v[2])

    edits = data.get("constant_edits") or {}
    known = {"hw_latency_us", *(f"{t}_gbps" for t in TUNER_TABLES)}
    if set(edits) - known:
        raise ValueError(f"example_tuner.constant_edits: unknown fields {sorted(set(edits) - known)}")
    hw = {h: {a: {p: float(v) * _US for p, v in row.items()} for a, row in table.items()}
          for h, table in (edits.get("hw_latency_us") or {}).items()}  # fmt: skip
    tables = {t: {arch: {int(i): float(v) * _GBPS for i, v in row.items()} for arch, row in edits[f"{t}_gbps"].items()}
              for t in TUNER_TABLES if f"{t}_gbps" in edits}  # fmt: skip
    return ExampleTunerReleases(
        env_word=str(data["env_word"]),
        since=version("since"),
        one_channel_since=version("one_channel_since"),
        csv_since=version("csv_since"),
        edits_constants_since=version("edits_constants_since"),
        default_config_file=str(data["default_config_file"]),
        hw_latency_edits=hw,
        table_edits=tables,
    )


def _major_minor(value: Any) -> tuple[int, int]:
    """An NCCL version given in the YAML as [major, minor]."""
    return int(value[0]), int(value[1])
