"""Fixtures for the topology-layer tests."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from collsim.topology import Topology, load_topology, topologies_dir, topology_from_template

REPO_TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"


@pytest.fixture(scope="session")
def dgx() -> Topology:
    """One DGX A100 node."""
    return load_topology("dgx-a100")


@pytest.fixture(scope="session")
def hgx() -> Topology:
    """One HGX H100 node."""
    return load_topology("hgx-h100")


@pytest.fixture
def topo_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of topologies/ that COLLSIM_TOPOLOGIES points at (for broken-preset tests)."""
    dst = tmp_path / "topologies"
    shutil.copytree(REPO_TOPOLOGIES, dst)
    monkeypatch.setenv("COLLSIM_TOPOLOGIES", str(dst))
    assert topologies_dir() == dst
    return dst


@pytest.fixture
def build() -> Callable[..., Topology]:
    """Build a topology from template devices and links (a mapping), with the repository presets."""

    def _build(devices: list[dict[str, Any]], links: list[dict[str, Any]], **kw: Any) -> Topology:
        return topology_from_template({"name": "t", "devices": devices, "links": links}, **kw)

    return _build
