"""CollNet (fabrics with in-network reduction, e.g. SHARP): the network switch reduces. Direct makes every GPU the
head of its 1/ppn share on its own NIC after an intra-node reduce-scatter; Chain sends the whole slice up a chain
of the node's GPUs to one head per channel."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simpy.events import Event

from collsim.algorithms.nccl_algos import nccl_nvls_tree
from collsim.backends.common import link_uses
from collsim.backends.nccl.algos.tree import launch_up_down
from collsim.backends.nccl.base import Entity, Launcher, Layout, ModelInputs, NcclAlgorithm, Role, SimContext
from collsim.backends.nccl.plan import NcclPlan, node_chain
from collsim.backends.nccl.tags import SHARP_TAG, TRANSPORT_TAG
from collsim.nccl_env import NcclOptions

__all__ = ["CollNetChain", "CollNetDirect", "CollNetLinks"]


@dataclass(frozen=True)
class CollNetLinks:
    """A CollNet participant: a GPU (its parent: the chain's previous GPU or, for a head, the in-network reducer;
    its chain child; its node's GPUs) or the in-network reducer itself (``switch``; its children are the heads)."""

    switch: bool
    parent: Entity | None
    children: Sequence[Entity]
    peers: Sequence[Entity]


class _CollNet(NcclAlgorithm):
    """What both CollNet variants share: candidates, refusal, cost model, the reducer, the launch."""

    mergeable = True
    direct = False

    def protocols(self, plan: NcclPlan, opts: NcclOptions, collective: str) -> tuple[str, ...]:
        ok = collective == "allreduce" and len(plan.ranks) > 1 and plan.nnodes > 1
        return ("Simple",) if ok and plan.nic_count and self.refusal(plan, opts) is None else ()

    def refusal(self, plan: NcclPlan, opts: NcclOptions) -> str | None:
        """A fabric that reduces in the network, NCCL_COLLNET_ENABLE=1 (NCCL's default is 0: src/init.cc
        v2.30.7-1 lines 63 and 2201-2203; tuning.cc disables both CollNet algorithms with collnetEnable 0), for
        CollNetDirect an NVSwitch in the node (tuning.cc: ``if (nvsCount == 0 && a == NCCL_ALGO_COLLNET_DIRECT)
        disable``), and at most 8 GPUs per node (enqueue.cc: CollNetDirect from 2.24, CollNetChain from 2.28)."""
        if not plan.fabric.get("in_network_reduction"):
            return "CollNet needs a fabric with in-network reduction (fabric.in_network_reduction)"
        if not opts.collnet_enable:
            return "CollNet needs NCCL_COLLNET_ENABLE=1 (NCCL's default 0)"
        if self.direct and plan.nvswitch is None:
            return "CollNetDirect needs an NVSwitch in the node"
        # enqueue.cc: at most NCCL_MAX_DIRECT_ARITY + 1 GPUs per node (``collnet_max_local_gpus``; plan_nccl)
        return plan.unsupported.get(self.name)

    def model(self, m: ModelInputs) -> tuple[float, float]:
        """Every node sends the buffer once and gets it back once, spread over its NICs (collsim's reading;
        tuning.cc gives the latencies): algBw = min(busBw, 2 x the NICs) / 2; latency = baseLat + 2 (ppn - 1)
        intra + inter for Chain, baseLat + 2 (intra + (ppn - 1) x 0.4 us) + inter for Direct (tuning.cc v2.30.7-1
        lines 416-421)."""
        plan = m.plan
        bus = min(m.bus, plan.nic_count * plan.nic_bw * 2)
        if self.direct:  # 2 x (min(1, ppn - 1) x intra + (ppn - 1) x 0.4 us) + inter ("arity serialization")
            lat = 2 * (min(1, plan.ppn - 1) * m.intra + (plan.ppn - 1) * m.consts.collnet_direct_arity) + m.inter
        else:
            lat = 2 * (plan.ppn - 1) * m.intra + m.inter
        return m.lat + lat, bus * 0.5

    def _gpu_roles(self, ctx: SimContext, c: int, g: str, chain: list[str], node_gpus: list[str]) -> dict[str, Role]:
        raise NotImplementedError

    def build(self, ctx: SimContext) -> Layout:
        out = Layout()
        plan, topo = ctx.plan, ctx.topo
        for c in range(ctx.nc):
            heads: dict[Entity, list[tuple[str, str]]] = {}
            for g in plan.ranks:
                dev = topo.device(g)
                nics = topo.nics(dev.node)
                node_gpus = [h for h in plan.ranks if topo.device(h).node == dev.node]
                chain = node_chain(topo, dev.node, nics[c % len(nics)].name)
                roles = self._gpu_roles(ctx, c, g, chain, node_gpus)
                k = chain.index(g)
                parent: Entity | None = (c, chain[k - 1]) if (not self.direct and k > 0) else None
                if parent is not None:
                    out.relations.append(((c, g), "parent", parent))
                if self.direct or k == 0:
                    nic = nics[(dev.index if self.direct else c) % len(nics)].name
                    sw = next(
                        d for d in topo.route(nic, topo.nics((dev.node + 1) % plan.nnodes)[0].name)
                        if topo.device(d.dst).kind == "switch"
                    ).dst
                    up = link_uses(topo.pcie_route(g, nic)) + link_uses(topo.route(nic, sw))
                    hw_lat = ctx.consts.hw_latency["NET"][self.name]["Simple"] * ctx.consts.sim_step_latency_scale
                    roles["up"] = ctx.path_role(up.uses, hw_lat + up.latency, SHARP_TAG, ctx.wire)
                    parent = ("sharp", c, sw, dev.index if self.direct else 0)
                    heads.setdefault(parent, []).append((g, nic))
                    out.relations.append(((c, g), "parent", parent))
                out.roles[(c, g)] = roles
                kids = [] if self.direct else ([(c, chain[k + 1])] if k + 1 < len(chain) else [])
                out.structure[(c, g)] = CollNetLinks(False, parent, kids, [(c, h) for h in node_gpus])
            for key, members in heads.items():
                sw = key[2]  # type: ignore[index]
                sw_roles: dict[str, Role] = {}
                for k, (g, nic) in enumerate(members):
                    down = link_uses(topo.route(sw, nic)) + link_uses(topo.pcie_route(nic, g))
                    sw_roles[f"down{k}"] = ctx.path_role(down.uses, down.latency, SHARP_TAG, ctx.wire)
                out.roles[key] = sw_roles
                out.structure[key] = CollNetLinks(True, None, [(c, g) for g, _nic in members], [])
        return out

    def launch(self, run: Launcher, e: Entity) -> Event | None:
        links: CollNetLinks = run.layout.structure[e]
        share = 1.0 / run.ctx.plan.ppn if self.direct else 1.0
        if links.switch:  # the in-network reducer: waits for every head, sends the sum back
            launch_up_down(run, e, None, links.children, share=share)
            return None
        self._launch_gpu(run, e, links, share)
        return run.done(e)

    def _launch_gpu(self, run: Launcher, e: Entity, links: CollNetLinks, share: float) -> None:
        launch_up_down(run, e, links.parent, links.children)


class CollNetDirect(_CollNet):
    """CollNetDirect: an intra-node reduce-scatter over P2P, every GPU sends its 1/ppn share through its own NIC to
    the switch, which reduces across nodes and sends the sum back; then an intra-node all-gather."""

    name = "CollNetDirect"
    direct = True

    def _gpu_roles(self, ctx: SimContext, c: int, g: str, chain: list[str], node_gpus: list[str]) -> dict[str, Role]:
        p2p = ctx.hop(g, node_gpus[(node_gpus.index(g) + 1) % len(node_gpus)], c)
        frac = (len(node_gpus) - 1) / len(node_gpus)
        # (n-1)/n of the slice leaves each GPU and (n-1)/n arrives (from the others, by symmetry)
        tag = TRANSPORT_TAG[p2p.transport]
        return {
            "rs": ctx.path_role(p2p.path.uses, p2p.path.latency, tag, frac),
            "ag": ctx.path_role(p2p.path.uses, p2p.path.latency, tag, frac),
        }

    def _launch_gpu(self, run: Launcher, e: Entity, links: CollNetLinks, share: float) -> None:
        ctx = run.ctx
        for body in nccl_nvls_tree(
            run.board,
            e,
            [run.rep(p) for p in links.peers],
            run.rep(links.parent),
            [],
            data_bytes=ctx.per_channel,
            chunking=ctx.chunking,
            share=share,
            send_rs=run.sender(e, "rs"),
            send_up=run.sender(e, "up"),
            send_down=[],
            send_ag=run.sender(e, "ag"),
        ):
            run.start(e, body)


class CollNetChain(_CollNet):
    """CollNetChain: the whole slice goes up a chain of the node's GPUs to the channel's head, which sends it to
    the switch; the sum comes back down the chain."""

    name = "CollNetChain"

    def _gpu_roles(self, ctx: SimContext, c: int, g: str, chain: list[str], node_gpus: list[str]) -> dict[str, Role]:
        k = chain.index(g)
        roles: dict[str, Role] = {}
        if k + 1 < len(chain):
            roles["down0"] = ctx.hop_role(ctx.hop(g, chain[k + 1], c))
        if k > 0:
            roles["up"] = ctx.hop_role(ctx.hop(g, chain[k - 1], c))
        return roles
