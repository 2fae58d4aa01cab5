"""``collsim sweep GRID.yaml``: the command's options and what it prints (the CLI's part of the sweep package).

The command resolves the grid (one error naming the point and field, before anything runs), runs the missing
points on the local pool, serially or on Dask, stores each as it finishes, then prints the table (or CSV or JSON)
and, with ``--plot``, writes a figure (every file whole or not at all; a partial output is marked: README, "Output
and interrupts"). Exit status: 0; 2 for bad input or ``--dask`` without Dask; 130 after Ctrl-C (what finished is
stored); 143 after SIGTERM; 1 when points were lost with their workers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from collsim.files import write_atomic
from collsim.scenario import ScenarioError

if TYPE_CHECKING:  # the rest is imported when the command runs: `collsim --help` stays quick
    from collsim.sweep.grid import Grid
    from collsim.sweep.runner import SweepOutcome

__all__ = ["add_arguments", "default_store", "run_command"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``collsim sweep``."""
    p.add_argument("grid", help="grid YAML file: base scenario, axes (paths as --set takes them), sizes")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                   help="override a field of every point, before the axes (repeatable)")
    p.add_argument("--store", metavar="DIR",
                   help="results store folder (default: the grid's `store`, else GRID.results next to the grid)")
    p.add_argument("--force", action="store_true", help="recompute the points already in the store")
    p.add_argument("--check", action="store_true",
                   help="validate every point and say how many are stored; run nothing")
    p.add_argument("--jobs", type=int, default=0, metavar="N",
                   help="local worker processes (default 0: one per CPU; 1: serial); with --dask local, its workers")
    p.add_argument("--dask", metavar="local|ADDRESS",
                   help="run on Dask: 'local' (a LocalCluster, one single-threaded worker per core) or a "
                   "scheduler address such as tcp://host:8786")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="output format (default: %(default)s)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE instead of stdout")
    p.add_argument("--plot", metavar="FILE.html", help="also write a plotly figure (a self-contained HTML page)")
    p.add_argument("--x", default="size", metavar="AXIS", help="the figure's x axis: size or an axis (default: size)")
    p.add_argument("--y", choices=("busbw", "algbw", "time"), default="busbw", help="the figure's y (default: busbw)")
    p.add_argument("--facet", metavar="AXIS", help="a panel per value of this axis")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")  # fmt: skip


def default_store(grid: Grid) -> Path:
    """The grid's ``store``, else ``<grid stem>.results`` next to the grid file (the current folder for a mapping)."""
    if grid.store is not None:
        return grid.store
    return grid.folder / f"{Path(grid.file).stem if grid.file != '<grid>' else grid.name}.results"


def _column(name: str, axes: list[str], option: str) -> str:
    """A figure option's axis as a DataFrame column: ``size``, ``backend``, an axis path (of ``axes``) or its short
    name."""
    from collsim.sweep.output import short_names

    if name in ("size", "size_bytes"):
        return "size_bytes"
    if name in ("backend", "collective"):
        return name
    if name in axes:
        return name
    short = dict(zip(short_names(axes), axes, strict=True))
    ends = [a for a in axes if a.endswith("." + name)]
    if name in short:
        return short[name]
    if len(ends) == 1:
        return ends[0]
    known = ", ".join(["size", "backend", *axes]) or "size, backend"
    raise ScenarioError(f"unknown axis {name!r}; expected one of {known}", file=option)


def _check_figure_options(args: argparse.Namespace, axes: list[str]) -> None:
    """The figure's ``--x`` and ``--facet`` name axes of the grid, checked before anything runs (a long sweep found
    out at its end); without ``--plot`` they draw nothing, which a note says."""
    options = (("--x", args.x, "size"), ("--facet", args.facet, None))
    given = [opt for opt, value, default in options if value != default]
    if not args.plot:
        if given:
            verb = "shape" if len(given) > 1 else "shapes"
            print(f"collsim: note: {' and '.join(given)} {verb} the figure; without --plot there is none",
                  file=sys.stderr)  # fmt: skip
        return
    _column(args.x, axes, "--x")
    if args.facet:
        _column(args.facet, axes, "--facet")


