"""NCCL's cost model prices its graphs' channels (tuning.cc ``busBw = graphs[a]->nChannels * bw``, the search's
count); NCCL_MAX_NCHANNELS, NCCL_MIN_NCHANNELS and the CTA bounds cut or copy the communicator's channels after it
(connect.cc), so they change what runs, not what the model prices or picks."""

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
