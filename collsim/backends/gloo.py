"""Gloo-style collectives as PyTorch runs them: host staging, Gloo's algorithms over TCP (or ibverbs), and back.

For CUDA tensors ProcessGroupGloo copies the tensor to pinned host memory (D2H over PCIe), runs the Gloo collective
on the CPU (TCP between every pair of ranks, loopback within a host since Gloo has no shared-memory transport;
reductions by the rank's CPU thread), then copies the result back (H2D). CPU tensors skip the copies.

Allreduce algorithms (``backends.gloo.algorithm``): ``ring`` (PyTorch's segmented ring, what PyTorch runs),
``ring_chunked``, ``halving_doubling`` and ``bcube`` (Gloo's legacy algorithms); other collectives: see
:mod:`collsim.algorithms.gloo_algos`. With ``transport: ibverbs`` the tensors stay on the GPU (GPUDirect RDMA,
Gloo's ``CudaAllreduceRingChunked`` for allreduce): no host copies, reductions on the GPU at HBM speed.

Every rank runs its collectives on a pool of ``backends.gloo.threads`` worker threads (PyTorch's default 2): a
collective holds one thread from the hand-off to the end of its Gloo algorithm, and collectives issued together
queue for a free thread in the order they were issued (:func:`simulate_gloo_many`). Constants come from
``topologies/software/gloo.yaml`` and the device presets.
"""

from __future__ import annotations

import math
from collections.abc import Generator, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy
from simpy.events import Event

from collsim.algorithms import EventBoard, GlooParams
from collsim.algorithms.gloo_algos import GlooRankContext, GlooSchedule, gloo_schedule
from collsim.backends.common import (
    BackendError,
    Outcome,
    Path,
    ResourceCatalog,
    key_resources,
    link_uses,
    new_network,
    resource_name,
    run_stats,
    run_until_done,
)
from collsim.backends.gloo_tags import (
    BREAKDOWN_PRIORITY,
    CPU_COPY_TAG,
    CPU_REDUCTION_TAG,
    D2H_TAG,
    ENQUEUE_TAG,
    GPU_COPY_TAG,
    GPU_REDUCTION_TAG,
    H2D_TAG,
    IDLE_TAG,
    LATENCY_TAG,
    RDMA_TAG,
    TCP_LOOPBACK_TAG,
    TCP_NETWORK_TAG,
)
from collsim.engine import FluidNetwork, Owner, Quotient, ResourceSpec, Tag, attribute_time, build_quotient
from collsim.topology import Device, Topology, path_class_rank
from collsim.vocab import COLLECTIVES, GLOO_ALGORITHMS, GLOO_TRANSPORTS, TENSOR_DEVICES

__all__ = ["GlooConstants", "GlooOptions", "simulate_gloo", "simulate_gloo_many"]

_US = 1e-6  # microseconds to seconds

#: Resource uses of one role of one rank: (resource key, units consumed per byte moved).
Uses = list[tuple[Hashable, float]]
#: One connection of a rank: (message latency in s, one stream's rate cap in bytes/s, the flows' tag).
LinkCost = tuple[float, float, Tag]
Proc = Generator[Event, Any, None]


