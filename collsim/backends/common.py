"""What both backends share: resources from a topology, the outcome of one simulated collective, running it."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from collsim.engine import FlowRecord, FluidNetwork, Quotient, ResourceSpec
from collsim.engine.gcpause import gc_relaxed
from collsim.topology import Device, Link, Topology

__all__ = [
    "BackendError",
    "Outcome",
    "Path",
    "ResourceCatalog",
    "fabric_uses",
    "flow_cap",
    "link_end",
    "link_uses",
    "resource_name",
    "run_stats",
    "run_until_done",
]


class BackendError(ValueError):
    """A request the backend cannot honour (a choice the real library would refuse); the message says why."""


@dataclass
class Outcome:
    """One simulated collective.

    Attributes
    ----------
    time_s : float
        Completion time in seconds, from the call until the last rank is done.
    breakdown : dict
        Seconds per activity of a representative rank; the values add up to ``time_s``.
    predicted_s : float or None
        The backend's closed-form cost model for the same choice (NCCL's tuner), when it has one.
    classes, entities : int
        Simulated representatives and the entities they stand for (symmetry reduction).
    solves, flows : int
        Rate solves of the fluid network, and flows it streamed (the engine's work: what the scale benchmark counts).
    ends : tuple of float
        Several collectives run together (:func:`~collsim.backends.gloo.simulate_gloo_many`): when each was done
        on every rank, seconds from the start, in issue order; empty for one collective.
    held : tuple of (float, float)
        The same collectives: when a worker thread first took each (the earliest rank's) and when one first freed
        it, seconds from the start, in issue order; empty for one collective.
    bottleneck : Bottleneck or None
        The most loaded link of a recorded simulation (set by the API from the flow records); None otherwise.
    """

    backend: str
    collective: str
    algorithm: str
    protocol: str
    nranks: int
    size_bytes: int
    time_s: float
    channels: int | None = None
    breakdown: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    predicted_s: float | None = None
    classes: int = 0
    entities: int = 0
    records: list[FlowRecord] = field(default_factory=list)
    solves: int = 0
    flows: int = 0
    ends: tuple[float, ...] = ()
    held: tuple[tuple[float, float], ...] = ()
    bottleneck: Bottleneck | None = None


@dataclass(frozen=True)
class Bottleneck:
    """The most loaded link of one collective: where a faster part would shorten it first.

    Attributes
    ----------
    link : str
        Resource name (``"n0/cpu0->n0/cpu1"``; a symmetry class's representative, without its suffix).
    kind : str
        Link kind (``nvlink``, ``pcie``, ``upi``, ``ib``, ``roce``, ``eth``, ``hostmem``, ``hbm`` ...).
    load_share : float
        Bytes it carried over its bandwidth, as a share of the collective's time (1.0: busy at full rate
        throughout).
    """

    link: str
    kind: str
    load_share: float


@dataclass(frozen=True)
class Path:
    """Resources one transfer crosses: ``uses`` as (resource key, units consumed per data byte), and its latency."""

    uses: tuple[tuple[Hashable, float], ...]
    latency: float
    kinds: tuple[str, ...]

    def __add__(self, other: Path) -> Path:
        return Path(self.uses + other.uses, self.latency + other.latency, self.kinds + other.kinds)

    def scaled(self, factor: float) -> Path:
        """The same path with every coefficient multiplied (protocol wire overhead)."""
        return Path(tuple((k, c * factor) for k, c in self.uses), self.latency, self.kinds)


def link_uses(links: Sequence[Link]) -> Path:
    """A path over topology links: one unit per byte on each directed link, latencies added (cut-through)."""
    return Path(
        tuple((("link", ln.src, ln.dst), 1.0) for ln in links),
        sum(ln.latency for ln in links),
        tuple(ln.kind for ln in links),
    )


def fabric_uses(topo: Topology, src: str, dst: str) -> Path:
    """The path from ``src`` to ``dst`` (NICs, or a NIC and a fabric switch) over the fabric, as :func:`link_uses`
    of :meth:`~collsim.topology.Topology.route`, except that a crossing leaf -> spine -> leaf is spread evenly over
    every spine joining the two leaves (:meth:`~collsim.topology.Topology.equal_cost_spines`): 1/k of each byte on
    each of the k leaf-spine links up and spine-leaf links down, as equal-cost multipath (InfiniBand's adaptive
    routing, RoCE's ECMP, EFA's SRD multipathing) spreads a fabric's flows in the fluid limit. The latency is the
    route's (every spine is one switch away).

    Examples
    --------
    >>> from collsim.topology import load_topology
    >>> fab = {"topology": "rail_optimized", "transport": "rdma", "switch": {"radix": 8}}
    >>> topo = load_topology("hgx-h100", nodes=2, fabric=fab)  # 8 rails x 2 nodes / 8: two spines
    >>> [(k[1], k[2], w) for k, w in fabric_uses(topo, "n0/nic0", "n1/nic3").uses]  # doctest: +NORMALIZE_WHITESPACE
    [('n0/nic0', 'fabric/rail0', 1.0), ('fabric/rail0', 'fabric/spine0', 0.5), ('fabric/spine0', 'fabric/rail3', 0.5),
     ('fabric/rail0', 'fabric/spine1', 0.5), ('fabric/spine1', 'fabric/rail3', 0.5), ('fabric/rail3', 'n1/nic3', 1.0)]
    """
    links = topo.route(src, dst)
    uses: list[tuple[Hashable, float]] = []
    i = 0
    while i < len(links):
        ln = links[i]
        if i + 1 < len(links) and topo.is_spine(ln.dst):
            down = links[i + 1]
            spines = topo.equal_cost_spines(ln.src, down.dst)
            w = 1.0 / len(spines)
            for sp in spines:
                uses += [(("link", ln.src, sp), w), (("link", sp, down.dst), w)]
            i += 2
            continue
        uses.append((("link", ln.src, ln.dst), 1.0))
        i += 1
    return Path(tuple(uses), sum(ln.latency for ln in links), tuple(ln.kind for ln in links))


def flow_cap(nic: Device) -> float:
    """The rate one TCP flow may reach through ``nic``, bytes/s: its preset's ``flow_bw`` (a provider's cap on a
    5-tuple), infinite without one."""
    cap = nic.spec.get("flow_bw")
    return float(cap) if cap else math.inf


def resource_name(key: Hashable) -> str:
    """The display name of a resource key: the only place resource names are made.

    Keys: ``("link", src, dst)`` (a link direction), ``("mem", cpu)`` (a CPU socket's memory), ``("hbm", gpu)`` (a
    GPU's memory), ``("cores", node)`` (a node's CPU cores), ``("proxy", gpu)`` (the CPU thread that progresses a
    GPU's NCCL network connections), ``("process", rank)`` (the cores one rank's process may run on, where
    :meth:`ResourceCatalog.confine` limits them), ``("io", rank, context)`` (the event-loop thread of one of a
    rank's Gloo contexts, :meth:`ResourceCatalog.io_threads`).

    Examples
    --------
    >>> [resource_name(k) for k in [("link", "n0/gpu0", "n0/nvswitch"), ("mem", "n0/cpu0"), ("cores", 1)]]
    ['n0/gpu0->n0/nvswitch', 'n0/cpu0 memory', 'n1 CPU cores']
    >>> resource_name(("hbm", "n0/gpu3")), resource_name(("proxy", "n1/gpu0")), resource_name(("process", 3))
    ('n0/gpu3 HBM', 'n1/gpu0 proxy thread', 'rank 3 process cores')
    >>> resource_name(("io", 2, 0))
    'rank 2 Gloo I/O thread 0'
    """
    match key:
        case ("link", str(src), str(dst)):
            return f"{src}->{dst}"
        case ("mem", str(cpu)):
            return f"{cpu} memory"
        case ("hbm", str(gpu)):
            return f"{gpu} HBM"
        case ("cores", int(node)):
            return f"n{node} CPU cores"
        case ("proxy", str(gpu)):
            return f"{gpu} proxy thread"
        case ("process", int(rank)):
            return f"rank {rank} process cores"
        case ("io", int(rank), int(context)):
            return f"rank {rank} Gloo I/O thread {context}"
    raise ValueError(f"not a resource key: {key!r}")


def link_end(key: Hashable) -> str | None:
    """The device a link resource enters (``dst`` of ``("link", src, dst)``); None for any other resource.

    >>> link_end(("link", "n0/gpu0", "n0/nvswitch")), link_end(("mem", "n0/cpu0"))
    ('n0/nvswitch', None)
    """
    if isinstance(key, tuple) and len(key) == 3 and key[0] == "link":
        return str(key[2])
    return None


class ResourceCatalog:
    """Resource keys and their specs: directed links, host memory per CPU socket, GPU memory (HBM) per GPU, CPU
    cores per node, one proxy thread per GPU; names from :func:`resource_name`.

    Keys: ``("link", src, dst)``, ``("mem", cpu)``, ``("hbm", gpu)`` (bytes/s), ``("cores", node)``
    (core-seconds/s = cores), ``("proxy", gpu)`` (thread-seconds/s = 1: NCCL runs one proxy thread per GPU, and
    with its socket transport's defaults that thread moves the bytes of every network connection of the GPU), and
    after :meth:`confine` ``("process", rank)`` (core-seconds/s: the cores a rank's process may run on), after
    :meth:`io_threads` ``("io", rank, context)`` (thread-seconds/s = 1: one Gloo event-loop thread).
    """

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.specs: dict[Hashable, ResourceSpec] = {}
        for ln in topo.links():
            self._add(("link", ln.src, ln.dst), ln.bandwidth, ln.kind)
        cores: dict[int, float] = {}
        for cpu in topo.devices("cpu"):
            spec = cpu.spec
            self._add(("mem", cpu.name), float(spec["memory_bandwidth"]), "hostmem")
            cores[cpu.node] = cores.get(cpu.node, 0.0) + float(spec["cores"])
        for gpu in topo.devices("gpu"):
            if gpu.spec.get("hbm_bandwidth"):
                self._add(("hbm", gpu.name), float(gpu.spec["hbm_bandwidth"]), "hbm")
            self._add(("proxy", gpu.name), 1.0, "cpu")  # one thread: 1 thread-second per second
        for node, n in cores.items():
            self._add(("cores", node), n, "cpu")

    def _add(self, key: Hashable, capacity: float, kind: str) -> None:
        self.specs[key] = ResourceSpec(resource_name(key), capacity, kind)

    def byte_capacities(self) -> dict[str, tuple[str, float]]:
        """Resource name to (kind, capacity in bytes/s) for every resource measured in bytes (all but CPU cores)."""
        return {spec.name: (spec.kind, spec.capacity) for spec in self.specs.values() if spec.kind != "cpu"}

    def mem(self, cpu: str, coef: float) -> Path:
        """``coef`` bytes of host-memory traffic per data byte on ``cpu``'s socket."""
        return Path(((("mem", cpu), coef),), 0.0, ("hostmem",))

    def cores(self, node: int, seconds_per_byte: float) -> Path:
        """CPU time on ``node``'s cores: ``seconds_per_byte`` core-seconds per data byte."""
        return Path(((("cores", node), seconds_per_byte),), 0.0, ("cpu",))

    def confine(self, ranks: int, cores: float) -> None:
        """Confine each of ``ranks`` processes to ``cores`` cores (taskset, a container's CPU limit, Slurm's
        ``--cpus-per-task``): every CPU cost charged to a rank's process (:meth:`process`) is then also charged to
        its own ``("process", rank)`` resource of that capacity, besides its node's cores."""
        for r in range(ranks):
            self._add(("process", r), cores, "cpu")

    def _declared(self, key: Hashable | None, seconds_per_byte: float) -> Path:
        """``seconds_per_byte`` of resource ``key`` where it was declared; else (or ``key`` None) an empty path."""
        if key is None or key not in self.specs:
            return Path((), 0.0, ())
        return Path(((key, seconds_per_byte),), 0.0, ("cpu",))

    def process(self, rank: int | None, seconds_per_byte: float) -> Path:
        """CPU time of rank ``rank``'s own process: ``seconds_per_byte`` core-seconds per data byte of its
        ``("process", rank)`` resource where :meth:`confine` limited its cores; else (or ``rank`` None) nothing.
        Charged beside the node's :meth:`cores`, which every process shares."""
        return self._declared(None if rank is None else ("process", rank), seconds_per_byte)

    def io_threads(self, ranks: int, contexts: int) -> None:
        """One event-loop thread per Gloo context of each of ``ranks`` ranks: ``("io", rank, context)``, one
        thread-second a second."""
        for r in range(ranks):
            for c in range(contexts):
                self._add(("io", r, c), 1.0, "cpu")

    def io_thread(self, rank: int | None, context: int, seconds_per_byte: float) -> Path:
        """Time of rank ``rank``'s event-loop thread of ``context``: ``seconds_per_byte`` thread-seconds per data
        byte where :meth:`io_threads` declared it; else (or ``rank`` None) nothing."""
        return self._declared(None if rank is None else ("io", rank, context), seconds_per_byte)

    def proxy(self, gpu: str, seconds_per_byte: float) -> Path:
        """Time of ``gpu``'s proxy thread: ``seconds_per_byte`` thread-seconds per data byte."""
        return Path(((("proxy", gpu), seconds_per_byte),), 0.0, ("cpu",))


def run_until_done(env: simpy.Environment, done_events: Sequence[simpy.Event], deadline: float | None = None) -> float:
    """Run the simulation and return the time the last of ``done_events`` fired (seconds).

    The clock may run past it on stale wake-ups; the completion time is read from the events themselves. With a
    ``deadline`` (seconds) the clock stops there, and a collective not done by then returns ``inf``: it is slower
    than the deadline, by how much is not simulated.
    """
    finish = [math.nan] * len(done_events)

    def mark(i: int) -> None:
        finish[i] = env.now

    for i, ev in enumerate(done_events):
        ev.callbacks.append(lambda _e, i=i: mark(i))  # type: ignore[misc]
    with gc_relaxed():  # half of a large run's time went to the cyclic collector (collsim.engine.gcpause)
        if deadline is None:
            env.run()
        else:
            env.run(until=deadline)
    missing = [i for i, t in enumerate(finish) if math.isnan(t)]
    if missing and deadline is not None:
        return math.inf
    if missing:
        raise RuntimeError(f"simulation deadlocked: {len(missing)} participants never finished")
    return max(finish) if finish else 0.0


def run_stats(net: FluidNetwork, quotient: Quotient, entities: int, record: bool) -> dict[str, Any]:
    """The :class:`Outcome` fields every backend fills from the engine: simulated representatives and the entities
    they stand for, the flow records (when recording) and the number of rate solves."""
    return {
        "classes": quotient.n_classes,
        "entities": entities,
        "records": net.records if record else [],
        "solves": net.solves,
        "flows": net.flows,
    }


def new_network(record: bool, check: bool = False) -> tuple[simpy.Environment, FluidNetwork]:
    """A fresh clock and fluid network."""
    env = simpy.Environment()
    return env, FluidNetwork(env, record=record, check=check)
