"""Fixtures for the scenario-layer tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def _topology_templates() -> list[str] | None:
    try:
        from collsim.topology import available_templates
    except ImportError:
        return None
    return available_templates()


@pytest.fixture
def needs_topology() -> list[str]:
    """Skip the test when the topology layer (collsim.topology.available_templates) is not there yet."""
    templates = _topology_templates()
    if templates is None:
        pytest.skip("collsim.topology.available_templates is not importable yet (topology layer missing)")
    return templates


@pytest.fixture
def minimal() -> dict[str, Any]:
    """The smallest valid scenario: a template given as a path, so no topology layer is needed."""
    return {"name": "t", "cluster": {"node": "./node.yaml"}}


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write a file under tmp_path (and an empty node.yaml next to it) and return its path."""
    (tmp_path / "node.yaml").write_text("name: fake\n", encoding="utf-8")

    def _write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return _write
