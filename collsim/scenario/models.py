"""Typed models of a collsim scenario (pydantic v2, unknown keys rejected).

A scenario says which cluster to build (a node template, how many nodes, the fabric between them), which
collectives to time (sizes in bytes, data type, reduction op) and which backends to simulate (NCCL with its
environment variables, Gloo with its algorithm and device). Quantities stay as the strings the user wrote
("8B:8GiB:x2", "100Gb/s"); accessors such as :meth:`Scenario.sizes` return SI numbers. The names a field accepts
(collectives, fabric topologies, Gloo's algorithms, reduction ops ...) are :mod:`collsim.vocab`'s.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from collsim.nccl_env import (
    INERT_NCCL_ENV,
    KNOWN_NCCL_ENV,
    NCCL_ENV_NAMES,
    PLUGIN_ENV,
    NcclEnvError,
    check_env_value,
    closest_known,
    parse_algorithms,
    parse_level,
    parse_protocols,
)
from collsim.safeyaml import short_repr
from collsim.scenario.errors import ScenarioError, ScenarioWarning
from collsim.units import (
    DTYPE_SIZES,
    MAX_SWEEP_SIZES,
    NCCL_TESTS_TYPE_NAMES,
    UnitError,
    parse_bandwidth,
    parse_size,
    parse_size_range,
    parse_time,
)
from collsim.vocab import (
    COLLECTIVE_ALIASES,
    COLLECTIVES,
    FABRIC_TOPOLOGIES,
    FABRIC_TRANSPORTS,
    GLOO_ALGORITHMS,
    GLOO_TRANSPORTS,
    LINK_KINDS,
    REDUCE_OPS,
    TENSOR_DEVICES,
    canonical_collective,
)

__all__ = [
    "BackendsConfig",
    "BackgroundPerturbConfig",
    "ClusterConfig",
    "DownPerturbConfig",
    "EngineConfig",
    "FabricConfig",
    "GlooConfig",
    "LinkPerturbConfig",
    "NcclConfig",
    "NoiseConfig",
    "PerturbConfig",
    "PresetsConfig",
    "RankPerturbConfig",
    "Scenario",
    "SwitchConfig",
    "TrainingConfig",
    "WorkloadConfig",
    "custom_error",
    "is_path_like",
]

# Literal types built from the shared vocabulary (collsim.vocab): pydantic validates the values and writes them as
# the JSON Schema's enums; mypy, which cannot read a Literal built from a tuple, sees plain strings.
if TYPE_CHECKING:
    FabricTopology = str
    FabricTransport = str
    GlooAlgorithm = str
    GlooTransport = str
    LinkKind = str
    ReduceOp = str
    TensorDevice = str
else:
    FabricTopology = Literal[FABRIC_TOPOLOGIES]
    FabricTransport = Literal[FABRIC_TRANSPORTS]
    GlooAlgorithm = Literal[GLOO_ALGORITHMS]
    GlooTransport = Literal[GLOO_TRANSPORTS]
    LinkKind = Literal[LINK_KINDS]
    ReduceOp = Literal[REDUCE_OPS]
    TensorDevice = Literal[TENSOR_DEVICES]

#: nccl-tests type names ("float", "half") map to collsim's PyTorch-style names ("float32", "float16").
_DTYPE_ALIASES: dict[str, str] = {v: k for k, v in NCCL_TESTS_TYPE_NAMES.items()}

#: Unknown keys are errors; ``.inf`` and ``.nan`` are refused where a number is expected (a finite one always is).
_STRICT = ConfigDict(extra="forbid", validate_default=False, allow_inf_nan=False, validate_assignment=True)

#: names users try for the NCCL release under backends.nccl.env (it is backends.nccl.version)
_RELEASE_NAMES = frozenset({"NCCL_VERSION", "NCCL_VERSION_CODE", "NCCL_RELEASE"})


def _release_in(raw: Any) -> str:
    """The release in a value such as '2.21.5+cuda12.4' (as NCCL_DEBUG=INFO prints it), for an error's hint."""
    found = re.search(r"\d+\.\d+(?:\.\d+)?", str(raw))
    return found.group(0) if found else "2.21.5"


def custom_error(message: str, subfield: str | None = None) -> PydanticCustomError:
    """A pydantic error whose text is exactly ``message``; ``subfield`` is appended to the field path by the loader."""
    ctx: dict[str, Any] = {"text": message}
    if subfield is not None:
        ctx["subfield"] = subfield
    return PydanticCustomError("scenario", "{text}", ctx)


