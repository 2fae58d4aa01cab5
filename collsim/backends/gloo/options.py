"""Gloo's constants (``topologies/software/gloo.yaml``) and a scenario's ``backends.gloo`` options, typed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collsim.algorithms import GlooParams

__all__ = ["GlooConstants", "GlooOptions"]


_US = 1e-6  # microseconds to seconds


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
    fresh_mapping_bytes : int
        Host allocations of at least this many bytes are new mappings every time (glibc's largest mmap
        threshold), so their pages fault in on first write.
    write_allocate : float
        Bytes of memory a CPU reads per byte it stores to a destination it did not read (``training.yaml``
        ``cpu_write_allocate_bytes_per_byte``): a host copy moves 2 + this many bytes of DRAM traffic per byte.
    """

    max_segment_bytes: int
    min_segments_per_rank: int
    segments_in_flight: int
    preamble_bytes: int
    work_enqueue_latency: float
    bcube_base: int
    sim_max_segments_per_rank: int | None = None
    fresh_mapping_bytes: int = 1 << 62
    write_allocate: float = 0.0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], *, write_allocate: float) -> GlooConstants:
        """Build from the mapping in ``topologies/software/gloo.yaml`` (us there, seconds here); Gloo's algorithm
        constants are read by :meth:`GlooParams.from_mapping`, the rest here. ``write_allocate``:
        ``cpu_write_allocate_bytes_per_byte`` of ``topologies/software/training.yaml`` (a property of the CPU's
        caches, not of Gloo, kept in one place)."""
        p = GlooParams.from_mapping(data)
        sim_max = data.get("sim_max_segments_per_rank")
        return cls(
            int(p.max_segment_bytes), p.min_segments_per_rank, p.segments_in_flight,
            int(data["preamble_bytes"]), float(data["work_enqueue_latency_us"]) * _US, p.bcube_base,
            int(sim_max) if sim_max else None, int(data["fresh_mapping_bytes"]), float(write_allocate),
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
    interfaces : int
        Entries of ``GLOO_SOCKET_IFNAME`` (``eth0,eth0`` is 2; unset is 1): ProcessGroupGloo makes one Gloo device
        and context per entry, each with its own connection to every peer and its own event-loop thread, and gives
        the collectives to the contexts round robin (``getContext``: ``contexts_[tag % contexts_.size()]``,
        ``nextTag`` counting collectives; pytorch/pytorch ``ProcessGroupGloo.cpp``). PyTorch then starts 2 worker
        threads per entry (``options->threads = options->devices.size() * 2``, ``torch/csrc/distributed/c10d/
        init.cpp``): set ``threads`` to match.
    cores_per_process : float or None
        Cores each rank's process may run on (``taskset``, a container's CPU limit, Slurm's ``--cpus-per-task``;
        scenario ``workload.cores_per_process``): its TCP sends and receives, reductions and copies share them.
        None: no limit but the node's cores, which all its processes share.
    """

    algorithm: str = "ring"
    device: str = "cuda"
    transport: str = "tcp"
    threads: int = 2
    interfaces: int = 1
    cores_per_process: float | None = None
    #: (rank, seconds) pairs: ranks that issue every collective that late (stragglers; scenario perturb.ranks)
    launch_delay: tuple[tuple[int, float], ...] = ()
    #: mean extra latency of each message between ranks, seconds (scenario noise.jitter); 0: none
    jitter: float = 0.0
    #: seed of the jitter draws (collsim.noise.repetition_seed of the scenario's seed and repetition)
    jitter_seed: int = 0
    #: sendrecv's sender and receiver ranks (scenario workload.peers; default rank 0 to rank 1)
    peers: tuple[int, int] = (0, 1)
    #: broadcast's and reduce's root rank (scenario workload.root)
    root: int = 0
