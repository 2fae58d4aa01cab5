"""Issue 16: predicted time never falls as the size grows, for a fixed NCCL (algorithm, protocol) or Gloo
algorithm, and the tuner's switch points drop no more than NCCL's own cost model does. Checked on every shipped
scenario and the tests' user presets, 8 B to 256 MiB in powers of two, and at 1.5 x each power from 64 KiB to 16 MiB
(NCCL's tree correction factor steps between buckets there, and its channel shrink steps the channel count). Known
failures are listed (strict xfail): they are model defects to fix, not tolerances."""

from __future__ import annotations

from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import enabled_pairs
from collsim.vocab import GLOO_ALGORITHMS

SIZES = sorted([2**k for k in range(3, 29)] + [3 * 2 ** (k - 1) for k in range(16, 25)])
USER_PRESETS = str(Path(__file__).resolve().parents[1] / "scenario" / "data" / "user-presets.yaml")
#: every shipped scenario with NCCL on, and the user presets of the tests (a 4-GPU PCIe box without P2P, 25 GbE)
SCENARIOS = [
    "hgx-h100",
    "dgx-a100",
    "pcie-2gpu-nop2p",
    "2node-a100-ib",
    "2node-h100-ib",
    "2node-a100-tcp",
    "16node-h100-ib",
    "ddp-resnet50-dgx1-v100",
    "fsdp-gpt2xl-2node-h100",
    USER_PRESETS,
]
#: (scenario, algorithm, protocol) pairs known to fall with size. Tree/Simple on one DGX A100 (176.1 us at 1 MiB,
#: 175.3 us at 2 MiB: NCCL's tree correction factor steps 0.5 -> 0.6 there) left this set when the simulation began
#: to charge the factor without its steps' fall in wire bytes (``charged_tree_correction``). Ring/LL across two
#: nodes falling from 96 KiB to 128 KiB (NCCL's channel shrink stepping from one channel to two) left it when the
#: channels became the ones NCCL's cell scheduling hands the data to (``cell_channels``; 2.26 on, LL's cells count
#: 4x: 4 channels of 24 KiB at 96 KiB, 8 of 16 KiB at 128 KiB). The same scheduling brought one: Tree/Simple on one
#: DGX A100 from 768 KiB (24 channels of 32 KiB, 164.1 us) to 1 MiB (22 channels of 48 KiB, NCCL's cells of 16 KiB
#: three to a channel, 162.8 us; 170.5 us on 24). The simulated tree is faster on fewer channels at these sizes
#: (768 KiB: 115.1 us on 8, 164.1 on 24): a channel's chunk crosses each hop whole, at its share of the GPU's NVLink.
#: From NCCL 2.20 a Tree/Simple chunk is one Simple step (no shrink rule), which makes this pair monotone but the AWS
#: p4de case 19% off; see docs/accuracy.md, "Open: Tree/Simple's chunk from NCCL 2.20".
#: Ring/LL128 on 16 x HGX H100 (128 ranks) fell from 768 KiB to 1 MiB (565.80 -> 565.54 us) and from 1.5 to 2 MiB: a
#: step of 384 B was cut into 2 pieces, one of 512 B into 4, as if a receiver forwarded each 128-byte line. It left
#: when pieces began to reach the receiver's forwarding by grain (an LL128 warp forwards its 16-line slice once every
#: flag of it is in, prims_ll128.h; ``ProtocolConstants.forward_grain``): a step within one slice is no longer cut.
#: It left on 2026-12-05, when the simulation stopped charging NCCL's tree correction factor and gave each direction
#: of a tree channel half its rate (all_reduce.h runTreeSplit; docs/accuracy.md, "The tree's thread split").
KNOWN_NOT_MONOTONE: set[tuple[str, str, str]] = set()
#: Scenarios where the tuner's pick falls with size further than NCCL's model does: none. 2 x DGX A100 at 128 ->
#: 256 KiB (Tree/LL 78.0 -> Tree/LL128 63.7 us) left with NCCL's hop latency and LL's intra-node rate; 2 x DGX A100
#: at 128 -> 192 KiB (Tree/LL 53.9 -> Tree/LL128 53.6 us) and 2 x HGX H100 at 192 -> 256 KiB (Tree/LL 47.7 -> Ring/LL
#: 45.7 us) left when a tree's network hop got the ring's per-channel LL figure instead of half of it (the halving
#: is NCCL's busBw convention for trees, not the network's rate; test_ll_network.py) and NCCL's multi-node llMaxBw
#: its CPU vendor's row.
#: The scenarios added to this test on 2026-12-05 brought three, each a size where NCCL's model moves off LL while the
#: simulated LL is far slower than that model says. 16 x HGX H100 from 192 KiB (Tree/LL 137.4 us, NCCL's model 93.8)
#: to 256 KiB (Tree/LL128 119.3 us, model 102.2) left when a network hop took llMaxBw's two-node figure at any node
#: count (Tree/LL 100.6 us; the shared 2- and 4-node H100 runs' Tree/LL slopes are equal). Not explained (no published
#: run at these sizes says which is wrong): DGX-1 V100 from 128 KiB (Tree/LL 61.7 us then, 50.6 since NCCL's tree
#: layout; model 47.8) to 192 KiB (Ring/LL 47.9 us, model 55.4); the tests' 4-GPU PCIe box without P2P from 384 KiB
#: (Ring/LL over shared memory 141.5 us, model 61.8) to 512 KiB (Ring/Simple 127.4 us, model 75.4). On the one
#: published PCIe shared-memory run (2 x RTX 2080 Ti) NCCL's model is 21-67% fast at every size and the simulation's
#: Ring/LL within 3.3% at 128 KiB, its last LL size.
#: DGX-1 V100's left on 2026-12-05 with the tree's thread split (its simulated Tree/LL at 128 KiB is slower now).
KNOWN_TUNER_DROPS: set[str] = {USER_PRESETS}


