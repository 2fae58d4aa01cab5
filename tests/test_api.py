"""Black-box tests of the Python API (``collsim.api``) with small sweeps."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from contract import CONTRACT_KEYS

from collsim import api
from collsim.api import Simulator
from collsim.scenario import ScenarioError

KiB = 1024  # bytes
MiB = 1024 * 1024  # bytes

CONTRACT_COLUMNS = CONTRACT_KEYS


def _dict_scenario(**engine: Any) -> dict[str, Any]:
    """A scenario given as a dict: one HGX H100 node, NCCL ring and Gloo ring (like the built-in hgx-h100)."""
    data: dict[str, Any] = {
        "name": "from-dict",
        "cluster": {"node": "hgx-h100", "nodes": 1},
        "workload": {"collective": "allreduce", "dtype": "float32", "sizes": [1 * KiB, 1 * MiB]},
        "backends": {"nccl": {"env": {"NCCL_ALGO": "Ring"}}, "gloo": {"algorithm": "ring", "device": "cuda"}},
    }
    if engine:
        data["engine"] = engine
    return data


def test_from_source_dict() -> None:
    sim = Simulator.from_source(_dict_scenario())
    assert sim.scenario.name == "from-dict"
    assert sim.scenario.source_file == "<dict>"
    assert sim.backends() == ["nccl", "gloo"]
    assert sim.scenario.sizes() == [1 * KiB, 1 * MiB]
    res = sim.run()
    assert not res.interrupted
    assert [(r.backend, r.size_bytes) for r in res.records] == [
        ("nccl", 1 * KiB),
        ("nccl", 1 * MiB),
        ("gloo", 1 * KiB),
        ("gloo", 1 * MiB),
    ]
    assert all(r.nranks == 8 and r.collective == "allreduce" and r.dtype == "float32" for r in res.records)


def test_dict_gives_same_times_as_builtin() -> None:
    from_dict = Simulator.from_source(_dict_scenario()).run().records
    builtin = Simulator.from_source("hgx-h100").run(sizes=[1 * KiB, 1 * MiB]).records
    assert [(r.backend, r.size_bytes, r.time_us) for r in from_dict] == [
        (r.backend, r.size_bytes, r.time_us) for r in builtin
    ]


def test_simulate_returns_records() -> None:
    res = api.simulate("pcie-2gpu-nop2p", ["workload.sizes=1MiB"], backends=["nccl"])
    assert len(res.records) == 1
    r = res.records[0]
    assert (r.backend, r.size_bytes, r.nranks, r.count) == ("nccl", 1 * MiB, 2, MiB // 4)
    assert r.time_us > 0
    assert r.algbw_gbps == pytest.approx(MiB / (r.time_us * 1e-6) / 1e9, rel=1e-12)
    assert r.busbw_gbps == pytest.approx(r.algbw_gbps, rel=1e-12)  # 2(n-1)/n = 1 for n = 2
    assert len(res.outcomes) == 1


def test_simulate_accepts_scenario_and_dict() -> None:
    scen = api.load(_dict_scenario())
    a = api.simulate(scen, sizes=[4 * KiB])
    b = api.simulate(_dict_scenario(), sizes=[4 * KiB])
    assert [r.time_us for r in a.records] == [r.time_us for r in b.records]
    assert len(a.records) == 2


def test_dataframe_one_row_per_backend_and_size() -> None:
    res = Simulator.from_source("hgx-h100").run(sizes=[1 * KiB, 64 * KiB, 1 * MiB])
    df = res.dataframe()
    assert len(df) == 6
    assert list(df.columns[: len(CONTRACT_COLUMNS)]) == CONTRACT_COLUMNS
    pairs = list(zip(df["backend"], df["size_bytes"], strict=True))
    assert len(set(pairs)) == 6
    assert set(pairs) == {(b, s) for b in ("nccl", "gloo") for s in (1 * KiB, 64 * KiB, 1 * MiB)}
    assert set(df["nranks"]) == {8}
    assert (df["busbw_gbps"] - df["algbw_gbps"] * 1.75).abs().max() < 1e-9
    assert list(df["time_us"]) == [r.time_us for r in res.records]


def test_load_with_overrides() -> None:
    scen = api.load(
        "hgx-h100", ["workload.sizes=8B,1MiB", "backends.nccl.env.NCCL_PROTO=Simple", "backends.gloo.enabled=false"]
    )
    assert scen.sizes() == [8, 1 * MiB]
    assert scen.backend_names() == ["nccl"]
    res = Simulator(scen).run()
    assert [(r.backend, r.size_bytes, r.protocol) for r in res.records] == [
        ("nccl", 8, "Simple"),
        ("nccl", 1 * MiB, "Simple"),
    ]


def test_load_dict_with_overrides() -> None:
    scen = api.load(_dict_scenario(), ["cluster.nodes=1", "workload.dtype=float16"])
    assert scen.workload.dtype == "float16"
    r = Simulator(scen).run(backends=["nccl"], sizes=[1 * KiB]).records[0]
    assert r.count == 512  # float16: 2 bytes per element


def test_load_bad_override_names_field() -> None:
    with pytest.raises(ScenarioError) as info:
        api.load(_dict_scenario(), ["backends.nccl.env.NCCL_ALGO=Foo"])
    assert info.value.file == "<dict>"
    assert info.value.field is not None and "backends.nccl.env.NCCL_ALGO" in info.value.field
    assert "Foo" in str(info.value)


def test_dict_two_nodes_without_fabric_is_an_error() -> None:
    data = _dict_scenario()
    data["cluster"]["nodes"] = 2
    with pytest.raises(ScenarioError) as info:
        Simulator.from_source(data)
    assert "cluster.fabric" in str(info.value)
    assert "<dict>" in str(info.value)


@pytest.mark.parametrize("scenario", ["hgx-h100", "pcie-2gpu-nop2p", "2node-h100-ib"])
def test_times_increase_with_size(scenario: str) -> None:
    sizes = [1 * KiB, 1 * MiB, 16 * MiB, 64 * MiB]
    sim = Simulator.from_source(scenario)
    res = sim.run(sizes=sizes)
    for backend in sim.backends():
        recs = res.by_backend(backend)
        assert [r.size_bytes for r in recs] == sizes
        times = [r.time_us for r in recs]
        assert all(b > a for a, b in itertools.pairwise(times)), (backend, times)


def test_compare_api() -> None:
    sim = Simulator.from_source("hgx-h100")
    rows, interrupted = sim.compare([1 * MiB])
    assert not interrupted
    assert len(rows) == 1
    row = rows[0]
    assert row.size_bytes == 1 * MiB
    assert row.speedup == pytest.approx(row.gloo.time_us / row.nccl.time_us, rel=1e-12)
    assert row.speedup > 1
    for rec in (row.nccl, row.gloo):
        shares = api.Comparison.shares(rec)
        assert sum(f for _, f in shares) == pytest.approx(1.0, rel=1e-9)
        assert [f for _, f in shares] == sorted((f for _, f in shares), reverse=True)


def test_compare_past_max_records_keeps_the_times_and_says_the_breakdown_is_missing() -> None:
    """A thousand GPUs with one slow NIC records millions of flows: compare gives the times without the breakdown
    (and a note) instead of stopping; the times are those of the recorded run. A trace still stops."""
    from collsim.results.text import share_text

    full, _ = Simulator.from_source("hgx-h100").compare([1 * MiB])
    small = Simulator.from_source("hgx-h100", ["engine.max_records=10"])
    rows, interrupted = small.compare([1 * MiB])
    assert not interrupted
    for rec, ref in ((rows[0].nccl, full[0].nccl), (rows[0].gloo, full[0].gloo)):
        assert rec.time_us == ref.time_us and rec.breakdown == {} and ref.breakdown
        why = "no time breakdown: recording it passes engine.max_records (10 flows"
        assert any(n.startswith(why) for n in rec.notes)
        assert share_text(rec) == "not recorded: more flows than engine.max_records (raise it to see it)"
    with pytest.raises(ScenarioError, match=r"engine\.max_records"):
        small.recorded("nccl", 1 * MiB)
    # the rerun without records says so on the heartbeat (a long run starting over from 0 us said nothing)
    from collsim.engine.budget import work_budget

    beats: list[str] = []
    with work_budget(heartbeat=lambda label, *rest: beats.append(label), heartbeat_s=0.0):
        Simulator.from_source("hgx-h100", ["engine.max_records=10", "engine.symmetry=false"]).run(
            backends=["nccl"], sizes=[256 * MiB], breakdown=True)  # fmt: skip
    assert beats and all(b.startswith("nccl allreduce 256MiB, again without flow records (recording them passed "
                            "engine.max_records, 10)") for b in beats), beats[:3]  # fmt: skip


def test_run_interrupted_keeps_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Simulator.simulate_one
    calls = []

    def fake(self: Simulator, backend: str, size: int, **kwargs: Any) -> Any:
        calls.append(size)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return original(self, backend, size, **kwargs)

    monkeypatch.setattr(Simulator, "simulate_one", fake)
    res = Simulator.from_source("hgx-h100").run(backends=["nccl"], sizes=[1 * KiB, 1 * MiB, 16 * MiB])
    assert res.interrupted
    assert [r.size_bytes for r in res.records] == [1 * KiB]
    assert calls == [1 * KiB, 1 * MiB]


def test_parallel_sweep_matches_serial_and_reports_every_point() -> None:
    sim = Simulator.from_source("2node-h100-ib")
    sizes = [8, 64 * KiB, 16 * MiB]
    seen: list[tuple[str, int]] = []
    serial = sim.run(sizes=sizes, jobs=1)
    par = sim.run(sizes=sizes, jobs=2, progress=lambda b, s, i, n: seen.append((b, s)))
    assert [(r.backend, r.size_bytes, r.time_us, r.algorithm) for r in par.records] == [
        (r.backend, r.size_bytes, r.time_us, r.algorithm) for r in serial.records
    ]
    assert sorted(seen) == sorted((b, s) for b in ("nccl", "gloo") for s in sizes)
    assert not par.interrupted


def test_parallel_explain_matches_serial() -> None:
    sim = Simulator.from_source("2node-h100-ib")
    sizes = [8, 256 * KiB, 16 * MiB]
    serial, _ = sim.explain(sizes, all_pairs=True, jobs=1)
    par, interrupted = sim.explain(sizes, all_pairs=True, jobs=2)
    assert not interrupted
    assert [(r.size_bytes, r.choice, r.model_s, r.simulated_s) for r in par] == [
        (r.size_bytes, r.choice, r.model_s, r.simulated_s) for r in serial
    ]


def test_map_points_keeps_order_with_workers() -> None:
    sim = Simulator.from_source("pcie-2gpu-nop2p")
    sizes = [8, 4 * KiB, MiB, 16 * MiB]

    def one(i: int) -> float:
        return sim.simulate_one("nccl", sizes[i]).time_s

    assert sim.map_points(one, len(sizes), jobs=2, sizes=sizes) == sim.map_points(one, len(sizes), jobs=1)


def test_parallel_sweep_raises_scenario_errors_with_their_field() -> None:
    # raised in a worker, the error reaches the caller whole: file, field and message
    sim = Simulator.from_source("dgx-a100", ["backends.nccl.env.NCCL_ALGO=NVLS"])
    with pytest.raises(ScenarioError) as err:
        sim.run(backends=["nccl"], sizes=[KiB, MiB], jobs=2)
    assert err.value.field == "backends.nccl"
    assert err.value.file is not None and err.value.file.endswith("dgx-a100.yaml")
    assert "Hopper" in err.value.message


@pytest.mark.parametrize("scenario", ["hgx-h100", "2node-h100-ib"])
def test_symmetry_off_matches_symmetry_on(scenario: str) -> None:
    sizes = [1 * MiB, 16 * MiB]
    on = Simulator.from_source(scenario, ["engine.symmetry=true"])
    off = Simulator.from_source(scenario, ["engine.symmetry=false"])
    assert on.scenario.engine.symmetry is True
    assert off.scenario.engine.symmetry is False
    a = on.run(sizes=sizes).records
    b = off.run(sizes=sizes).records
    assert [(r.backend, r.size_bytes) for r in a] == [(r.backend, r.size_bytes) for r in b]
    assert len(a) == 4
    for ra, rb in zip(a, b, strict=True):
        assert rb.time_us == pytest.approx(ra.time_us, rel=1e-9), (ra.backend, ra.size_bytes)
        assert (rb.algorithm, rb.protocol, rb.channels) == (ra.algorithm, ra.protocol, ra.channels)


def test_symmetry_in_dict() -> None:
    on = Simulator.from_source(_dict_scenario(symmetry=True)).run(sizes=[1 * MiB, 16 * MiB]).records
    off_sim = Simulator.from_source(_dict_scenario(symmetry=False))
    assert off_sim.scenario.engine.symmetry is False
    off = off_sim.run(sizes=[1 * MiB, 16 * MiB]).records
    assert len(on) == len(off) == 4
    for ra, rb in zip(on, off, strict=True):
        assert rb.time_us == pytest.approx(ra.time_us, rel=1e-9)


def test_symmetry_must_be_bool() -> None:
    with pytest.raises(ScenarioError) as info:
        Simulator.from_source(_dict_scenario(symmetry="maybe"))
    assert "engine.symmetry" in str(info.value)


def test_gpus_per_process_adds_one_launch_gap_per_extra_gpu() -> None:
    """nccl-tests -g N: kernels of N GPUs launched one after another from one thread (2.75 us apart, nccl.yaml)."""
    one = Simulator.from_source("dgx-a100", ["workload.sizes=8B"])
    eight = Simulator.from_source("dgx-a100", ["workload.sizes=8B", "workload.gpus_per_process=8"])
    assert eight.nccl_constants.group_launch_gap == pytest.approx(2.75e-6)
    t1, t8 = (s.simulate_one("nccl", 8).time_s for s in (one, eight))
    assert t8 - t1 == pytest.approx(7 * 2.75e-6, rel=1e-9)


def test_gpus_per_process_beyond_or_not_dividing_one_node_is_an_error() -> None:
    with pytest.raises(ScenarioError, match=r"workload.gpus_per_process: expected at most the 8 ranks of one node"):
        Simulator.from_source("dgx-a100", ["workload.gpus_per_process=9"])
    # nccl-tests -g 3 on 8-GPU nodes: no set of processes of 3 GPUs each drives a node's 8
    with pytest.raises(ScenarioError, match=r"gpus_per_process: expected a divisor of the 8 ranks of one node"):
        Simulator.from_source("dgx-a100", ["workload.gpus_per_process=3"])
    for g in (1, 2, 4, 8):  # every divisor is accepted
        assert Simulator.from_source("dgx-a100", [f"workload.gpus_per_process={g}"]).nccl_options.gpus_per_process == g
    # a CPU-only cluster (Gloo on CPU tensors) has no GPUs for nccl-tests' -g to launch
    with pytest.raises(ScenarioError, match=r"workload.gpus_per_process: 2 GPUs a process .* has no GPUs"):
        Simulator.from_source("loopback-gloo-cpu", ["workload.gpus_per_process=2"])


def test_network_plugin_env_applies_unless_the_scenario_sets_it() -> None:
    # aws-p4de's EFA NICs: AWS's plugin sets NCCL_PROTO=simple when it is unset (setenv without overwriting)
    aws = "scenarios/validation/aws_p4de_2node_efa_a100.yaml"
    sim = Simulator.from_source(aws)
    assert sim.nccl_plugin_env == {"NCCL_PROTO": "Simple"}
    assert sim.nccl_options.protocols == frozenset({"Simple"})
    assert {sim.simulate_one("nccl", s).protocol for s in (8, 2**20, 2**30)} == {"Simple"}
    own = Simulator.from_source(aws, ["backends.nccl.env.NCCL_PROTO=LL128"])
    assert own.nccl_plugin_env == {} and own.nccl_options.protocols == frozenset({"LL128"})
    assert Simulator.from_source("dgx-a100").nccl_plugin_env == {}


def test_recorded_simulates_every_rank_and_keeps_the_flows() -> None:
    from collsim.trace import unsymmetric

    sim = Simulator.from_source("hgx-h100")
    assert sim.scenario.engine.symmetry is True
    out = sim.recorded("nccl", 4 * MiB)
    assert out.records and out.classes == out.entities  # no rank or channel stands for another
    full = Simulator(unsymmetric(sim.scenario)).simulate_one("nccl", 4 * MiB, record=True)
    assert (out.time_s, len(out.records)) == (full.time_s, len(full.records))
    assert out.time_s == pytest.approx(sim.simulate_one("nccl", 4 * MiB).time_s, rel=1e-9)


def test_explain_picks_what_run_simulates() -> None:
    from collsim.backends.nccl import choose

    sim = Simulator.from_source("2node-h100-ib")
    rows, _ = sim.explain([8, 64 * KiB, 16 * MiB])
    for r in rows:
        algorithm, protocol, t = choose(sim.nccl_plan, sim.nccl_options, sim.nccl_constants, r.collective, r.size_bytes)
        assert r.choice == (algorithm, protocol) and r.model_s[r.choice] == t
        out = sim.simulate_one("nccl", r.size_bytes)
        assert (out.algorithm, out.protocol) == r.choice and r.simulated_s[r.choice] == out.time_s


def test_result_records_are_the_results_layers() -> None:
    from collsim import results

    assert api.Comparison is results.Comparison and api.Explanation is results.Explanation


def test_lower_layer_errors_become_scenario_errors_in_one_place() -> None:
    from collsim.backends import BackendError
    from collsim.nccl_env import NcclOptions
    from collsim.topology import TopologyError

    with pytest.raises(ScenarioError) as err, api.scenario_errors("s.yaml", "backends.nccl.env"):
        NcclOptions.from_env({"NCCL_PROTO": "LL256"})
    assert (err.value.file, err.value.field) == ("s.yaml", "backends.nccl.env")
    assert err.value.message.startswith("NCCL_PROTO='LL256': unknown protocol")
    with pytest.raises(ScenarioError) as err, api.scenario_errors("s.yaml", "backends.nccl"):
        raise BackendError("NCCL would refuse it")
    assert str(err.value) == "s.yaml: backends.nccl: NCCL would refuse it"
    with pytest.raises(ScenarioError) as err, api.scenario_errors("s.yaml", "cluster"):
        raise TopologyError("no such preset", file="node.yaml", field="gpus.0")
    # a field of another file: that file and field, and the scenario field that read it
    assert str(err.value) == "node.yaml: gpus.0: no such preset (read for s.yaml's cluster)"
    with pytest.raises(ScenarioError) as err, api.scenario_errors("s.yaml", "cluster"):
        raise TopologyError("no such GPU", field="gpus.0")  # the topology's own field, no file: under the scenario's
    assert str(err.value) == "s.yaml: cluster.gpus.0: no such GPU"
    with pytest.raises(KeyError), api.scenario_errors("s.yaml", "cluster"):  # anything else passes through
        raise KeyError("x")


def test_one_rule_for_sizes_below_one_element() -> None:
    """Sizes round down to whole elements (nccl-tests passes a count): 3 B of float32 is the empty collective 0 B
    is (NCCL discards it: 0 us; Gloo's allreduce returns at once: only ProcessGroupGloo's hand-off to its worker
    thread), and 4097 B is 4096 B, with a note; the record's size is the size moved, as nccl-tests prints it."""
    sim = Simulator.from_source("hgx-h100")
    enqueue = sim.gloo_constants.work_enqueue_latency
    for backend, empty in (("nccl", 0.0), ("gloo", enqueue)):
        zero, three = (sim.simulate_one(backend, n) for n in (0, 3))
        assert zero.time_s == three.time_s == pytest.approx(empty, abs=1e-15)
        assert three.size_bytes == 0 and any("3 B asked for" in n and "0 B moved" in n for n in three.notes)
        whole, part = (sim.simulate_one(backend, n) for n in (4096, 4097))
        assert part.time_s == whole.time_s and part.size_bytes == whole.size_bytes == 4096
        assert sim.simulate_one(backend, 4).time_s > empty
    # allgather counts per rank, and nccl-tests (from v2.13.12) rounds a rank's count down to a multiple of 16 bytes:
    # on 8 ranks 127 B of float32 is 3 floats a rank, none for NCCL; 128 B is 4 a rank
    ag = Simulator.from_source("hgx-h100", ["workload.collective=allgather"])
    assert ag.simulate_one("nccl", 127).time_s == 0.0 and ag.simulate_one("nccl", 128).time_s > 0
    assert ag.simulate_one("nccl", 127).size_bytes == 0
    # Gloo's tensors are whole elements (32 B: one float a rank), and its allgather has no empty check: its ring
    # still sends (0-byte) messages
    assert ag.simulate_one("gloo", 32).size_bytes == 32 and ag.simulate_one("gloo", 31).size_bytes == 0
    assert ag.simulate_one("gloo", 31).time_s > enqueue
    # three ranks: 1 MiB is 87,381 floats a rank, 87,380 for nccl-tests (a 16-byte multiple); algbw from the bytes moved
    three = Simulator.from_source("hgx-h100", ["workload.collective=allgather", "cluster.visible_gpus=[0,1,2]"])
    out = three.simulate_one("nccl", 1 << 20)
    rec = three.to_record(out)
    assert (rec.size_bytes, rec.count) == (1048560, 87380)
    assert rec.algbw_gbps == pytest.approx(1048560 / out.time_s / 1e9)
    assert any("87381 float32 elements a rank on 3 ranks" in n for n in out.notes)
    assert three.simulate_one("gloo", 1 << 20).size_bytes == 87381 * 4 * 3
    # the rounding is nccl-tests' harness's: a training step's tensors (harness=False) are whole elements
    assert three.simulate_one("nccl", 1 << 20, harness=False).size_bytes == 87381 * 4 * 3
    # compare pairs the two by the size asked for, though each moved its own
    rows, _ = three.compare(sizes=[1 << 20])
    assert [(r.size_bytes, r.nccl.size_bytes, r.gloo.size_bytes) for r in rows] == [(1048560, 1048560, 1048572)]


