"""NVIDIA's example tuner plugin (NCCL_TUNER_PLUGIN=libnccl-tuner-example.so, NCCL_TUNER_CONFIG_FILE): its CSV as
plugins/tuner/example/plugin.c reads it, and what NCCL runs with it (collsim/backends/nccl/plugin_tuner.py).

The rules pinned here are the plugin's (v2.30.7-1): the first line whose collective, size range, nNodes and nRanks
match and whose pair NCCL can run picks that pair and sets its channels unless -1; every collective otherwise runs on
the plugin's default of one channel (``*nChannels = 1``), which NCCL takes as nMaxChannels (enqueue.cc).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collsim.api import Simulator
from collsim.backends.common import BackendError
from collsim.backends.nccl.plugin_tuner import read_tuner_csv

GIB = 1 << 30


def _scenario(env: dict[str, str], nodes: int = 1, version: str | None = None) -> dict[str, Any]:
    nccl: dict[str, Any] = {"enabled": True, "env": env}
    if version:
        nccl["version"] = version
    return {
        "name": "example-tuner",
        "cluster": {"node": "hgx-h100", "nodes": nodes,
                    "fabric": {"topology": "rail_optimized", "transport": "rdma", "gpudirect": True}},
        "workload": {"collective": "allreduce", "dtype": "float32", "op": "sum", "sizes": [GIB]},
        "backends": {"nccl": nccl, "gloo": {"enabled": False}},
    }  # fmt: skip


def _sim(tmp_path: Path, csv: str | None, env: dict[str, str] | None = None, **kw: Any) -> Simulator:
    """A scenario file in ``tmp_path`` with the plugin loaded and ``csv`` as its nccl_tuner.conf (None: no file)."""
    import yaml

    if csv is not None:
        (tmp_path / "nccl_tuner.conf").write_text(csv)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_scenario({"NCCL_TUNER_PLUGIN": "libnccl-tuner-example.so", **(env or {})}, **kw)))
    return Simulator.from_source(str(path))


# --- the CSV -------------------------------------------------------------------------------------------------------
def test_csv_lines_are_read_as_the_plugin_reads_them() -> None:
    text = "\n".join([
        "# comment",
        "",
        " # not a comment to the plugin (one field: skipped)",
        "allreduce, 0 ,65536,tree,ll,2,1,-1",  # fields trimmed
        "allgather,,0,1024,ring,ll128,-1,-1,8",  # strtok skips the empty field: 9 fields, numPipeOps -1 from the 9th
        "reducescatter,0,10,nvls_tree,simple,4,2,16,1,0,extra,fields",  # past the 10th: dropped
        "alltoall,0,10,bogus,fast,-1,-1,-1",  # unknown names: allreduce, ring, simple (the plugin's defaults)
        "broadcast,0,10,ring,simple,-1,-1,-1\r",  # a CRLF file's \r is not part of the number
    ])  # fmt: skip
    lines, notes = read_tuner_csv(text, "t.conf")
    got = [(x.line, x.collective, x.min_bytes, x.max_bytes, x.algorithm, x.protocol, x.channels, x.nnodes, x.nranks,
            x.pipe_ops, x.reg_buff) for x in lines]  # fmt: skip
    assert got == [
        (4, "allreduce", 0, 65536, "Tree", "LL", 2, 1, -1, -1, -1),
        (5, "allgather", 0, 1024, "Ring", "LL128", -1, -1, 8, -1, -1),
        (6, "reduce_scatter", 0, 10, "NVLSTree", "Simple", 4, 2, 16, 1, 0),
        (7, "allreduce", 0, 10, "Ring", "Simple", -1, -1, -1, -1, -1),
        (8, "broadcast", 0, 10, "Ring", "Simple", -1, -1, -1, -1, -1),
    ]
    assert notes == [
        "t.conf line 3: 1 fields; the plugin skips a line of fewer than 8",
        "t.conf line 7: collective 'alltoall' is not one the plugin knows (allreduce, broadcast, reduce, allgather, "
        "reducescatter): it reads it as allreduce",
        "t.conf line 7: algorithm 'bogus' is not one the plugin knows (ring, tree, collnet_direct, collnet_chain, "
        "nvls, nvls_tree, pat): it reads it as ring",
        "t.conf line 7: protocol 'fast' is not one the plugin knows (simple, ll, ll128): it reads it as simple",
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("allreduce,0,1k,ring,simple,-1,-1,-1", r"t.conf: line 1: max_bytes '1k': expected an integer"),
        ("allreduce,10,5,ring,simple,-1,-1,-1", r"t.conf: line 1: bytes 10..5: expected 0 <= min_bytes <= max_bytes"),
        ("allreduce,0,5,ring,simple,-2,-1,-1", r"t.conf: line 1: channels -2: expected a count, 0 .* or -1"),
        ("allreduce,0,5,ring,simple,-1,two,-1", r"t.conf: line 1: nNodes 'two': expected an integer"),
    ],
)
def test_numbers_the_plugin_would_misread_are_errors_naming_the_line(line: str, message: str) -> None:
    with pytest.raises(BackendError, match=message):
        read_tuner_csv(line, "t.conf")


# --- what NCCL runs -------------------------------------------------------------------------------------------------
def test_without_a_matching_line_every_collective_runs_on_one_channel(tmp_path: Path) -> None:
    """No file (the plugin loads no line): NCCL's cost model still picks (NVLS on one HGX H100 at 1 GiB), on one
    channel, the same time as NVLS forced onto one channel by NCCL_NVLS_NCHANNELS."""
    out = _sim(tmp_path, None).simulate_one("nccl", GIB)
    assert (out.algorithm, out.protocol, out.channels) == ("NVLS", "Simple", 1)
    assert any("cannot be read" in n and "nChannels = 1" in n for n in out.notes)
    one = Simulator.from_source(_scenario({"NCCL_ALGO": "NVLS", "NCCL_NVLS_NCHANNELS": "1"})).simulate_one("nccl", GIB)
    assert one.channels == 1 and out.time_s == pytest.approx(one.time_s, rel=1e-12)
    default = Simulator.from_source(_scenario({})).simulate_one("nccl", GIB)
    assert (default.algorithm, default.channels) == ("NVLS", 16) and out.time_s > 5 * default.time_s


def test_the_first_line_that_matches_and_can_run_picks(tmp_path: Path) -> None:
    csv = "\n".join([
        "allreduce,0,1024,tree,ll,-1,-1,-1",  # another size range
        "allreduce,0,4294967295,ring,ll128,8,2,-1",  # another node count
        "allreduce,0,4294967295,ring,simple,8,1,-1,2",  # numPipeOps 2: nccl-tests issues one operation
        "allreduce,0,4294967295,ring,simple,8,1,-1,1,1",  # registered buffers only
        "allreduce,0,4294967295,nvls_tree,simple,8,-1,-1",  # NVLSTree: not on one node (IGNORE): the next line
        "allreduce,0,4294967295,ring,simple,12,-1,8",  # this one
        "allreduce,0,4294967295,nvls,simple,16,-1,-1",
    ])  # fmt: skip
    out = _sim(tmp_path, csv).simulate_one("nccl", GIB)
    assert (out.algorithm, out.protocol, out.channels) == ("Ring", "Simple", 12)
    assert any(n.startswith("Ring/Simple picked by line 6 of ") for n in out.notes)


def test_channels_minus_one_keeps_the_plugins_one_and_zero_keeps_nccls(tmp_path: Path) -> None:
    minus = _sim(tmp_path, "allreduce,0,4294967295,nvls,simple,-1,-1,-1\n").simulate_one("nccl", GIB)
    assert (minus.algorithm, minus.channels) == ("NVLS", 1)
    zero = _sim(tmp_path, "allreduce,0,4294967295,nvls,simple,0,-1,-1\n").simulate_one("nccl", GIB)
    assert (zero.algorithm, zero.channels) == ("NVLS", 16)


def test_a_relative_file_is_taken_from_the_scenarios_folder(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.csv").write_text("allreduce,0,4294967295,ring,simple,4,-1,-1\n")
    out = _sim(tmp_path, None, {"NCCL_TUNER_CONFIG_FILE": "sub/mine.csv"}).simulate_one("nccl", GIB)
    assert (out.algorithm, out.protocol, out.channels) == ("Ring", "Simple", 4)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("2.26.2", ("Ring", "Simple", 1)),  # 2.22.3 .. 2.27.3: a stub, Ring/Simple on one channel
        ("2.21.5", ("Ring", "Simple", 24)),  # 2.19 .. 2.21: a stub returning Ring/Simple, NCCL's channels
        ("2.18.5", ("NVLS", "Simple", 16)),  # no tuner plugins before 2.19: NCCL's own pick
    ],
)
def test_before_the_csv_the_plugin_was_a_stub(tmp_path: Path, version: str, expected: tuple[str, str, int]) -> None:
    out = _sim(tmp_path, "allreduce,0,4294967295,nvls,simple,16,-1,-1\n", version=version).simulate_one("nccl", GIB)
    assert (out.algorithm, out.protocol, out.channels) == expected


def test_the_variable_is_known(tmp_path: Path) -> None:
    """NCCL_TUNER_CONFIG_FILE is read (no "unknown NCCL variable" warning) and reaches NCCL's options as given."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sim = _sim(tmp_path, "", {"NCCL_TUNER_CONFIG_FILE": "nccl_tuner.conf"})
    assert [str(w.message) for w in caught if "NCCL_TUNER_CONFIG_FILE" in str(w.message)] == []
    assert sim.nccl_options.tuner_config_file == "nccl_tuner.conf"
    assert sim.nccl_options.tuner_config_base == str(tmp_path)


