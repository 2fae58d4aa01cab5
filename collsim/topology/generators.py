"""Builders for parametrised node templates.

Each builder takes the resolved template parameters and the preset library and returns a template mapping with
``devices`` and ``links`` in the same format as a static template file. Only structural numbers appear here
(how many devices, who is wired to whom, how many NVLinks a GPU preset has); bandwidths and latencies come from
the presets (the link presets ``pcie{gen}`` and the GPU's ``nvlink``, each CPU's ``socket_link``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from collsim.topology.errors import TopologyError
from collsim.topology.presets import PresetLibrary

__all__ = [
    "GENERATORS", "NVSWITCH_BY_NVLINK", "cpu_host", "grace_superchips", "hgx_board", "nvlink_rack", "pcie_workstation",
]  # fmt: skip

#: The NVSwitch fabric of an 8-GPU HGX board by the GPUs' NVLink generation (the GPU preset's ``nvlink``): the
#: ``spec`` of the aggregated ``nvswitch`` device and where it comes from. ``multicast`` (NVLink SHARP) decides
#: whether NCCL can run NVLS (with the GPU arch; ``plan.nvls_refusal``).
NVSWITCH_BY_NVLINK: dict[str, dict[str, Any]] = {
    "nvlink3": {
        "spec": {"physical_switches": 6, "generation": 2, "multicast": False},
        "source": "HGX A100 8-GPU: 6 second-generation NVSwitches, 12 NVLinks per GPU, no NVLink SHARP "
        "(NVIDIA DGX A100 User Guide, as dgx-a100.yaml)",
    },
    "nvlink4": {
        "spec": {"physical_switches": 4, "generation": 3, "multicast": True},
        "source": "HGX H100/H200 8-GPU: 4 third-generation NVSwitches with NVLink SHARP multicast and reduction "
        "(NVIDIA technical blog 'Introducing NVIDIA HGX H100'; DGX H100 User Guide; the HGX H200 board is the "
        "same, NVIDIA H200 datasheet: NVLink 900 GB/s, HGX H200 8-GPU)",
    },
    "nvlink5": {
        "spec": {"physical_switches": 2, "generation": 4, "multicast": True},
        "source": "HGX B200 8-GPU: 2 NVLink 5 switch chips with NVLink SHARP (NVIDIA DGX B200 datasheet, as "
        "hgx-b200.yaml)",
    },
}


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


def _gpu_nvlinks(params: Mapping[str, Any], presets: PresetLibrary, field: str) -> tuple[int, str]:
    """The NVLinks of the GPU preset named by ``params["gpu"]`` and their link preset; an error when it has none."""
    spec = presets.gpus[params["gpu"]]
    count, preset = int(spec.get("nvlinks") or 0), spec.get("nvlink")
    if count < 1 or not preset:
        raise TopologyError(
            f"GPU preset {params['gpu']!r} has no NVLinks (nvlinks: {spec.get('nvlinks')}) to wire; "
            f"choose a GPU with NVLinks or turn {field} off",
            field=f"params.{field}",
        )
    return count, str(preset)


def pcie_workstation(params: Mapping[str, Any], presets: PresetLibrary) -> dict[str, Any]:
    """Build a PCIe GPU box, optionally with NVLink bridges between GPU pairs.

    GPUs are split over the sockets in consecutive blocks (GPU 0.. on socket 0). With ``pcie_switch`` each
    socket's GPUs sit under PCIe switches of up to ``gpus_per_switch`` GPUs each, every switch on its socket's root
    complex; without it each GPU is on its socket's root complex. The optional ``nic`` is ``nics`` NICs (default 1)
    spread evenly over the switches in order (NIC k on switch ``k * switches // nics``: with 4 switches on 2 sockets
    and 2 NICs, the first switch of each socket), or over the sockets' root complexes without switches. Every PCIe
    link uses the preset ``pcie{pcie_gen}``; the socket link is the CPU preset's
    ``socket_link``. The ``p2p`` parameter, when set, overrides the GPU preset's ``p2p``. With ``nvlink_bridge``
    (absent or false by default) GPUs 0-1, 2-3, ... are joined by NVLink bridges carrying all of the GPU preset's
    ``nvlinks`` (its ``nvlink`` link preset; an H100 PCIe pair: 12 NVLink 4 links over 3 bridges).
    """
    devices, links = _sockets(params, presets)
    pcie = f"pcie{params['pcie_gen']}"
    gpu: dict[str, Any] = {"name": "gpu", "kind": "gpu", "count": params["gpus"], "preset": params["gpu"]}
    if params.get("p2p") is not None:
        gpu["spec"] = {"p2p": params["p2p"]}
    devices.insert(0, gpu)
    switch = 0
    switches: list[str] = []
    for socket, block in enumerate(_split(params["gpus"], params["sockets"])):
        if not params["pcie_switch"]:
            links.extend({"a": f"gpu{g}", "b": f"cpu{socket}", "preset": pcie} for g in block)
            continue
        per = params["gpus_per_switch"]
        for start in range(0, len(block), per):
            sw = f"pcie{switch}"
            switches.append(sw)
            devices.append({"name": sw, "kind": "pcie_switch", "spec": {"gen": params["pcie_gen"]}})
            links.append({"a": [f"gpu{g}" for g in block[start : start + per]], "b": sw, "preset": pcie})
            links.append({"a": sw, "b": f"cpu{socket}", "preset": pcie})
            switch += 1
    if params.get("nvlink_bridge"):
        count, nvlink = _gpu_nvlinks(params, presets, "nvlink_bridge")
        links.extend(
            {"a": f"gpu{g}", "b": f"gpu{g + 1}", "preset": nvlink, "count": count}
            for g in range(0, params["gpus"] - 1, 2)
        )
    if params.get("nic") is not None:
        nics = int(params.get("nics") or 1)
        homes = switches or [f"cpu{s}" for s in range(params["sockets"])]
        devices.append({"name": "nic", "kind": "nic", "count": nics, "preset": params["nic"]})
        links.extend({"a": f"nic{k}", "b": homes[k * len(homes) // nics], "preset": pcie} for k in range(nics))
    return {"devices": devices, "links": links}


def hgx_board(params: Mapping[str, Any], presets: PresetLibrary) -> dict[str, Any]:
    """Build an HGX-style SXM board of 4 or 8 GPUs with its host.

    8 GPUs: every GPU's ``nvlinks`` NVLinks go to one aggregated ``nvswitch`` whose spec (switch chips, generation,
    ``multicast``) comes from :data:`NVSWITCH_BY_NVLINK` by the GPU preset's ``nvlink``; 4 GPUs: no NVSwitch, every
    pair joined directly by ``nvlinks // 3`` NVLinks (HGX A100 4-GPU: 4 per pair, HGX H100 4-GPU: 6). Host side as
    the DGX/HGX 8-GPU boards: PCIe switches of 2 GPUs each with ``nics_per_gpu`` NICs per GPU, the first half of the
    switches on socket 0 and the rest on socket 1, every PCIe link ``pcie{pcie_gen}`` (default: the GPU preset's
    ``pcie_gen``).
    """
    ngpu = params["gpus"]
    nvlinks, nvlink = _gpu_nvlinks(params, presets, "gpu")
    gen = params.get("pcie_gen") or presets.gpus[params["gpu"]].get("pcie_gen") or 4
    pcie = f"pcie{gen}"
    devices: list[dict[str, Any]] = [{"name": "gpu", "kind": "gpu", "count": ngpu, "preset": params["gpu"]}]
    links: list[dict[str, Any]] = []
    if ngpu == 8:
        fabric = NVSWITCH_BY_NVLINK.get(nvlink)
        if fabric is None:
            raise TopologyError(
                f"no 8-GPU NVSwitch board is known for {nvlink} GPUs ({params['gpu']}); known: "
                f"{', '.join(NVSWITCH_BY_NVLINK)} (the DGX-1's V100 cube-mesh is the dgx1-v100 template)",
                field="params.gpu",
            )
        devices.append(
            {"name": "nvswitch", "kind": "nvswitch", "spec": dict(fabric["spec"]), "source": fabric["source"]}
        )
        links.append({"a": f"gpu[0-{ngpu - 1}]", "b": "nvswitch", "preset": nvlink, "count": nvlinks})
    else:
        per_pair = nvlinks // (ngpu - 1)
        links.extend(
            {"a": f"gpu{a}", "b": f"gpu{b}", "preset": nvlink, "count": per_pair}
            for a in range(ngpu)
            for b in range(a + 1, ngpu)
        )
    nswitch = ngpu // 2
    npg = params["nics_per_gpu"]
    devices.append({"name": "pcie", "kind": "pcie_switch", "count": nswitch, "spec": {"gen": gen}})
    if npg:
        devices.append({"name": "nic", "kind": "nic", "count": ngpu * npg, "preset": params["nic"]})
    devices.append({"name": "cpu", "kind": "cpu", "count": 2, "preset": params["cpu"]})
    for s in range(nswitch):
        nics = [f"nic{k}" for k in range(2 * s * npg, 2 * (s + 1) * npg)]
        links.append({"a": [f"gpu{2 * s}", f"gpu{2 * s + 1}", *nics], "b": f"pcie{s}", "preset": pcie})
        links.append({"a": f"pcie{s}", "b": f"cpu{0 if s < nswitch // 2 else 1}", "preset": pcie})
    links.append({"a": "cpu0", "b": "cpu1", "preset": presets.cpus[params["cpu"]]["socket_link"]})
    return {"devices": devices, "links": links}


def nvlink_rack(params: Mapping[str, Any], presets: PresetLibrary) -> dict[str, Any]:
    """Build one rack-scale NVLink domain (GB200 NVL72 / NVL36) as one node.

    ``gpus`` GPUs on one aggregated ``nvswitch`` (the rack's NVLink switch trays), each GPU with all its
    ``nvlinks``; compute trays of 4 GPUs and 2 CPUs, each CPU (Grace) holding 2 GPUs over NVLink-C2C
    (``nvlink-c2c``, one link each) and ``nics_per_gpu`` NICs per GPU over ``pcie{pcie_gen}``, the tray's 2 CPUs
    joined by the CPU preset's ``socket_link``. A GPU reaches its NICs through its Grace (NCCL's P2C path). Trays
    are separate hosts: no link joins them except the NVLink domain, so devices of different trays have no PCIe
    path (path type NET). ``gpus`` is any whole number of trays (4 to 72 GPUs): a rack partly populated, or a
    partition of it (OCI's GPU memory clusters of 16 trays).
    """
    ngpu = params["gpus"]
    if ngpu % 4:
        raise TopologyError(
            f"gpus must be a whole number of compute trays of 4 GPUs (4, 8, ..., 72); got {ngpu}", field="params.gpus"
        )
    nvlinks, nvlink = _gpu_nvlinks(params, presets, "gpu")
    pcie = f"pcie{params['pcie_gen']}"
    ncpu = ngpu // 2
    npg = params["nics_per_gpu"]
    devices: list[dict[str, Any]] = [
        {"name": "gpu", "kind": "gpu", "count": ngpu, "preset": params["gpu"]},
        {
            "name": "nvswitch",
            "kind": "nvswitch",
            "spec": {"physical_switches": 18, "generation": 4, "multicast": True},
            "source": "GB200 NVL72: 9 NVLink switch trays of 2 NVLink 5 switch chips (NVLink SHARP), 130 TB/s "
            "aggregate = 72 GPUs x 1.8 TB/s (NVIDIA GB200 NVL72 product page and datasheet)",
        },
        {"name": "cpu", "kind": "cpu", "count": ncpu, "preset": params["cpu"]},
    ]
    if npg:
        devices.append({"name": "nic", "kind": "nic", "count": ngpu * npg, "preset": params["nic"]})
    links: list[dict[str, Any]] = [{"a": f"gpu[0-{ngpu - 1}]", "b": "nvswitch", "preset": nvlink, "count": nvlinks}]
    socket_link = presets.cpus[params["cpu"]]["socket_link"]
    for c in range(ncpu):
        links.append({"a": [f"gpu{2 * c}", f"gpu{2 * c + 1}"], "b": f"cpu{c}", "preset": "nvlink-c2c"})
        nics = [f"nic{k}" for k in range(2 * c * npg, 2 * (c + 1) * npg)]
        if nics:
            links.append({"a": nics, "b": f"cpu{c}", "preset": pcie})
        if c % 2 == 1:
            links.append({"a": f"cpu{c - 1}", "b": f"cpu{c}", "preset": socket_link})
    return {"devices": devices, "links": links}


def grace_superchips(params: Mapping[str, Any], presets: PresetLibrary) -> dict[str, Any]:
    """Build a node of 1, 2 or 4 Grace superchips (GH200): each GPU on its own Grace CPU over NVLink-C2C
    (``nvlink-c2c``), ``nics_per_superchip`` NICs on each Grace's PCIe (``pcie{pcie_gen}``), every pair of Graces
    joined by the CPU preset's ``socket_link``. GPUs: 2 superchips with ``nvlink: true`` (GH200 NVL2) or 4 (a
    quad-GH200 blade) are joined pairwise by ``nvlinks // (superchips - 1)`` NVLinks each (NV18, NV6); without
    NVLink the GPUs reach each other only through their CPUs (SYS), as on a dual-GH200 workstation.
    """
    n = params["superchips"]
    npc = params["nics_per_superchip"]
    pcie = f"pcie{params['pcie_gen']}"
    devices: list[dict[str, Any]] = [
        {"name": "gpu", "kind": "gpu", "count": n, "preset": params["gpu"]},
        {"name": "cpu", "kind": "cpu", "count": n, "preset": params["cpu"]},
    ]
    if npc:
        devices.append({"name": "nic", "kind": "nic", "count": n * npc, "preset": params["nic"]})
    links: list[dict[str, Any]] = []
    socket_link = presets.cpus[params["cpu"]]["socket_link"]
    for c in range(n):
        links.append({"a": f"gpu{c}", "b": f"cpu{c}", "preset": "nvlink-c2c"})
        if npc:
            links.append({"a": [f"nic{k}" for k in range(c * npc, (c + 1) * npc)], "b": f"cpu{c}", "preset": pcie})
        links.extend({"a": f"cpu{o}", "b": f"cpu{c}", "preset": socket_link} for o in range(c))
    if n > 1 and params["nvlink"]:
        nvlinks, nvlink = _gpu_nvlinks(params, presets, "nvlink")
        per_pair = nvlinks // (n - 1)
        links.extend(
            {"a": f"gpu{a}", "b": f"gpu{b}", "preset": nvlink, "count": per_pair}
            for a in range(n)
            for b in range(a + 1, n)
        )
    return {"devices": devices, "links": links}


def cpu_host(params: Mapping[str, Any], presets: PresetLibrary) -> dict[str, Any]:
    """Build a CPU-only host: 1 or 2 sockets and one NIC on socket 0 over ``pcie{pcie_gen}``.

    Ranks are process slots (``params["processes"]``), see :meth:`collsim.topology.Topology.rank_devices`.
    """
    devices, links = _sockets(params, presets)
    devices.append({"name": "nic", "kind": "nic", "count": 1, "preset": params["nic"]})
    links.append({"a": "nic0", "b": "cpu0", "preset": f"pcie{params['pcie_gen']}"})
    return {"devices": devices, "links": links}


#: What each generator can build, checked before it runs (:func:`check_generator_params`): integer parameter ->
#: (its allowed values, or (low, high) with None for no bound; how to say it). A user template may declare a
#: parameter more widely than its generator can build (``hgx_board`` with 3 GPUs); the template's own ``min``,
#: ``max`` and ``choices`` are checked first.
GENERATOR_DOMAINS: dict[str, dict[str, tuple[tuple[int | None, ...] | set[int], str]]] = {
    "pcie_workstation": {"gpus": ((1, None), ">= 1"), "sockets": ({1, 2}, "1 or 2"), "nics": ((1, None), ">= 1"),
                         "gpus_per_switch": ((1, None), ">= 1"), "pcie_gen": ({3, 4, 5, 6}, "3, 4, 5 or 6")},
    "cpu_host": {"sockets": ({1, 2}, "1 or 2"), "processes": ((1, None), ">= 1"),
                 "pcie_gen": ({3, 4, 5, 6}, "3, 4, 5 or 6")},
    "hgx_board": {"gpus": ({4, 8}, "4 or 8 (a 4-GPU board of direct NVLinks or an 8-GPU NVSwitch board)"),
                  "nics_per_gpu": ((0, None), ">= 0")},
    "nvlink_rack": {"gpus": ((4, None), "a whole number of compute trays of 4 GPUs"),
                    "nics_per_gpu": ((0, None), ">= 0"), "pcie_gen": ({3, 4, 5, 6}, "3, 4, 5 or 6")},
    "grace_superchips": {"superchips": ({1, 2, 4}, "1, 2 or 4"), "nics_per_superchip": ((0, None), ">= 0"),
                         "pcie_gen": ({3, 4, 5, 6}, "3, 4, 5 or 6")},
}  # fmt: skip


def check_generator_params(generator: str, params: Mapping[str, Any]) -> None:
    """Refuse parameter values ``generator`` cannot build (:data:`GENERATOR_DOMAINS`), naming the parameter.

    Raises
    ------
    TopologyError
        With ``field`` ``params.<name>``.
    """
    for name, (domain, expected) in GENERATOR_DOMAINS.get(generator, {}).items():
        value = params.get(name)
        if value is None:
            continue
        if isinstance(domain, set):
            ok = value in domain
        else:
            lo, hi = domain
            ok = (lo is None or value >= lo) and (hi is None or value <= hi)
        if not ok:
            raise TopologyError(f"generator {generator} builds {name} {expected}; got {value!r}",
                                field=f"params.{name}")  # fmt: skip


#: Generator name (a template's ``generator:`` value) to builder.
GENERATORS: dict[str, Callable[[Mapping[str, Any], PresetLibrary], dict[str, Any]]] = {
    "pcie_workstation": pcie_workstation,
    "cpu_host": cpu_host,
    "hgx_board": hgx_board,
    "nvlink_rack": nvlink_rack,
    "grace_superchips": grace_superchips,
}
