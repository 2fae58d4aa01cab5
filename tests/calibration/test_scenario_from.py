"""Tests of collsim.calibration.scenario_from and ``collsim import nccl-tests``: the scenario of a measured run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.calibration import Measurement, MeasurementError, MeasurementRow
from collsim.calibration.scenario_from import format_scenario, scenario_from_measurement
from collsim.cli import main
from collsim.scenario import load_scenario
from collsim.topology import load_presets, topologies_dir
from collsim.topology.presets import gpu_preset_for_name

H100 = "NVIDIA H100 80GB HBM3"


def _run(ranks: int | None, *, hosts: list[str] | None = None, gpu: str = H100, collective: str = "allreduce",
         **software: Any) -> Measurement:  # fmt: skip
    hardware: dict[str, Any] = {"gpu": gpu}
    if hosts is not None:
        hardware["hosts"] = hosts
    return Measurement(collective, ranks, [MeasurementRow(8, 20.0, "mean"), MeasurementRow(1 << 20, 40.0, "mean")],
                       backend="nccl", hardware=hardware, software={"benchmark": "NVIDIA/nccl-tests", **software},
                       file="run.json")  # fmt: skip


def _ranks(data: dict[str, Any]) -> int:
    return len(load_scenario(data).build_topology().rank_devices())


def test_every_cuda_name_is_one_presets() -> None:
    presets = load_presets()
    seen: dict[str, str] = {}
    for name, spec in presets.gpus.items():
        for cuda in spec.get("cuda_names") or ():
            assert cuda.lower() not in seen, f"{cuda} in {seen.get(cuda.lower())} and {name}"
            seen[cuda.lower()] = name
            assert spec.get("cuda_names_source"), name
            assert gpu_preset_for_name(presets, cuda.upper()) == name
    assert (seen["nvidia h100 80gb hbm3"], seen["nvidia b200"], seen["nvidia a100-sxm4-40gb"]) == (
        "h100-sxm5-80gb", "b200-sxm-180gb", "a100-sxm4-40gb")  # fmt: skip


def test_a_template_with_a_gpu_parameter_takes_the_runs_gpu() -> None:
    imported = scenario_from_measurement(_run(16, hosts=["a", "b"], gpu="NVIDIA B200", nccl_version="2.28.3",
                                              env={"NCCL_PROTO": "Simple", "NCCL_DEBUG": "INFO",
                                                   "NCCL_IB_QPS_PER_CONNECTION": "2"}), "hgx")  # fmt: skip
    c = imported.data["cluster"]
    assert (c["node"], c["nodes"], c["node_params"]) == ("hgx", 2, {"gpu": "b200-sxm-180gb"})
    assert "visible_gpus" not in c
    assert c["fabric"] == {"topology": "single_switch", "transport": "rdma", "gpudirect": True}
    nccl = {"enabled": True, "version": "2.28.3", "env": {"NCCL_PROTO": "Simple"}}
    assert imported.data["backends"] == {"nccl": nccl, "gloo": {"enabled": False}}
    assert imported.data["workload"] == {"collective": "allreduce", "dtype": "float32", "sizes": [8, 1 << 20]}
    assert _ranks(imported.data) == 16 and not imported.warnings
    left = [a for a in imported.assumed if "does not model" in a]
    assert left == ["the run's NCCL variables collsim does not model are left out (their effect is not in the "
                    "prediction): NCCL_IB_QPS_PER_CONNECTION"]  # NCCL_DEBUG has none: not listed  # fmt: skip


def test_a_fixed_template_with_other_gpus_is_flagged() -> None:
    imported = scenario_from_measurement(_run(8, hosts=["a"]), "hgx-b200")
    assert imported.warnings == ["the run's GPUs are NVIDIA H100 80GB HBM3 (h100-sxm5-80gb); node template "
                                 "'hgx-b200' has b200-sxm-180gb"]  # fmt: skip
    assert "node_params" not in imported.data["cluster"]
    with pytest.raises(MeasurementError, match="has no gpu parameter"):
        scenario_from_measurement(_run(8, hosts=["a"]), "hgx-b200", gpu="h100-sxm5-80gb")


def test_an_unknown_gpu_name_keeps_the_templates_gpus() -> None:
    imported = scenario_from_measurement(_run(8, hosts=["a"], gpu="NVIDIA A10G"), "hgx")
    assert "node_params" not in imported.data["cluster"]
    assert any("no GPU preset lists 'NVIDIA A10G'" in a for a in imported.assumed)
    assert scenario_from_measurement(_run(8, hosts=["a"], gpu="NVIDIA A10G"), "hgx", gpu="h200-sxm-141gb").data[
        "cluster"]["node_params"] == {"gpu": "h200-sxm-141gb"}  # fmt: skip


def test_a_log_without_hosts_fills_nodes() -> None:
    two = scenario_from_measurement(_run(16), "hgx-h100")
    assert two.data["cluster"]["nodes"] == 2 and any("2 nodes of 8 GPUs" in a for a in two.assumed)
    four = scenario_from_measurement(_run(4), "hgx-h100")
    assert (four.data["cluster"]["nodes"], four.data["cluster"]["visible_gpus"]) == (1, [0, 1, 2, 3])
    with pytest.raises(MeasurementError, match="12 ranks do not fill nodes of 8 GPUs"):
        scenario_from_measurement(_run(12), "hgx-h100")
    with pytest.raises(MeasurementError, match="give --nranks"):
        scenario_from_measurement(_run(None), "hgx-h100")


def test_more_ranks_a_host_than_gpus_is_an_error() -> None:
    with pytest.raises(MeasurementError, match="16 ranks a host, but node template 'hgx-h100' has 8 GPUs"):
        scenario_from_measurement(_run(16, hosts=["a"]), "hgx-h100")
    with pytest.raises(MeasurementError, match="not the same count on every host"):
        scenario_from_measurement(_run(9, hosts=["a", "b"]), "hgx-h100")


def test_workload_fields_follow_the_run() -> None:
    bcast = scenario_from_measurement(_run(8, hosts=["a"], collective="broadcast", root=3, op="sum",
                                           gpus_per_process=8), "hgx-h100")  # fmt: skip
    assert bcast.data["workload"] == {"collective": "broadcast", "dtype": "float32", "root": 3,
                                      "sizes": [8, 1 << 20], "gpus_per_process": 8}  # fmt: skip
    rs = _run(8, hosts=["a"], collective="reduce_scatter", op="max", timing="cputime")
    rs.dtype = "bfloat16"
    imported = scenario_from_measurement(rs, "hgx-h100")
    assert (imported.data["workload"]["op"], imported.data["workload"]["dtype"]) == ("max", "bfloat16")
    assert any("-C 1" in w for w in imported.warnings)
    with pytest.raises(MeasurementError, match="does not simulate gather"):
        scenario_from_measurement(_run(8, collective="gather"), "hgx-h100")


@settings(max_examples=12, deadline=None)
@given(hosts=st.integers(1, 3), per_host=st.integers(1, 8))
def test_the_scenario_has_the_runs_ranks(hosts: int, per_host: int) -> None:
    """Whatever the hosts and ranks a host, the scenario written runs exactly the measured ranks."""
    m = _run(hosts * per_host, hosts=[f"h{i}" for i in range(hosts)])
    imported = scenario_from_measurement(m, "hgx")
    assert imported.data["cluster"]["nodes"] == hosts
    assert _ranks(imported.data) == hosts * per_host


def _report_file(tmp_path: Path) -> Path:
    report = {"version": 3, "args": ["./build/all_gather_perf", "-g", "1"], "nccl_version": 22803,
              "env": ["NCCL_ALGO=Ring", "NCCL_IB_QPS_PER_CONNECTION=2"], "config": {"nthreads": 1, "ngpus": 1,
              "devices": [{"rank": r, "group": 0, "hostname": f"n{r // 8}", "device_info": "NVIDIA B200"}
                          for r in range(16)]},
              "results": [{"size": s, "count": s // 64, "type": "float", "redop": "none", "root": "    -1",
                           "out_of_place": {"time": t, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 0},
                           "in_place": {"time": t, "alg_bw": 1.0, "bus_bw": 1.0, "nwrong": 0},
                           "actual_iterations": 20} for s, t in ((1 << 20, 60.0), (1 << 28, 900.0))]}  # fmt: skip
    path = tmp_path / "runs" / "ag.json"
    path.parent.mkdir()
    path.write_text(json.dumps(report))
    return path


def test_cli_writes_a_scenario_that_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative paths given on the command line are written relative to the scenario's folder."""
    run = _report_file(tmp_path)
    (tmp_path / "tpl").mkdir()
    shutil.copy(topologies_dir() / "nodes" / "hgx-b200.yaml", tmp_path / "tpl" / "mine.yaml")
    (tmp_path / "scen").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["import", "nccl-tests", "runs/ag.json", "--node", "tpl/mine.yaml", "-o", "scen/ag.yaml"]) == 0
    printed = capsys.readouterr().out
    assert "from the run: NCCL 2.28.3" in printed and "Compare: collsim validate scen/ag.yaml runs/ag.json" in printed
    text = (tmp_path / "scen" / "ag.yaml").read_text()
    assert "node: ../tpl/mine.yaml" in text
    assert "# Compare (from this folder): collsim validate ag.yaml ../runs/ag.json" in text
    scenario = load_scenario(tmp_path / "scen" / "ag.yaml")
    assert scenario.cluster.nodes == 2 and scenario.workload.collective == ["allgather"]
    assert scenario.backends.nccl is not None and dict(scenario.backends.nccl.env) == {"NCCL_ALGO": "Ring"}
    assert main(["validate", "scen/ag.yaml", str(run)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# note:")]
    assert notes == ["# note: the run's NCCL variables differ from backends.nccl.env: set in the run, not modelled: "
                     "NCCL_IB_QPS_PER_CONNECTION=2"] or all("differ" not in n for n in notes)  # fmt: skip


def test_a_text_logs_rank_lines_give_the_nodes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """nccl-tests prints every rank's host: 8 ranks on two hosts of 4 are two nodes of 4 GPUs, not one of 8."""
    ranks = "".join(f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on {'node-' + 'ab'[r // 4]:>10s} device {r % 4:2d} "
                    f"[0x18] NVIDIA H100 80GB HBM3\n" for r in range(8))  # fmt: skip
    run = tmp_path / "ar.txt"
    run.write_text(f"# Collective test starting: all_reduce_perf\n{ranks}"
                   "  16777216  4194304  float  sum  -1  185.1  90.6  158.6  0  185.0  90.7  158.7  0\n")  # fmt: skip
    assert main(["import", "nccl-tests", str(run), "--node", "hgx-h100", "-o", str(tmp_path / "s.yaml")]) == 0
    assert "2 nodes: the run's hosts (node-a, node-b)" in capsys.readouterr().out
    scenario = load_scenario(tmp_path / "s.yaml")
    assert scenario.cluster.nodes == 2 and scenario.cluster.visible_gpus == [0, 1, 2, 3]


def test_ranks_spread_unevenly_over_hosts_are_refused_and_noted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """mpirun -np 12 -H a:8,b:4: two hosts of 6 would be 12 ranks too, but not this run; the import says so, and
    validate against a scenario of 6 a node notes it."""
    ranks = "".join(f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on {'node-' + 'ab'[r // 8]:>10s} device {r % 8:2d} "
                    f"[0x18] NVIDIA H100 80GB HBM3\n" for r in range(12))  # fmt: skip
    run = tmp_path / "ar.txt"
    run.write_text(f"# Collective test starting: all_reduce_perf\n{ranks}"
                   "  16777216  4194304  float  sum  -1  185.1  90.6  158.6  0  185.0  90.7  158.7  0\n")  # fmt: skip
    from collsim.api import Simulator
    from collsim.calibration import read_measurement
    from collsim.calibration.validate import validate

    m = read_measurement(run)
    assert m.hardware["hosts"] == ["node-a", "node-b"] and m.hardware["ranks_per_host"] == [8, 4]
    with pytest.raises(MeasurementError, match=r"different numbers of ranks \(node-a 8, node-b 4\)"):
        scenario_from_measurement(m, "hgx-h100")
    assert main(["import", "nccl-tests", str(run), "--node", "hgx-h100", "-o", str(tmp_path / "s.yaml")]) == 2
    assert "different numbers of ranks" in capsys.readouterr().err
    six = load_scenario({"name": "six", "cluster": {"node": "hgx-h100", "nodes": 2, "visible_gpus": list(range(6)),
                                                    "fabric": {"topology": "single_switch"}},
                         "workload": {"collective": "allreduce", "sizes": [16 << 20]},
                         "backends": {"nccl": {}}})  # fmt: skip
    assert any("different numbers of ranks (node-a 8, node-b 4)" in n for n in validate(Simulator(six), m).notes)
    even = read_measurement(_report_file(tmp_path))
    assert "ranks_per_host" not in even.hardware


def test_a_rank_on_two_hosts_warns(tmp_path: Path) -> None:
    """Two non-MPI nccl-tests processes under mpirun each print ranks 0-7 on their own host: a warning."""
    from collsim.calibration import ParseWarning, parse_nccl_tests

    text = "".join(f"#  Rank {r:2d} Group  0 Pid {100 + r:6d} on {host:>10s} device {r:2d} [0x18] NVIDIA H100\n"
                   for host in ("node-a", "node-b") for r in range(8))  # fmt: skip
    with pytest.warns(ParseWarning, match="rank 0 is printed on node-a and on node-b"):
        parse_nccl_tests("# Collective test starting: all_reduce_perf\n" + text
                         + "  1024  256  float  sum  -1  10.0  0.10  0.18  0  9.0  0.11  0.20  0\n")  # fmt: skip


def test_cli_needs_a_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _report_file(tmp_path)
    assert main(["import", "nccl-tests", str(run)]) == 2
    assert "give --node TEMPLATE" in capsys.readouterr().err
    assert main(["import", "nccl-tests", str(run), "--node", "hgx", "--nic", "connectx-7-ndr"]) == 2
    assert "--nic is for nccl-xml and nvidia-smi" in capsys.readouterr().err
    assert main(["import", "nccl-tests", str(run), "--node", "hgx"]) == 0  # no -o: the YAML on stdout
    assert load_scenario(__import__("yaml").safe_load(capsys.readouterr().out)).cluster.node_params["gpu"] == (
        "b200-sxm-180gb")


def test_format_scenario_says_where_everything_came_from() -> None:
    imported = scenario_from_measurement(_run(16), "hgx-h100")
    text = format_scenario(imported, "run.json", "s.yaml")
    assert text.startswith("# Scenario of the nccl-tests run run.json")
    assert "# Assumed: 2 nodes of 8 GPUs: the run names no hosts (16 ranks)." in text
    assert load_scenario(__import__("yaml").safe_load(text)).name == "run"


def test_the_templates_parameters_are_given_with_param(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An 8-GPU run on pcie-workstation (2 GPUs unless told) was refused ('8 ranks a host, but ... has 2 GPUs') with
    no way to say the box's shape: --param sets the template's parameters before the ranks are placed."""
    _report_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = ["import", "nccl-tests", "runs/ag.json", "--node", "pcie-workstation", "--gpu", "rtx-4090", "-o", "ws.yaml"]
    assert main(args) == 2
    assert "8 ranks a host, but node template 'pcie-workstation' has 2 GPUs" in capsys.readouterr().err
    assert main([*args, "--param", "gpus=8", "--param", "sockets=2", "--param", "p2p=true"]) == 0
    printed = capsys.readouterr().out
    assert "  given: node_params gpus=8, sockets=2, p2p=true (--param)" in printed
    assert "  given: GPU preset rtx-4090 (--gpu)" in printed
    scenario = load_scenario(tmp_path / "ws.yaml")
    assert dict(scenario.cluster.node_params) == {"gpus": 8, "sockets": 2, "p2p": True, "gpu": "rtx-4090"}
    assert main([*args, "--param", "gpus={"]) == 2
    assert "--param: gpus: cannot read value" in capsys.readouterr().err
    assert main(["import", "nvidia-smi", "x.txt", "--gpu", "rtx-4090", "--param", "gpus=8"]) == 2
    assert "--param is for nccl-tests, inspector and torch-trace" in capsys.readouterr().err