def test_from_2_28_3_its_init_edits_nccls_constants(tmp_path: Path) -> None:
    """plugin.c lines 304-310 (v2.30.7-1): Blackwell's Tree cap and Ring/LL128 cap from 3 nodes (index 2) to 15 and
    20 GB/s, hwLat[NET][NVLS][Simple] to 24 us, and nothing else; NCCL prices with them (init.cc: the plugin's init
    before ncclTopoTuneModel), so Tree/Simple on 4 HGX B200 nodes is priced slower, and not before 2.28.3."""
    import yaml

    from collsim.backends.nccl.tuner import tuner_times

    base = Simulator.from_source(_scenario({})).nccl_constants.for_tuner(None)
    edited = base.with_example_tuner_edits()
    assert edited.per_channel_max_tree_bw["blackwell"] == (*base.per_channel_max_tree_bw["blackwell"][:2], 15e9)
    assert edited.per_channel_max_ring_ll128_bw["blackwell"][2] == 20e9
    assert edited.hw_latency["NET"]["NVLS"]["Simple"] == pytest.approx(24e-6)
    assert edited.per_channel_max_tree_bw["hopper"] == base.per_channel_max_tree_bw["hopper"]
    assert edited.hw_latency["NET"]["Tree"] == base.hw_latency["NET"]["Tree"]

    def tree_time(env: dict[str, str], version: str | None = None) -> float:
        s = _scenario(env, nodes=4, version=version)
        s["cluster"]["node"] = "hgx-b200"
        path = tmp_path / "b.yaml"
        path.write_text(yaml.safe_dump(s))
        sim = Simulator.from_source(str(path))
        return tuner_times(sim.nccl_plan, sim.nccl_constants, "allreduce", GIB, sim.nccl_options)[("Tree", "Simple")]

    plugin = {"NCCL_TUNER_PLUGIN": "libnccl-tuner-example.so"}
    assert tree_time(plugin) > 1.2 * tree_time({})
    assert tree_time(plugin, "2.27.7") == tree_time({}, "2.27.7")


def test_run_and_compare_headers_say_which_tuner_picks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from collsim.cli import main

    sim = _sim(tmp_path, "allreduce,0,4294967295,ring,simple,4,-1,-1\n")
    path = str(sim.scenario.source_file)
    for command in ("run", "compare"):
        assert main([command, path, "--sizes", "1MiB", "--set", "backends.gloo.enabled=true", "--jobs", "1"]) == 0
        out = capsys.readouterr().out
        assert "# tuner: NVIDIA's example tuner with 1 line(s) of " in out, command
