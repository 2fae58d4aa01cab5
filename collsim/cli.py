"""``collsim``: the command line, a thin layer over :mod:`collsim.api`.

Commands: ``run`` (nccl-tests style tables, ``--trace`` for a Chrome trace), ``compare`` (NCCL vs Gloo with where
the time goes), ``explain`` (NCCL's cost model against the simulation), ``topo`` (the ``nvidia-smi topo -m`` matrix
and a links summary), ``validate`` and ``calibrate`` (against measurements), ``report`` (one HTML page), ``bench``
(real runs with torch.distributed), ``schema`` (the scenario JSON Schema) and ``benchmark`` (speed and memory of the
default sweeps).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from collsim.api import BACKENDS, Simulator
from collsim.backends import BackendError
from collsim.calibration.measurement import MeasurementError
from collsim.calibration.nccltests import ParseWarning
from collsim.engine.budget import work_budget
from collsim.files import check_output_path, write_atomic
from collsim.parallel import Terminated, handle_signals
from collsim.results import (
    AlgorithmComparison,
    Comparison,
    RepeatedRecord,
    agreement,
    algorithm_comparisons_to_csv,
    algorithm_comparisons_to_json,
    comparisons_to_csv,
    comparisons_to_json,
    explanations_to_json,
    format_algorithm_comparison,
    format_algorithm_perturbation,
    format_comparison,
    format_explain_perturbation,
    format_explanation,
    format_perturbation,
    format_repeated_sweep,
    format_sweep,
    mark_partial,
    partial_fields,
    records_to_csv,
    records_to_json,
    repeated_to_csv,
)
from collsim.results.step import StepRow, format_step, step_rows_to_csv, step_rows_to_json
from collsim.scenario import ScenarioError, ScenarioWarning, scenario_json_schema
from collsim.sweep.command import add_arguments as _sweep_arguments
from collsim.topology import TopologyError, format_topo_matrix
from collsim.topology.errors import TopologyWarning
from collsim.units import UnitError, format_size, format_time, parse_size, parse_size_range
from collsim.vocab import TENSOR_DEVICES

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
    _presets_option(p)


def _presets_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--presets", action="append", default=[], metavar="FILE",
                   help="user presets file or folder (GPUs, NICs, links, CPUs, node templates; repeatable), after "
                        "the scenario's own preset_files")  # fmt: skip


def _add_presets(args: argparse.Namespace) -> None:
    """``--presets FILE``: appended to the scenario's ``preset_files`` (as absolute paths) through ``--set``."""
    given = getattr(args, "presets", None)
    if not given:
        return
    from collsim.safeyaml import load_yaml
    from collsim.scenario import scenarios_dir

    # the scenario's own preset_files, read from its YAML (it cannot be validated before its presets are known)
    path = Path(args.scenario)
    if not path.is_file():
        path = scenarios_dir() / f"{args.scenario}.yaml"
    try:
        raw = load_yaml(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError):  # not readable: loading the scenario reports it, naming the file
        raw = None
    listed = raw.get("preset_files") if isinstance(raw, dict) else None
    own = [str((path.parent / str(item)).resolve()) for item in listed] if isinstance(listed, list) else []
    for item in given:
        if not Path(item).exists():
            raise ScenarioError(f"presets file or folder not found: {item}", file="--presets")
    paths = own + [str(Path(item).resolve()) for item in given]
    args.overrides.append("preset_files=" + json.dumps(paths))


_Sub = argparse._SubParsersAction  # the subcommand table of collsim's parser


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="collsim", description="Simulate NCCL-style and Gloo-style collectives on GPU clusters described in YAML."
    )
    sub = ap.add_subparsers(dest="command", required=True)
    _simulation_commands(sub)
    _import_command(sub)
    _measurement_commands(sub)
    _tool_commands(sub)
    _bench_command(sub)
    return ap


def _simulation_commands(sub: _Sub) -> None:
    """``run``, ``compare``, ``explain``, ``step`` and ``topo``: what collsim predicts."""
    run = sub.add_parser("run", help="simulate a sweep and print nccl-tests style tables")
    _common(run)
    run.add_argument("--backend", choices=[*BACKENDS, "all"], default="all", help="backend(s) (default: all enabled)")
    run.add_argument("--sizes", metavar="RANGE", help="sizes, e.g. 1MiB:1GiB:x2 or 8B,1KiB (overrides workload.sizes)")
    run.add_argument("--quiet", action="store_true", help="no progress on stderr")
    run.add_argument("--jobs", type=int, default=0, metavar="N", help=_JOBS_HELP)
    run.add_argument("--trace", metavar="FILE.json", help="also write a Chrome trace (Perfetto, chrome://tracing)")
    run.add_argument("--trace-size", metavar="SIZE", help="size the trace shows (default: 64MiB or the largest size)")
    run.add_argument(
        "--trace-full",
        action="store_true",
        help="every flow an event in the trace (default: at most 50,000 events, bars merged into time bins beyond)",
    )
    run.add_argument("--repeat", type=int, default=1, metavar="K",
                     help="runs per size, each with its own draws of the scenario's noise; reports the median and "
                     "p50/p99/min/max (default: %(default)s)")  # fmt: skip
    cmp_ = sub.add_parser("compare", help="NCCL and Gloo side by side, with the speedup and where the time goes")
    _common(cmp_)
    cmp_.add_argument("--sizes", metavar="RANGE", help="sizes (overrides workload.sizes)")
    cmp_.add_argument("--quiet", action="store_true", help="no progress on stderr")
    cmp_.add_argument("--jobs", type=int, default=0, metavar="N", help=_JOBS_HELP)
    exp = sub.add_parser(
        "explain", help="NCCL's cost model for every enabled (algorithm, protocol), its choice, and the simulated time"
    )
    _common(exp, ("table", "json"))
    exp.add_argument("--sizes", metavar="RANGE", help="sizes (overrides workload.sizes)")
    exp.add_argument("--all", action="store_true", help="simulate every enabled pair, not only the choice")
    exp.add_argument("--quiet", action="store_true", help="no progress on stderr")
    exp.add_argument("--jobs", type=int, default=0, metavar="N", help=_JOBS_HELP)
    exp.add_argument("--dask", metavar="local|ADDRESS",
                     help="one size per task on Dask: 'local' (a LocalCluster) or a scheduler address")
    exp.add_argument("--nccl-log", metavar="LOG",
                     help="an NCCL_DEBUG=INFO log of a run on the cluster: collsim's plan (ranks, channels, "
                          "transports, NICs) set beside what NCCL printed, with what to change where they differ")
    step = sub.add_parser(
        "step", help="one DDP training iteration per backend: iteration time, overlap, scaling, bucket by bucket"
    )
    _common(step)
    step.add_argument("--backend", choices=[*BACKENDS, "all"], default="all", help="backend(s) (default: all enabled)")
    step.add_argument("--sweep", metavar="FIELD=V1,V2,...", action="append", default=[],
                      help="one step per value, e.g. bucket_cap_mb=1,5,25,100 (a training field) or "
                      "cluster.nodes=1,2,4 (any scenario field; lists in YAML: "
                      "cluster.visible_gpus=[0],[0,1]); repeated: every combination")  # fmt: skip
    step.add_argument("--no-buckets", action="store_true", help="leave out the bucket tables")
    step.add_argument("--quiet", action="store_true", help="no progress on stderr")
    topo = sub.add_parser("topo", help="GPU x GPU and GPU x NIC path matrix like nvidia-smi topo -m")
    _common(topo, ("table",))
    topo.add_argument("--node", type=int, default=0, help="which node to show (default 0)")


