"""``collsim bench``: run a sweep (local processes or as a torchrun rank) and write text, JSON or CSV.

:func:`run_sweep` is the Python entry point; :func:`run_command` is what the CLI calls with its parsed options.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, TextIO

from collsim.bench.config import BenchConfig, BenchError, require_torch
from collsim.bench.launch import launch_local
from collsim.bench.metadata import host_facts
from collsim.bench.report import SizeResult, SweepOutput, format_text, to_measurement
from collsim.bench.worker import rank_env, run_rank
from collsim.files import write_atomic
from collsim.units import UnitError, format_size, parse_size, parse_size_range
from collsim.vocab import PER_RANK_COUNT_COLLECTIVES, ROOTED_COLLECTIVES

__all__ = ["DEFAULT_SIZES", "ProgressLine", "run_command", "run_sweep"]

#: Sizes of ``collsim bench`` without ``--sizes``.
DEFAULT_SIZES = "1KiB:64MiB:x2"


class ProgressLine:
    """Progress of a sweep on stderr: one updating line on a terminal, one line per size otherwise."""

    def __init__(self, label: str, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.on = not quiet
        self.tty = self.stream.isatty()

    def __call__(self, i: int, total: int, size: int, median_us: float, wrong: int | None) -> None:
        if not self.on:
            return
        check = "" if wrong in (None, 0) else f", {wrong} WRONG"
        text = f"[{i + 1}/{total}] {self.label} {format_size(size)}: {median_us:.1f} us{check}"
        if self.tty:
            self.stream.write(f"\r\x1b[K{text}")
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def result(self, i: int, total: int, res: SizeResult) -> None:
        """Adapter for :data:`collsim.bench.worker.Progress` (in-process ranks under torchrun)."""
        self(i, total, res.size_bytes, res.median_us, res.wrong)

    def say(self, text: str) -> None:
        """One line of its own."""
        if self.on:
            self.done()
            self.stream.write(text + "\n")
            self.stream.flush()

    def done(self) -> None:
        """Clear the terminal line."""
        if self.on and self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def run_sweep(cfg: BenchConfig, *, progress: ProgressLine | None = None) -> SweepOutput | None:
    """Run ``cfg``: as this process's rank under torchrun (RANK/WORLD_SIZE/LOCAL_RANK set), else by launching
    ``cfg.nprocs`` local processes.

    Returns
    -------
    SweepOutput or None
        The result (None on ranks other than 0 under torchrun).

    Raises
    ------
    BenchError
        torch missing (``pip install 'collsim[bench]'``), bad options, a failed rank.
    """
    require_torch()
    if rank_env() is not None:
        return run_rank(cfg, progress=progress.result if progress else None, launcher="torchrun")
    return launch_local(cfg, on_event=progress)


def _parse_sizes(text: str | None) -> list[int]:
    try:
        sizes = parse_size_range(text or DEFAULT_SIZES)
    except UnitError as exc:
        raise BenchError(f"--sizes: {exc}") from None
    if not sizes or min(sizes) <= 0:
        raise BenchError(f"--sizes: expected positive sizes, got {text!r}")
    return sizes


def _resolve_config(args: argparse.Namespace, torch: Any) -> BenchConfig:
    sizes = _parse_sizes(args.sizes)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    backend = args.backend or ("nccl" if device == "cuda" else "gloo")
    nprocs = args.nprocs
    ids = rank_env()
    if ids is not None:
        if nprocs is not None and nprocs != ids[1] and ids[0] == 0:
            print(f"collsim bench: running under torchrun (WORLD_SIZE={ids[1]}); --nprocs {nprocs} ignored",
                  file=sys.stderr)
        nprocs = ids[1]
    elif nprocs is None:
        nprocs = max(1, torch.cuda.device_count()) if device == "cuda" else 2
    cfg = BenchConfig(
        collective=args.collective,
        backend=backend,
        device=device,
        dtype=args.dtype,
        sizes=tuple(sizes),
        warmup=args.warmup,
        iters=args.iters,
        timing=args.timing,
        check=not args.no_check,
        nprocs=nprocs,
        root=args.root,
        timeout_s=args.timeout,
        cores_per_rank=args.cores_per_rank,
    )
    if ids is None and device == "cuda":
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise BenchError(f"--device cuda: no CUDA device (torch {torch.__version__}, torch.cuda.is_available() "
                             "is False); use --device cpu")
        if backend == "nccl" and nprocs > gpus:
            raise BenchError(f"--nprocs {nprocs}: NCCL needs one GPU per rank and this machine has {gpus}; use "
                             "--backend gloo to share GPUs between ranks")
    if cfg.collective in ROOTED_COLLECTIVES and cfg.root >= nprocs:
        raise BenchError(f"--root {cfg.root}: expected a rank below {nprocs}")
    if ids is None:  # the ranks start here: what each would refuse, refused once before they start
        cfg.effective_sizes(nprocs)
        cores = cfg.cores_per_rank
        allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        if cores is not None and allowed is not None and cores * nprocs > allowed:
            raise BenchError(f"--cores-per-rank {cores}: {nprocs} ranks need {cores * nprocs} CPUs, and this process "
                             f"may use {allowed}")
    return cfg


def _command(cfg: BenchConfig, args: argparse.Namespace, under_torchrun: bool) -> str:
    parts = ["collsim", "bench", "--collective", cfg.collective, "--backend", cfg.backend, "--device", cfg.device,
             "--dtype", cfg.dtype, "--sizes", args.sizes or DEFAULT_SIZES, "-w", str(cfg.warmup), "-n",
             str(cfg.iters), "--timing", cfg.timing]
    if not under_torchrun:
        parts += ["--nprocs", str(cfg.nprocs)]
    if cfg.collective in ROOTED_COLLECTIVES:
        parts += ["--root", str(cfg.root)]
    if cfg.cores_per_rank is not None:
        parts += ["--cores-per-rank", str(cfg.cores_per_rank)]
    if not cfg.check:
        parts.append("--no-check")
    if args.output:
        parts += ["-o", args.output]
    if args.text:
        parts += ["--text", args.text]
    text = shlex.join(parts)
    return f"torchrun ... {text} (WORLD_SIZE={cfg.nprocs})" if under_torchrun else text


def _machine(out: SweepOutput | None = None) -> str:
    f = host_facts()
    hosts = out.hardware.get("hostnames", [f["hostname"]]) if out else [f["hostname"]]
    gpu = f", GPU {out.hardware['gpu']}" if out and out.hardware.get("gpu") else ""
    mem = f", {f['memory_gib']} GiB" if f["memory_gib"] else ""
    return f"{', '.join(hosts)}: {f['cpu']} ({f['cpu_count']} logical CPUs{mem}){gpu}; {f['os']}"


def _write(path: str, text: str) -> None:
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise BenchError(f"{path}: cannot write: {exc.strerror or exc}") from None


def _check_outputs(args: argparse.Namespace) -> None:
    if args.output and Path(args.output).suffix.lower() not in (".json", ".csv"):
        raise BenchError(f"-o {args.output}: expected a file name ending in .json or .csv")
    if args.probe and args.output and Path(args.output).suffix.lower() != ".json":
        raise BenchError(f"-o {args.output}: --probe writes JSON; expected a file name ending in .json")
    text = getattr(args, "text", None)
    if args.output and text and Path(args.output).resolve() == Path(text).resolve():
        raise BenchError(f"-o {args.output} and --text {text} name one file: the text would overwrite the "
                         "measurement; give them two")  # fmt: skip


def run_command(args: argparse.Namespace) -> int:
    """The ``collsim bench`` command; returns the exit status.

    Writes nccl-tests style text to stdout (or ``--text FILE``) and, with ``-o FILE.json|FILE.csv``, the collsim
    measurement. Under torchrun only rank 0 writes. ``--probe`` measures the GPU instead (JSON).

    Raises
    ------
    BenchError
        For everything the user can fix (the CLI prints it as one line and exits with 2).
    """
    if getattr(args, "ddp", False):  # collsim bench --ddp: DistributedDataParallel iterations
        from collsim.bench.ddp import run_ddp_command

        return run_ddp_command(args)
    if getattr(args, "host_memory", False):
        return _run_host_memory(args)
    if getattr(args, "probe_check", None):
        return _run_probe_check(args)
    _check_outputs(args)
    if args.probe:
        _probe_ranks(args.probe_ranks)  # bad counts are reported with or without torch
    if args.sizes or not args.probe:
        _parse_sizes(args.sizes)  # bad sizes are reported with or without torch
    torch = require_torch()
    argv = shlex.join(sys.argv)
    if args.probe:
        return _run_probe(args, argv)
    cfg = _resolve_config(args, torch)
    ids = rank_env()
    nranks = ids[1] if ids is not None else cfg.nprocs
    below = [s for s in cfg.sizes if cfg.elements(s, nranks) == 0]
    if below and (ids is None or ids[0] == 0) and len(below) < len(cfg.sizes):  # all below: an error, later
        shown = ", ".join(f"{s} B" for s in below[:4]) + (" ..." if len(below) > 4 else "")
        print(f"collsim bench: --sizes: {shown} below one {cfg.dtype} element"
              f"{' a rank' if cfg.collective in PER_RANK_COUNT_COLLECTIVES else ''}: left out", file=sys.stderr)
    progress = ProgressLine(f"{cfg.backend} {cfg.collective}", quiet=args.quiet or (ids is not None and ids[0] != 0))
    try:
        out = run_sweep(cfg, progress=progress)
    finally:
        progress.done()
    if out is None:
        return 0
    m = to_measurement(out, command=_command(cfg, args, ids is not None),
                       source={"argv": argv, "machine": _machine(out)})
    text = format_text(out)
    if args.output:
        try:
            m.write(args.output)
        except OSError as exc:
            raise BenchError(f"{args.output}: cannot write: {exc.strerror or exc}") from None
    if args.text:
        _write(args.text, text)
    else:
        sys.stdout.write(text)
    wrong = [r for r in out.results if r.wrong]
    if wrong:
        sizes = ", ".join(f"{r.size_bytes} B ({r.wrong})" for r in wrong)
        raise BenchError(f"data check failed: wrong elements at {sizes}; the times were written but are suspect")
    return 0


def _run_host_memory(args: argparse.Namespace) -> int:
    """``--host-memory``: this host's memory figures for a CPU preset (:mod:`collsim.bench.hostmem`)."""
    import yaml

    from collsim.bench.hostmem import (
        HostMemoryConfig,
        check_fits,
        default_nprocs,
        format_host_memory,
        host_presets,
        run_host_memory,
        shipped_cpu,
    )

    if args.output and Path(args.output).suffix.lower() != ".json":
        raise BenchError(f"-o {args.output}: --host-memory writes JSON; expected a file name ending in .json")
    preset_out = getattr(args, "preset_out", None)
    if preset_out and Path(preset_out).suffix.lower() not in (".yaml", ".yml"):
        raise BenchError(f"--preset-out {preset_out}: expected a file name ending in .yaml")
    try:
        size = parse_size(args.host_memory_size)
    except (UnitError, ValueError) as exc:
        raise BenchError(f"--host-memory-size {args.host_memory_size}: {exc}") from None
    nprocs = args.nprocs if args.nprocs is not None else default_nprocs()
    cfg = HostMemoryConfig(nprocs=nprocs, size=size, iters=args.iters, warmup=args.warmup)
    check_fits(cfg, host_facts()["memory_gib"])
    if preset_out:
        shipped_cpu(args.cpu)  # a bad --cpu is refused before measuring
    parts = ["collsim", "bench", "--host-memory", "--nprocs", str(cfg.nprocs), "--host-memory-size",
             args.host_memory_size, "-n", str(cfg.iters), "-w", str(cfg.warmup)]  # fmt: skip
    say = None if args.quiet else (lambda m: print(f"[host-memory] {m}", file=sys.stderr, flush=True))
    result = run_host_memory(cfg, command=shlex.join(parts), argv=shlex.join(sys.argv), say=say)
    if args.output:
        _write(args.output, json.dumps(result, indent=1) + "\n")
    text = format_host_memory(result)
    if args.text:
        _write(args.text, text)
    else:
        sys.stdout.write(text)
    if preset_out:
        doc = host_presets(result, args.cpu, file=args.output or "not saved")
        _write(preset_out, yaml.safe_dump(doc, sort_keys=False, width=200))
    return 0


