"""Tests of collsim.trace: lanes, bars, link usage against closed forms, and the Chrome trace format."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from collsim.api import Simulator
from collsim.backends import TAGS, Outcome
from collsim.backends.common import ResourceCatalog, resource_name
from collsim.cli import main
from collsim.engine import FlowRecord, Owner, Tag
from collsim.trace import (
    TRACE_MAX_EVENTS,
    Lane,
    activity,
    chrome_trace,
    flow_bars,
    link_usage,
    owner_lane,
    pack_lanes,
    rank_map,
    representative_size,
    resource_capacities,
    strip_symmetric,
    unsymmetric,
    write_chrome_trace,
)

MiB = 2**20


@pytest.fixture(scope="module")
def hgx_full() -> Simulator:
    """hgx-h100 with symmetry off: every rank and channel simulated."""
    return Simulator(unsymmetric(Simulator.from_source("hgx-h100").scenario))


@pytest.fixture(scope="module")
def hgx_trace(hgx_full: Simulator) -> tuple[list[Outcome], dict[str, Any]]:
    outs = [hgx_full.simulate_one(b, 256 * 1024, record=True) for b in ("nccl", "gloo")]  # NCCL: Ring/LL, 8 channels
    doc = json.loads(json.dumps(chrome_trace(outs, hgx_full.topology, title="t", max_events=None)))  # JSON round trip
    return outs, doc


# ------------------------------------------------------------------------------------------------ small pieces


def test_representative_size() -> None:
    assert representative_size([8, 8 * 1024**3]) == 64 * MiB
    assert representative_size([8, 4096]) == 4096
    assert representative_size([]) == 64 * MiB


def test_strip_symmetric_and_unsymmetric() -> None:
    assert strip_symmetric("n0/gpu0->n0/nvswitch (+7 symmetric)") == "n0/gpu0->n0/nvswitch"
    assert strip_symmetric("n0/cpu0 memory") == "n0/cpu0 memory"
    sc = Simulator.from_source("hgx-h100").scenario
    off = unsymmetric(sc)
    assert sc.engine.symmetry is True and off.engine.symmetry is False
    assert off.source_file == sc.source_file and off.name == sc.name


def _rank(rank: int, channel: int | None = 0) -> Owner:
    return Owner(rank, channel, "rank", f"n0/gpu{rank}")


def test_owner_lane_forms() -> None:
    assert owner_lane(_rank(1, 3)) == Lane(0, 1, 3, "rank 1 ch 3", "n0/gpu1")
    assert owner_lane(_rank(1, None)) == Lane(0, 1, -1, "rank 1", "n0/gpu1")
    assert owner_lane(_rank(1, None)).device == "n0/gpu1"
    sharp = owner_lane(Owner(None, 0, "in-network reducer", "fabric/leaf0", index=0))
    assert (sharp.group, sharp.rank, sharp.label) == (1, -1, "in-network reducer 0 ch 0 (fabric/leaf0)")
    assert sorted([sharp, owner_lane(_rank(1, None)), owner_lane(_rank(0, None))])[-1] == sharp  # ranks first


def test_activity_is_the_declared_one() -> None:
    expect = {
        "CPU reduction": "reduce",
        "GPU reduction (HBM)": "reduce",
        "H2D copy (PCIe)": "copy",
        "CPU copy": "copy",
        "launch + base latency": "overhead",
        "enqueue on worker thread": "overhead",
        "NVLink": "send",
        "TCP over loopback": "send",
        "network (in-network reduction)": "send",
    }
    assert {label: activity(TAGS[label]) for label in expect} == expect
    assert activity(Tag("anything", "copy", "")) == "copy"  # read from the tag, not from its label


def _shm_path() -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    keys = (
        ("link", "n0/gpu0", "n0/pcie0"),
        ("link", "n0/pcie0", "n0/cpu0"),
        ("mem", "n0/cpu0"),
        ("link", "n0/cpu0", "n0/pcie0"),
        ("link", "n0/pcie0", "n0/gpu1"),
    )
    return tuple(resource_name(k) for k in keys), keys


def test_flow_bars_send_and_receive() -> None:
    ranks = {"n0/gpu0": 0, "n0/gpu1": 1}
    path, keys = _shm_path()
    launch, shm = TAGS["launch + base latency"], TAGS["SHM via host memory"]
    recs = [
        FlowRecord(_rank(0), launch, 0.0, 0.0, 2e-6, 0.0, ()),
        FlowRecord(_rank(0), shm, 1000.0, 2e-6, 5e-6, 1e-6, path, (1.0,) * 5, keys),
        FlowRecord(_rank(0), shm, 0.0, 6e-6, 6e-6, 0.0, ()),  # no duration: no bar
    ]
    bars = flow_bars(recs, ranks)
    assert [(b.lane.label, b.activity, b.start, b.end, b.peer) for b in bars] == [
        ("rank 0 ch 0", "overhead", 0.0, 2e-6, None),
        ("rank 0 ch 0", "send", 2e-6, 5e-6, "n0/gpu1"),
        ("rank 1 ch 0", "receive", 3e-6, 6e-6, "n0/gpu0"),  # shifted by the 1 us latency
    ]
    assert bars[1].tag is shm and bars[2].tag is shm
    assert [b.activity for b in flow_bars(recs, ranks, receives=False)] == ["overhead", "send"]
    # a path that ends at the sender's own GPU (NVLS) or at host memory (Gloo TCP) has no receiver
    nvls_keys = (("link", "n0/gpu0", "n0/sw"), ("link", "n0/sw", "n0/gpu0"))
    nvls = FlowRecord(_rank(0), TAGS["NVLink (NVLS)"], 1.0, 0.0, 1.0, 0.0, ("x", "y"), (1.0, 1.0), nvls_keys)
    tcp = FlowRecord(_rank(0), TAGS["TCP over loopback"], 1.0, 0.0, 1.0, 0.0, ("m",), (4.0,), (("mem", "n0/cpu0"),))
    assert [b.activity for b in flow_bars([nvls, tcp], ranks)] == ["send", "send"]
    # the receiver comes from the record's resource keys, not from its display names
    renamed = FlowRecord(_rank(0), shm, 1000.0, 2e-6, 5e-6, 1e-6, ("a", "b", "c", "d", "e"), (1.0,) * 5, keys)
    assert [b.lane.label for b in flow_bars([renamed], ranks)] == ["rank 0 ch 0", "rank 1 ch 0"]


def test_a_reducer_sending_down_is_received_on_the_rank_channel() -> None:
    # CollNet's in-network reducer is not a rank: a lane of its own; the sum it sends down arrives on the GPU's
    # lane of the reducer's channel
    reducer = Owner(None, 3, "in-network reducer", "fabric/leaf0", index=0)
    keys = (("link", "fabric/leaf0", "n0/nic0"), ("link", "n0/nic0", "n0/gpu1"))
    down = FlowRecord(reducer, TAGS["network (in-network reduction)"], 8.0, 0.0, 1.0, 0.5, ("a", "b"), (1.0, 1.0), keys)
    bars = flow_bars([down], {"n0/gpu0": 0, "n0/gpu1": 1})
    got = [(b.lane.label, b.activity, b.peer) for b in bars]
    assert got == [
        ("in-network reducer 0 ch 3 (fabric/leaf0)", "send", "n0/gpu1"),
        ("rank 1 ch 3", "receive", "in-network reducer 0 ch 3 (fabric/leaf0)"),
    ]


def test_pack_lanes_separates_overlaps() -> None:
    tags = {c: Tag(c, "send", "") for c in "abcd"}
    recs = [
        FlowRecord(_rank(0, None), tags["a"], 1.0, 0.0, 2.0, 0.0, ()),
        FlowRecord(_rank(0, None), tags["b"], 1.0, 1.0, 3.0, 0.0, ()),
        FlowRecord(_rank(0, None), tags["c"], 1.0, 2.0, 4.0, 0.0, ()),
        FlowRecord(_rank(1, None), tags["d"], 1.0, 1.0, 2.0, 0.0, ()),
    ]
    bars = flow_bars(recs, {})
    assert [(b.tag.label, s) for b, s in zip(bars, pack_lanes(bars), strict=True)] == [
        ("a", 0),
        ("b", 1),
        ("d", 0),  # another lane
        ("c", 0),  # a ended at 2.0
    ]


# ------------------------------------------------------------------------------------------------ link usage


def test_link_usage_closed_form() -> None:
    """Two 1 MB flows at 1 GB/s each on a 2 GB/s link, overlapping half their time, in 2 ms cut in 4 bins."""
    x = Tag("x", "send", "")
    recs = [
        FlowRecord(_rank(0, None), x, 1e6, 0.0, 1e-3, 0.0, ("a->b",)),
        FlowRecord(_rank(1, None), x, 1e6, 0.5e-3, 1.5e-3, 0.0, ("a->b (+3 symmetric)",)),
        FlowRecord(_rank(1, None), x, 1e6, 0.0, 1e-3, 0.0, ("n0 CPU cores",)),  # not in bytes: ignored
    ]
    (u,) = link_usage(recs, {"a->b": ("pcie", 2e9)}, total_s=2e-3, bins=4)
    assert (u.name, u.kind, u.capacity) == ("a->b", "pcie", 2e9)
    assert u.nbytes == pytest.approx(2e6)
    assert u.busy_s == pytest.approx(1.5e-3)
    assert u.busy_share == pytest.approx(0.75)
    assert u.load_share == pytest.approx(0.5)  # 2 MB at 2 GB/s = 1 ms of 2 ms
    assert [float(x) for x in u.utilisation] == pytest.approx([0.5, 1.0, 0.5, 0.0])
    assert [float(x) for x in u.edges] == pytest.approx([0.0, 0.5e-3, 1e-3, 1.5e-3, 2e-3])
    with pytest.raises(ValueError, match="bins"):
        link_usage(recs, {}, bins=0)


def test_link_usage_uses_record_coefficients_when_present() -> None:
    """A record type that carries per-resource coefficients (e.g. LL's 2 wire bytes per data byte) is honoured."""

    rec = FlowRecord(_rank(0, None), Tag("x", "send", ""), 1e6, 0.0, 1e-3, 0.0, ("a->b",), (2.0,))
    (u,) = link_usage([rec], {"a->b": ("nvlink", 2e9)}, total_s=1e-3, bins=1)
    assert float(u.utilisation[0]) == pytest.approx(1.0)


def test_link_usage_follows_the_rate_history() -> None:
    """The engine's docstring case: 1 MB and 2 MB share a 1 GB/s link (0.5 GB/s each for 2 ms), then the second
    runs alone (1 GB/s for 1 ms). At average rates the second flow's 0.667 GB/s over 0-3 ms plus the first's
    0.5 GB/s read 1.167 in the first 2 ms; with the rate history the saturated link reads 1.0 in every bin."""
    import simpy

    from collsim.engine import FluidNetwork

    env = simpy.Environment()
    net = FluidNetwork(env, record=True)
    link = net.resource("a->b", 1e9)
    net.transfer(1e6, [(link, 1.0)])
    net.transfer(2e6, [(link, 1.0)])
    env.run()
    assert [r.rates for r in net.records] == [((0.0, 5e8),), ((0.0, 5e8), (pytest.approx(2e-3), 1e9))]
    (u,) = link_usage(net.records, {"a->b": ("pcie", 1e9)}, total_s=3e-3, bins=6)
    assert u.utilisation.max() <= 1.0 and u.utilisation.min() >= 1.0 - 1e-9
    assert u.busy_share == pytest.approx(1.0) and u.load_share == pytest.approx(1.0)
    averaged = [dataclasses.replace(r, rates=()) for r in net.records]  # what the trace read before
    (v,) = link_usage(averaged, {"a->b": ("pcie", 1e9)}, total_s=3e-3, bins=6)
    assert float(v.utilisation[0]) == pytest.approx(7 / 6)


@pytest.mark.parametrize(("protocol", "saturates"), [("LL", False), ("LL128", True), ("Simple", True)])
def test_saturated_links_read_one_in_a_multi_node_trace(protocol: str, saturates: bool) -> None:
    """2 x DGX A100 over IB with every rank simulated: the busiest links read 1.0 (within 1e-9) and none reads
    more, whatever the protocol's wire overhead (LL: 2 units per data byte; its per-channel rate cap leaves the
    links below saturation), in link_usage and in the trace's counters; the bytes match the average-rate view (only
    their placement in time differs)."""
    env = [f"backends.nccl.env.NCCL_PROTO={protocol}"]
    sim = Simulator(unsymmetric(Simulator.from_source("2node-a100-ib", env).scenario))
    # 16 MiB: since each direction of a tree channel has half its rate (runTreeSplit), Tree/Simple at 4 MiB leaves
    # the links at 0.94
    outs = [sim.recorded("nccl", 16 * MiB), sim.recorded("gloo", MiB)]
    assert outs[0].protocol == protocol
    caps = resource_capacities(sim.topology)
    for out in outs:
        usage = link_usage(out.records, caps, total_s=out.time_s, bins=200)
        peak = max(float(u.utilisation.max()) for u in usage)
        assert peak <= 1.0, (out.backend, peak)
        assert peak >= 1.0 - 1e-9 or (out.backend == "nccl" and not saturates), (out.backend, peak)
        averaged = link_usage([dataclasses.replace(r, rates=()) for r in out.records], caps, total_s=out.time_s)
        assert {u.name: u.nbytes for u in usage} == pytest.approx({u.name: u.nbytes for u in averaged}, rel=1e-9)
    doc = chrome_trace(outs, sim.topology)
    counters = [e["args"]["utilisation"] for e in doc["traceEvents"] if e["ph"] == "C"]
    assert max(counters) == 1.0  # Gloo's staging copies saturate PCIe


def test_resource_capacities_match_topology(hgx_full: Simulator) -> None:
    caps = resource_capacities(hgx_full.topology)
    ln = hgx_full.topology.link("n0/gpu0", "n0/nvswitch")
    assert caps["n0/gpu0->n0/nvswitch"] == ("nvlink", ln.bandwidth)
    cpu = hgx_full.topology.device("n0/cpu0")
    assert caps["n0/cpu0 memory"] == ("hostmem", float(cpu.spec["memory_bandwidth"]))
    assert caps["n0/gpu3 HBM"][0] == "hbm"
    assert "n0 CPU cores" not in caps
    # the same names as the resources the backends simulate: one function makes them
    specs = ResourceCatalog(hgx_full.topology).specs
    assert {resource_name(k) for k in specs} == {spec.name for spec in specs.values()} > set(caps)
    assert resource_name(("link", "n0/gpu0", "n0/nvswitch")) == "n0/gpu0->n0/nvswitch"
    with pytest.raises(ValueError, match="not a resource key"):
        resource_name(("nvlink", "n0/gpu0"))


def test_records_name_their_owner_and_resource_keys(hgx_full: Simulator) -> None:
    out = hgx_full.simulate_one("nccl", 256 * 1024, record=True)
    sends = [r for r in out.records if r.size > 0]
    assert sends and all(r.owner.rank is not None and r.owner.channel is not None for r in sends)
    assert all(r.owner.device == f"n0/gpu{r.owner.rank}" for r in out.records)
    for r in sends:
        assert len(r.keys) == len(r.resources) and [resource_name(k) for k in r.keys] == list(r.resources)


def test_simulated_link_usage_bounded(hgx_full: Simulator) -> None:
    """A Ring/Simple collective (one byte on the wire per data byte): no link above its bandwidth on average."""
    env = ["backends.nccl.env.NCCL_ALGO=Ring", "backends.nccl.env.NCCL_PROTO=Simple"]
    sim = Simulator(unsymmetric(Simulator.from_source("hgx-h100", env).scenario))
    out = sim.simulate_one("nccl", 4 * MiB, record=True)
    assert (out.algorithm, out.protocol) == ("Ring", "Simple")
    usage = link_usage(out.records, resource_capacities(sim.topology), total_s=out.time_s, bins=50)
    assert len(usage) == 16  # 8 GPUs, up and down to the NVSwitch
    assert all(0 < u.load_share <= 1 + 1e-6 and 0 < u.busy_share <= 1 + 1e-9 for u in usage)
    assert all(float(u.utilisation.max()) <= 1 + 1e-6 for u in usage)


# ------------------------------------------------------------------------------------------------ Chrome trace

REQUIRED = {"X": {"name", "ph", "ts", "dur", "pid", "tid"}, "M": {"name", "ph", "pid", "tid", "args"}}
REQUIRED["C"] = {"name", "ph", "ts", "pid", "tid", "args"}


def _check_format(doc: dict[str, Any]) -> None:
    assert isinstance(doc["traceEvents"], list) and doc["traceEvents"]
    for ev in doc["traceEvents"]:
        assert ev["ph"] in REQUIRED, ev
        missing = REQUIRED[ev["ph"]] - set(ev)
        assert not missing, f"{ev} lacks {missing}"
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int) and isinstance(ev["name"], str)
        if ev["ph"] == "X":
            assert ev["ts"] >= 0 and ev["dur"] > 0
        if ev["ph"] == "C":
            assert all(isinstance(v, float) and math.isfinite(v) and v >= 0 for v in ev["args"].values())
        if ev["ph"] == "M":
            assert ev["name"] in {
                "process_name",
                "process_sort_index",
                "process_labels",
                "thread_name",
                "thread_sort_index",
            }


