"""Text views of a topology (what ``collsim topo`` prints)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collsim.topology.model import Device, Topology, ib_device_name

__all__ = ["format_topo_matrix"]

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
    return "\n".join(out) + "\n"


def _param_text(value: Any) -> str:
    """A parameter's value as YAML writes it (``true``, ``null``, ``2``, ``rtx-2080ti``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "null" if value is None else str(value)
