"""What every rank uses and pays: resource uses per role, connection costs, staging, and the symmetry colours."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from collsim.algorithms.gloo_algos import GlooSchedule
from collsim.backends.common import (
    Path,
    ResourceCatalog,
    link_uses,
)
from collsim.backends.gloo.options import GlooOptions
from collsim.backends.gloo.paths import _rdma_path, _tcp_path
from collsim.backends.gloo.tags import (
    CPU_COPY_TAG,
    CPU_REDUCTION_TAG,
    GPU_COPY_TAG,
    GPU_REDUCTION_TAG,
)
from collsim.engine import Owner, ResourceSpec, Tag
from collsim.topology import Link, Topology

#: Resource uses of one role of one rank: (resource key, units consumed per byte moved).
Uses = list[tuple[Hashable, float]]
#: One connection of a rank: (message latency in s, one stream's rate cap in bytes/s, the flows' tag).
LinkCost = tuple[float, float, Tag]

# bytes each rank copies host<-device before / device<-host after, as a fraction of nbytes; root-only ones below
_STAGING: dict[str, tuple[str, str]] = {
    "allreduce": ("all", "all"),
    # reduce_scatter_tensor all-reduces a clone of the whole input (ProcessGroupGloo.cpp, torch 2.13): its CUDA
    # work stages the whole clone out and back; the chunk copy into the output is on the GPU
    "reduce_scatter": ("all", "all"),
    "allgather": ("slice", "all"),  # nbytes is the whole output: each rank contributes nbytes/n
    "alltoall": ("all", "all"),
    # ProcessGroupGloo.cpp (torch 2.13): AsyncBroadcastCUDAWork copies the root's tensor out, then every rank's
    # back (the root's too: run() has no root test); AsyncReduceCUDAWork copies every rank's out and back
    "broadcast": ("root", "all"),
    "reduce": ("all", "all"),
    # send/recv on CUDA tensors over TCP is refused (paths._check): ProcessGroupGloo stages nothing for them
    "sendrecv": ("none", "none"),
}


def _staged_bytes(kind: str, rank: int, n: int, nbytes: float) -> float:
    """Bytes of a staging copy of ``kind`` (see ``_STAGING``) for ``rank``."""
    return {
        "all": nbytes,
        "slice": nbytes / n,
        "root": nbytes if rank == 0 else 0.0,  # the ranks are numbered from the root (simulate: Gloo's order)
        "none": 0.0,
    }[kind]


# ---------------------------------------------------------------------------------------------- what a rank uses
@dataclass(frozen=True)
class _Compute:
    """How a rank reduces and copies received data: at most ``cap`` bytes/s reduced and ``copy_cap`` bytes/s copied
    (one CPU thread; inf on the GPU, whose HBM is the limit) after ``latency`` seconds (a kernel launch on the GPU),
    recorded as ``red_tag`` / ``copy_tag``; ``touch_cap``: bytes/s at which one thread faults in a fresh mapping
    (the CPU preset's ``first_touch_bw``; 0 when it gives none: not charged).
    """

    cap: float
    latency: float
    red_tag: Tag
    copy_tag: Tag
    copy_cap: float = math.inf
    touch_cap: float = 0.0


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


def _dma_uses(links: Sequence[Link]) -> Uses:
    """A copy engine's uses of PCIe links: per byte, ``1 / dma_ratio`` of each link's modelled bandwidth, so that a
    copy alone runs at the link's measured DMA rate (links.yaml ``dma_efficiency``) rather than NCCL's figure."""
    return [(key, coef / ln.dma_ratio) for (key, coef), ln in zip(link_uses(links).uses, links, strict=True)]


def _staging_roles(topo: Topology, cat: ResourceCatalog, r: str) -> dict[str, Uses]:
    """The D2H and H2D copies of rank device ``r``: PCIe between the GPU and its CPU socket (by DMA), and that
    socket's memory."""
    cpu = topo.host_cpu(r)
    d2h = _dma_uses(topo.pcie_route(r, cpu.name)) + list(cat.mem(cpu.name, 1.0).uses)
    h2d = list(cat.mem(cpu.name, 1.0).uses) + _dma_uses(topo.pcie_route(cpu.name, r))
    return {"d2h": d2h, "h2d": h2d}


def send_role(label: str, context: int) -> str:
    """The role of a message on connection ``label`` of Gloo context ``context`` (each context its own
    connection and receiving thread)."""
    return f"send:{label}@{context}"


def _link(
    topo: Topology,
    cat: ResourceCatalog,
    opts: GlooOptions,
    ranks: list[str],
    i: int,
    p: int,
    gpu_resident: bool,
    context: int = 0,
) -> tuple[Path, LinkCost]:
    """The connection from rank ``i`` to rank ``p`` (devices in ``ranks``) of Gloo context ``context``: TCP (one
    stream's rate cap; the receiver's loop thread of that context) or an RDMA write (no cap)."""
    a, b = ranks[i], ranks[p]
    if opts.transport == "tcp":
        path, lat, cap, tag = _tcp_path(topo, cat, a, b, (i, p), context)
        return path, (lat, cap, tag)
    path, lat, tag = _rdma_path(topo, cat, a, b, gpu_resident)
    return path, (lat, math.inf, tag)


def _compute_roles(
    topo: Topology, cat: ResourceCatalog, r: str, gpu_resident: bool, write_allocate: float, rank: int | None = None
) -> tuple[dict[str, Uses], _Compute]:
    """Reductions and copies of rank ``rank`` on device ``r``: on the GPU's HBM (the catalogue's ``("hbm", r)``)
    or by one CPU thread of the rank's process (its node's cores and, where confined, the process's own).

    Returns the roles ``reduce`` and ``copy`` and their costs.
    """
    if gpu_resident:
        dev = topo.device(r)
        # a reduction kernel reads two operands and writes one; a copy reads one and writes one
        roles: dict[str, Uses] = {"reduce": [(("hbm", r), 3.0)], "copy": [(("hbm", r), 2.0)]}
        launch = float(dev.spec["kernel_launch_latency"])
        return roles, _Compute(math.inf, launch, GPU_REDUCTION_TAG, GPU_COPY_TAG)
    cpu = topo.host_cpu(r)
    red_rate = float(cpu.spec["reduce_bw_per_core"])
    # a copy (gloo's memcpy, ProcessGroupGloo's copy_) streams at one thread's copy rate where the preset measured
    # it (copy_bw_per_core); without it at the reduction's rate, as both are DRAM-bound loops of 3 streams
    copy_rate = float(cpu.spec.get("copy_bw_per_core") or red_rate)
    touch_rate = float(cpu.spec.get("first_touch_bw") or 0.0)
    roles = {
        "reduce": list(
            (cat.cores(cpu.node, 1.0 / red_rate) + cat.mem(cpu.name, 3.0) + cat.process(rank, 1.0 / red_rate)).uses
        ),
        # a copy out of a receive buffer: the read, the write and the write-allocate read of the destination's
        # lines (training.yaml cpu_write_allocate_bytes_per_byte: 3 bytes of traffic per byte; a reduction's
        # destination is one of its operands, read anyway)
        "copy": list(
            (
                cat.cores(cpu.node, 1.0 / copy_rate)
                + cat.mem(cpu.name, 2.0 + write_allocate)
                + cat.process(rank, 1.0 / copy_rate)
            ).uses
        ),
    }
    if touch_rate > 0:  # the kernel's page faults: the faulting thread's core, and the zeroed page written once
        touch = cat.cores(cpu.node, 1.0 / touch_rate) + cat.mem(cpu.name, 1.0) + cat.process(rank, 1.0 / touch_rate)
        roles["touch"] = list(touch.uses)
    return roles, _Compute(red_rate, 0.0, CPU_REDUCTION_TAG, CPU_COPY_TAG, copy_rate, touch_rate)


def _plan(
    topo: Topology,
    opts: GlooOptions,
    ranks: list[str],
    scheds: list[GlooSchedule],
    collective: str,
    sizes: Sequence[int],
    write_allocate: float,
) -> _Plan:
    """Resource uses and costs of every rank, and the bytes each collective stages (see ``_STAGING``);
    ``write_allocate``: :attr:`~collsim.backends.gloo.options.GlooConstants.write_allocate`."""
    staged = opts.device == "cuda" and opts.transport == "tcp"
    gpu_resident = opts.device == "cuda" and opts.transport == "ibverbs"
    cat = ResourceCatalog(topo)
    if opts.cores_per_process is not None:
        cat.confine(len(ranks), opts.cores_per_process)
    if opts.transport == "tcp":
        cat.io_threads(len(ranks), opts.interfaces)
    plan = _Plan(usage={}, specs=cat.specs, costs={}, staging=[])
    for i, r in enumerate(ranks):
        roles = _staging_roles(topo, cat, r) if staged else {}
        links: dict[str, LinkCost] = {}
        for label, p in sorted({lab: p for s in scheds for lab, p in s.peers[i].items()}.items()):
            for c in range(opts.interfaces):
                path, links[label] = _link(topo, cat, opts, ranks, i, p, gpu_resident, c)
                roles[send_role(label, c)] = list(path.uses)
        compute_roles, compute = _compute_roles(topo, cat, r, gpu_resident, write_allocate, i)
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


def _colors(
    scheds: list[GlooSchedule], plan: _Plan, delays: Mapping[int, float] | None = None
) -> dict[Hashable, Hashable]:
    """A structural colour per rank (ranks of one colour may be simulated once): the role and staged bytes in every
    collective, the costs of its operations (tags by label: the colours are printed and sorted) and its straggler
    delay (``delays``: rank to seconds)."""
    colors: dict[Hashable, Hashable] = {}
    delays = delays or {}
    for i, c in plan.costs.items():
        first = (scheds[0].roles[i], *plan.staging[0][i])
        rest = tuple((s.roles[i], *plan.staging[k][i]) for k, s in enumerate(scheds) if k)
        links = tuple(sorted((label, (lat, cap, tag.label)) for label, (lat, cap, tag) in c.links.items()))
        compute = (c.compute.cap, c.compute.copy_cap, c.compute.touch_cap, c.compute.latency)
        costs = (c.copy_latency, links, *compute, c.notice_latency, delays.get(i, 0.0))
        colors[i] = (*first, *costs, *rest)
    return colors


def _relations(scheds: list[GlooSchedule]) -> list[tuple[int, str, int]]:
    """Every ``(rank, label, peer)`` connection of the schedules, once, in order of appearance."""
    return list(dict.fromkeys(rel for s in scheds for rel in s.relations()))
