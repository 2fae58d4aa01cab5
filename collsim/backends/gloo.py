"""Gloo-style collectives as PyTorch runs them: host staging, Gloo's algorithms over TCP (or ibverbs), and back.

For CUDA tensors ProcessGroupGloo copies the tensor to pinned host memory (D2H over PCIe), runs the Gloo collective
on the CPU (TCP between every pair of ranks, loopback within a host since Gloo has no shared-memory transport;
reductions by the rank's CPU thread), then copies the result back (H2D). CPU tensors skip the copies.

Allreduce algorithms (``backends.gloo.algorithm``): ``ring`` (PyTorch's segmented ring, what PyTorch runs),
``ring_chunked``, ``halving_doubling`` and ``bcube`` (Gloo's legacy algorithms); other collectives: see
:mod:`collsim.algorithms.gloo_algos`. With ``transport: ibverbs`` the tensors stay on the GPU (GPUDirect RDMA,
Gloo's ``CudaAllreduceRingChunked`` for allreduce): no host copies, reductions on the GPU at HBM speed.
Constants come from ``topologies/software/gloo.yaml`` and the device presets.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from collsim.algorithms import EventBoard
from collsim.algorithms.gloo_algos import (
    ALLREDUCE_ALGORITHMS,
    COLLECTIVES,
    GlooRankContext,
    GlooSchedule,
    gloo_schedule,
)
from collsim.backends.common import BackendError, Outcome, Path, ResourceCatalog, link_uses, new_network, run_until_done
from collsim.engine import ResourceSpec, attribute_time, build_quotient
from collsim.topology import Device, Topology, path_class_rank

__all__ = ["COLLECTIVES", "GlooConstants", "GlooOptions", "simulate_gloo"]

_US = 1e-6  # microseconds to seconds


@dataclass(frozen=True)
class GlooConstants:
    """Gloo/ProcessGroupGloo constants in SI units."""

    max_segment_bytes: int
    min_segments_per_rank: int
    segments_in_flight: int
    preamble_bytes: int
    work_enqueue_latency: float
    sim_max_segments_per_rank: int | None = None  # simulation setting: merge ring segments beyond this many per rank

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> GlooConstants:
        """Build from the mapping in ``topologies/software/gloo.yaml``."""
        return cls(
            max_segment_bytes=int(data["max_segment_bytes"]),
            min_segments_per_rank=int(data["min_segments_per_rank"]),
            segments_in_flight=int(data["segments_in_flight"]),
            preamble_bytes=int(data["preamble_bytes"]),
            work_enqueue_latency=float(data["work_enqueue_latency_us"]) * _US,
            sim_max_segments_per_rank=(
                int(data["sim_max_segments_per_rank"]) if data.get("sim_max_segments_per_rank") else None
            ),
        )


@dataclass(frozen=True)
class GlooOptions:
    """``backends.gloo`` of a scenario: the allreduce algorithm, where the tensors live (``cuda`` or ``cpu``) and
    the transport (``tcp``, or ``ibverbs`` with GPUDirect RDMA)."""

    algorithm: str = "ring"
    device: str = "cuda"
    transport: str = "tcp"


_TRANSPORTS = ("tcp", "ibverbs")
_DEVICES = ("cuda", "cpu")

_PRIORITY = [
    "D2H copy (PCIe)",
    "H2D copy (PCIe)",
    "CPU reduction",
    "GPU reduction (HBM)",
    "CPU copy",
    "GPU copy (HBM)",
    "TCP over network",
    "TCP over loopback",
    "RDMA over network (GPUDirect)",
    "RDMA within node (GPUDirect)",
    "RDMA over network",
    "RDMA within node",
    "enqueue on worker thread",
]

# bytes each rank copies host<-device before / device<-host after, as a fraction of nbytes; root-only ones below
_STAGING: dict[str, tuple[str, str]] = {
    "allreduce": ("all", "all"),
    "reduce_scatter": ("all", "slice"),  # allreduce of the whole input; only this rank's slice comes back
    "allgather": ("slice", "all"),  # nbytes is the whole output: each rank contributes nbytes/n
    "alltoall": ("all", "all"),
    "broadcast": ("root", "nonroot"),
    "reduce": ("all", "root"),
    "sendrecv": ("sender", "receiver"),
}


def _staged_bytes(kind: str, rank: int, n: int, nbytes: float) -> float:
    """Bytes of a staging copy of ``kind`` (see ``_STAGING``) for ``rank``."""
    return {
        "all": nbytes,
        "slice": nbytes / n,
        "root": nbytes if rank == 0 else 0.0,
        "nonroot": nbytes if rank != 0 else 0.0,
        "sender": nbytes if rank == 0 else 0.0,
        "receiver": nbytes if rank == 1 else 0.0,
    }[kind]


def _tcp_path(topo: Topology, cat: ResourceCatalog, a: str, b: str) -> tuple[Path, float, float, str]:
    """TCP send from rank device ``a`` to ``b``: resources, latency, one stream's cap, and its tag."""
    ca, cb = topo.host_cpu(a), topo.host_cpu(b)
    da, db = topo.device(a), topo.device(b)
    if da.node == db.node:
        per_core = float(ca.spec["tcp_loopback_bw_per_core"])
        # loopback: the sender copies user->kernel (read + write), the receiver kernel->user (read + write)
        path = cat.cores(da.node, 2.0 / per_core) + cat.mem(ca.name, 4.0)
        if ca.name != cb.name:
            path = path + link_uses(topo.route(ca.name, cb.name, kinds=("upi",)))
        lat = float(ca.spec["tcp_message_latency"])
        return path, lat, per_core, "TCP over loopback"
    nics_a, nics_b = topo.nics(da.node), topo.nics(db.node)
    if not nics_a or not nics_b:
        raise BackendError(f"gloo: no NIC to reach {b} from {a}")
    na, nb = nics_a[0].name, nics_b[0].name
    per_core = min(float(ca.spec["tcp_bw_per_core"]), float(cb.spec["tcp_bw_per_core"]))
    path = (
        cat.cores(da.node, 1.0 / float(ca.spec["tcp_bw_per_core"]))
        + cat.mem(ca.name, 2.0)
        + link_uses(topo.pcie_route(ca.name, na))
        + link_uses(topo.route(na, nb))
        + link_uses(topo.pcie_route(nb, cb.name))
        + cat.mem(cb.name, 2.0)
        + cat.cores(db.node, 1.0 / float(cb.spec["tcp_bw_per_core"]))
    )
    lat = float(ca.spec["tcp_message_latency"]) + path.latency
    return path, lat, per_core, "TCP over network"