def _check_quantity(value: Any, parse: Callable[[str], float], unit: str, examples: str) -> Any:
    """Accept a quantity string the parser reads, keep it as given. A number without a unit is read as the string
    it was written as: the parser refuses it and lists the units (only a duration of 0 needs none)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = repr(value)
    if not isinstance(value, str):
        raise custom_error(f"expected a {unit} string such as {examples}, got {short_repr(value)}")
    try:
        parse(value)
    except UnitError as exc:
        raise custom_error(str(exc)) from None
    return value


def _check_bandwidth(value: Any) -> Any:
    return _check_quantity(value, parse_bandwidth, "bandwidth", "'100Gb/s' or '25GB/s'")


class SwitchConfig(BaseModel):
    """Network switch parameters for the fabric (passed to the topology layer as given)."""

    model_config = _STRICT

    preset: str | None = Field(
        None,
        description="Switch preset of topologies/presets/fabric.yaml (radix, port speed, link kinds), e.g. "
        "'quantum-2-qm9700'.",
    )
    latency: Annotated[str | None, _duration_schema(True)] = Field(
        None, description="Port-to-port latency of one switch hop, e.g. '300ns'."
    )
    radix: StrictInt | None = Field(None, ge=2, description="Ports per switch (fat_tree: radix/2 go down to NICs).")

    @field_validator("latency", mode="before")
    @classmethod
    def _latency(cls, value: Any) -> Any:
        return _check_quantity(value, parse_time, "duration", "'300ns' or '1us'")


class FabricConfig(BaseModel):
    """The network joining the nodes (only used when ``cluster.nodes > 1``)."""

    model_config = _STRICT

    topology: FabricTopology = Field(
        description="single_switch: every NIC on one switch; rail_optimized: NIC i of every node on leaf i; "
        "fat_tree: two-tier leaf/spine."
    )
    transport: FabricTransport = Field("rdma", description="rdma: InfiniBand/RoCE verbs; tcp: sockets.")
    nic: str | None = Field(None, description="NIC preset name replacing the node's own NICs, e.g. 'eth-100g'.")
    nic_speed: str | None = Field(None, description="Override of the NIC speed per direction, e.g. '100Gb/s'.")
    nics_per_node: StrictInt | None = Field(
        None,
        ge=1,
        description="Use k NICs of each node: the first k of the template's nic_population order (default: spread "
        "over PCIe switches and sockets, docs/nodes.md 'NIC population').",
    )
    nics_per_switch: StrictInt | None = Field(
        None, ge=1, description="Use at most this many NICs on each PCIe switch (in the population order)."
    )
    nics_per_socket: StrictInt | None = Field(
        None, ge=1, description="Use at most this many NICs on each CPU socket (in the population order)."
    )
    nics: list[str] | None = Field(
        None,
        min_length=1,
        description="The node template's NIC slots to use, e.g. [nic0, nic2, nic4, nic6] or ['nic[0-3]'] (instead "
        "of nics_per_node, nics_per_switch and nics_per_socket).",
    )
    gpudirect: StrictBool = Field(True, description="GPUDirect RDMA: NICs read/write GPU memory directly.")
    switch: SwitchConfig | None = Field(None, description="Switch latency and radix.")
    oversubscription: Annotated[StrictFloat, Field(gt=0)] | Annotated[StrictInt, Field(gt=0)] = Field(
        1.0,
        description="fat_tree and rail_optimized: a leaf's downlink/uplink bandwidth ratio (1.0 = full bisection; "
        "no effect with one leaf).",
    )
    in_network_reduction: StrictBool = Field(False, description="Switches can reduce (SHARP/CollNet).")

    @field_validator("nic_speed", mode="before")
    @classmethod
    def _nic_speed(cls, value: Any) -> Any:
        return _check_bandwidth(value)

    def to_topology_dict(self) -> dict[str, Any]:
        """The plain dict ``collsim.topology.load_topology(fabric=...)`` takes (unset optional keys left out)."""
        return self.model_dump(mode="json", exclude_none=True)


class ClusterConfig(BaseModel):
    """Which machines: a node template repeated ``nodes`` times, joined by ``fabric``."""

    model_config = _STRICT

    node: str = Field(
        min_length=1,
        description="Node template name (topologies/nodes/<name>.yaml) or a path to a template file, relative "
        "to the scenario file.",
    )
    nodes: StrictInt = Field(
        1,
        ge=1,
        le=2048,
        description="Number of nodes (collsim's limit 2048: building the topology of 4096 H100 nodes took 36 s and "
        "0.36 GB on a 2-core machine, 100000 nodes ran out of 5 GB).",
    )
    node_params: dict[str, Any] = Field(
        default_factory=dict,
        description="Parameters of a parametrised template, e.g. pcie-workstation: gpus, pcie_gen, pcie_switch, "
        "gpu, p2p.",
    )
    fabric: FabricConfig | None = Field(None, validate_default=True, description="Required when nodes > 1.")
    visible_gpus: list[StrictInt] | None = Field(
        None,
        min_length=1,
        description="The GPUs of each node the job runs on, by local index, as CUDA_VISIBLE_DEVICES lists them "
        "(e.g. [0] for one GPU a node, as a network check with one process a node runs); the others are left out "
        "of the cluster as NCCL's topology leaves them out (it holds its communicator's GPUs and every NIC). "
        "Default: every GPU.",
    )
    ranks_per_gpu: StrictInt = Field(
        1,
        ge=1,
        le=64,
        description="Processes (ranks) sharing each GPU, e.g. 8 torch.distributed processes on one GPU; ranks in "
        "blocks (rank r of a node on its GPU r // ranks_per_gpu). Gloo only: NCCL refuses two ranks on one GPU "
        "('Duplicate GPU detected', NCCL src/init.cc). Their staging copies share the GPU's PCIe link.",
    )

    @field_validator("fabric")
    @classmethod
    def _fabric_needed(cls, value: FabricConfig | None, info: ValidationInfo) -> FabricConfig | None:
        nodes = info.data.get("nodes")
        if value is None and isinstance(nodes, int) and nodes > 1:
            raise custom_error(
                f"required when cluster.nodes > 1 (got nodes: {nodes}); e.g. fabric: {{topology: rail_optimized, "
                f"transport: rdma}}; topologies: {', '.join(FABRIC_TOPOLOGIES)}"
            )
        return value


#: The names a scenario may give a collective: collsim's and the nccl-tests and PyTorch spellings the loader reads
#: as them (vocab.COLLECTIVE_ALIASES; the loader also takes any letter case and '-' for '_').
_COLLECTIVE_NAMES = list(dict.fromkeys([*COLLECTIVES, *COLLECTIVE_ALIASES]))
_COLLECTIVE_SCHEMA: dict[str, Any] = {
    "description": "Collective(s) to time: one name or a list (collsim's names, or nccl-tests' and PyTorch's: "
    "all_reduce, all_gather, reducescatter, all_to_all ...).",
    "anyOf": [
        {"type": "string", "enum": _COLLECTIVE_NAMES},
        {"type": "array", "items": {"type": "string", "enum": _COLLECTIVE_NAMES}, "minItems": 1},
    ],
}


def _duration_schema(optional: bool) -> WithJsonSchema:
    """A duration field's schema: a string with a unit ('1us'), or a bare 0 (the loader reads it as no time)."""
    kinds: list[dict[str, Any]] = [{"type": "string"}, {"const": 0}]
    if optional:
        kinds.append({"type": "null"})
    return WithJsonSchema({"anyOf": kinds})