def _run_probe_check(args: argparse.Namespace) -> int:
    """``--probe-check FILE``: the GPU preset against the probe (:mod:`collsim.bench.probe_check`), as text."""
    import yaml

    from collsim.bench.probe_check import (
        check_probe,
        format_check,
        has_native_rows,
        measured_presets,
        native_beside,
    )

    path = Path(args.probe_check)
    try:
        probe = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BenchError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        where = f"{exc.msg} at line {exc.lineno}"
        raise BenchError(f"{path}: not JSON ({where}); expected a collsim bench --probe file") from None
    if not isinstance(probe, dict):
        raise BenchError(f"{path}: expected a JSON object (a collsim bench --probe file)")
    native = probe.get("native")
    note = ""
    if not has_native_rows(native):  # older probes, or no nvcc there: C++ runs saved beside the probe file
        native, names = native_beside(path)
        note = f"# C++ figures from {', '.join(names)} beside {path.name}\n" if names else ""
    text = format_check(check_probe(probe, args.gpu, file=str(path), native=native)) + note
    if getattr(args, "preset_out", None):
        doc = measured_presets(probe, args.gpu, file=path.name, native=native)
        out = Path(args.preset_out).name
        head = (f"# What collsim bench --probe measured ({path.name}), as collsim presets: use it with\n"
                f"# --presets {out} (or preset_files: in a scenario) to simulate that machine.\n")
        _write(args.preset_out, head + yaml.safe_dump(doc, sort_keys=False, width=10_000))
        text += f"# presets written to {args.preset_out}: {', '.join(f'{k} {n}' for k in doc for n in doc[k])}\n"
    if args.text:
        _write(args.text, text)
    else:
        sys.stdout.write(text)
    return 0


