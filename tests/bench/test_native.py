"""collsim.bench.native: building and running the probe's C++ programs (a fake nvcc: no GPU needed)."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from collsim.bench.native import NATIVE_PROGRAMS, parse_rows, preset_figures, run_native

_FAKE_NVCC = """#!{python}
# a stand-in for nvcc: writes, as the "-o" output, a program that prints one row (cuda_latency.cu) or nothing
import os, sys
args = sys.argv[1:]
out, src = args[args.index("-o") + 1], args[-1]
if src.endswith("hbm_latency.cu") and {fail_hbm!r}:
    sys.exit({fail_hbm!r})
row = '{{"what": "launch_sync", "median_us": 8.5}}' if src.endswith("cuda_latency.cu") else ""
with open(out, "w") as f:
    f.write("#!{python}\\nprint(" + repr(row) + ")\\n")
os.chmod(out, 0o755)
"""


def _fake_nvcc(tmp_path: Path, fail_hbm: str = "") -> str:
    path = tmp_path / "nvcc"
    path.write_text(_FAKE_NVCC.format(python=sys.executable, fail_hbm=fail_hbm))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_sources_ship_with_the_package() -> None:
    folder = Path(__file__).resolve().parents[2] / "collsim" / "bench" / "cuda"
    assert sorted(p.name for p in folder.glob("*.cu")) == sorted(NATIVE_PROGRAMS.values())
    assert all('#include "check.h"' in (folder / f).read_text() for f in NATIVE_PROGRAMS.values())
    assert (folder / "check.h").is_file()


def test_without_nvcc_each_program_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda _name: None)
    assert run_native() == {k: {"error": "nvcc is not on the PATH"} for k in NATIVE_PROGRAMS}


def test_a_program_that_prints_nothing_is_an_error_and_the_other_still_runs(tmp_path: Path) -> None:
    out = run_native(nvcc=_fake_nvcc(tmp_path))
    assert out["cuda_latency"]["rows"] == [{"what": "launch_sync", "median_us": 8.5}]
    assert out["cuda_latency"]["command"] == "nvcc -O2 -arch=native collsim/bench/cuda/cuda_latency.cu, then run"
    assert out["hbm_latency"] == {"error": "run failed (0): no output"}


def test_a_failed_build_is_reported(tmp_path: Path) -> None:
    out = run_native(nvcc=_fake_nvcc(tmp_path, fail_hbm="bad arch"))
    assert out["hbm_latency"] == {"error": "build failed (1): bad arch"}
    assert "rows" in out["cuda_latency"]


def test_preset_figures_take_medians_over_runs() -> None:
    rows = parse_rows('{"what": "launch_sync", "median_us": 8}\n{"what": "launch_sync", "median_us": 10}\n'
                      '{"what": "launch_sync", "median_us": 9.5}\n')
    native = {"cuda_latency": {"rows": rows}, "hbm_latency": {"rows": [
        {"size_bytes": 32 << 20, "ns_per_load": 215.0},  # within an L2: left out
        {"size_bytes": 128 << 20, "ns_per_load": 321.0}, {"size_bytes": 1 << 30, "ns_per_load": 327.0}]}}
    assert preset_figures(native) == {"kernel_launch_latency_us": 9.5, "hbm_latency_ns": 324.0}
    assert preset_figures({"cuda_latency": {"error": "nvcc is not on the PATH"}}) == {}
