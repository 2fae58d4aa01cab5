"""``collsim``: the command line, a thin layer over :mod:`collsim.api`.

Commands: ``run`` (nccl-tests style tables), ``compare`` (NCCL vs Gloo with where the time goes), ``topo`` (the
``nvidia-smi topo -m`` matrix and a links summary), ``schema`` (the scenario JSON Schema) and ``benchmark`` (speed
and memory of the default sweeps).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from collsim.api import BACKENDS, Comparison, Simulator
from collsim.backends import BackendError
from collsim.results import Record, format_nccl_tests, records_to_csv, records_to_json
from collsim.scenario import ScenarioError, scenario_json_schema
from collsim.topology import TopologyError, format_topo_matrix
from collsim.units import UnitError, format_size, parse_size_range

__all__ = ["main"]


def _common(p: argparse.ArgumentParser, formats: Sequence[str] = ("table", "json", "csv")) -> None:
    p.add_argument("scenario", help="scenario YAML file, or a built-in name such as hgx-h100")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a scenario field, e.g. --set backends.nccl.env.NCCL_PROTO=Simple (repeatable)",
    )
    p.add_argument("--format", choices=formats, default=formats[0], help="output format (default: %(default)s)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the output to FILE instead of stdout")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="collsim", description="Simulate NCCL-style and Gloo-style collectives on GPU clusters described in YAML."
    )
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="simulate a sweep and print nccl-tests style tables")
    _common(run)
    run.add_argument("--backend", choices=[*BACKENDS, "all"], default="all", help="backend(s) (default: all enabled)")
    run.add_argument("--sizes", metavar="RANGE", help="sizes, e.g. 1MiB:1GiB:x2 or 8B,1KiB (overrides workload.sizes)")
    run.add_argument("--quiet", action="store_true", help="no progress on stderr")
    cmp_ = sub.add_parser("compare", help="NCCL and Gloo side by side, with the speedup and where the time goes")
    _common(cmp_)
    cmp_.add_argument("--sizes", metavar="RANGE", help="sizes (overrides workload.sizes)")
    cmp_.add_argument("--quiet", action="store_true", help="no progress on stderr")
    exp = sub.add_parser(
        "explain", help="NCCL's cost model for every enabled (algorithm, protocol), its choice, and the simulated time"
    )
    _common(exp, ("table", "json"))
    exp.add_argument("--sizes", metavar="RANGE", help="sizes (overrides workload.sizes)")
    exp.add_argument("--all", action="store_true", help="simulate every enabled pair, not only the choice")
    exp.add_argument("--quiet", action="store_true", help="no progress on stderr")
    topo = sub.add_parser("topo", help="GPU x GPU and GPU x NIC path matrix like nvidia-smi topo -m")
    _common(topo, ("table",))
    topo.add_argument("--node", type=int, default=0, help="which node to show (default 0)")
    schema = sub.add_parser("schema", help="print the scenario JSON Schema (for editors)")
    schema.add_argument("-o", "--output", metavar="FILE")
    bench = sub.add_parser("benchmark", help="wall time and peak memory of each shipped scenario's default sweep")
    bench.add_argument("scenarios", nargs="*", help="scenario names or files (default: all shipped)")
    bench.add_argument("--baseline-events", type=int, default=1_000_000, help="timeouts in the bare SimPy loop")
    return ap


class _Progress:
    """One status line on stderr, only when stderr is a terminal."""

    def __init__(self, quiet: bool, stream: TextIO = sys.stderr) -> None:
        self.stream = stream
        self.on = not quiet and stream.isatty()

    def __call__(self, backend: str, size: int, i: int, total: int) -> None:
        if self.on:
            self.stream.write(f"\r\x1b[K[{i + 1}/{total}] {backend} {format_size(size)}")
            self.stream.flush()

    def done(self) -> None:
        if self.on:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _sizes(arg: str | None) -> list[int] | None:
    if not arg:
        return None
    try:
        return parse_size_range(arg)
    except UnitError as exc:
        raise ScenarioError(str(exc), file="--sizes") from None


def _emit(text: str, output: str | None) -> None:
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)


def _finish(text: str, output: str | None, interrupted: bool, kept: str) -> int:
    """Write the output; after Ctrl-C say what was kept and return 130."""
    _emit(text, output)
    if interrupted:
        print(f"collsim: interrupted; kept {kept}", file=sys.stderr)
        return 130
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    sim = Simulator.from_source(args.scenario, args.overrides)
    backends = sim.backends() if args.backend == "all" else [args.backend]
    if not backends:
        raise ScenarioError(
            "no backend enabled; enable backends.nccl or backends.gloo", file=sim.scenario.source_file, field="backends"
        )
    prog = _Progress(args.quiet)
    result = sim.run(backends=backends, sizes=_sizes(args.sizes), progress=prog)
    prog.done()
    if args.format == "json":
        text = records_to_json(result.records, sim.scenario.to_dict(), interrupted=result.interrupted) + "\n"
    elif args.format == "csv":
        text = records_to_csv(result.records)
    else:
        parts = []
        for b in backends:
            for coll in sim.scenario.collectives():
                recs = [r for r in result.by_backend(b) if r.collective == coll]
                if not recs:
                    continue
                r0 = recs[0]
                channels = max(r.channels or 0 for r in recs)
                head = (
                    f"collsim {b}: {sim.scenario.name}, {r0.nranks} ranks, {coll} {r0.dtype}, "
                    f"algorithms {', '.join(sorted({r.algorithm for r in recs}))}"
                    + (f", up to {channels} channels" if channels else "")
                )
                parts.append(format_nccl_tests(recs, header=head))
        text = "\n".join(parts)
    return _finish(text, args.output, result.interrupted, f"{len(result.records)} rows")


def _share_text(rec: Record) -> str:
    shares = Comparison.shares(rec)
    shown = [(k, f) for k, f in shares if f >= 0.005]
    other = 1.0 - sum(f for _, f in shown)
    text = ", ".join(f"{100 * f:.0f}% {k}" for k, f in shown)
    if other > 0.0005:
        text += f", {100 * other:.1f}% other"
    return text


def _cmd_compare(args: argparse.Namespace) -> int:
    sim = Simulator.from_source(args.scenario, args.overrides)
    prog = _Progress(args.quiet)
    rows, interrupted = sim.compare(_sizes(args.sizes), progress=prog)
    prog.done()
    if args.format == "json":
        out = [
            {
                "size_bytes": r.size_bytes,
                "speedup": r.speedup,
                "nccl": r.nccl.to_dict(),
                "gloo": r.gloo.to_dict(),
            }
            for r in rows
        ]
        text = (
            json.dumps({"scenario": sim.scenario.to_dict(), "comparison": out, "interrupted": interrupted}, indent=2)
            + "\n"
        )
    elif args.format == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["size_bytes", "nccl_time_us", "nccl_busbw_gbps", "gloo_time_us", "gloo_busbw_gbps", "speedup"])
        for r in rows:
            w.writerow([r.size_bytes, r.nccl.time_us, r.nccl.busbw_gbps, r.gloo.time_us, r.gloo.busbw_gbps, r.speedup])
        text = buf.getvalue()
    else:
        n = rows[0].nccl.nranks if rows else 0
        many = len(sim.scenario.collectives()) > 1

        def label(r: Comparison) -> str:
            size = format_size(r.size_bytes)
            return f"{r.nccl.collective} {size}" if many else size

        width = max([10, *(len(label(r)) for r in rows)])
        go = sim.gloo_options
        lines = [
            f"# collsim compare: {sim.scenario.name} ({n} ranks, {', '.join(sim.scenario.collectives())} "
            f"{sim.scenario.workload.dtype})",
            f"# NCCL: the (algorithm/protocol) its cost model picks; Gloo: {go.algorithm} over {go.transport} "
            f"({go.device} tensors)",
            f"# {'size':>{width}} {'nccl us':>12} {'busbw':>7} {'nccl algo':>12} {'gloo us':>12} {'busbw':>7} "
            f"{'speedup':>8}",
        ]
        for r in rows:
            algo = f"{r.nccl.algorithm}/{r.nccl.protocol}"
            lines.append(
                f"  {label(r):>{width}} {r.nccl.time_us:12.2f} {r.nccl.busbw_gbps:7.2f} {algo:>12} "
                f"{r.gloo.time_us:12.2f} {r.gloo.busbw_gbps:7.2f} {r.speedup:7.1f}x"
            )
        lines.append("")
        lines.append("# Where the time goes (share of each collective's time; the parts add up to 100%)")
        for r in rows:
            lines.append(f"  {label(r):>{width}}  NCCL: {_share_text(r.nccl)}")
            lines.append(f"  {'':>{width}}  Gloo: {_share_text(r.gloo)}")
        text = "\n".join(lines) + "\n"
    return _finish(text, args.output, interrupted, f"{len(rows)} sizes")


def _cmd_explain(args: argparse.Namespace) -> int:
    sim = Simulator.from_source(args.scenario, args.overrides)
    prog = _Progress(args.quiet)
    rows, interrupted = sim.explain(_sizes(args.sizes), all_pairs=args.all, progress=prog)
    prog.done()
    agree = [r for r in rows if r.simulated_best is not None]
    same = sum(1 for r in agree if r.simulated_best == r.choice)
    if args.format == "json":
        payload: dict[str, Any] = {
            "scenario": sim.scenario.to_dict(),
            "explain": [r.to_dict() for r in rows],
            "interrupted": interrupted,
        }
        if agree:
            payload["agreement"] = {"same_choice": same, "sizes": len(agree)}
        text = json.dumps(payload, indent=2) + "\n"
    else:
        pairs = list(rows[0].model_s) if rows else []
        names = [f"{a}/{p}" for a, p in pairs]
        width = max([11, *(len(x) + 1 for x in names)])
        lines = [
            f"# collsim explain: {sim.scenario.name}, {len(sim.nccl_plan.ranks)} ranks, NCCL's cost model in us per "
            "(algorithm/protocol); * = its choice" + ("; simulated times below each row" if args.all else ""),
            f"# {'size':>10} " + "".join(f"{x:>{width}}" for x in names) + f" {'choice':>14} {'simulated us':>13}",
        ]
        for r in rows:
            cells = "".join(
                f"{(f'{r.model_s[k] * 1e6:.1f}' + ('*' if k == r.choice else ' ')):>{width}}" for k in pairs
            )
            sim_t = r.simulated_s.get(r.choice)
            lines.append(
                f"  {format_size(r.size_bytes):>10} {cells} {'/'.join(r.choice):>14} {(sim_t or 0) * 1e6:13.2f}"
            )
            if args.all:
                best = r.simulated_best
                simc = "".join(
                    f"{(f'{r.simulated_s[k] * 1e6:.1f}' + ('+' if k == best else ' ')):>{width}}" for k in pairs
                )
                lines.append(f"  {'simulated':>10} {simc} {'/'.join(best or ('-',)):>14}")
        if agree:
            lines.append(
                f"# cost model and simulation pick the same pair at {same} of {len(agree)} sizes "
                "(+ = fastest simulated)"
            )
        text = "\n".join(lines) + "\n"
    return _finish(text, args.output, interrupted, f"{len(rows)} sizes")


def _cmd_topo(args: argparse.Namespace) -> int:
    sim = Simulator.from_source(args.scenario, args.overrides)
    if not 0 <= args.node < sim.topology.nodes:
        raise ScenarioError(f"{args.node}: the cluster has nodes 0..{sim.topology.nodes - 1}", field="--node")
    _emit(format_topo_matrix(sim.topology, args.node), args.output)
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    _emit(json.dumps(scenario_json_schema(), indent=2) + "\n", args.output)
    return 0


def _cmd_benchmark(args: argparse.Namespace) -> int:
    from collsim.perf import run_benchmark

    return run_benchmark(args.scenarios, args.baseline_events)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``collsim`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    handlers = {
        "run": _cmd_run,
        "compare": _cmd_compare,
        "explain": _cmd_explain,
        "topo": _cmd_topo,
        "schema": _cmd_schema,
        "benchmark": _cmd_benchmark,
    }
    try:
        return handlers[args.command](args)
    except (ScenarioError, TopologyError, BackendError, UnitError) as exc:
        print(f"collsim: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"collsim: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("collsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
