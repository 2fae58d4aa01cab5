"""Blackwell's NVLink step: one LL ring step on an HGX B200 takes 1.26 us (the ``nvlink5`` link latency, 0.63 us a
link, GPU -> NVSwitch -> GPU), measured as the slope of one node's all_reduce over its all_gather, 7 ring steps
apart (docs/accuracy.md, "Blackwell's NVLink step"); NCCL's tuner charges 0.6 us, which Hopper keeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collsim.api import Simulator

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "scenarios" / "published"
RING_LL = ["backends.nccl.env.NCCL_ALGO=Ring", "backends.nccl.env.NCCL_PROTO=LL"]


def _step_slope(source: str | Path, size: int = 1024) -> float:
    """(all_reduce - all_gather) / 7 at ``size`` bytes on 8 ranks, Ring/LL (seconds): one ring step."""
    sim = Simulator.from_source(source, RING_LL)
    t_ar = sim.simulate_one("nccl", size, collective="allreduce").time_s
    t_ag = sim.simulate_one("nccl", size, collective="allgather").time_s
    return (t_ar - t_ag) / 7


def test_the_nvlink5_preset_carries_the_measured_step() -> None:
    # the derivation in links.yaml, redone from the published files it names
    def median_small(name: str) -> float:
        rows = json.loads((PUBLISHED / f"{name}.json").read_text())["rows"]
        times = sorted(r["time_us"] for r in rows if 128 <= r["size_bytes"] <= 1024)
        return (times[1] + times[2]) / 2

    measured = (median_small("vultr_b200_8gpu_allreduce") - median_small("vultr_b200_8gpu_allgather")) / 7
    assert measured == pytest.approx(1.26, abs=0.005)  # us
    assert _step_slope(PUBLISHED / "vultr_b200_8gpu_allgather.yaml") == pytest.approx(measured * 1e-6, rel=0.02)


def test_hopper_keeps_nccls_step() -> None:
    # NCCL's hwLat NVLINK Ring LL, 0.6 us, is longer than an H100's NVLink path (2 x 0.2 us): it stays the step
    assert _step_slope("hgx-h100") == pytest.approx(0.6e-6, rel=0.02)
