"""Small ideal systems shared by the tests: rings of identical links where closed forms hold."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import simpy
import yaml

from collsim.algorithms import (
    EventBoard,
    GlooParams,
    RingChunking,
    gloo_ring_allreduce,
    gloo_ring_receiver,
    gloo_ring_segments,
    nccl_ring_allreduce,
)
from collsim.engine import FluidNetwork, ResourceSpec, build_quotient
from collsim.topology import topologies_dir

#: Gloo's constants as the backend reads them (topologies/software/gloo.yaml)
GLOO = GlooParams.from_mapping(yaml.safe_load((topologies_dir() / "software" / "gloo.yaml").read_text()))
SIMPLE = RingChunking(2 * 2**20, 2, 4)  # NCCL Simple: 4 steps of 512 KiB per chunk, 2 slices, 8 slots of 2 steps


def _quotient(net: FluidNetwork, n: int, caps: Sequence[float], symmetric: bool):  # type: ignore[no-untyped-def]
    res = {i: ResourceSpec(f"l{i}", caps[i], "link") for i in range(n)}
    use = {r: {"send": [(r, 1.0)]} for r in range(n)}
    return build_quotient(net, use, res, relations=[(r, "pred", (r - 1) % n) for r in range(n)], symmetric=symmetric)


def ideal_ring_time(
    n: int,
    size: float,
    *,
    bw: float = 10e9,
    alpha: float = 1e-6,
    caps: Sequence[float] | None = None,
    chunking: RingChunking = SIMPLE,
    symmetric: bool = True,
    nsteps: int | None = None,
    whole_steps: bool = False,
) -> tuple[float, int]:
    """NCCL ring allreduce of ``size`` bytes on n ranks, each sending over its own link; (seconds, classes)."""
    env = simpy.Environment()
    net = FluidNetwork(env, check=True)
    q = _quotient(net, n, list(caps) if caps else [bw] * n, symmetric)
    board = EventBoard(env)
    for rep in q.reps():
        uses = q.uses(rep, "send")

        def send(b: float, uses=uses):  # type: ignore[no-untyped-def]
            return net.transfer(b, uses, latency=alpha)

        env.process(
            nccl_ring_allreduce(
                board,
                rep,
                q.rep((rep - 1) % n),
                q.rep((rep + 1) % n),
                nranks=n,
                data_bytes=size,
                chunking=chunking,
                send=send,
                nsteps=nsteps,
                whole_steps=whole_steps,
            )
        )
    done = [board.get(r, "done") for r in q.reps()]
    ends: list[float] = []
    for ev in done:
        ev.callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    assert len(ends) == len(done)
    return max(ends), q.n_classes


def ideal_gloo_ring_time(
    n: int, size: float, *, bw: float = 5e9, alpha: float = 10e-6, notice: float = 10e-6, symmetric: bool = True
) -> float:
    """Gloo's ring allreduce on n ranks with own links of ``bw``, message latency ``alpha``, free reductions."""
    env = simpy.Environment()
    net = FluidNetwork(env, check=True)
    q = _quotient(net, n, [bw] * n, symmetric)
    board = EventBoard(env)
    shape = gloo_ring_segments(size, n, GLOO)
    procs = []
    for rep in q.reps():
        uses = q.uses(rep, "send")

        def send(b: float, uses=uses):  # type: ignore[no-untyped-def]
            return net.transfer(b, uses, latency=alpha)

        def reduce(_b: float):  # type: ignore[no-untyped-def]
            return env.timeout(0)

        pred, succ = q.rep((rep - 1) % n), q.rep((rep + 1) % n)
        procs.append(
            env.process(
                gloo_ring_allreduce(
                    board, rep, succ, nranks=n, shape=shape, send=send, inflight=GLOO.segments_in_flight
                )
            )
        )
        procs.append(
            env.process(
                gloo_ring_receiver(
                    board,
                    rep,
                    pred,
                    nranks=n,
                    shape=shape,
                    reduce=reduce,
                    notice=lambda: env.timeout(notice),
                    inflight=GLOO.segments_in_flight,
                )
            )
        )
    ends: list[float] = []
    for p in procs:
        p.callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    assert len(ends) == len(procs)
    return max(ends)


