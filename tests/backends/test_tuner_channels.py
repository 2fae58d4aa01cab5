"""The channel bounds against NCCL's source: its cost model prices its graphs' channels (tuning.cc ``busBw =
graphs[a]->nChannels * bw``, the search's count); NCCL_MAX_NCHANNELS, NCCL_MIN_NCHANNELS and the CTA bounds cut or
copy the communicator's channels after it (connect.cc), so they change what runs, not what the model prices or
picks; and what connect.cc does after them on an NVLS node, by release."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import tuner_times

MiB = 1 << 20


@pytest.mark.parametrize("env", [{"NCCL_MAX_NCHANNELS": "4"}, {"NCCL_MAX_CTAS": "4"}, {"NCCL_MIN_NCHANNELS": "32"}])
def test_channel_bounds_leave_the_model_and_change_the_run(env: dict[str, str]) -> None:
    sets = ["backends.nccl.env.NCCL_ALGO=Ring,Tree"] + [f"backends.nccl.env.{k}={v}" for k, v in env.items()]
    base = Simulator.from_source("2node-h100-ib", ["backends.nccl.env.NCCL_ALGO=Ring,Tree"])
    bound = Simulator.from_source("2node-h100-ib", sets)
    for size in (256 << 10, 4 * MiB, 256 * MiB):
        ref = tuner_times(base.nccl_plan, base.nccl_constants, "allreduce", size, base.nccl_options)
        got = tuner_times(bound.nccl_plan, bound.nccl_constants, "allreduce", size, bound.nccl_options)
        assert got == ref  # the model's times, hence its pick (4 channels took Ring/LL128 at 4 MiB from Tree)
    if "NCCL_MIN_NCHANNELS" not in env:  # 4 channels where 16 ran: the run slower, the model unmoved
        assert bound.simulate_one("nccl", 256 * MiB).time_s > 2.5 * base.simulate_one("nccl", 256 * MiB).time_s


@pytest.mark.parametrize(("version", "channels"), [("2.21.5", 4), ("2.22.3", 16), ("2.27.7", 16), ("2.28.3", 4)])
def test_nvls_channels_floor_ring_channels_from_2_22_to_2_27(version: str, channels: int) -> None:
    """On an NVLS node NCCL copies the rings up to NVLS's 16 channels after NCCL_MAX_NCHANNELS cut them
    (connect.cc, v2.20.3-1 to v2.27.7-1), and from 2.22 Ring and Tree run comm->nChannels, the copies included
    (enqueue.cc; 2.21 ran comm->collChannels, before the copy); 2.28 dropped the copy. NCCL_NVLS_ENABLE=0: none."""
    sets = ["backends.nccl.env.NCCL_ALGO=Ring", "backends.nccl.env.NCCL_MAX_NCHANNELS=4",
            f"backends.nccl.version='{version}'"]  # fmt: skip
    sim = Simulator.from_source("hgx-h100", sets)
    assert sim.nccl_plan.channels == channels
    assert sim.simulate_one("nccl", 256 * MiB).channels == channels
    off = Simulator.from_source("hgx-h100", [*sets, "backends.nccl.env.NCCL_NVLS_ENABLE=0"])
    assert off.nccl_plan.channels == 4


@pytest.mark.parametrize(("version", "channels"), [("2.24.3", 32), ("2.25.1", 48), (None, 48)])
def test_min_nchannels_reaches_maxchannels_of_the_release(version: str | None, channels: int) -> None:
    """MAXCHANNELS is 64 from 2.25 (device.h), 32 before: NCCL_MIN_NCHANNELS=48 copies the rings up to 48 there (it
    stopped at 32 whatever the release)."""
    sets = ["backends.nccl.env.NCCL_ALGO=Ring", "backends.nccl.env.NCCL_MIN_NCHANNELS=48"]
    sets += [f"backends.nccl.version='{version}'"] if version else []
    assert Simulator.from_source("hgx-h100", sets).nccl_plan.channels == channels