@dataclass(frozen=True)
class GlooConstants:
    """Gloo/ProcessGroupGloo constants in SI units (``topologies/software/gloo.yaml``, which cites their sources).

    Attributes
    ----------
    max_segment_bytes : int
        Largest segment of the segmented rings, bytes.
    min_segments_per_rank : int
        Fewest segments per rank of the segmented rings.
    segments_in_flight : int
        Operations the segmented rings keep in flight.
    preamble_bytes : int
        Header of every TCP message, bytes.
    work_enqueue_latency : float
        Seconds from handing a collective to a worker thread to the thread running it (an estimate).
    bcube_base : int
        BCube's group size when the job is on one node (Gloo's default).
    sim_max_segments_per_rank : int or None
        Simulation setting: merge ring segments beyond this many per rank (None: never).
    """

    max_segment_bytes: int
    min_segments_per_rank: int
    segments_in_flight: int
    preamble_bytes: int
    work_enqueue_latency: float
    bcube_base: int
    sim_max_segments_per_rank: int | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> GlooConstants:
        """Build from the mapping in ``topologies/software/gloo.yaml`` (us there, seconds here); Gloo's algorithm
        constants are read by :meth:`GlooParams.from_mapping`, the rest here."""
        p = GlooParams.from_mapping(data)
        sim_max = data.get("sim_max_segments_per_rank")
        return cls(
            int(p.max_segment_bytes), p.min_segments_per_rank, p.segments_in_flight,
            int(data["preamble_bytes"]), float(data["work_enqueue_latency_us"]) * _US, p.bcube_base,
            int(sim_max) if sim_max else None,
        )  # fmt: skip

    @property
    def params(self) -> GlooParams:
        """The constants Gloo's algorithms take (:func:`~collsim.algorithms.gloo_algos.gloo_schedule`)."""
        return GlooParams(self.max_segment_bytes, self.min_segments_per_rank, self.segments_in_flight, self.bcube_base)


@dataclass(frozen=True)
class GlooOptions:
    """``backends.gloo`` of a scenario.

    Attributes
    ----------
    algorithm : str
        Allreduce algorithm (:data:`collsim.vocab.GLOO_ALGORITHMS`).
    device : str
        Where the tensors live: ``cuda`` (staged through host memory over TCP) or ``cpu``.
    transport : str
        ``tcp``, or ``ibverbs`` (GPUDirect RDMA for CUDA tensors).
    threads : int
        Worker threads of each rank's process group, >= 1. PyTorch's default is 2:
        ``ProcessGroupGloo::Options::Options(std::chrono::milliseconds timeout) : Backend::Options(GLOO_BACKEND_NAME,
        timeout), threads(2) {}`` in pytorch/pytorch ``torch/csrc/distributed/c10d/ProcessGroupGloo.cpp``.
    """

    algorithm: str = "ring"
    device: str = "cuda"
    transport: str = "tcp"
    threads: int = 2


#: Collectives whose ranks have different jobs (a root, a sender): their breakdown pools every rank's activities.
_MIXED_ROLES = frozenset({"broadcast", "reduce", "sendrecv"})

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


def _tcp_path(topo: Topology, cat: ResourceCatalog, a: str, b: str) -> tuple[Path, float, float, Tag]:
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
        return path, lat, per_core, TCP_LOOPBACK_TAG
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
    return path, lat, per_core, TCP_NETWORK_TAG


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


def _rdma_path(topo: Topology, cat: ResourceCatalog, a: str, b: str, gpu: bool) -> tuple[Path, float, Tag]:
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
    else:
        path = path + link_uses(topo.route(na, nb)) + link_uses(topo.pcie_route(nb, b))
    tag = RDMA_TAG[(da.node != db.node, gpu)]
    if not gpu:
        path = cat.mem(ca.name, 1.0) + path + cat.mem(cb.name, 1.0)
    lat = path.latency + float(ca.spec["nccl_net_overhead"])
    return path, lat, tag


# ---------------------------------------------------------------------------------------------- checks and schedules
def _check(topo: Topology, opts: GlooOptions, collective: str) -> list[str]:
    """Validate the request and return the rank devices."""
    for what, value, valid in (
        ("collective", collective, COLLECTIVES),
        ("algorithm", opts.algorithm, GLOO_ALGORITHMS),
        ("device", opts.device, TENSOR_DEVICES),
        ("transport", opts.transport, GLOO_TRANSPORTS),
    ):
        if value not in valid:
            raise BackendError(f"gloo: unknown {what} {value!r}; valid: {', '.join(valid)}")
    if isinstance(opts.threads, bool) or not isinstance(opts.threads, int) or opts.threads < 1:
        raise BackendError(f"gloo: threads must be an integer >= 1 (worker threads per rank), got {opts.threads!r}")
    if opts.device == "cuda":
        ranks = [d.name for d in topo.gpus()]
        if not ranks:
            raise BackendError("gloo device 'cuda' needs GPUs; this topology has none (use device: cpu)")
    else:
        ranks = [d.name for d in topo.rank_devices()]
    if opts.transport == "ibverbs":
        _check_ibverbs(topo, opts, ranks)
    if collective == "sendrecv" and len(ranks) < 2:
        raise BackendError("gloo sendrecv needs at least 2 ranks")
    return ranks


