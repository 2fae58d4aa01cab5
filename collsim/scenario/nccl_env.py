"""Validation and parsing of the NCCL environment variables a scenario may set.

The syntax follows NCCL's own parsing (``NCCL_ALGO``/``NCCL_PROTO``: a comma-separated list of names, matched
case-insensitively, with an optional leading ``^`` meaning "all except"; ``NCCL_P2P_LEVEL``/``NCCL_NET_GDR_LEVEL``:
a path type name or NCCL's legacy integer level). Source: NCCL documentation, "Environment Variables".
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

__all__ = [
    "INT_NCCL_ENV",
    "KNOWN_NCCL_ENV",
    "NCCL_ALGORITHMS",
    "NCCL_LEVELS",
    "NCCL_PROTOCOLS",
    "NcclEnvError",
    "check_env_value",
    "closest_known",
    "parse_algorithms",
    "parse_level",
    "parse_name_list",
    "parse_protocols",
]

#: Every algorithm name NCCL_ALGO can select, in NCCL's canonical capitalisation.
NCCL_ALGORITHMS: tuple[str, ...] = ("Ring", "Tree", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")

#: Extra names NCCL_ALGO accepts that stand for several algorithms ("CollNet" = both CollNet variants).
_ALGO_GROUPS: dict[str, tuple[str, ...]] = {"CollNet": ("CollNetDirect", "CollNetChain")}

#: Every protocol name NCCL_PROTO can select.
NCCL_PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")

#: Path-type names accepted by NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL, nearest first (as nvidia-smi topo -m).
NCCL_LEVELS: tuple[str, ...] = ("LOC", "NVL", "NVB", "PIX", "PXB", "PHB", "SYS")

#: NCCL's legacy integer levels: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 SYS, larger values are SYS
#: (source: NCCL docs, NCCL_P2P_LEVEL "Integer Values (Legacy)").
_LEGACY_LEVELS: tuple[str, ...] = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")

#: Knobs that must be integers.
INT_NCCL_ENV: frozenset[str] = frozenset(
    {
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_PXN_DISABLE",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_BUFFSIZE",
        "NCCL_NVLS_ENABLE",
        "NCCL_NTHREADS",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_CROSS_NIC",
        "NCCL_COLLNET_ENABLE",
    }
)

#: The NCCL variables collsim knows, with a one-line meaning (used for the JSON schema and for warnings).
KNOWN_NCCL_ENV: dict[str, str] = {
    "NCCL_ALGO": "Algorithms NCCL may use: comma-separated from Ring, Tree, CollNetDirect, CollNetChain, CollNet, "
    "NVLS, NVLSTree, PAT; a leading ^ excludes them instead.",
    "NCCL_PROTO": "Protocols NCCL may use: comma-separated from LL, LL128, Simple; a leading ^ excludes them.",
    "NCCL_P2P_DISABLE": "1 disables the P2P transport (GPU-to-GPU over NVLink/PCIe).",
    "NCCL_P2P_LEVEL": "Farthest path on which P2P is used: LOC, NVL, NVB, PIX, PXB, PHB, SYS (or legacy 0..5).",
    "NCCL_SHM_DISABLE": "1 disables the shared-host-memory transport.",
    "NCCL_IB_DISABLE": "1 disables InfiniBand/RoCE verbs; NCCL falls back to sockets (TCP).",
    "NCCL_NET_GDR_LEVEL": "Farthest GPU-NIC path on which GPUDirect RDMA is used: LOC, NVL, NVB, PIX, PXB, PHB, SYS.",
    "NCCL_PXN_DISABLE": "1 disables PXN (sending through an NVLink peer's NIC).",
    "NCCL_MIN_NCHANNELS": "Minimum number of channels (integer).",
    "NCCL_MAX_NCHANNELS": "Maximum number of channels (integer).",
    "NCCL_BUFFSIZE": "Buffer size per channel and protocol in bytes (integer, default 4194304 = 4 MiB).",
    "NCCL_NVLS_ENABLE": "1 enables NVLink SHARP (NVLS) where the NVSwitch supports it, 0 disables it.",
    "NCCL_NTHREADS": "CUDA threads per channel block (integer: 64, 128, 256 or 512).",
    "NCCL_SOCKET_NTHREADS": "CPU helper threads per network connection for the socket transport (integer).",
    "NCCL_NSOCKS_PERTHREAD": "Sockets per helper thread for the socket transport (integer).",
    "NCCL_CROSS_NIC": "0/1/2: whether rings/trees may use different NICs on different nodes.",
    "NCCL_COLLNET_ENABLE": "1 enables CollNet (in-network reduction, e.g. SHARP).",
}


class NcclEnvError(ValueError):
    """A bad value for one NCCL variable; the message says what was expected."""


def parse_name_list(
    value: str, valid: tuple[str, ...], groups: Mapping[str, tuple[str, ...]] | None = None, what: str = "name"
) -> set[str]:
    """Parse NCCL's ``[^]name[,name...]`` list syntax into the set of enabled names.

    Parameters
    ----------
    value : str
        The variable's value, e.g. ``"ring,tree"`` or ``"^LL128"``.
    valid : tuple of str
        Canonical names; matching is case-insensitive.
    groups : mapping, optional
        Extra names that stand for several canonical names.
    what : str
        Word used in error messages ("algorithm", "protocol").

    Returns
    -------
    set of str
        Enabled names in canonical capitalisation.

    Raises
    ------
    NcclEnvError
        An unknown name, an empty list or a list that leaves nothing enabled.
    """
    groups = dict(groups or {})
    lookup: dict[str, tuple[str, ...]] = {n.lower(): (n,) for n in valid}
    lookup.update({g.lower(): members for g, members in groups.items()})
    listing = ", ".join([*valid, *groups])
    text = value.strip()
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    tokens = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in tokens):
        raise NcclEnvError(
            f"expected a comma-separated list of {what}s from {listing} (optionally starting "
            f"with ^ to exclude them), got {value!r}"
        )
    chosen: set[str] = set()
    for tok in tokens:
        if tok.lower() not in lookup:
            raise NcclEnvError(f"unknown {what} {tok!r} in {value!r}; valid {what}s: {listing}")
        chosen.update(lookup[tok.lower()])
    result = set(valid) - chosen if exclude else chosen
    if not result:
        raise NcclEnvError(f"{value!r} leaves no {what} enabled")
    return result


def parse_algorithms(value: str) -> set[str]:
    """Enabled NCCL algorithms for a ``NCCL_ALGO`` value, e.g. ``parse_algorithms("^ring") == {"Tree", ...}``."""
    return parse_name_list(value, NCCL_ALGORITHMS, _ALGO_GROUPS, "algorithm")


def parse_protocols(value: str) -> set[str]:
    """Enabled NCCL protocols for a ``NCCL_PROTO`` value, e.g. ``parse_protocols("^LL") == {"LL128", "Simple"}``."""
    return parse_name_list(value, NCCL_PROTOCOLS, None, "protocol")


def parse_level(value: str) -> str:
    """Canonical path-type name for a ``NCCL_P2P_LEVEL``/``NCCL_NET_GDR_LEVEL`` value.

    Names are case-insensitive; integers use NCCL's legacy numbering (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and 5 SYS).
    """
    text = value.strip()
    if text.upper() in NCCL_LEVELS:
        return text.upper()
    try:
        level = int(text)
    except ValueError:
        level = -1
    if 0 <= level < len(_LEGACY_LEVELS):
        return _LEGACY_LEVELS[level]
    raise NcclEnvError(f"expected a path type from {', '.join(NCCL_LEVELS)} or a legacy integer 0..5, got {value!r}")


def check_env_value(key: str, value: str) -> None:
    """Raise :class:`NcclEnvError` when ``value`` is not valid for the known variable ``key``."""
    if key == "NCCL_ALGO":
        parse_algorithms(value)
    elif key == "NCCL_PROTO":
        parse_protocols(value)
    elif key in ("NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"):
        parse_level(value)
    elif key in INT_NCCL_ENV:
        try:
            number = int(value.strip())
        except ValueError:
            raise NcclEnvError(f"expected an integer, got {value!r}") from None
        if number < 0:
            raise NcclEnvError(f"expected a non-negative integer, got {value!r}")


def closest_known(key: str) -> str | None:
    """The known NCCL variable name closest to ``key`` (difflib), or None when nothing is close."""
    prefix = "NCCL_"
    suffix = key.upper().removeprefix(prefix)  # compare what follows the common prefix
    matches = difflib.get_close_matches(suffix, [k.removeprefix(prefix) for k in KNOWN_NCCL_ENV], n=1, cutoff=0.6)
    return prefix + matches[0] if matches else None
