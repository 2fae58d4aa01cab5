"""Issue 16: predicted time never falls as the size grows, for a fixed NCCL (algorithm, protocol) or Gloo
algorithm, and the tuner's switch points drop no more than NCCL's own cost model does. Checked on every shipped
scenario, the tests' user presets and a published PCIe box, 8 B to 256 MiB in powers of two, and at 1.5 x each power
from 64 KiB to 16 MiB (NCCL's tree correction factor steps between buckets there, and its channel shrink steps the
channel count). Known failures are listed (strict xfail): they are model defects to fix, not tolerances. Over shared
memory a switch may fall as far as NCCL's measured switch falls there (:func:`measured_shm_switch_depth`)."""

from __future__ import annotations

import json
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import enabled_pairs
from collsim.vocab import GLOO_ALGORITHMS

SIZES = sorted([2**k for k in range(3, 29)] + [3 * 2 ** (k - 1) for k in range(16, 25)])
USER_PRESETS = str(Path(__file__).resolve().parents[1] / "scenario" / "data" / "user-presets.yaml")
#: a published 8-GPU PCIe box without P2P (scenario and measurement): NCCL's measured switch over shared memory
PUBLISHED_SHM = Path(__file__).resolve().parents[2] / "scenarios" / "published" / "rtx4090_8gpu_pcie_nop2p"
#: every shipped scenario with NCCL on, the user presets of the tests (a 4-GPU PCIe box without P2P, 25 GbE) and the
#: published 8 x RTX 4090 box without P2P (the shared-memory switch below)
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
    str(PUBLISHED_SHM.with_suffix(".yaml")),
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
#: count (Tree/LL 100.6 us; the shared 2- and 4-node H100 runs' Tree/LL slopes are equal). DGX-1 V100's, from 128 KiB
#: (Tree/LL 61.7 us then; model 47.8) to 192 KiB (Ring/LL 47.9 us, model 55.4), left with the tree's thread split.
#: The third, the tests' 4-GPU PCIe box without P2P from 384 KiB (Ring/LL over shared memory 141.5 us, model 61.8) to
#: 512 KiB (Ring/Simple 127.4 us, model 75.4), is NCCL's own behaviour, measured: NCCL's model prices LL over shared
#: memory further below what it takes than Simple (8 x RTX 4090 without P2P, published: LL 2.0-2.1 x the model at
#: 256-512 KiB, Simple 1.35-1.55 x at 1-4 MiB), so its switch to Simple lowers the measured time further than the
#: model says (512 KiB -> 1 MiB: x1.13 measured, x1.70 modelled). Where the GPUs reach each other through host memory
#: (NCCL's SHM transport) a switch may fall as far as the measured one (:func:`measured_shm_switch_depth`), no further.
#: The published 8 x RTX 4090 box is in the list for that reason: its own simulated switch (768 KiB Ring/LL 225.9 us
#: -> 1 MiB Ring/Simple 225.0 us) falls, less than the measured one does.


def _switch_depth(times: tuple[float, float], model: tuple[float, float]) -> float:
    """How far a switch lowers the time relative to NCCL's model: (time ratio) / (model ratio) between two
    consecutive sizes; below 1 where the time falls (or grows less) further than the model says."""
    return (times[1] / times[0]) / (model[1] / model[0])


