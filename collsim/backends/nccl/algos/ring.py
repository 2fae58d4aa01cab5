"""NCCL's Ring: the pipelined ring for allreduce, all-gather and reduce-scatter; a chain along the ring for
broadcast and reduce."""

from __future__ import annotations

from simpy.events import Event

from collsim.algorithms import NcclRingMachine, RingChunking
from collsim.algorithms.nccl_algos import nccl_chain
from collsim.backends.nccl.base import (
    Chain,
    Entity,
    Launcher,
    Layout,
    ModelInputs,
    NcclAlgorithm,
    SimContext,
    channel_device,
    streaming_bound,
)
from collsim.backends.nccl.chunking import fewest_pieces, ring_steps
from collsim.backends.nccl.constants import NcclConstants
from collsim.backends.nccl.plan import NcclPlan
from collsim.nccl_env import NcclOptions
from collsim.vocab import NCCL_PROTOCOLS, P2P_COLLECTIVES

__all__ = ["RING_COLLECTIVES", "Ring", "launch_chain", "ring_plateau"]

#: Collectives the ring runs as NCCL's ring schedule (the others as a chain along it).
RING_COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")


def ring_plateau(plan: NcclPlan, consts: NcclConstants, proto: str, collective: str, nbytes: int) -> float:
    """NCCL's "plateau effect of ring" (tuning.cc): the factor on a Ring/Simple allreduce's latency across nodes
    once it carries at least 64 bytes per rank and channel (x1.4 from sm80 on, x1.9 below); 1 otherwise.

    >>> from types import SimpleNamespace
    >>> plan = NcclPlan(["g"] * 16, 2, 16, [], {}, "ampere", 0.0, "NVLINK", 0.0, 0.0, 0.0)
    >>> consts = SimpleNamespace(ring_plateau_latency_factor={"volta": 1.9, "ampere": 1.4})
    >>> [ring_plateau(plan, consts, "Simple", "allreduce", b) for b in (16 * 16 * 64 - 1, 16 * 16 * 64)]
    [1.0, 1.4]
    >>> ring_plateau(plan, consts, "LL128", "allreduce", 1 << 30)
    1.0
    """
    per_rank_channel = nbytes / (plan.channels * len(plan.ranks))
    if plan.nnodes > 1 and proto == "Simple" and collective == "allreduce" and per_rank_channel >= 64:
        return consts.ring_plateau_latency_factor.get(plan.arch, 1.0)
    return 1.0


def launch_chain(run: Launcher, e: Entity) -> Event:
    """One entity of a pipelined chain (:func:`~collsim.algorithms.nccl_algos.nccl_chain`): receives each slice
    from its predecessor and forwards it to its successor."""
    link: Chain = run.layout.structure[e]
    ctx = run.ctx
    body = nccl_chain(
        run.board,
        e,
        run.rep(link.pred) if link.pred else None,
        run.rep(link.succ) if link.succ else None,
        data_bytes=ctx.per_channel,
        chunking=ctx.chunking,
        send=run.sender(e, "send") if "send" in run.roles(e) else None,
        whole_steps=run.whole(e, "send"),
        slots=run.slots(e, "send"),
    )
    run.start(e, body)
    return run.done(e)