def _check_ibverbs(topo: Topology, opts: GlooOptions, ranks: list[str]) -> None:
    """Every rank has an RDMA NIC, the fabric is RDMA, and CUDA tensors have GPUDirect."""
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


def _bcube_base(topo: Topology, ranks: list[str], default: int) -> int:
    """BCube's base: the ranks per node when the job spans several nodes (step 0 inside nodes), else ``default``
    (Gloo's default base, ``GlooConstants.bcube_base``)."""
    per_node: dict[int, int] = {}
    for r in ranks:
        node = topo.device(r).node
        per_node[node] = per_node.get(node, 0) + 1
    if len(per_node) > 1:
        counts = set(per_node.values())
        if len(counts) == 1 and (b := counts.pop()) >= 2:
            return b
    return default


def _algorithm(opts: GlooOptions, collective: str) -> tuple[str, list[str]]:
    """The allreduce algorithm Gloo runs, and a note when it is not the one asked for."""
    if collective in ("allreduce", "reduce_scatter") and opts.transport == "ibverbs" and opts.algorithm == "ring":
        return "ring_chunked", ["ibverbs: CudaAllreduceRingChunked (Gloo's GPU ring) instead of PyTorch's host ring"]
    return opts.algorithm, []


def _schedules(
    topo: Topology, ranks: list[str], consts: GlooConstants, collective: str, algorithm: str, sizes: Sequence[int]
) -> list[GlooSchedule]:
    """One schedule per collective (``sizes`` in bytes); a schedule Gloo cannot run is a :class:`BackendError`."""
    base = _bcube_base(topo, ranks, consts.bcube_base)
    try:
        return [
            gloo_schedule(
                collective,
                algorithm,
                len(ranks),
                float(nbytes),
                params=consts.params,
                base=base,
                max_per_rank=consts.sim_max_segments_per_rank,
            )
            for nbytes in sizes
        ]
    except ValueError as exc:
        raise BackendError(f"gloo: {exc}") from None


# ---------------------------------------------------------------------------------------------- what a rank uses
@dataclass(frozen=True)
class _Compute:
    """How a rank reduces and copies received data: at most ``cap`` bytes/s (one CPU thread; inf on the GPU, whose
    HBM is the limit) after ``latency`` seconds (a kernel launch on the GPU), recorded as ``red_tag`` / ``copy_tag``.
    """

    cap: float
    latency: float
    red_tag: Tag
    copy_tag: Tag


@dataclass(frozen=True)
class _RankCosts:
    """What one rank's operations cost, whatever the collective's size.

    ``links`` maps a connection label to its :data:`LinkCost`; ``copy_latency`` is the GPU's memcpy latency paid
    once per staging copy, s (None when nothing is staged); ``compute`` prices reductions and copies;
    ``notice_latency`` is a control message's latency, s.
    """

    links: dict[str, LinkCost]
    copy_latency: float | None
    compute: _Compute
    notice_latency: float


@dataclass
class _Plan:
    """Every rank's resource uses (``usage``, over ``specs``), costs, the owner of its flows, and per collective its
    staged bytes."""

    usage: dict[Hashable, dict[str, Uses]]
    specs: dict[Hashable, ResourceSpec]
    costs: dict[int, _RankCosts]
    staging: list[dict[int, tuple[float, float]]]  # per collective, per rank: (D2H bytes, H2D bytes)
    owners: dict[int, Owner] = field(default_factory=dict)


