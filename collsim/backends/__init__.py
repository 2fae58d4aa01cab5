"""NCCL-style and Gloo-style backends: plans, cost models and simulations of collectives on a topology."""

from __future__ import annotations

from collsim.backends.common import BackendError, Outcome
from collsim.backends.gloo import GlooConstants, GlooOptions, simulate_gloo
from collsim.backends.nccl import NcclConstants, NcclOptions, NcclPlan, plan_nccl, simulate_nccl, tuner_times

__all__ = [
    "BackendError",
    "GlooConstants",
    "GlooOptions",
    "NcclConstants",
    "NcclOptions",
    "NcclPlan",
    "Outcome",
    "plan_nccl",
    "simulate_gloo",
    "simulate_nccl",
    "tuner_times",
]