def _process_names(doc: dict[str, Any]) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}


def test_trace_format_and_every_rank(hgx_trace: tuple[list[Outcome], dict[str, Any]]) -> None:
    outs, doc = hgx_trace
    _check_format(doc)
    names = _process_names(doc)
    for out in outs:
        for r in range(8):
            pids = [p for p, n in names.items() if n == f"{out.backend} allreduce rank {r} (n0/gpu{r})"]
            assert len(pids) == 1, (out.backend, r)
            assert any(e["ph"] == "X" and e["pid"] == pids[0] for e in doc["traceEvents"]), (out.backend, r)
    # NCCL: a thread per channel on every rank
    threads = {
        (e["pid"], e["args"]["name"]) for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"
    }
    rank0 = next(p for p, n in names.items() if n.startswith("nccl allreduce rank 0"))
    channels = {n for p, n in threads if p == rank0 and n.startswith("channel ") and "(" not in n}
    assert len(channels) == outs[0].channels
    assert doc["otherData"]["collectives"][0]["ranks_with_events"] == 8


def test_trace_times_match_simulation(hgx_trace: tuple[list[Outcome], dict[str, Any]]) -> None:
    """Every event lies within [0, time]; the last arrival (end + latency of a non-receive event) is the time."""
    outs, doc = hgx_trace
    names = _process_names(doc)
    for out, info in zip(outs, doc["otherData"]["collectives"], strict=True):
        assert info["time_us"] == pytest.approx(out.time_s * 1e6)
        xs = [e for e in doc["traceEvents"] if e["ph"] == "X" and names[e["pid"]].startswith(out.backend + " ")]
        assert min(e["ts"] for e in xs) == 0.0
        assert max(e["ts"] + e["dur"] for e in xs) <= out.time_s * 1e6 * (1 + 1e-9) + 1e-6
        arrival = max(e["ts"] + e["dur"] + e["args"].get("latency_us", 0.0) for e in xs if e["cat"] != "receive")
        assert arrival == pytest.approx(out.time_s * 1e6, rel=1e-9, abs=2e-6)
        # bytes sent add up to what the flows moved
        sent = sum(e["args"]["bytes"] for e in xs if e["cat"] == "send")
        assert sent == pytest.approx(sum(r.size for r in out.records if activity(r.tag) == "send"))


