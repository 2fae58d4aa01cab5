"""Calibration profiles: validation of the file, and exactly what each parameter changes."""

from __future__ import annotations

from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.profile import Profile, load_profile
from collsim.scenario import ScenarioError

PCIE = "pcie-2gpu-nop2p"


def _time_us(profile: Profile | None, size: int, backend: str = "nccl") -> float:
    sim = Simulator.from_source(PCIE, profile=profile)
    return sim.simulate_one(backend, size).time_s * 1e6


def test_link_factors_scale_bandwidth_and_add_latency_exactly() -> None:
    base = Simulator.from_source(PCIE).topology
    topo = Profile({"link.pcie.bandwidth_scale": 0.5, "link.pcie.latency_us": 2.0}).apply_topology(base)
    for ln in base.links():
        new = topo.graph.edges[ln.src, ln.dst]["link"]
        if ln.kind == "pcie":
            assert new.bandwidth == pytest.approx(ln.bandwidth * 0.5)
            assert new.latency == pytest.approx(ln.latency + 2e-6)
        else:
            assert new == ln


def test_nic_message_overhead_reaches_every_nic_and_the_network_hops() -> None:
    p = Profile({"nic.message_overhead_us": 2.0})
    sim = Simulator.from_source("2node-h100-ib", profile=p)  # IB presets carry none
    assert {n.spec["message_overhead"] for n in sim.topology.nics()} == {2e-6}
    net = [h for h in sim.nccl_plan.hops.values() if h.hw == "NET"]
    assert net and all([t for _, t in h.per_message] == [2e-6, 2e-6] for h in net)
    assert sim.simulate_one("nccl", 1 << 30).time_s > Simulator.from_source("2node-h100-ib").simulate_one(
        "nccl", 1 << 30
    ).time_s
    from collsim.calibration.fit import candidate_parameters

    assert "nic.message_overhead_us" not in candidate_parameters(sim, ["nccl"])  # only when asked for (--param)


def test_launch_overhead_adds_exactly_once_per_collective() -> None:
    assert _time_us(Profile({"nccl.launch_overhead_us": 7.0}), 8) == pytest.approx(_time_us(None, 8) + 7.0)


def test_overheads_do_not_change_nccl_choice() -> None:
    slow = Simulator.from_source(PCIE, profile=Profile({"nccl.step_latency_scale": 10.0}))
    fast = Simulator.from_source(PCIE)
    for size in (8, 2**16, 2**24):
        a, b = slow.simulate_one("nccl", size), fast.simulate_one("nccl", size)
        assert (a.algorithm, a.protocol) == (b.algorithm, b.protocol)
        assert a.time_s > b.time_s


def test_gloo_parameters_reach_the_cpu_specs_and_constants() -> None:
    p = Profile({"gloo.tcp_bw_scale": 0.5, "gloo.message_latency_us": 40.0, "gloo.enqueue_latency_us": 0.0})
    sim = Simulator.from_source(PCIE, profile=p)
    base = Simulator.from_source(PCIE)
    cpu, cpu0 = sim.topology.devices("cpu")[0], base.topology.devices("cpu")[0]
    assert cpu.spec["tcp_loopback_bw_per_core"] == pytest.approx(cpu0.spec["tcp_loopback_bw_per_core"] * 0.5)
    assert cpu.spec["tcp_message_latency"] == pytest.approx(40e-6)
    assert sim.gloo_constants.work_enqueue_latency == 0.0
    assert _time_us(p, 2**26, "gloo") > _time_us(None, 2**26, "gloo")


