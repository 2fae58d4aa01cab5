"""NCCL's tree graph on two nodes (search.cc's second pass): bwIntra climbs the release's speed ladder while below
twice bwInter and while every channel still fits on a GPU's NVLinks. With 400 Gb/s NICs (48 GB/s, the top of
Hopper's ladder and of Blackwell's before 2.27.6) there is no rung to climb and NCCL prices the tree at the
network's rate; tuning.cc takes that figure for a tree on at most two nodes."""

from __future__ import annotations

from typing import Any

import pytest

from collsim.api import Simulator


def _sim(node: str, version: str | None = None, sizes: str = "1GiB") -> Simulator:
    nccl: dict[str, Any] = {"version": version} if version else {}
    return Simulator.from_source(
        {
            "name": "tree-search",
            "cluster": {"node": node, "nodes": 2, "fabric": {"topology": "rail_optimized", "transport": "rdma"}},
            "workload": {"collective": "allreduce", "sizes": sizes},
            "backends": {"nccl": nccl},
        }
    )


@pytest.mark.parametrize(
    ("node", "version", "gbps"),
    [
        ("dgx-a100", None, 240.0),  # 8 x HDR (24): 24 -> 28 -> 30; 8 x 48 would exceed 240 GB/s of NVLink
        ("hgx-h100", None, 384.0),  # 8 x NDR (48): the top of sm90's ladder
        ("hgx-b200", "2.26.2", 384.0),  # sm100's ladder tops at 48 until 2.27.6
        ("hgx-b200", "2.28.3", 384.0),  # 96 is there from 2.27.6, but 8 x 96 > 721.8 GB/s of NVLink
        ("hgx-b200", "2.29.7", 640.0),  # 80 from 2.29.7
        ("hgx-b200", None, 688.0),  # 80, then 86 from 2.30.3
    ],
)
def test_tree_bwintra_climbs_the_releases_ladder(node: str, version: str | None, gbps: float) -> None:
    plan = _sim(node, version).nccl_plan
    assert plan.tree_bw == pytest.approx(gbps * 1e9)  # GB/s -> bytes/s


def test_ladders_by_release_are_the_latest_after_2_30_3() -> None:
    rs = _sim("hgx-b200").nccl_constants.ring_search
    assert rs is not None
    assert rs.ladder(100, (2, 30, 4))[:4] == (96.0, 86.0, 80.0, 48.0) == rs.ladder(100, None)[:4]
    assert rs.ladder(100, (2, 27, 3))[0] == 47.9 and rs.ladder(100, (2, 27, 7))[:2] == (96.0, 48.0)
    assert rs.ladder(90, (2, 26, 2)) == rs.ladder(90, None)  # Hopper's ladder did not move


def test_b200_on_nccl_2_26_prices_the_tree_at_the_network_and_runs_nvlstree() -> None:
    # Lambda's two HGX B200 nodes (scenarios/published/lambda_b200_2node_ib, NCCL 2.26.2): the tree priced at 8 x
    # 48 GB/s is no longer NCCL's pick at 512 MiB-2 GiB; NVLSTree is, as the run's plateau (696 GB/s) says
    sim = _sim("hgx-b200", "2.26.2", sizes="512MiB,2GiB")
    recs = [r for r in sim.run().records if r.backend == "nccl"]
    assert {r.algorithm for r in recs} == {"NVLSTree"}
    # from 2.30.3 the tree climbs to 86 GB/s a channel: 688 against the 768 the old doubling gave
    assert _sim("hgx-b200").nccl_plan.tree_bw < 2 * 384e9