_SIZES_SCHEMA: dict[str, Any] = {
    "description": "Message sizes: a sweep 'MIN:MAX:xFACTOR' or 'MIN:MAX:+STEP' (e.g. '8B:8GiB:x2'), a "
    "comma-separated list, one size, or a list of sizes (strings like '1MiB'; a number without a unit is bytes).",
    "anyOf": [
        {"type": "string"},
        {"type": "number", "minimum": 0},
        {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number", "minimum": 0}]}, "minItems": 1},
    ],
}


class WorkloadConfig(BaseModel):
    """What to time: collectives, message sizes, data type and reduction."""

    model_config = _STRICT

    collective: Annotated[str | list[str], WithJsonSchema(_COLLECTIVE_SCHEMA)] = "allreduce"
    dtype: str = Field("float32", description=f"Element type: {', '.join(DTYPE_SIZES)}.")
    op: ReduceOp = Field("sum", description="Reduction operation.")
    sizes: Annotated[str | int | float | list[int | float | str], WithJsonSchema(_SIZES_SCHEMA)] = "8B:8GiB:x2"
    root: StrictInt = Field(0, ge=0, description="Root rank of broadcast and reduce.")
    peers: list[StrictInt] | None = Field(
        None,
        description="sendrecv: one send from the first rank to the second; unset: NCCL as nccl-tests runs it (every "
        "rank to the next), Gloo rank 0 to rank 1.",
    )
    gpus_per_process: StrictInt = Field(
        1,
        ge=1,
        description="GPUs one process drives (nccl-tests -g): their kernels launch one after another from one thread; "
        "ranks in blocks of this many, each block on one host (a GB200 NVL72 rack's tray holds 4).",
    )
    cores_per_process: float | None = Field(
        None,
        gt=0,
        description="CPU cores each rank's process may run on (taskset -c, a container's CPU limit, Slurm's "
        "--cpus-per-task; fractions allowed): Gloo's TCP sends and receives, reductions and copies of a rank, and a "
        "CPU rank's training step, share them. Unset: no limit but the node's cores, which its processes share.",
    )
    host_overhead: Annotated[str, _duration_schema(False)] = Field(
        "none",
        description="The host's per-call work inside each timed NCCL collective: 'none' (calls queued back to back, "
        "as nccl-tests times them: it hides behind the GPU), 'torch' (one torch.distributed call timed on an idle "
        "GPU, CUDA events around it: PyTorch's per-call host overhead, topologies/software/nccl.yaml), or a "
        "duration you measured, e.g. '18us'.",
    )

    @field_validator("collective", mode="before")
    @classmethod
    def _collective(cls, value: Any) -> list[str]:
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items:
            raise custom_error(
                f"expected a collective name or a non-empty list of them ({', '.join(COLLECTIVES)}), "
                f"got {short_repr(value)}"
            )
        out: list[str] = []
        for item in items:
            try:
                name = canonical_collective(item, COLLECTIVES)
            except ValueError:
                raise custom_error(f"unknown collective {short_repr(item)}; valid: {', '.join(COLLECTIVES)}") from None
            if name not in out:
                out.append(name)
        return out

    @field_validator("dtype", mode="before")
    @classmethod
    def _dtype(cls, value: Any) -> str:
        if isinstance(value, str):
            key = value.strip().lower()
            key = _DTYPE_ALIASES.get(key, key)
            if key in DTYPE_SIZES:
                return key
        raise custom_error(f"unknown dtype {short_repr(value)}; valid: {', '.join(DTYPE_SIZES)}")

    @field_validator("op", mode="before")
    @classmethod
    def _op(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("sizes", mode="before")
    @classmethod
    def _sizes(cls, value: Any) -> Any:
        try:
            sizes = _parse_sizes(value)
        except UnitError as exc:
            raise custom_error(f"{exc} (expected e.g. '8B:8GiB:x2', '1MiB', or a list of sizes)") from None
        if not sizes:
            raise custom_error(f"no sizes in {short_repr(value)}")
        return value

    @field_validator("host_overhead", mode="before")
    @classmethod
    def _host_overhead(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() in ("none", "torch"):
            return value.strip().lower()
        expected = f"expected 'none', 'torch' or a duration such as '18us', got {short_repr(value)}"
        if value == 0 and not isinstance(value, bool):  # a bare 0 (YAML reads it as a number): no host time
            return "none"
        if not isinstance(value, str):
            raise custom_error(expected)
        try:
            parse_time(value)
        except UnitError as exc:
            raise custom_error(f"{expected} ({exc})") from None
        return value

    def host_overhead_value(self) -> float | Literal["torch"]:
        """``host_overhead`` as seconds, or ``"torch"`` (PyTorch's figure, resolved by the NCCL backend)."""
        if self.host_overhead == "torch":
            return "torch"
        return 0.0 if self.host_overhead == "none" else parse_time(self.host_overhead)

    @field_validator("peers")
    @classmethod
    def _peers(cls, value: list[int] | None) -> list[int] | None:
        if value is None:
            return None
        if len(value) != 2 or value[0] == value[1] or min(value) < 0:
            raise custom_error(f"expected two different non-negative ranks, e.g. [0, 1], got {short_repr(value)}")
        return value


def _parse_sizes(value: Any) -> list[int]:
    """Sizes in bytes from the forms ``WorkloadConfig.sizes`` accepts (a number is bytes); raises UnitError."""
    if isinstance(value, bool):
        raise UnitError(f"expected sizes, got {short_repr(value)}")
    if isinstance(value, (int, float)):
        return [parse_size(value)]
    if isinstance(value, str):
        return parse_size_range(value)
    if isinstance(value, list):
        if len(value) > MAX_SWEEP_SIZES:
            raise UnitError(f"{len(value)} sizes; at most {MAX_SWEEP_SIZES}")
        out: list[int] = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (int, float, str)):
                raise UnitError(f"list item {short_repr(item)} is not a size")
            out.append(parse_size(item))
        return out
    raise UnitError(f"cannot read {short_repr(value)} as sizes")


def _env_value_str(value: Any) -> str | None:
    if isinstance(value, bool):
        return "1" if value else "0"  # NCCL reads booleans as integers
    if isinstance(value, (int, float, str)):
        return str(value)
    return None


_ENV_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "NCCL environment variables (strings; numbers and booleans are converted).",
    "propertyNames": {"pattern": "^(NCCL_|OFI_NCCL_TUNER_TYPE$)"},
    "properties": {k: {"type": ["string", "integer", "boolean"], "description": v} for k, v in KNOWN_NCCL_ENV.items()},
    "additionalProperties": {"type": ["string", "integer", "number", "boolean"]},
}


def _parse_version(text: str) -> tuple[int, int, int] | None:
    """``"2.18.5"``, ``"2.18.5-1"`` (a release tag) or ``"2.21"`` as (major, minor, patch); None if not a version.

    >>> _parse_version("2.18.5-1"), _parse_version("2.21"), _parse_version("two")
    ((2, 18, 5), (2, 21, 0), None)
    """
    m = re.fullmatch(r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,3}))?(?:-\d{1,3})?", text)
    return None if m is None else (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


class NcclConfig(BaseModel):
    """The NCCL backend: whether to simulate it and its environment variables."""

    model_config = _STRICT

    enabled: StrictBool = Field(True, description="Simulate NCCL.")
    env: Annotated[dict[str, str], WithJsonSchema(_ENV_SCHEMA)] = Field(default_factory=dict)
    version: str | None = Field(
        None,
        description="The NCCL version the run used, e.g. '2.18.5' (NCCL_DEBUG=INFO prints it): selects behaviours "
        "that changed between versions (docs/modelling.md). Unset: the current NCCL as collsim follows it.",
    )

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, float):  # YAML reads 2.20 as the number 2.2: which minor was meant is lost
            raise custom_error(f"write the version as a string ('2.18.5', \"2.20\"): {value!r} was read as a number")
        text = value.strip() if isinstance(value, str) else None
        if text is None or _parse_version(text) is None:
            raise custom_error(f"expected an NCCL version such as '2.18.5' or '2.21', got {short_repr(value)}")
        return text

    def version_tuple(self) -> tuple[int, int, int] | None:
        """``version`` as (major, minor, patch), patch 0 when not given; None when unset."""
        return None if self.version is None else _parse_version(self.version)

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise custom_error(f"expected a mapping of NCCL_* variables to values, got {short_repr(value)}")
        out: dict[str, str] = {}
        for key, raw in value.items():
            skey = str(key)
            if not skey.startswith("NCCL_") and skey not in PLUGIN_ENV:
                raise custom_error(
                    f"not an NCCL variable (names start with NCCL_; of a network plugin's, collsim reads "
                    f"{', '.join(sorted(PLUGIN_ENV))}); known: {', '.join(KNOWN_NCCL_ENV)}",
                    subfield=skey,
                )
            if skey in _RELEASE_NAMES:  # not a variable NCCL reads: ignoring it would simulate the latest release
                raise custom_error(
                    "NCCL reads no such variable; the release a run used goes in backends.nccl.version "
                    f"(version: '{_release_in(raw)}')",
                    subfield=skey,
                )
            text = _env_value_str(raw)
            if text is None:
                raise custom_error(f"expected a string, number or boolean, got {short_repr(raw)}", subfield=skey)
            if skey in KNOWN_NCCL_ENV:
                try:
                    check_env_value(skey, text)
                except NcclEnvError as exc:
                    raise custom_error(str(exc), subfield=skey) from None
                if skey == "NCCL_CROSS_NIC" and int(text) == 1:
                    file = (info.context or {}).get("file") if info is not None else None
                    warnings.warn(
                        f"{file + ': ' if file else ''}backends.nccl.env.NCCL_CROSS_NIC=1: rings that change rail "
                        "between nodes are not modelled; collsim keeps each channel on one rail (as 0, and the "
                        "default 2 on rail-optimised fabrics)",
                        ScenarioWarning,
                        stacklevel=2,
                    )
            elif skey not in INERT_NCCL_ENV:  # logging, names, timeouts: no time of a collective changes
                file = (info.context or {}).get("file") if info is not None else None
                where = f"{file}: " if file else ""
                if skey in NCCL_ENV_NAMES:
                    what = "an NCCL variable collsim does not model; ignored"
                else:
                    near = closest_known(skey)
                    what = "unknown NCCL variable, collsim ignores it" + (f"; did you mean {near}?" if near else "")
                warnings.warn(f"{where}backends.nccl.env.{skey}: {what}", ScenarioWarning, stacklevel=2)
            out[skey] = text
        return out

    def algorithms(self, collective: str | None = None) -> set[str] | None:
        """Algorithms ``NCCL_ALGO`` allows for ``collective`` (canonical names, e.g. ``{"Ring"}``; None: the entry
        for every collective); None when unset or left to NCCL's default."""
        value = self.env.get("NCCL_ALGO")
        return None if value is None else parse_algorithms(value, collective)

    def protocols(self, collective: str | None = None) -> set[str] | None:
        """Protocols ``NCCL_PROTO`` allows for ``collective`` (from LL, LL128, Simple); None when unset or left to
        NCCL's default."""
        value = self.env.get("NCCL_PROTO")
        return None if value is None else parse_protocols(value, collective)

    def p2p_level(self) -> str | None:
        """``NCCL_P2P_LEVEL`` as a path type name (LOC ... SYS); None when unset."""
        value = self.env.get("NCCL_P2P_LEVEL")
        return None if value is None else parse_level(value)

    def net_gdr_level(self) -> str | None:
        """``NCCL_NET_GDR_LEVEL`` as a path type name (LOC ... SYS); None when unset."""
        value = self.env.get("NCCL_NET_GDR_LEVEL")
        return None if value is None else parse_level(value)

    def env_int(self, key: str, default: int | None = None) -> int | None:
        """An integer-valued variable (e.g. ``NCCL_MAX_NCHANNELS``), or ``default`` when unset."""
        value = self.env.get(key)
        return default if value is None else int(value.strip())


