"""A scenario for a measured nccl-tests run: the cluster, workload and NCCL settings the run itself records.

``collsim import nccl-tests FILE --node TEMPLATE`` turns an nccl-tests log or JSON report into the scenario that
``collsim validate`` compares it with, so that what the run says about itself is not retyped by hand (and not
mistyped): the collective, type, operator, root and sizes; the ranks, hosts and GPUs a thread drove (``-g``); the
NCCL release; the run's NCCL variables that collsim models. What the run cannot say (how the node is built, the
fabric between nodes) comes from the node template the user names, and every assumption is listed.

A GPU name the run prints (``NVIDIA H100 80GB HBM3``) picks the GPU preset whose ``cuda_names`` list it
(``topologies/presets/gpus.yaml``); a template with a ``gpu`` parameter (``hgx``, ``pcie-workstation`` ...) takes
it, any other template's own GPUs are compared with it.

Examples
--------
>>> from collsim.calibration.measurement import Measurement, MeasurementRow
>>> m = Measurement("allgather", 16, [MeasurementRow(1 << 20, 40.0, "mean")], backend="nccl",
...                 hardware={"gpu": "NVIDIA H100 80GB HBM3", "hosts": ["a", "b"]},
...                 software={"benchmark": "NVIDIA/nccl-tests", "nccl_version": "2.27.3",
...                           "env": {"NCCL_ALGO": "Ring", "NCCL_SOCKET_IFNAME": "eth0"}}, file="ag.json")
>>> imported = scenario_from_measurement(m, "hgx")
>>> s = imported.data
>>> s["cluster"]["node"], s["cluster"]["nodes"], s["cluster"]["node_params"]
('hgx', 2, {'gpu': 'h100-sxm5-80gb'})
>>> s["workload"]["collective"], s["workload"]["sizes"], s["backends"]["nccl"]
('allgather', [1048576], {'enabled': True, 'version': '2.27.3', 'env': {'NCCL_ALGO': 'Ring'}})
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from collsim.calibration.calls import RECORDERS
from collsim.calibration.measurement import Measurement, MeasurementError, uneven_hosts
from collsim.nccl_env import INERT_NCCL_ENV, KNOWN_NCCL_ENV, PLUGIN_ENV
from collsim.units import DTYPE_SIZES
from collsim.vocab import COLLECTIVES, REDUCING_COLLECTIVES, ROOTED_COLLECTIVES

__all__ = ["ImportedScenario", "format_scenario", "scenario_from_measurement"]


@dataclass
class ImportedScenario:
    """A scenario written for a measured run.

    Attributes
    ----------
    data : dict
        The scenario as a mapping (what ``load_scenario`` reads), ``cluster.node`` as given.
    taken : list of str
        What came from the run (one line each).
    given : list of str
        What the user gave on the command line (``--param``, ``--gpu``), one line each.
    assumed : list of str
        What the run does not say and was assumed (one line each): check these against the cluster.
    warnings : list of str
        Where the run and the template disagree (a GPU other than the template's ...).
    """

    data: dict[str, Any]
    taken: list[str] = field(default_factory=list)
    given: list[str] = field(default_factory=list)
    assumed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _load(data: Mapping[str, Any], base: Path) -> Any:
    """``load_scenario`` of ``data`` as if it were a file in ``base`` (relative paths resolve there)."""
    from collsim.scenario import load_scenario

    return load_scenario(dict(data), base_dir=base)


def _gpu_choice(
    m: Measurement, node: str, gpu: str | None, has_gpu_param: bool, library: Any, out: ImportedScenario
) -> tuple[dict[str, Any], list[str], str | None]:
    """The template's ``node_params`` for the GPU (``--gpu``, else the preset whose ``cuda_names`` list the name the
    run printed, on a template with a ``gpu`` parameter), the run's GPU names, and the preset of the first."""
    from collsim.topology.presets import gpu_preset_for_name

    file = m.file
    names = [n for n in str(m.hardware.get("gpu") or "").split(", ") if n.strip()]
    if len(names) > 1:
        out.warnings.append(f"the run printed several GPU names ({', '.join(names)}); the first is used")
    found = gpu_preset_for_name(library, names[0]) if names else None
    if gpu is not None:
        if not has_gpu_param:
            raise MeasurementError(f"--gpu {gpu}: node template {node!r} has no gpu parameter; its GPUs are its own "
                                   "(give a template with one, e.g. hgx or pcie-workstation)", file=file)  # fmt: skip
        if gpu not in library.gpus:
            raise MeasurementError(f"--gpu {gpu}: no such GPU preset (gpus.yaml, or --presets)", file=file)
        out.given.append(f"GPU preset {gpu} (--gpu)")
        return {"gpu": gpu}, names, found
    if found is not None and has_gpu_param:
        out.taken.append(f"GPU preset {found}: the run's GPUs are {names[0]} (gpus.yaml cuda_names)")
        return {"gpu": found}, names, found
    if names and found is None:
        default = " (its gpu parameter's default; give --gpu PRESET)" if has_gpu_param else ""
        out.assumed.append(f"no GPU preset lists {names[0]!r} (gpus.yaml cuda_names): the template's GPUs{default}")
    return {}, names, found


