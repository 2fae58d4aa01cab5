"""PAT (all-gather and reduce-scatter with one GPU per node): ceil(log2 n) exchanges at doubling distance
(Bruck's pattern, any n)."""

from __future__ import annotations

import math

from simpy.events import Event

from collsim.algorithms.nccl_algos import nccl_pat
from collsim.backends.nccl.base import Entity, Launcher, Layout, ModelInputs, NcclAlgorithm, SimContext
from collsim.backends.nccl.plan import NcclPlan
from collsim.nccl_env import NcclOptions

__all__ = ["PAT"]


class PAT(NcclAlgorithm):
    """PAT: exchange k sends min(2^k, n - 2^k) blocks of 1/n of a channel's buffer to the rank 2^k ahead and
    receives as many from the rank 2^k behind (reversed for reduce-scatter)."""

    name = "PAT"

    def protocols(self, plan: NcclPlan, opts: NcclOptions, collective: str) -> tuple[str, ...]:
        # tuning.cc ncclPatEnable (v2.30.7-1 lines 216-223): NCCL_PAT_ENABLE=0 disables it; one GPU per node.
        # enqueue.cc (v2.23.4-1 line 1798, v2.30.7-1 lines 2009-2012): "Tree reduceScatter doesn't support scaling
        # yet": no PAT for a reduce-scatter whose op scales (an average: PreMulSum on floats, SumPostDiv on integers)
        ok = collective in ("allgather", "reduce_scatter") and plan.ppn == 1 and len(plan.ranks) > 1
        if collective == "reduce_scatter" and opts.op == "avg":
            ok = False
        return ("Simple",) if ok and opts.pat_enable else ()

    def refusal(self, plan: NcclPlan, opts: NcclOptions) -> str | None:
        return None if opts.pat_enable else "NCCL_PAT_ENABLE=0"

    def model(self, m: ModelInputs) -> tuple[float, float]:
        """tuning.cc (v2.30.7-1): PAT's bus bandwidth x0.75 of the ring's, used as its algorithm bandwidth (NCCL
        converts bus to algorithm bandwidth for Ring only among all-gather and reduce-scatter's algorithms);
        latency baseLat + log2i(nNodes) x (interLat / 3.5) + nRanks x 2.8 us."""
        c = m.consts
        lat = m.lat + (m.plan.nnodes.bit_length() - 1) * m.inter / c.pat_log_divisor + m.n * c.pat_per_rank
        return lat, c.pat_bw_factor * m.bus

    @staticmethod
    def _shifts(n: int, collective: str) -> list[int]:
        shifts = [1 << k for k in range(math.ceil(math.log2(n)))]
        return shifts[::-1] if collective == "reduce_scatter" else shifts

    def build(self, ctx: SimContext) -> Layout:
        out = Layout()
        n, ranks = ctx.n, ctx.plan.ranks
        shifts = self._shifts(n, ctx.collective)
        for c in range(ctx.nc):
            for r, g in enumerate(ranks):
                targets = [ranks[(r + d) % n] for d in shifts]
                out.roles[(c, g)] = {f"x{k}": ctx.hop_role(ctx.hop(g, t, c)) for k, t in enumerate(targets)}
                out.structure[(c, g)] = [(c, ranks[(r - d) % n]) for d in shifts]
                out.relations.extend(((c, g), f"x{k}", (c, t)) for k, t in enumerate(targets))
        return out

    def launch(self, run: Launcher, e: Entity) -> Event | None:
        ctx = run.ctx
        n = ctx.n
        blocks = [min(1 << k, n - (1 << k)) for k in range(math.ceil(math.log2(n)))]
        if ctx.collective == "reduce_scatter":
            blocks.reverse()
        body = nccl_pat(
            run.board,
            e,
            [run.rep(p) for p in run.layout.structure[e]],
            sizes=[ctx.per_channel / n * b for b in blocks],
            sends=[run.sender(e, f"x{k}") for k in range(len(blocks))],
        )
        run.start(e, body)
        return run.done(e)
