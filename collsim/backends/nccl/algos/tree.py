"""NCCL's Tree allreduce: a chain in each node and NCCL's double binary tree across nodes, reduce up and broadcast
down at once, slice by slice."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from simpy.events import Event

from collsim.algorithms.nccl_algos import NcclTreeMachine, nccl_tree_down, nccl_tree_up
from collsim.backends.nccl.base import (
    Entity,
    Launcher,
    Layout,
    ModelInputs,
    NcclAlgorithm,
    Role,
    SimContext,
    streaming_bound,
)
from collsim.backends.nccl.constants import NcclConstants
from collsim.backends.nccl.plan import Hop, NcclPlan
from collsim.backends.nccl.trees import tree_links
from collsim.nccl_env import NcclOptions
from collsim.vocab import NCCL_PROTOCOLS

__all__ = ["Tree", "TreeLinks", "launch_up_down", "tree_correction"]


def tree_correction(consts: NcclConstants, proto: str, nbytes: int, limit: int = 23) -> float:
    """NCCL's tree correction factor for an allreduce of ``nbytes``: the table's entry at log2(nbytes / 64) while
    that is below ``limit`` (tuning.cc applies it to Tree for logSize < 23, to NVLSTree on Blackwell for < 24), and
    1 beyond (Tree: from 512 MiB on).

    >>> from types import SimpleNamespace
    >>> consts = SimpleNamespace(tree_correction={"Simple": [0.9] * 7 + [0.8, 0.7, 0.6, 0.6] + [0.5] * 13})
    >>> [tree_correction(consts, "Simple", 1 << k) for k in (6, 16, 28, 29, 30)]  # type: ignore[arg-type]
    [0.9, 0.6, 0.5, 1.0, 1.0]
    """
    table = consts.tree_correction[proto]
    bucket = _bucket(nbytes)
    return table[bucket] if bucket < min(limit, len(table)) else 1.0


def _bucket(nbytes: int) -> int:
    """tuning.cc's size bucket of the tree correction table: log2(nbytes / 64), from 64 B on."""
    return int(math.log2(max(nbytes, 64) / 64))


@dataclass(frozen=True)
class TreeLinks:
    """An entity of a tree: its parent (None at the root) and children, in a fixed order."""

    parent: Entity | None
    children: Sequence[Entity]


def launch_up_down(
    run: Launcher, e: Entity, parent: Entity | None, kids: Sequence[Entity], share: float | None = None
) -> None:
    """Start ``e``'s reduce towards ``parent`` and broadcast to ``kids`` (two processes, concurrent): CollNet's
    schedule (the Tree algorithm runs :class:`~collsim.algorithms.nccl_algos.NcclTreeMachine`).

    ``share``: the participant handles that fraction of every slice, in whole chunks (an in-network reducer). No
    buffer slots are kept (``buffer_slots=False``): the reducer is the switch, whose buffering is SHARP's, not an
    NCCL connection's NCCL_STEPS, and the GPUs' steps toward it are counted in its own, larger slices."""
    ctx = run.ctx
    roles = run.roles(e)
    chunking = ctx.chunking
    if share is not None:
        chunking = dataclasses.replace(
            chunking, chunk_bytes=chunking.chunk_bytes * share, slices_per_chunk=1, slices_per_post=1
        )
    else:
        share = 1.0
    kid_reps = [run.rep(k) for k in kids]
    downs = [f"down{k}" for k in range(len(kids))]
    up = nccl_tree_up(
        run.board,
        e,
        run.rep(parent) if parent else None,
        kid_reps,
        data_bytes=ctx.per_channel * share,
        chunking=chunking,
        send_up=run.sender(e, "up") if "up" in roles else None,
        whole_steps=run.whole(e, "up"),
        buffer_slots=False,
    )
    down = nccl_tree_down(
        run.board,
        e,
        kid_reps,
        data_bytes=ctx.per_channel * share,
        chunking=chunking,
        send_down=[run.sender(e, d) for d in downs],
        whole_steps=run.whole(e, *downs),
        buffer_slots=False,
    )
    run.start(e, up)
    run.start(e, down)