def test_a_notebooks_backends_and_sizes_as_it_writes_them() -> None:
    # step("nccl") iterated its letters and returned [], an unknown backend too; sizes as strings or floats failed
    # 9-14 frames deep in the units and NCCL's chunking
    sim = Simulator.from_source("ddp-resnet50-dgx1-v100", ["cluster.nodes=1"])
    assert [r.backend for r in sim.step("nccl")] == ["nccl"]
    with pytest.raises(ScenarioError, match="unknown backend 'mpi'"):
        sim.step(["mpi"])
    one = sim.simulate_one("nccl", MiB).time_s
    assert sim.simulate_one("nccl", "1MiB").time_s == one and sim.simulate_one("nccl", float(MiB)).time_s == one
    assert [r.size_bytes for r in sim.run("nccl", "1KiB:4KiB:x2").records] == [KiB, 2 * KiB, 4 * KiB]
    assert [r.size_bytes for r in sim.run(["nccl"], [8, "1KiB", 2048.0]).records] == [8, KiB, 2048]
    for bad, why in ((1.5, "whole bytes"), (True, "whole bytes"), ("x", "cannot read 'x'"), (None, "whole bytes")):
        with pytest.raises(ScenarioError, match=why):
            sim.run(["nccl"], [bad])


def test_a_loaded_scenarios_fields_are_checked_when_assigned() -> None:
    # a notebook's scenario.training.style = "zero3" ran DDP; batch_size = 64.5 ran too
    from pydantic import ValidationError

    sc = api.load("ddp-resnet50-dgx1-v100")
    assert sc.training is not None
    for field, value in (("style", "zero3"), ("batch_size", 64.5), ("bucket_cap_mb", -5)):
        with pytest.raises(ValidationError, match=field):
            setattr(sc.training, field, value)
    sc.training.batch_size = 64
    assert Simulator(sc).scenario.training.batch_size == 64  # type: ignore[union-attr]