def _placement(m: Measurement, node: str, topo: Any, out: ImportedScenario) -> dict[str, Any]:
    """``cluster`` fields for the run's ranks on ``node`` (built as ``topo``, one node): ``nodes`` from the run's
    hosts or its rank count, ``visible_gpus`` when a host ran fewer ranks than the node has GPUs, and between nodes
    an assumed ``fabric``."""
    file, ranks = m.file, m.nranks
    assert ranks is not None  # checked by the caller
    per_node = len(topo.gpus())
    hosts = [h for h in m.hardware.get("hosts") or [] if isinstance(h, str)]
    uneven = uneven_hosts(m)
    if uneven:
        raise MeasurementError(f"the run's hosts ran different numbers of ranks ({uneven}); collsim runs as many on "
                               "every node: a scenario cannot describe this run", file=file)  # fmt: skip
    if hosts:
        nodes = len(hosts)
        if ranks % nodes:
            raise MeasurementError(f"{ranks} ranks on {nodes} hosts is not the same count on every host", file=file)
        shown = f"{', '.join(hosts[:4])}{' ...' if nodes > 4 else ''}"
        out.taken.append(f"{nodes} node{'s' if nodes > 1 else ''}: the run's hosts ({shown})")
    elif isinstance(m.hardware.get("nodes"), int) and m.hardware["nodes"] > 0:
        nodes = int(m.hardware["nodes"])
        if ranks % nodes:
            raise MeasurementError(f"{ranks} ranks on {nodes} nodes is not the same count on every node", file=file)
        out.taken.append(f"{nodes} node{'s' if nodes > 1 else ''}: the run's record of its nodes")
    elif ranks <= per_node:
        nodes = 1
        out.assumed.append("one node: the run names no hosts and has no more ranks than a node has GPUs")
    else:
        if ranks % per_node:
            raise MeasurementError(f"{ranks} ranks do not fill nodes of {per_node} GPUs ({node}); a run that names "
                                   "its hosts (a JSON report, -J) says how they are spread", file=file)  # fmt: skip
        nodes = ranks // per_node
        out.assumed.append(f"{nodes} nodes of {per_node} GPUs: the run names no hosts ({ranks} ranks)")
    local = ranks // nodes
    if local > per_node:
        raise MeasurementError(f"{local} ranks a host, but node template {node!r} has {per_node} GPUs", file=file)
    placed: dict[str, Any] = {"nodes": nodes}
    if local < per_node:
        placed["visible_gpus"] = list(range(local))
        out.assumed.append(f"{local} of the node's {per_node} GPUs, the first ones (cluster.visible_gpus; set the "
                           "ones CUDA_VISIBLE_DEVICES listed)")  # fmt: skip
    if nodes > 1:
        rdma = all(bool(d.spec.get("rdma", True)) for d in topo.nics())
        placed["fabric"] = {"topology": "single_switch", "transport": "rdma" if rdma else "tcp", "gpudirect": rdma}
        out.assumed.append("one non-blocking switch between the nodes (cluster.fabric.topology: single_switch; "
                           "rail_optimized or fat_tree as the cluster is built)")  # fmt: skip
    return placed


