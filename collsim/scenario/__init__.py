"""The scenario layer: the YAML schema, loading, ``--set`` overrides and clear errors.

Schema and loading only: importing it loads neither SimPy nor the backends (calibration profiles, which adjust
the backends' constants, live next to calibration in :mod:`collsim.profile`). The name lists it re-exports
(collectives, fabric topologies, NCCL's algorithms ...) are :mod:`collsim.vocab`'s.

>>> from collsim.scenario import apply_overrides
>>> apply_overrides({"name": "demo"}, ["cluster.nodes=2", "backends.nccl.env.NCCL_ALGO=Ring"])
{'name': 'demo', 'cluster': {'nodes': 2}, 'backends': {'nccl': {'env': {'NCCL_ALGO': 'Ring'}}}}

Typical use (needs the node templates)::

    s = load_scenario("hgx-h100", overrides=["workload.sizes=1KiB:4KiB:x2"])
    s.sizes()   # [1024, 2048, 4096]
"""

from __future__ import annotations

from collsim.nccl_env import (
    INT_NCCL_ENV,
    KNOWN_NCCL_ENV,
    NCCL_LEVELS,
    parse_algorithms,
    parse_level,
    parse_protocols,
)
from collsim.scenario.errors import ScenarioError, ScenarioWarning
from collsim.scenario.loader import (
    apply_overrides,
    builtin_scenarios,
    load_scenario,
    scenario_json_schema,
    scenarios_dir,
)
from collsim.scenario.models import (
    BackendsConfig,
    ClusterConfig,
    EngineConfig,
    FabricConfig,
    GlooConfig,
    NcclConfig,
    Scenario,
    SwitchConfig,
    WorkloadConfig,
)
from collsim.vocab import (
    COLLECTIVES,
    FABRIC_TOPOLOGIES,
    GLOO_ALGORITHMS,
    NCCL_ALGORITHMS,
    NCCL_PROTOCOLS,
    REDUCE_OPS,
)

__all__ = [
    "COLLECTIVES",
    "FABRIC_TOPOLOGIES",
    "GLOO_ALGORITHMS",
    "INT_NCCL_ENV",
    "KNOWN_NCCL_ENV",
    "NCCL_ALGORITHMS",
    "NCCL_LEVELS",
    "NCCL_PROTOCOLS",
    "REDUCE_OPS",
    "BackendsConfig",
    "ClusterConfig",
    "EngineConfig",
    "FabricConfig",
    "GlooConfig",
    "NcclConfig",
    "Scenario",
    "ScenarioError",
    "ScenarioWarning",
    "SwitchConfig",
    "WorkloadConfig",
    "apply_overrides",
    "builtin_scenarios",
    "load_scenario",
    "parse_algorithms",
    "parse_level",
    "parse_protocols",
    "scenario_json_schema",
    "scenarios_dir",
]
