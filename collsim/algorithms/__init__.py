"""Collective schedules as SimPy processes: what waits for what, chunk by chunk, independent of link speeds."""

from __future__ import annotations

from collsim.algorithms.board import EventBoard
from collsim.algorithms.ring import (
    GlooParams,
    GlooRingShape,
    NcclRingMachine,
    RingChunking,
    SendThen,
    connection_slots,
    gloo_ring_allreduce,
    gloo_ring_receiver,
    gloo_ring_segments,
    merge_segments,
    nccl_ring_allreduce,
    send_then_of,
)

__all__ = [
    "EventBoard",
    "GlooParams",
    "GlooRingShape",
    "NcclRingMachine",
    "RingChunking",
    "SendThen",
    "connection_slots",
    "gloo_ring_allreduce",
    "gloo_ring_receiver",
    "gloo_ring_segments",
    "merge_segments",
    "nccl_ring_allreduce",
    "send_then_of",
]
