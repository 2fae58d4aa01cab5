"""The Python API behind the CLI: load a scenario, simulate it with each backend, compare, get records.

:class:`Simulator` is wiring: the scenario (:mod:`collsim.scenario`) becomes a topology, each backend's options,
constants and plan (:mod:`collsim.backends`), and simulations become records (:mod:`collsim.results`). Sweeps run
their points through :func:`collsim.parallel.map_points`; every error of a layer below reaches the caller as a
:class:`~collsim.scenario.ScenarioError` naming the scenario file and field.

Examples
--------
>>> sim = Simulator.from_source("pcie-2gpu-nop2p", ["workload.sizes=1MiB"])
>>> [round(r.busbw_gbps, 1) for r in sim.run(backends=["nccl"]).records]
[5.3]
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from collsim import parallel
from collsim.backends import (
    BackendError,
    GlooConstants,
    GlooOptions,
    NcclConstants,
    Outcome,
    plan_nccl,
    simulate_gloo,
    simulate_gloo_many,
    simulate_nccl,
)
from collsim.backends.common import Bottleneck, ResourceCatalog
from collsim.backends.nccl import NcclPlan, choose, enabled_pairs, release_notes, tuner_table, tuner_times
from collsim.backends.nccl.algos import NVLS
from collsim.backends.nccl.ib_hca import ib_hca_selection
from collsim.backends.nccl.plan import nvls_heads_by_node
from collsim.engine.budget import WorkLimitExceeded, current_budget, work_budget
from collsim.nccl_env import NcclEnvError, NcclOptions
from collsim.noise import add_delays, launch_skews, repetition_seed
from collsim.profile import Profile, load_profile
from collsim.results import (
    NO_BREAKDOWN,
    AlgorithmComparison,
    Comparison,
    Explanation,
    Record,
    make_record,
    nccl_tests_bytes,
    records_to_dataframe,
    repeated_record,
    representative_size,
    whole_element_bytes,
)
from collsim.scenario import Scenario, ScenarioError, ScenarioWarning, load_scenario
from collsim.scenario.models import FsdpTrainingConfig, TrainingConfig
from collsim.topology import (
    Topology,
    TopologyError,
    add_background,
    matching_devices,
    perturb_links,
    take_down,
    topologies_dir,
)
from collsim.topology.errors import TopologyWarning
from collsim.topology.groups import counterparts, leaves_crossed, node_name, uplinks
from collsim.training import (
    DdpConfig,
    GlooTimes,
    GpuCompute,
    ModelError,
    ModelSpec,
    StepConstants,
    StepResult,
    checkpoint_regions,
    fsdp_units,
    load_model,
    simulate_ddp_step,
)
from collsim.training.fsdp import FsdpConfig, check_checkpoint_blocks, reduces_with_average, simulate_fsdp_step
from collsim.training.memory import model_state_bytes, state_buffers
from collsim.training.model import block_pattern_hint, layer_blocks
from collsim.training.step import GlooRunner
from collsim.units import DTYPE_SIZES, UnitError, format_size, parse_size, parse_size_range
from collsim.vocab import (
    BACKENDS,
    COLLECTIVES,
    GLOO_ALGORITHMS,
    GLOO_ALLREDUCE_COLLECTIVES,
    GLOO_COLLECTIVE_ALGORITHM,
    PER_RANK_COUNT_COLLECTIVES,
    REDUCE_OPS,
    REDUCING_COLLECTIVES,
    ROOTED_COLLECTIVES,
    canonical_collective,
)

__all__ = [
    "BACKENDS",
    "Comparison",
    "Explanation",
    "Progress",
    "ReportData",
    "Simulator",
    "SweepResult",
    "input_files",
    "load",
    "scenario_errors",
    "simulate",
]

#: ``progress(backend, size, index, total)``: called per point of a sweep (size in bytes).
Progress = Callable[[str, int, int, int], None]


def load(source: str | Path | Mapping[str, Any] | Scenario, overrides: Sequence[str] = ()) -> Scenario:
    """Load and validate a scenario from a file, a built-in name, a dict or a loaded scenario with ``overrides``
    (see ``collsim.scenario.load_scenario``)."""
    return load_scenario(source, overrides)


def input_files(scenario: Scenario) -> dict[str, list[Path]]:
    """The files a simulation of ``scenario`` reads besides the scenario and the shipped presets, by the field that
    names them: the node template (a file), ``calibration``, ``preset_files`` (a folder: its ``*.yaml``/``*.yml``
    files by name) and, where ``NCCL_TUNER_PLUGIN`` is set, NVIDIA's example tuner's CSV (``NCCL_TUNER_CONFIG_FILE``,
    else the plugin's default name, from the scenario's folder). A results store keys points on their contents.

    Examples
    --------
    >>> input_files(load("hgx-h100"))
    {}
    """
    out: dict[str, list[Path]] = {}
    node = scenario.node_template()
    if isinstance(node, Path):
        out["cluster.node"] = [node]
    cal = scenario.calibration_path()
    if cal is not None:
        out["calibration"] = [cal]
    presets: list[Path] = []
    for path in scenario.preset_file_paths():
        try:
            presets += sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")) if path.is_dir() else [path]
        except OSError:
            presets.append(path)  # the run will say why it cannot be read
    if presets:
        out["preset_files"] = presets
    env = scenario.backends.nccl.env if scenario.backends.nccl is not None else {}
    if env.get("NCCL_TUNER_PLUGIN"):
        name = env.get("NCCL_TUNER_CONFIG_FILE") or str(_software("nccl")["example_tuner"]["default_config_file"])
        path = Path(name).expanduser()
        out["backends.nccl.env.NCCL_TUNER_CONFIG_FILE"] = [path if path.is_absolute() else scenario.base_dir / path]
    return out


def _backends_arg(backends: str | Sequence[str] | None) -> list[str] | None:
    """A notebook's ``backends`` argument as a list (one name alone: itself), each a known backend; None stays."""
    if backends is None:
        return None
    items = [backends] if isinstance(backends, str) else list(backends)
    for b in items:
        if b not in BACKENDS:
            raise ScenarioError(f"unknown backend {b!r}; expected one of {', '.join(BACKENDS)}", field="backend")
    return items


def _size_arg(size: Any, field: str = "size") -> int:
    """A size as a notebook gives it: whole bytes (an integral float too) or a string with a unit (``"1MiB"``)."""
    try:
        if isinstance(size, str):
            return parse_size(size)
    except UnitError as exc:
        raise ScenarioError(str(exc), field=field) from None
    if isinstance(size, bool) or not isinstance(size, numbers.Real):
        raise ScenarioError(f"expected whole bytes or a size such as '1MiB', got {size!r}", field=field)
    if not float(size).is_integer() or size < 0:
        raise ScenarioError(f"expected whole bytes >= 0 or a size such as '1MiB', got {size!r}", field=field)
    return int(size) if isinstance(size, numbers.Integral) else int(float(size))  # an int exactly, at any size


def _sizes_arg(sizes: str | Sequence[Any] | None) -> list[int] | None:
    """A notebook's ``sizes``: a list of sizes (:func:`_size_arg`) or one string as ``--sizes`` takes it
    (``"1KiB:1GiB:x4"``, ``"8B,1MiB"``); None stays.

    >>> _sizes_arg("1KiB:4KiB:x2"), _sizes_arg([8, 2.0**20, "1GiB"])
    ([1024, 2048, 4096], [8, 1048576, 1073741824])
    """
    if sizes is None:
        return None
    if isinstance(sizes, str):
        try:
            return parse_size_range(sizes)
        except UnitError as exc:
            raise ScenarioError(str(exc), field="sizes") from None
    if isinstance(sizes, numbers.Real) and not isinstance(sizes, bool):
        return [_size_arg(sizes, "sizes")]  # one size alone: itself, as one backend name alone is
    if not isinstance(sizes, Sequence | set | frozenset):
        raise ScenarioError(f"expected a list of sizes or a string such as '1KiB:1GiB:x4', got {sizes!r:.60}",
                            field="sizes")  # fmt: skip
    return [_size_arg(x, "sizes") for x in sizes]


#: Parsed ``topologies/software/*.yaml`` by (file, modification time, size): every Simulator reads them (a fit
#: builds one per evaluation), and parsing nccl.yaml costs about as much as simulating one point.
_SOFTWARE: dict[tuple[str, int, int], Any] = {}


def _with_nic_slots(scenario: Scenario, slots: list[str]) -> Scenario:
    """``scenario`` with ``cluster.fabric.nics`` set to ``slots`` (local NIC names of the node the scenario builds,
    its own NIC selection already applied) and its other NIC selections cleared."""
    fabric = scenario.cluster.fabric
    assert fabric is not None, "NIC slots are chosen on a cluster with a fabric"
    fab = fabric.model_copy(update={"nics": slots, "nics_per_node": None, "nics_per_switch": None,
                                    "nics_per_socket": None})  # fmt: skip
    return scenario.model_copy(update={"cluster": scenario.cluster.model_copy(update={"fabric": fab})})


def _software_file(name: str) -> Path:
    """``topologies/software/<name>.yaml``."""
    return topologies_dir() / "software" / f"{name}.yaml"


def _software(name: str) -> dict[str, Any]:
    """A backend's constants, ``topologies/software/<name>.yaml``, as a mapping (ScenarioError naming the file);
    parsed once per file version (see :data:`_SOFTWARE`), so callers must not modify it."""
    path = _software_file(name)
    try:
        stat = path.stat()
        key = (str(path), stat.st_mtime_ns, stat.st_size)
        if key not in _SOFTWARE:
            _SOFTWARE[key] = yaml.safe_load(path.read_text())
        data = _SOFTWARE[key]
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"cannot read backend constants: {exc}", file=str(path)) from None
    if not isinstance(data, dict):
        raise ScenarioError("expected a mapping of constants", file=str(path))
    return data


@contextmanager
def scenario_errors(file: str | None, field: str) -> Iterator[None]:
    """Turn an error of a layer below the scenario into a :class:`ScenarioError` naming ``file`` and ``field``.

    The one place where the API translates errors: a :class:`~collsim.topology.TopologyError` (its own field is
    appended to ``field`` unless it already names the cluster; an error in a field of another file, a node template
    or a presets file, names that file and field and says which scenario field read it),
    a :class:`~collsim.backends.BackendError` (a choice the real library would refuse), a
    :class:`~collsim.nccl_env.NcclEnvError` (a bad NCCL variable) and a :class:`~collsim.training.ModelError` (a model
    file or name). Other exceptions pass through.

    Parameters
    ----------
    file : str or None
        The scenario's source file.
    field : str
        The scenario field the failing step reads, e.g. ``"cluster"`` or ``"backends.nccl.env"``.
    """
    try:
        yield
    except TopologyError as exc:
        if exc.file and exc.file != file and exc.field and not str(exc.field).startswith("cluster"):
            # a field of another file (a node template, a presets file): that file and its field, the scenario said
            raise ScenarioError(f"{exc.message} (read for {file or 'the scenario'}'s {field})", file=exc.file,
                                field=exc.field) from None  # fmt: skip
        sub = f".{exc.field}" if exc.field and not str(exc.field).startswith("cluster") else ""
        where = f"{exc.file}: " if exc.file and exc.file != file else ""
        raise ScenarioError(f"{where}{exc.message}", file=file, field=field + sub) from None
    except (BackendError, NcclEnvError) as exc:
        raise ScenarioError(str(exc), file=file, field=field) from None
    except ModelError as exc:  # a model file's own field, or an unknown built-in name
        where = f"{exc.file}: " if exc.file and exc.file != file else ""
        sub = f" ({exc.field})" if exc.field else ""
        raise ScenarioError(f"{where}{exc.message}{sub}", file=file, field=field) from None