def _plot(args: argparse.Namespace, out: SweepOutcome) -> None:
    from collsim.viz.grid import grid_figure, grid_html

    x = _column(args.x, out.axes, "--x")
    facet = _column(args.facet, out.axes, "--facet") if args.facet else None
    lines = [a for a in out.axes if a not in (x, facet)]
    g = out.grid
    fig = grid_figure(out.dataframe(), x=x, y=args.y, lines=lines, facet=facet,
                      title=f"collsim sweep: {g.name}")  # fmt: skip
    notes = [g.description] if g.description else []
    notes.append(f"{len(out.points)} points from {g.file}; axes: {', '.join(out.axes) or 'none'}.")
    notes += [f"point {p.index} ({p.label()}): no result: {e}" for p, e in out.errors()[:20]]
    write_atomic(args.plot, grid_html(fig, f"collsim sweep: {g.name}", notes))


def run_command(args: argparse.Namespace) -> int:
    """``collsim sweep``; returns the exit status (bad input raises ScenarioError for the CLI to print)."""
    from collsim.sweep.execute import DaskAddressError, DaskMissing, WorkersKeptDying
    from collsim.sweep.grid import load_grid
    from collsim.sweep.output import ProgressLine, format_table, to_csv, to_json
    from collsim.sweep.runner import run_sweep

    grid = load_grid(args.grid).with_overrides(args.overrides)
    if args.jobs < 0:
        raise ScenarioError(f"expected 0 (one per CPU) or a positive count, got {args.jobs}", file="--jobs")
    store = Path(args.store) if args.store else default_store(grid)  # created once every point is valid
    _check_figure_options(args, [a.path for a in grid.axes])
    if args.check:
        return _check(grid, store)
    prog = ProgressLine(args.quiet)
    try:
        out = run_sweep(grid, store, jobs=args.jobs, dask=args.dask, force=args.force, progress=prog)
    except DaskMissing as exc:
        print(f"collsim: error: {exc}", file=sys.stderr)
        return 2
    except DaskAddressError as exc:
        print(f"collsim: error: --dask: {exc}", file=sys.stderr)
        return 2
    except WorkersKeptDying as exc:
        prog.done()
        print(f"collsim: error: {exc}", file=sys.stderr)
        return 1
    finally:
        prog.done()
    text = {"table": format_table, "csv": to_csv, "json": to_json}[args.format](out)
    if args.output and out.interrupted and out.finished == 0 and Path(args.output).exists():
        print(f"collsim: interrupted before any point finished; {args.output} left as it was", file=sys.stderr)
    elif args.output:
        write_atomic(args.output, text)  # whole or not at all; marked partial when points are missing
    else:
        sys.stdout.write(text)
    if args.plot:
        _plot(args, out)
    failed = out.errors()
    if failed and args.format != "table":
        p, err = failed[0]
        what = "1 point has" if len(failed) == 1 else f"{len(failed)} points have"
        print(f"collsim: note: {what} no result (stored as such); first: point {p.index} "
              f"({p.label()}): {err}", file=sys.stderr)  # fmt: skip
    if out.interrupted:
        print(f"collsim: interrupted; {out.ran} points run and stored in {store}; run again to continue",
              file=sys.stderr)  # fmt: skip
        return 130
    if out.lost:
        print(f"collsim: error: {len(out.lost)} points lost with their workers (Dask gave up on them); run again "
              "to retry", file=sys.stderr)  # fmt: skip
        return 1
    return 0


def _check(grid: Grid, path: Path) -> int:
    from collsim.sweep.point import collsim_version, point_key
    from collsim.sweep.store import ResultStore

    resolved = grid.resolve(check=True)
    version = collsim_version()
    keys = {point_key(p.scenario, p.backend, p.size, breakdown=grid.breakdown, version=version)
            for p in resolved.points}  # fmt: skip
    where = path.expanduser()
    stored = len(keys & ResultStore(where).keys()) if where.is_dir() else 0  # --check creates no store
    print(f"{grid.file}: {len(resolved.points)} points valid ({len(resolved.scenarios)} scenarios x backends x "
          f"sizes; {len(keys)} distinct); {stored} stored in {where}, {len(keys) - stored} to run")  # fmt: skip
    return 0
