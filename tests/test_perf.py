"""The benchmark commands print what they promise (speed itself is measured by running them, not by tests)."""

from __future__ import annotations

import pytest

from collsim.perf import ScaleCase, run_scale_benchmark, scale_cases


def test_scale_grid_is_the_issue_13_grid() -> None:
    cases = scale_cases((16, 128))
    assert [c.label for c in cases[:4]] == [
        "128 GPUs Ring sym on", "128 GPUs Ring sym off", "128 GPUs default sym on", "128 GPUs default sym off",
    ]
    assert cases[-7:] == [
        ScaleCase(128, "Ring", True, perturbed=True),
        *(ScaleCase(n, "Ring", True, perturbed=True, decouple=True) for n in (16, 128)),
        *(ScaleCase(n, "default", True, perturbed=True) for n in (16, 128)),
        *(ScaleCase(n, "Ring", True, True, True) for n in (16, 128)),
    ]
    assert "engine.symmetry=false" in cases[1].overrides()
    assert not any(o.startswith("backends.nccl.env.NCCL_ALGO") for o in cases[2].overrides())
    assert cases[-7].overrides()[-1] == "perturb.links=[{device: n1/nic2, scale: 0.5, kind: ib}]"
    assert cases[-5].overrides()[-2:] == ["perturb.links=[{device: n1/nic2, scale: 0.5, kind: ib}]",
                                          "engine.decouple=true"]  # fmt: skip
    assert cases[-5].label == "1024 GPUs Ring sym on, one NIC at 50%, decoupled"
    assert cases[-3].label == "1024 GPUs default sym on, one NIC at 50%"
    assert cases[-1].overrides()[-1] == 'perturb.links=[{device: "n*/nic2", scale: 0.5, kind: ib}]'
    assert cases[-1].label == "1024 GPUs Ring sym on, rail 2 at 50%"


def test_scale_benchmark_prints_a_row_per_case(capsys: pytest.CaptureFixture[str]) -> None:
    # two nodes (16 GPUs), 16 MiB: every case finishes in a few seconds
    assert run_scale_benchmark([2], size=16 * 2**20, timeout=120, baseline_events=10_000) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in out if line.startswith("16 GPUs")]
    assert len(rows) == 8
    busbw = [float(r[-1]) for r in rows]
    assert busbw[0] == busbw[1] and busbw[2] == busbw[3]  # the quotient is exact: symmetry on = off
    assert 0 < busbw[4] < busbw[0] and 0 < busbw[7] < busbw[0]  # one NIC port or a rail at half rate: slower
    assert busbw[5] == pytest.approx(busbw[4], rel=5e-3)  # one port decoupled: within the approximation's error
    assert 0 < busbw[6] < busbw[2]  # NCCL's default algorithm with the slow port
    flows = [int(r[-4]) for r in rows]
    assert flows[0] < flows[1]  # the quotient simulates fewer flows