def _rdma_nic(topo: Topology, dev: str) -> Device:
    """The RDMA NIC a rank's ibverbs context opens: the nearest RDMA-capable NIC of its node."""
    d = topo.device(dev)
    nics = [n for n in topo.nics(d.node) if n.spec.get("rdma")]
    if not nics:
        raise BackendError(
            f"gloo transport 'ibverbs' needs an RDMA NIC (InfiniBand/RoCE) on every node; node {d.node} of topology "
            f"{topo.name!r} has none (use transport: tcp)"
        )
    # nearest by path class; among equals the NIC whose index matches the GPU's (one rail per GPU, as launchers
    # usually assign them), then the lowest index
    return min(nics, key=lambda n: (path_class_rank(topo.path_class(dev, n.name)), n.index != d.index, n.index))


def _rdma_path(topo: Topology, cat: ResourceCatalog, a: str, b: str, gpu: bool) -> tuple[Path, float, str]:
    """An ibverbs RDMA write from rank device ``a`` to ``b``: resources, latency and tag.

    GPU buffers (GPUDirect): GPU -> PCIe -> NIC -> fabric -> NIC -> PCIe -> GPU. Within a node the queue pair loops
    back in the sender's NIC (verbs traffic always crosses the HCA): GPU -> PCIe -> NIC -> PCIe -> GPU. Host buffers
    add a read and a write of host memory. Latency: the links' plus the verbs posting overhead of the CPU preset.
    """
    da, db = topo.device(a), topo.device(b)
    na, nb = _rdma_nic(topo, a).name, _rdma_nic(topo, b).name
    ca, cb = topo.host_cpu(a), topo.host_cpu(b)
    path = link_uses(topo.pcie_route(a, na))
    if da.node == db.node:
        path = path + link_uses(topo.pcie_route(na, b))
        tag = "RDMA within node"
    else:
        path = path + link_uses(topo.route(na, nb)) + link_uses(topo.pcie_route(nb, b))
        tag = "RDMA over network"
    if gpu:
        tag += " (GPUDirect)"
    else:
        path = cat.mem(ca.name, 1.0) + path + cat.mem(cb.name, 1.0)
    lat = path.latency + float(ca.spec.get("nccl_net_overhead", 1e-6))
    return path, lat, tag


