"""``collsim bench --host-memory``: the three host-memory figures a CPU preset takes, measured with torch.

A CPU rank's copies, Gloo's host copies and the optimizer are memory passes (:mod:`collsim.training.step`,
:mod:`collsim.backends.gloo`); the CPU preset (``topologies/presets/cpus.yaml``) prices them with

* ``memory_bandwidth``: the socket's DRAM traffic, shared by every process on it. Measured as ``nprocs``
  processes copying at once (``dst.copy_(src)``, one torch thread each), counting 3 bytes of traffic per byte
  copied: the read, the write and the write-allocate read of the destination's lines (``training.yaml``
  ``cpu_write_allocate_bytes_per_byte``). ``add_`` (two reads, one write: 3 bytes per element without any
  write-allocate) is measured beside it as the cross-check: on a write-allocate CPU both take the same time.
* ``copy_bw_per_core``: bytes one thread copies per second, one process alone.
* ``first_touch_bw``: bytes per second at which one thread faults in a fresh mapping: ``torch.empty(n)`` then
  ``copy_`` into it, less the same copy into memory already touched, for the sizes the allocator maps afresh
  (from ``fresh_mapping_bytes`` of ``topologies/software/gloo.yaml``: glibc's largest mmap threshold, 32 MiB);
  the smaller sizes are shown too (they should cost nothing more).

Every figure is a median over ``iters`` passes after ``warmup`` untimed ones; with several processes each pass
starts at a barrier and the slowest process's median counts. The result is one JSON object
(``format: collsim-host-memory/1``)::

    {"format": "collsim-host-memory/1", "hardware": {...}, "software": {...}, "source": {...},
     "config": {"nprocs": 2, "size_bytes": ..., "fresh_sizes_bytes": [...], "iters": ..., "warmup": ...},
     "passes": {"alone": PASSES, "together": PASSES},
     "figures": {"memory_bandwidth": ..., "memory_bandwidth_add": ..., "copy_bw_per_core": ...,
                 "first_touch_bw": ... or null}}   # bytes/s

    PASSES = {"copy_s": [per process], "add_s": [...], "touched_s": {"<bytes>": [...]}, "fresh_s": {...}}

Examples
--------
>>> p = {"alone": {"copy_s": [0.01], "add_s": [0.01], "touched_s": {"33554432": [0.001]},
...                "fresh_s": {"33554432": [0.011]}},
...      "together": {"copy_s": [0.02, 0.021], "add_s": [0.02, 0.02], "touched_s": {}, "fresh_s": {}}}
>>> f = figures(p, size=100_000_000, nprocs=2)
>>> f["copy_bw_per_core"], f["memory_bandwidth"], round(f["first_touch_bw"])
(10000000000.0, 28571428571.42857, 3355443200)
"""

from __future__ import annotations

import os
import queue as pyqueue
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml

from collsim.bench.config import BenchError, require_torch
from collsim.bench.metadata import host_facts, now_iso
from collsim.topology import topologies_dir
from collsim.units import format_size

FORMAT = "collsim-host-memory/1"
_MIB = 1 << 20  # bytes
#: Bytes of DRAM traffic per byte of ``dst.add_(src)``: two reads and one write (its destination is read anyway).
ADD_TRAFFIC = 3.0


@dataclass(frozen=True)
class HostMemoryConfig:
    """What ``collsim bench --host-memory`` measures.

    Parameters
    ----------
    nprocs : int
        Processes copying at once for ``memory_bandwidth`` (the ranks a host runs).
    size : int
        Bytes of each streaming pass (``copy_``, ``add_``); well above the last-level cache.
    fresh_sizes : tuple of int
        Bytes of the fresh-allocation passes.
    iters, warmup : int
        Timed and untimed passes per measurement.
    """

    nprocs: int = 2
    size: int = 256 * _MIB
    fresh_sizes: tuple[int, ...] = (16 * _MIB, 32 * _MIB, 64 * _MIB, 128 * _MIB)
    iters: int = 15
    warmup: int = 3

    def __post_init__(self) -> None:
        if self.nprocs < 1:
            raise BenchError(f"--nprocs {self.nprocs}: expected at least 1 process")
        if self.size < 4 or any(s < 4 for s in self.fresh_sizes):
            raise BenchError("--host-memory sizes: expected at least one float32 element (4 bytes)")
        if self.iters < 1 or self.warmup < 0:
            raise BenchError(f"-n {self.iters} -w {self.warmup}: expected -n >= 1 and -w >= 0")


