"""Tests of nccl-tests' newer outputs: the JSON report (``-J``), the ``-S``/``-I``/``-C`` text columns, several
series in one run, and the notes ``collsim validate`` prints from what a report records (its NCCL variables, type
and timing).

The reports here are written the way nccl-tests' ``src/util.cu`` (v2.19.6, JSON version 3) lays them out: the
keys, their nesting and ``"nan"`` for a missing value are its; the numbers are made up.
"""

from __future__ import annotations

import json
import statistics
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.api import Simulator
from collsim.calibration import (
    Measurement,
    MeasurementError,
    NcclTestsFormatError,
    ParseWarning,
    parse_nccl_tests,
    parse_nccl_tests_json,
    read_measurement,
)
from collsim.calibration.nccltests import is_nccl_tests_json, nccl_version
from collsim.calibration.validate import batching_note, dtype_note, env_note, timing_note, validate
from collsim.cli import main
from collsim.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _block(time_us: float, size: int, factor: float, *, cpu: bool = False, nwrong: Any = 0) -> dict[str, Any]:
    algbw = size / time_us / 1e3  # bytes/us = 1e-3 GB/s
    return {"cpu_time" if cpu else "time": time_us, "alg_bw": algbw, "bus_bw": algbw * factor, "nwrong": nwrong}


