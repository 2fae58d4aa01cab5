"""Calibration: read measured collective times (nccl-tests output and reports) to compare with and tune the simulator.

Examples
--------
>>> from collsim.calibration import parse_nccl_tests
>>> row = "  1024  256  float  sum  -1  10.0  0.10  0.18  0  9.5  0.11  0.19  0"
>>> log = parse_nccl_tests(row, collective="allreduce")
>>> log.collective, len(log.rows), log.rows[0].size_bytes, log.rows[0].inplace_time_us
('allreduce', 1, 1024, 9.5)
"""

from __future__ import annotations

from collsim.calibration.calls import CallLog, CallLogError
from collsim.calibration.inspector import read_inspector
from collsim.calibration.measurement import (
    Measurement,
    MeasurementError,
    MeasurementRow,
    measurement_from_nccl_tests,
    parse_measurement_csv,
    parse_measurement_json,
    read_call_log,
    read_measurement,
    summarise_times,
)
from collsim.calibration.nccltests import (
    MeasuredRow,
    NcclTestsFormatError,
    NcclTestsLog,
    ParseWarning,
    parse_nccl_tests,
    parse_nccl_tests_json,
    read_nccl_tests,
)
from collsim.calibration.torchtrace import read_torch_traces

__all__ = [
    "CallLog",
    "CallLogError",
    "MeasuredRow",
    "Measurement",
    "MeasurementError",
    "MeasurementRow",
    "NcclTestsFormatError",
    "NcclTestsLog",
    "ParseWarning",
    "measurement_from_nccl_tests",
    "parse_measurement_csv",
    "parse_measurement_json",
    "parse_nccl_tests",
    "parse_nccl_tests_json",
    "read_call_log",
    "read_inspector",
    "read_measurement",
    "read_nccl_tests",
    "read_torch_traces",
    "summarise_times",
]
