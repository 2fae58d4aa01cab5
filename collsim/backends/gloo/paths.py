"""Which way Gloo's bytes go (TCP over loopback or the network, ibverbs with or without GPUDirect), the checks a
request must pass, and the Gloo schedules of a collective."""

from __future__ import annotations

from collections.abc import Sequence

from collsim.algorithms.gloo_algos import GlooSchedule, gloo_schedule
from collsim.backends.common import (
    BackendError,
    Path,
    ResourceCatalog,
    fabric_uses,
    flow_cap,
    link_uses,
)
from collsim.backends.gloo.options import GlooConstants, GlooOptions
from collsim.backends.gloo.tags import (
    RDMA_TAG,
    TCP_LOOPBACK_TAG,
    TCP_NETWORK_TAG,
)
from collsim.engine import Tag
from collsim.topology import Device, Topology, TopologyError, path_class_rank
from collsim.vocab import (
    COLLECTIVES,
    GLOO_ALGORITHMS,
    GLOO_ALLREDUCE_COLLECTIVES,
    GLOO_COLLECTIVE_ALGORITHM,
    GLOO_TRANSPORTS,
    TENSOR_DEVICES,
)


def _tcp_path(
    topo: Topology,
    cat: ResourceCatalog,
    a: str,
    b: str,
    procs: tuple[int | None, int | None] = (None, None),
    context: int = 0,
) -> tuple[Path, float, float, Tag]:
    """TCP send from rank device ``a`` to ``b`` on Gloo context ``context``: resources, latency, one stream's cap,
    and its tag.

    ``procs``: the sending and receiving ranks. Gloo's TCP pair writes from the calling thread and reads on its
    device's event-loop thread (gloo ``transport/tcp/pair.cc`` lines 279-286 and 466-473; one loop thread per
    device, ``device.cc`` line 226 and ``loop.cc`` line 106), and the kernel's copies to and from socket buffers
    run in those system calls. So the receiver's end costs its loop thread of ``context`` too
    (:meth:`~collsim.backends.common.ResourceCatalog.io_thread`, where declared: every connection and collective of
    that context shares it), and where :meth:`~collsim.backends.common.ResourceCatalog.confine` limits a process's
    cores each end's CPU time is charged to its process as well.
    """
    ca, cb = topo.host_cpu(a), topo.host_cpu(b)
    da, db = topo.device(a), topo.device(b)
    if da.node == db.node:
        per_core = float(ca.spec["tcp_loopback_bw_per_core"])
        # loopback: the sender copies user->kernel (read + write), the receiver kernel->user (read + write)
        path = cat.cores(da.node, 2.0 / per_core) + cat.mem(ca.name, 4.0)
        path = path + _process_ends(cat, procs, context, 1.0 / per_core, 1.0 / per_core)
        if ca.name != cb.name:
            try:
                between = topo.route(ca.name, cb.name, kinds=("upi",))
            except TopologyError:
                raise BackendError(
                    f"ranks on {a} and {b} sit under CPUs {ca.name} and {cb.name} joined by no socket link "
                    "(separate hosts inside one node, as a GB200 NVL72 rack's compute trays, joined only by NVLink): "
                    "Gloo's TCP between them would cross the hosts' network, which collsim does not route inside "
                    "a node; disable backends.gloo, or describe each host as a node of a fabric"
                ) from None
            path = path + link_uses(between)
        lat = float(ca.spec["tcp_message_latency"])
        return path, lat, per_core, TCP_LOOPBACK_TAG
    nic_a, nic_b = _tcp_nic(topo, a, ca), _tcp_nic(topo, b, cb)
    na, nb = nic_a.name, nic_b.name
    rate_a, rate_b = float(ca.spec["tcp_bw_per_core"]), float(cb.spec["tcp_bw_per_core"])
    # one stream: one core at each end, and a provider's cap on the flow (Gloo keeps one socket a peer)
    cap = min(rate_a, rate_b, flow_cap(nic_a), flow_cap(nic_b))
    path = (
        cat.cores(da.node, 1.0 / rate_a)
        + cat.mem(ca.name, 2.0)
        + link_uses(topo.pcie_route(ca.name, na))
        + fabric_uses(topo, na, nb)
        + link_uses(topo.pcie_route(nb, cb.name))
        + cat.mem(cb.name, 2.0)
        + cat.cores(db.node, 1.0 / rate_b)
    )
    lat = float(ca.spec["tcp_message_latency"]) + path.latency
    path = path + _process_ends(cat, procs, context, 1.0 / rate_a, 1.0 / rate_b)
    return path, lat, cap, TCP_NETWORK_TAG


