"""The topology layer: devices, typed directed links, node templates, cluster fabrics, routing and path classes.

Imports nothing from collsim but :mod:`collsim.units`, :mod:`collsim.vocab` (the name lists it re-exports) and
:mod:`collsim.files`; knows nothing of SimPy, collectives or backends.

Examples
--------
>>> from collsim.topology import load_topology
>>> topo = load_topology("dgx-a100")
>>> topo.path_type("n0/gpu0", "n0/gpu1"), topo.path_type("n0/gpu0", "n0/nic0")
('NV12', 'PIX')
"""

from __future__ import annotations

from collsim.topology.display import format_topo_matrix
from collsim.topology.errors import TopologyError
from collsim.topology.fabric import parse_fabric
from collsim.topology.importer import template_from_nccl_xml, template_from_nvidia_smi, write_template
from collsim.topology.model import Device, Link, Topology, ib_device_name, path_class_rank
from collsim.topology.perturb import (
    BackgroundRule,
    DownRule,
    LinkRule,
    add_background,
    matching_devices,
    perturb_links,
    take_down,
)
from collsim.topology.presets import PresetLibrary, load_presets, topologies_dir
from collsim.topology.template import available_templates, load_topology, topology_from_template
from collsim.vocab import DEVICE_KINDS, FABRIC_TOPOLOGIES, LINK_KINDS, PATH_CLASS_ORDER
from collsim.vocab import FABRIC_TRANSPORTS as TRANSPORTS

__all__ = [
    "DEVICE_KINDS",
    "FABRIC_TOPOLOGIES",
    "LINK_KINDS",
    "PATH_CLASS_ORDER",
    "TRANSPORTS",
    "BackgroundRule",
    "Device",
    "DownRule",
    "Link",
    "LinkRule",
    "PresetLibrary",
    "Topology",
    "TopologyError",
    "add_background",
    "available_templates",
    "format_topo_matrix",
    "ib_device_name",
    "load_presets",
    "load_topology",
    "matching_devices",
    "parse_fabric",
    "path_class_rank",
    "perturb_links",
    "take_down",
    "template_from_nccl_xml",
    "template_from_nvidia_smi",
    "topologies_dir",
    "topology_from_template",
    "write_template",
]
