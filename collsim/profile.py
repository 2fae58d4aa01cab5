"""Calibration profiles: a YAML overlay of fitted parameters that a scenario references (``calibration: p.yaml``).

A profile says what the hardware and software *achieve* where that differs from the presets: per link kind the
achieved bandwidth (as a factor on the preset) and an extra latency per traversal; per backend the per-message and
per-step overheads; for Gloo the TCP throughput per connection and the CPU reduction rate. ``collsim calibrate``
writes profiles (with the measurement they came from and the fit's error); :class:`collsim.api.Simulator` applies
the one a scenario names.

Parameters (``parameters:`` keys; bounds are physical limits the fit respects):

==================================  =====================================================================  ===========
name                                meaning                                                                bounds
==================================  =====================================================================  ===========
``link.<kind>.bandwidth_scale``     achieved / preset bandwidth of every link of ``kind`` (nvlink, pcie,   0.05 .. 2
                                    upi, c2c, ib, roce, eth)
``link.<kind>.latency_us``          extra latency per traversal, microseconds (may be negative down to     -5 .. 500
                                    zero total)
``nccl.step_latency_scale``         factor on NCCL's per-step latency (hwLat) as simulated                 0.05 .. 20
``nccl.launch_overhead_us``         extra time per collective (launch, base latency), microseconds        -20 .. 500
``nccl.ll_bw_scale``                factor on the rate one channel reaches with LL (the channel's cap)      0.05 .. 2
``nccl.ll128_bw_scale``             factor on the rate one channel reaches with LL128                       0.05 .. 2
``nic.message_overhead_us``         a network message's time on each NIC port beyond its bytes (every      0 .. 200
                                    NIC; the presets' ``message_overhead``), microseconds
``gloo.tcp_bw_scale``               factor on TCP throughput per connection (per core)                     0.02 .. 10
``gloo.reduce_bw_scale``            factor on the CPU reduction rate per core                               0.02 .. 10
``gloo.message_latency_us``         one TCP message one way (syscalls, stack), microseconds                0.5 .. 2000
``gloo.enqueue_latency_us``         per collective: work queued to Gloo's worker thread, microseconds      0 .. 5000
==================================  =====================================================================  ===========

NCCL's cost model (the algorithm/protocol choice) keeps NCCL's own latency constants: the NCCL overheads change only
the simulated time, as a real system's do. Link factors change the topology the plan is built from, so NCCL's bus
bandwidth estimate sees them (NCCL measures nothing either; a simplification).

Examples
--------
>>> p = Profile({"link.nvlink.bandwidth_scale": 0.9, "nccl.launch_overhead_us": 3.0})
>>> p.parameters["nccl.launch_overhead_us"]
3.0
>>> Profile({"link.nvlink.bandwidth": 0.9})
Traceback (most recent call last):
...
collsim.scenario.errors.ScenarioError: parameters.link.nvlink.bandwidth: unknown parameter; expected one of ...
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import yaml

from collsim.backends import GlooConstants, NcclConstants
from collsim.files import FileReadError, read_text_file, write_atomic
from collsim.safeyaml import YamlInputError, load_yaml
from collsim.scenario import ScenarioError
from collsim.topology import Topology
from collsim.topology.model import FrozenMap
from collsim.vocab import LINK_KINDS

__all__ = ["FORMAT", "PARAMETER_BOUNDS", "Profile", "load_profile", "parameter_bounds"]

#: The value of ``format`` in profile files.
FORMAT = "collsim-profile/1"

_US = 1e-6  # microseconds to seconds

#: (lower, upper, neutral value) per parameter name; ``link.<kind>.*`` applies to every kind of LINK_KINDS.
PARAMETER_BOUNDS: dict[str, tuple[float, float, float]] = {
    "link.<kind>.bandwidth_scale": (0.05, 2.0, 1.0),
    "link.<kind>.latency_us": (-5.0, 500.0, 0.0),
    "nccl.step_latency_scale": (0.05, 20.0, 1.0),
    "nccl.launch_overhead_us": (-20.0, 500.0, 0.0),
    "nccl.ll_bw_scale": (0.05, 2.0, 1.0),
    "nccl.ll128_bw_scale": (0.05, 2.0, 1.0),
    "nic.message_overhead_us": (0.0, 200.0, math.nan),
    "gloo.tcp_bw_scale": (0.02, 10.0, 1.0),
    "gloo.reduce_bw_scale": (0.02, 10.0, 1.0),
    "gloo.message_latency_us": (0.5, 2000.0, math.nan),
    "gloo.enqueue_latency_us": (0.0, 5000.0, math.nan),
}


def _pattern(name: str) -> str | None:
    parts = name.split(".")
    if len(parts) == 3 and parts[0] == "link" and parts[1] in LINK_KINDS:
        key = f"link.<kind>.{parts[2]}"
        return key if key in PARAMETER_BOUNDS else None
    return name if name in PARAMETER_BOUNDS else None


def parameter_bounds(name: str, file: str | None = None) -> tuple[float, float, float]:
    """(lower, upper, neutral) of a parameter; neutral is NaN for absolute values with no neutral setting.

    Raises
    ------
    ScenarioError
        For an unknown name (naming ``file`` when given).
    """
    key = _pattern(name)
    if key is None:
        raise ScenarioError(f"unknown parameter; expected one of {', '.join(PARAMETER_BOUNDS)}", file=file,
                            field=f"parameters.{name}")
    return PARAMETER_BOUNDS[key]


@dataclass
class Profile:
    """Fitted parameters and where they came from.

    Parameters
    ----------
    parameters : mapping of str to float
        Parameter name to value (see the module table for names, units and bounds).
    meta : dict, optional
        ``fitted_on`` (scenario, measurement files, sizes used), ``fit`` (errors), free-form.
    file : str, optional
        Where the profile was read from (for messages).
    """

    parameters: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    file: str | None = None

    def __post_init__(self) -> None:
        clean: dict[str, float] = {}
        for name, value in self.parameters.items():
            lo, hi, _ = parameter_bounds(name, self.file)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ScenarioError(f"expected a number, got {value!r}", file=self.file, field=f"parameters.{name}")
            if not lo <= float(value) <= hi:
                raise ScenarioError(f"expected a value in [{lo:g}, {hi:g}], got {value!r}", file=self.file,
                                    field=f"parameters.{name}")
            clean[name] = float(value)
        self.parameters = clean

    # ------------------------------------------------------------------------------------------ application
    def apply_topology(self, topo: Topology) -> Topology:
        """A copy of ``topo`` with link bandwidths and latencies, NICs' per-message cost, and CPU TCP/reduction specs,
        adjusted."""
        p = self.parameters
        if not any(k.startswith(("link.", "gloo.tcp", "gloo.reduce", "gloo.message", "nic.")) for k in p):
            return topo
        graph: nx.DiGraph = topo.graph.copy()
        for u, v, data in graph.edges(data=True):
            ln = data["link"]
            scale = p.get(f"link.{ln.kind}.bandwidth_scale", 1.0)
            extra = p.get(f"link.{ln.kind}.latency_us", 0.0) * _US
            if scale != 1.0 or extra:
                graph.edges[u, v]["link"] = dataclasses.replace(
                    ln, bandwidth=ln.bandwidth * scale, latency=max(0.0, ln.latency + extra)
                )
        for n, data in graph.nodes(data=True):
            dev = data["device"]
            if dev.kind == "nic" and "nic.message_overhead_us" in p:
                spec = {**dev.spec, "message_overhead": p["nic.message_overhead_us"] * _US}
                graph.nodes[n]["device"] = dataclasses.replace(dev, spec=FrozenMap(spec))
            if dev.kind != "cpu":
                continue
            spec = dict(dev.spec)
            for key in ("tcp_bw_per_core", "tcp_loopback_bw_per_core"):
                if key in spec:
                    spec[key] = float(spec[key]) * p.get("gloo.tcp_bw_scale", 1.0)
            if "reduce_bw_per_core" in spec:
                spec["reduce_bw_per_core"] = float(spec["reduce_bw_per_core"]) * p.get("gloo.reduce_bw_scale", 1.0)
            if "gloo.message_latency_us" in p:
                spec["tcp_message_latency"] = p["gloo.message_latency_us"] * _US
            graph.nodes[n]["device"] = dataclasses.replace(dev, spec=FrozenMap(spec))
        return topo.replaced(graph)

    def unmatched(self, topo: Topology) -> list[str]:
        """The parameters that act on nothing in ``topo``: a link kind it has no link of, a NIC or CPU cost where it
        has no NIC or CPU (a profile fitted on another cluster). NCCL's and Gloo's own constants always act.

        >>> from collsim.api import Simulator
        >>> topo = Simulator.from_source("hgx-h100").topology
        >>> Profile({"link.roce.bandwidth_scale": 0.9, "link.nvlink.bandwidth_scale": 0.9}).unmatched(topo)
        ['link.roce.bandwidth_scale']
        """
        kinds = {ln.kind for ln in topo.links()}
        devices = {d.kind for d in topo.devices()}
        return [
            name for name in self.parameters
            if (name.startswith("link.") and name.split(".")[1] not in kinds)
            or (name.startswith("nic.") and "nic" not in devices)
            or (name.startswith(("gloo.tcp", "gloo.reduce", "gloo.message")) and "cpu" not in devices)
        ]  # fmt: skip

    def apply_nccl(self, consts: NcclConstants) -> NcclConstants:
        """NCCL constants with the simulated per-step latency factor and per-collective overhead set."""
        p = self.parameters
        return dataclasses.replace(
            consts,
            sim_step_latency_scale=p.get("nccl.step_latency_scale", 1.0),
            sim_launch_overhead=p.get("nccl.launch_overhead_us", 0.0) * _US,
            sim_ll_bw_scale=p.get("nccl.ll_bw_scale", 1.0),
            sim_ll128_bw_scale=p.get("nccl.ll128_bw_scale", 1.0),
        )

    def apply_gloo(self, consts: GlooConstants) -> GlooConstants:
        """Gloo constants with the calibrated per-collective enqueue latency."""
        if "gloo.enqueue_latency_us" not in self.parameters:
            return consts
        return dataclasses.replace(consts, work_enqueue_latency=self.parameters["gloo.enqueue_latency_us"] * _US)

    # ------------------------------------------------------------------------------------------------- files
    def to_yaml(self) -> str:
        """The profile as YAML: ``format``, ``parameters`` (sorted), then the metadata."""
        doc = {"format": FORMAT, "parameters": {k: round(v, 6) for k, v in sorted(self.parameters.items())}}
        doc.update(self.meta)
        head = (
            "# collsim calibration profile: reference it from a scenario with `calibration: <this file>`.\n"
            "# Parameter names, units and bounds: README, section 'Calibration and validation'.\n"
        )
        return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)

    def write(self, path: str | Path) -> None:
        """Write :meth:`to_yaml` to ``path`` (UTF-8), whole or not at all (:func:`collsim.files.write_atomic`)."""
        write_atomic(path, self.to_yaml())


def load_profile(path: str | Path) -> Profile:
    """Read and validate a profile YAML file.

    Raises
    ------
    ScenarioError
        Naming the file and the field, for unreadable files, a wrong ``format`` or a bad parameter.
    """
    file = str(path)
    try:  # collsim's one YAML loader, as for scenarios: YAML 1.2 numbers, duplicate keys refused, the line said
        data = load_yaml(read_text_file(Path(path)))
    except FileReadError as exc:
        raise ScenarioError(f"cannot read calibration profile: {exc}", file=file) from None
    except YamlInputError as exc:
        raise ScenarioError(str(exc), file=file) from None
    if not isinstance(data, Mapping):
        raise ScenarioError("expected a mapping with format and parameters", file=file)
    if data.get("format") != FORMAT:
        raise ScenarioError(f"expected {FORMAT!r}, got {data.get('format')!r}", file=file, field="format")
    params = data.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise ScenarioError("expected a mapping of parameter names to numbers", file=file, field="parameters")
    meta = {k: v for k, v in data.items() if k not in ("format", "parameters")}
    return Profile(dict(params), meta, file=file)
