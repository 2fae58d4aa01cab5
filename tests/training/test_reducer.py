"""DDP bucket assignment against torch 2.13's own ``compute_bucket_assignment_by_size`` and a real one-rank DDP."""

from __future__ import annotations

import os
import random
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.training.reducer import DEFAULT_FIRST_BUCKET_BYTES, Bucket, assign_buckets, ddp_buckets

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

MIB = 1024 * 1024
#: the CPU float keys whose leftover order torch 2.13 gives as reverse first appearance (see assign_buckets' Notes)
FLOATS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}
OTHERS = {"int64": torch.int64, "int32": torch.int32, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool}
DTYPES = FLOATS | OTHERS


def _sizes(params: Sequence[tuple[int, str]]) -> list[tuple[int, str]]:
    """(numel, dtype) -> (bytes, dtype)."""
    return [(n * DTYPES[d].itemsize, d) for n, d in params]


def _torch(
    params: Sequence[tuple[int, str]], limits: Sequence[int], order: Sequence[int] | None
) -> list[tuple[tuple[int, ...], int]]:
    """torch's (bucket indices, size limit) for ``params`` = (numel, dtype); tensors visited in ``order``."""
    visit = list(range(len(params))) if order is None else list(order)
    # expand: numel and dtype without the memory (all the function reads is numel, element size, dtype, device)
    tensors = [torch.empty(1, dtype=DTYPES[params[i][1]]).expand(params[i][0]) for i in visit]
    indices, lims = dist._compute_bucket_assignment_by_size(tensors, list(limits), [], [] if order is None else visit)
    return [(tuple(b), lim) for b, lim in zip(indices, lims, strict=True)]


def _ours(buckets: list[Bucket]) -> list[tuple[tuple[int, ...], int]]:
    return [(b.params, b.size_limit) for b in buckets]


def _check_buckets(buckets: list[Bucket], sizes: Sequence[tuple[int, str]]) -> None:
    """Every parameter in exactly one bucket, bytes conserved, one dtype per bucket, index = position."""
    assert [b.index for b in buckets] == list(range(len(buckets)))
    assert sorted(i for b in buckets for i in b.params) == list(range(len(sizes)))
    for b in buckets:
        assert b.nbytes == sum(sizes[i][0] for i in b.params)
        assert {sizes[i][1] for i in b.params} == {b.dtype}
    assert sum(b.nbytes for b in buckets) == sum(n for n, _ in sizes)


# -- assign_buckets == torch's compute_bucket_assignment_by_size ---------------------------------------------------


def test_first_bucket_1mib_then_25mib() -> None:
    params = [(64 * 1024, "float32")] * 200  # 256 KiB each: 4 close the 1 MiB bucket, then 100 per 25 MiB bucket
    limits = [DEFAULT_FIRST_BUCKET_BYTES, 25 * MIB]
    for order in (None, list(range(199, -1, -1))):
        ours = assign_buckets(_sizes(params), limits, order)
        assert _ours(ours) == _torch(params, limits, order)
        assert [len(b.params) for b in ours] == [4, 100, 96]
        assert [b.size_limit for b in ours] == [MIB, 25 * MIB, 25 * MIB]


def test_parameter_bigger_than_the_cap_gets_its_own_bucket() -> None:
    params = [(1000, "float32"), (10 * MIB, "float32"), (1000, "float32")]  # 40 MiB in the middle
    limits = [25 * MIB]
    ours = assign_buckets(_sizes(params), limits)
    assert _ours(ours) == _torch(params, limits, None)
    assert [b.params for b in ours] == [(0, 1), (2,)]  # it closes the bucket it joins
    ours = assign_buckets(_sizes(params), limits, [1, 0, 2])
    assert _ours(ours) == _torch(params, limits, [1, 0, 2])
    assert [b.params for b in ours] == [(1,), (0, 2)]


def test_mixed_dtypes_never_share_a_bucket() -> None:
    params = [(300_000, "float32"), (300_000, "float16"), (300_000, "float32"), (300_000, "float16")] * 3
    limits = [MIB, 4 * MIB]
    for order in (None, list(range(len(params) - 1, -1, -1)), [*range(0, 12, 2), *range(1, 12, 2)]):
        ours = assign_buckets(_sizes(params), limits, order)
        assert _ours(ours) == _torch(params, limits, order)
        _check_buckets(ours, _sizes(params))
    # limits advance per dtype: each dtype's first bucket is filled against 1 MiB
    firsts = {b.dtype: b.size_limit for b in reversed(assign_buckets(_sizes(params), limits))}
    assert firsts == {"float32": MIB, "float16": MIB}


def test_invalid_input() -> None:
    with pytest.raises(ValueError):
        assign_buckets([], [MIB])
    with pytest.raises(ValueError):
        assign_buckets([(4, "float32")], [])
    with pytest.raises(ValueError):
        assign_buckets([(4, "float32"), (4, "float32")], [MIB], [0, 0])


