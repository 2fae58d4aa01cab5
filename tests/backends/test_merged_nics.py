"""A dual-port card as NCCL opens it: from 2.20 one device of both ports' speed (NCCL_IB_MERGE_NICS, net_ib.cc),
so OCI's BM.GPU.H100.8 (16 x 200 Gb/s ports on 8 cards) plans as 8 NICs of 400 Gb/s, one per GPU, and its
NVLSTree reaches the HGX H100's plateau on 8 NDR NICs; an older release is told that the preset does not fit it."""

from __future__ import annotations

from typing import Any

import pytest

from collsim.api import Simulator

GiB = 2**30


def _sim(node: str, version: str | None = None, **params: Any) -> Simulator:
    cluster: dict[str, Any] = {"node": node, "nodes": 2, "fabric": {"topology": "rail_optimized", "transport": "rdma"}}
    if params:
        cluster["node_params"] = params
    nccl: dict[str, Any] = {"version": version} if version else {}
    return Simulator.from_source({"name": "merged", "cluster": cluster, "backends": {"nccl": nccl}})


def test_oci_cards_plan_as_one_nic_per_gpu_and_reach_the_ndr_plateau() -> None:
    oci = _sim("oci-bm-gpu-h100-8", "2.21.5")
    plan = oci.nccl_plan
    roce = _sim("hgx", "2.21.5", nic="connectx-7-roce-400g")
    assert plan.nic_count == 8 and plan.nic_bw == pytest.approx(roce.nccl_plan.nic_bw)
    out_oci, out_roce = oci.simulate_one("nccl", GiB), roce.simulate_one("nccl", GiB)
    assert (out_oci.algorithm, out_oci.protocol) == (out_roce.algorithm, out_roce.protocol) == ("NVLSTree", "Simple")
    t_oci = out_oci.time_s
    assert t_oci == pytest.approx(out_roce.time_s, rel=1e-9)
    # a device per port (NCCL 2.19, or NCCL_IB_MERGE_NICS=0): 8 NVLS heads of 200 Gb/s, NCCL's model picks rings
    ports = _sim("oci-bm-gpu-h100-8", "2.21.5", nic="connectx-6-roce", nics_per_gpu=2)
    assert ports.nccl_plan.nic_count == 16 and ports.simulate_one("nccl", GiB).time_s > 1.15 * t_oci


def test_a_release_before_the_merge_is_told_the_preset_does_not_fit() -> None:
    notes = _sim("oci-bm-gpu-h100-8", "2.19.3").nccl_release_notes()
    assert any("connectx-7-2x200g-roce" in n and "from 2.20" in n for n in notes), notes
    assert not [n for n in _sim("oci-bm-gpu-h100-8", "2.21.5").nccl_release_notes() if "merges" in n]
