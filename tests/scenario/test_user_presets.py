"""Issue 16: a user's own GPU, NIC, link and node template, defined in the scenario (``presets:``) or in a file
(``preset_files:``), work end to end, and their mistakes name the user's file and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from collsim.api import Simulator
from collsim.cli import main
from collsim.topology.errors import TopologyWarning

DATA = Path(__file__).parent / "data"
INLINE = DATA / "user-presets.yaml"
IN_FILE = DATA / "user-presets-file.yaml"


@pytest.mark.parametrize("scenario", [INLINE, IN_FILE], ids=["inline", "preset_files"])
@pytest.mark.parametrize("command", ["run", "compare", "topo"])
def test_user_hardware_runs_end_to_end(scenario: Path, command: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([command, str(scenario), "--sizes", "1MiB"] if command != "topo" else [command, str(scenario)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out


def test_user_hardware_in_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "r.html"
    assert main(["report", str(INLINE), "-o", str(html), "--quiet"]) == 0
    assert html.stat().st_size > 10_000


def test_the_user_gpu_is_what_the_cluster_is_built_of() -> None:
    sim = Simulator.from_source(INLINE)
    gpus = sim.topology.gpus()
    assert len(gpus) == 4 and {g.spec["preset"] for g in gpus} == {"lab-gpu"}
    assert {g.spec["sm_count"] for g in gpus} == {128}


def _broken(tmp_path: Path, edit: dict[str, object]) -> Path:
    data = yaml.safe_load(INLINE.read_text(encoding="utf-8"))
    data["presets"]["gpus"]["lab-gpu"].update(edit)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_mistake_in_a_user_preset_names_the_users_file_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _broken(tmp_path, {"arch": "ada"})
    assert main(["run", str(path), "--sizes", "1MiB"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: presets.gpus.lab-gpu.arch: arch 'ada' is not the row NCCL picks for sm 89 (ampere" in err
    assert "topologies/presets/gpus.yaml" not in err and len(err.strip().splitlines()) == 1


def test_a_bandwidth_without_unit_in_a_user_preset_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _broken(tmp_path, {"hbm_bandwidth": 1008})
    assert main(["run", str(path), "--sizes", "1MiB"]) == 2
    err = capsys.readouterr().err
    assert "presets.gpus.lab-gpu.hbm_bandwidth" in err and "Traceback" not in err


def test_presets_given_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = yaml.safe_load(IN_FILE.read_text(encoding="utf-8"))
    del data["preset_files"]  # the scenario names lab-box and lab-gpu but does not say where they are
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert main(["topo", str(bare)]) == 2
    assert "unknown node template 'lab-box'" in capsys.readouterr().err
    presets = str(DATA / "user-presets.presets.yaml")
    assert main(["run", str(bare), "--sizes", "1MiB", "--presets", presets]) == 0
    capsys.readouterr()
    assert main(["topo", str(bare), "--presets", str(tmp_path / "none.yaml")]) == 2
    assert "--presets: presets file or folder not found" in capsys.readouterr().err


@pytest.mark.parametrize("shipped", ["dgx-a100", "hgx-h100", "pcie-workstation"])
def test_a_presets_file_of_node_templates_as_collsim_import_writes_it(
    shipped: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A presets file holding only ``nodes:`` (what ``collsim import`` writes: a node template in the shipped
    schema) loads with --presets, and the cluster it describes is the shipped template's, path for path."""
    template = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "topologies/nodes" / f"{shipped}.yaml").read_text()
    )
    presets = tmp_path / "imported.yaml"
    presets.write_text(yaml.safe_dump({"nodes": {"imported-box": template}}), encoding="utf-8")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({"name": "s", "cluster": {"node": "imported-box"}}), encoding="utf-8")
    assert main(["topo", str(scenario), "--presets", str(presets)]) == 0
    imported = capsys.readouterr().out
    scenario.write_text(yaml.safe_dump({"name": "s", "cluster": {"node": shipped}}), encoding="utf-8")
    assert main(["topo", str(scenario)]) == 0
    assert imported == capsys.readouterr().out


def test_a_presets_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder of presets files: every *.yaml in name order, a later file overriding an earlier one."""
    folder = tmp_path / "lab"
    folder.mkdir()
    data = yaml.safe_load((DATA / "user-presets.presets.yaml").read_text(encoding="utf-8"))
    (folder / "10-lab.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    gpu = dict(data["gpus"]["lab-gpu"], sm_count=64, sm_count_source="test: a smaller part")
    (folder / "20-override.yaml").write_text(yaml.safe_dump({"gpus": {"lab-gpu": gpu}}), encoding="utf-8")
    scenario = yaml.safe_load(IN_FILE.read_text(encoding="utf-8"))
    scenario["preset_files"] = [str(folder)]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario), encoding="utf-8")
    with pytest.warns(TopologyWarning, match=r"20-override.yaml: gpus.lab-gpu: replaces the gpu 'lab-gpu' of "):
        sim = Simulator.from_source(path)  # the override is meant, and said
    assert {g.spec["sm_count"] for g in sim.topology.gpus()} == {64}
    (folder / "30-broken.yaml").write_text("gpus: {lab-gpu: {sm: 89}}\n", encoding="utf-8")
    assert main(["topo", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("collsim: warning: ")]
    assert len(err) == 1 and "30-broken.yaml: gpus.lab-gpu." in err[0]
