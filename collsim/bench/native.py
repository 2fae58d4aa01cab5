"""The probe's C++ measurements: fixed costs and memory latency that Python and PyTorch would blur.

``collsim bench --probe`` measures through PyTorch from Python, which adds its dispatch to every small operation
(5.8 us per call on an H200 host). What collsim's GPU presets carry is what a C++ caller pays, so where ``nvcc`` is
on the PATH the probe also compiles and runs two small CUDA programs shipped in ``collsim/bench/cuda/``:

* ``cuda_latency.cu``: a kernel launched then waited for, launches back to back, 8-byte pinned and pageable copies
  then waited for, an event wait, an idle synchronise (one JSON object per line: ``what``, ``median_us``, ...);
* ``hbm_latency.cu``: one thread's pointer chase through 32 MiB-2 GiB of device memory (``size_bytes``,
  ``ns_per_load``, ...).

Each is built with ``nvcc -O2 -arch=native`` in a temporary folder and run once on GPU 0.

Examples
--------
>>> rows = parse_rows('{"what": "launch_sync", "median_us": 9.2}\\n\\n{"what": "sync_idle", "median_us": 0.3}\\n')
>>> [r["what"] for r in rows]
['launch_sync', 'sync_idle']
>>> preset_figures({"cuda_latency": {"rows": [
...     {"what": "launch_sync", "median_us": 9.0}, {"what": "memcpy_d2h_pinned", "median_us": 6.5},
...     {"what": "memcpy_h2d_pinned", "median_us": 5.5}]},
...     "hbm_latency": {"rows": [{"size_bytes": 2**27, "ns_per_load": 320.0},
...                              {"size_bytes": 2**31, "ns_per_load": 330.0}]}})
{'kernel_launch_latency_us': 9.0, 'memcpy_latency_us': 6.0, 'hbm_latency_ns': 325.0}
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["NATIVE_PROGRAMS", "parse_rows", "preset_figures", "run_native"]

#: The programs, by the key their rows are stored under; sources in ``collsim/bench/cuda/``.
NATIVE_PROGRAMS = {"cuda_latency": "cuda_latency.cu", "hbm_latency": "hbm_latency.cu"}
#: Pointer-chase buffers at least this large count as device memory (the largest L2 today is 60 MB on an H200 and
#: 126 MB on a B200 in two halves; each half serves its own side first).
HBM_MIN_BYTES = 128 << 20
_SOURCES = Path(__file__).resolve().parent / "cuda"


def parse_rows(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a program's output, one per non-empty line."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _run(cmd: list[str], timeout_s: float) -> tuple[int, str, str]:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout_s:g} s"
    return done.returncode, done.stdout, done.stderr


def run_native(nvcc: str | None = None, timeout_s: float = 300.0) -> dict[str, Any]:
    """Build and run each of :data:`NATIVE_PROGRAMS`; per key ``{"rows": [...], "command": ...}`` or
    ``{"error": ...}`` (no nvcc, a failed build or run: the probe goes on without it).

    Parameters
    ----------
    nvcc : str, optional
        The compiler; default: ``nvcc`` on the PATH.
    timeout_s : float
        Seconds each build and each run may take.
    """
    nvcc = nvcc or shutil.which("nvcc")
    if not nvcc:
        return {key: {"error": "nvcc is not on the PATH"} for key in NATIVE_PROGRAMS}
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="collsim-probe-") as tmp:
        for key, source in NATIVE_PROGRAMS.items():
            exe = str(Path(tmp) / key)
            build = [nvcc, "-O2", "-arch=native", "-o", exe, str(_SOURCES / source)]
            rc, _, err = _run(build, timeout_s)
            if rc != 0:
                out[key] = {"error": f"build failed ({rc}): {err.strip()[-400:]}"}
                continue
            rc, text, err = _run([exe], timeout_s)
            try:
                rows = parse_rows(text)
            except json.JSONDecodeError:
                rows = []
            if rc != 0 or not rows:
                out[key] = {"error": f"run failed ({rc}): {err.strip()[-400:] or 'no output'}"}
                continue
            out[key] = {"command": f"nvcc -O2 -arch=native collsim/bench/cuda/{source}, then run", "rows": rows}
    return out


def _rows(native: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    part = native.get(key) or {}
    return list(part.get("rows", [])) if isinstance(part, Mapping) else []


def _median(values: Iterable[float]) -> float | None:
    v = list(values)
    return statistics.median(v) if v else None


def preset_figures(native: Mapping[str, Any]) -> dict[str, float]:
    """The GPU preset figures the native rows give, where they give them.

    ``kernel_launch_latency_us``: the median ``launch_sync``; ``memcpy_latency_us``: the mean of the median pinned
    D2H and H2D copies; ``hbm_latency_ns``: the median ``ns_per_load`` of buffers of at least
    :data:`HBM_MIN_BYTES`. Several runs' rows may be concatenated: each figure is the median over them.
    """
    lat = _rows(native, "cuda_latency")
    by = {w: _median(r["median_us"] for r in lat if r.get("what") == w)
          for w in ("launch_sync", "memcpy_d2h_pinned", "memcpy_h2d_pinned")}
    out: dict[str, float] = {}
    if by["launch_sync"] is not None:
        out["kernel_launch_latency_us"] = by["launch_sync"]
    d2h, h2d = by["memcpy_d2h_pinned"], by["memcpy_h2d_pinned"]
    if d2h is not None and h2d is not None:
        out["memcpy_latency_us"] = (d2h + h2d) / 2
    hbm = _median(r["ns_per_load"] for r in _rows(native, "hbm_latency") if r["size_bytes"] >= HBM_MIN_BYTES)
    if hbm is not None:
        out["hbm_latency_ns"] = hbm
    return out