def test_compare_names_the_most_loaded_link() -> None:
    """compare's breakdown says what each backend spends its time on; the most loaded link says what bounds it: with
    NICs cut to 25 Gb/s the ring's time is the network's and the busiest link an InfiniBand port near 100% loaded
    (the breakdown alone named 'network' also where a socket link was the bound)."""
    slow = ["cluster.fabric.nic_speed=25Gb/s", "backends.nccl.env.NCCL_ALGO=Ring"]
    sim = Simulator.from_source("2node-h100-ib", slow)
    rows, _ = sim.compare(sizes=[256 << 20])
    (row,) = rows
    assert row.nccl_bottleneck is not None and row.nccl_bottleneck[1] == "ib" and row.nccl_bottleneck[2] > 0.9
    assert row.to_dict()["nccl_bottleneck"]["kind"] == "ib"
    # one node: NVLink is what NVLS loads
    (one,), _ = Simulator.from_source("hgx-h100").compare(sizes=[1 << 30])
    assert one.nccl_bottleneck is not None and one.nccl_bottleneck[1] == "nvlink"


def test_a_forced_pair_nccl_would_not_run_is_an_error() -> None:
    """simulate_one(choice=...) runs only what NCCL could run here, as NCCL_ALGO/NCCL_PROTO do: NVLSTree on one
    node ran silently as NVLS under another name, NVLS/LL ran a protocol NVLS has not, NVLS on A100 was a KeyError."""
    sim = Simulator.from_source("hgx-h100")
    for choice, collective, why in [
        (("NVLSTree", "Simple"), "allreduce", "NCCL disables NVLSTree on one node"),
        (("NVLS", "LL"), "allreduce", "NCCL runs NVLS with Simple only here"),
        (("Tree", "Simple"), "allgather", "NCCL runs allgather with PAT, Ring, NVLS or CollNetDirect only"),
        (("Tree", "Simple"), "broadcast", "NCCL runs broadcast with Ring only"),
        (("PAT", "Simple"), "allgather", "NCCL runs PAT with one GPU per node only"),
        (("CollNetDirect", "Simple"), "allreduce", "only with NCCL_COLLNET_ENABLE=1"),
        (("Rings", "Simple"), "allreduce", "unknown algorithm 'Rings'"),
        ("Ring", "allreduce", "expected (algorithm, protocol)"),
    ]:
        with pytest.raises(ScenarioError, match=re.escape(why)):
            sim.simulate_one("nccl", 1 << 30, collective=collective, choice=choice)  # type: ignore[arg-type]
    with pytest.raises(ScenarioError, match="NVLS needs Hopper or newer GPUs"):
        Simulator.from_source("dgx-a100").simulate_one("nccl", 1 << 30, choice=("NVLS", "Simple"))
    ring = sim.simulate_one("nccl", 1 << 20, choice=("Ring", "Simple"))
    lower = sim.simulate_one("nccl", 1 << 20, choice=("ring", "SIMPLE"))  # as NCCL_ALGO, without regard to case
    assert (lower.algorithm, lower.protocol, lower.time_s) == ("Ring", "Simple", ring.time_s)


