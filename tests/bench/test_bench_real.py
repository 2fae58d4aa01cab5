"""collsim bench for real: Gloo on CPU tensors over loopback (2 processes), and in-process single-rank runs.

Needs torch (the ``bench`` extra, also in ``test``); skipped only when it is missing. GPU tests are marked ``gpu`` and
skipped without CUDA.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from collsim.bench import BenchConfig, BenchError, launch_local, to_measurement
from collsim.bench.launch import free_port
from collsim.bench.worker import run_rank
from collsim.calibration import parse_nccl_tests, read_measurement
from collsim.cli import main

torch = pytest.importorskip("torch", reason="collsim bench needs torch: pip install -e '.[bench]'")
pytestmark = pytest.mark.bench

_CUDA = bool(torch.cuda.is_available())


def test_gloo_cpu_two_processes_json_and_text_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json, out_text = tmp_path / "m.json", tmp_path / "m.txt"
    rc = main(["bench", "--backend", "gloo", "--device", "cpu", "--nprocs", "2", "--sizes", "4KiB:1MiB:x16",
               "-w", "2", "-n", "5", "-o", str(out_json), "--text", str(out_text)])
    stdout, stderr = capsys.readouterr()
    assert rc == 0, stderr
    assert stdout == ""  # --text takes the table
    assert "[3/3] gloo allreduce 1MiB:" in stderr  # progress, one line per size when stderr is not a terminal

    m = read_measurement(out_json)
    assert (m.collective, m.backend, m.device, m.nranks, m.dtype) == ("allreduce", "gloo", "cpu", 2, "float32")
    assert m.sizes() == [4096, 65536, 1048576]
    assert all(r.time_us > 0 and r.spread_us is not None and r.spread_us >= 0 for r in m.rows)
    assert all(r.statistic == "median" and r.iterations == 5 for r in m.rows)
    assert m.hardware["nodes"] == 1 and m.hardware["cpu_count"] >= 1 and m.hardware["cpu"]
    assert m.software["torch_version"] == str(torch.__version__) and "gloo" in m.software
    assert m.source["command"].startswith("collsim bench --collective allreduce --backend gloo --device cpu")
    assert "--sizes 4KiB:1MiB:x16" in m.source["command"] and m.source["launcher"] == "collsim"
    assert m.source["date"] <= m.source["finished"]

    log = parse_nccl_tests(out_text.read_text(), source=str(out_text))
    assert (log.collective, log.nranks) == ("allreduce", 2)
    assert [r.size_bytes for r in log.rows] == m.sizes()
    for row, mrow in zip(log.rows, m.rows, strict=True):
        assert row.time_us == pytest.approx(mrow.time_us, abs=0.006 if mrow.time_us < 1e4 else 0.6)  # printed %.2f/%.1f
    assert out_text.read_text().count(" ok\n") == 3  # the data check passed at every size


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two ranks on a CPU each need two CPUs")
def test_cores_per_rank_pins_each_rank_and_the_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.json"
    rc = main(["bench", "--backend", "gloo", "--device", "cpu", "--nprocs", "2", "--sizes", "64KiB", "-w", "1",
               "-n", "2", "--cores-per-rank", "1", "--quiet", "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    m = read_measurement(out)
    assert m.hardware["rank0_cpus_allowed"] == [min(os.sched_getaffinity(0))]
    assert "pinned to its own 1 CPU(s)" in m.notes and "--cores-per-rank 1" in m.source["command"]


def test_gloo_cpu_alltoall_csv_through_the_api(tmp_path: Path) -> None:
    cfg = BenchConfig(collective="alltoall", sizes=(64, 8192), warmup=1, iters=3, nprocs=2)
    seen: list[tuple[int, int]] = []
    out = launch_local(cfg, on_event=lambda i, n, size, med, wrong: seen.append((i, size)))
    assert seen == [(0, 64), (1, 8192)]
    assert [r.wrong for r in out.results] == [0, 0]  # block j of every rank came from rank j
    assert [r.count for r in out.results] == [8, 1024]  # per-peer elements: 64 B / 4 B / 2 ranks
    assert all(len(r.times_s) == 3 and min(r.times_s) > 0 for r in out.results)
    assert [i.rank for i in out.ranks] == [0, 1] and len({i.pid for i in out.ranks}) == 2
    path = tmp_path / "a2a.csv"
    to_measurement(out, command="test").write(path)
    back = read_measurement(path)
    assert back.collective == "alltoall" and back.sizes() == [64, 8192]
    assert back.busbw_gbps(back.rows[1]) == pytest.approx(back.rows[1].algbw_gbps * 0.5)  # (n-1)/n


@pytest.mark.skipif(_CUDA, reason="checks the failure of cuda tensors on a machine without CUDA")
def test_a_failing_rank_is_one_line_naming_the_rank() -> None:
    cfg = BenchConfig(backend="gloo", device="cuda", sizes=(1024,), iters=1, nprocs=1)  # one process: fast
    with pytest.raises(BenchError, match=r"^rank 0: BenchError: --device cuda: no CUDA device \(torch .*\); use"):
        launch_local(cfg)


@pytest.fixture
def single_rank_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as rank 0 of 1, as torchrun would set it."""
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(key, value)


