"""The tags the Gloo backend emits, declared once: host staging copies, reductions and copies on the CPU or the
GPU, messages over TCP or RDMA, the hand-off to a worker thread, and the breakdown's pseudo-tags (message latency,
waiting).

Every flow of :mod:`collsim.backends.gloo` carries one of these :class:`~collsim.engine.Tag` objects; the time
breakdown ranks them in :data:`BREAKDOWN_PRIORITY` order. :data:`TAGS` lists them all for the registry
(:mod:`collsim.backends.tags`).
"""

from __future__ import annotations

from collsim.engine import Tag

__all__ = [
    "BREAKDOWN_PRIORITY",
    "CPU_COPY_TAG",
    "CPU_REDUCTION_TAG",
    "D2H_TAG",
    "ENQUEUE_TAG",
    "GPU_COPY_TAG",
    "GPU_REDUCTION_TAG",
    "H2D_TAG",
    "IDLE_TAG",
    "LATENCY_TAG",
    "PAGE_FAULT_TAG",
    "RDMA_TAG",
    "STRAGGLER_TAG",
    "TAGS",
    "TCP_LOOPBACK_TAG",
    "TCP_NETWORK_TAG",
]

_OVERHEAD = "latency and overheads"
_STAGING = "host copies (D2H/H2D)"

#: CUDA tensors over TCP: the copy to pinned host memory before the collective.
D2H_TAG = Tag("D2H copy (PCIe)", "copy", _STAGING)
#: ... and the copy back after it.
H2D_TAG = Tag("H2D copy (PCIe)", "copy", _STAGING)
#: A rank's CPU thread reducing a received buffer into its own.
CPU_REDUCTION_TAG = Tag("CPU reduction", "reduce", "CPU reduction")
#: A rank's CPU thread copying out of a receive buffer.
CPU_COPY_TAG = Tag("CPU copy", "copy", "CPU reduction")
#: A rank's CPU thread faulting in a fresh buffer's pages (ProcessGroupGloo's flat allgather output, an mmap).
PAGE_FAULT_TAG = Tag("CPU page faults (fresh buffer)", "copy", "CPU reduction")
#: A reduction kernel on the GPU (ibverbs with CUDA tensors).
GPU_REDUCTION_TAG = Tag("GPU reduction (HBM)", "reduce", "GPU reduction")
#: A copy kernel on the GPU (ibverbs with CUDA tensors).
GPU_COPY_TAG = Tag("GPU copy (HBM)", "copy", "GPU reduction")
#: A TCP message between ranks of one host (loopback).
TCP_LOOPBACK_TAG = Tag("TCP over loopback", "send", "transfer: TCP loopback (CPU + host memory)")
#: A TCP message between hosts.
TCP_NETWORK_TAG = Tag("TCP over network", "send", "transfer: network (TCP)")
#: An RDMA write, by (across nodes, GPU memory): within a node the queue pair loops back in the NIC.
RDMA_TAG: dict[tuple[bool, bool], Tag] = {
    (True, True): Tag("RDMA over network (GPUDirect)", "send", "transfer: network (RDMA)"),
    (True, False): Tag("RDMA over network", "send", "transfer: network (RDMA)"),
    (False, True): Tag("RDMA within node (GPUDirect)", "send", "transfer: within node (RDMA)"),
    (False, False): Tag("RDMA within node", "send", "transfer: within node (RDMA)"),
}
#: Handing the collective to a worker thread.
ENQUEUE_TAG = Tag("enqueue on worker thread", "overhead", _OVERHEAD)
#: A straggler's late start (scenario perturb.ranks: launch_delay); the same tag as NCCL's.
STRAGGLER_TAG = Tag("straggler delay", "overhead", _OVERHEAD)
#: A message's arrival latency when nothing else is active (breakdown only), per transport.
LATENCY_TAG: dict[str, Tag] = {
    "tcp": Tag("TCP message latency", "overhead", _OVERHEAD),
    "ibverbs": Tag("RDMA message latency", "overhead", _OVERHEAD),
}
#: Nothing active: waiting for peers' data or notices (breakdown only).
IDLE_TAG = Tag("waiting (peers, notices)", "wait", "waiting (peers, contention)")

#: Breakdown priority: at each instant the first active tag gets the time.
BREAKDOWN_PRIORITY: tuple[Tag, ...] = (
    D2H_TAG,
    H2D_TAG,
    CPU_REDUCTION_TAG,
    GPU_REDUCTION_TAG,
    CPU_COPY_TAG,
    PAGE_FAULT_TAG,
    GPU_COPY_TAG,
    TCP_NETWORK_TAG,
    TCP_LOOPBACK_TAG,
    RDMA_TAG[(True, True)],
    RDMA_TAG[(False, True)],
    RDMA_TAG[(True, False)],
    RDMA_TAG[(False, False)],
    ENQUEUE_TAG,
    STRAGGLER_TAG,
)

#: Every tag this backend emits or reports.
TAGS: tuple[Tag, ...] = (*BREAKDOWN_PRIORITY, *LATENCY_TAG.values(), IDLE_TAG)
