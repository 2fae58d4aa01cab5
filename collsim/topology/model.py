"""Devices, links and the :class:`Topology` graph with routing and NCCL-style path classes."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from collsim.topology.errors import TopologyError
from collsim.vocab import LINK_KINDS, PATH_CLASS_ORDER

__all__ = ["Device", "FrozenMap", "Link", "Topology", "path_class_rank"]

# Devices a route may start or end at but never pass through.
NO_TRANSIT_KINDS = frozenset({"gpu", "nic"})
# Link kinds of a host's own paths (pcie_route, path classes): PCIe, inter-socket links, NVLink-C2C; the first and
# last hang a device under its CPU (host_cpu).
_HOST_KINDS = frozenset({"pcie", "upi", "c2c"})
UNDER_CPU_KINDS = frozenset({"pcie", "c2c"})
# Order of device kinds in listings.
_KIND_ORDER = {k: i for i, k in enumerate(("gpu", "cpu", "pcie_switch", "nic", "nvswitch", "switch"))}
_PS_PER_S = 1e12  # route latencies are compared in integer picoseconds so that float sums tie exactly


class FrozenMap(Mapping[str, Any]):
    """A read-only mapping that, unlike ``types.MappingProxyType``, can be pickled and deep-copied.

    Parameters
    ----------
    data : Mapping, optional
        The items (copied).
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(data or {})

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __reduce__(self) -> tuple[type[FrozenMap], tuple[dict[str, Any]]]:
        return (FrozenMap, (self._data,))


def path_class_rank(cls: str) -> int:
    """Return the position of a path class in :data:`PATH_CLASS_ORDER` (0 = best).

    Parameters
    ----------
    cls : str
        A path class such as ``"PIX"``.

    Returns
    -------
    int
        Its rank; lower is closer.
    """
    try:
        return PATH_CLASS_ORDER.index(cls)
    except ValueError:
        raise TopologyError(f"unknown path class {cls!r}; valid: {', '.join(PATH_CLASS_ORDER)}") from None


def gpu_nearness(topo: Topology, nic: str, ngpu: int) -> Callable[[str], tuple[int, int]]:
    """Sort key of a GPU (by name) for NCCL's channels on ``nic``: nearest path class first; among equals the GPU
    whose index matches the NIC's slot on the template (its "own" rail; a NIC keeps its slot when a fabric uses
    fewer NICs and the kept ones are renumbered), then the following ones (``ngpu`` GPUs on the node).

    Where no GPU of that index is among the nearest (other NICs numbered between the GPUs' own: a DGX A100's
    storage NICs mlx5_4 and mlx5_5 before the compute NICs mlx5_6-9), the NICs sharing the same nearest GPUs take
    those GPUs in turn, in slot order: NCCL's search picks GPUs by distance and charges each channel's bandwidth to
    its PCIe path (search.cc), never by the NIC's number, so two NICs on one switch do not both enter at one GPU."""
    dev = topo.device(nic)
    nic_index = int(dev.spec.get("template_index", dev.index))
    gpus = topo.devices("gpu", dev.node)

    def nearest(n: str) -> list[Device]:
        ranks = [path_class_rank(topo.path_class(g.name, n)) for g in gpus]
        return [g for g, r in zip(gpus, ranks, strict=True) if r == min(ranks)]

    near = nearest(nic) if gpus else []
    if near and not any(g.index == nic_index for g in near):
        sharing = sorted((n for n in topo.devices("nic", dev.node) if nearest(n.name) == near),
                         key=lambda n: (int(n.spec.get("template_index", n.index)), n.name))  # fmt: skip
        turn = [n.name for n in sharing].index(nic)
        nic_index = near[turn % len(near)].index
    return lambda g: (path_class_rank(topo.path_class(g, nic)), (topo.device(g).index - nic_index) % ngpu)


def ib_device_name(nic: Device) -> str:
    """The name ``nic`` has in the IB verbs library (``ibv_get_device_list``; what NCCL_IB_HCA matches): its
    template's ``ib_names`` entry (its spec's ``ib_name``), else ``mlx5_<its slot on the template>``, as Linux names
    mlx5 devices in the order the driver probes them (PCI order, the order templates list their NICs in). A NIC keeps
    its name when a fabric uses fewer NICs (its slot, ``template_index``, not its renumbered index)."""
    return str(nic.spec.get("ib_name") or f"mlx5_{nic.spec.get('template_index', nic.index)}")


