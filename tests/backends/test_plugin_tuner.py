"""AWS's aws-ofi-nccl region tuner (collsim/backends/nccl/plugin_tuner.py, topologies/software/aws-ofi-nccl-regions).

The picks in ``data/ofi-region-picks.json`` (and those pinned below) were computed by the plugin's own code
(aws-ofi-nccl v1.16.3 src/tuner/nccl_ofi_regions.cpp compiled unchanged with stub headers: region_init_internal, then
region_get_coll_info_internal_v3 with every pair applicable), not by collsim; the file says how.
"""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsim.api import Simulator
from collsim.backends.common import BackendError
from collsim.backends.nccl.plugin_tuner import (
    RegionTuner,
    extend_region,
    in_polygon,
    load_region_tuner,
    resolve_tuner,
)
from collsim.backends.nccl.tuner import tuner_times
from collsim.topology.presets import topologies_dir

SOFTWARE = topologies_dir() / "software"
REGIONS = SOFTWARE / "aws-ofi-nccl-regions.yaml"
P5_8NODE = Path(__file__).parents[2] / "scenarios" / "published" / "aws_p5_8node_efa_nccl2277.yaml"
F = Fraction


def _tuner() -> RegionTuner:
    return load_region_tuner(REGIONS)


# --- geometry -----------------------------------------------------------------------------------------------------


@given(
    st.integers(0, 50), st.integers(0, 50), st.integers(1, 50), st.integers(1, 50),
    st.integers(-5, 110), st.integers(-5, 110),
)  # fmt: skip
def test_rectangle_matches_its_bounds(x0: int, y0: int, w: int, h: int, px: int, py: int) -> None:
    """An axis-aligned rectangle holds exactly the points within its closed bounds (edges included)."""
    rect = [(F(x0), F(y0)), (F(x0 + w), F(y0)), (F(x0 + w), F(y0 + h)), (F(x0), F(y0 + h))]
    expected = x0 <= px <= x0 + w and y0 <= py <= y0 + h
    assert in_polygon((F(px), F(py)), rect) is expected
    assert in_polygon((F(px), F(py)), rect[::-1]) is expected  # orientation does not matter


@given(st.integers(1, 40), st.integers(-3, 45), st.integers(-3, 45))
def test_triangle_matches_closed_form(n: int, px: int, py: int) -> None:
    """The triangle (0,0), (n,0), (0,n) holds x >= 0, y >= 0, x + y <= n."""
    tri = [(F(0), F(0)), (F(n), F(0)), (F(0), F(n))]
    assert in_polygon((F(px), F(py)), tri) is (px >= 0 and py >= 0 and px + py <= n)


def test_repeated_vertex_is_not_an_edge_through_everything() -> None:
    """A polygon that repeats a vertex (as some of the plugin's do) has a zero-length edge: only that point is on it."""
    line = [(F(10), F(16)), (F(100), F(16)), (F(10), F(16))]
    assert not in_polygon((F(50), F(64)), line)
    assert in_polygon((F(10), F(16)), line) and in_polygon((F(50), F(16)), line)


def test_extend_region_reaches_the_far_edge() -> None:
    far = (F(100), F(1000))
    # slope 2 from the origin: y = 200 at x = 100, below 1000: the far x
    assert extend_region((F(0), F(0)), (F(1), F(2)), far) == (F(100), F(200))
    # slope 20: y = 1000 is reached at x = 50
    assert extend_region((F(0), F(0)), (F(1), F(20)), far) == (F(50), F(1000))
    assert extend_region((F(3), F(1)), (F(9), F(1)), far) == (F(100), F(1))  # horizontal


# --- the tables -----------------------------------------------------------------------------------------------------


def test_tables_load_with_their_platforms() -> None:
    t = _tuner()
    assert (t.plugin, t.version, t.min_nodes) == ("aws-ofi-nccl", "1.16.3", 3)
    assert t.platform_of("p5.48xlarge") == t.platform_of("p5e.48xlarge") == "p5"
    assert t.platform_of("p5en.48xlarge") == "p5en"
    assert t.platform_of("p6-b200.48xlarge") == "p6"
    assert t.platform_of("p4d.24xlarge") is None
    assert t.table("p5", 8, "allreduce") is not None


