"""How NCCL cuts a collective into chunks, slices and steps (enqueue.cc), and the channel-shrink rule.

Pure functions of sizes and constants; the numbers come from ``topologies/software/nccl.yaml`` (``protocols``,
``chunk_rules``, ``nvls_chunk_bytes``, ``sim_max_*``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from collsim.algorithms import RingChunking
from collsim.backends.nccl.constants import ChunkRules, NcclConstants, ring_simple_threads
from collsim.backends.nccl.plan import NcclPlan
from collsim.nccl_env import NcclOptions

__all__ = [
    "MERGEABLE",
    "cell_channel_count",
    "cell_channels",
    "channels_for",
    "fewest_pieces",
    "interleaved_channel_bytes",
    "merge_ring_loops",
    "nvls_chunk",
    "nvls_chunk_start",
    "ring_steps",
    "shrink_threads",
    "step_chunking",
    "tree_ll128_chunk",
    "tree_simple_chunk",
]

#: Pipelines whose fill is a few stages deep (a tree's depth, NVLS's reduce and multicast): merging chunks beyond
#: ``NcclConstants.sim_max_chunks`` costs them little. Rings merge whole loops instead (:func:`merge_ring_loops`);
#: chains along a ring (n-1 stages) are never merged.
MERGEABLE = ("Tree", "NVLS", "NVLSTree", "CollNetDirect", "CollNetChain")


#: NCCL_THREAD_THRESHOLDS' order (tuning.cc): Tree LL, LL128, Simple, then Ring LL, LL128, Simple
_THRESHOLD_ORDER = {("Tree", "LL"): 0, ("Tree", "LL128"): 1, ("Tree", "Simple"): 2,
                    ("Ring", "LL"): 3, ("Ring", "LL128"): 4, ("Ring", "Simple"): 5}  # fmt: skip


def shrink_threads(plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, algo: str, proto: str) -> tuple[int, int]:
    """(threads, bytes per thread) of NCCL's small-size channel shrink for ``algo``/``proto``: its
    ``comm->maxThreads`` and ``comm->threadThresholds`` (tuning.cc ncclTopoTuneModel; ``topologies/software/nccl.yaml``
    ``threads``), with NCCL_NTHREADS, NCCL_LL128_NTHREADS (as NCCL corrects a count it rejects:
    :meth:`~collsim.backends.nccl.constants.ThreadLimits.resolve`) and NCCL_THREAD_THRESHOLDS.

    Ring and Tree: LL 512, LL128 640, Tree/Simple 512, Ring/Simple 512, or 256 where the ring carries at most
    PCI_BW (``plan.intra_bw``, or the network's with one GPU per node: NCCL's bwIntra x nChannels); LL's threshold x
    ranks for rings. CollNet: 640 threads at 512 bytes each. PAT: none (NCCL sets no maxThreads for it: its
    channels never shrink). NVLS and NVLSTree: collsim's stand-in for how NCCL spreads small sizes over fewer of
    their channels, 512 threads at the protocol's threshold.

    >>> from types import SimpleNamespace
    >>> from collsim.backends.nccl.constants import ThreadLimits
    >>> hp = SimpleNamespace(simple_threads=512, simple_channel_threads=lambda bw: 256 if bw <= 12e9 else 512)
    >>> protos = {p: SimpleNamespace(threshold_per_thread=t) for p, t in (("LL", 8), ("LL128", 8), ("Simple", 64))}
    >>> consts = SimpleNamespace(protocols=protos, host_paths=hp, threads=ThreadLimits(32, 64, 512, 640, 640, 512))
    >>> plan = SimpleNamespace(ranks=["g"] * 16, ppn=8, intra_bw=370e9, bus_bw=370e9)
    >>> [shrink_threads(plan, NcclOptions(), consts, "Ring", p) for p in ("LL", "LL128", "Simple")]
    [(512, 128), (640, 8), (512, 64)]
    >>> shrink_threads(plan, NcclOptions(nthreads=256, thread_thresholds=(-1, -1, 32)), consts, "Tree", "Simple")
    (256, 32)
    """
    t, hp = consts.threads, consts.host_paths
    thresh = consts.protocols[proto].threshold_per_thread * (len(plan.ranks) if (algo, proto) == ("Ring", "LL") else 1)
    if algo in ("CollNetDirect", "CollNetChain"):
        return t.all, t.collnet_threshold
    if algo == "PAT":
        return 0, thresh
    if algo not in ("Ring", "Tree"):
        return hp.simple_threads, thresh
    if proto == "LL128":
        nt = t.resolve("NCCL_LL128_NTHREADS", opts.ll128_nthreads, t.ll128 // 4, t.ll128, t.ll128)[0]
    elif proto == "LL":
        nt = t.resolve("NCCL_NTHREADS", opts.nthreads, t.least, t.ll, t.ll)[0]
    elif algo == "Ring":
        nt = ring_simple_threads(consts, plan.intra_bw if plan.ppn > 1 else plan.bus_bw, opts.nthreads)
    else:
        nt = t.resolve("NCCL_NTHREADS", opts.nthreads, t.least, hp.simple_threads, hp.simple_threads)[0]
    i = _THRESHOLD_ORDER[(algo, proto)]
    if i < len(opts.thread_thresholds) and opts.thread_thresholds[i] >= 0:
        thresh = opts.thread_thresholds[i]
    return nt, thresh


def channels_for(
    plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, proto: str, nbytes: int, nc: int, algo: str = "Ring"
) -> int:
    """NCCL shrinks the channel count for small sizes (enqueue.cc topoGetAlgoInfo): while bytes < nc x threads x
    threshold, nc -= 1 (:func:`shrink_threads`). CollNetDirect counts its heads (``plan.ppn``: a GPU per NIC) and
    shrinks towards 16, 8, 4, 2, 1 in turn, halving the threshold at 1.5 x each (enqueue.cc's ncSwitch loop).

    >>> from types import SimpleNamespace
    >>> from collsim.backends.nccl.constants import ThreadLimits
    >>> hp = SimpleNamespace(simple_threads=512, simple_channel_threads=lambda bw: 512)
    >>> consts = SimpleNamespace(protocols={"LL": SimpleNamespace(threshold_per_thread=8)}, host_paths=hp,
    ...                          threads=ThreadLimits(32, 64, 512, 640, 640, 512))
    >>> plan = SimpleNamespace(ranks=["g"] * 32, ppn=8, intra_bw=370e9, bus_bw=370e9)
    >>> [channels_for(plan, NcclOptions(), consts, "LL", 128 * 1024, 16, a) for a in ("Ring", "Tree")]  # 128 KiB
    [1, 16]
    """
    nt, thresh = shrink_threads(plan, opts, consts, algo, proto)
    if algo == "CollNetDirect":
        heads, switch, short = max(1, plan.ppn), 16, True
        while switch >= 1 and short:
            while (short := nbytes < nc * nt * heads * thresh) and nc > switch:
                if nc == switch + switch // 2:
                    thresh //= 2
                nc -= 1
            switch //= 2
        return nc
    while nc > 1 and nbytes < nc * nt * thresh:
        nc -= 1
    return nc


def cell_channels(
    data_bytes: int, traffic_per_byte: int, nc: int, max_channels: int, cell_factor: int = 1, min_traffic: int = 32768
) -> list[int]:
    """Bytes of data each channel gets when NCCL (2.23 on) spreads one collective, alone in its kernel plan, over
    its channels in cells (enqueue.cc ``scheduleCollTasksToPlan``); the list's length is the channels that run.

    A channel's share is the task's traffic (``data_bytes`` x ``traffic_per_byte``: 2 for allreduce, the rank count
    for all-gather and reduce-scatter, 1 otherwise; at least ``min_traffic``, NCCL's MinTrafficPerChannel) over
    ``nc`` (the channel count after NCCL's small-size shrink, at most ``max_channels``, the communicator's). The data
    is cut in cells of ``min_traffic`` traffic (16-byte multiples) and the channels take whole cells up to their
    share: the first its share, the middle ones the same, the last the rest; past ``max_channels`` the last ones
    split what is left. ``cell_factor`` multiplies the traffic NCCL counts per cell (4 for LL from 2.26), not the
    share: an LL collective then runs on up to four times the shrunk count, each channel with a quarter of the share.

    >>> [len(cell_channels(s << 10, 2, nc, 16, 4)) for s, nc in ((64, 1), (96, 1), (128, 2), (256, 4), (512, 8))]
    [4, 4, 8, 16, 16]
    >>> cell_channels(96 << 10, 2, 1, 16, 4) == [24 << 10] * 4  # Ring/LL 96 KiB allreduce, 2.26 on: 4 channels
    True
    >>> cell_channels(96 << 10, 2, 1, 16), cell_channels(1000, 2, 1, 16)  # Simple keeps the shrunk count; one cell
    ([98304], [1000])
    >>> sum(cell_channels(10**6 + 7, 2, 16, 16)), len(cell_channels(10**6 + 7, 2, 16, 16))  # bytes conserved
    (1000007, 16)
    """

    def up16(x: int) -> int:
        return -(-x // 16) * 16

    if data_bytes <= 0:
        return []
    share = up16(max(min_traffic, data_bytes * traffic_per_byte) // max(1, min(nc, max_channels)))
    per_cell = traffic_per_byte * cell_factor
    cell = up16(-(-min_traffic // per_cell))
    cells = -(-data_bytes // cell)
    cell_traffic = cell * per_cell
    per_channel = min(cells, -(-share // cell_traffic))
    lo = cells if max_channels == 1 else per_channel
    mid, hi = divmod(cells - lo, per_channel)
    if max_channels < (1 if lo else 0) + mid + (1 if hi else 0):  # overflowed: the last channels split the rest
        mid = max_channels - 2
        per_channel = (cells - lo) // (mid + 1)
        hi = per_channel + (cells - lo) % (mid + 1)
    if hi == 0 and mid != 0:
        hi, mid = per_channel, mid - 1
    out = [lo * cell] + [per_channel * cell] * mid + ([hi * cell] if hi else [])
    out[-1] -= cells * cell - data_bytes  # the last cell is partial
    return out


def cell_channel_count(
    plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, proto: str, collective: str, nbytes: int, nc: int,
    channels: int,
) -> int:
    """The channels NCCL runs a Ring or Tree collective of ``nbytes`` on once it hands out its cells
    (:func:`cell_channels`, from ``consts.cells_since``): allreduce counts 2 bytes of traffic per byte, all-gather and
    reduce-scatter the rank count on one rank's count, the others 1; LL cells x ``cells_ll_factor`` from
    ``cells_ll_factor_since``. ``nc``: the shrunk count; ``channels``: the communicator's. Before 2.23, ``nc``. The
    simulation splits the data evenly over them (NCCL's are equal but for the last channel's remainder)."""
    if consts.cells_since is None or opts.before(consts.cells_since) or nbytes <= 0:
        return nc
    n = len(plan.ranks)
    per_rank = collective in ("allgather", "reduce_scatter")
    data = nbytes // n if per_rank else nbytes
    tpb = 2 if collective == "allreduce" else (n if per_rank else 1)
    factor = consts.cells_ll_factor if proto == "LL" and not opts.before(consts.cells_ll_factor_since) else 1
    return len(cell_channels(data, tpb, nc, channels, factor, consts.min_traffic_per_channel)) or nc


def nvls_chunk_start(
    consts: NcclConstants, opts: NcclOptions, algo: str, tuned_chunk: int | None = None,
    tuned_tree_max: int | None = None,
) -> tuple[float, float | None]:  # fmt: skip
    """Where ``algo``'s (NVLS or NVLSTree) chunk starts, in bytes, and NVLSTree's cap, for the run's NCCL release
    (``consts.nvls_chunk_history``; the latest's rules when ``opts.version`` is unset).

    From 2.21.5: NCCL_NVLS_CHUNKSIZE (else the chunk of NCCL's NVLS tuning, ``tuned_chunk``, else 128 KiB), NVLSTree
    capped by NCCL_NVLSTREE_MAX_CHUNKSIZE (else ``tuned_tree_max``; None: NCCL's default, 64 KiB from 4 nodes on,
    applied by :func:`nvls_chunk`). Before, NCCL has no NCCL_NVLS_CHUNKSIZE: the chunk starts from the Simple step
    (NCCL_BUFFSIZE / NCCL_STEPS), NVLS's capped at 128 KiB; NVLSTree's cap is NCCL_NVLSTREE_MAX_CHUNKSIZE from 2.20.3
    (None when unset), 64 KiB from 4 nodes on in 2.19.3-2.19.x (None) and none before (inf).

    >>> from types import SimpleNamespace as NS
    >>> from collsim.backends.nccl.constants import NvlsChunkHistory
    >>> consts = NS(nvls_chunk_history=NvlsChunkHistory((2, 21, 5), (2, 20, 3), (2, 19, 3)), nvls_chunk_bytes=131072,
    ...             protocols={"Simple": NS(buffer_bytes=4 << 20)}, steps=8)
    >>> [nvls_chunk_start(consts, NcclOptions(version=v), "NVLSTree")  # type: ignore[arg-type]
    ...  for v in [None, (2, 20, 3), (2, 19, 3), (2, 19, 1)]]
    [(131072.0, None), (524288.0, None), (524288.0, None), (524288.0, inf)]
    >>> old = NcclOptions(version=(2, 20, 3), buffsize=8 << 20, nvls_chunksize=1 << 17, nvlstree_max_chunksize=1 << 19)
    >>> nvls_chunk_start(consts, old, "NVLSTree")  # type: ignore[arg-type]  # NCCL_NVLS_CHUNKSIZE: not read
    (1048576.0, 524288)
    >>> nvls_chunk_start(consts, NcclOptions(version=(2, 20, 3), buffsize=8 << 20), "NVLS")  # type: ignore[arg-type]
    (131072.0, None)
    """
    history, version = consts.nvls_chunk_history, opts.version
    if version is None or version >= history.nvls_chunksize_since:
        return float(opts.nvls_chunksize or tuned_chunk or consts.nvls_chunk_bytes), (
            opts.nvlstree_max_chunksize or tuned_tree_max
        )
    step = (opts.buffsize or consts.protocols["Simple"].buffer_bytes) / consts.steps
    if algo == "NVLS":  # enqueue.cc before 2.21.5: maxChunkSize = 131072, the same as NCCL_NVLS_CHUNKSIZE's default
        return min(step, float(consts.nvls_chunk_bytes)), None
    if version >= history.tree_max_variable_since:
        return step, opts.nvlstree_max_chunksize
    return step, (None if version >= history.tree_cap_since else math.inf)


def nvls_chunk(
    rules: ChunkRules, algo: str, nbytes: int, concurrent: int, chunk: float, nnodes: int = 1,
    tree_max: float | None = None,
) -> float:  # fmt: skip
    """NVLS and NVLSTree chunk size in bytes (enqueue.cc): ``chunk`` (where it starts: :func:`nvls_chunk_start`;
    NVLSTree at most ``tree_max``, NCCL_NVLSTREE_MAX_CHUNKSIZE, whose default is 64 KiB from 4 nodes on and no cap
    below), cut for sizes that would leave the ``concurrent`` = channels x NVLS heads pipelines too few chunks (NVLS
    down to 16 KiB, NVLSTree down to 32 KiB).

    >>> rules = ChunkRules((), (), 0.1, ((64, 65536), (8, 32768), (2, 16384)),
    ...                    ((32, 262144), (16, 131072), (4, 65536), (1, 32768)), 65536, 4)
    >>> [nvls_chunk(rules, "NVLS", s << 20, 16 * 8, 131072) // 1024 for s in (2, 16, 128, 1024)]
    [16.0, 32.0, 64.0, 128.0]
    >>> [nvls_chunk(rules, "NVLSTree", s << 20, 16 * 8, 131072, 2) // 1024 for s in (4, 16, 64)]
    [32.0, 64.0, 128.0]
    >>> nvls_chunk(rules, "NVLSTree", 1 << 30, 16 * 8, 131072, 4) // 1024
    64.0
    >>> [nvls_chunk(rules, "NVLSTree", s << 30, 16 * 8, 524288, 4, 524288) // 1024 for s in (1, 4)]  # both 512 KiB
    [256.0, 512.0]
    """
    if algo == "NVLSTree":
        if tree_max is not None:
            chunk = min(chunk, tree_max)
        elif nnodes >= rules.nvls_tree_max_chunk_from_nodes:
            chunk = min(chunk, rules.nvls_tree_max_chunk)
    for times, floor in rules.nvls if algo == "NVLS" else rules.nvls_tree:
        if nbytes < times * concurrent * chunk and chunk > floor:
            chunk = floor
    return float(chunk)


def interleaved_channel_bytes(nbytes: float, nc: int, block: float) -> list[float]:
    """Bytes each of ``nc`` channels handles when every loop of the kernel covers ``nc`` blocks of ``block`` bytes
    and channel c takes the c-th block of each (NCCL before 2.20, one-node NVLS: block = nHeads x chunkSize; see
    ``nvls_split_since`` in ``topologies/software/nccl.yaml``). Bytes are conserved; the last, partial loop fills
    the first channels.

    >>> [b // 1024 for b in interleaved_channel_bytes(3 << 20, 16, 128 * 1024)]  # 3 MiB on 16 channels of 128 KiB
    [256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 256.0, 128.0, 128.0, 128.0, 128.0, 128.0, 128.0, 128.0, 128.0]
    >>> [b // 1024 for b in interleaved_channel_bytes(200 * 1024, 4, 128 * 1024)]
    [128.0, 72.0, 0.0, 0.0]
    """
    loops, rest = divmod(float(nbytes), nc * block)
    return [loops * block + min(max(rest - c * block, 0.0), block) for c in range(nc)]


def tree_ll128_chunk(rules: ChunkRules, nbytes: int, nc: int, nnodes: int, ppn: int, chunk: float) -> float:
    """The LL128 tree's chunk in wire bytes (enqueue.cc): halved, down to 128 KiB and then to 32 KiB, until every
    channel has enough chunks for the tree's steps (nstepsLL128 = 1 + log2(nNodes) + 0.1 ppn; at least
    nstepsLL128 x 64 / ppn chunks, then x 16 / ppn).

    >>> rules = ChunkRules((), ((64, 131072), (16, 32768)), 0.1, (), (), 0, 0)
    >>> step = 4915200 / 8  # an LL128 step: NCCL's LL128 buffer over NCCL_STEPS
    >>> [int(tree_ll128_chunk(rules, s << 20, 16, 2, 8, step)) // 1024 for s in (1, 8, 64, 1024)]
    [18, 75, 150, 600]
    """
    nsteps = 1 + int(math.log2(nnodes)) + rules.tree_ll128_steps_per_gpu * ppn
    for times, floor in rules.tree_ll128:
        while nbytes // (nc * chunk) < nsteps * times / ppn and chunk > floor:
            chunk /= 2
    return chunk


def tree_simple_chunk(rules: ChunkRules, per_channel: float, depth: int, chunk: float) -> float:
    """The Simple tree's chunk (enqueue.cc): halved towards each floor until a channel's ``per_channel`` bytes make
    at least ``depth x times`` chunks, to fill the tree's pipeline.

    >>> rules = ChunkRules(((8, 131072), (4, 65536), (1, 32768)), (), 0.1, (), (), 0, 0)
    >>> tree_simple_chunk(rules, 1 << 20, 8, 524288.0)  # 1 MiB per channel, a tree 8 deep
    65536.0
    """
    for times, floor in rules.tree_simple:
        while per_channel / chunk < depth * times and chunk > floor:
            chunk /= 2
    return chunk


def step_chunking(
    plan: NcclPlan,
    consts: NcclConstants,
    algo: str,
    proto: str,
    collective: str,
    nbytes: int,
    nc: int,
    buffsize: int | None = None,
    nvls_chunk_bytes: float | None = None,
    nvlstree_max_chunk: float | None = None,
) -> RingChunking:
    """The chunking one simulated channel of ``algo``/``proto`` uses for ``nbytes`` on ``nc`` channels.

    Ring/Simple: chunks of NCCL_STEPS/2 steps cut in 2 slices, every other pair one step (enqueue.cc); broadcast
    and reduce one step in one slice (collectives.h, :meth:`ProtocolConstants.steps_for`). Others: one
    step per chunk (NVLS, NVLSTree, Tree/Simple and Tree/LL128 with NCCL's own chunk sizes), an LL/LL128 step cut
    into up to ``sim_max_pieces`` pieces when a channel has too few steps to fill its pipeline (collsim's modelling
    choice: LL lines carry flags, so receivers forward data as it arrives, one grain at a time,
    ``ProtocolConstants.forward_grain``; no more pieces than keep each within one grain), and, beyond
    ``sim_max_chunks`` chunks per channel in a mergeable pipeline, consecutive chunks merged (a simulation setting:
    +0.66% at most, measured in ``topologies/software/nccl.yaml``); a ring beyond ``sim_max_ring_steps`` steps per
    channel merges whole loops (:func:`merge_ring_loops`, LL and LL128).
    ``buffsize`` is NCCL_BUFFSIZE (bytes; Simple's buffer when set); ``nvls_chunk_bytes`` and
    ``nvlstree_max_chunk`` are where NVLS's or NVLSTree's chunk starts and NVLSTree's cap (bytes,
    :func:`nvls_chunk_start`; None: the latest release's defaults).
    """
    pc = consts.protocols[proto]
    buffer = buffsize if (buffsize and proto == "Simple") else pc.buffer_bytes
    step_data = buffer / consts.steps * pc.data_per_wire
    if algo == "Ring" and proto == "Simple":
        # the collective's own chunk and slice: allreduce, all-gather and reduce-scatter 4 steps in 2 slices,
        # broadcast and reduce one step in one (collectives.h)
        chunk_steps, slice_steps = pc.steps_for(collective)
        slices = chunk_steps // slice_steps
        # NCCL's hwLat is per ring step (an allreduce chunk's hop, tuning.cc's nsteps x hwLat), and such a step posts
        # once per slice, so each post is 1/slices of it; a chain's slice is posted by the same code (prims_simple.h
        # postPeer after every slice), so it costs the same, whatever the collective's own slice
        post = pc.slice_steps / pc.chunk_steps
        return RingChunking(step_data * chunk_steps, slices, consts.steps // slice_steps, 1, post)
    rules = consts.chunk_rules
    assert rules is not None, "NcclConstants without chunk_rules"
    n = len(plan.ranks)
    chunk = step_data
    pieces = 1
    tree_depth = plan.ppn - 1 + max(0, math.ceil(math.log2(plan.nnodes)))
    if algo in ("NVLS", "NVLSTree"):
        # NCCL's NVLS chunk is one head's share of a step: every loop of the kernel moves nHeads x chunk of the
        # channel's data, each head reducing and multicasting its chunk (all_reduce.h, RunWorkColl NVLS and
        # NVLS_TREE: loopCount = nvls->nHeads * chunkCount; the heads: plan.nvls_head_count).
        heads = plan.nvls_nheads
        nvls = nvls_chunk_bytes or consts.nvls_chunk_bytes
        chunk = nvls_chunk(rules, algo, nbytes, nc * heads, nvls, plan.nnodes, nvlstree_max_chunk)
        # all-gather and reduce-scatter move each GPU's own share a chunk a step (all_gather.h, reduce_scatter.h:
        # ncclCollCbdPart's chunkCount of the rank's count); allreduce's loop covers every head's chunk
        chunk = heads * chunk if collective == "allreduce" else chunk
    elif algo == "Tree" and proto == "Simple":
        per = nbytes / max(1, min(plan.channels, nc))
        chunk = tree_simple_chunk(rules, per, tree_depth, chunk)
    elif algo == "Tree" and proto == "LL128" and collective == "allreduce":
        chunk = tree_ll128_chunk(rules, nbytes, nc, plan.nnodes, plan.ppn, chunk / pc.data_per_wire) * pc.data_per_wire
    if proto in ("LL", "LL128") and algo in ("Tree", "Ring"):
        depth = 2 * tree_depth if algo == "Tree" else 2 * n
        per = nbytes / max(1, nc)
        # a receiver forwards a grain once all of it is in (protocols.*.forward_grain_bytes), and a piece reaches its
        # forwarding when the grain it ends in is complete (Launcher._prepared): pieces within one grain are released
        # at every grain's end whatever their number, so the doubling is undone while halving keeps them within one
        # grain (fewer flows; nearly the same times: a piece straddling two grains waits for the later one, measured
        # 0.7% at most, docs/accuracy.md), and a step of one grain or less is not cut. ``step``: a step's data in the
        # first loop: a ring step carries 1/n of a loop, a chain's (broadcast, reduce) hop all of it
        step = min(chunk, per / n if algo == "Ring" and ring_steps(collective, n) else per)
        grain = pc.forward_grain or 0
        while per / (chunk / pieces) < 2 * depth and pieces < consts.sim_max_pieces:
            pieces *= 2
        while pieces > 1 and 2 * step / pieces <= grain:
            pieces //= 2
    # a step cut in pieces is still one chunk, posted once; the connection still holds NCCL_STEPS steps
    chunking = RingChunking(chunk, pieces, consts.steps * pieces, pieces)
    own = nbytes / nc / (n if algo == "NVLS" and collective != "allreduce" else 1)  # what a channel's steps carry
    if algo in MERGEABLE and own > consts.sim_max_chunks * chunk:
        merged = own / consts.sim_max_chunks  # each merged chunk still pays every step's post
        chunking = RingChunking(merged, pieces, consts.steps * pieces, pieces, merged / chunk)
    if algo == "Ring":
        chunking = merge_ring_loops(chunking, n, collective, nbytes / nc, consts.sim_max_ring_steps)
    return chunking


def ring_steps(collective: str, nranks: int) -> int:
    """Steps of one loop of NCCL's ring schedule: 2(n-1) for allreduce (reduce-scatter then all-gather), n-1 for
    all-gather and reduce-scatter; 0 for the collectives a ring runs as a chain (broadcast, reduce) or not at all.

    >>> ring_steps("allreduce", 8), ring_steps("allgather", 8), ring_steps("broadcast", 8)
    (14, 7, 0)
    """
    if collective == "allreduce":
        return 2 * (nranks - 1)
    return nranks - 1 if collective in ("allgather", "reduce_scatter") else 0


def merge_ring_loops(
    chunking: RingChunking, nranks: int, collective: str, per_channel: float, max_steps: int
) -> RingChunking:
    """The ring's chunking with consecutive loops merged so that a channel sends at most ``max_steps`` ring steps
    (never fewer than one loop): a simulation setting, ``sim_max_ring_steps_per_channel`` in
    ``topologies/software/nccl.yaml``, where its measured effect is given.

    Why it is nearly exact: every step of a ring waits for the previous step's arrival from the predecessor, so a
    channel's steps form one serial chain and a loop has no pipeline fill (every rank sends from its first step).
    Scaling a step's bytes, post and arrival latency by ``k`` scales every stage of that chain by ``k``; ``k``
    loops merged into one then take the time of the ``k`` loops, up to the loop boundaries (where the next loop's
    first step need not wait for an arrival) and to transients of an unequal ring. Only the ring schedules
    (allreduce: 2(n-1) steps a loop; all-gather and reduce-scatter: n-1) merge, and ``step_chunking`` asks it for
    LL and LL128 only (their steps are posted whole; Simple's two slices a step pipeline part of the latency, and
    its 2 MiB steps leave few loops anyway); a chain along the ring (broadcast, reduce) does not.
    ``per_channel`` is the channel's bytes.

    >>> c = RingChunking(65536.0, 1, 8)  # a 64 KiB LL128-like step, 8 slots
    >>> m = merge_ring_loops(c, 128, "allreduce", 64 * 2**20, 512)  # 8 loops of 254 steps: merged to 2
    >>> round(m.chunk_bytes / 65536, 9), round(m.latency_steps, 9), len(m.loops(128, 64 * 2**20))
    (4.0, 4.0, 2)
    >>> merge_ring_loops(c, 128, "broadcast", 64 * 2**20, 512) is c
    True
    """
    nsteps = ring_steps(collective, nranks)
    if not nsteps or per_channel <= 0:
        return chunking
    loops = math.ceil(per_channel / (nranks * chunking.chunk_bytes))
    want = max(1, max_steps // nsteps)
    if loops * nsteps <= max_steps or want >= loops:
        return chunking
    # even loops (bytes conserved: RingChunking.loops gives the last one the rest); a hair over the even share so
    # that rounding cannot add a sliver of a loop
    merged = per_channel / (nranks * want) * (1 + 1e-12)
    k = merged / chunking.chunk_bytes
    return RingChunking(
        merged,
        chunking.slices_per_chunk,
        chunking.slots,
        chunking.slices_per_post,
        chunking.steps_per_post * k,
        chunking.latency_steps * k,
    )


def fewest_pieces(
    chunking: RingChunking, step_bytes: float, hops: Iterable[tuple[float, float, float]]
) -> RingChunking:
    """The ring's chunking with each step cut into the fewest pieces (a power of two, at most as many as
    ``chunking`` has) that change nothing: more pieces give the same times.

    A step cut in ``p`` pieces lets the successor forward its first piece once that piece has arrived: ``c / b +
    latency`` after the step began (``c = step_bytes / p``, ``b`` the hop's rate), where the sender itself is busy
    for ``step_bytes / b + post`` (its pieces back to back, then the step's post). When ``latency - post <=
    (step_bytes - c) / cap`` on every hop (``hops``: each role's arrival latency s, post s and rate cap bytes/s;
    ``b <= cap``), the sender's own pace binds at every step whatever ``p`` is: further pieces only add flows.
    The argument holds where neighbours stream at equal rates; where a slow link makes them differ it does not
    cover the gaps pieces may fill. Measured (``docs/performance.md``): every shipped, validation and published
    point equal to 1e-9, and the same with one NIC port at half rate.
    ``step_bytes``: a rank's data bytes per step in the smallest loop. Steps not cut in pieces (Simple's slices,
    posted each) are returned as they are.

    >>> c = RingChunking(576000.0, 8, 64, 8)  # an LL128 step in 8 pieces
    >>> nvlink, ib = (1.9e-6, 1.9e-6, 30e9), (4e-6, 0.0, 30e9)  # post = latency inside a node; none on the net
    >>> fewest_pieces(c, 524288.0, [nvlink]).slices_per_chunk, fewest_pieces(c, 524288.0, [nvlink, ib])
    (1, RingChunking(chunk_bytes=576000.0, slices_per_chunk=2, slots=16, slices_per_post=2, steps_per_post=1.0, \
latency_steps=1.0))
    >>> fewest_pieces(c, 65536.0, [nvlink, ib]) is c  # 2.2 us of streaming per step cannot hide 4 us
    True
    """
    pieces = chunking.slices_per_chunk
    if pieces <= 1 or chunking.slices_per_post != pieces:
        return chunking
    hops = list(hops)
    p = 1
    while p < pieces and any(lat - post > step_bytes * (1 - 1 / p) / cap for lat, post, cap in hops):
        p *= 2
    if p >= pieces:
        return chunking
    return RingChunking(
        chunking.chunk_bytes, p, chunking.slots // pieces * p, p, chunking.steps_per_post, chunking.latency_steps
    )
