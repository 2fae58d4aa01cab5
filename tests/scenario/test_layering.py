"""The scenario layer is schema and loading only: importing it loads neither SimPy nor the backends or the engine."""

from __future__ import annotations

import subprocess
import sys


def _modules_after_import(module: str) -> set[str]:
    """Top-level and collsim modules loaded by a fresh interpreter that imports ``module``."""
    code = f"import sys, {module}; print('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_importing_the_scenario_layer_loads_no_simulation_code() -> None:
    loaded = _modules_after_import("collsim.scenario")
    assert "collsim.scenario" in loaded
    assert "simpy" not in loaded
    assert not {m for m in loaded if m.startswith(("collsim.backends", "collsim.engine", "collsim.algorithms"))}


def test_the_check_can_fail() -> None:
    # the same check on a module that does simulate sees SimPy and the backends
    loaded = _modules_after_import("collsim.api")
    assert "simpy" in loaded and "collsim.backends" in loaded