@dataclass
class _Passes:
    """One process's medians, seconds."""

    copy_s: float = 0.0
    add_s: float = 0.0
    touched_s: dict[int, float] = field(default_factory=dict)
    fresh_s: dict[int, float] = field(default_factory=dict)


def _software_value(name: str, key: str) -> Any:
    """``key`` of ``topologies/software/<name>.yaml``."""
    path = topologies_dir() / "software" / f"{name}.yaml"
    return yaml.safe_load(path.read_text(encoding="utf-8"))[key]


def copy_traffic() -> float:
    """Bytes of DRAM traffic per byte a CPU copies: the read, the write and ``cpu_write_allocate_bytes_per_byte``
    of ``topologies/software/training.yaml`` (the write-allocate read of the destination's lines; it says why)."""
    return 2.0 + float(_software_value("training", "cpu_write_allocate_bytes_per_byte"))


def fresh_mapping_bytes() -> int:
    """``fresh_mapping_bytes`` of ``topologies/software/gloo.yaml``: allocations from this size are new mappings."""
    return int(_software_value("gloo", "fresh_mapping_bytes"))


def _median(run: Callable[[], object], iters: int, warmup: int, sync: Callable[[], object]) -> float:
    """Median seconds of ``run()`` over ``iters`` timed calls after ``warmup`` untimed ones, all after ``sync()``."""
    for _ in range(warmup):
        run()
    sync()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _pass(torch: Any, nbytes: int, op: str, cfg: HostMemoryConfig, sync: Callable[[], object]) -> float:
    """Median seconds of one pass over ``nbytes`` of float32: ``copy`` (into touched memory), ``add`` (``add_``) or
    ``fresh`` (``copy_`` into a new ``torch.empty``)."""
    src, dst = torch.ones(nbytes // 4), torch.zeros(nbytes // 4)
    runs: dict[str, Callable[[], object]] = {
        "copy": lambda: dst.copy_(src),
        "add": lambda: dst.add_(src, alpha=-1e-3),
        "fresh": lambda: torch.empty(nbytes // 4).copy_(src),
    }
    return _median(runs[op], cfg.iters, cfg.warmup, sync)


def _measure(cfg: HostMemoryConfig, sync: Callable[[], object]) -> _Passes:
    """This process's passes, each started after ``sync()`` (a barrier with the others)."""
    torch = require_torch()
    torch.set_num_threads(1)
    out = _Passes(_pass(torch, cfg.size, "copy", cfg, sync), _pass(torch, cfg.size, "add", cfg, sync))
    for size in cfg.fresh_sizes:
        out.touched_s[size] = _pass(torch, size, "copy", cfg, sync)
        out.fresh_s[size] = _pass(torch, size, "fresh", cfg, sync)
    return out


def _worker(cfg: HostMemoryConfig, barrier: Any, queue: Any) -> None:
    """One process of the ``together`` phase: measure at the shared barrier, send the medians back."""
    try:
        queue.put(("ok", asdict(_measure(cfg, barrier.wait))))
    except BaseException as exc:  # report, never hang the parent
        queue.put(("error", f"{type(exc).__name__}: {exc}"))
        barrier.abort()


def _together(cfg: HostMemoryConfig, timeout: float) -> list[_Passes]:
    """``cfg.nprocs`` processes measuring at once (spawned: each imports torch afresh)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(cfg.nprocs), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(cfg, barrier, queue), daemon=True) for _ in range(cfg.nprocs)]
    for p in procs:
        p.start()
    results = []
    try:
        for _ in procs:
            status, payload = queue.get(timeout=timeout)
            if status != "ok":
                raise BenchError(f"--host-memory: a measuring process failed: {payload}")
            results.append(_Passes(payload["copy_s"], payload["add_s"],
                                   {int(k): v for k, v in payload["touched_s"].items()},
                                   {int(k): v for k, v in payload["fresh_s"].items()}))  # fmt: skip
    except pyqueue.Empty:
        raise BenchError(f"--host-memory: no result from the measuring processes within {timeout:g} s") from None
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
    return results


def _as_json(passes: Sequence[_Passes]) -> dict[str, Any]:
    """Per-process medians as JSON lists (sizes as string keys)."""
    sizes = sorted({s for p in passes for s in p.touched_s})
    return {
        "copy_s": [p.copy_s for p in passes],
        "add_s": [p.add_s for p in passes],
        "touched_s": {str(s): [p.touched_s[s] for p in passes] for s in sizes},
        "fresh_s": {str(s): [p.fresh_s[s] for p in passes] for s in sizes},
    }


def figures(passes: Mapping[str, Any], *, size: int, nprocs: int, fresh_from: int = 32 * _MIB) -> dict[str, Any]:
    """The preset figures (bytes/s) from the passes' medians (seconds; the slowest process counts).

    ``memory_bandwidth``: ``nprocs`` x :func:`copy_traffic` (3) x ``size`` / the together copy;
    ``memory_bandwidth_add`` the same from ``add_``; ``copy_bw_per_core``: ``size`` / the lone copy;
    ``first_touch_bw``: the median over the fresh sizes from ``fresh_from`` of size / (fresh copy - touched copy),
    alone (None without such a size or when the fresh copy is not slower).
    """
    alone, together = passes["alone"], passes["together"]
    out: dict[str, Any] = {
        "memory_bandwidth": nprocs * copy_traffic() * size / max(together["copy_s"]),
        "memory_bandwidth_add": nprocs * ADD_TRAFFIC * size / max(together["add_s"]),
        "copy_bw_per_core": size / max(alone["copy_s"]),
    }
    rates = []
    for key, fresh in alone["fresh_s"].items():
        extra = max(fresh) - max(alone["touched_s"][key])
        if int(key) >= fresh_from and extra > 0:
            rates.append(int(key) / extra)
    out["first_touch_bw"] = statistics.median(rates) if rates else None
    return out


def run_host_memory(cfg: HostMemoryConfig, *, command: str, argv: str | None = None,
                    say: Callable[[str], None] | None = None, timeout: float = 600.0) -> dict[str, Any]:
    """Measure (one process alone in this one, then ``cfg.nprocs`` spawned at once) and return the JSON object."""
    torch = require_torch()
    say = say or (lambda _m: None)
    started = now_iso()
    say("one process alone")
    alone = [_measure(cfg, lambda: None)]
    say(f"{cfg.nprocs} processes at once")
    together = _together(cfg, timeout) if cfg.nprocs > 1 else alone
    passes = {"alone": _as_json(alone), "together": _as_json(together)}
    facts = host_facts()
    fresh_from = fresh_mapping_bytes()
    return {
        "format": FORMAT,
        "hardware": {"cpu": facts["cpu"], "cpu_count": facts["cpu_count"], "memory_gib": facts["memory_gib"],
                     "os": facts["os"]},
        "software": {"torch_version": str(torch.__version__), "python": facts["python"], "torch_threads": 1},
        "source": {"command": command, "argv": argv, "machine": f"{facts['hostname']}: {facts['cpu']}",
                   "date": started, "finished": now_iso()},
        "config": {"nprocs": cfg.nprocs, "size_bytes": cfg.size, "fresh_sizes_bytes": list(cfg.fresh_sizes),
                   "iters": cfg.iters, "warmup": cfg.warmup, "fresh_mapping_bytes": fresh_from},
        "passes": passes,
        "figures": figures(passes, size=cfg.size, nprocs=cfg.nprocs, fresh_from=fresh_from),
    }


def _gbps(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e9:.2f}"  # bytes/s -> GB/s (1e9 B)


def format_host_memory(result: Mapping[str, Any]) -> str:
    """The measurement as text: the passes (ms) and the preset figures (GB/s)."""
    cfg, p, f = result["config"], result["passes"], result["figures"]
    n, size = cfg["nprocs"], cfg["size_bytes"]
    lines = [f"# collsim bench --host-memory: {result['source']['machine']}, {result['source']['date']}",
             f"# one torch thread per process; median of {cfg['iters']} after {cfg['warmup']} untimed; "
             f"'together': {n} processes at a barrier, the slowest counts",
             f"# {'pass':<36} {'alone ms':>10} {'together ms':>12}"]  # fmt: skip

    def row(name: str, a: Sequence[float], t: Sequence[float] | None) -> str:
        tt = f"{max(t) * 1e3:12.3f}" if t else f"{'-':>12}"
        return f"  {name:<36} {max(a) * 1e3:10.3f} {tt}"

    lines.append(row(f"copy_ {format_size(size)}", p["alone"]["copy_s"], p["together"]["copy_s"]))
    lines.append(row(f"add_ {format_size(size)}", p["alone"]["add_s"], p["together"]["add_s"]))
    for key in p["alone"]["touched_s"]:
        s = format_size(int(key))
        lines.append(row(f"copy_ {s} into touched memory", p["alone"]["touched_s"][key],
                         p["together"]["touched_s"].get(key)))  # fmt: skip
        lines.append(row(f"copy_ {s} into a fresh torch.empty", p["alone"]["fresh_s"][key],
                         p["together"]["fresh_s"].get(key)))  # fmt: skip
    lines += [
        "# CPU preset figures (GB = 1e9 bytes):",
        f"  memory_bandwidth   {_gbps(f['memory_bandwidth'])} GB/s  ({n} x {copy_traffic():g} bytes per byte copied; "
        f"from add_: {_gbps(f['memory_bandwidth_add'])})",
        f"  copy_bw_per_core   {_gbps(f['copy_bw_per_core'])} GB/s  (one process alone)",
        f"  first_touch_bw     {_gbps(f['first_touch_bw'])} GB/s  (fresh allocations from "
        f"{format_size(cfg['fresh_mapping_bytes'])}, alone)",
    ]
    return "\n".join(lines) + "\n"


def shipped_cpu(base: str) -> dict[str, Any]:
    """The shipped CPU preset ``base`` as written in ``cpus.yaml`` (BenchError naming the choices if there is none)."""
    from collsim.topology.presets import load_presets

    raw = yaml.safe_load(load_presets().files["cpus"].read_text(encoding="utf-8"))
    if base not in raw:
        raise BenchError(f"--cpu {base}: no such shipped CPU preset; expected one of {', '.join(sorted(raw))}")
    return dict(raw[base])


def check_fits(cfg: HostMemoryConfig, memory_gib: float | None) -> None:
    """Refuse a measurement whose buffers (a source and a destination per process, the largest pass) would take more
    than half of this host's memory (``memory_gib``, GiB; unknown: not checked)."""
    need = 2 * max(cfg.size, *cfg.fresh_sizes) * cfg.nprocs  # bytes
    if memory_gib and need > memory_gib * (1 << 30) / 2:  # GiB -> bytes
        raise BenchError(f"--host-memory-size with --nprocs {cfg.nprocs}: the buffers take {need / (1 << 30):,.1f} "
                         f"GiB (a source and a destination per process), more than half of this host's "
                         f"{memory_gib:g} GiB")  # bytes -> GiB


def host_presets(result: Mapping[str, Any], base: str = "generic-x86", file: str = "host-memory") -> dict[str, Any]:
    """A user presets document (``--presets FILE``) with one CPU preset, ``<base>-measured``: the shipped preset
    ``base`` with ``memory_bandwidth``, ``copy_bw_per_core`` and ``first_touch_bw`` (where measured) replaced,
    ``cores`` set to this host's logical CPUs and ``vendor`` to the one its model names (AMD or Intel), each with
    a ``_source`` naming the measurement. Its Gloo rates stay the base's: ``collsim calibrate`` fits those."""
    entry = shipped_cpu(base)
    f, cfg, src = result["figures"], result["config"], result["source"]
    where = f"collsim bench --host-memory ({file}) on {src['machine']}, {src['date']}"
    entry["model"] = result["hardware"]["cpu"] or entry["model"]
    vendor = next((v for v in ("amd", "intel") if v in str(result["hardware"]["cpu"]).lower()), None)
    if vendor is not None:
        entry["vendor"] = vendor
        entry["vendor_source"] = f"the CPU model this host reports; {where}"
    entry["cores"] = int(result["hardware"]["cpu_count"] or entry["cores"])
    entry["cores_source"] = f"os.cpu_count() (logical CPUs); {where}"
    entry["memory_bandwidth"] = f"{f['memory_bandwidth'] / 1e9:.4g}GB/s"
    entry["memory_bandwidth_source"] = (
        f"measured: {cfg['nprocs']} processes copying {format_size(cfg['size_bytes'])} at once, "
        f"{copy_traffic():g} bytes of DRAM traffic per byte copied (write-allocate); "
        f"add_ gives {f['memory_bandwidth_add'] / 1e9:.4g} GB/s; {where}")
    entry["copy_bw_per_core"] = f"{f['copy_bw_per_core'] / 1e9:.4g}GB/s"
    entry["copy_bw_per_core_source"] = f"measured: copy_ of {format_size(cfg['size_bytes'])}, one process; {where}"
    if f.get("first_touch_bw"):
        entry["first_touch_bw"] = f"{f['first_touch_bw'] / 1e9:.4g}GB/s"
        entry["first_touch_bw_source"] = (
            f"measured: copy_ into a fresh torch.empty less into touched memory, sizes from "
            f"{format_size(cfg['fresh_mapping_bytes'])}, one process; {where}")
    entry["source"] = f"{base} with its memory figures measured ({where})"
    return {"cpus": {f"{base}-measured": entry}}


def default_nprocs() -> int:
    """Processes measured at once by default: 2, or 1 on a one-CPU host."""
    return min(2, os.cpu_count() or 1)
