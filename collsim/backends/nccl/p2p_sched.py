"""NCCL's point-to-point schedule: how a group of sends and receives (ncclSend/ncclRecv; nccl-tests' all-to-all is
one of each per peer, its sendrecv one to the next rank) is cut into parts on channels, with which protocol and
chunk, and how many of them share a channel.

Sources, NVIDIA/nccl v2.30.7-1 unless said (numbers in ``topologies/software/nccl.yaml``, ``p2p``):

- channels: ``graph/paths.cc`` ``ncclTopoGetNchannels`` (a peer's channels: 2 per NVLink's worth of path bandwidth,
  2 over PCIe, by the NICs across nodes) and ``ncclTopoComputeP2pChannels`` (p2pnChannels, p2pnChannelsPerPeer);
- rounds: ``init.cc`` ``ncclP2pSchedule`` (which peer each round sends to) and ``channel.h``
  ``ncclP2pChannelBaseForRound``, ``device.h`` ``ncclP2pChannelForPart`` (a round's parts on consecutive channels
  from a bit-reversed base);
- parts, protocol and chunk: ``enqueue.cc`` ``scheduleP2pTasksToPlan`` and ``addP2pToPlan``.

These are pure functions of counts and sizes; :mod:`collsim.backends.nccl.algos.p2p` simulates what they give.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collsim.backends.nccl.constants import P2pConstants

__all__ = [
    "P2pChannels", "P2pOp", "local_peer_channels", "p2p_channels", "p2p_op", "p2p_rounds", "reverse_bits", "round_base",
]  # fmt: skip


def _pow2_up(x: int) -> int:
    """The smallest power of two >= ``x`` (1 for x <= 1)."""
    return 1 << max(0, (x - 1).bit_length())


def reverse_bits(x: int, bits: int) -> int:
    """``x``'s lowest ``bits`` bits in reverse order (NCCL's reverseBits and mirrorBits).

    >>> reverse_bits(1, 5), reverse_bits(3, 2), reverse_bits(0, 0)
    (16, 3, 0)
    """
    return int(format(x, f"0{bits}b")[::-1], 2) if bits > 0 else 0


@dataclass(frozen=True)
class P2pChannels:
    """What a communicator's point-to-point operations run on.

    Attributes
    ----------
    channels : int
        p2pnChannels: channels point-to-point parts are spread over (a power of two).
    per_peer : int
        p2pnChannelsPerPeer: the most channels (parts) one peer's bytes go on (a power of two).
    chunk : int
        p2pChunkSize: bytes of one Simple chunk (one step).
    """

    channels: int
    per_peer: int
    chunk: int

    def min_parts(self, nranks: int) -> int:
        """nChannelsMin (enqueue.cc scheduleP2pTasksToPlan): per_peer halved while x ranks > channels, "try to use
        all channels, but one channel per operation"."""
        n = self.per_peer
        while n * nranks > self.channels and n > 1:
            n //= 2
        return n


