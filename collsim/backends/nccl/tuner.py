"""NCCL's tuner: which (algorithm, protocol) pairs it may run, what its cost model predicts for each, and its pick."""

from __future__ import annotations

from collsim.backends.common import BackendError
from collsim.backends.nccl.algos import P2P_ALGORITHM, REGISTRY
from collsim.backends.nccl.base import ModelInputs, node_index
from collsim.backends.nccl.chunking import nvls_chunk_start
from collsim.backends.nccl.constants import NcclConstants
from collsim.backends.nccl.plan import NcclPlan, nvls_unreduced
from collsim.backends.nccl.plugin_tuner import ExampleTuner, PluginPick
from collsim.nccl_env import NcclOptions
from collsim.vocab import COLLECTIVES, NCCL_ALGORITHMS, NCCL_PROTOCOLS, P2P_COLLECTIVES

__all__ = [
    "candidates", "check_collective", "choose", "decide", "enabled_pairs", "ll128_enabled", "nccl_lacks",
    "plugin_choice", "release_notes", "tuner_times", "withheld",
]  # fmt: skip


def check_collective(collective: str) -> None:
    """Raise :class:`BackendError` for a collective collsim does not simulate."""
    if collective not in COLLECTIVES:
        raise BackendError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")


def ll128_enabled(plan: NcclPlan) -> bool:
    """Whether NCCL turns LL128 on by default here (``plan.ll128_refusal``: NVLink inside a node or one GPU per node,
    GPU-NIC paths within PXB, or PXN from compute capability 9.0, and a compute capability the release enables)."""
    return plan.ll128_refusal is None


def candidates(plan: NcclPlan, opts: NcclOptions, collective: str) -> list[tuple[str, str]]:
    """(algorithm, protocol) pairs NCCL could run for ``collective`` here, before NCCL_ALGO/NCCL_PROTO filtering,
    in the registry's order."""
    return [
        (name, p)
        for name, alg in REGISTRY.items()
        if name not in plan.unreleased
        for p in alg.protocols(plan, opts, collective)
        if p not in plan.unreleased
    ]


def withheld(plan: NcclPlan, opts: NcclOptions, collective: str) -> list[str]:
    """The algorithms, then protocols, NCCL could run for ``collective`` here that the run's release does not have
    yet (``plan.unreleased``, from ``backends.nccl.version``), in the registry's and NCCL's order (LL128 where NCCL
    enables it by default: :func:`ll128_enabled`)."""
    algos = [a for a, alg in REGISTRY.items() if a in plan.unreleased and alg.protocols(plan, opts, collective)]
    usual = {p for alg in REGISTRY.values() for p in alg.protocols(plan, opts, collective)}
    if not ll128_enabled(plan) and opts.protocols_for(collective) is None:
        usual.discard("LL128")
    return algos + [p for p in NCCL_PROTOCOLS if p in plan.unreleased and p in usual]


def _nvls_chunk_notes(
    plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, collective: str, head: str
) -> list[str]:
    """Where NVLS's and NVLSTree's chunks start in a release before NCCL_NVLS_CHUNKSIZE (``nvls_chunk_history``), and
    the chunk variables that release does not read, when NVLS or NVLSTree is offered."""
    history, version = consts.nvls_chunk_history, opts.version
    offered = [
        a for a in ("NVLS", "NVLSTree") if a not in plan.unreleased and REGISTRY[a].protocols(plan, opts, collective)
    ]
    if version is None or version >= history.nvls_chunksize_since or not offered:
        return []
    kib = 1024  # bytes to KiB
    step = nvls_chunk_start(consts, opts, "NVLSTree")[0]
    since = ".".join(map(str, history.nvls_chunksize_since))
    out = [f"{head}: {' and '.join(offered)} chunks start from the Simple step (NCCL_BUFFSIZE / {consts.steps} = "
           f"{step / kib:g} KiB; NVLS at most {consts.nvls_chunk_bytes // kib} KiB), as before {since}"]  # fmt: skip
    unread = [
        ("NCCL_NVLS_CHUNKSIZE", opts.nvls_chunksize, history.nvls_chunksize_since),
        ("NCCL_NVLSTREE_MAX_CHUNKSIZE", opts.nvlstree_max_chunksize, history.tree_max_variable_since),
    ]
    for name, value, first in unread:
        if value is not None and version < first:
            out.append(f"{head} does not read {name} (from {'.'.join(map(str, first))}): ignored")
    return out


