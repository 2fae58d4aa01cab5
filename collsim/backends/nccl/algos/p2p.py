"""Point-to-point collectives as nccl-tests runs them, with NCCL's schedule of grouped sends and receives
(:mod:`collsim.backends.nccl.p2p_sched`): all-to-all sends bytes/n to every peer, sendrecv sends the whole buffer to
the next rank (and receives from the previous one), every rank at once. NCCL runs them outside its ring/tree
algorithms; the tuner tables' Ring rows price their steps."""

from __future__ import annotations

from dataclasses import dataclass

from simpy.events import AllOf, Event

from collsim.backends.nccl import base
from collsim.backends.nccl.base import Entity, Launcher, Layout, ModelInputs, NcclAlgorithm, Proc, SimContext
from collsim.backends.nccl.constants import NcclConstants
from collsim.backends.nccl.p2p_sched import P2pOp, p2p_op, p2p_rounds, round_base, sched_group_size
from collsim.backends.nccl.plan import NcclPlan, p2p_send_slots
from collsim.nccl_env import NcclOptions
from collsim.vocab import P2P_COLLECTIVES

__all__ = ["P2P", "P2pSend", "p2p_sends"]

@dataclass(frozen=True)
class P2pSend:
    """One rank's send to one peer: the schedule's round, the peer's rank index, and how NCCL cuts it."""

    round: int
    peer: int
    network: bool
    nbytes: int
    op: P2pOp

    def part_sizes(self) -> list[int]:
        """Bytes of each part (device.h ncclP2pPartBounds: parts of the share rounded up to 4 KiB; the last ones
        get what is left, possibly nothing)."""
        pb, b = self.op.part_bytes, self.nbytes
        return [max(0, min((k + 1) * pb, b) - min(k * pb, b)) for k in range(self.op.parts)]


