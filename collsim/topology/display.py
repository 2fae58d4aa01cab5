"""Text views of a topology (what ``collsim topo`` prints)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collsim.topology.errors import TopologyError
from collsim.topology.model import Device, Topology, ib_device_name

__all__ = ["format_fabric", "format_topo_matrix"]

_LEGEND = (
    ("X", "the same device"),
    ("SYS", "through PCIe and the link between CPU sockets (UPI / Infinity Fabric)"),
    ("PHB", "through PCIe and one CPU root complex (host bridge)"),
    ("PXB", "through several PCIe switches, without the host bridge"),
    ("PIX", "through at most one PCIe switch"),
    ("NV#", "over # bonded NVLinks (directly or through NVSwitch)"),
    ("NET", "across the network (another node)"),
)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)).rstrip() for r in rows]


def _nic_line(n: Device) -> str:
    """One NIC of the legend: its preset, speed, and its NCCL network plugin, or the name NCCL's IB transport lists
    it as (NCCL_IB_HCA matches it, as nvidia-smi's legend names it), and its per-message cost and its provider's cap
    on a TCP flow where it has them."""
    speed = float(n.spec.get("speed", 0.0)) * 8 / 1e9  # bytes/s to Gb/s (8 bits per byte, 1e9)
    plugin = n.spec.get("nccl_net_plugin")
    via = f", NCCL network plugin {plugin}" if plugin else ""
    via = f", {ib_device_name(n)}" if not plugin and n.spec.get("rdma") else via
    per_msg = float(n.spec.get("message_overhead") or 0.0)  # seconds
    via += f", {per_msg * 1e6:g} us a message (message_overhead)" if per_msg else ""  # s to us
    flow = float(n.spec.get("flow_bw") or 0.0) * 8 / 1e9  # bytes/s to Gb/s
    via += f", {flow:g} Gb/s a TCP flow (flow_bw)" if flow else ""
    return f"  NIC{n.index}: {n.local_name} ({n.spec.get('preset', '?')}, {speed:g} Gb/s{via})"


def format_topo_matrix(topo: Topology, node: int = 0, given: Mapping[str, Any] | None = None) -> str:
    """Render one node like ``nvidia-smi topo -m`` plus a table of links, and the node template's parameters (the
    title names the template's cloud instance type, and the NIC list each NIC's NCCL network plugin and per-message
    cost, where given).

    Parameters
    ----------
    topo : Topology
        The topology.
    node : int
        The node to show (default 0).
    given : mapping, optional
        The template parameters the user set (``cluster.node_params``): the others are marked as the template's
        defaults, so that a default such as cpu-host's 2 processes per node is never silent.

    Returns
    -------
    str
        A GPU x (GPU, NIC) matrix of :meth:`Topology.path_type` cells with a CPU affinity column, a legend, the
        NIC list, then a table per link kind: directed links, bandwidth per link and in total, per direction in
        GB/s (GB = 1e9 bytes).
    """
    gpus = topo.devices("gpu", node)
    nics = topo.nics(node)
    out = [f"{topo.name}: node {node} of {topo.nodes}" + (f" ({topo.instance_type})" if topo.instance_type else "")]
    if not topo.devices(node=node):
        out.append(f"  no devices on node {node}")
        return "\n".join(out) + "\n"
    if gpus:
        header = [""] + [f"GPU{g.index}" for g in gpus] + [f"NIC{n.index}" for n in nics] + ["CPU Affinity"]
        rows = [header]
        for g in gpus:
            cells = [topo.path_type(g.name, o.name) for o in [*gpus, *nics]]
            try:
                cpu = topo.host_cpu(g.name).local_name
            except ValueError:
                cpu = "-"
            rows.append([f"GPU{g.index}", *cells, cpu])
        out.append("")
        out.extend(_table(rows))
        if topo.ranks_per_gpu > 1:
            out.append("")
            k = topo.ranks_per_gpu
            out.append(
                f"{k} ranks per GPU (cluster.ranks_per_gpu): {k * len(gpus)} processes on this node, in blocks; Gloo "
                "only (NCCL refuses two ranks on one GPU)"
            )
    else:
        cpus = topo.devices("cpu", node)
        out.append("")
        out.append(
            f"no GPUs; ranks are {len(topo.rank_devices()) // max(topo.nodes, 1)} process(es) per node on "
            f"{', '.join(c.local_name for c in cpus)}"
        )
        if nics:
            rows = [[""] + [f"NIC{n.index}" for n in nics]]
            for c in cpus:
                rows.append([c.local_name] + [topo.path_type(c.name, n.name) for n in nics])
            out.extend(_table(rows))
    out.append("")
    out.append("Legend:")
    for key, text in _LEGEND:
        out.append(f"  {key:<4} = {text}")
    if any(lk.kind == "c2c" for lk in topo.links()):
        out.append(
            "  (a GPU on NVLink-C2C to a NIC on its Grace CPU is PHB here, as nvidia-smi prints it; NCCL's class is "
            "P2C, GPUDirect RDMA by default from NCCL 2.27)"
        )
    if nics:
        out.append("")
        out.append("NIC Legend:")
        out.extend(_nic_line(n) for n in nics)
    if topo.params:
        out.append("")
        out.append("Template parameters (cluster.node_params; 'default' = the template's, not set by the scenario):")
        width = max(len(k) for k in topo.params)
        for key, value in sorted(topo.params.items()):  # by name: the same whatever order the template lists
            how = "set" if given is not None and key in given else "default"
            out.append(f"  {key:<{width}} = {_param_text(value):<12} ({how})")
    out.append("")
    out.append("Links (per direction, GB/s = 1e9 bytes/s):")
    rows = [["kind", "links", "per link GB/s", "total GB/s"]]
    for kind, count, total in topo.summary():
        bws = sorted({round(lk.bandwidth / 1e9, 2) for lk in topo.links() if lk.kind == kind})
        per = f"{bws[0]:.2f}" if len(bws) == 1 else f"{bws[0]:.2f}-{bws[-1]:.2f}"
        rows.append([kind, str(count), per, f"{total / 1e9:.2f}"])
    out.extend("  " + line for line in _table(rows))
    dma = sorted({(lk.kind, round(lk.bandwidth * lk.dma_ratio / 1e9, 2)) for lk in topo.links() if lk.dma_ratio != 1})
    if dma:  # a copy engine's copies (Gloo's staging, cudaMemcpy) run at the preset's dma_efficiency, not NCCL's
        shown = ", ".join(f"{k} {bw:.2f}" for k, bw in dma)
        out.append(f"  (a copy engine's GPU-host copies, as Gloo's staging makes, run at the measured dma_efficiency: "
                   f"{shown} GB/s a link)")  # fmt: skip
    if topo.fabric is not None and topo.nodes > 1:
        out.append("")
        out.append(format_fabric(topo, node).rstrip("\n"))
    return "\n".join(out) + "\n"


def _names(names: list[str]) -> str:
    """Names, short: runs of one stem's consecutive indices as ``rail0..rail2`` (``rail0..rail2, rail4..rail7``);
    at most six pieces, then how many names there are."""
    pieces: list[str] = []
    run: list[str] = []

    def split(name: str) -> tuple[str, int | None]:
        stem = name.rstrip("0123456789")
        return stem, int(name[len(stem) :]) if name[len(stem) :] else None

    names = sorted(names, key=lambda n: (split(n)[0], split(n)[1] if split(n)[1] is not None else -1))  # spine2 < 10
    for name in names:
        stem, idx = split(name)
        if run and idx is not None and split(run[-1]) == (stem, idx - 1):
            run.append(name)
            continue
        if run:
            pieces.append(run[0] if len(run) == 1 else f"{run[0]}..{run[-1]}" if len(run) > 2 else ", ".join(run))
        run = [name]
    if run:
        pieces.append(run[0] if len(run) == 1 else f"{run[0]}..{run[-1]}" if len(run) > 2 else ", ".join(run))
    return ", ".join(pieces[:6]) + (f", ... ({len(names)} in all)" if len(pieces) > 6 else "")


def _route_line(topo: Topology, src: Device, dst: Device) -> str:
    """One route between two NICs of different nodes: the switches it crosses (a spine hop names every spine of
    its equal-cost set), its links and its one-way latency."""
    links = topo.route(src.name, dst.name)
    hops: list[str] = []
    for i, lk in enumerate(links[:-1]):
        sw = lk.dst
        short = sw.split("/", 1)[-1]
        if topo.is_spine(sw):
            spines = [s.split("/", 1)[-1] for s in topo.equal_cost_spines(lk.src, links[i + 1].dst)]
            short = f"{_names(spines)} ({len(spines)} equal-cost)" if len(spines) > 1 else short
        hops.append(short)
    latency = sum(lk.latency for lk in links) * 1e6  # s to us
    return f"  {src.name} -> {dst.name}: {' -> '.join(hops)}; {len(links)} links, {latency:.2f} us one way"


def format_fabric(topo: Topology, node: int = 0) -> str:
    """Render the network joining the nodes (``cluster.fabric``): its layout, each tier's switches with their NIC
    ports and capacities down and up, which switch each NIC of ``node`` plugs into, and sample routes to another
    node.

    Parameters
    ----------
    topo : Topology
        A multi-node topology with a fabric.
    node : int
        The node whose NICs and routes are shown (default 0).

    Returns
    -------
    str
        Text. Capacities are per direction in GB/s (GB = 1e9 bytes), after each link preset's efficiency; a tier's
        rows group switches of the same shape, so that a perturbed leaf shows on a row of its own. ``down:up`` is a
        leaf's capacity from its NICs over its capacity to the spines (``fabric.oversubscription``, as built).

    Examples
    --------
    >>> from collsim.topology import load_topology
    >>> topo = load_topology("hgx-h100", nodes=4, fabric={"topology": "fat_tree", "switch": {"radix": 16}})
    >>> print(format_fabric(topo).splitlines()[0].split("; ")[0])
    Fabric (cluster.fabric): fat_tree, rdma over ib (NVIDIA ConnectX-7 NDR InfiniBand), GPUDirect RDMA on
    """
    fab = topo.fabric or {}
    out = _fabric_header(topo, fab, node)
    out.extend("  " + line for line in _table(_tier_rows(topo)))
    out.append(_plug_line(topo, node))
    out.extend(_route_lines(topo, node))
    return "\n".join(out) + "\n"


def _fabric_header(topo: Topology, fab: Mapping[str, Any], node: int) -> list[str]:
    """The fabric's first two lines: layout, transport and NIC ports (those up, where perturb.down took some out);
    the switches' radix, where it comes from, and a hop's latency."""
    nics = topo.nics()
    kind = fab.get("link_kind", "?")
    kind = ", ".join(kind) if isinstance(kind, (list, tuple)) else kind
    how = f"{fab.get('transport', '?')} over {kind}"
    models = sorted({str(n.spec.get("model")) for n in nics if n.spec.get("model")})
    if models:  # the NICs by name: EFA's SRD, say, is an Ethernet port kind (roce) to the switches
        how += f" ({', '.join(models[:3])}{' ...' if len(models) > 3 else ''})"
    if fab.get("transport") == "rdma":
        how += ", GPUDirect RDMA " + ("on" if fab.get("gpudirect") else "off")
    built = int(fab.get("nics_per_node") or len(topo.nics(node)))
    plural = "s" if built != 1 else ""
    count = f"{topo.nodes} nodes x {built} NIC{plural} = {len(nics)} NIC ports"
    if len(nics) != built * topo.nodes:  # perturb.down took NICs out
        count = f"{topo.nodes} nodes x {built} NIC{plural}, {len(nics)} NIC ports up (perturb.down)"
    sw = dict(fab.get("switch") or {})
    radix = f"switch radix {sw.get('radix', '?')}"
    if sw.get("preset"):
        radix += f" (switch preset {sw['preset']}, ports at {float(sw['port_speed']) * 8 / 1e9:g} Gb/s)"  # B/s to Gb/s
    elif not sw.get("radix_given", True):
        radix += " (presets/fabric.yaml's default" + (
            "; a rail leaf is not held to it)" if fab.get("topology") == "rail_optimized" else ")"
        )
    if sw.get("latency") is not None:
        radix += f"; {float(sw['latency']) * 1e6:g} us a hop (fabric.switch.latency)"  # s to us
    else:
        radix += "; a hop's latency is its link preset's"
    if fab.get("in_network_reduction"):
        radix += "; switches reduce in the network (in_network_reduction)"
    return [f"Fabric (cluster.fabric): {fab.get('topology', '?')}, {how}; {count}", "  " + radix]


def _tier_rows(topo: Topology) -> list[list[str]]:
    """The switch table: a row per tier and shape (NIC ports, capacity down and up, down:up), switches named."""
    graph = topo.graph
    shapes: dict[tuple[str, int, float, float], list[str]] = {}
    for s in topo.devices("switch"):
        tier = str(s.spec.get("tier", "?"))
        ports = down = up = 0.0
        for _, other, data in graph.out_edges(s.name, data=True):
            od: Device = graph.nodes[other]["device"]
            lk = data["link"]
            if od.kind == "nic":
                ports += 1
                down += lk.bandwidth
            elif od.kind == "switch" and od.spec.get("tier") == "spine" and tier != "spine":
                up += lk.bandwidth
            elif od.kind == "switch":
                down += lk.bandwidth
        key = (tier, int(ports), round(down / 1e9, 2), round(up / 1e9, 2))  # bytes/s to GB/s
        shapes.setdefault(key, []).append(s.name.split("/", 1)[-1])
    rows = [["tier", "switches", "NIC ports each", "down GB/s each", "up GB/s each", "down:up", "names"]]
    order = {"single": 0, "leaf": 1, "spine": 2}
    for (tier, ports_n, down_gb, up_gb), names in sorted(shapes.items(), key=lambda kv: (order.get(kv[0][0], 9),
                                                                                         kv[1])):  # fmt: skip
        ratio = "-" if not up_gb or tier == "spine" else f"{down_gb / up_gb:.3g}:1"
        rows.append([tier, str(len(names)), str(ports_n) if ports_n else "-", f"{down_gb:.2f}",
                     f"{up_gb:.2f}" if up_gb else "-", ratio, _names(names)])  # fmt: skip
    return rows


def _switch_of(topo: Topology, nic: Device) -> str | None:
    """The fabric switch ``nic`` plugs into (None where its port is down)."""
    ups = [x for x in topo.graph.successors(nic.name) if topo.graph.nodes[x]["device"].kind == "switch"]
    return ups[0] if ups else None


def _plug_line(topo: Topology, node: int) -> str:
    """Which switch each NIC of ``node`` plugs into (``NIC i on rail i`` for a rail-per-NIC layout)."""
    mine = topo.nics(node)
    plugs: dict[str, list[int]] = {}
    for n in mine:
        sw = _switch_of(topo, n)
        plugs.setdefault(sw.split("/", 1)[-1] if sw else "(no switch)", []).append(n.index)
    if len(plugs) > 4 and all(k == f"rail{v[0]}" and len(v) == 1 for k, v in plugs.items()):
        return f"  node {node}'s NICs: NIC i on rail i ({_names([f'NIC{n.index}' for n in mine])})"
    return f"  node {node}'s NICs: " + "; ".join(f"{_names([f'NIC{i}' for i in idx])} on {sw}"
                                                 for sw, idx in plugs.items())  # fmt: skip


def _route_lines(topo: Topology, node: int) -> list[str]:
    """Routes from ``node``'s first NIC to another node's NIC on its own switch and on another leaf, where they
    exist, under a heading."""
    mine = topo.nics(node)
    others = [n for n in topo.nics() if n.node != node]
    if not mine or not others or _switch_of(topo, mine[0]) is None:
        return []
    src, home = mine[0], _switch_of(topo, mine[0])
    same = next((o for o in others if _switch_of(topo, o) == home), None)
    far = next((o for o in others if _switch_of(topo, o) not in (home, None)), None)
    lines = []
    for dst in (same, far):
        if dst is None:
            continue
        try:
            lines.append("  " + _route_line(topo, src, dst))
        except TopologyError:
            lines.append(f"    {src.name} -> {dst.name}: no route (a link taken down)")
    if not lines:
        return []
    spines = any(s.spec.get("tier") == "spine" for s in topo.devices("switch"))
    spread = "; a crossing between leaves spreads over every spine joining them" if spines else ""
    return [f"  Routes (least latency{spread}):", *lines]


def _param_text(value: Any) -> str:
    """A parameter's value as YAML writes it (``true``, ``null``, ``2``, ``rtx-2080ti``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)
