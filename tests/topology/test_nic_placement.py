"""Issue 16, NIC placement: which NIC slots a node keeps when a fabric uses fewer than all of them.

A template's population order (``nic_population``, default ``spread``: one NIC per PCIe switch first, alternating
sockets) decides which NICs ``fabric.nics_per_node`` keeps; ``fabric.nics`` names them, ``nics_per_switch`` and
``nics_per_socket`` cap them (collsim/topology/nic_placement.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.api import Simulator
from collsim.scenario import ScenarioError
from collsim.topology import Topology, TopologyError, load_presets, load_topology, topology_from_template
from collsim.topology.generators import GENERATORS
from collsim.topology.nic_placement import nic_slots_of, population_order, select_nics
from collsim.topology.presets import read_yaml
from collsim.topology.template import _build_layout, _template_path, resolve_params

MiB = 2**20
RAIL: dict[str, Any] = {"topology": "rail_optimized"}
SPREAD4: dict[str, Any] = {**RAIL, "nics_per_node": 4}
FIRST4: dict[str, Any] = {**RAIL, "nics": ["nic[0-3]"]}  # the placement nics_per_node 4 had before issue 16


def _dgx(fabric: dict[str, Any], nodes: int = 2) -> Topology:
    return load_topology("dgx-a100", nodes=nodes, fabric=fabric)


def _matrix(topo: Topology, node: int = 0) -> list[list[str]]:
    """Path class GPU x NIC of ``node`` (rows: GPUs in index order, columns: NICs in index order)."""
    return [[topo.path_class(g.name, n.name) for n in topo.nics(node)] for g in topo.devices("gpu", node)]


def _switch(topo: Topology, nic: str) -> str:
    """The PCIe switch ``nic`` hangs off (local name)."""
    (sw,) = [m for m in topo.graph.successors(nic) if topo.device(m).kind == "pcie_switch"]
    return topo.device(sw).local_name


def _locals(topo: Topology, node: int = 0) -> list[str]:
    return [n.local_name for n in topo.nics(node)]


# ---------------------------------------------------------------------------------------------- the default
def test_dgx_a100_with_four_nics_has_a_nic_next_to_every_gpu() -> None:
    # DGX A100: PCIe switch i holds gpu2i, gpu2i+1, nic2i, nic2i+1; switches 0-1 on socket 0, 2-3 on socket 1
    spread = _dgx(SPREAD4)
    assert _locals(spread) == ["nic0", "nic2", "nic4", "nic6"]
    pix, phb, sys_ = "PIX", "PHB", "SYS"
    assert _matrix(spread) == [
        [pix, phb, sys_, sys_],
        [pix, phb, sys_, sys_],
        [phb, pix, sys_, sys_],
        [phb, pix, sys_, sys_],
        [sys_, sys_, pix, phb],
        [sys_, sys_, pix, phb],
        [sys_, sys_, phb, pix],
        [sys_, sys_, phb, pix],
    ]
    for row in _matrix(spread):
        assert min(row, key=["PIX", "PXB", "PHB", "SYS"].index) in ("PIX", "PXB")
    # the first four slots, all on socket 0: GPU4-7 are SYS to every NIC
    first = _dgx(FIRST4)
    assert _locals(first) == ["nic0", "nic1", "nic2", "nic3"]
    assert [set(row) for row in _matrix(first)[4:]] == [{"SYS"}] * 4


def test_one_nic_per_pcie_switch_then_the_second_of_each() -> None:
    ports = {"nic": "connectx-6-roce", "nics_per_gpu": 2}  # OCI's 16 RDMA ports as NCCL 2.19 sees them
    for template, k, per_switch, params in (
        ("dgx-a100", 4, 1, None),
        ("hgx-h100", 4, 1, None),
        ("hgx-b200", 4, 1, None),
        ("aws-p5", 4, 1, None),  # 8 switches of one grouped EFA device each: 4 of them on 4 switches
        ("oci-bm-gpu-h100-8", 8, 2, ports),  # 4 switches of 4 NICs: two each
        ("dgx-a100", 6, None, None),  # 4 switches, then one more on a switch of each socket
    ):
        topo = load_topology(template, nodes=2, fabric={**RAIL, "nics_per_node": k}, node_params=params)
        nics = topo.nics(0)
        assert len(nics) == k
        counts: dict[str, int] = {}
        for nic in nics:
            counts[_switch(topo, nic.name)] = counts.get(_switch(topo, nic.name), 0) + 1
        if per_switch is not None:
            assert set(counts.values()) == {per_switch}, (template, counts)
        else:
            assert sorted(counts.values()) == [1, 1, 2, 2]
            sockets = [topo.host_cpu(n.name).local_name for n in nics]
            assert sockets.count("cpu0") == sockets.count("cpu1") == 3


def test_two_nics_one_per_socket_and_one_nic_stays_nic0() -> None:
    two = _dgx({**RAIL, "nics_per_node": 2})
    assert _locals(two) == ["nic0", "nic4"]
    assert [two.host_cpu(n.name).local_name for n in two.nics(0)] == ["cpu0", "cpu1"]
    # k = 1 keeps nic0 as before: the published 2node-a100-tcp case (nics_per_node 1) is unchanged
    sim = Simulator.from_source("2node-a100-tcp")
    assert [_locals(sim.topology, n) for n in range(2)] == [["nic0"], ["nic0"]]


def test_kept_nics_keep_their_names_and_are_renumbered_in_template_order() -> None:
    topo = _dgx(SPREAD4)
    assert [(n.local_name, n.index) for n in topo.nics(1)] == [("nic0", 0), ("nic2", 1), ("nic4", 2), ("nic6", 3)]
    assert topo.nic_slots(1) == ["n1/nic0", "n1/nic2", "n1/nic4", "n1/nic6"]  # NCCL channel c uses slot c mod 4
    # rail i is NIC index i on every node
    assert topo.link("n0/nic4", "fabric/rail2").kind == "ib" and topo.link("n1/nic6", "fabric/rail3").kind == "ib"
    assert topo.fabric is not None and topo.fabric["nics"] == ("nic0", "nic2", "nic4", "nic6")
    with pytest.raises(TopologyError):
        topo.device("n0/nic1")


def test_all_nics_keep_the_template_numbering() -> None:
    topo = _dgx(RAIL)
    assert [(n.local_name, n.index) for n in topo.nics(0)] == [(f"nic{i}", i) for i in range(8)]


# ---------------------------------------------------------------------------------------------- explicit placement
def test_explicit_nic_list() -> None:
    topo = _dgx({**RAIL, "nics": ["nic3", "nic0"]})  # the order given does not matter: numbered in template order
    assert [(n.local_name, n.index) for n in topo.nics(0)] == [("nic0", 0), ("nic3", 1)]
    assert _locals(_dgx({**RAIL, "nics": ["nic[4-7]"]})) == ["nic4", "nic5", "nic6", "nic7"]


def test_per_switch_and_per_socket_caps() -> None:
    assert _locals(_dgx({**RAIL, "nics_per_switch": 1})) == ["nic0", "nic2", "nic4", "nic6"]
    assert _locals(_dgx({**RAIL, "nics_per_socket": 1})) == ["nic0", "nic4"]
    assert _locals(_dgx({**RAIL, "nics_per_socket": 3})) == ["nic0", "nic1", "nic2", "nic4", "nic5", "nic6"]
    assert _locals(_dgx({**RAIL, "nics_per_switch": 1, "nics_per_node": 2})) == ["nic0", "nic4"]
    assert _locals(_dgx({**RAIL, "nics_per_switch": 2, "nics_per_socket": 2})) == ["nic0", "nic2", "nic4", "nic6"]


def _template(population: Any) -> dict[str, Any]:
    data = dict(read_yaml(_template_path("dgx-a100")))
    data["nic_population"] = population
    return data


def test_template_population_order() -> None:
    def kept(population: Any, k: int) -> list[str]:
        topo = topology_from_template(_template(population), nodes=2, fabric={**RAIL, "nics_per_node": k})
        return _locals(topo)

    assert kept("index", 4) == ["nic0", "nic1", "nic2", "nic3"]
    assert kept("spread", 4) == ["nic0", "nic2", "nic4", "nic6"]
    # a list first, in its order; the rest in the spread order (nic0, nic4, nic2, nic6, nic1, ...)
    assert kept(["nic7", "nic5"], 2) == ["nic5", "nic7"]
    assert kept(["nic7", "nic5"], 4) == ["nic0", "nic4", "nic5", "nic7"]
    assert kept(["nic[1-3]"], 3) == ["nic1", "nic2", "nic3"]


def test_user_template_in_scenario_presets_declares_its_population() -> None:
    node = _template("index")
    node.pop("name", None)
    scenario = {
        "name": "p",
        "cluster": {"node": "my-dgx", "nodes": 2, "fabric": {**RAIL, "nics_per_node": 2}},
        "presets": {"nodes": {"my-dgx": node}},
    }
    assert _locals(Simulator.from_source(scenario).topology) == ["nic0", "nic1"]


# ---------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("fabric", "field", "text"),
    [
        ({**RAIL, "nics": ["nic0", "nic9"]}, "fabric.nics", "unknown NIC 'nic9'; the node template's NICs: nic0, nic1"),
        ({**RAIL, "nics": ["nic0", "nic0"]}, "fabric.nics", "listed twice"),
        ({**RAIL, "nics": []}, "fabric.nics", "non-empty list"),
        ({**RAIL, "nics": "nic0"}, "fabric.nics", "non-empty list"),
        ({**RAIL, "nics": ["nic0"], "nics_per_node": 1}, "fabric.nics", "either nics"),
        ({**RAIL, "nics_per_switch": 0}, "fabric.nics_per_switch", "positive integer"),
        ({**RAIL, "nics_per_socket": True}, "fabric.nics_per_socket", "positive integer"),
        ({**RAIL, "nics_per_node": 9}, "fabric.nics_per_node", "the node has 8 NICs"),
        ({**RAIL, "nics_per_switch": 1, "nics_per_node": 5}, "fabric.nics_per_node", "4 of the node's 8 NICs"),
    ],
)
def test_fabric_errors(fabric: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(TopologyError) as ei:
        _dgx(fabric)
    assert ei.value.field == field
    assert text in ei.value.message


def test_scenario_error_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "four.yaml"
    path.write_text(
        "name: four\ncluster:\n  node: dgx-a100\n  nodes: 2\n"
        "  fabric: {topology: rail_optimized, nics: [nic0, nic8]}\n",
        encoding="utf-8",
    )
    with pytest.raises(ScenarioError) as ei:
        Simulator.from_source(path)
    assert ei.value.field == "cluster.fabric.nics"
    assert str(path) in str(ei.value) and "unknown NIC 'nic8'" in str(ei.value) and "nic7" in str(ei.value)


@pytest.mark.parametrize(
    ("population", "text"),
    [
        ("round_robin", "expected spread or index or a non-empty list"),
        (["nic0", "nic12"], "unknown NIC 'nic12'"),
        (["nic1", "nic1"], "listed twice"),
        ([], "non-empty list"),
    ],
)
def test_template_population_errors(population: Any, text: str) -> None:
    with pytest.raises(TopologyError) as ei:
        topology_from_template(_template(population), file="dgx-a100.yaml")  # checked without a fabric too
    assert ei.value.field == "nic_population" and ei.value.file == "dgx-a100.yaml"
    assert text in ei.value.message


def test_a_perturbation_names_the_kept_slot() -> None:
    base = {"name": "d", "cluster": {"node": "dgx-a100", "nodes": 2, "fabric": SPREAD4}}
    sim = Simulator.from_source({**base, "perturb": {"down": [{"device": "n1/nic4"}]}})
    assert _locals(sim.topology, 1) == ["nic0", "nic2", "nic6"]
    assert "n1/nic4 down" in sim.perturbations()


# ---------------------------------------------------------------------------------------------- end to end
def _sim(fabric: dict[str, Any]) -> Simulator:
    return Simulator.from_source(
        {
            "name": "placement",
            "cluster": {"node": "dgx-a100", "nodes": 2, "fabric": fabric},
            "backends": {
                "nccl": {"env": {"NCCL_ALGO": "Ring"}},
                "gloo": {"algorithm": "ring", "device": "cuda", "transport": "ibverbs"},
            },
        }
    )


def _plateau(sim: Simulator, backend: str, size: int) -> float:
    """Marginal allreduce busbw between ``size`` and ``2 * size`` (nccl-tests factor 2(n-1)/n), bytes/s."""
    t1, t2 = (sim.simulate_one(backend, s).time_s for s in (size, 2 * size))
    n = 16
    return size * 2 * (n - 1) / n / (t2 - t1)


def test_spread_against_first_four_end_to_end() -> None:
    spread, first = _sim(SPREAD4), _sim(FIRST4)
    nic = spread.topology.link("n0/nic0", "fabric/rail0").bandwidth  # HDR: 25 GB/s raw x 0.96 = 24 GB/s
    pcie = spread.topology.link("n0/nic0", "n0/pcie0").bandwidth  # PCIe Gen4 x16: 24 GB/s
    upi = spread.topology.link("n0/cpu0", "n0/cpu1").bandwidth  # AMD Infinity Fabric as NCCL models it: 16 GB/s
    # tiny: NCCL's latency does not depend on which NICs
    assert spread.simulate_one("nccl", 8).time_s == pytest.approx(first.simulate_one("nccl", 8).time_s, rel=1e-9)
    # NCCL rings enter and leave each node at the GPUs nearest the channel's NIC and cross the NVSwitch between,
    # so both placements reach the closed form: 4 NICs per node x 24 GB/s
    for sim in (spread, first):
        assert _plateau(sim, "nccl", 256 * MiB) == pytest.approx(4 * nic, rel=0.01)
    # Gloo over ibverbs: every rank opens the nearest NIC and its ring hops loop back through it. Spread: each
    # GPU is PIX to its switch's NIC; nic0's link into the switch carries gpu0->gpu1 and gpu1->gpu2 out of the
    # loop back and n1/gpu7's bytes in: pcie / 3. First four: GPU4-7 open nic0 across the sockets, and each
    # direction of the Infinity Fabric carries 4 of the ring's hops: upi / 4, half the spread's rate.
    assert _plateau(spread, "gloo", 64 * MiB) == pytest.approx(pcie / 3, rel=0.01)
    assert _plateau(first, "gloo", 64 * MiB) == pytest.approx(upi / 4, rel=0.01)
    assert spread.simulate_one("gloo", 8).time_s < first.simulate_one("gloo", 8).time_s


def test_nccl_alltoall_is_faster_with_the_spread_placement() -> None:
    # alltoall: every GPU sends on every channel's NIC; with all four NICs on socket 0, GPU4-7's bytes reach them
    # through a PXN peer and the socket-0 switches carry more of the traffic
    times = {}
    for name, fabric in (("spread", SPREAD4), ("first", FIRST4)):
        sim = Simulator.from_source(
            {
                "name": "a2a",
                "cluster": {"node": "dgx-a100", "nodes": 2, "fabric": fabric},
                "workload": {"collective": "alltoall"},
            }
        )
        times[name] = sim.simulate_one("nccl", 1024 * MiB, collective="alltoall").time_s
    assert times["spread"] < 0.9 * times["first"]


# ---------------------------------------------------------------------------------------------- properties
#: template -> node_params; OCI's BM.GPU.H100.8 as NCCL 2.19 sees it: 16 NICs, 4 per PCIe switch
_TEMPLATES_PARAMS: dict[str, dict[str, Any] | None] = {
    "dgx-a100": None, "hgx-h100": None, "aws-p4de": None, "aws-p5": None,
    "oci-bm-gpu-h100-8": {"nic": "connectx-6-roce", "nics_per_gpu": 2}, "dgx1-v100": None,
}
_TEMPLATES = tuple(_TEMPLATES_PARAMS)


def _layout(template: str, params: dict[str, Any] | None) -> Any:
    presets, data = load_presets(), read_yaml(_template_path(template))
    if data.get("generator"):
        data = GENERATORS[data["generator"]](resolve_params(data.get("params"), params, presets, None), presets)
    return _build_layout(data, presets, None)


_LAYOUTS = {t: _layout(t, p) for t, p in _TEMPLATES_PARAMS.items()}


@settings(max_examples=60, deadline=None)
@given(template=st.sampled_from(_TEMPLATES), data=st.data())
def test_kept_nics_are_distinct_k_and_deterministic(template: str, data: st.DataObject) -> None:
    layout = _LAYOUTS[template]
    slots = nic_slots_of(layout)
    k = data.draw(st.integers(1, len(slots)), label="k")
    order = population_order(slots, None)
    assert sorted(s.name for s in order) == sorted(s.name for s in slots)  # a permutation
    kept = [s.name for s in select_nics(order, {"nics_per_node": k})]
    assert len(kept) == k == len(set(kept))
    again = [s.name for s in select_nics(population_order(nic_slots_of(layout), None), {"nics_per_node": k})]
    assert kept == again
    # nested: k + 1 NICs are the k plus one
    if k < len(slots):
        more = {s.name for s in select_nics(order, {"nics_per_node": k + 1})}
        assert set(kept) < more
    # spread evenly: the NICs kept per PCIe switch, and per socket, differ by at most one (on these templates,
    # whose switches hold equally many NICs and whose sockets equally many switches)
    chosen = select_nics(order, {"nics_per_node": k})
    for place in ("switch", "socket"):
        where = [getattr(s, place) for s in chosen]
        counts = [where.count(p) for p in {getattr(s, place) for s in slots}]
        assert max(counts) - min(counts) <= 1, (place, counts)


@settings(max_examples=15, deadline=None)
@given(k=st.integers(1, 8))
def test_built_topology_matches_the_selection(k: int) -> None:
    topo = _dgx({**RAIL, "nics_per_node": k})
    order = population_order(nic_slots_of(_LAYOUTS["dgx-a100"]), None)
    expected = [s.name for s in select_nics(order, {"nics_per_node": k})]
    for node in range(2):
        assert _locals(topo, node) == expected
        assert [n.index for n in topo.nics(node)] == list(range(k))
    assert _locals(_dgx({**RAIL, "nics_per_node": k})) == expected  # same inputs, same NICs
