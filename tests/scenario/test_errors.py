"""Every kind of bad input gives one ScenarioError naming the file, the dotted field and what was expected."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from collsim.scenario import ScenarioError, load_scenario

Write = Callable[[str, str], Path]


def error_of(source: Any, overrides: tuple[str, ...] = ()) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario(source, overrides)
    return info.value


def scenario_with(write: Write, body: str) -> Path:
    """A scenario file whose cluster is the fake node.yaml, plus ``body``."""
    return write("s.yaml", "name: t\ncluster:\n  node: node.yaml\n" + body)


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    err = error_of(path)
    assert err.file == str(path) and err.field is None
    assert str(err).startswith(f"{path}: scenario file not found (built-in scenarios: ")


def test_folder_instead_of_file(tmp_path: Path) -> None:
    assert str(error_of(tmp_path)) == f"{tmp_path}: is a folder, expected a scenario YAML file"


@pytest.mark.parametrize("text", ["", "   \n\n"])
def test_empty_file(write: Write, text: str) -> None:
    path = write("e.yaml", text)
    assert str(error_of(path)) == (
        f"{path}: empty file, expected a scenario mapping (name, cluster, workload, backends)"
    )


def test_comment_only_file(write: Write) -> None:
    path = write("c.yaml", "# nothing here\n")
    assert str(error_of(path)).startswith(f"{path}: empty file (only comments)")


def test_broken_yaml_names_line(write: Write) -> None:
    path = write("b.yaml", "name: t\ncluster:\n  node: [a, b\nworkload: {}\n")
    err = error_of(path)
    assert err.file == str(path)
    assert err.message.startswith("invalid YAML: line 4, column 9:")


def test_duplicate_key(write: Write) -> None:
    path = write("d.yaml", "name: t\ncluster: {node: node.yaml}\nname: u\n")
    assert str(error_of(path)) == f"{path}: line 3, column 1: duplicate key 'name'"


def test_top_level_not_mapping(write: Write) -> None:
    path = write("l.yaml", "- a\n- b\n")
    assert str(error_of(path)) == (
        f"{path}: top level must be a mapping of fields (name, cluster, workload, backends, engine), got a list"
    )


def test_missing_required(write: Write) -> None:
    path = write("m.yaml", "cluster: {node: node.yaml}\n")
    assert str(error_of(path)) == f"{path}: name: required field is missing"
    path = write("m2.yaml", "name: t\ncluster: {nodes: 1}\n")
    assert str(error_of(path)) == f"{path}: cluster.node: required field is missing"


def test_unknown_key_suggests(write: Write) -> None:
    path = scenario_with(write, "  nods: 2\n")
    assert str(error_of(path)) == (
        f"{path}: cluster.nods: unknown field (did you mean 'nodes'?), expected one of: node, nodes, node_params, "
        "fabric, visible_gpus, ranks_per_gpu"
    )


def test_unknown_key_in_a_list_item(write: Write) -> None:
    # a field of an item of a list of mappings (perturb.links) names the item's fields, as a mapping's field does
    links = "perturb:\n  links:\n    - {device: n0/nic0, scale: 0.5, factr: 1}\n"
    path = write("l.yaml", "name: t\ncluster: {node: node.yaml}\n" + links)
    err = error_of(path)
    assert (err.field, err.message) == (
        "perturb.links[0].factr",
        "unknown field, expected one of: device, scale, kind, choose",
    )


def test_unknown_top_level_key(write: Write) -> None:
    path = scenario_with(write, "workloads: {}\n")
    err = error_of(path)
    assert err.field == "workloads"
    assert err.message.startswith(
        "unknown field (did you mean 'workload'?), expected one of: name, description, "
        "cluster, workload, backends, engine, perturb, noise, training, calibration"
    )


def test_wrong_type_int(write: Write) -> None:
    path = scenario_with(write, "  nodes: two\n")
    assert str(error_of(path)) == f"{path}: cluster.nodes: Input should be a valid integer, got 'two'"


def test_bool_is_not_an_int(write: Write) -> None:
    err = error_of(scenario_with(write, "  nodes: true\n"))
    assert err.field == "cluster.nodes"


def test_nodes_must_be_positive(write: Write) -> None:
    path = scenario_with(write, "  nodes: 0\n")
    assert str(error_of(path)) == f"{path}: cluster.nodes: Input should be greater than or equal to 1, got 0"


def test_section_not_mapping(write: Write) -> None:
    path = write("s.yaml", "name: t\ncluster: dgx-a100\n")
    assert str(error_of(path)) == (
        f"{path}: cluster: expected a mapping with fields node, nodes, node_params, fabric, visible_gpus, "
        "ranks_per_gpu, got 'dgx-a100'"
    )


def test_nodes_without_fabric(write: Write) -> None:
    path = scenario_with(write, "  nodes: 2\n")
    err = error_of(path)
    assert err.file == str(path)
    assert err.field == "cluster.fabric"
    assert err.message.startswith("required when cluster.nodes > 1 (got nodes: 2)")
    assert "single_switch, rail_optimized, fat_tree" in err.message


def test_bad_fabric_topology(write: Write) -> None:
    path = scenario_with(write, "  nodes: 2\n  fabric: {topology: torus}\n")
    assert str(error_of(path)) == (
        f"{path}: cluster.fabric.topology: Input should be 'single_switch', 'rail_optimized' or 'fat_tree', got 'torus'"
    )


def test_bad_nic_speed(write: Write) -> None:
    err = error_of(scenario_with(write, "  nodes: 2\n  fabric: {topology: fat_tree, nic_speed: 100 furlongs}\n"))
    assert err.field == "cluster.fabric.nic_speed"
    assert "unknown bandwidth unit 'furlongs' in '100 furlongs'" in err.message


def test_bad_oversubscription(write: Write) -> None:
    err = error_of(scenario_with(write, "  nodes: 2\n  fabric: {topology: fat_tree, oversubscription: 0}\n"))
    assert err.field == "cluster.fabric.oversubscription"


def test_unknown_template(write: Write, needs_topology: list[str]) -> None:
    path = write("s.yaml", "name: t\ncluster: {node: dgx-a1000}\n")
    err = error_of(path)
    assert err.field == "cluster.node"
    assert err.message.startswith("unknown node template 'dgx-a1000' (did you mean 'dgx-a100'?); known templates: ")
    for name in needs_topology:
        assert name in err.message


def test_template_file_missing(write: Write) -> None:
    path = write("s.yaml", "name: t\ncluster: {node: ./nodes/mine.yaml}\n")
    missing = path.parent.resolve() / "nodes" / "mine.yaml"
    assert str(error_of(path)) == f"{path}: cluster.node: node template file not found: {missing}"


def test_a_mistake_in_a_template_file_names_that_file_and_its_field(write: Write) -> None:
    """Not the scenario's cluster with the template's field appended (``s.yaml: cluster.links.0.bandwidth: t.yaml:
    ...``: the scenario has no cluster.links)."""
    write("t.yaml", "name: t\nsource: x\ndevices:\n  - {name: gpu, count: 2, kind: gpu, preset: h100-pcie-80gb}\n"
                    "  - {name: cpu, count: 1, kind: cpu, preset: xeon-8480}\n"
                    "links:\n  - {a: [gpu0, gpu1], b: cpu0, preset: pcie5, bandwidth: 400}\n")  # fmt: skip
    from collsim.api import Simulator

    path = write("s.yaml", "name: s\ncluster: {node: ./t.yaml}\nworkload: {sizes: [1MiB]}\n")
    with pytest.raises(ScenarioError) as info:
        Simulator.from_source(path)
    err = info.value
    assert err.field == "links.0.bandwidth" and err.file is not None and err.file.endswith("t.yaml")
    assert f"(read for {path}'s cluster)" in err.message and "has no unit" in err.message


def test_calibration_missing(write: Write) -> None:
    path = scenario_with(write, "calibration: prof.yaml\n")
    missing = path.parent.resolve() / "prof.yaml"
    assert str(error_of(path)) == f"{path}: calibration: calibration profile not found: {missing}"


@pytest.mark.parametrize(
    ("sizes", "expected"),
    [
        ("'8B:1XB:x2'", "unknown size unit 'XB'"),
        ("'8B:1GiB:y2'", "the third part must be xFACTOR or +STEP"),
        ("'1GiB:8B:x2'", "MAX is smaller than MIN"),
        ("[]", "no sizes in []"),
        ("[1KiB, {a: 1}]", "list item {'a': 1} is not a size"),
    ],
)
def test_bad_sizes(write: Write, sizes: str, expected: str) -> None:
    path = scenario_with(write, f"workload: {{sizes: {sizes}}}\n")
    err = error_of(path)
    assert err.field == "workload.sizes"
    assert expected in err.message


def test_unknown_collective(write: Write) -> None:
    path = scenario_with(write, "workload: {collective: [allreduce, allscatter]}\n")
    assert str(error_of(path)) == (
        f"{path}: workload.collective: unknown collective 'allscatter'; valid: allreduce, allgather, "
        "reduce_scatter, broadcast, reduce, alltoall, sendrecv"
    )


def test_unknown_dtype(write: Write) -> None:
    err = error_of(scenario_with(write, "workload: {dtype: float128}\n"))
    assert err.field == "workload.dtype"
    assert err.message.startswith("unknown dtype 'float128'; valid: float32, float16, bfloat16")


def test_bad_op(write: Write) -> None:
    err = error_of(scenario_with(write, "workload: {op: mean}\n"))
    assert err.field == "workload.op"
    assert err.message == "Input should be 'sum', 'prod', 'max', 'min' or 'avg', got 'mean'"


def test_bad_peers(write: Write) -> None:
    err = error_of(scenario_with(write, "workload: {peers: [1, 1]}\n"))
    assert err.field == "workload.peers"
    assert err.message == "expected two different non-negative ranks, e.g. [0, 1], got [1, 1]"


@pytest.mark.parametrize(
    ("value", "detail"),
    [("18", ""), ("fast", "cannot read 'fast' as a duration"), ("'-3us'", "must not be negative"), ("[]", "")],
)
def test_bad_host_overhead(write: Write, value: str, detail: str) -> None:
    err = error_of(scenario_with(write, f"workload: {{host_overhead: {value}}}\n"))
    assert err.field == "workload.host_overhead"
    assert err.message.startswith("expected 'none', 'torch' or a duration such as '18us', got ")
    assert detail in err.message


def test_bad_list_item_index_in_field(write: Write) -> None:
    err = error_of(scenario_with(write, "workload: {peers: [0, x]}\n"))
    assert err.field == "workload.peers[1]"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("backends: {gloo: {algorithm: tree}}\n", "backends.gloo.algorithm"),
        ("backends: {gloo: {device: tpu}}\n", "backends.gloo.device"),
        ("backends: {gloo: {threads: 0}}\n", "backends.gloo.threads"),
        ("backends: {mpi: {}}\n", "backends.mpi"),
        ("engine: {seed: -1}\n", "engine.seed"),
        ("engine: {symmetry: maybe}\n", "engine.symmetry"),
    ],
)
def test_backend_and_engine_fields(write: Write, body: str, field: str) -> None:
    assert error_of(scenario_with(write, body)).field == field


@pytest.mark.parametrize(
    ("env", "field", "message"),
    [
        (
            "{NCCL_ALGO: Rings}",
            "backends.nccl.env.NCCL_ALGO",
            "unknown algorithm 'Rings' in 'Rings'; valid algorithms: Tree, Ring, CollNetDirect, CollNetChain, NVLS, "
            "NVLSTree, PAT",
        ),
        (
            "{NCCL_ALGO: CollNet}",  # no NCCL release since 2.14 knows it (init.cc ncclAlgoStr)
            "backends.nccl.env.NCCL_ALGO",
            "unknown algorithm 'CollNet' in 'CollNet'; valid algorithms: Tree, Ring, CollNetDirect, CollNetChain, "
            "NVLS, NVLSTree, PAT; NCCL has had no 'CollNet' since 2.14 (init.cc ncclAlgoStr): name CollNetDirect or "
            "CollNetChain",
        ),
        (
            "{NCCL_ALGO: 'Ring, Tree'}",  # strcasecmp on ' Tree': NCCL 2.24 fails at init, earlier skips it
            "backends.nccl.env.NCCL_ALGO",
            "' Tree' in 'Ring, Tree': NCCL compares each name whole, spaces included (from 2.24 an unrecognized token "
            "fails the communicator's init, tuning.cc parseList; before, it was skipped); write 'Ring,Tree'",
        ),
        (
            "{NCCL_PROTO: LL256}",
            "backends.nccl.env.NCCL_PROTO",
            "unknown protocol 'LL256' in 'LL256'; valid protocols: LL, LL128, Simple",
        ),
        (
            "{NCCL_ALGO: '^Ring,Tree,CollNetDirect,CollNetChain,NVLS,NVLSTree,PAT'}",
            "backends.nccl.env.NCCL_ALGO",
            "'^Ring,Tree,CollNetDirect,CollNetChain,NVLS,NVLSTree,PAT' leaves no algorithm enabled",
        ),
        (
            "{NCCL_P2P_DISABLE: yes please}",
            "backends.nccl.env.NCCL_P2P_DISABLE",
            "expected an integer, got 'yes please'",
        ),
        ("{NCCL_BUFFSIZE: 4MiB}", "backends.nccl.env.NCCL_BUFFSIZE", "expected an integer, got '4MiB'"),
        (
            "{NCCL_MAX_NCHANNELS: two}",
            "backends.nccl.env.NCCL_MAX_NCHANNELS",
            "expected an integer, got 'two'",
        ),
        (
            "{NCCL_P2P_LEVEL: NODE}",
            "backends.nccl.env.NCCL_P2P_LEVEL",
            "expected a path type from LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS or a legacy integer "
            "(0 LOC .. 4 SYS), got 'NODE'",
        ),
        (
            "{NCCL_NET_GDR_LEVEL: -1}",
            "backends.nccl.env.NCCL_NET_GDR_LEVEL",
            "expected a path type from LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS or a legacy integer "
            "(0 LOC .. 4 SYS), got '-1'",
        ),
        ("{NCCL_ALGO: [Ring]}", "backends.nccl.env.NCCL_ALGO", "expected a string, number or boolean, got ['Ring']"),
        ("[NCCL_ALGO]", "backends.nccl.env", "expected a mapping of NCCL_* variables to values, got ['NCCL_ALGO']"),
    ],
)
def test_bad_nccl_env(write: Write, env: str, field: str, message: str) -> None:
    path = scenario_with(write, f"backends:\n  nccl:\n    env: {env}\n")
    assert str(error_of(path)) == f"{path}: {field}: {message}"


def test_non_nccl_env_key(write: Write) -> None:
    path = scenario_with(write, "backends: {nccl: {env: {CUDA_VISIBLE_DEVICES: '0,1'}}}\n")
    err = error_of(path)
    assert err.field == "backends.nccl.env.CUDA_VISIBLE_DEVICES"
    assert err.message.startswith("not an NCCL variable (names start with NCCL_; of a network plugin's, collsim reads "
                                  "OFI_NCCL_TUNER_TYPE); known: NCCL_ALGO, NCCL_PROTO")


def test_several_problems_reported_together(write: Write) -> None:
    path = scenario_with(write, "  nodes: 0\nworkload: {dtype: x}\n")
    err = error_of(path)
    assert err.field == "cluster.nodes"
    assert "; also workload.dtype: unknown dtype 'x'" in err.message
    assert err.problems[1][0] == "workload.dtype"  # type: ignore[attr-defined]


def test_dict_source_errors_name_dict() -> None:
    err = error_of({"name": "t", "cluster": {"node": "./x/none.yaml", "nodes": "many"}})
    assert err.file == "<dict>"
    assert str(err) == "<dict>: cluster.nodes: Input should be a valid integer, got 'many'"


def test_bad_source_type() -> None:
    with pytest.raises(ScenarioError, match="expected a file path, a built-in scenario name or a dict, got"):
        load_scenario(42)  # type: ignore[arg-type]


def test_error_is_a_value_error() -> None:
    err = ScenarioError("bad", file="f.yaml", field="a.b")
    assert isinstance(err, ValueError)
    assert (str(err), err.file, err.field, err.message) == ("f.yaml: a.b: bad", "f.yaml", "a.b", "bad")
    assert str(ScenarioError("bad")) == "bad"
    assert str(ScenarioError("bad", field="x")) == "x: bad"
