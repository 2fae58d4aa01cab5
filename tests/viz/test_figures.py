"""Tests of collsim.viz.figures: each figure's traces and the data they draw, on tiny inputs with known values."""

from __future__ import annotations

import functools
import itertools
import math
from pathlib import Path

import pandas as pd
import pytest

from collsim.api import Explanation, Simulator
from collsim.backends import TAGS, Outcome, tag_for
from collsim.backends.nccl import enabled_pairs
from collsim.backends.tags import registry
from collsim.engine import FlowRecord, Owner, Tag
from collsim.results import Record, make_record
from collsim.topology import PATH_CLASS_ORDER, format_topo_matrix
from collsim.trace import unsymmetric
from collsim.viz import (
    BREAKDOWN_CATEGORIES,
    TAG_CATEGORIES,
    bottleneck_figure,
    breakdown_category,
    breakdown_figure,
    group_breakdown,
    link_utilisation_figure,
    path_matrix_figure,
    sweep_figure,
    timeline_figure,
    topology_figure,
)
from collsim.viz.figures import CATEGORY_COLORS, PATH_TYPE_ORDER, size_ticks
from collsim.vocab import COLLECTIVES

MiB = 2**20


def _rec(backend: str, size: int, time_s: float, **kw: object) -> Record:
    return make_record(
        backend=backend,
        collective=str(kw.pop("collective", "allreduce")),
        algorithm=str(kw.pop("algorithm", "Ring" if backend == "nccl" else "ring")),
        protocol=str(kw.pop("protocol", "Simple" if backend == "nccl" else "tcp/cuda")),
        nranks=4,
        dtype="float32",
        size_bytes=size,
        time_s=time_s,
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture(scope="module")
def pcie() -> Simulator:
    return Simulator.from_source("pcie-2gpu-nop2p")


@pytest.fixture(scope="module")
def hgx() -> Simulator:
    return Simulator.from_source("hgx-h100")


# ------------------------------------------------------------------------------------------------ sweep


def test_sweep_figure_lines_per_backend() -> None:
    recs = [_rec("gloo", MiB, 1e-3), _rec("nccl", MiB, 1e-4), _rec("nccl", 4 * MiB, 2e-4), _rec("gloo", 4 * MiB, 4e-3)]
    fig = sweep_figure(recs)
    assert [(t.name, t.xaxis) for t in fig.data] == [("NCCL", "x"), ("NCCL", "x2"), ("Gloo", "x"), ("Gloo", "x2")]
    nccl_bus, nccl_time, gloo_bus, gloo_time = fig.data
    assert list(nccl_bus.x) == [MiB, 4 * MiB]
    # busbw = size / time * 2(n-1)/n with n = 4, GB = 1e9 bytes
    assert list(nccl_bus.y) == pytest.approx([MiB / 1e-4 / 1e9 * 1.5, 4 * MiB / 2e-4 / 1e9 * 1.5])
    assert list(nccl_time.y) == pytest.approx([100.0, 200.0])
    assert list(gloo_time.y) == pytest.approx([1000.0, 4000.0])
    assert list(gloo_bus.customdata) == ["ring/tcp/cuda", "ring/tcp/cuda"]
    assert list(gloo_bus.text) == ["1MiB", "4MiB"]  # hover labels with binary prefixes
    assert nccl_bus.showlegend is not False and nccl_time.showlegend is False
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log" and fig.layout.yaxis2.type == "log"
    assert fig.layout.yaxis.title.text == "busbw (GB/s)" and fig.layout.yaxis2.title.text == "time (us)"


def test_sweep_figure_by_algorithm_and_explanations() -> None:
    recs = [_rec("nccl", MiB, 1e-4, algorithm="Tree", protocol="LL"), _rec("nccl", MiB, 2e-4)]
    fig = sweep_figure(recs, by_algorithm=True)
    assert [t.name for t in fig.data] == ["NCCL Ring/Simple", "NCCL Ring/Simple", "NCCL Tree/LL", "NCCL Tree/LL"]
    ex = [
        Explanation("allreduce", MiB, {("Ring", "LL"): 1e-4, ("NVLS", "Simple"): 3e-4}, ("Ring", "LL"), {}),
        Explanation(
            "allreduce",
            4 * MiB,
            {("Ring", "LL"): 4e-4, ("NVLS", "Simple"): 2e-4},
            ("NVLS", "Simple"),
            {("Ring", "LL"): 5e-4, ("NVLS", "Simple"): 1e-4},
        ),
    ]
    fig = sweep_figure([_rec("nccl", MiB, 1e-4)], explanations=ex, nranks=8)
    names = [t.name for t in fig.data]
    assert names == [
        "NCCL",
        "NCCL",
        "NCCL NVLS/Simple (simulated)",
        "NCCL NVLS/Simple (simulated)",
        "NCCL Ring/LL (simulated)",
        "NCCL Ring/LL (simulated)",
    ]
    ring_bus, ring_time = fig.data[4], fig.data[5]
    assert list(ring_bus.x) == [4 * MiB]  # the 1 MiB row simulated no pair
    assert list(ring_bus.y) == pytest.approx([4 * MiB / 5e-4 / 1e9 * 2 * 7 / 8])
    assert list(ring_time.y) == pytest.approx([500.0])


def test_sweep_figure_measured_overlay() -> None:
    df = pd.DataFrame({"size_bytes": [4 * MiB, MiB], "time_us": [300.0, 120.0], "busbw_gbps": [float("nan"), 13.1]})
    fig = sweep_figure([_rec("nccl", MiB, 1e-4)], measured={"nccl-tests (DGX)": df})
    bus, time = fig.data[2], fig.data[3]
    assert bus.name == time.name == "nccl-tests (DGX)" and bus.mode == "markers"
    assert list(bus.x) == [MiB] and list(bus.y) == [13.1]  # the NaN busbw is left out
    assert list(time.x) == [MiB, 4 * MiB] and list(time.y) == [120.0, 300.0]
    with pytest.raises(ValueError, match="busbw_gbps"):
        sweep_figure([], measured={"bad": pd.DataFrame({"size_bytes": [1], "time_us": [1.0]})})


def test_size_ticks() -> None:
    vals, text = size_ticks([1024, 1024**3])
    assert vals[0] == 1024 and text[0] == "1KiB" and vals[-1] <= 1024**3
    assert all(b / a == vals[1] / vals[0] for a, b in itertools.pairwise(vals))
    assert size_ticks([]) == ([], [])


# ------------------------------------------------------------------------------------------------ breakdown


SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _undeclared(out: Outcome) -> set[str]:
    """Labels of the outcome's record tags and breakdown keys that the registry does not declare exactly so."""
    bad = {r.tag.label for r in out.records if TAGS.get(r.tag.label) != r.tag}
    return bad | {k for k in out.breakdown if k not in TAGS}


@functools.cache
@functools.cache  # the two tests below share the simulations
def _emitted(scenario: str, overrides: tuple[str, ...], size: int = 4096) -> tuple[frozenset[str], frozenset[str]]:
    """Tag labels the simulations of a shipped scenario emit (every collective at the backends' choice, every enabled
    NCCL pair of its collective; only the scenario's collectives beyond 16 ranks), and the undeclared ones."""
    sim = Simulator.from_source(str(SCENARIOS / f"{scenario}.yaml"), list(overrides))
    small = len(sim.topology.rank_devices()) <= 16
    seen: set[str] = set()
    bad: set[str] = set()
    for backend in sim.backends():
        for coll in COLLECTIVES if small else sim.scenario.collectives():
            choices: list[tuple[str, str] | None] = [None]
            if backend == "nccl" and coll in sim.scenario.collectives():
                choices += enabled_pairs(sim.nccl_plan, sim.nccl_options, coll)
            gloo = sim.gloo_options
            if backend == "gloo" and coll == "sendrecv" and (gloo.device, gloo.transport) == ("cuda", "tcp"):
                continue  # refused: Gloo's send/recv take no CUDA tensors over TCP
            for choice in choices:
                out = sim.simulate_one(backend, size, collective=coll, record=True, choice=choice)
                assert out.records and out.breakdown, (backend, coll, choice)
                seen |= {r.tag.label for r in out.records} | set(out.breakdown)
                bad |= _undeclared(out)
    return frozenset(seen), frozenset(bad)


VARIANTS = [(p.stem, ()) for p in sorted(SCENARIOS.glob("*.yaml"))] + [
    ("pcie-2gpu-nop2p", ("cluster.node_params.p2p=true",)),  # PCIe P2P
    ("2node-h100-ib", ("cluster.fabric.in_network_reduction=true", "backends.nccl.env.NCCL_COLLNET_ENABLE=1")),
    ("2node-h100-ib", ("backends.nccl.env.NCCL_NET_GDR_LEVEL=LOC",)),  # NET staged through host memory
    ("2node-h100-ib", ("backends.gloo.transport=ibverbs",)),  # GPUDirect RDMA, GPU reductions
    ("2node-h100-ib", ("backends.gloo.transport=ibverbs", "backends.gloo.device=cpu")),
    ("hgx-h100", ("perturb.ranks=[{rank: 3, launch_delay: 20us}]",)),  # a straggler
    ("2node-h100-ib", ("perturb.background=[{device: n1/nic0, kind: ib, load: 0.5}]",)),  # another job
]


@pytest.mark.parametrize(("scenario", "overrides"), VARIANTS, ids=lambda v: v if isinstance(v, str) else "+".join(v))
def test_every_emitted_tag_is_declared(scenario: str, overrides: tuple[str, ...]) -> None:
    seen, bad = _emitted(scenario, overrides)
    assert seen and not bad, sorted(bad)


def _fresh_allgather_tags() -> frozenset[str]:
    """A Gloo allgather whose flat output is a fresh mapping (32 MiB, a CPU preset with first_touch_bw)."""
    sim = Simulator.from_source(str(SCENARIOS / "measurements" / "fsdp-cpu-2proc-mlp.scenario.yaml"))
    out = sim.simulate_one("gloo", 32 << 20, collective="allgather", record=True)
    assert not _undeclared(out)
    return frozenset({r.tag.label for r in out.records} | set(out.breakdown))


def _one_rank_tags() -> frozenset[str]:
    """One GPU alone: NCCL's copy of its input to its output (no flow, a delay: the breakdown shows it)."""
    out = Simulator.from_source("hgx-h100", ["cluster.visible_gpus=[0]"]).simulate_one("nccl", 4096, record=True)
    assert not _undeclared(out)
    return frozenset(out.breakdown)


def test_the_variants_emit_every_declared_tag() -> None:
    # with the test above: every declared tag is reachable, so a stale declaration shows too
    seen = set().union(*(_emitted(scenario, overrides)[0] for scenario, overrides in VARIANTS))
    assert set(TAGS) - seen - _fresh_allgather_tags() - _one_rank_tags() == set()
    assert "CPU page faults (fresh buffer)" in _fresh_allgather_tags()


def test_the_declared_tag_check_can_fail() -> None:
    rogue = Tag("NVLink", "send", "transfer: network (TCP)")  # a declared label with another category
    new = Tag("warp drive", "send", "transfer: NVLink")
    me = Owner(0, 0, "rank", "n0/gpu0")
    recs = [FlowRecord(me, t, 1.0, 0.0, 1.0, 0.0, ()) for t in (rogue, new, TAGS["PCIe P2P"])]
    out = _outcome(recs, 1.0)
    out.breakdown = {"PCIe P2P": 0.5, "nothing declared": 0.5}
    assert _undeclared(out) == {"NVLink", "warp drive", "nothing declared"}


def test_every_declared_tag_has_a_category_and_colour() -> None:
    assert set(TAG_CATEGORIES) == set(TAGS)
    for label, tag in TAGS.items():
        assert tag.label == label and tag_for(label) is tag
        assert TAG_CATEGORIES[label] == tag.category == breakdown_category(label)
        assert tag.category in BREAKDOWN_CATEGORIES and tag.category in CATEGORY_COLORS
    assert breakdown_category("RDMA over network (GPUDirect)") == "transfer: network (RDMA)"
    assert tag_for("TCP over loopback").activity == "send"


def test_an_undeclared_tag_label_is_an_error() -> None:
    with pytest.raises(KeyError, match="undeclared tag label 'something new'"):
        tag_for("something new")
    with pytest.raises(KeyError, match="something new"):
        breakdown_category("something new")
    with pytest.raises(KeyError, match="waiting for Godot"):
        group_breakdown({"NVLink": 1.0, "waiting for Godot": 2.0})
    with pytest.raises(KeyError, match="new tag"):
        breakdown_figure([_rec("nccl", MiB, 2e-6, breakdown={"NVLink": 1e-6, "new tag": 1e-6})])


def test_the_registry_refuses_conflicts() -> None:
    a = Tag("x", "send", "transfer: NVLink")
    assert registry([a], [a]) == {"x": a}  # the same declaration twice is one tag
    with pytest.raises(ValueError, match="declared twice"):
        registry([a], [Tag("x", "copy", "transfer: NVLink")])
    with pytest.raises(ValueError, match="not a breakdown category"):
        registry([Tag("y", "send", "other: y")])


def test_group_breakdown_sums_and_orders() -> None:
    bd = {"waiting (peers, slots)": 1.0, "NVLink": 2.0, "NVLink (NVLS)": 3.0, "per-step latency": 0.5}
    assert group_breakdown(bd) == {
        "latency and overheads": 0.5,
        "transfer: NVLink": 5.0,
        "waiting (peers, contention)": 1.0,
    }


def test_breakdown_figure_stacks_shares() -> None:
    recs = [
        _rec("nccl", 4 * MiB, 8e-6, breakdown={"NVLink": 6e-6, "launch + base latency": 2e-6}),
        _rec("nccl", MiB, 4e-6, breakdown={"NVLink": 3e-6, "per-step latency": 1e-6}),
        _rec(
            "gloo",
            MiB,
            4e-6,
            breakdown={"D2H copy (PCIe)": 1e-6, "H2D copy (PCIe)": 1e-6, "TCP over loopback": 2e-6},
        ),
        _rec("gloo", 2 * MiB, 1e-6),  # no breakdown: skipped
    ]
    fig = breakdown_figure(recs)
    got = [(t.name, t.xaxis, list(t.x), [round(y, 9) for y in t.y], t.showlegend) for t in fig.data]
    assert got == [
        ("latency and overheads", "x", ["1MiB", "4MiB"], [25.0, 25.0], True),
        ("transfer: NVLink", "x", ["1MiB", "4MiB"], [75.0, 75.0], True),
        ("transfer: TCP loopback (CPU + host memory)", "x2", ["1MiB"], [50.0], True),
        ("host copies (D2H/H2D)", "x2", ["1MiB"], [50.0], True),
    ]
    assert fig.layout.barmode == "stack"
    assert [a.text for a in fig.layout.annotations] == ["NCCL", "Gloo"]
    us = breakdown_figure(recs, normalize=False)
    assert list(us.data[1].y) == pytest.approx([3.0, 6.0])  # NVLink seconds to us
    # the same category in both panels has one legend entry
    both = breakdown_figure([recs[1], _rec("gloo", MiB, 1e-6, breakdown={"TCP message latency": 1e-6})])
    assert [(t.name, t.showlegend) for t in both.data] == [
        ("latency and overheads", True),
        ("transfer: NVLink", True),
        ("latency and overheads", False),
    ]


# ------------------------------------------------------------------------------------------------ timeline


def _outcome(records: list[FlowRecord], time_s: float, **kw: object) -> Outcome:
    return Outcome(
        backend=str(kw.get("backend", "nccl")),
        collective="allreduce",
        algorithm="Ring",
        protocol="Simple",
        nranks=2,
        size_bytes=1000,
        time_s=time_s,
        channels=1,
        records=records,
    )


def _rank(rank: int, channel: int | None = 0) -> Owner:
    return Owner(rank, channel, "rank", f"n0/gpu{rank}")


def test_timeline_figure_tiny(pcie: Simulator) -> None:
    hops = [("n0/gpu0", "n0/pcie0"), ("n0/pcie0", "n0/cpu0"), ("n0/cpu0",), ("n0/cpu0", "n0/pcie0")]
    keys = tuple(("link", *h) if len(h) == 2 else ("mem", *h) for h in [*hops, ("n0/pcie0", "n0/gpu1")])
    path = ("n0/gpu0->n0/pcie0", "n0/pcie0->n0/cpu0", "n0/cpu0 memory", "n0/cpu0->n0/pcie0", "n0/pcie0->n0/gpu1")
    launch, shm = TAGS["launch + base latency"], TAGS["SHM via host memory"]
    recs = [
        FlowRecord(_rank(0), launch, 0.0, 0.0, 2e-6, 0.0, ()),
        FlowRecord(_rank(1), launch, 0.0, 0.0, 2e-6, 0.0, ()),
        FlowRecord(_rank(0), shm, 1000.0, 2e-6, 5e-6, 1e-6, path, (1.0,) * 5, keys),
    ]
    fig = timeline_figure(_outcome(recs, 6e-6), pcie.topology)
    got = [(t.name, list(t.y), list(t.base), list(t.x)) for t in fig.data]
    assert got == [
        ("send", ["rank 0 ch 0"], [2.0], [pytest.approx(3.0)]),
        ("receive", ["rank 1 ch 0"], [3.0], [pytest.approx(3.0)]),
        ("overhead", ["rank 0 ch 0", "rank 1 ch 0"], [0.0, 0.0], [2.0, 2.0]),
    ]
    assert all(t.orientation == "h" for t in fig.data)
    # rank 1 receives while its launch is over; rank 0 sends after its launch: no overlap, full-height bars
    assert list(fig.data[0].width) == [0.8] and list(fig.data[0].offset) == [-0.4]
    assert list(fig.layout.yaxis.categoryarray) == ["rank 0 ch 0", "rank 1 ch 0"]
    assert "showing" not in fig.layout.title.text
    assert "1000B" in fig.data[0].hovertext[0] and "to n0/gpu1" in fig.data[0].hovertext[0]


def test_timeline_figure_overlaps_share_a_row(pcie: Simulator) -> None:
    recs = [
        FlowRecord(_rank(0, None), TAGS["TCP over loopback"], 10.0, 0.0, 2e-6, 0.0, ("n0/cpu0 memory",)),
        FlowRecord(_rank(0, None), TAGS["CPU reduction"], 10.0, 1e-6, 3e-6, 0.0, ("n0 CPU cores",)),
    ]
    fig = timeline_figure(_outcome(recs, 3e-6, backend="gloo"), pcie.topology)
    (send, red) = fig.data
    assert (send.name, list(send.y), list(send.width), list(send.offset)) == ("send", ["rank 0"], [0.4], [-0.4])
    assert (red.name, list(red.width), list(red.offset)) == ("reduce", [0.4], [pytest.approx(0.0)])


def test_timeline_figure_every_rank_and_caps(hgx: Simulator) -> None:
    full = Simulator(unsymmetric(hgx.scenario))
    out = full.simulate_one("nccl", 64 * 1024, record=True)  # Ring/LL on 8 channels (shrunk to 2, LL cells x4)
    fig = timeline_figure(out, full.topology, max_bars=100_000)
    labels = list(fig.layout.yaxis.categoryarray)
    assert labels == [f"rank {r} ch {c}" for r in range(8) for c in range(out.channels or 0)]
    ends = [b + x for t in fig.data for b, x in zip(t.base, t.x, strict=True)]
    assert max(ends) <= out.time_s * 1e6 * (1 + 1e-9)
    sends = sum(len(t.x) for t in fig.data if t.name == "send")
    assert sends == sum(1 for r in out.records if r.size > 0)
    capped = timeline_figure(out, full.topology, max_rows=16, max_bars=100_000)
    assert list(capped.layout.yaxis.categoryarray) == [f"rank {r} ch {c}" for r in range(8) for c in range(2)]
    assert "channels 0-1 of 8" in capped.layout.title.text
    one_channel = sum(len(t.x) for t in fig.data) // (out.channels or 1)  # the bars of one channel's rows
    by_bars = timeline_figure(out, full.topology, max_bars=one_channel * 3 // 2)  # fewer channels, the whole span
    kept = list(by_bars.layout.yaxis.categoryarray)
    assert kept == [f"rank {r} ch 0" for r in range(8)] and "channel 0 of 8" in by_bars.layout.title.text
    assert max(b + x for t in by_bars.data for b, x in zip(t.base, t.x, strict=True)) == pytest.approx(max(ends))
    few = timeline_figure(out, full.topology, max_rows=8, max_bars=10)  # fewer than rows x activities
    pairs = {(y, t.name) for t in few.data for y in t.y}
    assert sum(len(t.x) for t in few.data) == len(pairs)  # one merged bar per row and activity: never cut further
    assert "channel 0 of 8" in few.layout.title.text and "(per row and activity, 1 bins of" in few.layout.title.text
    assert max(b + x for t in few.data for b, x in zip(t.base, t.x, strict=True)) == pytest.approx(max(ends))
    with pytest.raises(ValueError, match="max_rows"):
        timeline_figure(out, full.topology, max_rows=0)


def test_timeline_figure_merges_bars_over_the_whole_collective() -> None:
    """Over ``max_bars``: each row's bars of one activity merge into time bins, so the shapes stay within the cap,
    the drawing covers the whole collective (first start to last end), and every byte is still counted."""
    ring = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_ALGO=Ring", "engine.symmetry=false"])
    out = ring.simulate_one("nccl", 4 * 1024 * 1024, record=True)  # Ring/LL128: 232 bars on channel 0
    full = ring
    every = timeline_figure(out, full.topology, max_rows=8, max_bars=1_000_000)  # channel 0, every bar
    assert "merged" not in every.layout.title.text
    for cap in (100, 200):
        fig = timeline_figure(out, full.topology, max_rows=8, max_bars=cap)
        n = sum(len(t.x) for t in fig.data)
        assert 0.5 * cap < n <= cap and "merged into" in fig.layout.title.text
        for t, e in zip(fig.data, every.data, strict=True):
            assert t.name == e.name and set(t.y) == set(e.y)  # the same rows and activities
            assert min(t.base) == pytest.approx(min(e.base), abs=1e-9)
            ends = [b + x for b, x in zip(t.base, t.x, strict=True)]
            assert max(ends) == pytest.approx(max(b + x for b, x in zip(e.base, e.x, strict=True)), rel=1e-12)
            assert all(x >= 0 for x in t.x)
        sent = [h for t in fig.data if t.name == "send" for h in t.hovertext]
        assert all(" merged (" in h and "busy " in h for h in sent)
    # bytes are kept: the merged bars' bytes (pro rata of time) add up to the records'
    from collsim.trace import flow_bars, merge_bars, rank_map

    bars = [b for b in flow_bars(out.records, rank_map(full.topology)) if b.lane.channel == 0]
    merged = merge_bars(bars, 500, out.time_s)
    assert len(merged.bars) <= 500 and "bins of" in merged.note and merged.merged_from == len(bars)
    assert sum(m.count for m in merged.bars) >= len(bars)  # a bar straddling a bin edge counts in both bins
    for act in ("send", "receive"):
        want = sum(b.nbytes for b in bars if b.activity == act)
        assert sum(m.bar.nbytes for m in merged.bars if m.bar.activity == act) == pytest.approx(want, rel=1e-9)


def test_timeline_figure_notes_symmetry(hgx: Simulator) -> None:
    out = hgx.simulate_one("nccl", 64 * 1024, record=True)
    fig = timeline_figure(out, hgx.topology)
    assert "symmetry on" in fig.layout.title.text


# ------------------------------------------------------------------------------------------------ links


def _link_records() -> list[FlowRecord]:
    tcp = TAGS["TCP over network"]
    return [
        FlowRecord(_rank(0, None), tcp, 1e6, 0.0, 1e-3, 0.0, ("a->b", "n0/cpu0 memory")),
        FlowRecord(_rank(1, None), tcp, 0.5e6, 1e-3, 1.5e-3, 0.0, ("c->d",)),
    ]


CAPS = {"a->b": ("pcie", 1e9), "c->d": ("nvlink", 2e9), "n0/cpu0 memory": ("hostmem", 4e9)}


def test_link_utilisation_figure_heatmap() -> None:
    fig = link_utilisation_figure(_link_records(), CAPS, total_s=2e-3, bins=4)
    (hm,) = fig.data
    assert hm.type == "heatmap"
    assert list(hm.y) == ["a->b (pcie)", "n0/cpu0 memory (hostmem)", "c->d (nvlink)"]  # by load share
    assert list(hm.x) == pytest.approx([250.0, 750.0, 1250.0, 1750.0])  # bin centres in us
    assert [list(row) for row in hm.z] == [
        pytest.approx([1.0, 1.0, 0.0, 0.0]),
        pytest.approx([0.25, 0.25, 0.0, 0.0]),
        pytest.approx([0.0, 0.0, 0.5, 0.0]),
    ]
    top = link_utilisation_figure(_link_records(), CAPS, total_s=2e-3, bins=4, max_links=1)
    assert list(top.data[0].y) == ["a->b (pcie)"] and "top 1 of 3" in top.layout.title.text


def test_bottleneck_figure_shares() -> None:
    fig = bottleneck_figure(_link_records(), CAPS, total_s=2e-3, top=2)
    load, busy = fig.data
    assert (load.name, busy.name) == ("load (charged / bandwidth)", "busy (>= 1 flow)")
    assert list(load.y) == ["a->b (pcie)", "n0/cpu0 memory (hostmem)"]
    assert list(load.x) == pytest.approx([50.0, 12.5])  # 1 MB / 1 GB/s = 1 ms of 2; 1 MB / 4 GB/s
    assert list(busy.x) == pytest.approx([50.0, 50.0])


def test_link_figures_from_a_simulation(pcie: Simulator) -> None:
    full = Simulator(unsymmetric(pcie.scenario))
    out = full.simulate_one("gloo", MiB, record=True)
    fig = bottleneck_figure(out.records, full.topology, total_s=out.time_s, top=3)
    assert len(fig.data[0].y) == 3 and all(0 < x <= 100 for x in fig.data[1].x)
    hm = link_utilisation_figure(out.records, full.topology, total_s=out.time_s, bins=20).data[0]
    assert len(hm.x) == 20 and "n0/cpu0 memory (hostmem)" in list(hm.y)


# ------------------------------------------------------------------------------------------------ topology


def test_topology_figure_pcie_box(pcie: Simulator) -> None:
    fig = topology_figure(pcie.topology)
    names = [t.name for t in fig.data]
    assert names == ["pcie", "link specs", "gpu", "cpu", "pcie_switch"]
    lines = fig.data[0]
    assert lines.mode == "lines" and list(lines.x).count(None) == 3  # cpu0-pcie0, pcie0-gpu0, pcie0-gpu1
    specs = fig.data[1]
    assert len(specs.x) == 3 and all("GB/s" in t for t in specs.hovertext)
    gpus = fig.data[2]
    assert list(gpus.text) == ["gpu0", "gpu1"] and all("rtx-2080ti" in h for h in gpus.hovertext)
    assert "memcpy_latency: 10.00 us" in gpus.hovertext[0]
    cpu = fig.data[3]
    assert cpu.y[0] > fig.data[4].y[0] > gpus.y[0]  # CPU above the switch above the GPUs


def test_topology_figure_widths_follow_bandwidth(hgx: Simulator) -> None:
    fig = topology_figure(hgx.topology)
    width = {t.name: t.line.width for t in fig.data if t.mode == "lines"}
    assert set(width) == {"nvlink", "pcie", "upi"}
    assert width["nvlink"] == 8 and width["nvlink"] > width["pcie"] > width["upi"] >= 1
    kinds = [t.name for t in fig.data if t.mode != "lines" and t.name != "link specs"]
    assert kinds == ["gpu", "cpu", "pcie_switch", "nic", "nvswitch"]
    assert sum(len(t.x) for t in fig.data if t.name in kinds) == len(hgx.topology.devices())


def test_topology_figure_node_cap() -> None:
    topo = Simulator.from_source("16node-h100-ib").topology
    fig = topology_figure(topo, max_nodes=2)
    gpus = next(t for t in fig.data if t.name == "gpu")
    assert len(gpus.x) == 16 and "nodes 0-1 of 16" in fig.layout.title.text
    with pytest.raises(ValueError, match=r"nodes 0\.\.15"):
        topology_figure(topo, nodes=[16])


def test_path_matrix_matches_collsim_topo(hgx: Simulator) -> None:
    fig = path_matrix_figure(hgx.topology)
    (hm,) = fig.data
    assert list(hm.y) == [f"GPU{i}" for i in range(8)]
    assert list(hm.x) == [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(8)]
    lines = format_topo_matrix(hgx.topology).splitlines()
    rows = [ln.split()[1:-1] for ln in lines if ln.startswith("GPU") and not ln.startswith("GPU0  GPU1")]
    assert [list(r) for r in hm.text] == rows  # the same cells as `collsim topo`
    assert hm.text[0][0] == "X" and hm.text[0][1] == "NV18" and hm.text[0][8] == "PIX"
    assert hm.z[0][0] == 0 and hm.z[0][1] == PATH_TYPE_ORDER.index("NV#") and hm.z[0][8] == 2
    assert hm.z[0][15] == PATH_TYPE_ORDER.index("SYS")
    # X/LOC, NV#/NVL(+NVB), PIX, PXB, PHB, SYS, NET: nvidia-smi's view has no NCCL C2C or P2C (a Grace's GPU: PHB)
    assert set(PATH_CLASS_ORDER) - {"LOC", "NVL", "NVB", "C2C", "P2C"} == set(PATH_TYPE_ORDER) - {"X", "NV#"}
    with pytest.raises(ValueError, match=r"nodes 0\.\.0"):
        path_matrix_figure(hgx.topology, node=1)


def test_path_matrix_cpu_only() -> None:
    sim = Simulator.from_source({"name": "c", "cluster": {"node": "cpu-host"}, "backends": {"gloo": {"device": "cpu"}}})
    fig = path_matrix_figure(sim.topology)
    hm = fig.data[0]
    assert list(hm.x) == [f"NIC{n.index}" for n in sim.topology.nics(0)]
    assert list(hm.y) == [c.local_name for c in sim.topology.devices("cpu", 0)]
    assert all(not math.isnan(v) for row in hm.z for v in row)
