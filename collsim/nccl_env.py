"""NCCL's environment variables: the one parser, used by scenario validation and by the NCCL backend.

The syntax follows NCCL's own parsing (``NCCL_ALGO``/``NCCL_PROTO``: a comma-separated list of names, matched
case-insensitively, with an optional leading ``^`` meaning "all except", and from NCCL 2.24 further entries for one
collective each after a ``;``, ``ring;allreduce:tree``; ``NCCL_P2P_LEVEL``/``NCCL_NET_GDR_LEVEL``:
a path type name or NCCL's legacy integer level). Source: NCCL documentation, "Environment Variables".
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from collsim.vocab import NCCL_ALGO_GROUPS, NCCL_ALGORITHMS, NCCL_PROTOCOLS, PATH_CLASS_ORDER

__all__ = [
    "CHANNEL_BOUND_ENV",
    "INERT_NCCL_ENV",
    "INT_NCCL_ENV",
    "KNOWN_NCCL_ENV",
    "MIN_BUFFSIZE",
    "NCCL_ENV_NAMES",
    "NCCL_FUNCTIONS",
    "NCCL_LEVELS",
    "OFI_TUNER_TYPES",
    "PLUGIN_ENV",
    "IbHcaList",
    "NcclEnvError",
    "NcclOptions",
    "check_env_value",
    "closest_known",
    "parse_algorithms",
    "parse_function_list",
    "parse_level",
    "parse_name_list",
    "parse_protocols",
]

#: The smallest NCCL_BUFFSIZE collsim simulates (bytes): NCCL_STEPS (8) steps of 512 threads x 16-byte packs.
MIN_BUFFSIZE = 8 * 512 * 16

#: Path-type names accepted by NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL, nearest first (NCCL compares the value with
#: its path-type names, topoPathTypeStr in graph/topo.cc: NET is among them).
NCCL_LEVELS: tuple[str, ...] = PATH_CLASS_ORDER

#: NCCL's legacy integer levels: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 SYS; larger values are SYS
#: (source: NCCL docs, NCCL_P2P_LEVEL "Integer Values (Legacy)").
_LEGACY_LEVELS: tuple[str, ...] = ("LOC", "PIX", "PXB", "PHB", "SYS")

#: Knobs that must be integers.
INT_NCCL_ENV: frozenset[str] = frozenset(
    {
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_PXN_DISABLE",
        "NCCL_MIN_CTAS",
        "NCCL_MAX_CTAS",
        "NCCL_NVLS_NCHANNELS",
        "NCCL_BUFFSIZE",
        "NCCL_NVLS_ENABLE",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NTHREADS",
        "NCCL_LL128_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_CROSS_NIC",
        "NCCL_COLLNET_ENABLE",
        "NCCL_NVLS_CHUNKSIZE",
        "NCCL_NVLSTREE_MAX_CHUNKSIZE",
        "NCCL_NET_FORCE_FLUSH",
        "NCCL_NET_GDR_C2C",
        "NCCL_PXN_C2C",
        "NCCL_PAT_ENABLE",
        "NCCL_NET_GDR_READ",
        "NCCL_P2P_NVL_CHUNKSIZE",
        "NCCL_P2P_PCI_CHUNKSIZE",
        "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_P2P_LL_THRESHOLD",
        "NCCL_NCHANNELS_PER_NET_PEER",
        "NCCL_MIN_P2P_NCHANNELS",
        "NCCL_MAX_P2P_NCHANNELS",
    }
)
#: Channel bounds NCCL reads with its own rule (connect.cc: -2 unset, a maximum below 1 is 1): :func:`_channel_bound`.
CHANNEL_BOUND_ENV: frozenset[str] = frozenset(
    {"NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MAX_NRINGS"}
)

#: Every variable NCCL reads: the names of NCCL_PARAM, DEFINE_NCCL_PARAM and ncclGetEnv("NCCL_...") in src/ at the
#: release tags v2.18.3-1, v2.20.5-1, v2.22.3-1, v2.24.3-1, v2.26.6-1, v2.27.7-1, v2.28.9-1, v2.29.7-1 and v2.30.7-1.
#: A scenario may set any of them; those collsim does not model draw a warning that says so (a name outside this
#: list and :data:`KNOWN_NCCL_ENV` is taken for a typo).
NCCL_ENV_NAMES: frozenset[str] = frozenset(
    {
        "NCCL_AGG_CHANNEL_SIZE", "NCCL_ALGO", "NCCL_ALLGATHERV_ENABLE", "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
        "NCCL_BUFFSIZE", "NCCL_CGA_CLUSTER_SIZE", "NCCL_CHECK_MODE", "NCCL_CHECK_POINTERS", "NCCL_CHUNK_SIZE",
        "NCCL_COLLNET_ENABLE", "NCCL_COLLNET_NODE_THRESHOLD", "NCCL_COMM_BLOCKING", "NCCL_COMM_ID",
        "NCCL_COMM_SHRINK_SHARE_RESOURCES", "NCCL_COMM_SPLIT_SHARE_RESOURCES", "NCCL_CONF_FILE",
        "NCCL_CONNECT_ROUND_MAX_PEERS", "NCCL_CREATE_THREAD_CONTEXT", "NCCL_CROSS_NIC", "NCCL_CTA_POLICY",
        "NCCL_CUDA_PATH", "NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE", "NCCL_DEBUG", "NCCL_DEBUG_FILE",
        "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_DEBUG_TIMESTAMP_LEVELS", "NCCL_DEV_API_JIT",
        "NCCL_DISABLE_MEM_MANAGER", "NCCL_DMABUF_ENABLE", "NCCL_ELASTIC_BUFFER_REGISTER",
        "NCCL_ENABLE_VERSION_CHECK", "NCCL_ENV_PLUGIN", "NCCL_GDAKI_USE_RELIABLE_DB", "NCCL_GDRCOPY_ENABLE",
        "NCCL_GDRCOPY_FIFO_ENABLE", "NCCL_GDRCOPY_FLUSH_ENABLE", "NCCL_GDRCOPY_SYNC_ENABLE",
        "NCCL_GDR_FLUSH_DISABLE", "NCCL_GIN_CONNECTION_RAIL", "NCCL_GIN_COUNTER_POOL_SIZE", "NCCL_GIN_ENABLE",
        "NCCL_GIN_ERROR_QUERY_SEC", "NCCL_GIN_EXCLUSIVE_CONTEXTS", "NCCL_GIN_GDAKI_MAX_DEST_RD_ATOMIC",
        "NCCL_GIN_GDAKI_MAX_QP_RD_ATOMIC", "NCCL_GIN_GDAKI_NIC_HANDLER", "NCCL_GIN_GDAKI_QP_DEPTH",
        "NCCL_GIN_IB_TC", "NCCL_GIN_NCONNECTIONS", "NCCL_GIN_NCONTEXTS", "NCCL_GIN_PLUGIN",
        "NCCL_GIN_PLUGIN_REF_COUNT", "NCCL_GIN_PROXY_QUEUE_SIZE", "NCCL_GIN_SIGNAL_POOL_SIZE", "NCCL_GIN_TYPE",
        "NCCL_GRAPH_DUMP_FILE", "NCCL_GRAPH_DUMP_FILE_RANK", "NCCL_GRAPH_FILE", "NCCL_GRAPH_HELPER_DISABLE",
        "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_GRAPH_REGISTER", "NCCL_GRAPH_STREAM_ORDERING", "NCCL_GROUP_CUDA_STREAM",
        "NCCL_HOSTID", "NCCL_IBVERBS_LIB", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE",
        "NCCL_IB_AR_THRESHOLD", "NCCL_IB_DATA_DIRECT", "NCCL_IB_DEVICE_PCI_ORDER", "NCCL_IB_DISABLE",
        "NCCL_IB_ECE_ENABLE", "NCCL_IB_FIFO_TC", "NCCL_IB_GID_INDEX", "NCCL_IB_HCA", "NCCL_IB_MERGE_NICS",
        "NCCL_IB_MERGE_VFS", "NCCL_IB_MQP_RETRY_ALL", "NCCL_IB_MQP_RETRY_CNT", "NCCL_IB_MQP_RETRY_SLEEP_MSEC",
        "NCCL_IB_OOO_RQ", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_PKEY", "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS",
        "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_QUERY_PORT_SPEED", "NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME",
        "NCCL_IB_RESILIENCY_PORT_FAILOVER", "NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS",
        "NCCL_IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY", "NCCL_IB_RESILIENCY_PORT_RECOVERY",
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT", "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL",
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE",
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE",
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT", "NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX",
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY", "NCCL_IB_RETRY_CNT", "NCCL_IB_RETURN_ASYNC_EVENTS",
        "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_ROUTABLE_FLID_GID_INDEX", "NCCL_IB_SL", "NCCL_IB_SPLIT_DATA_ON_QPS",
        "NCCL_IB_SUBNET_AWARE_ROUTING", "NCCL_IB_SUBNET_PREFIX_LEN", "NCCL_IB_TC", "NCCL_IB_TIMEOUT",
        "NCCL_IB_USE_INLINE", "NCCL_IB_WARN_RAIL_LOCAL", "NCCL_IGNORE_COLLNET_MISMATCH", "NCCL_IGNORE_CPU_AFFINITY",
        "NCCL_IGNORE_DISABLED_P2P", "NCCL_IGNORE_NET_MISMATCH", "NCCL_IPC_USE_ABSTRACT_SOCKET",
        "NCCL_L1_SHARED_MEMORY_CARVEOUT", "NCCL_LAUNCH_MODE", "NCCL_LAUNCH_ORDER_IMPLICIT",
        "NCCL_LAUNCH_RACE_FATAL", "NCCL_LEGACY_CUDA_REGISTER", "NCCL_LL128_BUFFSIZE", "NCCL_LL128_C2C",
        "NCCL_LL128_NTHREADS", "NCCL_LL_BUFFSIZE", "NCCL_LOCAL_REGISTER", "NCCL_LSA_TEAM_SIZE", "NCCL_MAX_CTAS",
        "NCCL_MAX_NCHANNELS", "NCCL_MAX_NRINGS", "NCCL_MAX_P2P_NCHANNELS", "NCCL_MEM_SYNC_DOMAIN", "NCCL_MIN_CTAS",
        "NCCL_MIN_NCHANNELS", "NCCL_MIN_NRINGS", "NCCL_MIN_P2P_NCHANNELS", "NCCL_MLOPART_RDMA_ENABLE", "NCCL_MNNVL",
        "NCCL_MNNVL_CLIQUE_ID", "NCCL_MNNVL_CROSS_CLIQUE", "NCCL_MNNVL_ENABLE", "NCCL_MNNVL_RAIL_PER_HOST",
        "NCCL_MNNVL_SCATTER_NETS_ENABLE", "NCCL_MNNVL_UUID", "NCCL_MULTI_RANK_GPU_ENABLE",
        "NCCL_MULTI_SEGMENT_REGISTER", "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_NET", "NCCL_NETDEVS_POLICY",
        "NCCL_NET_DISABLE_INTRA", "NCCL_NET_FORCE_FLUSH", "NCCL_NET_FORCE_MERGE", "NCCL_NET_GDR_C2C",
        "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_MLOPART", "NCCL_NET_GDR_READ", "NCCL_NET_MERGE_LEVEL",
        "NCCL_NET_MERGE_POLICY", "NCCL_NET_OPTIONAL_RECV_COMPLETION", "NCCL_NET_OVERHEAD", "NCCL_NET_PLUGIN",
        "NCCL_NET_PLUGIN_REF_COUNT", "NCCL_NET_SHARED_BUFFERS", "NCCL_NET_SHARED_COMMS", "NCCL_NSOCKS_PERTHREAD",
        "NCCL_NTHREADS", "NCCL_NUM_RMA_CTX", "NCCL_NVB_DISABLE", "NCCL_NVB_PRECONNECT",
        "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "NCCL_NVLSTREE_MAX_CHUNKSIZE", "NCCL_NVLS_CHUNKSIZE",
        "NCCL_NVLS_ENABLE", "NCCL_NVLS_NCHANNELS", "NCCL_NVTX_DISABLE", "NCCL_OOB_NET_ENABLE",
        "NCCL_OOB_NET_IFNAME", "NCCL_P2P_DIRECT_DISABLE", "NCCL_P2P_DISABLE", "NCCL_P2P_EPOCH_ENABLE",
        "NCCL_P2P_LEVEL", "NCCL_P2P_LL_THRESHOLD", "NCCL_P2P_MAX_PEERS", "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE", "NCCL_P2P_PER_CHANNEL_NET_BW", "NCCL_P2P_PXN_LEVEL",
        "NCCL_P2P_READ_ENABLE", "NCCL_P2P_SCHEDULE_GROUP_SIZE", "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_PARAM_DUMP_ALL",
        "NCCL_PAT_ENABLE", "NCCL_PROFILER_PLUGIN", "NCCL_PROGRESS_APPENDOP_FREQ", "NCCL_PROTO",
        "NCCL_PROXY_APPEND_BATCH_SIZE", "NCCL_PROXY_CPUSET", "NCCL_PROXY_DUMP_SIGNAL", "NCCL_PROXY_PROFILE",
        "NCCL_PXN_C2C", "NCCL_PXN_DISABLE", "NCCL_RAS_ADDR", "NCCL_RAS_ENABLE", "NCCL_RAS_TIMEOUT_FACTOR",
        "NCCL_REPORT_CONNECT_PROGRESS", "NCCL_RMA_DISABLE", "NCCL_RMA_PLUGIN", "NCCL_RMA_PLUGIN_REF_COUNT",
        "NCCL_RMA_PROXY_DUMP_SIGNAL", "NCCL_RMA_PROXY_QUEUE_SIZE", "NCCL_RUNTIME_CONNECT",
        "NCCL_SET_CPU_STACK_SIZE", "NCCL_SET_STACK_SIZE", "NCCL_SET_THREAD_NAME", "NCCL_SHADOW_MEMPOOL_MAX_SIZE",
        "NCCL_SHM_DISABLE", "NCCL_SHM_LOCALITY", "NCCL_SHM_MEMCPY_MODE", "NCCL_SHM_USE_CUDA_MEMCPY",
        "NCCL_SINGLE_PROC_MEM_REG_ENABLE", "NCCL_SOCKET_FAMILY", "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_INLINE",
        "NCCL_SOCKET_MAGIC", "NCCL_SOCKET_MIN_TASKSIZE", "NCCL_SOCKET_NTHREADS", "NCCL_SOCKET_POLL_TIMEOUT_MSEC",
        "NCCL_SOCKET_RCVBUF", "NCCL_SOCKET_RETRY_CNT", "NCCL_SOCKET_RETRY_SLEEP_MSEC", "NCCL_SOCKET_SNDBUF",
        "NCCL_SYM_CE_THRESHOLD", "NCCL_SYM_CTAS", "NCCL_SYM_GIN_KERNELS_ENABLE", "NCCL_SYM_KERNEL",
        "NCCL_SYM_NOWIN_ENABLE", "NCCL_SYM_REUSE_SYSMEM_HANDLES", "NCCL_SYM_RS_GIN_CHUNK_SIZE",
        "NCCL_SYM_TMA_ENABLE", "NCCL_THREAD_THRESHOLDS", "NCCL_TOPO_DUMP_FILE", "NCCL_TOPO_DUMP_FILE_RANK",
        "NCCL_TOPO_FILE", "NCCL_TOPO_SPLIT_MLOPART", "NCCL_TUNER_PLUGIN", "NCCL_UID_STAGGER_RATE",
        "NCCL_UID_STAGGER_THRESHOLD", "NCCL_UNPACK_DOUBLE_NCHANNELS", "NCCL_WARN_ENABLE_DEBUG_INFO",
        "NCCL_WIN_ENABLE", "NCCL_WIN_STRIDE", "NCCL_WORK_ARGS_BYTES", "NCCL_WORK_FIFO_BYTES",
        "NCCL_WORK_FIFO_DEPTH",
    }
)

#: Variables that do not change how long a collective takes (logging, dumps, interface names and addresses used to
#: bootstrap, timeouts, retries), set silently; and the NCCL_-prefixed ones PyTorch reads (its deprecated
#: NCCL_ASYNC_ERROR_HANDLING, NCCL_BLOCKING_WAIT and NCCL_DESYNC_DEBUG, renamed TORCH_NCCL_* in torch 2.2).
INERT_NCCL_ENV: frozenset[str] = frozenset(
    {
        "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT", "NCCL_COMM_ID", "NCCL_CUDA_PATH", "NCCL_DEBUG",
        "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_TIMESTAMP_FORMAT", "NCCL_DEBUG_TIMESTAMP_LEVELS",
        "NCCL_DESYNC_DEBUG", "NCCL_ENABLE_VERSION_CHECK", "NCCL_GRAPH_DUMP_FILE", "NCCL_GRAPH_DUMP_FILE_RANK",
        "NCCL_HOSTID", "NCCL_IBVERBS_LIB", "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_GID_INDEX",
        "NCCL_IB_MQP_RETRY_ALL", "NCCL_IB_MQP_RETRY_CNT", "NCCL_IB_MQP_RETRY_SLEEP_MSEC", "NCCL_IB_PKEY",
        "NCCL_IB_RETRY_CNT", "NCCL_IB_RETURN_ASYNC_EVENTS", "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_TIMEOUT",
        "NCCL_IB_WARN_RAIL_LOCAL", "NCCL_IGNORE_COLLNET_MISMATCH", "NCCL_IGNORE_NET_MISMATCH",
        "NCCL_IPC_USE_ABSTRACT_SOCKET", "NCCL_NVTX_DISABLE", "NCCL_OOB_NET_IFNAME", "NCCL_PARAM_DUMP_ALL",
        "NCCL_PROXY_DUMP_SIGNAL", "NCCL_RAS_ADDR", "NCCL_RAS_ENABLE", "NCCL_RAS_TIMEOUT_FACTOR",
        "NCCL_REPORT_CONNECT_PROGRESS", "NCCL_RMA_PROXY_DUMP_SIGNAL", "NCCL_SET_THREAD_NAME", "NCCL_SOCKET_FAMILY",
        "NCCL_SOCKET_IFNAME", "NCCL_SOCKET_MAGIC", "NCCL_SOCKET_POLL_TIMEOUT_MSEC", "NCCL_SOCKET_RETRY_CNT",
        "NCCL_SOCKET_RETRY_SLEEP_MSEC", "NCCL_TOPO_DUMP_FILE", "NCCL_TOPO_DUMP_FILE_RANK", "NCCL_UID_STAGGER_RATE",
        "NCCL_UID_STAGGER_THRESHOLD", "NCCL_WARN_ENABLE_DEBUG_INFO",
    }
)

#: The NCCL variables collsim knows, with a one-line meaning (used for the JSON schema and for warnings).
KNOWN_NCCL_ENV: dict[str, str] = {
    "NCCL_ALGO": "Algorithms NCCL may use: comma-separated from Ring, Tree, CollNetDirect, CollNetChain, NVLS, "
    "NVLSTree, PAT (no spaces: NCCL compares each name whole); a leading ^ excludes them instead; per collective "
    "(NCCL 2.24 on): 'ring;allreduce:tree,ring' (entries after the first start with Broadcast, Reduce, AllGather, "
    "ReduceScatter or AllReduce and a colon).",
    "NCCL_PROTO": "Protocols NCCL may use: comma-separated from LL, LL128, Simple; a leading ^ excludes them; per "
    "collective as NCCL_ALGO ('^LL128;allreduce:LL128').",
    "NCCL_P2P_DISABLE": "1 disables the P2P transport (GPU-to-GPU over NVLink/PCIe; another value does not).",
    "NCCL_P2P_LEVEL": "Farthest path on which P2P is used, as NCCL matches it (exact, upper case): LOC, NVL, NVB, "
    "C2C, PIX, PXB, P2C, PXN, PHB, SYS (or legacy 0 LOC .. 4 SYS).",
    "NCCL_SHM_DISABLE": "1 disables the shared-host-memory transport (another value does not).",
    "NCCL_IB_DISABLE": "1 disables InfiniBand/RoCE verbs; NCCL falls back to sockets (TCP).",
    "NCCL_NET_GDR_LEVEL": "Farthest GPU-NIC path on which GPUDirect RDMA is used, as NCCL matches it (exact, upper "
    "case): LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS (or legacy 0 LOC .. 4 SYS).",
    "NCCL_PXN_DISABLE": "1 disables PXN (sending through an NVLink peer's NIC).",
    "NCCL_MIN_NCHANNELS": "Minimum number of channels (integer).",
    "NCCL_MAX_NCHANNELS": "Maximum number of channels (integer).",
    "NCCL_MIN_NRINGS": "NCCL_MIN_NCHANNELS's legacy name (connect.cc reads it; NCCL_MIN_NCHANNELS wins).",
    "NCCL_MAX_NRINGS": "NCCL_MAX_NCHANNELS's legacy name (connect.cc reads it; NCCL_MAX_NCHANNELS wins).",
    "NCCL_MIN_CTAS": "Minimum CTAs (channels) of any algorithm, NVLS included (integer; 0: unset).",
    "NCCL_MAX_CTAS": "Maximum CTAs (channels) of any algorithm, NVLS included (integer; 0: unset).",
    "NCCL_NVLS_NCHANNELS": "Channels (CTAs) of NVLS and NVLSTree (integer; 0: NCCL's default by GPU).",
    "NCCL_BUFFSIZE": "Buffer size per channel and protocol in bytes (integer, default 4194304 = 4 MiB).",
    "NCCL_NVLS_ENABLE": "1 enables NVLink SHARP (NVLS) where the NVSwitch supports it, 0 disables it.",
    "NCCL_SOCKET_NTHREADS": "CPU helper threads per network connection for the socket transport (integer).",
    "NCCL_NTHREADS": "Threads per channel of Ring and Tree with Simple and LL (a multiple of 32, 64-512; 0: NCCL's "
    "default, 512, or 256 for Ring/Simple on a ring of at most 12 GB/s).",
    "NCCL_LL128_NTHREADS": "Threads per channel of LL128 (a multiple of 32, 160-640; 0: the default 640).",
    "NCCL_THREAD_THRESHOLDS": "Bytes per thread below which NCCL drops a channel, as six integers: Tree LL, LL128, "
    "Simple, then Ring LL, LL128, Simple (a negative one keeps NCCL's default: 8, 8, 64, 8 x ranks, 8, 64).",
    "NCCL_NSOCKS_PERTHREAD": "Sockets per helper thread for the socket transport (integer).",
    "NCCL_CROSS_NIC": "0/1/2: whether rings/trees may use different NICs on different nodes; collsim keeps each "
    "channel on one rail on every node, as 0 asks and the default 2 finds on rail-optimised fabrics (1 is not "
    "modelled: a warning). A point-to-point send PXN cannot relay leaves through the sender's own NIC (another "
    "rail) unless it is 0.",
    "NCCL_COLLNET_ENABLE": "1 enables CollNet (in-network reduction, e.g. SHARP; needs a fabric with "
    "in_network_reduction); NCCL's default 0 leaves it off.",
    "NCCL_NVLS_CHUNKSIZE": "NVLS and NVLSTree chunk in bytes (integer, default 131072; 0: the default).",
    "NCCL_NVLSTREE_MAX_CHUNKSIZE": "Cap on NVLSTree's chunk in bytes (integer; default 65536 from 4 nodes, none below; "
    "0: the default).",
    "NCCL_NET_FORCE_FLUSH": "1 flushes every GPUDirect RDMA receive (Simple) on any GPU; 0 (default from 2.19) "
    "flushes on GPUs before Hopper only.",
    "NCCL_NET_GDR_C2C": "1 runs GPUDirect RDMA between a GPU and a NIC on its Grace CPU's PCIe (NVLink-C2C, GH200 "
    "and GB200: NCCL's P2C path), 0 stages it in host memory; from 2.26, its default 1 from 2.27.",
    "NCCL_PXN_C2C": "1 lets PXN relay through a GPU whose NIC path is P2C (through its Grace CPU); from 2.27, its "
    "default 1 from 2.28.",
    "NCCL_NET_GDR_READ": "1 lets the NIC read send buffers from GPU memory (GPUDirect RDMA reads), 0 stages sends "
    "in host memory; NCCL's default allows it from compute capability 8.0, and before only on NVLink-connected GPUs.",
    "NCCL_PAT_ENABLE": "0 disables PAT (all-gather and reduce-scatter with one GPU per node); NCCL's default 2 runs "
    "it there, 1 forces it (collsim still runs it with one GPU per node only).",
    "NCCL_P2P_NVL_CHUNKSIZE": "Point-to-point (send/receive, all-to-all) chunk in bytes on one node of "
    "NVLink-connected GPUs (integer, default 524288; 0: the default).",
    "NCCL_P2P_PCI_CHUNKSIZE": "Point-to-point chunk in bytes on one node over PCIe (integer, default 131072; 0: the "
    "default).",
    "NCCL_P2P_NET_CHUNKSIZE": "Point-to-point chunk in bytes when the job spans nodes (integer, default 131072, x2 for "
    "Blackwell on ARM hosts; 0: the default).",
    "NCCL_P2P_LL_THRESHOLD": "Point-to-point bytes per channel up to which NCCL sends with LL (integer, default "
    "16384).",
    "NCCL_NCHANNELS_PER_NET_PEER": "Channels a point-to-point connection to another node may use (integer; 0: NCCL's "
    "default from the NICs' bandwidth, 14 GB/s a channel, from 2.29).",
    "NCCL_MIN_P2P_NCHANNELS": "Least point-to-point channels (integer, default 1; 0: the default).",
    "NCCL_MAX_P2P_NCHANNELS": "Most point-to-point channels (integer, default MAXCHANNELS; 0: the default).",
    "NCCL_IB_HCA": "The InfiniBand/RoCE devices (and ports) NCCL's IB transport uses: comma-separated prefixes of "
    "device names, each with an optional ':port' ('mlx5_0:1,mlx5_3'); '=' first matches whole names only, '^' first "
    "excludes them instead. A NIC's device name is its template's ib_names entry, else mlx5_<its template slot>.",
    "NCCL_TUNER_PLUGIN": "The tuner plugin library (a path, or a name NCCL opens as libnccl-tuner-<name>.so); unset or "
    "not found: NCCL 2.21+ uses the network plugin's bundled tuner (aws-ofi-nccl's on EFA), else its own. "
    "libnccl-tuner-example.so is NVIDIA's example tuner (plugins/tuner/example), which reads NCCL_TUNER_CONFIG_FILE.",
    "NCCL_TUNER_CONFIG_FILE": "The CSV NVIDIA's example tuner plugin reads (NCCL_TUNER_PLUGIN="
    "libnccl-tuner-example.so; default nccl_tuner.conf); a relative path is taken from the scenario's folder. Lines: "
    "collective_type, min_bytes, max_bytes, algorithm, protocol, channels, nNodes, nRanks[, numPipeOps[, regBuff]].",
    "OFI_NCCL_TUNER_TYPE": "aws-ofi-nccl's tuner: Internal leaves the choice to NCCL's own tuner; Region (its "
    "default on p5/p5e/p5en/p6-b200) picks from its regions. Model (its model tuner) is not modelled.",
}

#: Variables of a network plugin collsim reads besides NCCL_* ones (they sit in the same environment).
PLUGIN_ENV: frozenset[str] = frozenset({"OFI_NCCL_TUNER_TYPE"})

#: OFI_NCCL_TUNER_TYPE values collsim models (aws-ofi-nccl compares them case-insensitively,
#: src/tuner/nccl_ofi_tuner.cpp lines 72-80; the variable: include/nccl_ofi_param.h line 294, v1.16.3).
OFI_TUNER_TYPES: tuple[str, ...] = ("Internal", "Region")


class NcclEnvError(ValueError):
    """A bad value for one NCCL variable; the message says what was expected."""


def parse_name_list(
    value: str, valid: tuple[str, ...], groups: Mapping[str, tuple[str, ...]] | None = None, what: str = "name"
) -> set[str]:
    """Parse NCCL's ``[^]name[,name...]`` list syntax into the set of enabled names.

    Parameters
    ----------
    value : str
        The variable's value, e.g. ``"ring,tree"`` or ``"^LL128"``.
    valid : tuple of str
        Canonical names; matching is case-insensitive.
    groups : mapping, optional
        Extra names that stand for several canonical names.
    what : str
        Word used in error messages ("algorithm", "protocol").

    Returns
    -------
    set of str
        Enabled names in canonical capitalisation.

    Raises
    ------
    NcclEnvError
        An unknown name, an empty list or a list that leaves nothing enabled.
    """
    groups = dict(groups or {})
    lookup: dict[str, tuple[str, ...]] = {n.lower(): (n,) for n in valid}
    lookup.update({g.lower(): members for g, members in groups.items()})
    listing = ", ".join([*valid, *groups])
    text = value.strip()
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    tokens = [t for t in text.split(",") if t]  # NCCL's strtok skips empty entries ("Ring,,Tree")
    spaced = next((t for t in tokens if t != t.strip()), None)
    if spaced is not None:  # strcasecmp against the names, spaces and all (tuning.cc parseList)
        raise NcclEnvError(
            f"{spaced!r} in {value!r}: NCCL compares each name whole, spaces included (from 2.24 an unrecognized "
            f"token fails the communicator's init, tuning.cc parseList; before, it was skipped); write "
            f"{','.join(t.strip() for t in tokens)!r}"
        )
    if not tokens:
        raise NcclEnvError(
            f"expected a comma-separated list of {what}s from {listing} (optionally starting "
            f"with ^ to exclude them), got {value!r}"
        )
    chosen: set[str] = set()
    for tok in tokens:
        if tok.lower() not in lookup:
            hint = ("; NCCL has had no 'CollNet' since 2.14 (init.cc ncclAlgoStr): name CollNetDirect or CollNetChain"
                    if tok.lower() == "collnet" else "")  # fmt: skip
            raise NcclEnvError(f"unknown {what} {tok!r} in {value!r}; valid {what}s: {listing}{hint}")
        chosen.update(lookup[tok.lower()])
    result = set(valid) - chosen if exclude else chosen
    if not result:
        raise NcclEnvError(f"{value!r} leaves no {what} enabled")
    return result


#: NCCL's function names an NCCL_ALGO or NCCL_PROTO entry may start with (``allreduce:tree``), matched
#: case-insensitively, and the collective each stands for (src/init.cc ncclFuncStr, v2.24.3-1 on)
NCCL_FUNCTIONS: dict[str, str] = {
    "broadcast": "broadcast", "reduce": "reduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
    "allreduce": "allreduce",
}  # fmt: skip


def parse_function_list(
    value: str, valid: tuple[str, ...], groups: Mapping[str, tuple[str, ...]] | None = None, what: str = "name"
) -> dict[str | None, set[str]]:
    """Parse NCCL's NCCL_ALGO / NCCL_PROTO syntax with collective prefixes (tuning.cc ``parseList``, from 2.24):
    entries separated by ``;``, each ``[function:][^]name[,name...]``; only the first may lack a prefix, and it
    applies to every collective; a prefixed entry replaces its collective's list. Returns the lists by collective
    (collsim's names, :data:`NCCL_FUNCTIONS`), the first entry's under None when it has no prefix.

    >>> parse_function_list("ring;allreduce:tree", ("Tree", "Ring"), what="algorithm")
    {None: {'Ring'}, 'allreduce': {'Tree'}}
    >>> parse_function_list("AllGather:^ring;", ("Tree", "Ring"), what="algorithm")
    {'allgather': {'Tree'}}
    """
    out: dict[str | None, set[str]] = {}
    entries = [e for e in value.split(";") if e.strip()]  # NCCL splits with strtok: empty entries are skipped
    if not entries:
        parse_name_list(value, valid, groups, what)  # raises: an empty list
    for i, entry in enumerate(entries):
        prefix, sep, names = entry.partition(":")
        if not sep:
            if i:
                raise NcclEnvError(f"every entry but the first needs a collective prefix ('allreduce:...'): {value!r}")
            out[None] = parse_name_list(entry, valid, groups, what)
            continue
        collective = NCCL_FUNCTIONS.get(prefix.lower())  # strcasecmp, the prefix whole (tuning.cc parseList)
        if collective is None:
            spaced = " (NCCL compares it whole, spaces included)" if prefix != prefix.strip() else ""
            raise NcclEnvError(
                f"unknown collective prefix {prefix!r} in {value!r}{spaced}; NCCL's are "
                "Broadcast, Reduce, AllGather, ReduceScatter, AllReduce"
            )
        out[collective] = parse_name_list(names, valid, groups, what)
    return out


def _for(lists: Mapping[str | None, set[str]], collective: str | None) -> set[str] | None:
    """The list a collective gets: its own entry, else the prefix-less one; None when neither (NCCL's default)."""
    if collective is not None and collective in lists:
        return lists[collective]
    return lists.get(None)


def parse_algorithms(value: str, collective: str | None = None) -> set[str] | None:
    """Enabled NCCL algorithms for a ``NCCL_ALGO`` value and ``collective`` (None: the value's prefix-less list):
    ``parse_algorithms("^ring") == {"Tree", ...}``; None when the value leaves the collective to NCCL's default
    (:func:`parse_function_list`)."""
    return _for(parse_function_list(value, NCCL_ALGORITHMS, NCCL_ALGO_GROUPS, "algorithm"), collective)


def parse_protocols(value: str, collective: str | None = None) -> set[str] | None:
    """Enabled NCCL protocols for a ``NCCL_PROTO`` value and ``collective``, e.g. ``parse_protocols("^LL") ==
    {"LL128", "Simple"}``; None when the value leaves the collective to NCCL's default."""
    return _for(parse_function_list(value, NCCL_PROTOCOLS, None, "protocol"), collective)


#: The names NCCL's ncclGetLevel reads (paths.cc: ``strcmp`` against topoPathTypeStr for i <= PATH_SYS; topo.h
#: lines 62-89 of v2.27.7-1: LOC 0 .. SYS 9): exact, upper case; NET and DIS are not among them.
_LEVEL_NAMES: tuple[str, ...] = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")


def parse_level(value: str) -> str:
    """Canonical path-type name for a ``NCCL_P2P_LEVEL``/``NCCL_NET_GDR_LEVEL`` value.

    Names as NCCL reads them (ncclGetLevel: exactly, LOC to SYS); PXN (PCIe through a peer GPU's NVLink), a class no
    path between two GPUs or from a GPU to its NIC has in collsim, bounds them as P2C does. Integers use NCCL's legacy
    numbering (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS). A name NCCL would not match (``pix``, ``NET``) is an
    error: NCCL ignores it and keeps its default, which is not what its writer meant.

    >>> parse_level("PIX"), parse_level("2"), parse_level("7"), parse_level("PXN")
    ('PIX', 'PXB', 'SYS', 'P2C')
    """
    text = value.strip()
    if text in _LEVEL_NAMES:
        return "P2C" if text == "PXN" else text
    if text.upper() in (*_LEVEL_NAMES, "NET", "DIS"):
        raise NcclEnvError(
            f"NCCL reads this name exactly and only up to SYS (paths.cc ncclGetLevel), so it would ignore {value!r} "
            f"and keep its default; expected one of {', '.join(_LEVEL_NAMES)} or a legacy integer (0 LOC .. 4 SYS)"
        )
    try:
        level = int(text)
    except ValueError:
        level = -1
    if level >= 0:
        return _LEGACY_LEVELS[min(level, len(_LEGACY_LEVELS) - 1)]
    raise NcclEnvError(
        f"expected a path type from {', '.join(_LEVEL_NAMES)} or a legacy integer (0 LOC .. 4 SYS), got {value!r}"
    )


def check_env_value(key: str, value: str) -> None:
    """Raise :class:`NcclEnvError` when ``value`` is not valid for the known variable ``key``."""
    if key == "NCCL_ALGO":
        parse_algorithms(value)
    elif key == "NCCL_PROTO":
        parse_protocols(value)
    elif key in ("NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"):
        parse_level(value)
    elif key == "NCCL_BUFFSIZE":
        _buffsize(value)
    elif key == "NCCL_THREAD_THRESHOLDS":
        _thread_thresholds(value)
    elif key in CHANNEL_BOUND_ENV:
        _channel_bound(value)
    elif key in INT_NCCL_ENV:
        _non_negative_int(value)
    elif key == "OFI_NCCL_TUNER_TYPE":
        _ofi_tuner_type(value)


def _ofi_tuner_type(value: str) -> str:
    """OFI_NCCL_TUNER_TYPE in its canonical spelling (Internal or Region)."""
    for name in OFI_TUNER_TYPES:
        if value.strip().lower() == name.lower():
            return name
    if value.strip().lower() == "model":
        raise NcclEnvError("aws-ofi-nccl's model tuner is not modelled: collsim models its region tuner (Region, the "
                           "default) and Internal (NCCL's own tuner)")  # fmt: skip
    raise NcclEnvError(f"expected one of {', '.join(OFI_TUNER_TYPES)}, got {value!r}")


def _thread_thresholds(value: str) -> tuple[int, ...]:
    """NCCL_THREAD_THRESHOLDS: one to six integers separated by spaces, in NCCL's order (tuning.cc reads them with
    ``sscanf("%ld %ld %ld %ld %ld %ld")`` into Tree LL, LL128, Simple, Ring LL, LL128, Simple; a negative one, or
    one not given, keeps the default).

    >>> _thread_thresholds("-1 -1 -1 16"), _thread_thresholds(" 8  8 64 ")
    ((-1, -1, -1, 16), (8, 8, 64))
    """
    parts = value.split()
    try:
        numbers = tuple(int(p) for p in parts)
    except ValueError:
        numbers = ()
    if not 1 <= len(numbers) <= 6:
        raise NcclEnvError("expected one to six integers separated by spaces (Tree LL, LL128, Simple, then Ring LL, "
                           f"LL128, Simple; negative keeps the default), got {value!r}")  # fmt: skip
    return numbers


def _non_negative_int(value: str) -> int:
    """NCCL's integer knobs: a non-negative integer."""
    number = _int(value)
    if number < 0:
        raise NcclEnvError(f"expected a non-negative integer, got {value!r}")
    return number


def _int(value: str) -> int:
    """An integer, any sign, read as NCCL reads its parameters: ``strtoll(str, ..., 0)`` (param.cc), so ``0x800000``
    is hexadecimal and ``010`` octal.

    >>> _int("4194304"), _int("0x400000"), _int("010"), _int("-2")
    (4194304, 4194304, 8, -2)
    """
    text = value.strip()
    try:
        if re.fullmatch(r"[+-]?0[0-7]+", text):  # C's leading zero: octal
            return int(text, 8)
        return int(text, 0) if re.fullmatch(r"[+-]?0[xX][0-9a-fA-F]+", text) else int(text)
    except ValueError:
        raise NcclEnvError(f"expected an integer, got {value!r}") from None


def _first(*values: int | None) -> int | None:
    """The first value that is set."""
    return next((v for v in values if v is not None), None)


def _channel_bound(value: str) -> int | None:
    """NCCL_MIN_NCHANNELS or NCCL_MAX_NCHANNELS as NCCL reads them (connect.cc ncclMinNchannels, ncclMaxNchannels):
    -2 is unset, and a value below 0 is 0 (the maximum then makes that 1 channel, as NCCL does).

    >>> _channel_bound("-2"), _channel_bound("-1"), _channel_bound("4")
    (None, 0, 4)
    """
    number = _int(value)
    return None if number == -2 else max(0, number)


def _buffsize(value: str) -> int:
    """NCCL_BUFFSIZE in bytes, at least :data:`MIN_BUFFSIZE`. NCCL takes any value but -2 as it is (init.cc
    ``computeBuffSizes``, 0 included); a Simple step is buffSize / NCCL_STEPS (8), and one pass of a channel's 512
    threads moves 512 x 16 B = 8 KiB: below 8 passes the simulation would cut steps into nothing."""
    number = _non_negative_int(value)
    if number < MIN_BUFFSIZE:
        raise NcclEnvError(f"expected at least {MIN_BUFFSIZE} bytes (8 NCCL steps of one 8 KiB pass of a channel's "
                           "512 threads x 16 B); NCCL itself does not check it")  # fmt: skip
    return number


def _atoi(text: str) -> int:
    """C's ``atoi``: optional blanks and sign, then the leading digits; 0 when there are none."""
    t = text.lstrip(" \t\n\v\f\r")
    sign = -1 if t[:1] == "-" else 1
    t = t[1:] if t[:1] in "+-" else t
    digits = len(t) - len(t.lstrip("0123456789"))
    return sign * int(t[:digits]) if digits else 0


@dataclass(frozen=True)
class IbHcaList:
    """``NCCL_IB_HCA`` as NCCL's IB transport reads it when it lists the devices it may use (NVIDIA/nccl v2.30.7-1:
    ``ncclIbInit`` in ``src/transport/net_ib/init.cc``, ``parseStringList`` and ``matchIfList`` in
    ``src/misc/utils.cc``).

    A leading ``^`` excludes the entries instead, a ``=`` after it matches whole names instead of prefixes; the rest
    splits at commas (empty entries skipped), each entry at colons into a name prefix and a port (``atoi``; absent
    or empty: any port; later fields, rail and plane, do not select). A device port is listed when some entry's
    name matches and its port is any or equal, and not when ``^`` was given; no entry at all matches everything.

    Examples
    --------
    >>> IbHcaList.parse("mlx5_1").matches("mlx5_10")   # a prefix: mlx5_1 also takes mlx5_10 and mlx5_11
    True
    >>> IbHcaList.parse("=mlx5_1").matches("mlx5_10"), IbHcaList.parse("=mlx5_1").matches("mlx5_1")
    (False, True)
    >>> IbHcaList.parse("^mlx5_0,mlx5_3").matches("mlx5_3"), IbHcaList.parse("mlx5_0:2").matches("mlx5_0", 1)
    (False, False)
    >>> IbHcaList.parse("").matches("mlx5_4"), IbHcaList.parse("^").matches("mlx5_4")
    (True, False)
    """

    entries: tuple[tuple[str, int], ...]
    exclude: bool = False
    exact: bool = False

    @classmethod
    def parse(cls, value: str) -> IbHcaList:
        """The list ``value`` gives (any string: NCCL refuses none)."""
        exclude = value.startswith("^")
        value = value[1:] if exclude else value
        exact = value.startswith("=")
        value = value[1:] if exact else value
        entries = []
        for entry in value.split(","):
            fields = entry.split(":")
            if fields[0]:
                port = _atoi(fields[1]) if len(fields) > 1 and fields[1] else -1
                entries.append((fields[0], port))
        return cls(tuple(entries), exclude, exact)

    def matches(self, name: str, port: int = 1) -> bool:
        """Whether NCCL lists port ``port`` of the device called ``name``."""
        hit = not self.entries or any(
            (name == prefix if self.exact else name.startswith(prefix)) and (want == -1 or want == port)
            for prefix, want in self.entries
        )
        return hit != self.exclude


def closest_known(key: str) -> str | None:
    """The known NCCL variable name closest to ``key`` (difflib), or None when nothing is close."""
    prefix = "NCCL_"
    suffix = key.upper().removeprefix(prefix)  # compare what follows the common prefix
    matches = difflib.get_close_matches(suffix, [k.removeprefix(prefix) for k in KNOWN_NCCL_ENV], n=1, cutoff=0.6)
    return prefix + matches[0] if matches else None


@dataclass(frozen=True)
class NcclOptions:
    """NCCL's environment knobs, parsed (:meth:`from_env`). ``None`` means unset: NCCL's default applies.

    Attributes
    ----------
    algorithms, protocols : frozenset of str or None
        What NCCL_ALGO and NCCL_PROTO enable for every collective (their entry without a collective prefix).
    algorithms_by, protocols_by : mapping of str to frozenset of str
        Their entries for one collective (``allreduce:tree``, NCCL 2.24 on), which replace the above for it; read
        both through :meth:`algorithms_for` and :meth:`protocols_for`.
    p2p_level, gdr_level : str or None
        NCCL_P2P_LEVEL and NCCL_NET_GDR_LEVEL as path-class names (legacy integers translated).
    min_channels, max_channels : int or None
        NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS: the Ring and Tree channel graphs' bounds (connect.cc), not NVLS's.
    min_ctas, max_ctas : int or None
        NCCL_MIN_CTAS, NCCL_MAX_CTAS (the communicator config's minCTAs, maxCTAs): bounds on every algorithm's
        channels, NVLS's too (nvls.cc); 0 or less is unset, as NCCL leaves it (init.cc "too low").
    nvls_channels : int or None
        NCCL_NVLS_NCHANNELS: the NVLS channel count instead of NCCL's default by GPU; 0 or less is unset.
    buffsize : int or None
        NCCL_BUFFSIZE in bytes.
    socket_nthreads : int or None
        NCCL_SOCKET_NTHREADS as set (helper threads per socket connection), None when unset.
    socket_nsocks : int or None
        NCCL_NSOCKS_PERTHREAD as set (sockets per helper thread), None when unset.
    nthreads, ll128_nthreads : int or None
        NCCL_NTHREADS and NCCL_LL128_NTHREADS as set (threads per channel; 0 or unset: None, NCCL's default).
        NCCL corrects a value it rejects as :meth:`collsim.backends.nccl.constants.ThreadLimits.resolve` says.
    thread_thresholds : tuple of int
        NCCL_THREAD_THRESHOLDS' integers in NCCL's order (Tree LL, LL128, Simple, Ring LL, LL128, Simple), as many as
        given; a negative one keeps the default. Empty when unset.
    gpus_per_process : int
        Not an NCCL knob: GPUs one process drives (nccl-tests ``-g``), set from the workload.
    host_overhead : float or "torch"
        Not an NCCL knob: seconds of the host's per-call work inside each timed collective (scenario
        ``workload.host_overhead``); ``"torch"`` for PyTorch's figure (``NcclConstants.torch_host_overhead``).
    launch_delay : tuple of (int, float)
        Not an NCCL knob: (rank, seconds) pairs of ranks that launch every collective that late (stragglers,
        scenario ``perturb.ranks``; scenario ``noise.launch_skew`` adds each repetition's draws).
    jitter : float
        Not an NCCL knob: mean extra latency of each message, seconds (scenario ``noise.jitter``); 0: none.
    jitter_seed : int
        Seed of the jitter draws (:func:`collsim.noise.repetition_seed` of the scenario's seed and repetition).
    collnet_enable : bool
        NCCL_COLLNET_ENABLE=1: CollNet may run where the fabric reduces in the network (NCCL's default 0: init.cc).
    pat_enable : bool
        False with NCCL_PAT_ENABLE=0 (tuning.cc ncclPatEnable; its default 2 runs PAT with one GPU per node).
    net_gdr_read : int or None
        NCCL_NET_GDR_READ (None when unset: NCCL's default by compute capability and NVLink, paths.cc).
    net_force_flush : bool or None
        NCCL_NET_FORCE_FLUSH (None when unset: NCCL's default for its version).
    net_gdr_c2c, pxn_c2c : bool or None
        NCCL_NET_GDR_C2C and NCCL_PXN_C2C (None when unset: NCCL's default for its version,
        :class:`~collsim.backends.nccl.constants.C2cReleases`).
    nvls_chunksize, nvlstree_max_chunksize : int or None
        NCCL_NVLS_CHUNKSIZE and NCCL_NVLSTREE_MAX_CHUNKSIZE in bytes (transport/nvls.cc, enqueue.cc); None (or 0)
        for NCCL's defaults.
    p2p_nvl_chunksize, p2p_pci_chunksize, p2p_net_chunksize : int or None
        NCCL_P2P_NVL_CHUNKSIZE, NCCL_P2P_PCI_CHUNKSIZE, NCCL_P2P_NET_CHUNKSIZE in bytes; None (or 0): the defaults.
    p2p_ll_threshold : int or None
        NCCL_P2P_LL_THRESHOLD in bytes per channel; None: NCCL's default (16384).
    nchannels_per_net_peer, min_p2p_channels, max_p2p_channels : int or None
        NCCL_NCHANNELS_PER_NET_PEER, NCCL_MIN_P2P_NCHANNELS, NCCL_MAX_P2P_NCHANNELS; None (or 0): the defaults.
    tuner_plugin : str or None
        NCCL_TUNER_PLUGIN as set (a library path or name); None when unset.
    tuner_config_file : str or None
        NCCL_TUNER_CONFIG_FILE as set (NVIDIA's example tuner's CSV); None when unset (the plugin's nccl_tuner.conf).
    tuner_config_base : str or None
        Not an environment variable: the folder a relative ``tuner_config_file`` is taken from (the scenario's,
        standing for the job's working directory); None: the current folder.
    ofi_tuner_type : str or None
        OFI_NCCL_TUNER_TYPE (Internal or Region; aws-ofi-nccl's tuner), None when unset.
    decouple : bool
        Not an NCCL knob: the simulation's ``engine.decouple`` (:func:`collsim.engine.decouple`): the channels a
        slowed link (or a NIC standing in for one down) reaches do not load the links they share with the others (an
        approximation).
    version : tuple of int or None
        Not an environment variable: the NCCL version the run used (scenario ``backends.nccl.version``), as
        (major, minor, patch); None: the current NCCL collsim follows. It selects the behaviours that changed
        between versions (:meth:`before`).

    Examples
    --------
    >>> opts = NcclOptions.from_env({"NCCL_ALGO": "^ring", "NCCL_P2P_LEVEL": "2", "NCCL_MAX_NCHANNELS": 4})
    >>> sorted(opts.algorithms)[:3], opts.p2p_level, opts.max_channels
    (['CollNetChain', 'CollNetDirect', 'NVLS'], 'PXB', 4)
    >>> NcclOptions.from_env({"NCCL_PROTO": "LL256"})
    Traceback (most recent call last):
    ...
    collsim.nccl_env.NcclEnvError: NCCL_PROTO='LL256': unknown protocol 'LL256' in 'LL256'; valid protocols: ...
    """

    algorithms: frozenset[str] | None = None
    protocols: frozenset[str] | None = None
    algorithms_by: Mapping[str, frozenset[str]] = field(default_factory=dict)
    protocols_by: Mapping[str, frozenset[str]] = field(default_factory=dict)
    p2p_disable: bool = False
    p2p_level: str | None = None
    shm_disable: bool = False
    ib_disable: bool = False
    gdr_level: str | None = None
    pxn_disable: bool = False
    #: NCCL_CROSS_NIC (default 2): 0 keeps a point-to-point send on the receiving GPU's rail even without PXN
    cross_nic: int = 2
    min_channels: int | None = None
    max_channels: int | None = None
    min_ctas: int | None = None
    max_ctas: int | None = None
    nvls_channels: int | None = None
    buffsize: int | None = None
    socket_nthreads: int | None = None
    socket_nsocks: int | None = None
    nthreads: int | None = None
    ll128_nthreads: int | None = None
    thread_thresholds: tuple[int, ...] = ()
    nvls_enable: bool = True
    collnet_enable: bool = False
    pat_enable: bool = True
    net_gdr_read: int | None = None
    net_force_flush: bool | None = None
    net_gdr_c2c: bool | None = None
    pxn_c2c: bool | None = None
    nvls_chunksize: int | None = None
    nvlstree_max_chunksize: int | None = None
    p2p_nvl_chunksize: int | None = None
    p2p_pci_chunksize: int | None = None
    p2p_net_chunksize: int | None = None
    p2p_ll_threshold: int | None = None
    nchannels_per_net_peer: int | None = None
    min_p2p_channels: int | None = None
    max_p2p_channels: int | None = None
    tuner_plugin: str | None = None
    tuner_config_file: str | None = None
    tuner_config_base: str | None = None
    ofi_tuner_type: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    gpus_per_process: int = 1
    host_overhead: float | Literal["torch"] = 0.0
    launch_delay: tuple[tuple[int, float], ...] = ()
    jitter: float = 0.0
    jitter_seed: int = 0
    decouple: bool = False
    version: tuple[int, int, int] | None = None
    #: sendrecv's one sender and receiver (scenario workload.peers); None: every rank to the next, as nccl-tests
    sendrecv_peers: tuple[int, int] | None = None
    #: broadcast's and reduce's root rank (scenario workload.root)
    root: int = 0
    #: the reduction and element type (scenario workload.op, workload.dtype): NVLS reduces only some of them
    op: str = "sum"
    dtype: str = "float32"

    def cta_bounds(self, most: int) -> tuple[int, int]:
        """(minCTAs, maxCTAs) as NCCL settles them (init.cc): each capped at ``most`` (MAXCHANNELS), and the
        minimum at most the maximum; (1, ``most``) when unset.

        >>> NcclOptions(min_ctas=24).cta_bounds(32), NcclOptions(min_ctas=40, max_ctas=8).cta_bounds(32)
        ((24, 32), (8, 8))
        """
        hi = min(self.max_ctas or most, most)
        return min(self.min_ctas or 1, most, hi), hi

    def algorithms_for(self, collective: str) -> frozenset[str] | None:
        """What NCCL_ALGO enables for ``collective``: its own entry, else the value's list for all; None: unset.

        >>> opts = NcclOptions.from_env({"NCCL_ALGO": "ring;allreduce:tree"})
        >>> sorted(opts.algorithms_for("allreduce")), sorted(opts.algorithms_for("allgather"))
        (['Tree'], ['Ring'])
        """
        return self.algorithms_by.get(collective, self.algorithms)

    def protocols_for(self, collective: str) -> frozenset[str] | None:
        """What NCCL_PROTO enables for ``collective``: its own entry, else the value's list for all; None: unset
        (NCCL's default, LL128 where it turns it on)."""
        return self.protocols_by.get(collective, self.protocols)

    def before(self, version: tuple[int, int]) -> bool:
        """Whether the run's NCCL is older than ``version`` (major, minor); False when the version is unset.

        >>> NcclOptions(version=(2, 18, 5)).before((2, 20)), NcclOptions().before((2, 20))
        (True, False)
        """
        return self.version is not None and self.version[:2] < version

    @classmethod
    def from_env(cls, env: Mapping[str, Any]) -> NcclOptions:
        """Parse NCCL_* variables (values as strings or numbers) with the parsers above; an empty value is unset.

        Raises
        ------
        NcclEnvError
            A bad value; the message starts with ``NAME='value':``.
        """
        text = {k: str(v).strip() for k, v in env.items() if v is not None and str(v).strip() != ""}

        def parsed(name: str, parse: Any) -> Any:
            if name not in text:
                return None
            try:
                return parse(text[name])
            except NcclEnvError as exc:
                raise NcclEnvError(f"{name}={text[name]!r}: {exc}") from None

        def as_int(name: str) -> int | None:
            return parsed(name, _non_negative_int)

        def positive(name: str) -> int | None:  # NCCL leaves a value <= 0 unset (init.cc)
            value = as_int(name)
            return value if value else None

        for name in sorted(INT_NCCL_ENV & text.keys()):  # validated like the scenario does, read or not
            as_int(name)
        buffsize = parsed("NCCL_BUFFSIZE", _buffsize)
        algos = parsed("NCCL_ALGO", lambda v: parse_function_list(v, NCCL_ALGORITHMS, NCCL_ALGO_GROUPS, "algorithm"))
        protos = parsed("NCCL_PROTO", lambda v: parse_function_list(v, NCCL_PROTOCOLS, None, "protocol"))
        algos, protos = algos or {}, protos or {}
        nvls = as_int("NCCL_NVLS_ENABLE")
        return cls(
            algorithms=frozenset(algos[None]) if None in algos else None,
            protocols=frozenset(protos[None]) if None in protos else None,
            algorithms_by={c: frozenset(v) for c, v in algos.items() if c is not None},
            protocols_by={c: frozenset(v) for c, v in protos.items() if c is not None},
            p2p_disable=as_int("NCCL_P2P_DISABLE") == 1,  # paths.cc ncclGetLevel: `if (disable == 1)`
            p2p_level=parsed("NCCL_P2P_LEVEL", parse_level),
            shm_disable=as_int("NCCL_SHM_DISABLE") == 1,  # shm.cc: `if (ncclParamShmDisable() == 1)`
            ib_disable=bool(as_int("NCCL_IB_DISABLE")),
            gdr_level=parsed("NCCL_NET_GDR_LEVEL", parse_level),
            pxn_disable=bool(as_int("NCCL_PXN_DISABLE")),
            cross_nic=2 if (cross := as_int("NCCL_CROSS_NIC")) is None else cross,
            # connect.cc ncclMinNchannels / ncclMaxNchannels: the legacy NRINGS name, then NCHANNELS over it
            min_channels=_first(*(parsed(f"NCCL_MIN_{n}", _channel_bound) for n in ("NCHANNELS", "NRINGS"))),
            max_channels=_first(*(parsed(f"NCCL_MAX_{n}", _channel_bound) for n in ("NCHANNELS", "NRINGS"))),
            min_ctas=positive("NCCL_MIN_CTAS"),
            max_ctas=positive("NCCL_MAX_CTAS"),
            nvls_channels=positive("NCCL_NVLS_NCHANNELS"),
            buffsize=buffsize,
            socket_nthreads=as_int("NCCL_SOCKET_NTHREADS"),
            socket_nsocks=as_int("NCCL_NSOCKS_PERTHREAD"),
            nthreads=positive("NCCL_NTHREADS"),
            ll128_nthreads=positive("NCCL_LL128_NTHREADS"),
            thread_thresholds=parsed("NCCL_THREAD_THRESHOLDS", _thread_thresholds) or (),
            nvls_enable=nvls is None or nvls != 0,
            collnet_enable=as_int("NCCL_COLLNET_ENABLE") == 1,  # init.cc: anything but 0 or 1 is 0, the default
            pat_enable=as_int("NCCL_PAT_ENABLE") != 0,  # tuning.cc ncclPatEnable: 0 off; 2 (default) and 1 on
            net_gdr_read=as_int("NCCL_NET_GDR_READ"),
            net_force_flush=None if "NCCL_NET_FORCE_FLUSH" not in text else bool(as_int("NCCL_NET_FORCE_FLUSH")),
            net_gdr_c2c=None if "NCCL_NET_GDR_C2C" not in text else bool(as_int("NCCL_NET_GDR_C2C")),
            pxn_c2c=None if "NCCL_PXN_C2C" not in text else bool(as_int("NCCL_PXN_C2C")),
            nvls_chunksize=positive("NCCL_NVLS_CHUNKSIZE"),
            nvlstree_max_chunksize=positive("NCCL_NVLSTREE_MAX_CHUNKSIZE"),
            p2p_nvl_chunksize=positive("NCCL_P2P_NVL_CHUNKSIZE"),
            p2p_pci_chunksize=positive("NCCL_P2P_PCI_CHUNKSIZE"),
            p2p_net_chunksize=positive("NCCL_P2P_NET_CHUNKSIZE"),
            p2p_ll_threshold=as_int("NCCL_P2P_LL_THRESHOLD"),
            nchannels_per_net_peer=positive("NCCL_NCHANNELS_PER_NET_PEER"),
            min_p2p_channels=positive("NCCL_MIN_P2P_NCHANNELS"),
            max_p2p_channels=positive("NCCL_MAX_P2P_NCHANNELS"),
            tuner_plugin=text.get("NCCL_TUNER_PLUGIN"),
            tuner_config_file=text.get("NCCL_TUNER_CONFIG_FILE"),
            ofi_tuner_type=parsed("OFI_NCCL_TUNER_TYPE", _ofi_tuner_type),
            env={k: str(v) for k, v in env.items()},
        )
