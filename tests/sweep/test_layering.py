"""Where the sweep package sits: above the API and results, below the CLI; it never reaches into the backends."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "collsim" / "sweep"
#: collsim modules the sweep package may import (the layers above it, and itself).
ALLOWED = ("collsim.api", "collsim.parallel", "collsim.profile", "collsim.scenario", "collsim.results", "collsim.units",
           "collsim.vocab", "collsim.files", "collsim.sweep", "collsim.viz")  # fmt: skip


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_sweep_package_imports_only_the_layers_above_it() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        bad = {m for m in _imports(path) if m.startswith("collsim") and not m.startswith(ALLOWED)}
        assert not bad, f"{path.name} imports {sorted(bad)}"
        # the figures are the command's (the CLI layer in this package), not the runner's
        if path.name != "command.py":
            assert not {m for m in _imports(path) if m.startswith("collsim.viz")}, path.name
    below = [p for p in (PACKAGE.parent).rglob("*.py") if "sweep" not in p.parts and p.name != "cli.py"]
    users = [p for p in below if any(m.startswith("collsim.sweep") for m in _imports(p))]
    assert not users, f"only the CLI imports collsim.sweep: {users}"


def test_the_cli_does_not_load_pyarrow_until_a_sweep_runs() -> None:
    code = "import sys, collsim.cli; print('pyarrow' in sys.modules, 'distributed' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