# (nodes, size) -> the plugin's pick on p5, 8 ranks per node, allreduce (computed by the plugin's own code)
P5_AR_PICKS = {
    (4, 32 << 20): ("Tree", "LL128"),
    (4, 64 << 20): ("Ring", "LL128"),
    (4, 1 << 30): ("Ring", "LL128"),
    (4, 2 << 30): ("Ring", "Simple"),
    (8, 64 << 20): ("Tree", "LL128"),
    (8, 128 << 20): ("Ring", "LL128"),
    (8, 2 << 30): ("Ring", "LL128"),  # on the Ring/LL128 region's vertex (2 GiB, 64 ranks): inside
    (8, 4 << 30): ("Ring", "Simple"),
    (16, 256 << 20): ("Tree", "LL128"),
    (16, 512 << 20): ("Ring", "LL128"),
    (16, 4 << 30): ("NVLSTree", "Simple"),
    (16, 8 << 30): ("Ring", "Simple"),
}


def test_picks_match_the_compiled_plugin() -> None:
    """1,246 points over every platform, ranks-per-node case and collective, as the plugin's compiled code picks."""
    data = json.loads((Path(__file__).parent / "data" / "ofi-region-picks.json").read_text())
    t = _tuner()
    wrong = []
    for platform, ppn, nodes, coll, size, pick in data["rows"]:
        table = t.table(platform, ppn, coll)
        found = table.pick(size, nodes * ppn, lambda a, p: True) if table is not None else None
        got = None if found is None else [found[1].algorithm, found[1].protocol]
        if got != pick:
            wrong.append((platform, ppn, nodes, coll, size, pick, got))
    assert len(data["rows"]) > 1000 and not wrong, wrong[:5]


@pytest.mark.parametrize(("point", "pair"), sorted(P5_AR_PICKS.items()))
def test_p5_allreduce_picks_as_the_plugin(point: tuple[int, int], pair: tuple[str, str]) -> None:
    nodes, size = point
    t = _tuner()
    table = t.table("p5", 8, "allreduce")
    assert table is not None
    found = table.pick(size, 8 * nodes, lambda a, p: True)
    assert found is not None and (found[1].algorithm, found[1].protocol) == pair


def test_skipped_pairs_fall_to_the_next_region() -> None:
    """A pair NCCL marks not applicable is skipped, and the scan goes on (8 nodes, 1 GiB: Ring/LL128 first)."""
    table = _tuner().table("p5", 8, "allreduce")
    assert table is not None
    found = table.pick(1 << 30, 64, lambda a, p: a != "Ring")
    assert found is None or found[1].algorithm != "Ring"
    assert table.pick(1 << 30, 64, lambda a, p: False) is None


def test_malformed_tables_name_the_field() -> None:
    with pytest.raises(BackendError, match=r"x\.yaml: platforms\.p5\.tables\[0\]\.regions\[0\]\.algorithm"):
        RegionTuner.from_mapping(
            {"max_size": 10, "max_ranks": 10, "min_nodes": 3,
             "platforms": {"p5": {"instance_types": ["p5.48xlarge"], "tables": [
                 {"collective": "allreduce", "ranks_per_node": 8,
                  "regions": [{"algorithm": "Star", "protocol": "LL", "vertices": [[0, 1], [2, 3]]}]}]}}},
            "x.yaml",
        )  # fmt: skip


@pytest.mark.parametrize(
    ("platforms", "field"),
    [
        ("p5", "platforms: expected a mapping"),
        ({"p5": ["x"]}, "platforms.p5: expected a mapping"),
        ({"p5": {"instance_types": "p5.48xlarge"}}, "platforms.p5.instance_types: expected a list"),
        ({"p5": {"instance_types": ["p5.48xlarge"], "tables": [3]}}, r"platforms.p5.tables\[0\]: expected a mapping"),
    ],
)
def test_malformed_structure_is_a_clear_error(platforms: object, field: str) -> None:
    with pytest.raises(BackendError, match=field):
        RegionTuner.from_mapping({"max_size": 10, "max_ranks": 10, "min_nodes": 3, "platforms": platforms}, "x.yaml")


# --- which tuner NCCL loads ---------------------------------------------------------------------------------------

PLUGINS = {"aws-ofi-nccl": ("aws-ofi-nccl-regions.yaml", "ofi")}


@pytest.mark.parametrize(
    ("net", "instance", "env", "force", "bundled", "active", "note"),
    [
        (["aws-ofi-nccl"], "p5.48xlarge", None, None, True, True, "region tuner (p5.48xlarge)"),
        (["aws-ofi-nccl"], "p5.48xlarge", None, None, False, False, None),  # NCCL 2.19-2.20: only when named
        ([], "p5.48xlarge", "/opt/lib/libnccl-ofi-tuner.so", None, False, True, "region tuner"),
        (["aws-ofi-nccl"], "p5.48xlarge", "libnccl-tuner-mine.so", None, True, False, "does not model"),
        (["aws-ofi-nccl"], "p5.48xlarge", None, "Internal", True, False, "Internal"),
        (["aws-ofi-nccl"], "p4d.24xlarge", None, None, True, False, "instance type p4d.24xlarge"),
        (["aws-ofi-nccl"], None, None, None, True, False, "without an instance_type"),
        ([], "p5.48xlarge", None, None, True, False, None),  # InfiniBand: no plugin
    ],
)
def test_resolve_tuner(
    net: list[str], instance: str | None, env: str | None, force: str | None, bundled: bool, active: bool,
    note: str | None,
) -> None:  # fmt: skip
    tuner, text = resolve_tuner(PLUGINS, net, instance, env, force, bundled, SOFTWARE)
    assert (tuner is not None) is active
    assert (text is None) if note is None else (text is not None and note in text)


