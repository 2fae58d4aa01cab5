"""The committed JSON Schema equals the generated one; the regeneration entry point works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collsim.scenario import scenario_json_schema, scenarios_dir
from collsim.scenario.schema import main, schema_text


def test_committed_schema_in_sync() -> None:
    committed = (scenarios_dir() / "scenario.schema.json").read_text(encoding="utf-8")
    assert committed == schema_text(), "run: .venv/bin/python -m collsim.scenario.schema"


def test_schema_shape() -> None:
    schema = scenario_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "collsim scenario"
    assert schema["required"] == ["name", "cluster"]
    assert schema["additionalProperties"] is False
    assert "source_file" not in schema["properties"] and "base_dir" not in schema["properties"]
    assert list(schema["properties"]) == [
        "name",
        "description",
        "cluster",
        "workload",
        "backends",
        "engine",
        "perturb",
        "noise",
        "training",
        "calibration",
        "preset_files",
        "presets",
    ]
    cluster = schema["$defs"]["ClusterConfig"]
    assert cluster["required"] == ["node"]
    assert schema["$defs"]["FabricConfig"]["properties"]["topology"]["enum"] == [
        "single_switch",
        "rail_optimized",
        "fat_tree",
    ]
    env = schema["$defs"]["NcclConfig"]["properties"]["env"]
    assert env["propertyNames"] == {"pattern": "^(NCCL_|OFI_NCCL_TUNER_TYPE$)"}
    assert "NCCL_ALGO" in env["properties"]
    collective = schema["$defs"]["WorkloadConfig"]["properties"]["collective"]
    assert collective["anyOf"][0]["enum"][0] == "allreduce"


def test_main_check_and_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "schema.json"
    assert main(["--check", str(out)]) == 1
    assert main([str(out)]) == 0
    assert json.loads(out.read_text(encoding="utf-8")) == scenario_json_schema()
    assert main(["--check", str(out)]) == 0
    assert main(["--check"]) == 0  # the committed file
    out.write_text("{}\n", encoding="utf-8")
    assert main(["--check", str(out)]) == 1
    assert "out of date" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (("cluster", "fabric", "oversubscription"), 0),  # gt=0 came out as "gt", which validators ignore
        (("cluster", "fabric", "oversubscription"), -1.5),
        (("cluster", "fabric", "oversubscription"), 2),
        (("cluster", "fabric", "oversubscription"), 1.5),
        (("workload", "collective"), "all_reduce"),  # nccl-tests' and PyTorch's spellings: the loader reads them
        (("workload", "collective"), ["all_gather", "reducescatter"]),
        (("workload", "collective"), "gather"),
        (("noise", "jitter"), 0),  # a duration of 0 needs no unit
        (("noise", "jitter"), "1us"),
        (("noise", "launch_skew"), 0),
        (("workload", "host_overhead"), 0),
        (("perturb", "ranks"), [{"rank": 1, "launch_delay": 0}]),
    ],
)
def test_the_schema_accepts_what_the_loader_accepts(field: tuple[str, ...], value: object) -> None:
    """An editor validating against the schema flags a file exactly when ``collsim`` refuses it, on the fields where
    they disagreed."""
    jsonschema = pytest.importorskip("jsonschema")
    from collsim.scenario import Scenario, ScenarioError

    doc: dict = {"name": "s", "cluster": {"node": "hgx-h100", "nodes": 2, "fabric": {"topology": "fat_tree"}}}
    node = doc
    for key in field[:-1]:
        node = node.setdefault(key, {})
    node[field[-1]] = value
    try:
        Scenario.model_validate(doc)
        loads = True
    except (ScenarioError, ValueError):
        loads = False
    valid = jsonschema.Draft202012Validator(scenario_json_schema()).is_valid(doc)
    assert valid == loads, (field, value, loads)
