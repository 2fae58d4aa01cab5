"""Tests of collsim.calibration.torchtrace: PyTorch profiler (Kineto) traces read as a job's collective calls, and
``collsim import torch-trace``."""

from __future__ import annotations

import gzip
import io
import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.calibration import MeasurementError, ParseWarning, read_measurement, torchtrace
from collsim.calibration.calls import CallLogError, simulated_collective
from collsim.calibration.torchtrace import _events, _Stream, read_torch_traces, starts_like_torch_trace
from collsim.cli import main


def _kernel(name: str, seq: int | None, nelems: tuple[int, int], dur: float, *, ts: float, group: int = 4,
            dtype: str = "BFloat16", pg: str = "0", splits: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A collective kernel as Kineto writes it (output_json.cpp: the record_param_comms metadata in its args)."""
    args: dict[str, Any] = {"External id": 7, "device": 0, "stream": 21, "correlation": 99,
                            "Collective name": name, "In msg nelems": nelems[0], "Out msg nelems": nelems[1],
                            "Group size": group, "dtype": dtype, "Process Group Name": pg,
                            "Process Group Description": "default_pg" if pg == "0" else "undefined"}  # fmt: skip
    if splits is not None:
        args["In split size"] = args["Out split size"] = splits
    if seq is not None:
        args["Seq"] = seq
    return {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage)",
            "pid": 0, "tid": 21, "ts": ts, "dur": dur, "args": args}  # fmt: skip


def _trace(rank: int, host: str, kernels: list[dict[str, Any]], *, nccl: str = "2.27.5") -> dict[str, Any]:
    other = [{"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
             {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 9, "tid": 9, "ts": 1.0, "dur": 3.0,
              "args": {"Collective name": "allreduce", "dtype": "BFloat16"}},
             {"ph": "X", "cat": "kernel", "name": "ampere_bf16_gemm", "pid": 0, "tid": 7, "ts": 2.0, "dur": 50.0,
              "args": {"device": 0}}]  # fmt: skip
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4, "nccl_version": nccl},
            "host_name": host, "traceEvents": other + kernels, "traceName": f"rank{rank}.pt.trace.json"}  # fmt: skip


def _write(folder: Path, traces: list[dict[str, Any]], *, gz: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, trace in enumerate(traces):
        text = json.dumps(trace, indent=4)  # Kineto writes one field a line, indented
        if gz:
            with gzip.open(folder / f"rank{i}.pt.trace.json.gz", "wt") as fh:
                fh.write(text)
        else:
            (folder / f"rank{i}.pt.trace.json").write_text(text)


def _job(folder: Path, *, seq: bool = True, gz: bool = False) -> None:
    """Four ranks on two hosts: three bf16 all-reduces of 32 Mi elements, one all-gather; rank 2 starts last."""
    traces = []
    for rank in range(4):
        wait = 0.0 if rank == 2 else 10.0 + rank
        kernels = [_kernel("allreduce", s if seq else None, (1 << 25, 1 << 25), 300.0 + s + wait, ts=100.0 * s)
                   for s in range(3)]  # fmt: skip
        kernels.append(_kernel("_allgather_base", 3 if seq else None, (1 << 20, 4 << 20), 80.5 + wait, ts=400.0))
        traces.append(_trace(rank, f"node{rank // 2}", kernels))
    _write(folder, traces, gz=gz)


def test_a_jobs_collectives_with_their_type_hosts_and_release(tmp_path: Path) -> None:
    _job(tmp_path / "t")
    log = read_torch_traces(tmp_path / "t")
    assert (log.kind, log.rounding_us, log.records, log.nccl_version) == ("PyTorch profiler", 0.0, 16, "2.27.5")
    comm = log.comms["0"]
    assert (comm.nranks, comm.nnodes, comm.label, comm.hosts) == (4, 2, "default_pg (0)", {"node0", "node1"})
    with pytest.raises(MeasurementError, match="holds 2 collectives"):
        read_measurement(tmp_path / "t")
    m = read_measurement(tmp_path / "t", collective="allreduce")
    # the size is the larger buffer times 2 bytes; a call's time the least of its ranks' (rank 2's: 300 + s us)
    assert (m.dtype, m.nranks, [(r.size_bytes, r.time_us, r.iterations) for r in m.rows]) == (
        "bfloat16", 4, [(1 << 26, 301.0, 3)])  # fmt: skip
    assert m.software["benchmark"] == "PyTorch profiler" and m.software["nccl_version"] == "2.27.5"
    assert m.hardware == {"nodes": 2, "hosts": ["node0", "node1"]}
    assert m.software["calls"]["last_to_start"] == {"rank": 2, "host": "node1", "calls": 3, "of": 3}
    ag = read_measurement(tmp_path / "t", collective="allgather")
    assert [(r.size_bytes, r.time_us) for r in ag.rows] == [(8 << 20, 80.5)]  # the 4 Mi-element output, 2 bytes


def test_gzip_and_one_file(tmp_path: Path) -> None:
    _job(tmp_path / "g", gz=True)
    assert starts_like_torch_trace(tmp_path / "g" / "rank0.pt.trace.json.gz")
    assert read_torch_traces(tmp_path / "g").records == 16
    one = read_torch_traces(tmp_path / "g" / "rank1.pt.trace.json.gz")
    assert one.comms["0"].ranks == {1} and one.comms["0"].nnodes == 0  # one rank's trace: its nodes unknown


def test_calls_without_seq_are_matched_by_order(tmp_path: Path) -> None:
    _job(tmp_path / "n", seq=False)
    with pytest.warns(ParseWarning, match="carry no Seq .* matched across ranks by their order"):
        m = read_measurement(tmp_path / "n", collective="allreduce")
    assert [r.time_us for r in m.rows] == [301.0]


def test_what_is_no_nccl_tests_collective_is_skipped_or_listed(tmp_path: Path) -> None:
    kernels = [_kernel("all_to_allv", 0, (4096, 4096), 50.0, ts=1.0, splits="[1000, 3096]"),
               _kernel("all_to_allv", 1, (4096, 4096), 40.0, ts=2.0, splits="[1024, 1024]"),
               _kernel("barrier", 2, (1, 1), 9.0, ts=3.0, dtype="Float"),
               _kernel("allreduce", 3, (1024, 1024), 9.0, ts=4.0, dtype="Float8_e4m3fn")]  # fmt: skip
    _write(tmp_path / "s", [_trace(0, "h", kernels)])
    log = read_torch_traces(tmp_path / "s")
    assert (log.records, log.skipped) == (2, 2)  # the uneven all-to-all and the type collsim has not
    m = read_measurement(tmp_path / "s", collective="alltoall")
    assert (m.rows[0].size_bytes, m.rows[0].time_us) == (4096 * 2, 40.0)


def test_a_trace_without_collective_kernels_says_why(tmp_path: Path) -> None:
    _write(tmp_path / "cpu", [_trace(0, "h", [])])
    with pytest.raises(CallLogError, match=r"no NCCL collective kernels .*ProfilerActivity.CUDA"):
        read_torch_traces(tmp_path / "cpu")
    (tmp_path / "cut.json").write_text(json.dumps(_trace(0, "h", [_kernel("allreduce", 0, (8, 8), 5.0, ts=1.0)]))[:-40])
    with pytest.raises(CallLogError, match=r"cut.json: invalid JSON \(cut short\?\)"):
        read_torch_traces(tmp_path / "cut.json")


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 64), st.lists(st.floats(0.001, 1e6, allow_nan=False), min_size=1, max_size=6))
def test_the_stream_reads_what_json_reads_at_any_chunk_size(chunk: int, durations: list[float]) -> None:
    """Property: a trace read a chunk at a time (values split anywhere: inside numbers, strings, keywords) gives
    the events and top-level keys ``json.loads`` gives."""
    kernels = [_kernel("allreduce", i, (1 << 10, 1 << 10), d, ts=float(i)) for i, d in enumerate(durations)]
    text = json.dumps(_trace(3, "host-a", kernels, nccl="2.26.2"), indent=2)
    old = torchtrace._CHUNK
    torchtrace._CHUNK = chunk
    try:
        head: dict[str, Any] = {}
        events = list(_events(_Stream(io.StringIO(text), "x.json"), head))
    finally:
        torchtrace._CHUNK = old
    whole = json.loads(text)
    assert events == [e for e in whole["traceEvents"] if e.get("cat") == "kernel" and "Collective name" in e["args"]]
    assert head == {"distributedInfo": whole["distributedInfo"], "host_name": "host-a"}


def test_pytorch_names_map_to_collsims() -> None:
    names = {"allreduce": "allreduce", "allreduce_coalesced": "allreduce", "_allgather_base": "allgather",
             "all_gather": "allgather", "allgather_into_tensor_coalesced": "allgather",
             "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
             "broadcast": "broadcast", "_broadcast_oop": "broadcast", "_reduce_oop": "reduce",
             "all_to_all": "alltoall", "all_to_allv": "alltoall", "send": None, "recv": None, "barrier": None,
             "gather": None, "scatter": None}  # fmt: skip
    assert {n: simulated_collective(n) for n in names} == names


def test_import_torch_trace_writes_typed_measurements_and_scenarios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _job(tmp_path / "t")
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete job reads without a warning
        assert main(["import", "torch-trace", str(tmp_path / "t"), "-o", str(out), "--node", "hgx-h100"]) == 0
    text = capsys.readouterr().out
    assert "# PyTorch profiler: 4 files from 2 hosts, 1 communicator, 16 records" in text
    assert "allreduce bfloat16" in text and "_allgather_base bfloat16" in text
    # rank 2 starts last in all 3 calls, but one of 4 ranks does so by chance 1 time in 16: not named (the
    # Inspector's tests name a rank held back over more calls)
    assert "started last" not in text
    scenario = (out / "default_pg-0-allreduce-bfloat16.yaml").read_text()
    assert "dtype: bfloat16" in scenario and "version: 2.27.5" in scenario and "visible_gpus: [0, 1]" in scenario
    assert main(["validate", str(out / "default_pg-0-allreduce-bfloat16.yaml"),
                 str(out / "default_pg-0-allreduce-bfloat16.json")]) == 0  # fmt: skip
    notes = capsys.readouterr().out
    assert "PyTorch profiler timed each call's kernel on the GPU clock" in notes
    assert "element type is not recorded" not in notes
