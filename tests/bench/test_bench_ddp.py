"""collsim bench --ddp: configuration, the measurement JSON, the summary, the model YAML, and one real 2-rank run.

The offline tests need no torch; the real run (marked ``bench``, like tests/bench/test_bench_real.py) starts two Gloo
ranks on a tiny MLP and takes a few seconds.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from collsim.bench import BenchError
from collsim.bench.ddp import (
    FORMAT,
    DdpBenchConfig,
    DdpBenchOutput,
    RunResult,
    _assemble,
    _LayerClock,
    _mlp_layers,
    _rank_device,
    _widths_text,
    format_summary,
    model_yaml,
    parse_caps,
    parse_widths,
    planned_runs,
    to_json,
)
from collsim.cli import main
from collsim.training import ddp_buckets, load_model

# --- configuration --------------------------------------------------------------------------------------------


def test_parse_caps_and_widths() -> None:
    assert parse_caps("1,25,100") == (1.0, 25.0, 100.0)
    assert parse_caps("0.5, 25,25") == (0.5, 25.0)  # duplicates dropped, order kept
    assert parse_widths("1024,2048x9,1024") == (1024,) + (2048,) * 9 + (1024,)
    assert _widths_text(parse_widths("8,16x3,4,4")) == "8,16x3,4x2"
    with pytest.raises(BenchError, match=r"^--bucket-cap-mb: expected positive MiB values, got '0'$"):
        parse_caps("1,0")
    with pytest.raises(BenchError, match=r"^--bucket-cap-mb: expected MiB values like 1,25,100, got '1,big'$"):
        parse_caps("1,big")
    with pytest.raises(BenchError, match=r"^--mlp: expected at least two widths"):
        parse_widths("1024")
    with pytest.raises(BenchError, match=r"^--mlp: widths and repeat counts must be positive, got '8x0'$"):
        parse_widths("4,8x0")


def test_config_checks_name_the_option() -> None:
    cfg = DdpBenchConfig(bucket_caps_mb=(1, 25), accumulation=4, widths=(8, 16, 4), iters=10, rounds=3)
    assert DdpBenchConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert [cfg.iters_in_round(r) for r in range(3)] == [4, 3, 3]
    assert cfg.n_params == 8 * 16 + 16 + 16 * 4 + 4
    assert DdpBenchConfig().n_params == 37_768_192  # the default MLP: 151 MB of float32 gradients
    with pytest.raises(BenchError, match=r"^-w/--warmup: expected an integer >= 1, got 0 \(DDP's first iteration"):
        DdpBenchConfig(warmup=0)
    with pytest.raises(BenchError, match=r"^--rounds: expected at most -n/--iters \(2\) rounds, got 3$"):
        DdpBenchConfig(iters=2, rounds=3)
    with pytest.raises(BenchError, match=r"^--no-sync: expected an integer >= 1, got 0$"):
        DdpBenchConfig(accumulation=0)
    with pytest.raises(BenchError, match=r"^--no-sync-cap-mb: expected a positive MiB value"):
        DdpBenchConfig(accumulation_cap_mb=0.0)


def test_planned_runs() -> None:
    cfg = DdpBenchConfig(bucket_caps_mb=(1, 25, 100), accumulation=4, accumulation_cap_mb=25)
    runs = planned_runs(cfg)
    assert [(r.name, r.kind, r.bucket_cap_mb, r.accumulation) for r in runs] == [
        ("compute", "compute", None, 1), ("compute_k4", "compute", None, 4), ("layers", "layers", None, 1),
        ("ddp_cap1", "ddp", 1.0, 1), ("ddp_cap25", "ddp", 25.0, 1), ("ddp_cap100", "ddp", 100.0, 1),
        ("ddp_cap25_k4", "ddp", 25.0, 4)]
    assert [r.name for r in planned_runs(DdpBenchConfig(bucket_caps_mb=(0.5,)))] == ["compute", "layers", "ddp_cap0.5"]
    fsdp = planned_runs(DdpBenchConfig(bucket_caps_mb=(25,), fsdp=("full_shard", "shard_grad_op")))
    assert [(r.name, r.kind, r.sharding) for r in fsdp[-2:]] == [("fsdp_full_shard", "fsdp", "full_shard"),
                                                                ("fsdp_shard_grad_op", "fsdp", "shard_grad_op")]
    with_k = planned_runs(DdpBenchConfig(bucket_caps_mb=(25,), accumulation=4, fsdp=("full_shard", "fsdp2_full_shard")))
    assert [(r.name, r.accumulation) for r in with_k[-4:]] == [("fsdp_full_shard", 1), ("fsdp2_full_shard", 1),
                                                              ("fsdp_full_shard_k4", 4), ("fsdp2_full_shard_k4", 4)]
    fsdp2 = planned_runs(DdpBenchConfig(bucket_caps_mb=(25,), fsdp=("fsdp2_full_shard", "fsdp2_shard_grad_op")))
    assert [(r.name, r.kind, r.sharding) for r in fsdp2[-2:]] == [
        ("fsdp2_full_shard", "fsdp", "fsdp2_full_shard"), ("fsdp2_shard_grad_op", "fsdp", "fsdp2_shard_grad_op")]
    cfg = DdpBenchConfig(fsdp=("shard_grad_op",))
    assert DdpBenchConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    # --checkpoint: every one-micro-step configuration but the layer clocks again, checkpointed
    ac = planned_runs(DdpBenchConfig(bucket_caps_mb=(25,), accumulation=2, fsdp=("full_shard",), checkpoint=True))
    assert [(r.name, r.checkpoint) for r in ac if r.checkpoint] == [
        ("compute_ac", True), ("ddp_cap25_ac", True), ("fsdp_full_shard_ac", True)]
    assert next(r for r in ac if r.name == "ddp_cap25_ac").bucket_cap_mb == 25.0
    cfg = DdpBenchConfig(checkpoint=True)
    assert DdpBenchConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    # --clip: the same one-micro-step configurations again, clipping the gradients' norm
    clip = planned_runs(DdpBenchConfig(bucket_caps_mb=(25,), fsdp=("fsdp2_full_shard",), checkpoint=True, clip=True))
    assert [r.name for r in clip if r.clip] == ["compute_clip", "ddp_cap25_clip", "fsdp2_full_shard_clip"]
    assert not any(r.clip and r.checkpoint for r in clip)
    with pytest.raises(BenchError, match=r"^--fsdp: expected distinct strategies among full_shard, shard_grad_op, "
                                         r"no_shard"):
        DdpBenchConfig(fsdp=("hybrid_shard",))


_RECOMPUTE = """
import os, torch, torch.distributed as dist
from collsim.bench.ddp import build_mlp, _checkpointed, _fsdp_wrapper
calls = [0]
forward = torch.nn.Linear.forward
def counted(self, x):
    calls[0] += 1
    return forward(self, x)