@cache
def measured_shm_switch_depth() -> float:
    """How far NCCL's measured time falls at its switch from LL to Simple over shared memory, relative to its own
    model's ratio there: the published 8 x RTX 4090 run (no P2P), at the consecutive measured sizes where the
    tuner's pick moves from Ring/LL to Ring/Simple (NCCL's model: the tuner's prediction at each size). Computed
    once per test process (every shared-memory scenario's bound reads it).

    >>> round(measured_shm_switch_depth(), 3)  # 512 KiB 196.9 us -> 1 MiB 222.8 us; model 97.06 -> 164.66 us
    0.667
    """
    rows = json.loads(PUBLISHED_SHM.with_suffix(".json").read_text())["rows"]
    sim = Simulator.from_source(str(PUBLISHED_SHM.with_suffix(".yaml")))
    outs = [sim.simulate_one("nccl", r["size_bytes"]) for r in rows]
    switch = [i for i, (a, b) in enumerate(pairwise(outs)) if (a.protocol, b.protocol) == ("LL", "Simple")]
    assert len(switch) == 1, switch  # one LL -> Simple switch among the measured sizes
    i = switch[0]
    a, b = outs[i : i + 2]
    assert a.predicted_s is not None and b.predicted_s is not None
    return _switch_depth((rows[i]["time_us"], rows[i + 1]["time_us"]), (a.predicted_s, b.predicted_s))


def _over_shared_memory(sim: Simulator) -> bool:
    """Whether the scenario's GPUs reach each other through host memory (NCCL's SHM transport) on some hop."""
    return any(h.transport == "SHM" for h in sim.nccl_plan.hops.values())


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


@pytest.mark.parametrize("name", SCENARIOS, ids=_short)
def test_the_tuners_switch_points_drop_no_more_than_nccls_model(name: str) -> None:
    """A fall at a switch is allowed as far as NCCL's own model falls there; over shared memory as far as NCCL's
    measured switch falls (:func:`measured_shm_switch_depth`)."""
    sim = Simulator.from_source(name)
    depth = measured_shm_switch_depth() if _over_shared_memory(sim) else 1.0
    outs = [sim.simulate_one("nccl", s) for s in SIZES]
    for s, a, b in zip(SIZES[1:], outs, outs[1:], strict=False):
        if b.time_s < a.time_s:  # a drop: allowed only as far as NCCL's own model (or measured switch) drops there
            assert a.predicted_s is not None and b.predicted_s is not None
            assert b.time_s / a.time_s >= depth * b.predicted_s / a.predicted_s - 1e-9, (s, a.time_s, b.time_s)


def test_nccls_measured_switch_over_shared_memory_falls_further_than_its_model() -> None:
    """The measurement behind the shared-memory bound: NCCL's real switch from LL to Simple lowers the time
    further than NCCL's model says (a fall the model-only bound would call a defect); the tests' PCIe box falls once,
    at its switch from LL to Simple, further than the model and less far than the measured switch (the published
    box's own simulated switch, 0.818, is checked by the bound test)."""
    measured = measured_shm_switch_depth()
    assert 0.6 < measured < 0.7  # 0.667: x1.13 measured against x1.70 modelled
    sim = Simulator.from_source(USER_PRESETS)
    outs = [sim.simulate_one("nccl", s) for s in SIZES]
    drops = [(a, b) for a, b in pairwise(outs) if b.time_s < a.time_s]
    assert [(a.protocol, b.protocol) for a, b in drops] == [("LL", "Simple")]  # 384 KiB -> 512 KiB
    ((a, b),) = drops
    assert a.predicted_s is not None and b.predicted_s is not None
    simulated = _switch_depth((a.time_s, b.time_s), (a.predicted_s, b.predicted_s))
    assert measured <= simulated < 1.0  # 0.738: further than the model (< 1), less far than NCCL's measured switch


@pytest.mark.parametrize("name", [*SCENARIOS, "loopback-gloo-cpu"], ids=_short)
def test_gloos_time_never_falls_as_size_grows_for_one_algorithm(name: str) -> None:
    """Gloo's algorithms (each forced) on every shipped scenario and the tests' user presets."""
    sim = Simulator.from_source(name)
    for algorithm in GLOO_ALGORITHMS:
        times = [sim.simulate_one("gloo", s, gloo_algorithm=algorithm).time_s for s in SIZES]
        drops = [(s, a, b) for s, a, b in zip(SIZES[1:], times, times[1:], strict=False) if b < a]
        assert not drops, (algorithm, drops)
