"""Tests of collsim.calibration.nccltests: published raw outputs and synthetic pastes."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from tests_support import shared_calibration_dir

from collsim.calibration import (
    MeasuredRow,
    NcclTestsFormatError,
    NcclTestsLog,
    ParseWarning,
    parse_nccl_tests,
    read_nccl_tests,
)

DATA = shared_calibration_dir()
RAW_FILES = [] if DATA is None else sorted(p for p in (DATA / "raw").iterdir() if p.is_file())

#: Raw files that are not nccl-tests output: they must parse without crashing, give no rows and warn per line.
NOT_NCCL_TESTS: dict[str, str] = {
    "gloo_readme_4node_40gbe.txt": "Gloo benchmark output (elements, min/p50/p99/max us, samples)",
    "azure_nd_h100_v5.md": "markdown table of rounded size labels (65K, 132K ...) and in-place busbw only",
}

#: Row fields compared with the published JSON when both have them.
FIELDS = (
    "size_bytes",
    "time_us",
    "algbw_gbps",
    "busbw_gbps",
    "inplace_time_us",
    "inplace_algbw_gbps",
    "inplace_busbw_gbps",
)


def _tokens(name: str) -> set[str]:
    return set(Path(name).stem.lower().split("_"))


def _match_case(raw: Path, cases: list[Path]) -> Path:
    """The JSON case whose name shares the most ``_``-separated words with the raw file's name."""
    scored = sorted(cases, key=lambda c: (len(_tokens(c.name) & _tokens(raw.name)), c.name), reverse=True)
    best = scored[0]
    assert len(_tokens(best.name) & _tokens(raw.name)) >= 2, f"no JSON case matches {raw.name}"
    return best


