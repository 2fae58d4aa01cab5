"""collsim bench --probe-check: the H200 probe files in scenarios/measurements/h200-probe against the presets."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from collsim.bench.config import BenchError
from collsim.bench.probe_check import (
    check_probe,
    copy_model_time_s,
    format_check,
    gpu_preset_for,
    has_native_rows,
    measured_presets,
    native_beside,
    staging_model_time_s,
)
from collsim.cli import main
from collsim.topology.presets import PresetSource, load_presets, merge_presets, read_preset_files

DATA = Path(__file__).resolve().parents[2] / "scenarios" / "measurements" / "h200-probe"


def _probe(i: int) -> dict[str, Any]:
    return dict(json.loads((DATA / f"probe-{i}.json").read_text()))


def _cuda_latency() -> dict[str, list[float]]:
    """Per quantity, the median of each cuda-latency run (us)."""
    out: dict[str, list[float]] = {}
    for path in sorted(DATA.glob("cuda-latency-*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            out.setdefault(row["what"], []).append(row["median_us"])
    return out


def test_the_h200_preset_holds_what_cuda_latency_measured() -> None:
    runs = _cuda_latency()
    assert all(len(v) == 4 for v in runs.values()) and len(runs) == 9
    h200 = load_presets().gpus["h200-sxm-141gb"]
    assert h200["kernel_launch_latency"] * 1e6 == pytest.approx(statistics.median(runs["launch_sync"]), abs=0.005)
    copies = (statistics.median(runs["memcpy_d2h_pinned"]) + statistics.median(runs["memcpy_h2d_pinned"])) / 2
    assert h200["memcpy_latency"] * 1e6 == pytest.approx(copies, abs=0.005)


def test_the_h200_preset_holds_the_pointer_chase() -> None:
    rows = [json.loads(line) for line in (DATA / "hbm-latency.jsonl").read_text().splitlines()]
    beyond_l2 = [r["ns_per_load"] for r in rows if r["size_bytes"] >= 128 << 20]  # the H200's L2 is 60 MB
    assert len(beyond_l2) == 5 and max(beyond_l2) - min(beyond_l2) < 10  # a plateau: device memory, not caches
    h200 = load_presets().gpus["h200-sxm-141gb"]
    assert h200["hbm_latency"] * 1e9 == pytest.approx(statistics.median(beyond_l2), abs=0.5)


def test_closed_forms() -> None:
    assert copy_model_time_s(48_000, latency_s=1e-6, bandwidth_bps=48e9) == pytest.approx(2e-6)
    # 4 ranks x 1 MB each way at 50 GB/s: 80 us each way, plus the fixed cost of each direction once
    assert staging_model_time_s(10**6, 4, latency_s=5e-6, d2h_bps=50e9, h2d_bps=50e9) == pytest.approx(170e-6)
    assert staging_model_time_s(10**6, 1, latency_s=0, d2h_bps=25e9, h2d_bps=50e9) == pytest.approx(60e-6)


def test_the_probe_names_its_preset() -> None:
    presets = load_presets()
    assert gpu_preset_for("NVIDIA H200", presets) == "h200-sxm-141gb"
    with pytest.raises(BenchError, match="'NVIDIA A100' and several match"):
        gpu_preset_for("NVIDIA A100", presets)  # 40 GB and 80 GB
    with pytest.raises(BenchError, match="none matches; name the preset with --gpu"):
        gpu_preset_for("Fake GPU", presets)
    # a preset's cuda_names come first: the device name as CUDA prints it, whatever the model string says
    assert gpu_preset_for("NVIDIA A100-SXM4-40GB", presets) == "a100-sxm4-40gb"
    lab = {"base": "h100-sxm5-80gb", "model": "Lab board", "cuda_names": ["Fake GPU"], "source": "test"}
    merged = merge_presets(presets, [PresetSource({"gpus": {"lab": lab}}, "lab.yaml")])
    assert gpu_preset_for("Fake GPU", merged) == "lab"


@pytest.mark.parametrize("i", [1, 2, 3])
def test_every_h200_probe_against_its_preset(i: int) -> None:
    probe = _probe(i)
    check = check_probe(probe, file=f"probe-{i}.json")
    assert check.gpu == "h200-sxm-141gb" and check.probe_gpu == "NVIDIA H200"
    rows = {r.what: r for r in check.rows}
    d2h = rows["D2H pinned copy rate, best size"]
    pcie5 = 32e9 * 16 * 128 / 130 / 8 / 1e9  # GB/s: 32 GT/s x 16 lanes, 128b/130b encoding, 8 bits per byte
    assert d2h.measured == probe["copies"]["d2h"]["bandwidth_gbps"] and d2h.model == pytest.approx(0.8727 * pcie5)
    assert abs(d2h.error) < 0.004  # links.yaml pcie5's dma_efficiency was set from these files' 1 GiB copies
    assert 54.5 < d2h.measured < 55.5  # PCIe Gen5 x16: 87% of 63.0 GB/s in all three runs (NCCL's figure: 48)
    pageable = rows["D2H pageable (not what Gloo stages through) copy rate, best size"]
    assert 12 < pageable.measured < 16  # pageable memory goes through a staging buffer: a quarter of pinned
    ranks = sorted(probe["gloo_cuda"], key=int)
    assert ranks == (["2", "4", "8"] if i == 1 else ["1", "2", "4", "8"])
    staging = [r for r in check.rows if r.what.startswith("Gloo staging")]
    assert len(staging) == 2 * len(ranks) and not check.notes[2:]
    assert ("the same, less PyTorch's CPU dispatch of the call" in rows) == (i == 3)  # run 3 measured the dispatch


def test_gloo_staging_of_eight_ranks_is_eight_copies_each_way() -> None:
    """The one clear staging signal: 8 ranks x 256 MiB each way over the one link, CUDA - CPU sweep."""
    for i in (1, 2, 3):
        probe = _probe(i)
        cuda = {r["size_bytes"]: r["time_us"] for r in probe["gloo_cuda"]["8"]["rows"]}
        cpu = {r["size_bytes"]: r["time_us"] for r in probe["gloo_cpu"]["8"]["rows"]}
        size = 256 << 20
        rate = probe["copies"]["d2h"]["bandwidth_gbps"] * 1e9  # GB/s to bytes/s
        expected = staging_model_time_s(size, 8, latency_s=0.0, d2h_bps=rate, h2d_bps=rate) * 1e6  # s to us
        assert (cuda[size] - cpu[size]) / expected == pytest.approx(1.0, abs=0.1)


def test_the_command_prints_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--probe-check", str(DATA / "probe-3.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# probe of 'NVIDIA H200' against GPU preset h200-sxm-141gb\n")
    assert "kernel launch + wait, from C++ (what the preset stands for)" in out and "# D2H pinned copy time" in out
    assert main(["bench", "--probe-check", str(DATA / "probe-3.json"), "--gpu", "h100-sxm5-80gb", "--text",
                 str(tmp_path / "c.txt")]) == 0
    assert "against GPU preset h100-sxm5-80gb" in (tmp_path / "c.txt").read_text()
    native, names = native_beside(DATA / "probe-3.json")
    assert names == [*(f"cuda-latency-{i}.jsonl" for i in range(1, 5)), "hbm-latency.jsonl"]
    note = f"# C++ figures from {', '.join(names)} beside probe-3.json\n"
    assert format_check(check_probe(_probe(3), native=native)) + note == out
    assert "from C++" not in format_check(check_probe(_probe(3)))  # the probe file itself has no C++ rows


def test_the_cxx_rows_are_what_the_preset_holds() -> None:
    native, _ = native_beside(DATA / "probe-3.json")
    assert has_native_rows(native) and not has_native_rows({"cuda_latency": {"error": "no nvcc"}})
    rows = {r.what: r for r in check_probe(_probe(3), native=native).rows}
    for what in ("kernel launch + wait, from C++ (what the preset stands for)",
                 "8 B pinned copy + wait, from C++, mean of D2H and H2D",
                 "device-memory load, pointer chase >= 128 MiB, from C++"):
        assert abs(rows[what].error) < 0.002, what  # the preset was set from these files
    assert rows["device-memory load, pointer chase >= 128 MiB, from C++"].unit == "ns"
    # the probe's own rows win over files beside it
    probe = {**_probe(3), "native": {"cuda_latency": {"rows": [{"what": "launch_sync", "median_us": 4.59}]}}}
    rows = {r.what: r for r in check_probe(probe).rows}
    assert rows["kernel launch + wait, from C++ (what the preset stands for)"].error == pytest.approx(1.0, rel=1e-3)


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        ('{"format": "collsim-probe/1"}', [], "format 'collsim-probe/1'; expected 'collsim-probe/2'"),
        ("[1]", [], "expected a JSON object"),
        ("{", [], "not JSON"),
        (None, ["--gpu", "nope"], "--gpu nope: unknown GPU preset; known: a100-sxm4-40gb"),
    ],
)
def test_bad_probe_files_exit_2_with_one_line(text: str | None, args: list[str], message: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.json"
    if text is None:
        path.write_text((DATA / "probe-3.json").read_text())
    else:
        path.write_text(text)
    assert main(["bench", "--probe-check", str(path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("collsim: error: ") and message in err and err.count("\n") == 1


def test_preset_out_writes_presets_that_reproduce_the_measurement(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine.yaml"
    assert main(["bench", "--probe-check", str(DATA / "probe-3.json"), "--preset-out", str(out)]) == 0
    assert f"# presets written to {out}: gpus h200-sxm-141gb, links pcie5" in capsys.readouterr().out
    text = out.read_text()
    assert text.startswith("# What collsim bench --probe measured (probe-3.json), as collsim presets")
    merged = merge_presets(load_presets(), read_preset_files(out))  # validated like any user presets file
    h200, pcie5 = merged.gpus["h200-sxm-141gb"], merged.links["pcie5"]
    assert h200["kernel_launch_latency"] == pytest.approx(9.179e-6) and h200["memcpy_latency"] == pytest.approx(6.14e-6)
    assert h200["hbm_latency"] == pytest.approx(325.4e-9) and h200["hbm_bandwidth"] == 4.8e12  # the rest as shipped
    rate = (55.133141 + 55.170525) / 2  # GB/s: probe-3's best pinned D2H and H2D
    assert pcie5["dma_efficiency"] == pytest.approx(round(rate / 63.0153846154, 4))
    assert "its C++ rows from runs saved beside it" in h200["kernel_launch_latency_source"]
    assert "efficiency" in pcie5 and pcie5["efficiency"] == 0.76171875  # NCCL's figure stays


def test_preset_out_without_cxx_rows_writes_the_link_only() -> None:
    doc = measured_presets(_probe(1), native={})
    assert list(doc) == ["links"] and list(doc["links"]) == ["pcie5"]
    with pytest.raises(BenchError, match=r"probe-1\.json: copies\.h2d has no rows"):
        measured_presets({**_probe(1), "copies": {"d2h": _probe(1)["copies"]["d2h"]}}, native={}, file="probe-1.json")
    with pytest.raises(BenchError, match="GPU preset lab-gpu is not a shipped one"):
        lab = Path(__file__).resolve().parents[1] / "scenario" / "data" / "user-presets.presets.yaml"
        user = merge_presets(load_presets(), read_preset_files(lab))
        measured_presets(_probe(1), "lab-gpu", user, native={})
