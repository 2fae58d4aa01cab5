"""Real runs: time collectives with torch.distributed and write them as collsim measurements.

``collsim bench`` sweeps one collective over sizes with torch.distributed (``nccl`` or ``gloo``, CUDA or CPU
tensors), either launching N local ranks itself or running as one rank under torchrun, and writes nccl-tests style
text and collsim's measurement JSON/CSV (:mod:`collsim.calibration.measurement`). ``--probe`` measures one GPU's
copies, launch latency, NCCL with one rank and Gloo with CUDA tensors. ``--ddp`` times DistributedDataParallel
iterations of an MLP on CPU with Gloo (:mod:`collsim.bench.ddp`) and writes the model with measured per-layer times.

torch is an optional dependency (``pip install 'collsim[bench]'``): this package imports without it and says how
to install it when a run needs it. It never imports the simulator.

Examples
--------
>>> from collsim.bench import BenchConfig
>>> BenchConfig(collective="all_reduce", sizes=(1024, 2048)).collective
'allreduce'
>>> # run_sweep(BenchConfig(...)) launches the ranks; to_measurement(out) gives the Measurement.
"""

from __future__ import annotations

from collsim.bench.command import DEFAULT_SIZES, ProgressLine, run_command, run_sweep
from collsim.bench.config import (
    COLLECTIVES,
    DTYPES,
    INSTALL_HINT,
    TIMINGS,
    BenchConfig,
    BenchError,
    TorchMissingError,
    require_torch,
)
from collsim.bench.ddp import DdpBenchConfig, DdpBenchOutput, run_ddp
from collsim.bench.launch import free_port, launch_local
from collsim.bench.report import RankInfo, SizeResult, SweepOutput, format_text, to_measurement, to_records

__all__ = [
    "COLLECTIVES",
    "DEFAULT_SIZES",
    "DTYPES",
    "INSTALL_HINT",
    "TIMINGS",
    "BenchConfig",
    "BenchError",
    "DdpBenchConfig",
    "DdpBenchOutput",
    "ProgressLine",
    "RankInfo",
    "SizeResult",
    "SweepOutput",
    "TorchMissingError",
    "format_text",
    "free_port",
    "launch_local",
    "require_torch",
    "run_command",
    "run_ddp",
    "run_sweep",
    "to_measurement",
    "to_records",
]