def release_notes(plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, collective: str) -> list[str]:
    """What NCCL's defaults and release change here, a line each: a thread count NCCL corrects (NCCL_NTHREADS,
    NCCL_LL128_NTHREADS: :meth:`~collsim.backends.nccl.constants.ThreadLimits.resolve`), CollNet left off on a
    fabric that could run it (NCCL_COLLNET_ENABLE's default 0), LL128 left off by default (:func:`ll128_enabled`),
    NCCL's NVLS tuning on Blackwell across nodes (``plan.nvls_tuned``), then for the scenario's release
    (``backends.nccl.version``; nothing more when unset) one outside the tuner tables collsim holds, a GPU
    generation it did not know, the algorithms and protocols it does not have yet, the one-node NVLS split before
    2.20 and the release's tuner tables; a NIC preset of a card the release does not merge yet
    (``plan.unmerged_ports``); NICs of different speeds (``plan.mixed_nic_speeds``)."""
    t = consts.threads
    out = [
        note
        for name, value, lo, hi in (
            ("NCCL_NTHREADS", opts.nthreads, t.least, consts.host_paths.simple_threads),
            ("NCCL_LL128_NTHREADS", opts.ll128_nthreads, t.ll128 // 4, t.ll128),
        )
        if (note := t.resolve(name, value, lo, hi, hi)[1]) is not None
    ]
    if plan.fabric.get("in_network_reduction") and not opts.collnet_enable and collective == "allreduce":
        out.append("the fabric reduces in the network, but NCCL runs CollNet only with NCCL_COLLNET_ENABLE=1 "
                   "(default 0): not offered")  # fmt: skip
    if plan.ll128_refusal is not None and opts.protocols_for(collective) is None:
        out.append(f"NCCL leaves LL128 off by default here (NCCL_PROTO=LL128 turns it on): {plan.ll128_refusal}")
    channels, chunk, cap = plan.nvls_tuned
    if (channels or chunk or cap) and REGISTRY["NVLSTree"].protocols(plan, opts, collective):
        parts = [f"{channels} NVLS channels" if channels else "", f"{chunk // 1024} KiB chunks" if chunk else "",
                 f"NVLSTree's chunk at most {cap // 1024} KiB" if cap else ""]  # fmt: skip
        out.append("NCCL's NVLS tuning on Blackwell across nodes (2.30.3 on, by the GPUs' network bandwidth): "
                   + ", ".join(p for p in parts if p))  # fmt: skip
    out.extend(plan.unmerged_ports)
    out.extend(plan.mixed_nic_speeds)
    if opts.version is None:
        return out
    head = f"NCCL {'.'.join(map(str, opts.version))} (backends.nccl.version)"
    end = consts.tables_outside(opts.version)
    if end is not None:
        named = ".".join(map(str, end))
        if end == consts.tuner_tables_span[0]:
            out.append(f"{head} is older than the oldest release whose tuner tables collsim holds: {named}'s "
                       "tables price the choice; the simulation takes the latest's")  # fmt: skip
        else:
            out.append(f"{head} is newer than the latest release collsim follows: modelled as {named}")
    known = consts.arch_as(plan.arch, opts.version)
    if known != plan.arch:
        major, minor = consts.arch_since[plan.arch][0]
        out.append(f"{head} predates NCCL's {plan.arch} support ({major}.{minor}): its tuner reads {known}'s "
                   f"rows and NVLS runs {known}'s channels")  # fmt: skip
    missing = withheld(plan, opts, collective)
    if missing:
        since = {**consts.algorithms_since, **consts.protocols_since}
        listed = ", ".join(f"{a} (from {since[a][0]}.{since[a][1]})" for a in missing)
        out.append(f"{head} has no {listed}: not offered")
    out += _nvls_chunk_notes(plan, opts, consts, collective, head)
    nvls = "NVLS" not in plan.unreleased and REGISTRY["NVLS"].protocols(plan, opts, collective)
    if nvls and opts.before(consts.nvls_split_since):
        split = ".".join(map(str, consts.nvls_split_since))
        out.append(f"{head}: one-node NVLS interleaves its channels over each loop, as before {split}")
    if consts.for_tuner(opts.version) is not consts and end is None:
        out.append(f"{head}: its tuner's latency and bandwidth tables price the choice (tuning.cc of that "
                   "release); the simulation takes the latest's")  # fmt: skip
    return out


def _steps(collective: str, n: int, nnodes: int) -> tuple[int, int]:
    """(steps, of which across nodes) of the collective's schedule, as tuning.cc counts them."""
    if collective == "allreduce":
        return 2 * (n - 1), 2 * (nnodes - 1)
    if collective in ("allgather", "reduce_scatter"):
        return n - 1, nnodes - 1
    return n, nnodes - 1  # broadcast, reduce: a pipelined chain


def _priced_with(plan: NcclPlan, consts: NcclConstants, opts: NcclOptions) -> NcclConstants:
    """The constants NCCL's cost model prices with: the run's release's (:meth:`NcclConstants.for_tuner`), edited by
    a tuner plugin's init where it edits them (NVIDIA's example tuner from 2.28.3: init.cc hands the plugin the
    constants before ncclTopoTuneModel)."""
    consts = consts.for_tuner(opts.version)  # the tables of the run's NCCL release
    if isinstance(plan.tuner, ExampleTuner) and plan.tuner.edits_constants:
        consts = consts.with_example_tuner_edits()
    return consts


def tuner_times(
    plan: NcclPlan, consts: NcclConstants, collective: str, nbytes: int, opts: NcclOptions | None = None
) -> dict[tuple[str, str], float]:
    """NCCL's cost model (tuning.cc): predicted seconds for every modelled (algorithm, protocol) pair.

    time = latency + bytes / algBw; each algorithm prices itself (:meth:`NcclAlgorithm.model`) from baseLat, the
    per-step hwLat inside a node (NVLink or PCI) and across nodes (NET + the network's latency, twice for Simple),
    and what the channels carry per rank (``plan.bus_bw``).
    """
    check_collective(collective)
    opts = opts or NcclOptions()
    consts = _priced_with(plan, consts, opts)
    n = len(plan.ranks)
    if collective in P2P_COLLECTIVES:  # NCCL's rule picks the protocol (enqueue.cc addP2pToPlan), not a cost model
        proto = P2P_ALGORITHM.pick(plan, opts, consts, collective, nbytes)
        m = _inputs(plan, opts, consts, collective, nbytes, "P2P", proto)
        lat, algbw = P2P_ALGORITHM.model(m)
        return {("P2P", proto): lat + nbytes / algbw}
    if n == 1:
        return {("Ring", p): consts.base_latency["Ring"][p] for p in NCCL_PROTOCOLS}
    out: dict[tuple[str, str], float] = {}
    for algo, proto in candidates(plan, opts, collective):
        lat, algbw = REGISTRY[algo].model(_inputs(plan, opts, consts, collective, nbytes, algo, proto))
        out[(algo, proto)] = lat + nbytes / algbw
    return out


def tuner_table(
    plan: NcclPlan, consts: NcclConstants, collective: str, opts: NcclOptions | None = None
) -> dict[tuple[str, str], tuple[float, float]]:
    """NCCL's cost model as it prints it at init with ``NCCL_DEBUG_SUBSYS=TUNING`` (tuning.cc, rank 0: every
    function's ``comm->latencies`` and ``comm->bandwidths``): per modelled (algorithm, protocol), the latency in
    seconds and the algorithm bandwidth in bytes/s, before the corrections NCCL applies by size when it prices a call
    (ncclTopoGetAlgoTime: the tree's correction factor, the multi-node ring's plateau). The latency is the model's at
    8 bytes, where neither applies, the bandwidth its at 1 GiB, where the tree's factor is 1."""
    check_collective(collective)
    opts = opts or NcclOptions()
    consts = _priced_with(plan, consts, opts)
    out: dict[tuple[str, str], tuple[float, float]] = {}
    if collective in P2P_COLLECTIVES or len(plan.ranks) == 1:
        return out
    for algo, proto in candidates(plan, opts, collective):
        alg = REGISTRY[algo]
        lat, _ = alg.model(_inputs(plan, opts, consts, collective, 8, algo, proto))
        _, algbw = alg.model(_inputs(plan, opts, consts, collective, 1 << 30, algo, proto))
        out[(algo, proto)] = (lat, algbw)
    return out


def _inputs(
    plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, collective: str, nbytes: int, algo: str, proto: str
) -> ModelInputs:
    """What the cost model starts from for one pair (tuning.cc's baseLat, intra and inter step latencies), from
    ``consts`` as the run's NCCL release has them (:meth:`NcclConstants.for_tuner`)."""
    n = len(plan.ranks)
    nsteps, ninter = _steps(collective, n, plan.nnodes)
    table = REGISTRY[algo].latency_table
    intra = consts.hw_latency[plan.intra_hw][table][proto]
    # tuning.cc (from 2.23): "With ppn=1 latencies are fully exposed, use the Tree network latency"
    net_row = "Tree" if plan.ppn == 1 and not opts.before(consts.tuner_ppn1_tree_net_since) else table
    # tuning.cc adds the net plugin's reported latency (graph->latencyInter = the NIC's ncclNetProperties latency,
    # search.cc; twice for Simple, "the flush extra latency") to hwLat[NET]; NCCL's own IB and socket transports
    # report none (props->latency = 0: net_ib/init.cc, net_socket.cc), aws-ofi-nccl 75 us on p4d/p5 and 35 us on
    # p5en/p6 (NIC preset nccl_net_latency). It prices the choice only: the simulation charges the path's latency.
    inter = consts.hw_latency["NET"][net_row][proto] + plan.net_latency * (2 if proto == "Simple" else 1)
    lat = consts.base_latency[table][proto]
    # tuning.cc: "if (a == NCCL_ALGO_TREE && comm->maxTreePattern == NCCL_TOPO_PATTERN_TREE) busBw *= .85" (before
    # 2.26 graphs[a]->pattern); search.cc gives one GPU per node the TREE pattern (else the graph starts BALANCED_TREE)
    plain_tree = plan.ppn == 1 and not opts.before(consts.tree_pattern_since)
    # ModelInputs' fields in order: what is priced, the schedule's steps, then tuning.cc's starting point
    return ModelInputs(
        plan, consts, collective, nbytes, proto,
        n, nsteps, ninter, intra, inter, lat, plan.bus_bw, node_index(plan.nnodes),
        consts.tree_pattern_factor if plain_tree else 1.0,
        plan.arch == "blackwell" and plan.cpu_vendor != "arm" and not opts.before(consts.nvlstree_correction_since),
        frozenset(k for k, since in consts.tuner_formulas_since.items() if opts.before(since)),
    )  # fmt: skip


def nccl_lacks(algo: str, collective: str, nnodes: int, ppn: int, collnet: bool) -> str | None:
    """Why NCCL never runs ``algo`` for ``collective`` on ``nnodes`` nodes of ``ppn`` ranks, or None where it may
    (graph/tuning.cc ncclTopoTuneModel, v2.30.7-1 lines 216-223, 294-298 and 502-505; ``collnet``:
    NCCL_COLLNET_ENABLE=1). The hardware an algorithm needs (NVLS: an NVSwitch) is its ``refusal``'s concern.

    >>> nccl_lacks("Tree", "allgather", 2, 8, False)
    'NCCL runs allgather with PAT, Ring, NVLS or CollNetDirect only'
    >>> nccl_lacks("NVLS", "allreduce", 2, 8, False) is not None, nccl_lacks("NVLS", "allreduce", 2, 8, True)
    (True, None)
    """
    if collective in ("broadcast", "reduce") and algo != "Ring":
        return f"NCCL runs {collective} with Ring only"
    if collective in ("allgather", "reduce_scatter") and algo not in ("PAT", "Ring", "NVLS", "CollNetDirect"):
        return f"NCCL runs {collective} with PAT, Ring, NVLS or CollNetDirect only"
    if collective == "allreduce" and algo == "PAT":
        return "NCCL has no PAT allreduce"
    if algo == "PAT" and ppn > 1:
        return "NCCL runs PAT with one GPU per node only (ncclPatEnable)"
    if algo == "NVLSTree" and nnodes == 1:
        return "NCCL disables NVLSTree on one node (NVLS is its one-node form)"
    if not collnet and algo == "NVLS" and nnodes > 1:  # tuning.cc: NVLS across nodes is NVLS with CollNet (SHARP)
        return ("NCCL runs NVLS across nodes only with CollNet (NVLS + SHARP: NCCL_COLLNET_ENABLE=1 and a CollNet "
                "network), which collsim does not model; NVLSTree is NVLS across nodes without it")
    if not collnet and algo in ("CollNetDirect", "CollNetChain"):
        return f"NCCL runs {algo} only with NCCL_COLLNET_ENABLE=1"
    return None


def checked_choice(plan: NcclPlan, opts: NcclOptions, collective: str, choice: object) -> tuple[str, str]:
    """A forced (algorithm, protocol) as NCCL spells them (matched without regard to case, as NCCL_ALGO and
    NCCL_PROTO are), when it is one of :func:`candidates`: one NCCL could run for ``collective`` here. Otherwise a
    BackendError saying why NCCL would not (the reason NCCL_ALGO would give) and which pairs it could.

    >>> from collsim.api import Simulator
    >>> s = Simulator.from_source("hgx-h100")
    >>> checked_choice(s.nccl_plan, s.options("nccl"), "allreduce", ("ring", "simple"))
    ('Ring', 'Simple')
    """
    if not (isinstance(choice, tuple | list) and len(choice) == 2 and all(isinstance(c, str) for c in choice)):
        raise BackendError(f"choice: expected (algorithm, protocol), e.g. ('Ring', 'Simple'); got {choice!r}")
    names = {a.lower(): a for a in REGISTRY} | {p.lower(): p for p in NCCL_PROTOCOLS}
    given: list[str] = [str(c) for c in choice]
    algo, proto = (names.get(c.strip().lower(), c) for c in given)
    pairs = candidates(plan, opts, collective)
    if (algo, proto) in pairs:
        return algo, proto
    shown = ", ".join(f"{a}/{p}" for a, p in pairs) or "none"
    if algo not in REGISTRY:
        why = f"unknown algorithm {algo!r} (NCCL's: {', '.join(REGISTRY)})"
    elif proto not in NCCL_PROTOCOLS:
        why = f"unknown protocol {proto!r} (NCCL's: {', '.join(NCCL_PROTOCOLS)})"
    else:
        why = (
            plan.unreleased.get(algo) or plan.unreleased.get(proto)
            or nccl_lacks(algo, collective, plan.nnodes, plan.ppn, opts.collnet_enable)
            or REGISTRY[algo].refusal(plan, opts)
            or (nvls_unreduced(plan, opts, collective) if algo in ("NVLS", "NVLSTree") else None)
            or (f"NCCL runs {algo} with {', '.join(p for a, p in pairs if a == algo)} only here"
                if any(a == algo for a, _ in pairs) else f"{algo} is not offered for {collective} on this cluster")
        )  # fmt: skip
    raise BackendError(f"choice {algo}/{proto}: NCCL would not run it for {collective} here: {why}; it could run "
                       f"{shown}")  # fmt: skip


def enabled_pairs(plan: NcclPlan, opts: NcclOptions, collective: str) -> list[tuple[str, str]]:
    """The (algorithm, protocol) pairs NCCL may pick here after NCCL_ALGO and NCCL_PROTO.

    A choice NCCL would refuse (NVLS without Hopper and a multicast NVSwitch, CollNet without in-network
    reduction) is a BackendError saying why; algorithms NCCL has but collsim does not model yet are named as such.
    """
    pairs = candidates(plan, opts, collective)
    missing = withheld(plan, opts, collective)
    if not pairs and missing:  # send/receive before 2.7
        raise BackendError(f"{collective}: {plan.unreleased[missing[0]]}")
    algorithms = opts.algorithms_for(collective)
    if algorithms is not None and collective not in P2P_COLLECTIVES:
        wanted = set(algorithms)
        refusals = [
            plan.unreleased.get(a) or REGISTRY[a].refusal(plan, opts)
            for a in NCCL_ALGORITHMS
            if a in wanted and a in REGISTRY
        ]
        if refusals and all(refusals):
            raise BackendError(f"NCCL_ALGO={opts.env.get('NCCL_ALGO')}: NCCL would refuse it here: {refusals[0]}")
        pairs = [(a, p) for a, p in pairs if a in wanted]
        if not pairs:
            reasons = [
                nccl_lacks(a, collective, plan.nnodes, plan.ppn, opts.collnet_enable)
                or (nvls_unreduced(plan, opts, collective) if a in ("NVLS", "NVLSTree") else None)
                or ("NVLS across nodes with CollNet (NVLS + SHARP) is not modelled; NVLSTree is NVLS across nodes "
                    "without it" if a == "NVLS" and plan.nnodes > 1 else None)
                or f"{a} is not offered for {collective} on this cluster"
                for a in sorted(wanted)
            ]
            raise BackendError(
                f"NCCL_ALGO={opts.env.get('NCCL_ALGO')}: NCCL has no algorithm left for {collective} here and stops "
                f"('No algorithm/protocol available', enqueue.cc): {'; '.join(reasons)}"
            )
    protocols = opts.protocols_for(collective)
    protos = set(protocols) if protocols is not None else set(NCCL_PROTOCOLS)
    if protocols is None and not ll128_enabled(plan):
        protos.discard("LL128")
    pairs = [(a, p) for a, p in pairs if p in protos or a == "P2P"]
    if not pairs:
        why = next((plan.unreleased[p] for p in sorted(protos) if p in plan.unreleased), None)
        raise BackendError(
            f"NCCL_PROTO={opts.env.get('NCCL_PROTO')}: no protocol left for {collective}" + (f" ({why})" if why else "")
        )
    return pairs


def plugin_choice(
    plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, collective: str, nbytes: int
) -> PluginPick | None:
    """What a tuner plugin picks (``plan.tuner``, :class:`~collsim.backends.nccl.plugin_tuner.ActiveTuner`) among
    the pairs NCCL could run here (its cost table's applicable entries: :func:`enabled_pairs` that collsim prices);
    None when there is no plugin or it leaves the choice to NCCL's cost model."""
    if plan.tuner is None:
        return None
    times = tuner_times(plan, consts, collective, nbytes, opts)
    return _plugin_pick(plan, collective, nbytes, enabled_pairs(plan, opts, collective), times)


def _plugin_pick(
    plan: NcclPlan, collective: str, nbytes: int, pairs: list[tuple[str, str]], times: dict[tuple[str, str], float]
) -> PluginPick | None:
    if plan.tuner is None or collective in P2P_COLLECTIVES or len(plan.ranks) == 1:
        return None
    applicable = {pair for pair in pairs if pair in times}
    return plan.tuner.pick(plan.nnodes, plan.ppn, collective, nbytes, lambda a, p: (a, p) in applicable)


def decide(
    plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, collective: str, nbytes: int
) -> tuple[str, str, float, PluginPick | None]:
    """:func:`choose`'s (algorithm, protocol, cost model time) and the tuner plugin's answer behind it (None without
    one; its pair None when NCCL's cost model chose), from one evaluation of the cost model."""
    pairs = enabled_pairs(plan, opts, collective)
    times = tuner_times(plan, consts, collective, nbytes, opts)
    plugin = _plugin_pick(plan, collective, nbytes, pairs, times)
    if plugin is not None and plugin.algorithm is not None and plugin.protocol is not None:
        return plugin.algorithm, plugin.protocol, times[(plugin.algorithm, plugin.protocol)], plugin
    cands = [(times[(a, p)], a, p) for a, p in pairs if (a, p) in times]
    order = {a: i for i, a in enumerate(NCCL_ALGORITHMS)}
    t, a, p = min(cands, key=lambda x: (x[0], order.get(x[1], 0), NCCL_PROTOCOLS.index(x[2])))
    return a, p, t, plugin  # a plugin that picks no pair may still set the channels


def choose(
    plan: NcclPlan, opts: NcclOptions, consts: NcclConstants, collective: str, nbytes: int
) -> tuple[str, str, float]:
    """The (algorithm, protocol) NCCL would run and its cost model's time for it: a tuner plugin's pick
    (:func:`plugin_choice`) where it makes one, else the minimum of NCCL's cost model (:func:`tuner_times`) over
    :func:`enabled_pairs`; on a tie NCCL's algorithm order, then protocol order."""
    a, p, t, _plugin = decide(plan, opts, consts, collective, nbytes)
    return a, p, t