@pytest.mark.usefixtures("single_rank_env")
@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall"])
def test_every_collective_in_process_one_rank(collective: str) -> None:
    cfg = BenchConfig(collective=collective, sizes=(16, 4096), warmup=1, iters=2, nprocs=1, timing="iteration")
    out = run_rank(cfg)
    assert out is not None and out.nranks == 1 and out.launcher == "torchrun"
    assert [(r.size_bytes, r.count, r.wrong, len(r.times_s)) for r in out.results] == [(16, 4, 0, 2),
                                                                                       (4096, 1024, 0, 2)]


@pytest.mark.usefixtures("single_rank_env")
def test_under_torchrun_the_cli_runs_as_this_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "b.json"
    rc = main(["bench", "--device", "cpu", "--sizes", "1B,1KiB,8KiB", "-n", "3", "--timing", "block", "--quiet",
               "--nprocs", "4", "-o", str(path)])
    stdout, stderr = capsys.readouterr()
    assert rc == 0
    assert "running under torchrun (WORLD_SIZE=1); --nprocs 4 ignored" in stderr
    assert "--sizes: 1 B below one float32 element: left out" in stderr  # it was dropped without a word
    # block timing: one mean a size, no median nor spread of iterations (the summary called the mean a median)
    flat = " ".join(stdout.split())
    assert "# size mean check (us; one block of 3 iterations: no spread)" in flat
    assert "median" not in stdout.split("# Avg bus bandwidth")[-1]
    doc = json.loads(path.read_text())
    assert doc["nranks"] == 1 and doc["source"]["launcher"] == "torchrun"
    command = doc["source"]["command"]
    assert command.startswith("torchrun ... collsim bench") and "--nprocs" not in command
    assert [(r["size_bytes"], r["statistic"], r["spread_us"]) for r in doc["rows"]] == [(1024, "mean", None),
                                                                                       (8192, "mean", None)]
    assert all(math.isfinite(r["time_us"]) and r["time_us"] > 0 for r in doc["rows"])
    assert parse_nccl_tests(stdout).nranks == 1


@pytest.mark.skipif(_CUDA, reason="checks the message on a machine without CUDA")
def test_probe_without_cuda_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "--probe"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.startswith("collsim: error: --probe measures a CUDA GPU, and this machine has none usable")
    assert err.count("\n") == 1


@pytest.mark.skipif(_CUDA, reason="checks the message on a machine without CUDA")
def test_cuda_device_without_cuda_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["bench", "--device", "cuda", "--sizes", "1KiB"])
    _, err = capsys.readouterr()
    assert rc == 2 and "--device cuda: no CUDA device" in err and "use --device cpu" in err


@pytest.mark.gpu
@pytest.mark.skipif(not _CUDA, reason="needs a CUDA GPU")
def test_probe_on_a_gpu(tmp_path: Path) -> None:
    path = tmp_path / "probe.json"
    rc = main(["bench", "--probe", "--sizes", "1KiB:4MiB:x64", "-w", "2", "-n", "5", "--probe-ranks", "1,2", "--quiet",
               "-o", str(path)])
    assert rc == 0
    doc = json.loads(path.read_text())
    assert doc["format"] == "collsim-probe/2" and doc["hardware"]["gpu"]
    for name in ("d2h", "h2d", "d2d", "d2h_pageable", "h2d_pageable"):
        copies = doc["copies"][name]
        assert [r["size_bytes"] for r in copies["rows"]] == [1024, 65536, 4194304]
        assert copies["latency_us"] > 0 and copies["bandwidth_gbps"] > 0
    assert sorted(doc["native"]) == ["cuda_latency", "hbm_latency"]  # rows where nvcc is installed, else errors
    launch = doc["kernel_launch"]
    assert launch["enqueue_us"] > 0 and launch["launch_sync_us"] > 0
    parts = [doc["nccl_1rank"], *doc["gloo_cuda"].values(), *doc["gloo_cpu"].values()]
    for part in parts:
        assert "error" not in part, part
        assert part["format"] == "collsim-measurement/1" and len(part["rows"]) == 3
    assert [p["nranks"] for p in parts] == [1, 1, 2, 1, 2]
    assert [p["software"].get("cuda_version") is not None for p in parts] == [True, True, True, False, False]
    rc = main(["bench", "--probe-check", str(path), "--text", str(tmp_path / "check.txt")])
    assert rc == 0 and "Gloo staging, 2 ranks sharing the GPU" in (tmp_path / "check.txt").read_text()


@pytest.mark.gpu
@pytest.mark.skipif(not _CUDA, reason="needs a CUDA GPU")
def test_nccl_sweep_on_the_gpus(tmp_path: Path) -> None:
    n = int(torch.cuda.device_count())
    cfg = BenchConfig(backend="nccl", device="cuda", sizes=(1024, 1 << 20), warmup=2, iters=5, nprocs=n)
    out = launch_local(cfg)
    assert [r.wrong for r in out.results] == [0, 0] and out.software["nccl_version"]
    assert out.hardware["gpu"] and out.hardware["gpus_per_node"] == n
