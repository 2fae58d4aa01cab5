"""Simulate symmetric ranks and channels once: an exact quotient of the fluid model.

Many collectives on regular hardware are symmetric: the 8 ranks of a ring on an NVSwitch box, or the 24 channels
that cross the same links, all see the same conditions at the same time. Simulating one representative of each such
class and scaling its load on the shared resources gives the same times as simulating all of them, provided the
partition of entities (ranks or (channel, rank) pairs) and resources is *equitable*:

* every member of an entity class F crosses, in every role, the same total coefficient of resources of each resource
  class O, and every resource of O carries the same total coefficient from each entity class in every role;
* all resources of a class have the same capacity and kind, all entities of a class the same colour (same bytes,
  caps, latencies, as the caller declares), and related entities (ring predecessor, successor) fall in consistent
  classes.

Then progressive filling keeps rates constant on classes (all members rise and freeze together) and the dependency
structure is class-consistent, so every member of a class has the same timeline as its representative. The partition
is computed by colour refinement (1-dimensional Weisfeiler-Leman) from the declared colours; it is the coarsest
equitable partition refining them, so no symmetry is assumed that the data does not show.

In the quotient a representative of F using resource class O in a role carries coefficient ``m * |F| / |O|``, where
``m`` is its own coefficient summed over the members of O it crosses; the engine resource standing for O has one
member's capacity. That coefficient is kept exact (:class:`collsim.engine.filling.ExactCoef`), and both fillings sum
a resource's weights exactly and round once, so the weight of O's engine resource is the float a member of O gets
from its members' rows without symmetry: the quotient's rates are the full run's bit for bit, not only to rounding
(rounding differences that a pipeline's dynamics amplify, 1e-3 after 20,000 events on one case before both were
exact, docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from collsim.engine.filling import EXACT_SCALE, ExactCoef, exact, units
from collsim.engine.fluid import FluidNetwork, Resource

__all__ = ["Decoupling", "Quotient", "ResourceSpec", "build_quotient", "decouple", "refine"]

Entity = Hashable
ResKey = Hashable
Usage = Mapping[Entity, Mapping[str, Sequence[tuple[ResKey, float]]]]


@dataclass(frozen=True)
class ResourceSpec:
    """A resource before the quotient: ``capacity`` in units/s, ``kind`` and printable ``name``."""

    name: str
    capacity: float
    kind: str


def _key(x: object) -> str:
    return repr(x)


def refine(
    usage: Usage,
    resources: Mapping[ResKey, ResourceSpec],
    colors: Mapping[Entity, Hashable],
    relations: Iterable[tuple[Entity, str, Entity]] = (),
) -> tuple[dict[Entity, int], dict[ResKey, int]]:
    """Coarsest equitable partition of entities and resources refining the given colours.

    Parameters
    ----------
    usage : mapping
        ``usage[entity][role]`` = sequence of ``(resource key, coefficient)``.
    resources : mapping
        Every resource key used, with its spec (capacity and kind are part of its initial colour).
    colors : mapping
        Initial colour of every entity (anything hashable: sizes, caps, latencies it will use).
    relations : iterable of (a, label, b)
        Directed relations between entities (e.g. ``(rank, "pred", predecessor)``).

    Returns
    -------
    (dict, dict)
        Entity -> class number, resource key -> class number.

    Examples
    --------
    A ring of 4 ranks, each sending over its own identical link: one class of ranks, one of links.

    >>> res = {i: ResourceSpec(f"l{i}", 1e9, "nvlink") for i in range(4)}
    >>> use = {r: {"send": [(r, 1.0)]} for r in range(4)}
    >>> ent, rc = refine(use, res, {r: 0 for r in range(4)}, [(r, "pred", (r - 1) % 4) for r in range(4)])
    >>> len(set(ent.values())), len(set(rc.values()))
    (1, 1)
    """
    # adjacency with labels
    adj: dict[tuple[str, Hashable], list[tuple[str, tuple[str, Hashable]]]] = {}
    for ent, roles in usage.items():
        enode = ("e", ent)
        adj.setdefault(enode, [])
        for role, uses in roles.items():
            agg: dict[ResKey, float] = {}
            for rk, coef in uses:
                agg[rk] = agg.get(rk, 0.0) + coef
            for rk, coef in agg.items():
                label = f"{role}:{coef:.12g}"
                rnode = ("r", rk)
                adj[enode].append((label, rnode))
                adj.setdefault(rnode, []).append((label, enode))
    for ent in colors:
        adj.setdefault(("e", ent), [])
    for a, label, b in relations:
        adj.setdefault(("e", a), []).append((label, ("e", b)))
        adj.setdefault(("e", b), []).append((label + "^-1", ("e", a)))
    init: dict[tuple[str, Hashable], str] = {}
    for node in adj:
        if node[0] == "e":
            init[node] = "E" + _key(colors.get(node[1]))
        else:
            spec = resources[node[1]]
            init[node] = f"R{spec.kind}:{spec.capacity:.12g}"
    final = _refine_arrays(list(adj), adj, init)
    color = dict(zip(adj, final, strict=True))
    ent_class = {n[1]: c for n, c in color.items() if n[0] == "e"}
    res_class = {n[1]: c for n, c in color.items() if n[0] == "r"}
    return ent_class, res_class


def _refine_arrays(
    nodes: list[tuple[str, Hashable]],
    adj: Mapping[tuple[str, Hashable], Sequence[tuple[str, tuple[str, Hashable]]]],
    init: Mapping[tuple[str, Hashable], str],
) -> list[int]:
    """The refinement loop of :func:`refine` over integer arrays: each round, a node's new colour is its colour and
    the sorted multiset of (edge label, neighbour colour) codes; stop when a round splits no class.

    A round sorts every edge by (node, code) once (``numpy.lexsort``) and compares each node's run of codes as
    bytes: exact, no hashing, so two nodes get one colour only when their signatures are equal. Codes are written
    big-endian, so the byte order of signatures is their numeric order and the numbering is deterministic.
    """
    index = {n: i for i, n in enumerate(nodes)}
    labels = {lab: i for i, lab in enumerate(sorted({lab for nbrs in adj.values() for lab, _ in nbrs}))}
    src = np.fromiter((index[n] for n in nodes for _ in adj[n]), dtype=np.int64)
    lab = np.fromiter((labels[la] for n in nodes for la, _ in adj[n]), dtype=np.int64)
    dst = np.fromiter((index[nb] for n in nodes for _, nb in adj[n]), dtype=np.int64)
    palette = {c: i for i, c in enumerate(sorted(set(init.values())))}
    color = np.fromiter((palette[init[n]] for n in nodes), dtype=np.int64, count=len(nodes))
    count = len(palette)
    # edges of node i are src's run [start[i], end[i]) once sorted by src (lexsort keeps src ascending)
    degree = np.bincount(src, minlength=len(nodes))
    end = np.cumsum(degree)
    start = end - degree
    while True:
        code = lab * count + color[dst]  # < len(labels) * len(nodes): no overflow in int64
        order = np.lexsort((code, src))
        buf = code[order].astype(">i8").tobytes()
        own = color.tolist()
        bounds = zip(start.tolist(), end.tolist(), strict=True)
        sigs = [(own[i], buf[8 * a : 8 * b]) for i, (a, b) in enumerate(bounds)]
        palette2 = {s: i for i, s in enumerate(sorted(set(sigs)))}
        if len(palette2) == count:
            return own
        color = np.fromiter((palette2[s] for s in sigs), dtype=np.int64, count=len(nodes))
        count = len(palette2)


class Quotient:
    """Representatives of symmetric entities, and the engine resources they share.

    Built by :func:`build_quotient`. ``rep(e)`` is the entity that stands for ``e``; ``uses(rep, role)`` is what a
    representative's flow in ``role`` consumes; ``size(e)`` how many entities its class holds.
    """

    def __init__(
        self,
        ent_class: dict[Entity, int],
        members: dict[int, list[Entity]],
        uses: dict[tuple[Entity, str], list[tuple[Resource, float]]],
        res_members: dict[int, list[ResKey]],
        engine_res: dict[int, Resource],
        res_class: dict[ResKey, int],
    ) -> None:
        self._class = ent_class
        self._members = members
        self._uses = uses
        self.res_members = res_members
        self.engine_resources = engine_res
        self._res_class = res_class

    def rep(self, entity: Entity) -> Entity:
        """The representative simulated for ``entity``."""
        return self._members[self._class[entity]][0]

    def size(self, entity: Entity) -> int:
        """Number of entities in ``entity``'s class."""
        return len(self._members[self._class[entity]])

    def reps(self) -> list[Entity]:
        """All representatives, one per class, in class order."""
        return [m[0] for _, m in sorted(self._members.items())]

    def members(self, entity: Entity) -> list[Entity]:
        """Every entity in ``entity``'s class."""
        return list(self._members[self._class[entity]])

    def uses(self, entity: Entity, role: str) -> list[tuple[Resource, float]]:
        """What the representative of ``entity`` consumes per unit moved in ``role``."""
        return self._uses.get((self.rep(entity), role), [])

    def engine_resource(self, key: ResKey) -> Resource:
        """The engine resource standing for resource ``key``'s class."""
        return self.engine_resources[self._res_class[key]]

    @property
    def n_classes(self) -> int:
        """Number of entity classes simulated."""
        return len(self._members)


