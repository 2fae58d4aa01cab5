"""Regenerate ``scenarios/scenario.schema.json``: ``python -m collsim.scenario.schema [--check] [PATH]``.

``--check`` writes nothing and exits with status 1 when the file differs from :func:`scenario_json_schema`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from collsim.files import write_atomic
from collsim.scenario.loader import scenario_json_schema, scenarios_dir

__all__ = ["main", "schema_text"]


def schema_text() -> str:
    """The JSON Schema as the committed file holds it (2-space indent, trailing newline)."""
    return json.dumps(scenario_json_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the scenario JSON Schema; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m collsim.scenario.schema", description=__doc__)
    parser.add_argument(
        "path", nargs="?", type=Path, default=None, help="output file (default: <scenarios dir>/scenario.schema.json)"
    )
    parser.add_argument("--check", action="store_true", help="only check that the file is up to date")
    args = parser.parse_args(argv)
    path: Path = args.path or scenarios_dir() / "scenario.schema.json"
    text = schema_text()
    if args.check:
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current != text:
            print(f"{path}: out of date; run python -m collsim.scenario.schema", file=sys.stderr)
            return 1
        print(f"{path}: up to date")
        return 0
    write_atomic(path, text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
