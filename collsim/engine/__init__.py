"""Time, shared resources and flows (typed: who does each, what it is): the fluid max-min fair engine, and its exact
symmetry quotient."""

from __future__ import annotations

from collsim.engine.breakdown import attribute_time
from collsim.engine.fluid import (
    LATE,
    NO_OWNER,
    UNTAGGED,
    Callback,
    Flow,
    FlowRecord,
    FluidNetwork,
    Owner,
    Resource,
    SendThen,
    Tag,
)
from collsim.engine.symmetry import Decoupling, Quotient, ResourceSpec, build_quotient, decouple, refine

__all__ = [
    "LATE",
    "NO_OWNER",
    "UNTAGGED",
    "Callback",
    "Decoupling",
    "Flow",
    "FlowRecord",
    "FluidNetwork",
    "Owner",
    "Quotient",
    "Resource",
    "ResourceSpec",
    "SendThen",
    "Tag",
    "attribute_time",
    "build_quotient",
    "decouple",
    "refine",
]