def _staging_roles(topo: Topology, cat: ResourceCatalog, r: str) -> dict[str, Uses]:
    """The D2H and H2D copies of rank device ``r``: PCIe between the GPU and its CPU socket, and that socket's
    memory."""
    cpu = topo.host_cpu(r)
    d2h = link_uses(topo.pcie_route(r, cpu.name)) + cat.mem(cpu.name, 1.0)
    h2d = cat.mem(cpu.name, 1.0) + link_uses(topo.pcie_route(cpu.name, r))
    return {"d2h": list(d2h.uses), "h2d": list(h2d.uses)}


def _link(
    topo: Topology, cat: ResourceCatalog, opts: GlooOptions, a: str, b: str, gpu_resident: bool
) -> tuple[Path, LinkCost]:
    """The connection from rank device ``a`` to ``b``: TCP (one stream's rate cap) or an RDMA write (no cap)."""
    if opts.transport == "tcp":
        path, lat, cap, tag = _tcp_path(topo, cat, a, b)
        return path, (lat, cap, tag)
    path, lat, tag = _rdma_path(topo, cat, a, b, gpu_resident)
    return path, (lat, math.inf, tag)


def _compute_roles(
    topo: Topology, cat: ResourceCatalog, specs: dict[Hashable, ResourceSpec], r: str, gpu_resident: bool
) -> tuple[dict[str, Uses], _Compute]:
    """Reductions and copies of rank device ``r``: on the GPU's HBM (adding its spec) or by one CPU thread.

    Returns the roles ``reduce`` and ``copy`` and their costs.
    """
    if gpu_resident:
        dev = topo.device(r)
        specs[("hbm", r)] = ResourceSpec(resource_name(("hbm", r)), float(dev.spec["hbm_bandwidth"]), "hbm")
        # a reduction kernel reads two operands and writes one; a copy reads one and writes one
        roles: dict[str, Uses] = {"reduce": [(("hbm", r), 3.0)], "copy": [(("hbm", r), 2.0)]}
        launch = float(dev.spec["kernel_launch_latency"])
        return roles, _Compute(math.inf, launch, GPU_REDUCTION_TAG, GPU_COPY_TAG)
    cpu = topo.host_cpu(r)
    red_rate = float(cpu.spec["reduce_bw_per_core"])
    roles = {
        "reduce": list((cat.cores(cpu.node, 1.0 / red_rate) + cat.mem(cpu.name, 3.0)).uses),
        # memcpy out of a receive buffer: one thread, DRAM-bound like the reduction (estimate), 2 bytes of traffic
        "copy": list((cat.cores(cpu.node, 1.0 / red_rate) + cat.mem(cpu.name, 2.0)).uses),
    }
    return roles, _Compute(red_rate, 0.0, CPU_REDUCTION_TAG, CPU_COPY_TAG)


def _plan(
    topo: Topology,
    opts: GlooOptions,
    ranks: list[str],
    scheds: list[GlooSchedule],
    collective: str,
    sizes: Sequence[int],
) -> _Plan:
    """Resource uses and costs of every rank, and the bytes each collective stages (see ``_STAGING``)."""
    staged = opts.device == "cuda" and opts.transport == "tcp"
    gpu_resident = opts.device == "cuda" and opts.transport == "ibverbs"
    cat = ResourceCatalog(topo)
    plan = _Plan(usage={}, specs=dict(cat.specs), costs={}, staging=[])
    for i, r in enumerate(ranks):
        roles = _staging_roles(topo, cat, r) if staged else {}
        links: dict[str, LinkCost] = {}
        for label, p in sorted({lab: p for s in scheds for lab, p in s.peers[i].items()}.items()):
            path, links[label] = _link(topo, cat, opts, r, ranks[p], gpu_resident)
            roles["send:" + label] = list(path.uses)
        compute_roles, compute = _compute_roles(topo, cat, plan.specs, r, gpu_resident)
        roles.update(compute_roles)
        cpu = topo.host_cpu(r)
        if opts.transport == "tcp":
            notice = float(cpu.spec["tcp_message_latency"])
        else:
            notice = max((v[0] for v in links.values()), default=float(cpu.spec["nccl_net_overhead"]))
        copy_latency = float(topo.device(r).spec["memcpy_latency"]) if staged else None
        plan.usage[i] = roles
        plan.costs[i] = _RankCosts(links, copy_latency, compute, notice)
        plan.owners[i] = Owner(i, None, "rank", r)
    d2h_kind, h2d_kind = _STAGING[collective]
    n = len(ranks)
    for nbytes in sizes:
        plan.staging.append(
            {
                i: (_staged_bytes(d2h_kind, i, n, nbytes), _staged_bytes(h2d_kind, i, n, nbytes))
                if staged
                else (0.0, 0.0)
                for i in range(n)
            }
        )
    return plan