@contextmanager
def scenario_warnings(file: str | None, field: str) -> Iterator[None]:
    """Re-issue a :class:`~collsim.topology.TopologyWarning` of a layer below the scenario as a
    :class:`~collsim.scenario.ScenarioWarning` naming ``file`` and ``field`` (its message names the field below
    that), as :func:`scenario_errors` does for errors; other warnings pass through."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TopologyWarning)
        yield
    for w in caught:
        if issubclass(w.category, TopologyWarning):
            warnings.warn(f"{file}: {field}.{w.message}" if file else f"{field}.{w.message}", ScenarioWarning,
                          stacklevel=3)  # fmt: skip
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


@dataclass
class SweepResult:
    """Records of a sweep (one per backend and size, in order), the raw outcomes, and whether it was interrupted."""

    scenario: Scenario
    records: list[Record] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    interrupted: bool = False

    def dataframe(self) -> Any:
        """The records as a pandas DataFrame (one row per backend and size)."""
        return records_to_dataframe(self.records)

    def by_backend(self, backend: str) -> list[Record]:
        """Records of one backend."""
        return [r for r in self.records if r.backend == backend]


@dataclass
class ReportData:
    """What ``collsim report`` shows, simulated (:meth:`Simulator.report_data`); :func:`collsim.viz.build_report`
    draws it.

    Attributes
    ----------
    scenario : Scenario
        The scenario simulated.
    topology : Topology
        Its topology (calibration applied).
    sizes : list of int
        The sweep's sizes, bytes.
    timeline_size : int
        Bytes of the collective shown as a timeline.
    records : list of Record
        The sweep, per backend that could run it (with breakdowns).
    outcomes : list of Outcome
        Per such backend, the scenario's first collective at ``timeline_size`` with every rank simulated and every
        flow recorded (:meth:`Simulator.recorded`).
    notes : list of str
        A backend that could not run the scenario, and why.
    seconds : float
        Wall time of the simulations, seconds.
    perturbations : list of str
        The scenario's ``perturb`` entries, one line each (empty: a healthy cluster).
    healthy : list of Record
        With perturbations, the same sweep on the healthy cluster (:meth:`Simulator.healthy`).
    """

    scenario: Scenario
    topology: Topology
    sizes: list[int]
    timeline_size: int
    records: list[Record] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    perturbations: list[str] = field(default_factory=list)
    healthy: list[Record] = field(default_factory=list)


@dataclass(frozen=True)
class _Hsdp:
    """HSDP's groups for one backend: the first shard group, the replica groups (each with its share of what they
    cross together) and how many of a node's resources and of the fabric's uplinks k replica groups share, by k."""

    shard: Simulator
    replicas: list[Simulator]
    shared: dict[int, int]


def _hsdp_notes(hsdp: _Hsdp | None) -> tuple[str, ...]:
    """What a step's notes say of HSDP's groups (nothing without them)."""
    if hsdp is None:
        return ()
    shard, replica = hsdp.shard.topology, hsdp.replicas[0].topology
    shared = "; ".join(f"{n} shared by {k} groups" for k, n in sorted(hsdp.shared.items()))
    return (f"HSDP groups: all-gathers and reduce-scatters within shard groups of {len(shard.rank_devices())} "
            f"GPU(s) on {shard.nodes} node(s); each all-reduce across the {len(replica.rank_devices())} GPU(s) of a "
            f"replica group ({replica.nodes} node(s)) takes the slowest of the {len(hsdp.replicas)} replica groups, "
            "which run at the same time: each gets 1/k of a NIC, link, socket's memory, node's cores or leaf's "
            f"uplink that k of them cross (of a node's resources and the fabric's uplinks: "
            f"{shared or 'none shared'})",)  # fmt: skip


def _hsdp_costs(
    shard: Callable[[str, int], Any], replicas: Sequence[Callable[[str, int], Any]]
) -> Callable[[str, int], Any]:
    """One collective-cost callable for HSDP: its all-reduce across the replica groups (``allreduce_replicas``) at
    the slowest group's (the ranks of a shard group wait for each other at the next all-gather), everything else on
    ``shard``'s group. Each cost is ``(seconds, ...)``."""

    def cost(kind: str, nbytes: int) -> Any:
        if kind == "allreduce_replicas":
            return max((r("allreduce", nbytes) for r in replicas), key=lambda c: c[0])
        return shard(kind, nbytes)

    return cost


def _with_post_forward(costs: Callable[[str, int], Any], post: Callable[[str, int], Any]) -> Callable[[str, int], Any]:
    """One collective-cost callable for FSDP2 with an integer ``reshard_after_forward``: the backward all-gathers
    within the post-forward mesh (``allgather_post``) on ``post``'s group, everything else on ``costs``."""

    def cost(kind: str, nbytes: int) -> Any:
        return post("allgather", nbytes) if kind == "allgather_post" else costs(kind, nbytes)

    return cost