class GlooConfig(BaseModel):
    """The Gloo backend (as used by torch.distributed)."""

    model_config = _STRICT

    enabled: StrictBool = Field(True, description="Simulate Gloo.")
    algorithm: GlooAlgorithm = Field(
        "ring", description="Gloo allreduce algorithm (PyTorch's ProcessGroupGloo uses ring for CUDA tensors)."
    )
    device: TensorDevice = Field("cuda", description="Where the tensors live.")
    transport: GlooTransport = Field(
        "tcp",
        description=(
            "Gloo transport: tcp (PyTorch's default: host staging, CPU reductions, loopback TCP within a host) or "
            "ibverbs (RDMA; with device cuda GPUDirect and reductions on the GPU, no host copies; needs RDMA NICs)."
        ),
    )
    threads: StrictInt | None = Field(
        None,
        ge=1,
        description="ProcessGroupGloo's worker threads; unset: PyTorch's default, 2 per interface "
        "(torch/csrc/distributed/c10d/init.cpp: options->threads = options->devices.size() * 2).",
    )
    interfaces: StrictInt = Field(
        1,
        ge=1,
        description="Entries of GLOO_SOCKET_IFNAME (eth0,eth0 is 2; unset is 1): one Gloo context per entry, each "
        "with its own connection to every peer and its own receiving (event-loop) thread; collectives go to them "
        "round robin (ProcessGroupGloo::getContext).",
    )

    def worker_threads(self) -> int:
        """``threads``, or PyTorch's default for ``interfaces``: 2 worker threads per interface."""
        return self.threads if self.threads is not None else 2 * self.interfaces


class BackendsConfig(BaseModel):
    """Backends to simulate; one left out is not simulated unless the command line asks for it."""

    model_config = _STRICT

    nccl: NcclConfig | None = None
    gloo: GlooConfig | None = None


#: ``engine.max_flows``'s default: flows one simulation may start, about 8 minutes at 23 us a flow on the 2-core
#: machine of docs/performance.md (the 1024-GPU NVLSTree 1 GiB case of ``collsim benchmark --scale`` needs about
#: 0.6 million with symmetry on).
DEFAULT_MAX_FLOWS = 20_000_000
#: ``engine.max_records``'s default: flows one recorded simulation (trace, timeline) may keep, about 3 GB at 1.5 KB a
#: record with its bars (4 x DGX A100 at 64 MiB, symmetry off: 508,416 records, 1.5 GB peak for a full trace).
DEFAULT_MAX_RECORDS = 2_000_000


class EngineConfig(BaseModel):
    """Simulation engine options."""

    model_config = _STRICT

    symmetry: StrictBool = Field(True, description="Simulate provably identical ranks/channels once.")
    decouple: StrictBool = Field(
        False,
        description="NCCL, with perturb.links or a NIC in perturb.down: the channels that cross a slowed link (or "
        "the NIC standing in for one down) leave out their traffic on the links they share with the other channels, "
        "so that the rest stays symmetric (an approximation: docs/perturbations.md). Off: exact.",
    )
    seed: StrictInt | None = Field(
        None, ge=0, description="Seed of the noise section's draws (launch skew, jitter); unset means 0."
    )
    max_flows: StrictInt | None = Field(
        DEFAULT_MAX_FLOWS,
        ge=1,
        description="Flows one simulation may start (about 23 us each here); past it the run stops with an error "
        "saying how far it got. null: no limit.",
    )
    max_records: StrictInt | None = Field(
        DEFAULT_MAX_RECORDS,
        ge=1,
        description="Flows one recorded simulation (trace, timeline, report) may keep, about 1.5 KB each; compare's "
        "time breakdown past it is left out (the times stay). null: no limit.",
    )


class LinkPerturbConfig(BaseModel):
    """Links made slower: every link at the devices matching ``device`` (of ``kind`` when given) carries ``scale``
    times its bandwidth, both directions (``collsim.topology.perturb``)."""

    model_config = _STRICT

    device: str = Field(
        min_length=1,
        description="Glob on device names: 'n3/nic2' (one NIC), 'fabric/rail5', 'fabric/spine*', 'n*/nic*'.",
    )
    scale: float = Field(gt=0, description="Factor on the links' bandwidth: 0.5 is half rate.")
    kind: LinkKind | None = Field(None, description="Only links of this kind (e.g. 'ib' for a NIC's port).")
    choose: StrictInt | None = Field(
        None, ge=1, description="Apply to this many of the matching devices, drawn at random with perturb.seed."
    )


class DownPerturbConfig(BaseModel):
    """Devices or links down at NCCL's init (``collsim.topology.perturb.take_down``): a NIC (its port down: NCCL
    does not list it, its channels go to the nearest NIC left), a fabric switch, or with ``peer`` the links between
    two devices (a leaf-spine uplink)."""

    model_config = _STRICT

    device: str = Field(
        min_length=1, description="Glob on device names: 'n1/nic2' (one NIC), 'n*/nic*', 'fabric/spine0'."
    )
    peer: str | None = Field(
        None, min_length=1, description="Only the links to devices matching this glob: 'fabric/spine0'."
    )
    kind: LinkKind | None = Field(None, description="Only devices with a link of this kind.")
    choose: StrictInt | None = Field(
        None, ge=1, description="Take this many of the matching devices down, drawn at random with perturb.seed."
    )