def _check(topo: Topology, opts: GlooOptions, collective: str) -> list[str]:
    """Validate the request and return the rank devices."""
    if collective not in COLLECTIVES:
        raise BackendError(f"gloo: unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")
    if opts.algorithm not in ALLREDUCE_ALGORITHMS:
        raise BackendError(f"gloo: unknown algorithm {opts.algorithm!r}; valid: {', '.join(ALLREDUCE_ALGORITHMS)}")
    if opts.device not in _DEVICES:
        raise BackendError(f"gloo: unknown device {opts.device!r}; valid: {', '.join(_DEVICES)}")
    if opts.transport not in _TRANSPORTS:
        raise BackendError(f"gloo: unknown transport {opts.transport!r}; valid: {', '.join(_TRANSPORTS)}")
    if opts.device == "cuda":
        ranks = [d.name for d in topo.gpus()]
        if not ranks:
            raise BackendError("gloo device 'cuda' needs GPUs; this topology has none (use device: cpu)")
    else:
        ranks = [d.name for d in topo.rank_devices()]
    if opts.transport == "ibverbs":
        for r in ranks:
            _rdma_nic(topo, r)
        fabric = topo.fabric or {}
        if topo.nodes > 1 and fabric.get("transport", "rdma") != "rdma":
            raise BackendError(
                "gloo transport 'ibverbs' needs an RDMA fabric (cluster.fabric.transport: rdma); this one is "
                f"{fabric.get('transport')!r} (use transport: tcp)"
            )
        if opts.device == "cuda" and topo.nodes > 1 and not fabric.get("gpudirect", True):
            raise BackendError(
                "gloo transport 'ibverbs' with device 'cuda' needs GPUDirect RDMA (cluster.fabric.gpudirect: true)"
            )
    if collective == "sendrecv" and len(ranks) < 2:
        raise BackendError("gloo sendrecv needs at least 2 ranks")
    return ranks