def _assert_threads_never_overlap(doc: dict[str, Any]) -> None:
    """Complete events on one thread must nest; ours never overlap at all."""
    by_thread: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 1e-9


def test_trace_threads_never_overlap(hgx_trace: tuple[list[Outcome], dict[str, Any]]) -> None:
    """Complete events on one thread must nest; ours never overlap at all."""
    _, doc = hgx_trace
    _assert_threads_never_overlap(doc)


def test_trace_counters_per_busy_link(hgx_trace: tuple[list[Outcome], dict[str, Any]]) -> None:
    outs, doc = hgx_trace
    names = _process_names(doc)
    link_pid = next(p for p, n in names.items() if n == "nccl allreduce links (utilisation)")
    counters: dict[str, list[dict[str, Any]]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "C" and e["pid"] == link_pid:
            counters.setdefault(e["name"], []).append(e)
    # Ring over the NVSwitch: every GPU's up and down NVLink is busy
    assert set(counters) == {f"n0/gpu{g}->n0/nvswitch" for g in range(8)} | {
        f"n0/nvswitch->n0/gpu{g}" for g in range(8)
    }
    for evs in counters.values():
        assert evs[-1]["args"]["utilisation"] == 0.0  # the counter drops to zero by the end
        assert evs[0]["ts"] == 0.0 and evs[-1]["ts"] <= outs[0].time_s * 1e6 + 1e-6
        assert all(a["args"]["utilisation"] != b["args"]["utilisation"] for a, b in itertools.pairwise(evs))
        assert max(e["args"]["utilisation"] for e in evs) > 0.1


def test_a_bounded_trace_merges_bars_and_keeps_times_and_bytes(
    hgx_full: Simulator, hgx_trace: tuple[list[Outcome], dict[str, Any]]
) -> None:
    """With ``max_events`` below the bars, each outcome gets at most its share of activity events; the merged
    events still start at 0, end with the last arrival at the collective's time, never overlap on a thread, and
    carry every byte sent; ``otherData`` says how it was cut."""
    outs, full = hgx_trace
    limit = 2000
    doc = json.loads(json.dumps(chrome_trace(outs, hgx_full.topology, max_events=limit)))
    _check_format(doc)
    names = _process_names(doc)
    infos = doc["otherData"]["collectives"]
    full_infos = full["otherData"]["collectives"]
    assert [c["detail"] for c in full_infos] == ["full", "full"]
    for out, info, whole in zip(outs, infos, full_infos, strict=True):
        xs = [e for e in doc["traceEvents"] if e["ph"] == "X" and names[e["pid"]].startswith(out.backend + " ")]
        assert info["bars"] == whole["bars"]
        if whole["bars"] <= limit // 2:
            assert info["detail"] == "full"
            continue
        assert info["detail"] == "merged" and len(xs) == info["events"] <= limit // 2 and info["bin_us"] > 0
        assert min(e["ts"] for e in xs) == 0.0
        arrival = max(e["ts"] + e["dur"] + e["args"].get("latency_us", 0.0) for e in xs if e["cat"] != "receive")
        assert arrival == pytest.approx(out.time_s * 1e6, rel=1e-9, abs=2e-6)
        for cat in ("send", "receive"):
            want = sum(e["args"]["bytes"] for e in full["traceEvents"] if e["ph"] == "X" and e.get("cat") == cat
                       and names[e["pid"]].startswith(out.backend + " "))  # fmt: skip
            assert sum(e["args"]["bytes"] for e in xs if e["cat"] == cat) == pytest.approx(want, rel=1e-9)
        assert all(e["args"]["merged"] >= 1 and e["args"]["tags"] for e in xs)
    assert infos[0]["detail"] == "merged"  # NCCL's Ring/LL at 256 KiB: far more than 1000 bars
    _assert_threads_never_overlap(doc)
    with pytest.raises(ValueError, match="max_events"):
        chrome_trace(outs, hgx_full.topology, max_events=0)


def test_cli_trace_is_bounded_unless_full(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default trace of 2 x DGX A100 at 4 MiB (about 90,000 bars) is merged to at most 50,000 events and
    says so; --trace-full writes every bar."""
    small, big = tmp_path / "small.json", tmp_path / "big.json"
    base = ["run", "2node-a100-ib", "--sizes", "4MiB", "--backend", "nccl", "--trace"]
    assert main([*base, str(small)]) == 0
    err = capsys.readouterr().err
    assert "merged into" in err and "--trace-full" in err
    assert main([*base, str(big), "--trace-full", "--quiet"]) == 0
    docs = [json.loads(p.read_text()) for p in (small, big)]
    (lean,), (whole,) = (d["otherData"]["collectives"] for d in docs)
    assert lean["detail"] == "merged" and whole["detail"] == "full" and lean["bars"] == whole["bars"] > TRACE_MAX_EVENTS
    assert sum(e["ph"] == "X" for e in docs[0]["traceEvents"]) <= TRACE_MAX_EVENTS
    assert small.stat().st_size < big.stat().st_size


def test_trace_needs_records(hgx_full: Simulator) -> None:
    out = hgx_full.simulate_one("nccl", 4096)
    with pytest.raises(ValueError, match="record=True"):
        chrome_trace([out], hgx_full.topology)


def test_rank_map_order(hgx_full: Simulator) -> None:
    assert rank_map(hgx_full.topology) == {f"n0/gpu{g}": g for g in range(8)}


def test_write_chrome_trace(tmp_path: Path, hgx_trace: tuple[list[Outcome], dict[str, Any]]) -> None:
    _, doc = hgx_trace
    path = tmp_path / "t.json"
    write_chrome_trace(path, doc)
    assert json.loads(path.read_text()) == doc


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_run_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.json"
    rc = main(["run", "pcie-2gpu-nop2p", "--sizes", "1MiB,4MiB", "--trace", str(path)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "# Avg bus bandwidth" in out  # the tables are still printed
    assert "trace at 4MiB" in err and str(path) in err  # default: the largest size when below 64 MiB
    doc = json.loads(path.read_text())
    _check_format(doc)
    info = {c["backend"]: c for c in doc["otherData"]["collectives"]}
    assert set(info) == {"nccl", "gloo"} and all(c["size_bytes"] == 4 * MiB for c in info.values())
    assert all(c["ranks_with_events"] == 2 for c in info.values())


def test_cli_run_trace_size_and_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.json"
    rc = main(
        [
            "run",
            "pcie-2gpu-nop2p",
            "--sizes",
            "1MiB",
            "--backend",
            "gloo",
            "--trace",
            str(path),
            "--trace-size",
            "64KiB",
            "--quiet",
        ]
    )
    _, err = capsys.readouterr()
    assert rc == 0 and err == ""
    info = json.loads(path.read_text())["otherData"]["collectives"]
    assert [(c["backend"], c["size_bytes"]) for c in info] == [("gloo", 65536)]


def test_cli_run_trace_bad_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", "pcie-2gpu-nop2p", "--sizes", "1MiB", "--trace", str(tmp_path / "t.json"), "--trace-size", "2x"])
    _, err = capsys.readouterr()
    assert rc == 2
    assert err.startswith("collsim: error: --trace-size: ") and err.count("\n") == 1
    assert not (tmp_path / "t.json").exists()
