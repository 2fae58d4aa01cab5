"""--set overrides: nested creation, YAML scalar conversion, errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from collsim.scenario import ScenarioError, apply_overrides, load_scenario


def test_nested_create_and_types() -> None:
    data: dict[str, Any] = {"name": "t", "cluster": {"node": "x"}}
    out = apply_overrides(
        data,
        [
            "backends.nccl.env.NCCL_ALGO=Ring",
            "cluster.nodes=2",
            "backends.gloo.enabled=false",
            "cluster.fabric.oversubscription=1.5",
            "workload.peers=[2, 3]",
            "workload.sizes=8B:1KiB:x2",
            "description=",
            "cluster.fabric.switch={latency: 300ns, radix: 64}",
        ],
    )
    assert out == {
        "name": "t",
        "description": None,
        "cluster": {
            "node": "x",
            "nodes": 2,
            "fabric": {"oversubscription": 1.5, "switch": {"latency": "300ns", "radix": 64}},
        },
        "backends": {"nccl": {"env": {"NCCL_ALGO": "Ring"}}, "gloo": {"enabled": False}},
        "workload": {"peers": [2, 3], "sizes": "8B:1KiB:x2"},
    }
    assert data == {"name": "t", "cluster": {"node": "x"}}  # input untouched


def test_override_replaces_null_and_existing() -> None:
    out = apply_overrides({"a": None, "b": {"c": 1}}, ["a.x=1", "b.c=hello", "b.d=2=3"])
    assert out == {"a": {"x": 1}, "b": {"c": "hello", "d": "2=3"}}


def test_list_index() -> None:
    assert apply_overrides({"w": {"peers": [0, 1]}}, ["w.peers.1=5"]) == {"w": {"peers": [0, 5]}}
    with pytest.raises(ScenarioError) as info:
        apply_overrides({"w": {"peers": [0, 1]}}, ["w.peers.2=5"])
    assert str(info.value) == "--set: w.peers.2: index 2 out of range for a list of 2 items (w.peers.2)"
    with pytest.raises(ScenarioError) as info:
        apply_overrides({"w": {"peers": [0, 1]}}, ["w.peers.first=5"])
    assert str(info.value) == "--set: w.peers.first: w.peers is a list; 'first' is not an index"


@pytest.mark.parametrize(
    ("item", "text"),
    [
        (
            "cluster.nodes",
            "--set: cluster.nodes: expected KEY=VALUE, e.g. cluster.nodes=2 or backends.nccl.env.NCCL_ALGO=Ring",
        ),
        ("=3", "--set: =3: bad field path '' in '=3'; expected dotted names like cluster.nodes"),
        (
            "cluster..nodes=3",
            "--set: cluster..nodes: bad field path 'cluster..nodes' in 'cluster..nodes=3'; "
            "expected dotted names like cluster.nodes",
        ),
        ("name.first=x", "--set: name.first: cannot set name.first: name is a string, not a mapping"),
    ],
)
def test_bad_override_syntax(item: str, text: str) -> None:
    with pytest.raises(ScenarioError) as info:
        apply_overrides({"name": "t"}, [item])
    assert str(info.value) == text
    assert info.value.file == "--set"


def test_bad_override_yaml_value() -> None:
    with pytest.raises(ScenarioError) as info:
        apply_overrides({}, ["workload.peers=[1, 2"])
    err = info.value
    assert (err.file, err.field) == ("--set", "workload.peers")
    assert err.message.startswith("cannot read value '[1, 2': invalid YAML: line 1")


def test_load_with_overrides(write: Callable[[str, str], Path]) -> None:
    path = write("s.yaml", "name: t\ncluster: {node: node.yaml}\nbackends: {nccl: {env: {NCCL_ALGO: Tree}}}\n")
    s = load_scenario(
        path,
        [
            "backends.nccl.env.NCCL_ALGO=ring,tree",
            "backends.nccl.env.NCCL_MAX_NCHANNELS=16",
            "workload.sizes=1KiB",
            "cluster.nodes=2",
            "cluster.fabric.topology=single_switch",
        ],
    )
    assert s.backends.nccl is not None
    assert s.backends.nccl.algorithms() == {"Ring", "Tree"}
    assert s.backends.nccl.env["NCCL_MAX_NCHANNELS"] == "16"  # YAML int converted back to the env string
    assert s.sizes() == [1024]
    assert s.cluster.nodes == 2
    assert s.cluster.fabric is not None and s.cluster.fabric.topology == "single_switch"


def test_override_then_validation_error_names_file_and_field(write: Callable[[str, str], Path]) -> None:
    path = write("s.yaml", "name: t\ncluster: {node: node.yaml}\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, ["cluster.nodes=3"])
    assert (info.value.file, info.value.field) == (str(path), "cluster.fabric")


def test_builtin_with_override() -> None:
    s = load_scenario("hgx-h100", ["backends.nccl.env.NCCL_ALGO=^ring", "workload.collective=[allgather, sendrecv]"])
    assert s.backends.nccl is not None
    assert s.backends.nccl.algorithms() == {"Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"}
    assert s.collectives() == ["allgather", "sendrecv"]
