"""Time, shared resources and flows: the fluid max-min fair engine, and its exact symmetry quotient."""

from __future__ import annotations

from collsim.engine.breakdown import attribute_time
from collsim.engine.fluid import LATE, Flow, FlowRecord, FluidNetwork, Resource
from collsim.engine.symmetry import Quotient, ResourceSpec, build_quotient, refine

__all__ = [
    "LATE",
    "Flow",
    "FlowRecord",
    "FluidNetwork",
    "Quotient",
    "Resource",
    "ResourceSpec",
    "attribute_time",
    "build_quotient",
    "refine",
]
