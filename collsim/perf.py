"""Speed and memory benchmark: each shipped scenario's default sweep (every backend it enables), against bare SimPy.

Every scenario runs in a fresh child process that reports its own wall time and peak resident memory; the baseline
is a bare SimPy loop of N timeouts, timed in this same run (the median of three fresh child processes, as the
scenarios run), so the ratios hold when the machine's speed drifts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass

__all__ = [
    "ScaleCase",
    "bare_simpy_seconds",
    "fresh_baseline_runs",
    "run_benchmark",
    "run_scale_benchmark",
    "scale_cases",
]

#: Targets on a 2-core machine, as multiples of the bare-SimPy baseline (issue 2 and 3).
TARGETS = {"hgx-h100": 9.0, "2node-h100-ib": 27.0, "16node-h100-ib": 60.0}
MEMORY_TARGET_BYTES = 1 << 30  # 1 GiB


def bare_simpy_seconds(n: int = 1_000_000) -> float:
    """Seconds for a SimPy process that yields ``n`` timeouts (the speed yardstick of this machine)."""
    import simpy

    env = simpy.Environment()

    def loop(env: simpy.Environment) -> Generator[simpy.Event, None, None]:
        for _ in range(n):
            yield env.timeout(1)

    env.process(loop(env))
    t0 = time.perf_counter()
    env.run()
    return time.perf_counter() - t0


_BASELINE_CHILD = r"""
import sys
from collsim.perf import bare_simpy_seconds
print(bare_simpy_seconds(int(sys.argv[1])))
"""

_CHILD = r"""
import json, resource, sys, time
from collsim.api import Simulator
t0 = time.perf_counter()
sim = Simulator.from_source(sys.argv[1])
jobs = int(sys.argv[2])
res = sim.run(jobs=jobs)  # the backends the scenario enables
wall = time.perf_counter() - t0
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # ru_maxrss is in KiB on Linux
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # the largest finished worker
workers = min(jobs, len(res.records)) if jobs > 1 else 0
print(json.dumps({"wall_s": wall, "peak_bytes": max(own, kids), "sum_bytes": own + workers * kids,
                  "rows": len(res.records), "solves": sum(o.solves for o in res.outcomes)}))
"""


def fresh_baseline_runs(events: int = 1_000_000) -> list[float]:
    """Seconds of :func:`bare_simpy_seconds` in three fresh processes, sorted: the median (the middle one) is the
    yardstick the benchmarks and the notebook test state their budgets in."""
    return sorted(
        float(subprocess.run([sys.executable, "-c", _BASELINE_CHILD, str(events)], capture_output=True,
                             text=True, check=True).stdout.strip())
        for _ in range(3)
    )


def _baseline(events: int) -> float:
    """The median of three fresh processes' :func:`bare_simpy_seconds` (seconds), printed with the three."""
    runs = fresh_baseline_runs(events)
    print(f"baseline: bare SimPy loop of {events} timeouts: {runs[1]:.3f} s "
          f"(median of 3 fresh processes: {', '.join(f'{r:.3f}' for r in runs)})")
    return runs[1]


def run_benchmark(scenarios: Sequence[str], baseline_events: int = 1_000_000, jobs: int = 0) -> int:
    """Print one row per scenario: wall seconds, ratio to the baseline, peak memory, and the target where set.

    ``jobs`` worker processes per sweep (0: one per CPU, as ``collsim run``); memory is the largest process's peak
    and, with workers, an upper bound on all processes together (parent + workers x the largest worker).
    """
    from collsim.scenario import builtin_scenarios

    names = list(scenarios) or builtin_scenarios()
    base = _baseline(baseline_events)
    njobs = (os.cpu_count() or 1) if jobs == 0 else jobs
    print(f"sweeps with {njobs} worker process{'es' if njobs > 1 else ''} (--jobs {jobs})")
    print(f"{'scenario':<22} {'rows':>5} {'wall s':>8} {'x base':>7} {'target':>7} {'peak MiB':>9} {'sum MiB':>8}")
    status = 0
    for name in names:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, name, str(njobs)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            print(f"{name:<22} failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr else proc.returncode}")
            status = 1
            continue
        d = json.loads(proc.stdout.strip().splitlines()[-1])
        ratio = d["wall_s"] / base
        target = TARGETS.get(name)
        tgt = f"{target:.0f}x" if target else "-"
        print(
            f"{name:<22} {d['rows']:>5} {d['wall_s']:8.2f} {ratio:7.2f} {tgt:>7} {d['peak_bytes'] / 2**20:9.1f}"
            f" {d['sum_bytes'] / 2**20:8.1f}"
        )
        if (target and ratio > target) or d["sum_bytes"] > MEMORY_TARGET_BYTES:
            status = 1
    return status


# ---------------------------------------------------------------------------------------------------- scale (issue 13)

#: The cluster of the scale benchmark: HGX H100 nodes on a rail-optimised NDR fabric (8 NICs of 400 Gb/s per node).
SCALE_SCENARIO = "16node-h100-ib"
#: The perturbed case: one NIC port of node 1 at half rate (its IB links both ways).
SCALE_PERTURB = "[{device: n1/nic2, scale: 0.5, kind: ib}]"
#: The perturbed case that keeps the nodes alike: NIC 2 of every node at half rate (a slow rail, e.g. its leaf switch),
#: which the symmetry quotient still reduces (docs/perturbations.md, "Slow links at scale").
SCALE_PERTURB_RAIL = '[{device: "n*/nic2", scale: 0.5, kind: ib}]'


