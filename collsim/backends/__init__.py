"""NCCL-style and Gloo-style backends: plans, cost models and simulations of collectives on a topology, and the
registry of the tags they declare (:mod:`collsim.backends.tags`)."""

from __future__ import annotations

from collsim.backends.common import BackendError, Outcome
from collsim.backends.gloo import GlooConstants, GlooOptions, simulate_gloo, simulate_gloo_many
from collsim.backends.nccl import NcclConstants, NcclOptions, NcclPlan, plan_nccl, simulate_nccl, tuner_times
from collsim.backends.tags import TAGS, tag_for

__all__ = [
    "TAGS",
    "BackendError",
    "GlooConstants",
    "GlooOptions",
    "NcclConstants",
    "NcclOptions",
    "NcclPlan",
    "Outcome",
    "plan_nccl",
    "simulate_gloo",
    "simulate_gloo_many",
    "simulate_nccl",
    "tag_for",
    "tuner_times",
]
