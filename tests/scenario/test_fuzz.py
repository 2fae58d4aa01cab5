"""Issue 16's fuzz suite: hostile scenarios, ``--set`` values, measurement files and nccl-tests logs. Every input
ends with exit status 0 or 2, and a refusal is one line on stderr naming the file or option, never a traceback.

Runs in-process (``collsim.cli.main``) on small scenarios so that the ~1000 inputs take about a minute; each input
is held to a wall-clock budget (a hang is a failure, not a stuck CI job), and the hostile files of ``fuzz_corpus/``
are run once more in a child process limited to 1 GiB of address space (an input that tries to take more fails
there instead of exhausting the machine)."""

from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsim.cli import main

#: Seconds one input may take.
BUDGET_S = 10.0
#: Bytes of address space the child process running the corpus may use (``test_corpus_within_memory_limit``).
MEMORY_LIMIT = 1 << 30
#: Growth of this process's peak resident memory one in-process input may cause, bytes.
RSS_GROWTH_LIMIT = 1 << 30
CORPUS = Path(__file__).parent / "fuzz_corpus"
#: What an error line starts with: a file (a path, or a name with a suffix), an option (``--set``), ``<dict>``.
_NAMED = re.compile(r"^collsim: error: (--[a-z][a-z-]*|<dict>|[^:]*[/\\][^:]*|[^:\s]+\.[A-Za-z]+)(:|$)")

FIELDS = [
    "name", "cluster.node", "cluster.nodes", "cluster.fabric", "cluster.fabric.nic_speed", "cluster.node_params",
    "cluster.node_params.gpus", "workload.sizes", "workload.dtype", "workload.collective", "workload.op",
    "backends.nccl.env", "backends.nccl.env.NCCL_ALGO", "backends.nccl.env.NCCL_PROTO",
    "backends.nccl.env.NCCL_BUFFSIZE", "backends.nccl.env.NCCL_MAX_NCHANNELS", "backends.gloo.threads",
    "backends.gloo.algorithm", "backends.gloo.enabled", "engine.symmetry", "calibration", "presets",
    "presets.gpus", "preset_files", "training", "training.batch_size", "noise", "perturb", "cluster.ranks_per_gpu",
]  # fmt: skip
VALUES = st.one_of(
    st.integers(-10, 16).map(str),
    st.integers(10**6, 10**40).map(str),
    st.sampled_from(
        [
            "",
            "0",
            "-1",
            "2e0",
            "1e309",
            ".inf",
            "-.inf",
            ".nan",
            "nan",
            "null",
            "~",
            "true",
            "yes",
            "[]",
            "{}",
            "[1, 2",
            "{a: b}",
            "*x",
            "&a [*a, *a]",
            "'",
            '"',
            "1GiB",
            "100",
            "100Gb/s",
            "1EiB",
            "8B:1PiB:x2",
            "8B:1GiB:+1",
            "Ring,Tree",
            "NVLS",
            "bogus",
            "hgx-h100",
            "../etc/passwd",
            "\x00",
            "a" * 5000,
            "9" * 5000,
            "[" * 200,
            "{gpus: {x: {arch: ada}}}",
            "[missing.yaml]",
            "- a\n- b",
            "{NCCL_BUFFSIZE: '1'}",
            "{links: [{scale: 0.5}]}",
        ]
    ),
    st.text(max_size=40),
)


class Overtime(BaseException):
    """An input ran past its budget (a BaseException: the command line's own handlers must not catch it, as they
    would a TimeoutError, an OSError)."""