def p2p_sends(plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, collective: str, nbytes: int,
              rank: int = 0) -> list[P2pSend]:  # fmt: skip
    """The sends of rank index ``rank`` (node-major, as ``plan.ranks``): all-to-all, one per other rank of bytes/n;
    sendrecv, one of ``nbytes`` to the next rank (nccl-tests), or only from one rank to another
    (``opts.sendrecv_peers``). Each with its round in NCCL's schedule and its parts, protocol and
    chunk (:func:`~collsim.backends.nccl.p2p_sched.p2p_op`)."""
    n, ppn, p2p = len(plan.ranks), max(1, plan.ppn), consts.p2p
    assert plan.p2p is not None and p2p is not None, "a plan and constants without NCCL's point-to-point numbers"
    # NCCL_P2P_SCHEDULE_GROUP_SIZE defaults to NCCL_MAX_DEV_WORK_P2P_PER_BATCH (init.cc)
    rounds = p2p_rounds(rank, ppn, plan.nnodes, p2p.works_per_batch)
    if collective == "alltoall":
        peers, each = [(r, p) for r, p in enumerate(rounds) if p != rank], nbytes // n
    elif opts.sendrecv_peers is not None:  # workload.peers: one send, the others idle
        src, dst = opts.sendrecv_peers
        peers, each = ([(rounds.index(dst), dst)] if rank == src else []), nbytes
    else:
        nxt = (rank + 1) % n
        peers, each = ([(rounds.index(nxt), nxt)] if nxt != rank else []), nbytes
    ll = consts.protocols["LL"]
    ll_step = int(ll.buffer_bytes / consts.steps * ll.data_per_wire)
    version = opts.version[:2] if opts.version else None
    # every send of this rank has the same bytes: NCCL cuts it one way inside the node and one way across
    ops = {
        net: p2p_op(
            p2p, plan.p2p, each, nranks=n, nnodes=plan.nnodes, network=net, ll_step=ll_step, version=version,
            ll_threshold=opts.p2p_ll_threshold, ll_part_step=int(ll.buffer_bytes / consts.steps),
        )
        for net in (False, True)
    }
    return [P2pSend(r, peer, peer // ppn != rank // ppn, each, ops[peer // ppn != rank // ppn]) for r, peer in peers]


class P2P(NcclAlgorithm):
    """NCCL's point-to-point schedule, simulated: every rank sends each peer's bytes on the parts NCCL cuts them into,
    one flow a part, all at once.

    A part runs on one channel (its round's base channel plus its index, NCCL's bit-reversed spread) and streams at
    that channel's point-to-point rate shared with the other parts the rank has on it: NCCL gives a peer 2 channels
    per NVLink's worth of bandwidth (paths.cc ncclTopoGetNchannels), i.e. provisions a channel for half an NVLink
    (ncclTopoNVLinkBw / 2: 10 GB/s on Ampere, 10.3 on Hopper, 20.05 on Blackwell), and a channel's thread block
    splits its warps evenly among the sends it runs (sendrecv.h); on GPUs without NVLink a channel runs at the
    plan's per-channel rate. A copy to oneself is not simulated (it crosses no link and NCCL runs it beside the
    sends). What a part pays: the base latency once, the hop's per-step latency on arrival, its bytes at its rate
    over the path's links (max-min fair with the others). Not modelled: the receiver's copy out of NCCL's buffer
    (a part's chunks are stored and forwarded once; only the hop's latency is charged per part), and batches of more
    than 8 sends on one channel running one after another (they share the channel here)."""

    name = "P2P"
    table = "Ring"

    def protocols(self, plan: NcclPlan, opts: NcclOptions, collective: str) -> tuple[str, ...]:
        return ("LL", "Simple") if collective in P2P_COLLECTIVES else ()

    def pick(self, plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, collective: str, nbytes: int) -> str:
        """The protocol NCCL sends with (enqueue.cc addP2pToPlan): LL when every send of every rank qualifies (a
        peer's bytes at most its parts x NCCL_P2P_LL_THRESHOLD, inside a node: a network peer has no LL buffers,
        init.cc NCCL_ALLOC_P2P_NET_LL_BUFFERS), else Simple. NCCL picks per send; collsim runs one protocol a
        collective, so where sends differ they all run Simple, the protocol of the slowest (a network send), which
        the collective waits for. A sendrecv's sends are looked at on every rank (rank 0's may stay inside its
        node where another crosses, or be none: ``workload.peers``); an all-to-all's rank 0 has every kind."""
        ranks = range(len(plan.ranks)) if collective == "sendrecv" else range(1)
        sends = [s for r in ranks for s in p2p_sends(plan, opts, consts, collective, nbytes, r)]
        return "LL" if sends and all(s.op.protocol == "LL" for s in sends) else "Simple"

    def model(self, m: ModelInputs) -> tuple[float, float]:
        """The protocol's Ring base latency, then the buffer at what the rings carry (NCCL has no cost model for
        point-to-point; this column is collsim's reference)."""
        return m.consts.base_latency["Ring"][m.proto], max(m.plan.bus_bw, 1.0)

    def channels(self, plan: NcclPlan, opts: NcclOptions, consts: NcclConstants) -> int:
        """p2pnChannels."""
        return plan.p2p.channels if plan.p2p is not None else plan.channels

    def shrinks_channels(self, opts: NcclOptions, consts: NcclConstants) -> bool:
        """Point-to-point cuts a peer's bytes into parts itself (:func:`p2p_sends`), not by the collectives' rule."""
        return False

    def build(self, ctx: SimContext) -> Layout:
        out = Layout()
        plan, ranks = ctx.plan, ctx.plan.ranks
        local_rate = channel_rate(plan, ctx.consts, ctx.opts, network=False)
        net_rate = channel_rate(plan, ctx.consts, ctx.opts, network=True)
        node = {g: ctx.topo.device(g).node for g in ranks}
        slots = {n: ctx.topo.nic_slots(n) for n in set(node.values())} if plan.nnodes > 1 else {}
        assert ctx.consts.p2p is not None, "constants without NCCL's point-to-point numbers"
        per_batch = ctx.consts.p2p.works_per_batch
        all_sends = [p2p_sends(plan, ctx.opts, ctx.consts, ctx.collective, ctx.nbytes, i) for i in range(len(ranks))]
        receivers = {s.peer for sends in all_sends for s in sends}
        for i, g in enumerate(ranks):
            sends = all_sends[i]
            if ctx.opts.sendrecv_peers is not None and not sends and i not in receivers:
                continue  # a bystander of workload.peers' one send: it calls nothing, nothing of it is timed
            channels = [_part_channels(s, plan, per_batch) for s in sends]
            load = _channel_load(channels)
            roles, parts = {}, {}
            for s, chans in zip(sends, channels, strict=True):
                h = ranks[s.peer]
                sizes = s.part_sizes()
                for k, ch in enumerate(chans):
                    # across nodes the send arrives through the receiving GPU's NIC on this channel and leaves
                    # through the same rail where PXN reaches it, else through the sender's own (p2p_send_slots);
                    # inside a node the channel's path
                    if s.network:
                        sa, sb = p2p_send_slots(ctx.topo, g, h, ch, ctx.opts, ctx.consts, plan.fabric)
                        hop = ctx.hop_via(g, h, slots[node[g]][sa], slots[node[h]][sb])
                    else:
                        hop = ctx.hop(g, h, ch % max(1, plan.channels))
                    name = f"to{s.peer}p{k}"
                    rate = net_rate if s.network else local_rate
                    # a network message is a chunk of the part (net.cc: a send per step): the part's mean
                    msg = base.mean_message_bytes(max(1, sizes[k]), s.op.chunk)
                    roles[name] = ctx.hop_role(hop, table="Ring", cap=rate / load[ch], message_bytes=msg)
                    parts[name] = sizes[k]
            out.roles[g] = roles
            out.structure[g] = parts
        return out

    def launch(self, run: Launcher, e: Entity) -> Event | None:
        parts: dict[str, int] = run.layout.structure[e]

        def sends() -> Proc:
            arrivals = [run.sender(e, role)(nbytes)[1] for role, nbytes in parts.items() if nbytes > 0]
            yield AllOf(run.env, arrivals)

        return run.start(e, sends())


def channel_rate(plan: NcclPlan, consts: NcclConstants, opts: NcclOptions, *, network: bool) -> float:
    """One point-to-point channel's rate (bytes/s), as NCCL provisions channels (paths.cc ncclTopoGetNchannels):
    inside a node half an NVLink as NCCL rates the GPU's (ncclTopoNVLinkBw; 2 channels per NVLink) where the GPUs
    have NVLink, else the plan's per-channel rate; to another node NCCL_P2P_PER_CHANNEL_NET_BW (14 GB/s, from 2.29),
    before it half a NIC (2 channels per NIC)."""
    p2p = consts.p2p
    if network:
        if p2p is not None and not opts.before(p2p.net_channels_by_bw_since):
            return p2p.per_channel_net_bw
        return plan.nic_bw / 2 if plan.nic_bw > 0 else plan.channel_bw
    if plan.nvl_bw > 0 and p2p is not None:
        return p2p.nvlink_link_bw(plan.sm) / 2
    return plan.channel_bw


def _part_channels(s: P2pSend, plan: NcclPlan, per_batch: int) -> list[int]:
    """The channels of a send's parts: its round's base, then consecutive (device.h ncclP2pChannelForPart);
    ``per_batch``: NCCL_MAX_DEV_WORK_P2P_PER_BATCH, also the default schedule group size, whose gcd with the GPUs a
    node the rounds' bases step by (channel.h: comm->p2pSchedGroupSize; it took 8 with 4 GPUs a node, every round on
    one base)."""
    assert plan.p2p is not None
    c = plan.p2p.channels
    group = sched_group_size(max(1, plan.ppn), per_batch)
    base = round_base(s.round, c, plan.nnodes, group, per_batch)
    return [(base + k) % c for k in range(s.op.parts)]


def _channel_load(channels: list[list[int]]) -> dict[int, int]:
    """Parts on each channel, given each send's parts' channels (the sends a channel's warps are split among)."""
    load: dict[int, int] = {}
    for chans in channels:
        for ch in chans:
            load[ch] = load.get(ch, 0) + 1
    return load