@dataclass(frozen=True)
class ScaleCase:
    """One configuration of the scale benchmark: ``nodes`` HGX H100 nodes, NCCL_ALGO ``algo`` (``"default"``:
    NCCL's own choice), the symmetry reduction on or off, and the perturbed cluster or the healthy one."""

    nodes: int
    algo: str
    symmetry: bool
    perturbed: bool = False
    rail: bool = False  # with ``perturbed``: the whole rail (NIC 2 of every node) slow, not one port
    decouple: bool = False  # engine.decouple: the slow port's channels cut loose from the links they share

    @property
    def label(self) -> str:
        """``"1024 GPUs Ring sym off"``, ``"... one NIC at 50%"`` (``"..., decoupled"``) or ``"... rail 2 at 50%"``
        for the perturbed cases."""
        extra = (", rail 2 at 50%" if self.rail else ", one NIC at 50%") if self.perturbed else ""
        extra += ", decoupled" if self.decouple else ""
        return f"{self.nodes * 8} GPUs {self.algo} sym {'on' if self.symmetry else 'off'}{extra}"

    def overrides(self) -> list[str]:
        """The ``--set`` overrides that make this case out of :data:`SCALE_SCENARIO`."""
        out = [f"cluster.nodes={self.nodes}", f"engine.symmetry={'true' if self.symmetry else 'false'}"]
        if self.algo != "default":
            out.append(f"backends.nccl.env.NCCL_ALGO={self.algo}")
        if self.perturbed:
            out.append(f"perturb.links={SCALE_PERTURB_RAIL if self.rail else SCALE_PERTURB}")
        if self.decouple:
            out.append("engine.decouple=true")
        return out


def scale_cases(nodes: Sequence[int] = (16, 64, 128)) -> list[ScaleCase]:
    """Issue 13's grid: per node count, Ring and the default algorithm with symmetry on and off, then the Ring
    with one NIC port at half rate (exact, then with ``engine.decouple``), NCCL's default algorithm with that port
    (exact), and the Ring with a whole rail at half rate (symmetry on: the reduction keeps what the perturbation
    leaves symmetric; one port leaves little of a ring at 512 GPUs and more unless decoupled, while NVLSTree's
    trees of one GPU index keep the other indices alike; a rail leaves the nodes alike)."""
    out = [ScaleCase(n, a, s) for n in nodes for a in ("Ring", "default") for s in (True, False)]
    out += [ScaleCase(n, "Ring", True, perturbed=True) for n in nodes]
    out += [ScaleCase(n, "Ring", True, perturbed=True, decouple=True) for n in nodes]
    out += [ScaleCase(n, "default", True, perturbed=True) for n in nodes]
    out += [ScaleCase(n, "Ring", True, perturbed=True, rail=True) for n in nodes]
    return out


_SCALE_CHILD = r"""
import json, resource, sys, time
from collsim.api import Simulator
size = int(sys.argv[1])
t0 = time.perf_counter()
sim = Simulator.from_source(sys.argv[2], sys.argv[3:])
o = sim.simulate_one("nccl", size)
wall = time.perf_counter() - t0
print(json.dumps({"wall_s": wall, "peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "flows": o.flows, "solves": o.solves, "classes": o.classes, "entities": o.entities,
                  "time_s": o.time_s, "algorithm": o.algorithm, "protocol": o.protocol, "nranks": o.nranks}))
"""


def run_scale_benchmark(
    nodes: Sequence[int] = (16, 64, 128),
    size: int = 1 << 30,
    timeout: float = 600.0,
    baseline_events: int = 1_000_000,
    cases: Sequence[ScaleCase] | None = None,
) -> int:
    """Print issue 13's scale table: per case, wall seconds, ratio to the bare-SimPy baseline measured in this run,
    peak RSS (MiB), flows streamed, rate solves, simulated classes/entities and the simulated busbw.

    Every case runs in a fresh child process (its own peak memory), killed after ``timeout`` seconds (then printed
    as ``> timeout``). ``size`` bytes per allreduce (default 1 GiB, as the issue's table). ``cases``: run these
    instead of :func:`scale_cases` of ``nodes``.
    """
    base = _baseline(baseline_events)
    print(f"allreduce of {size} B on {SCALE_SCENARIO} with cluster.nodes=N; one process per case, "
          f"timeout {timeout:.0f} s", flush=True)
    print(f"{'case':<50} {'choice':<14} {'wall s':>8} {'x base':>7} {'peak MiB':>9} {'flows':>10} {'solves':>8} "
          f"{'classes':>13} {'busbw GB/s':>10}", flush=True)
    status = 0
    for case in scale_cases(nodes) if cases is None else cases:
        cmd = [sys.executable, "-c", _SCALE_CHILD, str(size), SCALE_SCENARIO, *case.overrides()]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            wall, ratio = ">" + format(timeout, ".0f"), ">" + format(timeout / base, ".0f")
            print(f"{case.label:<50} {'':<14} {wall:>8} {ratio:>7}", flush=True)
            continue
        if proc.returncode != 0:
            last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
            print(f"{case.label:<50} failed: {last}", flush=True)
            status = 1
            continue
        d = json.loads(proc.stdout.strip().splitlines()[-1])
        n = d["nranks"]
        busbw = size / d["time_s"] * 2 * (n - 1) / n / 1e9  # nccl-tests' allreduce busbw, GB/s (1e9 bytes)
        print(
            f"{case.label:<50} {d['algorithm'] + '/' + d['protocol']:<14} {d['wall_s']:8.2f} {d['wall_s'] / base:7.1f}"
            f" {d['peak_bytes'] / 2**20:9.0f} {d['flows']:>10} {d['solves']:>8}"
            f" {str(d['classes']) + '/' + str(d['entities']):>13} {busbw:10.1f}",
            flush=True,
        )
    return status