@contextmanager
def _budget(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging) when the block runs longer than ``seconds``."""

    def expired(signum: int, frame: object) -> None:
        raise Overtime(f"input took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_outcome(argv: list[str], rc: int, err: str) -> None:
    """Exit 0 or 2; stderr holds only collsim's own lines (warnings, and with 2 exactly one error line naming a file
    or an option), never a traceback."""
    assert rc in (0, 2), (argv, rc, err[-500:])
    assert "Traceback" not in err, (argv, err[-2000:])
    lines = err.splitlines()
    assert all(line.startswith(("collsim: warning:", "collsim: error:")) for line in lines), (argv, err[-2000:])
    errors = [line for line in lines if line.startswith("collsim: error:")]
    assert len(errors) == (1 if rc == 2 else 0), (argv, err[-2000:])
    if errors:
        assert len(errors[0]) < 5_000, (argv, len(errors[0]))
        assert _NAMED.match(errors[0]), (argv, errors[0][:300])


def _check(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    start = time.monotonic()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    with _budget(BUDGET_S):
        rc = main(argv)
    _out, err = capsys.readouterr()
    check_outcome(argv, rc, err)
    assert time.monotonic() - start < BUDGET_S
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss < RSS_GROWTH_LIMIT, argv


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
        st.sampled_from(
            [
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
            ]
        ),
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
        ["run", "2node-h100-ib", "--sizes", "1KiB", "--set", "backends.nccl.env.NCCL_IB_HCA=" + "x" * 100_000],
        ["run", "2node-h100-ib", "--sizes", "1KiB", "--set", "backends.nccl.env.NCCL_IB_HCA=^"],
        ["run", "2node-h100-ib", "--sizes", "1KiB", "--set", "backends.nccl.env.NCCL_IB_HCA=mlx5_0:99999999999999999"],
        ["run", "loopback-gloo-cpu", "--sizes", "1KiB", "--set", "cluster.node_params.processes=100000"],
        ["benchmark", "/nonexistent.yaml"],
        ["topo", "/nonexistent.yaml"],
        ["step", "hgx-h100"],
        ["compare", "loopback-gloo-cpu", "--sizes", "1KiB"],
    ],
)
def test_named_hostile_commands(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    _check(argv, capsys)


# ------------------------------------------------------------------------------------------------- the corpus


def corpus_argv(path: Path) -> list[str]:
    """The command a corpus file is given to (fuzz_corpus/README.md)."""
    name = path.name
    if name.endswith(".scenario.yaml"):
        return ["topo", str(path)]
    if name.endswith(".presets.yaml"):
        return ["topo", "hgx-h100", "--presets", str(path)]
    return ["validate", "hgx-h100", str(path), "--collective", "allreduce", "--nranks", "8"]


CORPUS_FILES = sorted(p for p in CORPUS.iterdir() if p.name != "README.md")


def test_the_corpus_is_there() -> None:
    assert len(CORPUS_FILES) >= 40
    assert {p.name.split(".", 1)[1] for p in CORPUS_FILES} >= {"scenario.yaml", "presets.yaml", "log", "json", "csv"}


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.name for p in CORPUS_FILES])
def test_corpus(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _check(corpus_argv(path), capsys)
    if path.name.endswith(".scenario.yaml"):
        _check(["run", str(path), "--sizes", "1KiB", "--jobs", "1"], capsys)


_CHILD = r"""
import contextlib, io, json, resource, signal, sys, time
limit, budget = int(sys.argv[1]), float(sys.argv[2])
from collsim.cli import main
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
class Overtime(BaseException):
    pass
def expired(signum, frame):
    raise Overtime()
signal.signal(signal.SIGALRM, expired)
for argv in json.load(sys.stdin):
    err, start = io.StringIO(), time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, budget)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(argv)
    except Overtime:
        rc = "overtime"
    except MemoryError:
        rc = "out of memory"
    except BaseException as exc:
        rc = f"{type(exc).__name__}: {str(exc)[:300]}"
    signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps([argv, rc, err.getvalue()[-3000:], time.monotonic() - start]), flush=True)
