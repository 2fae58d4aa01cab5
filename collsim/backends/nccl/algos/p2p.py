"""Point-to-point collectives: send/recv (a two-rank chain) and all-to-all (one connection per peer, all at
once). NCCL runs them outside its ring/tree algorithms; the tuner tables' Ring rows price their steps."""

from __future__ import annotations

from simpy.events import AllOf, Event

from collsim.backends.nccl.algos.ring import launch_chain
from collsim.backends.nccl.base import Chain, Entity, Launcher, Layout, ModelInputs, NcclAlgorithm, Proc, SimContext
from collsim.backends.nccl.plan import NcclPlan
from collsim.nccl_env import NcclOptions
from collsim.vocab import P2P_COLLECTIVES

__all__ = ["P2P"]


class P2P(NcclAlgorithm):
    """send/recv: rank 0 streams its buffer to rank 1 in slices, on every channel. all-to-all: every rank sends
    bytes/n to every peer at once, each connection capped at its share of the channels."""

    name = "P2P"
    table = "Ring"

    def protocols(self, plan: NcclPlan, opts: NcclOptions, collective: str) -> tuple[str, ...]:
        return ("Simple",) if collective in P2P_COLLECTIVES else ()

    def model(self, m: ModelInputs) -> tuple[float, float]:
        """Ring/Simple's base latency, then the buffer at what the rings carry."""
        return m.consts.base_latency["Ring"]["Simple"], max(m.plan.bus_bw, 1.0)

    def build(self, ctx: SimContext) -> Layout:
        out = Layout()
        ranks = ctx.plan.ranks
        if ctx.collective == "sendrecv":
            src, dst = ranks[0], ranks[min(1, ctx.n - 1)]
            for c in range(ctx.nc):
                out.roles[(c, src)] = {"send": ctx.hop_role(ctx.hop(src, dst, c), table="Ring")}
                out.roles[(c, dst)] = {}
                out.structure[(c, src)] = Chain(None, (c, dst))
                out.structure[(c, dst)] = Chain((c, src), None)
                out.relations.append(((c, dst), "pred", (c, src)))
            return out
        cap = ctx.cap * ctx.nc / ctx.n
        for g in ranks:
            out.roles[g] = {
                f"to{j}": ctx.hop_role(ctx.hop(g, h, j % ctx.plan.channels), table="Ring", cap=cap)
                for j, h in enumerate(ranks)
                if h != g
            }
        return out

    def launch(self, run: Launcher, e: Entity) -> Event | None:
        if run.ctx.collective == "sendrecv":
            return launch_chain(run, e)
        share = run.ctx.nbytes / run.ctx.n

        def a2a() -> Proc:
            arrivals = [run.sender(e, role)(share)[1] for role in run.roles(e)]
            yield AllOf(run.env, arrivals)

        return run.start(e, a2a())