def p2p_channels(
    p2p: P2pConstants,
    *,
    ring_channels: int,
    nranks: int,
    nnodes: int,
    local_peer_channels: int | None,
    all_nvlink: bool,
    nics_per_gpu: int,
    nic_bw: float,
    version: tuple[int, int] | None,
    chunk_override: int | None = None,
    net_peer_channels: int | None = None,
    min_p2p: int | None = None,
    max_p2p: int | None = None,
    simple_step: int | None = None,
    arm_blackwell: bool = False,
) -> P2pChannels:
    """p2pnChannels, p2pnChannelsPerPeer and p2pChunkSize as NCCL settles them.

    Parameters
    ----------
    p2p : P2pConstants
        NCCL's numbers (nccl.yaml ``p2p``).
    ring_channels : int
        The communicator's channels (comm->nChannels).
    nranks, nnodes : int
        Ranks and nodes.
    local_peer_channels : int or None
        ncclTopoGetNchannels' least count over the peers inside a node (:func:`local_peer_channels`); None with one
        GPU per node.
    all_nvlink : bool
        Every GPU pair of a node is joined by NVLink (comm->isAllNvlink: the NVLink chunk on one node).
    nics_per_gpu : int
        NICs nearest a GPU (ncclTopoGetLocalNetCountByBw); nic_bw their bandwidth each, bytes/s.
    version : (int, int) or None
        The run's NCCL release (None: the latest).
    chunk_override : int, optional
        NCCL_P2P_{NET,NVL,PCI}_CHUNKSIZE for this system's kind, bytes.
    net_peer_channels, min_p2p, max_p2p : int, optional
        NCCL_NCHANNELS_PER_NET_PEER, NCCL_MIN_P2P_NCHANNELS, NCCL_MAX_P2P_NCHANNELS.
    simple_step : int, optional
        A Simple step (NCCL_BUFFSIZE / NCCL_STEPS) in bytes: the chunk is at most that.
    arm_blackwell : bool
        Blackwell GPUs on an ARM host (the net chunk doubles).

    Examples
    --------
    One HGX H100 (24 ring channels, 18 NVLinks a peer): 32 channels, 32 a peer, 512 KiB chunks.

    >>> from collsim.backends.nccl.constants import P2pConstants
    >>> p2p = P2pConstants({"net": 131072, "pci": 131072, "nvl": 524288}, 2, (8, 2), (32, 1), 16384,
    ...                    ((2, 22), (2, 29)), (4, 2), 8, ((2, 25), 64, 32), ((0, 999, 20.6e9),), 14e9, (2, 29))
    >>> p2p_channels(p2p, ring_channels=24, nranks=8, nnodes=1, local_peer_channels=36, all_nvlink=True,
    ...              nics_per_gpu=0, nic_bw=0.0, version=None)
    P2pChannels(channels=32, per_peer=32, chunk=524288)

    Two such nodes with a 400 Gb/s NIC per GPU: a network peer gets max(1, ceil(50 / 14)) = 4 channels.

    >>> p2p_channels(p2p, ring_channels=16, nranks=16, nnodes=2, local_peer_channels=36, all_nvlink=True,
    ...              nics_per_gpu=1, nic_bw=50e9, version=None)
    P2pChannels(channels=16, per_peer=4, chunk=131072)
    """
    since, most_new, most_old = p2p.max_channels
    most = most_new if version is None or version >= since else most_old
    n = min(ring_channels, max_p2p or most)
    n = max(n, min_p2p or 1)
    channels = min(_pow2_up(n), most)
    counts = [] if local_peer_channels is None else [local_peer_channels]
    if nnodes > 1:  # against p2pnChannels before its round up (paths.cc ncclTopoComputeP2pChannels: pow2Up after)
        counts.append(_net_peer_channels(p2p, nranks, n, nics_per_gpu, nic_bw, version, net_peer_channels))
    per = min(counts) if counts else 1
    per = _pow2_up(per)
    by_bw = version is None or version >= p2p.net_channels_by_bw_since
    if nnodes > 1 and by_bw and net_peer_channels is None:
        # "the network is the bottleneck": fewer channels a peer so that every peer fits in one round of batches
        while per * math.ceil(nranks / p2p.works_per_batch) > channels and per > 1:
            per //= 2
    per = min(per, channels)
    if chunk_override is not None:
        chunk = chunk_override
    elif nnodes > 1:
        chunk = p2p.chunk_bytes["net"] * (p2p.net_chunk_arm_blackwell_factor if arm_blackwell else 1)
    else:
        chunk = p2p.chunk_bytes["nvl" if all_nvlink else "pci"]
    if simple_step is not None:
        chunk = min(chunk, simple_step)
    return P2pChannels(channels, per, chunk)