def build_quotient(
    net: FluidNetwork,
    usage: Usage,
    resources: Mapping[ResKey, ResourceSpec],
    *,
    colors: Mapping[Entity, Hashable] | None = None,
    relations: Iterable[tuple[Entity, str, Entity]] = (),
    symmetric: bool = True,
) -> Quotient:
    """Partition entities and resources (see :func:`refine`) and create the quotient's engine resources.

    With ``symmetric=False`` every entity and resource is its own class: the full simulation, through the same
    code path.
    """
    colors = dict(colors) if colors is not None else {e: 0 for e in usage}
    for e in usage:
        colors.setdefault(e, 0)
    used: dict[ResKey, ResourceSpec] = {}
    for roles in usage.values():
        for role_list in roles.values():
            for rk, _ in role_list:
                if rk not in resources:
                    raise KeyError(f"resource {rk!r} used but not declared")
                used[rk] = resources[rk]
    if symmetric:
        ent_class, res_class = refine(usage, used, colors, list(relations))
    else:
        ent_class = {e: i for i, e in enumerate(colors)}
        res_class = {rk: i for i, rk in enumerate(used)}
    members: dict[int, list[Entity]] = {}
    for e, c in ent_class.items():
        members.setdefault(c, []).append(e)
    order = {e: i for i, e in enumerate(colors)}
    for lst in members.values():
        lst.sort(key=lambda e: order.get(e, 0))
    res_members: dict[int, list[ResKey]] = {}
    for rk, c in res_class.items():
        res_members.setdefault(c, []).append(rk)
    engine_res: dict[int, Resource] = {}
    for c, keys in res_members.items():
        spec = used[keys[0]]
        name = spec.name if len(keys) == 1 else f"{spec.name} (+{len(keys) - 1} symmetric)"
        engine_res[c] = net.resource(name, spec.capacity, spec.kind, key=keys[0])  # records carry the key
    uses: dict[tuple[Entity, str], list[tuple[Resource, float]]] = {}
    for lst in members.values():
        rep = lst[0]
        for role, role_uses in usage.get(rep, {}).items():
            # summed exactly, kept exact (as the fillings sum the rows of the members on one resource)
            agg: dict[int, int] = {}
            for rk, coef in role_uses:
                oc = res_class[rk]
                agg[oc] = agg.get(oc, 0) + units(coef) * len(lst)
            # equitable: a member of O carries tot / |O| from F's members, a sum of their floats: a whole number of
            # units (a class that only looks equitable, coefficients equal to 12 digits, rounds down to one); a float
            # where it is one (most are: an ExactCoef and its integer weigh ~10x more, at 1024 GPUs without symmetry)
            uses[(rep, role)] = [(engine_res[oc], _coefficient(tot // len(res_members[oc]))) for oc, tot in agg.items()]
    return Quotient(ent_class, members, uses, res_members, engine_res, res_class)


def _coefficient(exact_units: int) -> float:
    """A coefficient given exactly (``1 / EXACT_SCALE`` units): the float when it is one, else an ExactCoef."""
    value = exact_units / EXACT_SCALE
    return value if exact(value) == exact_units else ExactCoef(exact_units)


@dataclass(frozen=True)
class Decoupling:
    """What :func:`decouple` returns.

    Attributes
    ----------
    usage : dict
        ``usage[entity][role]`` = list of ``(resource key, coefficient)``, the affected entities' uses of shared
        resources left out.
    affected : frozenset
        Entities the perturbation reaches: those using a perturbed resource, and every entity related to one.
    shared : frozenset
        Resources used by affected and by unaffected entities.
    dropped : int
        ``(entity, role, resource)`` uses left out (0: nothing changed, ``usage`` is the input's).
    """

    usage: dict[Entity, dict[str, list[tuple[ResKey, float]]]]
    affected: frozenset[Entity]
    shared: frozenset[ResKey]
    dropped: int


def decouple(
    usage: Usage, perturbed: Collection[ResKey], relations: Iterable[tuple[Entity, str, Entity]] = ()
) -> Decoupling:
    """Cut the entities a perturbation reaches loose from the resources they share with the others: an
    approximation that keeps the rest of the cluster symmetric.

    A perturbation of resources that only some entities use (one slow NIC port, or the NIC that takes the channels
    of one taken down: the channels routed through it) makes those entities unlike the rest, and :func:`refine` then
    tells apart every entity that shares a resource with them (the NVLinks of every GPU a slowed channel's ring
    visits), and through the ring's relations nearly every entity of the cluster: at 128 GPUs one port at half rate
    leaves 1,024 of 2,048 (channel, rank) pairs distinct, and 512 GPUs do not finish. Affected entities here are
    those using a ``perturbed`` resource, closed under ``relations`` (a ring's predecessor and successor, a tree's
    parent: the channel's whole ring or tree); shared resources are those that affected and unaffected entities both
    use. The returned usage leaves out the affected entities' uses of shared resources: the unaffected entities load
    them alone (and stay as symmetric as on the healthy cluster), the affected ones are limited by their other
    resources and caps only. Exact when no shared resource is ever at capacity while an affected entity uses it
    (max-min fairness ignores a constraint that never binds); otherwise it overstates both sides' rates on those
    resources.

    With no perturbed resource in use, or when every entity is affected, the usage is returned unchanged.

    Examples
    --------
    Two rings of two ranks (channels 0 and 1) over one shared link ``s`` and a link of their own each; channel
    1's own link is perturbed:

    >>> use = {(c, r): {"send": [("s", 1.0), (f"own{c}", 1.0)]} for c in (0, 1) for r in (0, 1)}
    >>> rel = [((c, r), "succ", (c, 1 - r)) for c in (0, 1) for r in (0, 1)]
    >>> d = decouple(use, {"own1"}, rel)
    >>> sorted(d.affected), sorted(d.shared), d.dropped
    ([(1, 0), (1, 1)], ['s'], 2)
    >>> d.usage[(1, 0)], d.usage[(0, 0)]
    ({'send': [('own1', 1.0)]}, {'send': [('s', 1.0), ('own0', 1.0)]})
    """
    bad = set(perturbed)
    seeds = [e for e, roles in usage.items() if any(rk in bad for uses in roles.values() for rk, _ in uses)]
    if not seeds:
        return _unchanged(usage)
    near: dict[Entity, list[Entity]] = {}
    for a, _label, b in relations:
        near.setdefault(a, []).append(b)
        near.setdefault(b, []).append(a)
    affected = set(seeds)
    stack = list(seeds)
    while stack:
        for y in near.get(stack.pop(), ()):
            if y not in affected:
                affected.add(y)
                stack.append(y)
    if len(affected) == len(usage):
        return _unchanged(usage)
    used: tuple[set[ResKey], set[ResKey]] = (set(), set())  # by unaffected, by affected entities
    for e, roles in usage.items():
        used[e in affected].update(rk for uses in roles.values() for rk, _ in uses)
    shared = used[0] & used[1]
    out: dict[Entity, dict[str, list[tuple[ResKey, float]]]] = {}
    dropped = 0
    for e, roles in usage.items():
        if e not in affected:
            out[e] = {r: list(u) for r, u in roles.items()}
            continue
        out[e] = {}
        for r, uses in roles.items():
            kept = [(rk, c) for rk, c in uses if rk not in shared]
            dropped += len(uses) - len(kept)
            out[e][r] = kept
    return Decoupling(out, frozenset(affected), frozenset(shared), dropped)


def _unchanged(usage: Usage) -> Decoupling:
    """:func:`decouple`'s answer when it leaves nothing out: a copy of ``usage``."""
    return Decoupling({e: {r: list(u) for r, u in roles.items()} for e, roles in usage.items()}, frozenset(),
                      frozenset(), 0)  # fmt: skip