def test_scenario_calibration_field_applies_the_profile(tmp_path: Path) -> None:
    prof = tmp_path / "p.yaml"
    Profile({"nccl.launch_overhead_us": 5.0}).write(prof)
    sim = Simulator.from_source(PCIE, [f"calibration={prof}"])
    assert sim.profile is not None and sim.profile.parameters == {"nccl.launch_overhead_us": 5.0}
    assert sim.simulate_one("nccl", 8).time_s * 1e6 == pytest.approx(_time_us(None, 8) + 5.0)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("format: collsim-profile/1\nparameters: {link.nvlink.speed: 1}\n", "parameters.link.nvlink.speed"),
        (
            "format: collsim-profile/1\nparameters: {link.warp.bandwidth_scale: 1}\n",
            "parameters.link.warp.bandwidth_scale",
        ),
        ("format: collsim-profile/1\nparameters: {nccl.step_latency_scale: 0}\n", "parameters.nccl.step_latency_scale"),
        ("format: collsim-profile/1\nparameters: {gloo.tcp_bw_scale: fast}\n", "parameters.gloo.tcp_bw_scale"),
        ("format: other\nparameters: {}\n", "format"),
        ("format: collsim-profile/1\nparameters: [1]\n", "parameters"),
    ],
)
def test_bad_profiles_name_file_and_field(tmp_path: Path, text: str, field: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_profile(path)
    assert err.value.field == field and err.value.file == str(path)


def test_missing_profile_is_a_scenario_error(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="calibration profile not found"):
        Simulator.from_source(PCIE, [f"calibration={tmp_path / 'none.yaml'}"])


def test_round_trip_keeps_parameters_and_meta(tmp_path: Path) -> None:
    p = Profile({"link.ib.bandwidth_scale": 0.9}, {"fit": {"evaluations": 3}})
    p.write(tmp_path / "p.yaml")
    back = load_profile(tmp_path / "p.yaml")
    assert back.parameters == {"link.ib.bandwidth_scale": 0.9} and back.meta == {"fit": {"evaluations": 3}}


def test_a_profile_fitted_on_another_cluster_says_what_acts_on_nothing_here() -> None:
    # the p4de RoCE profile on an InfiniBand cluster changed nothing, and nothing said so
    prof = Profile({"link.roce.bandwidth_scale": 0.9, "link.ib.latency_us": 1.0}, {"fitted_on": {"scenario": "p4de"}},
                   file="p.yaml")  # fmt: skip
    sim = Simulator.from_source("2node-h100-ib", profile=prof)
    assert sim.profile_notes == ["calibration p.yaml: link.roce.bandwidth_scale acts on no link or device of this "
                                 "cluster (fitted on p4de)"]  # fmt: skip
    assert Simulator.from_source("2node-h100-ib", profile=Profile({"link.ib.latency_us": 1.0})).profile_notes == []
    assert Simulator.from_source("2node-h100-ib").profile_notes == []


def test_profiles_are_read_with_the_scenarios_yaml_rules(tmp_path: Path) -> None:
    """The one YAML loader (collsim/safeyaml.py), as the README says of every YAML input: a duplicate key is an error
    with its line (PyYAML kept the last value silently: a profile edited by hand doubled a bandwidth), YAML 1.2
    numbers read as numbers (6e-1 was refused as a string), a syntax error says line and column in one line."""
    path = tmp_path / "p.yaml"
    path.write_text("format: collsim-profile/1\nparameters:\n  link.pcie.bandwidth_scale: 0.6\n"
                    "  link.pcie.bandwidth_scale: 1.5\n")  # fmt: skip
    with pytest.raises(ScenarioError, match=r"line 4, column 3: duplicate key 'link.pcie.bandwidth_scale'") as err:
        load_profile(path)
    assert err.value.file == str(path)
    path.write_text("format: collsim-profile/1\nparameters: {link.pcie.bandwidth_scale: 6e-1}\n")
    assert load_profile(path).parameters == {"link.pcie.bandwidth_scale": 0.6}
    path.write_text("format: collsim-profile/1\nparameters: {a: [1\n")
    with pytest.raises(ScenarioError, match=r"invalid YAML: line \d+, column \d+") as err:
        load_profile(path)
    assert "\n" not in str(err.value) and "<unicode string>" not in str(err.value)
