"""NCCL's INFO lines (collsim.calibration.nccllog) and `collsim explain --nccl-log`.

The sample lines follow NCCL's format strings (v2.30.7-1: init.cc, graph/rings.cc, transport/p2p.cc, shm.cc, net.cc,
net_ib/init.cc; 2.18's variants where they differ), with the prefixes launchers put before them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import tuner_times
from collsim.calibration.measurement import Measurement, MeasurementError, MeasurementRow
from collsim.calibration.nccllog import (
    HINTS,
    check_choices,
    check_plan,
    check_tuner,
    parse_nccl_log,
    read_nccl_log,
    render_checks,
    render_choices,
    render_tuner,
)
from collsim.calibration.validate import validate
from collsim.cli import main

#: NCCL 2.26's lines for two HGX H100 nodes over 8 NDR NICs, from two of the 16 ranks (lines repeat across ranks);
#: the formats are NCCL's, the values illustrative.
TWO_NODES = """\
[1,0]<stdout>:n1:42:42 [0] NCCL INFO NCCL version 2.26.2+cuda12.8
n1:42:60 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB [4]mlx5_6:1/IB \
[5]mlx5_9:1/IB [6]mlx5_10:1/IB [7]mlx5_11:1/IB [RO]; OOB ibp0:10.0.0.1<0>
n1:42:60 [0] NCCL INFO Using network IB
n1:42:60 [0] NCCL INFO comm 0x5a1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0
n1:43:61 [1] NCCL INFO comm 0x5b2 rank 1 nRanks 16 nNodes 2 localRanks 8 localRank 1 MNNVL 0
n1:42:60 [0] NCCL INFO Channel 00/16 :    0   1   2   3   4   5   6   7   8   9  10  11  12  13  14  15
n1:42:60 [0] NCCL INFO NVLS Head  0:  0  8
n1:42:60 [0] NCCL INFO NVLS Head  1:  1  9
n1:42:60 [0] NCCL INFO NVLS Head  2:  2 10
n1:42:60 [0] NCCL INFO NVLS Head  3:  3 11
n1:42:60 [0] NCCL INFO NVLS Head  4:  4 12
n1:42:60 [0] NCCL INFO NVLS Head  5:  5 13
n1:42:60 [0] NCCL INFO NVLS Head  6:  6 14
n1:42:60 [0] NCCL INFO NVLS Head  7:  7 15
n1:42:60 [0] NCCL INFO Trees [0] 8/-1/-1->0->-1 [1] -1/-1/-1->0->8
n1:42:62 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
n1:43:63 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/CUMEM/read
n1:42:62 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
n1:42:64 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/IB/0/GDRDMA
n1:49:65 [7] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/7/GDRDMA
n1:42:60 [0] NCCL INFO 16 coll channels, 0 collnet channels, 16 nvls channels, 32 p2p channels, 2 p2p channels per peer
#  Rank  0 Group  0 Pid     42 on n1 device  0 [0x18] NVIDIA H100 80GB HBM3
"""


def test_the_facts_an_info_log_gives() -> None:
    log = parse_nccl_log(TWO_NODES, source="run.log")
    assert (log.version, log.nranks, log.nnodes, log.local_ranks) == ("2.26.2", 16, 2, 8)
    assert (log.ring_channels, log.nvls_channels) == (16, 16)
    # the repeated P2P line counts once, the network connection by its [send] line only
    assert dict(log.transports) == {"P2P": 2, "NET/GDR": 1}
    assert log.network == "IB" and len(log.net_devices) == 8 and log.net_devices[0] == "mlx5_0:1/IB"
    assert not log.empty and parse_nccl_log("no NCCL here\n").empty


def test_a_log_of_several_communicators_says_so() -> None:
    """PyTorch jobs make several communicators (the world, subgroups); their channel and connection lines do not name
    which, so a log of more than one is compared with a note."""
    one = parse_nccl_log(TWO_NODES)
    assert one.communicators == [16] and one.notes() == []
    extra = "n1:42:70 [0] NCCL INFO comm 0x7f rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0\n"
    both = parse_nccl_log(TWO_NODES + extra)
    assert both.communicators == [16, 8] and both.nranks == 16
    (note,) = both.notes()
    assert note.startswith("the log holds communicators of 16, 8 ranks")
    text = render_checks(check_plan(both, {"nranks": 16}), "job.log", both.notes())
    assert text.splitlines()[-1] == f"# note: {note}"


def test_nccl_2_18_lines_and_the_trees_channel_count() -> None:
    """2.18 prints no nNodes and no collnet count; a log with only the trees line still gives the channels (one
    ``[c]`` entry each: the 2 x H100 PCIe bridge log of NVIDIA/nccl#1161 has [0] .. [23]); busIds in brackets."""
    trees = " ".join(f"[{c}] 1/-1/-1->0->-1" for c in range(24))
    text = (
        "h:1:1 [0] NCCL INFO NCCL version 2.18.5+cuda12.2\n"
        f"h:1:2 [0] NCCL INFO Trees {trees}\n"
        "h:1:3 [1] NCCL INFO Channel 00/0 : 1[21000] -> 0[1000] via P2P/direct pointer\n"
        "h:1:2 [0] NCCL INFO 24 coll channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer\n"
    )
    log = parse_nccl_log(text)
    assert (log.version, log.ring_channels, log.nvls_channels, log.nnodes) == ("2.18.5", 24, 0, None)
    assert dict(log.transports) == {"P2P": 1}
    only_trees = parse_nccl_log(f"h:1:2 [0] NCCL INFO Trees {trees}\n")
    assert only_trees.ring_channels == 24
    # that log's facts (24 channels, P2P between the two) are what the h100-pcie-nvlink-pair template plans
    pair = {"name": "pair", "cluster": {"node": "h100-pcie-nvlink-pair", "nodes": 1}, "backends": {"nccl": {}}}
    checks = {c.what: c for c in check_plan(log, Simulator.from_source(pair).nccl_plan_facts())}
    assert checks["ring/tree channels"].agree and checks["transports"].agree and checks["NVLS channels"].agree


def test_every_fact_agrees_with_the_shipped_two_node_scenario() -> None:
    sim = Simulator.from_source("2node-h100-ib", ["backends.nccl.version='2.26'"])  # the patch left out
    checks = check_plan(parse_nccl_log(TWO_NODES), sim.nccl_plan_facts())
    assert [c.what for c in checks] == [
        "NCCL release", "ranks", "nodes", "ranks per node", "ring/tree channels", "NVLS channels", "transports",
        "NICs NCCL lists (per node)", "NVLS heads (node 0's ranks)",
    ]  # fmt: skip
    assert all(c.agree for c in checks), [c for c in checks if not c.agree]
    assert not any(c.hint for c in checks)


def test_differences_are_flagged_with_what_to_change() -> None:
    # the scenario left at the latest tables, and P2P turned off: the log's P2P hops are SHM in collsim's plan
    sim = Simulator.from_source("2node-h100-ib", ["backends.nccl.env.NCCL_P2P_DISABLE=1"])
    checks = {c.what: c for c in check_plan(parse_nccl_log(TWO_NODES), sim.nccl_plan_facts())}
    assert checks["NCCL release"].agree is False and checks["NCCL release"].hint == HINTS["version"]
    assert (checks["transports"].log, checks["transports"].collsim) == ("NET/GDR, P2P", "NET/GDR, SHM")
    assert checks["transports"].agree is False and "NCCL_P2P_DISABLE" in checks["transports"].hint
    assert checks["ranks"].agree and checks["ranks"].hint == ""
    # a fact the log does not give is neither agreement nor difference
    bare = check_plan(parse_nccl_log("h [0] NCCL INFO NCCL version 2.26.2\n"), sim.nccl_plan_facts())
    assert [c.agree for c in bare][1:] == [None] * 8
    text = render_checks(list(checks.values()), "run.log")
    assert text.splitlines()[0] == "# collsim's plan against NCCL's log run.log"
    assert "# where they differ:" in text and "  transports: P2P or SHM" in text


def test_published_logs_of_h100_clusters_agree_with_collsims_plan() -> None:
    """Lines as two NCCL issues print them (facts only): NVIDIA/nccl#1453, 3 x 8 H100 on 8 NICs a node (16 ring
    channels, a NVLS head on every GPU), and NVIDIA/nccl#1357, 2 x 8 H100 on 4 NICs a node (16 channels, the NVLS
    heads on GPUs 0, 2, 4, 6: the GPU nearest each NIC). collsim's `hgx-h100` plans the same."""
    p1 = "[0] h100clust-worker-1:227602:227667 [0] NCCL INFO "
    three = "\n".join(
        [p1 + "comm 0x5639e9f0e8c0 rank 0 nRanks 24 nNodes 3 localRanks 8 localRank 0 MNNVL 0"]
        + [p1 + f"NVLS Head  {h}:  {h} {h + 8:2d} {h + 16:2d}" for h in range(8)]
        + [p1 + "Channel 00/16 :    0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9  16  23  22  21  20"
           "  19  18  17"]
    )  # fmt: skip
    p2 = "qh100-gpu19:49357:49418 [3] NCCL INFO "
    four_nics = "\n".join(
        [p2 + "comm 0x5555e0b324c0 rank 3 nRanks 16 nNodes 2 localRanks 8 localRank 3 MNNVL 0"]
        + [p2 + f"NVLS Head  {h}:  {2 * h} {2 * h + 8:2d}" for h in range(4)]
        + [p2 + "Trees " + " ".join(f"[{c}] 4/-1/-1->3->1" for c in range(16))]
    )
    fabric = {"topology": "rail_optimized", "transport": "rdma"}
    for text, nodes, nics in ((three, 3, None), (four_nics, 2, 4)):
        cluster = {"node": "hgx-h100", "nodes": nodes, "fabric": {**fabric, "nics_per_node": nics}}
        sim = Simulator.from_source({"name": "h100", "cluster": cluster, "backends": {"nccl": {}}})
        checks = {c.what: c for c in check_plan(parse_nccl_log(text), sim.nccl_plan_facts())}
        for what in ("ranks", "nodes", "ranks per node", "ring/tree channels", "NVLS heads (node 0's ranks)"):
            assert checks[what].agree, (nodes, checks[what])
    assert parse_nccl_log(four_nics).nvls_heads == {0: 0, 1: 2, 2: 4, 3: 6}


def test_read_nccl_log_errors(tmp_path: Path) -> None:
    with pytest.raises(MeasurementError, match=r"absent.log: file not found"):
        read_nccl_log(tmp_path / "absent.log")
    path = tmp_path / "nothing.log"
    path.write_text("# nThread 1 nGpus 8\n")
    with pytest.raises(MeasurementError, match=r"nothing.log: no NCCL INFO line collsim reads .* NCCL_DEBUG=INFO"):
        read_nccl_log(path)


def test_explain_with_an_nccl_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run.log"
    log.write_text(TWO_NODES)
    args = ["explain", "2node-h100-ib", "--sizes", "1GiB", "--quiet", "--nccl-log", str(log)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# collsim's plan against NCCL's log {log}")
    assert "  NCCL release" in out and "# collsim explain: 2node-h100-ib" in out
    assert main([*args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["nccl_log"]["file"] == str(log)
    assert {c["what"]: c["agree"] for c in doc["nccl_log"]["checks"]}["ranks"] is True
    assert main(["explain", "2node-h100-ib", "--quiet", "--nccl-log", str(tmp_path / "absent.log")]) == 2
    assert "absent.log: file not found" in capsys.readouterr().err
    # without NCCL there is no plan to set beside the log: an error, not the log silently left out
    assert main([*args, "--set", "backends.nccl.enabled=false"]) == 2
    assert "--nccl-log: the scenario's NCCL backend is disabled" in capsys.readouterr().err


#: NCCL_DEBUG_SUBSYS=TUNING lines (rank 0, one per call): 2.26's with the name and channels, 2.21's with indices.
TUNING = """\
n1:42:42 [0] NCCL INFO AllReduce: 1073741824 Bytes -> Algo NVLS_TREE proto SIMPLE channel{Lo..Hi}={0..15}
n1:42:42 [0] NCCL INFO AllReduce: 1073741824 Bytes -> Algo NVLS_TREE proto SIMPLE channel{Lo..Hi}={0..15}
n1:42:42 [0] NCCL INFO AllReduce: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..7}
n1:42:42 [0] NCCL INFO AllGather: 65536 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..15}
n1:42:42 [0] NCCL INFO AllReduce: 8 Bytes -> Algo BOGUS proto LL channel{Lo..Hi}={0..0}
"""


def test_the_choices_a_tuning_log_gives() -> None:
    log = parse_nccl_log(TUNING)
    # one per collective and size (the repeated call once); an algorithm NCCL does not name is skipped
    assert [(c.collective, c.nbytes, c.algorithm, c.protocol, c.channels) for c in log.choices] == [
        ("allreduce", 1 << 30, "NVLSTree", "Simple", 16),
        ("allreduce", 1 << 20, "Ring", "LL128", 8),
        ("allgather", 65536, "Ring", "LL128", 16),
    ]
    old = parse_nccl_log("h [0] NCCL INFO 1073741824 Bytes -> Algo 5 proto 2 time 3473.600098\n")
    assert [(c.collective, c.algorithm, c.protocol, c.channels) for c in old.choices] == [
        (None, "NVLSTree", "Simple", None)
    ]


def test_choices_against_collsims_picks() -> None:
    log = parse_nccl_log(TUNING)
    picks = {1 << 30: ("NVLSTree", "Simple"), 1 << 20: ("Tree", "LL128"), 8: ("Tree", "LL")}
    rows = check_choices(log, "allreduce", 16, picks)
    assert [(r.size_bytes, r.log, r.collsim, r.agree) for r in rows] == [
        (1 << 20, "Ring/LL128 (8 ch)", "Tree/LL128", False),
        (1 << 30, "NVLSTree/Simple (16 ch)", "NVLSTree/Simple", True),
    ]
    # all-gather: NCCL prints a rank's bytes, nccl-tests' size is the whole buffer (x 16 ranks)
    gather = check_choices(log, "allgather", 16, {1 << 20: ("Ring", "LL128")})
    assert [(r.size_bytes, r.agree) for r in gather] == [(1 << 20, True)]
    # 2.21's lines name no collective: read as the scenario's only when it is an allreduce
    old = parse_nccl_log("h [0] NCCL INFO 1073741824 Bytes -> Algo 5 proto 2 time 3473.6\n")
    assert len(check_choices(old, "allreduce", 16, picks)) == 1 and not check_choices(old, "allgather", 16, picks)
    assert render_choices(rows, "allreduce").splitlines()[-1] == "# the same pair at 1 of 2 sizes"
    # 2.23 names the collective but prints the model's nBytes, an all-gather's whole buffer (enqueue.cc v2.23.4-1
    # line 1855, ncclFuncMaxSendRecvCount): no x ranks (the 1 MiB choice landed at 16 MiB)
    v223 = parse_nccl_log("h [0] NCCL INFO AllGather: 1048576 Bytes -> Algo 1 proto 2 time 30.1\n")
    assert [(r.size_bytes, r.log) for r in check_choices(v223, "allgather", 16, {1 << 20: ("Ring", "Simple")})] == [
        (1 << 20, "Ring/Simple")
    ]


def test_explain_sets_the_logs_choices_beside_its_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run.log"
    log.write_text(TWO_NODES + TUNING)
    args = ["explain", "2node-h100-ib", "--sizes", "1MiB,1GiB", "--quiet", "--nccl-log", str(log)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "# NCCL's choice for allreduce in the log (NCCL_DEBUG_SUBSYS=TUNING) against collsim's" in out
    assert main([*args, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)["nccl_log"]
    assert doc["tuner"] == {"allreduce": []}  # this log prints no cost-model table
    choices = doc["choices"]["allreduce"]
    expected = {1 << 20: "Ring/LL128 (8 ch)", 1 << 30: "NVLSTree/Simple (16 ch)"}
    assert {c["size_bytes"]: c["log"] for c in choices} == expected


def _cells(values: list[tuple[float, float]]) -> str:
    """A function row's cells as tuning.cc prints them ("%8.1f/%6.1f |")."""
    return "".join(f"{lat:8.1f}/{bw:6.1f} |" for lat, bw in values)


def _tuner_lines(sim: Simulator, collective: str, nvls: tuple[float, float]) -> str:
    """tuning.cc's table for ``collective`` (its first two blocks of three algorithms), with collsim's own numbers
    for Tree and Ring, CollNet off, and ``nvls`` for NVLS/Simple."""
    table = sim.nccl_tuner_table(collective)

    def values(algo: str) -> list[tuple[float, float]]:
        out = []
        for proto in ("LL", "LL128", "Simple"):
            lat, bw, on = table.get((algo, proto), (0.0, 0.0, False))
            out.append((lat * 1e6, bw / 1e9) if on else (0.0, 0.0))
        return out

    name = {"allreduce": "AllReduce", "allgather": "AllGather"}[collective]

    def header(algos: tuple[str, str, str]) -> str:
        return "Algorithm   |" + "".join(f" {'':>14}   {a:>14}   {'':>14} |" for a in algos)

    protos = "Protocol    |" + " " + " | ".join(f"{p:>14}" for p in ("LL", "LL128", "Simple") * 3) + " |"
    off = [(0.0, 0.0)] * 3
    row1 = f"{name:>13} |" + _cells(values("Tree") + values("Ring") + off)
    row2 = f"{name:>13} |" + _cells([*off, (0.0, 0.0), (0.0, 0.0), nvls, *off])
    lines = (header(("Tree", "Ring", "CollNetDirect")), protos, row1, header(("CollNetChain", "NVLS", "NVLSTree")),
             protos, row2)  # fmt: skip
    return "".join(f"h:1:1 [0] NCCL INFO   {line}\n" for line in lines)


def test_nccls_printed_cost_model_against_collsims() -> None:
    sim = Simulator.from_source("hgx-h100")
    lat, bw, _ = sim.nccl_tuner_table("allreduce")[("NVLS", "Simple")]
    same = parse_nccl_log(_tuner_lines(sim, "allreduce", (lat * 1e6, bw / 1e9)))
    assert ("allreduce", "Ring", "Simple") in same.tuner and ("allreduce", "CollNetDirect", "LL") in same.tuner
    rows = check_tuner(same, "allreduce", sim.nccl_tuner_table("allreduce"))
    # every pair on in collsim's table is printed by NCCL and agrees; CollNet, off on both sides, is left out
    assert [r.pair for r in rows] == [
        "Tree/LL", "Tree/LL128", "Tree/Simple", "Ring/LL", "Ring/LL128", "Ring/Simple", "NVLS/Simple"
    ]  # fmt: skip
    assert all(r.agree for r in rows)
    # NVLS priced 10% faster in the log: that pair differs, and NVLS printed off while collsim has it on differs too
    faster = parse_nccl_log(_tuner_lines(sim, "allreduce", (lat * 1e6, 1.1 * bw / 1e9)))
    assert [r.pair for r in check_tuner(faster, "allreduce", sim.nccl_tuner_table("allreduce")) if not r.agree] == [
        "NVLS/Simple"
    ]
    off = parse_nccl_log(_tuner_lines(sim, "allreduce", (0.0, 0.0)))
    nvls = [r for r in check_tuner(off, "allreduce", sim.nccl_tuner_table("allreduce")) if r.pair == "NVLS/Simple"]
    assert nvls[0].log is None and nvls[0].collsim is not None and not nvls[0].agree
    assert check_tuner(same, "allgather", sim.nccl_tuner_table("allgather")) == []  # no table for it in the log
    assert render_tuner(rows, "allreduce").splitlines()[-1] == "# the same at 7 of 7 pairs"


def test_an_unreadable_cell_of_the_table_keeps_the_others_in_place() -> None:
    # a cell "nan/ -inf" shifted every later cell onto the next (algorithm, protocol), silently: Tree/Simple took
    # Ring/LL's numbers. Cells keep their places (one cell a "|" from 2.30, three a "|" before), and a note counts
    # what was not read
    head = "h:1:1 [0] NCCL INFO   Algorithm   |      Tree         |       Ring        |  CollNetDirect   |\n"
    for row in ("AllReduce |  1.0/ 2.0  3.0/ 4.0  nan/ -inf |  5.0/ 6.0  7.0/ 8.0  9.0/ 10.0 |\n",
                "AllReduce |  1.0/ 2.0 |  3.0/ 4.0 |  nan/ -inf |  5.0/ 6.0 |  7.0/ 8.0 |  9.0/ 10.0 |\n"):
        log = parse_nccl_log(head + "h:1:1 [0] NCCL INFO " + row)
        assert ("allreduce", "Tree", "Simple") not in log.tuner
        assert log.tuner[("allreduce", "Ring", "LL")] == (5.0, 6.0)
        assert log.tuner[("allreduce", "Ring", "Simple")] == (9.0, 10.0)
        assert log.unread == 1 and "1 cell(s) of NCCL's cost-model table" in log.notes()[-1]


def test_the_tuner_table_is_size_independent_as_nccl_prints_it() -> None:
    """tuning.cc's table holds no size: the latency without the multi-node ring's plateau factor (1.4 from sm80 at
    sizes where each rank's channel part reaches 64 bytes), the tree's bandwidth without its correction factor."""
    sim = Simulator.from_source("2node-h100-ib")
    table = sim.nccl_tuner_table("allreduce")
    times = tuner_times(sim.nccl_plan, sim.nccl_constants, "allreduce", 1 << 30, sim.nccl_options)
    lat, bw, on = table[("Ring", "Simple")]
    assert on and times[("Ring", "Simple")] == pytest.approx(1.4 * lat + (1 << 30) / bw)


def test_validate_simulates_the_pair_the_log_says_nccl_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """validate --nccl-log: a size the TUNING lines cover runs NCCL's pair (forced), the others collsim's pick; a
    pair collsim's NCCL does not offer there (NVLS for a two-node all-gather) is noted and left to collsim's pick."""
    sim = Simulator.from_source("2node-h100-ib", ["workload.collective=allgather"])
    sizes = (1 << 20, 1 << 22, 1 << 24)
    m = Measurement("allgather", nranks=16, rows=[MeasurementRow(s, 100.0, "mean") for s in sizes])
    picked = {r.size_bytes: (r.algorithm, r.protocol) for r in validate(sim, m).rows}
    logged = {1 << 20: ("Ring", "Simple"), 1 << 22: ("NVLS", "Simple")}
    v = validate(sim, m, logged=logged)
    rows = {r.size_bytes: (r.algorithm, r.protocol) for r in v.rows}
    assert rows[1 << 20] == ("Ring", "Simple") and picked[1 << 20] != ("Ring", "Simple")
    assert rows[1 << 22] == picked[1 << 22] and rows[1 << 24] == picked[1 << 24]
    assert "1 of 3 sizes simulated with the (algorithm, protocol) NCCL's log says it ran" in " ".join(v.notes)
    assert any("NVLS/Simple is not a pair collsim's NCCL offers for allgather" in n for n in v.notes)
    # through the command line: the log's per-rank bytes (65536 x 16 ranks = 1 MiB)
    log = tmp_path / "tuning.log"
    log.write_text("[0] NCCL INFO AllGather: 65536 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..15}\n")
    meas = tmp_path / "m.json"
    meas.write_text(json.dumps({"collective": "allgather", "nranks": 16,
                                "rows": [{"size_bytes": 1 << 20, "time_us": 100.0}]}))  # fmt: skip
    assert main(["validate", "2node-h100-ib", str(meas), "--nccl-log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "Ring/Simple" in out and "1 of 1 sizes simulated with the (algorithm, protocol) NCCL's log" in out
    # a log of another communicator (8 ranks on one node) or release than the run is taken, and said
    log.write_text("[0] NCCL INFO NCCL version 2.26.2+cuda12.8\n"
                   "[0] NCCL INFO comm 0x5a1 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0\n"
                   + log.read_text())  # fmt: skip
    meas.write_text(json.dumps({"collective": "allgather", "nranks": 16, "software": {"nccl_version": "2.21.5"},
                                "rows": [{"size_bytes": 1 << 20, "time_us": 100.0}]}))  # fmt: skip
    assert main(["validate", "2node-h100-ib", str(meas), "--nccl-log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "the log is of a communicator of 8 ranks on 1 node, the scenario has 16 on 2" in out
    assert "the log is of NCCL 2.26.2, the measurement names 2.21.5" in out
    # a log with no choice of this collective (NCCL_DEBUG=INFO without TUNING): said, its other notes kept (a plain
    # validate, with every note of the log gone)
    log.write_text("[0] NCCL INFO NCCL version 2.26.2+cuda12.8\n"
                   "[0] NCCL INFO comm 0x5a1 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0\n")  # fmt: skip
    assert main(["validate", "2node-h100-ib", str(meas), "--nccl-log", str(log)]) == 0
    out = capsys.readouterr().out
    assert "NCCL's log records no (algorithm, protocol) NCCL chose for allgather" in out
    assert "the log is of a communicator of 8 ranks on 1 node, the scenario has 16 on 2" in out
