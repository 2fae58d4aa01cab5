"""NVLS (NVLink SHARP, one node) and NVLSTree (NVLS in each node, NCCL's binary trees of NICs between nodes): the
NVSwitch reduces every slice and multicasts the sum back; on one node NVLS also runs all-gather (multicast) and
reduce-scatter (the switch's reduction alone)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simpy.events import Event

from collsim.algorithms.board import EventBoard
from collsim.algorithms.nccl_algos import (
    NcclNvlsTreeMachine,
    nccl_local_copies,
    nccl_nvls_allgather,
    nccl_nvls_reduce_scatter,
    nccl_nvls_stage,
    slices,
)
from collsim.backends.common import link_uses
from collsim.backends.nccl.algos.tree import tree_correction
from collsim.backends.nccl.base import (
    Entity,
    Launcher,
    Layout,
    ModelInputs,
    NcclAlgorithm,
    Proc,
    Role,
    SimContext,
    channel_device,
    streaming_bound,
)
from collsim.backends.nccl.chunking import interleaved_channel_bytes, nvls_chunk, nvls_chunk_start
from collsim.backends.nccl.constants import NcclConstants
from collsim.backends.nccl.plan import NcclPlan, nvls_channel_count, nvls_heads_by_node, nvls_unreduced
from collsim.backends.nccl.tags import NVLS_COPY_TAG, NVLS_TAG
from collsim.backends.nccl.trees import binary_tree
from collsim.nccl_env import NcclOptions

__all__ = ["NVLS", "NVLSTree", "NvlsTreeLinks"]


def _nvls_bus(m: ModelInputs) -> float:
    """tuning.cc: NVLink bandwidth x nvlsEfficiency x (nCh - 1) / nCh x 2 over NVLS's channels."""
    plan, consts = m.plan, m.consts
    eff = consts.nvls_efficiency[plan.arch]
    nc = consts.nvls_channels
    return plan.nvl_bw * eff * (nc - 1) / nc * 2


def _nvls_bw_before(m: ModelInputs, tree: bool) -> float:
    """tuning.cc's NVLS (or, with ``tree``, NVLSTree) algorithm bandwidth before 2.28.3 (``m.older``; the formulas
    and factors are ``tuner_formulas_since`` and ``tuner_formulas_before`` in nccl.yaml). With the NVLS graph's
    channels x bwIntra the GPU's NVLink bandwidth and x bwInter its heads' NICs (bwIntra on one node), as today's
    formula (:func:`_nvls_bus`) takes them: 2.19-2.27 NVLS min(intra, inter), NVLSTree min(intra, inter, halved from
    three nodes), both x 5/6; 2.27's NVLS all-gather and reduce-scatter min(intra x (ppn - 1) / ppn, inter x 0.9),
    unconverted; 2.18 intra (inter from three nodes), NVLS x 5/6, NVLSTree x .70 nNodes / (2 (nNodes - 1))."""
    plan, before = m.plan, m.consts.tuner_formulas_before
    intra = plan.nvl_bw
    inter = min(plan.nic_count, plan.ppn) * plan.nic_bw if plan.nnodes > 1 else intra
    ratio = before["nvls_ratio"]
    if "nvls_min" in m.older:  # 2.18
        if tree:
            ratio = before["nvlstree_ratio"] * plan.nnodes / (2 * (plan.nnodes - 1))
        return (intra if plan.nnodes <= 2 else inter) * ratio
    if tree:
        return min(intra, inter if plan.nnodes <= 2 else inter / 2) * ratio
    if m.collective != "allreduce" and "nvls_ag_rs" not in m.older:  # 2.27
        return min(intra * (plan.ppn - 1) / plan.ppn, inter * before["nvls_ag_rs_inter"])
    return min(intra, inter) * ratio


