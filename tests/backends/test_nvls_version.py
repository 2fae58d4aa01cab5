"""NCCL before 2.20 interleaves the one-node NVLS allreduce's channels over each loop of the kernel
(``backends.nccl.version``; ``nvls_split_since`` in topologies/software/nccl.yaml): a buffer smaller than one loop
runs on its first channels only, each with a whole block of nHeads x chunk; from 2.20 the channels share it evenly."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.api import Simulator
from collsim.backends.nccl.chunking import interleaved_channel_bytes
from collsim.scenario import ScenarioError

KIB = 1024
NVLS = ["backends.nccl.env.NCCL_ALGO=NVLS"]
OLD = [*NVLS, 'backends.nccl.version="2.18.5"']


@settings(max_examples=200, deadline=None)
@given(
    nbytes=st.integers(0, 1 << 34),
    nc=st.integers(1, 32),
    block=st.sampled_from([16 * KIB, 128 * KIB, 256 * KIB, 1 << 20]),
)
def test_interleaved_bytes_are_conserved_and_fill_the_first_channels(nbytes: int, nc: int, block: int) -> None:
    shares = interleaved_channel_bytes(nbytes, nc, block)
    assert sum(shares) == pytest.approx(nbytes, abs=1e-6)
    assert all(a >= b for a, b in itertools.pairwise(shares))  # the partial loop fills channel 0 first
    assert max(shares) - min(shares) <= block  # whole loops are even; the last one differs by at most a block
    loops = nbytes // (nc * block)
    assert all(loops * block <= s <= (loops + 1) * block for s in shares)


def test_small_buffers_run_on_the_first_channels_only() -> None:
    # HGX H100: 16 NVLS channels x 8 heads x 16 KiB chunks = 2 MiB a loop; 128 KiB is channel 0's block alone
    sim = Simulator.from_source("hgx-h100", OLD)
    out = sim.simulate_one("nccl", 128 * KIB, record=True, symmetry=False)
    busy = {r.owner.channel for r in out.records if r.size > 0}
    assert busy == {0}
    out = sim.simulate_one("nccl", 512 * KIB, record=True, symmetry=False)
    assert {r.owner.channel for r in out.records if r.size > 0} == {0, 1, 2, 3}
    # the current NCCL shares it out: every busy channel carries the same bytes (collsim's channel shrink decides
    # how many are busy)
    unset = Simulator.from_source("hgx-h100", NVLS).simulate_one("nccl", 128 * KIB, record=True, symmetry=False)
    per: dict[int | None, float] = {}
    for r in unset.records:
        per[r.owner.channel] = per.get(r.owner.channel, 0.0) + r.size
    busy = [b for b in per.values() if b > 0]
    assert len(busy) > 1
    assert busy == pytest.approx([busy[0]] * len(busy), rel=1e-12)


def test_one_block_per_channel_costs_the_same_at_every_size_below_a_loop() -> None:
    # 128 KiB to 1 MiB: 1 to 8 channels, each with one 128 KiB block, on links none of them saturates; the
    # published Azure ND H100 v5 run (NCCL 2.18.5) is flat there too (42.0-43.0 us)
    sim = Simulator.from_source("hgx-h100", OLD)
    times = [sim.simulate_one("nccl", k * KIB).time_s for k in (128, 256, 512, 1024)]
    assert times == pytest.approx([times[0]] * 4, rel=1e-9)
    unset = Simulator.from_source("hgx-h100", NVLS)
    assert unset.simulate_one("nccl", 128 * KIB).time_s < times[0]  # an even split is faster below a loop


@pytest.mark.parametrize("mib", [2, 4, 16])
def test_whole_loops_give_the_even_split(mib: int) -> None:
    old = Simulator.from_source("hgx-h100", OLD).simulate_one("nccl", mib << 20).time_s
    new = Simulator.from_source("hgx-h100", NVLS).simulate_one("nccl", mib << 20).time_s
    assert old == pytest.approx(new, rel=1e-12)


@pytest.mark.parametrize("kib", [64, 200, 3 * 1024])
def test_symmetry_is_exact_with_unequal_channels(kib: int) -> None:
    sim = Simulator.from_source("hgx-h100", OLD)
    on = sim.simulate_one("nccl", kib * KIB, symmetry=True).time_s
    off = sim.simulate_one("nccl", kib * KIB, symmetry=False).time_s
    assert on == pytest.approx(off, rel=1e-9)


def test_version_2_20_and_later_split_evenly() -> None:
    t = {
        v: Simulator.from_source("hgx-h100", [*NVLS, f'backends.nccl.version="{v}"']).simulate_one("nccl", 256 * KIB)
        for v in ("2.19.4", "2.20.3-1", "2.30")
    }
    unset = Simulator.from_source("hgx-h100", NVLS).simulate_one("nccl", 256 * KIB).time_s
    assert t["2.20.3-1"].time_s == t["2.30"].time_s == unset
    assert t["2.19.4"].time_s > unset


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2.20", "write the version as a string"),  # YAML's 2.20 is the number 2.2
        ("two", "expected an NCCL version such as '2.18.5'"),
        ("true", "expected an NCCL version"),
        ('"2.18.5.1"', "expected an NCCL version"),
    ],
)
def test_bad_versions_name_the_field(value: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=rf"backends\.nccl\.version: .*{message}"):
        Simulator.from_source("hgx-h100", [f"backends.nccl.version={value}"])


# --- where NVLS's and NVLSTree's chunk starts, by release (nvls_chunk_history in topologies/software/nccl.yaml) ---

TREE = ["backends.nccl.env.NCCL_ALGO=NVLSTree", "backends.nccl.env.NCCL_BUFFSIZE=8388608"]


def _tree_chunk(nodes: int, version: str | None, *extra: str) -> float:
    """The simulated NVLSTree chunk (one head's share of a step) of a 4 GiB allreduce on ``nodes`` x HGX H100."""
    import collsim.backends.nccl.simulate as sim_mod

    sets = [*TREE, f"cluster.nodes={nodes}", *extra] + ([f'backends.nccl.version="{version}"'] if version else [])
    sim = Simulator.from_source("2node-h100-ib", sets)
    seen: list[float] = []
    real = sim_mod._context

    def spy(*a, **k):  # type: ignore[no-untyped-def]
        ctx = real(*a, **k)
        seen.append(ctx.chunking.chunk_bytes / ctx.plan.ppn)
        return ctx

    sim_mod._context = spy
    try:
        sim.simulate_one("nccl", 4 << 30)
    finally:
        sim_mod._context = real
    return seen[0]


@pytest.mark.parametrize(
    ("nodes", "version", "extra", "chunk"),
    [
        (2, None, (), 128 * KIB),  # 2.21.5 on: NCCL_NVLS_CHUNKSIZE's 128 KiB
        (4, None, (), 64 * KIB),  # ... and NCCL_NVLSTREE_MAX_CHUNKSIZE's default from 4 nodes on
        (2, "2.20.3", (), 1 << 20),  # before: the Simple step (8 MiB / 8), no cap below 4 nodes
        (4, "2.20.3", (), 64 * KIB),  # the variable's default cap from 4 nodes on
        (4, "2.20.3", ("backends.nccl.env.NCCL_NVLSTREE_MAX_CHUNKSIZE=524288",), 512 * KIB),  # read from 2.20.3
        (2, "2.20.3", ("backends.nccl.env.NCCL_NVLS_CHUNKSIZE=131072",), 1 << 20),  # not read before 2.21.5
        (4, "2.19.3", ("backends.nccl.env.NCCL_NVLSTREE_MAX_CHUNKSIZE=524288",), 64 * KIB),  # fixed cap, no variable
        (4, "2.19.1", (), 1 << 20),  # no cap before 2.19.3 (NVIDIA/nccl#1112's "2.19.1-1" row)
    ],
)
def test_nvlstree_chunk_starts_where_each_release_starts_it(
    nodes: int, version: str | None, extra: tuple[str, ...], chunk: int
) -> None:
    assert _tree_chunk(nodes, version, *extra) == chunk


def test_a_release_before_nvls_chunksize_says_where_its_chunks_start_and_what_it_ignores() -> None:
    sim = Simulator.from_source(
        "2node-h100-ib", [*TREE, 'backends.nccl.version="2.20.3"', "backends.nccl.env.NCCL_NVLS_CHUNKSIZE=131072"]
    )
    notes = sim.nccl_release_notes()
    assert any("NVLSTree chunks start from the Simple step (NCCL_BUFFSIZE / 8 = 1024 KiB" in n for n in notes), notes
    assert any("does not read NCCL_NVLS_CHUNKSIZE (from 2.21.5): ignored" in n for n in notes), notes
    latest = Simulator.from_source("2node-h100-ib", TREE).nccl_release_notes()
    assert not any("Simple step" in n or "does not read" in n for n in latest)