"""


def test_corpus_within_memory_limit() -> None:
    """Every corpus input again, in one child process whose address space is limited to 1 GiB (RLIMIT_AS)."""
    argvs = [corpus_argv(p) for p in CORPUS_FILES]
    argvs += [
        ["run", str(p), "--sizes", "1KiB", "--jobs", "1"] for p in CORPUS_FILES if p.name.endswith(".scenario.yaml")
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(MEMORY_LIMIT), str(BUDGET_S)],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=BUDGET_S * len(argvs) + 60,
        check=False,
    )
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
    assert proc.returncode == 0 and len(results) == len(argvs), proc.stderr[-3000:]
    for argv, rc, err, seconds in results:
        assert isinstance(rc, int), (argv, rc, err)
        check_outcome(argv, rc, err)
        assert seconds < BUDGET_S, (argv, seconds)


# ------------------------------------------------------------------------------- whole scenarios and presets

_QUANTITIES = st.sampled_from(
    ["100Gb/s", "25GB/s", "100", 100, "1us", "300", 0, "0", "1EiB", "8B", ".inf", float("inf"), float("nan"), -1,
     "1e999GB/s", "fast", None, [], {}, True, "1" * 30]
)  # fmt: skip
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=12), _QUANTITIES
)
_ANY = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=8), inner, max_size=3), max_leaves=8)  # fmt: skip


def _maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a valid value (7 in 8), sometimes anything at all."""
    return st.integers(0, 7).flatmap(lambda i: _ANY if i == 0 else valid)


def _quantity(*valid: str) -> st.SearchStrategy[Any]:
    """Mostly one of ``valid`` (3 in 4), else any of the hostile quantities."""
    return st.integers(0, 3).flatmap(lambda i: _QUANTITIES if i == 0 else st.sampled_from(valid))


