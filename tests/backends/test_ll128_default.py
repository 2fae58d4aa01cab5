"""When NCCL turns LL128 on by default (tuning.cc ncclTopoTuneModel; ``ll128_default`` in
topologies/software/nccl.yaml): every ring hop inside a node over NVLink (one GPU per node has none), GPU-NIC paths
within PXB (PXN from compute capability 9.0) and, before NCCL 2.27, only the compute capabilities NCCL lists."""

from __future__ import annotations

import pytest

from collsim.api import Simulator
from collsim.backends.nccl import candidates, enabled_pairs

#: one RTX 2080 Ti (compute capability 7.5) per node, the 100 GbE NIC on its PCIe switch (PIX) or on the CPU (PHB)
ONE_PER_NODE = ["cluster.node=pcie-workstation", "cluster.node_params.gpus=1", "cluster.node_params.nic=eth-100g"]
B200 = "scenarios/published/lambda_b200_2node_ib.yaml"


def _protocols(sim: Simulator) -> set[str]:
    return {p for _a, p in enabled_pairs(sim.nccl_plan, sim.nccl_options, "allreduce")}


def _sim(source: str, *more: str, version: str | None = None) -> Simulator:
    return Simulator.from_source(source, [*more, *([f'backends.nccl.version="{version}"'] if version else [])])


def test_one_gpu_per_node_takes_ll128_when_the_nic_is_near() -> None:
    """One GPU per node: NCCL's graph has no path inside a node (typeIntra = PATH_LOC), so LL128 is on with the NIC
    on the GPU's switch (PIX) from 2.27 (compute capability 7.5 was not in 2.26's list), off with the NIC on the CPU
    (PHB, past PXB)."""
    near = _sim("2node-a100-tcp", *ONE_PER_NODE)
    assert near.nccl_plan.ll128_refusal is None and "LL128" in _protocols(near)
    old = _sim("2node-a100-tcp", *ONE_PER_NODE, version="2.26.2")
    assert old.nccl_plan.ll128_refusal == "compute capability 7.5 before NCCL 2.27"
    assert _protocols(old) == {"LL", "Simple"}
    far = _sim("2node-a100-tcp", *ONE_PER_NODE, "cluster.node_params.pcie_switch=false")
    assert far.nccl_plan.ll128_refusal == "GPU-NIC paths through PHB (NCCL's graph typeInter past PXB)"
    assert _protocols(far) == {"LL", "Simple"}
    # NCCL_PROTO asks for it anyway: collsim runs it, as NCCL would
    forced = _sim("2node-a100-tcp", *ONE_PER_NODE, "cluster.node_params.pcie_switch=false",
                  "backends.nccl.env.NCCL_PROTO=LL128")  # fmt: skip
    assert _protocols(forced) == {"LL128"}


def test_blackwell_ll128_from_2_25() -> None:
    """Compute capability 10.0 joined NCCL's LL128 list in 2.25 (tuning.cc v2.25.1-1 `case 100`)."""
    assert _sim(B200, version="2.24.3").nccl_plan.ll128_refusal == "compute capability 10.0 before NCCL 2.25"
    assert "LL128" not in _protocols(_sim(B200, version="2.24.3"))
    assert _sim(B200, version="2.25.1").nccl_plan.ll128_refusal is None
    assert "LL128" in {p for _a, p in candidates(_sim(B200).nccl_plan, _sim(B200).nccl_options, "allreduce")}


def test_bridged_pairs_in_a_bigger_box_leave_ll128_off() -> None:
    """Two H100 PCIe joined by NVLink bridges: every ring hop is NVLink, LL128 on. Four (two bridged pairs): the
    rings cross PCIe between the pairs (NCCL's typeIntra past NVB), LL128 off, and the ring's hops are priced at
    the slowest (``intra_hw`` PCI; it read the first, bridged, two GPUs until 2026-12-07)."""
    pair = _sim("hgx-h100", "cluster.node=h100-pcie-nvlink-pair")
    assert pair.nccl_plan.ll128_refusal is None and pair.nccl_plan.intra_hw == "NVLINK"
    four = _sim("hgx-h100", "cluster.node=h100-pcie-nvlink-pair", "cluster.node_params.gpus=4")
    assert four.nccl_plan.intra_hw == "PCI"
    assert four.nccl_plan.ll128_refusal is not None and "typeIntra past NVB" in four.nccl_plan.ll128_refusal
    assert "LL128" not in _protocols(four)


@pytest.mark.parametrize(
    "source",
    ["hgx-h100", "dgx-a100", "2node-a100-ib", "16node-h100-ib", "scenarios/published/aws_p5_2node_efa.yaml",
     "scenarios/published/dgx1_v100_8gpu_g8.yaml"],
)  # fmt: skip
def test_nvlink_nodes_keep_ll128(source: str) -> None:
    """NVLink nodes of compute capability 7.0, 8.0 and 9.0 with NICs on the GPUs' switches keep LL128; AWS p5's
    rings leave a node through a GPU two switches from the channel's NIC and hand the data over NVLink to the GPU
    beside it (PXN), which Hopper allows."""
    assert _sim(source).nccl_plan.ll128_refusal is None


def test_the_note_says_why() -> None:
    notes = _sim("2node-a100-tcp", *ONE_PER_NODE, "cluster.node_params.pcie_switch=false").nccl_release_notes()
    assert notes == [
        "NCCL leaves LL128 off by default here (NCCL_PROTO=LL128 turns it on): GPU-NIC paths through PHB (NCCL's "
        "graph typeInter past PXB)"
    ]
