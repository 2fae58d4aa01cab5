"""Collective schedules as SimPy processes: what waits for what, chunk by chunk, independent of link speeds."""

from __future__ import annotations

from collsim.algorithms.board import EventBoard
from collsim.algorithms.ring import (
    GlooParams,
    GlooRingShape,
    NcclRingMachine,
    RingChunking,
    gloo_ring_allreduce,
    gloo_ring_receiver,
    gloo_ring_segments,
    merge_segments,
    nccl_ring_allreduce,
)

__all__ = [
    "EventBoard",
    "GlooParams",
    "GlooRingShape",
    "NcclRingMachine",
    "RingChunking",
    "gloo_ring_allreduce",
    "gloo_ring_receiver",
    "gloo_ring_segments",
    "merge_segments",
    "nccl_ring_allreduce",
]
