"""collsim's measurement format: round trips, the published cases, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests_support import shared_calibration_dir

from collsim.calibration import (
    Measurement,
    MeasurementError,
    MeasurementRow,
    parse_measurement_csv,
    parse_measurement_json,
    read_measurement,
    summarise_times,
)


def _sample() -> Measurement:
    return Measurement(
        collective="allreduce",
        nranks=2,
        backend="gloo",
        device="cpu",
        hardware={"cpu": "test", "nodes": 1},
        software={"torch_version": "2.13.0", "env": {"GLOO_SOCKET_IFNAME": "lo"}},
        source={"command": "collsim bench", "date": "2026-11-29"},
        rows=[MeasurementRow(1024, 50.0, "median", 20, 2.5), MeasurementRow(2**20, 1000.0, "median", 20, 10.0)],
    )


def test_json_round_trip_keeps_every_field() -> None:
    m = _sample()
    back = parse_measurement_json(m.to_json())
    assert back.rows == m.rows
    assert (back.collective, back.nranks, back.backend, back.device) == ("allreduce", 2, "gloo", "cpu")
    assert back.software["env"] == {"GLOO_SOCKET_IFNAME": "lo"}
    doc = json.loads(m.to_json())
    assert doc["format"] == "collsim-measurement/1"
    # busbw = 2(n-1)/n x size/time: 2 ranks -> factor 1; 1 MiB in 1000 us = 1.048576 GB/s
    assert doc["rows"][1]["busbw_gbps"] == pytest.approx(1.048576)


def test_csv_round_trip(tmp_path: Path) -> None:
    m = _sample()
    path = tmp_path / "m.csv"
    m.write(path)
    text = path.read_text()
    assert text.startswith("# format: \"collsim-measurement/1\"")
    back = read_measurement(path)
    assert back.rows == m.rows and back.hardware == m.hardware and back.nranks == 2


def test_dataframe_columns() -> None:
    df = _sample().dataframe()
    assert list(df.columns[:4]) == ["size_bytes", "time_us", "algbw_gbps", "busbw_gbps"]
    assert df["time_us"].tolist() == [50.0, 1000.0]


def test_summarise_times_median_and_iqr() -> None:
    assert summarise_times([3e-6, 1e-6, 2e-6]) == (2.0, 1.0)
    with pytest.raises(ValueError):
        summarise_times([])


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"collective": "allreduce", "rows": []}, "rows"),
        ({"collective": "allreduce", "rows": [{"time_us": 1.0}]}, "rows[0]"),
        ({"collective": "allreduce", "rows": [{"size_bytes": 8, "time_us": -1}]}, "rows[0].time_us"),
        ({"collective": "allreduce", "rows": [{"size_bytes": 8, "time_us": "fast"}]}, "rows[0].time_us"),
        ({"collective": "allreduce", "rows": [{"size_bytes": 8.5, "time_us": 1}]}, "rows[0].size_bytes"),
        ({"collective": "allsum", "rows": [{"size_bytes": 8, "time_us": 1}]}, "collective"),
        ({"collective": "allreduce", "nranks": 0, "rows": [{"size_bytes": 8, "time_us": 1}]}, "nranks"),
        ({"format": "other/2", "collective": "allreduce", "rows": [{"size_bytes": 8, "time_us": 1}]}, "format"),
        ({"collective": "allreduce", "rows": [{"size_bytes": 8, "time_us": 1, "statistic": "p90"}]},
         "rows[0].statistic"),
    ],
)
def test_bad_fields_name_file_and_field(doc: dict, field: str) -> None:
    with pytest.raises(MeasurementError) as err:
        parse_measurement_json(json.dumps(doc), file="m.json")
    assert err.value.file == "m.json" and err.value.field == field
    assert str(err.value).startswith(f"m.json: {field}: ")


def test_bad_json_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(MeasurementError, match=r"^m.json: invalid JSON"):
        parse_measurement_json("{", file="m.json")
    with pytest.raises(MeasurementError, match="file not found"):
        read_measurement(tmp_path / "absent.json")
    with pytest.raises(MeasurementError, match="line 1"):
        parse_measurement_csv("# nranks: {bad\nsize_bytes,time_us\n8,1\n", file="m.csv")
    # a JSON object without its collective names the missing field, not an unknown collective ''
    rows = [{"size_bytes": 8, "time_us": 1.0}]
    with pytest.raises(MeasurementError, match=r"^m.json: collective: required field is missing; expected one of: all"):
        parse_measurement_json(json.dumps({"nranks": 2, "rows": rows}), file="m.json")


def test_time_derived_from_busbw_when_only_bandwidth_is_published() -> None:
    doc = {"collective": "allreduce", "nranks": 8, "rows": [{"size_bytes": 2**30, "inplace_busbw_gbps": 470.0}]}
    (row,) = parse_measurement_json(json.dumps(doc)).rows
    # time = size x 2(n-1)/n / busbw = 2^30 x 1.75 / 470e9 s
    assert row.time_us == pytest.approx(2**30 * 1.75 / 470e9 * 1e6)
    assert row.statistic == "derived"


def test_a_row_with_only_the_in_place_time_takes_it_not_a_time_from_the_rounded_bandwidth() -> None:
    """nccl-tests prints busbw to two decimals: 0.01 GB/s at 64 B on two ranks gives 6.4 us, where the row said
    12.21 us in place (+78% of error that was the file's rounding)."""
    doc = {"collective": "allreduce", "nranks": 2,
           "rows": [{"size_bytes": 64, "busbw_gbps": 0.01, "inplace_time_us": 12.21, "statistic": "mean"}]}  # fmt: skip
    (row,) = parse_measurement_json(json.dumps(doc)).rows
    assert (row.time_us, row.statistic) == (12.21, "mean")
    doc["rows"][0]["inplace_time_us"] = "slow"  # type: ignore[index]
    with pytest.raises(MeasurementError, match=r"rows\[0\]\.inplace_time_us"):
        parse_measurement_json(json.dumps(doc))


def test_the_backend_field_is_checked_not_guessed_over() -> None:
    """``"backend": "mpi"`` was dropped and the scenario's first backend (NCCL) compared with a Gloo run unsaid."""
    doc = {"collective": "allreduce", "nranks": 2, "backend": "Gloo",
           "rows": [{"size_bytes": 1024, "time_us": 10.0}]}  # fmt: skip
    assert parse_measurement_json(json.dumps(doc)).backend == "gloo"  # the letter case as people write it
    doc["backend"] = "mpi"
    with pytest.raises(MeasurementError, match=r"backend: expected one of nccl, gloo, got 'mpi'"):
        parse_measurement_json(json.dumps(doc), file="m.json")


def test_nccl_tests_log_through_read_measurement(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_text(
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20\n"
        "#  Rank  0 Group  0 Pid 1 on h device  0 [0x1] GPU\n#  Rank  1 Group  0 Pid 2 on h device  1 [0x2] GPU\n"
        "   16  4  float  sum  -1  12.0  0.00  0.00  0  11.0  0.00  0.00  0\n"
        "    8  2  float  sum  -1  10.0  0.00  0.00  0   9.0  0.00  0.00  0\n"
    )
    with pytest.raises(MeasurementError, match="collective"):
        read_measurement(path)
    m = read_measurement(path, collective="allreduce")
    assert [(r.size_bytes, r.time_us, r.statistic) for r in m.rows] == [(8, 10.0, "mean"), (16, 12.0, "mean")]
    assert m.nranks == 2 and m.backend == "nccl"
    assert m.software == {"benchmark": "NVIDIA/nccl-tests", "op": "sum", "gpus_per_process": 1}  # no NCCL version
    path.write_text("h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n" + path.read_text())
    assert read_measurement(path, collective="allreduce").software["nccl_version"] == "2.21.5"


SHARED = shared_calibration_dir()


@pytest.mark.skipif(SHARED is None, reason="shared/calibration-data not found (set COLLSIM_SHARED)")
def test_every_published_case_reads() -> None:
    assert SHARED is not None
    for path in sorted(SHARED.glob("*.json")):
        data = json.loads(path.read_text())
        m = read_measurement(path)
        assert len(m.rows) == len(data["rows"]), path.name
        assert m.nranks is not None and m.backend in ("nccl", "gloo"), path.name
        assert all(r.time_us > 0 for r in m.rows)
        assert m.sizes() == sorted(m.sizes())


def test_a_binary_file_is_one_clear_error(tmp_path: Path) -> None:
    binary = tmp_path / "log.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(MeasurementError, match="not a UTF-8 text file") as info:
        read_measurement(binary)
    assert str(binary) in str(info.value)


def test_a_log_whose_rows_all_time_zero_is_an_error(tmp_path: Path) -> None:
    """Every data row at 0 us (nothing to compare): an error saying so, never an empty validation that passes."""
    from collsim.calibration import MeasurementError, read_measurement
    from collsim.cli import main

    log = tmp_path / "zero.log"
    log.write_text(
        "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
        "     1048576        262144     float     sum      -1     0.00    0.00    0.00      0\n"
    )
    with pytest.raises(MeasurementError, match="no valid rows: all 1 data rows have a time of 0 us"):
        read_measurement(log, collective="allreduce", nranks=8)
    assert main(["validate", "dgx-a100", str(log), "--collective", "allreduce", "--nranks", "8"]) == 2


@pytest.mark.parametrize(
    ("meta", "field", "expected"),
    [
        ('"hardware": "8x H100"', "hardware", "expected a mapping"),
        ('"hardware": ["H100"]', "hardware", "expected a mapping"),
        ('"software": "nccl 2.26"', "software", "expected a mapping"),
        ('"hardware": {"hosts": "gpu01"}', "hardware.hosts", "expected a list of host names"),
    ],
)
def test_metadata_of_the_wrong_shape_is_one_clear_error(meta: str, field: str, expected: str) -> None:
    """A host list given as one string would otherwise be read a character a host."""
    text = '{"collective": "allreduce", "nranks": 8, ' + meta + ', "rows": [{"size_bytes": 1024, "time_us": 9.0}]}'
    with pytest.raises(MeasurementError, match=expected) as info:
        parse_measurement_json(text, file="m.json")
    assert info.value.field == field


def test_a_size_given_twice_is_an_error() -> None:
    text = '# collective: "allreduce"\nsize_bytes,time_us\n1024,9.0\n2048,12.0\n1024,9.5\n'
    with pytest.raises(MeasurementError, match=r"size 1024 B is also rows\[0\]"):
        parse_measurement_csv(text, file="m.csv")


def test_a_csv_saved_with_a_byte_order_mark_and_crlf_reads(tmp_path: Path) -> None:
    """Excel writes a UTF-8 BOM and CRLF line ends; the metadata line after the BOM is still metadata."""
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf# collective: \"allreduce\"\r\n# nranks: 2\r\nsize_bytes,time_us\r\n1024,9.0\r\n")
    m = read_measurement(path)
    assert (m.collective, m.nranks, m.rows[0].time_us) == ("allreduce", 2, 9.0)


def test_a_log_with_a_stray_byte_reads_it_replaced(tmp_path: Path) -> None:
    """A log's other programs' lines may hold any bytes (a Latin-1 host name in an NCCL WARN line)."""
    path = tmp_path / "ar.log"
    path.write_bytes(b"# all_reduce_perf\nhost\xe9:1:1 [0] NCCL WARN x\n  1024  256  float  sum  -1  9.0  0.1  0.2  0"
                     b"  9.0  0.1  0.2  0\n")  # fmt: skip
    m = read_measurement(path, nranks=2)  # the NCCL line is known noise: no warning either
    assert [r.time_us for r in m.rows] == [9.0]


def test_an_nccl_tests_row_of_no_elements_is_skipped_with_a_warning(tmp_path: Path) -> None:
    """all_gather_perf with nccl-tests' default -b 8 on 8 GPUs prints a row of size 0."""
    path = tmp_path / "ag.log"
    path.write_text("# all_gather_perf\n  0  0  float  none  -1  0.06  0.00  0.00  0  0.06  0.00  0.00  0\n"
                    "  1048576  32768  float  none  -1  25.1  41.7  36.5  0  24.9  42.1  36.9  0\n")  # fmt: skip
    with pytest.warns(UserWarning, match=r"skipped the rows of no elements \(count 0: 0 B\)"):
        m = read_measurement(path, nranks=8)
    assert m.sizes() == [1048576]
