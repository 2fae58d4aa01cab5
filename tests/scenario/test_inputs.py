"""Issue 16: units everywhere and hostile input, each case with the command a user would type.

Every refusal is exit status 2 and one line on stderr naming the file or option and the field; the fuzz suite
(``test_fuzz.py``) checks the same over many inputs, these tests the exact messages.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from collsim.cli import main
from collsim.safeyaml import LIMITS, YamlInputError, load_yaml
from collsim.scenario import ScenarioError, apply_overrides, load_scenario
from collsim.units import (
    BANDWIDTH_UNITS,
    SIZE_UNITS,
    TIME_UNITS,
    UnitError,
    parse_bandwidth,
    parse_size,
    parse_time,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def _refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the command line; it must exit 2 with one line on stderr; return that line."""
    rc = main(list(argv))
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("collsim: error: "), err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------------------------------------- units


def test_a_bandwidth_without_unit_is_refused_with_the_units(capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(capsys, "topo", "2node-a100-ib", "--set", "cluster.fabric.nic_speed=100")
    assert f"{SCENARIOS / '2node-a100-ib.yaml'}: cluster.fabric.nic_speed: bandwidth '100' has no unit" in line
    assert "Gb/s" in line and "GB/s" in line
    assert main(["topo", "2node-a100-ib", "--set", "cluster.fabric.nic_speed=100Gb/s"]) == 0


def test_a_duration_without_unit_is_refused_except_zero() -> None:
    with pytest.raises(UnitError, match="has no unit; use s, ms, us"):
        parse_time("300")
    assert parse_time("0") == 0.0 and parse_time("300ns") == pytest.approx(300e-9)
    with pytest.raises(UnitError, match="has no unit"):
        parse_bandwidth(100)  # a Python number too: 100 what?


def test_a_size_without_unit_is_bytes() -> None:
    assert parse_size("100") == 100 == parse_size(100)
    assert load_scenario("hgx-h100", ["workload.sizes=1e6"]).sizes() == [1_000_000]  # YAML 1.2: 1e6 is a number


def test_a_size_is_whole_bytes_exactly() -> None:
    """A fraction of a byte was rounded silently (1.5 -> 2, 2.5 -> 2) and an int above 2**53 went through a
    float; fractions are refused, whole bytes kept exact, a unit's fraction that is whole bytes read."""
    big = 2**53 + 1
    assert parse_size(big) == big == parse_size(str(big)) and parse_size("1.5KiB") == 1536
    assert parse_size("0.3KB") == 300  # 300.00000000000006 as a float: whole bytes to within its error
    for bad in ("1.5", 2.5, "1.1MiB"):
        with pytest.raises(UnitError, match="not whole bytes"):
            parse_size(bad)
    with pytest.raises(ScenarioError, match=r"workload\.sizes: size 1\.5 is 1\.5 B, not whole bytes"):
        load_scenario("hgx-h100", ["workload.sizes=[1.5, 3.7]"])
    from collsim.api import Simulator

    assert Simulator.from_source("hgx-h100").simulate_one("nccl", 8).size_bytes == 8


@pytest.mark.parametrize("unit", re.findall(r"\b(?:[kKMGTP]i?)?B\b", SIZE_UNITS))
def test_every_size_unit_listed_is_accepted(unit: str) -> None:
    assert parse_size(f"2{unit}") >= 2


@pytest.mark.parametrize("unit", ["EB", "EiB", "ZiB", "KIB", "byte"])
def test_a_size_unit_not_listed_is_refused_and_the_list_is_in_the_message(unit: str) -> None:
    assert unit not in re.findall(r"\b\w+\b", SIZE_UNITS)
    with pytest.raises(UnitError) as ei:
        parse_size(f"1{unit}")
    assert SIZE_UNITS in str(ei.value)


def test_the_bandwidth_and_time_lists_are_true() -> None:
    for prefix in ("", "k", "K", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"):
        assert prefix in BANDWIDTH_UNITS
        for unit in ("B/s", "b/s", "bps"):
            assert parse_bandwidth(f"1{prefix}{unit}") > 0
    for unit in ("EB/s", "Eb/s", "GBps/s"):
        with pytest.raises(UnitError):
            parse_bandwidth(f"1{unit}")
    for unit in ("s", "ms", "us", "\u00b5s", "ns"):
        assert unit in TIME_UNITS and parse_time(f"1{unit}") > 0


def test_the_sweep_limit_is_checked_before_the_list_is_built(capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    line = _refused(capsys, "run", "hgx-h100", "--sizes", "8B:1GiB:+1")
    assert line.startswith("collsim: error: --sizes: ") and "at most 100000" in line
    assert time.monotonic() - start < 2


def test_set_values_are_read_as_yaml_1_2_numbers() -> None:
    data = apply_overrides({"name": "x"}, ["a=2e0", "b=1e9", "c=.5", "d=1_000", "e=0x10", "f=2024-01-01", "g=yes"])
    assert data == {"name": "x", "a": 2.0, "b": 1e9, "c": 0.5, "d": "1_000", "e": 16, "f": "2024-01-01", "g": True}
    s = load_scenario("2node-a100-ib", ["cluster.fabric.topology=fat_tree", "cluster.fabric.oversubscription=2e0"])
    assert s.cluster.fabric is not None and s.cluster.fabric.oversubscription == 2.0


# ------------------------------------------------------------------------------------------------- hostile YAML

_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{k}: &{k} [{', '.join(['*' + p] * 9)}]\n" for p, k in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    "tail",
    ["name: *i\ncluster: {node: hgx-h100}\n", "name: x\ncluster: {node: hgx-h100}\nworkload: {sizes: *i}\n",
     "name: x\ncluster: {node: hgx-h100}\nbackends: {nccl: {env: {NCCL_ALGO: *i}}}\n"],
    ids=["name", "sizes", "NCCL_ALGO"],
)  # fmt: skip
def test_an_alias_bomb_is_refused_quickly(tail: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_BOMB + tail, encoding="utf-8")
    start = time.monotonic()
    line = _refused(capsys, "run", str(path), "--sizes", "1KiB")
    assert time.monotonic() - start < 1.0
    assert line.startswith(f"collsim: error: {path}: line ") and "alias" in line and len(line) < 300


def test_an_alias_bomb_in_a_set_value(capsys: pytest.CaptureFixture[str]) -> None:
    levels = ["&l0 [x, x, x, x, x, x, x, x, x, x]"] + [f"&l{k} [{', '.join([f'*l{k - 1}'] * 10)}]" for k in range(1, 7)]
    value = "[" + ", ".join(levels) + "]"  # 10**6 x once expanded
    line = _refused(capsys, "topo", "hgx-h100", "--set", "name=" + value)
    assert line.startswith("collsim: error: --set: name: cannot read value") and "alias" in line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: " + "[" * 5000 + "]" * 5000 + "\ncluster: {node: hgx-h100}\n", "nested deeper than 64 levels"),
        ("name: x\ncluster: {node: hgx-h100, nodes: " + "9" * 5000 + "}\n", "an integer of 5000 digits; at most 20"),
        ("name: x\ncluster: {node: hgx-h100}\nworkload: {sizes: 1e999}\n", "number '1e999' is out of range"),
        ("name: a\ncluster: {node: hgx-h100}\nname: b\n", "duplicate key 'name'"),
        ("name: !!python/object/apply:os.system ['true']\ncluster: {node: hgx-h100}\n", "could not determine a"),
    ],
    ids=["deep", "5000-digits", "overflow", "duplicate", "python-tag"],
)
def test_hostile_yaml_is_one_line(text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    line = _refused(capsys, "topo", str(path))
    assert line.startswith(f"collsim: error: {path}: ") and message in line


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("cluster.fabric.oversubscription=.inf", "cluster.fabric.oversubscription"),
        ("cluster.fabric.oversubscription=.nan", "cluster.fabric.oversubscription"),
        ("perturb.links=[{device: n0/nic0, scale: .inf}]", "perturb.links[0].scale"),
    ],
)
def test_inf_and_nan_where_a_finite_number_is_expected(
    setting: str, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _refused(capsys, "topo", "2node-a100-ib", "--set", "cluster.fabric.topology=fat_tree", "--set", setting)
    assert f"2node-a100-ib.yaml: {field}: Input should be a finite number" in line


def test_a_straggler_listed_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Two launch delays for one rank would add up silently (50 us and 5 us made 55)."""
    line = _refused(capsys, "topo", "hgx-h100", "--set",
                    "perturb={ranks: [{rank: 3, launch_delay: 50us}, {rank: 3, launch_delay: 5us}]}")  # fmt: skip
    assert "perturb.ranks: rank 3 is listed twice; give each straggler one launch_delay" in line


def test_the_yaml_limits_are_the_documented_ones() -> None:
    assert (LIMITS.max_bytes, LIMITS.max_depth, LIMITS.max_nodes, LIMITS.max_int_digits) == (
        4 * 1024 * 1024,
        64,
        100_000,
        20,
    )
    with pytest.raises(YamlInputError, match="larger than 4 MiB"):
        load_yaml("x: " + "a" * (4 * 1024 * 1024))
    assert load_yaml("base: &b {x: 1}\nc: {<<: *b, y: 2}") == {"base": {"x": 1}, "c": {"x": 1, "y": 2}}


# ------------------------------------------------------------------------------------------- files and options


def test_a_binary_scenario_and_a_binary_measurement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "b.yaml"
    binary.write_bytes(bytes(range(256)))
    assert _refused(capsys, "validate", str(binary), str(binary)) == f"collsim: error: {binary}: not a UTF-8 text file"
    log = tmp_path / "b.log"
    log.write_bytes(bytes(range(256)))
    assert _refused(capsys, "validate", "pcie-2gpu-nop2p", str(log)) == f"collsim: error: {log}: not a UTF-8 text file"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[" * 5000 + "]" * 5000, "invalid JSON: nested too deeply"),
        ('{"collective": "allreduce", "rows": [{"size_bytes": ' + "9" * 5000 + "}]}", "more than 4300 digits"),
        ('{"collective": "allreduce", "rows": [{"size_bytes": 8, "time_us": Infinity}]}', "positive finite number"),
        ('{"collective": "allreduce", "rows": [{"size_bytes": "' + "x" * 100_000 + '", "time_us": 1}]}', "..."),
    ],
    ids=["deep", "5000-digits", "infinity", "long-string"],
)
def test_hostile_measurement_json(text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.json"
    path.write_text(text, encoding="utf-8")
    line = _refused(capsys, "validate", "pcie-2gpu-nop2p", str(path))
    assert line.startswith(f"collsim: error: {path}: ") and message in line and len(line) < 500


def test_cli_options_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "m.log"
    log.write_text("#  size count type redop root time algbw busbw #wrong\n", encoding="utf-8")
    assert _refused(capsys, "validate", "pcie-2gpu-nop2p", str(log), "--collective", "bogus").startswith(
        "collsim: error: --collective: unknown collective 'bogus'"
    )
    trace = tmp_path / "t.json"
    line = _refused(capsys, "run", "pcie-2gpu-nop2p", "--sizes", "1KiB", "--trace", str(trace), "--trace-size", "0B")
    assert line.startswith("collsim: error: --trace-size: ")
    assert _refused(capsys, "topo", "hgx-h100", "--presets", str(tmp_path / "none.yaml")).startswith(
        "collsim: error: --presets: presets file or folder not found"
    )


def test_node_params_errors_use_the_users_path(capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(capsys, "topo", "pcie-2gpu-nop2p", "--set", "cluster.node_params.gpu=rtx-9999")
    assert "pcie-2gpu-nop2p.yaml: cluster.node_params.gpu: unknown gpu preset 'rtx-9999'" in line
    line = _refused(capsys, "topo", "pcie-2gpu-nop2p", "--set", "cluster.node_params.gpus=99")
    assert "pcie-2gpu-nop2p.yaml: cluster.node_params.gpus: expected an integer from 1 to 8, got 99" in line
    assert "cluster.params" not in line


def test_a_home_that_does_not_exist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("name: x\ncluster: {node: hgx-h100}\ncalibration: ~nosuchuser-collsim/p.yaml\n", encoding="utf-8")
    line = _refused(capsys, "topo", str(path))
    assert line.startswith(f"collsim: error: {path}: calibration: calibration profile not found")


def test_control_characters_in_input_stay_on_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text('name: x\ncluster: {node: hgx-h100, "a\\x1eb\\u2028c": 1}\n', encoding="utf-8")
    line = _refused(capsys, "topo", str(path))
    assert "cluster.a\\x1eb\\u2028c: unknown field" in line
