"""collsim.sweep.grid: grid files, product and zip, labels, the scenario axis, and errors naming point and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collsim.scenario import ScenarioError
from collsim.sweep.grid import grid_from_mapping, load_grid

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _grid(**data: Any) -> Any:
    return grid_from_mapping({"base": "pcie-2gpu-nop2p", **data}, file="g.yaml")


def test_product_varies_the_last_axis_fastest() -> None:
    g = _grid(axes={"cluster.node_params.pcie_gen": [3, 4], "backends.nccl.env.NCCL_PROTO": ["LL", "Simple"]})
    assert [tuple(v.params.values()) for v in g.variants()] == [(3, "LL"), (3, "Simple"), (4, "LL"), (4, "Simple")]
    assert g.variants()[1].overrides == ("cluster.node_params.pcie_gen=3", "backends.nccl.env.NCCL_PROTO=Simple")


def test_zip_takes_the_ith_value_of_each_axis() -> None:
    axes = {"cluster.node_params.pcie_gen": [3, 4], "backends.nccl.env.NCCL_PROTO": ["LL", "Simple"]}
    g = _grid(mode="zip", axes=axes)
    assert [tuple(v.params.values()) for v in g.variants()] == [(3, "LL"), (4, "Simple")]


def test_zip_needs_axes_of_one_length() -> None:
    with pytest.raises(ScenarioError) as err:
        _grid(mode="zip", axes={"cluster.node_params.pcie_gen": [3, 4], "backends.nccl.env.NCCL_PROTO": ["LL"]})
    assert (err.value.file, err.value.field) == ("g.yaml", "axes")
    assert "cluster.node_params.pcie_gen: 2, backends.nccl.env.NCCL_PROTO: 1" in err.value.message


def test_structured_values_and_named_values() -> None:
    slow = [{"device": "n0/gpu0", "scale": 0.5}]
    g = _grid(axes={"perturb.links": {"healthy": [], "slow": slow}, "cluster.node_params.gpus": [2]})
    v = g.variants()
    assert [x.params["perturb.links"] for x in v] == ["healthy", "slow"]
    assert v[1].overrides[0] == "perturb.links=[{device: n0/gpu0, scale: 0.5}]"
    # a list value without a name is shown as one line of YAML
    g2 = _grid(axes={"perturb.links": [slow]})
    assert g2.variants()[0].params == {"perturb.links": "[{device: n0/gpu0, scale: 0.5}]"}


def test_sizes_set_and_backends() -> None:
    g = _grid(sizes="1KiB:4KiB:x2", set=["backends.gloo.enabled=false"], backends="nccl")
    assert (g.sizes, g.overrides, g.backends) == ([1024, 2048, 4096], ["backends.gloo.enabled=false"], ["nccl"])
    assert _grid(sizes=["1MiB", 8]).sizes == [2**20, 8]
    assert _grid(set={"cluster.node_params.gpus": 2}).overrides == ["cluster.node_params.gpus=2"]
    r = _grid(sizes="1MiB,2MiB", axes={"cluster.node_params.pcie_gen": [3, 4]}).resolve()
    # the scenario enables both backends: variants x backends x sizes
    assert [(p.variant.index, p.backend, p.size) for p in r.points][:5] == [
        (0, "nccl", 2**20), (0, "nccl", 2**21), (0, "gloo", 2**20), (0, "gloo", 2**21), (1, "nccl", 2**20)
    ]  # fmt: skip
    assert len(r.points) == 8 and r.points[2].label() == "cluster.node_params.pcie_gen=3, gloo, 1MiB"
    # without `sizes`, each variant's workload.sizes
    assert len(_grid(set=["workload.sizes=1KiB:8KiB:x2"], backends=["nccl"]).resolve().points) == 4


def test_the_scenario_axis_and_a_base_relative_to_the_grid_file(tmp_path: Path) -> None:
    (tmp_path / "grid.yaml").write_text(
        f"axes:\n  scenario: [pcie-2gpu-nop2p, {SCENARIOS / 'loopback-gloo-cpu.yaml'}, mine.yaml]\nsizes: 1KiB\n"
    )
    (tmp_path / "mine.yaml").write_text((SCENARIOS / "loopback-gloo-cpu.yaml").read_text().replace(
        "name: loopback-gloo-cpu", "name: mine"))  # fmt: skip
    r = load_grid(tmp_path / "grid.yaml").resolve()
    assert [s.name for s in r.scenarios] == ["pcie-2gpu-nop2p", "loopback-gloo-cpu", "mine"]
    assert [p.backend for p in r.points] == ["nccl", "gloo", "gloo", "gloo"]
    assert r.grid.name == "grid"
    # a base that is neither beside the grid nor under the current folder: the error says where it was looked for
    (tmp_path / "moved.yaml").write_text("base: ../gone.yaml\naxes: {cluster.nodes: [1]}\n")
    with pytest.raises(ScenarioError) as err:
        load_grid(tmp_path / "moved.yaml").resolve()
    assert err.value.field == "point 0 (cluster.nodes=1)"
    assert f"(../gone.yaml: looked for in the grid's folder {tmp_path} and in the current folder)" in str(err.value)


@pytest.mark.parametrize(
    ("data", "field", "text"),
    [
        ({"axis": {}}, "axis", "unknown key (did you mean 'axes'?)"),
        ({"mode": "cross"}, "mode", "expected one of product, zip"),
        ({"axes": [1, 2]}, "axes", "expected a mapping of field paths"),
        ({"axes": {"cluster.nodes": 2}}, "axes.cluster.nodes", "expected a list of values"),
        ({"axes": {"cluster.nodes": []}}, "axes.cluster.nodes", "at least one value"),
        ({"axes": {"cluster..nodes": [1]}}, "axes.cluster..nodes", "dotted field path"),
        ({"axes": {"workload.sizes": ["1KiB"]}}, "axes.workload.sizes", "top-level key `sizes`"),
        ({"sizes": "1XB"}, "sizes", "expected e.g. '8B:8GiB:x2'"),
        ({"backends": ["mpi"]}, "backends", "expected a list of backends among nccl, gloo"),
        ({"set": ["cluster.nodes"]}, "set", "PATH=VALUE"),
        ({"breakdown": "yes"}, "breakdown", "true or false"),
        ({"base": None}, "base", "required: the base scenario"),
    ],
)
def test_malformed_grids_name_the_key(data: dict[str, Any], field: str, text: str) -> None:
    with pytest.raises(ScenarioError) as err:
        grid_from_mapping({"base": "pcie-2gpu-nop2p", **data}, file="g.yaml")
    assert (err.value.file, err.value.field) == ("g.yaml", field)
    assert text in err.value.message


@pytest.mark.parametrize(
    ("axes", "text"),
    [
        ({"cluster.node_params.gpus": [2, 0]}, "point 1 (cluster.node_params.gpus=0): cluster.node_params"),
        ({"cluster.nodez": [2]}, "point 0 (cluster.nodez=2): cluster.nodez: unknown field (did you mean 'node"),
        ({"backends.nccl.env.NCCL_PROTO": ["LL", "LL256"]}, "point 1 (backends.nccl.env.NCCL_PROTO=LL256): "
         "backends.nccl.env.NCCL_PROTO: "),
        ({"workload.sizes.x": [1]}, "point 0 (workload.sizes.x=1): workload.sizes.x: cannot set"),
        ({"scenario": ["pcie-2gpu-nop2p", "no-such-scenario"]}, "point 1 (scenario=no-such-scenario): scenario file "
         "not found"),
    ],
)
def test_every_point_is_validated_before_anything_runs(axes: dict[str, Any], text: str) -> None:
    g = grid_from_mapping({"base": "pcie-2gpu-nop2p", "axes": axes}, file="g.yaml")
    with pytest.raises(ScenarioError) as err:
        g.resolve()
    assert str(err.value).startswith(f"g.yaml: {text}"), str(err.value)
    assert "\n" not in str(err.value)


def test_what_an_axis_sets_is_the_grids_in_errors_warnings_and_file_paths(tmp_path: Path) -> None:
    # an axis's mistakes were said to be in the base scenario's file, and an axis's file was looked up next to the
    # base scenario (a built-in's folder) instead of the grid
    g = grid_from_mapping({"base": "pcie-2gpu-nop2p", "axes": {"cluster.nodez": [2]}}, file="g.yaml")
    with pytest.raises(ScenarioError, match=r"cluster.nodez: unknown field .*\(axis cluster.nodez\)$"):
        g.resolve()
    # a list-valued axis: its items' fields (perturb.down[0].device) are the axis's too, errors and warnings alike
    down = grid_from_mapping({"base": "2node-h100-ib", "axes": {"perturb.down": {"bad": [{"device": "n7/nic2"}]}}},
                             file="g.yaml")  # fmt: skip
    with pytest.raises(ScenarioError, match=r"perturb.down\[0\].device: no device matching 'n7/nic2'.*\(axis "
                                            r"perturb.down\)$") as err:  # fmt: skip
        down.resolve()
    assert "2node-h100-ib.yaml" not in str(err.value)
    twice = [{"device": "n0/nic0", "scale": 0.5}, {"device": "n0/nic0", "scale": 0.4}]
    links = grid_from_mapping({"base": "2node-h100-ib", "axes": {"perturb.links": {"two": twice}}}, file="g.yaml")
    with pytest.warns(UserWarning, match=r"^g.yaml: axes.perturb.links\[1\] scales"):
        links.resolve()
    typo = grid_from_mapping({"base": "pcie-2gpu-nop2p", "axes": {"backends.nccl.env.NCCL_ALGOO": ["Ring"]}},
                             file="g.yaml")  # fmt: skip
    with pytest.warns(UserWarning, match=r"^g.yaml: axes.backends.nccl.env.NCCL_ALGOO: unknown NCCL variable"):
        typo.resolve()
    (tmp_path / "prof.yaml").write_text("format: collsim-profile/1\nparameters: {nccl.launch_overhead_us: 5}\n")
    grid = tmp_path / "g.yaml"
    grid.write_text("base: pcie-2gpu-nop2p\naxes:\n  calibration: [null, prof.yaml]\nsizes: [8B]\n")
    points = load_grid(grid).resolve().points
    assert [p.scenario.calibration_path() for p in points[::2]] == [None, (tmp_path / "prof.yaml").resolve()]


def test_the_topology_is_checked_too() -> None:
    # a field only the cluster can judge (a device a perturbation names) fails before anything runs
    g = _grid(axes={"perturb.links": [[{"device": "n9/gpu0", "scale": 0.5}]]})
    with pytest.raises(ScenarioError, match=r"^g.yaml: point 0 \(perturb.links=.*\): perturb"):
        g.resolve()
    assert len(g.resolve(check=False).points) > 0


def test_a_grid_file_that_cannot_be_read(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="file not found"):
        load_grid(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: invalid YAML at line 2"):
        load_grid(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ScenarioError, match="expected a mapping with keys name, description, base"):
        load_grid(bad)


def test_the_shipped_example_grid_is_valid() -> None:
    g = load_grid(SCENARIOS / "grids" / "nic-speed.yaml")
    assert len(g.resolve().points) == 72
