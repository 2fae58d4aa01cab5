"""collsim.bench without running torch: configuration, output formats, metadata, CLI error paths, missing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from collsim.bench import BenchConfig, BenchError, SizeResult, SweepOutput, format_text, to_measurement, to_records
from collsim.bench.metadata import cpu_model_from_cpuinfo, relevant_env
from collsim.bench.probe import copy_rows, run_probe, summarise_copies
from collsim.bench.report import RankInfo
from collsim.bench.worker import rank_env
from collsim.calibration import (
    measurement_from_nccl_tests,
    parse_measurement_csv,
    parse_measurement_json,
    parse_nccl_tests,
)
from collsim.cli import main


def _output(collective: str = "allreduce", nranks: int = 2, timing: str = "iteration") -> SweepOutput:
    cfg = BenchConfig(collective=collective, sizes=(1024, 4096), iters=4, nprocs=nranks, timing=timing)
    return SweepOutput(
        config=cfg,
        nranks=nranks,
        results=[
            SizeResult(1024, 256 // (nranks if collective == "allgather" else 1), [10e-6, 11e-6, 12e-6, 30e-6], 0),
            SizeResult(4096, 1024 // (nranks if collective == "allgather" else 1), [40e-6, 40e-6, 40e-6, 40e-6], 0),
        ],
        ranks=[RankInfo(r, "hostA", 100 + r, "cpu", r) for r in range(nranks)],
        hardware={"cpu": "Test CPU", "nodes": 1},
        software={"torch_version": "0.0"},
        started="2025-01-01T00:00:00+00:00",
        finished="2025-01-01T00:00:01+00:00",
    )


# --- configuration --------------------------------------------------------------------------------------------


def test_config_defaults_and_aliases() -> None:
    cfg = BenchConfig(collective="All-Gather", sizes=(1024,))
    assert (cfg.collective, cfg.backend, cfg.device, cfg.dtype, cfg.warmup, cfg.iters) == (
        "allgather", "gloo", "cpu", "float32", 5, 20)
    assert BenchConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"collective": "gather"}, r"--collective: 'gather' is not wired"),
        ({"collective": "nope"}, r"--collective: unknown collective 'nope'; expected one of: allreduce, allgather, "
                                 r"reduce_scatter, broadcast, reduce, alltoall$"),
        ({"backend": "mpi"}, r"--backend: expected one of nccl, gloo"),
        ({"backend": "nccl", "device": "cpu"}, r"nccl needs --device cuda"),
        ({"dtype": "uint32"}, r"--dtype: expected one of"),
        ({"sizes": ()}, r"--sizes: no sizes"),
        ({"sizes": (0, 8)}, r"--sizes: sizes must be positive"),
        ({"iters": 0}, r"-n/--iters: expected an integer >= 1, got 0"),
        ({"warmup": -1}, r"-w/--warmup: expected an integer >= 0"),
        ({"nprocs": 0}, r"--nprocs: expected an integer >= 1"),
        ({"timing": "avg"}, r"--timing: expected one of iteration, block"),
        ({"timeout_s": 0}, r"--timeout"),
        ({"cores_per_rank": 0}, r"--cores-per-rank: expected an integer >= 1, got 0"),
    ],
)
def test_config_errors_name_the_option(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(BenchError, match=match):
        BenchConfig(**kwargs)  # type: ignore[arg-type]


def test_effective_sizes_round_like_nccl_tests() -> None:
    # allreduce: whole float32 elements; 1023 B -> 1020 B; duplicates merged, order increasing
    assert BenchConfig(sizes=(4096, 1023, 1020)).effective_sizes(2) == [1020, 4096]
    # allgather over 3 ranks: count = size // 4 // 3 elements per rank, size = count * 3 * 4
    cfg = BenchConfig(collective="allgather", sizes=(1024, 12, 11))
    assert cfg.effective_sizes(3) == [12, 1020]
    assert cfg.elements(1020, 3) == 85
    with pytest.raises(BenchError, match=r"below one float32 element per rank \(8 B for alltoall over 2 ranks\)"):
        BenchConfig(collective="alltoall", sizes=(4,)).effective_sizes(2)
    # with NCCL a rank's count is a multiple of 16 bytes, as nccl-tests (from v2.13.12) and collsim's NCCL have it:
    # 85 floats a rank -> 84; 1 float a rank -> none
    nccl = BenchConfig(collective="allgather", backend="nccl", device="cuda", sizes=(1024, 12, 48))
    assert nccl.effective_sizes(3) == [48, 1008] and nccl.elements(1020, 3) == 84


def test_rank_env_needs_all_three_variables() -> None:
    assert rank_env({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "3"}) == (3, 8, 3)
    assert rank_env({"RANK": "3", "WORLD_SIZE": "8"}) is None
    assert rank_env({"RANK": "x", "WORLD_SIZE": "8", "LOCAL_RANK": "0"}) is None


# --- outputs ---------------------------------------------------------------------------------------------------


def test_exit_rank_flushes_then_leaves_with_the_status() -> None:
    # a launched rank leaves without the interpreter's teardown (torch's C++ threads can abort it there), so what it
    # printed must be flushed first, and its status must reach the launcher
    code = (
        "import sys\n"
        "from collsim.bench.worker import exit_rank\n"
        "print('out', end='')\n"
        "print('err', end='', file=sys.stderr)\n"
        "import atexit\n"
        "atexit.register(lambda: print('TEARDOWN', end=''))\n"
        "exit_rank(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out", "err")  # flushed, and no teardown ran


def test_size_result_statistics() -> None:
    r = SizeResult(1024, 256, [10e-6, 11e-6, 12e-6, 30e-6])
    assert r.median_us == pytest.approx(11.5)
    assert r.spread_us == pytest.approx(5.75)  # inclusive quartiles 10.75 and 16.5
    assert r.mean_us == pytest.approx(15.75)
    assert (r.min_us, r.max_us) == (pytest.approx(10.0), pytest.approx(30.0))


def test_measurement_rows_metadata_and_round_trip(tmp_path: Path) -> None:
    m = to_measurement(_output(), command="collsim bench -n 4", source={"machine": "hostA"})
    assert [(r.size_bytes, r.time_us, r.statistic, r.iterations, r.spread_us) for r in m.rows] == [
        (1024, 11.5, "median", 4, 5.75), (4096, 40.0, "median", 4, 0.0)]
    assert m.source == {"command": "collsim bench -n 4", "machine": "hostA", "date": "2025-01-01T00:00:00+00:00",
                        "finished": "2025-01-01T00:00:01+00:00", "launcher": "collsim"}
    assert (m.backend, m.device, m.nranks, m.software["timing"], m.software["benchmark"]) == (
        "gloo", "cpu", 2, "iteration", "collsim bench")
    back = parse_measurement_json(m.to_json())
    assert [(r.size_bytes, r.time_us) for r in back.rows] == [(1024, 11.5), (4096, 40.0)]
    assert back.busbw_gbps(back.rows[1]) == pytest.approx(4096 / 40.0 / 1e3)  # 2 ranks: factor 2(n-1)/n = 1
    csv_back = parse_measurement_csv(m.to_csv())
    assert [(r.size_bytes, r.time_us, r.spread_us) for r in csv_back.rows] == [(1024, 11.5, 5.75), (4096, 40.0, 0.0)]
    out = tmp_path / "m.json"
    m.write(out)
    assert json.loads(out.read_text())["format"] == "collsim-measurement/1"


def test_block_timing_is_a_mean_without_spread() -> None:
    m = to_measurement(_output(timing="block"))
    assert [(r.statistic, r.time_us, r.spread_us) for r in m.rows] == [("mean", 15.75, None), ("mean", 40.0, None)]
    assert "averaged over ranks" in m.notes


def test_one_file_for_the_measurement_and_the_text_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                              ) -> None:  # fmt: skip
    """-o same.json --text same.json: the text overwrote the measurement, leaving a .json that is no JSON."""
    same = str(tmp_path / "same.json")
    assert main(["bench", "--backend", "gloo", "--device", "cpu", "-o", same, "--text", same]) == 2
    assert "name one file: the text would overwrite the measurement" in capsys.readouterr().err


def test_text_parses_back_as_nccl_tests() -> None:
    text = format_text(_output(collective="allgather", nranks=4))
    log = parse_nccl_tests(text)
    assert (log.collective, log.nranks) == ("allgather", 4)
    assert [(r.size_bytes, r.count, r.dtype, r.redop, r.time_us) for r in log.rows] == [
        (1024, 64, "float32", "none", 11.5), (4096, 256, "float32", "none", 40.0)]
    # busbw for allgather over 4 ranks: algbw * 3/4; 4096 B / 40 us = 0.1024 GB/s -> 0.0768 printed as 0.08
    assert log.rows[1].algbw_gbps == 0.10 and log.rows[1].busbw_gbps == 0.08
    assert "#       1024       11.50        5.75       10.00       30.00  ok" in text


def test_text_read_back_is_the_benchs_backend_and_device_not_nccls() -> None:
    # the text's first line names them ("torch.distributed gloo, cpu tensors"): a Gloo run read as NCCL's was
    # refused by the scenario it came from, or compared with NCCL's prediction where a scenario enables both
    m = measurement_from_nccl_tests(parse_nccl_tests(format_text(_output())))
    assert (m.backend, m.device, m.software["benchmark"]) == ("gloo", "cpu", "collsim bench")
    assert (m.backend, m.device) == (to_measurement(_output()).backend, to_measurement(_output()).device)
    nccl = parse_nccl_tests("# Collective test starting: all_reduce_perf\n 1024 256 float sum -1 9.0 0.1 0.2 0\n")
    assert (nccl.backend, nccl.device) == ("nccl", None)


def test_records_carry_root_for_rooted_collectives() -> None:
    out = _output()
    out.config = BenchConfig(collective="broadcast", sizes=(1024, 4096), iters=4, nprocs=2, root=1)
    assert [r.root for r in to_records(out)] == [1, 1]
    assert [r.redop for r in to_records(out)] == ["none", "none"]
    assert to_measurement(out).software["root"] == 1  # validate notes a scenario rooted elsewhere
    out.config = BenchConfig(collective="allreduce", sizes=(1024, 4096), iters=4, nprocs=2)
    assert "root" not in to_measurement(out).software


def test_metadata_helpers() -> None:
    env = {"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "lo", "TORCH_NCCL_BLOCKING_WAIT": "1", "PATH": "/bin",
           "CUDA_VISIBLE_DEVICES": "0,1"}
    assert list(relevant_env(env)) == ["CUDA_VISIBLE_DEVICES", "GLOO_SOCKET_IFNAME", "NCCL_DEBUG",
                                       "TORCH_NCCL_BLOCKING_WAIT"]
    assert cpu_model_from_cpuinfo("processor\t: 0\nmodel name\t: AMD EPYC 7742 64-Core Processor\n") == (
        "AMD EPYC 7742 64-Core Processor")
    assert cpu_model_from_cpuinfo("processor: 0\n") is None


def test_probe_copy_rows_are_size_over_median() -> None:
    rows = copy_rows([8, 2**30], {8: [5e-6, 6e-6, 7e-6], 2**30: [0.02, 0.02, 0.03]})
    assert rows[0] == {"size_bytes": 8, "time_us": 6.0, "spread_us": 1.0, "iterations": 3,
                       "bandwidth_gbps": round(8 / 6.0 / 1e3, 6)}
    assert rows[1]["bandwidth_gbps"] == pytest.approx(2**30 / 0.02 / 1e9, rel=1e-6)  # 53.69 GB/s
    assert summarise_copies(rows) == {"latency_us": 6.0, "bandwidth_gbps": rows[1]["bandwidth_gbps"]}


# --- command line without torch ---------------------------------------------------------------------------------


def test_without_torch_one_line_with_the_install_command(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # "import torch" now raises ImportError
    for argv in (["bench", "--sizes", "1KiB"], ["bench", "--probe"]):
        rc = main(argv)
        out, err = capsys.readouterr()
        assert rc == 2 and out == ""
        assert err == "collsim: error: collsim bench needs PyTorch; install it with: pip install 'collsim[bench]'\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sizes", "1KiB:foo"], "--sizes: cannot read '1KiB:foo' as a size sweep"),
        (["--sizes", "0:2KiB:+1KiB"], "--sizes: expected positive sizes"),
        (["--sizes", "2KiB:1KiB:x2"], "--sizes: size sweep '2KiB:1KiB:x2': MAX is smaller than MIN"),
        (["-o", "out.txt"], "-o out.txt: expected a file name ending in .json or .csv"),
        (["--probe", "-o", "p.csv"], "--probe writes JSON"),
        (["--probe", "--probe-ranks", "2,0"], "integers >= 1 (e.g. 2,4), got '2,0'"),
        (["--probe", "--probe-ranks", "two"], "--probe-ranks: expected comma-separated integers >= 1"),
    ],
)
def test_bad_options_exit_2_with_one_line(argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # these are found before torch is needed
    rc = main(["bench", *argv])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.startswith("collsim: error: ") and message in err and err.count("\n") == 1


def test_importing_the_package_loads_neither_torch_nor_the_simulator() -> None:
    code = (
        "import sys, collsim.bench, collsim.bench.probe, collsim.bench.worker\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m in ('simpy', 'networkx', 'collsim.api')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


class _FakeTensor:
    """Enough of a tensor for the probe's copies and launches: slicing, ``copy_`` and ``add_`` do nothing."""

    def __getitem__(self, _key: object) -> _FakeTensor:
        return self

    def copy_(self, _src: object, non_blocking: bool = False) -> _FakeTensor:
        return self

    def add_(self, _x: float) -> _FakeTensor:
        return self


