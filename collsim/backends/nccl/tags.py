"""The tags the NCCL backend emits, declared once: one per transport, NVLS, CollNet's in-network reduction, the
launch, and the breakdown's pseudo-tags (per-step latency, waiting).

Every flow of the simulation carries one of these :class:`~collsim.engine.Tag` objects (its label, activity and
breakdown category); the time breakdown ranks them in :data:`BREAKDOWN_PRIORITY` order (the first active one gets
each instant). :data:`TAGS` lists them all for the registry (:mod:`collsim.backends.tags`).
"""

from __future__ import annotations

from collsim.engine import Tag

__all__ = [
    "BREAKDOWN_PRIORITY",
    "IDLE_TAG",
    "LATENCY_TAG",
    "LAUNCH_TAG",
    "NVLS_COPY_TAG",
    "NVLS_TAG",
    "ONE_RANK_COPY_TAG",
    "SHARP_TAG",
    "STRAGGLER_TAG",
    "TAGS",
    "TRANSPORT_TAG",
]

_NVLINK = "transfer: NVLink"
_RDMA = "transfer: network (RDMA)"
_OVERHEAD = "latency and overheads"

#: The tag of a flow over each transport (keys: :data:`collsim.vocab.NCCL_TRANSPORTS`).
TRANSPORT_TAG: dict[str, Tag] = {
    "P2P/NVLink": Tag("NVLink", "send", _NVLINK),
    "P2P/PCIe": Tag("PCIe P2P", "send", "transfer: PCIe P2P"),
    "SHM": Tag("SHM via host memory", "send", "transfer: SHM (PCIe + host memory)"),
    "NET/GDR": Tag("network (GPUDirect RDMA)", "send", _RDMA),
    "NET/staged": Tag("network (staged via host)", "send", _RDMA),
    "NET/socket": Tag("network (TCP sockets)", "send", "transfer: network (TCP)"),
}
#: NVLink SHARP: the NVSwitch reduces and multicasts.
NVLS_TAG = Tag("NVLink (NVLS)", "send", _NVLINK)
#: The NVLS kernels' own copies of each slice into and out of the NVLS buffers (scatter and gather warps), in the
#: GPU's memory; drawn with the GPU's work, as Gloo's GPU copies are.
NVLS_COPY_TAG = Tag("NVLS buffer copies (GPU memory)", "copy", "GPU reduction")
#: One rank alone: NCCL copies the input to the output buffer (ncclLaunchOneRank: cudaMemcpyAsync, out of place).
ONE_RANK_COPY_TAG = Tag("one rank: copy to the output (GPU memory)", "copy", "GPU reduction")
#: CollNet: the network switch reduces.
SHARP_TAG = Tag("network (in-network reduction)", "send", _RDMA)
#: The kernel launch and NCCL's base latency every rank pays first.
LAUNCH_TAG = Tag("launch + base latency", "overhead", _OVERHEAD)
#: A flow's arrival latency (per-step hwLat and propagation), when nothing else is active (breakdown only).
LATENCY_TAG = Tag("per-step latency", "overhead", _OVERHEAD)
#: a straggler's late start (scenario perturb.ranks: launch_delay)
STRAGGLER_TAG = Tag("straggler delay", "overhead", _OVERHEAD)
#: Nothing active: waiting for peers or for buffer slots (breakdown only).
IDLE_TAG = Tag("waiting (peers, slots)", "wait", "waiting (peers, contention)")

#: Breakdown priority: at each instant the first active tag gets the time.
BREAKDOWN_PRIORITY: tuple[Tag, ...] = (
    NVLS_TAG,
    TRANSPORT_TAG["NET/socket"],
    TRANSPORT_TAG["NET/staged"],
    TRANSPORT_TAG["NET/GDR"],
    TRANSPORT_TAG["SHM"],
    TRANSPORT_TAG["P2P/PCIe"],
    TRANSPORT_TAG["P2P/NVLink"],
    NVLS_COPY_TAG,
    ONE_RANK_COPY_TAG,
    LAUNCH_TAG,
    STRAGGLER_TAG,
)

#: Every tag this backend emits or reports.
TAGS: tuple[Tag, ...] = (
    *TRANSPORT_TAG.values(), NVLS_TAG, NVLS_COPY_TAG, ONE_RANK_COPY_TAG, SHARP_TAG, LAUNCH_TAG, LATENCY_TAG,
    STRAGGLER_TAG, IDLE_TAG,
)
