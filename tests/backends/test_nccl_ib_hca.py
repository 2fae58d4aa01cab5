"""NCCL_IB_HCA: NCCL's IB transport lists only the devices (and ports) it matches (ncclIbInit, src/transport/net_ib/
init.cc; parseStringList and matchIfList, src/misc/utils.cc; NVIDIA/nccl v2.30.7-1), so NCCL plans over those NICs
as on a node built with only them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsim.api import Simulator
from collsim.backends.nccl.ib_hca import ib_devices, ib_hca_selection
from collsim.nccl_env import IbHcaList
from collsim.scenario import ScenarioError
from collsim.topology import ib_device_name as ib_name
from collsim.topology import load_topology

#: The DGX H100 User Guide's RDMA devices of GPU 0-7's ConnectX-7 (Table 6), as the hgx-h100 template names them.
DGX_H100 = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
GiB = 2**30


@pytest.mark.parametrize(
    ("value", "listed"),
    [
        ("mlx5", DGX_H100),  # a prefix of every name
        ("mlx5_1", ["mlx5_10", "mlx5_11"]),  # NCCL's prefix match: not mlx5_1 alone
        ("=mlx5_10", ["mlx5_10"]),
        ("=mlx5_1", []),
        ("mlx5_0,mlx5_3", ["mlx5_0", "mlx5_3"]),
        ("mlx5_0:1,mlx5_3:2", ["mlx5_0"]),  # port 2 of mlx5_3 does not exist: a NIC of one port (1)
        ("^mlx5_0", DGX_H100[1:]),
        ("^=mlx5_1", DGX_H100),  # exact and excluded: mlx5_1 is not one of them
        (",,mlx5_4,", ["mlx5_4"]),  # empty entries skipped (strtok)
        ("", DGX_H100),  # no entry: everything
        ("^", []),
        ("mlx5_4:x", []),  # atoi("x") = 0: port 0 matches no port
        ("mlx5_4:1:3:0", ["mlx5_4"]),  # rail and plane fields do not select
    ],
)
def test_nccls_matching_rules(value: str, listed: list[str]) -> None:
    wanted = IbHcaList.parse(value)
    assert [n for n in DGX_H100 if wanted.matches(n)] == listed


@given(st.lists(st.sampled_from(DGX_H100), min_size=1, unique=True))
def test_excluding_a_list_lists_exactly_the_others(names: list[str]) -> None:
    exact = "=" + ",".join(names)
    assert [n for n in DGX_H100 if IbHcaList.parse(exact).matches(n)] == [n for n in DGX_H100 if n in names]
    assert [n for n in DGX_H100 if IbHcaList.parse("^" + exact).matches(n)] == [n for n in DGX_H100 if n not in names]


def test_the_hgx_h100_nics_carry_the_dgx_h100_names_and_other_templates_mlx5_by_index() -> None:
    hgx = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized"})
    assert [ib_name(d) for d in hgx.nics(1)] == DGX_H100
    dgx = load_topology("dgx-a100", nodes=2, fabric={"topology": "rail_optimized"})
    assert [ib_name(d) for d in dgx.nics(0)] == [f"mlx5_{i}" for i in range(8)]
    # a NIC keeps its name when the fabric swaps its model, and when the fabric keeps fewer NICs
    roce = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized", "nic": "connectx-7-roce-400g",
                                                      "nics": ["nic1", "nic5"]})  # fmt: skip
    assert [ib_name(d) for d in roce.nics(0)] == ["mlx5_3", "mlx5_9"]
    # without names in the template a NIC is mlx5_<its slot>, kept when the fabric keeps fewer (renumbered) NICs
    few = load_topology("dgx-a100", nodes=2, fabric={"topology": "rail_optimized", "nics": ["nic2", "nic5"]})
    assert [(d.index, ib_name(d)) for d in few.nics(0)] == [(0, "mlx5_2"), (1, "mlx5_5")]


def test_collsim_topo_shows_the_nics_nccl_lists(capsys: pytest.CaptureFixture[str]) -> None:
    from collsim.cli import main

    assert main(["topo", "2node-a100-ib", "--set", "backends.nccl.env.NCCL_IB_HCA=mlx5_2,mlx5_3"]) == 0
    out = capsys.readouterr().out
    assert "NIC0: nic2 (connectx-6-hdr, 200 Gb/s, mlx5_2)" in out and "NIC2:" not in out
    assert "NCCL_IB_HCA=mlx5_2,mlx5_3: NCCL lists 2 of the 8 NICs of every node, nic2 (mlx5_2) and nic3 (mlx5_3)" in out


def test_only_nics_of_ncclss_ib_transport_are_concerned() -> None:
    assert ib_devices(load_topology("hgx-h100")) == []  # one node: no network
    tcp = load_topology("hgx-h100", nodes=2, fabric={"topology": "rail_optimized", "transport": "tcp",
                                                     "nic": "eth-100g"})  # fmt: skip
    assert ib_devices(tcp) == []  # NCCL's socket transport
    assert ib_devices(load_topology("aws-p5", nodes=2, fabric={"topology": "rail_optimized"})) == []  # EFA's plugin
    assert ib_hca_selection(load_topology("aws-p5", nodes=2, fabric={"topology": "rail_optimized"}), "=x") == (None, [])


def _nccl(*env: str) -> tuple[Simulator, float]:
    sim = Simulator.from_source("2node-h100-ib", [f"backends.nccl.env.{e}" for e in env])
    return sim, sim.simulate_one("nccl", GiB).time_s


def test_ncc_plans_over_the_nics_it_lists() -> None:
    """Two NICs a node (GPU 0's and GPU 1's): the ring is bound by them; the cluster is the one built with those
    slots (fabric.nics), whatever the names that selected them."""
    full, t_full = _nccl("NCCL_ALGO=Ring")
    two, t_two = _nccl("NCCL_ALGO=Ring", "NCCL_IB_HCA=mlx5_0,mlx5_3")
    assert [d.local_name for d in two.topology.nics(0)] == ["nic0", "nic1"]
    assert two.ib_hca_notes == [
        "NCCL_IB_HCA=mlx5_0,mlx5_3: NCCL lists 2 of the 8 NICs of every node, nic0 (mlx5_0) and nic1 (mlx5_3)"
    ]
    slots = Simulator.from_source("2node-h100-ib", ["cluster.fabric.nics=[nic0,nic1]",
                                                    "backends.nccl.env.NCCL_ALGO=Ring"])  # fmt: skip
    assert t_two == slots.simulate_one("nccl", GiB).time_s
    assert t_two > 3.5 * t_full  # 2 of 8 NICs: the network carries the ring at a quarter of the NICs
    assert not full.ib_hca_notes


def test_a_prefix_that_matches_every_nic_changes_nothing() -> None:
    assert _nccl("NCCL_IB_HCA=mlx5")[1] == _nccl()[1]


def test_leaving_out_any_one_nic_costs_the_same() -> None:
    """Which NIC is left out does not matter on a node of identical PCIe switches: the kept NICs keep their template
    slots for the GPUs their channels enter through (a renumbered index once paired nic2's and nic3's channels on
    one GPU)."""
    times = {v: _nccl("NCCL_ALGO=Ring", f"NCCL_IB_HCA=^{v}")[1] for v in ("=mlx5_0", "=mlx5_5", "=mlx5_11")}
    assert len(set(times.values())) == 1, times


def test_no_nic_left_is_an_error_naming_the_variable() -> None:
    with pytest.raises(ScenarioError, match=r"NCCL_IB_HCA.*matches none.*mlx5_11.*fall back to sockets"):
        Simulator.from_source("2node-h100-ib", ["backends.nccl.env.NCCL_IB_HCA==mlx5_1"])


def test_nccl_disabled_ignores_it() -> None:
    sim = Simulator.from_source("2node-h100-ib", ["backends.nccl.env.NCCL_IB_HCA==mlx5_1",
                                                  "backends.nccl.enabled=false"])  # fmt: skip
    assert len(sim.topology.nics(0)) == 8 and not sim.ib_hca_notes


def test_nvlstree_takes_a_head_per_nic_listed() -> None:
    """NCCL's NVLS search makes one head per NIC, its local GPU (search.cc ncclTopoSearchRecNet): with 2 NICs a node
    two heads carry half the data each through their own NIC, so on two nodes each NIC moves half the buffer each
    way, the bound the simulation reaches within 2% at 1 GiB; a head per GPU sharing the two NICs took 2.2x that
    (81.9 GB/s busbw, slower than the ring's 95.9)."""
    sim, t_tree = _nccl("NCCL_IB_HCA=mlx5_0,mlx5_3")
    _, t_ring = _nccl("NCCL_IB_HCA=mlx5_0,mlx5_3", "NCCL_ALGO=Ring")
    assert sim.simulate_one("nccl", GiB).algorithm == "NVLSTree"
    bound = GiB / 2 / sim.nccl_plan.nic_bw  # each NIC: half the buffer (its head's share), each direction
    assert 0.98 < bound / t_tree <= 1.0
    assert t_tree < t_ring
    # leaving one NIC of eight out costs NVLSTree little on two nodes (the NVLinks bind, not the NICs)
    assert _nccl("NCCL_IB_HCA=^=mlx5_0")[1] < 1.02 * _nccl()[1]
