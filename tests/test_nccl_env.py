"""collsim.nccl_env: the one NCCL environment parser, shared by scenario validation and the NCCL backend."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsim.nccl_env import CHANNEL_BOUND_ENV, INT_NCCL_ENV, NcclEnvError, NcclOptions, check_env_value, parse_level

_KNOBS = ["NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL", *sorted(INT_NCCL_ENV | CHANNEL_BOUND_ENV)]
_VALUES = st.one_of(
    st.sampled_from(["ring", "^tree", "collnet", "nvls,ring", "LL", "^LL128", "Simple", "ll256", "", ",", "^"]),
    st.sampled_from(["PIX", "pxb", "NET", "sys", "LOC", "nvl", "NVB", "PHB", "PXN", "0", "4", "5", "6", "17", "-1"]),
    st.integers(min_value=-3, max_value=64).map(str),
    st.text(alphabet="abcNV^,0123456789 ", max_size=6),
)


@given(st.sampled_from(_KNOBS), _VALUES)
def test_validation_and_the_backend_accept_exactly_the_same_values(key: str, value: str) -> None:
    # scenario validation (check_env_value) and the backend (NcclOptions.from_env) read a value with one parser:
    # one accepts it iff the other does (an empty value is "unset" for the backend and never reaches it from a
    # validated scenario)
    try:
        check_env_value(key, value)
        valid = True
    except NcclEnvError:
        valid = False
    if not value.strip():
        return
    try:
        NcclOptions.from_env({key: value})
        parsed = True
    except NcclEnvError as exc:
        assert str(exc).startswith(f"{key}={value.strip()!r}: ")
        parsed = False
    assert parsed == valid


def test_legacy_levels_above_four_are_sys_and_names_are_ncclss_exactly() -> None:
    """paths.cc ncclGetLevel (v2.12.12-1 to v2.30.7-1): strcmp against the path names LOC .. SYS, so 'pix' and NET
    are not read (NCCL keeps its default; collsim took 'loc' as LOC, P2P off, 16x slower, and NET as a level)."""
    assert [parse_level(v) for v in ("0", "1", "2", "3", "4", "5", "6", "99")] == [
        "LOC", "PIX", "PXB", "PHB", "SYS", "SYS", "SYS", "SYS",
    ]  # fmt: skip
    assert NcclOptions.from_env({"NCCL_P2P_LEVEL": 6}).p2p_level == "SYS"
    assert NcclOptions.from_env({"NCCL_P2P_LEVEL": "PXN"}).p2p_level == "P2C"  # read by NCCL, bounds as P2C here
    for text in ("net", "NET", "loc", "Sys"):
        with pytest.raises(NcclEnvError, match="would ignore"):
            NcclOptions.from_env({"NCCL_NET_GDR_LEVEL": text})
    with pytest.raises(NcclEnvError, match="legacy integer"):
        parse_level("-1")


def test_options_from_env() -> None:
    opts = NcclOptions.from_env(
        {"NCCL_ALGO": "collnetdirect,collnetchain", "NCCL_PROTO": "^LL", "NCCL_SOCKET_NTHREADS": 4,
         "NCCL_NSOCKS_PERTHREAD": "2", "NCCL_NVLS_ENABLE": "0", "NCCL_BUFFSIZE": ""}
    )  # fmt: skip
    assert opts.algorithms == {"CollNetDirect", "CollNetChain"}
    assert opts.protocols == {"LL128", "Simple"}
    assert (opts.socket_nthreads, opts.socket_nsocks) == (4, 2)
    assert not opts.nvls_enable
    assert opts.buffsize is None  # empty means unset
    with pytest.raises(NcclEnvError, match=r"NCCL_MAX_NCHANNELS='x': expected an integer"):
        NcclOptions.from_env({"NCCL_MAX_NCHANNELS": "x"})
    every = "^ring,tree,collnetdirect,collnetchain,nvls,nvlstree,pat"
    with pytest.raises(NcclEnvError, match=r"NCCL_ALGO='\^ring,tree,collnetdirect,.*': .* leaves no"):
        NcclOptions.from_env({"NCCL_ALGO": every})


@pytest.mark.parametrize("value", ["0", "1", "65535"])
def test_a_buffsize_below_one_pass_per_step_is_refused(value: str) -> None:
    # NCCL takes any NCCL_BUFFSIZE but -2 as it is (init.cc computeBuffSizes); collsim refuses what would hang it
    with pytest.raises(NcclEnvError, match=rf"NCCL_BUFFSIZE='{value}': expected at least 65536 bytes"):
        NcclOptions.from_env({"NCCL_BUFFSIZE": value})
    assert NcclOptions.from_env({"NCCL_BUFFSIZE": "65536"}).buffsize == 65536


def test_values_nccl_takes_are_taken_as_nccl_takes_them() -> None:
    # NCCL's parseList skips empty entries (strtok), and connect.cc reads a channel bound of -2 as unset, a maximum
    # below 1 as 1 and a minimum below 0 as 0; collsim refused them, where a job's environment should paste as it is
    assert NcclOptions.from_env({"NCCL_ALGO": "Ring,,Tree"}).algorithms == frozenset({"Ring", "Tree"})
    opts = NcclOptions.from_env({"NCCL_MAX_NCHANNELS": "-1", "NCCL_MIN_NCHANNELS": "-5"})
    assert (opts.max_channels, opts.min_channels) == (0, 0)
    assert NcclOptions.from_env({"NCCL_MAX_NCHANNELS": "-2"}).max_channels is None
    with pytest.raises(NcclEnvError, match="expected a comma-separated list"):
        NcclOptions.from_env({"NCCL_ALGO": ",,"})


def test_integers_and_switches_as_nccl_reads_them() -> None:
    """param.cc strtoll(str, ..., 0): hexadecimal and octal; paths.cc and shm.cc disable only on 1; connect.cc reads
    the legacy NCCL_MIN_NRINGS / NCCL_MAX_NRINGS under NCCL_*_NCHANNELS (they were ignored as not modelled)."""
    opts = NcclOptions.from_env({"NCCL_BUFFSIZE": "0x800000", "NCCL_MIN_CTAS": "010", "NCCL_P2P_DISABLE": "2",
                                 "NCCL_SHM_DISABLE": "2", "NCCL_MAX_NRINGS": "4"})  # fmt: skip
    assert (opts.buffsize, opts.min_ctas, opts.p2p_disable, opts.shm_disable) == (8 << 20, 8, False, False)
    assert opts.max_channels == 4
    assert NcclOptions.from_env({"NCCL_MAX_NRINGS": "4", "NCCL_MAX_NCHANNELS": "8"}).max_channels == 8
    assert NcclOptions.from_env({"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": 1}).p2p_disable