# --- end to end -----------------------------------------------------------------------------------------------------


def test_p5_run_takes_the_plugins_picks() -> None:
    """8 x p5 (NCCL 2.27.7, EFA: aws-ofi-nccl's bundled tuner): the published run's jumps come from these picks."""
    sim = Simulator.from_source(P5_8NODE)
    picks = {s: sim.simulate_one("nccl", s, choice=None).algorithm for s in (64 << 20, 1 << 30)}
    assert picks == {64 << 20: "Tree", 1 << 30: "Ring"}
    out = sim.simulate_one("nccl", 4 << 30)
    assert (out.algorithm, out.protocol) == ("Ring", "Simple")
    assert any("region tuner (p5.48xlarge, allreduce, 8 ranks per node" in n for n in out.notes)


@pytest.mark.parametrize(
    "override",
    [
        "backends.nccl.env.OFI_NCCL_TUNER_TYPE=Internal",
        "backends.nccl.version=2.20.3",
        "cluster.nodes=2",
    ],
)
def test_p5_without_the_plugins_pick(override: str) -> None:
    """Turned off, before NCCL 2.21 (not loaded unless named) or on two nodes: NCCL's cost model picks (the pair it
    prices fastest; the plugin's would be Ring/LL128 at 1 GiB on 8 nodes): NVLSTree on 8 nodes and on 2. (Tree on 8
    nodes until 2026-12-06, when the tree's cap was still priced at the channels NCCL runs, 16, not at its graph's
    8: tuning.cc's nChannels x perChMaxTreeBw.)"""
    sim = Simulator.from_source(P5_8NODE, [override])
    out = sim.simulate_one("nccl", 1 << 30)
    model = tuner_times(sim.nccl_plan, sim.nccl_constants, "allreduce", 1 << 30, sim.nccl_options)
    assert (out.algorithm, out.protocol) == min(model, key=model.__getitem__)
    assert out.algorithm == "NVLSTree"
    assert not any("region tuner (p5.48xlarge, allreduce" in n for n in out.notes)  # the note of a plugin's pick


def test_force_type_model_is_refused() -> None:
    from collsim.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="model tuner is not modelled"):
        Simulator.from_source(P5_8NODE, ["backends.nccl.env.OFI_NCCL_TUNER_TYPE=Model"])


def test_reported_network_latency_prices_every_network_step() -> None:
    """aws-ofi-nccl reports 75 us on p5 (platform-aws.cpp); NCCL's cost model adds it to every network step's
    latency, twice for Simple (tuning.cc): on 2 nodes Tree/Simple's time grows by twice Tree/LL's, Ring/Simple's by
    twice Ring/LL's times NCCL's ring plateau factor (1.4 on Hopper, at 1 MiB)."""
    import dataclasses

    from collsim.backends.nccl.tuner import tuner_times

    sim = Simulator.from_source(P5_8NODE, ["cluster.nodes=2"])
    plan, consts = sim.nccl_plan, sim.nccl_constants
    assert plan.net_latency == pytest.approx(75e-6)
    with_lat = tuner_times(plan, consts, "allreduce", 1 << 20)
    without = tuner_times(dataclasses.replace(plan, net_latency=0.0), consts, "allreduce", 1 << 20)
    for algo, factor in (("Tree", 1.0), ("Ring", consts.ring_plateau_latency_factor[plan.arch])):
        d_ll = with_lat[(algo, "LL")] - without[(algo, "LL")]
        d_simple = with_lat[(algo, "Simple")] - without[(algo, "Simple")]
        assert d_ll >= 75e-6 and d_simple == pytest.approx(2 * factor * d_ll)
    ib = Simulator.from_source("scenarios/2node-h100-ib.yaml")
    assert ib.nccl_plan.net_latency == 0.0  # NCCL's own IB transport reports none


