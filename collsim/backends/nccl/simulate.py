"""Simulate one NCCL collective: NCCL's choice, the chunking, the algorithm's roles and processes on the fluid
engine (symmetric entities simulated once), and where the time went."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from simpy.events import Event

from collsim.algorithms import EventBoard
from collsim.backends.background import background_colors, background_usage, is_background, start_background
from collsim.backends.common import (
    Outcome,
    ResourceCatalog,
    new_network,
    run_stats,
    run_until_done,
)
from collsim.backends.nccl.algos import REGISTRY
from collsim.backends.nccl.base import Launcher, Layout, NcclAlgorithm, Proc, SimContext, node_index
from collsim.backends.nccl.chunking import cell_channel_count, channels_for, nvls_chunk_start, step_chunking
from collsim.backends.nccl.constants import NcclConstants
from collsim.backends.nccl.plan import NcclPlan, plan_nccl
from collsim.backends.nccl.tags import BREAKDOWN_PRIORITY, IDLE_TAG, LATENCY_TAG, LAUNCH_TAG, ONE_RANK_COPY_TAG
from collsim.backends.nccl.tuner import check_collective, checked_choice, decide, plugin_choice, tuner_times
from collsim.engine import FluidNetwork, Owner, attribute_time, build_quotient, decouple
from collsim.engine.gcpause import gc_relaxed
from collsim.nccl_env import NcclOptions
from collsim.topology import Topology

__all__ = ["fastest_pair", "simulate_nccl"]


# the set-up too (plan, machines, routes: millions of objects at 1024 GPUs, walked again by every collection of the
# older generations), not only the run (collsim.engine.gcpause)
@gc_relaxed()
def simulate_nccl(
    topo: Topology,
    opts: NcclOptions,
    consts: NcclConstants,
    nbytes: int,
    *,
    collective: str = "allreduce",
    fabric: Mapping[str, Any] | None = None,
    plan: NcclPlan | None = None,
    symmetry: bool = True,
    record: bool = False,
    check: bool = False,
    choice: tuple[str, str] | None = None,
    deadline: float | None = None,
) -> Outcome:
    """Simulate one NCCL-style collective of ``nbytes`` and return its outcome.

    ``nbytes`` follows nccl-tests: the buffer per rank for allreduce, broadcast, reduce and sendrecv, the whole
    gathered buffer (count x ranks x type) for allgather, reduce_scatter and alltoall. The (algorithm, protocol) is
    NCCL's choice (:func:`~collsim.backends.nccl.tuner.choose`) unless ``choice`` forces one.

    Every (channel, rank) is a SimPy process after the base latency (NCCL's baseLat; NVLS its hwLat, once), as its
    algorithm module launches it (:mod:`collsim.backends.nccl.algos`). Each slice pays its hop's per-step latency
    (NCCL's hwLat for the hop's class plus propagation, twice for Simple over the network) once on arrival and
    streams at its max-min fair rate, capped by one channel, with the protocol's wire overhead on every link.
    Symmetric (channel, rank) pairs are simulated once (exactly; see :mod:`collsim.engine.symmetry`), unless
    ``opts.jitter`` draws an extra latency per message (:mod:`collsim.noise`): then every entity is. With
    ``opts.decouple`` and links a perturbation slowed (or a NIC standing in for one taken down:
    :meth:`~collsim.topology.Topology.perturbed_links`), the channels that reach them leave out their traffic on
    links they share with the others (:func:`~collsim.engine.decouple`; a note says so), which keeps the rest
    symmetric: an approximation, not without symmetry, recording or background traffic. ``record``
    keeps every flow and computes the breakdown; ``check`` asserts the engine's invariants after every solve.
    With a ``deadline`` (seconds), the simulation stops there and a collective not done by then has ``time_s``
    ``inf`` (to race pairs against the fastest so far without simulating the slower ones to the end).
    """
    plan = plan or plan_nccl(topo, opts, consts, fabric)
    check_collective(collective)
    if choice is None:
        algo, proto, predicted, plugin = decide(plan, opts, consts, collective, nbytes)
    else:
        algo, proto = choice = checked_choice(plan, opts, collective, choice)
        predicted = tuner_times(plan, consts, collective, nbytes, opts).get(choice, math.nan)
        plugin = plugin_choice(plan, opts, consts, collective, nbytes)
    # a forced pair that is the plugin's pick runs on the channels the plugin sets, as NCCL would run it
    plugin_nc = plugin.channels_for((algo, proto)) if plugin is not None else None
    picked_by = plugin.note() if plugin is not None and choice is None else None
    n = len(plan.ranks)
    if nbytes == 0:  # NCCL returns at once for a count of 0 (enqueue.cc), without launching a kernel
        return Outcome("nccl", collective, algo, proto, n, 0, 0.0, notes=["count 0: nothing launched"], predicted_s=0.0)
    alg = REGISTRY[algo]
    ctx = _context(topo, plan, opts, consts, alg, proto, collective, nbytes, plugin_nc)
    layout = alg.build(ctx)
    ctx.chunking = alg.sim_chunking(ctx, layout)
    env, net = new_network(record, check)
    # per-message jitter gives every entity draws of its own: no two are alike, so every one is simulated
    symmetric = symmetry and opts.jitter <= 0
    bg = topo.background  # another job's streams (perturb.background): entities of their own colour
    usage = {**_usage(layout), **background_usage(bg)}
    notes = list(plan.notes) + ([picked_by] if picked_by else [])
    if opts.decouple:
        usage, said = _decoupled(topo, layout, usage, symmetric, record, bool(bg))
        notes += [said] if said else []
    quotient = build_quotient(
        net,
        usage,
        ctx.cat.specs,
        colors={**_colors(layout, ctx), **background_colors(bg)},
        relations=layout.relations,
        symmetric=symmetric,
    )
    reps = [e for e in quotient.reps() if not is_background(e)]
    run = Launcher(ctx, layout, env, net, EventBoard(env), quotient, reps)
    done = []
    for e in run.reps:
        ev: Event | None
        if n == 1:
            ev = env.process(_single(net, ctx.base + ctx.late(e), ctx.owner(e), one_rank_copy_s(topo, plan, nbytes)))
        else:
            ev = alg.launch(run, e)
        if ev is not None:
            done.append(ev)
    start_background(env, net, quotient, bg, done)
    t = run_until_done(env, done, deadline)
    breakdown = _breakdown(net, ctx.owner(run.reps[0]), t) if record and math.isfinite(t) else {}
    stats = run_stats(net, quotient, len(layout.roles), record)
    # NCCL has no cost model for point-to-point (enqueue.cc schedules its sends without one): the P2P column of the
    # tuner table is collsim's reference, not NCCL's prediction
    model = None if algo == "P2P" else predicted
    return Outcome("nccl", collective, algo, proto, n, nbytes, t, ctx.nc, breakdown, notes, model, **stats)


def _decoupled(
    topo: Topology, layout: Layout, usage: dict[Any, Any], symmetric: bool, record: bool, background: bool
) -> tuple[dict[Any, Any], str]:
    """``engine.decouple``: the usage with the channels that reach a slowed link (or a NIC standing in for one down)
    cut loose from the links they share with the others (:func:`~collsim.engine.decouple`), and the note saying so;
    or, where the exact simulation runs instead, the usage as it is and the note saying why."""
    perturbed = topo.perturbed_links() if symmetric and not record and not background else frozenset()
    if not perturbed:
        why = ("the symmetry reduction is off (engine.symmetry false, or noise.jitter)" if not symmetric
               else "every rank is recorded (a trace or timeline)" if record
               else "perturb.background's streams share the links" if background
               else "no link is slowed or down")  # fmt: skip
        return usage, f"engine.decouple not used: {why}; every channel simulated exactly"
    dec = decouple(usage, {("link", u, v) for u, v in perturbed}, layout.relations)
    if not dec.dropped:
        return usage, ""
    return dec.usage, (
        f"engine.decouple: {len(dec.affected)} of {len(layout.roles)} (channel, rank) pairs reach a slowed link or a "
        f"NIC standing in for one down; their traffic on the {len(dec.shared)} links they share with the others is "
        "left out (an approximation: docs/perturbations.md)"
    )


def fastest_pair(
    topo: Topology,
    opts: NcclOptions,
    consts: NcclConstants,
    nbytes: int,
    pairs: Sequence[tuple[str, str]],
    *,
    collective: str = "allreduce",
    fabric: Mapping[str, Any] | None = None,
    plan: NcclPlan | None = None,
    symmetry: bool = True,
    model_s: Mapping[tuple[str, str], float] | None = None,
) -> tuple[tuple[str, str], float]:
    """The (algorithm, protocol) of ``pairs`` whose simulation finishes first, and its time (seconds): the same
    answer as simulating every pair to the end and taking the minimum (on an exact tie, the pair listed first), but
    each pair after the first simulated runs only until the best time so far (a deadline), so slower pairs stop
    early, and a pair whose lower bound (:meth:`~collsim.backends.nccl.base.NcclAlgorithm.min_time`: the base
    latency, plus the bytes an entity streams at one channel's cap) is already past that time is not simulated.

    ``model_s`` (NCCL's cost model per pair, :func:`~collsim.backends.nccl.tuner.tuner_times`) sets the order the
    pairs are simulated in, fastest predicted first, so that the others stop at a good time.
    """
    plan = plan or plan_nccl(topo, opts, consts, fabric)
    rank = {pair: i for i, pair in enumerate(pairs)}
    order = sorted(pairs, key=lambda k: (model_s[k], rank[k])) if model_s is not None else list(pairs)
    best, t_best = order[0], math.inf
    plugin = plugin_choice(plan, opts, consts, collective, nbytes)
    for pair in order:
        # a little past the best so far, so that an exact tie finishes and the listed order can break it
        deadline = None if math.isinf(t_best) else t_best * (1 + 1e-9)
        if deadline is not None and nbytes > 0:
            alg = REGISTRY[pair[0]]
            nc = plugin.channels_for(pair) if plugin is not None else None
            if alg.min_time(_context(topo, plan, opts, consts, alg, pair[1], collective, nbytes, nc)) > deadline:
                continue  # cannot finish first, whatever the simulation would show
        kw = {"collective": collective, "plan": plan, "symmetry": symmetry}
        t = simulate_nccl(topo, opts, consts, nbytes, choice=pair, deadline=deadline, **kw).time_s  # type: ignore[arg-type]
        if t < t_best or (t == t_best and rank[pair] < rank[best]):
            best, t_best = pair, t
    return best, t_best


def _context(
    topo: Topology,
    plan: NcclPlan,
    opts: NcclOptions,
    consts: NcclConstants,
    alg: NcclAlgorithm,
    proto: str,
    collective: str,
    nbytes: int,
    plugin_nc: int | None = None,
) -> SimContext:
    """Channels (NCCL's small-size shrink, or ``plugin_nc``, the count a tuner plugin sets with its pick), chunking,
    one channel's cap, wire overhead and base latency."""
    pc = consts.protocols[proto]
    channels = alg.channels(plan, opts, consts)
    nc = channels
    if alg.shrinks_channels(opts, consts):
        nc = channels_for(plan, opts, consts, proto, nbytes, nc, alg.name)
    if plugin_nc is not None:  # enqueue.cc: the tuner's nChannels replaces the shrunk count (nMaxChannels), and
        nc = min(plugin_nc, channels)  # the schedule keeps at most the communicator's channels
    if alg.cell_scheduled:
        nc = cell_channel_count(plan, opts, consts, proto, collective, nbytes, nc, channels)
    _tuned_nc, tuned_chunk, tuned_tree_max = plan.nvls_tuned  # NCCL's NVLS tuning (Blackwell across nodes)
    start, tree_max = nvls_chunk_start(consts, opts, alg.name, tuned_chunk, tuned_tree_max)  # by NCCL release
    chunking = step_chunking(plan, consts, alg.name, proto, collective, nbytes, nc, opts.buffsize, start, tree_max)
    idx = node_index(plan.nnodes)
    cap = plan.channel_bw
    intra_cap = None
    if proto == "LL":
        def ll_cap(i: int) -> float:  # llMaxBw by GPU on one node (i = 0), by CPU across nodes
            return min(plan.channel_bw, consts.ll_bw(plan.arch, plan.cpu_vendor, i) / nc) * consts.sim_ll_bw_scale

        # tuning.cc's llMaxBw falls from one node to two because LL crosses the network (read by CPU vendor there:
        # the proxy thread checks every line's flags in host memory before it sends a step, net.cc); a channel's
        # hops inside a node are the same LL copies as on one node, so they stream at the one-node figure.
        # A network hop is one GPU's proxy sending one direction of one channel, at the ring's per-channel figure.
        # That check is per hop and does not see the node count: every network hop takes the two-node figure. The
        # tuner's lower figure for more nodes (its cost model has no per-level byte term) prices the whole step that
        # waits at each further network hop, which the simulation plays out hop by hop (docs/accuracy.md, "LL's
        # network rate at any node count")
        cap, intra_cap = (ll_cap(0), None) if idx == 0 else (ll_cap(node_index(2)), ll_cap(0))
    elif proto == "LL128":
        cap = min(cap, consts.per_channel_max_ring_ll128_bw[plan.arch][idx]) * consts.sim_ll128_bw_scale
    wire = 1.0 / pc.data_per_wire
    wire /= alg.wire_divisor(consts, collective, proto, nbytes)
    base = consts.base_latency[alg.latency_table][proto]
    # tuning.cc's "plateau effect of ring" (x1.4 on a multi-node Ring/Simple allreduce's latency, fitted by NVIDIA
    # like the tree factors): the simulation charges it on the base latency and on every hop's step latency
    plateau = alg.plateau(plan, consts, proto, collective, nbytes)
    base *= plateau
    base += alg.extra_base_latency(plan, consts)
    # one thread launching g GPUs' kernels one after another (nccl-tests -g g): the collective cannot finish before
    # the last kernel starts, (g - 1) launch gaps after the first; charged to every rank (keeps ranks symmetric)
    base += (opts.gpus_per_process - 1) * consts.group_launch_gap
    # the benchmark's timing holds the host's per-call work when it times one call on an idle GPU (scenario
    # workload.host_overhead): the kernel starts that much after the start event, on every rank
    base += consts.host_overhead(opts.host_overhead)
    base = max(0.0, base + consts.sim_launch_overhead)
    # SimContext's fields in order: the system, the collective and its choice, then what this module derived
    return SimContext(
        topo, plan, opts, consts, collective, nbytes, alg.name, proto,
        nc, chunking, wire, cap, base, plateau, ResourceCatalog(topo), intra_cap,
    )  # fmt: skip


def _usage(layout: Layout) -> dict[Any, dict[str, Any]]:
    """Resources of every entity's roles, for the symmetry quotient."""
    return {e: {name: role.uses for name, role in r.items()} for e, r in layout.roles.items()}


def _colors(layout: Layout, ctx: SimContext) -> dict[Any, Any]:
    """What the symmetry quotient must keep apart besides resources: every role's latency, cap, tag (its label: the
    colours are sorted and printed) and whether it crosses the network, whether the entity has a structure of its
    own, its straggler delay and the bytes its channel handles."""
    return {
        e: (
            ctx.late(e),
            layout.data.get(e, ctx.per_channel),
            tuple(
                sorted(
                    (k, round(ro.latency * 1e12), ro.cap, ro.tag.label, ro.net, round(ro.post * 1e12))
                    for k, ro in r.items()
                )
            ),
            str(layout.structure.get(e) is None),
        )
        for e, r in layout.roles.items()
    }


def _breakdown(net: FluidNetwork, owner: Owner, t: float) -> dict[str, float]:
    """Seconds per tag label of one representative, adding up to ``t`` (zero entries dropped)."""
    parts = attribute_time(net.records, owner, 0.0, t, BREAKDOWN_PRIORITY, latency=LATENCY_TAG, idle=IDLE_TAG)
    return {k: v for k, v in parts.items() if v > 0}


def one_rank_copy_s(topo: Topology, plan: NcclPlan, nbytes: int) -> float:
    """Seconds NCCL's one-rank call spends copying ``nbytes`` to the output: ncclLaunchOneRank (src/device/
    onerank.cu, v2.30.7-1) issues ``cudaMemcpyAsync(dst, src, count x type size)`` when the buffers differ, as
    nccl-tests' out-of-place call (collsim's tables are) has them, and a kernel of the same reads and writes for a
    pre-multiplied sum (``avg``); in place it does nothing. Each byte is read and written once in the GPU's memory:
    2 x ``nbytes`` at its preset's ``hbm_bandwidth`` (0 without one).

    >>> from collsim.api import Simulator
    >>> sim = Simulator.from_source("hgx-h100", ["cluster.visible_gpus=[0]"])
    >>> round(one_rank_copy_s(sim.topology, sim.nccl_plan, 1 << 30) * 1e6, 1)  # 2 x 1 GiB at H100's 3.35 TB/s
    641.0
    """
    spec = topo.device(plan.ranks[0]).spec
    bw = spec.get("hbm_bandwidth")
    return 2 * nbytes / float(bw) if bw else 0.0


def _single(net: FluidNetwork, base: float, owner: Owner, copy_s: float) -> Proc:
    """One rank alone: it waits for nothing, pays the base latency, then ``copy_s`` seconds of copying its input
    to its output in its own memory (:func:`one_rank_copy_s`), and is done."""
    yield net.delay(base, tag=LAUNCH_TAG, owner=owner)
    if copy_s > 0:
        yield net.delay(copy_s, tag=ONE_RANK_COPY_TAG, owner=owner)