def _import_command(sub: _Sub) -> None:
    """``import``: a node template from NCCL's topology dump or ``nvidia-smi topo -m``."""
    imp = sub.add_parser("import", help="a node template from NCCL's topology dump or nvidia-smi topo -m; a "
                         "scenario from an nccl-tests run; measurements from NCCL Inspector logs")
    imp.add_argument("kind", choices=("nccl-xml", "nvidia-smi", "nccl-tests", "inspector", "torch-trace"),
                     help="nccl-xml: the file NCCL_TOPO_DUMP_FILE wrote, or a static NCCL_TOPO_FILE (a cloud's: the "
                     "PCIe tree only; give --gpu, --nic and for NVLink --nvswitch); nvidia-smi: the output of "
                     "nvidia-smi topo -m; nccl-tests: an nccl-tests log or JSON report (-J), written as the scenario "
                     "of that run on --node templates; inspector: NCCL Inspector logs (a file, or the "
                     "NCCL_INSPECTOR_DUMP_DIR folder), listed by communicator and collective and written as one "
                     "measurement each (with --node, a scenario each too); torch-trace: PyTorch profiler traces with "
                     "CUDA activities (a trace, or a folder of every rank's), the same way")
    imp.add_argument("file", metavar="FILE", help="the file to read (inspector: a log or a folder of logs; "
                     "torch-trace: a trace or a folder of traces)")
    imp.add_argument("-o", "--output", metavar="FILE.yaml",
                     help="write the template (nccl-tests: the scenario) there (atomically) and print its path matrix "
                     "(nccl-tests: what it took from the run; inspector, torch-trace: a folder, made if missing, for "
                     "the measurements and scenarios); default: print the YAML (inspector, torch-trace: the table)")
    imp.add_argument("--pool", action="store_true", help="inspector, torch-trace: one measurement for every "
                     "communicator of one shape (collective, type, ranks, nodes), as collsim validate reads them, not "
                     "one a communicator")
    imp.add_argument("--gpu", metavar="PRESET", help="GPU preset of every GPU (nccl-xml: default from the PCI id; "
                     "nvidia-smi: required; nccl-tests: for a --node template with a gpu parameter, default from the "
                     "GPU name the run printed)")
    imp.add_argument("--node", metavar="TEMPLATE", help="nccl-tests, inspector, torch-trace: the node template the "
                     "run's hosts are (a name such as hgx or hgx-b200, or a template file)")
    imp.add_argument("--param", dest="node_params", action="append", default=[], metavar="NAME=VALUE",
                     help="nccl-tests, inspector, torch-trace: a parameter of the --node template (repeatable; e.g. "
                     "--param gpus=8 --param p2p=true), as cluster.node_params")
    imp.add_argument("--collective", help="nccl-tests: for a log that does not name it (e.g. allreduce)")
    imp.add_argument("--nranks", type=int, help="nccl-tests: for a log that does not say how many ranks ran")
    imp.add_argument("--series", metavar="WORDS", help="nccl-tests: the series of a run of several (-d all, -o all): "
                     "by the words of its name (bfloat16, 'half sum'); default the first")
    imp.add_argument("--nic", metavar="PRESET", help="NIC preset of every NIC (nccl-xml: default by speed; "
                     "nvidia-smi: required when it shows NICs)")
    imp.add_argument("--cpu", metavar="PRESET", help="CPU preset of every socket (nccl-xml: default by NCCL's CPU "
                     "class; nvidia-smi: default generic-x86)")
    imp.add_argument("--name", metavar="NAME", help="the template's name (default: the file's stem)")
    imp.add_argument("--nvswitch", action="store_true",
                     help="nccl-xml whose GPUs list no NVLink (a static NCCL_TOPO_FILE: NCCL asks NVML at run time): "
                     "wire every GPU's NVLinks (its preset's count) to one NVSwitch, as on HGX and DGX boards")
    imp.add_argument("--presets", dest="import_presets", action="append", default=[], metavar="FILE",
                     help="user presets file or folder the presets named may come from (repeatable)")  # fmt: skip


def _measurement_commands(sub: _Sub) -> None:
    """``validate`` and ``calibrate``: predictions against measurements."""
    val = sub.add_parser("validate", help="predicted vs measured per size, and the error per size band")
    _common(val, ("table", "json"))
    _measurement_args(val)
    val.add_argument("--profile", metavar="YAML", help="calibration profile to apply (default: the scenario's)")
    val.add_argument("--jobs", type=int, default=1, metavar="N",
                     help="worker processes over the sizes (default 1: here; 0: one per CPU); the same rows either way")
    val.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page with a plotly figure")
    val.add_argument("--pairs", action="store_true",
                     help="also simulate every (algorithm, protocol) NCCL may pick (Gloo: every allreduce algorithm) "
                     "at each size and show the one nearest the measurement")
    val.add_argument("--nccl-log", metavar="LOG",
                     help="an NCCL_DEBUG_SUBSYS=TUNING log of the measured run: simulate each size with the "
                     "(algorithm, protocol) NCCL says it ran, not collsim's pick")
    val.add_argument("--recorded-pairs", action="store_true",
                     help="simulate each size with the (algorithm, protocol) the measurement records NCCL ran (NCCL "
                     "Inspector logs of format v4.3), not collsim's pick")
    cal = sub.add_parser("calibrate", help="fit a calibration profile to measurements (held-out sizes validate it)")
    cal.add_argument("scenario", help="scenario YAML file, or a built-in name")
    _measurement_args(cal)
    cal.add_argument("-o", "--output", metavar="PROFILE.yaml", required=True, help="where to write the profile")
    _presets_option(cal)
    cal.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                     help="override a scenario field (repeatable)")
    cal.add_argument("--holdout", choices=["alternate", "none"], default="alternate",
                     help="hold out every other size to report the error on unseen sizes (default: %(default)s)")
    cal.add_argument("--param", dest="params", action="append", metavar="NAME",
                     help="fit this parameter (repeatable; default: chosen by sensitivity)")
    cal.add_argument("--quiet", action="store_true", help="no progress on stderr")
    cal.add_argument("--jobs", type=int, default=0, metavar="N", help=_JOBS_HELP)
    cal.add_argument("--dask", metavar="local|ADDRESS",
                     help="simulate each predicted sweep on Dask: 'local' (a LocalCluster) or a scheduler address")


def _tool_commands(sub: _Sub) -> None:
    """``schema``, ``benchmark``, ``sweep`` and ``report``."""
    schema = sub.add_parser("schema", help="print the scenario JSON Schema (for editors)")
    schema.add_argument("-o", "--output", metavar="FILE")
    bench = sub.add_parser("benchmark", help="wall time and peak memory of each shipped scenario's default sweep")
    bench.add_argument("scenarios", nargs="*", help="scenario names or files (default: all shipped)")
    bench.add_argument("--baseline-events", type=int, default=1_000_000, help="timeouts in the bare SimPy loop")
    bench.add_argument("--jobs", type=int, default=0, metavar="N",
                       help="worker processes per sweep, as collsim run (default 0: one per CPU; 1: serial)")
    bench.add_argument("--scale", action="store_true",
                       help="the scale table instead: 128-1024 H100 GPUs, Ring/default, symmetry on/off, "
                            "one slow NIC, a slow rail")
    bench.add_argument("--scale-nodes", default="16,64,128", metavar="N,N,...",
                       help="node counts of the scale table (8 GPUs each; default: %(default)s)")
    bench.add_argument("--scale-size", default="1GiB", metavar="SIZE", help="allreduce size (default: %(default)s)")
    bench.add_argument("--scale-timeout", type=float, default=600.0, metavar="S",
                       help="seconds before a case of the scale table is stopped (default: %(default)s)")
    bench.add_argument("--sweep", action="store_true",
                       help="the sweep table instead: a 200-point grid serially, on the local pool and on a Dask "
                       "LocalCluster (throughput, Dask's overhead per point)")
    bench.add_argument("--sweep-grid", metavar="GRID.yaml", help="benchmark this grid instead of the built-in one")
    swp = sub.add_parser("sweep", help="a grid of what-if scenarios (axes over any field) on the local pool or on "
                         "Dask, into a results store that a rerun resumes")  # fmt: skip
    _sweep_arguments(swp)
    report = sub.add_parser(
        "report", help="one self-contained HTML page: topology, NCCL vs Gloo, where the time goes, a timeline"
    )
    report.add_argument("scenario", help="scenario YAML file, or a built-in name such as hgx-h100")
    _presets_option(report)
    report.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="override a scenario field (repeatable)")
    report.add_argument("-o", "--output", metavar="FILE", default="report.html", help="default: %(default)s")
    report.add_argument("--sizes", metavar="RANGE", help="comparison sizes (default: the scenario's, steps >= x4)")
    report.add_argument("--size", metavar="SIZE", help="timeline size (default: 64MiB or the largest size)")
    report.add_argument("--quiet", action="store_true", help="no progress on stderr, no summary line")


