"""The contract every NCCL algorithm module follows, and what they share.

An algorithm (Ring, Tree, NVLS, ...) is one module under :mod:`collsim.backends.nccl.algos` with one
:class:`NcclAlgorithm` subclass registered in :data:`collsim.backends.nccl.algos.REGISTRY`. It says:

* which protocols it offers for a collective on a plan (:meth:`NcclAlgorithm.protocols`) and why NCCL would refuse
  it when forced (:meth:`~NcclAlgorithm.refusal`);
* its time in NCCL's cost model (:meth:`~NcclAlgorithm.model`: latency and algorithm bandwidth, tuning.cc);
* the roles it builds for a simulation (:meth:`~NcclAlgorithm.build`: per (channel, rank) entity, the flows it
  sends, their resources, latency and cap, the relations between entities and a typed structure per entity);
* the SimPy processes it launches for one representative entity (:meth:`~NcclAlgorithm.launch`).

The simulation driver (:mod:`collsim.backends.nccl.simulate`) owns everything else: the choice, the chunking, the
symmetry quotient, the clock and the breakdown.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Generator, Hashable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

import simpy
from simpy.events import Event

from collsim.algorithms import EventBoard, RingChunking, SendThen, connection_slots
from collsim.backends.common import ResourceCatalog
from collsim.backends.nccl.chunking import ring_steps
from collsim.backends.nccl.constants import NcclConstants
from collsim.backends.nccl.plan import Hop, NcclPlan, hop_between
from collsim.backends.nccl.tags import LAUNCH_TAG, STRAGGLER_TAG, TRANSPORT_TAG
from collsim.engine import Callback, FluidNetwork, Owner, Quotient, Tag
from collsim.engine.fluid import Route
from collsim.nccl_env import NcclOptions
from collsim.noise import jitter_stream
from collsim.topology import Topology

__all__ = [
    "Launcher",
    "Layout",
    "ModelInputs",
    "NcclAlgorithm",
    "Role",
    "SimContext",
    "entity_owner",
    "mean_message_bytes",
    "node_index",
]

Entity = Hashable
Proc = Generator[Event, Any, None]


def entity_owner(e: Entity, rank_of: Mapping[str, int]) -> Owner:
    """The :class:`~collsim.engine.Owner` of NCCL entity ``e``.

    Entities are ``(channel, device)`` for a rank's channel (ring, tree, NVLS, PAT, CollNet's GPUs, send/recv), a
    bare device name for a rank of all-to-all (every channel at once), and ``("sharp", channel, switch, k)`` for
    CollNet's in-network reducer (not a rank).

    Parameters
    ----------
    e : hashable
        The entity.
    rank_of : mapping of str to int
        Rank device name to rank index (the plan's rank order).

    Examples
    --------
    >>> entity_owner((2, "n0/gpu1"), {"n0/gpu1": 1}).label, entity_owner("n0/gpu1", {"n0/gpu1": 1}).label
    ('rank 1 ch 2', 'rank 1')
    >>> entity_owner(("sharp", 0, "fabric/leaf0", 3), {}).label
    'in-network reducer 3 ch 0 (fabric/leaf0)'
    """
    if isinstance(e, str):
        return Owner(rank_of[e], None, "rank", e)
    if isinstance(e, tuple) and len(e) == 4 and e[0] == "sharp":
        _, channel, switch, k = e
        return Owner(None, int(channel), "in-network reducer", str(switch), index=int(k))
    if isinstance(e, tuple) and len(e) == 2 and isinstance(e[1], str):
        return Owner(rank_of[e[1]], int(e[0]), "rank", e[1])
    raise TypeError(f"not an NCCL entity: {e!r}")


def mean_message_bytes(data: float, step: float) -> float:
    """Mean size of the messages that carry ``data`` bytes in messages of at most ``step`` bytes (bytes): NCCL's proxy
    sends a step at a time (net.cc), so ``data`` goes in ceil(data / step) messages.

    >>> mean_message_bytes(300.0, 128.0), mean_message_bytes(100.0, 128.0)
    (100.0, 100.0)
    """
    return data / max(1, math.ceil(data / step))


def node_index(nnodes: int) -> int:
    """Index into NCCL's per-generation tables, which have one column per node count: 1, 2, 3 or more."""
    return 0 if nnodes <= 1 else (1 if nnodes == 2 else 2)


@dataclass
class Role:
    """What one entity's flows in one role cost: resources with their coefficients (already protocol-scaled), the
    latency each message pays on arrival (seconds), a rate cap (bytes/s) and the flows' declared tag
    (:mod:`collsim.backends.nccl.tags`).

    ``net``: the role crosses the network, where NCCL's proxy forwards one whole step at a time.

    ``post``: seconds the sender's thread block spends after each NCCL step it sends before it can send the next
    (its part of the step's latency, paid serially: see :meth:`SimContext.hop_role`); 0 for roles that pay none.
    """

    uses: list[tuple[Hashable, float]]
    latency: float
    cap: float
    tag: Tag
    net: bool = False
    post: float = 0.0


@dataclass
class Layout:
    """What an algorithm builds for one simulation.

    ``roles``: per entity, its named roles (``"send"``, ``"up"``, ``"down0"`` ...); ``relations``: (entity, label,
    entity) pairs the symmetry quotient must preserve; ``structure``: per entity, the algorithm's own typed links
    (a :class:`Chain`, a tree's parent and children ...), absent when the plan already says everything; ``data``:
    per entity, the bytes its channel handles where channels carry unequal shares (absent: ``SimContext.per_channel``).
    """

    roles: dict[Entity, dict[str, Role]] = field(default_factory=dict)
    relations: list[tuple[Entity, str, Entity]] = field(default_factory=list)
    structure: dict[Entity, Any] = field(default_factory=dict)
    data: dict[Entity, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Chain:
    """An entity of a pipelined chain: its predecessor and successor (None at the ends)."""

    pred: Entity | None
    succ: Entity | None


@dataclass(frozen=True)
class ModelInputs:
    """What NCCL's cost model knows when it prices one (algorithm, protocol) pair (tuning.cc), in SI units.

    ``lat`` starts as baseLat; ``intra`` and ``inter`` are the per-step hwLat inside a node and across nodes
    (the latter with the network's latency, twice for Simple); ``bus`` is what the rings carry per rank;
    ``tree_pattern`` the factor on Tree's bandwidth when NCCL's tree graph has the plain TREE pattern (x0.85 with one
    GPU per node from 2.26: ``tree_pattern_factor`` in nccl.yaml), 1 otherwise; ``nvlstree_corrected`` whether
    NCCL applies the tree correction table to NVLSTree too (Blackwell on x86 hosts, from 2.29); ``older`` the
    formula changes (``tuner_formulas_since`` in nccl.yaml) the run's release predates, whose earlier formula
    prices the pair.
    """

    plan: NcclPlan
    consts: NcclConstants
    collective: str
    nbytes: int
    proto: str
    n: int
    nsteps: int
    ninter: int
    intra: float
    inter: float
    lat: float
    bus: float
    idx: int
    tree_pattern: float = 1.0
    nvlstree_corrected: bool = False
    older: frozenset[str] = frozenset()


@dataclass
class SimContext:
    """Everything an algorithm needs to build its roles for one simulated collective.

    ``nc`` channels of ``per_channel`` bytes each; ``wire`` wire bytes per data byte on every link; ``cap`` one
    channel's rate cap (bytes/s); ``base`` the launch latency every entity pays first (seconds); ``plateau`` the
    factor on a multi-node ring's latency (tuning.cc), 1 otherwise; ``intra_cap`` one channel's cap on its hops
    inside a node where it differs from ``cap`` (LL across nodes: see ``_context`` in ``simulate.py``), else None.
    """

    topo: Topology
    plan: NcclPlan
    opts: NcclOptions
    consts: NcclConstants
    collective: str
    nbytes: int
    algo: str
    proto: str
    nc: int
    chunking: RingChunking
    wire: float
    cap: float
    base: float
    plateau: float
    cat: ResourceCatalog
    intra_cap: float | None = None

    @property
    def max_cap(self) -> float:
        """The fastest any of a channel's hops may stream (bytes/s): ``cap``, or ``intra_cap`` if it is higher."""
        return max(self.cap, self.intra_cap or 0.0)

    @property
    def per_channel(self) -> float:
        """Bytes each channel moves."""
        return self.nbytes / self.nc

    @property
    def n(self) -> int:
        """Ranks."""
        return len(self.plan.ranks)

    @cached_property
    def rank_of(self) -> dict[str, int]:
        """Rank device name to rank index."""
        return {name: i for i, name in enumerate(self.plan.ranks)}

    def owner(self, e: Entity) -> Owner:
        """The owner of entity ``e``'s flows (:func:`entity_owner`)."""
        return entity_owner(e, self.rank_of)

    @cached_property
    def _launch_delay(self) -> dict[int, float]:
        """Rank index to its straggler delay (``opts.launch_delay``), seconds."""
        return dict(self.opts.launch_delay)

    def late(self, e: Entity) -> float:
        """Seconds entity ``e`` launches late: its rank's straggler delay, else 0."""
        if not self._launch_delay:
            return 0.0
        rank = self.owner(e).rank
        return self._launch_delay.get(rank, 0.0) if rank is not None else 0.0

    def hop(self, a: str, b: str, channel: int) -> Hop:
        """The hop from ``a`` to ``b`` on ``channel``'s NIC rails."""
        plan, topo = self.plan, self.topo
        na, nb = topo.device(a).node, topo.device(b).node
        return self.hop_via(a, b, plan.nic_for(topo, na, channel), plan.nic_for(topo, nb, channel))

    def hop_via(self, a: str, b: str, nic_a: str | None, nic_b: str | None) -> Hop:
        """The hop from ``a`` to ``b``, across nodes from ``nic_a`` to ``nic_b``."""
        return hop_between(self.topo, self.cat, a, b, nic_a, nic_b, self.opts, self.consts, self.plan.fabric)

    def hop_cap(self, hop: Hop) -> float:
        """One channel's rate cap on ``hop`` (bytes/s): ``intra_cap`` inside a node where it is set, else ``cap``."""
        return self.intra_cap if self.intra_cap is not None and hop.hw != "NET" else self.cap

    def net_message_bytes(self, share: float = 1.0) -> float:
        """Mean data bytes of this algorithm's network messages on one connection (the mean gives per-message costs
        their exact total). NCCL's proxy posts one network send per slice of a step (net.cc sendProxyProgress:
        ``transmitted += sliceSteps``). A ring step carries a rank's chunk of a loop, ``per_channel / (n x
        loops)`` (the last loop's is smaller), Simple's in its slices; any other connection (a tree's, a chain's,
        NVLSTree's with ``share``, a head's part of every step) carries its bytes in steps of at most one chunk
        (a merged chunk stands for ``steps_per_post`` of them).

        >>> from types import SimpleNamespace as NS
        >>> ring = NS(algo="Ring", proto="LL128", collective="allreduce", nbytes=64 << 20, nc=16, n=32,
        ...           chunking=NS(chunk_bytes=576000.0, steps_per_post=1.0, slices_per_chunk=16))
        >>> SimContext.net_message_bytes(ring)  # type: ignore[arg-type]  # 4 MiB a channel: one partial loop
        131072.0
        >>> tree = NS(algo="Tree", proto="LL128", collective="allreduce", nbytes=32 << 20, nc=16, n=128,
        ...           chunking=NS(chunk_bytes=72000.0, steps_per_post=1.0, slices_per_chunk=2))
        >>> round(SimContext.net_message_bytes(tree), 1)  # 2 MiB in 30 steps  # type: ignore[arg-type]
        69905.1
        """
        ch = self.chunking
        step = ch.chunk_bytes / max(ch.steps_per_post, 1.0)  # one NCCL step
        per_channel = self.nbytes / self.nc
        if self.algo == "Ring" and ring_steps(self.collective, self.n):
            loops = max(1, math.ceil(per_channel / (self.n * step)))
            slices = ch.slices_per_chunk if self.proto == "Simple" else 1
            return per_channel / (self.n * loops * slices)
        return mean_message_bytes(per_channel * share, step * share)

    def hop_role(
        self, hop: Hop, table: str | None = None, cap: float | None = None, message_bytes: float | None = None
    ) -> Role:
        """A role sending over ``hop``: the hop's path with the protocol's wire overhead, the per-step latency of
        NCCL's table ``table`` (default: this algorithm's) for the hop's class, capped by one channel and the hop.

        NCCL's hwLat is the whole latency of one hop as NVIDIA measured it, the links' and switches' traversal
        included: its cost model adds to it only what the net plugin reports (``latencyInter``, tuning.cc; 0 for
        NCCL's IB and socket transports, net_ib/init.cc and net_socket.cc). So the hop's own path latency (twice
        over the network for Simple where NCCL flushes a GPUDirect RDMA receive: ``plan.gdr_flush``, before Hopper
        or with NCCL_NET_FORCE_FLUSH=1; and on host-staged network hops, as before) is not added on top: it is a
        floor, charged instead of hwLat only where it is longer (a software-heavy NIC path such as EFA's, whose
        link preset carries it).

        A multi-node ring's steps inside a node cost at least netOverhead (x3 for Simple), as tuning.cc charges.

        A ring's (or point-to-point's) network crossing pays the Tree row's NET latency, the figure NCCL calls "fully
        exposed" (tuning.cc from 2.23: "With ppn=1 latencies are fully exposed, use the Tree network latency"): the
        Ring row (LL 2.7, LL128 4.0 us against the Tree's 5.0 and 8.5) belongs to NCCL's closed form, which counts
        nNodes - 1 crossings for an all-gather whose slowest chain of n - 1 steps crosses all nNodes node boundaries;
        the simulation plays out each crossing, exposed. A crossing is the same GPU -> proxy -> NIC -> NIC -> GPU
        path whichever algorithm sends it.

        A network message occupies each NIC port of ``hop.per_message`` for its time beyond its bytes: a port of
        capacity C spends ``t x C / m`` more per data byte on messages of ``m`` data bytes (``message_bytes``, by
        default :meth:`net_message_bytes`), so small messages reach a fraction ``m / (m + t C)`` of the port.

        Inside a node (NVLink, PCIe) the per-step hwLat is the sender's own work after it has written a step: the
        thread block's barrier, the system fence and the flag store that tell the receiver the step is there
        (NCCL's primitives post one step at a time; the next step's copy waits for it). So the sender pays it
        serially, ``post`` (the data arrive when the flag does: ``latency`` counts it too). Across the network
        the GPU hands the step to the proxy and goes on; the network hop's hwLat is paid on arrival only.
        """
        consts, proto = self.consts, self.proto
        pc = consts.protocols[proto]
        table = table or self.algo
        if hop.hw == "NET" and table == "Ring":
            table = "Tree"  # a crossing's exposed latency (docstring)
        hw_lat = consts.hw_latency[hop.hw][table][proto]
        if table == "Ring" and self.plan.nnodes > 1 and hop.hw != "NET":
            hw_lat = max(hw_lat, self.plan.net_overhead * pc.ring_net_overhead_factor)
        # Simple's data over GPUDirect RDMA is flushed before the GPU reads it where NCCL flushes (plan.gdr_flush)
        flushed = hop.hw == "NET" and (hop.transport != "NET/GDR" or self.plan.gdr_flush)
        prop = hop.path.latency * (pc.net_latency_factor if flushed else 1)
        step = hw_lat * consts.sim_step_latency_scale
        if cap is None:
            cap = self.hop_cap(hop)
        uses = [(k, c * self.wire) for k, c in hop.path.uses]
        if hop.per_message:
            m = message_bytes or self.net_message_bytes()
            extra = {k: t * self.cat.specs[k].capacity / m for k, t in hop.per_message}
            uses = [(k, c + extra.get(k, 0.0)) for k, c in uses]
        return Role(
            uses,
            max(step, prop),
            min(cap, hop.max_rate),
            TRANSPORT_TAG[hop.transport],
            hop.hw == "NET",
            0.0 if hop.hw == "NET" else step,
        )

    def path_role(self, uses: Any, latency: float, tag: Tag, scale: float = 1.0) -> Role:
        """A role over explicit resource uses (coefficients x ``scale``), capped by one channel."""
        return Role([(k, v * scale) for k, v in uses], latency, self.cap, tag)


Send = Callable[[float], tuple[Event, Event]]


@dataclass
class Launcher:
    """What launching needs: the clock, the network, the board, the quotient's representatives and the roles.

    Every process an algorithm starts through :meth:`start` first pays the base latency (NCCL's launch and
    baseLat) as a delay, then runs its body.
    """

    ctx: SimContext
    layout: Layout
    env: simpy.Environment
    net: FluidNetwork
    board: EventBoard
    quotient: Quotient
    reps: list[Entity]
    _jitter: dict[tuple[Entity, str], Callable[[], float]] = field(default_factory=dict)

    def rep(self, e: Entity) -> Entity:
        """The representative simulated for entity ``e``."""
        return self.quotient.rep(e)

    def roles(self, e: Entity) -> Mapping[str, Role]:
        """Entity ``e``'s roles."""
        return self.layout.roles[e]

    def sender(self, e: Entity, role: str) -> Send:
        """``send(nbytes) -> (streamed, arrived)`` for ``e``'s ``role``: a flow on the role's resources (as the
        quotient scales them), capped, paying the role's latency on arrival.

        A role's sends are its slices in order: the slice that ends a step holds the sender for the step's post
        (:attr:`Role.post`; ``RingChunking.slices_per_post``, x ``steps_per_post`` for merged chunks). With
        ``opts.jitter`` every step draws an extra latency (:meth:`jitter`) at its first slice, and its slices arrive
        that much later together (the flag that tells the receiver a step is there is what a late message delays);
        the post is not jittered: the thread block's work is the same, the step arrives later."""
        route, tag, owner, lat, hold, timing = self._prepared(e, role)
        cap = self._alone(e, role)
        net = self.net
        if cap is not None:  # crosses no resource: timed, with the same latency and posts as a flow
            if timing is None:
                return lambda b: net.timed(b / cap, lat, hold)

            def timed(b: float) -> tuple[Event, Event]:
                extra, h = timing(b)
                return net.timed(b / cap, lat + extra, h)

            return timed
        if timing is None:
            return lambda b: net.send(route, b, latency=lat, tag=tag, owner=owner, hold=hold)

        def send_timed(b: float) -> tuple[Event, Event]:
            extra, h = timing(b)
            return net.send(route, b, latency=lat + extra, tag=tag, owner=owner, hold=h)

        return send_timed

    def sender_then(self, e: Entity, role: str) -> SendThen:
        """:meth:`sender` for a callback-driven schedule: ``send(nbytes, on_arrived, arg, on_streamed, arg)`` calls
        ``on_arrived(arg)`` when the slice has arrived and ``on_streamed(arg)`` when the sender is free (the same
        flow, times and order; :meth:`FluidNetwork.send_then`)."""
        route, tag, owner, lat, hold, timing = self._prepared(e, role)
        cap = self._alone(e, role)
        if cap is not None:  # crosses no resource: timed, with the same latency and posts as a flow
            if timing is None:
                return self.net.timed_sender_then(cap, lat, hold)
            timed_then = self.net.timed_then

            def timed(b: float, fa: Callback | None, a: Any, fs: Callback | None, s: Any) -> None:
                extra, h = timing(b)
                timed_then(b / cap, lat + extra, h, fa, a, fs, s)

            return timed
        if timing is None:
            return self.net.sender_then(route, lat, hold, tag, owner)
        send_then = self.net.send_then

        def send(b: float, fa: Callback | None, a: Any, fs: Callback | None, s: Any) -> None:
            extra, h = timing(b)
            send_then(route, b, lat + extra, h, tag, owner, fa, a, fs, s)

        return send

    def _alone(self, e: Entity, role: str) -> float | None:
        """The cap of ``e``'s ``role`` when it crosses no resource (a GPU's local copy, bound by its own loads; a
        hop :func:`collsim.engine.decouple` cut loose), else None: such a send streams at its cap whatever else
        happens, so it is timed (:meth:`FluidNetwork.timed`) instead of solved, with the latency and posts of
        :meth:`_prepared`. Not when recording (a trace lists it as a flow) or with jitter (which draws per
        message)."""
        ro = self.layout.roles[e][role]
        if self.quotient.uses(e, role) or self.net.record or self.ctx.opts.jitter > 0 or not 0 < ro.cap < math.inf:
            return None
        return ro.cap

    def _prepared(
        self, e: Entity, role: str
    ) -> tuple[Route, Tag, Owner, float, float, Callable[[float], tuple[float, float]] | None]:
        """What a sender of ``e``'s ``role`` sends on: its route (prepared once), tag, owner, latency per slice
        (a merged ring step pays every merged step's latency, ``RingChunking.latency_steps``), hold per slice and,
        when slices differ (a post after several slices, jitter, an LL/LL128 step cut in pieces), a function giving
        the next slice's extra latency and hold from its bytes instead (None when they are all alike).

        An LL/LL128 step cut in pieces inside a node (:func:`~collsim.backends.nccl.chunking.step_chunking`)
        reaches the receiver's forwarding one grain ``G`` at a time (``ProtocolConstants.forward_grain``: an LL
        thread's line, an LL128 warp's 16-line slice, forwarded once all of it is in): a piece that ends at byte
        ``x`` of its step (pieces sent back to back at the role's cap ``c``) arrives ``(min(ceil(x / G) G, step) -
        x) / c`` after the fluid stream would bring it, when the grain it ends in is complete; the step's last piece
        arrives as before. Over the network the proxy sends whole steps (:meth:`whole`)."""
        ro = self.layout.roles[e][role]
        jitter = self.jitter(e, role)
        ctx = self.ctx
        chunking = ctx.chunking
        route = self.net.route(self.quotient.uses(e, role), ro.cap)
        lat = ro.latency * chunking.latency_steps
        every, hold = chunking.slices_per_post, ro.post * chunking.steps_per_post
        grain = 0.0
        if every > 1 and not ro.net and 0 < ro.cap < math.inf:
            grain = float(ctx.consts.protocols[ctx.proto].forward_grain or 0)
        if jitter is None and not grain and (ro.post <= 0 or every == 1):  # every slice alike: no post, or one a slice
            return route, ro.tag, ctx.owner(e), lat, hold if ro.post > 0 else 0.0, None
        count = itertools.count(0)
        extra = 0.0
        cap = ro.cap

        def timing(b: float) -> tuple[float, float]:
            nonlocal extra
            k = next(count) % every  # the slice's index in its step
            if jitter is not None and k == 0:  # the first slice of a step draws the step's jitter
                extra = jitter()
            late = 0.0
            if grain:
                end = (k + 1) * b  # bytes of the step sent once this slice is (equal slices, back to back)
                late = max(0.0, min(math.ceil(end / grain - 1e-9) * grain, every * b) - end) / cap
            return extra + late, hold if k + 1 == every else 0.0

        return route, ro.tag, ctx.owner(e), lat, 0.0, timing

    def jitter(self, e: Entity, role: str) -> Callable[[], float] | None:
        """The draws of ``e``'s ``role``'s jitter (seconds per step it sends), None without jitter: one stream per
        (entity, role) however often the algorithm asks for the sender, seeded by ``opts.jitter_seed``
        (:func:`collsim.noise.jitter_stream`)."""
        opts = self.ctx.opts
        if opts.jitter <= 0:
            return None
        key = (e, role)
        if key not in self._jitter:
            self._jitter[key] = jitter_stream(opts.jitter, opts.jitter_seed, e, role)
        return self._jitter[key]

    def whole(self, e: Entity, *names: str) -> bool:
        """Whether ``e``'s roles ``names`` forward whole steps: LL/LL128 steps cut in pieces go piece by piece over
        NVLink/PCIe, a whole step at a time over the network (Simple's slices are already one network send each)."""
        roles = self.layout.roles[e]
        return self.ctx.proto != "Simple" and any(roles[nm].net for nm in names if nm in roles)

    def slots(self, e: Entity, name: str) -> int:
        """Slices the connection of ``e``'s role ``name`` holds (:func:`~collsim.algorithms.connection_slots`: the
        chunking's, twice that when the role crosses the network, whose sender has a buffer of its own); the
        chunking's when ``e`` has no such role."""
        role = self.layout.roles[e].get(name)
        return connection_slots(self.ctx.chunking.slots, role is not None and role.net)

    def start(self, e: Entity, body: Proc) -> Event:
        """Start ``body`` for ``e`` after the base latency; returns the process."""
        return self.env.process(self._after_base(e, body))

    def start_machine(self, e: Entity, start: Callable[[], None]) -> Event:
        """Call ``start()`` for ``e`` once the base latency is paid: a callback-driven machine (the ring's, Tree's,
        NVLSTree's, whose senders come from :meth:`sender_then`) then advances on the network's calls and fires
        ``(e, "done")`` on the board itself. Returns the process."""
        return self.start(e, _call(start))

    def done(self, e: Entity) -> Event:
        """The event ``e``'s processes fire when its part is done."""
        return self.board.get(e, "done")

    def _after_base(self, e: Entity, body: Proc) -> Proc:
        owner = self.ctx.owner(e)
        late = self.ctx.late(e)
        if late > 0:  # a straggler launches late, then pays the launch like the others
            yield self.net.delay(late, tag=STRAGGLER_TAG, owner=owner)
        yield self.net.delay(self.ctx.base, tag=LAUNCH_TAG, owner=owner)
        yield from body


def _call(fn: Callable[[], None]) -> Proc:
    """A process body that calls ``fn()`` and ends (for :meth:`Launcher.start_machine`)."""
    fn()
    return
    yield


def channel_device(e: Entity) -> tuple[int, str]:
    """A per-channel entity (rings, trees, NVLS) is ``(channel, device name)``."""
    return cast(tuple[int, str], e)


def streaming_bound(ctx: SimContext, nbytes: float) -> float:
    """Base latency + ``nbytes`` at one channel's fastest cap (seconds): a lower bound for an entity that sends
    ``nbytes`` one send after another (each waits for the previous one to have streamed), each flow capped at
    ``ctx.max_cap`` or below."""
    return ctx.base + nbytes / ctx.max_cap


class NcclAlgorithm:
    """One NCCL algorithm: its candidates, cost model, roles and processes (see the module docstring).

    Subclasses set :attr:`name` (NCCL's name, a key of the tuner tables in ``topologies/software/nccl.yaml``) and
    override what differs from these defaults.
    """

    name: str = ""
    #: its pipelines are a few stages deep: beyond ``sim_max_chunks`` chunks per channel, chunks may be merged
    mergeable: bool = False
    #: the tuner table (``base_latency``, ``hw_latency``) this algorithm's rows are under, when not its own name
    table: str = ""
    #: NCCL hands its data to channels in cells from 2.23 (:func:`~collsim.backends.nccl.chunking.cell_channel_count`;
    #: enqueue.cc's Ring/Tree path), on top of the small-size shrink
    cell_scheduled: bool = False

    @property
    def latency_table(self) -> str:
        """The rows of NCCL's ``base_latency`` and ``hw_latency`` tables this algorithm is priced by."""
        return self.table or self.name

    def protocols(self, plan: NcclPlan, opts: NcclOptions, collective: str) -> tuple[str, ...]:
        """Protocols NCCL could run this algorithm with for ``collective`` here (empty: not a candidate)."""
        return ()

    def refusal(self, plan: NcclPlan, opts: NcclOptions) -> str | None:
        """Why NCCL would refuse this algorithm here when NCCL_ALGO asks for it alone, or None."""
        return None

    def model(self, m: ModelInputs) -> tuple[float, float]:
        """NCCL's cost model: (latency in seconds, algorithm bandwidth in bytes/s); time = latency + bytes/algBw."""
        raise NotImplementedError

    def channels(self, plan: NcclPlan, opts: NcclOptions, consts: NcclConstants) -> int:
        """Channels it runs before NCCL's small-size shrink (default: the plan's)."""
        return plan.channels

    def extra_base_latency(self, plan: NcclPlan, consts: NcclConstants) -> float:
        """Seconds added once to the base latency (NVLS: its hwLat)."""
        return 0.0

    def plateau(self, plan: NcclPlan, consts: NcclConstants, proto: str, collective: str, nbytes: int) -> float:
        """Factor on the simulated base and step latencies (tuning.cc's ring plateau); 1 by default."""
        return 1.0

    def shrinks_channels(self, opts: NcclOptions, consts: NcclConstants) -> bool:
        """Whether small sizes run on fewer channels (:func:`~collsim.backends.nccl.chunking.channels_for`); True by
        default."""
        return True

    def wire_divisor(self, consts: NcclConstants, collective: str, proto: str, nbytes: int) -> float:
        """The link efficiency NCCL's kernels reach (wire bytes per data byte are divided by it); 1 by default."""
        return 1.0

    def min_time(self, ctx: SimContext) -> float:
        """A lower bound on the simulated time, in seconds, without simulating: every entity first pays the base
        latency. Algorithms whose entities stream a known number of bytes one send after another, each at most at
        one channel's cap, add that (:func:`streaming_bound`)."""
        return ctx.base

    def build(self, ctx: SimContext) -> Layout:
        """Roles, relations and structure of every entity."""
        raise NotImplementedError

    def sim_chunking(self, ctx: SimContext, layout: Layout) -> RingChunking:
        """The chunking the simulation runs once the roles are known: ``ctx.chunking``, unless the algorithm can
        prove that fewer pieces per step give the same times (the ring: ``chunking.fewest_pieces``)."""
        return ctx.chunking

    def launch(self, run: Launcher, e: Entity) -> Event | None:
        """Start representative ``e``'s processes; return the event that fires when it is done (None for a
        participant the collective's end does not wait for)."""
        raise NotImplementedError
