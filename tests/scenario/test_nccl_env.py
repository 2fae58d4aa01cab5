"""NCCL environment variables: NCCL's list syntax, levels, integer knobs, warnings for unknown names."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsim.nccl_env import NcclEnvError, closest_known
from collsim.scenario import (
    NCCL_ALGORITHMS,
    NcclConfig,
    ScenarioError,
    ScenarioWarning,
    load_scenario,
    parse_algorithms,
    parse_level,
    parse_protocols,
)


def test_algo_syntax() -> None:
    assert parse_algorithms("Ring") == {"Ring"}
    assert parse_algorithms("ring,tree") == {"Ring", "Tree"}
    assert parse_algorithms("RING,nvlstree") == {"Ring", "NVLSTree"}
    assert parse_algorithms("^Ring") == {"Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"}
    assert parse_algorithms("collnetdirect,CollNetChain") == {"CollNetDirect", "CollNetChain"}
    assert parse_algorithms("^collnetdirect,collnetchain,nvls,nvlstree,pat") == {"Ring", "Tree"}
    assert parse_algorithms("ring,") == parse_algorithms(",ring") == {"Ring"}  # NCCL's strtok skips empty entries


@pytest.mark.parametrize("bad", ["", "^", ",", "ring;tree", "Ring Tree", "allreduce:", "RING , nvlstree", "collnet",
                                 "ring; allreduce:tree"])  # fmt: skip
def test_algo_syntax_errors(bad: str) -> None:
    with pytest.raises(NcclEnvError):
        parse_algorithms(bad)


def test_algo_and_proto_per_collective() -> None:
    """NCCL 2.24's syntax (tuning.cc parseList): the first entry for every collective, later ones for one each,
    case-insensitive prefixes, ^ within an entry; a collective no entry names keeps NCCL's default (None)."""
    value = "ring,collnetdirect;AllReduce:tree,collnetdirect;broadcast:ring"
    assert parse_algorithms(value) == {"Ring", "CollNetDirect"}
    assert parse_algorithms(value, "allreduce") == {"Tree", "CollNetDirect"}
    assert parse_algorithms(value, "broadcast") == {"Ring"}
    assert parse_algorithms(value, "allgather") == {"Ring", "CollNetDirect"}
    assert parse_algorithms("allreduce:^ring", "allreduce") == set(NCCL_ALGORITHMS) - {"Ring"}
    assert parse_algorithms("allreduce:^ring", "allgather") is None
    assert parse_protocols("LL,Simple;allreduce:^LL", "allreduce") == {"LL128", "Simple"}
    assert parse_protocols("^LL128;allreduce:LL128", "reduce_scatter") == {"LL", "Simple"}
    assert parse_protocols("^LL128;reducescatter:LL128", "reduce_scatter") == {"LL128"}
    assert parse_algorithms("ring;", "allreduce") == {"Ring"}  # NCCL's strtok skips empty entries
    for bad in ("ring;tree", "ring;allreduce:", "bogus:ring", "allreduce:tree;ring", ";", " ; "):
        with pytest.raises(NcclEnvError):
            parse_algorithms(bad)


def test_per_collective_entries_choose_for_their_collective() -> None:
    """On HGX H100 at 1 MiB NCCL picks NVLS for allreduce; 'allreduce:tree' makes it Tree there and leaves
    all-gather alone; with NCCL 2.23 the prefixed syntax is an error naming the release that reads it."""
    from collsim.api import Simulator

    sim = Simulator.from_source("hgx-h100", ["backends.nccl.env.NCCL_ALGO=ring;allreduce:tree"])
    assert sim.simulate_one("nccl", 1 << 20).algorithm == "Tree"
    assert sim.simulate_one("nccl", 1 << 20, collective="allgather").algorithm == "Ring"
    old = Simulator.from_source(
        "hgx-h100", ["backends.nccl.env.NCCL_ALGO=allreduce:tree", 'backends.nccl.version="2.23.4"']
    )
    with pytest.raises(ScenarioError, match=r"one collective \('allreduce:...'\) came with NCCL 2\.24"):
        old.simulate_one("nccl", 1 << 20)


