"""Data-parallel training (issue 14): model descriptions (parameters, per-layer compute), PyTorch DDP's buckets
(:mod:`collsim.training.reducer`), one DDP iteration on the fluid engine (:mod:`collsim.training.step`) and one FSDP
iteration (:mod:`collsim.training.fsdp`). A workload layer above the engine: the collectives' times come from the
backends through callables the caller passes.

Examples
--------
>>> from collsim.training import load_model
>>> load_model("llama-7b").n_params
6738415616
"""

from __future__ import annotations

from collsim.training.fsdp import FsdpConfig, FsdpUnit, fsdp_units, simulate_fsdp_step
from collsim.training.model import (
    DTYPE_BYTES,
    Layer,
    ModelError,
    ModelSpec,
    Param,
    builtin_models,
    layer_blocks,
    load_model,
    model_from_module,
)
from collsim.training.reducer import Bucket, ddp_buckets
from collsim.training.step import (
    BucketTiming,
    DdpConfig,
    GlooTimes,
    GpuCompute,
    Span,
    StepConstants,
    StepResult,
    checkpoint_regions,
    simulate_ddp_step,
)

__all__ = [
    "DTYPE_BYTES",
    "Bucket",
    "BucketTiming",
    "DdpConfig",
    "FsdpConfig",
    "FsdpUnit",
    "GlooTimes",
    "GpuCompute",
    "Layer",
    "ModelError",
    "ModelSpec",
    "Param",
    "Span",
    "StepConstants",
    "StepResult",
    "builtin_models",
    "checkpoint_regions",
    "ddp_buckets",
    "fsdp_units",
    "layer_blocks",
    "load_model",
    "model_from_module",
    "simulate_ddp_step",
    "simulate_fsdp_step",
]