def _pairs() -> list[tuple[str, str, str]]:
    out = []
    for name in SCENARIOS:
        sim = Simulator.from_source(name)
        out += [(name, a, p) for a, p in enabled_pairs(sim.nccl_plan, sim.options("nccl"), "allreduce")]
    return out


def _mark(case: tuple[str, str, str]):  # type: ignore[no-untyped-def]
    marks = [pytest.mark.xfail(strict=True, reason="known non-monotone: see KNOWN_NOT_MONOTONE")]
    return pytest.param(*case, marks=marks if case in KNOWN_NOT_MONOTONE else [], id="-".join(_short(c) for c in case))


def _short(name: str) -> str:
    return Path(name).stem if name.endswith(".yaml") else name


@pytest.mark.parametrize(("name", "algo", "proto"), [_mark(c) for c in _pairs()])
def test_time_never_falls_as_size_grows_for_one_algorithm_and_protocol(name: str, algo: str, proto: str) -> None:
    sim = Simulator.from_source(name)
    times = [sim.simulate_one("nccl", s, choice=(algo, proto)).time_s for s in SIZES]
    drops = [(s, a, b) for s, a, b in zip(SIZES[1:], times, times[1:], strict=False) if b < a]
    assert not drops, drops


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[pytest.mark.xfail(strict=True)] if n in KNOWN_TUNER_DROPS else []) for n in SCENARIOS],
    ids=_short,
)
def test_the_tuners_switch_points_drop_no_more_than_nccls_model(name: str) -> None:
    sim = Simulator.from_source(name)
    outs = [sim.simulate_one("nccl", s) for s in SIZES]
    for s, a, b in zip(SIZES[1:], outs, outs[1:], strict=False):
        if b.time_s < a.time_s:  # a drop: allowed only as far as NCCL's own model drops there
            assert a.predicted_s is not None and b.predicted_s is not None
            assert b.time_s / a.time_s >= b.predicted_s / a.predicted_s - 1e-9, (s, a.time_s, b.time_s)


@pytest.mark.parametrize("name", [*SCENARIOS, "loopback-gloo-cpu"], ids=_short)
def test_gloos_time_never_falls_as_size_grows_for_one_algorithm(name: str) -> None:
    """Gloo's algorithms (each forced) on every shipped scenario and the tests' user presets."""
    sim = Simulator.from_source(name)
    for algorithm in GLOO_ALGORITHMS:
        times = [sim.simulate_one("gloo", s, gloo_algorithm=algorithm).time_s for s in SIZES]
        drops = [(s, a, b) for s, a, b in zip(SIZES[1:], times, times[1:], strict=False) if b < a]
        assert not drops, (algorithm, drops)