class Tree(NcclAlgorithm):
    """Tree allreduce (every protocol): per channel, a chain from the GPU next to the channel's NIC in each node and
    one of NCCL's two binary trees across nodes (even channels tree 0, odd channels tree 1)."""

    name = "Tree"
    mergeable = True
    cell_scheduled = True

    def protocols(self, plan: NcclPlan, opts: NcclOptions, collective: str) -> tuple[str, ...]:
        return NCCL_PROTOCOLS if collective == "allreduce" and len(plan.ranks) > 1 else ()

    def model(self, m: ModelInputs) -> tuple[float, float]:
        """Two nodes: bound by the intra-node links (half the ring's traffic crosses the network; tuning.cc takes
        bwIntra for nNodes <= 2); allreduce x0.92 and perChMaxTreeBw; LL /3.8 and llMaxBw; LL128 7/9 on one node,
        120/128 across, and a per-channel cap; x0.85 for a TREE-pattern graph (``m.tree_pattern``); algBw = busBw / 2
        x the tree correction factor. Latency: baseLat +
        2 x (chain steps x intra + tree depth x inter)."""
        plan, consts, proto = m.plan, m.consts, m.proto
        arch, idx, nch = plan.arch, m.idx, plan.tuner_channels  # graphs[TREE]->nChannels, before connect.cc's copies
        bus = m.bus
        if plan.nnodes == 2:
            # two nodes are a special case (NCCL maintainers, NVIDIA/nccl#946 and nccl-tests#196): a tree sends half
            # the ring's traffic over the network, so it can reach ~2x the network speed, as far as NCCL's search
            # raised the tree's bwIntra (plan.tree_bw: not at all where the NIC's speed tops the release's ladder)
            bus = min(plan.intra_bw, plan.tree_bw or 2 * plan.bus_bw)
        if m.collective == "allreduce":  # tuning.cc: "AllReduce pipelines two operations", every protocol
            bus = min(consts.tree_allreduce_efficiency * bus, nch * consts.per_channel_max_tree_bw[arch][idx])
        if proto == "LL":
            bus = min(bus / consts.tree_ll_bw_divisor, consts.ll_bw(arch, plan.cpu_vendor, idx))
        elif proto == "LL128":
            frac = consts.tree_ll128_fraction[0 if plan.nnodes == 1 else 1]
            bus = min(bus * frac, nch * consts.per_channel_max_tree_ll128_bw[arch][idx])
        bus *= m.tree_pattern  # x0.85 for a plain TREE-pattern graph (one GPU per node, from 2.26)
        algbw = bus * 0.5 * tree_correction(consts, proto, m.nbytes)
        lat = m.lat + 2 * ((plan.ppn - 1) * m.intra + int(math.log2(plan.nnodes)) * m.inter)
        return lat, algbw

    def wire_divisor(self, consts: NcclConstants, collective: str, proto: str, nbytes: int) -> float:
        """NCCL's tree allreduce kernels reach only a fraction of the link rate: tuning.cc carries it as an
        efficiency (x0.92, "AllReduce pipelines two operations"), charged on the links here too, and a size-dependent
        correction factor fitted to NVIDIA's measurements, which prices the choice only (:func:`tree_correction` in
        :meth:`model`). The simulation plays out what that factor fitted: the pipeline's fill and the thread split of
        every channel (:meth:`build`). Charging the factor as well, as collsim did until 2026-12-05, counted the
        split twice (docs/accuracy.md, "The tree's thread split")."""
        return consts.tree_allreduce_efficiency if collective == "allreduce" else 1.0

    def min_time(self, ctx: SimContext) -> float:
        """Every GPU but the root sends its channel's bytes up, one slice after another."""
        return streaming_bound(ctx, ctx.per_channel)

    def build(self, ctx: SimContext) -> Layout:
        """Every rank's roles: up to its parent and down to each child, each at its share of the channel's threads
        (:meth:`_split_role`)."""
        out = Layout()
        up_share = ctx.consts.tree_direction_share
        for c in range(ctx.nc):
            parent, children = tree_links(ctx.plan, c, ctx.topo)
            for g in ctx.plan.rings[c]:
                roles: dict[str, Role] = {}
                par = parent[g]
                if par is not None:
                    roles["up"] = self._split_role(ctx, ctx.hop(g, par, c), up_share)
                    out.relations.append(((c, g), "parent", (c, par)))
                down_share = 1.0 if par is None else 1.0 - up_share  # the root's threads all reduce and send down
                for k, ch in enumerate(children[g]):
                    roles[f"down{k}"] = self._split_role(ctx, ctx.hop(g, ch, c), down_share)
                out.roles[(c, g)] = roles
                out.structure[(c, g)] = TreeLinks((c, par) if par else None, [(c, ch) for ch in children[g]])
        return out

    @staticmethod
    def _split_role(ctx: SimContext, hop: Hop, share: float) -> Role:
        """A role over ``hop`` at ``share`` of the channel's rate. NCCL's tree kernel splits a channel's threads
        between the reduce up and the broadcast down at every rank but the root (all_reduce.h ``runTreeSplit``: 60%
        or 70% reduce, sized so that the two directions keep pace), so each direction has half the channel's rate
        (``tree_direction_share`` in nccl.yaml). An LL hop across the network is one GPU's proxy sending one
        direction of the channel at the ring's per-channel LL figure (the proxy checks every line, net.cc): whole."""
        if ctx.proto == "LL" and hop.hw == "NET":
            return ctx.hop_role(hop)
        return ctx.hop_role(hop, cap=ctx.hop_cap(hop) * share)

    def launch(self, run: Launcher, e: Entity) -> Event | None:
        """One callback-driven machine per entity (:class:`~collsim.algorithms.nccl_algos.NcclTreeMachine`: the
        schedule of :func:`launch_up_down`'s two processes, which CollNet still runs beside its reducer)."""
        links: TreeLinks = run.layout.structure[e]
        ctx = run.ctx
        downs = [f"down{k}" for k in range(len(links.children))]
        machine = NcclTreeMachine(
            run.board,
            e,
            run.rep(links.parent) if links.parent else None,
            [run.rep(k) for k in links.children],
            data_bytes=ctx.per_channel,
            chunking=ctx.chunking,
            send_up=run.sender_then(e, "up") if "up" in run.roles(e) else None,
            send_down=[run.sender_then(e, d) for d in downs],
            whole_steps_up=run.whole(e, "up"),
            whole_steps_down=run.whole(e, *downs),
            slots_up=run.slots(e, "up"),
            slots_down=[run.slots(e, d) for d in downs],
        )
        run.start_machine(e, machine.start)
        return run.done(e)