def _bench_command(sub: _Sub) -> None:
    """``bench``: real torch.distributed runs (and DDP iterations) on this machine."""
    real = sub.add_parser("bench", help="time a collective for real with torch.distributed (nccl-tests style)")
    real.add_argument("-c", "--collective", default="allreduce",
                      help="allreduce, allgather, reduce_scatter, broadcast, reduce or alltoall (default: %(default)s)")
    real.add_argument("--backend", choices=list(BACKENDS), help="default: nccl with cuda tensors, gloo with cpu")
    real.add_argument("--device", choices=list(TENSOR_DEVICES),
                      help="tensor device (default: cuda when available; --ddp: cpu)")
    real.add_argument("--dtype", default="float32", help="element type (default: %(default)s)")
    real.add_argument("--sizes", metavar="RANGE", help="sizes, e.g. 1KiB:64MiB:x2 or 8B,1KiB (default: 1KiB:64MiB:x2)")
    real.add_argument("-w", "--warmup", type=int, default=5, help="warm-up iterations per size (default: %(default)s)")
    real.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per size (default: %(default)s)")
    real.add_argument("--timing", choices=["iteration", "block"], default="iteration",
                      help="iteration: median of per-iteration times (slowest rank); block: nccl-tests' mean")
    real.add_argument("--nprocs", type=int, help="local ranks to launch (default: GPUs, or 2 on cpu; not torchrun)")
    real.add_argument("--root", type=int, default=0, help="root rank of broadcast and reduce (default: 0)")
    real.add_argument("--no-check", action="store_true", help="skip the data check after each size")
    real.add_argument("--timeout", type=float, default=300.0, help="torch.distributed timeout, seconds")
    real.add_argument("--cores-per-rank", type=int, metavar="N",
                      help="pin each local rank to its own N CPUs, as taskset would (default: not pinned)")
    real.add_argument("-o", "--output", metavar="FILE", help="write the collsim measurement (.json or .csv)")
    real.add_argument("--text", metavar="FILE", help="write the nccl-tests style text to FILE instead of stdout")
    real.add_argument("--probe", action="store_true", help="measure this machine's GPU (copies, launch, NCCL, Gloo)")
    real.add_argument("--probe-ranks", default="2", metavar="N,...",
                      help="Gloo rank counts sharing the GPU in --probe, e.g. 2,4 (default: 2)")
    real.add_argument("--no-native", action="store_true",
                      help="--probe without its C++ programs (built with nvcc where it is on the PATH)")
    real.add_argument("--probe-check", metavar="PROBE.json",
                      help="compare a --probe file with a GPU preset (no torch needed) and print the table")
    real.add_argument("--gpu", metavar="PRESET", help="GPU preset of --probe-check (default: the one the probe names)")
    real.add_argument("--preset-out", metavar="FILE.yaml",
                      help="with --probe-check or --host-memory: write the measured figures as presets for "
                           "--presets")
    real.add_argument("--quiet", action="store_true", help="no progress on stderr")
    mem = real.add_argument_group("host-memory mode (collsim/bench/hostmem.py)")
    mem.add_argument("--host-memory", action="store_true",
                     help="measure this host's memory figures for a CPU preset instead (memory_bandwidth, "
                          "copy_bw_per_core, first_touch_bw): copy_, add_ and fresh allocations, one torch thread "
                          "per process, one alone and --nprocs at once (default 2)")
    mem.add_argument("--host-memory-size", default="256MiB", metavar="SIZE",
                     help="bytes of each streaming pass (default: %(default)s)")
    mem.add_argument("--cpu", metavar="PRESET", default="generic-x86",
                     help="with --host-memory --preset-out: the shipped CPU preset the measured one starts from "
                          "(default: %(default)s)")
    ddp = real.add_argument_group("DDP mode (collsim/bench/ddp.py)")
    ddp.add_argument("--ddp", action="store_true",
                     help="time DistributedDataParallel iterations of an MLP (Gloo, CPU tensors) instead")
    ddp.add_argument("--bucket-cap-mb", metavar="MIB,...", help="DDP bucket caps, MiB (default: 1,25,100)")
    ddp.add_argument("--no-sync", type=int, default=1, metavar="K",
                     help="also run K micro-steps per step, K-1 under no_sync() (DDP, and every --fsdp "
                          "configuration; FSDP2: set_requires_gradient_sync(False)) (default: 1, not run)")
    ddp.add_argument("--no-sync-cap-mb", type=float, default=25.0, metavar="MIB",
                     help="bucket cap of the --no-sync run, MiB (default: %(default)g)")
    ddp.add_argument("--fsdp", metavar="STRATEGY,...",
                     help="also time FullyShardedDataParallel (every Linear a unit) with these sharding strategies: "
                          "full_shard, shard_grad_op, no_shard; FSDP2 (fully_shard on every Linear and the model): "
                          "fsdp2_full_shard, fsdp2_shard_grad_op (default: not run)")
    ddp.add_argument("--checkpoint", action="store_true",
                     help="also run the computation, each DDP cap and each --fsdp configuration with activation "
                          "checkpointing on every Linear (non-reentrant checkpoint_wrapper) (default: not run)")
    ddp.add_argument("--clip", action="store_true",
                     help="also run the computation, each DDP cap and each --fsdp configuration with gradient-norm "
                          "clipping before the optimizer (clip_grad_norm_) (default: not run)")
    ddp.add_argument("--mlp", metavar="WIDTHS", help="MLP widths, input first (default: 1024,2048x9,1024)")
    ddp.add_argument("--batch", type=int, default=32, help="samples per rank per micro-step (default: %(default)s)")
    ddp.add_argument("--threads", type=int, default=1, help="intra-op threads per rank (default: %(default)s)")
    ddp.add_argument("--rounds", type=int, default=4, help="interleaved rounds of timed iterations (default: 4)")
    ddp.add_argument("--model-out", metavar="FILE.yaml", help="write the model with measured per-layer times")


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
        """Clear the status line."""
        if self.on:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


_JOBS_HELP = "worker processes for the sweep (default 0: one per CPU; 1: serial)"


def _sizes(arg: str | None) -> list[int] | None:
    if not arg:
        return None
    try:
        return parse_size_range(arg)
    except UnitError as exc:
        raise ScenarioError(str(exc), file="--sizes") from None


def _resolved(sim: Simulator, args: argparse.Namespace) -> dict[str, Any]:
    """The resolved scenario for JSON output, with the sizes ``--sizes`` ran in place of the scenario's."""
    doc = sim.scenario.to_dict()
    sizes = _sizes(getattr(args, "sizes", None))
    if sizes is not None and isinstance(doc.get("workload"), dict):
        doc["workload"]["sizes"] = sizes
    return doc


def _jobs(n: int) -> int:
    if n < 0:
        raise ScenarioError(f"--jobs must be 0 (one per CPU) or a positive count, got {n}", file="--jobs")
    return n


def _emit(text: str, output: str | None) -> None:
    """``text`` to stdout, or to ``output`` whole or not at all (:func:`collsim.files.write_atomic`)."""
    if output:
        write_atomic(output, text)
    else:
        sys.stdout.write(text)


def _finish(text: str, args: argparse.Namespace, interrupted: bool, done: int, total: int, unit: str = "rows") -> int:
    """Write the output; after Ctrl-C mark it partial (``done`` of ``total`` ``unit`` finished; JSON carries
    :func:`~collsim.results.partial_fields` already), say what was kept and return 130.

    With ``-o FILE`` an interrupted run writes FILE (whole) only when something finished: with nothing finished an
    existing FILE is left as it was."""
    if not interrupted:
        _emit(text, args.output)
        return 0
    if args.output and done == 0 and Path(args.output).exists():
        print(f"collsim: interrupted before any of the {total} {unit} finished; {args.output} left as it was",
              file=sys.stderr)  # fmt: skip
        return 130
    _emit(mark_partial(text, args.format, done, total, unit), args.output)
    where = f" in {args.output}, marked partial" if args.output else ""
    print(f"collsim: interrupted; kept {done} of {total} {unit}{where}", file=sys.stderr)
    return 130


def _planned(sim: Simulator, backends: Sequence[str], sizes: Sequence[int] | None) -> int:
    """Rows of a complete ``run``: one per backend, collective and size."""
    return len(backends) * len(sim.scenario.collectives()) * len(sim.scenario.sizes() if sizes is None else sizes)


