"""collsim bench --host-memory: the CPU preset's memory figures measured with torch (collsim/bench/hostmem.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collsim.bench import BenchError
from collsim.bench.hostmem import HostMemoryConfig, figures, fresh_mapping_bytes, host_presets
from collsim.cli import main
from collsim.topology.presets import load_presets, merge_presets, read_preset_files

MIB = 1 << 20


def _passes(copy_alone: float = 0.01, copy_together: tuple[float, ...] = (0.02, 0.025)) -> dict[str, object]:
    return {
        "alone": {"copy_s": [copy_alone], "add_s": [0.011], "touched_s": {str(16 * MIB): [1e-3], str(32 * MIB): [2e-3],
                                                                          str(64 * MIB): [4e-3]},
                  "fresh_s": {str(16 * MIB): [1e-3], str(32 * MIB): [12e-3], str(64 * MIB): [24e-3]}},
        "together": {"copy_s": list(copy_together), "add_s": [0.02, 0.02], "touched_s": {}, "fresh_s": {}},
    }  # fmt: skip


def test_figures_count_three_bytes_per_copied_byte_and_the_slowest_process() -> None:
    f = figures(_passes(), size=100 * MIB, nprocs=2)
    assert f["copy_bw_per_core"] == pytest.approx(100 * MIB / 0.01)
    assert f["memory_bandwidth"] == pytest.approx(2 * 3 * 100 * MIB / 0.025)  # the slower process counts
    assert f["memory_bandwidth_add"] == pytest.approx(2 * 3 * 100 * MIB / 0.02)
    # first touch: 32 MiB in 10 ms more, 64 MiB in 20 ms more; 16 MiB (below the threshold) is not counted
    assert f["first_touch_bw"] == pytest.approx(32 * MIB / 0.010)


def test_no_fresh_mapping_size_gives_no_first_touch_figure() -> None:
    assert figures(_passes(), size=MIB, nprocs=2, fresh_from=128 * MIB)["first_touch_bw"] is None
    assert fresh_mapping_bytes() == 32 * MIB  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit (gloo.yaml)


def test_bad_configurations_are_refused() -> None:
    with pytest.raises(BenchError, match="at least 1 process"):
        HostMemoryConfig(nprocs=0)
    with pytest.raises(BenchError, match="expected -n >= 1"):
        HostMemoryConfig(iters=0)


def test_the_preset_written_is_a_valid_user_preset(tmp_path: Path) -> None:
    result = {
        "hardware": {"cpu": "AMD EPYC 7763", "cpu_count": 8},
        "source": {"machine": "lab: AMD EPYC 7763", "date": "2026-12-05T00:00:00+00:00"},
        "config": {"nprocs": 2, "size_bytes": 256 * MIB, "fresh_mapping_bytes": 32 * MIB},
        "figures": {"memory_bandwidth": 61.5e9, "memory_bandwidth_add": 60e9, "copy_bw_per_core": 20e9,
                    "first_touch_bw": 2.9e9},
    }  # fmt: skip
    import yaml

    out = tmp_path / "mine.yaml"
    out.write_text(yaml.safe_dump(host_presets(result, "epyc-7742", file="hm.json")))
    cpu = merge_presets(load_presets(), read_preset_files(out)).cpus["epyc-7742-measured"]
    assert cpu["memory_bandwidth"] == pytest.approx(61.5e9) and cpu["copy_bw_per_core"] == pytest.approx(20e9)
    assert cpu["first_touch_bw"] == pytest.approx(2.9e9) and cpu["cores"] == 8 and cpu["vendor"] == "amd"
    assert "hm.json" in cpu["memory_bandwidth_source"]
    assert cpu["reduce_bw_per_core"] == load_presets().cpus["epyc-7742"]["reduce_bw_per_core"]  # the rest as shipped
    with pytest.raises(BenchError, match="no such shipped CPU preset"):
        host_presets(result, "no-such-cpu")


def test_cli_refuses_bad_outputs_before_measuring(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--host-memory", "-o", "m.csv"]) == 2
    assert "--host-memory writes JSON" in capsys.readouterr().err
    assert main(["bench", "--host-memory", "--preset-out", "m.txt"]) == 2
    assert "expected a file name ending in .yaml" in capsys.readouterr().err
    assert main(["bench", "--host-memory", "--host-memory-size", "lots"]) == 2
    assert "--host-memory-size lots" in capsys.readouterr().err
    assert main(["bench", "--host-memory", "--host-memory-size", "1PiB"]) == 2
    assert "more than half of this host's" in capsys.readouterr().err
    assert main(["bench", "--host-memory", "--nprocs", "0"]) == 2
    assert "--nprocs 0: expected at least 1 process" in capsys.readouterr().err
    assert main(["bench", "--host-memory", "--cpu", "nope", "--preset-out", "m.yaml"]) == 2
    assert "--cpu nope: no such shipped CPU preset" in capsys.readouterr().err


@pytest.mark.bench
def test_a_real_measurement_on_this_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="collsim bench needs torch: pip install -e '.[bench]'")
    out, presets = tmp_path / "hm.json", tmp_path / "hm.yaml"
    rc = main(["bench", "--host-memory", "--nprocs", "2", "--host-memory-size", "1MiB", "-n", "3", "-w", "1",
               "-o", str(out), "--preset-out", str(presets), "--quiet"])  # fmt: skip
    assert rc == 0
    text = capsys.readouterr().out
    assert "memory_bandwidth" in text and "first_touch_bw" in text and "into a fresh torch.empty" in text
    data = json.loads(out.read_text())
    assert data["format"] == "collsim-host-memory/1"
    assert len(data["passes"]["together"]["copy_s"]) == 2 and len(data["passes"]["alone"]["copy_s"]) == 1
    assert set(data["passes"]["alone"]["fresh_s"]) == {str(s) for s in (16 * MIB, 32 * MIB, 64 * MIB, 128 * MIB)}
    assert data["figures"]["memory_bandwidth"] > 0 and data["figures"]["copy_bw_per_core"] > 0
    assert "generic-x86-measured" in merge_presets(load_presets(), read_preset_files(presets)).cpus