def _tcp_nic(topo: Topology, dev: str, cpu: Device) -> Device:
    """The NIC a rank's TCP socket leaves its node by: the node's first NIC that the rank's host CPU ``cpu`` reaches
    over its own links (PCIe, socket links, NVLink-C2C). On a node of one host that is the first NIC; on a node of
    several hosts (a GB200 NVL72 rack's compute trays) it is the rank's own host's, as its kernel routes it.

    Raises
    ------
    BackendError
        When the node has no NIC, or none on the rank's host.
    """
    node = topo.device(dev).node
    nics = topo.nics(node)
    if not nics:
        raise BackendError(f"gloo: node {node} has no NIC, so the rank on {dev} cannot reach another node")
    for nic in nics:
        try:
            topo.pcie_route(cpu.name, nic.name)
        except TopologyError:
            continue
        return nic
    raise BackendError(
        f"gloo: no NIC of node {node} hangs off the host of {dev} (CPU {cpu.name}); give that host a NIC in the "
        "node template, or disable backends.gloo"
    )


def _process_ends(
    cat: ResourceCatalog, procs: tuple[int | None, int | None], context: int, send_s: float, recv_s: float
) -> Path:
    """What the two ranks' processes pay for a TCP stream beyond the node's cores: each end's CPU time (seconds per
    byte) on its process where confined, and the receiver's on its event-loop thread of ``context``."""
    sender, receiver = procs
    return cat.process(sender, send_s) + cat.process(receiver, recv_s) + cat.io_thread(receiver, context, recv_s)


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
        path = path + fabric_uses(topo, na, nb) + link_uses(topo.pcie_route(nb, b))
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
    if isinstance(opts.interfaces, bool) or not isinstance(opts.interfaces, int) or opts.interfaces < 1:
        raise BackendError(f"gloo: interfaces must be an integer >= 1 (GLOO_SOCKET_IFNAME's entries), got "
                           f"{opts.interfaces!r}")
    if opts.cores_per_process is not None and not opts.cores_per_process > 0:
        raise BackendError(f"gloo: cores_per_process must be above 0 (cores), got {opts.cores_per_process!r}")
    if opts.device == "cuda" and not topo.gpus():
        raise BackendError("gloo device 'cuda' needs GPUs; this topology has none (use device: cpu)")
    ranks = [d.name for d in topo.rank_devices()]  # the GPUs (each ranks_per_gpu times), else the CPU process slots
    if opts.transport == "ibverbs":
        _check_ibverbs(topo, opts, ranks)
    if collective == "sendrecv" and len(ranks) < 2:
        raise BackendError("gloo sendrecv needs at least 2 ranks")
    if collective == "sendrecv" and opts.device == "cuda" and opts.transport == "tcp":
        # ProcessGroupGloo::send/recv give Gloo the tensor's own memory (no CUDA work stages it through the host,
        # as the collectives' do: ProcessGroupGloo.cpp, torch 2.13); torch's backend table: gloo send/recv GPU no
        raise BackendError("gloo runs send/recv on CPU tensors only: ProcessGroupGloo's send and recv hand the "
                           "tensor's memory to Gloo's TCP transport without a copy through the host, which no socket "
                           "reads from a GPU (torch.distributed's backend table: gloo send/recv on GPU, no); set "
                           "backends.gloo.device: cpu, or run NCCL alone (--backend nccl)")  # fmt: skip
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
    """The allreduce algorithm Gloo runs, and a note when it is not the one asked for: with ibverbs, CUDA tensors
    run Gloo's GPU ring (``CudaAllreduceRingChunked``); CPU tensors run the same host ring as over TCP. A collective
    that runs no allreduce algorithm notes one asked for other than the default."""
    gpu_ring = opts.transport == "ibverbs" and opts.device == "cuda"
    if collective in GLOO_ALLREDUCE_COLLECTIVES and gpu_ring and opts.algorithm == "ring":
        return "ring_chunked", ["ibverbs: CudaAllreduceRingChunked (Gloo's GPU ring) instead of PyTorch's host ring"]
    if collective not in GLOO_ALLREDUCE_COLLECTIVES and opts.algorithm != "ring":  # the default says nothing
        fixed = GLOO_COLLECTIVE_ALGORITHM.get(collective, "its own")
        return opts.algorithm, [f"backends.gloo.algorithm {opts.algorithm} is an allreduce algorithm (allreduce and "
                                f"reduce_scatter); Gloo runs {collective} with {fixed}"]  # fmt: skip
    return opts.algorithm, []


def _schedules(
    topo: Topology,
    ranks: list[str],
    consts: GlooConstants,
    collective: str,
    algorithm: str,
    sizes: Sequence[int],
    peers: tuple[int, int] = (0, 1),
    tensor_copies: bool = True,
) -> list[GlooSchedule]:
    """One schedule per collective (``sizes`` in bytes); a schedule Gloo cannot run is a :class:`BackendError`.
    ``tensor_copies``: PyTorch's copies around a collective run where Gloo's do (see
    :func:`~collsim.algorithms.gloo_algos.gloo_schedule`)."""
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
                peers=peers,
                tensor_copies=tensor_copies,
            )
            for nbytes in sizes
        ]
    except ValueError as exc:
        raise BackendError(f"gloo: {exc}") from None