def _nvls_roles(ctx: SimContext, gpu: str, switch: str, fanout: int, head: bool = True) -> dict[str, Role]:
    """A GPU's two NVLS roles: ``rs`` sends its slice up to the switch and gets 1/fanout of the sum back; ``ag``
    sends 1/fanout up and gets the whole slice multicast back; both at NCCL's NVLS efficiency on the NVLinks. A GPU
    that is no head (NVLSTree with fewer NICs than GPUs; one node of more GPUs than NCCL_MAX_NVLS_ARITY) gets no
    share back and multicasts none."""
    consts = ctx.consts
    eff = consts.nvls_efficiency[ctx.plan.arch]
    up = link_uses(ctx.topo.route(gpu, switch, kinds=("nvlink",)))
    down = link_uses(ctx.topo.route(switch, gpu, kinds=("nvlink",)))
    step = consts.hw_latency["NVLINK"]["Ring"]["Simple"] * consts.sim_step_latency_scale
    lat = up.latency + down.latency
    back = [(k, v / (fanout * eff)) for k, v in down.uses] if head else []  # its share of the sum, back
    out = [(k, v / (fanout * eff)) for k, v in up.uses] if head else []  # its share, up to be multicast
    rs = [(k, v / eff) for k, v in up.uses] + back
    ag = out + [(k, v / eff) for k, v in down.uses]
    return {"rs": Role(rs, lat, ctx.cap, NVLS_TAG, post=step), "ag": Role(ag, lat, ctx.cap, NVLS_TAG, post=step)}


def nvls_copy_rate(ctx: SimContext, gpu: str, workers: int) -> float | None:
    """What one NVLS channel's local copy group moves on ``gpu`` (bytes/s), None without the GPU's ``hbm_latency``.

    Little's law on the copy loop: each of the group's ``workers`` threads keeps ``unroll`` 16-byte loads in flight
    (device.h ``ncclCollUnroll``, common_kernel.h ``reduceCopyPacks``), each a round trip to device memory::

        rate = workers x unroll x load_bytes / hbm_latency

    >>> [round(w * 8 * 16 / 375e-9 / 1e9, 1) for w in (224, 160)]  # GB/s: one node's groups, a tree child's
    [76.5, 54.6]
    """
    spec = ctx.topo.device(gpu).spec
    latency = spec.get("hbm_latency")
    if not latency:
        return None
    hp = ctx.consts.host_paths
    return workers * hp.unroll(int(spec.get("sm", 0))) * hp.load_bytes / float(latency)


def _copy_roles(ctx: SimContext, gpu: str, tree_parent: bool) -> dict[str, Role]:
    """``sc`` and ``ga``: the NVLS kernel's local copies of each slice into the NVLS buffer (scatter group) and out
    of it (gather group), each at its group's rate (:func:`nvls_copy_rate`, the warps of
    :meth:`NvlsWarps.copy_workers`); none without the GPU's ``hbm_latency``.
    NCCL skips both copies with registered user buffers (``regUsed``), which collsim does not model."""
    scatter, gather = ctx.consts.nvls_warps.copy_workers(ctx.n, tree_parent)
    r_sc, r_ga = nvls_copy_rate(ctx, gpu, scatter), nvls_copy_rate(ctx, gpu, gather)
    if r_sc is None or r_ga is None:
        return {}
    # bound by the loads' round trips, not by the memory's bandwidth: a channel's copy in and out stream at the
    # pipeline's rate once it is full (~17 GB/s each on HGX H100: ~1 TB/s for 16 channels of 3.35 TB/s), so they
    # take no resource (the launcher times a send on none at its cap, with no solve: Launcher._alone)
    return {"sc": Role([], 0.0, r_sc, NVLS_COPY_TAG), "ga": Role([], 0.0, r_ga, NVLS_COPY_TAG)}