class Ring(NcclAlgorithm):
    """Ring: every channel's ring (:attr:`NcclPlan.rings`), 2(n-1) steps per chunk for allreduce, n-1 for
    all-gather and reduce-scatter; broadcast and reduce as a chain from (or to) the root along the ring."""

    name = "Ring"
    cell_scheduled = True

    def protocols(self, plan: NcclPlan, opts: NcclOptions, collective: str) -> tuple[str, ...]:
        return () if collective in P2P_COLLECTIVES else NCCL_PROTOCOLS

    def model(self, m: ModelInputs) -> tuple[float, float]:
        """LL: llMaxBw and x0.5 (LL's lines carry 8 data bytes in 16; x 1/4 before 2.21); LL128: 92% (70% with one
        GPU per node before 2.23) and a per-channel cap x the graph's channels (``plan.tuner_channels``); latency
        = baseLat + per-step hwLat (intra-node steps >= netOverhead across nodes) x the ring's plateau factor;
        broadcast and reduce, chains: baseLat + one hwLat."""
        plan, consts, proto = m.plan, m.consts, m.proto
        bus, before = m.bus, consts.tuner_formulas_before
        if proto == "LL":
            frac = consts.ring_ll_bw_fraction
            if "ring_ll_half" in m.older:  # before 2.21: x 1/4, or x 1/3 on one node unless allreduce or reduce
                gather = plan.nnodes == 1 and m.collective not in ("allreduce", "reduce")
                frac = before["ring_ll_fraction_one_node" if gather else "ring_ll_fraction"]
            bus = min(consts.ll_bw(plan.arch, plan.cpu_vendor, m.idx), bus * frac)
        elif proto == "LL128":
            cap = plan.tuner_channels * consts.per_channel_max_ring_ll128_bw[plan.arch][m.idx]
            eff = consts.ll128_tuner_efficiency
            if "ring_ll128_ppn" in m.older and plan.ppn < 2:  # before 2.23: "ppn < 2 ? 0.7 : 0.92"
                eff = before["ring_ll128_one_ppn"]
            bus = min(eff * bus, cap)
        algbw = bus * m.n / m.nsteps
        if m.collective in ("broadcast", "reduce"):
            # tuning.cc (v2.30.7-1 lines 391-399): a chain's latency is one hwLat of the ring's hardware class (NET
            # across nodes) when every channel follows the same ring (graph->sameChannels, what NCCL's search tries
            # first and keeps on the symmetric nodes collsim builds); NCCL prices nsteps of them otherwise
            hw = "NET" if plan.nnodes > 1 else plan.intra_hw
            return m.lat + consts.hw_latency[hw]["Ring"][proto], algbw
        intra = m.intra
        if plan.nnodes > 1:
            intra = max(intra, plan.net_overhead * consts.protocols[proto].ring_net_overhead_factor)
        lat = m.lat + (m.nsteps - m.ninter) * intra + m.ninter * m.inter
        lat *= ring_plateau(plan, consts, proto, m.collective, m.nbytes)
        return lat, algbw

    def plateau(self, plan: NcclPlan, consts: NcclConstants, proto: str, collective: str, nbytes: int) -> float:
        return ring_plateau(plan, consts, proto, collective, nbytes)

    def min_time(self, ctx: SimContext) -> float:
        """A ring entity sends ``nsteps / n`` of its channel's bytes, one slice after another (a chain: all of them)."""
        if ctx.collective not in RING_COLLECTIVES:
            return streaming_bound(ctx, ctx.per_channel) if ctx.n > 1 else ctx.base
        nsteps = ring_steps(ctx.collective, ctx.n)
        return streaming_bound(ctx, ctx.per_channel * nsteps / ctx.n)

    def build(self, ctx: SimContext) -> Layout:
        out = Layout()
        plan = ctx.plan
        for c in range(ctx.nc):
            ring = plan.rings[c]
            if ctx.collective in RING_COLLECTIVES:
                for i, g in enumerate(ring):
                    role = ctx.hop_role(plan.hops[(c, i)])
                    role.latency *= ctx.plateau
                    out.roles[(c, g)] = {"send": role}
                    out.relations.append(((c, g), "pred", (c, ring[i - 1])))
                continue
            root = ring.index(plan.ranks[ctx.opts.root % len(plan.ranks)])  # workload.root
            order = ring[root:] + ring[:root]  # root first
            if ctx.collective == "reduce":
                order = order[1:] + order[:1]  # root last
            for i, g in enumerate(order):
                nxt = order[i + 1] if i + 1 < len(order) else None
                out.roles[(c, g)] = {} if nxt is None else {"send": ctx.hop_role(ctx.hop(g, nxt, c))}
                out.structure[(c, g)] = Chain((c, order[i - 1]) if i > 0 else None, (c, nxt) if nxt else None)
                if i > 0:
                    out.relations.append(((c, g), "pred", (c, order[i - 1])))
        return out

    def sim_chunking(self, ctx: SimContext, layout: Layout) -> RingChunking:
        """The ring's steps in the fewest pieces that give the same times (:func:`fewest_pieces`, on every role's
        latency, post and cap as the sender pays them); as built with jitter (a step's draw breaks the argument)
        and for the chain collectives."""
        ch = ctx.chunking
        if ctx.collective not in RING_COLLECTIVES or ctx.opts.jitter > 0:
            return ch
        hops = {
            (ro.latency * ch.latency_steps, ro.post * ch.steps_per_post, ro.cap)
            for roles in layout.roles.values()
            for ro in roles.values()
        }
        return fewest_pieces(ch, min(ch.loops(ctx.n, ctx.per_channel)), sorted(hops))

    def launch(self, run: Launcher, e: Entity) -> Event | None:
        ctx = run.ctx
        if ctx.collective not in RING_COLLECTIVES:
            return launch_chain(run, e)
        c, g = channel_device(e)
        ring = ctx.plan.rings[c]
        i = ring.index(g)
        n = ctx.n
        machine = NcclRingMachine(
            run.board,
            e,
            run.rep((c, ring[i - 1])),
            run.rep((c, ring[(i + 1) % n])),
            nranks=n,
            data_bytes=ctx.per_channel,
            chunking=ctx.chunking,
            send=run.sender_then(e, "send"),
            nsteps=ring_steps(ctx.collective, n),
            whole_steps=run.whole(e, "send"),
            slots=run.slots(e, "send"),
        )
        run.start_machine(e, machine.start)
        return run.done(e)