def test_simulate_applies_overrides_to_a_loaded_scenario() -> None:
    """simulate(Scenario, overrides) dropped the overrides; they are applied as to a file, its file kept."""
    loaded = api.load("hgx-h100")
    result = api.simulate(loaded, ["backends.nccl.env.NCCL_ALGO=Ring", "backends.gloo.enabled=false"], sizes=["1GiB"])
    assert [(r.backend, r.algorithm) for r in result.records] == [("nccl", "Ring")]
    again = api.load(loaded, ["workload.dtype=bfloat16"])
    assert (again.workload.dtype, again.source_file, loaded.workload.dtype) == ("bfloat16", loaded.source_file,
                                                                               "float32")  # fmt: skip
    with pytest.raises(ScenarioError, match=r"hgx-h100\.yaml: cluster\.nodes"):
        api.load(loaded, ["cluster.nodes=0"])


def test_no_backend_enabled_is_an_error_through_the_api() -> None:
    """The CLI refuses a scenario with no backend; run() gave an empty result that read as a finished run."""
    sim = Simulator.from_source({"name": "x", "cluster": {"node": "hgx-h100"}, "workload": {"sizes": [8]}})
    for call in (sim.run, lambda: sim.run_repeated(2)):
        with pytest.raises(ScenarioError, match="backends: no backend enabled"):
            call()