def _ag_rs_roles(ctx: SimContext, gpu: str, switch: str) -> dict[str, Role]:
    """A GPU's roles in NVLS all-gather and reduce-scatter on one node, per byte of its own slice: ``mc`` multicasts
    it (up once, and down every GPU's: n bytes on each GPU's NVLinks from the switch), ``rd`` loads its slice
    reduced by the switch from every GPU (up every GPU's copy for each of the n heads: n; down once); both at
    NCCL's NVLS efficiency. The copy group's role (``ga`` for all-gather, ``sc`` for reduce-scatter; 8 warps, the
    scatter group one fewer as it sends: :func:`nvls_copy_rate`) is absent without the GPU's ``hbm_latency``."""
    consts, n = ctx.consts, ctx.n
    eff = consts.nvls_efficiency[ctx.plan.arch]
    up = link_uses(ctx.topo.route(gpu, switch, kinds=("nvlink",)))
    down = link_uses(ctx.topo.route(switch, gpu, kinds=("nvlink",)))
    step = consts.hw_latency["NVLINK"]["Ring"]["Simple"] * consts.sim_step_latency_scale
    lat = up.latency + down.latency
    if ctx.collective == "allgather":
        uses = [(k, v / eff) for k, v in up.uses] + [(k, v * n / eff) for k, v in down.uses]
        roles = {"mc": Role(uses, lat, ctx.cap, NVLS_TAG, post=step)}
        workers, copy = consts.nvls_ag_rs_copy_warps * 32, "ga"  # the gather group receives: all its threads copy
    else:
        uses = [(k, v * n / eff) for k, v in up.uses] + [(k, v / eff) for k, v in down.uses]
        roles = {"rd": Role(uses, lat, ctx.cap, NVLS_TAG, post=step)}
        workers, copy = (consts.nvls_ag_rs_copy_warps - 1) * 32, "sc"  # the scatter group sends: one warp posts
    rate = nvls_copy_rate(ctx, gpu, workers)
    if rate is not None:
        roles[copy] = Role([], 0.0, rate, NVLS_COPY_TAG)
    return roles


def _after_all(board: EventBoard, me: Entity, peers: Sequence[Entity], key: str, nslices: int) -> Proc:
    """Fire ``(me, "done")`` once every peer's ``(peer, (key, i))`` has for every slice (a stage without its copy)."""
    for i in range(nslices):
        for p in peers:
            yield board.get(p, (key, i))
    board.fire(me, "done")