def _bcube_base(topo: Topology, ranks: list[str]) -> int:
    """BCube's base: the ranks per node when the job spans several nodes (step 0 inside nodes), else Gloo's
    default base 2."""
    per_node: dict[int, int] = {}
    for r in ranks:
        node = topo.device(r).node
        per_node[node] = per_node.get(node, 0) + 1
    if len(per_node) > 1:
        counts = set(per_node.values())
        if len(counts) == 1 and (b := counts.pop()) >= 2:
            return b
    return 2


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
        Algorithm (allreduce and reduce_scatter), device (``cuda``: host staging; ``cpu``: none) and transport.
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
    ranks = _check(topo, opts, collective)
    n = len(ranks)
    gpu_resident = opts.transport == "ibverbs" and opts.device == "cuda"
    staged = opts.device == "cuda" and not gpu_resident
    algorithm = opts.algorithm
    notes: list[str] = []
    if collective in ("allreduce", "reduce_scatter") and opts.transport == "ibverbs" and algorithm == "ring":
        algorithm = "ring_chunked"
        notes.append("ibverbs: CudaAllreduceRingChunked (Gloo's GPU ring) instead of PyTorch's host ring")
    base = _bcube_base(topo, ranks)
    try:
        sched: GlooSchedule = gloo_schedule(
            collective,
            algorithm,
            n,
            float(nbytes),
            max_segment_bytes=consts.max_segment_bytes,
            inflight=consts.segments_in_flight,
            base=base,
            max_per_rank=consts.sim_max_segments_per_rank,
        )
    except ValueError as exc:
        raise BackendError(f"gloo: {exc}") from None
    notes.extend(sched.notes)
    if collective == "reduce_scatter":
        notes.append(
            "reduce_scatter on Gloo is a full allreduce of the input, then a local slice: 2x the bytes of a true "
            "reduce-scatter"
        )
    env, net = new_network(record, check)
    cat = ResourceCatalog(topo)
    specs: dict[Hashable, ResourceSpec] = dict(cat.specs)
    d2h_kind, h2d_kind = _STAGING[collective]
    usage: dict[Hashable, dict[str, list[tuple[Hashable, float]]]] = {}
    info: dict[int, dict[str, Any]] = {}
    colors: dict[Hashable, Hashable] = {}
    for i, r in enumerate(ranks):
        dev = topo.device(r)
        cpu = topo.host_cpu(r)
        roles: dict[str, list[tuple[Hashable, float]]] = {}
        d: dict[str, Any] = {"d2h": 0.0, "h2d": 0.0, "links": {}}
        if staged:
            d["d2h"] = _staged_bytes(d2h_kind, i, n, nbytes)
            d["h2d"] = _staged_bytes(h2d_kind, i, n, nbytes)
            d2h = link_uses(topo.pcie_route(r, cpu.name)) + cat.mem(cpu.name, 1.0)
            h2d = cat.mem(cpu.name, 1.0) + link_uses(topo.pcie_route(cpu.name, r))
            roles["d2h"], roles["h2d"] = list(d2h.uses), list(h2d.uses)
            d["copy_lat"] = float(dev.spec["memcpy_latency"])
        for label, p in sorted(sched.peers[i].items()):
            if opts.transport == "tcp":
                path, lat, cap, tag = _tcp_path(topo, cat, r, ranks[p])
            else:
                path, lat, tag = _rdma_path(topo, cat, r, ranks[p], gpu_resident)
                cap = math.inf
            roles["send:" + label] = list(path.uses)
            d["links"][label] = (lat, cap, tag)
        if gpu_resident:
            hbm = float(dev.spec["hbm_bandwidth"])
            specs[("hbm", r)] = ResourceSpec(f"{r} HBM", hbm, "hbm")
            # a reduction kernel reads two operands and writes one; a copy reads one and writes one
            roles["reduce"] = [(("hbm", r), 3.0)]
            roles["copy"] = [(("hbm", r), 2.0)]
            d.update(red_cap=math.inf, copy_cap=math.inf, op_lat=float(dev.spec["kernel_launch_latency"]))
            d.update(red_tag="GPU reduction (HBM)", copy_tag="GPU copy (HBM)")
        else:
            red_rate = float(cpu.spec["reduce_bw_per_core"])
            roles["reduce"] = list((cat.cores(cpu.node, 1.0 / red_rate) + cat.mem(cpu.name, 3.0)).uses)
            # memcpy out of a receive buffer: one thread, DRAM-bound like the reduction (estimate), 2 bytes of traffic
            roles["copy"] = list((cat.cores(cpu.node, 1.0 / red_rate) + cat.mem(cpu.name, 2.0)).uses)
            d.update(red_cap=red_rate, copy_cap=red_rate, op_lat=0.0, red_tag="CPU reduction", copy_tag="CPU copy")
        if opts.transport == "tcp":
            d["notice_lat"] = float(cpu.spec["tcp_message_latency"])
        else:
            lats = [v[0] for v in d["links"].values()]
            d["notice_lat"] = max(lats) if lats else float(cpu.spec.get("nccl_net_overhead", 1e-6))
        usage[i] = roles
        info[i] = d
        colors[i] = (
            sched.roles[i],
            d["d2h"],
            d["h2d"],
            d.get("copy_lat"),
            tuple(sorted(d["links"].items())),
            d["red_cap"],
            d["op_lat"],
            d["notice_lat"],
        )
    quotient = build_quotient(net, usage, specs, colors=colors, relations=sched.relations(), symmetric=symmetry)
    board = EventBoard(env)
    preamble = float(consts.preamble_bytes) if opts.transport == "tcp" else 0.0
    tags = {t for d in info.values() for (_l, _c, t) in d["links"].values()}

    def rank_proc(me: int) -> Any:
        d = info[me]
        owner = str(me)
        yield net.delay(consts.work_enqueue_latency, tag="enqueue on worker thread", owner=owner)
        if d["d2h"] > 0:
            _s, arrived = net.transfer(
                d["d2h"], quotient.uses(me, "d2h"), latency=d["copy_lat"], tag="D2H copy (PCIe)", owner=owner
            )
            yield arrived
        red_uses, copy_uses = quotient.uses(me, "reduce"), quotient.uses(me, "copy")

        def send(label: str, b: float) -> Any:
            lat, cap, tag = d["links"][label]
            # Gloo's TCP transport puts a 48-byte preamble in front of every message
            return net.transfer(
                b + preamble, quotient.uses(me, "send:" + label), latency=lat, max_rate=cap, tag=tag, owner=owner
            )

        def reduce(b: float) -> Any:
            return net.transfer(b, red_uses, latency=d["op_lat"], max_rate=d["red_cap"], tag=d["red_tag"], owner=owner)[
                1
            ]

        def copy(b: float) -> Any:
            return net.transfer(
                b, copy_uses, latency=d["op_lat"], max_rate=d["copy_cap"], tag=d["copy_tag"], owner=owner
            )[1]

        def notice(label: str | None) -> Any:
            lat = d["links"][label][0] if (opts.transport != "tcp" and label in d["links"]) else d["notice_lat"]
            return env.timeout(lat)

        ctx = GlooRankContext(
            board=board, me=me, nranks=n, rep=quotient.rep, send=send, reduce=reduce, copy=copy, notice=notice
        )
        yield env.process(sched.body(ctx))
        if d["h2d"] > 0:
            _s, arrived = net.transfer(
                d["h2d"], quotient.uses(me, "h2d"), latency=d["copy_lat"], tag="H2D copy (PCIe)", owner=owner
            )
            yield arrived

    reps = [int(rep) for rep in quotient.reps()]  # type: ignore[call-overload]
    done = [env.process(rank_proc(rep)) for rep in reps]
    finish: dict[int, float] = {}
    for rep, ev in zip(reps, done, strict=True):
        ev.callbacks.append(lambda _e, rep=rep: finish.__setitem__(rep, env.now))  # type: ignore[misc]
    t = run_until_done(env, done)
    last = max(reps, key=lambda r: (finish.get(r, 0.0), -r))
    breakdown: dict[str, float] = {}
    if record:
        # ranks with different jobs (a root, a sender): every instant goes to the most telling activity of any rank;
        # otherwise the last rank to finish speaks for all
        mixed = collective in ("broadcast", "reduce", "sendrecv")
        recs = [dataclasses.replace(r, owner="*") for r in net.records] if mixed else net.records
        breakdown = attribute_time(
            recs,
            "*" if mixed else str(last),
            0.0,
            t,
            _PRIORITY,
            latency_label="TCP message latency" if opts.transport == "tcp" else "RDMA message latency",
            idle_label="waiting (peers, notices)",
        )
        breakdown = {k: v for k, v in breakdown.items() if v > 0}
    if tags:
        notes.append("transport: " + ", ".join(sorted(tags)))
    return Outcome(
        backend="gloo",
        collective=collective,
        algorithm=algorithm,
        protocol=f"{opts.transport}/{opts.device}",
        nranks=n,
        size_bytes=nbytes,
        time_s=t,
        channels=None,
        breakdown=breakdown,
        notes=notes,
        predicted_s=None,
        classes=quotient.n_classes,
        entities=len(usage),
        records=net.records if record else [],
        solves=net.solves,
    )