class BackgroundPerturbConfig(BaseModel):
    """Another job's traffic (``collsim.topology.perturb.add_background``): one greedy stream on every directed
    link at the matching devices, offered ``rate`` or ``load`` x the link's bandwidth, sharing it max-min fairly
    with the collective."""

    model_config = _STRICT

    device: str = Field(min_length=1, description="Glob on device names: 'fabric/spine*', 'n1/nic2'.")
    rate: str | None = Field(None, description="Offered rate of each stream, e.g. '200Gb/s' (or give load).")
    load: float | None = Field(None, ge=0, le=1, description="Offered rate as a fraction of each link's bandwidth.")
    kind: LinkKind | None = Field(None, description="Only links of this kind (e.g. 'ib').")
    peer: str | None = Field(None, min_length=1, description="Only the links to devices matching this glob.")
    choose: StrictInt | None = Field(
        None, ge=1, description="Load this many of the matching devices, drawn at random with perturb.seed."
    )

    @field_validator("rate", mode="before")
    @classmethod
    def _rate(cls, value: Any) -> Any:
        return _check_bandwidth(value)


class RankPerturbConfig(BaseModel):
    """A straggler: rank ``rank`` launches every collective ``launch_delay`` late (both backends)."""

    model_config = _STRICT

    rank: StrictInt = Field(ge=0, description="Global rank index.")
    launch_delay: Annotated[str, _duration_schema(False)] = Field(
        description="How late it launches each collective, e.g. '20us'."
    )

    @field_validator("launch_delay", mode="before")
    @classmethod
    def _delay(cls, value: Any) -> Any:
        return _check_quantity(value, parse_time, "duration", "'20us' or '1ms'")

    def seconds(self) -> float:
        """The delay in seconds."""
        return parse_time(self.launch_delay)


class PerturbConfig(BaseModel):
    """What makes this cluster unlike the healthy one (issue 13): slower links and stragglers, for a what-if."""

    model_config = _STRICT

    links: list[LinkPerturbConfig] = Field(default_factory=list, description="Links at reduced bandwidth.")
    ranks: list[RankPerturbConfig] = Field(default_factory=list, description="Stragglers: ranks launching late.")
    down: list[DownPerturbConfig] = Field(default_factory=list, description="NICs, switches or links down.")
    background: list[BackgroundPerturbConfig] = Field(
        default_factory=list, description="Another job's traffic on some links."
    )
    seed: StrictInt = Field(0, ge=0, description="Seed of the random draws ('choose').")

    @field_validator("ranks")
    @classmethod
    def _one_entry_a_rank(cls, value: list[RankPerturbConfig]) -> list[RankPerturbConfig]:
        seen: set[int] = set()
        for p in value:
            if p.rank in seen:  # two delays for one rank would add up silently
                raise ValueError(f"rank {p.rank} is listed twice; give each straggler one launch_delay")
            seen.add(p.rank)
        return value

    def link_rules(self) -> list[Any]:
        """The rules as ``collsim.topology.LinkRule`` (imported late: the scenario layer does not need it)."""
        from collsim.topology import LinkRule

        return [LinkRule(p.device, p.scale, p.kind, p.choose, self.seed + i) for i, p in enumerate(self.links)]

    def down_rules(self) -> list[Any]:
        """``down`` as ``collsim.topology.DownRule`` (seed: perturb.seed plus the entry's index)."""
        from collsim.topology import DownRule

        return [DownRule(p.device, p.peer, p.kind, p.choose, self.seed + i) for i, p in enumerate(self.down)]

    def background_rules(self) -> list[Any]:
        """``background`` as ``collsim.topology.BackgroundRule``, rates in bytes/s (seed as :meth:`down_rules`)."""
        from collsim.topology import BackgroundRule

        return [
            BackgroundRule(
                p.device,
                None if p.rate is None else parse_bandwidth(p.rate),
                p.load,
                p.kind,
                p.peer,
                p.choose,
                self.seed + i,
            )
            for i, p in enumerate(self.background)
        ]


class NoiseConfig(BaseModel):
    """Seeded noise (issue 13), off by default: each rank's launch skew and each message's jitter, drawn anew for
    every repetition of ``collsim run --repeat K`` from ``engine.seed`` (:mod:`collsim.noise`)."""

    model_config = _STRICT

    launch_skew: Annotated[str | None, _duration_schema(True)] = Field(
        None,
        description="Largest spread between the ranks' launches, e.g. '5us': each rank launches each collective a "
        "delay drawn uniformly in [0, launch_skew] later, the first rank's taken as time 0.",
    )
    jitter: Annotated[str | None, _duration_schema(True)] = Field(
        None,
        description="Mean extra latency of each message, e.g. '1us': drawn per message from an exponential "
        "distribution with that mean.",
    )

    @field_validator("launch_skew", "jitter", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return _check_quantity(value, parse_time, "duration", "'1us' or '500ns'")

    def skew_seconds(self) -> float:
        """``launch_skew`` in seconds (0 when unset)."""
        return parse_time(self.launch_skew) if self.launch_skew is not None else 0.0

    def jitter_seconds(self) -> float:
        """``jitter`` in seconds (0 when unset)."""
        return parse_time(self.jitter) if self.jitter is not None else 0.0

    def active(self) -> bool:
        """Whether any noise is drawn (a skew or a jitter above 0)."""
        return self.skew_seconds() > 0 or self.jitter_seconds() > 0


class FsdpTrainingConfig(BaseModel):
    """PyTorch FSDP's knobs for ``training.style: fsdp`` (:mod:`collsim.training.fsdp`): ``FullyShardedDataParallel``
    (FSDP1) or, with ``version: 2``, ``fully_shard`` (FSDP2)."""

    model_config = _STRICT

    version: Literal[1, 2] = Field(
        1,
        description="1: FullyShardedDataParallel (FSDP1); 2: fully_shard (FSDP2: per-parameter sharding, copy-in and "
        "copy-out around each all-gather, ReduceOp.AVG, stream-side limits: all-gathers at most two modules ahead in "
        "forward and one in backward, each reduce-scatter's copy-in after the previous reduce-scatter). With 2, "
        "sharding full_shard is reshard_after_forward=True, shard_grad_op False, hybrid_shard a 2-D mesh; no_shard, "
        "backward_prefetch, forward_prefetch and limit_all_gathers are FSDP1's only.",
    )

    sharding: Literal["full_shard", "shard_grad_op", "no_shard", "hybrid_shard"] = Field(
        "full_shard",
        description="ShardingStrategy: full_shard (freed after forward, all-gathered again in backward), "
        "shard_grad_op (kept from forward to backward), no_shard (never sharded: each unit's gradient "
        "all-reduced after its backward) or hybrid_shard (HSDP: full_shard within each node, or each shard_group, "
        "each shard's gradient then all-reduced across the groups).",
    )
    shard_group: StrictInt | None = Field(
        None,
        ge=1,
        description="hybrid_shard only: GPUs per shard group, as a 2-D DeviceMesh (replicate, shard) of shape "
        "(world / n, n) makes them (init_device_mesh('cuda', (world // n, n)) passed as device_mesh): ranks "
        "i*n .. i*n+n-1 shard together, ranks j, j+n, ... all-reduce each shard. A divisor or a multiple of the GPUs "
        "of a node. Default: a node's GPUs (FSDP's own groups without a mesh).",
    )
    param_dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None,
        description="Mixed precision's param_dtype (MixedPrecision, FSDP2's MixedPrecisionPolicy): each shard is cast "
        "to it before its all-gather, which moves it, and the gradients come in it; the parameters and the optimizer "
        "keep the model's dtype (training.param_dtype where set). Default: no casting.",
    )
    reduce_dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None,
        description="Mixed precision's reduce_dtype: the gradients are cast to it before their reduce-scatter (or "
        "all-reduce), which moves it, and the reduced shard back to the model's dtype. Default: param_dtype where "
        "given, else the model's dtype.",
    )
    reshard_after_forward: StrictInt | None = Field(
        None,
        ge=2,
        description="FSDP2 (version: 2) with full_shard or hybrid_shard: fully_shard's integer reshard_after_forward "
        "n. After each block's forward every rank keeps 1/n of it, and its backward all-gather runs within groups of "
        "n consecutive ranks (n = a node's GPUs keeps it on NVLink). A divisor of the ranks a block is sharded over, "
        "other than all of them. Default: reshard fully (True).",
    )
    modules_to_forward_prefetch: StrictInt = Field(
        0,
        ge=0,
        description="FSDP2 (version: 2): each block's set_modules_to_forward_prefetch with the next n blocks "
        "(explicit forward prefetching). Default 0: implicit prefetching only.",
    )
    modules_to_backward_prefetch: StrictInt | None = Field(
        None,
        ge=1,
        description="FSDP2 (version: 2): each block's set_modules_to_backward_prefetch with the n blocks before it "
        "(explicit backward prefetching). Default: the implicit one.",
    )
    reduce_scatter_max_input_buffers: StrictInt = Field(
        1,
        ge=1,
        description="FSDP2 (version: 2): set_reduce_scatter_max_input_buffers, the reduce-scatter inputs kept in "
        "flight. With 1 (the default) each block's gradient copy-in waits for the previous block's reduce-scatter, "
        "which stalls backward where reduce-scatters are slower than a block's backward.",
    )
    backward_prefetch: Literal["backward_pre", "backward_post", "none"] = Field(
        "backward_pre", description="BackwardPrefetch (FSDP's default: BACKWARD_PRE)."
    )
    forward_prefetch: bool = Field(False, description="FSDP's forward_prefetch.")
    limit_all_gathers: bool = Field(True, description="FSDP's rate limiter: at most two all-gathers ahead.")
    wrap: str | None = Field(
        None,
        description="The wrapped modules, as a layer-name pattern with * for the block index (transformer.h.*, "
        "model.layers.*; fc* makes every layer fcN a unit of its own); the rest is the root unit. Default: the most "
        "common prefix.N in the layer names.",
    )