def _cmd_run(args: argparse.Namespace) -> int:
    sim = Simulator.from_source(args.scenario, args.overrides)
    backends = sim.backends() if args.backend == "all" else [args.backend]
    if not backends:
        raise ScenarioError(
            "no backend enabled; enable backends.nccl or backends.gloo", file=sim.scenario.source_file, field="backends"
        )
    if args.repeat != 1 or sim.noisy:
        return _run_repeated(args, sim, backends)
    prog = _Progress(args.quiet)
    sizes = _sizes(args.sizes)
    result = sim.run(backends=backends, sizes=sizes, progress=prog, jobs=_jobs(args.jobs))
    prog.done()
    if args.trace and not result.interrupted:
        _write_trace(args, sim, backends)
    total = _planned(sim, backends, sizes)
    if args.format == "json":
        part = partial_fields(result.interrupted, len(result.records), total)
        text = records_to_json(result.records, _resolved(sim, args), interrupted=result.interrupted, **part) + "\n"
    elif args.format == "csv":
        text = records_to_csv(result.records)
    else:
        text = format_sweep(
            result.records,
            name=sim.scenario.name,
            backends=backends,
            collectives=sim.scenario.collectives(),
            nccl_notes=_nccl_notes(sim, sizes),
        )
    return _finish(text, args, result.interrupted, len(result.records), total)


def _run_repeated(args: argparse.Namespace, sim: Simulator, backends: Sequence[str]) -> int:
    """``run`` with ``--repeat K`` or a scenario with noise: every size K times, the median and the spread."""
    if not sim.noisy and args.repeat > 1:
        print(
            f"collsim: note: no noise in this scenario (noise.launch_skew, noise.jitter): the {args.repeat} runs are "
            "identical; simulated once, p50 = p99",
            file=sys.stderr,
        )
    prog = _Progress(args.quiet)
    sizes = _sizes(args.sizes)
    result = sim.run_repeated(args.repeat, backends=backends, sizes=sizes, progress=prog, jobs=_jobs(args.jobs))
    prog.done()
    if args.trace and not result.interrupted:
        _write_trace(args, sim, backends)
    records = [r for r in result.records if isinstance(r, RepeatedRecord)]
    total = _planned(sim, backends, sizes)
    if args.format == "json":
        part = partial_fields(result.interrupted, len(records), total)
        text = records_to_json(records, _resolved(sim, args), interrupted=result.interrupted, **part) + "\n"
    elif args.format == "csv":
        text = repeated_to_csv(records)
    else:
        text = format_repeated_sweep(
            records,
            name=sim.scenario.name,
            backends=backends,
            collectives=sim.scenario.collectives(),
            nccl_notes=_nccl_notes(sim, sizes),
            noise=sim.noise_text(),
        )
    return _finish(text, args, result.interrupted, len(records), total)


def _nccl_notes(sim: Simulator, sizes: Sequence[int] | None = None) -> list[str]:
    """What the network plugin set in NCCL's environment (one line per variable), the NICs NCCL_IB_HCA leaves NCCL,
    the NICs' per-message cost, which tuner picks, then what of
    the benchmark's harness every NCCL time holds (serial launches of ``-g N``, the host's per-call work)."""
    env = sim.nccl_plugin_env
    out = list(sim.profile_notes)
    out += [f"{k}={v} set by the NICs' network plugin (NIC preset nccl_plugin_env)" for k, v in env.items()]
    out += sim.ib_hca_notes
    costs = sorted({float(d.spec.get("message_overhead") or 0.0) for d in sim.topology.nics()} - {0.0})
    if costs and "nccl" in sim.backends() and sim.topology.nodes > 1:
        each = ", ".join(format_time(t) for t in costs)
        out.append(f"each network message occupies its NIC ports {each} beyond its bytes (NIC preset "
                   "message_overhead: docs/networks.md)")
    tuner_note = sim.nccl_plan.tuner_note if "nccl" in sim.backends() else None
    if tuner_note:
        out.append(tuner_note)
    workload, opts, consts = sim.scenario.workload, sim.nccl_options, sim.nccl_constants
    if opts.gpus_per_process > 1:
        gap = format_time(consts.group_launch_gap)
        out.append(f"times include {opts.gpus_per_process - 1} x {gap} of serial kernel launches "
                   f"(workload.gpus_per_process: {opts.gpus_per_process})")
    host = consts.host_overhead(opts.host_overhead)
    if host > 0:
        out.append(f"times include {format_time(host)} of host work per call (workload.host_overhead: "
                   f"{workload.host_overhead})")
    if workload.cores_per_process is not None and "nccl" in sim.backends():
        out.append(f"workload.cores_per_process ({workload.cores_per_process:g}) confines Gloo's CPU work only: "
                   "NCCL's kernels and proxy threads are not charged to the process's cores")
    if opts.decouple and sim.topology.perturbed_links():
        out.append("engine.decouple: the channels that cross a slowed link (or a NIC standing in for one down) leave "
                   "out their traffic on the links they share with the others (an approximation: "
                   "docs/perturbations.md)")
    if "nccl" in sim.backends():
        out += sim.nccl_release_notes()
        memory = sim.nccl_tests_size_note(sizes)
        if memory:
            out.append(memory)
    return out


def _compare_algorithms(args: argparse.Namespace, sim: Simulator, note: str, command: str = "compare") -> int:
    """``compare`` (and ``explain`` without NCCL) with one backend enabled: its algorithms against each other."""
    if not sim.backends():
        raise ScenarioError(
            "no backend enabled; enable backends.nccl or backends.gloo", file=sim.scenario.source_file, field="backends"
        )
    prog = _Progress(args.quiet)
    rows, interrupted = sim.compare_algorithms(sizes=_sizes(args.sizes), progress=prog, jobs=_jobs(args.jobs))
    healthy: list[AlgorithmComparison] | None = None
    if sim.perturbations() and not interrupted:  # the same sweep on the healthy cluster, to show the effect
        healthy, interrupted = sim.healthy().compare_algorithms(sizes=_sizes(args.sizes), progress=prog,
                                                                jobs=_jobs(args.jobs))  # fmt: skip
    prog.done()
    # one row per collective and size (twice with perturbations: the healthy rows too)
    total = _planned(sim, sim.backends(), _sizes(args.sizes)) * (2 if sim.perturbations() else 1)
    done = len(rows) + len(healthy or ())
    if args.format == "json":
        part = partial_fields(interrupted, done, total)
        if healthy is not None:
            part["healthy"] = [r.to_dict() for r in healthy]
        text = algorithm_comparisons_to_json(rows, _resolved(sim, args), interrupted, **part)
    elif args.format == "csv":
        text = algorithm_comparisons_to_csv(rows, healthy)
    else:
        text = format_algorithm_comparison(
            rows, name=sim.scenario.name, collectives=sim.scenario.collectives(), dtype=sim.scenario.workload.dtype,
            note=note, command=command,
        )  # fmt: skip
        if healthy:
            text += "\n" + format_algorithm_perturbation(rows, healthy, sim.perturbations())
    return _finish(text, args, interrupted, done, total)


def _one_backend_note(sim: Simulator) -> str:
    """Why ``compare`` shows one backend's algorithms, and what its default means."""
    off = [b for b in BACKENDS if b not in sim.backends()]
    why = f"{' and '.join(off)} disabled" + ("; the cluster has no GPUs" if not sim.topology.gpus() else "")
    if sim.backends() == ["gloo"]:
        return (f"{why}. Gloo: for allreduce (and reduce_scatter, an allreduce of a clone) PyTorch's "
                "ProcessGroupGloo runs ring, the others are Gloo's own algorithms; every other collective runs one")
    return f"{why}. NCCL: each algorithm with the protocol its cost model prices fastest; * = what NCCL picks"


