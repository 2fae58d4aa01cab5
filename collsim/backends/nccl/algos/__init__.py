"""NCCL's algorithms, one module each, and the registry the tuner and the simulation go through.

Adding an algorithm: a module here with one :class:`~collsim.backends.nccl.base.NcclAlgorithm` subclass, its rows in
``topologies/software/nccl.yaml`` (base and per-step latency tables, any per-generation cap), its name in
:data:`collsim.vocab.NCCL_ALGORITHMS`, and one line in :data:`REGISTRY` (whose order is the order NCCL's tuner lists
candidates in).
"""

from __future__ import annotations

from collsim.backends.nccl.algos.collnet import CollNetChain, CollNetDirect
from collsim.backends.nccl.algos.nvls import NVLS, NVLSTree
from collsim.backends.nccl.algos.p2p import P2P
from collsim.backends.nccl.algos.pat import PAT
from collsim.backends.nccl.algos.ring import Ring, ring_plateau
from collsim.backends.nccl.algos.tree import Tree, tree_correction
from collsim.backends.nccl.base import NcclAlgorithm

__all__ = ["P2P_ALGORITHM", "REGISTRY", "algorithm", "ring_plateau", "tree_correction"]

#: Every modelled algorithm by NCCL's name, in the order candidates are listed.
REGISTRY: dict[str, NcclAlgorithm] = {
    alg.name: alg
    for alg in (P2P(), Ring(), PAT(), Tree(), NVLS(), NVLSTree(), CollNetDirect(), CollNetChain())
}
#: The registry's point-to-point algorithm, typed (its protocol follows NCCL's rule: :meth:`P2P.pick`).
P2P_ALGORITHM: P2P = next(a for a in REGISTRY.values() if isinstance(a, P2P))


def algorithm(name: str) -> NcclAlgorithm:
    """The registered algorithm called ``name`` (KeyError naming the known ones otherwise)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no NCCL algorithm {name!r}; modelled: {', '.join(REGISTRY)}") from None
