"""NVLS all-gather and reduce-scatter on one node (NCCL 2.19 on; all_gather.h and reduce_scatter.h, RunWorkColl
NVLS/Simple): where NCCL offers them, NCCL's cost model for them, and the simulation's closed forms (the NVLink
bound with each slice's post, the copy group on one slice)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from collsim.api import Simulator
from collsim.backends.common import ResourceCatalog, link_uses
from collsim.backends.nccl import candidates

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
GPUS = Path(__file__).resolve().parents[2] / "topologies" / "presets" / "gpus.yaml"
PICK = ("NVLS", "Simple")


def _offered(sim: Simulator, collective: str) -> bool:
    return "NVLS" in {a for a, _p in candidates(sim.nccl_plan, sim.nccl_options, collective)}


def _h100(gpu_latency: bool = True) -> Simulator:
    """HGX H100 with its GPU as a user preset, less ``hbm_latency`` when asked (which leaves the copies out)."""
    spec = dict(yaml.safe_load(GPUS.read_text())["h100-sxm5-80gb"])
    if not gpu_latency:
        del spec["hbm_latency"], spec["hbm_latency_source"]
    scenario: dict[str, Any] = {
        "name": "nvls-ag",
        "cluster": {"node": "hgx", "node_params": {"gpu": "h100-test"}},
        "backends": {"nccl": {"enabled": True}, "gloo": {"enabled": False}},
        "presets": {"gpus": {"h100-test": spec}},
    }
    return Simulator.from_source(scenario)


def test_offered_on_one_nvls_node_from_2_19() -> None:
    """tuning.cc lists NVLS for all-gather and reduce-scatter from v2.19.3-1 (Ring only in v2.18.3-1); one node
    (across nodes it needs CollNet), NVLS hardware, at most NCCL_MAX_NVLS_ARITY = 32 GPUs (enqueue.cc)."""
    for collective in ("allgather", "reduce_scatter"):
        assert _offered(Simulator.from_source("hgx-h100"), collective)
        assert not _offered(Simulator.from_source("hgx-h100", ['backends.nccl.version="2.18.5"']), collective)
        assert _offered(Simulator.from_source("hgx-h100", ['backends.nccl.version="2.19.3"']), collective)
        assert not _offered(Simulator.from_source("2node-h100-ib"), collective)
        assert not _offered(Simulator.from_source("dgx-a100"), collective)
        assert not _offered(Simulator.from_source("scenarios/published/gb200_nvl72_1rack_coreweave.yaml"), collective)
    assert not _offered(Simulator.from_source("hgx-h100"), "broadcast")


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter"])
def test_nccl_model(collective: str) -> None:
    """tuning.cc: latency intraLat (baseLat 0 and hwLat[NVLINK][NVLS] in the latest tables), bus bandwidth
    NVLink x nvlsEfficiency x (nCh - 1) / nCh x (ppn - 1) / ppn, used as the algorithm bandwidth."""
    sim = Simulator.from_source("hgx-h100")
    c, plan = sim.nccl_constants, sim.nccl_plan
    nch = c.nvls_channels
    bus = plan.nvl_bw * c.nvls_efficiency["hopper"] * (nch - 1) / nch * (plan.ppn - 1) / plan.ppn
    lat = c.base_latency["NVLS"]["Simple"] + c.hw_latency["NVLINK"]["NVLS"]["Simple"]
    out = sim.simulate_one("nccl", 64 * MIB, collective=collective, choice=PICK)
    assert out.predicted_s == pytest.approx(lat + 64 * MIB / bus, rel=1e-12)


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter"])
def test_plateau_is_the_nvlink_bound_with_the_posts(collective: str) -> None:
    """Every GPU's NVLinks carry n bytes per byte of its own share (the multicast of every GPU's slice coming down;
    every GPU's copy of each head's slice going up), at NCCL's NVLS efficiency; each slice (a 128 KiB chunk of the
    GPU's own share) is followed by its post, hwLat[NVLINK][Ring][Simple]. Marginal algorithm bandwidth from 2 to
    4 GiB: nc n S / (S / r + P), r = C eff / (n nc), on every channel at once."""
    sim = Simulator.from_source("hgx-h100")
    c, plan, topo = sim.nccl_constants, sim.nccl_plan, sim.topology
    assert plan.nvswitch is not None
    cat = ResourceCatalog(topo)
    (link, coef), = link_uses(topo.route(plan.nvswitch, plan.ranks[0], kinds=("nvlink",))).uses
    capacity = cat.specs[link].capacity / coef
    n, eff = len(plan.ranks), c.nvls_efficiency["hopper"]
    t = [sim.simulate_one("nccl", s * GIB, collective=collective, choice=PICK) for s in (2, 4)]
    nc, chunk = t[1].channels, 128 * KIB
    post = c.hw_latency["NVLINK"]["Ring"]["Simple"] * c.sim_step_latency_scale
    rate = capacity * eff / (n * nc)
    expected = nc * n * chunk / (chunk / rate + post)
    assert 2 * GIB / (t[1].time_s - t[0].time_s) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(("collective", "threads"), [("allgather", 8 * 32), ("reduce_scatter", 7 * 32)])
def test_one_slice_pays_its_copy_in_full(collective: str, threads: int) -> None:
    """A small all-gather or reduce-scatter, one slice per channel: the copy group (8 warps; the scatter group of
    reduce-scatter posts, so 7 copy) moves every GPU's slice, n x the GPU's own, at threads x 8 loads x 16 B / 375 ns
    (Little's law on the H100's memory latency), after the multicast (all-gather) or before the reduction
    (reduce-scatter): the collective takes exactly that longer than without the copies."""
    size = 256 * KIB
    with_copies = _h100().simulate_one("nccl", size, collective=collective, choice=PICK)
    without = _h100(gpu_latency=False).simulate_one("nccl", size, collective=collective, choice=PICK)
    assert with_copies.channels == without.channels
    per_gpu_channel = size / 8 / with_copies.channels
    rate = threads * 8 * 16 / 375e-9
    assert with_copies.time_s - without.time_s == pytest.approx(8 * per_gpu_channel / rate, rel=1e-9)


@pytest.mark.parametrize("collective", ["allgather", "reduce_scatter"])
def test_symmetry_is_exact(collective: str) -> None:
    """Every GPU of the node is alike: the symmetric simulation (one GPU per channel class) gives the full one's
    time bit for bit, with one slice a channel (1 MiB) and with more slices than the buffers' 8 slots (256 MiB: 32
    slices of 64 KiB a channel)."""
    for size in (1 * MIB, 256 * MIB):
        on = Simulator.from_source("hgx-h100").simulate_one("nccl", size, collective=collective, choice=PICK)
        off = Simulator.from_source("hgx-h100", ["engine.symmetry=false"]).simulate_one(
            "nccl", size, collective=collective, choice=PICK
        )
        assert on.time_s == off.time_s