def _colors(scheds: list[GlooSchedule], plan: _Plan) -> dict[Hashable, Hashable]:
    """A structural colour per rank (ranks of one colour may be simulated once): the role and staged bytes in every
    collective and the costs of its operations (tags by label: the colours are printed and sorted)."""
    colors: dict[Hashable, Hashable] = {}
    for i, c in plan.costs.items():
        first = (scheds[0].roles[i], *plan.staging[0][i])
        rest = tuple((s.roles[i], *plan.staging[k][i]) for k, s in enumerate(scheds) if k)
        links = tuple(sorted((label, (lat, cap, tag.label)) for label, (lat, cap, tag) in c.links.items()))
        costs = (c.copy_latency, links, c.compute.cap, c.compute.latency, c.notice_latency)
        colors[i] = (*first, *costs, *rest)
    return colors


def _relations(scheds: list[GlooSchedule]) -> list[tuple[int, str, int]]:
    """Every ``(rank, label, peer)`` connection of the schedules, once, in order of appearance."""
    return list(dict.fromkeys(rel for s in scheds for rel in s.relations()))


# ---------------------------------------------------------------------------------------------- what a rank does
@dataclass
class _RankOps:
    """The operations of one representative rank as flows on the engine.

    :meth:`_flow` and :meth:`_wait` are the only places this backend starts flows and waits: they set every
    record's declared tag (:mod:`collsim.backends.gloo_tags`) and its owner (the rank).
    """

    net: FluidNetwork
    quotient: Quotient
    costs: _RankCosts
    me: int
    preamble: float  # bytes in front of every message (Gloo's TCP preamble; 0 for RDMA)
    rdma: bool
    owner: Owner

    def _flow(
        self, nbytes: float, role: str, *, latency: float, max_rate: float = math.inf, tag: Tag
    ) -> tuple[Event, Event]:
        """Start a flow of ``nbytes`` bytes in ``role``; ``(streamed, arrived)``."""
        uses = self.quotient.uses(self.me, role)
        return self.net.transfer(nbytes, uses, latency=latency, max_rate=max_rate, tag=tag, owner=self.owner)

    def _wait(self, seconds: float, tag: Tag) -> Event:
        """A pure wait of ``seconds``, recorded under ``tag``."""
        return self.net.delay(seconds, tag=tag, owner=self.owner)

    def hand_off(self, seconds: float) -> Event:
        """The worker thread picking the collective up (``work_enqueue_latency``)."""
        return self._wait(seconds, ENQUEUE_TAG)

    def d2h(self, nbytes: float) -> Event:
        """Copy ``nbytes`` from the GPU to pinned host memory; fires on arrival."""
        return self._flow(nbytes, "d2h", latency=self._copy_latency(), tag=D2H_TAG)[1]

    def h2d(self, nbytes: float) -> Event:
        """Copy ``nbytes`` back from pinned host memory to the GPU; fires on arrival."""
        return self._flow(nbytes, "h2d", latency=self._copy_latency(), tag=H2D_TAG)[1]

    def _copy_latency(self) -> float:
        lat = self.costs.copy_latency
        assert lat is not None, "staging copy on a rank that stages nothing"
        return lat

    def send(self, label: str, nbytes: float) -> tuple[Event, Event]:
        """One message of ``nbytes`` on connection ``label`` (Gloo's TCP transport puts a preamble in front)."""
        lat, cap, tag = self.costs.links[label]
        return self._flow(nbytes + self.preamble, "send:" + label, latency=lat, max_rate=cap, tag=tag)

    def reduce(self, nbytes: float) -> Event:
        """Reduce ``nbytes`` of a receive buffer into the local one; fires when done."""
        c = self.costs.compute
        return self._flow(nbytes, "reduce", latency=c.latency, max_rate=c.cap, tag=c.red_tag)[1]

    def copy(self, nbytes: float) -> Event:
        """Copy ``nbytes`` out of a receive buffer; fires when done."""
        c = self.costs.compute
        return self._flow(nbytes, "copy", latency=c.latency, max_rate=c.cap, tag=c.copy_tag)[1]

    def notice(self, label: str | None) -> Event:
        """A control message to the peer of ``label`` (None: the rank's default); fires on arrival."""
        links = self.costs.links
        lat = links[label][0] if (self.rdma and label in links) else self.costs.notice_latency
        return self.net.env.timeout(lat)

    def context(self, board: EventBoard, nranks: int) -> GlooRankContext:
        """The :class:`GlooRankContext` a schedule's body runs in, with this rank's costs."""
        return GlooRankContext(
            board=board,
            me=self.me,
            nranks=nranks,
            rep=self.quotient.rep,
            send=self.send,
            reduce=self.reduce,
            copy=self.copy,
            notice=self.notice,
        )