_FABRIC = st.fixed_dictionaries(
    {"topology": _maybe(st.sampled_from(["single_switch", "rail_optimized", "fat_tree"]))},
    optional={
        "transport": _maybe(st.sampled_from(["rdma", "tcp"])),
        "nic_speed": _quantity("100Gb/s", "400Gb/s", "25GB/s"),
        "nics_per_node": _maybe(st.integers(1, 9)),
        "oversubscription": _maybe(st.floats(0.5, 4)),
        "switch": _maybe(
            st.fixed_dictionaries(
                {}, optional={"latency": _quantity("300ns", "1us"), "radix": _maybe(st.integers(2, 128))}
            )
        ),
    },
)  # fmt: skip
_SCENARIO = st.fixed_dictionaries(
    {
        "name": _maybe(st.text(min_size=1, max_size=10)),
        "cluster": _maybe(st.fixed_dictionaries(
            {"node": _maybe(st.sampled_from(["hgx-h100", "dgx-a100", "pcie-workstation", "cpu-host", "l40s-8gpu"]))},
            optional={"nodes": _maybe(st.integers(1, 3)), "fabric": _maybe(_FABRIC),
                      "node_params": _maybe(st.dictionaries(st.sampled_from(["gpus", "gpu", "p2p", "processes"]),
                                                            _maybe(st.integers(1, 8)), max_size=2))},
        )),
    },
    optional={
        "workload": _maybe(st.fixed_dictionaries({}, optional={
            "collective": _maybe(st.sampled_from(["allreduce", "allgather", "sendrecv", "bogus"])),
            "dtype": _maybe(st.sampled_from(["float32", "half", "int4"])),
            "sizes": st.one_of(st.sampled_from(["1KiB", "8B:64KiB:x4", "1KiB,4KiB", "0", "3B"]), _QUANTITIES, _ANY),
            "root": _maybe(st.integers(0, 8)),
            "host_overhead": st.one_of(st.sampled_from(["none", "torch", "Torch", "5us"]), _QUANTITIES, _ANY),
        })),
        "backends": _maybe(st.fixed_dictionaries({}, optional={
            "nccl": _maybe(st.fixed_dictionaries({}, optional={"enabled": _maybe(st.booleans()), "env": _maybe(
                st.dictionaries(st.sampled_from(["NCCL_ALGO", "NCCL_PROTO", "NCCL_BUFFSIZE", "NCCL_MAX_NCHANNELS",
                                                 "NCCL_P2P_DISABLE", "NCCL_PROTOO"]),
                                _maybe(st.sampled_from(["Ring", "Tree", "LL", "Simple", "4194304", "1", "0"])),
                                max_size=2))})),
            "gloo": _maybe(st.fixed_dictionaries({}, optional={"enabled": _maybe(st.booleans()),
                                                               "threads": _maybe(st.integers(1, 4))})),
        })),
        "engine": _maybe(st.fixed_dictionaries({}, optional={"symmetry": _maybe(st.booleans())})),
        "noise": _maybe(
            st.fixed_dictionaries({}, optional={"launch_skew": _quantity("5us"), "jitter": _quantity("500ns", "0")})
        ),
        "perturb": _maybe(st.fixed_dictionaries({}, optional={"links": _maybe(st.lists(st.fixed_dictionaries(
            {"device": _maybe(st.sampled_from(["n0/gpu0", "n*/nic*", "fabric/*"])), "scale": _maybe(st.floats(0.1, 1))}
        ), max_size=2))})),
        "presets": _ANY,
    },
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=_SCENARIO, command=st.sampled_from(["topo", "run"]))
def test_scenario_documents(
    doc: dict[str, Any], command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whole scenario documents over the schema, mostly valid values with anything at all mixed in."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    argv = [command, str(path)] + (["--sizes", "1KiB", "--jobs", "1"] if command == "run" else [])
    _check(argv, capsys)


_GPU = {
    "model": "m",
    "arch": "ampere",
    "sm": 89,
    "hbm_bandwidth": "1008GB/s",
    "nccl_channel_bw": "20GB/s",
    "kernel_launch_latency": "4us",
    "memcpy_latency": "10us",
    "p2p": False,
    "nvlinks": 0,
    "source": "test",
}
_NIC = {"model": "m", "speed": "25Gb/s", "rdma": False, "link": "eth-25g", "latency": "1us", "source": "test"}
_NODE_PARAMS = {
    "gpus": {"type": "int", "default": 2, "min": 1, "max": 8},
    "gpu": {"type": "gpu", "default": "fuzz-gpu"},
    "pcie_gen": {"type": "int", "default": 4, "choices": [3, 4, 5]},
    "pcie_switch": {"type": "bool", "default": False},
    "gpus_per_switch": {"type": "int", "default": 4},
    "cpu": {"type": "cpu", "default": "generic-x86"},
    "sockets": {"type": "int", "default": 1},
    "p2p": {"type": "bool", "default": None},
    "nic": {"type": "nic", "default": "fuzz-nic"},
}
_NODE = {"generator": "pcie_workstation", "source": "test", "params": _NODE_PARAMS}


def _mutated(entry: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``entry`` with one field changed to anything, dropped, or an unknown field added."""
    keys = st.sampled_from(sorted(entry))
    return st.one_of(
        st.just(dict(entry)),
        st.tuples(keys, _ANY).map(lambda kv: {**entry, kv[0]: kv[1]}),
        st.tuples(keys, _QUANTITIES).map(lambda kv: {**entry, kv[0]: kv[1]}),
        keys.map(lambda k: {key: v for key, v in entry.items() if key != k}),
        st.just({**entry, "bogus": 1}),
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(gpu=_mutated(_GPU), nic=_mutated(_NIC), node=_mutated(_NODE), where=st.sampled_from(["file", "inline"]))
def test_user_presets(
    gpu: dict[str, Any],
    nic: dict[str, Any],
    node: dict[str, Any],
    where: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """User presets (a GPU, a NIC and a node template, each with one field changed), in a presets file given with
    --presets or inline in the scenario."""
    presets = {"gpus": {"fuzz-gpu": gpu}, "nics": {"fuzz-nic": nic}, "nodes": {"fuzz-box": node}}
    scenario: dict[str, Any] = {"name": "fuzz", "cluster": {"node": "fuzz-box"}, "backends": {"nccl": {}, "gloo": {}}}
    argv = ["run", str(tmp_path / "s.yaml"), "--sizes", "1KiB", "--jobs", "1"]
    if where == "inline":
        scenario["presets"] = presets
    else:
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(presets), encoding="utf-8")
        argv += ["--presets", str(tmp_path / "p.yaml")]
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario), encoding="utf-8")
    _check(argv, capsys)
