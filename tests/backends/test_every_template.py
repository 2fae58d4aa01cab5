"""Every shipped node template, alone and two of it over each fabric transport, runs every collective on both
backends or stops with one of the limits collsim names; never a traceback from deep inside (a fuzz of templates x
fabrics x collectives found a GB200 rack's point-to-point over TCP taking a route that does not exist)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from collsim.api import Simulator
from collsim.scenario import ScenarioError
from collsim.topology import available_templates

MiB = 2**20
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce")
#: templates that need a parameter to join a fabric (a NIC) or to stay small
PARAMS: dict[str, dict[str, Any]] = {
    "cpu-host": {"nic": "connectx-7-ndr"},
    "gb200-nvl72": {"gpus": 8},
    "h100-pcie-nvlink-pair": {"nic": "connectx-7-ndr"},
    "l40s-8gpu": {"nic": "connectx-7-ndr"},
    "pcie-workstation": {"nic": "connectx-7-ndr"},
    "rtx5090-4gpu": {"nic": "connectx-7-ndr"},
}
#: the limits a run may stop at, as the errors name them
NAMED_LIMITS = (
    "NCCL needs GPUs",  # NCCL on a CPU-only node
    "joined by no socket link",  # Gloo across a GB200 rack's trays (separate hosts inside one node)
    "needs at least 2 ranks",  # Gloo's send/receive on one GPU
)


@pytest.mark.parametrize("template", available_templates())
@pytest.mark.parametrize("transport", [None, "rdma", "tcp"])
def test_every_collective_runs_or_names_its_limit(template: str, transport: str | None) -> None:
    cluster: dict[str, Any] = {"node": template, "nodes": 1 if transport is None else 2}
    if template in PARAMS:
        cluster["node_params"] = PARAMS[template]
    if transport is not None:
        cluster["fabric"] = {"topology": "rail_optimized", "transport": transport}
    sim = Simulator.from_source(
        {"name": "every-template", "cluster": cluster, "workload": {"collective": "allreduce", "sizes": [MiB]},
         "backends": {"nccl": {"enabled": True}, "gloo": {"enabled": True, "device": "cpu"}}}
    )  # fmt: skip
    ran = 0
    for backend in sim.backends():
        for collective in COLLECTIVES:
            try:
                out = sim.simulate_one(backend, MiB, collective=collective)
            except ScenarioError as err:
                assert any(limit in str(err) for limit in NAMED_LIMITS), str(err)
                continue
            assert math.isfinite(out.time_s) and out.time_s > 0, (backend, collective, out.time_s)
            ran += 1
    assert ran >= len(COLLECTIVES)  # at least one backend ran everything