class TrainingConfig(BaseModel):
    """A data-parallel training step (issue 14): the model, the batch, and PyTorch DDP's knobs. ``collsim step``
    simulates one iteration per backend (:mod:`collsim.training`)."""

    model_config = _STRICT

    model: str = Field(
        description="A built-in model (resnet50, bert-large, gpt2, gpt2-xl, llama-7b) or a model YAML file, relative "
        "to the scenario."
    )
    style: Literal["ddp", "fsdp"] = Field(
        "ddp",
        description="Data-parallel style: ddp (DistributedDataParallel) or fsdp (FullyShardedDataParallel, NCCL).",
    )
    fsdp: FsdpTrainingConfig = Field(
        default_factory=lambda: FsdpTrainingConfig.model_validate({}), description="FSDP's knobs (style: fsdp)."
    )
    batch_size: StrictInt = Field(32, ge=1, description="Samples per GPU per micro-step.")
    compute_dtype: Literal["float32", "tf32", "bfloat16", "float16"] = Field(
        "float32",
        description="The dtype of the matmuls and convolutions, the GPU preset's peak_tflops key (AMP: bfloat16).",
    )
    param_dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None, description="Parameters and gradients (AMP keeps them float32), every tensor cast to it (model.half()); "
        "with FSDP the parameters the optimizer updates (fsdp.param_dtype and fsdp.reduce_dtype give FSDP's mixed "
        "precision). Unset: the model's own dtypes, its file's dtype and each parameter's (float32 for the built-in "
        "models)."
    )
    bucket_cap_mb: float | None = Field(
        None,
        ge=0,
        description="DDP's bucket_cap_mb (MiB). Unset: DDP's default, a first bucket of 1 MiB then 25 MiB; a value "
        "given (even 25) caps every bucket alike, as torch 2.13 does (0: each parameter a bucket of its own).",
    )
    gradient_as_bucket_view: StrictBool = Field(False, description="DDP's gradient_as_bucket_view.")
    accumulation: StrictInt = Field(
        1,
        ge=1,
        description="Micro-steps per optimizer step; all but the last without gradient synchronisation (DDP's and "
        "FSDP1's no_sync, FSDP2's set_requires_gradient_sync(False): no reduction; FSDP still all-gathers).",
    )
    compression: Literal["none", "fp16", "bf16"] = Field(
        "none", description="DDP comm hook: none, fp16 (fp16_compress_hook) or bf16 (bf16_compress_hook)."
    )
    activation_checkpointing: StrictBool | str = Field(
        False,
        description="Blocks run under torch.utils.checkpoint (apply_activation_checkpointing): each one's forward "
        "runs again in the backward, right before its first backward kernel. true: the most common prefix.N blocks "
        "of the layer names; or a layer-name pattern with * for the block index (transformer.h.*); false: none.",
    )
    gradient_clipping: StrictBool = Field(
        False,
        description="clip_grad_norm_ after the backward, before the optimizer: a read of the local gradients (the "
        "norm), with FSDP's sharding an all-reduce of the norm (one float32) within the shard group, then a read and "
        "write of the gradients (the scaling).",
    )
    checkpoint_early_stop: StrictBool = Field(
        True,
        description="Activation checkpointing's recomputation stops at a block's last layer that saves a tensor "
        "(torch's non-reentrant checkpoint, early_stop=True, the default); false: the whole block again "
        "(use_reentrant=True, as Hugging Face's gradient_checkpointing_enable() passes by default, or "
        "set_checkpoint_early_stop(False)).",
    )
    optimizer: Literal["none", "sgd", "momentum", "adam"] = Field("sgd", description="Optimizer step (memory-bound).")
    first_iteration: StrictBool = Field(
        False, description="Simulate DDP's first iteration (one bucket, no overlap) instead of a steady one."
    )
    compute_efficiency: float | None = Field(
        None, gt=0, le=1, description="Fraction of peak FLOP/s reached (default: topologies/software/training.yaml)."
    )
    memory_efficiency: float | None = Field(
        None, gt=0, le=1, description="Fraction of HBM bandwidth reached (default: topologies/software/training.yaml)."
    )
    intra_op_threads: StrictInt = Field(
        1,
        ge=1,
        description="CPU ranks: cores one process's computation keeps busy (torch's intra-op threads; torchrun "
        "sets OMP_NUM_THREADS=1). The model's measured layer times must be measured with as many.",
    )

    @field_validator("bucket_cap_mb", "compute_efficiency", "memory_efficiency", mode="before")
    @classmethod
    def _no_bool(cls, v: Any) -> Any:
        """A number, not a YAML true/false (``bucket_cap_mb: true`` read as 1 MiB)."""
        if isinstance(v, bool):
            raise PydanticCustomError("number_not_bool", "expected a number, not true or false")
        return v

    def model_path(self, base_dir: Path) -> str:
        """The model as :func:`collsim.training.load_model` takes it: a built-in name, or the file resolved against
        ``base_dir`` when ``model`` names a YAML file."""
        if self.model.endswith((".yaml", ".yml")):
            return str((base_dir / self.model).resolve())
        return self.model


_PRESET_ENTRIES = (
    "Preset name to its fields, in the schema of topologies/presets/{file} (topologies/README.md); with "
    "base: <preset> an entry starts from that preset and replaces the fields it gives."
)