def _workload(m: Measurement, out: ImportedScenario) -> dict[str, Any]:
    """``workload``: the run's collective, type, operator, root, sizes and GPUs a thread drove (``-g``)."""
    workload: dict[str, Any] = {"collective": m.collective}
    if m.software.get("benchmark") == "NCCL Inspector":  # its logs record no element type: float32 was assumed
        out.assumed.append("float32: NCCL Inspector does not record the element type (workload.dtype: bfloat16 for "
                           "a job that communicates in bf16)")  # fmt: skip
        workload["dtype"] = m.dtype
    elif m.dtype in DTYPE_SIZES:
        workload["dtype"] = m.dtype
    else:
        out.assumed.append(f"float32: collsim has no type {m.dtype!r}")
    op = m.software.get("op")
    if m.collective in REDUCING_COLLECTIVES - {"sendrecv"} and isinstance(op, str):
        workload["op"] = op
    root = m.software.get("root")
    if m.collective in ROOTED_COLLECTIVES and isinstance(root, int):
        workload["root"] = root
    workload["sizes"] = [r.size_bytes for r in m.rows]
    per_process = m.software.get("gpus_per_process")
    if isinstance(per_process, int) and per_process > 1:
        workload["gpus_per_process"] = per_process
        out.taken.append(f"gpus_per_process {per_process}: the run's threads each drove {per_process} GPUs (-g)")
    return workload


def _nccl_backend(m: Measurement, out: ImportedScenario) -> dict[str, Any]:
    """``backends.nccl``: the run's release and the NCCL variables it set that collsim models."""
    nccl: dict[str, Any] = {"enabled": True}
    found_version = re.search(r"\d+\.\d+\.\d+", str(m.software.get("nccl_version") or ""))
    if found_version:
        nccl["version"] = found_version.group(0)
        out.taken.append(f"NCCL {found_version.group(0)}")
    else:
        out.assumed.append("the latest NCCL release collsim holds: the run does not print its own")
    env = m.software.get("env") if isinstance(m.software.get("env"), Mapping) else {}
    assert isinstance(env, Mapping)
    modelled = set(KNOWN_NCCL_ENV) | set(PLUGIN_ENV)
    nccl["env"] = {str(k): str(v) for k, v in sorted(env.items()) if k in modelled}
    left = sorted(str(k) for k in env if str(k).startswith("NCCL_") and k not in modelled and k not in INERT_NCCL_ENV)
    if nccl["env"]:
        out.taken.append(f"the run's NCCL variables collsim models: {', '.join(nccl['env'])}")
    if left:
        out.assumed.append(f"the run's NCCL variables collsim does not model are left out (their effect is not in "
                           f"the prediction): {', '.join(left)}")  # fmt: skip
    return nccl