def _cmd_compare(args: argparse.Namespace) -> int:
    sim = Simulator.from_source(args.scenario, args.overrides)
    if len(sim.backends()) < len(BACKENDS):  # one backend: its algorithms against each other
        return _compare_algorithms(args, sim, _one_backend_note(sim))
    prog = _Progress(args.quiet)
    rows, interrupted = sim.compare(_sizes(args.sizes), progress=prog, jobs=_jobs(args.jobs))
    healthy: list[Comparison] = []
    if sim.perturbations() and not interrupted:  # the same sweep on the healthy cluster, to show the effect
        healthy, interrupted = sim.healthy().compare(_sizes(args.sizes), progress=prog, jobs=_jobs(args.jobs))
    prog.done()
    # rows of a complete run: one per collective and size (twice with perturbations: the healthy rows too)
    total = _planned(sim, ["nccl"], _sizes(args.sizes)) * (2 if sim.perturbations() else 1)
    done = len(rows) + len(healthy)
    if args.format == "json":
        part = partial_fields(interrupted, done, total)
        text = comparisons_to_json(rows, _resolved(sim, args), interrupted, healthy or None, **part)
    elif args.format == "csv":
        text = comparisons_to_csv(rows, healthy if sim.perturbations() else None)
    else:
        go = sim.gloo_options
        text = format_comparison(
            rows,
            name=sim.scenario.name,
            collectives=sim.scenario.collectives(),
            dtype=sim.scenario.workload.dtype,
            gloo_algorithm=go.algorithm,
            gloo_transport=go.transport,
            gloo_device=go.device,
            nccl_notes=_nccl_notes(sim, _sizes(args.sizes)),
            peers=sim.scenario.workload.peers,
        )
        if healthy:
            text += "\n" + format_perturbation(rows, healthy, sim.perturbations())
    return _finish(text, args, interrupted, done, total)


def _cmd_explain(args: argparse.Namespace) -> int:
    sim = Simulator.from_source(args.scenario, args.overrides)
    nccl_log = _read_nccl_log(sim, args.nccl_log) if args.nccl_log else None  # a bad log fails before simulating
    if "nccl" not in sim.backends() and sim.backends():  # no cost model to explain: Gloo's algorithms, simulated
        note = _one_backend_note(sim) + "; Gloo has no cost model: every algorithm is simulated"
        return _compare_algorithms(args, sim, note, "explain")
    prog = _Progress(args.quiet)
    if args.dask:
        from collsim.sweep.execute import DaskAddressError, DaskMissing, make_executor
        from collsim.sweep.explain import explain_on

        try:
            runner = make_executor(_jobs(args.jobs), args.dask)
        except DaskMissing as exc:
            raise ScenarioError(str(exc)) from None
        except DaskAddressError as exc:
            raise ScenarioError(str(exc), file="--dask") from None
        try:
            rows, interrupted = explain_on(sim, runner, _sizes(args.sizes), all_pairs=args.all, progress=prog)
        finally:
            runner.close()
    else:
        rows, interrupted = sim.explain(_sizes(args.sizes), all_pairs=args.all, progress=prog, jobs=_jobs(args.jobs))
    prog.done()
    total, done = _planned(sim, ["nccl"], _sizes(args.sizes)), len(rows)  # one row per collective and size
    report = _nccl_log_report(sim, nccl_log, args.nccl_log, rows) if nccl_log is not None else None
    if args.format == "json":
        part = partial_fields(interrupted, done, total)
        if report is not None:
            part["nccl_log"] = report[1]
        text = explanations_to_json(rows, _resolved(sim, args), interrupted, agreement(rows), **part)
    else:
        text = format_explanation(
            rows, name=sim.scenario.name, nranks=len(sim.nccl_plan.ranks), notes=_nccl_notes(sim, _sizes(args.sizes)),
            all_pairs=args.all,
        )
        if report is not None:
            text = report[0] + "\n" + text
        if sim.perturbations() and not interrupted:  # NCCL's choice and time on the healthy cluster too
            healthy, interrupted = sim.healthy().explain(_sizes(args.sizes), progress=prog, jobs=_jobs(args.jobs))
            prog.done()
            total, done = 2 * total, done + len(healthy)
            text += "\n" + format_explain_perturbation(rows, healthy, sim.perturbations())
    return _finish(text, args, interrupted, done, total)


def _read_nccl_log(sim: Simulator, path: str) -> Any:
    """``explain --nccl-log``: the log, read (an error names the file); it needs the NCCL backend."""
    from collsim.calibration.nccllog import read_nccl_log

    if "nccl" not in sim.backends():
        raise ScenarioError("--nccl-log: the scenario's NCCL backend is disabled (backends.nccl.enabled: false)")
    return read_nccl_log(path)