def _fake_torch(nccl: bool) -> Any:
    """A torch with one CUDA device whose operations take no time (the probe's orchestration, not its numbers)."""

    def no_nccl() -> tuple[int, ...]:
        raise RuntimeError("no NCCL")

    props = SimpleNamespace(name="Fake GPU", total_memory=80 * 2**30, major=9, minor=0)
    cuda = SimpleNamespace(
        is_available=lambda: True,
        set_device=lambda _d: None,
        get_device_properties=lambda _d: props,
        device_count=lambda: 1,
        synchronize=lambda: None,
        empty_cache=lambda: None,
        nccl=SimpleNamespace(version=(lambda: (2, 21, 5)) if nccl else no_nccl),
    )
    return SimpleNamespace(
        __version__="0.0+fake",
        version=SimpleNamespace(cuda="12.4"),
        cuda=cuda,
        distributed=SimpleNamespace(is_nccl_available=lambda: nccl),
        device=lambda kind, index: (kind, index),
        uint8="uint8",
        empty=lambda *_a, **_k: _FakeTensor(),
        zeros=lambda *_a, **_k: _FakeTensor(),
    )


@pytest.mark.parametrize("nccl", [True, False])
def test_probe_object_with_a_fake_gpu(nccl: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[tuple[str, str, int]] = []

    def launch_local(cfg: BenchConfig) -> SweepOutput:
        launched.append((cfg.backend, cfg.device, cfg.nprocs))
        if cfg.backend == "nccl" or (cfg.device, cfg.nprocs) == ("cpu", 4):
            raise BenchError(f"{cfg.backend}: rank 0 failed")
        out = _output()
        out.config = cfg
        return out

    monkeypatch.setattr("collsim.bench.probe.require_torch", lambda: _fake_torch(nccl))
    monkeypatch.setattr("collsim.bench.probe.launch_local", launch_local)
    monkeypatch.setattr("collsim.bench.probe.run_native", lambda timeout_s: {"cuda_latency": {"error": "no"}})
    lines: list[str] = []
    doc = run_probe(copy_sizes="8B:64B:x8", sweep_sizes="1KiB:4KiB:x4", warmup=1, iters=2, gloo_ranks=(3, 4),
                    argv="--probe", say=lines.append, native=nccl)
    assert list(doc) == ["format", "hardware", "software", "source", "copies", "kernel_launch", "native",
                         "nccl_1rank", "gloo_cuda", "gloo_cpu"]
    assert doc["native"] == ({"cuda_latency": {"error": "no"}} if nccl else {"error": "not asked for (--no-native)"})
    assert ("probe: C++ fixed costs and memory latency (nvcc)" in lines) == nccl
    assert doc["format"] == "collsim-probe/2"
    assert doc["hardware"]["gpu"] == "Fake GPU" and doc["hardware"]["gpu_memory_gib"] == 80.0
    assert doc["software"]["nccl_version"] == ("2.21.5" if nccl else None)
    assert doc["source"]["argv"] == "--probe" and doc["source"]["machine"].split(": ")[1].startswith("Fake GPU")
    assert list(doc["copies"]) == ["d2h", "h2d", "d2d", "d2h_pageable", "h2d_pageable"]
    assert [(r["size_bytes"], r["iterations"]) for r in doc["copies"]["d2h"]["rows"]] == [(8, 2), (64, 2)]
    assert [c["pinned"] for c in doc["copies"].values()] == [True, True, False, False, False]
    assert doc["kernel_launch"]["iterations"] == 2 and doc["kernel_launch"]["cpu_dispatch_us"] >= 0
    assert launched == ([("nccl", "cuda", 1)] if nccl else []) + [
        ("gloo", "cuda", 3), ("gloo", "cuda", 4), ("gloo", "cpu", 3), ("gloo", "cpu", 4)]
    assert doc["nccl_1rank"] == {"error": "nccl: rank 0 failed" if nccl else "this torch has no NCCL"}
    assert list(doc["gloo_cuda"]) == ["3", "4"] and doc["gloo_cpu"]["4"] == {"error": "gloo: rank 0 failed"}
    assert parse_measurement_json(json.dumps(doc["gloo_cuda"]["3"])).nranks == 2
    assert "(gloo cuda 3-rank part)" in doc["gloo_cuda"]["3"]["source"]["command"]
    assert lines[:5] == [f"probe: {k} copies, 2 sizes" for k in doc["copies"]]
    assert lines[-2:] == ["probe: gloo allreduce, 3 rank(s) with CPU tensors, 2 sizes",
                          "probe: gloo allreduce, 4 rank(s) with CPU tensors, 2 sizes"]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux only (os.sched_setaffinity)")
def test_pinning_takes_each_local_ranks_own_block_of_cpus() -> None:
    from collsim.bench.worker import _pin

    allowed = os.sched_getaffinity(0)
    with pytest.raises(BenchError, match=r"--cores-per-rank 1: local rank .* needs CPUs"):
        _pin(1, len(allowed))  # one rank more than there are CPUs
    try:
        _pin(1, len(allowed) - 1)  # the last rank takes the last CPU
        assert os.sched_getaffinity(0) == {max(allowed)}
    finally:
        os.sched_setaffinity(0, allowed)


def test_ranks_failing_alike_are_one_line() -> None:
    from collsim.bench.launch import _merged

    one = _merged(["rank 0: BenchError: --sizes: x", "rank 1: BenchError: --sizes: x"])
    assert one == "ranks 0, 1: BenchError: --sizes: x"