_limits = st.lists(
    st.one_of(st.integers(1, 64 * MIB), st.sampled_from([DEFAULT_FIRST_BUCKET_BYTES, 25 * MIB, sys.maxsize])),
    min_size=1,
    max_size=4,
)


@st.composite
def _case(draw: st.DrawFn, dtypes: Sequence[str]) -> tuple[list[tuple[int, str]], list[int], list[int] | None]:
    params = draw(st.lists(st.tuples(st.integers(1, 3_000_000), st.sampled_from(dtypes)), min_size=1, max_size=40))
    order = draw(st.none() | st.permutations(list(range(len(params)))))
    return params, draw(_limits), order


@settings(max_examples=300, deadline=None)
@given(_case(list(FLOATS)))
def test_matches_torch(case: tuple[list[tuple[int, str]], list[int], list[int] | None]) -> None:
    params, limits, order = case
    ours = assign_buckets(_sizes(params), limits, order)
    assert _ours(ours) == _torch(params, limits, order)
    _check_buckets(ours, _sizes(params))


@settings(max_examples=200, deadline=None)
@given(_case(list(DTYPES)))
def test_matches_torch_any_dtype(case: tuple[list[tuple[int, str]], list[int], list[int] | None]) -> None:
    """Sorted results match exactly; with tensor_indices the trailing leftovers come in unordered_map order,
    which hash collisions can change for these keys: compare them as a set."""
    params, limits, order = case
    ours, theirs = _ours(assign_buckets(_sizes(params), limits, order)), _torch(params, limits, order)
    tail = 0 if order is None else len({d for _, d in params})
    assert ours[: len(ours) - tail] == theirs[: len(theirs) - tail]
    assert sorted(ours[len(ours) - tail :]) == sorted(theirs[len(theirs) - tail :])


# -- ddp_buckets ---------------------------------------------------------------------------------------------------


def test_first_iteration_one_bucket_per_dtype() -> None:
    sizes = _sizes([(2_000_000, "float32"), (2_000_000, "float16"), (2_000_000, "float32"), (10, "float16")])
    for kwargs in ({}, {"static_graph": True}, {"static_graph": True, "find_unused_parameters": True}):
        buckets = ddp_buckets(sizes, first_iteration=True, **kwargs)  # type: ignore[arg-type]
        # sorted by smallest index (float32 first), then reversed by _ddp_init_helper
        assert [(b.params, b.dtype, b.size_limit) for b in buckets] == [
            ((1, 3), "float16", sys.maxsize),
            ((0, 2), "float32", sys.maxsize),
        ]


def test_rebuilt_first_bucket_holds_the_last_registered_params() -> None:
    sizes = _sizes([(100_000, "float32")] * 30)  # 400 kB each
    buckets = ddp_buckets(sizes)
    assert buckets[0].params == (29, 28, 27)  # ready first; 1.2 MB >= 1 MiB closes it
    assert buckets[0].size_limit == DEFAULT_FIRST_BUCKET_BYTES
    assert buckets[0].nbytes - sizes[27][0] < DEFAULT_FIRST_BUCKET_BYTES
    assert [b.params for b in buckets[1:]] == [tuple(range(26, -1, -1))]
    # an explicit cap, even 25, drops the 1 MiB first bucket (_BucketCapacityConfig.create: is_using_default)
    assert [len(b.params) for b in ddp_buckets(sizes, 25)] == [30]
    assert [len(b.params) for b in ddp_buckets(sizes, 1)] == [3] * 10  # int(1 * 1024 * 1024) = 1 MiB each


def test_find_unused_parameters_keeps_the_constructor_buckets() -> None:
    sizes = _sizes([(100_000, "float32")] * 30)
    for first in (True, False):
        buckets = ddp_buckets(sizes, find_unused_parameters=True, first_iteration=first, ready_order=range(30))
        # [1 MiB, 25 MiB] in registration order, sorted, reversed: the small bucket (params 0-2) is reduced last
        assert [b.params for b in buckets] == [tuple(range(3, 30)), (0, 1, 2)]
        assert [b.size_limit for b in buckets] == [25 * MIB, MIB]
    assert [b.params for b in ddp_buckets(sizes, 25, find_unused_parameters=True)] == [tuple(range(30))]


def test_bucket_cap_mb_is_mib() -> None:
    sizes = [(1, "float32")] * 3
    assert ddp_buckets(sizes, 0.5)[0].size_limit == 524_288
    assert ddp_buckets(sizes, 1.1)[0].size_limit == int(1.1 * 1024 * 1024)
    with pytest.raises(ValueError):
        ddp_buckets(sizes, -1)


_sizes_st = st.lists(st.tuples(st.integers(0, 12_000_000), st.sampled_from(["float32", "float16"])), min_size=1)


