"""The notebooks of ``notebooks/``: committed without outputs, and each runs top to bottom without a cell error.

Each notebook is executed with nbclient in a fresh ``python3`` kernel of this interpreter (the project's venv), with
the working directory ``notebooks/``, as Jupyter opens them. The notebooks themselves also run from the repository
root (they find their data in ``./data`` or ``./notebooks/data``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOKS_DIR = Path(__file__).resolve().parents[1] / "notebooks"
EXPECTED = ["01-quickstart.ipynb", "02-nccl-vs-gloo.ipynb", "03-what-if.ipynb", "04-calibration.ipynb"]
#: Seconds one notebook may take (all four together must stay under 2 minutes on a 2-core CI machine).
NOTEBOOK_BUDGET_S = 60.0
#: Seconds one cell may take before nbclient stops it.
CELL_TIMEOUT_S = 120


def _notebooks() -> list[Path]:
    return sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


def test_the_four_notebooks_are_there() -> None:
    assert [p.name for p in _notebooks()] == EXPECTED


@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.stem)
def test_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert dirty == [], f"{path.name}: code cells {dirty} have outputs or an execution count; clear them"
    assert sum(cell.cell_type == "code" for cell in nb.cells) >= 3
    assert sum(cell.cell_type == "markdown" for cell in nb.cells) >= 3


@pytest.fixture()
def venv_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``python3`` kernel spec that runs this interpreter, found before any other (JUPYTER_PATH comes first).

    Connection files and IPython's profile go to ``tmp_path`` too: no writable home directory is needed, and a
    user's IPython startup files do not run.
    """
    spec = tmp_path / "kernels" / "python3"
    spec.mkdir(parents=True)
    spec.joinpath("kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (collsim venv)",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    return "python3"


@pytest.mark.slow
@pytest.mark.parametrize("path", _notebooks(), ids=lambda p: p.stem)
def test_runs_top_to_bottom(path: Path, venv_kernel: str) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name=venv_kernel,
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
    )
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as exc:
        pytest.fail(f"{path.name}: a cell failed:\n{exc}", pytrace=False)
    elapsed = time.perf_counter() - start
    errors = [
        (i, out.get("ename"))
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.get("output_type") == "error"
    ]
    assert errors == []
    assert all(cell.get("execution_count") for cell in nb.cells if cell.cell_type == "code")
    assert elapsed < NOTEBOOK_BUDGET_S, f"{path.name} took {elapsed:.1f} s (budget {NOTEBOOK_BUDGET_S:.0f} s)"