torch.nn.Linear.forward = counted
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + os.environ["PORT"], rank=0, world_size=1)
wrap = _fsdp_wrapper(torch, torch.device("cpu"))
x = torch.randn(4, 8)
models = {"plain": build_mlp((8, 16, 16, 8)), "ac": _checkpointed(torch, build_mlp((8, 16, 16, 8)))}
for s in ("full_shard", "fsdp2_full_shard"):
    models[s] = wrap(build_mlp((8, 16, 16, 8)), s)
    models[s + "_ac"] = wrap(build_mlp((8, 16, 16, 8)), s, True)
for name, m in models.items():
    calls[0] = 0
    m(x).sum().backward()
    print(name, calls[0])
dist.destroy_process_group()
"""


@pytest.mark.bench
def test_checkpointed_models_run_each_linear_forward_again_in_backward() -> None:
    """The ``_ac`` models recompute: three Linears, three forward calls without checkpointing and six with it
    (FSDP1 checkpointed inside its units, FSDP2 before fully_shard)."""
    pytest.importorskip("torch", reason="collsim bench needs torch: pip install -e '.[bench]'")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PORT": str(port)}
    out = subprocess.run([sys.executable, "-c", _RECOMPUTE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    counts = dict(line.split() for line in out.stdout.splitlines())
    assert counts == {"plain": "3", "ac": "6", "full_shard": "3", "full_shard_ac": "6", "fsdp2_full_shard": "3",
                      "fsdp2_full_shard_ac": "6"}  # fmt: skip


def test_mlp_layers_flops_and_bytes() -> None:
    layers = _mlp_layers((4, 8, 2))
    assert [(x.name, x.params) for x in layers] == [("fc1", ["fc1.weight", "fc1.bias"]), ("relu1", []),
                                                    ("fc2", ["fc2.weight", "fc2.bias"]), ("loss", [])]
    fc1, relu1, fc2, loss = layers
    assert (fc1.fwd_flops, fc1.bwd_flops, fc1.act_bytes) == (64.0, 64.0, 48.0)  # no input gradient: 1 x forward
    assert (fc2.fwd_flops, fc2.bwd_flops, fc2.act_bytes) == (32.0, 64.0, 40.0)
    assert (relu1.act_bytes, loss.act_bytes) == (64.0, 16.0)


# --- writers --------------------------------------------------------------------------------------------------


def _output() -> DdpBenchOutput:
    cfg = DdpBenchConfig(bucket_caps_mb=(1.0,), accumulation=2, widths=(4, 8, 2), warmup=1, iters=4, rounds=2)
    runs = planned_runs(cfg)
    results = []
    for k, r in enumerate(runs):
        scale = 1.0 + k  # each configuration its own times
        rank_times = [[0.010 * scale, 0.012 * scale, 0.011 * scale, 0.030 * scale],
                      [0.011 * scale, 0.011 * scale, 0.013 * scale, 0.020 * scale]]
        buckets = [{"bytes": 72, "params": ["fc2.bias", "fc2.weight"]},
                   {"bytes": 160, "params": ["fc1.bias", "fc1.weight"]}] if r.kind == "ddp" else None
        results.append(RunResult(r, rank_times, buckets))
    layers = _mlp_layers(cfg.widths)
    for j, layer in enumerate(layers):
        layer.rank_fwd_s = [[1e-3 * (j + 1)] * 4, [3e-3 * (j + 1)] * 4]  # mean over ranks: 2 ms x (j + 1)
        layer.rank_bwd_s = [[4e-3, 5e-3, 6e-3, 100e-3], [4e-3, 5e-3, 6e-3, 100e-3]]
    return DdpBenchOutput(
        config=cfg, nranks=2, runs=results, layers=layers, rank_optimizer_s=[[1e-3] * 4, [3e-3] * 4],
        params=[("fc1.weight", 32), ("fc1.bias", 8), ("fc2.weight", 16), ("fc2.bias", 2)],
        ranks=[{"rank": r, "intra_op_threads": 1, "inter_op_threads": 2, "gloo_threads": 2} for r in range(2)],
        hardware={"cpu": "Test CPU", "cpu_count": 2}, software={"torch_version": "0.0"},
        started="2025-01-01T00:00:00+00:00", finished="2025-01-01T00:01:00+00:00")


def test_statistics_are_over_the_slowest_rank() -> None:
    out = _output()
    r = out.run("compute")
    assert r.times_s == [0.011, 0.012, 0.013, 0.030]  # per iteration, the max over ranks
    st = r.stats
    assert st["median_s"] == pytest.approx(0.0125)
    assert st["p10_s"] == pytest.approx(0.0113)  # linear interpolation at rank 0.3
    assert st["p90_s"] == pytest.approx(0.0249)  # at rank 2.7: 0.013 + 0.7 x 0.017
    assert out.layers[1].fwd_time_s == pytest.approx(4e-3) and out.layers[0].bwd_time_s == pytest.approx(5.5e-3)
    assert out.optimizer_s == pytest.approx(2e-3)
    back = DdpBenchOutput.from_dict(json.loads(json.dumps(out.to_dict())))
    assert back == out


def test_json_file_has_what_the_simulator_needs() -> None:
    out = _output()
    doc = json.loads(json.dumps(to_json(out, command="collsim bench --ddp", argv="x", machine="vm")))
    assert doc["format"] == FORMAT and doc["source"]["command"] == "collsim bench --ddp"
    assert doc["batch"] == 32 and doc["optimizer"]["name"] == "SGD" and doc["nranks"] == 2
    assert doc["model"]["n_params"] == 58 and doc["model"]["param_bytes"] == 232  # float32: 4 B each
    assert [p["name"] for p in doc["model"]["params"]] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert doc["threads"][0]["intra_op_threads"] == 1 and doc["threads"][1]["gloo_threads"] == 2
    names = [r["name"] for r in doc["runs"]]
    assert names == ["compute", "compute_k2", "layers", "ddp_cap1", "ddp_cap25_k2"]
    ddp = doc["runs"][3]
    assert (ddp["buckets"], ddp["bucket_bytes"], ddp["bucket_cap_mb"]) == (2, [72, 160], 1.0)
    assert ddp["median_s"] == pytest.approx(0.0125 * 4) and len(ddp["times_s"]) == 4
    assert len(ddp["rank_times_s"]) == 2 and doc["runs"][0]["buckets"] is None
    s = doc["summary"]
    assert s["sum_layer_fwd_s"] == pytest.approx(2e-3 * (1 + 2 + 3 + 4))
    assert s["sum_layer_bwd_s"] == pytest.approx(4 * 5.5e-3)
    # per iteration: rank 0 [30, 36, 33, 90] - [27, 31, 35, 411] ms, rank 1 [33, 33, 39, 60] - [49, 53, 57, 433]
    assert s["unattributed_s"] == pytest.approx(-8.75e-3)  # the median of the ranks' means


def test_summary_text() -> None:
    text = format_summary(_output(), command="collsim bench --ddp -n 4")
    assert "# command: collsim bench --ddp -n 4" in text
    lines = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("  ")}
    assert lines["ddp_cap1"][1:5] == ["1", "1", "2", "50.00"]  # cap, K, buckets, median ms
    assert lines["ddp_cap1"][-1] == "4.000x" and lines["compute_k2"][-1] == "-"
    assert lines["fc1"][1:] == ["2.000", "5.500"]
    assert "optimizer 2.00 ms" in text


def test_model_yaml_round_trips_through_load_model(tmp_path: Path) -> None:
    out = _output()
    path = tmp_path / "mlp.yaml"
    path.write_text(model_yaml(out, command="collsim bench --ddp"))
    model = load_model(path)
    assert model.name == "mlp-4-8-2" and model.n_params == out.config.n_params
    assert [p.name for p in model.params] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [x.name for x in model.layers] == ["fc1", "relu1", "fc2", "loss"]
    assert [x.params for x in model.layers] == [(0, 1), (), (2, 3), ()]
    assert [x.fwd_time_s for x in model.layers] == pytest.approx([2e-3, 4e-3, 6e-3, 8e-3])
    assert all(x.bwd_time_s == pytest.approx(5.5e-3) for x in model.layers)
    assert model.layers[0].bwd_flops == 64 and model.layers[2].bwd_flops == 64
    assert [x.saves for x in model.layers] == ["inputs", "outputs", "inputs", "outputs"]  # addmm: its input, weight
    assert model.measured and model.measured_batch == out.config.batch  # the times are that batch's


@pytest.mark.parametrize(("argv", "message"), [
    (["-o", "m.csv"], "-o m.csv: --ddp writes JSON; expected a file name ending in .json"),
    (["--model-out", "m.json"], "--model-out m.json: expected a file name ending in .yaml or .yml"),
    (["--bucket-cap-mb", "-1"], "--bucket-cap-mb: expected positive MiB values, got '-1'"),
    (["--sizes", "1KiB"], "--sizes: --ddp times training iterations, not collective sizes; leave --sizes out"),
    (["--backend", "nccl"], "--backend nccl: --ddp runs Gloo (on CPU tensors, or CUDA with --device cuda)"),
    (["-c", "allgather"], "--collective allgather: --ddp times training iterations, whose DDP buckets are "
                          "all-reduced; leave --collective out"),
    (["-o", "/nonexistent/m.json"], "-o /nonexistent/m.json: the folder /nonexistent does not exist"),
    (["-w", "0"], "-w/--warmup: expected an integer >= 1, got 0 (DDP's first iteration runs before its buckets "
                  "are rebuilt)"),
    (["--fsdp", "full_shard,full_shard"], "--fsdp: expected distinct strategies among full_shard, shard_grad_op, "
                                          "no_shard, fsdp2_full_shard, fsdp2_shard_grad_op, got "
                                          "'full_shard,full_shard'"),
])
def test_cli_errors_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--ddp", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"collsim: error: {message}\n"


class _FakeCuda:
    """What ``_rank_device`` and ``_LayerClock`` use of ``torch``, with ``gpus`` GPUs and a count of synchronises."""

    def __init__(self, gpus: int) -> None:
        self.gpus, self.syncs, self.current = gpus, 0, None
        self.__version__ = "fake"
        self.cuda = SimpleNamespace(is_available=lambda: gpus > 0, device_count=lambda: gpus,
                                    set_device=self._set, synchronize=self._sync)

    def device(self, kind: str, index: int | None = None) -> Any:
        return SimpleNamespace(type=kind, index=index)

    def _set(self, dev: Any) -> None:
        self.current = dev

    def _sync(self) -> None:
        self.syncs += 1


@pytest.mark.parametrize(("gpus", "world", "expected"), [
    (1, 4, [0, 0, 0, 0]),  # four processes sharing one GPU (cluster.ranks_per_gpu: 4)
    (2, 4, [0, 0, 1, 1]),  # in blocks, as collsim numbers ranks sharing GPUs
    (4, 2, [0, 1]),
    (2, 3, [0, 0, 1]),
])
def test_cuda_ranks_go_to_gpus_in_blocks(gpus: int, world: int, expected: list[int],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    torch = _FakeCuda(gpus)
    cfg = DdpBenchConfig(device="cuda")
    got = []
    for local in range(world):
        dev, sync = _rank_device(cfg, torch, local, world)
        assert dev.type == "cuda" and torch.current is dev
        got.append(dev.index)
        sync()
    assert got == expected and torch.syncs == world
    cpu, nothing = _rank_device(DdpBenchConfig(), torch, 0, world)
    assert cpu.type == "cpu" and nothing() is None and torch.syncs == world
    with pytest.raises(BenchError, match=r"--device cuda: this torch \(fake\) sees no GPU"):
        _rank_device(cfg, _FakeCuda(0), 0, 1)
    with pytest.raises(BenchError, match="--device: expected cpu or cuda, got 'tpu'"):
        DdpBenchConfig(device="tpu")


def test_layer_clock_synchronises_before_every_reading() -> None:
    calls: list[str] = []

    class Child:
        def register_forward_pre_hook(self, fn: Any) -> None:
            pass

        def register_forward_hook(self, fn: Any) -> None:
            pass

    model = SimpleNamespace(named_children=lambda: [("fc1", Child())])
    clock = _LayerClock(model, lambda: calls.append("sync"))
    clock._pre(0, None, None)
    clock._grad(0, None)
    assert calls == ["sync", "sync"]


def test_ranks_per_gpu_is_counted_per_host_and_device() -> None:
    # two hosts, two processes on each host's cuda:0: 2 per GPU, not the world size over the device names
    cfg = DdpBenchConfig(device="cuda", widths=(4, 8, 2), bucket_caps_mb=(1.0,), iters=1, rounds=1)
    runs = planned_runs(cfg)
    nlayers = len(_mlp_layers(cfg.widths))
    everyone = [{"times": {r.name: [1e-3] for r in runs}, "fwd": [[1e-4] * nlayers], "bwd": [[2e-4] * nlayers],
                 "opt": [1e-5], "info": {"rank": k, "hostname": f"h{k // 2}", "device": "cuda:0"}}
                for k in range(4)]
    fake = SimpleNamespace(__version__="fake", cuda=SimpleNamespace(get_device_name=lambda i: "Fake GPU"))
    out = _assemble(cfg, 4, runs, everyone, {}, [("fc1.weight", 32)], fake, "collsim", "2026-12-04T00:00:00+00:00")
    assert out.hardware["ranks_per_gpu"] == 2 and out.hardware["gpus_used"] == ["cuda:0"]
    assert out.hardware["gpu"] == "Fake GPU" and out.hardware["nodes"] == 2


def test_ddp_on_cuda_without_a_gpu_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch", reason="collsim bench needs torch: pip install -e '.[bench]'")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["bench", "--ddp", "--device", "cuda"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("collsim: error: --device cuda: this torch (") and err.count("\n") == 1


# --- a real run -----------------------------------------------------------------------------------------------


@pytest.mark.bench
def test_two_ranks_for_real(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch", reason="collsim bench needs torch: pip install -e '.[bench]'")
    js, ym, txt = tmp_path / "d.json", tmp_path / "d.yaml", tmp_path / "d.txt"
    rc = main(["bench", "--ddp", "--nprocs", "2", "--mlp", "16,64x2,8", "--batch", "4", "--bucket-cap-mb",
               "0.01,1", "--no-sync", "2", "--no-sync-cap-mb", "0.01", "--fsdp", "full_shard,fsdp2_full_shard",
               "--checkpoint", "--clip", "-w", "1", "-n", "2", "--rounds", "2", "-o", str(js), "--model-out", str(ym),
               "--text", str(txt)])
    stdout, stderr = capsys.readouterr()
    assert rc == 0, stderr
    assert stdout == "" and "round 2/2: compute" in stderr
    doc = json.loads(js.read_text())
    assert doc["nranks"] == 2 and doc["source"]["launcher"] == "collsim"
    assert doc["source"]["command"].startswith("collsim bench --ddp --nprocs 2 --bucket-cap-mb 0.01,1 --no-sync 2")
    assert [t["intra_op_threads"] for t in doc["threads"]] == [1, 1]
    assert [t["OMP_NUM_THREADS"] for t in doc["threads"]] == ["1", "1"]
    runs = {r["name"]: r for r in doc["runs"]}
    assert list(runs) == ["compute", "compute_k2", "layers", "ddp_cap0.01", "ddp_cap1", "ddp_cap0.01_k2",
                          "fsdp_full_shard", "fsdp2_full_shard", "fsdp_full_shard_k2", "fsdp2_full_shard_k2",
                          "compute_ac", "ddp_cap0.01_ac", "ddp_cap1_ac", "fsdp_full_shard_ac", "fsdp2_full_shard_ac",
                          "compute_clip", "ddp_cap0.01_clip", "ddp_cap1_clip", "fsdp_full_shard_clip",
                          "fsdp2_full_shard_clip"]
    assert runs["fsdp_full_shard_clip"]["clip"] and not runs["fsdp_full_shard_ac"]["clip"]
    assert runs["fsdp_full_shard_ac"]["checkpoint"] and not runs["fsdp_full_shard"]["checkpoint"]
    assert runs["ddp_cap1_ac"]["bucket_bytes"] == runs["ddp_cap1"]["bucket_bytes"]  # the same parameters
    assert "--checkpoint --clip" in doc["source"]["command"]
    assert runs["fsdp2_full_shard_k2"]["accumulation"] == 2
    assert runs["fsdp_full_shard"]["sharding"] == "full_shard"
    assert runs["fsdp2_full_shard"]["sharding"] == "fsdp2_full_shard"  # fully_shard on every Linear and the model
    assert "--fsdp full_shard,fsdp2_full_shard" in doc["source"]["command"]
    assert all(len(r["times_s"]) == 2 and r["median_s"] > 0 for r in runs.values())
    # DDP's rebuilt buckets, as torch reported them, are what collsim's Reducer model gives.
    sizes = [(p["numel"] * 4, "float32") for p in doc["model"]["params"]]  # float32: 4 B per element
    for name, cap in (("ddp_cap0.01", 0.01), ("ddp_cap1", 1.0)):
        assert runs[name]["bucket_bytes"] == [b.nbytes for b in ddp_buckets(sizes, cap)]
    assert runs["ddp_cap0.01"]["buckets"] == 2 and runs["ddp_cap1"]["buckets"] == 1
    # 0.01 MiB = 10485 B: fc3 (2080 B) then fc2's bias and weight (16640 B) close the first bucket
    assert runs["ddp_cap0.01"]["bucket_params"][0] == ["fc3.bias", "fc3.weight", "fc2.bias", "fc2.weight"]
    model = load_model(ym)
    assert model.n_params == doc["model"]["n_params"] == 16 * 64 + 64 + 64 * 64 + 64 + 64 * 8 + 8
    times = [(x.fwd_time_s or 0.0) + (x.bwd_time_s or 0.0) for x in model.layers]
    assert all(x.fwd_time_s is not None and x.fwd_time_s > 0 for x in model.layers)
    assert sum(times) == pytest.approx(doc["summary"]["sum_layer_fwd_s"] + doc["summary"]["sum_layer_bwd_s"],
                                       rel=1e-3)  # the YAML keeps 6 significant digits
    assert "ddp_cap0.01_k2" in txt.read_text()
