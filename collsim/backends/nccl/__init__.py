"""NCCL-style collectives: channels, rings, protocols, transports, NCCL's tuner, and the simulation.

The backend turns a topology and NCCL's environment knobs into a plan (:mod:`.plan`: how many channels, which ring
each channel follows, which transport and path each hop uses), picks the (algorithm, protocol) with NCCL's cost
model (:mod:`.tuner`), and simulates it chunk by chunk (:mod:`.simulate`) through the algorithm's own module
(:mod:`.algos`, one per NCCL algorithm, behind :class:`~.base.NcclAlgorithm`). Constants come from
``topologies/software/nccl.yaml`` through :meth:`NcclConstants.from_mapping` (:mod:`.constants`; this layer does
not read YAML); chunk sizes from :mod:`.chunking`.
"""

from __future__ import annotations

from collsim.backends.nccl.algos import REGISTRY, algorithm
from collsim.backends.nccl.base import NcclAlgorithm
from collsim.backends.nccl.constants import NcclConstants, ProtocolConstants
from collsim.backends.nccl.plan import Hop, NcclPlan, plan_nccl
from collsim.backends.nccl.simulate import fastest_pair, simulate_nccl
from collsim.backends.nccl.tags import BREAKDOWN_PRIORITY
from collsim.backends.nccl.tuner import (
    candidates,
    choose,
    enabled_pairs,
    ll128_enabled,
    release_notes,
    tuner_table,
    tuner_times,
    withheld,
)
from collsim.nccl_env import NcclOptions

__all__ = [
    "BREAKDOWN_PRIORITY",
    "REGISTRY",
    "Hop",
    "NcclAlgorithm",
    "NcclConstants",
    "NcclOptions",
    "NcclPlan",
    "ProtocolConstants",
    "algorithm",
    "candidates",
    "choose",
    "enabled_pairs",
    "fastest_pair",
    "ll128_enabled",
    "plan_nccl",
    "release_notes",
    "simulate_nccl",
    "tuner_table",
    "tuner_times",
    "withheld",
]