class NVLS(NcclAlgorithm):
    """NVLS on one node: per slice, every GPU sends it to the switch and each of NCCL's nHeads heads receives
    1/nHeads of the sum (reduce-scatter), then sends it back up and every GPU receives the whole slice (multicast),
    on NCCL's NVLS channels (16 on sm90). Every GPU is a head up to NCCL_MAX_NVLS_ARITY (32) GPUs; a larger node
    (GB200 NVL72) has 32 heads (:func:`~collsim.backends.nccl.plan.nvls_head_count`)."""

    name = "NVLS"
    #: NVLS runs on one node, NVLSTree across nodes
    across_nodes = False
    mergeable = True

    def protocols(self, plan: NcclPlan, opts: NcclOptions, collective: str) -> tuple[str, ...]:
        """Simple, for allreduce (NVLS on one node, NVLSTree across nodes), and NVLS's all-gather and reduce-scatter
        on one node where the release has them (``plan.nvls_collectives``); none where NVLink SHARP cannot run the
        reduction on the element type (:func:`~collsim.backends.nccl.plan.nvls_unreduced`)."""
        runs = collective == "allreduce" or (not self.across_nodes and collective in plan.nvls_collectives)
        runs = runs and nvls_unreduced(plan, opts, collective) is None  # a reduction NVLink SHARP cannot run
        ok = runs and len(plan.ranks) > 1 and (plan.nnodes > 1) == self.across_nodes
        return ("Simple",) if ok and self.refusal(plan, opts) is None else ()

    def refusal(self, plan: NcclPlan, opts: NcclOptions) -> str | None:
        # the hardware half is decided once, in plan_nccl (nvls_refusal); the knob here
        return plan.nvls_refusal or (None if opts.nvls_enable else "NCCL_NVLS_ENABLE=0")

    def model(self, m: ModelInputs) -> tuple[float, float]:
        """tuning.cc: latency intraLat; allreduce's bus bandwidth x2 ("AllReduce pipelines two operations") and
        converted to algorithm bandwidth (n / nsteps); all-gather and reduce-scatter's x (ppn - 1) / ppn instead, and
        used as it is (NCCL converts only Ring's among theirs). A release before 2.28.3 prices with its own formula
        (:func:`_nvls_bw_before`)."""
        if "nvls_efficiency" in m.older:
            return m.lat + m.intra, _nvls_bw_before(m, tree=False)
        if m.collective == "allreduce":
            return m.lat + m.intra, _nvls_bus(m) * m.n / m.nsteps
        ppn = m.plan.ppn
        return m.lat + m.intra, _nvls_bus(m) / 2 * (ppn - 1) / ppn

    def channels(self, plan: NcclPlan, opts: NcclOptions, consts: NcclConstants) -> int:
        """NVLS runs its own channel count (nvls.cc: 16 on Hopper; on Blackwell 24 in one node, 32 across nodes and,
        before 2.27, in one node too; before 2.25, which did not know Blackwell, Hopper's 16; from 2.30.3 Blackwell
        across nodes takes 24 or 32 by its network bandwidth: :func:`~collsim.backends.nccl.plan.nvls_sm100_tuning`),
        or NCCL_NVLS_NCHANNELS, clamped to [NCCL_MIN_CTAS, NCCL_MAX_CTAS] (nvls.cc: ``std::max(comm->config.minCTAs,
        std::min(comm->config.maxCTAs, nChannels))``; v2.18.5-1 and v2.20.3-1 the same). NCCL_MIN/MAX_NCHANNELS bound
        the Ring and Tree channel graphs only (connect.cc), not NVLS.

        >>> from types import SimpleNamespace as NS
        >>> consts = NS(nvls_ctas={"hopper": (16, 16), "blackwell": (24, 32)}, nvls_ctas_one_node_since=(2, 27),
        ...             nvls_channels=16, max_channels=32, channel_limit=lambda version: 32,
        ...             arch_as=lambda a, v: "hopper" if v is not None and v < (2, 25) else a)
        >>> nvls, plan = NVLS(), NS(arch="blackwell", nnodes=1, nvls_tuned=(None, None, None))
        >>> [nvls.channels(plan, NcclOptions(version=v), consts) for v in (None, (2, 26, 2), (2, 24, 3))]
        [24, 32, 16]
        >>> [nvls.channels(NS(arch="blackwell", nnodes=4, nvls_tuned=(24, None, None)), NcclOptions(), consts)]
        [24]
        >>> hopper = NS(arch="hopper", nnodes=2, nvls_tuned=(None, None, None))
        >>> [nvls.channels(hopper, o, consts) for o in (NcclOptions(min_ctas=24), NcclOptions(max_channels=4),
        ...  NcclOptions(nvls_channels=8), NcclOptions(nvls_channels=8, max_ctas=4))]  # type: ignore[arg-type]
        [24, 16, 8, 4]
        """
        return nvls_channel_count(plan.arch, plan.nnodes, plan.nvls_tuned[0], opts, consts)

    def shrinks_channels(self, opts: NcclOptions, consts: NcclConstants) -> bool:
        """Before 2.20 NCCL runs every NVLS channel at every size (v2.18.5-1 enqueue.cc getAlgoInfo: ``nc =
        comm->nvlsChannels``) and the kernel's loop decides which of them get data (:meth:`build`)."""
        return not opts.before(consts.nvls_split_since)

    def extra_base_latency(self, plan: NcclPlan, consts: NcclConstants) -> float:
        """NVLS pays its hwLat once, with the launch: NVLink's, the only path NVLS takes (also when the plan's
        other hops go through host memory, NCCL_P2P_DISABLE=1)."""
        return consts.hw_latency["NVLINK"][self.name]["Simple"] * consts.sim_step_latency_scale

    def min_time(self, ctx: SimContext) -> float:
        """Every GPU sends each slice of its channel to the switch (allreduce's reduce-scatter), one after another;
        for all-gather and reduce-scatter the base latency alone."""
        if ctx.collective != "allreduce":
            return ctx.base
        return streaming_bound(ctx, ctx.per_channel)

    def build(self, ctx: SimContext) -> Layout:
        """Every GPU on every NVLS channel; before NCCL 2.20 (``backends.nccl.version``) the channels take the
        blocks of each loop in turn (:func:`interleaved_channel_bytes`), so a small buffer runs on its first
        channels only; from 2.20 every channel gets an equal share."""
        out = Layout()
        plan, consts = ctx.plan, ctx.consts
        assert plan.nvswitch is not None
        if ctx.collective != "allreduce":
            ag_rs = {g: _ag_rs_roles(ctx, g, plan.nvswitch) for g in plan.ranks}
            for c in range(ctx.nc):
                for g in plan.ranks:
                    out.roles[(c, g)] = dict(ag_rs[g])
            return out
        shares: list[float] | None = None
        k = plan.nvls_nheads  # NCCL's heads: every GPU up to NCCL_MAX_NVLS_ARITY (plan.nvls_head_count)
        if ctx.opts.before(consts.nvls_split_since):
            assert consts.chunk_rules is not None
            start = nvls_chunk_start(consts, ctx.opts, self.name)[0]  # before 2.20: the Simple step, at most 128 KiB
            chunk = nvls_chunk(consts.chunk_rules, self.name, ctx.nbytes, ctx.nc * k, start)
            shares = interleaved_channel_bytes(ctx.nbytes, ctx.nc, k * chunk)
        # a GPU's roles are the same on every channel: built once per GPU, copied per channel. The heads are the
        # node's first k GPUs; the others only contribute to the switch's sums and receive the multicast
        roles = {
            g: _nvls_roles(ctx, g, plan.nvswitch, k, head=i < k) | _copy_roles(ctx, g, False)
            for i, g in enumerate(plan.ranks)
        }
        for c in range(ctx.nc):
            for g in plan.ranks:
                out.roles[(c, g)] = dict(roles[g])
                if shares is not None:
                    out.data[(c, g)] = shares[c]
        return out

    def launch(self, run: Launcher, e: Entity) -> Event | None:
        ctx, board = run.ctx, run.board
        if ctx.collective != "allreduce":
            return self._launch_ag_rs(run, e)
        data = run.layout.data.get(e, ctx.per_channel)
        copies = "sc" in run.roles(e)
        chunking = ctx.chunking
        rs = nccl_nvls_reduce_scatter(
            board, e, data_bytes=data, chunking=chunking, send=run.sender(e, "rs"), scattered=copies
        )
        c, _g = channel_device(e)
        # the switch reduces a slice of this channel once every GPU has sent it (NVLS channels are independent)
        peers = list(dict.fromkeys(run.rep((c, h)) for h in ctx.plan.ranks))
        ag = nccl_nvls_allgather(
            board, e, peers, data_bytes=data, chunking=chunking, send=run.sender(e, "ag"), gathered=copies
        )
        if copies:  # the copy in waits for a slot as the reduce-scatter did; the copy out ends the collective
            send_sc, send_ga = run.sender(e, "sc"), run.sender(e, "ga")
            run.start(e, nccl_local_copies(
                board, e, data_bytes=data, chunking=chunking, send=send_sc, key="sc", slot="ag"
            ))  # fmt: skip
            run.start(e, nccl_local_copies(
                board, e, data_bytes=data, chunking=chunking, send=send_ga, key="ga", after="ag", done=True
            ))  # fmt: skip
        run.start(e, rs)
        run.start(e, ag)
        return run.done(e)

    def _launch_ag_rs(self, run: Launcher, e: Entity) -> Event:
        """One GPU of one channel of NVLS all-gather or reduce-scatter on one node (all_gather.h, reduce_scatter.h,
        ``RunWorkColl<..., NCCL_ALGO_NVLS, NCCL_PROTO_SIMPLE>``, without registered buffers), its own share of the
        channel slice by slice. All-gather: the bcast warps multicast this GPU's slice from its input into every
        GPU's NVLS buffer (``mc``, once every GPU has consumed the slot's previous slice), the gather warps copy every
        GPU's slice out to the output (``ga``, once all of them arrived). Reduce-scatter: the scatter warps copy this
        GPU's input for every GPU into its NVLS buffer (``sc``, once every GPU has reduced the slot's previous
        slice), the reduce warps load this GPU's slice reduced by the switch from every GPU (``rd``, once every GPU
        copied it in). The last stage's last slice ends the GPU's part."""
        ctx, board = run.ctx, run.board
        data = ctx.per_channel / ctx.n  # this GPU's share of the channel: its input (all-gather), output (reduce)
        c, _g = channel_device(e)
        peers = list(dict.fromkeys(run.rep((c, h)) for h in ctx.plan.ranks))
        roles = run.roles(e)
        chunking = ctx.chunking
        if ctx.collective == "allgather":
            first, second = ("mc", None, 1.0), ("ga", "mc", float(ctx.n))
        else:
            first, second = ("sc", None, float(ctx.n)), ("rd", "sc", 1.0)
        key1, _w, scale1 = first
        key2, wait2, scale2 = second
        if key1 in roles:
            run.start(e, nccl_nvls_stage(
                board, e, peers, data_bytes=data, chunking=chunking, send=run.sender(e, key1), key=key1, slot=key2,
                scale=scale1,
            ))  # fmt: skip
        else:  # no copy role (a GPU preset without hbm_latency): the slice is there at once
            for i in range(len(slices(data, chunking))):
                board.fire(e, (key1, i))
        if key2 in roles:
            run.start(e, nccl_nvls_stage(
                board, e, peers, data_bytes=data, chunking=chunking, send=run.sender(e, key2), key=key2, wait=wait2,
                scale=scale2, done=True,
            ))  # fmt: skip
        else:
            run.start(e, _after_all(board, e, peers, key1, len(slices(data, chunking))))
        return run.done(e)


