"""``collsim bench --probe``: what calibration needs to know about one GPU, measured.

Measures, on CUDA device 0 of this machine:

* D2H and H2D copies between device memory and pinned host memory, the same between device memory and pageable
  (ordinary) host memory, and device-to-device copies: per size, the host-observed time of
  ``dst.copy_(src, non_blocking=True)`` followed by ``torch.cuda.synchronize()`` (what a Gloo rank pays to stage a
  tensor: PyTorch's ProcessGroupGloo stages CUDA tensors through pinned memory), median and interquartile range over
  iterations;
* kernel launch latency: a one-element ``add_`` kernel, (a) launched and synchronised, median round trip, (b) 1000
  launched back to back: host enqueue time per launch and total time per kernel, (c) the same ``add_`` on a CPU
  tensor: the Python and PyTorch dispatch in (a) and (b) that a C++ caller does not pay;
* NCCL allreduce with one rank (its fixed costs without any transfer), a ``collsim bench`` sweep;
* Gloo allreduce with CUDA tensors and N ranks sharing the GPU (copy to host, CPU ring over loopback TCP, copy
  back), a ``collsim bench`` sweep per rank count N, and the same with CPU tensors (the ring alone: the difference
  is what staging through the one GPU's PCIe link costs N ranks at once);
* where ``nvcc`` is on the PATH, the same fixed costs from C++ and a pointer chase through device memory
  (:mod:`collsim.bench.native`): what the GPU presets' ``kernel_launch_latency``, ``memcpy_latency`` and
  ``hbm_latency`` stand for.

The result is one JSON object (``format: collsim-probe/2``; ``/1`` had no pageable copies, one Gloo rank count and
no CPU sweep; ``native`` is absent from files made before it was added)::

    {"format": "collsim-probe/2",
     "hardware": {"gpu": ..., "gpu_memory_gib": ..., "compute_capability": "9.0", "cpu": ..., ...},
     "software": {"torch_version": ..., "cuda_version": ..., "nccl_version": ..., "env": {...}},
     "source": {"command": ..., "argv": ..., "machine": ..., "date": ..., "finished": ...},
     "copies": {"d2h": COPY, "h2d": COPY, "d2d": COPY, "d2h_pageable": COPY, "h2d_pageable": COPY},
     "kernel_launch": {"launch_sync_us": ..., "enqueue_us": ..., "back_to_back_us": ..., "cpu_dispatch_us": ...,
                       "iterations": ..., "method": ...},
     "native": {"cuda_latency": {"rows": [...], "command": ...} or {"error": ...},
                "hbm_latency": {"rows": [...], "command": ...} or {"error": ...}},
     "nccl_1rank": MEASUREMENT or {"error": "..."},
     "gloo_cuda": {"<N ranks>": MEASUREMENT or {"error": "..."}, ...},
     "gloo_cpu": {"<N ranks>": MEASUREMENT or {"error": "..."}, ...}}

    COPY = {"pinned": true, "method": ..., "latency_us": <time of the smallest size>,
            "bandwidth_gbps": <largest size / time over the sizes, GB = 1e9 bytes>,
            "rows": [{"size_bytes": ..., "time_us": <median>, "spread_us": <IQR>, "iterations": ...,
                      "bandwidth_gbps": ...}]}

MEASUREMENT is a ``collsim-measurement/1`` object (:mod:`collsim.calibration.measurement`):
``parse_measurement_json(json.dumps(probe["gloo_cuda"]["2"]))`` reads it.

Examples
--------
>>> rows = copy_rows([8, 1 << 20], {8: [10e-6, 12e-6], 1 << 20: [100e-6, 100e-6]})
>>> [(r["size_bytes"], r["time_us"], r["bandwidth_gbps"]) for r in rows]
[(8, 11.0, 0.000727), (1048576, 100.0, 10.48576)]
>>> summarise_copies(rows)["latency_us"], summarise_copies(rows)["bandwidth_gbps"]
(11.0, 10.48576)
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from collsim.bench.config import BenchConfig, BenchError, require_torch
from collsim.bench.launch import launch_local
from collsim.bench.metadata import host_facts, now_iso, relevant_env
from collsim.bench.native import run_native
from collsim.bench.report import to_measurement
from collsim.calibration.measurement import summarise_times
from collsim.units import parse_size_range

__all__ = [
    "PROBE_COPY_SIZES",
    "PROBE_FORMAT",
    "PROBE_SWEEP_SIZES",
    "copy_rows",
    "run_probe",
    "summarise_copies",
]

#: The value of the ``format`` key of probe files.
PROBE_FORMAT = "collsim-probe/2"
#: Default copy sizes: 8 B to 1 GiB, x8.
PROBE_COPY_SIZES = "8B:1GiB:x8"
#: Default sizes of the NCCL and Gloo sweeps: 1 KiB to 256 MiB, x4.
PROBE_SWEEP_SIZES = "1KiB:256MiB:x4"
#: Kernels launched back to back in one block of the launch measurement.
_LAUNCH_BLOCK = 1000

Say = Callable[[str], None]


def copy_rows(sizes: Sequence[int], times_s: dict[int, list[float]]) -> list[dict[str, Any]]:
    """Rows of a copy measurement: per size the median and IQR (us) and size / median (GB/s, GB = 1e9 bytes)."""
    rows = []
    for size in sizes:
        med, iqr = summarise_times(times_s[size])
        rows.append(
            {
                "size_bytes": size,
                "time_us": round(med, 3),
                "spread_us": round(iqr, 3),
                "iterations": len(times_s[size]),
                "bandwidth_gbps": round(size / med / 1e3, 6),  # bytes/us = 1e6 bytes/s = 1e-3 GB/s
            }
        )
    return rows


def summarise_copies(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``latency_us`` (time of the smallest size) and ``bandwidth_gbps`` (best size / time) of copy rows."""
    return {
        "latency_us": min(rows, key=lambda r: r["size_bytes"])["time_us"],
        "bandwidth_gbps": max(r["bandwidth_gbps"] for r in rows),
    }


