"""NVLS runs only the reductions NVLink SHARP has (src/include/device.h ncclNvlsSupported): enqueue.cc offers NVLS
and NVLSTree for an (op, element type) only where it holds, all-gathers of any type from 2.22.3."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import enabled_pairs
from collsim.scenario import ScenarioError
from collsim.units import DTYPE_SIZES

#: ncclNvlsSupported (v2.21.5-1 .. v2.30.7-1): sum on these, min/max on the integer and half types, no prod or avg
SUMS = {"int32", "uint32", "int64", "uint64", "float16", "bfloat16", "float32", "float64"}
MINMAX = {"int32", "uint32", "int64", "uint64", "float16", "bfloat16"}


def _sim(node: str, nodes: int, collective: str, op: str, dtype: str, version: str | None = None) -> Simulator:
    scenario: dict[str, object] = {
        "name": "r",
        "cluster": {"node": node, "nodes": nodes, **({"fabric": {"topology": "rail_optimized"}} if nodes > 1 else {})},
        "workload": {"collective": collective, "op": op, "dtype": dtype},
        "backends": {"nccl": {"version": version} if version else {}},
    }
    return Simulator.from_source(scenario)


@pytest.mark.parametrize("op", ["sum", "avg", "max", "min", "prod"])
@pytest.mark.parametrize("dtype", sorted(DTYPE_SIZES))
def test_nvls_is_offered_for_the_reductions_nvlink_sharp_has(op: str, dtype: str) -> None:
    sim = _sim("hgx-h100", 1, "allreduce", op, dtype)
    algos = {a for a, _ in enabled_pairs(sim.nccl_plan, sim.nccl_options, "allreduce")}
    expected = dtype in (SUMS if op == "sum" else MINMAX if op in ("max", "min") else set())
    assert ("NVLS" in algos) == expected
    assert "Ring" in algos


def test_an_average_runs_without_nvls_on_one_node_and_without_nvlstree_across_nodes() -> None:
    # avg is a scaled sum (PreMulSum) on floating types: FSDP2's reduce-scatter with a float32 or bfloat16 reduce dtype
    one = {
        op: _sim("hgx-h100", 1, "allreduce", op, "bfloat16").simulate_one("nccl", 256 << 20) for op in ("sum", "avg")
    }
    assert one["sum"].algorithm == "NVLS" and one["avg"].algorithm == "Ring"
    assert one["avg"].time_s > one["sum"].time_s
    rs = _sim("hgx-h100", 1, "reduce_scatter", "avg", "float32")
    assert "NVLS" not in {a for a, _ in enabled_pairs(rs.nccl_plan, rs.nccl_options, "reduce_scatter")}
    two = _sim("hgx-h100", 2, "allreduce", "avg", "float32")
    assert not {"NVLS", "NVLSTree"} & {a for a, _ in enabled_pairs(two.nccl_plan, two.nccl_options, "allreduce")}
    forced = {"name": "f", "cluster": {"node": "hgx-h100"}, "workload": {"op": "avg"}}
    forced["backends"] = {"nccl": {"env": {"NCCL_ALGO": "NVLS"}}}
    with pytest.raises(ScenarioError, match=r"NVLS: NCCL has no algorithm left .* NVLink SHARP has no avg on float32"):
        Simulator.from_source(forced).simulate_one("nccl", 256 << 20)


def test_an_int8_all_gather_takes_nvls_from_2_22_3() -> None:
    # enqueue.cc from v2.22.3-1: nvlsSupport = ... (ncclNvlsSupported(op, type) || func == ncclFuncAllGather)
    def algos(version: str) -> set[str]:
        sim = _sim("hgx-h100", 1, "allgather", "sum", "int8", version)
        return {a for a, _ in enabled_pairs(sim.nccl_plan, sim.nccl_options, "allgather")}

    assert "NVLS" in algos("2.22.3") and "NVLS" in algos("2.26.2")
    assert "NVLS" not in algos("2.21.5") and "Ring" in algos("2.21.5")


def test_a_step_can_ask_for_another_reduction_and_an_unknown_one_is_an_error() -> None:
    sim = _sim("hgx-h100", 1, "allreduce", "sum", "bfloat16")
    assert sim.simulate_one("nccl", 256 << 20, op="avg").algorithm == "Ring"
    assert sim.simulate_one("nccl", 256 << 20).algorithm == "NVLS"
    with pytest.raises(ScenarioError, match=r"unknown reduction 'mean'; expected one of sum, prod, max, min, avg"):
        sim.simulate_one("nccl", 256 << 20, op="mean")
