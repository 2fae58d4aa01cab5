"""``NCCL_IB_HCA``: which NICs NCCL's IB transport lists.

NCCL's IB transport (``ncclIbInit``, ``src/transport/net_ib/init.cc``, NVIDIA/nccl v2.30.7-1) lists every active
port of every verbs device whose name and port ``NCCL_IB_HCA`` matches (:class:`~collsim.nccl_env.IbHcaList`);
the ones it skips are not in NCCL's topology at all, so NCCL searches its rings, trees and NVLS heads over the NICs
it lists as it would on a node built with only those. collsim therefore builds the cluster with those NIC slots
(``fabric.nics``): the NICs left out are not in the cluster, the ones kept are its rails 0 .. k-1.

A NIC's verbs name is :func:`~collsim.topology.ib_device_name`'s: its template's ``ib_names`` entry, else
``mlx5_<its slot on the template>`` (an assumption where the template names none). Only the NICs NCCL drives with
its own IB transport are concerned: not on one node (no network), not over a TCP fabric (NCCL's socket transport),
not NICs a network plugin drives (EFA, TCPX/TCPXO: the plugin picks its devices).
"""

from __future__ import annotations

from collsim.backends.common import BackendError
from collsim.nccl_env import IbHcaList
from collsim.safeyaml import short_repr
from collsim.topology import Topology, ib_device_name
from collsim.topology.model import Device

__all__ = ["ib_devices", "ib_hca_selection"]


def ib_devices(topo: Topology) -> list[Device]:
    """The NICs NCCL's IB transport would list on ``topo``: RDMA NICs without a network plugin, on a cluster of
    several nodes joined by an RDMA fabric; none otherwise."""
    fabric = topo.fabric
    if topo.nodes <= 1 or fabric is None or fabric.get("transport", "rdma") != "rdma":
        return []
    return [d for d in topo.nics() if d.spec.get("rdma") and not d.spec.get("nccl_net_plugin")]


def ib_hca_selection(topo: Topology, value: str) -> tuple[list[str] | None, list[str]]:
    """The NIC slots (local names: ``nic0`` ...) ``NCCL_IB_HCA=value`` leaves NCCL on every node, None when it
    leaves all of them (or the variable does not concern this cluster), and a note saying which.

    Raises
    ------
    BackendError
        When no NIC is left: NCCL's IB transport finds no device and NCCL falls back to its socket transport, which
        collsim does not switch to (``fabric.transport: tcp`` models that).

    Examples
    --------
    >>> from collsim.topology import load_topology
    >>> topo = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized"})
    >>> keep, notes = ib_hca_selection(topo, "mlx5_1")   # a prefix: mlx5_10 and mlx5_11, GPU 6's and 7's NICs
    >>> keep
    ['nic6', 'nic7']
    >>> notes[0]
    'NCCL_IB_HCA=mlx5_1: NCCL lists 2 of the 8 NICs of every node, nic6 (mlx5_10) and nic7 (mlx5_11)'
    >>> ib_hca_selection(topo, "mlx5")[0] is None
    True
    """
    wanted = IbHcaList.parse(value)
    nics = [d for d in ib_devices(topo) if d.node == 0]  # every node is built from one template: the same NICs
    if not nics:
        return None, []
    kept = [d for d in nics if wanted.matches(ib_device_name(d))]
    if len(kept) == len(nics):
        return None, []
    if not kept:
        names = ", ".join(f"{d.local_name} ({ib_device_name(d)})" for d in nics)
        raise BackendError(
            f"NCCL_IB_HCA={short_repr(value)} matches none of a node's NICs ({names}): NCCL's IB transport would find "
            "no device and NCCL fall back to sockets, which collsim does not switch to (fabric.transport: tcp models "
            "that)"
        )
    listed = [f"{d.local_name} ({ib_device_name(d)})" for d in kept]
    text = listed[0] if len(listed) == 1 else f"{', '.join(listed[:-1])} and {listed[-1]}"
    shown = value if len(value) <= 60 else f"{value[:60]}..."  # a value longer than any list of names
    note = f"NCCL_IB_HCA={shown}: NCCL lists {len(kept)} of the {len(nics)} NICs of every node, {text}"
    return [d.local_name for d in kept], [note]