class Simulator:
    """A scenario made ready to simulate: its topology, each backend's options, constants and plan.

    Parameters
    ----------
    scenario : Scenario
        A validated scenario (see :func:`load`).
    profile : Profile, optional
        Calibration to apply; default: the profile the scenario's ``calibration`` field names, if any.

    Raises
    ------
    ScenarioError
        When the cluster cannot be built or the NCCL environment is invalid (naming the file and field).
    """

    def __init__(self, scenario: Scenario, profile: Profile | None = None) -> None:
        if not isinstance(scenario, Scenario):  # a name, a path or a dict: from_source reads those
            raise ScenarioError(f"Simulator takes a loaded Scenario, got {type(scenario).__name__} {scenario!r:.60}; "
                                "use Simulator.from_source(...) for a file, a built-in name or a dict")  # fmt: skip
        if profile is not None and not isinstance(profile, Profile):
            raise ScenarioError(f"expected a Profile (collsim.profile.load_profile(PATH)), got "
                                f"{type(profile).__name__} {profile!r:.60}", field="profile")  # fmt: skip
        self.scenario = scenario
        cal = scenario.calibration_path()
        self.profile: Profile | None = profile if profile is not None else (load_profile(cal) if cal else None)
        with self._errors("cluster"):
            topology: Topology = scenario.build_topology()
        nccl = scenario.backends.nccl
        user_env = dict(nccl.env) if nccl else {}
        #: which NICs NCCL_IB_HCA leaves NCCL (one line), empty when it is unset or leaves all of them
        self.ib_hca_notes: list[str] = []
        if nccl is not None and nccl.enabled and user_env.get("NCCL_IB_HCA") is not None:
            with self._errors("backends.nccl.env.NCCL_IB_HCA"):
                keep, self.ib_hca_notes = ib_hca_selection(topology, str(user_env["NCCL_IB_HCA"]))
            if keep is not None:  # NCCL plans over the NICs it lists: the cluster built with those slots
                with self._errors("cluster"):
                    topology = _with_nic_slots(scenario, keep).build_topology()
        #: what of the calibration profile acts on nothing here (a profile fitted on another cluster), one line
        self.profile_notes: list[str] = []
        if self.profile is not None:
            idle = self.profile.unmatched(topology)
            fitted = (self.profile.meta.get("fitted_on") or {}).get("scenario")
            if idle:
                verb = "acts" if len(idle) == 1 else "act"
                self.profile_notes.append(
                    f"calibration {self.profile.file or 'profile'}: {', '.join(idle)} {verb} on no link or device of "
                    "this cluster" + (f" (fitted on {fitted})" if fitted else "")
                )
            topology = self.profile.apply_topology(topology)
        #: What each ``choose`` rule drew, by (perturb field, index): the devices it applies to
        self._drawn: dict[tuple[str, int], list[str]] = {}
        if scenario.perturb is not None:
            with self._errors("perturb"), scenario_warnings(scenario.source_file, "perturb"):
                links = scenario.perturb.link_rules()
                self._drawn |= {("links", i): matching_devices(topology, r) for i, r in enumerate(links) if r.choose}
                topology = perturb_links(topology, links, field="links")
                topology = take_down(topology, scenario.perturb.down_rules(), field="down")
                background = scenario.perturb.background_rules()
                self._drawn |= {("background", i): matching_devices(topology, r)
                                for i, r in enumerate(background) if r.choose}  # fmt: skip
                topology = add_background(topology, background, field="background")
        self.topology = topology
        self._check_gpus_per_process()
        #: NCCL variables the NICs' network plugin sets because the scenario leaves them unset (NIC preset field
        #: ``nccl_plugin_env``; the plugin loads at NCCL's init, so a one-node run gets them too)
        self.nccl_plugin_env: dict[str, str] = {}
        for nic in self.topology.nics():
            for key, value in (nic.spec.get("nccl_plugin_env") or {}).items():
                if key not in user_env:
                    self.nccl_plugin_env.setdefault(key, value)
        delays = self._launch_delays()
        peers, root = self._peers(), self._rank(self.scenario.workload.root, "workload.root")
        with self._errors("backends.nccl.env"):
            self.nccl_options = dataclasses.replace(
                NcclOptions.from_env({**self.nccl_plugin_env, **user_env}),
                gpus_per_process=scenario.workload.gpus_per_process,
                host_overhead=scenario.workload.host_overhead_value(),
                launch_delay=delays,
                decouple=scenario.engine.decouple,
                version=nccl.version_tuple() if nccl else None,
                sendrecv_peers=peers,
                root=root,
                op=scenario.workload.op,
                dtype=scenario.workload.dtype,
                tuner_config_base=str(scenario.base_dir),
            )
        gloo = scenario.backends.gloo
        self.gloo_options = (
            GlooOptions(
                algorithm=gloo.algorithm,
                device=gloo.device,
                transport=gloo.transport,
                threads=gloo.worker_threads(),
                interfaces=gloo.interfaces,
                cores_per_process=scenario.workload.cores_per_process,
            )
            if gloo
            else GlooOptions()
        )
        self.gloo_options = dataclasses.replace(
            self.gloo_options, launch_delay=delays, peers=peers or (0, 1), root=root
        )
        self.fabric: dict[str, Any] = scenario.topology_kwargs().get("fabric") or {}

    def _launch_delays(self) -> tuple[tuple[int, float], ...]:
        """``perturb.ranks`` as (rank, seconds) pairs, every rank checked against the cluster's ranks."""
        perturb = self.scenario.perturb
        if perturb is None or not perturb.ranks:
            return ()
        for i, r in enumerate(perturb.ranks):
            self._rank(r.rank, f"perturb.ranks[{i}].rank")
        return add_delays((r.rank, r.seconds()) for r in perturb.ranks)

    @property
    def noisy(self) -> bool:
        """Whether the scenario draws noise (``noise.launch_skew`` or ``noise.jitter`` above 0)."""
        noise = self.scenario.noise
        return noise is not None and noise.active()

    @property
    def seed(self) -> int:
        """The seed of the noise draws: ``engine.seed``, 0 when unset."""
        return self.scenario.engine.seed or 0

    def noise_text(self) -> str:
        """The scenario's noise in words (``"launch_skew 5us, jitter 1us, seed 0"``); empty without noise."""
        noise = self.scenario.noise
        if noise is None or not noise.active():
            return ""
        parts = [f"{k} {v}" for k, v in (("launch_skew", noise.launch_skew), ("jitter", noise.jitter)) if v]
        return ", ".join([*parts, f"seed {self.seed}"])

    def options(self, backend: str, repetition: int = 0) -> NcclOptions | GlooOptions:
        """``backend``'s options for repetition ``repetition`` (>= 0) of a noisy scenario: each rank's launch skew
        drawn for it (:func:`collsim.noise.launch_skews`) added to the stragglers' delays, and its jitter seed;
        without noise, the scenario's options whatever the repetition."""
        base: NcclOptions | GlooOptions = self.nccl_options if backend == "nccl" else self.gloo_options
        if not self.noisy:
            return base
        noise = self.scenario.noise
        assert noise is not None
        n = len(self.topology.rank_devices())
        skews = launch_skews(n, noise.skew_seconds(), seed=self.seed, repetition=repetition)
        return dataclasses.replace(
            base,
            launch_delay=add_delays(base.launch_delay, skews),
            jitter=noise.jitter_seconds(),
            jitter_seed=repetition_seed(self.seed, repetition),
        )

    def _errors(self, field: str) -> AbstractContextManager[None]:
        """:func:`scenario_errors` for this scenario's file."""
        return scenario_errors(self.scenario.source_file, field)

    def _rank(self, rank: int, field: str) -> int:
        """``rank`` (the scenario's ``field``), checked against the cluster's ranks."""
        n = len(self.topology.rank_devices())
        if rank >= n:
            raise ScenarioError(
                f"expected a rank below {n} (the cluster's ranks), got {rank}",
                file=self.scenario.source_file,
                field=field,
            )
        return rank

    def _peers(self) -> tuple[int, int] | None:
        """``workload.peers`` as a pair, each checked against the cluster's ranks; None when unset."""
        peers = self.scenario.workload.peers
        if peers is None:
            return None
        return self._rank(peers[0], "workload.peers[0]"), self._rank(peers[1], "workload.peers[1]")

    def _check_gpus_per_process(self) -> None:
        """``workload.gpus_per_process`` divides the ranks of one node, and is above 1 only where there are GPUs."""
        g = self.scenario.workload.gpus_per_process
        if g > 1 and not self.topology.gpus():
            raise ScenarioError(
                f"{g} GPUs a process (nccl-tests -g {g}), but the cluster has no GPUs; a CPU-only node's processes "
                "per node are its 'processes' parameter",
                file=self.scenario.source_file,
                field="workload.gpus_per_process",
            )
        per_node = sum(1 for d in self.topology.rank_devices() if d.node == 0)
        if g > per_node:
            raise ScenarioError(
                f"expected at most the {per_node} ranks of one node, got {self.scenario.workload.gpus_per_process}",
                file=self.scenario.source_file,
                field="workload.gpus_per_process",
            )
        if per_node % g:
            raise ScenarioError(
                f"expected a divisor of the {per_node} ranks of one node (a process drives GPUs of its own node, and "
                f"the node's processes drive all of them), got {g}",
                file=self.scenario.source_file,
                field="workload.gpus_per_process",
            )
        self._check_process_hosts(g)

    def _check_process_hosts(self, g: int) -> None:
        """Each process's ``g`` GPUs (ranks in blocks of ``g``) sit on one host: a process runs on one operating
        system, which sees only its own host's GPUs. A node template can hold several hosts (a GB200 NVL72 rack's 18
        compute trays of 4 GPUs, joined only by NVLink), told apart by having no host link (PCIe, socket link,
        NVLink-C2C) between them."""
        if g == 1:
            return
        devs = [d for d in self.topology.rank_devices() if d.node == 0]
        for start in range(0, len(devs), g):
            first = devs[start]
            for k in range(start + 1, start + g):
                try:
                    self.topology.pcie_route(first.name, devs[k].name)
                except TopologyError:
                    raise ScenarioError(
                        f"{g} GPUs a process, but ranks {start} and {k} ({first.name}, {devs[k].name}) sit on "
                        f"separate hosts of node template {self.scenario.cluster.node!r} (joined by no PCIe, socket "
                        "or NVLink-C2C link, as a GB200 NVL72 rack's compute trays of 4 GPUs are): a process drives "
                        "GPUs of its own host only; expected a divisor of the GPUs of one host",
                        file=self.scenario.source_file,
                        field="workload.gpus_per_process",
                    ) from None

    @classmethod
    def from_source(
        cls,
        source: str | Path | Mapping[str, Any] | Scenario,
        overrides: Sequence[str] = (),
        profile: Profile | None = None,
    ) -> Simulator:
        """Load a scenario (file, built-in name, dict or a loaded one), apply ``--set`` style overrides, and prepare
        it."""
        return cls(load(source, overrides), profile)

    @cached_property
    def nccl_constants(self) -> NcclConstants:
        """NCCL's constants from ``topologies/software/nccl.yaml`` (with the calibration profile's overheads)."""
        with scenario_errors(str(_software_file("nccl")), "nccl"):
            consts = NcclConstants.from_mapping(_software("nccl"))
        return self.profile.apply_nccl(consts) if self.profile else consts

    @cached_property
    def gloo_constants(self) -> GlooConstants:
        """Gloo's constants from ``topologies/software/gloo.yaml`` (with the calibration profile's overheads)."""
        write_allocate = float(_software("training")["cpu_write_allocate_bytes_per_byte"])
        consts = GlooConstants.from_mapping(_software("gloo"), write_allocate=write_allocate)
        return self.profile.apply_gloo(consts) if self.profile else consts

    @cached_property
    def nccl_plan(self) -> NcclPlan:
        """Channels, rings and transports NCCL would use on this topology."""
        self._check_gpu_arch()
        with self._errors("backends.nccl"):
            return plan_nccl(self.topology, self.nccl_options, self.nccl_constants, self.fabric)

    def nccl_plan_facts(self) -> dict[str, object]:
        """What collsim's NCCL plan says about the facts NCCL prints at init with ``NCCL_DEBUG=INFO``: the release
        (``backends.nccl.version``, None for the latest tables), ranks, nodes, ranks per node, the ring/tree
        channels, NVLS's channels (0 where NVLS cannot run), the transports of every hop, the NICs per node and node
        0's NVLS head ranks (:func:`collsim.calibration.nccllog.check_plan` sets them beside the log's)."""
        plan, opts, consts = self.nccl_plan, self.nccl_options, self.nccl_constants
        nvls = NVLS()
        refused = nvls.refusal(plan, opts) is not None
        nccl = self.scenario.backends.nccl
        version = nccl.version if nccl else None
        return {
            "version": str(version) if version else None,
            "nranks": len(plan.ranks),
            "nnodes": plan.nnodes,
            "local_ranks": plan.ppn,
            "ring_channels": plan.channels,
            "nvls_channels": 0 if refused else nvls.channels(plan, opts, consts),
            "transports": {h.transport for h in plan.hops.values()},
            # NCCL lists the node's network devices whether or not one node's collectives use them
            "nics": plan.nic_count or sum(1 for d in self.topology.nics() if d.node == 0),
            "nvls_heads": [] if refused else self._nvls_head_ranks(),
        }

    def _nvls_head_ranks(self) -> list[int]:
        """Node 0's ranks that NCCL makes NVLS heads (:func:`~collsim.backends.nccl.plan.nvls_heads_by_node`: as
        many as any node has), in order."""
        nodes = sorted({d.node for d in self.topology.rank_devices()})
        heads = nvls_heads_by_node(self.topology, nodes, self.nccl_constants.nvls_max_arity)[nodes[0]]
        ranks = self.nccl_plan.ranks
        return sorted(ranks.index(g) for g in heads if g in ranks)

    def nccl_tuner_table(self, collective: str) -> dict[tuple[str, str], tuple[float, float, bool]]:
        """NCCL's cost model for ``collective`` as NCCL prints it with ``NCCL_DEBUG_SUBSYS=TUNING``: per modelled
        (algorithm, protocol), the latency (seconds), the algorithm bandwidth (bytes/s) and whether the pair is
        enabled here (NCCL prints a disabled pair's bandwidth as 0) (:func:`~collsim.backends.nccl.tuner_table`)."""
        plan, opts = self.nccl_plan, self.nccl_options
        enabled = set(enabled_pairs(plan, opts, collective))
        table = tuner_table(plan, self.nccl_constants, collective, opts)
        return {pair: (lat, bw, pair in enabled) for pair, (lat, bw) in table.items()}

    def nccl_tests_size_note(self, sizes: Sequence[int] | None = None) -> str | None:
        """A note when sizes exceed what nccl-tests runs on these GPUs: it caps ``-e`` at (the GPU's memory - 1 GiB
        a 16 GiB, at most 4 GiB - 1 GiB) / 3 with its data check (its send, receive and expected buffers; / 2 with
        ``-c 0``) and prints "Reducing maxBytes" (nccl-tests ``src/common.cu``, the cap after writeDeviceReport).
        From the GPU presets' ``hbm_capacity`` (the least of the ranks'; decimal bytes, where CUDA's total is a little
        more); None when no preset gives it or every size (default: ``workload.sizes``) fits.

        >>> Simulator.from_source("hgx-h100").nccl_tests_size_note(["32GiB"])[:56]
        'nccl-tests runs at most 23.2 GiB a call on these GPUs (h'
        """
        caps = [float(v) for d in self.topology.gpus() if (v := d.spec.get("hbm_capacity")) is not None]
        if not caps:
            return None
        wanted = self.scenario.sizes() if sizes is None else _sizes_arg(sizes) or []
        gib = float(1 << 30)  # nccl-tests' GB is 2**30 bytes
        memory = min(caps)
        reserve = min(math.ceil(memory / (16 * gib)) * gib, 4 * gib)
        cap = (memory - reserve - gib) / 3
        over = [s for s in wanted if s > cap]
        if not over:
            return None
        return (f"nccl-tests runs at most {cap / gib:.1f} GiB a call on these GPUs (hbm_capacity {memory / 1e9:.0f} "
                "GB: less 1 GiB a 16 GiB, at most 4, and 1 GiB, over its send, receive and expected buffers; / 2 with "
                f"-c 0; src/common.cu) and reduces -e to it: {len(over)} size{'s' if len(over) > 1 else ''} above it "
                f"simulated all the same ({format_size(max(over))} the largest)")  # fmt: skip

    def nccl_release_notes(self, collective: str | None = None) -> list[str]:
        """What NCCL's defaults and the scenario's release (``backends.nccl.version``) change for ``collective``
        (default: every collective the workload lists), one line each, as ``run``, ``explain`` and ``validate`` print
        them: CollNet or LL128 left off by default here, a release older or newer than the tuner tables collsim
        holds, the algorithms and protocols it does not have yet, behaviours of that release
        (:func:`~collsim.backends.nccl.tuner.release_notes`)."""
        wanted = collective or self.scenario.workload.collective
        out: list[str] = []
        for c in [wanted] if isinstance(wanted, str) else wanted:  # a workload may list several collectives
            out += [n for n in release_notes(self.nccl_plan, self.nccl_options, self.nccl_constants, c) if n not in out]
        return out

    def _preset_field(self, library: str, spec: Mapping[str, Any], key: str) -> tuple[str | None, str]:
        """(file, field) of ``key`` of the preset a device was built from: the user's scenario or presets file and
        ``presets.gpus.<name>.<key>`` for their own presets, the shipped file and ``<name>.<key>`` otherwise; the
        scenario and ``cluster.node`` for a device without a preset."""
        name = spec.get("preset")
        if not name:
            return self.scenario.source_file, "cluster.node"
        file, base = self.scenario.preset_library().origin(library, str(name))
        return file, f"{base or name}.{key}"

    def _check_gpu_arch(self) -> None:
        """Every GPU's ``arch`` is a generation NCCL's tuner tables know; else an error naming the GPU preset file
        and field (``gpus.yaml: <preset>.arch``), never Ampere's tables in silence."""
        known = self.nccl_constants.archs
        for gpu in self.topology.gpus():
            arch = str(gpu.spec.get("arch", ""))
            if arch in known:
                continue
            where, fld = self._preset_field("gpus", gpu.spec, "arch")
            raise ScenarioError(
                f"unknown GPU arch {arch!r}: NCCL's tuner tables (topologies/software/nccl.yaml) know "
                f"{', '.join(known)}",
                file=where,
                field=fld,
            )

    def backends(self) -> list[str]:
        """Backends the scenario enables, in order nccl, gloo."""
        return [b for b in self.scenario.backend_names() if b in BACKENDS]

    def _enabled(self, backends: Sequence[str] | None) -> list[str]:
        """``backends``, else the scenario's enabled ones; a ScenarioError (as ``collsim run`` gives) where that
        leaves none: an empty result would read as a run that finished."""
        chosen = self.backends() if backends is None else list(backends)
        if not chosen:
            raise ScenarioError("no backend enabled; enable backends.nccl or backends.gloo",
                                file=self.scenario.source_file, field="backends")  # fmt: skip
        return chosen

    def simulate_one(
        self,
        backend: str,
        size: int,
        *,
        collective: str | None = None,
        record: bool = False,
        choice: tuple[str, str] | None = None,
        symmetry: bool | None = None,
        repetition: int = 0,
        gloo_algorithm: str | None = None,
        harness: bool = True,
        op: str | None = None,
    ) -> Outcome:
        """Simulate one collective of ``size`` bytes with ``backend`` ("nccl" or "gloo").

        Parameters
        ----------
        backend : str
            ``"nccl"`` or ``"gloo"``.
        size : int
            Bytes (nccl-tests' size).
        collective : str, optional
            Default: the scenario's first collective.
        record : bool
            Keep every flow in the outcome's ``records`` (and the time breakdown).
        choice : (str, str), optional
            NCCL's (algorithm, protocol) instead of its cost model's pick, forced as NCCL_ALGO and NCCL_PROTO naming
            it alone would (over the scenario's own NCCL_ALGO and NCCL_PROTO): a pair NCCL could run on this cluster
            for the collective, else a :class:`~collsim.scenario.ScenarioError` saying why.
        symmetry : bool, optional
            Simulate provably identical ranks once; default: the scenario's ``engine.symmetry``.
        repetition : int
            Which draws of the scenario's noise (:meth:`options`); no effect without noise.
        gloo_algorithm : str, optional
            Gloo's allreduce algorithm instead of ``backends.gloo.algorithm``
            (:data:`collsim.vocab.GLOO_ALGORITHMS`).
        harness : bool
            Include what of the benchmark's harness the scenario's workload says its times hold
            (``workload.gpus_per_process``' serial launches, ``workload.host_overhead``); False: the collective as a
            program issues it (a training step).
        op : str, optional
            NCCL's reduction instead of ``workload.op`` (what NVLS can run depends on it: a training step's
            reduce-scatter with ``ReduceOp.AVG``).
        """
        size = _size_arg(size)
        try:  # nccl-tests' and PyTorch's spellings, as workload.collective takes them
            coll = canonical_collective(collective, COLLECTIVES) if collective else self.scenario.collectives()[0]
        except ValueError as exc:
            raise ScenarioError(str(exc), field="collective") from None
        sym = self.scenario.engine.symmetry if symmetry is None else symmetry
        eng = self.scenario.engine
        label = f"{backend} {coll} {format_size(size)}"
        if choice is not None or gloo_algorithm is not None:  # explain --all, validate --pairs: which pair runs
            shown = "/".join(map(str, choice)) if isinstance(choice, tuple | list) else str(choice)
            label += f" ({shown if choice is not None else gloo_algorithm})"
        if current_budget().label:  # a caller's word on why this runs (a rerun without records)
            label += f", {current_budget().label}"
        try:
            with self._errors(f"backends.{backend}"), work_budget(
                max_flows=eng.max_flows, max_records=eng.max_records, label=label
            ):
                out = self._simulate(backend, size, coll, record, choice, sym, repetition, gloo_algorithm, harness, op)
        except WorkLimitExceeded as exc:
            how = "every rank simulated" if not sym else "symmetry on"
            raise ScenarioError(
                f"{label} ({how}) passed the limit of {exc.limit} "
                f"{'recorded flows' if exc.field == 'engine.max_records' else 'flows'} after "
                f"{exc.simulated_s * 1e6:.6g} us of "
                f"simulated time; raise it (--set {exc.field}=N, or null for none: about 23 us a flow"
                + (", 1.5 KB a recorded one" if exc.field == "engine.max_records" else "")
                + "), or ask for fewer nodes or smaller sizes"
                + (
                    "; or --set engine.decouple=true: the channels that reach a slowed link (or a NIC standing in "
                    "for one down) simulated apart, an approximation (docs/perturbations.md)"
                    if backend == "nccl" and sym and not eng.decouple and self.topology.perturbed_links()
                    else ""
                ),
                file=self.scenario.source_file,
                field=exc.field,
            ) from None
        # the bytes moved, as nccl-tests prints them (the size asked for less any part element; for NCCL's
        # per-rank collectives a per-rank multiple of 16 bytes): see _simulate
        return out

    def _simulate(
        self,
        backend: str,
        size: int,
        coll: str,
        record: bool,
        choice: tuple[str, str] | None,
        sym: bool,
        repetition: int,
        gloo_algorithm: str | None,
        harness: bool,
        op: str | None = None,
    ) -> Outcome:
        """:meth:`simulate_one`'s simulation of what a benchmark of ``size`` moves: NCCL's as nccl-tests passes its
        count (:func:`nccl_tests_bytes`: whole elements, a per-rank multiple of 16 bytes for allgather,
        reduce_scatter and alltoall; without the ``harness``, a training step's tensors, whole elements), Gloo's
        whole elements (:func:`whole_element_bytes`: a torch tensor). The
        outcome's ``size_bytes`` is that size, as nccl-tests prints it; a note says so when it differs from
        ``size``."""
        if backend not in BACKENDS:
            raise ScenarioError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}", field="backend")
        dtype = self.scenario.workload.dtype
        nranks = len(self.nccl_plan.ranks) if backend == "nccl" else len(self.topology.rank_devices())
        # nccl-tests' 16-byte rounding is its harness's (harness=False: a training step's tensors, whole elements)
        moved = (nccl_tests_bytes if backend == "nccl" and harness else whole_element_bytes)(size, dtype, coll, nranks)
        if backend == "nccl":
            nccl_options = self.options("nccl", repetition)
            assert isinstance(nccl_options, NcclOptions)
            if not harness:
                nccl_options = dataclasses.replace(nccl_options, gpus_per_process=1, host_overhead=0.0)
            if op is not None:
                if op not in REDUCE_OPS:
                    raise ScenarioError(
                        f"unknown reduction {op!r}; expected one of {', '.join(REDUCE_OPS)}", field="op"
                    )
                nccl_options = dataclasses.replace(nccl_options, op=op)
            out = simulate_nccl(
                self.topology,
                nccl_options,
                self.nccl_constants,
                moved,
                collective=coll,
                fabric=self.fabric,
                plan=self.nccl_plan,
                symmetry=sym,
                record=record,
                choice=choice,
            )
        else:
            self._check_gloo_types(coll)
            gloo_options = self.options("gloo", repetition)
            assert isinstance(gloo_options, GlooOptions)
            if gloo_algorithm is not None:
                gloo_options = dataclasses.replace(gloo_options, algorithm=gloo_algorithm)
            out = simulate_gloo(
                self.topology, gloo_options, self.gloo_constants, moved, collective=coll, symmetry=sym, record=record
            )
        if moved != size:
            elem = DTYPE_SIZES[dtype]
            per_rank = coll in PER_RANK_COUNT_COLLECTIVES  # the count is a rank's part of the size
            if moved == whole_element_bytes(size, dtype, coll, nranks) and (per_rank and size % elem == 0):
                why = f"not whole {dtype} elements a rank over {nranks} ranks ({size // elem} elements of {elem} B)"
            elif moved == whole_element_bytes(size, dtype, coll, nranks):
                why = f"not whole {dtype} elements{' a rank' if per_rank else ''} ({elem} B each)"
            else:  # nccl-tests' 16-byte multiple a rank
                why = (f"{size // elem // nranks} {dtype} elements a rank on {nranks} ranks, which nccl-tests rounds "
                       "down to a multiple of 16 bytes")
            out.notes = [*out.notes, f"{size} B asked for: {why}; {moved} B moved (nccl-tests' size column)"]
        out.size_bytes = moved
        return out

    def _check_gloo_types(self, collective: str) -> None:
        """Refuse what torch's ProcessGroupGloo refuses (torch 2.13, checked with two ranks on CPU tensors):
        uint32 and uint64 in every collective but send/recv ("Invalid scalar type": its type switch has no unsigned
        type beyond uint8), and ``avg`` of an integer type in a reduction (the division's float result "can't be cast
        to the desired output type")."""
        w = self.scenario.workload
        if w.dtype in ("uint32", "uint64") and collective != "sendrecv":
            raise ScenarioError(f"{w.dtype}: torch's Gloo backend refuses it in {collective} ('Invalid scalar type'; "
                                "it has no unsigned type beyond uint8); use --backend nccl or another dtype",
                                file=self.scenario.source_file, field="workload.dtype")  # fmt: skip
        integer = w.dtype.startswith(("int", "uint"))
        if w.op == "avg" and integer and collective in ("allreduce", "reduce_scatter", "reduce"):
            raise ScenarioError(f"avg of {w.dtype}: torch's Gloo backend refuses it (the division's float result "
                                "can't be cast back to an integer type); use sum or a floating dtype",
                                file=self.scenario.source_file, field="workload.op")  # fmt: skip

    def recorded(self, backend: str, size: int, collective: str | None = None) -> Outcome:
        """One collective with every rank and channel simulated (symmetry off) and every flow recorded: what
        timelines, traces and link figures draw.

        Parameters
        ----------
        backend : str
            ``"nccl"`` or ``"gloo"``.
        size : int
            Bytes.
        collective : str, optional
            Default: the scenario's first collective.
        """
        return self.simulate_one(backend, size, collective=collective, record=True, symmetry=False)

    def to_record(self, out: Outcome) -> Record:
        """The nccl-tests style record of an outcome."""
        return make_record(
            backend=out.backend,
            collective=out.collective,
            algorithm=out.algorithm,
            protocol=out.protocol,
            nranks=out.nranks,
            dtype=self.scenario.workload.dtype,
            size_bytes=out.size_bytes,
            time_s=out.time_s,
            redop=self.scenario.workload.op if out.collective in REDUCING_COLLECTIVES else None,
            root=self.scenario.workload.root if out.collective in ROOTED_COLLECTIVES else -1,
            channels=out.channels,
            breakdown=out.breakdown,
            notes=out.notes,
        )

    def run(
        self,
        backends: Sequence[str] | None = None,
        sizes: Sequence[int] | None = None,
        *,
        record: bool = False,
        breakdown: bool = False,
        progress: Progress | None = None,
        jobs: int = 1,
    ) -> SweepResult:
        """Simulate every size with every backend; Ctrl-C stops cleanly and keeps the rows already computed.

        Parameters
        ----------
        backends : sequence of str, optional
            Default: the scenario's enabled backends.
        sizes : sequence of int, optional
            Bytes; default: the scenario's ``workload.sizes``.
        record : bool
            Keep every flow (for traces); implies ``breakdown``.
        breakdown : bool
            Attribute each collective's time to activities (records' ``breakdown``).
        progress : callable, optional
            Called as ``progress(backend, size, index, total)`` before each simulation (with ``jobs > 1``, as
            each one finishes).
        jobs : int
            Worker processes (each simulates whole (backend, size) points; results and their order are the same
            as with 1). ``0`` means one per CPU. Needs the ``fork`` start method (Linux, macOS); elsewhere 1.
        """
        backends, sizes = _backends_arg(backends), _sizes_arg(sizes)
        todo = [(b, s) for b in self._enabled(backends) for s in (self.scenario.sizes() if sizes is None else sizes)]
        result = SweepResult(self.scenario)
        keep = record or breakdown
        done, result.interrupted = self.map_points(
            lambda i: self._point(todo[i][0], todo[i][1], keep, record),
            len(todo),
            jobs,
            sizes=[s for _b, s in todo],
            progress=(lambda i, n: progress(todo[i][0], todo[i][1], n, len(todo))) if progress else None,
        )
        for i in sorted(done):
            for out in done[i]:
                result.outcomes.append(out)
                result.records.append(self.to_record(out))
        return result

    def run_repeated(
        self,
        repeat: int,
        backends: Sequence[str] | None = None,
        sizes: Sequence[int] | None = None,
        *,
        progress: Progress | None = None,
        jobs: int = 1,
    ) -> SweepResult:
        """Simulate every size with every backend ``repeat`` times, each run with its own draws of the scenario's
        noise (repetition 0 .. repeat-1, :meth:`options`); one :class:`~collsim.results.RepeatedRecord` per
        (backend, collective, size) with the median run's time and the runs' p50, p99, min and max.

        Without noise every run is the same: the sweep is simulated once and its time stands for all ``repeat``
        runs (p50 = p99 = min = max).

        Parameters
        ----------
        repeat : int
            Runs per size, >= 1.
        backends, sizes, progress, jobs
            As :meth:`run` (``progress`` counts every run).

        Returns
        -------
        SweepResult
            ``records``: RepeatedRecords in backend, size, collective order; ``outcomes``: every run's. After
            Ctrl-C only the sizes whose runs all finished have records.
        """
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ScenarioError(f"expected a number of runs >= 1, got {repeat!r}", file="--repeat")
        backends, sizes = _backends_arg(backends), _sizes_arg(sizes)
        runs = repeat if self.noisy else 1
        todo = [
            (b, s, r)
            for b in self._enabled(backends)
            for s in (self.scenario.sizes() if sizes is None else sizes)
            for r in range(runs)
        ]
        result = SweepResult(self.scenario)
        done, result.interrupted = self.map_points(
            lambda i: self._point(todo[i][0], todo[i][1], False, False, todo[i][2]),
            len(todo),
            jobs,
            sizes=[s for _b, s, _r in todo],
            progress=(lambda i, n: progress(todo[i][0], todo[i][1], n, len(todo))) if progress else None,
        )
        for start in range(0, len(todo), runs):
            group = [done.get(i) for i in range(start, start + runs)]
            if any(g is None for g in group):
                continue  # interrupted before every run of this size finished
            outs: list[list[Outcome]] = [g for g in group if g is not None]
            for k, first in enumerate(outs[0]):
                times = [o[k].time_s for o in outs] * (repeat // runs)  # without noise: one run stands for all
                result.outcomes.extend(o[k] for o in outs)
                result.records.append(repeated_record(self.to_record(first), times))
        return result

    def _point(self, backend: str, size: int, keep: bool, record: bool, repetition: int = 0) -> list[Outcome]:
        """Every collective of the scenario at one (backend, size) (with repetition ``repetition``'s noise); flow
        records dropped unless ``record``."""
        outs = []
        for coll in self.scenario.collectives():
            if keep and not record:  # the records for the time breakdown only
                out = self._with_breakdown(backend, size, collective=coll, repetition=repetition)
            else:
                out = self.simulate_one(backend, size, collective=coll, record=keep, repetition=repetition)
            if not record:
                out.records = []
            outs.append(out)
        return outs

    def _with_breakdown(self, backend: str, size: int, **kwargs: Any) -> Outcome:
        """:meth:`simulate_one` with the flow records its time breakdown is read from; where recording them would
        pass ``engine.max_records`` (a thousand GPUs with one slow NIC: millions of flows), the collective again
        without them, its breakdown left empty and a note saying why (its time is the same: records only keep what
        the simulation does)."""
        try:
            out = self.simulate_one(backend, size, record=True, **kwargs)
        except ScenarioError as err:
            if err.field != "engine.max_records":
                raise
        else:
            out.bottleneck = self._bottleneck(out)
            return out
        limit = self.scenario.engine.max_records
        # said on the heartbeat: a long run starting over from 0 us with no word looked like a hang or a bug
        with work_budget(label=f"again without flow records (recording them passed engine.max_records, {limit})"):
            out = self.simulate_one(backend, size, record=False, **kwargs)
        note = (f"{NO_BREAKDOWN}: recording it passes engine.max_records ({limit} flows; --set "
                "engine.max_records=N or null records more, 1.5 KB a flow); the time does not hang on it")  # fmt: skip
        out.notes = [*out.notes, note]
        return out

    def _bottleneck(self, out: Outcome) -> Bottleneck | None:
        """The most loaded link of a recorded outcome (:func:`collsim.trace.link_usage`: bytes over bandwidth as a
        share of the time), or None without records."""
        from collsim.trace import link_usage, resource_capacities, strip_symmetric

        if not out.records or out.time_s <= 0:
            return None
        usage = link_usage(out.records, resource_capacities(self.topology), total_s=out.time_s, bins=1)
        if not usage:
            return None
        top = usage[0]
        return Bottleneck(strip_symmetric(top.name), top.kind, float(top.load_share))

    def map_points(
        self,
        task: Callable[[int], Any],
        count: int,
        jobs: int = 1,
        *,
        sizes: Sequence[int] | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[dict[int, Any], bool]:
        """:func:`collsim.parallel.map_points` for this simulator: ``{i: task(i)}`` and whether Ctrl-C stopped it.

        With workers, the NCCL plan and each enabled backend's constants are built before they fork, so that every
        worker inherits them instead of building its own.
        """
        if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
            raise ScenarioError(f"expected 0 (one per CPU) or a positive count of workers, got {jobs!r}",
                                field="jobs")  # fmt: skip
        return parallel.map_points(task, count, jobs, sizes=sizes, progress=progress, prepare=self._prepare)

    def _prepare(self) -> None:
        """Build what every point of a sweep shares (the NCCL plan, the constants)."""
        if "nccl" in self.backends():
            _ = self.nccl_plan
        if "gloo" in self.backends():
            _ = self.gloo_constants

    def explain(
        self,
        sizes: Sequence[int] | None = None,
        *,
        all_pairs: bool = False,
        progress: Progress | None = None,
        jobs: int = 1,
    ) -> tuple[list[Explanation], bool]:
        """NCCL's cost model per size for every enabled pair, its choice, and the simulated time of the choice
        (of every pair with ``all_pairs``); returns (rows, interrupted). ``jobs`` as in :meth:`run`."""
        asked = _sizes_arg(sizes)
        every = self.scenario.sizes() if asked is None else asked
        todo = [(c, s) for c in self.scenario.collectives() for s in every]
        done, interrupted = self.map_points(
            lambda i: self._explain_point(*todo[i], all_pairs),
            len(todo),
            jobs,
            sizes=[s for _c, s in todo],
            progress=(lambda i, n: progress("nccl", todo[i][1], n, len(todo))) if progress else None,
        )
        return [done[i] for i in sorted(done)], interrupted

    def _explain_point(self, coll: str, size: int, all_pairs: bool) -> Explanation:
        """One (collective, size) of :meth:`explain`: the cost model's table over the enabled pairs (in the cost
        model's order), NCCL's choice (:func:`collsim.backends.nccl.choose`, the pick ``run`` simulates), and the
        simulated times."""
        plan, opts, consts = self.nccl_plan, self.nccl_options, self.nccl_constants
        with self._errors("backends.nccl"):
            pairs = enabled_pairs(plan, opts, coll)
            model = {k: t for k, t in tuner_times(plan, consts, coll, size, opts).items() if k in pairs}
            algorithm, protocol, _ = choose(plan, opts, consts, coll, size)
        choice = (algorithm, protocol)
        simulated = {
            pair: self.simulate_one("nccl", size, collective=coll, choice=pair).time_s
            for pair in (model if all_pairs else [choice])
        }
        return Explanation(coll, size, model, choice, simulated)

    def _without_stragglers(self) -> Simulator:
        """The same scenario without ``perturb.ranks`` (its other perturbations kept)."""
        p = self.scenario.perturb
        assert p is not None
        return Simulator(self.scenario.model_copy(update={"perturb": p.model_copy(update={"ranks": []})}),
                         self.profile)  # fmt: skip

    def healthy(self) -> Simulator:
        """The same scenario without its ``perturb`` section (and the same calibration profile): the cluster a
        perturbed run is compared with."""
        return Simulator(self.scenario.model_copy(update={"perturb": None}), self.profile)  # keeps file and folder

    def perturbations(self) -> list[str]:
        """The scenario's perturbations, one line each (empty when it has none)."""
        p = self.scenario.perturb
        if p is None:
            return []
        out = []
        def drawn(field: str, i: int, choose: int | None) -> str:  # which ones the seed drew, named (up to 8)
            names = self._drawn.get((field, i), [])
            shown = f": {', '.join(names[:8])}{' ...' if len(names) > 8 else ''}" if names else ""
            return f", {choose} drawn (seed {p.seed + i}){shown}"

        for i, ln in enumerate(p.links):
            text = f"links at {ln.device}{f' ({ln.kind})' if ln.kind else ''} x{ln.scale:g}"
            out.append(text + drawn("links", i, ln.choose) if ln.choose else text)
        for i, dn in enumerate(p.down):
            what = f"links {dn.device} -> {dn.peer}" if dn.peer else dn.device
            text = f"{what}{f' ({dn.kind})' if dn.kind else ''} down"
            out.append(text + drawn("down", i, dn.choose) if dn.choose else text)
        for sub in sorted(self.topology.nic_substitutes.values(), key=lambda x: x[0].name):
            out.append(f"  {sub[0].name}'s channels on {sub[1]} (the nearest NIC left)")
        for i, bg in enumerate(p.background):
            offered = f"{bg.rate} per link direction" if bg.rate is not None else f"load {bg.load:g} of each link"
            where = f"{bg.device}{f' -> {bg.peer}' if bg.peer else ''}{f' ({bg.kind})' if bg.kind else ''}"
            text = f"background traffic at {where}: {offered}"
            out.append(text + drawn("background", i, bg.choose) if bg.choose else text)
        return out + [f"rank {r.rank} launches {r.launch_delay} late" for r in p.ranks]

    # ------------------------------------------------------------------------------------------- training step
    def _training(self) -> TrainingConfig:
        """The scenario's ``training`` section; a ScenarioError when it has none."""
        if self.scenario.training is None:
            raise ScenarioError(
                "expected a training section (model, batch_size, ...) for a training step",
                file=self.scenario.source_file,
                field="training",
            )
        if self.topology.ranks_per_gpu > 1:
            raise ScenarioError(
                f"a training step with {self.topology.ranks_per_gpu} processes sharing each GPU is not modelled (their "
                "kernels would time-slice the GPU); set cluster.ranks_per_gpu: 1",
                file=self.scenario.source_file,
                field="cluster.ranks_per_gpu",
            )
        return self.scenario.training

    @cached_property
    def training_model(self) -> ModelSpec:
        """The model of the ``training`` section (a built-in name or a model file), in ``training.param_dtype``
        where set, else in the dtypes its file gives."""
        tr = self._training()
        with self._errors("training.model"):
            model = load_model(tr.model_path(self.scenario.base_dir))
        # AMP (autocast) keeps parameters and gradients in param_dtype and computes activations in the compute dtype
        act = tr.compute_dtype if tr.compute_dtype in ("bfloat16", "float16") else "float32"
        return model.with_dtype(tr.param_dtype, act_dtype=act)

    @cached_property
    def step_constants(self) -> StepConstants:
        """``topologies/software/training.yaml``."""
        with scenario_errors(str(_software_file("training")), "training"):
            return StepConstants.from_mapping(_software("training"))

    def gpu_compute(self) -> GpuCompute:
        """What each rank's GPU computes with: its preset's peak FLOP/s for ``training.compute_dtype``, HBM bandwidth
        and SM count, and the efficiencies (the section's, else training.yaml's)."""
        tr = self._training()
        ranks = self.topology.rank_devices()
        if ranks and ranks[0].kind == "cpu":
            return self._cpu_compute(ranks[0].spec, sum(1 for d in ranks if d.name == ranks[0].name))
        gpus = [d for d in ranks if d.kind == "gpu"]
        if not gpus:
            raise ScenarioError("a training step needs GPU or CPU ranks", file=self.scenario.source_file,
                                field="cluster")  # fmt: skip
        spec = gpus[0].spec
        peaks = spec.get("peak_tflops") or {}
        if peaks and not peaks.get(tr.compute_dtype):  # the GPU has no such math (a V100 has no TF32): the choice's
            have = ", ".join(k for k, v in peaks.items() if v)
            raise ScenarioError(f"{tr.compute_dtype!r}: the GPU ({spec.get('preset', spec.get('model', 'gpu'))}) "
                                f"has no peak for it in its preset; expected one of {have}",
                                file=self.scenario.source_file, field="training.compute_dtype")  # fmt: skip
        for key, value in (("peak_tflops", peaks.get(tr.compute_dtype)), ("sm_count", spec.get("sm_count")),
                           ("hbm_bandwidth", spec.get("hbm_bandwidth"))):  # fmt: skip
            if not value:
                raise ScenarioError(
                    f"the GPU preset has no {key}{f' for {tr.compute_dtype}' if key == 'peak_tflops' else ''}, "
                    "which a training step needs",
                    file=self._preset_field("gpus", spec, key)[0],
                    field=self._preset_field("gpus", spec, key)[1],
                )
        consts = _software("training")
        return GpuCompute(
            str(spec.get("preset", spec.get("model", "gpu"))),
            float(peaks[tr.compute_dtype]) * 1e12,  # TFLOP/s -> FLOP/s
            float(spec["hbm_bandwidth"]),
            int(spec["sm_count"]),
            tr.compute_efficiency or float(consts["compute_efficiency"]),
            tr.memory_efficiency or float(consts["memory_efficiency"]),
        )

    def _cpu_compute(self, spec: Mapping[str, Any], sharing: int) -> GpuCompute:
        """CPU ranks: the layers' measured times (required: no FLOP model of a CPU), the socket's memory bandwidth
        and cores shared by the ``sharing`` ranks on it (DDP's copies and the optimizer; the compute thread and
        Gloo's worker threads; at most ``workload.cores_per_process`` cores), no SMs. Where the preset gives
        ``copy_bw_per_core`` a rank's memory passes stream at most at its intra-op threads' copy rate (as traffic:
        3 bytes per byte copied); where it gives ``first_touch_bw`` allocations from ``gloo.yaml``'s
        ``fresh_mapping_bytes`` fault in at that rate."""
        model = self.training_model
        missing = [ly.name for ly in model.layers if ly.fwd_time_s is None or ly.bwd_time_s is None]
        if missing:
            raise ScenarioError(
                f"CPU ranks need measured per-layer times (fwd_time_s and bwd_time_s in the model file); "
                f"{len(missing)} layer(s) have none, e.g. {missing[0]!r}",
                file=self.scenario.source_file,
                field="training.model",
            )
        consts = _software("training")
        bandwidth = float(spec.get("memory_bandwidth") or 0.0) / max(1, sharing)
        if bandwidth <= 0:
            where, fld = self._preset_field("cpus", spec, "memory_bandwidth")
            raise ScenarioError("the CPU preset has no memory_bandwidth, which a training step needs", file=where,
                                field=fld)  # fmt: skip
        tr = self._training()
        write_allocate = float(consts["cpu_write_allocate_bytes_per_byte"])
        copy_rate = float(spec.get("copy_bw_per_core") or 0.0)
        if copy_rate > 0:  # one thread streams no faster than it copies: (2 + write-allocate) bytes per byte copied
            bandwidth = min(bandwidth, copy_rate * (2.0 + write_allocate) * tr.intra_op_threads)
        cores = float(spec.get("cores") or 0) / max(1, sharing)
        confined = self.scenario.workload.cores_per_process
        if confined is not None:  # taskset, a container's CPU limit: the process runs on no more
            cores = min(cores, confined)
        if cores <= 0:
            where, fld = self._preset_field("cpus", spec, "cores")
            raise ScenarioError("the CPU preset has no cores, which a training step on CPU ranks needs", file=where,
                                field=fld)  # fmt: skip
        # fresh allocations (FSDP's unsharded parameters, gradients and clones) fault in at the preset's first_touch_bw
        touch = float(spec.get("first_touch_bw") or 0.0)
        fresh = float(_software("gloo")["fresh_mapping_bytes"])  # glibc's largest mmap threshold (gloo.yaml)
        # peak_flops only converts measured seconds into engine units here: any positive value gives the same times
        return GpuCompute(str(spec.get("preset", "cpu")), 1e12, bandwidth, 0, 1.0,
                          tr.memory_efficiency or float(consts["memory_efficiency"]), cores,
                          float(tr.intra_op_threads), write_allocate, touch, fresh)  # fmt: skip

    def step(self, backends: Sequence[str] | None = None) -> list[StepResult]:
        """Simulate one DDP iteration of the ``training`` section per backend (default: the enabled ones).

        NCCL's buckets are all-reduced one after another on its stream, each as NCCL's simulation of that size says;
        Gloo's go to its worker threads with CUDA tensors (D2H, CPU ring, H2D), simulated together from the times
        their gradients are ready. See :mod:`collsim.training.step`.
        """
        backends = _backends_arg(backends)
        notes = (*self._measured_batch_notes(), *self._style_notes(), *self._memory_notes())
        gloo = self._gloo_device_notes()
        steps = self._fsdp_step(backends) if self._training().style == "fsdp" else self._ddp_step(backends)
        return [dataclasses.replace(r, notes=(*r.notes, *notes, *(gloo if r.backend == "gloo" else ()))) for r in steps]

    def _memory_notes(self) -> tuple[str, ...]:
        """A note when the model states a rank holds at least (:func:`~collsim.training.memory.model_state_bytes`:
        parameters, gradients, DDP's buckets, the optimizer's state; no activations) exceed 75% of the GPU's
        ``hbm_capacity``: the step is simulated all the same, its memory is not."""
        ranks = self.topology.rank_devices()
        capacity = ranks[0].spec.get("hbm_capacity") if ranks and ranks[0].kind == "gpu" else None
        if not capacity:
            return ()
        tr, model = self._training(), self.training_model
        buffers = state_buffers(self.step_constants.optimizer_traffic[tr.optimizer][1])
        if tr.style == "fsdp":
            f = tr.fsdp
            shards = len(ranks)
            if f.sharding == "hybrid_shard":
                shards = f.shard_group or sum(1 for d in ranks if d.node == ranks[0].node)
            need = model_state_bytes(model, buffers, style="fsdp", sharding=f.sharding, shards=shards)
            what = f"FSDP {f.sharding} over {shards} ranks: parameters, gradients"
        else:
            view = tr.gradient_as_bucket_view
            need = model_state_bytes(model, buffers, style="ddp", bucket_view=view)
            what = "DDP: parameters, gradients" + ("" if view else ", the buckets' copy")
        share = need / float(capacity)
        if share < 0.75:
            return ()
        # GB = 1e9 bytes, as the GPU presets' capacities are given
        head = (f"memory: the model states alone take {need / 1e9:.1f} GB a GPU ({what}, {tr.optimizer}'s state; "
                f"activations not counted), {share:.0%} of its {float(capacity) / 1e9:.0f} GB (hbm_capacity)")
        tail = "; this step would not fit (memory is not simulated)" if share >= 1 else "; little left for activations"
        return (head + tail,)

    def _style_notes(self) -> tuple[str, ...]:
        """The other style's knobs the scenario sets, which this step does not use (named, so that a value given is
        not taken for one applied)."""
        tr = self._training()
        if tr.style == "ddp":
            unset = FsdpTrainingConfig.model_validate({})
            return ("training.fsdp is FSDP's: not used with style: ddp",) if tr.fsdp != unset else ()
        ddp_only = {"bucket_cap_mb": tr.bucket_cap_mb is not None,
                    "gradient_as_bucket_view": tr.gradient_as_bucket_view, "first_iteration": tr.first_iteration}
        given = [f"training.{k}" for k, on in ddp_only.items() if on]
        return (f"{', '.join(given)}: DDP's (its Reducer's buckets); not used with style: fsdp",) if given else ()

    def _gloo_device_notes(self) -> tuple[str, ...]:
        """A note when ``backends.gloo.device`` is not the ranks' own: a step hands Gloo the ranks' tensors."""
        gloo = self.scenario.backends.gloo
        own = self._gloo_step_options().device
        if gloo is None or gloo.device == own:
            return ()
        return (f"backends.gloo.device {gloo.device} not used: a training step hands Gloo the ranks' own {own} "
                "tensors",)

    def _measured_batch_notes(self) -> tuple[str, ...]:
        """Measured layer times are a batch's: a step at another ``training.batch_size`` than the model file's
        ``batch_size`` is refused (naming the field); a note where the file does not say its batch."""
        tr, model = self._training(), self.training_model
        if not model.measured:
            return ()
        if model.measured_batch is None:
            return (f"model {model.name!r}: its measured layer times are used as they are, at any "
                    "training.batch_size (its file does not say the batch they were measured at: batch_size)",)
        if model.measured_batch != tr.batch_size:
            raise ScenarioError(f"{tr.batch_size}, but the layer times of model {model.name!r} were measured at "
                                f"batch {model.measured_batch} (its file's batch_size); measure at this batch "
                                f"(collsim bench --ddp --batch {tr.batch_size} --model-out FILE) or set "
                                "training.batch_size: "
                                f"{model.measured_batch}", file=self.scenario.source_file,
                                field="training.batch_size")  # fmt: skip
        return ()

    def _ddp_step(self, backends: Sequence[str] | None) -> list[StepResult]:
        """One DDP iteration per backend (:meth:`step`)."""
        tr = self._training()
        model, gpu = self.training_model, self.gpu_compute()
        checkpointing, blocks = self._checkpointing()
        cfg = DdpConfig(tr.batch_size, tr.bucket_cap_mb, tr.gradient_as_bucket_view, tr.accumulation,
                        tr.compression, tr.optimizer, tr.first_iteration, checkpointing, blocks,
                        tr.checkpoint_early_stop, tr.gradient_clipping)  # fmt: skip
        world = len(self.topology.rank_devices())
        out = []
        for backend in backends or self.backends():
            with self._errors(f"backends.{backend}"):
                if backend == "nccl":
                    # a straggler launches each bucket late after it is ready: the buckets priced without it
                    straggle = max((d for _, d in self._launch_delays()), default=0.0)
                    costs = self._without_stragglers() if straggle > 0 else self
                    res = simulate_ddp_step(model, cfg, gpu, self.step_constants, world,
                                            nccl=costs._nccl_allreduce_costs(), straggle_s=straggle)  # fmt: skip
                    out.append(dataclasses.replace(res, notes=(*res.notes, *self._harness_notes())))
                elif backend == "gloo":
                    runner, threads = self._gloo_runner()
                    cpu = self._gloo_cpu_work() if gpu.cores > 0 else None
                    out.append(simulate_ddp_step(model, cfg, gpu, self.step_constants, world, gloo=runner,
                                                 gloo_threads=threads, gloo_cpu=cpu))  # fmt: skip
        return out

    def _checkpointing(self) -> tuple[bool, str | None]:
        """``training.activation_checkpointing`` as (on, block pattern or None for the default blocks), checked
        against the model: a pattern that matches no layer is an error naming the field."""
        value = self._training().activation_checkpointing
        if value is False:
            return False, None
        blocks = None if value is True else str(value)
        try:
            checkpoint_regions(self.training_model, blocks)
        except ValueError as exc:
            raise ScenarioError(str(exc).removeprefix("activation checkpointing: "), file=self.scenario.source_file,
                                field="training.activation_checkpointing") from None  # fmt: skip
        return True, blocks

    def _fsdp_config(self) -> FsdpConfig:
        """``training.fsdp`` (and the step's other fields) as :class:`FsdpConfig`, each knob checked against the
        version and strategy it needs, an error naming the field where the scenario asks for what FSDP cannot do."""
        tr = self._training()
        f = tr.fsdp
        if tr.compression != "none":
            raise ScenarioError("FSDP with a compression hook is not modelled (DDP's comm hooks)",
                                file=self.scenario.source_file, field="training.compression")  # fmt: skip
        if f.version == 2:  # fully_shard has none of FullyShardedDataParallel's prefetch and limiter arguments
            defaults = FsdpTrainingConfig.model_validate({})
            for knob in ("backward_prefetch", "forward_prefetch", "limit_all_gathers"):
                if getattr(f, knob) != getattr(defaults, knob):  # FSDP1's defaults are what FSDP2 does anyway
                    raise ScenarioError(f"{knob}: {getattr(f, knob)!r} is FSDP1's (FullyShardedDataParallel); FSDP2 "
                                        "(version: 2) prefetches one module implicitly and limits its all-gathers on "
                                        f"the GPU's streams; expected the default, {getattr(defaults, knob)!r}",
                                        file=self.scenario.source_file, field=f"training.fsdp.{knob}")  # fmt: skip
            if f.sharding == "no_shard":
                raise ScenarioError("FSDP2 (version: 2) has no no_shard (use style: ddp); expected full_shard, "
                                    "shard_grad_op or hybrid_shard", file=self.scenario.source_file,
                                    field="training.fsdp.sharding")  # fmt: skip
        fsdp2_only = {"modules_to_forward_prefetch": f.modules_to_forward_prefetch != 0,
                      "modules_to_backward_prefetch": f.modules_to_backward_prefetch is not None,
                      "reduce_scatter_max_input_buffers": f.reduce_scatter_max_input_buffers != 1}
        if f.version != 2 and any(fsdp2_only.values()):
            knob = next(k for k, given in fsdp2_only.items() if given)
            raise ScenarioError(f"{knob} is FSDP2's (version: 2); FSDP1 has backward_prefetch, forward_prefetch and "
                                "limit_all_gathers", file=self.scenario.source_file,
                                field=f"training.fsdp.{knob}")  # fmt: skip
        names = [ly.name for ly in self.training_model.layers]
        if f.wrap is not None and not any(layer_blocks(names, f.wrap)):  # FSDP would wrap nothing but the root
            raise ScenarioError(f"pattern {f.wrap!r} matches no layer of model {self.training_model.name!r} "
                                f"({block_pattern_hint(names)})", file=self.scenario.source_file,
                                field="training.fsdp.wrap")  # fmt: skip
        model = self.training_model
        for unit in fsdp_units(model, 1, f.wrap):  # torch flattens (FSDP1) or groups (FSDP2) a unit's parameters
            dtypes = sorted({model.params[p].dtype for p in unit.params})
            if len(dtypes) > 1:  # FSDP1 _flat_param.py "Must flatten tensors with uniform dtype"; FSDP2
                # _fsdp_param_group.py _init_mp_dtypes "FSDP expects uniform original parameter dtype"
                raise ScenarioError(f"FSDP unit {unit.name or '(root)'!r} of model {model.name!r} mixes parameter "
                                    f"dtypes {', '.join(dtypes)}, which torch's FSDP refuses (it needs one dtype a "
                                    "unit); expected training.param_dtype to cast the model to one",
                                    file=self.scenario.source_file, field="training.param_dtype")  # fmt: skip
        checkpointing, blocks = self._checkpointing()
        if checkpointing:  # each checkpointed block within one wrapped module (the units' layers at any world)
            try:
                check_checkpoint_blocks(self.training_model, fsdp_units(self.training_model, 1, f.wrap), blocks)
            except ValueError as exc:
                raise ScenarioError(f"{str(exc).removeprefix('activation checkpointing: ')} (training.fsdp.wrap: "
                                    f"{f.wrap or 'the default'})", file=self.scenario.source_file,
                                    field="training.activation_checkpointing") from None  # fmt: skip
        post = f.reshard_after_forward
        if post is not None and (f.version != 2 or f.sharding not in ("full_shard", "hybrid_shard")):
            raise ScenarioError(
                f"an integer reshard_after_forward is FSDP2's (version: 2) with full_shard or hybrid_shard; got "
                f"version {f.version}, sharding {f.sharding}",
                file=self.scenario.source_file, field="training.fsdp.reshard_after_forward",
            )  # fmt: skip
        cfg = FsdpConfig(batch_size=tr.batch_size, sharding=f.sharding, backward_prefetch=f.backward_prefetch,
                         forward_prefetch=f.forward_prefetch, limit_all_gathers=f.limit_all_gathers,
                         param_dtype=f.param_dtype, optimizer=tr.optimizer, wrap=f.wrap, version=f.version,
                         reduce_dtype=f.reduce_dtype, accumulation=tr.accumulation,
                         reshard_after_forward=post, modules_to_forward_prefetch=f.modules_to_forward_prefetch,
                         modules_to_backward_prefetch=f.modules_to_backward_prefetch,
                         reduce_scatter_max_input_buffers=f.reduce_scatter_max_input_buffers,
                         activation_checkpointing=checkpointing, checkpoint_blocks=blocks,
                         checkpoint_early_stop=tr.checkpoint_early_stop,
                         gradient_clipping=tr.gradient_clipping)  # fmt: skip
        return cfg

    def _fsdp_step(self, backends: Sequence[str] | None) -> list[StepResult]:
        """One FSDP iteration per backend (:mod:`collsim.training.fsdp`): NCCL's collectives on their streams, or
        Gloo's, each blocking the thread that issues it."""
        tr = self._training()
        f = tr.fsdp
        cfg = self._fsdp_config()
        post = cfg.reshard_after_forward
        world = len(self.topology.rank_devices())
        model, gpu, consts = self.training_model, self.gpu_compute(), self.step_constants
        hybrid = f.sharding == "hybrid_shard"
        if f.shard_group is not None and not hybrid:
            raise ScenarioError(f"shard_group applies to hybrid_shard only (sharding is {f.sharding})",
                                file=self.scenario.source_file, field="training.fsdp.shard_group")  # fmt: skip
        out = []
        # a straggler launches each NCCL collective late after it is issued: the collectives priced without it
        straggle = max((d for _, d in self._launch_delays()), default=0.0)
        for backend in backends or self.backends():
            with self._errors(f"backends.{backend}"):
                src = self._without_stragglers() if backend == "nccl" and straggle > 0 else self
                hsdp = src._hsdp_groups(backend) if hybrid else None
                shard_world = len(hsdp.shard.topology.rank_devices()) if hsdp else None
                if backend == "nccl":
                    if gpu.cores > 0:
                        raise ScenarioError("NCCL needs GPU ranks; this cluster's ranks are CPUs (disable NCCL)",
                                            file=self.scenario.source_file, field="backends.nccl")  # fmt: skip
                    # FSDP2 reduces float32 and bfloat16 gradients with ReduceOp.AVG (NVLS cannot run it)
                    avg = reduces_with_average(model, cfg, world)
                    rs_ops, ar_ops = ({"reduce_scatter": "avg"}, {"allreduce": "avg"}) if avg else (None, None)
                    nccl = src._nccl_step_costs(rs_ops) if hsdp is None else _hsdp_costs(
                        hsdp.shard._nccl_step_costs(rs_ops),
                        [g._nccl_step_costs(ar_ops) for g in hsdp.replicas])  # fmt: skip
                    if post is not None:
                        nccl = _with_post_forward(nccl, src._post_forward_group(backend, post, shard_world)
                                                  ._nccl_step_costs())  # fmt: skip
                    crosses = hsdp is not None and hsdp.shard.topology.nodes > 1
                    result = simulate_fsdp_step(model, cfg, gpu, consts, world, nccl, shard_world=shard_world,
                                                shard_crosses_network=crosses, straggle_s=straggle)  # fmt: skip
                    notes = (*result.notes, *self._harness_notes(), *_hsdp_notes(hsdp))
                    out.append(dataclasses.replace(result, notes=notes))
                elif backend == "gloo":
                    gloo = self._gloo_fsdp_costs() if hsdp is None else _hsdp_costs(
                        hsdp.shard._gloo_fsdp_costs(), [g._gloo_fsdp_costs() for g in hsdp.replicas])  # fmt: skip
                    if post is not None:
                        gloo = _with_post_forward(gloo, self._post_forward_group(backend, post, shard_world)
                                                  ._gloo_fsdp_costs())  # fmt: skip
                    result = simulate_fsdp_step(model, cfg, gpu, consts, world, gloo=gloo, shard_world=shard_world)
                    out.append(dataclasses.replace(result, notes=(*result.notes, *_hsdp_notes(hsdp))))
        return out

    def _post_forward_group(self, backend: str, size: int, shard_world: int | None) -> Simulator:
        """FSDP2's post-forward mesh for an integer ``reshard_after_forward`` (``_get_post_forward_mesh_info``: the
        shard dimension split into groups of ``size`` consecutive ranks): a simulator of the first group, sharing
        the fabric with the others as HSDP's shard groups do (:meth:`_shard_group`). Needs one rank per GPU."""
        where = {"file": self.scenario.source_file, "field": "training.fsdp.reshard_after_forward"}
        ranks = self.topology.rank_devices()
        if not ranks or ranks[0].kind != "gpu" or self.topology.ranks_per_gpu != 1:
            raise ScenarioError("an integer reshard_after_forward needs one rank per GPU", **where)
        sharded = shard_world or len(ranks)
        if sharded % size or size >= sharded:
            raise ScenarioError(f"reshard_after_forward {size} must divide the {sharded} ranks a block is sharded "
                                "over and be fewer than all of them", **where)  # fmt: skip
        names = [d.name for d in ranks]
        with self._errors("training.fsdp.reshard_after_forward"):
            return self._shard_group(backend, [names[i : i + size] for i in range(0, len(names), size)])

    def _hsdp_groups(self, backend: str) -> _Hsdp:
        """HSDP's process groups: by default as FSDP1 makes them (``_init_intra_and_inter_node_groups``: shard
        groups of ``torch.cuda.device_count()`` consecutive ranks, a node's GPUs, and replica groups of the ranks of
        one local index); with ``training.fsdp.shard_group`` n as a 2-D DeviceMesh (replicate, shard) of shape
        (world / n, n) makes them (``device_mesh.get_group(1)`` shards: ranks i*n .. i*n+n-1; ``get_group(0)``
        replicates: ranks j, j+n, ...). A simulator over the first shard group and one per replica group, each on
        the topology ``backend`` sees for it (:meth:`collsim.topology.Topology.restricted`: NCCL's search keeps the
        NICs near the group's GPUs, Gloo's sockets choose among all; a slow NIC or link of the cluster slows the
        groups that cross it). The replica groups all-reduce at the same time; each gets its share of what they
        cross together (:meth:`_concurrent`); shard groups spanning nodes, their share of the fabric's uplinks
        (:meth:`_shard_group`)."""
        where = {"file": self.scenario.source_file, "field": "training.fsdp.sharding"}
        ranks = self.topology.rank_devices()
        if not ranks or ranks[0].kind != "gpu" or self.topology.ranks_per_gpu != 1:
            raise ScenarioError("hybrid_shard needs one rank per GPU (its groups are made of a node's GPUs)", **where)
        per_node = [sum(1 for d in ranks if d.node == n) for n in range(self.topology.nodes)]
        if len(set(per_node)) != 1:
            raise ScenarioError(f"hybrid_shard needs the same number of GPUs on every node, got {per_node}", **where)
        if self.scenario.perturb is not None and self.scenario.perturb.ranks:
            raise ScenarioError("hybrid_shard with perturb.ranks (per-rank launch delays) is not modelled", **where)
        size = self._training().fsdp.shard_group or per_node[0]
        if len(ranks) % size or (size % per_node[0] and per_node[0] % size):
            raise ScenarioError(
                f"a shard group of {size} GPU(s) must divide the world ({len(ranks)} GPUs) and divide or be a "
                f"multiple of the GPUs of a node ({per_node[0]})",
                file=self.scenario.source_file, field="training.fsdp.shard_group",
            )  # fmt: skip
        names = [d.name for d in ranks]
        with self._errors("training.fsdp.sharding"):
            shard = self._shard_group(backend, [names[i : i + size] for i in range(0, len(names), size)])
            replicas, shared = self._concurrent(backend, [names[j::size] for j in range(size)])
        return _Hsdp(shard, replicas, shared)

    def _shard_group(self, backend: str, groups: Sequence[Sequence[str]]) -> Simulator:
        """A simulator of the first of HSDP's shard ``groups`` (GPU names, whole nodes or part of one), which all
        gather and reduce-scatter at the same time. Within a node they share nothing a collective of theirs crosses
        (each has its own GPUs, and a node's NICs serve one group). Across nodes they meet on the fabric: a leaf's
        links to the spines carry every group whose NIC slots hang off that leaf and another
        (:func:`~collsim.topology.groups.leaves_crossed`: NCCL's NIC slots, Gloo's first NIC), and the first group
        gets 1/k of each of its leaves' uplinks that k groups cross, as :meth:`_concurrent` gives replica groups."""
        gloo = backend == "gloo"
        view = self.topology.restricted(groups[0], all_nics=gloo)
        first = self._on_topology(view)
        if view.nodes < 2:
            return first
        topo = self.topology
        crossed = []
        for group in groups:  # on the cluster itself: a view per group would copy the whole graph each time
            nodes = sorted({topo.device(g).node for g in group})
            if gloo:
                nics = topo.nics(nodes[0])[:1]
            else:
                far = set(topo.far_nics(nodes[0], [g for g in group if topo.device(g).node == nodes[0]]))
                nics = [d for d in topo.nics(nodes[0]) if d.name not in far]
            crossed.append(leaves_crossed(topo, {d.local_name for d in nics}, nodes))
        per_leaf = Counter(leaf for leaves in crossed for leaf in leaves)
        links = {pair: per_leaf[leaf] for leaf in crossed[0] if per_leaf[leaf] > 1 for pair in uplinks(view, leaf)}
        if not links:
            return first
        return first._at_share(view.shared(links), backend)

    def _concurrent(self, backend: str, groups: Sequence[Sequence[str]]) -> tuple[list[Simulator], dict[int, int]]:
        """Simulators of communicators over ``groups`` (GPU names, alike on each of their nodes: the same local
        GPUs on every node they span) that run the same collective at the same time, as HSDP's replica groups
        all-reduce a unit's gradient together.

        Each group is simulated alone, on its view of the cluster, with its share of what several groups cross:
        a resource that k groups use (a NIC two GPUs' groups both take, the PCIe switch's link to it, a socket's
        memory and cores that every Gloo group's copies and sockets use) gives each 1/k of its rate
        (:meth:`~collsim.topology.Topology.shared`): the engine's max-min fair share of k equal flows that could
        each fill it, exact while the groups run in step (they are images of one another and start together). Which
        resources a group uses is read from one recorded all-reduce of 64 MiB across its first two nodes (symmetry
        off); groups on the same nodes share them, and the sharing holds on each of their nodes. A fabric leaf's
        links to its spines are shared by the groups whose NICs (those the probe used, on every node) hang off that
        leaf and another: a fat tree's groups all cross them; rails keep the groups apart. NCCL plans each group on
        the nominal rates, as its search sees the NICs' speeds (its plan is kept); only the simulation runs at the
        share. Also returns how many of a node's resources and of the fabric's switch-to-switch links k groups
        share, by k."""
        gloo = backend == "gloo"
        topos = [self.topology.restricted(g, all_nics=gloo) for g in groups]
        alone = [self._on_topology(t) for t in topos]
        if min(t.nodes for t in topos) < 2 or len(groups) < 2:
            return alone, {}
        nodes = [sorted({self.topology.device(g).node for g in group}) for group in groups]
        used = [self._resources_used(backend, [g for g in group if self.topology.device(g).node in on[:2]])
                for group, on in zip(groups, nodes, strict=True)]  # fmt: skip
        # keys name the probe's first node n0 (the group's first node, renumbered): groups on other nodes share
        # nothing of it
        count = Counter((on[0], key) for keys, on in zip(used, nodes, strict=True) for key in keys)
        # a group's channels run between the same NIC slots of its nodes: those its probe used on the first
        nic = {d.name: d.local_name for d in self.topology.nics(0)}  # the probes name their first node n0
        leaves = [leaves_crossed(topo, {nic[end] for key in keys if key[0] == "link" for end in key[1:] if end in nic})
                  for topo, keys in zip(topos, used, strict=True)]  # fmt: skip
        per_leaf = Counter(leaf for crossed in leaves for leaf in crossed)
        ups = {leaf: uplinks(self.topology, leaf) for leaf in per_leaf}
        first = min(on[0] for on in nodes)
        shared_counts = Counter(k for (node, _), k in count.items() if k > 1 and node == first)
        shared_counts.update(k for leaf, k in per_leaf.items() if k > 1 for _ in ups[leaf])
        out = []
        for sim, topo, keys, crossed, on in zip(alone, topos, used, leaves, nodes, strict=True):
            share = {key: count[on[0], key] for key in keys if count[on[0], key] > 1}
            links: dict[tuple[str, str], int] = {}
            for leaf in crossed:
                if per_leaf[leaf] > 1:
                    links.update(dict.fromkeys(ups[leaf], per_leaf[leaf]))
            if not share and not links:
                out.append(sim)
                continue
            memory: dict[str, int] = {}
            cores: dict[int, int] = {}
            for key, k in share.items():
                for node in range(topo.nodes):
                    if key[0] == "link":
                        links.update(dict.fromkeys(counterparts(topo, key[1], key[2], node), k))
                    elif key[0] == "mem":
                        memory[node_name(key[1], node)] = k
                    else:
                        cores[node] = k
            out.append(sim._at_share(topo.shared(links, memory, cores), backend))
        return out, dict(shared_counts)

    def _resources_used(self, backend: str, gpus: Sequence[str]) -> set[tuple[Any, ...]]:
        """The links, socket memories and cores of the first node of ``gpus`` (named on their view, where it is
        node 0) that one recorded all-reduce of 64 MiB over ``gpus`` (symmetry off, no harness) moves bytes or
        spends time on: resource keys of
        :class:`~collsim.backends.common.ResourceCatalog` (per-rank resources, a process's cores or a Gloo
        thread, left out: they are no other group's)."""
        topo = self.topology.restricted(gpus, all_nics=backend == "gloo")
        probe = self._on_topology(topo).simulate_one(backend, 64 << 20, collective="allreduce", record=True,
                                                     symmetry=False, harness=False)  # fmt: skip
        keys = {spec.name: key for key, spec in ResourceCatalog(topo).specs.items()}
        used: set[tuple[Any, ...]] = set()
        for rec in probe.records:
            if rec.size <= 0:
                continue
            for name in rec.resources:
                key = keys.get(name)
                if not isinstance(key, tuple):
                    continue
                link = key[0] == "link" and 0 in {topo.device(key[1]).node, topo.device(key[2]).node}
                if link or (key[0] == "mem" and topo.device(key[1]).node == 0) or key == ("cores", 0):
                    used.add(key)
        return used

    def _at_share(self, shared: Topology, backend: str) -> Simulator:
        """This sub-communicator simulated on ``shared``, its view with the shares of what concurrent groups cross
        (:meth:`~collsim.topology.Topology.shared`); for NCCL with the plan made on the nominal rates: NCCL's search
        and tuner see the NICs' speeds, not the other groups' traffic."""
        sub = self._on_topology(shared)
        if backend == "nccl":
            sub.__dict__["nccl_plan"] = self.nccl_plan
        return sub

    def _on_topology(self, topology: Topology) -> Simulator:
        """This simulator on ``topology`` (a sub-communicator's view of the cluster): the same scenario, options and
        constants, the NCCL plan made again for it."""
        sub = object.__new__(Simulator)
        sub.__dict__.update({k: v for k, v in self.__dict__.items() if k != "nccl_plan"})  # the plan is per topology
        sub.topology = topology
        return sub

    def _nccl_step_costs(self, ops: Mapping[str, str] | None = None) -> Callable[[str, int], tuple[float, int]]:
        """A training step's NCCL collective of n bytes -> (seconds, channels), simulated once per (collective, size)
        without the benchmark's harness; ``ops``: the reduction of a collective where it is not ``workload.op``
        (FSDP2's ``ReduceOp.AVG``)."""
        costs: dict[tuple[str, int], tuple[float, int]] = {}
        op_of = dict(ops or {})

        def nccl(collective: str, nbytes: int) -> tuple[float, int]:
            if (collective, nbytes) not in costs:
                o = self.simulate_one("nccl", nbytes, collective=collective, harness=False, op=op_of.get(collective))
                costs[(collective, nbytes)] = (o.time_s, o.channels or 1)
            return costs[(collective, nbytes)]

        return nccl

    def _gloo_fsdp_costs(self) -> Callable[[str, int], tuple[float, float]]:
        """Gloo's allgather or allreduce of n bytes, alone -> (seconds, core-seconds one CPU rank spends), simulated
        once per (collective, size): CUDA tensors staged through the host on GPU ranks (ProcessGroupGloo's CUDA
        works), CPU tensors on CPU ranks."""
        opts = self._gloo_step_options()
        ranks = self.topology.rank_devices()
        on_cpu = opts.device == "cpu"
        costs: dict[tuple[str, int], tuple[float, float]] = {}

        def gloo(collective: str, nbytes: int) -> tuple[float, float]:
            if (collective, nbytes) not in costs:
                o = simulate_gloo(self.topology, opts, self.gloo_constants, nbytes, collective=collective,
                                  symmetry=self.scenario.engine.symmetry and not on_cpu, record=on_cpu)  # fmt: skip
                costs[(collective, nbytes)] = (o.time_s, _core_seconds(o, len(ranks)) if on_cpu else 0.0)
            return costs[(collective, nbytes)]

        return gloo

    def _harness_notes(self) -> tuple[str, ...]:
        """A note when the workload describes a benchmark's harness, which a training step's NCCL collectives do not
        pay (they are simulated with ``harness=False``)."""
        w = self.scenario.workload
        set_ = {"gpus_per_process": w.gpus_per_process > 1, "host_overhead": w.host_overhead != "none"}
        fields = [f for f, on in set_.items() if on]
        if not fields:
            return ()
        verb = "describes" if len(fields) == 1 else "describe"
        return (f"workload.{' and workload.'.join(fields)} {verb} a benchmark's timing: not applied to the step's "
                "collectives",)  # fmt: skip

    def _nccl_allreduce_costs(self) -> Callable[[int], tuple[float, int]]:
        """NCCL allreduce of n bytes -> (seconds, channels), simulated once per size (DDP's buckets)."""
        costs = self._nccl_step_costs()
        return lambda nbytes: costs("allreduce", nbytes)

    def _gloo_step_options(self) -> GlooOptions:
        """Gloo's options for a training step: the tensors DDP and FSDP hand Gloo are the ranks' own, CUDA ones
        (staged through host memory) on GPU ranks and CPU ones on CPU ranks, whatever the scenario's
        ``backends.gloo.device``."""
        base = self.options("gloo")
        assert isinstance(base, GlooOptions)
        ranks = self.topology.rank_devices()
        return dataclasses.replace(base, device="cpu" if ranks and ranks[0].kind == "cpu" else "cuda")

    def _gloo_runner(self) -> tuple[GlooRunner, int]:
        """Gloo allreduces issued at given times -> when a worker thread took each, freed it and when it was done
        (:class:`~collsim.training.step.GlooTimes`), and the worker threads per rank (:meth:`_gloo_step_options`)."""
        opts = self._gloo_step_options()

        def gloo(sizes: Sequence[int], issue_at: Sequence[float]) -> Sequence[GlooTimes]:
            with work_budget(label=f"gloo's {len(sizes)} allreduces of the training step"):
                o = simulate_gloo_many(self.topology, opts, self.gloo_constants, list(sizes),
                                       symmetry=self.scenario.engine.symmetry, issue_at=issue_at)  # fmt: skip
            if len(sizes) == 1:  # alone: a thread takes it when it is issued
                return (GlooTimes(float(issue_at[0]), o.time_s, o.time_s),)
            return tuple(GlooTimes(a, b, e) for (a, b), e in zip(o.held, o.ends, strict=True))

        return gloo, opts.threads

    def _gloo_cpu_work(self) -> Callable[[int], float]:
        """CPU ranks: n bytes -> core-seconds one rank's Gloo allreduce of n bytes spends on its host's cores (the
        reduction and the TCP stack, from the flows of Gloo's simulation of it alone), simulated once per size."""
        base = self.options("gloo")
        assert isinstance(base, GlooOptions)
        opts = dataclasses.replace(base, device="cpu")
        ranks = len(self.topology.rank_devices())
        work: dict[int, float] = {}

        def cpu(nbytes: int) -> float:
            if nbytes not in work:
                o = simulate_gloo_many(self.topology, opts, self.gloo_constants, [nbytes], symmetry=False,
                                       record=True)  # fmt: skip
                work[nbytes] = _core_seconds(o, ranks)
            return work[nbytes]

        return cpu

    def compare(
        self, sizes: Sequence[int] | None = None, *, progress: Progress | None = None, jobs: int = 1
    ) -> tuple[list[Comparison], bool]:
        """NCCL and Gloo side by side per size, with time breakdowns; returns (rows, interrupted). ``jobs`` as in
        :meth:`run`. Both backends must be enabled: a disabled one is never simulated.

        Raises
        ------
        ScenarioError
            When the scenario enables fewer than both (naming the disabled backend's field).
        """
        off = [b for b in BACKENDS if b not in self.backends()]
        if off:
            raise ScenarioError(
                f"compare puts NCCL and Gloo side by side, and {' and '.join(off)} is disabled here"
                + ("; this cluster has no GPUs for NCCL" if "nccl" in off and not self.topology.gpus() else "")
                + f"; use run for {' and '.join(b for b in BACKENDS if b not in off) or 'a backend'} alone",
                file=self.scenario.source_file,
                field=f"backends.{off[0]}",
            )
        sweep = self.run(backends=list(BACKENDS), sizes=sizes, breakdown=True, progress=progress, jobs=jobs)
        nccl = {(r.collective, r.size_bytes): r for r in sweep.by_backend("nccl")}
        gloo = {(r.collective, r.size_bytes): r for r in sweep.by_backend("gloo")}
        # a size asked for is nccl-tests' bytes for NCCL and whole elements for Gloo (_simulate): pair them by it
        asked = _sizes_arg(sizes)
        dtype = self.scenario.workload.dtype
        n_nccl, n_gloo = len(self.nccl_plan.ranks), len(self.topology.rank_devices())
        # one row a size asked for, as run gives (sizes that round to the same bytes each get theirs)
        keys = [((c, nccl_tests_bytes(s, dtype, c, n_nccl)), (c, whole_element_bytes(s, dtype, c, n_gloo)))
                for s in (self.scenario.sizes() if asked is None else asked)
                for c in self.scenario.collectives()]  # fmt: skip
        tops = {(o.backend, o.collective, o.size_bytes): o.bottleneck for o in sweep.outcomes}

        def top(backend: str, key: tuple[str, int]) -> tuple[str, str, float] | None:
            b = tops.get((backend, *key))
            return None if b is None else (b.link, b.kind, b.load_share)

        rows = [Comparison(k[1], nccl[k], gloo[g], top("nccl", k), top("gloo", g)) for k, g in keys
                if k in nccl and g in gloo]  # fmt: skip
        return rows, sweep.interrupted

    def algorithm_variants(self, backend: str, collective: str, size: int) -> tuple[dict[str, Any], str]:
        """What :meth:`compare_algorithms` runs for one backend at one (collective, size): variant label to
        ``simulate_one`` keyword arguments, in the backend's order, and the default variant's label.

        NCCL: each algorithm NCCL_ALGO/NCCL_PROTO leave enabled (labelled ``"Ring"``, ``"NVLS"`` ...), with the
        protocol NCCL's cost model prices fastest for it; the default is the cost model's overall pick (its
        algorithm with its protocol), what NCCL runs. Gloo: for
        allreduce each of Gloo's algorithms (:data:`collsim.vocab.GLOO_ALGORITHMS`; PyTorch's ProcessGroupGloo
        always runs ``ring``, the others are Gloo's own and older stacks'), the default ``backends.gloo.algorithm``;
        other collectives have one algorithm each, so one variant.
        """
        if backend == "nccl":
            plan, opts, consts = self.nccl_plan, self.nccl_options, self.nccl_constants
            with self._errors("backends.nccl"):
                pairs = enabled_pairs(plan, opts, collective)
                model = tuner_times(plan, consts, collective, size, opts)
                pick_a, pick_p, _ = choose(plan, opts, consts, collective, size)
            best: dict[str, tuple[float, str]] = {}
            for a, p in pairs:
                if (a, p) in model and (a not in best or model[(a, p)] < best[a][0]):
                    best[a] = (model[(a, p)], p)
            if pick_a in best:
                best[pick_a] = (best[pick_a][0], pick_p)
            return {a: {"choice": (a, p)} for a, (_t, p) in best.items()}, pick_a
        if backend == "gloo":
            default = self.gloo_options.algorithm
            if collective not in GLOO_ALLREDUCE_COLLECTIVES:  # one algorithm, named as run names it
                fixed = GLOO_COLLECTIVE_ALGORITHM.get(collective, default)
                return {fixed: {}}, fixed
            return {a: {"gloo_algorithm": a} for a in GLOO_ALGORITHMS}, default
        raise ScenarioError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}", field="backend")

    def compare_algorithms(
        self,
        backend: str | None = None,
        sizes: Sequence[int] | None = None,
        *,
        progress: Progress | None = None,
        jobs: int = 1,
    ) -> tuple[list[AlgorithmComparison], bool]:
        """One backend's algorithms against each other per (collective, size) (:meth:`algorithm_variants`), with
        time breakdowns; returns (rows, interrupted). What ``collsim compare`` prints when only one backend is
        enabled. ``jobs`` as in :meth:`run`.

        Parameters
        ----------
        backend : str, optional
            Default: the only enabled backend (an error when both or none are).
        sizes : sequence of int, optional
            Bytes; default: the scenario's ``workload.sizes``.
        """
        sizes = _sizes_arg(sizes)
        enabled = self.backends()
        if backend is None:
            if len(enabled) != 1:
                raise ScenarioError(
                    f"compare_algorithms needs one backend; enabled: {', '.join(enabled) or 'none'}",
                    file=self.scenario.source_file,
                    field="backends",
                )
            backend = enabled[0]
        elif backend not in BACKENDS:
            raise ScenarioError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}", field="backend")
        elif backend not in enabled:
            raise ScenarioError(
                f"{backend} is disabled here", file=self.scenario.source_file, field=f"backends.{backend}"
            )
        chosen = backend
        sizes = self.scenario.sizes() if sizes is None else sizes
        todo = [(c, s) for c in self.scenario.collectives() for s in sizes]

        def point(i: int) -> AlgorithmComparison:
            coll, size = todo[i]
            variants, default = self.algorithm_variants(chosen, coll, size)
            records = {}
            for label, kwargs in variants.items():
                out = self._with_breakdown(chosen, size, collective=coll, **kwargs)
                out.records = []
                records[label] = self.to_record(out)
            return AlgorithmComparison(coll, size, chosen, records, default)

        done, interrupted = self.map_points(
            point,
            len(todo),
            jobs,
            sizes=[s for _c, s in todo],
            progress=(lambda i, n: progress(chosen, todo[i][1], n, len(todo))) if progress else None,
        )
        return [done[i] for i in sorted(done)], interrupted

    def report_data(
        self, sizes: Sequence[int], timeline_size: int | None = None, *, progress: Progress | None = None
    ) -> ReportData:
        """Simulate what ``collsim report`` shows: a sweep per backend (with breakdowns) and one recorded
        collective per backend (:meth:`recorded`).

        Parameters
        ----------
        sizes : sequence of int
            The sweep's sizes, bytes.
        timeline_size : int, optional
            Bytes of the recorded collective; default :func:`collsim.results.representative_size` of ``sizes``
            (64 MiB, or the largest size when smaller).
        progress : callable, optional
            As in :meth:`run`.

        Returns
        -------
        ReportData
            A backend the scenario disables, or one that cannot run it (NCCL without GPUs), is left out, with a note
            saying why; any other error is raised, as :meth:`run` raises it (with no backend enabled, a
            :class:`~collsim.scenario.ScenarioError` naming ``backends``).

        Raises
        ------
        KeyboardInterrupt
            When Ctrl-C stopped a sweep.
        """
        t0 = time.perf_counter()
        self._enabled(None)  # no backend enabled: as run and compare, an error, not an empty page
        sweep = _sizes_arg(sizes) or []
        shown = representative_size(sweep) if timeline_size is None else _size_arg(timeline_size, "timeline_size")
        data = ReportData(self.scenario, self.topology, sweep, shown, perturbations=self.perturbations())
        healthy = self.healthy() if data.perturbations else None  # the same sweep on the healthy cluster beside
        for backend in BACKENDS:
            section = getattr(self.scenario.backends, backend, None)
            if section is not None and not section.enabled:  # as run and compare: a disabled backend is not simulated
                data.notes.append(f"{backend}: not simulated: the scenario disables it (backends.{backend}.enabled)")
                continue
            try:
                res = self.run(backends=[backend], sizes=sweep, breakdown=True, progress=progress)
            except ScenarioError as exc:
                # a backend this cluster cannot run at all (NCCL without GPUs) is left out with a note; any other
                # error (a work limit, a variable NCCL refuses, a type the backend has not) stops the report, as it
                # stops run and compare, rather than leave a page with a backend silently missing
                if backend != "nccl" or self.topology.gpus():
                    raise
                data.notes.append(f"{backend}: not simulated: {exc}")
                continue
            if res.interrupted:
                raise KeyboardInterrupt
            data.records += res.records
            data.outcomes.append(self.recorded(backend, data.timeline_size))
            if healthy is not None:
                base = healthy.run(backends=[backend], sizes=sweep, progress=progress)
                if base.interrupted:
                    raise KeyboardInterrupt
                data.healthy += base.records
        data.seconds = time.perf_counter() - t0
        return data


def _core_seconds(out: Outcome, ranks: int) -> float:
    """Core-seconds one rank spent in a recorded Gloo outcome: the flows' sizes times their coefficients on the
    hosts' cores, over the ranks."""
    core_s = sum(r.size * c for r in out.records for k, c in zip(r.keys, r.coefficients, strict=False)
                 if isinstance(k, tuple) and k[:1] == ("cores",))  # fmt: skip
    return core_s / max(1, ranks)


def simulate(
    source: str | Path | Mapping[str, Any] | Scenario, overrides: Sequence[str] = (), **kwargs: Any
) -> SweepResult:
    """Load (a Scenario with no ``overrides`` as it is) and run a scenario's sweep; keyword arguments go to
    :meth:`Simulator.run`."""
    scenario = source if isinstance(source, Scenario) and not overrides else load(source, overrides)
    return Simulator(scenario).run(**kwargs)
