"""Issue 16: predicted time never falls as the size grows, for a fixed NCCL (algorithm, protocol), and the tuner's
switch points drop no more than NCCL's own cost model does. Checked on the shipped scenarios' clusters, 8 B to
256 MiB in powers of two. Known failures are listed (strict xfail): they are model defects to fix, not tolerances."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import enabled_pairs

SIZES = [2**k for k in range(3, 29)]
SCENARIOS = ["hgx-h100", "dgx-a100", "pcie-2gpu-nop2p", "2node-a100-ib", "2node-h100-ib", "2node-a100-tcp"]
#: (scenario, algorithm, protocol): Tree/Simple on one DGX A100 takes 176.10 us at 1 MiB and 175.34 us at 2 MiB
#: (same 24 channels and 32 KiB chunks). The cause: tuning.cc's treeCorrectionFactor (Simple: 0.5 at 1 MiB, 0.6 at
#: 2 MiB), which the simulation charges as a link efficiency (Tree.wire_divisor), steps up by 20% while one more
#: 32 KiB chunk adds one pipeline step of 15; every chunk of the fill gets faster, so the time falls. NCCL adds the
#: factor to its closed form's bandwidth term only, where latency dominates these sizes (83.4 -> 96.1 us). Without
#: the factor the simulated Tree/Simple is monotone from 8 KiB to 1 GiB (checked by hand); the factor is NVIDIA's
#: fit of the same pipeline fill the simulation models itself, so the fix is to drop or reshape it, which moves
#: the published-case errors and is left for a change that re-measures them.
KNOWN_NOT_MONOTONE = {("dgx-a100", "Tree", "Simple")}
#: 2 x DGX A100: Tree/LL at 128 KiB (78.0 us) -> Tree/LL128 at 256 KiB (63.7 us), where NCCL's model rises from
#: 51.3 to 55.5 us: the simulated Tree/LL is 1.5x NCCL's model at mid sizes (per-channel LL pipeline fill)
KNOWN_TUNER_DROPS = {"2node-a100-ib"}


def _pairs() -> list[tuple[str, str, str]]:
    out = []
    for name in SCENARIOS:
        sim = Simulator.from_source(name)
        out += [(name, a, p) for a, p in enabled_pairs(sim.nccl_plan, sim.options("nccl"), "allreduce")]
    return out


def _mark(case: tuple[str, str, str]):  # type: ignore[no-untyped-def]
    marks = [pytest.mark.xfail(strict=True, reason="known non-monotone: see KNOWN_NOT_MONOTONE")]
    return pytest.param(*case, marks=marks if case in KNOWN_NOT_MONOTONE else [], id="-".join(case))


@pytest.mark.parametrize(("name", "algo", "proto"), [_mark(c) for c in _pairs()])
def test_time_never_falls_as_size_grows_for_one_algorithm_and_protocol(name: str, algo: str, proto: str) -> None:
    sim = Simulator.from_source(name)
    times = [sim.simulate_one("nccl", s, choice=(algo, proto)).time_s for s in SIZES]
    drops = [(s, a, b) for s, a, b in zip(SIZES[1:], times, times[1:], strict=False) if b < a]
    assert not drops, drops


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=[pytest.mark.xfail(strict=True)] if n in KNOWN_TUNER_DROPS else []) for n in SCENARIOS],
)
def test_the_tuners_switch_points_drop_no_more_than_nccls_model(name: str) -> None:
    sim = Simulator.from_source(name)
    outs = [sim.simulate_one("nccl", s) for s in SIZES]
    for s, a, b in zip(SIZES[1:], outs, outs[1:], strict=False):
        if b.time_s < a.time_s:  # a drop: allowed only as far as NCCL's own model drops there
            assert a.predicted_s is not None and b.predicted_s is not None
            assert b.time_s / a.time_s >= b.predicted_s / a.predicted_s - 1e-9, (s, a.time_s, b.time_s)
