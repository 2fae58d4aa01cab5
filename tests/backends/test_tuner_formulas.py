"""NCCL's cost-model formulas by release (``tuner_formulas_since`` / ``tuner_formulas_before`` in
topologies/software/nccl.yaml, tuning.cc at each tag): a scenario naming an older NCCL prices Ring/LL, Ring/LL128,
NVLS and NVLSTree with that release's formula. Each test writes the formula out (the closed form) from the model's own
inputs and checks the algorithm bandwidth NCCL's model gives; the simulated time never changes with the version."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.nccl.algos import REGISTRY
from collsim.backends.nccl.tuner import _inputs

KIB, MIB = 1024, 2**20
TWO_NODES = "scenarios/validation/hgx_h100_2node_ib_ndr_issue309.yaml"
FOUR_NODES = "scenarios/validation/h100_4node_vm_ib_ndr_issue309.yaml"
#: two one-GPU nodes (a PCIe workstation each, one 100 GbE NIC): one rank per node
ONE_PER_NODE = ["cluster.node=pcie-workstation", "cluster.node_params.gpus=1", "cluster.node_params.nic=eth-100g"]


def _model(source: str, version: str, algo: str, proto: str, collective: str = "allreduce", nbytes: int = 256 * MIB,
           *more: str) -> tuple[float, Simulator]:  # fmt: skip
    """NCCL's algorithm bandwidth (bytes/s) for the pair, with the named release's formula."""
    sim = Simulator.from_source(source, [f'backends.nccl.version="{version}"', *more])
    consts = sim.nccl_constants.for_tuner(sim.nccl_options.version)
    m = _inputs(sim.nccl_plan, sim.nccl_options, consts, collective, nbytes, algo, proto)
    return REGISTRY[algo].model(m)[1], sim


def test_ring_ll_was_a_quarter_of_the_rings_before_2_21() -> None:
    # one DGX A100 (Ampere's llMaxBw on one node: 87.7 GB/s in both releases)
    new, sim = _model("dgx-a100", "2.21.5", "Ring", "LL")
    old, old_sim = _model("dgx-a100", "2.20.5", "Ring", "LL")
    plan, n = sim.nccl_plan, len(sim.nccl_plan.ranks)

    def ll(s: Simulator) -> float:  # llMaxBw of the release
        return s.nccl_constants.for_tuner(s.nccl_options.version).ll_bw(plan.arch, plan.cpu_vendor, 0)

    assert new == pytest.approx(min(ll(sim), plan.bus_bw * 0.5) * n / (2 * (n - 1)), rel=1e-12)
    assert old == pytest.approx(min(ll(old_sim), plan.bus_bw / 4) * n / (2 * (n - 1)), rel=1e-12)
    assert plan.bus_bw / 4 < ll(old_sim)  # the quarter binds, not llMaxBw
    # one node's all-gather: a third (a ring all-gather's algbw is its busBw x n / (n - 1))
    ag, _ = _model("dgx-a100", "2.20.5", "Ring", "LL", "allgather")
    assert ag == pytest.approx(min(ll(old_sim), plan.bus_bw / 3) * n / (n - 1), rel=1e-12)


def test_ring_ll128_with_one_gpu_per_node_was_70_percent_before_2_23() -> None:
    new, sim = _model("2node-a100-tcp", "2.23.4", "Ring", "LL128", "allreduce", 256 * MIB, *ONE_PER_NODE)
    old, _ = _model("2node-a100-tcp", "2.22.3", "Ring", "LL128", "allreduce", 256 * MIB, *ONE_PER_NODE)
    plan, consts = sim.nccl_plan, sim.nccl_constants
    assert plan.ppn == 1
    cap = plan.channels * consts.per_channel_max_ring_ll128_bw[plan.arch][1]
    assert plan.bus_bw * 0.92 < cap  # the per-channel cap does not bind: the ratio is the formula's
    assert old / new == pytest.approx(0.7 / 0.92, rel=1e-12)
    # with 8 GPUs per node both releases take 92%
    many = [_model("hgx-h100", v, "Ring", "LL128")[0] for v in ("2.22.3", "2.23.4")]
    assert many[0] == pytest.approx(many[1], rel=1e-12)


def test_nvls_on_one_node_by_release() -> None:
    """2.19-2.27: nChannels x min(bwIntra, bwInter) = the GPU's NVLink bandwidth (one node), x 5/6; from 2.28.3
    NVLink x nvlsEfficiency x (nCh - 1) / nCh x 2, x nRanks / nsteps."""
    old, sim = _model("hgx-h100", "2.27.7", "NVLS", "Simple")
    new, _ = _model("hgx-h100", "2.28.3", "NVLS", "Simple")
    plan, consts = sim.nccl_plan, sim.nccl_constants
    n, nc = len(plan.ranks), consts.nvls_channels
    assert old == pytest.approx(plan.nvl_bw * 5 / 6, rel=1e-12)
    assert new == pytest.approx(plan.nvl_bw * consts.nvls_efficiency["hopper"] * (nc - 1) / nc * 2 * n / (2 * (n - 1)),
                                rel=1e-12)  # fmt: skip
    assert _model("hgx-h100", "2.18.5", "NVLS", "Simple")[0] == pytest.approx(old, rel=1e-12)  # 2.18: bwIntra, x 5/6


def test_nvls_all_gather_on_one_node_by_release() -> None:
    """2.27: min(bwIntra x (ppn - 1) / ppn, bwInter x 0.9), not converted; 2.19-2.26 the allreduce figure x 5/6."""
    sim = Simulator.from_source("hgx-h100")
    nvl, ppn = sim.nccl_plan.nvl_bw, sim.nccl_plan.ppn
    assert _model("hgx-h100", "2.27.7", "NVLS", "Simple", "allgather")[0] == pytest.approx(
        min(nvl * (ppn - 1) / ppn, 0.9 * nvl), rel=1e-12)  # fmt: skip
    assert _model("hgx-h100", "2.26.2", "NVLS", "Simple", "allgather")[0] == pytest.approx(nvl * 5 / 6, rel=1e-12)


@pytest.mark.parametrize(("source", "nodes"), [(TWO_NODES, 2), (FOUR_NODES, 4)])
def test_nvlstree_before_2_28_3(source: str, nodes: int) -> None:
    """2.19-2.27: min(bwIntra, bwInter (halved from three nodes)) x 5/6, with nChannels x bwInter the heads' NICs;
    2.18: bwIntra on two nodes (bwInter beyond) x .70 nNodes / (2 (nNodes - 1))."""
    old, sim = _model(source, "2.26.2", "NVLSTree", "Simple")
    plan = sim.nccl_plan
    assert plan.nnodes == nodes
    inter = min(plan.nic_count, plan.ppn) * plan.nic_bw
    assert old == pytest.approx(min(plan.nvl_bw, inter if nodes <= 2 else inter / 2) * 5 / 6, rel=1e-12)
    v218, _ = _model(source, "2.18.5", "NVLSTree", "Simple")
    assert v218 == pytest.approx((plan.nvl_bw if nodes <= 2 else inter) * 0.7 * nodes / (2 * (nodes - 1)), rel=1e-12)


def test_the_simulated_time_does_not_follow_the_formula() -> None:
    times = {
        v: Simulator.from_source(TWO_NODES, [f'backends.nccl.version="{v}"'])
        .simulate_one("nccl", 64 * MIB, choice=("NVLSTree", "Simple"))
        for v in ("2.26.2", "2.28.3")
    }
    assert times["2.26.2"].time_s == times["2.28.3"].time_s
    assert times["2.26.2"].predicted_s != times["2.28.3"].predicted_s
