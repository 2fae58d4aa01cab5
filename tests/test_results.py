"""Tests for collsim.results: nccl-tests metrics and output formats."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

import pytest
from contract import CONTRACT_KEYS

from collsim.results import (
    BUSBW_FACTORS,
    Record,
    busbw_factor,
    canonical_collective,
    format_nccl_tests,
    make_record,
    records_to_csv,
    records_to_dataframe,
    records_to_json,
)

FLAT_COLUMNS = [*CONTRACT_KEYS, "redop", "root", "channels"]


def rec(**kw: Any) -> Record:
    args: dict[str, Any] = dict(
        backend="nccl",
        collective="allreduce",
        algorithm="ring",
        protocol="simple",
        nranks=8,
        dtype="float32",
        size_bytes=1024**3,
        time_s=4643.20e-6,
    )
    args.update(kw)
    return make_record(**args)


# --- busbw factors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("collective", "n", "expected"),
    [
        ("allreduce", 2, 1.0),
        ("allreduce", 8, 1.75),
        ("allgather", 2, 0.5),
        ("allgather", 8, 0.875),
        ("reduce_scatter", 2, 0.5),
        ("reduce_scatter", 8, 0.875),
        ("alltoall", 2, 0.5),
        ("alltoall", 8, 0.875),
        ("broadcast", 2, 1.0),
        ("broadcast", 8, 1.0),
        ("reduce", 2, 1.0),
        ("reduce", 8, 1.0),
        ("sendrecv", 2, 1.0),
        ("sendrecv", 8, 1.0),
    ],
)
def test_busbw_factor(collective: str, n: int, expected: float) -> None:
    assert busbw_factor(collective, n) == expected
    assert BUSBW_FACTORS[collective](n) == expected


def test_busbw_factor_single_rank_and_aliases() -> None:
    assert busbw_factor("allreduce", 1) == 0.0
    assert busbw_factor("all_reduce", 4) == 1.5
    assert busbw_factor("AllGather", 4) == 0.75
    assert canonical_collective("reduce-scatter") == "reduce_scatter"
    assert canonical_collective("all_to_all") == "alltoall"


def test_busbw_factor_errors_name_valid_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown collective 'allsum'.*allreduce.*sendrecv"):
        busbw_factor("allsum", 8)
    with pytest.raises(ValueError, match="nranks must be an integer >= 1"):
        busbw_factor("allreduce", 0)


# --- make_record ---------------------------------------------------------------------------------------------


def test_make_record_nccl_tests_example() -> None:
    r = rec()
    assert r.count == 268435456
    assert r.time_us == pytest.approx(4643.20, abs=1e-9)
    assert round(r.algbw_gbps, 2) == 231.25
    assert round(r.busbw_gbps, 2) == 404.69
    assert r.busbw_gbps == pytest.approx(r.algbw_gbps * 1.75, rel=1e-15)
    assert (r.redop, r.root, r.channels, r.breakdown, r.notes) == ("sum", -1, None, {}, [])


def test_make_record_exact_small() -> None:
    # 8 bytes in 1 us = 8e6 B/s = 0.008 GB/s; allreduce on 2 ranks: factor 1.
    r = rec(nranks=2, size_bytes=8, time_s=1e-6)
    assert (r.count, r.algbw_gbps, r.busbw_gbps) == (2, 0.008, 0.008)


@pytest.mark.parametrize(
    ("collective", "dtype", "size", "n", "count", "redop"),
    [
        ("allgather", "float32", 4096, 8, 128, "none"),  # per rank: 4096 / 4 / 8
        ("reduce_scatter", "float16", 4096, 4, 512, "sum"),
        ("alltoall", "int8", 100, 8, 12, "none"),  # floor division
        ("allreduce", "float64", 4096, 8, 512, "sum"),
        ("broadcast", "bfloat16", 4096, 8, 2048, "none"),
        ("reduce", "int32", 4096, 8, 1024, "sum"),
        ("sendrecv", "uint8", 4096, 2, 4096, "sum"),
    ],
)
def test_make_record_count_semantics(collective: str, dtype: str, size: int, n: int, count: int, redop: str) -> None:
    r = rec(collective=collective, dtype=dtype, size_bytes=size, nranks=n, time_s=1e-6)
    assert r.count == count
    assert r.redop == redop
    assert r.algbw_gbps == size / 1e-6 / 1e9


def test_make_record_allgather_bandwidth() -> None:
    # nccl-tests AllGatherGetBw: algbw = count * typesize * nranks / time; 8 ranks x 1 MiB per rank in 100 us.
    r = rec(collective="allgather", size_bytes=8 * 2**20, time_s=100e-6)
    assert r.count == 2**20 // 4
    assert r.algbw_gbps == pytest.approx(83.88608, rel=1e-12)
    assert r.busbw_gbps == pytest.approx(83.88608 * 7 / 8, rel=1e-12)


def test_make_record_zero_time() -> None:
    r = rec(time_s=0.0)
    assert (r.time_us, r.algbw_gbps, r.busbw_gbps) == (0.0, 0.0, 0.0)


def test_make_record_breakdown_and_notes() -> None:
    r = rec(size_bytes=1000, time_s=3e-6, breakdown={"latency": 1e-6, "bandwidth": 2e-6}, notes=["n1"], channels=4)
    assert r.breakdown == {"latency": 1e-6, "bandwidth": 2e-6}
    assert r.notes == ["n1"]
    assert r.channels == 4


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"dtype": "float8"}, r"unknown dtype 'float8'.*float32"),
        ({"collective": "scan"}, r"unknown collective 'scan'"),
        ({"size_bytes": -1}, "size_bytes must be an integer >= 0"),
        ({"size_bytes": 1.5}, "size_bytes must be an integer"),
        ({"time_s": -1e-6}, "time_s must be a finite number of seconds >= 0"),
        ({"time_s": math.inf}, "time_s must be a finite"),
        ({"time_s": "1us"}, "time_s must be a number of seconds"),
        ({"nranks": 0}, "nranks must be an integer >= 1"),
        ({"backend": ""}, "backend must be a non-empty string"),
        ({"redop": "my op"}, "redop must be one word"),
        ({"channels": 0}, "channels must be an integer >= 1"),
        ({"time_s": 3e-6, "breakdown": {"a": 1e-6}}, r"breakdown must add up to time_s.*a=1e-06"),
        ({"time_s": 1e-6, "breakdown": {"a": 2e-6, "b": -1e-6}}, r"breakdown\['b'\] must be"),
    ],
)
def test_make_record_rejects_bad_input(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rec(**kw)


def test_to_dict_order_and_json_safe() -> None:
    import numpy as np

    r = rec(nranks=np.int64(8), size_bytes=np.int64(1024), time_s=np.float64(1e-6), breakdown={"x": 1e-6})
    d = r.to_dict()
    assert list(d) == [*FLAT_COLUMNS, "breakdown", "notes"]
    assert type(d["nranks"]) is int and type(d["size_bytes"]) is int and type(d["time_us"]) is float
    json.dumps(d, allow_nan=False)


# --- nccl-tests text -----------------------------------------------------------------------------------------


def test_format_nccl_tests_exact_layout() -> None:
    text = format_nccl_tests([rec()])
    assert text == (
        "#                                                              out-of-place\n"
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)\n"
        "  1073741824     268435456     float     sum      -1  4643.20  231.25  404.69    N/A\n"
        "# Avg bus bandwidth    : 404.688\n"
    )


def test_format_nccl_tests_columns_reparse() -> None:
    records = [
        rec(size_bytes=8, time_s=12.34e-6),
        rec(collective="allgather", dtype="float16", size_bytes=2**20, time_s=25e-6),
        rec(collective="broadcast", dtype="bfloat16", root=3, size_bytes=2**34, time_s=0.127997),
        rec(size_bytes=0, time_s=0.0),
    ]
    text = format_nccl_tests(records, header="collsim simulation\nscenario: dgx-a100")
    lines = text.splitlines()
    assert lines[0] == "# collsim simulation"
    assert lines[1] == "# scenario: dgx-a100"
    rows = [ln.split() for ln in lines if not ln.startswith("#")]
    assert all(len(cols) == 9 for cols in rows)
    assert rows[0] == ["8", "2", "float", "sum", "-1", "12.34", "0.00", "0.00", "N/A"]
    assert rows[1] == ["1048576", "65536", "half", "none", "-1", "25.00", "41.94", "36.70", "N/A"]
    # Time past 9999.99 us drops decimals to fit 7 characters, as nccl-tests' getFloatStr does.
    assert rows[2] == ["17179869184", "8589934592", "bfloat16", "none", "3", "127997", "134.22", "134.22", "N/A"]
    assert rows[3] == ["0", "0", "float", "sum", "-1", "0.00", "0.00", "0.00", "N/A"]
    for cols, r in zip(rows, records, strict=True):
        assert int(cols[0]) == r.size_bytes and int(cols[1]) == r.count
        assert float(cols[5]) == pytest.approx(r.time_us, abs=0.5)
    avg = float(lines[-1].split(":")[1])
    assert avg == pytest.approx(sum(r.busbw_gbps for r in records) / 4, rel=1e-5)


def test_format_nccl_tests_widths_fallback() -> None:
    # 100 s = 1e8 us does not fit 7 characters even without decimals: exponent, as nccl-tests.
    row = format_nccl_tests([rec(size_bytes=8, time_s=100.0)]).splitlines()[3]
    assert row.split()[5] == "1.0e+08"
    # 1234.5 GB/s busbw: 6 characters -> one decimal.
    row = format_nccl_tests([rec(collective="broadcast", size_bytes=1_234_500, time_s=1e-6)]).splitlines()[3]
    assert row.split()[6:8] == ["1234.5", "1234.5"]


def test_format_nccl_tests_empty() -> None:
    assert format_nccl_tests([]).splitlines()[-1] == "# Avg bus bandwidth    : 0"


# --- JSON / CSV / DataFrame ----------------------------------------------------------------------------------


def test_records_to_json() -> None:
    import numpy as np

    r = rec(size_bytes=8, time_s=1e-6, notes=["hello"])
    text = records_to_json([r], {"name": "demo", "n": np.int64(2)}, collsim_version="0.1.0")
    doc = json.loads(text)
    assert list(doc) == ["scenario", "results", "collsim_version"]
    assert doc["scenario"] == {"name": "demo", "n": 2}
    assert doc["collsim_version"] == "0.1.0"
    (res,) = doc["results"]
    for key in CONTRACT_KEYS:
        assert key in res
    assert list(res)[: len(CONTRACT_KEYS)] == CONTRACT_KEYS
    assert res["count"] == 2 and res["algbw_gbps"] == 0.008 and res["notes"] == ["hello"]
    assert text.startswith('{\n  "scenario": {\n    "name"')  # indent=2
    assert json.loads(records_to_json([]))["scenario"] is None


def test_records_to_json_errors() -> None:
    with pytest.raises(ValueError, match="'results' is reserved"):
        records_to_json([], results=[])
    with pytest.raises(ValueError, match="NaN or Infinity"):
        records_to_json([], {"x": math.nan})
    with pytest.raises(TypeError, match="cannot write a object as JSON"):
        records_to_json([], {"x": object()})


def test_records_to_csv() -> None:
    a = rec(size_bytes=8, time_s=3e-6, breakdown={"net": 2e-6, "launch": 1e-6}, channels=2)
    b = rec(size_bytes=16, time_s=1e-6, breakdown={"reduce": 1e-6})
    text = records_to_csv([a, b])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == [*FLAT_COLUMNS, "breakdown_net", "breakdown_launch", "breakdown_reduce"]
    assert rows[1][:8] == ["nccl", "allreduce", "ring", "simple", "8", "float32", "8", "2"]
    assert rows[1][FLAT_COLUMNS.index("channels")] == "2"
    assert rows[2][FLAT_COLUMNS.index("channels")] == ""
    assert rows[1][-3:] == ["2e-06", "1e-06", ""]
    assert rows[2][-3:] == ["", "", "1e-06"]
    assert records_to_csv([]) == ",".join(FLAT_COLUMNS) + "\n"


def test_records_to_dataframe() -> None:

    a = rec(size_bytes=8, time_s=3e-6, breakdown={"net": 3e-6})
    b = rec(size_bytes=16, time_s=1e-6)
    df = records_to_dataframe([a, b])
    assert list(df.columns) == [*FLAT_COLUMNS, "breakdown_net"]
    assert list(df["size_bytes"]) == [8, 16]
    assert list(df["count"]) == [2, 4]
    assert df.loc[0, "breakdown_net"] == 3e-6
    assert df["breakdown_net"].isna().tolist() == [False, True]
    assert list(records_to_dataframe([]).columns) == FLAT_COLUMNS


# --- to_dict follows the field types -----------------------------------------------------------------------


def test_to_dict_keeps_a_float_field_added_later() -> None:
    from dataclasses import dataclass

    @dataclass
    class Measured(Record):
        stddev_us: float = 0.0
        iterations: int | None = None
        tags: list[str] | None = None

    base = rec(size_bytes=1000, time_s=3e-6)
    m = Measured(**{**base.__dict__, "stddev_us": 0.25, "iterations": 20, "tags": ["a"]})
    d = m.to_dict()
    assert d["stddev_us"] == 0.25 and type(d["stddev_us"]) is float  # not truncated to 0
    assert d["iterations"] == 20 and d["tags"] == ["a"]
    assert list(d)[: len(FLAT_COLUMNS)] == FLAT_COLUMNS
    assert Measured(**{**base.__dict__}).to_dict()["iterations"] is None
    json.dumps(d, allow_nan=False)


def test_to_dict_refuses_a_field_type_it_cannot_write() -> None:
    from dataclasses import dataclass

    @dataclass
    class Odd(Record):
        extra: complex = 0j

    with pytest.raises(TypeError, match="no JSON form"):
        Odd(**rec().__dict__).to_dict()


# --- compare and explain text ------------------------------------------------------------------------------


def test_comparison_and_explanation_formats() -> None:
    from collsim.results import (
        Comparison,
        Explanation,
        agreement,
        comparisons_to_csv,
        explanations_to_json,
        format_comparison,
        format_explanation,
        share_text,
    )

    nccl = rec(size_bytes=1024, time_s=1e-5, breakdown={"latency": 1e-5})
    gloo = rec(backend="gloo", size_bytes=1024, time_s=4e-5, breakdown={"tcp": 3e-5, "wait": 1e-5})
    row = Comparison(1024, nccl, gloo)
    assert row.speedup == pytest.approx(4.0) and share_text(gloo) == "75% tcp, 25% wait"
    text = format_comparison(
        [row], name="demo", collectives=["allreduce"], dtype="float32", gloo_algorithm="ring", gloo_transport="tcp",
        gloo_device="cuda",
    )
    assert text.startswith("# collsim compare: demo (8 ranks, allreduce float32)")
    assert "4.0x" in text and "Gloo: 75% tcp, 25% wait" in text
    assert comparisons_to_csv([row]).splitlines()[1].startswith("1024,10.0")
    pairs = {("Ring", "LL"): 2e-6, ("Tree", "LL"): 3e-6}
    rows = [Explanation("allreduce", 1024, pairs, ("Ring", "LL"), {("Ring", "LL"): 4e-6, ("Tree", "LL"): 1e-6})]
    assert agreement(rows) == (0, 1)
    table = format_explanation(rows, name="demo", nranks=8, all_pairs=True)
    assert "2.0*" in table and "1.0+" in table and "same pair at 0 of 1 sizes" in table
    doc = json.loads(explanations_to_json(rows, None, False, agreement(rows)))
    assert doc["agreement"] == {"same_choice": 0, "sizes": 1} and doc["explain"][0]["pairs"][0]["model_us"] == 2.0
    # several collectives: a table each, with its own pairs (Tree only for allreduce); a pair not priced is "-"
    ag = Explanation("allgather", 1024, {("Ring", "LL"): 5e-6}, ("Ring", "LL"), {("Ring", "LL"): 6e-6})
    big = Explanation("allreduce", 2048, {("Ring", "LL"): 3e-6}, ("Ring", "LL"), {("Ring", "LL"): 3e-6})
    table = format_explanation([*rows, big, ag], name="demo", nranks=8, all_pairs=True)
    lines = table.splitlines()
    assert lines[1] == "# allreduce" and "# allgather" in lines
    allgather = lines[lines.index("# allgather") + 1]
    assert "Ring/LL" in allgather and "Tree/LL" not in allgather
    assert [c for c in lines[lines.index("# allreduce") + 4].split()[:3]] == ["2KiB", "3.0*", "-"]
