"""One node's devices and links with local names, before a template's node is replicated into a cluster.

Built by :mod:`collsim.topology.template` (and its generators), read by :mod:`collsim.topology.nic_placement`;
a module of its own so that neither imports the other.
"""

from __future__ import annotations

from collsim.topology.model import Device, Link

__all__ = ["NodeLayout"]


class NodeLayout:
    """One node's devices and links with local names (``gpu0``), before replication into a cluster.

    Attributes
    ----------
    devices : dict[str, Device]
        Local name to Device (node 0, local names).
    links : dict[tuple[str, str], Link]
        (a, b) to the a->b direction; the b->a direction is built from it.
    """

    def __init__(self) -> None:
        self.devices: dict[str, Device] = {}
        self.links: dict[tuple[str, str], Link] = {}

    def kind_count(self, kind: str) -> int:
        """Number of devices of ``kind``."""
        return sum(1 for d in self.devices.values() if d.kind == kind)
