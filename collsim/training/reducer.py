"""PyTorch DDP's gradient buckets: which parameters the Reducer all-reduces together, and in what order.

A re-implementation (no PyTorch code copied) of the behaviour of torch 2.13.0 (``git_version``
cf30153c4c131c8164ee7798e5022d810682e2cb, the build pinned in ``pyproject.toml``):

* ``torch/nn/parallel/distributed.py`` as installed by the 2.13.0 wheel: ``_DEFAULT_BUCKET_CAP_MB`` (line 31),
  ``_MB_TO_BYTES`` (line 33), ``_BucketCapacityConfig.create`` (lines 86-115),
  ``_BucketCapacityConfig.compute_bucket_size_limits`` (lines 128-162), ``_ddp_init_helper`` (from line 1374;
  the reversal at line 1439) and ``_pre_forward`` (the rebuild, line 1775);
* ``torch/csrc/distributed/c10d/reducer.cpp`` / ``reducer.hpp`` (not shipped in the wheel; line numbers from a
  recent main-branch copy whose ``Reducer`` constructor has 2.13's signature, ``bucket_bytes_cap_list`` and
  ``batched_grad_copy``): ``compute_bucket_assignment_by_size`` (cpp lines 2292-2416),
  ``Reducer::rebuild_buckets`` (1984-2070), ``Reducer::autograd_hook`` (694-750),
  ``kDefaultFirstBucketBytes = 1024 * 1024`` (hpp line 29), ``should_rebuild_buckets`` (hpp lines 149-151).
  The grouping, closing and sorting rules are unchanged from pytorch/pytorch commit 00413201d3d3 (older).

Sizes are bytes throughout. Not modelled: sparse gradients (``expect_sparse_gradient``: a bucket of their own),
``bucket_cap_mb_list``, the ``DDP_SET_LAST_BUCKET_CAP`` environment variable, devices (a key is the dtype alone).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

#: ``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`` (bytes): ``c10d::kDefaultFirstBucketBytes = 1024 * 1024``
#: (``reducer.hpp`` line 29), bound in ``torch/csrc/distributed/c10d/init.cpp`` (``module.attr(...)``) and
#: re-exported by ``torch/distributed/__init__.py`` (line 53).
DEFAULT_FIRST_BUCKET_BYTES: int = 1024 * 1024
#: DDP's default bucket cap (MiB): ``_DEFAULT_BUCKET_CAP_MB = 25`` (``torch/nn/parallel/distributed.py`` line 31).
DEFAULT_BUCKET_CAP_MB: float = 25
_MIB = 1024 * 1024  # ``_MB_TO_BYTES`` (distributed.py line 33): DDP's "MB" are MiB


@dataclass(frozen=True)
class Bucket:
    """One gradient bucket of the Reducer.

    Attributes
    ----------
    index : int
        Position in reduction order: bucket 0 is all-reduced first (``mark_bucket_ready`` launches in order).
    params : tuple of int
        Indices of the parameters (into the caller's registration-order list), in the order they were added.
    nbytes : int
        Sum of the parameters' sizes (bytes).
    dtype : str
        The parameters' dtype; a bucket never mixes dtypes (nor devices).
    size_limit : int
        The limit (bytes) the bucket was being filled against when it closed or when its last parameter went in.
    """

    index: int
    params: tuple[int, ...]
    nbytes: int
    dtype: str
    size_limit: int


def assign_buckets(
    sizes: Sequence[tuple[int, str]], limits: Sequence[int], order: Sequence[int] | None = None
) -> list[Bucket]:
    """Group parameters into buckets as PyTorch's ``compute_bucket_assignment_by_size`` does.

    Parameters
    ----------
    sizes : sequence of (int, str)
        ``sizes[i]`` = (bytes, dtype) of parameter ``i`` in registration order (``numel * element_size``).
    limits : sequence of int
        Bucket size limits (bytes) as DDP passes them, e.g. ``[1 MiB, 25 MiB]`` or ``[sys.maxsize]``.
    order : sequence of int, optional
        ``tensor_indices``: the parameters in the order their gradients became ready (a permutation of
        ``range(len(sizes))``). ``None``: registration order, and the buckets are then sorted.

    Returns
    -------
    list of Bucket
        In PyTorch's result order, ``index`` = position in that list.

    Notes
    -----
    Rules (``reducer.cpp`` lines 2326-2403): parameters are visited in ``order``; each goes into the open
    bucket of its (dtype, device) key; a bucket closes as soon as its bytes are ``>=`` the key's current limit,
    and that key then moves to the next limit, staying on the last one. Leftover open buckets are appended
    after all closed ones, in ``std::unordered_map`` iteration order (lines 2374-2380): unspecified by C++; in
    libstdc++ it is the reverse of the keys' first appearance unless their hashes collide, and that is what is
    implemented (identical to torch 2.13 CPU for float16/bfloat16/float32/float64; other key sets can
    differ). Without ``order`` the buckets are sorted by their smallest parameter index (lines 2389-2403);
    with it, no sort: the order of closing, then the leftovers.
    """
    n = len(sizes)
    if n == 0:
        raise ValueError("no parameters")  # TORCH_INTERNAL_ASSERT(!tensors.empty())
    if not limits or any(lim < 0 for lim in limits):
        raise ValueError(f"limits must be a non-empty list of sizes >= 0 (bytes), got {list(limits)}")
    if any(nb < 0 for nb, _ in sizes):
        raise ValueError("parameter sizes must be >= 0 bytes")
    visit = list(range(n)) if order is None else [int(i) for i in order]
    if sorted(visit) != list(range(n)):
        raise ValueError(f"order must be a permutation of range({n})")

    open_params: dict[str, list[int]] = {}  # per key, insertion order = first appearance (never removed)
    open_bytes: dict[str, int] = {}
    limit_at: dict[str, int] = {}  # position of the key's current limit in ``limits``
    result: list[tuple[tuple[int, ...], int, str, int]] = []
    for i in visit:
        nbytes, dtype = sizes[i]
        params = open_params.setdefault(dtype, [])
        params.append(i)
        open_bytes[dtype] = open_bytes.get(dtype, 0) + nbytes
        pos = limit_at.setdefault(dtype, 0)
        if open_bytes[dtype] >= limits[pos]:  # close against the current limit, then advance (never past the last)
            result.append((tuple(params), open_bytes[dtype], dtype, limits[pos]))
            open_params[dtype], open_bytes[dtype] = [], 0
            limit_at[dtype] = min(pos + 1, len(limits) - 1)
    for dtype in reversed(open_params):  # leftovers: libstdc++'s unordered_map order (see Notes)
        if open_params[dtype]:
            result.append((tuple(open_params[dtype]), open_bytes[dtype], dtype, limits[limit_at[dtype]]))
    if order is None:
        result.sort(key=lambda b: min(b[0]))  # minima are distinct, so std::sort's instability cannot show
    return [Bucket(k, params, nbytes, dtype, lim) for k, (params, nbytes, dtype, lim) in enumerate(result)]


def ddp_buckets(
    sizes: Sequence[tuple[int, str]],
    bucket_cap_mb: float | None = None,
    *,
    first_iteration: bool = False,
    find_unused_parameters: bool = False,
    static_graph: bool = False,
    ready_order: Sequence[int] | None = None,
) -> list[Bucket]:
    """The buckets ``DistributedDataParallel`` all-reduces in an iteration, in reduction order.

    Parameters
    ----------
    sizes : sequence of (int, str)
        (bytes, dtype) of each parameter, in registration order (``module.parameters()``).
    bucket_cap_mb : float, optional
        DDP's ``bucket_cap_mb`` (MiB), converted as ``int(bucket_cap_mb * 1024 * 1024)`` bytes. ``None`` (DDP's
        default) means 25 MiB *with* a first bucket of :data:`DEFAULT_FIRST_BUCKET_BYTES`; any explicit value,
        even 25, makes the first bucket's cap equal to the others (``_BucketCapacityConfig.create``).
    first_iteration : bool
        The buckets DDP was constructed with (iteration 1; with ``static_graph`` also iteration 2, whose
        backward records the ready order: iteration 1 goes through ``delay_all_reduce``). Otherwise the buckets
        after ``Reducer::rebuild_buckets``.
    find_unused_parameters, static_graph : bool
        DDP's arguments. With ``find_unused_parameters`` and no ``static_graph`` the buckets are never rebuilt
        (``should_rebuild_buckets``), so every iteration uses the constructor's.
    ready_order : sequence of int, optional
        Parameter indices in the order their gradients became ready in the backward that DDP recorded. Default:
        reverse registration order, the order for a model whose layers run in registration order (an
        assumption: within a layer autograd may finish its parameters in another order).

    Returns
    -------
    list of Bucket
        ``index`` = reduction order.

    Examples
    --------
    >>> sizes = [(4 * 2**20, "float32")] * 3  # three 4 MiB fp32 parameters
    >>> [(b.params, b.size_limit) for b in ddp_buckets(sizes, first_iteration=True)]
    [((0, 1, 2), 9223372036854775807)]
    >>> [(b.params, b.nbytes, b.size_limit) for b in ddp_buckets(sizes)]
    [((2,), 4194304, 1048576), ((1, 0), 8388608, 26214400)]
    """
    cap_mb = DEFAULT_BUCKET_CAP_MB if bucket_cap_mb is None else bucket_cap_mb
    if cap_mb < 0:
        raise ValueError(f"bucket_cap_mb must be >= 0, got {bucket_cap_mb}")
    cap = int(cap_mb * _MIB)  # distributed.py line 104
    first_cap = DEFAULT_FIRST_BUCKET_BYTES if bucket_cap_mb is None else cap  # lines 108-110
    rebuilds = static_graph or not find_unused_parameters  # reducer.hpp should_rebuild_buckets
    if first_iteration or not rebuilds:
        # compute_bucket_size_limits (distributed.py lines 153-159): no bucketing before the real order is known.
        if rebuilds:
            limits = [sys.maxsize]
        elif first_cap < cap:
            limits = [first_cap, cap]
        else:
            limits = [cap]
        # _ddp_init_helper hands the Reducer ``list(reversed(bucket_indices))`` (line 1439): the last-registered
        # parameters' bucket, whose gradients come first, is reduced first.
        initial = assign_buckets(sizes, limits)
        return [replace(b, index=k) for k, b in enumerate(reversed(initial))]
    # rebuild_buckets (reducer.cpp lines 2014-2041): limits [first_bucket_bytes_cap_, bucket_bytes_cap_], the
    # parameters in gradient-ready order (``rebuilt_param_indices_``), no sort, no reversal.
    order = range(len(sizes) - 1, -1, -1) if ready_order is None else ready_order
    return assign_buckets(sizes, [first_cap, cap], order)
