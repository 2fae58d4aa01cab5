"""The NVLS kernels' local copies (issue 12): every slice is copied from the user's buffer into the NVLS buffers by
the channel's scatter warps and out to the user's buffer by its gather warps, each copy a pipeline stage at
Little's law's rate (threads x loads in flight x 16 B / the GPU's memory latency). Checked against the warp split of
NCCL's all_reduce.h, the closed form on one slice, and what the copies must not change (the plateau)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from collsim.api import Simulator

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
GPUS = Path(__file__).resolve().parents[2] / "topologies" / "presets" / "gpus.yaml"
OLD_NVLS = {"env": {"NCCL_ALGO": "NVLS"}, "version": "2.18.5"}


def _scenario(gpu_latency: bool, nodes: int = 1, nccl: dict[str, Any] | None = None) -> dict[str, Any]:
    """An HGX H100 (the `hgx` template) of ``nodes`` nodes on NDR rails; without ``gpu_latency`` its GPU is the
    H100 preset less ``hbm_latency`` (a user preset), which leaves the copies out."""
    spec = dict(yaml.safe_load(GPUS.read_text())["h100-sxm5-80gb"])
    if not gpu_latency:
        del spec["hbm_latency"], spec["hbm_latency_source"]
    cluster: dict[str, Any] = {"node": "hgx", "nodes": nodes, "node_params": {"gpu": "h100-test"}}
    if nodes > 1:
        cluster["fabric"] = {"topology": "rail_optimized", "transport": "rdma", "gpudirect": True}
    return {
        "name": "nvls-copies",
        "cluster": cluster,
        "workload": {"collective": "allreduce", "dtype": "float32", "sizes": "1MiB"},
        "backends": {"nccl": {"enabled": True, **(nccl or {})}, "gloo": {"enabled": False}},
        "presets": {"gpus": {"h100-test": spec}},
    }


def test_copy_threads_follow_ncclss_warp_split() -> None:
    # all_reduce.h: one node of 8 (reduce 5 warps): scatter 8, gather 7 warps; an NVLSTree rank with a parent
    # (reduce 5, broadcast 4): 6 and 5; its root: 8 and 7; at most 6 ranks (reduce 7): 7 and 6. The scatter sends,
    # so one of its warps stays out of the copy loop (prims_simple.h nworkers)
    warps = Simulator.from_source("hgx-h100").nccl_constants.nvls_warps
    assert warps.copy_workers(8, tree_parent=False) == (7 * 32, 7 * 32)
    assert warps.copy_workers(16, tree_parent=True) == (5 * 32, 5 * 32)
    assert warps.copy_workers(16, tree_parent=False) == (7 * 32, 7 * 32)
    assert warps.copy_workers(4, tree_parent=False) == (6 * 32, 6 * 32)


def test_one_slice_pays_both_copies_in_full() -> None:
    # NCCL 2.18.5 runs a 128 KiB NVLS allreduce on channel 0 alone, one slice of 8 heads x 16 KiB: the copy in
    # and the copy out each take the slice / (224 threads x 8 loads x 16 B / 375 ns) = 76.5 GB/s, on a GPU memory
    # of 3.35 TB/s that nothing else uses, so the collective takes exactly their sum longer
    with_copies = Simulator.from_source(_scenario(True, nccl=OLD_NVLS)).simulate_one("nccl", 128 * KIB).time_s
    without = Simulator.from_source(_scenario(False, nccl=OLD_NVLS)).simulate_one("nccl", 128 * KIB).time_s
    rate = 224 * 8 * 16 / 375e-9
    assert with_copies - without == pytest.approx(2 * 128 * KIB / rate, rel=1e-9)


def test_the_shipped_h100_is_the_user_preset_with_its_latency() -> None:
    # the user preset above is the shipped one: the same time with its latency as hgx-h100's
    ours = Simulator.from_source(_scenario(True, nccl=OLD_NVLS)).simulate_one("nccl", 4 * MIB).time_s
    shipped = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_ALGO=NVLS", 'backends.nccl.version="2.18.5"'])
    assert ours == pytest.approx(shipped.simulate_one("nccl", 4 * MIB).time_s, rel=1e-12)


@pytest.mark.parametrize("nodes", [1, 2])
def test_the_copies_fill_the_pipeline_and_leave_the_plateau(nodes: int) -> None:
    # the copies run beside the NVLink and network stages at 55-76 GB/s per channel, faster than a channel's
    # share of the NVLS bottleneck (~17 GB/s), so they add a fill (a constant) and leave the marginal rate
    nccl = {"env": {"NCCL_ALGO": "NVLS" if nodes == 1 else "NVLSTree"}}
    times = {}
    for latency in (True, False):
        sim = Simulator.from_source(_scenario(latency, nodes, nccl))
        times[latency] = [sim.simulate_one("nccl", s).time_s for s in (GIB, 2 * GIB)]
    fill = [a - b for a, b in zip(times[True], times[False], strict=True)]
    assert all(f > 1e-6 for f in fill)  # at least a microsecond of fill
    rate_with = GIB / (times[True][1] - times[True][0])
    rate_without = GIB / (times[False][1] - times[False][0])
    assert rate_with == pytest.approx(rate_without, rel=2e-3)


@pytest.mark.parametrize(("nodes", "size"), [(1, 4 * MIB), (2, 64 * MIB)])
def test_timed_copies_equal_copies_as_flows(nodes: int, size: int) -> None:
    # the copies take no resource, so the launcher times them (FluidNetwork.timed) unless the run records flows for
    # a trace, where they stream as flows: the same times either way
    algo = {"env": {"NCCL_ALGO": "NVLS" if nodes == 1 else "NVLSTree"}}
    sim = Simulator.from_source(_scenario(True, nodes, algo))
    timed = sim.simulate_one("nccl", size).time_s
    flows = sim.simulate_one("nccl", size, record=True)
    assert flows.time_s == pytest.approx(timed, rel=1e-12)
    assert any(r.size > 0 and not r.resources for r in flows.records)  # the copies, on no resource