def test_proto_syntax() -> None:
    assert parse_protocols("simple") == {"Simple"}
    assert parse_protocols("^LL") == {"LL128", "Simple"}
    assert parse_protocols("ll,ll128") == {"LL", "LL128"}


def test_levels() -> None:
    assert [parse_level(v) for v in ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "NVB")] == [
        "LOC",
        "NVL",
        "PIX",
        "PXB",
        "PHB",
        "SYS",
        "NVB",
    ]
    # legacy integers: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS; names only as NCCL matches them (strcmp, LOC to
    # SYS: no NET, no lower case)
    assert [parse_level(str(i)) for i in range(7)] == ["LOC", "PIX", "PXB", "PHB", "SYS", "SYS", "SYS"]
    for bad in ("-1", "NODE", "", "net", "pix"):
        with pytest.raises(NcclEnvError):
            parse_level(bad)


def test_config_accessors() -> None:
    cfg = NcclConfig.model_validate(
        {
            "env": {
                "NCCL_ALGO": "^tree",
                "NCCL_PROTO": "LL128",
                "NCCL_P2P_LEVEL": 2,
                "NCCL_NET_GDR_LEVEL": "PHB",
                "NCCL_P2P_DISABLE": True,
                "NCCL_SHM_DISABLE": False,
                "NCCL_MAX_NCHANNELS": 16,
            }
        }
    )
    assert cfg.algorithms() == set(NCCL_ALGORITHMS) - {"Tree"}
    assert cfg.protocols() == {"LL128"}
    assert cfg.p2p_level() == "PXB"
    assert cfg.net_gdr_level() == "PHB"
    assert cfg.env["NCCL_P2P_DISABLE"] == "1" and cfg.env["NCCL_SHM_DISABLE"] == "0"  # booleans as NCCL integers
    assert cfg.env_int("NCCL_MAX_NCHANNELS") == 16
    assert cfg.env_int("NCCL_MIN_NCHANNELS", 2) == 2
    empty = NcclConfig.model_validate({})
    assert (empty.algorithms(), empty.protocols(), empty.p2p_level(), empty.net_gdr_level()) == (None,) * 4
    assert empty.enabled is True


def test_unknown_nccl_var_warns_with_closest(write: Callable[[str, str], Path]) -> None:
    path = write("s.yaml", "name: t\ncluster: {node: node.yaml}\nbackends: {nccl: {env: {NCCL_ALOG: Ring}}}\n")
    with pytest.warns(ScenarioWarning) as record:
        s = load_scenario(path)
    assert len(record) == 1
    assert str(record[0].message) == (
        f"{path}: backends.nccl.env.NCCL_ALOG: unknown NCCL variable, collsim ignores it; did you mean NCCL_ALGO?"
    )
    assert s.backends.nccl is not None and s.backends.nccl.env == {"NCCL_ALOG": "Ring"}


def test_unknown_nccl_var_without_close_match_warns() -> None:
    pattern = r"^backends\.nccl\.env\.NCCL_FROBNICATE: unknown NCCL variable, collsim ignores it$"
    with pytest.warns(ScenarioWarning, match=pattern):
        NcclConfig.model_validate({"env": {"NCCL_FROBNICATE": "1"}})


def test_release_as_a_variable_is_an_error_naming_the_field(write: Callable[[str, str], Path]) -> None:
    """NCCL_VERSION is no variable NCCL reads: a warning would leave the run on the latest release, so it is an error
    pointing at backends.nccl.version with the release taken from the value (as NCCL_DEBUG=INFO prints it)."""
    path = write("s.yaml", "name: t\ncluster: {node: node.yaml}\n"
                           "backends: {nccl: {env: {NCCL_VERSION: 2.21.5+cuda12.4}}}\n")  # fmt: skip
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value) == (
        f"{path}: backends.nccl.env.NCCL_VERSION: NCCL reads no such variable; the release a run used goes in "
        "backends.nccl.version (version: '2.21.5')"
    )
    fixed = load_scenario(write("v.yaml", "name: t\ncluster: {node: node.yaml}\nbackends: {nccl: {version: 2.21.5}}\n"))
    assert fixed.backends.nccl is not None and fixed.backends.nccl.version == "2.21.5"