def _rank_job(
    ops: _RankOps,
    pool: simpy.Resource,
    sched: GlooSchedule,
    board: EventBoard,
    staged: tuple[float, float],
    enqueue: float,
) -> Proc:
    """One rank's part in one collective, as ProcessGroupGloo runs it (a SimPy process).

    Waits for: a free worker thread of the rank (collectives take them in the order they were issued), then
    whatever the schedule waits for (peers' data and notices).
    Pays: the hand-off to the thread (``enqueue`` seconds); with CUDA tensors over TCP the D2H copy of the bytes
    the rank holds (``staged[0]``); the schedule's messages, reductions and copies; then it frees the thread and
    pays the H2D copy of the bytes it receives (``staged[1]``): PyTorch's worker issues the copy back without
    waiting for it (``AsyncWork::run`` copies non-blocking, ``synchronize`` only orders the caller's stream).
    """
    thread = pool.request()
    if not thread.triggered:  # a free thread is granted at once: yielding it anyway would only reorder events
        yield thread
    yield ops.hand_off(enqueue)
    d2h, h2d = staged
    if d2h > 0:
        yield ops.d2h(d2h)
    yield ops.net.env.process(sched.body(ops.context(board, sched.nranks)))
    pool.release(thread)
    if h2d > 0:
        yield ops.h2d(h2d)


def _run(
    env: simpy.Environment,
    net: FluidNetwork,
    quotient: Quotient,
    scheds: list[GlooSchedule],
    plan: _Plan,
    opts: GlooOptions,
    consts: GlooConstants,
) -> tuple[float, int, list[float]]:
    """Issue every collective on every representative rank at time 0 and run until all are done.

    Returns the completion time (s), the representative that finished last (the lowest on a tie) and each
    collective's completion time (s).
    """
    preamble = float(consts.preamble_bytes) if opts.transport == "tcp" else 0.0
    reps = [int(rep) for rep in quotient.reps()]  # type: ignore[call-overload]
    pools = {rep: simpy.Resource(env, capacity=opts.threads) for rep in reps}
    by_rank: dict[int, float] = {}
    by_collective = [0.0] * len(scheds)
    done: list[Event] = []

    def finished(rep: int, k: int) -> None:
        by_rank[rep] = max(by_rank.get(rep, 0.0), env.now)
        by_collective[k] = max(by_collective[k], env.now)

    ops = [
        _RankOps(net, quotient, plan.costs[rep], rep, preamble, opts.transport != "tcp", plan.owners[rep])
        for rep in reps
    ]
    for k, sched in enumerate(scheds):
        board = EventBoard(env)
        for rank_ops in ops:
            rep = rank_ops.me
            job = _rank_job(rank_ops, pools[rep], sched, board, plan.staging[k][rep], consts.work_enqueue_latency)
            ev = env.process(job)
            ev.callbacks.append(lambda _e, rep=rep, k=k: finished(rep, k))  # type: ignore[misc]
            done.append(ev)
    t = run_until_done(env, done)
    return t, max(reps, key=lambda r: (by_rank.get(r, 0.0), -r)), by_collective


