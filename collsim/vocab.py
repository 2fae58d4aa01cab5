"""collsim's vocabulary: every name set that several layers share, defined once.

Collectives and their spellings, link and device kinds, path classes, fabric types, NCCL's algorithms, protocols
and transports, Gloo's algorithms and transports, backends and tensor devices. Layers import these names from here
and never write the lists again; a new name is added here and nowhere else.

Examples
--------
>>> canonical_collective("All_Reduce"), canonical_collective("reduce-scatter"), canonical_collective("all2all")
('allreduce', 'reduce_scatter', 'alltoall')
>>> "NVLSTree" in NCCL_ALGORITHMS, NCCL_PROTOCOLS
(True, ('LL', 'LL128', 'Simple'))
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "BACKENDS",
    "BREAKDOWN_CATEGORIES",
    "COLLECTIVES",
    "COLLECTIVE_ALIASES",
    "DEVICE_KINDS",
    "FABRIC_TOPOLOGIES",
    "FABRIC_TRANSPORTS",
    "GLOO_ALGORITHMS",
    "GLOO_TRANSPORTS",
    "LINK_KINDS",
    "MEASURED_COLLECTIVES",
    "NCCL_ALGORITHMS",
    "NCCL_ALGO_GROUPS",
    "NCCL_PRINTED_ALGORITHMS",
    "NCCL_PRINTED_PROTOCOLS",
    "NCCL_PROTOCOLS",
    "NCCL_TRANSPORTS",
    "P2P_COLLECTIVES",
    "PATH_CLASS_ORDER",
    "PER_RANK_COUNT_COLLECTIVES",
    "REDUCE_OPS",
    "REDUCING_COLLECTIVES",
    "ROOTED_COLLECTIVES",
    "TAG_ACTIVITIES",
    "TENSOR_DEVICES",
    "canonical_collective",
]

#: Collectives collsim simulates, in nccl-tests' order.
COLLECTIVES: tuple[str, ...] = (
    "allreduce",
    "allgather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "alltoall",
    "sendrecv",
)
#: Collectives a measurement may name (nccl-tests also has gather and scatter, which collsim does not simulate).
MEASURED_COLLECTIVES: tuple[str, ...] = (*COLLECTIVES, "gather", "scatter")
#: Collectives NCCL runs as point-to-point operations (one connection per peer), not as a ring or tree.
P2P_COLLECTIVES: frozenset[str] = frozenset({"alltoall", "sendrecv"})
#: Collectives that apply a reduction operator; nccl-tests prints ``none`` as the redop of the others.
REDUCING_COLLECTIVES: frozenset[str] = frozenset({"allreduce", "reduce_scatter", "reduce", "sendrecv"})
#: Collectives with a root rank (nccl-tests prints it; the others print -1).
ROOTED_COLLECTIVES: frozenset[str] = frozenset({"broadcast", "reduce"})
#: Collectives whose nccl-tests ``count`` is per rank (size = count x nranks x type size).
PER_RANK_COUNT_COLLECTIVES: frozenset[str] = frozenset({"allgather", "reduce_scatter", "alltoall", "gather", "scatter"})
#: Other spellings of collective names (after lower-casing and turning ``-`` into ``_``): nccl-tests' and PyTorch's.
COLLECTIVE_ALIASES: dict[str, str] = {
    "all_reduce": "allreduce",
    "all_gather": "allgather",
    "reducescatter": "reduce_scatter",
    "all_to_all": "alltoall",
    "all2all": "alltoall",
    "bcast": "broadcast",
    "send_recv": "sendrecv",
}

#: Reduction operators (PyTorch's ReduceOp names, lower case).
REDUCE_OPS: tuple[str, ...] = ("sum", "prod", "max", "min", "avg")
#: Simulated backends, in the order tables list them.
BACKENDS: tuple[str, ...] = ("nccl", "gloo")
#: Where a collective's tensors live.
TENSOR_DEVICES: tuple[str, ...] = ("cuda", "cpu")

#: Link kinds, best-known first.
#: ``c2c`` is NVLink-C2C, the coherent link between a Grace CPU and its Hopper or Blackwell GPU (GH200, GB200).
LINK_KINDS: tuple[str, ...] = ("nvlink", "pcie", "upi", "c2c", "ib", "roce", "eth")
#: Device kinds of a topology.
DEVICE_KINDS: tuple[str, ...] = ("gpu", "cpu", "pcie_switch", "nic", "nvswitch", "switch")
#: Path classes between two devices, nearest first, as ``nvidia-smi topo -m`` and NCCL name them (NCCL's
#: NCCL_P2P_LEVEL and NCCL_NET_GDR_LEVEL take these names). ``C2C``: a GPU and its own CPU over NVLink-C2C; ``P2C``:
#: a GPU and a NIC on that CPU's PCIe (C2C then PCIe), NCCL's order from 2.28 (src/graph/topo.h, v2.30.7-1).
PATH_CLASS_ORDER: tuple[str, ...] = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PHB", "SYS", "NET")
#: Fabric shapes the cluster generators build.
FABRIC_TOPOLOGIES: tuple[str, ...] = ("single_switch", "rail_optimized", "fat_tree")
#: How a fabric carries data: RDMA verbs (InfiniBand/RoCE) or TCP sockets.
FABRIC_TRANSPORTS: tuple[str, ...] = ("rdma", "tcp")

#: NCCL's algorithms in NCCL's own enum order (``NCCL_ALGO_TREE`` = 0 ... ``NCCL_ALGO_PAT``), which is also the
#: order NCCL's tuner prefers on a tie.
NCCL_ALGORITHMS: tuple[str, ...] = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
#: Names NCCL_ALGO accepts that stand for several algorithms: none since NCCL 2.14 dropped "CollNet" for
#: CollNetDirect and CollNetChain (init.cc ncclAlgoStr; from 2.24 an unknown name fails the communicator's init).
NCCL_ALGO_GROUPS: dict[str, tuple[str, ...]] = {}
#: NCCL's protocols in NCCL's enum order.
NCCL_PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")
#: NCCL's algorithm and protocol names as its logs and profiler records print them (src/collectives.cc
#: ``ncclAlgoToString``, ``ncclProtoToString``), to collsim's.
NCCL_PRINTED_ALGORITHMS: dict[str, str] = {
    "TREE": "Tree", "RING": "Ring", "COLLNET_DIRECT": "CollNetDirect", "COLLNET_CHAIN": "CollNetChain", "NVLS": "NVLS",
    "NVLS_TREE": "NVLSTree", "PAT": "PAT",
}  # fmt: skip
NCCL_PRINTED_PROTOCOLS: dict[str, str] = {"LL": "LL", "LL128": "LL128", "SIMPLE": "Simple"}
#: The transport NCCL picks for one hop, as collsim names it.
NCCL_TRANSPORTS: tuple[str, ...] = ("P2P/NVLink", "P2P/PCIe", "SHM", "NET/GDR", "NET/staged", "NET/socket")

#: What a flow tag stands for: a transfer leaving its owner, a reduction, a copy, an overhead (launch, enqueue,
#: message latency); ``wait`` is only the time breakdown's idle time (waiting for peers), never on a flow. Timelines
#: add ``receive`` for a transfer arriving at another rank.
TAG_ACTIVITIES: tuple[str, ...] = ("send", "reduce", "copy", "overhead", "wait")
#: Categories of the time breakdown, in stacking (and legend) order; every declared tag names one.
BREAKDOWN_CATEGORIES: tuple[str, ...] = (
    "latency and overheads",
    "transfer: NVLink",
    "transfer: PCIe P2P",
    "transfer: SHM (PCIe + host memory)",
    "transfer: TCP loopback (CPU + host memory)",
    "transfer: network (RDMA)",
    "transfer: network (TCP)",
    "transfer: within node (RDMA)",
    "host copies (D2H/H2D)",
    "CPU reduction",
    "GPU reduction",
    "waiting (peers, contention)",
)

#: Gloo's allreduce algorithms (``gloo/allreduce*.h``).
GLOO_ALGORITHMS: tuple[str, ...] = ("ring", "ring_chunked", "halving_doubling", "bcube")
#: Collectives that run an allreduce algorithm (PyTorch's reduce_scatter_tensor on Gloo all-reduces a clone).
GLOO_ALLREDUCE_COLLECTIVES: frozenset[str] = frozenset({"allreduce", "reduce_scatter"})
#: The one algorithm Gloo (as ProcessGroupGloo calls it) runs for each other collective, whatever
#: ``backends.gloo.algorithm`` says (``gloo/allgather.cc``, ``broadcast.cc``, ``reduce.cc``, ``alltoall.cc``;
#: send/recv is one message).
GLOO_COLLECTIVE_ALGORITHM: dict[str, str] = {
    "allgather": "ring",
    "broadcast": "binomial",
    "reduce": "ring+gather",
    "alltoall": "direct",
    "sendrecv": "p2p",
}
#: Gloo's transports.
GLOO_TRANSPORTS: tuple[str, ...] = ("tcp", "ibverbs")


def canonical_collective(collective: str, valid: Iterable[str] = MEASURED_COLLECTIVES) -> str:
    """Return collsim's name for a collective, accepting nccl-tests' and PyTorch's spellings.

    Parameters
    ----------
    collective : str
        E.g. ``"allreduce"``, ``"all_reduce"``, ``"AllReduce"``, ``"reduce-scatter"``, ``"all_to_all"``.
    valid : iterable of str
        The names accepted (default: every collective a measurement may name).

    Returns
    -------
    str
        One of ``valid``.

    Raises
    ------
    ValueError
        For an unknown name; the message lists the valid ones.

    Examples
    --------
    >>> canonical_collective("Bcast")
    'broadcast'
    >>> canonical_collective("gather", COLLECTIVES)
    Traceback (most recent call last):
    ...
    ValueError: unknown collective 'gather'; expected one of: allreduce, allgather, reduce_scatter, broadcast, ...
    """
    if not isinstance(collective, str):
        raise ValueError(f"collective must be a string, got {type(collective).__name__}")
    names = tuple(valid)
    key = collective.strip().lower().replace("-", "_")
    key = COLLECTIVE_ALIASES.get(key, key)
    if key not in names and key.replace("_", "") in {n.replace("_", "") for n in names}:
        key = next(n for n in names if n.replace("_", "") == key.replace("_", ""))
    if key not in names:
        raise ValueError(f"unknown collective {collective!r}; expected one of: {', '.join(names)}")
    return key
