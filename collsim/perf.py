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

__all__ = ["bare_simpy_seconds", "run_benchmark"]

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


def run_benchmark(scenarios: Sequence[str], baseline_events: int = 1_000_000, jobs: int = 0) -> int:
    """Print one row per scenario: wall seconds, ratio to the baseline, peak memory, and the target where set.

    ``jobs`` worker processes per sweep (0: one per CPU, as ``collsim run``); memory is the largest process's peak
    and, with workers, an upper bound on all processes together (parent + workers x the largest worker).
    """
    from collsim.scenario import builtin_scenarios

    names = list(scenarios) or builtin_scenarios()
    runs = sorted(
        float(subprocess.run([sys.executable, "-c", _BASELINE_CHILD, str(baseline_events)], capture_output=True,
                             text=True, check=True).stdout.strip())
        for _ in range(3)
    )
    base = runs[1]  # the median of three
    print(f"baseline: bare SimPy loop of {baseline_events} timeouts: {base:.3f} s "
          f"(median of 3 fresh processes: {', '.join(f'{r:.3f}' for r in runs)})")
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