def test_no_gdr_flush_on_hopper_from_nccl_2_19() -> None:
    """NCCL flushes a GPUDirect RDMA receive before Hopper only (or with NCCL_NET_FORCE_FLUSH=1; the default was 1
    up to 2.18, and AWS's plugin sets 0 on p5 where the user has not): a Simple network hop pays its path latency
    twice only then (EFA's path latency is long)."""
    args = ["cluster.nodes=2", "backends.nccl.env.NCCL_ALGO=Ring", "backends.nccl.env.NCCL_PROTO=Simple"]

    def time_s(*extra: str) -> float:
        sim = Simulator.from_source(P5_8NODE, [*args, *extra])
        return sim.simulate_one("nccl", 32 << 20).time_s

    plain, forced = time_s(), time_s("backends.nccl.env.NCCL_NET_FORCE_FLUSH=1")
    old = time_s("backends.nccl.version=2.18.5")  # NCCL 2.18 would flush, but the plugin's 0 stands
    assert plain < forced and old == pytest.approx(plain)
    sim = Simulator.from_source(P5_8NODE, args)
    assert not sim.nccl_plan.gdr_flush and sim.nccl_plugin_env["NCCL_NET_FORCE_FLUSH"] == "0"


#: (nodes, MiB) -> the channel count aws-ofi-nccl v1.16.3's calculateBestNChannel returns (its compiled code, with
#: log2i(nodes); all 261 points of 3-1024 nodes x 4-32 MiB in 1 MiB steps agreed with collsim's ChannelRule)
P6_CHANNELS = {
    (3, 10): 24,
    (4, 8): 24,
    (4, 13): 16,
    (4, 24): 32,
    (5, 5): 16,
    (5, 12): 16,
    (8, 18): 24,
    (16, 8): 16,
    (16, 9): 16,
    (16, 26): 24,
    (16, 28): 32,
    (16, 29): 32,
    (32, 22): 16,
    (64, 13): 16,
    (64, 19): 16,
    (128, 15): 24,
    (128, 21): 16,
    (1024, 4): 32,
    (1024, 14): 16,
    (1024, 21): 24,
    (1024, 24): 24,
    (1024, 25): 24,
    (1024, 31): 16,
    (1024, 32): 16,
}


def test_p6_channel_rule_as_the_plugin() -> None:
    rule = _tuner().channel_rules["p6"]
    assert {k: rule.channels(k[1] << 20, k[0]) for k in P6_CHANNELS} == P6_CHANNELS


def test_p6_run_names_the_channels_the_plugin_sets() -> None:
    """4 x p6-b200 (the aws-p6-b200 template: its instance type, 8 x EFA v4): Tree/LL128 by the plugin at 8 MiB,
    which also sets 24 channels; the schedule keeps at most the communicator's. On 2 nodes NCCL's own model picks."""
    p6 = ["cluster.node=aws-p6-b200", "backends.gloo.enabled=false", "backends.nccl.version=2.27.7"]
    sim = Simulator.from_source("2node-h100-ib", [*p6, "cluster.nodes=4"])
    assert sim.topology.instance_type == "p6-b200.48xlarge"
    out = sim.simulate_one("nccl", 8 << 20)
    assert (out.algorithm, out.protocol) == ("Tree", "LL128")
    assert any("region tuner (p6-b200.48xlarge, allreduce, 8 ranks per node" in n for n in out.notes)
    assert any("sets nChannels=24" in n for n in out.notes)
    assert out.channels <= sim.nccl_plan.channels
    assert not any("nChannels" in n for n in sim.simulate_one("nccl", 64 << 20).notes)  # above 32 MiB: none
    two = Simulator.from_source("2node-h100-ib", p6).simulate_one("nccl", 8 << 20)
    assert not any("region tuner (p6-b200.48xlarge, allreduce" in n for n in two.notes)


def test_p5en_template_takes_the_p5en_tables() -> None:
    """The aws-p5en template names its instance type, so aws-ofi-nccl's p5en tables pick from 3 nodes on (the 35 us
    latency of its platform block beside them); on 2 nodes NCCL's own model does."""
    p5en = ["cluster.node=aws-p5en", "backends.gloo.enabled=false"]
    sim = Simulator.from_source("2node-h100-ib", [*p5en, "cluster.nodes=4"])
    assert sim.topology.instance_type == "p5en.48xlarge"
    out = sim.simulate_one("nccl", 1 << 30)
    assert any("region tuner (p5en.48xlarge, allreduce, 8 ranks per node" in n for n in out.notes)
    assert (out.algorithm, out.protocol) == ("Ring", "Simple")
    two = Simulator.from_source("2node-h100-ib", p5en).simulate_one("nccl", 1 << 30)
    assert not any("region tuner (p5en.48xlarge, allreduce" in n for n in two.notes)  # a pick's note