@dataclass(frozen=True)
class NvlsTreeLinks:
    """An NVLSTree entity: its parent and children in the tree of this GPU across nodes, and the GPUs of its node
    (the NVLS peers it waits for)."""

    parent: Entity | None
    children: Sequence[Entity]
    peers: Sequence[Entity]
    #: the node's NVLS heads (their shares come back from the tree before the multicast); every peer when empty
    heads: Sequence[Entity] = ()


class NVLSTree(NVLS):
    """NVLSTree across nodes: NVLS reduces each slice inside the node, every head's 1/heads share goes up and down a
    binary tree of the same head on the other nodes (head c of each: the same GPU index where the nodes are alike)
    through its NIC (even channels NCCL's tree 0, odd channels tree 1), then the switch multicasts. The heads are
    NCCL's (:func:`~collsim.backends.nccl.plan.nvls_heads_by_node`): every GPU with a NIC of its own, or with fewer
    NICs than GPUs the NICs' local GPUs, as many on every node; the others contribute to the switch's reduction and
    receive the multicast."""

    name = "NVLSTree"
    across_nodes = True

    def model(self, m: ModelInputs) -> tuple[float, float]:
        """The NVLS bound, the heads' NICs (x2 on two nodes) and perChMaxNvlsTreeBw; latency + 2 log2(nNodes) x inter.

        tuning.cc: nChannels x min(intra, bwInter, perChMaxNVLSTreeBw) over the NVLS graph's channels, one per head
        and its NIC (one head per NIC, at most one per GPU: :func:`~collsim.backends.nccl.plan.nvls_heads`), so the
        NICs count up to one per GPU."""
        plan, consts = m.plan, m.consts
        lat = m.lat + (m.intra + 2 * (plan.nnodes.bit_length() - 1) * m.inter)  # tuning.cc log2i: floor
        if "nvls_min" in m.older:  # 2.18: 2 (nNodes - 1) x interLat, linear (v2.18.6-1 line 238; log2i from 2.19.1)
            lat = m.lat + 2 * (plan.nnodes - 1) * m.inter
        if "nvls_efficiency" in m.older:  # a release before 2.28.3: its own formula
            return lat, _nvls_bw_before(m, tree=True)
        nc = consts.nvls_channels
        inter_bw = min(plan.nic_count, plan.ppn) * plan.nic_bw * (2 if plan.nnodes <= 2 else 1)
        bus = min(_nvls_bus(m), inter_bw, nc * consts.per_channel_max_nvls_tree_bw[plan.arch][m.idx])
        algbw = bus * m.n / m.nsteps
        if m.nvlstree_corrected and m.collective == "allreduce":  # Blackwell on x86, from 2.29 (logSize < 24)
            algbw *= tree_correction(consts, "Simple", m.nbytes, limit=24)
        return lat, algbw

    def build(self, ctx: SimContext) -> Layout:
        out = Layout()
        plan, topo = ctx.plan, ctx.topo
        # looked up once (per rank, a scan of every rank or device is quadratic at 1024 GPUs)
        devs = {g: topo.device(g) for g in plan.ranks}
        by_node: dict[int, list[str]] = {}
        for g, d in devs.items():
            by_node.setdefault(d.node, []).append(g)
        switch = {node: topo.devices("nvswitch", node)[0].name for node in by_node}
        # head GPU -> NIC per node, as many on every node (the fewest any has), head c of each node joined in the
        # trees whichever GPU it is there (connect.cc: nvls_heads_by_node)
        heads = nvls_heads_by_node(topo, sorted(by_node), ctx.consts.nvls_max_arity)
        nic = {g: n for h in heads.values() for g, n in h.items()}
        order = {node: list(h) for node, h in heads.items()}
        twins = {g: {node: hs[c] for node, hs in order.items()} for h in order.values() for c, g in enumerate(h)}
        # the GPUs a multicast waits for: the node's heads where some GPUs are none (every GPU otherwise: empty)
        wait_for = {
            node: [] if len(heads[node]) == len(gs) else [h for h in gs if h in nic] for node, gs in by_node.items()
        }
        # a GPU's roles depend on the channel only through its tree (NCCL's tree 0 or its mirror, tree 1): built
        # twice per GPU, not once per channel (the hops go through the GPU's own NIC whatever the channel)
        built: dict[tuple[str, bool], dict[str, Role]] = {}
        # a network message is one head's chunk (a simulated step is every head's, nHeads x chunk: step_chunking)
        message = ctx.net_message_bytes(share=1.0 / plan.nvls_nheads)
        for c in range(ctx.nc):
            mirror = c % 2 == 1
            for g in plan.ranks:
                dev = devs[g]
                head = g in nic
                same = twins.get(g, {})  # this head's fellows, by node
                pnode, kids = binary_tree(dev.node, plan.nnodes, mirror) if head else (None, [])
                par = same[pnode] if pnode is not None else None
                roles = built.get((g, mirror))
                if roles is None:
                    fanout = len(heads[dev.node])
                    roles = _nvls_roles(ctx, g, switch[dev.node], fanout, head) | _copy_roles(ctx, g, par is not None)
                    built[(g, mirror)] = roles
                    if par is not None:
                        roles["up"] = ctx.hop_role(ctx.hop_via(g, par, nic[g], nic[par]), message_bytes=message)
                    for k, kid in enumerate(kids):
                        hop = ctx.hop_via(g, same[kid], nic[g], nic[same[kid]])
                        roles[f"down{k}"] = ctx.hop_role(hop, message_bytes=message)
                if par is not None:
                    out.relations.append(((c, g), "parent", (c, par)))
                # every GPU waits for its node's peers (the switch's sums): each tied to its node's first GPU, whose
                # inverse edges gather them, so a class's peers are one multiset of classes (a straggler's node
                # kept apart from the others; one relation a GPU, not one a pair)
                if g != by_node[dev.node][0]:
                    out.relations.append(((c, g), "node", (c, by_node[dev.node][0])))
                out.roles[(c, g)] = dict(roles)
                peers = [(c, h) for h in by_node[dev.node]]
                out.structure[(c, g)] = NvlsTreeLinks(
                    (c, par) if par else None, [(c, same[kid]) for kid in kids], peers,
                    tuple((c, h) for h in wait_for[dev.node]),
                )  # fmt: skip
        return out

    def launch(self, run: Launcher, e: Entity) -> Event | None:
        ctx = run.ctx
        links: NvlsTreeLinks = run.layout.structure[e]
        roles = run.roles(e)
        heads = links.heads or links.peers
        machine = NcclNvlsTreeMachine(
            run.board,
            e,
            [run.rep(p) for p in links.peers],
            run.rep(links.parent) if links.parent else None,
            [run.rep(k) for k in links.children],
            data_bytes=ctx.per_channel,
            chunking=ctx.chunking,
            share=1.0 / len(heads) if e in heads else 0.0,
            send_rs=run.sender_then(e, "rs"),
            send_up=run.sender_then(e, "up") if "up" in roles else None,
            send_down=[run.sender_then(e, f"down{k}") for k in range(len(links.children))],
            send_ag=run.sender_then(e, "ag"),
            send_sc=run.sender_then(e, "sc") if "sc" in roles else None,
            send_ga=run.sender_then(e, "ga") if "ga" in roles else None,
            tree_peers=[run.rep(h) for h in links.heads] if links.heads else None,
        )
        run.start_machine(e, machine.start)
        return run.done(e)