class PresetsConfig(BaseModel):
    """The scenario's own presets: GPUs, CPUs, NICs, links and node templates it defines or redefines, each in the
    schema of the shipped file of the same name (a user presets file, ``--presets FILE``, holds the same sections).
    The entries are checked by the topology layer (:func:`collsim.topology.presets.merge_presets`) when the scenario
    is loaded."""

    model_config = _STRICT

    links: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description=_PRESET_ENTRIES.format(file="links.yaml")
    )
    gpus: dict[str, dict[str, Any]] = Field(default_factory=dict, description=_PRESET_ENTRIES.format(file="gpus.yaml"))
    cpus: dict[str, dict[str, Any]] = Field(default_factory=dict, description=_PRESET_ENTRIES.format(file="cpus.yaml"))
    nics: dict[str, dict[str, Any]] = Field(default_factory=dict, description=_PRESET_ENTRIES.format(file="nics.yaml"))
    nodes: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Node template name to a template, as topologies/nodes/<name>.yaml holds it (devices and links, "
        "or a generator and params); cluster.node names it.",
    )


class Scenario(BaseModel):
    """A validated scenario. Build one with :func:`collsim.scenario.load_scenario`.

    ``source_file`` (``"<dict>"`` for dicts) and ``base_dir`` (folder for relative paths) are set by the loader
    and are not part of the schema.
    """

    model_config = ConfigDict(extra="forbid", title="collsim scenario", allow_inf_nan=False)

    name: str = Field(min_length=1, description="Short name used in reports.")
    description: str | None = Field(None, description="What the scenario models.")
    cluster: ClusterConfig
    workload: WorkloadConfig = Field(default_factory=lambda: WorkloadConfig.model_validate({}))
    backends: BackendsConfig = Field(default_factory=lambda: BackendsConfig.model_validate({}))
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig.model_validate({}))
    perturb: PerturbConfig | None = Field(
        None, description="Slower or down links, stragglers, background traffic (a what-if against the healthy one)."
    )
    noise: NoiseConfig | None = Field(
        None, description="Seeded launch skew and per-message jitter (off by default; seed: engine.seed)."
    )
    training: TrainingConfig | None = Field(
        None, description="A data-parallel training step for `collsim step` (model, batch, DDP's buckets and hooks)."
    )
    calibration: str | None = Field(None, description="Calibration profile YAML, relative to the scenario file.")
    preset_files: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list,
        description="User presets files or folders of them (sections links, gpus, cpus, nics, nodes, as `presets`), "
        "relative to the scenario file; later ones override earlier ones, `presets` overrides them all.",
    )
    presets: PresetsConfig | None = Field(
        None,
        description="GPUs, CPUs, NICs, links and node templates defined here, in the shipped files' schema; they add "
        "to or replace the shipped presets of the same name.",
    )

    _source_file: str | None = PrivateAttr(None)
    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _library: Any = PrivateAttr(None)

    @field_validator("backends")
    @classmethod
    def _nccl_one_rank_per_gpu(cls, value: BackendsConfig, info: ValidationInfo) -> BackendsConfig:
        """NCCL refuses a communicator with two ranks on one GPU: ``WARN("Duplicate GPU detected : rank %d and rank
        %d both on CUDA device %lx", ...)``, ``ncclInvalidUsage`` (NVIDIA/nccl ``src/init.cc`` lines 736-739,
        v2.27.7-1)."""
        cluster = info.data.get("cluster")
        k = getattr(cluster, "ranks_per_gpu", 1)
        if k > 1 and value.nccl is not None and value.nccl.enabled:
            raise custom_error(
                f"NCCL runs one rank per GPU (it stops with 'Duplicate GPU detected' when two share one: NCCL "
                f"src/init.cc); cluster.ranks_per_gpu is {k}: set backends.nccl.enabled: false, or ranks_per_gpu: 1",
                subfield="nccl.enabled",
            )
        return value

    @property
    def source_file(self) -> str | None:
        """Where the scenario came from: a file path, ``"<dict>"``, or None if built directly."""
        return self._source_file

    @property
    def base_dir(self) -> Path:
        """Folder against which relative paths (node template file, calibration) are resolved."""
        return self._base_dir

    def sizes(self) -> list[int]:
        """Message sizes in bytes, in the order given."""
        return _parse_sizes(self.workload.sizes)

    def collectives(self) -> list[str]:
        """Canonical collective names (e.g. ``["allreduce"]``), without duplicates."""
        c = self.workload.collective
        return [c] if isinstance(c, str) else list(c)

    def dtype_size(self) -> int:
        """Bytes per element of ``workload.dtype``."""
        return DTYPE_SIZES[self.workload.dtype]

    def backend_names(self) -> list[str]:
        """Backends present and enabled, in the order nccl, gloo."""
        out: list[str] = []
        if self.backends.nccl is not None and self.backends.nccl.enabled:
            out.append("nccl")
        if self.backends.gloo is not None and self.backends.gloo.enabled:
            out.append("gloo")
        return out

    def node_template(self) -> str | Path:
        """The template to load: a name (str: a user's node template or a shipped one) or, when ``cluster.node``
        looks like a path, the resolved Path."""
        node = self.cluster.node
        if self.presets is not None and node in self.presets.nodes:
            return node
        if is_path_like(node):
            path = _user_path(node)
            return path if path.is_absolute() else (self.base_dir / path).resolve()
        return node

    def calibration_path(self) -> Path | None:
        """``calibration`` resolved against :attr:`base_dir`, or None."""
        if self.calibration is None:
            return None
        path = _user_path(self.calibration)
        return path if path.is_absolute() else (self.base_dir / path).resolve()

    def preset_file_paths(self) -> list[Path]:
        """``preset_files`` resolved against :attr:`base_dir`."""
        out = []
        for item in self.preset_files:
            path = _user_path(item)
            out.append(path if path.is_absolute() else (self.base_dir / path).resolve())
        return out

    def preset_library(self) -> Any:
        """The shipped presets with the user's merged in (``preset_files`` in order, then ``presets``), as a
        ``collsim.topology.PresetLibrary``; built once per scenario.

        Raises
        ------
        ScenarioError
            Naming the user's file and field (``presets.gpus.my-gpu.sm`` in the scenario, ``gpus.my-gpu.sm`` in a
            presets file, ``preset_files[0]`` for a file not found).
        """
        if self._library is not None:
            return self._library
        from collsim.topology import TopologyError, load_presets  # imported late: the scenario layer does not need it
        from collsim.topology.presets import PresetSource, merge_presets, read_preset_files

        file = self.source_file or "<scenario>"
        sources: list[Any] = []
        for i, path in enumerate(self.preset_file_paths()):
            try:
                found = path.exists()
            except OSError as exc:  # a name too long, a loop of links: Path.exists lets these through
                why = f"presets file or folder not found: {exc.strerror or exc}: {short_repr(str(path))}"
                raise ScenarioError(why, file=file, field=f"preset_files[{i}]") from None
            if not found:
                raise ScenarioError(f"presets file or folder not found: {path}", file=file, field=f"preset_files[{i}]")
            try:
                sources += read_preset_files(path)
            except TopologyError as err:
                raise ScenarioError(err.message, file=err.file or str(path), field=err.field) from None
        if self.presets is not None:
            sources.append(PresetSource(self.presets.model_dump(exclude_defaults=True), file, "presets"))
        try:
            library = merge_presets(load_presets(), sources)
        except TopologyError as err:
            raise ScenarioError(err.message, file=_user_file(err.file, file), field=err.field) from None
        self._library = library
        return library

    def topology_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``collsim.topology.load_topology``."""
        fabric = self.cluster.fabric
        return {
            "node": self.node_template(),
            "nodes": self.cluster.nodes,
            "fabric": None if fabric is None else fabric.to_topology_dict(),
            "node_params": dict(self.cluster.node_params),
        }

    def _visible(self, topology: Any) -> Any:
        """``topology`` with only ``cluster.visible_gpus`` of each node (:meth:`Topology.restricted`, every NIC
        kept: NCCL's search itself leaves out the NICs far from the GPUs left, and Gloo's sockets choose as on the
        whole node)."""
        chosen = self.cluster.visible_gpus
        if chosen is None:
            return topology
        where = {"file": self.source_file, "field": "cluster.visible_gpus"}
        have = sorted(d.index for d in topology.gpus() if d.node == 0)
        if not have:
            raise ScenarioError("the node template has no GPUs to choose from", **where)
        wrong = sorted(set(chosen) - set(have))
        if wrong or len(set(chosen)) != len(chosen):
            what = f"no GPU {wrong[0]} on the node" if wrong else "a GPU listed twice"
            raise ScenarioError(f"{what}: expected distinct local indices among {have}, got {chosen}", **where)
        keep = set(chosen)
        return topology.restricted([d.name for d in topology.gpus() if d.index in keep], all_nics=True)

    def node_template_source(self) -> tuple[Any, str, str]:
        """The node template :meth:`build_topology` builds: its data (as read, parameters and all), the file it
        comes from, and the field prefix of a user's template in that file (``""`` for a template file)."""
        from collsim.topology import topologies_dir
        from collsim.topology.presets import read_yaml

        library = self.preset_library()
        node = self.node_template()
        if isinstance(node, str) and node in library.nodes:
            file, prefix = library.origin("nodes", node)
            return library.nodes[node], file, prefix
        path = node if isinstance(node, Path) else topologies_dir() / "nodes" / f"{node}.yaml"
        return read_yaml(path), str(path), ""

    def build_topology(self) -> Any:
        """Build the cluster with ``collsim.topology.topology_from_template`` and :meth:`preset_library`.

        A mistake the user made is a :class:`ScenarioError` in the user's terms: a node parameter names
        ``cluster.node_params.<name>`` in the scenario, a user's node template its own file and field
        (``presets.nodes.<name>.devices.0.preset``). Other problems (a shipped template's) raise the topology
        layer's ``TopologyError``.
        """
        from collsim.topology import TopologyError, topology_from_template
        from collsim.topology.errors import TopologyWarning, display_path

        library = self.preset_library()
        data, file, prefix = self.node_template_source()
        node = self.node_template()
        user_node = isinstance(node, str) and node in library.nodes
        fabric = self.cluster.fabric
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", TopologyWarning)
                topology = topology_from_template(
                    data,
                    nodes=self.cluster.nodes,
                    fabric=None if fabric is None else fabric.to_topology_dict(),
                    node_params=dict(self.cluster.node_params),
                    file=file,
                    presets=library,
                    ranks_per_gpu=self.cluster.ranks_per_gpu,
                )
            # the template's warnings as the scenario's: what the user set (node_params) decides them
            where = f"{self.source_file}: " + ("cluster.node_params: " if self.cluster.node_params else "")
            for w in caught:
                if issubclass(w.category, TopologyWarning):
                    warnings.warn(f"{where}{w.message}", ScenarioWarning, stacklevel=2)
                else:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        except TopologyError as err:
            if err.field == "ranks_per_gpu":
                raise ScenarioError(err.message, file=self.source_file, field="cluster.ranks_per_gpu") from None
            param = _param_error(err, self.cluster.node_params)
            if param is not None:
                raise ScenarioError(
                    f"{err.message} (template {err.file})" if err.file else err.message,
                    file=self.source_file,
                    field=f"cluster.node_params.{param}",
                ) from None
            if user_node and err.file == display_path(file):
                field = f"{prefix}.{err.field}" if err.field else prefix
                raise ScenarioError(err.message, file=file, field=field) from None
            raise
        except KeyError as exc:  # a generator reading a parameter its template does not declare
            gen = data.get("generator") if isinstance(data, Mapping) else None
            if gen is None:
                raise
            field = ".".join(p for p in (prefix, "params") if p)
            raise ScenarioError(
                f"generator {gen!r} needs parameter {exc.args[0]!r}: declare it under params (as the shipped "
                "templates using this generator do)",
                file=file,
                field=field,
            ) from None
        except (TypeError, AttributeError, ValueError) as exc:
            # A value of the wrong type deep in a user's template that the template layer does not check; a shipped
            # template is never malformed this way, so its errors pass through.
            if node in library.nodes or isinstance(node, Path):
                raise ScenarioError(
                    f"malformed node template ({type(exc).__name__}: {short_repr(str(exc), 120)})",
                    file=file,
                    field=prefix or None,
                ) from None
            raise
        # outside the template's errors: cluster.visible_gpus is the scenario's own field (its error names it)
        return self._visible(topology)

    def to_dict(self) -> dict[str, Any]:
        """The resolved scenario as JSON-serialisable data.

        Sizes become a list of byte counts, ``collective`` a list, and file paths (a node template file,
        ``calibration``, ``preset_files``, a model file, ``NCCL_TUNER_CONFIG_FILE``) absolute. The result is itself a
        valid scenario source, read the same from any folder (a sweep's workers load it from theirs).
        """
        data = self.model_dump(mode="json")
        if data.get("noise") is None:
            data.pop("noise", None)  # no noise: the same document as before the section existed
        data["workload"]["sizes"] = self.sizes()
        data["workload"]["collective"] = self.collectives()
        node = self.node_template()
        if isinstance(node, Path):
            data["cluster"]["node"] = str(node)
        cal = self.calibration_path()
        if cal is not None:
            data["calibration"] = str(cal)
        if data.get("preset_files"):
            data["preset_files"] = [str(p) for p in self.preset_file_paths()]
        if data.get("training") and self.training is not None:
            data["training"]["model"] = self.training.model_path(self.base_dir)
        env = (data.get("backends") or {}).get("nccl") or {}
        tuner = (env.get("env") or {}).get("NCCL_TUNER_CONFIG_FILE")
        if isinstance(tuner, str) and tuner and not Path(tuner).expanduser().is_absolute():
            env["env"]["NCCL_TUNER_CONFIG_FILE"] = str((self.base_dir / Path(tuner).expanduser()).resolve())
        return data


def _user_file(err_file: str | None, scenario_file: str) -> str:
    """The file a preset error names: its own, else the scenario's."""
    return err_file if err_file else scenario_file


def _param_error(err: Any, given: Mapping[str, Any]) -> str | None:
    """The node parameter a template error is about, when the user's value (or its absence) is the cause."""
    field = err.field or ""
    if not field.startswith("params."):
        return None
    name = field.split(".", 2)[1]
    message = str(err.message)
    if name in given or message.startswith(("unknown parameter", f"parameter {name} must be set")):
        return name
    return None


def _user_path(text: str) -> Path:
    """``text`` as a Path with ``~`` expanded; left as written when there is no home to expand to (``~nobody``)."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        return Path(text)


def is_path_like(node: str) -> bool:
    """True when a ``cluster.node`` value is a file path rather than a template name."""
    return "/" in node or "\\" in node or node.endswith((".yaml", ".yml"))