def _report(
    times: dict[int, float],
    *,
    binary: str = "./build/all_reduce_perf",
    env: tuple[str, ...] = ("NCCL_ALGO=Ring", "HOME=/home/me", "AWS_SECRET_ACCESS_KEY=x", "OFI_NCCL_TUNER_TYPE=Region"),
    processes: int = 2,
    ngpus: int = 4,
    type_name: str = "float",
    per_iter: dict[int, list[float]] | None = None,
    skip: int = 0,
    cpu: bool = False,
    groups: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """An nccl-tests JSON report of an all-reduce over ``processes`` x ``ngpus`` ranks, one result per size."""
    nranks = processes * ngpus
    factor = 2 * (nranks - 1) / nranks
    results = []
    for size, t in times.items():
        r: dict[str, Any] = {"size": size, "count": size // 4, "type": type_name, "redop": "sum", "root": "    -1",
                             "out_of_place": _block(t, size, factor, cpu=cpu),
                             "in_place": _block(t * 0.98, size, factor, cpu=cpu, nwrong=None)}  # fmt: skip
        if per_iter is not None:
            r["out_of_place_per_iter"] = {"skipped_iterations": skip, "min_us": min(per_iter[size]),
                                          "times_us": per_iter[size]}  # fmt: skip
        r["actual_iterations"] = 20
        r["experiment_name"] = ""
        results.append(r)
    return {
        "version": 3,
        "start_time": "2026-12-01 10:00:00",
        "args": [binary, "-b", "8", "-e", "1G", "-f", "2", "-g", str(ngpus), "-J", "r.json"],
        "env": list(env),
        "nccl_version": 22703,
        "config": {"nthreads": 1, "ngpus": ngpus, "minimum_bytes": 8, "maximum_bytes": 1 << 30, "step_factor": 2,
                   "warmup_iters": 1, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                   "blocking_collectives": "false", "per_iter_timing": "false", "per_iter_skip": 0,
                   "parallel_init": "false",
                   # inside config, as nccl-tests writes it (src/util.cu writeDeviceReport)
                   "devices": [{"rank": p * ngpus, "group": 0 if groups is None else groups[p], "pid": 100 + p,
                                "hostname": f"node{p // 2 + 1}", "device": 0, "device_hex": "0000:18:00",
                                "device_info": "NVIDIA H100 80GB HBM3"} for p in range(processes)]},
        "results": results,
        "out_of_bounds": {"count": 0, "okay": "true"},
        "average_bus_bandwidth": {"bandwidth": 100.0, "okay": "unchecked"},
        "end_time": "2026-12-01 10:01:00",
    }


def _write(tmp_path: Path, data: Any, name: str = "report.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


# ------------------------------------------------------------------------------------------------- JSON report
def test_report_reads_as_a_measurement(tmp_path: Path) -> None:
    times = {1 << 30: 4000.0, 1 << 20: 30.0, 8: 20.0}
    m = read_measurement(_write(tmp_path, _report(times)))
    assert m.collective == "allreduce" and m.nranks == 8 and m.backend == "nccl" and m.dtype == "float32"
    assert [(r.size_bytes, r.time_us, r.statistic, r.iterations) for r in m.rows] == [
        (8, 20.0, "mean", 20), (1 << 20, 30.0, "mean", 20), (1 << 30, 4000.0, "mean", 20)]  # fmt: skip
    assert m.software == {"benchmark": "NVIDIA/nccl-tests", "nccl_version": "2.27.3", "op": "sum",
                          "gpus_per_process": 4, "env": {"NCCL_ALGO": "Ring", "OFI_NCCL_TUNER_TYPE": "Region"},
                          "env_complete": True}
    assert m.hardware == {"gpu": "NVIDIA H100 80GB HBM3", "hosts": ["node1"]}


def test_report_keeps_only_nccl_variables() -> None:
    log = parse_nccl_tests_json(_report({8: 20.0}))
    assert log.env == {"NCCL_ALGO": "Ring", "OFI_NCCL_TUNER_TYPE": "Region"}  # HOME and the secret are not kept


def test_report_ranks_count_every_process_and_gpu() -> None:
    assert parse_nccl_tests_json(_report({8: 20.0}, processes=16, ngpus=1)).nranks == 16
    assert parse_nccl_tests_json(_report({8: 20.0}, processes=1, ngpus=8)).nranks == 8
    log = parse_nccl_tests_json(_report({8: 20.0}, processes=4, ngpus=1))
    assert log.hosts == ("node1", "node2")


def test_report_devices_inside_config_or_at_the_top_level() -> None:
    """nccl-tests writes devices inside config; read there, a top-level list is read too, and a report of 16
    ranks is 16 ranks either way (with neither it would say nothing of its ranks and hosts)."""
    report = _report({8: 20.0}, processes=16, ngpus=1)
    top = dict(report, config={k: v for k, v in report["config"].items() if k != "devices"},
               devices=report["config"]["devices"])  # fmt: skip
    for data in (report, top):
        log = parse_nccl_tests_json(data)
        assert (log.nranks, len(log.hosts), log.gpus) == (16, 8, ("NVIDIA H100 80GB HBM3",))
    bare = dict(report, config={k: v for k, v in report["config"].items() if k != "devices"})
    assert parse_nccl_tests_json(bare).nranks is None


def test_report_of_other_ranks_than_the_scenario_is_refused(tmp_path: Path) -> None:
    """A 16-rank report (devices where nccl-tests writes them) against an 8-GPU scenario: an error, not a
    silent comparison."""
    m = read_measurement(_write(tmp_path, _report({1 << 20: 30.0}, processes=16, ngpus=1)))
    with pytest.raises(MeasurementError, match="the measurement has 16 ranks, the scenario 8"):
        validate(Simulator(load_scenario(SCENARIOS / "hgx-h100.yaml")), m)


def test_report_split_into_groups_gives_no_rank_count(tmp_path: Path) -> None:
    """NCCL_TESTS_SPLIT runs one communicator per group: the report's processes are not one collective's ranks."""
    report = _report({8: 20.0}, processes=4, ngpus=1, groups=(0, 1, 0, 1))
    assert parse_nccl_tests_json(report).nranks is None
    assert read_measurement(_write(tmp_path, report), nranks=2).nranks == 2


def test_report_spread_is_the_interquartile_range_after_the_skipped_iterations() -> None:
    samples = [500.0, 10.0, 11.0, 12.0, 13.0, 14.0]
    log = parse_nccl_tests_json(_report({1024: 12.0}, per_iter={1024: samples}, skip=1))
    q = statistics.quantiles(samples[1:], n=4, method="inclusive")
    assert log.rows[0].spread_us == pytest.approx(q[2] - q[0]) == pytest.approx(2.0)
    assert parse_nccl_tests_json(_report({1024: 12.0})).rows[0].spread_us is None


def test_report_without_out_of_place_uses_in_place() -> None:
    report = _report({4096: 9.0})
    report["results"][0]["out_of_place"] = None
    row = parse_nccl_tests_json(report).rows[0]
    assert row.time_us == pytest.approx(9.0 * 0.98) == row.inplace_time_us


def test_report_nan_result_is_skipped_with_a_warning() -> None:
    report = _report({8: 20.0, 16: 21.0})
    for block in ("out_of_place", "in_place"):
        report["results"][1][block]["time"] = "nan"
    with pytest.warns(ParseWarning, match=r"results\[1\]: size 16 B has no time"):
        log = parse_nccl_tests_json(report)
    assert [r.size_bytes for r in log.rows] == [8]


def test_report_wrong_results_warn() -> None:
    report = _report({8: 20.0})
    report["results"][0]["out_of_place"]["nwrong"] = 3
    with pytest.warns(ParseWarning, match="reports 3 wrong result"):
        parse_nccl_tests_json(report)


def test_report_cpu_time_is_marked(tmp_path: Path) -> None:
    m = read_measurement(_write(tmp_path, _report({8: 20.0}, cpu=True)))
    assert m.rows[0].time_us == 20.0 and m.software["timing"] == "cputime"
    note = timing_note(m)
    assert note is not None and "-C 1" in note
    assert timing_note(read_measurement(_write(tmp_path, _report({8: 20.0}), "gpu.json"))) is None


def test_aggregated_and_graph_runs_are_noted(tmp_path: Path) -> None:
    """nccl-tests -m 8 (eight calls in one group, the time divided by eight) and -G 1 (calls replayed from a CUDA
    graph), from the text header and from a JSON report's config: kept in software and noted by validate."""
    header = ("# nThread 1 nGpus 1 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 "
              "agg iters: 8 validation: 1 graph: 1\n")  # fmt: skip
    text = tmp_path / "ar.txt"
    text.write_text("# Collective test starting: all_reduce_perf\n" + header
                    + _text_row(1 << 20, 40.0, 39.0, per_iter=False, stamp=False) + "\n")  # fmt: skip
    report = _report({1 << 20: 40.0}, processes=8, ngpus=1)
    report["config"].update(aggregated_iterations=8, graph=1)
    sim = Simulator(load_scenario(SCENARIOS / "hgx-h100.yaml"))
    for m in (read_measurement(text, nranks=8), read_measurement(_write(tmp_path, report))):
        assert (m.software["agg_iters"], m.software["cuda_graph_launches"]) == (8, 1)
        note = batching_note(m)
        assert note is not None and "-m 8" in note and "-G 1" in note
        assert note in validate(sim, m).notes
    plain = read_measurement(_write(tmp_path, _report({1 << 20: 40.0}, processes=8, ngpus=1), "plain.json"))
    assert "agg_iters" not in plain.software and batching_note(plain) is None
    assert not any("nccl-tests -m" in n for n in validate(sim, plain).notes)


def test_report_collective_from_the_binary_and_the_argument() -> None:
    assert parse_nccl_tests_json(_report({8: 1.0}, binary="/opt/nccl-tests/build/all_gather_perf_mpi")).collective == (
        "allgather")
    assert parse_nccl_tests_json(_report({8: 1.0}, binary="C:\\tests\\sendrecv_perf.exe")).collective == "sendrecv"
    assert parse_nccl_tests_json(_report({8: 1.0}, binary="python"), collective="broadcast").collective == "broadcast"
    with pytest.warns(ParseWarning, match="ignored: the report is from 'allreduce'"):
        parse_nccl_tests_json(_report({8: 1.0}), collective="allgather")
    with pytest.warns(ParseWarning, match="unknown nccl-tests binary hypercube_perf"):
        assert parse_nccl_tests_json(_report({8: 1.0}, binary="./hypercube_perf")).collective is None


def test_report_type_and_version() -> None:
    log = parse_nccl_tests_json(_report({8: 1.0}, type_name="bfloat16"))
    assert log.rows[0].dtype == "bfloat16" and log.nccl_version == "2.27.3"
    assert nccl_version("nccl-library=2804") == "2.8.4"  # NCCL_VERSION_CODE before 2.9: major x 1000


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda r: r["results"][1].__setitem__("size", "1M"), "results[1].size"),
        (lambda r: r["results"][0]["out_of_place"].__setitem__("alg_bw", [1]), "results[0].out_of_place.alg_bw"),
        (lambda r: r["results"][0]["in_place"].pop("time"), "results[0].in_place"),
        (lambda r: r["results"].__setitem__(0, 7), "results[0]"),
    ],
)
def test_report_bad_fields_name_the_file_and_field(tmp_path: Path, mutate: Any, field: str) -> None:
    report = _report({8: 20.0, 16: 21.0})
    mutate(report)
    path = _write(tmp_path, report)
    with pytest.raises(NcclTestsFormatError) as raw:
        parse_nccl_tests_json(report, source="r.json")
    assert raw.value.field == field
    with pytest.raises(MeasurementError) as err:
        read_measurement(path)
    assert err.value.file == str(path) and err.value.field == field