def _nccl_log_report(sim: Simulator, log: Any, path: str, rows: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """``explain --nccl-log``: collsim's plan, cost model and choices beside the log's (text sections, and the JSON
    object ``nccl_log``), per collective explained."""
    from collsim.calibration import nccllog

    checks = nccllog.check_plan(log, sim.nccl_plan_facts())
    nranks = len(sim.nccl_plan.ranks)
    colls = list(dict.fromkeys(r.collective for r in rows))
    tuner = {c: nccllog.check_tuner(log, c, sim.nccl_tuner_table(c)) for c in colls}
    picks = {c: {r.size_bytes: r.choice for r in rows if r.collective == c} for c in colls}
    choices = {c: nccllog.check_choices(log, c, nranks, picks[c]) for c in colls}
    text = "\n".join([
        nccllog.render_checks(checks, path, log.notes()),
        *(nccllog.render_tuner(rs, c) for c, rs in tuner.items() if rs),
        *(nccllog.render_choices(rs, c) for c, rs in choices.items() if rs),
    ])  # fmt: skip
    doc = {
        "file": path,
        "notes": log.notes(),
        "checks": [dataclasses.asdict(c) for c in checks],
        "tuner": {c: [dataclasses.asdict(r) for r in rs] for c, rs in tuner.items()},
        "choices": {c: [dataclasses.asdict(r) for r in rs] for c, rs in choices.items()},
    }
    return text, doc


def _measurement_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("measurements", nargs="+", metavar="MEASUREMENT",
                   help="collsim measurement .json/.csv, a published case .json, an nccl-tests JSON report (-J), "
                        "an nccl-tests log, NCCL Inspector output (a log or its folder) or PyTorch profiler traces "
                        "(a trace or a folder)")
    p.add_argument("--collective", help="for nccl-tests logs that do not name it (e.g. allreduce); which of an "
                                        "Inspector dump's collectives")
    p.add_argument("--nranks", type=int, help="for nccl-tests logs that do not say how many ranks ran (or a report "
                                              "of several NCCL_TESTS_SPLIT groups); which of an Inspector dump's "
                                              "communicator sizes")
    p.add_argument("--series", metavar="WORDS", help="for nccl-tests output of several series (-d all, -o all, -r "
                   "all): the one to compare, by the words of its name (bfloat16, 'half sum', 'root 2'); default the "
                   "first")


def _read_measurements(args: argparse.Namespace) -> list[Any]:
    from collsim.calibration import read_measurement
    from collsim.vocab import canonical_collective

    if args.collective is not None:
        try:
            canonical_collective(args.collective)
        except ValueError as exc:
            raise ScenarioError(str(exc), file="--collective") from None
    return [read_measurement(f, collective=args.collective, nranks=args.nranks, series=args.series)
            for f in args.measurements]  # fmt: skip


def _cmd_validate(args: argparse.Namespace) -> int:
    from collsim.calibration.validate import validate
    from collsim.profile import load_profile

    profile = load_profile(args.profile) if args.profile else None
    sim = Simulator.from_source(args.scenario, args.overrides, profile=profile)
    if args.nccl_log and args.recorded_pairs:
        raise ScenarioError("--nccl-log and --recorded-pairs both say which pair NCCL ran: give one")
    log = _read_nccl_log(sim, args.nccl_log) if args.nccl_log else None
    if log is not None:
        from collsim.calibration.nccllog import logged_pairs
    vals = []
    for m in _read_measurements(args):
        logged = None if log is None else logged_pairs(log, m.collective, len(sim.topology.rank_devices()))
        by = "NCCL's log"
        if args.recorded_pairs:
            from collsim.calibration.measurement import recorded_pairs

            logged, by = recorded_pairs(m), "the measurement's record"
            if not logged:
                raise MeasurementError("--recorded-pairs: the measurement records no (algorithm, protocol) (NCCL "
                                       "Inspector logs record them from format v4.3)", file=m.file)  # fmt: skip
        about = [] if log is None else log.run_notes(len(sim.nccl_plan.ranks), sim.nccl_plan.nnodes,
                                                     m.software.get("nccl_version"))  # fmt: skip
        vals.append(validate(sim, m, pairs=args.pairs, logged=logged, logged_by=by, logged_notes=about,
                             jobs=_jobs(args.jobs)))
    if args.format == "json":
        _emit(json.dumps([v.to_dict() for v in vals], indent=2) + "\n", args.output)
    else:
        _emit("\n".join(v.format_table() for v in vals), args.output)
    if args.html:
        from collsim.viz.validation import validation_html

        write_atomic(args.html, validation_html(vals))
    return 0


def _no_holdout_line(holdout: str, distinct: int) -> str:
    """What calibrate prints when no size was held out: why, and what the fit's own error is then worth.

    >>> print(_no_holdout_line("alternate", 3))
    # no held-out sizes: 3 distinct sizes, and --holdout alternate holds out every other size from 4 on; the fit ...
    """
    if holdout == "none":
        why = "--holdout none"
    else:
        plural = "s" if distinct != 1 else ""
        why = f"{distinct} distinct size{plural}, and --holdout alternate holds out every other size from 4 on"
    return f"# no held-out sizes: {why}; the fit sizes' error above checks no prediction"


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from collsim.api import load
    from collsim.calibration.fit import calibrate

    scenario = load(args.scenario, args.overrides)
    on = not args.quiet and sys.stderr.isatty()
    runner: Any = None
    if args.dask:  # each predicted sweep's points on Dask (collsim.sweep's executors)
        from collsim.sweep.calibrate import ExecutorEvaluate
        from collsim.sweep.execute import DaskAddressError, DaskMissing, make_executor

        try:
            runner = make_executor(_jobs(args.jobs), args.dask)
        except DaskMissing as exc:
            raise ScenarioError(str(exc)) from None
        except DaskAddressError as exc:
            raise ScenarioError(str(exc), file="--dask") from None
    try:
        res = calibrate(
            scenario,
            _read_measurements(args),
            holdout=args.holdout,
            parameters=args.params,
            progress=(lambda msg: print(f"calibrate: {msg}", file=sys.stderr)) if on else None,
            jobs=_jobs(args.jobs),
            evaluate=ExecutorEvaluate(runner) if runner is not None else None,
        )
    except (ValueError, RuntimeError) as exc:
        if isinstance(exc, ScenarioError | MeasurementError):
            raise
        raise ScenarioError(str(exc), file=args.scenario, field="calibrate") from None
    finally:
        if runner is not None:
            runner.close()
    res.profile.write(args.output)
    out = [f"# calibrate: {scenario.name}, {res.evaluations} simulated sweeps; profile written to {args.output}"]
    out += [f"  {k} = {v:.6g}" for k, v in sorted(res.profile.parameters.items())]
    out += [f"# note: {n}" for n in res.notes]
    for held in (False, True):
        b, a = res.error("before", held), res.error("after", held)
        if b.count == 0:
            out.append(_no_holdout_line(args.holdout, len(res.fit_sizes) + len(res.heldout_sizes)))
            continue
        out.append(
            f"# {a.band} ({a.count}): median |time error| {b.median_abs_time_error_pct:.1f}% -> "
            f"{a.median_abs_time_error_pct:.1f}%, max {b.max_abs_time_error_pct:.1f}% -> "
            f"{a.max_abs_time_error_pct:.1f}%"
        )
    print("\n".join(out))
    return 0


def _top_level_split(values: str) -> list[str]:
    """``values`` split at the commas outside brackets and braces, so that a sweep can list YAML lists and mappings.

    >>> _top_level_split("[0],[0, 1],{a: 1, b: 2},4")
    ['[0]', '[0, 1]', '{a: 1, b: 2}', '4']
    """
    out, depth, start = [], 0, 0
    for i, ch in enumerate(values):
        depth += (ch in "[{") - (ch in "]}")
        if ch == "," and depth == 0:
            out.append(values[start:i])
            start = i + 1
    out.append(values[start:])
    return out


def _cmd_step(args: argparse.Namespace) -> int:
    points: list[tuple[str, list[str]]] = [("", list(args.overrides))]
    paths: set[str] = set()
    for sweep in args.sweep:  # each --sweep an axis, the steps every combination of their values
        key, sep, values = sweep.partition("=")
        items = [v.strip() for v in _top_level_split(values) if v.strip()]
        if not sep or not key.strip() or not items:
            raise ScenarioError(f"expected FIELD=V1,V2,..., got {sweep!r}", file="--sweep")
        path = key.strip() if "." in key else f"training.{key.strip()}"
        if path in paths:
            raise ScenarioError(f"{path} is swept twice; give its values in one --sweep", file="--sweep")
        paths.add(path)
        points = [(f"{label} {path.split('.')[-1]}={v}".strip(), [*over, f"{path}={v}"])
                  for label, over in points for v in items]  # fmt: skip
    rows: list[StepRow] = []
    sim = None
    for label, overrides in points:
        sim = Simulator.from_source(args.scenario, overrides)
        backends = sim.backends() if args.backend == "all" else [args.backend]
        if not backends:
            raise ScenarioError("no backend enabled; enable backends.nccl or backends.gloo",
                                file=sim.scenario.source_file, field="backends")  # fmt: skip
        rows += [StepRow(label, r) for r in sim.step(backends)]
    assert sim is not None
    if args.format == "json":
        text = step_rows_to_json(rows, sim.scenario.to_dict())
    elif args.format == "csv":
        text = step_rows_to_csv(rows)
    else:
        style = sim.scenario.training.style if sim.scenario.training else "ddp"
        text = format_step(rows, name=sim.scenario.name, model=sim.training_model.name, buckets=not args.no_buckets,
                           style=style)  # fmt: skip
    return _finish(text, args, False, len(rows), len(rows))


def _cmd_topo(args: argparse.Namespace) -> int:
    sim = Simulator.from_source(args.scenario, args.overrides)
    if not 0 <= args.node < sim.topology.nodes:
        raise ScenarioError(f"{args.node}: the cluster has nodes 0..{sim.topology.nodes - 1}", field="--node")
    text = format_topo_matrix(sim.topology, args.node, sim.scenario.cluster.node_params)
    if sim.ib_hca_notes:  # the cluster NCCL plans over: its NIC legend lists only these
        text += "".join(f"\n{note}\n" for note in sim.ib_hca_notes)
    _emit(text, args.output)
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    """``collsim import {nccl-xml,nvidia-smi} FILE``: a node template (collsim.topology.importer), its matrix."""
    from collsim.files import FileReadError, read_text_file
    from collsim.topology import load_presets, topology_from_template
    from collsim.topology.importer import (
        MAX_INPUT_CHARS,
        template_from_nccl_xml,
        template_from_nvidia_smi,
        write_template,
    )
    from collsim.topology.model import ib_device_name
    from collsim.topology.presets import merge_presets, read_preset_files

    if args.kind == "nccl-tests":
        return _import_nccl_tests(args)
    if args.kind in ("inspector", "torch-trace"):
        return _import_calls(args)
    if args.node_params:
        raise TopologyError(f"--param is for nccl-tests, inspector and torch-trace (the --node template's parameters); "
                            f"{args.kind} writes a template", file=args.file)  # fmt: skip
    path = Path(args.file)
    if path.is_file() and path.stat().st_size > MAX_INPUT_CHARS:
        raise TopologyError(f"{path.stat().st_size} bytes; at most {MAX_INPUT_CHARS} are read", file=path)
    try:
        text = read_text_file(path)
    except FileReadError as exc:
        raise TopologyError(str(exc), file=path) from None
    presets = load_presets()
    sources = [src for item in args.import_presets for src in read_preset_files(item)]
    if sources:
        presets = merge_presets(presets, sources)
    if args.kind == "nccl-xml":
        template = template_from_nccl_xml(text, file=path, gpu=args.gpu, nic=args.nic, cpu=args.cpu, name=args.name,
                                          presets=presets, nvswitch=args.nvswitch)  # fmt: skip
    elif args.nvswitch:
        raise TopologyError("--nvswitch is for nccl-xml (nvidia-smi's NV# cells say where the NVLinks go)", file=path)
    else:
        template = template_from_nvidia_smi(text, file=path, gpu=args.gpu, nic=args.nic, cpu=args.cpu,
                                            name=args.name, presets=presets)  # fmt: skip
    if not args.output:
        sys.stdout.write(write_template(template))
        return 0
    write_template(template, args.output)
    topo = topology_from_template(template, file=args.output, presets=presets)
    out = Path(args.output)
    shown = str(out) if out.is_absolute() or str(out).startswith(".") else f"./{out}"
    sys.stdout.write(format_topo_matrix(topo))
    print(f"\ncollsim import: wrote {args.output}: node template {template['name']!r} ({template['description']})")
    far = topo.far_nics(0)
    if far:  # storage or management NICs on the CPU: say so, as NCCL will not use them
        names = ", ".join(f"{topo.device(n).local_name} ({ib_device_name(topo.device(n))})" for n in far)
        print(f"NCCL's network search leaves out {names}: farther from every GPU than the NICs on the GPUs' PCIe "
              "switches (storage or management NICs, as on a DGX); NCCL_IB_HCA need not exclude them")  # fmt: skip
    print(f"Use it in a scenario: cluster: {{node: {shown}}} (a path relative to the scenario's folder; a value with a "
          "'/' or ending in .yaml is a template file), then collsim topo / run SCENARIO")  # fmt: skip
    if args.import_presets:
        print(f"The scenario needs the same presets: preset_files: [{', '.join(args.import_presets)}]")
    return 0


def _scenario_paths(base: Path, node: str, presets: Sequence[str]) -> tuple[str, list[str]]:
    """The node template (when it is a path) and the preset files as a scenario written in ``base`` names them."""
    from collsim.scenario.models import is_path_like

    if is_path_like(node) and not Path(node).is_absolute():
        node = os.path.relpath(Path(node).resolve(), base.resolve())  # relative to the scenario's folder
    return node, [os.path.relpath(Path(f).resolve(), base.resolve()) for f in presets]


def _node_params_arg(items: Sequence[str]) -> dict[str, Any]:
    """``--param NAME=VALUE`` items as a template's ``node_params`` (values read as ``--set`` reads them)."""
    from collsim.scenario.loader import apply_overrides

    try:
        return apply_overrides({}, list(items)) if items else {}
    except ScenarioError as exc:
        raise ScenarioError(exc.message, file="--param", field=exc.field) from None


def _import_nccl_tests(args: argparse.Namespace) -> int:
    """``collsim import nccl-tests FILE --node T``: the scenario of a run (collsim.calibration.scenario_from)."""
    from collsim.calibration import read_measurement
    from collsim.calibration.measurement import MeasurementError
    from collsim.calibration.scenario_from import format_scenario, scenario_from_measurement
    from collsim.files import write_atomic

    for flag, value in (("--nic", args.nic), ("--cpu", args.cpu), ("--nvswitch", args.nvswitch or None)):
        if value is not None:
            raise MeasurementError(f"{flag} is for nccl-xml and nvidia-smi; nccl-tests takes the node from --node",
                                   file=args.file)  # fmt: skip
    if not args.node:
        raise MeasurementError("give --node TEMPLATE: the node template the run's hosts are (collsim topo lists "
                               "them; e.g. hgx, hgx-b200, aws-p5)", file=args.file)  # fmt: skip
    m = read_measurement(args.file, collective=args.collective, nranks=args.nranks, series=args.series)
    out = Path(args.output) if args.output else None
    base = out.parent if out is not None else Path(".")
    # the run's file as the scenario's folder sees it, for the comment and the validate line
    shown = os.path.relpath(Path(args.file).resolve(), base.resolve())
    node, presets = _scenario_paths(base, args.node, args.import_presets)
    imported = scenario_from_measurement(m, node, gpu=args.gpu, name=args.name, preset_files=presets, base=base,
                                         node_params=_node_params_arg(args.node_params))  # fmt: skip
    # the options that chose what was read, for the validate line: without them it would read another series
    chosen = " ".join(f"{flag} {shlex.quote(str(value))}" for flag, value in
                      (("--series", args.series), ("--collective", args.collective), ("--nranks", args.nranks))
                      if value is not None)  # fmt: skip
    text = format_scenario(imported, shown, out.name if out is not None else None, options=chosen)
    if out is None:
        sys.stdout.write(text)
        return 0
    try:
        write_atomic(out, text)
    except OSError as exc:
        raise MeasurementError(f"cannot write the scenario: {exc.strerror or exc}", file=str(out)) from None
    print(f"collsim import: wrote {out}: scenario {imported.data['name']!r} ({imported.data['description']})")
    for label, items in (("given", imported.given), ("from the run", imported.taken), ("assumed", imported.assumed),
                         ("check", imported.warnings)):  # fmt: skip
        for item in items:
            print(f"  {label}: {item}")
    print(f"Compare: collsim validate {out} {args.file}{' ' + chosen if chosen else ''}")
    return 0


def _import_calls(args: argparse.Namespace) -> int:
    """``collsim import {inspector,torch-trace} PATH [-o FOLDER] [--node T]``: a profiler's record of a job's calls
    (NCCL Inspector logs, PyTorch profiler traces) listed by communicator and collective, each written as a
    measurement (and with ``--node`` a scenario) in ``FOLDER``."""
    from collsim.calibration.calls import CallLogError
    from collsim.calibration.inspector import read_inspector
    from collsim.calibration.measurement import (
        MeasurementError,
        call_file_stem,
        call_measurements,
        format_call_groups,
    )
    from collsim.calibration.scenario_from import format_scenario, scenario_from_measurement
    from collsim.calibration.torchtrace import read_torch_traces

    given = (("--nic", args.nic), ("--cpu", args.cpu), ("--nvswitch", args.nvswitch or None),
             ("--collective", args.collective), ("--nranks", args.nranks), ("--series", args.series))  # fmt: skip
    for flag, value in given:
        if value is not None:
            raise MeasurementError(f"{flag} is not an option of import {args.kind} (the records name their "
                                   "collectives and ranks)", file=args.file)  # fmt: skip
    if (args.node or args.gpu) and not args.output:
        raise MeasurementError("--node writes a scenario a measurement: give -o FOLDER", file=args.file)
    on = sys.stderr.isatty()
    progress = (lambda i, n: print(f"\rimport: read {i} of {n} files", end="" if i < n else "\n",
                                   file=sys.stderr)) if on else None  # fmt: skip
    reader = read_inspector if args.kind == "inspector" else read_torch_traces
    try:
        log = reader(args.file, progress=progress)
    except CallLogError as exc:
        raise MeasurementError(exc.reason, file=exc.file, field=exc.field) from None
    entries = call_measurements(log, pool=args.pool)
    written: dict[int, str] = {}
    scenarios: list[str] = []
    if args.output:
        folder = Path(args.output)
        if folder.exists() and not folder.is_dir():
            raise MeasurementError(f"is a file; import {args.kind} writes a folder of measurements", file=args.output)
        node, presets = _scenario_paths(folder, args.node, args.import_presets) if args.node else ("", [])
        # every communicator's scenario first: one the template cannot hold stops the import before any file is
        # written (it left the measurements before it, without their scenarios)
        todo = []
        params = _node_params_arg(args.node_params) if args.node else {}
        for i, (group, m, _) in enumerate(entries):
            if m is None:
                continue
            stem = call_file_stem(group, args.pool)
            path = folder / f"{stem}.json"
            m.file = str(path)
            imported = None
            if args.node:
                imported = scenario_from_measurement(m, node, gpu=args.gpu, name=stem, preset_files=presets,
                                                     base=folder, node_params=params)  # fmt: skip
            todo.append((i, stem, path, m, imported))
        folder.mkdir(exist_ok=True)
        for i, stem, path, m, imported in todo:
            m.write(path)
            written[i] = str(path)
            if imported is not None:
                write_atomic(folder / f"{stem}.yaml", format_scenario(imported, path.name, f"{stem}.yaml",
                                                                     what=f"{log.kind} measurement",
                                                                     command=f"import {args.kind}"))  # fmt: skip
                scenarios.append(str(folder / f"{stem}.yaml"))
    sys.stdout.write(format_call_groups(log, entries, written))
    for yaml_file in scenarios:
        print(f"collsim import: wrote {yaml_file}; compare: collsim validate {yaml_file} "
              f"{Path(yaml_file).with_suffix('.json')}")  # fmt: skip
    if written and not scenarios:
        print("Compare one with a scenario of its cluster: collsim validate SCENARIO FILE.json (or write the "
              "scenarios too: --node TEMPLATE)")  # fmt: skip
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    _emit(json.dumps(scenario_json_schema(), indent=2) + "\n", args.output)
    return 0


def _cmd_benchmark(args: argparse.Namespace) -> int:
    from collsim.perf import run_benchmark, run_scale_benchmark

    if args.scale:
        try:
            nodes = [int(x) for x in args.scale_nodes.split(",") if x.strip()]
        except ValueError:
            raise SystemExit(f"collsim benchmark: --scale-nodes: expected node counts like 16,64,128, got "
                             f"{args.scale_nodes!r}") from None
        return run_scale_benchmark(nodes, parse_size(args.scale_size), args.scale_timeout, args.baseline_events)
    if args.sweep:
        from collsim.sweep.bench import run_sweep_benchmark

        return run_sweep_benchmark(args.sweep_grid, _jobs(args.jobs))
    from collsim.scenario import load_scenario

    for name in args.scenarios or []:  # every scenario loads before the baselines run (minutes)
        load_scenario(name)
    return run_benchmark(args.scenarios, args.baseline_events, _jobs(args.jobs))


def _cmd_sweep(args: argparse.Namespace) -> int:
    from collsim.sweep.command import run_command as run_sweep_command

    return run_sweep_command(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    from collsim.bench import BenchError, run_command

    try:
        return run_command(args)
    except BenchError as exc:
        print(f"collsim: error: {exc}", file=sys.stderr)
        return 2


def _size_option(text: str | None, option: str) -> int | None:
    """One size given on the command line (``64MiB``), or None; bad input names the option."""
    if not text:
        return None
    try:
        size = parse_size(text)
    except UnitError as exc:
        raise ScenarioError(str(exc), file=option) from None
    if size < 1:  # a 0-byte collective moves nothing: no flow to trace or draw
        raise ScenarioError(f"expected a size of at least 1 B, got {text!r}", file=option)
    return size


def _write_trace(args: argparse.Namespace, sim: Simulator, backends: Sequence[str]) -> None:
    """``run --trace``: each backend's collectives at one size, every rank simulated (symmetry off), as a Chrome
    trace."""
    from collsim.trace import TRACE_MAX_EVENTS, chrome_trace, representative_size, write_chrome_trace

    size = _size_option(args.trace_size, "--trace-size")
    given = size is not None
    if size is None:
        size = representative_size(_sizes(args.sizes) or sim.scenario.sizes())
    if not args.quiet:
        print(f"collsim: trace at {format_size(size)}: simulating every rank ...", file=sys.stderr)
    outs = [sim.recorded(b, size, collective=c) for b in backends for c in sim.scenario.collectives()]
    empty = [f"{o.backend} {o.collective}" for o in outs if not o.records]
    # below one element (one a rank for all-gather): the collective returns at once, nothing to draw. A size given
    # is the user's to change; the default (the sweep's) traces the others and says which it left out
    why = (f"{format_size(size)} of {sim.scenario.workload.dtype} moves no data for {', '.join(empty)} on "
           f"{len(sim.topology.rank_devices())} ranks")  # fmt: skip
    if empty and (given or len(empty) == len(outs)):
        raise ScenarioError(f"{why}; give a larger size" if given else f"{why} (the sweep's size, the default "
                            "--trace-size); give --trace-size", file="--trace-size")  # fmt: skip
    if empty:
        outs = [o for o in outs if o.records]
        print(f"collsim: trace: {why}, left out", file=sys.stderr)
    limit = None if args.trace_full else TRACE_MAX_EVENTS
    doc = chrome_trace(outs, sim.topology, title=f"collsim {sim.scenario.name}", max_events=limit)
    write_chrome_trace(args.trace, doc)
    if not args.quiet:
        what = ", ".join(f"{o.backend} {o.collective} {o.time_s * 1e6:.1f} us" for o in outs)
        merged = [c for c in doc["otherData"]["collectives"] if c["detail"] == "merged"]
        how = (
            f"; {sum(c['bars'] for c in merged)} bars merged into {sum(c['events'] for c in merged)} events "
            "(--trace-full for every flow)"
            if merged
            else ""
        )
        print(f"collsim: trace at {format_size(size)} ({what}) written to {args.trace}{how}", file=sys.stderr)


def _cmd_report(args: argparse.Namespace) -> int:
    from collsim.viz.report import build_report, coarse_sizes

    sim = Simulator.from_source(args.scenario, args.overrides)
    sizes = _sizes(args.sizes) or coarse_sizes(sim.scenario.sizes())
    prog = _Progress(args.quiet)
    data = sim.report_data(sizes, _size_option(args.size, "--size"), progress=prog)
    prog.done()
    rep = build_report(data)
    rep.write(args.output)
    if not args.quiet:
        print(
            f"collsim: wrote {args.output}: {len(rep.figures)} figures, sizes {format_size(rep.sizes[0])}-"
            f"{format_size(rep.sizes[-1])}, timeline at {format_size(rep.timeline_size)}, {rep.seconds:.1f} s"
        )
    return 0


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Print collsim's own input warnings as ``collsim: warning: ...`` (they name the file and field themselves),
    not with the Python source line that raised them; other warnings keep Python's format."""
    out = sys.stderr if file is None else file
    if issubclass(category, (ScenarioWarning, ParseWarning, TopologyWarning)):
        print(f"collsim: warning: {_one_line(str(message))}", file=out)
    else:
        out.write(warnings.formatwarning(message, category, filename, lineno, line))


#: What the first Ctrl-C says while workers run (a second one stops them: :func:`collsim.parallel.handle_signals`).
_STOPPING = "collsim: interrupted: finishing the points running (Ctrl-C again to stop them now)"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``collsim`` command; returns the exit status (130 after Ctrl-C, 143 after SIGTERM, 129
    after SIGHUP: README, "Output and interrupts").

    Without ``argv`` (the program's own command line), once the command is done a Ctrl-C is ignored and SIGTERM
    ends the process at once (143), so that the status stays the command's; with ``argv`` (called from Python) the
    previous signal handlers are restored."""
    args = _parser().parse_args(argv)
    with warnings.catch_warnings(), handle_signals(_STOPPING, then_exit=argv is None):
        warnings.showwarning = _show_warning
        try:
            return _dispatch(args)
        except KeyboardInterrupt:  # Ctrl-C again while an earlier one was being reported
            return 130
        except Terminated as exc:
            return 128 + exc.signum


def _one_line(text: str, limit: int = 4000) -> str:
    """An error message as one line of at most ``limit`` characters: line breaks become spaces and other control
    characters (from a key or value of the input) become escapes such as ``\\x1e``."""
    text = text.replace("\r", " ").replace("\n", " ")
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_text(exc: Exception) -> str:
    """An error as its line: an OSError names its file first (``FILE: File name too long``), as collsim's own
    errors do, instead of Python's ``[Errno 36] ...: 'FILE'``."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return str(exc)


def _heartbeat(label: str, flows: int, simulated_s: float, wall_s: float) -> None:
    """A long simulation's sign of life on stderr (collsim.engine.budget), every few seconds."""
    head = "\r\x1b[K" if sys.stderr.isatty() else ""
    print(f"{head}collsim: still simulating {label or 'a collective'}: {flows:,} flows, {simulated_s * 1e6:.6g} us "
          f"simulated, {wall_s:.0f} s", file=sys.stderr, flush=True)  # fmt: skip


def _dispatch(args: argparse.Namespace) -> int:
    handlers = {
        "run": _cmd_run,
        "compare": _cmd_compare,
        "explain": _cmd_explain,
        "validate": _cmd_validate,
        "calibrate": _cmd_calibrate,
        "step": _cmd_step,
        "topo": _cmd_topo,
        "import": _cmd_import,
        "schema": _cmd_schema,
        "benchmark": _cmd_benchmark,
        "report": _cmd_report,
        "bench": _cmd_bench,
        "sweep": _cmd_sweep,
    }
    try:
        _add_presets(args)
        _check_outputs(args)
        with work_budget(heartbeat=None if getattr(args, "quiet", False) else _heartbeat):
            return handlers[args.command](args)
    except (ScenarioError, TopologyError, BackendError, UnitError, MeasurementError, OSError) as exc:
        print(f"collsim: error: {_one_line(_error_text(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("collsim: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:  # SIGTERM, SIGHUP: the workers are killed; no output written (a previous one kept)
        print(f"collsim: terminated by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum


#: The options that name a file a command writes, and their attributes.
_OUTPUT_OPTIONS = (("output", "-o"), ("trace", "--trace"), ("html", "--html"), ("plot", "--plot"),
                   ("text", "--text"), ("model_out", "--model-out"))  # fmt: skip


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse, before any work, an output option that names a folder (or a file in a missing folder)."""
    folder_out = getattr(args, "kind", None) in ("inspector", "torch-trace")  # their -o names a folder
    for attr, option in _OUTPUT_OPTIONS:
        value = getattr(args, attr, None)
        if isinstance(value, str) and not (folder_out and attr == "output"):
            check_output_path(value, option)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