def ideal_gloo_schedule_time(
    collective: str,
    algorithm: str,
    n: int,
    size: float,
    *,
    bw: float = 5e9,
    alpha: float = 10e-6,
    notice: float = 10e-6,
    network: str = "per_rank",
    base: int = 2,
    symmetric: bool = True,
) -> tuple[float, int]:
    """A Gloo schedule from :mod:`collsim.algorithms.gloo_algos` on an ideal network; (seconds, classes).

    ``network="per_rank"``: every rank has its own egress and ingress link of ``bw`` (fully connected through an
    ideal switch); ``"per_pair"``: every ordered pair of ranks has its own link of ``bw``. Messages pay ``alpha``
    once on arrival, control messages ``notice``; reductions and copies are free.
    """
    from collsim.algorithms.gloo_algos import GlooRankContext, gloo_schedule

    sched = gloo_schedule(collective, algorithm, n, size, params=GLOO, base=base)
    env = simpy.Environment()
    net = FluidNetwork(env, check=True)
    res: dict[object, ResourceSpec] = {}
    usage: dict[object, dict[str, list[tuple[object, float]]]] = {}
    for r in range(n):
        roles: dict[str, list[tuple[object, float]]] = {}
        for label, p in sched.peers[r].items():
            if network == "per_rank":
                keys: list[object] = [("up", r), ("down", p)]
            else:
                keys = [("pair", r, p)]
            for k in keys:
                res[k] = ResourceSpec(repr(k), bw, "link")
            roles["send:" + label] = [(k, 1.0) for k in keys]
        usage[r] = roles
    q = build_quotient(net, usage, res, colors=sched.roles, relations=sched.relations(), symmetric=symmetric)
    board = EventBoard(env)
    procs = []
    for rep in q.reps():
        me = int(rep)  # type: ignore[call-overload]

        def send(label: str, b: float, me: int = me):  # type: ignore[no-untyped-def]
            return net.transfer(b, q.uses(me, "send:" + label), latency=alpha)

        ctx = GlooRankContext(
            board=board,
            me=me,
            nranks=n,
            rep=q.rep,
            send=send,
            reduce=lambda _b: env.timeout(0),
            copy=lambda _b: env.timeout(0),
            notice=lambda _label: env.timeout(notice),
        )
        procs.append(env.process(sched.body(ctx)))
    ends: list[float] = []
    for p in procs:
        p.callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    assert len(ends) == len(procs), "deadlock"
    return max(ends), q.n_classes


def ideal_tree_time(
    n: int,
    size: float,
    *,
    bw: float = 10e9,
    alpha: float = 1e-6,
    slice_bytes: float = 2**17,
    pieces: int = 1,
    whole_steps: bool = False,
) -> float:
    """NCCL's pipelined tree allreduce on a complete binary heap of ``n`` ranks, a link of ``bw`` per direction
    between every parent and child (no sharing): reduce up and broadcast down run at once, slice by slice (chunks
    of ``slice_bytes`` cut in ``pieces``; ``whole_steps``: every link forwards whole chunks, as over a network)."""
    from collsim.algorithms.nccl_algos import nccl_tree_down, nccl_tree_up

    env = simpy.Environment()
    net = FluidNetwork(env, check=True)
    chunking = RingChunking(slice_bytes, pieces, 8 * pieces)
    board = EventBoard(env)
    parent = {r: (None if r == 0 else (r - 1) // 2) for r in range(n)}
    children = {r: [k for k in (2 * r + 1, 2 * r + 2) if k < n] for r in range(n)}

    def link(a: int, b: int):  # type: ignore[no-untyped-def]
        res = net.resource(f"{a}->{b}", bw)
        return lambda nb: net.transfer(nb, [(res, 1.0)], latency=alpha)

    for r in range(n):
        p = parent[r]
        env.process(
            nccl_tree_up(
                board,
                r,
                p,
                children[r],
                data_bytes=size,
                chunking=chunking,
                send_up=link(r, p) if p is not None else None,
                whole_steps=whole_steps,
            )
        )
        env.process(
            nccl_tree_down(
                board,
                r,
                children[r],
                data_bytes=size,
                chunking=chunking,
                send_down=[link(r, k) for k in children[r]],
                whole_steps=whole_steps,
            )
        )
    ends: list[float] = []
    for r in range(n):
        board.get(r, "done").callbacks.append(lambda _e: ends.append(env.now))
    env.run()
    assert len(ends) == n
    return max(ends)


def shared_calibration_dir() -> Path | None:
    """``shared/calibration-data``: under $COLLSIM_SHARED first, else beside the repository; None when absent."""
    candidates = [Path(os.environ["COLLSIM_SHARED"])] if os.environ.get("COLLSIM_SHARED") else []
    candidates.append(Path(__file__).resolve().parents[3] / "shared")
    for c in candidates:
        if (c / "calibration-data").is_dir():
            return c / "calibration-data"
    return None


def edit_file(path: Path, old: str, new: str) -> None:
    """Replace the first ``old`` in the text file ``path`` by ``new`` (a test's deliberate edit of a copied preset);
    ``old`` must be there."""
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