def test_compare_gives_a_row_for_every_size_asked() -> None:
    """Sizes that round to the same bytes (an all-gather's 1000 and 1020 B on 8 ranks: nccl-tests' 896 B, Gloo's
    992) kept one row between them, and the JSON said complete with fewer rows than asked; each gets its row, as
    run gives."""
    sim = Simulator.from_source("hgx-h100", ["workload.collective=allgather"])
    rows, interrupted = sim.compare([1000, 1020, 1024])
    assert not interrupted and [r.size_bytes for r in rows] == [896, 896, 1024]
    assert [r.gloo.size_bytes for r in rows] == [992, 992, 1024]  # Gloo's whole elements of each rank
    assert len(sim.run(sizes=[1000, 1020, 1024], backends=["nccl"]).records) == len(rows)


def test_repeated_runs_dataframe_keeps_the_statistics() -> None:
    """run_repeated(...).dataframe() has the columns --repeat's CSV adds; a plain run's has none of them."""
    sim = Simulator.from_source("hgx-h100", ["noise.launch_skew=10us"])
    result = sim.run_repeated(5, "nccl", ["8B"])
    df = result.dataframe()
    assert list(df.columns[-5:]) == ["runs", "time_p50_us", "time_p99_us", "time_min_us", "time_max_us"]
    record = result.records[0]
    assert (df.loc[0, "runs"], df.loc[0, "time_p99_us"]) == (5, record.time_p99_us)  # type: ignore[attr-defined]
    assert "runs" not in Simulator.from_source("hgx-h100").run("nccl", ["8B"]).dataframe().columns


