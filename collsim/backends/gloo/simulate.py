"""Entry points: one Gloo collective, or several issued at once on the ranks' worker-thread pools."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from collsim.backends.background import background_colors, background_usage
from collsim.backends.common import (
    BackendError,
    Outcome,
    new_network,
    run_stats,
)
from collsim.backends.gloo.options import GlooConstants, GlooOptions
from collsim.backends.gloo.paths import _algorithm, _check, _schedules
from collsim.backends.gloo.plan import _colors, _plan, _relations
from collsim.backends.gloo.run import _breakdown, _notes, _run
from collsim.engine import build_quotient
from collsim.engine.gcpause import gc_relaxed
from collsim.topology import Topology

__all__ = ["simulate_gloo", "simulate_gloo_many"]


# ---------------------------------------------------------------------------------------------- entry points
# the set-up too, not only the run (collsim.engine.gcpause)
@gc_relaxed()
def simulate_gloo_many(
    topo: Topology,
    opts: GlooOptions,
    consts: GlooConstants,
    sizes: Sequence[int],
    *,
    collective: str = "allreduce",
    symmetry: bool = True,
    record: bool = False,
    check: bool = False,
    issue_at: Sequence[float] | None = None,
) -> Outcome:
    """Simulate ``len(sizes)`` Gloo collectives, issued at once or at given times (as DDP issues its buckets when
    their gradients are ready); return their outcome.

    Every rank runs them on its ``opts.threads`` worker threads: each waits for a free thread (in issue order) and
    keeps it from the hand-off to the end of its Gloo algorithm; those running at once share every resource.

    Parameters
    ----------
    topo, opts, consts, collective, symmetry, record, check
        As :func:`simulate_gloo`; ``opts.threads`` is the pool size.
    sizes : sequence of int
        Bytes of each collective, in issue order (nccl-tests semantics, see :func:`simulate_gloo`).
    issue_at : sequence of float, optional
        Seconds from the start at which each collective is issued on every rank (non-decreasing: the issue order);
        default: all at 0.

    Returns
    -------
    Outcome
        ``time_s``: until every rank is done with all; ``size_bytes``: the sum; ``ends``: each one's end (s);
        ``held``: when a worker thread first took each and first freed it (s; the H2D copy back of CUDA tensors
        runs after the thread is freed).

    Notes
    -----
    Limits: messages of concurrent collectives on one connection are separate flows (each capped at one TCP
    stream's rate), where Gloo writes them one after another on the pair's socket; a queued collective's D2H copy
    starts after its hand-off, where PyTorch issues it on a side stream when the collective is enqueued.
    """
    if len(sizes) == 0:
        raise BackendError("gloo: no collective to simulate (sizes is empty)")
    issue = [0.0] * len(sizes) if issue_at is None else [float(t) for t in issue_at]
    if len(issue) != len(sizes) or any(t < 0 or not math.isfinite(t) for t in issue) or issue != sorted(issue):
        raise BackendError(f"gloo: issue_at must give one finite non-decreasing time >= 0 per size, got {issue_at!r}")
    ranks = _check(topo, opts, collective)
    algorithm, notes = _algorithm(opts, collective)
    if collective in ("broadcast", "reduce") and opts.root % len(ranks):
        # Gloo's schedules root at their rank 0: number the ranks from the root (and the stragglers with them)
        root = opts.root % len(ranks)
        ranks = ranks[root:] + ranks[:root]
        opts = dataclasses.replace(opts, launch_delay=tuple(((r - root) % len(ranks), d) for r, d in opts.launch_delay))
        notes = [*notes, f"root: rank {root}"]
    staged = opts.device == "cuda" and opts.transport == "tcp"  # CUDA tensors through the host: clones on the GPU
    scheds = _schedules(topo, ranks, consts, collective, algorithm, sizes, opts.peers, tensor_copies=not staged)
    if collective not in ("allreduce", "reduce_scatter") and scheds:  # the allreduce algorithm is not theirs: the
        algorithm = scheds[0].name.partition("/")[2]  # schedule's own (broadcast/binomial: "binomial")
    env, net = new_network(record, check)
    plan = _plan(topo, opts, ranks, scheds, collective, sizes, consts.write_allocate)
    quotient = build_quotient(
        net,
        {**plan.usage, **background_usage(topo.background)},  # another job's streams: entities of their own colour
        plan.specs,
        colors={**_colors(scheds, plan, dict(opts.launch_delay)), **background_colors(topo.background)},
        relations=_relations(scheds),
        symmetric=symmetry and opts.jitter <= 0,  # jitter draws per rank: no two ranks alike
    )
    t, last, ends, held = _run(
        env, net, quotient, scheds, plan, opts, consts, background=topo.background, issue_at=issue
    )
    notes += _notes(scheds, collective, opts, plan, ends)
    return Outcome(
        backend="gloo",
        collective=collective,
        algorithm=algorithm,
        protocol=f"{opts.transport}/{opts.device}",
        nranks=len(ranks),
        size_bytes=sum(sizes),
        time_s=t,
        breakdown=_breakdown(net, collective, opts, plan.owners[last], t) if record else {},
        notes=notes,
        ends=tuple(ends) if len(sizes) > 1 else (),
        held=tuple(held) if len(sizes) > 1 else (),
        **run_stats(net, quotient, len(plan.usage), record),
    )


def simulate_gloo(
    topo: Topology,
    opts: GlooOptions,
    consts: GlooConstants,
    nbytes: int,
    *,
    collective: str = "allreduce",
    symmetry: bool = True,
    record: bool = False,
    check: bool = False,
) -> Outcome:
    """Simulate one Gloo collective of ``nbytes`` as PyTorch's ProcessGroupGloo runs it; return its outcome.

    Parameters
    ----------
    topo : Topology
        The cluster.
    opts : GlooOptions
        Algorithm (allreduce and reduce_scatter), device (``cuda``: host staging; ``cpu``: none), transport and
        worker threads (one collective never waits for one).
    consts : GlooConstants
        From ``topologies/software/gloo.yaml``.
    nbytes : int
        Bytes, nccl-tests semantics: per rank for allreduce, broadcast, reduce, alltoall, sendrecv; the whole output
        (count x nranks x type) for allgather; the whole input for reduce_scatter.
    collective : str
        allreduce, allgather, reduce_scatter, broadcast, reduce, alltoall or sendrecv.
    symmetry, record, check : bool
        Simulate symmetric ranks once; keep flow records and a breakdown; check engine invariants.

    Notes
    -----
    Per rank: waits for the work to reach a worker thread (``work_enqueue_latency``); for CUDA tensors over TCP a
    D2H copy of the bytes it holds (GPU to its CPU socket's memory over PCIe, paying the GPU's memcpy latency once);
    the schedule (:func:`~collsim.algorithms.gloo_algos.gloo_schedule`): every message pays the TCP message latency
    once, carries Gloo's 48-byte preamble and streams through CPU cores (TCP stack at one core's rate each end) and
    host memory; received data is reduced (or copied) by one CPU thread (reading two, writing one); then the H2D
    copy of the bytes it receives. ``reduce_scatter`` is an allreduce of the whole input (2x the bytes of a true
    reduce-scatter), as PyTorch's Gloo backend does. With ``transport: ibverbs`` and CUDA tensors nothing is
    staged: messages are RDMA writes between GPU memories and reductions run on the GPU at HBM speed (plus a kernel
    launch each).

    The breakdown (``record=True``) adds up to the time: for allreduce, allgather, reduce_scatter and alltoall it is
    the last rank's; for broadcast, reduce and sendrecv, whose ranks have different jobs, every instant goes to the
    highest-priority activity of any rank (so a receiver's wait shows as the sender's transfer).
    """
    return simulate_gloo_many(
        topo, opts, consts, [nbytes], collective=collective, symmetry=symmetry, record=record, check=check
    )