@dataclass(frozen=True)
class Device:
    """One device of a cluster.

    Attributes
    ----------
    name : str
        Cluster-wide name, ``n{node}/{local}`` for node devices (``"n0/gpu3"``), ``fabric/...`` for fabric switches.
    kind : str
        ``gpu``, ``cpu`` (a socket), ``pcie_switch``, ``nic``, ``nvswitch`` or ``switch`` (network switch).
    node : int
        Node index; -1 for fabric devices.
    index : int
        Index among the devices of this kind within its node (a GPU's index is its local rank).
    spec : Mapping[str, Any]
        Resolved preset values in SI units (bytes/s, seconds), e.g. ``spec["nccl_channel_bw"]``, ``spec["cores"]``;
        ``spec["preset"]`` names the preset when there is one.
    """

    name: str
    kind: str
    node: int
    index: int
    spec: Mapping[str, Any] = field(default_factory=FrozenMap, compare=False, hash=False)

    @property
    def local_name(self) -> str:
        """The name without the ``n{node}/`` prefix (``"gpu3"``)."""
        return self.name.split("/", 1)[-1]


def _share_count(k: int) -> int:
    """``k`` communicators on one resource, checked (an integer >= 1)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise TopologyError(f"expected a number of communicators sharing a resource >= 1, got {k!r}")
    return k


@dataclass(frozen=True)
class Link:
    """One direction of a (possibly aggregated) link.

    Attributes
    ----------
    src, dst : str
        Device names.
    kind : str
        ``nvlink``, ``pcie``, ``upi``, ``ib``, ``roce`` or ``eth``.
    bandwidth : float
        Bytes/s in this direction, all ``count`` parallel links together, after efficiency.
    raw_bandwidth : float
        Bytes/s in this direction before efficiency.
    latency : float
        Seconds for one traversal.
    count : int
        Parallel physical links aggregated into this one (e.g. 12 NVLinks, or uplink ports).
    preset : str
        The links.yaml preset name (``"nvlink3"``).
    source : str
        Where the numbers come from.
    dma_ratio : float
        A copy engine's DMA rate over this link relative to ``bandwidth`` (links.yaml ``dma_efficiency`` /
        ``efficiency``; 1.0 where no DMA rate is measured). It scales with ``bandwidth`` when a link is slowed.
    """

    src: str
    dst: str
    kind: str
    bandwidth: float
    raw_bandwidth: float
    latency: float
    count: int
    preset: str
    source: str
    dma_ratio: float = 1.0

    @property
    def efficiency(self) -> float:
        """Achieved fraction of the raw bandwidth."""
        return self.bandwidth / self.raw_bandwidth


class Topology:
    """A cluster as a directed graph of devices and links.

    Parameters
    ----------
    name : str
        Template name (``"dgx-a100"``).
    graph : networkx.DiGraph
        Node attribute ``device`` holds a :class:`Device`, edge attribute ``link`` a :class:`Link`; every physical
        link appears in both directions.
    nodes : int
        Number of cluster nodes.
    params : Mapping, optional
        Resolved template parameters.
    source_file : str, optional
        The template file.
    fabric : Mapping, optional
        The resolved fabric configuration (None for a single node without a fabric).
    nic_substitutes : Mapping, optional
        NICs taken down (``perturb.down``, :mod:`collsim.topology.perturb`): the name of each removed NIC to the
        Device it was and the NIC of its node that carries its channels instead (:meth:`nic_slots`).
    background : Sequence, optional
        Another job's traffic (``perturb.background``): ``(src, dst, rate)`` per greedy stream, one directed link
        each, rate in bytes/s (the backends run it as flows competing with the collective).
    scaled : Collection of (str, str), optional
        The directed links a perturbation made slower (``perturb.links``): what ``engine.decouple`` starts from
        (:func:`collsim.engine.decouple`).
    instance_type : str, optional
        The cloud instance type the node template describes (template key ``instance_type``, e.g.
        ``"p5.48xlarge"``): what a network plugin reads from the machine (aws-ofi-nccl's tuner picks its tables by
        it); None for hardware that is not a cloud instance type.
    ranks_per_gpu : int, optional
        Processes (ranks) sharing each GPU, >= 1 (scenario ``cluster.ranks_per_gpu``): several torch.distributed
        processes on one device, which Gloo runs and NCCL refuses. Default 1.

    Notes
    -----
    Rank devices: a topology with GPUs ranks its GPUs. A CPU-only topology (template ``cpu-host``) ranks process
    slots: :meth:`rank_devices` returns, for each of ``params["processes"]`` processes per node, the CPU socket the
    process runs on; processes are spread over the sockets in blocks, so several ranks share a socket Device. No
    ``proc`` device kind exists. With ``ranks_per_gpu`` k > 1 each GPU appears k times in a row (ranks in blocks:
    rank r of a node uses that node's GPU r // k).
    """

    def __init__(
        self,
        name: str,
        graph: nx.DiGraph,
        nodes: int = 1,
        params: Mapping[str, Any] | None = None,
        source_file: str | None = None,
        fabric: Mapping[str, Any] | None = None,
        nic_substitutes: Mapping[str, tuple[Device, str]] | None = None,
        background: Sequence[tuple[str, str, float]] = (),
        scaled: Collection[tuple[str, str]] = (),
        instance_type: str | None = None,
        ranks_per_gpu: int = 1,
    ) -> None:
        self.name = name
        self.graph = graph
        self.nodes = nodes
        self.params: Mapping[str, Any] = FrozenMap(params)
        self.source_file = source_file
        self.fabric: Mapping[str, Any] | None = None if fabric is None else FrozenMap(fabric)
        self.nic_substitutes: Mapping[str, tuple[Device, str]] = dict(nic_substitutes or {})
        self.background: tuple[tuple[str, str, float], ...] = tuple(background)
        self.scaled: frozenset[tuple[str, str]] = frozenset(scaled)
        self.instance_type = instance_type
        if isinstance(ranks_per_gpu, bool) or not isinstance(ranks_per_gpu, int) or ranks_per_gpu < 1:
            raise TopologyError(
                f"expected ranks per GPU as an integer >= 1, got {ranks_per_gpu!r}", field="ranks_per_gpu"
            )
        self.ranks_per_gpu = ranks_per_gpu
        self._route_cache: dict[tuple[str, str, frozenset[str] | None], list[Link] | None] = {}
        self._onward_cache: dict[str, list[tuple[str, Link]]] = {}
        self._class_cache: dict[tuple[str, str], str] = {}  # path_class by device pair (the graph is not changed)
        self._slots_cache: dict[int, list[str]] = {}  # nic_slots by node
        self._index: dict[tuple[str | None, int | None], list[Device]] = {}
        self._sorted: list[Device] = sorted(
            (d["device"] for _, d in graph.nodes(data=True)),
            key=lambda d: (d.node, _KIND_ORDER.get(d.kind, 99), d.index, d.name),
        )

    def replaced(self, graph: nx.DiGraph | None = None, **changes: Any) -> Topology:
        """A topology like this one over ``graph`` (default: the same graph) with the constructor arguments in
        ``changes`` replaced (e.g. ``background=...``); every other argument is carried over."""
        kwargs: dict[str, Any] = {
            "nodes": self.nodes, "params": self.params, "source_file": self.source_file, "fabric": self.fabric,
            "nic_substitutes": self.nic_substitutes, "background": self.background, "scaled": self.scaled,
            "instance_type": self.instance_type, "ranks_per_gpu": self.ranks_per_gpu,
        }  # fmt: skip
        unknown = set(changes) - set(kwargs)
        if unknown:
            raise TypeError(f"Topology.replaced: unknown argument(s) {', '.join(sorted(unknown))}")
        kwargs.update(changes)
        return Topology(self.name, self.graph if graph is None else graph, **kwargs)

    def restricted(self, gpus: Collection[str], *, all_nics: bool = False) -> Topology:
        """The topology a communicator over ``gpus`` sees: every other GPU and its links left out, the NICs,
        switches and CPUs kept. NCCL builds its topology from the communicator's own GPUs (each rank detects its GPU
        and the local ranks' XMLs are fused; the NICs are all detected: ``src/graph/topo.cc`` v2.30.7-1 lines
        1800-1803 and 1896), so a sub-communicator such as HSDP's group of one GPU per node plans as on a cluster of
        those GPUs. Of each node's NICs only those within P2C of a kept GPU stay, where there are any: NCCL's search
        takes farther ones only when the nearer give no solution (``ncclTopoCompute`` relaxes ``typeInter`` past
        PXN only without a channel), and PXN needs another of the communicator's GPUs near the NIC. Nodes without a
        kept GPU are left out and the others renumbered 0, 1, ... in order (``n3/gpu0`` of a group on nodes 1 and 3
        is ``n1/gpu0`` in its view), as NCCL numbers a communicator's nodes among its own ranks; a group on one node
        is a one-node topology, without the fabric.

        Parameters
        ----------
        gpus : collection of str
            GPU device names (``"n0/gpu3"``), at least one.
        all_nics : bool
            Keep every NIC: Gloo's view, whose sockets and verbs contexts pick among all of a node's NICs as they do
            on the whole cluster (the host's route, the nearest RDMA NIC), not by NCCL's search.

        Raises
        ------
        TopologyError
            A name that is not a GPU of this topology, or none given.
        """
        keep = set(gpus)
        if not keep:
            raise TopologyError("a sub-communicator needs at least one GPU")
        mine = {d.name for d in self.gpus()}
        unknown = sorted(keep - mine)
        if unknown:
            raise TopologyError(f"not GPUs of topology {self.name!r}: {', '.join(unknown[:4])}")
        nodes = sorted({self.device(g).node for g in keep})
        far: set[str] = set()  # the NICs NCCL's search would not take for these GPUs (:meth:`far_nics`)
        for node in nodes if not all_nics else ():
            far.update(self.far_nics(node, [g for g in keep if self.device(g).node == node]))
        one = len(nodes) == 1
        gone = {n for n, d in self.graph.nodes(data=True)  # other nodes' devices; the fabric's too for one node
                if d["device"].node not in nodes and (one or d["device"].node >= 0)}  # fmt: skip
        graph = self.graph.copy()
        graph.remove_nodes_from((mine - keep) | far | gone)
        subs = {k: v for k, v in self.nic_substitutes.items() if v[1] in graph}
        if nodes == list(range(self.nodes)):
            return self.replaced(graph, nic_substitutes=subs)
        number = {old: new for new, old in enumerate(nodes)}

        def name(old: str) -> str:  # by the name's node prefix: a NIC taken down is no longer in the graph
            head, sep, rest = old.partition("/")
            if sep and head[:1] == "n" and head[1:].isdigit() and int(head[1:]) in number:
                return f"n{number[int(head[1:])]}/{rest}"
            return old

        def moved(dev: Device) -> Device:
            return dev if dev.node < 0 else dataclasses.replace(dev, name=name(dev.name), node=number[dev.node])

        renamed: nx.DiGraph = nx.DiGraph()
        for n, data in graph.nodes(data=True):
            renamed.add_node(name(n), **{**data, "device": moved(data["device"])})
        for u, v, data in graph.edges(data=True):
            ln = data["link"]
            renamed.add_edge(name(u), name(v), **{**data, "link": dataclasses.replace(ln, src=name(u), dst=name(v))})
        return self.replaced(
            renamed,
            nodes=len(nodes),
            fabric=None if one else self.fabric,
            nic_substitutes={name(k): (moved(d), name(sub)) for k, (d, sub) in subs.items()},
            background=[(name(a), name(b), r) for a, b, r in self.background if graph.has_edge(a, b)],
            scaled=[(name(a), name(b)) for a, b in self.scaled if graph.has_edge(a, b)],
        )

    def shared(
        self,
        links: Mapping[tuple[str, str], int] | None = None,
        memory: Mapping[str, int] | None = None,
        cores: Mapping[int, int] | None = None,
    ) -> Topology:
        """The share of this topology one of k identical communicators gets while the others run the same
        collective at the same time (HSDP's replica groups, one per local rank, all-reducing together): each listed
        directed link's bandwidth, CPU socket's memory bandwidth and node's cores divided by its k, as the engine's
        max-min fair sharing divides a resource among k equal flows that each could fill it. Links stay unmarked
        (not :attr:`scaled`): the sharing is the same on every node, not a perturbation.

        Parameters
        ----------
        links : mapping of (str, str) to int, optional
            Directed link ``(src, dst)`` to k >= 1, the communicators crossing it.
        memory : mapping of str to int, optional
            CPU socket device name to k: its ``memory_bandwidth`` (bytes/s) divided by k.
        cores : mapping of int to int, optional
            Node index to k: the ``cores`` of each of its CPU sockets divided by k.

        Raises
        ------
        TopologyError
            A link or CPU that is not in this topology, or a k below 1.

        Examples
        --------
        >>> from collsim.topology import load_topology
        >>> topo = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized"})
        >>> half = topo.shared(links={("n0/nic0", "fabric/rail0"): 2})
        >>> half.link("n0/nic0", "fabric/rail0").bandwidth / topo.link("n0/nic0", "fabric/rail0").bandwidth
        0.5
        """
        graph = self.graph.copy()
        for (u, v), k in (links or {}).items():
            if not graph.has_edge(u, v):
                raise TopologyError(f"no link {u} -> {v} to share in topology {self.name!r}")
            ln = graph.edges[u, v]["link"]
            graph.edges[u, v]["link"] = dataclasses.replace(ln, bandwidth=ln.bandwidth / _share_count(k))
        per_cpu: dict[str, dict[str, float]] = {}
        for socket, k in (memory or {}).items():
            if self.device(socket).kind != "cpu":
                raise TopologyError(f"{socket!r} is not a CPU socket of topology {self.name!r}")
            bw = float(self.device(socket).spec["memory_bandwidth"])
            per_cpu.setdefault(socket, {})["memory_bandwidth"] = bw / _share_count(k)
        for node, k in (cores or {}).items():
            for cpu in self.devices("cpu", node):
                per_cpu.setdefault(cpu.name, {})["cores"] = float(cpu.spec["cores"]) / _share_count(k)
        for name, changes in per_cpu.items():
            dev = self.device(name)
            graph.nodes[name]["device"] = dataclasses.replace(dev, spec=FrozenMap({**dev.spec, **changes}))
        return self.replaced(graph)

    def __repr__(self) -> str:
        return (
            f"Topology({self.name!r}, nodes={self.nodes}, devices={self.graph.number_of_nodes()}, "
            f"links={self.graph.number_of_edges()})"
        )

    # ---------------------------------------------------------------------------------------------- lookups
    def device(self, name: str) -> Device:
        """Return the device called ``name`` (e.g. ``"n0/gpu3"``).

        Raises
        ------
        TopologyError
            When no such device exists; the message suggests close names.
        """
        try:
            dev: Device = self.graph.nodes[name]["device"]
        except KeyError:
            known = [d.name for d in self._sorted]
            local = name.split("/")[-1]
            hint = [n for n in known if n.endswith("/" + local)][:4] or known[:6]
            raise TopologyError(f"no device {name!r} in topology {self.name!r}; e.g. {', '.join(hint)}") from None
        return dev

    def devices(self, kind: str | None = None, node: int | None = None) -> list[Device]:
        """Return devices, optionally of one kind and/or node, sorted by (node, kind, index)."""
        index = self._index
        if not index:  # built on first use: (kind, node) -> devices, in the sorted order (one scan, not one per call)
            for d in self._sorted:
                for key in ((None, None), (d.kind, None), (None, d.node), (d.kind, d.node)):
                    index.setdefault(key, []).append(d)
        return list(index.get((kind, node), ()))

    def gpus(self) -> list[Device]:
        """Return all GPUs in global rank order (node-major, then local index)."""
        return self.devices("gpu")

    def rank_devices(self) -> list[Device]:
        """Return one device per rank: the GPUs when there are any, else CPU process slots.

        Returns
        -------
        list[Device]
            GPUs in rank order, each :attr:`ranks_per_gpu` times in a row; for a CPU-only topology,
            ``params["processes"]`` entries per node (default one per socket), each the CPU socket Device that process
            runs on (block distribution over sockets).
        """
        gpus = self.gpus()
        if gpus:
            k = self.ranks_per_gpu
            return gpus if k == 1 else [g for g in gpus for _ in range(k)]
        out: list[Device] = []
        for node in range(self.nodes):
            cpus = self.devices("cpu", node)
            if not cpus:
                continue
            procs = int(self.params.get("processes", len(cpus)))
            out.extend(cpus[p * len(cpus) // procs] for p in range(procs))
        return out

    def nics(self, node: int | None = None) -> list[Device]:
        """Return NICs (of one node, or all) sorted by (node, index)."""
        return self.devices("nic", node)

    def far_nics(self, node: int, gpus: Sequence[str] | None = None) -> list[str]:
        """The NICs of ``node`` NCCL's network search leaves out for ``gpus`` (default: the node's GPUs): those
        farther than P2C from every one of them, where some NIC is within P2C of one (else none: NCCL then takes
        what it finds farther). ``ncclTopoCompute`` (src/graph/search.cc) relaxes ``typeInter`` past PATH_PXN only
        while it has no channel, ``ncclTopoSelectNets`` lists a GPU's NICs by path type, and PXN reaches a NIC only
        through another GPU near it; so a storage NIC on the CPU (PHB, NODE or SYS from every GPU) carries none of
        NCCL's channels on a node whose GPUs have NICs on their PCIe switches."""
        gpus = [g.name for g in self.devices("gpu", node)] if gpus is None else list(gpus)
        nics = [n.name for n in self.nics(node)]
        if not gpus:
            return []
        limit = path_class_rank("P2C")
        near = {n for n in nics if min(path_class_rank(self.path_class(g, n)) for g in gpus) <= limit}
        return [n for n in nics if n not in near] if near else []

    def nic_slots(self, node: int) -> list[str]:
        """The NICs NCCL's channels use on ``node``, one per NIC of the healthy node in index order: a NIC taken down
        (:attr:`nic_substitutes`) is replaced by the NIC that carries its channels; without downs, :meth:`nics`,
        less the NICs NCCL's search leaves out (:meth:`far_nics`)."""
        cached = self._slots_cache.get(node)
        if cached is None:
            far = set(self.far_nics(node))
            nics = [(d.index, d.name) for d in self.nics(node) if d.name not in far]
            nics += [(d.index, sub) for d, sub in self.nic_substitutes.values() if d.node == node and sub not in far]
            cached = self._slots_cache[node] = [name for _, name in sorted(nics)]
        return list(cached)

    def perturbed_links(self) -> frozenset[tuple[str, str]]:
        """The directed links whose rate or load a perturbation changed: those ``perturb.links`` slowed
        (:attr:`scaled`; a rule of scale 1 or above slows none), and every link of a NIC that carries the channels
        of a NIC taken down (its port now serves two NICs' channels: :attr:`nic_substitutes`)."""
        out = set(self.scaled)
        for _dev, sub in self.nic_substitutes.values():
            out.update(self.graph.out_edges(sub))
            out.update(self.graph.in_edges(sub))
        return frozenset(out)

    def link(self, src: str, dst: str) -> Link:
        """Return the directed link ``src -> dst``; raises :class:`TopologyError` when they are not adjacent."""
        self.device(src)
        self.device(dst)
        try:
            lk: Link = self.graph.edges[src, dst]["link"]
        except KeyError:
            raise TopologyError(f"no link from {src!r} to {dst!r}") from None
        return lk

    def equal_cost_spines(self, leaf_a: str, leaf_b: str) -> list[str]:
        """Return, by name, the spine switches that join fabric leaves ``leaf_a`` and ``leaf_b`` with a link each way
        they are crossed (``leaf_a -> spine -> leaf_b``): the equal-cost paths a crossing between the two leaves
        spreads over. A spine or uplink taken down (``perturb.down``) has no link and is left out."""
        return sorted(s for s in self.graph.successors(leaf_a) if self.is_spine(s) and self.graph.has_edge(s, leaf_b))

    def is_spine(self, name: str) -> bool:
        """Whether device ``name`` is a fabric spine switch (a leaf-to-leaf crossing's middle hop)."""
        dev: Device = self.graph.nodes[name]["device"]
        return dev.kind == "switch" and dev.spec.get("tier") == "spine"

    def links(self) -> list[Link]:
        """Return every directed link, sorted by (src, dst)."""
        return sorted((d["link"] for _, _, d in self.graph.edges(data=True)), key=lambda lk: (lk.src, lk.dst))

    # ---------------------------------------------------------------------------------------------- routing
    def _search(self, src: str, dst: str, kinds: frozenset[str] | None) -> list[Link] | None:
        key = (src, dst, kinds)
        if key in self._route_cache:
            cached = self._route_cache[key]
            return None if cached is None else list(cached)
        self.device(src)
        self.device(dst)
        result: list[Link] | None
        if src == dst:
            result = []
        else:
            result = None
            g = self.graph
            best: dict[str, tuple[int, int]] = {src: (0, 0)}
            prev: dict[str, str] = {}
            heap: list[tuple[int, int, str]] = [(0, 0, src)]
            dst_dead_end = g.nodes[dst]["device"].kind in NO_TRANSIT_KINDS  # not among _onward's devices
            while heap:
                lat, hops, u = heapq.heappop(heap)
                if (lat, hops) > best[u]:
                    continue
                if u == dst:
                    break
                if u != src and g.nodes[u]["device"].kind in NO_TRANSIT_KINDS:
                    continue
                # only devices a route may pass through, and dst: a GPU or NIC other than dst is a dead end, so
                # leaving it out changes no route, and a fabric switch's thousands of NICs are not scanned
                onward = self._onward(u)
                if dst_dead_end and g.has_edge(u, dst):
                    onward = [*onward, (dst, g.edges[u, dst]["link"])]
                for v, lk in onward:
                    if kinds is not None and lk.kind not in kinds:
                        continue
                    cand = (lat + round(lk.latency * _PS_PER_S), hops + 1)
                    if v not in best or cand < best[v]:
                        best[v] = cand
                        prev[v] = u
                        heapq.heappush(heap, (cand[0], cand[1], v))
            if dst in prev:
                names = [dst]
                while names[-1] != src:
                    names.append(prev[names[-1]])
                names.reverse()
                result = [g.edges[a, b]["link"] for a, b in itertools.pairwise(names)]
        self._route_cache[key] = result
        return None if result is None else list(result)

    def _onward(self, u: str) -> list[tuple[str, Link]]:
        """``u``'s successors a route may pass through (not a GPU or NIC) with their links, sorted by name."""
        found = self._onward_cache.get(u)
        if found is None:
            g = self.graph
            found = self._onward_cache[u] = [
                (v, g.edges[u, v]["link"]) for v in sorted(g.successors(u))
                if g.nodes[v]["device"].kind not in NO_TRANSIT_KINDS
            ]  # fmt: skip
        return found

    def route(self, src: str, dst: str, kinds: Collection[str] | None = None) -> list[Link]:
        """Return the directed links from ``src`` to ``dst`` with minimum total latency (ties: fewest hops).

        Parameters
        ----------
        src, dst : str
            Device names.
        kinds : Collection[str], optional
            Link kinds the route may use (default: all).

        Returns
        -------
        list[Link]
            Hops in order; empty when ``src == dst``. A route never passes through a GPU or a NIC, so a route
            between nodes starts and ends at NICs (or fabric switches).

        Raises
        ------
        TopologyError
            When no such route exists (the message names both devices).
        """
        ks = self._kinds(kinds)
        found = self._search(src, dst, ks)
        if found is None:
            only = f" over {'/'.join(sorted(ks))} links" if ks is not None else ""
            raise TopologyError(f"no route from {src!r} to {dst!r}{only} (routes never pass through a GPU or a NIC)")
        return found

    @staticmethod
    def _kinds(kinds: Collection[str] | None) -> frozenset[str] | None:
        if kinds is None:
            return None
        ks = frozenset(kinds)
        bad = sorted(ks - set(LINK_KINDS))
        if bad:
            raise TopologyError(f"unknown link kind(s) {', '.join(bad)}; valid kinds: {', '.join(LINK_KINDS)}")
        return ks

    def nvlink_route(self, a: str, b: str) -> list[Link] | None:
        """Return the GPU-to-GPU route over NVLink/NVSwitch only (never through another GPU), or None."""
        if a == b:
            return []
        return self._search(a, b, frozenset({"nvlink"}))

    def hosts_per_node(self) -> int:
        """The hosts (operating systems) a node's ranks run on: 1, or, where a node template holds several hosts
        joined only by NVLink (a GB200 NVL72 rack's compute trays), the groups of its rank devices that host links
        (PCIe, socket links, NVLink-C2C) join."""
        groups: list[str] = []  # one device of each host found
        for dev in dict.fromkeys(d.name for d in self.rank_devices() if d.node == 0):
            if not any(self._same_host(first, dev) for first in groups):
                groups.append(dev)
        return max(1, len(groups))

    def _same_host(self, a: str, b: str) -> bool:
        """Whether host links join ``a`` and ``b`` (:meth:`pcie_route` finds a route)."""
        try:
            self.pcie_route(a, b)
        except TopologyError:
            return False
        return True

    def pcie_route(self, a: str, b: str) -> list[Link]:
        """Return the route over the host's links only: PCIe, inter-socket links and NVLink-C2C (a Grace CPU's own
        GPU), through PCIe switches and CPU sockets."""
        return self.route(a, b, kinds=_HOST_KINDS)

    def host_cpu(self, dev: str) -> Device:
        """Return the CPU socket whose PCIe tree holds ``dev`` (its root complex, or the Grace CPU a GPU's
        NVLink-C2C joins); a CPU returns itself.

        Raises
        ------
        TopologyError
            When ``dev`` hangs off no CPU over PCIe (e.g. a fabric switch).
        """
        start = self.device(dev)
        if start.kind == "cpu":
            return start
        seen = {dev}
        frontier = [dev]
        while frontier:
            nxt: list[str] = []
            for u in frontier:
                if u != dev and self.graph.nodes[u]["device"].kind in NO_TRANSIT_KINDS:
                    continue
                for v in sorted(self.graph.successors(u)):
                    if v in seen or self.graph.edges[u, v]["link"].kind not in UNDER_CPU_KINDS:
                        continue
                    seen.add(v)
                    vdev: Device = self.graph.nodes[v]["device"]
                    if vdev.kind == "cpu":
                        return vdev
                    nxt.append(v)
            frontier = sorted(nxt)
        raise TopologyError(f"device {dev!r} is not attached to any CPU socket over PCIe")

    # ---------------------------------------------------------------------------------------------- path classes
    def _pcie_class(self, a: str, b: str) -> str:
        hops = self._search(a, b, _HOST_KINDS)
        if hops is None:  # separate hosts of one NVLink domain (a GB200 NVL72 rack's compute trays)
            return "NET"
        names = [a] + [lk.dst for lk in hops]
        kinds = [self.graph.nodes[n]["device"].kind for n in names]
        cpus = kinds.count("cpu")
        if cpus >= 2 or any(lk.kind == "upi" for lk in hops):
            return "SYS"
        if cpus == 1:
            return "PHB"
        return "PXB" if kinds.count("pcie_switch") > 1 else "PIX"

    def _c2c_class(self, a: str, b: str) -> str | None:
        """NCCL's class of a path through one CPU that starts or ends on a GPU's NVLink-C2C: ``"C2C"`` between the
        GPU and its CPU, ``"P2C"`` between the GPU and a NIC under that CPU (paths.cc mergePathType: PHB joined to
        C2C; v2.30.7-1 lines 203-208); None for any other path (two GPUs through their CPUs stay PHB)."""
        hops = self._search(a, b, _HOST_KINDS) or []
        ends = {self.device(a).kind, self.device(b).kind}
        if not hops or "gpu" not in ends or ends == {"gpu"}:
            return None
        gpu_link = hops[0] if self.device(a).kind == "gpu" else hops[-1]
        if gpu_link.kind != "c2c":
            return None
        return "C2C" if "cpu" in ends else ("P2C" if "nic" in ends else None)

    def _nvb(self, a: str, b: str) -> bool:
        da, db = self.device(a), self.device(b)
        if da.kind != "gpu" or db.kind != "gpu":
            return False
        for mid in self.devices("gpu", da.node):
            if mid.name in (a, b):
                continue
            if self.nvlink_route(a, mid.name) and self.nvlink_route(mid.name, b):
                return True
        return False

    def path_type(self, a: str, b: str) -> str:
        """Return the connection type between two devices as ``nvidia-smi topo -m`` prints it.

        Returns
        -------
        str
            ``"X"`` (same device), ``"NV{n}"`` (NVLink, direct or through NVSwitch; n = NVLinks bonded, the
            smallest count along the route), ``"PIX"`` (one PCIe switch), ``"PXB"`` (several PCIe switches, no
            host bridge), ``"PHB"`` (through one CPU root complex; ``nvidia-smi`` prints ``NODE`` when the two
            sit under different root ports of one socket, which collsim does not tell apart), ``"SYS"`` (across
            CPU sockets) or ``"NET"`` (different nodes, a fabric device, or two devices of one node without any
            PCIe path between them: different hosts of a rack-scale NVLink domain).
        """
        if a == b:
            self.device(a)
            return "X"
        da, db = self.device(a), self.device(b)
        if da.node != db.node or da.node < 0:
            return "NET"
        if da.kind == "gpu" and db.kind == "gpu":
            nv = self.nvlink_route(a, b)
            if nv:
                return f"NV{min(lk.count for lk in nv)}"
        return self._pcie_class(a, b)

    def path_class(self, a: str, b: str) -> str:
        """Return NCCL's path class: as :meth:`path_type` but ``"LOC"`` for ``"X"``, ``"NVL"`` for ``"NV{n}"``, and
        ``"NVB"`` when two GPUs reach each other over NVLink only through a third GPU."""
        found = self._class_cache.get((a, b))
        if found is not None:
            return found
        pt = self.path_type(a, b)
        if pt == "X":
            pt = "LOC"
        elif pt.startswith("NV"):
            pt = "NVL"
        elif pt != "NET" and self._nvb(a, b):
            pt = "NVB"
        elif pt == "PHB":
            pt = self._c2c_class(a, b) or pt
        self._class_cache[(a, b)] = pt
        return pt

    def p2p_supported(self, a: str, b: str) -> bool:
        """Return True when GPUs ``a`` and ``b`` can do CUDA peer-to-peer.

        Both must be GPUs of the same node whose spec has ``p2p: true``, and the template parameter ``p2p`` must
        not be false. (Whether NCCL *uses* P2P at a given path class is the backend's decision.)
        """
        da, db = self.device(a), self.device(b)
        if da.kind != "gpu" or db.kind != "gpu" or da.node != db.node:
            return False
        if self.params.get("p2p") is False:
            return False
        return bool(da.spec.get("p2p")) and bool(db.spec.get("p2p"))

    def nearest_nic(self, gpu: str) -> Device | None:
        """Return the NIC of the same node with the best path class from ``gpu`` (ties: lowest index), or None."""
        dev = self.device(gpu)
        nics = self.nics(dev.node)
        if not nics:
            return None
        return min(nics, key=lambda n: (path_class_rank(self.path_class(gpu, n.name)), n.index))

    def summary(self) -> list[tuple[str, int, float]]:
        """Return, per link kind present, (kind, number of directed links, total bytes/s over them)."""
        count: dict[str, int] = {}
        total: dict[str, float] = {}
        for lk in self.links():
            count[lk.kind] = count.get(lk.kind, 0) + 1
            total[lk.kind] = total.get(lk.kind, 0.0) + lk.bandwidth
        return [(k, count[k], total[k]) for k in LINK_KINDS if k in count]