def test_report_cut_short_is_a_clear_error(tmp_path: Path) -> None:
    """nccl-tests writes the report as it runs: a run killed half-way leaves it unterminated."""
    text = json.dumps(_report({8: 20.0, 16: 21.0}))
    with pytest.raises(MeasurementError, match="invalid JSON"):
        read_measurement(_write(tmp_path, text[: len(text) // 2]))
    with pytest.raises(NcclTestsFormatError, match="did not finish writing"):
        parse_nccl_tests_json(text[: len(text) // 2])


def test_collsim_measurements_are_not_taken_for_reports() -> None:
    assert not is_nccl_tests_json({"format": "collsim-measurement/1", "collective": "allreduce", "rows": [],
                                   "results": []})  # fmt: skip
    assert not is_nccl_tests_json([1, 2]) and not is_nccl_tests_json({"results": []})


def test_report_and_its_text_table_read_alike(tmp_path: Path) -> None:
    """The same run as JSON and as nccl-tests' text table (times to nccl-tests' printed precision) gives the same
    measurement rows."""
    times = {8: 20.25, 1024: 21.5, 1 << 20: 30.75, 1 << 26: 410.5}
    report = _report(times)
    lines = ["# Collective test starting: all_reduce_perf", "# nThread 1 nGpus 4 minBytes 8", "#  Rank  0 Group  0 "
             "Pid 100 on node1 device  0 [0000:18:00] NVIDIA H100 80GB HBM3"]  # fmt: skip
    for r in report["results"]:
        o, i = r["out_of_place"], r["in_place"]
        lines.append(f"{r['size']:12d}  {r['count']:12d}  {'float':>8}  {'sum':>6}  {-1:6d}  {o['time']:7.2f}  "
                     f"{o['alg_bw']:6.2f}  {o['bus_bw']:6.2f}  {0:6g}  {i['time']:7.2f}  {i['alg_bw']:6.2f}  "
                     f"{i['bus_bw']:6.2f}     N/A")  # fmt: skip
    text_path = tmp_path / "r.txt"
    text_path.write_text("\n".join(lines) + "\n")
    from_text = read_measurement(text_path, nranks=8)
    from_json = read_measurement(_write(tmp_path, report))
    assert [(r.size_bytes, r.time_us) for r in from_text.rows] == [(r.size_bytes, r.time_us) for r in from_json.rows]
    assert from_text.collective == from_json.collective and from_text.hardware["gpu"] == from_json.hardware["gpu"]


# --------------------------------------------------------------------------------------- text: -S, -I and -C
_ROW = "%12d  %12d  %8s  %6s  %6s  %7s  %6s  %6s  %6s"


def _text_row(size: int, t: float, t_in: float, *, per_iter: bool, stamp: bool) -> str:
    """One row as nccl-tests' writeBenchmarkLine* print it (src/util.cu), with ``-I 1`` and ``-S 1`` columns."""
    out = _ROW % (size, size // 4, "float", "sum", "-1", f"{t:.2f}", f"{size / t / 1e3:.2f}", "0.00", "0")
    if per_iter:
        out += f"  {t * 0.9:7.2f}  {t * 1.5:7.2f}  {t * 1.4:7.2f}  {3.25:7.2f}"
    out += f"  {t_in:7.2f}  {size / t_in / 1e3:6.2f}  {'0.00':>6}  {'N/A':>6}"
    if per_iter:
        out += f"  {t_in * 0.9:7.2f}  {t_in * 1.5:7.2f}  {t_in * 1.4:7.2f}  {2.5:7.2f}"
    if stamp:
        out += "  2026-07-09 12:34:56"
    return out


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(1, 1 << 34), st.floats(0.5, 1e6), st.floats(0.5, 1e6)), min_size=1, max_size=8,
        unique_by=lambda r: r[0],
    ),
    per_iter=st.booleans(),
    stamp=st.booleans(),
)
def test_extra_text_columns_never_change_what_is_read(
    rows: list[tuple[int, float, float]], per_iter: bool, stamp: bool
) -> None:
    """``-I 1`` and ``-S 1`` add columns; the rows read are those of the plain table, with no warning."""
    plain = "\n".join(_text_row(s, t, ti, per_iter=False, stamp=False) for s, t, ti in rows)
    extra = "\n".join(_text_row(s, t, ti, per_iter=per_iter, stamp=stamp) for s, t, ti in rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = parse_nccl_tests(plain, collective="allreduce").rows
        b = parse_nccl_tests(extra, collective="allreduce").rows
    assert [(r.size_bytes, r.time_us, r.inplace_time_us) for r in a] == [
        (r.size_bytes, r.time_us, r.inplace_time_us) for r in b] and len(b) == len(rows)  # fmt: skip


def test_per_iteration_columns_must_be_numbers() -> None:
    row = _text_row(1024, 10.0, 9.0, per_iter=True, stamp=False).replace("3.25", "x.yz")
    with pytest.warns(ParseWarning, match="skipped a line"):
        assert parse_nccl_tests(row, collective="allreduce").rows == []


def test_headers_of_the_new_options_are_not_warned_about() -> None:
    """writeResultHeader's ``-I 1`` and ``-S 1`` headers, pasted without their ``#``, are headers, not rows."""
    block = "cputime  algbw  busbw  #wrong  i_min  i_max  i_p99  i_cv%"
    units = "(us)  (GB/s)  (GB/s)  (us)  (us)  (us)  (%)"
    text = (f"    size  count  type  redop  root  {block}  {block}  timestamp\n"
            f"    (B)  (elements)  {units}  {units}  %Y-%m-%d %H:%M:%S\n"
            "    out-of-place (+ per-iteration)  in-place (+ per-iteration)\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_nccl_tests(text, collective="allreduce").rows == []


def test_cputime_header_marks_the_times() -> None:
    text = ("#       size   count   type  redop   root  cputime  algbw  busbw  #wrong  cputime  algbw  busbw  #wrong\n"
            + _text_row(1024, 10.0, 9.0, per_iter=False, stamp=False))  # fmt: skip
    assert parse_nccl_tests(text, collective="allreduce").timing == "cputime"
    assert parse_nccl_tests(_text_row(1024, 10.0, 9.0, per_iter=False, stamp=False), collective="allreduce").timing == (
        "gpu")


# ------------------------------------------------------------------------------ several series in one output
def test_first_series_is_kept_and_the_others_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``-d all -o all`` prints one series per type and operator; each is its own measurement."""
    report = _report({8: 20.0, 16: 21.0})
    half = _report({8: 30.0, 16: 31.0}, type_name="half")["results"]
    for r in half:
        r["redop"] = "max"
    report["results"] += half
    with pytest.warns(ParseWarning, match=r"2 series; comparing the first \(float sum\), not half max"):
        m = read_measurement(_write(tmp_path, report))
    assert [r.time_us for r in m.rows] == [20.0, 21.0] and m.dtype == "float32"
    # another series by the words of its name: the type as collsim or nccl-tests names it, the operator
    for words in ("half", "float16 max", "MAX,half"):
        with pytest.warns(ParseWarning, match=rf"comparing '{words}' \(half max\), not float sum"):
            other = read_measurement(_write(tmp_path, report), series=words)
        assert ([r.time_us for r in other.rows], other.dtype, other.software["op"]) == ([30.0, 31.0], "float16", "max")
    with pytest.raises(MeasurementError, match=r"series: no series 'bfloat16' in this run; it printed: float sum, "
                                               r"half max"):  # fmt: skip
        read_measurement(_write(tmp_path, report), series="bfloat16")
    # through the command line: validate (8 ranks on one HGX H100) and the scenario import take --series
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ParseWarning)
        assert main(["validate", "hgx-h100", str(tmp_path / "report.json"), "--series", "half", "--format",
                     "json", "-o", str(tmp_path / "v.json")]) == 0  # fmt: skip
        assert main(["import", "nccl-tests", str(tmp_path / "report.json"), "--node", "hgx-h100", "--series", "half",
                     "-o", str(tmp_path / "s.yaml")]) == 0  # fmt: skip
    (v,) = json.loads((tmp_path / "v.json").read_text())
    assert [r["measured_us"] for r in v["rows"]] == [30.0, 31.0]
    scenario = (tmp_path / "s.yaml").read_text()
    assert "dtype: float16" in scenario and "op: max" in scenario
    # the validate command it suggests compares the series it was written for
    assert "# Compare (from this folder): collsim validate s.yaml report.json --series half" in scenario
    assert f"Compare: collsim validate {tmp_path / 's.yaml'} {tmp_path / 'report.json'} --series half" in (
        capsys.readouterr().out)  # fmt: skip


def test_repeated_cycles_average(tmp_path: Path) -> None:
    """``-N 3`` prints every size three times: the mean of the three means, their iterations summed."""
    report = _report({8: 20.0, 16: 30.0})
    again = _report({8: 22.0, 16: 30.0})["results"] + _report({8: 24.0, 16: 33.0})["results"]
    report["results"] += again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = read_measurement(_write(tmp_path, report))
    assert [(r.size_bytes, r.time_us, r.iterations) for r in m.rows] == [(8, 22.0, 60), (16, 31.0, 60)]


# ------------------------------------------------------------------------------------------------ validate notes
def test_env_note_compares_what_nccl_reads() -> None:
    run = Measurement("allreduce", software={"env": {"NCCL_PROTO": "simple", "NCCL_MIN_NCHANNELS": "32",
                                                     "NCCL_SOCKET_IFNAME": "eth0"}, "env_complete": True})  # fmt: skip
    assert env_note(run, {"NCCL_PROTO": "Simple", "NCCL_MIN_NCHANNELS": "32"}) is None  # case, inert variables
    note = env_note(run, {"NCCL_PROTO": "Simple", "NCCL_MIN_NCHANNELS": "16", "NCCL_ALGO": "Tree"})
    assert note is not None
    assert "NCCL_MIN_NCHANNELS=32 in the run, 16 in the scenario" in note
    assert "NCCL_ALGO unset in the run, Tree in the scenario" in note
    partial = Measurement("allreduce", software={"env": {"NCCL_PROTO": "Simple"}})  # a published excerpt
    assert env_note(partial, {"NCCL_PROTO": "Simple", "NCCL_ALGO": "Tree"}) is None
    assert env_note(Measurement("allreduce"), {"NCCL_ALGO": "Tree"}) is None


def test_dtype_note_only_for_nccl_tests() -> None:
    m = Measurement("allreduce", dtype="float16", software={"benchmark": "NVIDIA/nccl-tests"})
    assert dtype_note(m, "float16") is None
    assert dtype_note(m, "float32") == "the run's type is float16, the scenario's workload.dtype float32"
    assert dtype_note(Measurement("allreduce", dtype="float16"), "float32") is None


def _hgx_report(env: tuple[str, ...], type_name: str = "float") -> dict[str, Any]:
    return _report({1 << 20: 40.0, 1 << 24: 120.0}, processes=8, ngpus=1, env=env, type_name=type_name)


def test_validate_notes_a_run_whose_variables_the_scenario_lacks(tmp_path: Path) -> None:
    sim = Simulator(load_scenario(SCENARIOS / "hgx-h100.yaml"))
    m = read_measurement(_write(tmp_path, _hgx_report(("NCCL_ALGO=Ring", "NCCL_IB_QPS_PER_CONNECTION=2"), "half")))
    notes = validate(sim, m).notes
    assert any("NCCL_ALGO=Ring in the run, unset in the scenario" in n for n in notes)
    assert any("not modelled: NCCL_IB_QPS_PER_CONNECTION=2" in n for n in notes)
    assert "the run's type is float16, the scenario's workload.dtype float32" in notes
    ring = Simulator(load_scenario(SCENARIOS / "hgx-h100.yaml", overrides=["backends.nccl.env.NCCL_ALGO=ring"]))
    assert not any("NCCL variables differ" in n for n in validate(ring, read_measurement(_write(tmp_path, _hgx_report(
        ("NCCL_ALGO=Ring",)), "b.json"))).notes)  # fmt: skip


def test_cli_validate_reads_a_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _hgx_report(("NCCL_ALGO=Ring",)))
    assert main(["validate", "hgx-h100", str(path)]) == 0
    out = capsys.readouterr().out
    assert "# note: the run's NCCL variables differ from backends.nccl.env: NCCL_ALGO=Ring" in out
    assert "16777216" in out and "1048576" in out


def test_ib_hca_listing_every_nic_is_the_default(tmp_path: Path) -> None:
    """NCCL_IB_HCA is compared by the NICs it leaves NCCL: all eight listed is NCCL's default, two are not (nor
    mlx5_0 to mlx5_7: on this template's DGX H100 names, mlx5_0 mlx5_3-6 mlx5_9-11, they leave seven)."""
    sim = Simulator(load_scenario(SCENARIOS / "2node-h100-ib.yaml"))
    every = "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"  # an exact match of each (NCCL's leading =)
    m = read_measurement(_write(tmp_path, _report({1 << 20: 60.0}, processes=16, ngpus=1, env=(
        f"NCCL_IB_HCA={every}",))))  # fmt: skip
    assert not any("NCCL_IB_HCA" in n for n in validate(sim, m).notes)
    two = read_measurement(_write(tmp_path, _report({1 << 20: 60.0}, processes=16, ngpus=1, env=(
        "NCCL_IB_HCA=mlx5_0:1,mlx5_1:1",)), "two.json"))  # fmt: skip
    assert any("NCCL_IB_HCA=mlx5_0:1,mlx5_1:1 in the run, unset in the scenario" in n for n in validate(sim, two).notes)
    seven = read_measurement(_write(tmp_path, _report({1 << 20: 60.0}, processes=16, ngpus=1, env=(
        "NCCL_IB_HCA=" + ",".join(f"mlx5_{i}:1" for i in range(8)),)), "seven.json"))  # fmt: skip
    assert any("NCCL_IB_HCA=mlx5_0:1" in n for n in validate(sim, seven).notes)


def test_nccl_tests_logs_get_the_harness_note(tmp_path: Path) -> None:
    """nccl-tests queues its calls back to back: a log of it against workload.host_overhead: torch is noted."""
    path = tmp_path / "ar.txt"
    path.write_text("# Collective test starting: all_reduce_perf\n" + _text_row(1 << 20, 40.0, 39.0, per_iter=False,
                                                                               stamp=False) + "\n")  # fmt: skip
    m = read_measurement(path, nranks=8)
    torch = Simulator(load_scenario(SCENARIOS / "hgx-h100.yaml", overrides=["workload.host_overhead=torch"]))
    assert any(n.startswith("nccl-tests queues its calls back to back") for n in validate(torch, m).notes)
    assert not any("queues" in n for n in validate(Simulator(load_scenario(SCENARIOS / "hgx-h100.yaml")), m).notes)


def test_validate_notes_a_run_on_other_gpus(tmp_path: Path) -> None:
    """The run's GPU name, known to a preset's cuda_names, against the scenario's GPU presets."""
    report = _hgx_report(())
    for d in report["config"]["devices"]:
        d["device_info"] = "NVIDIA B200"
    m = read_measurement(_write(tmp_path, report))
    h100 = Simulator(load_scenario(SCENARIOS / "hgx-h100.yaml"))
    assert "the run's GPUs are NVIDIA B200 (b200-sxm-180gb), the scenario's h100-sxm5-80gb" in validate(h100, m).notes
    b200 = Simulator(load_scenario(SCENARIOS / "hgx-h100.yaml", overrides=["cluster.node=hgx-b200"]))
    assert not any("the run's GPUs" in n for n in validate(b200, m).notes)


def test_validate_notes_another_root_operator_and_type(tmp_path: Path) -> None:
    """A reduce_perf run with -o max -r 1 against a scenario of sum at root 0: both noted (they went unsaid); the
    type too for a collsim bench file, as for nccl-tests'."""
    path = tmp_path / "reduce.txt"
    path.write_text("# Collective test starting: reduce_perf\n"
                    "  1048576  262144  float  max  1  40.0  26.2  26.2  0  39.0  26.9  26.9  0\n")  # fmt: skip
    m = read_measurement(path, nranks=8)
    assert (m.software["op"], m.software["root"]) == ("max", 1)
    notes = validate(Simulator(load_scenario(SCENARIOS / "hgx-h100.yaml", overrides=["workload.collective=reduce"])),
                     m).notes  # fmt: skip
    assert any(n.startswith("the run's operator is max, the scenario's workload.op sum") for n in notes)
    assert any(n.startswith("the run's root is rank 1, the scenario's workload.root 0") for n in notes)
    same = load_scenario(SCENARIOS / "hgx-h100.yaml",
                         overrides=["workload.collective=reduce", "workload.op=max", "workload.root=1"])  # fmt: skip
    assert not any("the run's root" in n or "the run's operator" in n for n in validate(Simulator(same), m).notes)
    bench = Measurement("allreduce", 8, m.rows, backend="nccl", dtype="float16",
                        software={"benchmark": "collsim bench"})  # fmt: skip
    assert dtype_note(bench, "float32") == "the run's type is float16, the scenario's workload.dtype float32"


def test_validate_notes_a_gloo_run_on_more_interfaces() -> None:
    """A collsim bench run with GLOO_SOCKET_IFNAME=lo,lo (two contexts) against backends.gloo.interfaces: 1."""
    from collsim.calibration import MeasurementRow

    rows = [MeasurementRow(1 << 20, 900.0, "median")]
    env = {"GLOO_SOCKET_IFNAME": "lo,lo"}
    m = Measurement("allreduce", 2, rows, backend="gloo", device="cpu",
                    software={"benchmark": "collsim bench", "env": env})  # fmt: skip
    sim = Simulator(load_scenario(SCENARIOS / "loopback-gloo-cpu.yaml"))
    note = "the run's GLOO_SOCKET_IFNAME=lo,lo lists 2 interfaces, the scenario's backends.gloo.interfaces is 1"
    assert note in validate(sim, m).notes
    two = Simulator(load_scenario(SCENARIOS / "loopback-gloo-cpu.yaml", overrides=["backends.gloo.interfaces=2"]))
    assert not any("GLOO_SOCKET_IFNAME" in n for n in validate(two, m).notes)


def test_validate_names_the_measurement_of_a_collective_not_simulated(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A gather_perf log blamed the scenario (backends.nccl: unknown collective 'gather'); the file is named."""
    path = tmp_path / "gather.txt"
    path.write_text("# Collective test starting: gather_perf\n"
                    "  1048576  32768  float  none  0  40.0  26.2  22.9  0  39.0  26.9  23.5  0\n")  # fmt: skip
    assert main(["validate", "hgx-h100", str(path), "--nranks", "8"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: collective: the measurement is gather, which collsim does not simulate" in err
