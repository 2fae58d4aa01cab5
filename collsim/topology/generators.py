"""Builders for parametrised node templates.

Each builder takes the resolved template parameters and the preset library and returns a template mapping with
``devices`` and ``links`` in the same format as a static template file. Only structural numbers appear here;
bandwidths and latencies come from the presets (the link preset ``pcie{gen}`` and each CPU's ``socket_link``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from collsim.topology.presets import PresetLibrary

__all__ = ["GENERATORS", "cpu_host", "pcie_workstation"]


def _split(total: int, parts: int) -> list[list[int]]:
    """Split ``range(total)`` into ``parts`` consecutive blocks, the first blocks one longer when uneven."""
    out: list[list[int]] = []
    start = 0
    for p in range(parts):
        size = total // parts + (1 if p < total % parts else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def _sockets(params: Mapping[str, Any], presets: PresetLibrary) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    devices: list[dict[str, Any]] = [
        {"name": "cpu", "kind": "cpu", "count": params["sockets"], "preset": params["cpu"]}
    ]
    links: list[dict[str, Any]] = []
    if params["sockets"] == 2:
        links.append({"a": "cpu0", "b": "cpu1", "preset": presets.cpus[params["cpu"]]["socket_link"]})
    return devices, links


def pcie_workstation(params: Mapping[str, Any], presets: PresetLibrary) -> dict[str, Any]:
    """Build a PCIe-only GPU box.

    GPUs are split over the sockets in consecutive blocks (GPU 0.. on socket 0). With ``pcie_switch`` each
    socket's GPUs sit under PCIe switches of up to ``gpus_per_switch`` GPUs each, every switch on its socket's root
    complex; without it each GPU is on its socket's root complex. The optional NIC sits on the first switch (or on
    socket 0). Every PCIe link uses the preset ``pcie{pcie_gen}``; the socket link is the CPU preset's
    ``socket_link``. The ``p2p`` parameter, when set, overrides the GPU preset's ``p2p``.
    """
    devices, links = _sockets(params, presets)
    pcie = f"pcie{params['pcie_gen']}"
    gpu: dict[str, Any] = {"name": "gpu", "kind": "gpu", "count": params["gpus"], "preset": params["gpu"]}
    if params.get("p2p") is not None:
        gpu["spec"] = {"p2p": params["p2p"]}
    devices.insert(0, gpu)
    switch = 0
    first_switch: str | None = None
    for socket, block in enumerate(_split(params["gpus"], params["sockets"])):
        if not params["pcie_switch"]:
            links.extend({"a": f"gpu{g}", "b": f"cpu{socket}", "preset": pcie} for g in block)
            continue
        per = params["gpus_per_switch"]
        for start in range(0, len(block), per):
            sw = f"pcie{switch}"
            first_switch = first_switch or sw
            devices.append({"name": sw, "kind": "pcie_switch", "spec": {"gen": params["pcie_gen"]}})
            links.append({"a": [f"gpu{g}" for g in block[start : start + per]], "b": sw, "preset": pcie})
            links.append({"a": sw, "b": f"cpu{socket}", "preset": pcie})
            switch += 1
    if params.get("nic") is not None:
        devices.append({"name": "nic", "kind": "nic", "count": 1, "preset": params["nic"]})
        links.append({"a": "nic0", "b": first_switch or "cpu0", "preset": pcie})
    return {"devices": devices, "links": links}


def cpu_host(params: Mapping[str, Any], presets: PresetLibrary) -> dict[str, Any]:
    """Build a CPU-only host: 1 or 2 sockets and one NIC on socket 0 over ``pcie{pcie_gen}``.

    Ranks are process slots (``params["processes"]``), see :meth:`collsim.topology.Topology.rank_devices`.
    """
    devices, links = _sockets(params, presets)
    devices.append({"name": "nic", "kind": "nic", "count": 1, "preset": params["nic"]})
    links.append({"a": "nic0", "b": "cpu0", "preset": f"pcie{params['pcie_gen']}"})
    return {"devices": devices, "links": links}


#: Generator name (a template's ``generator:`` value) to builder.
GENERATORS: dict[str, Callable[[Mapping[str, Any], PresetLibrary], dict[str, Any]]] = {
    "pcie_workstation": pcie_workstation,
    "cpu_host": cpu_host,
}