def _probe_ranks(text: str) -> tuple[int, ...]:
    """``--probe-ranks``: comma-separated rank counts >= 1, e.g. ``2,4``."""
    try:
        ranks = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        ranks = ()
    if not ranks or min(ranks) < 1:
        raise BenchError(f"--probe-ranks: expected comma-separated integers >= 1 (e.g. 2,4), got {text!r}")
    return ranks


def _run_probe(args: argparse.Namespace, argv: str) -> int:
    from collsim.bench.probe import run_probe

    if rank_env() is not None:
        raise BenchError("--probe runs on one machine by itself; start it without torchrun")
    if args.warmup < 0 or args.iters < 1:
        raise BenchError(f"-w/--warmup and -n/--iters: expected >= 0 and >= 1, got {args.warmup} and {args.iters}")
    ranks = _probe_ranks(args.probe_ranks)
    progress = ProgressLine("probe", quiet=args.quiet)
    parts = ["collsim", "bench", "--probe", "-w", str(args.warmup), "-n", str(args.iters),
             "--probe-ranks", ",".join(map(str, ranks))]
    native = not getattr(args, "no_native", False)
    if not native:
        parts.append("--no-native")
    if args.sizes:
        parts += ["--sizes", args.sizes]
    if args.output:
        parts += ["-o", args.output]
    try:
        result = run_probe(copy_sizes=args.sizes, sweep_sizes=args.sizes, warmup=args.warmup, iters=args.iters,
                           gloo_ranks=ranks, timeout_s=args.timeout, native=native, command=shlex.join(parts),
                           argv=argv, say=progress.say)
    except UnitError as exc:
        raise BenchError(f"--sizes: {exc}") from None
    text = json.dumps(result, indent=2) + "\n"
    if args.output:
        _write(args.output, text)
    else:
        sys.stdout.write(text)
    return 0