@settings(max_examples=200, deadline=None)
@given(
    _sizes_st,
    st.one_of(st.none(), st.floats(0, 50)),
    st.booleans(),
    st.booleans(),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_every_param_in_exactly_one_bucket(
    sizes: list[tuple[int, str]], cap: float | None, first: bool, unused: bool, static: bool, rnd: random.Random
) -> None:
    order = list(range(len(sizes)))
    rnd.shuffle(order)
    buckets = ddp_buckets(
        sizes, cap, first_iteration=first, find_unused_parameters=unused, static_graph=static, ready_order=order
    )
    _check_buckets(buckets, sizes)


# -- a real DistributedDataParallel (one rank, Gloo) ---------------------------------------------------------------


@pytest.fixture
def gloo() -> Iterator[None]:
    if not dist.is_gloo_available() or dist.is_initialized():
        pytest.skip("needs Gloo and no process group yet")
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(tmp, 'store')}", rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()


_Module: Any = torch.nn.Module  # torch comes from importorskip: a plain module to the type checker


class _ToDouble(_Module):
    def forward(self, x: Any) -> Any:
        return x.double()


def _net(mixed: bool) -> Any:
    torch.manual_seed(0)
    lin = torch.nn.Linear
    if mixed:  # float32 then float64 layers: two dtypes, two keys
        return torch.nn.Sequential(lin(256, 512), lin(512, 512), _ToDouble(), lin(512, 256, dtype=torch.float64))
    return torch.nn.Sequential(lin(256, 512), torch.nn.ReLU(), lin(512, 512), lin(512, 256), lin(256, 8))


@pytest.mark.usefixtures("gloo")
@pytest.mark.filterwarnings("ignore:You passed find_unused_parameters=true")
@pytest.mark.parametrize(
    ("cap", "unused", "static", "mixed"),
    [
        (None, False, False, False),
        (None, False, False, True),
        (0.5, False, False, False),
        (0, False, False, False),  # torch takes 0: every parameter a bucket of its own (the scenario refused it)
        (None, True, False, False),
        (None, False, True, True),
        (0.25, True, True, False),
    ],
)
def test_matches_real_ddp(cap: float | None, unused: bool, static: bool, mixed: bool) -> None:
    """The constructor's bucket sizes and the rebuilt buckets of torch's DDP (its logging data)."""
    net = _net(mixed)
    params = list(net.parameters())
    sizes = [(p.numel() * p.element_size(), str(p.dtype).removeprefix("torch.")) for p in params]
    ready: list[int] = []
    for i, p in enumerate(params):
        p.register_post_accumulate_grad_hook(lambda _, i=i: ready.append(i))
    kwargs = {} if cap is None else {"bucket_cap_mb": cap}
    ddp = torch.nn.parallel.DistributedDataParallel(net, find_unused_parameters=unused, static_graph=static, **kwargs)
    first = ddp_buckets(sizes, cap, first_iteration=True, find_unused_parameters=unused, static_graph=static)
    assert ddp._get_ddp_logging_data()["bucket_sizes"] == ", ".join(str(b.nbytes) for b in first)
    orders = []
    for _ in range(4):
        ready.clear()
        ddp(torch.randn(4, 256)).sum().backward()
        orders.append(list(ready))
    data = ddp._get_ddp_logging_data()
    if unused and not static:
        assert "rebuilt_per_bucket_param_indices" not in data  # never rebuilt
        return
    recorded = orders[1] if static else orders[0]  # static: iteration 1 is delay_all_reduce, 2 records the order
    assert recorded == list(range(len(params) - 1, -1, -1))  # ddp_buckets' default for a sequential model
    rebuilt = ddp_buckets(sizes, cap, find_unused_parameters=unused, static_graph=static, ready_order=recorded)
    assert data["rebuilt_per_bucket_param_indices"] == ", ".join(" ".join(map(str, b.params)) for b in rebuilt)
    assert data["rebuilt_bucket_sizes"] == ", ".join(str(b.nbytes) for b in rebuilt)
    assert len(rebuilt) > 1


@pytest.mark.usefixtures("gloo")
def test_one_rank_ddp_still_all_reduces_every_bucket() -> None:
    """What `collsim step` relies on with one rank (docs/training.md, "one rank"): DDP calls its communication hook,
    i.e. an allreduce, for every bucket even when the world size is 1 (first iteration: one bucket; then the
    rebuilt ones)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    net = _net(False)
    ddp = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.5)
    calls: list[int] = []

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotation, if any, is GradBucket
        calls.append(int(bucket.buffer().numel()))
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    for _ in range(3):
        ddp(torch.randn(4, 256)).sum().backward()
    sizes = [(p.numel() * p.element_size(), str(p.dtype).removeprefix("torch.")) for p in net.parameters()]
    rebuilt = ddp_buckets(sizes, 0.5, ready_order=list(range(len(sizes) - 1, -1, -1)))
    assert len(rebuilt) > 1
    assert len(calls) == 1 + 2 * len(rebuilt)
    assert calls[0] * 4 == sum(n for n, _ in sizes)  # float32: 4 B per element