def scenario_from_measurement(
    m: Measurement,
    node: str,
    *,
    gpu: str | None = None,
    name: str | None = None,
    preset_files: Sequence[str] = (),
    base: str | Path = ".",
    node_params: Mapping[str, Any] | None = None,
) -> ImportedScenario:
    """The scenario of the run ``m`` on ``node`` templates: what the run records, and the template for the rest.

    Parameters
    ----------
    m : Measurement
        An nccl-tests log or report as :func:`~collsim.calibration.measurement.read_measurement` reads it.
    node : str
        The node template (a shipped name or a template file, relative to ``base``).
    gpu : str, optional
        GPU preset for a template with a ``gpu`` parameter; default: the preset whose ``cuda_names`` list the GPU
        name the run printed.
    name : str, optional
        The scenario's name; default: the measurement file's stem.
    preset_files : sequence of str
        User preset files the scenario loads (``--presets``), relative to ``base``.
    base : str or Path
        The folder the scenario will be written to: relative paths are resolved there.
    node_params : mapping, optional
        The template's parameters as the user gives them (``--param gpus=8``; a ``gpu`` among them is ``--gpu``'s),
        applied before the run's ranks are placed on the template.

    Returns
    -------
    ImportedScenario
        The mapping, checked by loading it as a scenario, and what was taken, assumed and found to disagree.

    Raises
    ------
    MeasurementError
        When the run cannot be placed on the template: no rank count, more ranks a host than the template has
        GPUs, ranks that do not divide into nodes, a collective collsim does not simulate; naming the file.
    collsim.scenario.ScenarioError
        When the template or a preset named does not load (naming the field).
    """
    base = Path(base)
    file = m.file
    if m.collective not in COLLECTIVES:
        raise MeasurementError(f"collsim does not simulate {m.collective} (it does: {', '.join(COLLECTIVES)})",
                               file=file, field="collective")  # fmt: skip
    if m.nranks is None:
        raise MeasurementError("the run does not say how many ranks ran: give --nranks", file=file, field="nranks")
    out = ImportedScenario(data={})
    given = dict(node_params or {})
    if "gpu" in given:
        if gpu is not None and gpu != given["gpu"]:
            raise MeasurementError(f"--gpu {gpu} and --param gpu={given['gpu']}: give one", file=file)
        gpu = str(given.pop("gpu"))
    cluster: dict[str, Any] = {"node": node, "nodes": 1, **({"node_params": dict(given)} if given else {})}
    if given:
        shown = ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in given.items())
        out.given.append(f"node_params {shown} (--param)")
    probe_data = {"name": "probe", "cluster": cluster, "preset_files": list(preset_files),
                  "workload": {"collective": m.collective}}  # fmt: skip
    probe = _load(probe_data, base)
    params = probe.node_template_source()[0].get("params") or {}
    has_gpu_param = isinstance(params.get("gpu"), Mapping) and params["gpu"].get("type") == "gpu"
    gpu_params, names, found = _gpu_choice(m, node, gpu, has_gpu_param, probe.preset_library(), out)
    if gpu_params:
        cluster["node_params"] = {**given, **gpu_params}
        probe = _load(probe_data, base)
    topo = probe.build_topology()
    gpu_presets = sorted({str(d.spec.get("preset")) for d in topo.gpus()})
    if found is not None and "gpu" not in gpu_params and found not in gpu_presets:
        out.warnings.append(f"the run's GPUs are {names[0]} ({found}); node template {node!r} has "
                            f"{', '.join(gpu_presets)}")  # fmt: skip
    cluster.update(_placement(m, node, topo, out))

    ranks = m.nranks
    stem = name or re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(file).stem).strip("-") or "imported"
    gpus_text = f" ({names[0]})" if names else ""
    what = f"{m.collective} on {cluster['nodes']} x {node}{gpus_text}, {ranks} ranks"
    if m.software.get("timing") == "cputime":
        out.warnings.append("the run timed on the host (-C 1); collsim predicts the GPUs' time")
    out.data = {
        "name": stem,
        "description": f"{_run_kind(m)} of {Path(file).name}: {what}",
        **({"preset_files": list(preset_files)} if preset_files else {}),
        "cluster": cluster,
        "workload": _workload(m, out),
        "backends": {"nccl": _nccl_backend(m, out), "gloo": {"enabled": False}},
    }
    _load(out.data, base)  # the scenario loads as written (a template parameter or preset it does not take fails)
    return out


def _run_kind(m: Measurement) -> str:
    """What the measurement is, for the scenario's description: ``nccl-tests run``, or a job's calls as NCCL's
    Inspector or PyTorch's profiler recorded them (``NCCL Inspector calls``)."""
    recorder = m.software.get("benchmark")
    return f"{recorder} calls" if recorder in RECORDERS else "nccl-tests run"


def format_scenario(
    imported: ImportedScenario,
    measurement: str,
    path: str | None = None,
    *,
    what: str = "nccl-tests run",
    command: str = "import nccl-tests",
    options: str = "",
) -> str:
    """The scenario as YAML, headed by comments saying where each part came from and what to check (``path``: the
    file it is written to, for the ``collsim validate`` line, which ends with ``options``, such as the ``--series``
    the scenario was written for; ``what`` the measurement is and the ``command`` that wrote it).

    >>> data = {"name": "x", "workload": {"collective": "allreduce", "sizes": [8, 16]}}
    >>> print(format_scenario(ImportedScenario(data, taken=["NCCL 2.27.3"]), "r.json", "x.yaml"))
    # Scenario of the nccl-tests run r.json, written by collsim import nccl-tests.
    # From the run: NCCL 2.27.3.
    # Compare (from this folder): collsim validate x.yaml r.json
    name: x
    workload:
      collective: allreduce
      sizes: [8, 16]
    <BLANKLINE>
    """
    lines = [f"# Scenario of the {what} {measurement}, written by collsim {command}."]
    for label, items in (("Given", imported.given), ("From the run", imported.taken), ("Assumed", imported.assumed),
                         ("Check", imported.warnings)):  # fmt: skip
        lines += [f"# {label}: {item}." for item in items]
    lines.append(f"# Compare (from this folder): collsim validate {path or 'SCENARIO.yaml'} {measurement}"
                 + (f" {options}" if options else ""))  # fmt: skip
    body = yaml.safe_dump(imported.data, sort_keys=False, default_flow_style=None, width=120)
    return "\n".join(lines) + "\n" + body