def _breakdown(net: FluidNetwork, collective: str, opts: GlooOptions, last: Owner, t: float) -> dict[str, float]:
    """Seconds per tag label over ``[0, t]``, adding up to ``t``: the ``last`` rank's, or for collectives whose ranks
    have different jobs every instant goes to the highest-priority activity of any rank (a receiver's wait shows as
    the sender's transfer)."""
    breakdown = attribute_time(
        net.records,
        None if collective in _MIXED_ROLES else last,
        0.0,
        t,
        BREAKDOWN_PRIORITY,
        latency=LATENCY_TAG["tcp" if opts.transport == "tcp" else "ibverbs"],
        idle=IDLE_TAG,
    )
    return {k: v for k, v in breakdown.items() if v > 0}


def _notes(scheds: list[GlooSchedule], collective: str, opts: GlooOptions, plan: _Plan, ends: list[float]) -> list[str]:
    """What the outcome reports besides the time: the schedules' choices, how reduce_scatter runs, when each of
    several collectives finished (``ends``, s), and the transports used."""
    notes = list(dict.fromkeys(note for s in scheds for note in s.notes))
    if collective == "reduce_scatter":
        notes.append(
            "reduce_scatter on Gloo is a full allreduce of the input, then a local slice: 2x the bytes of a true "
            "reduce-scatter"
        )
    if len(scheds) > 1:
        done = ", ".join(f"{t / _US:.2f}" for t in ends)
        notes.append(
            f"{len(scheds)} collectives issued at once, {opts.threads} worker thread(s) per rank: done at {done} us"
        )
    tags = sorted({tag.label for c in plan.costs.values() for (_lat, _cap, tag) in c.links.values()})
    if tags:
        notes.append("transport: " + ", ".join(tags))
    return notes


# ---------------------------------------------------------------------------------------------- entry points
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
) -> Outcome:
    """Simulate ``len(sizes)`` Gloo collectives issued at once (as DDP issues its buckets); return their outcome.

    Every rank runs them on its ``opts.threads`` worker threads: each waits for a free thread (in issue order) and
    keeps it from the hand-off to the end of its Gloo algorithm; those running at once share every resource.

    Parameters
    ----------
    topo, opts, consts, collective, symmetry, record, check
        As :func:`simulate_gloo`; ``opts.threads`` is the pool size.
    sizes : sequence of int
        Bytes of each collective, in issue order (nccl-tests semantics, see :func:`simulate_gloo`).

    Returns
    -------
    Outcome
        ``time_s``: until every rank is done with all; ``size_bytes``: the sum; a note gives each one's end.

    Notes
    -----
    Limits: messages of concurrent collectives on one connection are separate flows (each capped at one TCP
    stream's rate), where Gloo writes them one after another on the pair's socket; a queued collective's D2H copy
    starts after its hand-off, where PyTorch issues it on a side stream when the collective is enqueued.
    """
    if len(sizes) == 0:
        raise BackendError("gloo: no collective to simulate (sizes is empty)")
    ranks = _check(topo, opts, collective)
    algorithm, notes = _algorithm(opts, collective)
    scheds = _schedules(topo, ranks, consts, collective, algorithm, sizes)
    env, net = new_network(record, check)
    plan = _plan(topo, opts, ranks, scheds, collective, sizes)
    quotient = build_quotient(
        net, plan.usage, plan.specs, colors=_colors(scheds, plan), relations=_relations(scheds), symmetric=symmetry
    )
    key_resources(quotient)
    t, last, ends = _run(env, net, quotient, scheds, plan, opts, consts)
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