def _time_copies(
    torch: Any, dst: Any, src: Any, sizes: Sequence[int], warmup: int, iters: int
) -> dict[int, list[float]]:
    """Seconds of each timed ``dst.copy_(src)`` of the first ``size`` bytes, per size, after ``warmup`` untimed."""
    out: dict[int, list[float]] = {}
    for size in sizes:
        d, s = dst[:size], src[:size]
        for _ in range(warmup):
            d.copy_(s, non_blocking=True)
        torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            d.copy_(s, non_blocking=True)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        out[size] = times
    return out


def _launch_latency(torch: Any, device: Any, warmup: int, iters: int) -> dict[str, Any]:
    """The ``kernel_launch`` object: a one-element kernel's synchronised round trip and back-to-back cost (us)."""
    x = torch.zeros(1, device=device)
    for _ in range(max(warmup, 10)):
        x.add_(1.0)
    torch.cuda.synchronize()
    round_trip = []
    for _ in range(iters):
        t0 = time.perf_counter()
        x.add_(1.0)
        torch.cuda.synchronize()
        round_trip.append(time.perf_counter() - t0)
    enqueue, total = [], []
    for _ in range(max(3, iters // 10)):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(_LAUNCH_BLOCK):
            x.add_(1.0)
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        enqueue.append((t1 - t0) / _LAUNCH_BLOCK)
        total.append((t2 - t0) / _LAUNCH_BLOCK)
    # The same call on a one-element CPU tensor: Python's and PyTorch's dispatch without any CUDA call, the part of
    # the figures above that a C++ caller (ProcessGroupGloo, NCCL) does not pay.
    y = torch.zeros(1)
    dispatch = []
    for _ in range(max(3, iters // 10)):
        t0 = time.perf_counter()
        for _ in range(_LAUNCH_BLOCK):
            y.add_(1.0)
        dispatch.append((time.perf_counter() - t0) / _LAUNCH_BLOCK)
    return {
        "launch_sync_us": round(summarise_times(round_trip)[0], 3),
        "enqueue_us": round(statistics.median(enqueue) * 1e6, 3),  # seconds to microseconds
        "back_to_back_us": round(statistics.median(total) * 1e6, 3),  # seconds to microseconds
        "cpu_dispatch_us": round(statistics.median(dispatch) * 1e6, 3),  # seconds to microseconds
        "iterations": iters,
        "method": (
            "one-element add_ kernel: launch_sync_us = median of launch + synchronize; enqueue_us and "
            f"back_to_back_us = host enqueue time and total time per kernel of {_LAUNCH_BLOCK} launched back to "
            "back; cpu_dispatch_us = time per call of the same add_ on a one-element CPU tensor (Python and "
            "PyTorch dispatch, no CUDA call)"
        ),
    }


def _require_cuda(torch: Any, gloo_ranks: Sequence[int]) -> None:
    """Raise :class:`BenchError` unless torch sees a CUDA device and every count of ``gloo_ranks`` is at least 1."""
    if not torch.cuda.is_available():
        raise BenchError(
            f"--probe measures a CUDA GPU, and this machine has none usable (torch {torch.__version__}: "
            "torch.cuda.is_available() is False); run it on a GPU machine with a CUDA build of torch"
        )
    if not gloo_ranks or min(gloo_ranks) < 1:
        raise BenchError(f"--probe-ranks: expected integers >= 1, got {','.join(map(str, gloo_ranks)) or 'none'}")


def _measure_copies(torch: Any, dev: Any, sizes: Sequence[int], warmup: int, iters: int, say: Say) -> dict[str, Any]:
    """The ``copies`` object: D2H and H2D between ``dev`` and pinned host memory, and D2D, per size (bytes)."""
    biggest = max(sizes)
    host = torch.empty(biggest, dtype=torch.uint8, pin_memory=True)
    pageable = torch.empty(biggest, dtype=torch.uint8)  # ordinary (pageable) host memory
    a = torch.empty(biggest, dtype=torch.uint8, device=dev)
    b = torch.empty(biggest, dtype=torch.uint8, device=dev)
    method = "dst.copy_(src, non_blocking=True) then torch.cuda.synchronize(), host clock"
    copies: dict[str, Any] = {}
    kinds = (("d2h", host, a, True), ("h2d", a, host, True), ("d2d", b, a, False),
             ("d2h_pageable", pageable, a, False), ("h2d_pageable", a, pageable, False))
    for name, dst, src, pinned in kinds:
        say(f"probe: {name} copies, {len(sizes)} sizes")
        rows = copy_rows(sizes, _time_copies(torch, dst, src, sizes, warmup, iters))
        copies[name] = {"pinned": pinned, "method": method, **summarise_copies(rows), "rows": rows}
    del host, pageable, a, b
    torch.cuda.empty_cache()
    return copies


def _sweep(cfg: BenchConfig, command: str, argv: str | None, say: Say) -> dict[str, Any]:
    """One ``collsim bench`` sweep on GPU 0 as a measurement object, or ``{"error": ...}`` when it fails."""
    where = "on GPU 0" if cfg.device == "cuda" else "with CPU tensors"
    say(f"probe: {cfg.backend} allreduce, {cfg.nprocs} rank(s) {where}, {len(cfg.sizes)} sizes")
    try:
        out = launch_local(cfg)
    except BenchError as exc:
        return {"error": str(exc)}
    part = f"{cfg.backend} {cfg.device} {cfg.nprocs}-rank part"
    m = to_measurement(out, command=f"{command} ({part})", source={"argv": argv} if argv else None)
    return dict(json.loads(m.to_json()))


def _hardware(torch: Any, props: Any, facts: dict[str, Any]) -> dict[str, Any]:
    """The ``hardware`` object: GPU 0's properties and the host's facts."""
    return {
        "gpu": props.name,
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),  # bytes to GiB
        "compute_capability": f"{props.major}.{props.minor}",
        "gpu_count": torch.cuda.device_count(),
        "cpu": facts["cpu"],
        "cpu_count": facts["cpu_count"],
        "memory_gib": facts["memory_gib"],
        "hostname": facts["hostname"],
        "os": facts["os"],
    }


def _software(torch: Any, facts: dict[str, Any]) -> dict[str, Any]:
    """The ``software`` object: torch, CUDA and NCCL versions (None where the build has none), the environment."""
    try:
        nccl_version: str | None = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception:  # no NCCL in this build
        nccl_version = None
    return {
        "torch_version": str(torch.__version__),
        "cuda_version": torch.version.cuda,
        "nccl_version": nccl_version,
        "python": facts["python"],
        "env": relevant_env(),
    }


def run_probe(
    *,
    copy_sizes: str | None = None,
    sweep_sizes: str | None = None,
    warmup: int = 5,
    iters: int = 20,
    gloo_ranks: Sequence[int] = (2,),
    timeout_s: float = 300.0,
    native: bool = True,
    command: str = "collsim bench --probe",
    argv: str | None = None,
    say: Say | None = None,
) -> dict[str, Any]:
    """Measure this machine's GPU 0 (see the module docstring) and return the probe object.

    Parameters
    ----------
    copy_sizes, sweep_sizes : str, optional
        Size sweeps (``collsim.units.parse_size_range`` syntax) of the copies and of the NCCL/Gloo sweeps;
        defaults :data:`PROBE_COPY_SIZES` and :data:`PROBE_SWEEP_SIZES`.
    warmup, iters : int
        Untimed and timed iterations per size.
    gloo_ranks : sequence of int
        Rank counts of the Gloo sweeps, all ranks on GPU 0; each count is swept with CUDA tensors and, for the cost
        of staging alone (the difference), with CPU tensors.
    timeout_s : float
        torch.distributed timeout of the sweeps, seconds.
    native : bool
        Also build and run the C++ programs of :mod:`collsim.bench.native` (needs ``nvcc``; without it the
        ``native`` object says so).
    command, argv : str
        What ``source`` records.
    say : callable, optional
        Receives one progress line per step.

    Raises
    ------
    BenchError
        When torch is missing or has no CUDA device.
    """
    torch = require_torch()
    say = say or (lambda _msg: None)
    _require_cuda(torch, gloo_ranks)
    csizes = parse_size_range(copy_sizes or PROBE_COPY_SIZES)
    ssizes = tuple(parse_size_range(sweep_sizes or PROBE_SWEEP_SIZES))
    started = now_iso()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    props = torch.cuda.get_device_properties(dev)
    facts = host_facts()
    copies = _measure_copies(torch, dev, csizes, warmup, iters, say)
    say("probe: kernel launch latency")
    launch = _launch_latency(torch, dev, warmup, iters)
    native_rows: dict[str, Any] = {"error": "not asked for (--no-native)"}
    if native:
        say("probe: C++ fixed costs and memory latency (nvcc)")
        native_rows = run_native(timeout_s=timeout_s)
    cuda_cfg = BenchConfig(collective="allreduce", backend="gloo", device="cuda", sizes=ssizes, warmup=warmup,
                           iters=iters, nprocs=1, device_index=0, timeout_s=timeout_s)
    nccl: dict[str, Any] = {"error": "this torch has no NCCL"}
    if torch.distributed.is_nccl_available():  # NCCL with one rank: its fixed costs without any transfer
        nccl = _sweep(dataclasses.replace(cuda_cfg, backend="nccl"), command, argv, say)
    gloo_cuda = {str(n): _sweep(dataclasses.replace(cuda_cfg, nprocs=n), command, argv, say) for n in gloo_ranks}
    cpu_cfg = dataclasses.replace(cuda_cfg, device="cpu", device_index=None)
    gloo_cpu = {str(n): _sweep(dataclasses.replace(cpu_cfg, nprocs=n), command, argv, say) for n in gloo_ranks}
    machine = f"{facts['hostname']}: {props.name}, {facts['cpu']} ({facts['cpu_count']} logical CPUs)"
    source = {"command": command, "argv": argv, "machine": machine, "date": started, "finished": now_iso()}
    return {
        "format": PROBE_FORMAT,
        "hardware": _hardware(torch, props, facts),
        "software": _software(torch, facts),
        "source": source,
        "copies": copies,
        "kernel_launch": launch,
        "native": native_rows,
        "nccl_1rank": nccl,
        "gloo_cuda": gloo_cuda,
        "gloo_cpu": gloo_cpu,
    }
