"""Issue 16's fuzz suite: hostile scenarios, ``--set`` values, measurement files and nccl-tests logs. Every input
ends with exit status 0 or 2, and a refusal is one line on stderr naming the file or option, never a traceback.

Runs in-process (``collsim.cli.main``) on small scenarios so that the few hundred inputs take well under a minute;
each input is also held to a wall-clock budget (a hang is a failure, not a stuck CI job)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsim.cli import main

#: Seconds one input may take.
BUDGET_S = 10.0

FIELDS = [
    "name", "cluster.node", "cluster.nodes", "cluster.fabric", "cluster.fabric.nic_speed", "cluster.node_params",
    "cluster.node_params.gpus", "workload.sizes", "workload.dtype", "workload.collective", "workload.op",
    "backends.nccl.env", "backends.nccl.env.NCCL_ALGO", "backends.nccl.env.NCCL_PROTO",
    "backends.nccl.env.NCCL_BUFFSIZE", "backends.nccl.env.NCCL_MAX_NCHANNELS", "backends.gloo.threads",
    "backends.gloo.algorithm", "backends.gloo.enabled", "engine.symmetry", "calibration", "presets",
    "presets.gpus", "preset_files", "training", "training.batch_size", "noise", "perturb",
]  # fmt: skip
VALUES = st.one_of(
    st.integers(-10, 16).map(str),
    st.integers(10**6, 10**40).map(str),
    st.sampled_from([
        "", "0", "-1", "2e0", "1e309", ".inf", "-.inf", ".nan", "nan", "null", "~", "true", "yes", "[]", "{}", "[1, 2",
        "{a: b}", "*x", "&a [*a, *a]", "'", '"', "1GiB", "100", "100Gb/s", "1EiB", "8B:1PiB:x2", "8B:1GiB:+1",
        "Ring,Tree", "NVLS", "bogus", "hgx-h100", "../etc/passwd", "\x00", "a" * 5000, "9" * 5000, "[" * 200,
        "{gpus: {x: {arch: ada}}}", "[missing.yaml]", "- a\n- b", "{NCCL_BUFFSIZE: '1'}", "{links: [{scale: 0.5}]}",
    ]),
    st.text(max_size=40),
)


@contextmanager
def _budget(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging) when the block runs longer than ``seconds``."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"input took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _check(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    with _budget(BUDGET_S):
        rc = main(argv)
    _out, err = capsys.readouterr()
    assert rc in (0, 2), (argv, rc, err[-500:])
    assert "Traceback" not in err, (argv, err[-2000:])
    if rc == 2:
        errors = [line for line in err.splitlines() if line.startswith("collsim: error:")]
        assert len(errors) == 1, (argv, err[-2000:])
        assert len(errors[0]) < 20_000, (argv, len(errors[0]))
    assert time.monotonic() - start < BUDGET_S


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_set_overrides(field: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    _check(["run", "hgx-h100", "--sizes", "1KiB", "--set", f"{field}={value}"], capsys)


def _hostile_documents() -> dict[str, bytes]:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{k}: &{k} [{', '.join(['*' + p] * 9)}]\n" for p, k in zip("abcdefgh", "bcdefghi", strict=True)
    )
    base = Path(__file__).resolve().parents[2] / "scenarios" / "hgx-h100.yaml"
    good = base.read_text(encoding="utf-8")
    return {
        "alias-bomb-name": (bomb + "name: *i\ncluster: {node: hgx-h100}\n").encode(),
        "alias-bomb-sizes": (bomb + "name: x\ncluster: {node: hgx-h100}\nworkload: {sizes: *i}\n").encode(),
        "alias-bomb-env": (
            bomb + "name: x\ncluster: {node: hgx-h100}\nbackends: {nccl: {env: {NCCL_ALGO: *i}}}\n"
        ).encode(),
        "deep-nesting": ("name: " + "[" * 5000 + "]" * 5000 + "\ncluster: {node: hgx-h100}\n").encode(),
        "deep-mapping": ("a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n").encode(),
        "huge-int": ("name: x\ncluster: {node: hgx-h100, nodes: " + "9" * 5000 + "}\n").encode(),
        "inf-nodes": b"name: x\ncluster: {node: hgx-h100, nodes: .inf}\n",
        "inf-speed": b"name: x\ncluster: {node: hgx-h100, nodes: 2, fabric: {topology: fat_tree, nic_speed: .inf}}\n",
        "nan-oversub": (
            b"name: x\ncluster: {node: hgx-h100, nodes: 4, fabric: {topology: fat_tree, oversubscription: .nan}}\n"
        ),
        "binary": bytes(range(256)) * 8,
        "empty": b"",
        "list-root": b"- a\n- b\n",
        "scalar-root": b"42\n",
        "tabs": b"name:\tx\ncluster:\n\tnode: hgx-h100\n",
        "duplicate-keys": b"name: a\nname: b\ncluster: {node: hgx-h100}\n",
        "bad-utf8": good.encode() + b"\n# \xff\xfe\n",
        "nul": good.encode() + b"\x00",
        "huge-string": ("name: " + "x" * 2_000_000 + "\ncluster: {node: hgx-h100}\n").encode(),
        "unknown-everything": b"name: x\ncluster: {node: nope, nodes: -3}\nworkload: {collective: bogus}\nextra: 1\n",
        "python-tag": b"name: !!python/object/apply:os.system ['echo hi']\ncluster: {node: hgx-h100}\n",
        "merge-key": b"base: &b {node: hgx-h100}\nname: x\ncluster: {<<: *b, nodes: 1}\n",
        "ok": good.encode(),
    }


HOSTILE = _hostile_documents()


@pytest.mark.parametrize("command", ["run", "topo", "compare", "explain"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_scenario_files(case: str, command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"{case}.yaml"
    path.write_bytes(HOSTILE[case])
    argv = [command, str(path)] + (["--sizes", "1KiB"] if command != "topo" else [])
    _check(argv, capsys)


MEASUREMENT_TEXT = st.one_of(
    st.text(max_size=400),
    st.lists(
        st.sampled_from([
            "#  Rank  0 Group  0 Pid 1 on host device  0 [0x07] NVIDIA A100",
            "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
            "   busbw #wrong",
            "     1048576        262144     float     sum      -1    35.10   29.87   52.27      0    34.77   30.16"
            "   52.78      0",
            "     1048576        262144     float     sum      -1     nan     inf    -1e9      0",
            "           8             2     float     sum      -1  1e309    0.00    0.00      0",
            "# Avg bus bandwidth    : 52.5",
            "garbage line",
            "",
        ]),
        max_size=12,
    ).map("\n".join),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=MEASUREMENT_TEXT, suffix=st.sampled_from([".txt", ".log", ".json", ".csv"]))
def test_measurement_files(text: str, suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / f"m{suffix}"
    path.write_text(text, encoding="utf-8")
    _check(["validate", "hgx-h100", str(path), "--collective", "allreduce", "--nranks", "8"], capsys)


JSON_DOCS = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=JSON_DOCS, rows=st.booleans())
def test_measurement_json(doc: object, rows: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = {"format": "collsim-measurement/1", "collective": "allreduce", "rows": [doc]} if rows else doc
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    _check(["validate", "hgx-h100", str(path)], capsys)


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "hgx-h100", "/dev/null", "--collective", "bogus"],
        ["run", "hgx-h100", "--sizes", "1KiB", "--trace", "/tmp/collsim-fuzz-trace.json", "--trace-size", "0B"],
        ["run", "hgx-h100", "--sizes", "8B:1GiB:+1"],
        ["run", "hgx-h100", "--sizes", "1PiB"],
        ["run", "hgx-h100", "--sizes", "1EiB"],
        ["run", "hgx-h100", "--sizes", "-1"],
        ["run", "2node-h100-ib", "--sizes", "1KiB", "--set", "cluster.nodes=100000"],
        ["run", "loopback-gloo-cpu", "--sizes", "1KiB", "--set", "cluster.node_params.processes=100000"],
        ["benchmark", "/nonexistent.yaml"],
        ["topo", "/nonexistent.yaml"],
        ["step", "hgx-h100"],
        ["compare", "loopback-gloo-cpu", "--sizes", "1KiB"],
    ],
)
def test_named_hostile_commands(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    _check(argv, capsys)