def _net_peer_channels(
    p2p: P2pConstants,
    nranks: int,
    channels: int,
    nics: int,
    nic_bw: float,
    version: tuple[int, int] | None,
    env: int | None,
) -> int:
    """ncclTopoGetNchannels for a peer on another node."""
    if env is not None:
        return env
    nics = max(1, nics)
    if version is None or version >= p2p.net_channels_by_bw_since:
        gbps = int(nics * nic_bw / 1e9)  # NCCL rounds the GB/s down to an int before its divUp
        per_gbps = int(p2p.per_channel_net_bw / 1e9)
        return max(nics, -(-gbps // per_gbps))
    most = 2  # 2.21-2.28: "start from 2 channels per NIC and reduce with scale"
    while most * nranks > channels * 4 and most > 1:
        most //= 2
    return max(nics, most)


def local_peer_channels(links: int | None) -> int:
    """ncclTopoGetNchannels inside a node: 2 x max(1, NVLinks' worth of path bandwidth) on an NVLink path
    (``links``: the fewest over the node's GPU pairs, 0 for a pair joined through another GPU), 2 on PCIe (None).

    >>> local_peer_channels(18), local_peer_channels(0), local_peer_channels(None)
    (36, 2, 2)
    """
    return 2 if links is None else 2 * max(1, links)


@dataclass(frozen=True)
class P2pOp:
    """One peer's send as NCCL cuts it.

    Attributes
    ----------
    parts : int
        Channels the bytes go on (nChannels of addP2pToPlan).
    part_bytes : int
        Bytes of each part but the last (ncclP2pPartBounds: the share rounded up to 4 KiB).
    protocol : str
        ``"LL"`` or ``"Simple"``.
    chunk : int
        Data bytes of one chunk (a step).
    """

    parts: int
    part_bytes: int
    protocol: str
    chunk: int


def p2p_op(
    p2p: P2pConstants,
    ch: P2pChannels,
    nbytes: int,
    *,
    nranks: int,
    nnodes: int,
    network: bool,
    ll_step: int,
    version: tuple[int, int] | None,
    ll_threshold: int | None = None,
    ll_part_step: int | None = None,
) -> P2pOp:
    """Parts, protocol and chunk of a send of ``nbytes`` (addP2pToPlan).

    ``network``: the peer is on another node (its connection has no LL buffers: NCCL allocates them for network
    point-to-point only with NCCL_ALLOC_P2P_NET_LL_BUFFERS=1, so it sends with Simple). ``ll_step``: data bytes of
    one LL step; ``ll_part_step``: LL's step as NCCL 2.22-2.28 cut an LL send's parts by it (buffSizes[LL] /
    NCCL_STEPS, the buffer's bytes: enqueue.cc v2.27.7-1 lines 834-838 and 892-897).

    >>> from collsim.backends.nccl.constants import P2pConstants
    >>> p2p = P2pConstants({"net": 131072, "pci": 131072, "nvl": 524288}, 2, (8, 2), (32, 1), 16384,
    ...                    ((2, 22), (2, 29)), (4, 2), 8, ((2, 25), 64, 32), ((0, 999, 20.6e9),), 14e9, (2, 29))
    >>> ch = P2pChannels(32, 32, 524288)
    >>> p2p_op(p2p, ch, 2 * 2**20, nranks=8, nnodes=1, network=False, ll_step=32768, version=None)
    P2pOp(parts=4, part_bytes=524288, protocol='Simple', chunk=524288)
    >>> p2p_op(p2p, ch, 2**31, nranks=8, nnodes=1, network=False, ll_step=32768, version=None).parts
    32
    >>> p2p_op(p2p, ch, 16384, nranks=8, nnodes=1, network=False, ll_step=32768, version=None)
    P2pOp(parts=1, part_bytes=16384, protocol='LL', chunk=32768)
    """
    step = ch.chunk
    i = 1 if nnodes > 1 else 0
    lo, hi = ch.min_parts(nranks), ch.per_peer

    def cut(step: int) -> int:  # the parts (enqueue.cc): min(nChannelsMin, bytes / minPart), doubled past maxPart
        min_part, max_part = step // p2p.part_min_divisor[i], step * p2p.part_max_factor[i]
        parts = 1 if nbytes == 0 else min(lo, -(-nbytes // min_part))
        part = max(min_part, -(-nbytes // parts))
        while part > max_part and parts <= hi // 2:
            parts *= 2
            part = -(-nbytes // parts)
        return parts

    threshold = p2p.ll_threshold if ll_threshold is None else ll_threshold
    since, until = p2p.ll_threshold_per_peer_channels
    per_peer = version is not None and since <= version < until
    if per_peer:  # 2.22-2.28: the protocol first (bytes <= nChannelsMax x threshold), its step then cuts the parts
        ll = not network and nbytes <= hi * threshold
        parts = cut(ll_part_step if ll and ll_part_step else step)  # LL: buffSizes[LL] / NCCL_STEPS (enqueue.cc)
    else:  # 2.29 on (and before 2.22): the parts from the Simple chunk, then the protocol by them
        parts = cut(step)
        ll = not network and nbytes <= parts * threshold
    share = -(-nbytes // parts)  # ceil
    part_bytes = -(-share // 4096) * 4096  # device.h ncclP2pPartBounds: alignUp(divUp(bytes, nParts), 4 KiB)
    if ll:
        return P2pOp(parts, part_bytes, "LL", ll_step)
    chunk = step
    if network:
        d1, d8 = p2p.net_chunk_divisors
        chunk = step // d1 if nbytes < step else (step // d8 if nbytes < 8 * step else step)
    return P2pOp(parts, part_bytes, "Simple", chunk)


def sched_group_size(ppn: int, group_size: int) -> int:
    """comm->p2pSchedGroupSize across nodes (init.cc ncclP2pSchedule): NCCL_P2P_SCHEDULE_GROUP_SIZE (default 8),
    or its gcd with the GPUs per node where they are fewer or not a multiple of it.

    >>> sched_group_size(8, 8), sched_group_size(4, 8), sched_group_size(1, 8), sched_group_size(12, 8)
    (8, 4, 1, 4)
    """
    return math.gcd(group_size, ppn) if ppn % group_size or ppn < group_size else group_size


def p2p_rounds(rank: int, ppn: int, nnodes: int, group_size: int) -> list[int]:
    """The peer ``rank`` sends to in each round (init.cc ncclP2pSchedule): one node, round r goes to rank + r; across
    nodes, ranks in groups of ``group_size`` (NCCL_P2P_SCHEDULE_GROUP_SIZE, 8, or the gcd with the GPUs per node),
    group deltas in the quadratic order (x^2 + x) / 2 mod a power of two, each with every local delta. Ranks are
    node-major (rank = node x ppn + local).

    >>> p2p_rounds(2, 4, 1, 8)
    [2, 3, 0, 1]
    >>> p2p_rounds(0, 2, 2, 8)[:4]
    [0, 1, 2, 3]
    """
    n = ppn * nnodes
    if nnodes == 1:
        return [(rank + r) % n for r in range(n)]
    g = sched_group_size(ppn, group_size)
    local, group = rank % g, rank // g
    ngroups = n // g
    out: list[int] = []
    delta, step = 0, 0
    pow2 = _pow2_up(ngroups)
    while True:
        if delta < ngroups:
            send_group = (group + delta) % ngroups
            out += [send_group * g + (local + d) % g for d in range(g)]
        step += 1
        delta = (delta + step) & (pow2 - 1)
        if step == pow2:
            break
    return out


def round_base(rnd: int, channels: int, nnodes: int, group_size: int, per_batch: int = 8) -> int:
    """The first channel of round ``rnd``'s parts (channel.h ncclP2pChannelBaseForRound): the round (one node), or
    across nodes its group step (each group step's rounds share channels, up to 8 works a batch), bit-reversed over
    log2(channels) bits. ``per_batch``: NCCL_MAX_DEV_WORK_P2P_PER_BATCH (``works_per_batch`` in nccl.yaml).

    >>> [round_base(r, 32, 1, 8) for r in range(4)]
    [0, 16, 8, 24]
    >>> [round_base(r, 32, 2, 8) for r in (0, 7, 8)]
    [0, 0, 16]
    """
    bits = max(0, channels - 1).bit_length()
    base = (rnd // group_size) * -(-group_size // per_batch) + (rnd % group_size) // per_batch if nnodes > 1 else rnd
    return reverse_bits(base % (1 << bits) if bits else 0, bits)