def test_simulate_one_takes_the_collective_as_yaml_does() -> None:
    """workload.collective takes nccl-tests' and PyTorch's spellings; simulate_one's argument refused them."""
    sim = Simulator.from_source("hgx-h100")
    assert sim.simulate_one("nccl", "1MiB", collective="all_reduce").collective == "allreduce"
    assert sim.simulate_one("nccl", "1MiB", collective="AllGather").collective == "allgather"
    with pytest.raises(ScenarioError, match="collective: unknown collective 'gather'"):
        sim.simulate_one("nccl", "1MiB", collective="gather")


def test_the_api_says_what_it_expected() -> None:
    """Arguments of the wrong kind gave an AttributeError or TypeError from deep inside, or a wrong message."""
    sim = Simulator.from_source("hgx-h100")
    cases = [
        (lambda: sim.compare_algorithms("ncc", [1024]), "unknown backend 'ncc'"),
        (lambda: Simulator("hgx-h100"), r"use Simulator\.from_source"),  # type: ignore[arg-type]
        (lambda: Simulator(api.load("hgx-h100"), profile="x.yaml"), "expected a Profile"),  # type: ignore[arg-type]
        (lambda: sim.run("nccl", [1024], jobs="2"), r"expected 0 \(one per CPU\)"),  # type: ignore[arg-type]
        (lambda: sim.run("nccl", [1024], jobs=-1), r"expected 0 \(one per CPU\)"),
        (lambda: sim.run("nccl", {"a": 1}), "expected a list of sizes"),  # type: ignore[arg-type]
    ]
    for call, message in cases:
        with pytest.raises(ScenarioError, match=message):
            call()
    assert [r.size_bytes for r in sim.run("nccl", 1024).records] == [1024]  # type: ignore[arg-type]


def test_a_rounded_size_says_why() -> None:
    """An all-gather of 100 B on 3 ranks is 25 whole float32 elements, not whole elements a rank: the note said
    'not whole float32 elements'."""
    sim = Simulator.from_source("hgx-h100", ["cluster.visible_gpus=[0,1,2]"])
    note = [n for n in sim.simulate_one("gloo", 100, collective="allgather").notes if "asked for" in n]
    assert note == ["100 B asked for: not whole float32 elements a rank over 3 ranks (25 elements of 4 B); 96 B "
                    "moved (nccl-tests' size column)"]  # fmt: skip
    assert "not whole float32 elements (4 B each)" in sim.simulate_one("gloo", 101, collective="allreduce").notes[-1]