def _parse_quietly(path: Path) -> tuple[NcclTestsLog, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = read_nccl_tests(path)
    return log, caught


needs_data = pytest.mark.skipif(
    DATA is None, reason="shared/calibration-data/raw not found (set COLLSIM_SHARED to the shared/ folder)"
)


@needs_data
def test_raw_to_case_mapping_is_one_to_one() -> None:
    assert DATA is not None
    cases = sorted(DATA.glob("*.json"))
    matched = {raw.name: _match_case(raw, cases).name for raw in RAW_FILES}
    assert len(set(matched.values())) == len(matched), matched
    assert matched["stas00_a100_1node_nccltests.txt"] == "a100_8gpu_1node_stas00.json"
    assert matched["rtx2080ti_2gpu_pcie_nop2p.txt"] == "rtx2080ti_2gpu_pcie3_switch_nop2p.json"


@needs_data
@pytest.mark.parametrize("raw", RAW_FILES, ids=lambda p: p.name)
def test_raw_file_matches_published_json(raw: Path) -> None:
    assert DATA is not None
    log, caught = _parse_quietly(raw)
    assert log.source == str(raw)
    if raw.name in NOT_NCCL_TESTS:
        # Not nccl-tests text: no rows invented, one warning counting its non-blank lines and naming the first
        lines = [i for i, s in enumerate(raw.read_text().split("\n"), start=1) if s.strip()]
        assert log.rows == []
        (only,) = caught
        assert only.category is ParseWarning
        assert f"none of its {len(lines)} lines" in str(only.message) and f"(line {lines[0]}:" in str(only.message)
        return
    assert [w for w in caught if issubclass(w.category, ParseWarning)] == []
    case = json.loads(_match_case(raw, sorted(DATA.glob("*.json"))).read_text())
    assert len(log.rows) == len(case["rows"])
    for row, published in zip(log.rows, case["rows"], strict=True):
        for name in FIELDS:
            if published.get(name) is not None:
                assert getattr(row, name) == published[name], (raw.name, row.line, name)
    if log.collective is not None:
        assert log.collective == case["collective"]


@needs_data
def test_stas00_trimmed_table_detects_collective_from_command() -> None:
    assert DATA is not None
    log, _ = _parse_quietly(DATA / "raw" / "stas00_a100_1node_nccltests.txt")
    assert log.collective == "allreduce"
    assert log.rows[5] == MeasuredRow(1048576, None, None, None, None, 101.9, 10.29, 18.0, None, None, None, 10)


FULL = """\
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1
#
# Using devices
#  Rank  0 Group  0 Pid  12345 on   node-a device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  12346 on   node-a device  1 [0x2a] NVIDIA H100 80GB HBM3
node-a:12345:12345 [0] NCCL INFO NCCL version 2.18.5+cuda12.2
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    20.00   52.43   52.43      0    19.50   53.77   53.77      0
  1073741824     268435456      half     max       0   5808.8  184.85  184.85      0   5802.8  185.04  185.04      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 118.99
#
"""


def _parse(text: str, **kwargs: str) -> tuple[NcclTestsLog, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = parse_nccl_tests(text, **kwargs)
    return log, [str(w.message) for w in caught if issubclass(w.category, ParseWarning)]


def test_full_modern_output() -> None:
    log, warned = _parse(FULL)
    assert warned == []
    assert (log.collective, log.nranks, log.source) == ("allreduce", 2, "<text>")
    assert log.rows == [
        MeasuredRow(1048576, 262144, "float32", "sum", -1, 20.0, 52.43, 52.43, 19.5, 53.77, 53.77, 11),
        MeasuredRow(1073741824, 268435456, "float16", "max", 0, 5808.8, 184.85, 184.85, 5802.8, 185.04, 185.04, 12),
    ]


ROW = "   1048576      262144     float     sum      -1    20.00   52.43   52.43      0    19.50   53.77   53.77      0"
EXPECTED = MeasuredRow(1048576, 262144, "float32", "sum", -1, 20.0, 52.43, 52.43, 19.5, 53.77, 53.77, 1)


@pytest.mark.parametrize(
    "prefix",
    [
        "0:",
        "  12: ",
        "[1,0]<stdout>:",
        "[0] ",  # MPICH / Intel MPI -prepend-rank (the whole log was refused: no data rows)
        "Thu Jul 18 15:41:05 2024<stdout>:",
        "Thu Jul 18 15:41:05 2024[1,0]<stdout>:",
        "2024-07-18T15:41:05.123456Z ",
        "node01: ",
        "| ",
    ],
)
def test_rank_and_time_prefixes(prefix: str) -> None:
    log, warned = _parse(prefix + ROW + (" |" if prefix == "| " else ""))
    assert warned == []
    assert log.rows == [EXPECTED]


def test_prefixed_header_lines_still_give_nranks_and_collective() -> None:
    text = "0: # Collective test starting: alltoall_perf\n0: #  Rank  0 Group  0 Pid 1 on a device 0 [0x1] GPU\n"
    text += "1: host:1:1 [0] NCCL INFO comm 0x55 rank 1 nranks 16 cudaDev 1 busId 2a000 - Init COMPLETE\n"
    log, warned = _parse(text)
    assert (log.collective, log.nranks, log.rows, warned) == ("alltoall", 16, [], [])


def test_no_root_column_old_layout() -> None:
    text = "   4096   1024   float   sum   42.18   0.10   0.19   0   41.42   0.10   0.19   0"
    log, warned = _parse(text, collective="all_reduce")
    assert warned == []
    assert log.collective == "allreduce"
    assert log.rows == [MeasuredRow(4096, 1024, "float32", "sum", None, 42.18, 0.1, 0.19, 41.42, 0.1, 0.19, 1)]


def test_out_of_place_only_layouts() -> None:
    log, warned = _parse("64 16 int8 none 0 1.5 0.04 0.04 0\n64 16 bfloat16 prod 1.5 0.04 0.04 0\n")
    assert warned == []
    assert [(r.dtype, r.redop, r.root, r.time_us, r.inplace_time_us) for r in log.rows] == [
        ("int8", "none", 0, 1.5, None),
        ("bfloat16", "prod", None, 1.5, None),
    ]


def test_inplace_columns_of_trimmed_seven_column_table() -> None:
    log, warned = _parse("#  size  time algbw busbw  time algbw busbw\n  2048  3.0  0.68  1.19  2.5  0.82  1.43\n")
    assert warned == []
    assert log.rows == [MeasuredRow(2048, None, None, None, None, 3.0, 0.68, 1.19, 2.5, 0.82, 1.43, 2)]


def test_na_and_error_in_wrong_column() -> None:
    text = "\n".join(
        [
            "  8  2  float  sum  -1  12.25  0.00  0.00  N/A  12.00  0.00  0.00  N/A",
            "  16  4  float  sum  -1  11.77  0.00  0.00  error  11.69  0.00  0.00  error",
            "  32  8  float  sum  11.0  0.00  0.00  2e-07  11.5  0.00  0.00  0e+00",
        ]
    )
    log, warned = _parse(text)
    assert warned == []
    assert [(r.size_bytes, r.time_us, r.inplace_time_us, r.line) for r in log.rows] == [
        (8, 12.25, 12.0, 1),
        (16, 11.77, 11.69, 2),
        (32, 11.0, 11.5, 3),
    ]


def test_nonzero_wrong_count_warns_but_keeps_row() -> None:
    log, warned = _parse("# all_gather_perf\n 8 1 float none -1 5.0 0.0 0.0 3 5.0 0.0 0.0 0\n")
    assert len(log.rows) == 1
    assert warned == ["<text>, line 2: nccl-tests reports 3 wrong result(s) for size 8 B"]


def test_junk_line_warns_with_its_line_number_and_parsing_continues() -> None:
    text = f"# header\n{ROW}\nSegmentation fault (core dumped)\n 8 2 float sum -1 oops 0 0 0 1 0 0 0\n{ROW}"
    with pytest.warns(ParseWarning) as record:
        log = parse_nccl_tests(text, source="run.log")
    messages = [str(w.message) for w in record]
    assert len(messages) == 2
    assert messages[0].startswith("run.log, line 3: skipped a line")
    assert "Segmentation fault" in messages[0]
    assert messages[1].startswith("run.log, line 4: skipped a line")
    assert [r.line for r in log.rows] == [2, 5]


@pytest.mark.parametrize("text", ["", "\n\n", "   \r\n"])
def test_empty_text_gives_zero_rows(text: str) -> None:
    log, warned = _parse(text)
    assert (log.collective, log.nranks, log.rows, warned) == (None, None, [], [])


def test_printf_number_formats() -> None:
    text = "1.0e+08 2.5E+07 float sum -1 16801 5.95 5.95 0 1.6801e4 5.952 5.952 0\n1_048_576 1.5 699.05 699.05"
    log, warned = _parse(text)
    assert warned == []
    assert [(r.size_bytes, r.count, r.time_us, r.inplace_time_us) for r in log.rows] == [
        (100000000, 25000000, 16801.0, 16801.0),
        (1048576, None, 1.5, None),
    ]


def test_noise_lines_are_silent() -> None:
    text = "\n".join(
        [
            "```text",
            "$ mpirun -np 16 --tag-output ./build/reduce_scatter_perf_mpi -b 8 -e 8G -f 2",
            "NCCL version 2.20.3+cuda12.2",
            "--------------------------------------------------------------------------",
            "[...]",
            "       size    time   algbw   busbw",
            "        (B)    (us)  (GB/s)  (GB/s)",
            "|---|---:|---:|---:|",
            "Avg bus bandwidth    : 1.0",
            "```",
        ]
    )
    log, warned = _parse(text)
    assert (log.collective, log.rows, warned) == ("reduce_scatter", [], [])


def test_collective_argument_and_conflicts() -> None:
    assert _parse(ROW, collective="Broadcast")[0].collective == "broadcast"
    log, warned = _parse("# broadcast_perf\n" + ROW, collective="reduce")
    assert log.collective == "broadcast"
    assert warned == ["<text>: collective='reduce' ignored: the text is from 'broadcast'"]
    log, warned = _parse("# sendrecv_perf\n# hypercube_perf\n# all_reduce_perf\n")
    assert log.collective == "sendrecv"
    assert [w.split(": ", 1)[0] for w in warned] == ["<text>, line 2", "<text>, line 3"]
    with pytest.raises(ValueError, match="unknown collective 'allfoo'"):
        parse_nccl_tests(ROW, collective="allfoo")
    with pytest.raises(TypeError, match="must be a str"):
        parse_nccl_tests(b"8 2 float sum", source="x")  # type: ignore[arg-type]


def test_read_nccl_tests_file(tmp_path: Path) -> None:
    path = tmp_path / "ar.log"
    path.write_bytes(("# all_reduce_perf\r\n" + ROW + "\r\n\xff").encode("latin-1"))
    log, warned = _parse_quietly(path)
    assert (log.collective, log.source, [r.line for r in log.rows]) == ("allreduce", str(path), [2])
    assert [str(w.message) for w in warned] == [
        f"{path}, line 3: skipped a line that is neither an nccl-tests data row nor a comment: '\ufffd'"
    ]
    with pytest.raises(FileNotFoundError, match=r"missing\.log"):
        read_nccl_tests(tmp_path / "missing.log")


@pytest.mark.parametrize(
    ("line", "version"),
    [
        ("node1:4766:4766 [0] NCCL INFO NCCL version 2.26.2+cuda12.8", "2.26.2"),
        ("# nccl-tests version 2.15.0 nccl-headers=22602 nccl-library=22602", "2.26.2"),
        ("# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor)", None),
    ],
)
def test_the_nccl_version_the_text_prints(line: str, version: str | None) -> None:
    """NCCL's own ``NCCL version`` line or nccl-tests' ``nccl-library=`` code (major x 10000 + minor x 100 + patch)
    becomes the measurement's ``software.nccl_version``, which validate compares with the scenario's."""
    log, _ = _parse(line + "\n" + ROW)
    assert log.nccl_version == version
    assert [r.size_bytes for r in log.rows] == [EXPECTED.size_bytes]


# --- what a run's header says, runs appended to one file, #wrong in %g, layouts without redop ---------------------


def _rank_line(rank: int, host: str) -> str:
    """A ``#  Rank`` line as nccl-tests prints it (src/common.cu: ``on %10s device %2d``)."""
    return f"#  Rank {rank:2d} Group  0 Pid {1000 + rank:6d} on {host:>10s} device {rank % 4:2d} [0x18] NVIDIA H100"


def _run(hosts: list[str], time_us: float, binary: str = "all_reduce_perf") -> str:
    ranks = "\n".join(_rank_line(r, h) for r, h in enumerate(hosts))
    return (f"# Collective test starting: {binary}\n# nThread 1 nGpus 1 minBytes 8 maxBytes 8\n{ranks}\n"
            f"  1048576  262144  float  sum  -1  {time_us}  1.0  1.0  0  {time_us}  1.0  1.0  0\n"
            f"# Collective test concluded: {binary}\n")


def test_rank_lines_give_the_hosts_in_rank_order() -> None:
    """nccl-tests prints every rank's host (MPI runs too): a text log says how its ranks spread over nodes."""
    log, warned = _parse(_run(["node-b", "node-b", "node-a", "node-a"], 30.0))
    assert warned == []
    assert (log.nranks, log.hosts) == (4, ("node-b", "node-a"))
    assert _parse(FULL)[0].hosts == ("node-a",)


def test_runs_of_one_shape_in_one_file_are_read_as_one_with_a_warning() -> None:
    log, warned = _parse(_run(["a", "b"], 10.0) + _run(["a", "b"], 30.0))
    assert [r.time_us for r in log.rows] == [10.0, 30.0]  # one size twice: averaged as -N cycles are
    assert warned == ["<text>, line 1: holds 2 runs of one shape (from lines 1, 7): read as one, a size printed by "
                      "several the mean of its rows"]  # fmt: skip


@pytest.mark.parametrize(
    ("second", "field"),
    [
        (_run(["a", "b", "c", "d"], 30.0), "differ in ranks: 2 (line 1) against 4 (line 7)"),
        (_run(["a", "a"], 30.0), "differ in hosts: 2 ranks on 2 hosts (line 1) against 2 ranks on 1 host (line 7)"),
        (_run(["a", "b"], 30.0, "all_gather_perf"), "differ in collective: allreduce (line 1) against allgather"),
    ],
)
def test_runs_that_differ_in_one_file_are_refused(second: str, field: str) -> None:
    """Two runs appended with ``tee -a``: averaging a 2-rank and a 4-rank run would describe neither."""
    with pytest.raises(NcclTestsFormatError, match="holds 2 runs") as info:
        _parse(_run(["a", "b"], 10.0) + second)
    assert field in str(info.value)
    assert "split the file" in str(info.value)


def test_nccl_tests_version_line_starts_a_run() -> None:
    """nccl-tests 2.18 on print ``# nccl-tests version ... nccl-library=N`` before ``Collective test starting``
    (src/util.cu): two appended runs of different NCCL releases were averaged, the first run taking the second's
    version line, whose release then lost to the first one seen."""
    def run(lib: int, t: float) -> str:  # no "concluded" line: nccl-tests 2.19 prints none after its rows
        return f"# nccl-tests version 2.19.6 nccl-headers=22102 nccl-library={lib}\n" + _run(["a", "b"], t).rsplit(
            "# Collective test concluded", 1)[0]  # fmt: skip

    with pytest.raises(NcclTestsFormatError, match=r"differ in NCCL release: 2\.21\.2 \(line 1\) against 2\.27\.3"):
        _parse(run(22102, 10.0) + run(22703, 30.0))
    log, warned = _parse(run(22102, 10.0) + run(22102, 30.0))
    assert log.nccl_version == "2.21.2" and "from lines 1, 7" in warned[0]


def test_a_second_command_line_starts_a_run() -> None:
    """A pasted command line between two outputs starts the second run (its binary is that run's)."""
    text = _run(["a", "b"], 10.0) + "$ mpirun -np 2 ./build/all_gather_perf -b 1M\n" + _run(["a", "b"], 30.0,
                                                                                             "all_gather_perf")
    with pytest.raises(NcclTestsFormatError, match="differ in collective"):
        _parse(text)


def test_wrong_counts_printed_with_g_warn() -> None:
    """nccl-tests prints #wrong with %6g: a million wrong results read 1.04858e+06 and still warn."""
    row = "  4194304  1048576  float  sum  -1  51.9  80.7  141.3  1.04858e+06  51.9  80.7  141.3  1.04858e+06"
    _, warned = _parse(f"# all_reduce_perf\n{row}\n")
    assert warned == ["<text>, line 2: nccl-tests reports 2097160 wrong result(s) for size 4194304 B"]


def test_eleven_columns_without_redop_are_read() -> None:
    """Early nccl-tests and rccl-tests of their time (ROCm/rccl#930) printed no redop column."""
    log, warned = _parse("# all_gather_perf\n#  size  count  type  time  algbw  busbw  error  time  algbw  busbw  "
                         "error\n  8192  128  float  34.81  0.24  0.22  0e+00  34.78  0.24  0.22  0e+00\n")
    assert warned == []
    assert log.rows == [MeasuredRow(8192, 128, "float32", None, None, 34.81, 0.24, 0.22, 34.78, 0.24, 0.22, 3)]


def test_a_long_line_of_word_characters_parses_at_once() -> None:
    """The binary-name pattern starts only at a word's start: a line of 50,000 underscores (quadratic before,
    about 30 s) is one pass."""
    log, warned = _parse("# all_reduce_perf\nx" + "_" * 50_000 + "\n" + "a_" * 25_000 + "\n  1024  5.0  0.2  0.3\n")
    assert len(log.rows) == 1 and len(warned) == 2


def test_many_lines_not_understood_are_named_a_few_then_counted() -> None:
    # a wrong file (a model YAML given to validate) printed 97 warnings before its error
    noise = "\n".join(f"garbage line {i}" for i in range(30))
    row = "# Collective test starting: all_reduce_perf\n 1024 256 float sum -1 9.0 0.1 0.2 0\n"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        log = parse_nccl_tests(row + noise)
    assert len(log.rows) == 1 and len(caught) == 11
    assert str(caught[-1].message).endswith("skipped 20 more such line(s) (lines 13-32)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert parse_nccl_tests(noise).rows == []
    assert len(caught) == 1 and "none of its 30 lines" in str(caught[0].message)


def test_a_named_collective_the_columns_contradict_warns() -> None:
    # nccl-tests prints "none" as all_gather's redop and -1 as a non-rooted collective's root (TimeTest in src/*.cu):
    # an all_reduce log read as all-gather ran silently as one
    head = "#  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong\n"
    text = head + "  1048576  262144  float  sum  -1  50.00  20.97  39.32  0  50.00  20.97  39.32  0\n"
    with pytest.warns(ParseWarning, match=r"collective='allgather' given, but the rows' redop column says sum"):
        parse_nccl_tests(text, collective="allgather")
    with pytest.warns(ParseWarning, match=r"collective='reduce' given, but the rows' root column says -1"):
        parse_nccl_tests(text, collective="reduce")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_nccl_tests(text, collective="allreduce").collective == "allreduce"
