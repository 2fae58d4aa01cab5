"""Gloo-style allreduce as PyTorch runs it: host staging, a CPU ring over TCP, and back.

For CUDA tensors ProcessGroupGloo copies the whole tensor to pinned host memory (D2H over PCIe), runs Gloo's ring
allreduce on the CPU (segments of at most 1 MiB, at least 2 per rank, 2 in flight; TCP between every pair of ranks,
loopback within a host since Gloo has no shared-memory transport; reduction by a CPU thread), then copies the result
back (H2D). CPU tensors skip the copies. Constants come from ``topologies/software/gloo.yaml`` and the CPU presets.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from collsim.algorithms import EventBoard, gloo_ring_allreduce, gloo_ring_receiver, gloo_ring_segments
from collsim.backends.common import BackendError, Outcome, Path, ResourceCatalog, link_uses, new_network, run_until_done
from collsim.engine import attribute_time, build_quotient
from collsim.topology import Topology

__all__ = ["GlooConstants", "GlooOptions", "simulate_gloo"]

_US = 1e-6  # microseconds to seconds


@dataclass(frozen=True)
class GlooConstants:
    """Gloo/ProcessGroupGloo constants in SI units."""

    max_segment_bytes: int
    min_segments_per_rank: int
    segments_in_flight: int
    preamble_bytes: int
    work_enqueue_latency: float

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> GlooConstants:
        """Build from the mapping in ``topologies/software/gloo.yaml``."""
        return cls(
            max_segment_bytes=int(data["max_segment_bytes"]),
            min_segments_per_rank=int(data["min_segments_per_rank"]),
            segments_in_flight=int(data["segments_in_flight"]),
            preamble_bytes=int(data["preamble_bytes"]),
            work_enqueue_latency=float(data["work_enqueue_latency_us"]) * _US,
        )


@dataclass(frozen=True)
class GlooOptions:
    """``backends.gloo`` of a scenario: the algorithm and where the tensors live (``cuda`` or ``cpu``)."""

    algorithm: str = "ring"
    device: str = "cuda"
    transport: str = "tcp"


_PRIORITY = [
    "D2H copy (PCIe)",
    "H2D copy (PCIe)",
    "CPU reduction",
    "TCP over network",
    "TCP over loopback",
    "enqueue on worker thread",
]


def _tcp_path(
    topo: Topology, cat: ResourceCatalog, a: str, b: str, preamble: float, seg: float
) -> tuple[Path, float, float, str]:
    """TCP send from rank device ``a`` to ``b``: resources, latency, one stream's cap, and its tag."""
    ca, cb = topo.host_cpu(a), topo.host_cpu(b)
    da, db = topo.device(a), topo.device(b)
    overhead = 1.0 + (preamble / seg if seg > 0 else 0.0)  # the 48-byte preamble rides along each message
    if da.node == db.node:
        per_core = float(ca.spec["tcp_loopback_bw_per_core"])
        # loopback: the sender copies user->kernel (read + write), the receiver kernel->user (read + write)
        path = cat.cores(da.node, 2.0 / per_core) + cat.mem(ca.name, 4.0)
        if ca.name != cb.name:
            path = path + link_uses(topo.route(ca.name, cb.name, kinds=("upi",)))
        lat = float(ca.spec["tcp_message_latency"])
        return path.scaled(overhead), lat, per_core, "TCP over loopback"
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
    return path.scaled(overhead), lat, per_core, "TCP over network"


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
    """Simulate PyTorch's Gloo allreduce of ``nbytes`` per rank and return its outcome.

    Per rank: waits for the work to reach a worker thread (``work_enqueue_latency``); for CUDA tensors a whole-tensor
    D2H copy (GPU to its CPU socket's memory over PCIe, paying the GPU's memcpy latency once); the ring
    (:func:`~collsim.algorithms.gloo_ring_allreduce`): every segment message pays the TCP message latency once and
    streams through CPU cores (TCP stack at one core's rate each end) and host memory, every received
    reduce-scatter segment is reduced by one CPU thread (reading two, writing one); then the H2D copy back.
    """
    if collective != "allreduce":
        raise BackendError(f"collective {collective!r} is not implemented by the Gloo backend yet (allreduce only)")
    if opts.algorithm != "ring":
        raise BackendError(f"gloo algorithm {opts.algorithm!r} is not modelled yet (ring only)")
    if opts.device == "cuda":
        ranks = [d.name for d in topo.gpus()]
        if not ranks:
            raise BackendError("gloo device 'cuda' needs GPUs; this topology has none (use device: cpu)")
    else:
        ranks = [d.name for d in topo.rank_devices()]
    n = len(ranks)
    shape = gloo_ring_segments(nbytes, n, consts.max_segment_bytes)
    env, net = new_network(record, check)
    cat = ResourceCatalog(topo)
    # entities are rank numbers: CPU processes on one socket share a device
    usage: dict[Hashable, dict[str, list[tuple[Hashable, float]]]] = {}
    info: dict[Hashable, dict[str, Any]] = {}
    colors: dict[Hashable, Hashable] = {}
    for i, r in enumerate(ranks):
        succ = ranks[(i + 1) % n]
        cpu = topo.host_cpu(r)
        roles: dict[str, list[tuple[Hashable, float]]] = {}
        d: dict[str, Any] = {"cpu": cpu}
        if opts.device == "cuda":
            d2h = link_uses(topo.pcie_route(r, cpu.name)) + cat.mem(cpu.name, 1.0)
            h2d = cat.mem(cpu.name, 1.0) + link_uses(topo.pcie_route(cpu.name, r))
            roles["d2h"], roles["h2d"] = list(d2h.uses), list(h2d.uses)
            d["copy_lat"] = float(topo.device(r).spec["memcpy_latency"])
        if n > 1:
            tcp, lat, cap, tag = _tcp_path(topo, cat, r, succ, consts.preamble_bytes, shape.segment_bytes)
            roles["send"] = list(tcp.uses)
            d.update(send_lat=lat, send_cap=cap, send_tag=tag)
            red_rate = float(cpu.spec["reduce_bw_per_core"])
            roles["reduce"] = list((cat.cores(cpu.node, 1.0 / red_rate) + cat.mem(cpu.name, 3.0)).uses)
            d["reduce_cap"] = red_rate
            d["notice_lat"] = float(cpu.spec["tcp_message_latency"])
        usage[i] = roles
        info[i] = d
        colors[i] = (d.get("copy_lat"), d.get("send_lat"), d.get("send_cap"), d.get("reduce_cap"), d.get("send_tag"))
    relations: list[tuple[Hashable, str, Hashable]] = [(i, "pred", (i - 1) % n) for i in range(n)]
    quotient = build_quotient(net, usage, cat.specs, colors=colors, relations=relations, symmetric=symmetry)
    board = EventBoard(env)

    def rank_proc(me: Hashable, pred: Hashable, succ: Hashable) -> Any:
        d = info[me]
        owner = str(me)
        yield net.delay(consts.work_enqueue_latency, tag="enqueue on worker thread", owner=owner)
        if opts.device == "cuda":
            _s, arrived = net.transfer(
                nbytes, quotient.uses(me, "d2h"), latency=d["copy_lat"], tag="D2H copy (PCIe)", owner=owner
            )
            yield arrived
        if n > 1:
            send_uses, reduce_uses = quotient.uses(me, "send"), quotient.uses(me, "reduce")

            def send(b: float) -> Any:
                return net.transfer(
                    b, send_uses, latency=d["send_lat"], max_rate=d["send_cap"], tag=d["send_tag"], owner=owner
                )

            def reduce(b: float) -> Any:
                return net.transfer(b, reduce_uses, max_rate=d["reduce_cap"], tag="CPU reduction", owner=owner)[0]

            def notice() -> Any:
                return env.timeout(d["notice_lat"])

            k = consts.segments_in_flight
            s = env.process(gloo_ring_allreduce(board, me, succ, nranks=n, shape=shape, send=send, inflight=k))
            rcv = env.process(
                gloo_ring_receiver(board, me, pred, nranks=n, shape=shape, reduce=reduce, notice=notice, inflight=k)
            )
            yield s & rcv
        if opts.device == "cuda":
            _s, arrived = net.transfer(
                nbytes, quotient.uses(me, "h2d"), latency=d["copy_lat"], tag="H2D copy (PCIe)", owner=owner
            )
            yield arrived

    done = []
    for rep in quotient.reps():
        i = int(rep)  # type: ignore[call-overload]
        done.append(env.process(rank_proc(rep, quotient.rep((i - 1) % n), quotient.rep((i + 1) % n))))
    t = run_until_done(env, done)
    owner = str(quotient.rep(0))
    breakdown: dict[str, float] = {}
    if record:
        breakdown = attribute_time(
            net.records,
            owner,
            0.0,
            t,
            _PRIORITY,
            latency_label="TCP message latency",
            idle_label="waiting (peers, notices)",
        )
        breakdown = {k: v for k, v in breakdown.items() if v > 0}
    return Outcome(
        backend="gloo",
        collective=collective,
        algorithm=opts.algorithm,
        protocol=f"tcp/{opts.device}",
        nranks=n,
        size_bytes=nbytes,
        time_s=t,
        channels=None,
        breakdown=breakdown,
        notes=[f"{shape.segments} segments of {shape.segment_bytes:.0f} B"],
        predicted_s=None,
        classes=quotient.n_classes,
        entities=len(usage),
        records=net.records if record else [],
        solves=net.solves,
    )
