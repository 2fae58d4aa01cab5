"""``collsim bench --probe-check``: a GPU preset's figures against what ``collsim bench --probe`` measured.

What the model takes from a GPU preset and its PCIe link, and what a probe file (``collsim-probe/2``) measured of
the same thing:

* ``kernel_launch_latency`` (Gloo's GPU-resident reductions pay it per kernel, then wait for it): a kernel launched
  and waited for from C++ (:mod:`collsim.bench.native`, where the probe ran it or its files lie beside the probe),
  and, blurred by PyTorch's dispatch, the probe's launch + synchronise from Python, also less that dispatch;
* ``memcpy_latency`` (Gloo's CUDA staging pays it per copy): an 8-byte pinned copy and its wait from C++, and the
  probe's smallest pinned D2H and H2D copies from Python;
* ``hbm_latency`` (the NVLS copies' rate): the C++ pointer chase through device memory;
* the copy bandwidth: the preset's PCIe link (``links.yaml`` ``pcie{pcie_gen}``, bandwidth x ``dma_efficiency``
  where measured, else x ``efficiency``, scaled by ``pcie_lanes`` / 16: the rate the model's staging copies get)
  against the probe's best pinned (and, for information, pageable) copy rates;
* the model's time of one staged copy, ``memcpy_latency + S / bandwidth``, against the probe's pinned copies per
  size (the PCIe hops' own latency, 0.25 us each in ``links.yaml``, is left out: it is below the copies' spread);
* Gloo with CUDA tensors and N ranks sharing the GPU: the measured cost of staging (the CUDA sweep minus the CPU
  sweep of the same N) against the model's two copies of N tensors over the one PCIe link,
  ``2 x memcpy_latency + N x S / bw_d2h + N x S / bw_h2d`` (ProcessGroupGloo copies the whole tensor to pinned
  memory, runs the CPU ring, copies it back; the N ranks' copies share the link).

Examples
--------
>>> round(copy_model_time_s(1 << 20, latency_s=8e-6, bandwidth_bps=48e9) * 1e6, 3)  # 8 us + 1 MiB / 48 GB/s
29.845
>>> round(staging_model_time_s(1 << 20, 4, latency_s=8e-6, d2h_bps=48e9, h2d_bps=48e9) * 1e6, 3)  # 2 x 4 MiB
190.763
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from collsim.bench.config import BenchError
from collsim.bench.native import HBM_MIN_BYTES, parse_rows, preset_figures
from collsim.topology.presets import PresetLibrary, gpu_preset_for_name, load_presets, read_yaml
from collsim.units import format_size

__all__ = [
    "CheckRow",
    "ProbeCheck",
    "check_probe",
    "copy_model_time_s",
    "format_check",
    "gpu_preset_for",
    "has_native_rows",
    "measured_presets",
    "native_beside",
    "staging_model_time_s",
]

#: Smallest size (bytes) at which the Gloo staging comparison is made: below it the CPU and CUDA sweeps' own
#: run-to-run spread exceeds the copies' cost.
STAGING_MIN_BYTES = 1 << 20


def copy_model_time_s(size: int, *, latency_s: float, bandwidth_bps: float) -> float:
    """The model's time of one staged copy: the fixed cost, then ``size`` bytes at the link's rate (s)."""
    return latency_s + size / bandwidth_bps


def staging_model_time_s(size: int, ranks: int, *, latency_s: float, d2h_bps: float, h2d_bps: float) -> float:
    """The model's staging cost of one Gloo all-reduce of ``size`` bytes by ``ranks`` ranks sharing one GPU (s).

    Each rank copies its tensor to host and back once; the ranks' copies share the GPU's PCIe link, so each
    direction moves ``ranks x size`` bytes; each direction's fixed cost is paid once (the copies overlap in it).
    """
    return 2 * latency_s + ranks * size / d2h_bps + ranks * size / h2d_bps


@dataclasses.dataclass(frozen=True)
class CheckRow:
    """One compared quantity.

    Attributes
    ----------
    what : str
        The quantity and where the measured value comes from.
    unit : str
        ``us``, ``ns`` or ``GB/s`` (GB = 1e9 bytes).
    measured, model : float
        The probe's value and the preset's (or the model's), in ``unit``.
    source : str
        Where the model's value comes from (preset field, link preset, formula).
    """

    what: str
    unit: str
    measured: float
    model: float
    source: str

    @property
    def error(self) -> float:
        """(model - measured) / measured: positive where the model is slower or larger."""
        return (self.model - self.measured) / self.measured


@dataclasses.dataclass(frozen=True)
class ProbeCheck:
    """The comparison of one probe file with one GPU preset."""

    gpu: str
    probe_gpu: str
    rows: tuple[CheckRow, ...]
    notes: tuple[str, ...]


def gpu_preset_for(probe_gpu: str, presets: PresetLibrary) -> str:
    """The GPU preset of the probe's GPU: the one whose ``cuda_names`` list its name, else the one whose ``model``
    names it (``NVIDIA H200`` -> ``h200-sxm-141gb``): every word of the probe's name but ``NVIDIA`` is a word of
    the model (so ``H200`` is not ``GH200``).

    Raises
    ------
    BenchError
        When none or several match: ``--gpu`` must name it.
    """
    listed = gpu_preset_for_name(presets, probe_gpu)
    if listed is not None:
        return listed
    words = {w for w in probe_gpu.lower().split() if w != "nvidia"}
    hits = sorted(
        n for n, rec in presets.gpus.items() if words and words <= set(re.findall(r"\w+", str(rec["model"]).lower()))
    )  # fmt: skip
    if len(hits) != 1:
        found = f"several match ({', '.join(hits)})" if hits else "none matches"
        raise BenchError(f"--probe-check: the probe's GPU is {probe_gpu!r} and {found}; name the preset with --gpu")
    return hits[0]


def _section(probe: Mapping[str, Any], key: str, file: str) -> Any:
    if key not in probe:
        raise BenchError(f"{file}: no {key!r}; expected a collsim-probe/2 file (collsim bench --probe -o FILE.json)")
    return probe[key]


def _pcie_preset(spec: Mapping[str, Any], gpu: str) -> tuple[str, int]:
    """The links.yaml PCIe preset of a GPU preset's generation (Gen3-6; outside, the nearest) and its lane count."""
    gen = spec.get("pcie_gen")
    if gen is None:
        raise BenchError(f"--probe-check: GPU preset {gpu} has no pcie_gen; the copy rate cannot be compared")
    return f"pcie{min(max(int(gen), 3), 6)}", int(spec.get("pcie_lanes") or 16)


def _link_bandwidth(spec: Mapping[str, Any], presets: PresetLibrary, gpu: str) -> tuple[float, str]:
    """The model's PCIe copy rate of a GPU preset (bytes/s) and where it comes from: the link preset's raw rate x
    its ``dma_efficiency`` (a copy engine's measured share) where it has one, else x ``efficiency``, x lanes / 16."""
    name, lanes = _pcie_preset(spec, gpu)
    lk = presets.links[name]
    field = "dma_efficiency" if lk.get("dma_efficiency") is not None else "efficiency"
    raw, eff = float(lk["bandwidth"]) / 1e9, float(lk[field])  # bytes/s to GB/s
    return raw * 1e9 * eff * lanes / 16, f"links.yaml {name}: {raw:.4g} GB/s x {field} {eff:.4g} x {lanes}/16"


def _resolve(
    probe: Mapping[str, Any], gpu: str | None, presets: PresetLibrary, file: str
) -> tuple[str, Mapping[str, Any], Mapping[str, Any]]:
    """The GPU preset's name and record, and the probe's copies (D2H and H2D rows checked), or a one-line error."""
    if probe.get("format") != "collsim-probe/2":
        raise BenchError(f"{file}: format {probe.get('format')!r}; expected 'collsim-probe/2' (collsim bench --probe)")
    probe_gpu = str(_section(probe, "hardware", file).get("gpu", ""))
    name = gpu or gpu_preset_for(probe_gpu, presets)
    if name not in presets.gpus:
        raise BenchError(f"--gpu {name}: unknown GPU preset; known: {', '.join(sorted(presets.gpus))}")
    copies = _section(probe, "copies", file)
    for d in ("d2h", "h2d"):
        if not isinstance(copies.get(d), Mapping) or not copies[d].get("rows"):
            raise BenchError(f"{file}: copies.{d} has no rows; expected a collsim bench --probe file")
    return name, presets.gpus[name], copies


def _times(measurement: Mapping[str, Any]) -> dict[int, float]:
    """Size (bytes) to median time (us) of a measurement object's rows; empty for an ``{"error": ...}`` part."""
    return {int(r["size_bytes"]): float(r["time_us"]) for r in measurement.get("rows", [])}


def native_beside(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The C++ rows of ``cuda-latency*.jsonl`` and ``hbm-latency*.jsonl`` files in ``path``'s folder (several runs
    concatenated), as a probe's ``native`` object, and the files' names (sorted)."""
    native: dict[str, Any] = {}
    names: list[str] = []
    for key, pattern in (("cuda_latency", "cuda-latency*.jsonl"), ("hbm_latency", "hbm-latency*.jsonl")):
        files = sorted(path.parent.glob(pattern))
        if files:
            native[key] = {"rows": [row for f in files for row in parse_rows(f.read_text(encoding="utf-8"))]}
            names += [f.name for f in files]
    return native, names


def has_native_rows(native: Mapping[str, Any] | None) -> bool:
    """Whether a ``native`` object holds any C++ rows."""
    if not native:
        return False
    return any(isinstance(v, Mapping) and v.get("rows") for v in native.values())


def check_probe(
    probe: Mapping[str, Any],
    gpu: str | None = None,
    presets: PresetLibrary | None = None,
    file: str = "probe",
    native: Mapping[str, Any] | None = None,
) -> ProbeCheck:
    """Compare a probe object (:func:`collsim.bench.probe.run_probe`) with a GPU preset.

    Parameters
    ----------
    probe : mapping
        A ``collsim-probe/2`` object.
    gpu : str, optional
        GPU preset name; default: the one whose model names the probe's GPU (:func:`gpu_preset_for`).
    presets : PresetLibrary, optional
        Default: the shipped presets.
    file : str
        Where ``probe`` came from, for messages.
    native : mapping, optional
        C++ rows (a probe's ``native`` object, :func:`native_beside`); default: the probe's own.

    Raises
    ------
    BenchError
        For a file that is not a probe, an unknown or ambiguous GPU preset, a preset without ``pcie_gen``.
    """
    presets = presets or load_presets()
    name, spec, copies = _resolve(probe, gpu, presets, file)
    probe_gpu = str(probe["hardware"].get("gpu", ""))
    launch = _section(probe, "kernel_launch", file)
    lat = float(spec["memcpy_latency"])
    bw, bw_source = _link_bandwidth(spec, presets, name)
    launch_model = float(spec["kernel_launch_latency"]) * 1e6  # s to us
    cxx = preset_figures(native if native is not None else probe.get("native") or {})
    rows = []
    if "kernel_launch_latency_us" in cxx:
        rows.append(CheckRow("kernel launch + wait, from C++ (what the preset stands for)", "us",
                             cxx["kernel_launch_latency_us"], launch_model, f"{name} kernel_launch_latency"))
    rows.append(CheckRow("kernel launch + synchronise from Python (PyTorch's dispatch in)", "us",
                         float(launch["launch_sync_us"]), launch_model, f"{name} kernel_launch_latency"))
    if "cpu_dispatch_us" in launch:  # what Python and PyTorch add to it; a C++ caller does not pay that
        rows.append(CheckRow("the same, less PyTorch's CPU dispatch of the call", "us",
                             float(launch["launch_sync_us"]) - float(launch["cpu_dispatch_us"]), launch_model,
                             f"{name} kernel_launch_latency"))
    if "memcpy_latency_us" in cxx:
        rows.append(CheckRow("8 B pinned copy + wait, from C++, mean of D2H and H2D", "us",
                             cxx["memcpy_latency_us"], lat * 1e6, f"{name} memcpy_latency"))  # s to us
    for d in ("d2h", "h2d"):
        first = min(copies[d]["rows"], key=lambda r: r["size_bytes"])
        rows.append(CheckRow(f"{d.upper()} pinned copy of {first['size_bytes']} B from Python (fixed cost)", "us",
                             float(first["time_us"]), lat * 1e6, f"{name} memcpy_latency"))  # s to us
    if "hbm_latency_ns" in cxx and spec.get("hbm_latency"):
        rows.append(CheckRow(f"device-memory load, pointer chase >= {HBM_MIN_BYTES >> 20} MiB, from C++", "ns",
                             cxx["hbm_latency_ns"], float(spec["hbm_latency"]) * 1e9, f"{name} hbm_latency"))
    for d in ("d2h", "h2d", "d2h_pageable", "h2d_pageable"):
        if d in copies:
            kind = "pinned" if copies[d]["pinned"] else "pageable (not what Gloo stages through)"
            rows.append(CheckRow(f"{d[:3].upper()} {kind} copy rate, best size", "GB/s",
                                 float(copies[d]["bandwidth_gbps"]), bw / 1e9, bw_source))  # bytes/s to GB/s
    notes = []
    for d in ("d2h", "h2d"):
        errs = []
        for r in copies[d]["rows"]:
            size = int(r["size_bytes"])
            model = copy_model_time_s(size, latency_s=lat, bandwidth_bps=bw) * 1e6  # s to us
            rows.append(CheckRow(f"{d.upper()} pinned copy time from Python, {format_size(size)}", "us",
                                 float(r["time_us"]), model, "memcpy_latency + S / bandwidth"))
            errs.append(abs(rows[-1].error))
        med = statistics.median(errs)
        notes.append(f"{d.upper()} pinned copy time: median |error| {med:.1%} over {len(errs)} sizes")
    for n, cuda in sorted(_section(probe, "gloo_cuda", file).items(), key=lambda kv: int(kv[0])):
        cpu = probe.get("gloo_cpu", {}).get(n, {})
        tc, tp = _times(cuda), _times(cpu)
        sizes = [s for s in sorted(tc) if s in tp and s >= STAGING_MIN_BYTES]
        if not sizes:
            why = cuda.get("error") or cpu.get("error") or f"no size of at least {STAGING_MIN_BYTES} B in both sweeps"
            notes.append(f"Gloo with {n} ranks: not compared ({why})")
            continue
        for s in (sizes[0], sizes[-1]):
            model = staging_model_time_s(s, int(n), latency_s=lat, d2h_bps=bw, h2d_bps=bw) * 1e6  # s to us
            rows.append(CheckRow(f"Gloo staging, {n} rank(s) on the GPU, {format_size(s)} (CUDA - CPU sweep)", "us",
                                 tc[s] - tp[s], model, f"2 x memcpy_latency + {n} x S / bandwidth, each way"))
    return ProbeCheck(name, probe_gpu, tuple(rows), tuple(notes))


def format_check(check: ProbeCheck) -> str:
    """The comparison as a text table (one row per quantity: measured, model, error, the model's source)."""
    lines = [f"# probe of {check.probe_gpu!r} against GPU preset {check.gpu}",
             f"{'quantity':<70} {'unit':>5} {'measured':>10} {'model':>10} {'error':>8}  model's source"]
    for r in check.rows:
        lines.append(f"{r.what:<70} {r.unit:>5} {r.measured:>10.4g} {r.model:>10.4g} {r.error:>+8.1%}  {r.source}")
    lines += [f"# {n}" for n in check.notes]
    return "\n".join(lines) + "\n"


def _pinned_rate(copies: Mapping[str, Any]) -> float:
    """The pinned copies' rate (bytes/s): the mean of D2H's and H2D's best."""
    return (float(copies["d2h"]["bandwidth_gbps"]) + float(copies["h2d"]["bandwidth_gbps"])) / 2 * 1e9  # GB/s to B/s


def measured_presets(
    probe: Mapping[str, Any],
    gpu: str | None = None,
    presets: PresetLibrary | None = None,
    native: Mapping[str, Any] | None = None,
    file: str = "probe",
) -> dict[str, Any]:
    """A user presets document (``--presets FILE``) holding what the probe measured, for simulating that machine.

    The shipped GPU preset ``gpu`` (default: the one the probe names) as written in ``gpus.yaml``, with
    ``kernel_launch_latency``, ``memcpy_latency`` and ``hbm_latency`` replaced by the C++ figures where the probe
    (or files beside it, ``native``) has them, and the shipped PCIe link preset of its generation with
    ``dma_efficiency`` from the pinned copies' rate; each replaced field's ``_source`` names the probe, the machine
    and the date. Entries keep their shipped names, so they replace the shipped ones wherever the file is given.

    Raises
    ------
    BenchError
        For a probe :func:`check_probe` refuses, a GPU preset without ``pcie_gen``, or one that is not shipped.
    """
    presets = presets or load_presets()
    name, spec, copies = _resolve(probe, gpu, presets, file)
    link, lanes = _pcie_preset(spec, name)
    raw_gpus = read_yaml(presets.files["gpus"])
    if name not in raw_gpus:
        raise BenchError(f"--preset-out: GPU preset {name} is not a shipped one; add the measured fields to yours")
    src = probe.get("source", {})
    where = f"collsim bench --probe ({file}) on {src.get('machine', 'an unnamed machine')}, {src.get('date', '?')}"
    if native is not None and native is not probe.get("native"):
        where += "; its C++ rows from runs saved beside it"
    entry = dict(raw_gpus[name])
    cxx = preset_figures(native if native is not None else probe.get("native") or {})
    fields = (("kernel_launch_latency", "kernel_launch_latency_us", "us", "a kernel launched and waited for, C++"),
              ("memcpy_latency", "memcpy_latency_us", "us", "8-byte pinned copies and their wait, C++, D2H/H2D mean"),
              ("hbm_latency", "hbm_latency_ns", "ns", "a pointer chase beyond the L2, C++"))
    written = []
    for field, key, unit, what in fields:
        if key in cxx:
            entry[field] = f"{cxx[key]:.4g}{unit}"
            entry[f"{field}_source"] = f"measured: {what}, median {cxx[key]:.4g} {unit}; {where}"
            written.append(field)
    doc: dict[str, Any] = {}
    if written:
        doc["gpus"] = {name: entry}
    rate = _pinned_rate(copies)
    raw_link = dict(read_yaml(presets.files["links"])[link])
    full = float(presets.links[link]["bandwidth"]) * lanes / 16  # the GPU's link, bytes/s before efficiency
    raw_link["dma_efficiency"] = round(rate / full, 4)
    raw_link["dma_efficiency_source"] = (
        f"measured: pinned D2H/H2D copies at their best size, mean {rate / 1e9:.4g} GB/s over {full / 1e9:.4g} "
        f"GB/s (x{lanes}); {where}"
    )
    doc["links"] = {link: raw_link}
    return doc