def test_nccl_variables_collsim_does_not_model_warn_as_such() -> None:
    """A variable NCCL reads (its sources' NCCL_PARAM names) that collsim does not model is named as that, not as
    unknown; one that changes no collective's time (logging, interface names, timeouts; PyTorch's NCCL_* names) is
    accepted silently."""
    pattern = r"^backends\.nccl\.env\.NCCL_IB_QPS_PER_CONNECTION: an NCCL variable collsim does not model; ignored$"
    with pytest.warns(ScenarioWarning, match=pattern):
        NcclConfig.model_validate({"env": {"NCCL_IB_QPS_PER_CONNECTION": "4"}})
    inert = {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_TIMEOUT": 22,
             "NCCL_ASYNC_ERROR_HANDLING": 1, "NCCL_DEBUG_SUBSYS": "INIT,GRAPH"}  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        NcclConfig.model_validate({"env": inert})
    assert [str(w.message) for w in caught] == []


def test_known_vars_do_not_warn() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = NcclConfig.model_validate({"env": {"NCCL_ALGO": "Ring", "NCCL_CROSS_NIC": 0, "NCCL_NVLS_ENABLE": 0}})
    assert [str(w.message) for w in caught] == []
    assert cfg.env["NCCL_CROSS_NIC"] == "0"


def test_unmodelled_vars_and_cross_nic_say_what_is_not_modelled() -> None:
    """NCCL_IB_QPS_PER_CONNECTION (queue pairs per connection) is not modelled: a warning says so; NCCL_CROSS_NIC=1
    warns too (collsim's rings keep one rail per channel), 0 and 2 do not. NCCL_NTHREADS is modelled since
    2026-12-05 (tests/backends/test_nccl_threads.py) and passes silently."""
    with pytest.warns(ScenarioWarning, match=r"NCCL_IB_QPS_PER_CONNECTION: an NCCL variable collsim does not model"):
        NcclConfig.model_validate({"env": {"NCCL_IB_QPS_PER_CONNECTION": 2}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        NcclConfig.model_validate({"env": {"NCCL_NTHREADS": 256, "NCCL_LL128_NTHREADS": 320,
                                           "NCCL_THREAD_THRESHOLDS": "-1 -1 32"}})  # fmt: skip
    assert caught == []
    with pytest.warns(ScenarioWarning, match=r"NCCL_CROSS_NIC=1: rings that change rail between nodes are not"):
        NcclConfig.model_validate({"env": {"NCCL_CROSS_NIC": 1}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        NcclConfig.model_validate({"env": {"NCCL_CROSS_NIC": 0}})
        NcclConfig.model_validate({"env": {"NCCL_CROSS_NIC": 2}})
    assert caught == []


def test_closest_known() -> None:
    assert closest_known("NCCL_PROT") == "NCCL_PROTO"
    assert closest_known("NCCL_P2P_DISABEL") == "NCCL_P2P_DISABLE"
    assert closest_known("NCCL_DEBUG") is None


@given(st.lists(st.sampled_from(NCCL_ALGORITHMS), min_size=1, max_size=7), st.booleans())
def test_algo_list_property(names: list[str], exclude: bool) -> None:
    mixed = [n.lower() if i % 2 else n.upper() for i, n in enumerate(names)]
    text = ("^" if exclude else "") + ",".join(mixed)
    expected = set(NCCL_ALGORITHMS) - set(names) if exclude else set(names)
    if not expected:
        with pytest.raises(NcclEnvError):
            parse_algorithms(text)
    else:
        assert parse_algorithms(text) == expected


@given(st.lists(st.sampled_from(["ring", "Tree", "nvls", "allreduce", "AllGather", "bogus", ":", ";", "^", ",", " ",
                                 ""]), max_size=12).map("".join))  # fmt: skip
def test_per_collective_syntax_never_crashes(value: str) -> None:
    """Any mix of names, prefixes and separators parses or raises NcclEnvError; what parses gives each collective a
    non-empty set of known algorithms."""
    try:
        lists = [parse_algorithms(value, c) for c in (None, "allreduce", "allgather", "broadcast")]
    except NcclEnvError:
        return
    assert all(x is None or (x and x <= set(NCCL_ALGORITHMS)) for x in lists)
