"""Property tests on random small PCIe/NVLink templates."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collsim.topology import PATH_CLASS_ORDER, topology_from_template


@st.composite
def templates(draw: st.DrawFn) -> dict[str, Any]:
    """1-2 sockets, some PCIe switches (possibly nested), 2-6 GPUs and 0-2 NICs on random parents."""
    sockets = draw(st.integers(1, 2))
    n_sw = draw(st.integers(0, 4))
    n_gpu = draw(st.integers(2, 6))
    n_nic = draw(st.integers(0, 2))
    devices: list[dict[str, Any]] = [
        {"name": "gpu", "count": n_gpu, "kind": "gpu", "preset": "a100-sxm4-80gb"},
        {"name": "cpu", "count": sockets, "kind": "cpu", "preset": "xeon-8480"},
    ]
    links: list[dict[str, Any]] = []
    if sockets == 2:
        links.append({"a": "cpu0", "b": "cpu1", "preset": "upi"})
    parents = [f"cpu{i}" for i in range(sockets)]
    if n_sw:
        devices.append({"name": "sw", "count": n_sw, "kind": "pcie_switch"})
        for i in range(n_sw):
            links.append({"a": f"sw{i}", "b": draw(st.sampled_from(parents)), "preset": "pcie4"})
            parents.append(f"sw{i}")
    if n_nic:
        devices.append({"name": "nic", "count": n_nic, "kind": "nic", "preset": "connectx-6-hdr"})
    for name in [f"gpu{i}" for i in range(n_gpu)] + [f"nic{i}" for i in range(n_nic)]:
        links.append({"a": name, "b": draw(st.sampled_from(parents)), "preset": "pcie4"})
    nv = draw(st.lists(st.tuples(st.integers(0, n_gpu - 1), st.integers(0, n_gpu - 1)), max_size=3))
    seen: set[frozenset[int]] = set()
    for a, b in nv:
        if a != b and frozenset((a, b)) not in seen:
            seen.add(frozenset((a, b)))
            links.append({"a": f"gpu{a}", "b": f"gpu{b}", "preset": "nvlink3", "count": 2})
    return {"name": "random", "devices": devices, "links": links}


def _parent_chain(links: list[dict[str, Any]], dev: str) -> list[str]:
    parent = {lk["a"]: lk["b"] for lk in links if lk["preset"] == "pcie4"}
    chain = [dev]
    while chain[-1] in parent:
        chain.append(parent[chain[-1]])
    return chain


@settings(max_examples=60, deadline=None)
@given(templates())
def test_path_types_match_the_tree(tmpl: dict[str, Any]) -> None:
    topo = topology_from_template(tmpl)
    gpus = topo.gpus()
    nvpairs = {frozenset((lk["a"], lk["b"])) for lk in tmpl["links"] if lk["preset"] == "nvlink3"}
    for a in gpus:
        for b in [*gpus, *topo.nics()]:
            pt = topo.path_type(a.name, b.name)
            assert pt == topo.path_type(b.name, a.name)
            assert topo.path_class(a.name, b.name) in PATH_CLASS_ORDER
            if a == b:
                assert pt == "X"
                continue
            if frozenset((a.local_name, b.local_name)) in nvpairs:
                assert pt == "NV2"
                continue
            # Expected class from the PCIe tree: the lowest common ancestor decides.
            ca = _parent_chain(tmpl["links"], a.local_name)
            cb = _parent_chain(tmpl["links"], b.local_name)
            common = [x for x in ca if x in cb]
            if not common:
                expected = "SYS"
            elif common[0].startswith("cpu"):
                expected = "PHB"
            else:
                between = ca[1 : ca.index(common[0]) + 1] + cb[1 : cb.index(common[0])]
                expected = "PIX" if len(between) == 1 else "PXB"
            assert pt == expected, (a.name, b.name, ca, cb)
            route = topo.pcie_route(a.name, b.name)
            assert route[0].src == a.name and route[-1].dst == b.name
            assert all(x.dst == y.src for x, y in itertools.pairwise(route))
            assert all(topo.device(lk.dst).kind not in ("gpu", "nic") for lk in route[:-1])
            assert topo.host_cpu(a.name).local_name == ca[-1]
