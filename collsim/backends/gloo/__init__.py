"""Gloo-style collectives as PyTorch runs them: host staging, Gloo's algorithms over TCP (or ibverbs), and back.

For CUDA tensors ProcessGroupGloo copies the tensor to pinned host memory (D2H over PCIe), runs the Gloo collective
on the CPU (TCP between every pair of ranks, loopback within a host since Gloo has no shared-memory transport;
reductions by the rank's CPU thread), then copies the result back (H2D). CPU tensors skip the copies.

Allreduce algorithms (``backends.gloo.algorithm``): ``ring`` (PyTorch's segmented ring, what PyTorch runs),
``ring_chunked``, ``halving_doubling`` and ``bcube`` (Gloo's legacy algorithms); other collectives: see
:mod:`collsim.algorithms.gloo_algos`. With ``transport: ibverbs`` the tensors stay on the GPU (GPUDirect RDMA,
Gloo's ``CudaAllreduceRingChunked`` for allreduce): no host copies, reductions on the GPU at HBM speed.

Every rank runs its collectives on a pool of ``backends.gloo.threads`` worker threads (PyTorch's default 2 per
interface): a collective holds one thread from the hand-off to the end of its Gloo algorithm, and collectives issued
together queue for a free thread in the order they were issued (:func:`simulate_gloo_many`). Over TCP each rank has
one Gloo context per ``backends.gloo.interfaces`` (GLOO_SOCKET_IFNAME's entries), collectives taking them round
robin; a context's receives, from every peer and every collective on it, are read by its one event-loop thread.
Constants come from ``topologies/software/gloo.yaml`` and the device presets.
"""

from __future__ import annotations

from collsim.backends.gloo.options import GlooConstants, GlooOptions
from collsim.backends.gloo.simulate import simulate_gloo, simulate_gloo_many

__all__ = ["GlooConstants", "GlooOptions", "simulate_gloo", "simulate_gloo_many"]
