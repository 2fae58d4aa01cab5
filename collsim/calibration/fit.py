"""Fit a calibration profile to measurements: the few parameters that govern the measured path, within bounds.

How a fit runs (:func:`calibrate`):

1. Split the measured sizes: with ``holdout="alternate"`` every other size (in size order) is held out; the fit
   sees the rest and the held-out sizes report the error on data the fit never saw (cross-validation).
2. Choose the parameters: every candidate (per link kind present in the topology: achieved bandwidth and extra
   latency; per backend: per-step and per-collective overheads; Gloo: TCP throughput, CPU reduction rate, message
   latency) is nudged once; those that move the predicted times of the fit sizes by at least 0.5% are kept, minus
   any whose effect is (nearly) parallel to one already kept (they could not be told apart), at most
   ``max_parameters``. A parallel candidate stays in reserve: if the fit leaves the kept one stuck (at a bound, or
   where it stops changing anything, like a latency already clamped at zero), the fit is run again with the reserve
   in its place, and kept if it lowers the fit's cost by at least 10%.
3. ``scipy.optimize.least_squares`` (trust-region reflective, within each parameter's physical bounds, see
   :data:`collsim.profile.PARAMETER_BOUNDS`) minimises the log of predicted / measured time over the fit
   sizes: a relative error, symmetric in over- and under-prediction, under a robust (soft L1) loss that counts
   errors beyond about 5% linearly. Factors are searched in log space.
4. Say what the measurements could not determine (:func:`_confounded`, in the result's notes): a parameter that
   ended at a bound, and pairs of fitted parameters whose estimates are correlated at |r| >= 0.95.

The result holds the :class:`~collsim.profile.Profile` (with the measurement it came from and the fit's
error recorded in it) and validations before and after, on the fit and the held-out sizes.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsim.api import Simulator
from collsim.calibration.measurement import Measurement, MeasurementError
from collsim.calibration.validate import (
    BandSummary,
    Validation,
    check_ranks,
    measurement_backend,
    summarise,
    validate,
)
from collsim.profile import Profile, parameter_bounds
from collsim.scenario import Scenario
from collsim.vocab import LINK_KINDS

__all__ = ["CalibrationResult", "Evaluate", "calibrate", "candidate_parameters", "split_sizes"]

#: ``evaluate(scenario, profile_values, points) -> times``: one predicted sweep, simulated wherever the caller runs
#: it; ``points`` are (backend, size in bytes, collective), the times microseconds in the same order.
Evaluate = Callable[[Scenario, dict[str, float], Sequence[tuple[str, int, str]]], Sequence[float]]

_SCALE_SUFFIXES = ("_scale",)
_US = 1e-6  # microseconds to seconds
# Robust loss: residuals beyond ~5% (log ratio 0.05) count linearly, not squared, so one odd published row (a noisy
# size, an in-place/out-of-place mix-up) cannot drag the whole fit.
_LOSS, _F_SCALE = "soft_l1", 0.05


def split_sizes(sizes: Sequence[int], holdout: str) -> tuple[list[int], list[int]]:
    """Fit and held-out sizes.

    Parameters
    ----------
    sizes : sequence of int
        Measured sizes in bytes.
    holdout : str
        ``"alternate"`` (every other size held out, the smallest and the largest kept for the fit), or ``"none"``.

    Examples
    --------
    >>> split_sizes([1, 2, 4, 8, 16, 32], "alternate")
    ([1, 4, 16, 32], [2, 8])
    >>> split_sizes([1, 2], "none")
    ([1, 2], [])
    """
    ordered = sorted(set(sizes))
    if holdout == "none" or len(ordered) < 4:
        return ordered, []
    if holdout != "alternate":
        raise ValueError(f"holdout: expected 'alternate' or 'none', got {holdout!r}")
    held = [s for i, s in enumerate(ordered) if i % 2 == 1 and i != len(ordered) - 1]
    return [s for s in ordered if s not in held], held


def _is_scale(name: str) -> bool:
    return name.endswith(_SCALE_SUFFIXES)


def candidate_parameters(sim: Simulator, backends: Sequence[str]) -> list[str]:
    """Every parameter that could matter for ``backends`` on this topology (before the sensitivity check)."""
    kinds = sorted({ln.kind for ln in sim.topology.links()} & set(LINK_KINDS), key=LINK_KINDS.index)
    out: list[str] = []
    for k in kinds:
        out += [f"link.{k}.bandwidth_scale", f"link.{k}.latency_us"]
    if "nccl" in backends:
        out += ["nccl.step_latency_scale", "nccl.launch_overhead_us", "nccl.ll_bw_scale", "nccl.ll128_bw_scale"]
    # nic.message_overhead_us is fitted only when asked for (--param): among the candidates it made the three
    # multi-node shared fits worse (docs/calibration.md)
    if "gloo" in backends:
        out += ["gloo.tcp_bw_scale", "gloo.reduce_bw_scale", "gloo.message_latency_us", "gloo.enqueue_latency_us"]
    return out


def _start_value(sim: Simulator, name: str) -> float:
    lo, hi, neutral = parameter_bounds(name)
    if not math.isnan(neutral):
        return neutral
    if name == "gloo.message_latency_us":
        cpus = sim.topology.devices("cpu")
        return float(cpus[0].spec.get("tcp_message_latency", 10e-6)) / _US if cpus else 10.0
    if name == "gloo.enqueue_latency_us":
        return sim.gloo_constants.work_enqueue_latency / _US
    if name == "nic.message_overhead_us":  # the presets' figure, else 1 us (not the bound: the search starts inside)
        nics = sim.topology.nics()
        preset = float(nics[0].spec.get("message_overhead") or 0.0) / _US if nics else 0.0
        return preset or 1.0
    return (lo + hi) / 2  # pragma: no cover - every absolute parameter is listed above


def _to_x(name: str, value: float) -> float:
    return math.log(value) if _is_scale(name) else value


def _from_x(name: str, x: float) -> float:
    return math.exp(x) if _is_scale(name) else x


def _at_bound(name: str, x: float) -> float | None:
    """The bound (in search space) that parameter ``name`` at ``x`` (search space) ended at, or None."""
    lo, hi = _x_bounds(name)
    if min(x - lo, hi - x) > 1e-6 * (hi - lo):
        return None
    return lo if x - lo < hi - x else hi


def _stuck(sol: Any, i: int, name: str, start_slope: float) -> bool:
    """Whether fitted parameter ``i`` ended at one of its bounds, or where moving it no longer changes the predicted
    times (below 5% of the slope it had at the start: a latency already clamped at zero, say)."""
    if _at_bound(name, float(sol.x[i])) is not None:
        return True
    return bool(float(np.linalg.norm(sol.jac[:, i])) < 0.05 * start_slope)


def _x_bounds(name: str) -> tuple[float, float]:
    lo, hi, _ = parameter_bounds(name)
    return (math.log(lo), math.log(hi)) if _is_scale(name) else (lo, hi)


@dataclass
class CalibrationResult:
    """What :func:`calibrate` found.

    Attributes
    ----------
    profile : Profile
        The fitted parameters, with ``fitted_on`` and ``fit`` metadata.
    parameters : list of str
        The parameters fitted (chosen by sensitivity).
    sensitivity : dict
        Largest relative change of a fit-size time (percent) when each candidate was nudged.
    fit_sizes, heldout_sizes : list of int
        Bytes.
    before, after : list of Validation
        Per measurement, uncalibrated and calibrated, on every measured size.
    evaluations : int
        Sweeps simulated.
    notes : list of str
        What the fit did beyond the plain search (a stuck parameter replaced by one in reserve).
    """

    profile: Profile
    parameters: list[str]
    sensitivity: dict[str, float]
    fit_sizes: list[int]
    heldout_sizes: list[int]
    before: list[Validation]
    after: list[Validation]
    evaluations: int = 0
    notes: list[str] = field(default_factory=list)

    def error(self, which: str, held_out: bool) -> BandSummary:
        """Summary of |errors| over all measurements, ``which`` = "before" or "after", on held-out or fit sizes."""
        vals = self.before if which == "before" else self.after
        keep = set(self.heldout_sizes if held_out else self.fit_sizes)
        rows = [r for v in vals for r in v.rows if r.size_bytes in keep]
        return summarise("held-out sizes" if held_out else "fit sizes", rows)


def _shown(path: str) -> str:
    """``path`` relative to the working directory when it lies below it (profiles get committed), else as given."""
    try:
        rel = os.path.relpath(path)
    except ValueError:  # pragma: no cover - another drive on Windows
        return path
    return path if rel.startswith("..") and os.path.isabs(path) else rel


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _errors(s: BandSummary) -> dict[str, Any]:
    return {
        "sizes": s.count,
        "median_abs_time_error_pct": _round(s.median_abs_time_error_pct),
        "max_abs_time_error_pct": _round(s.max_abs_time_error_pct),
    }


class _Fit:
    """The least-squares problem: the measured times of the fit sizes and the simulator that predicts them.

    Parameters
    ----------
    base_sim : Simulator
        The system measured, uncalibrated (its scenario is simulated with each profile tried; start values).
    measurements : sequence of Measurement
        The measured sweeps.
    backends : sequence of str
        Each measurement's backend.
    fit_sizes : sequence of int
        Bytes; the rows of these sizes are fitted.
    jobs : int
        Worker processes per predicted sweep.
    max_evaluations : int
        Budget of predicted sweeps per least-squares search.
    evaluate : callable, optional
        Predicts a sweep elsewhere instead (see :data:`Evaluate`).
    """

    def __init__(
        self, base_sim: Simulator, measurements: Sequence[Measurement], backends: Sequence[str],
        fit_sizes: Sequence[int], jobs: int, max_evaluations: int, evaluate: Evaluate | None = None,
    ) -> None:
        keep = set(fit_sizes)
        rows = [
            (m, b, [r for r in m.rows if r.size_bytes in keep]) for m, b in zip(measurements, backends, strict=True)
        ]
        self.base_sim = base_sim
        self.jobs = jobs
        self.max_evaluations = max_evaluations
        self.measured = np.array([r.time_us for _m, _b, rs in rows for r in rs])  # microseconds
        self.points = [(b, r.size_bytes, m.collective) for m, b, rs in rows for r in rs]
        self.evaluations = 0  # sweeps simulated
        self.evaluate = evaluate

    def predict(self, values: dict[str, float]) -> np.ndarray:
        """Predicted times of the fit rows (microseconds) with the profile ``values``."""
        self.evaluations += 1
        if self.evaluate is not None:
            return np.array(self.evaluate(self.base_sim.scenario, dict(values), self.points), dtype=float)
        sim = Simulator(self.base_sim.scenario, Profile(values))
        points = self.points

        def one(i: int) -> float:
            b, size, coll = points[i]
            return sim.simulate_one(b, size, collective=coll).time_s * 1e6  # s to us

        done, interrupted = sim.map_points(one, len(points), self.jobs, sizes=[size for _b, size, _c in points])
        if interrupted:
            raise KeyboardInterrupt
        return np.array([done[i] for i in range(len(points))])

    def solve(self, names: list[str], start: dict[str, float]) -> Any:
        """``scipy.optimize.least_squares`` over ``names`` (in search space, within bounds) from ``start`` (the
        neutral or preset value where not given); returns its solution."""
        from scipy.optimize import least_squares

        x0 = np.array([_to_x(n, start.get(n, _start_value(self.base_sim, n))) for n in names])
        lb = np.array([_x_bounds(n)[0] for n in names])
        ub = np.array([_x_bounds(n)[1] for n in names])

        def evaluate(x: np.ndarray) -> np.ndarray:
            values = {n: _from_x(n, float(v)) for n, v in zip(names, x, strict=True)}
            return np.log(self.predict(values) / self.measured)

        last: dict[bytes, np.ndarray] = {}  # the residuals at the latest x: least_squares asks for them, then jac

        def residuals(x: np.ndarray) -> np.ndarray:
            key = x.tobytes()
            if key not in last:
                last.clear()
                last[key] = evaluate(x)
            return last[key].copy()  # a copy: least_squares scales what it gets in place (robust loss)

        def jacobian(x: np.ndarray) -> np.ndarray:
            # scipy's forward differences with diff_step 1e-3 (a step of 1e-3 x |x|, signed as x), but at least 1e-6
            # in search space: at the neutral start x = 0 of a scale scipy falls back to 1.5e-8, where the
            # simulation's float noise set the slope's sign and the fit stalled (a 1e-6 step moves a 4 ms time by
            # 4 ns, against 0.1 ns of noise)
            f0 = residuals(x)
            cols = []
            for i in range(len(x)):
                h = max(1e-3 * abs(float(x[i])), 1e-6) * (1.0 if x[i] >= 0 else -1.0)
                if not lb[i] <= x[i] + h <= ub[i]:  # step inwards at a bound
                    h = -h
                xi = x.copy()
                xi[i] += h
                cols.append((evaluate(xi) - f0) / h)
            return np.column_stack(cols)

        return least_squares(
            residuals, np.clip(x0, lb, ub), jac=jacobian, bounds=(lb, ub), max_nfev=self.max_evaluations,
            x_scale="jac", loss=_LOSS, f_scale=_F_SCALE,
        )


@dataclass
class _Choice:
    """Step 2 of a fit: the parameters chosen, and what the sensitivity check found."""

    names: list[str]
    #: largest relative change of a fit-size time (percent) per candidate nudged
    sensitivity: dict[str, float] = field(default_factory=dict)
    #: per chosen parameter, the candidates (nearly) parallel to it, largest effect first
    alternates: dict[str, list[str]] = field(default_factory=dict)
    #: norm of d log(time) / dx at the start, per candidate
    slope: dict[str, float] = field(default_factory=dict)


def _choose(fit: _Fit, backends: Sequence[str], base: np.ndarray, max_parameters: int) -> _Choice:
    """Nudge every candidate once; keep those that move a fit-size time by >= 0.5%, minus those parallel to one
    kept (held in reserve), at most ``max_parameters``, largest effect first."""
    choice = _Choice([])
    effects: list[tuple[str, np.ndarray]] = []
    for name in candidate_parameters(fit.base_sim, backends):
        start = _start_value(fit.base_sim, name)
        hi = parameter_bounds(name)[1]
        nudged = min(hi, start * 1.25) if _is_scale(name) or name.startswith("gloo.") else min(hi, start + 5.0)
        d = np.log(fit.predict({name: nudged}) / base)
        choice.sensitivity[name] = float(np.max(np.abs(d)) * 100)
        dx = abs(_to_x(name, nudged) - _to_x(name, start))
        choice.slope[name] = float(np.linalg.norm(d)) / dx if dx else 0.0
        if choice.sensitivity[name] >= 0.5:
            effects.append((name, d))
    effects.sort(key=lambda e: -float(np.linalg.norm(e[1])))
    chosen: list[tuple[str, np.ndarray]] = []
    for name, d in effects:
        parallel = [c for c, cd in chosen if abs(float(d @ cd) / (np.linalg.norm(d) * np.linalg.norm(cd))) >= 0.995]
        if parallel:
            choice.alternates.setdefault(parallel[0], []).append(name)
        else:
            chosen.append((name, d))
    choice.names = [n for n, _ in chosen[:max_parameters]]
    return choice


def _swap_stuck(
    fit: _Fit, choice: _Choice, sol: Any, progress: Callable[[str], None] | None
) -> tuple[list[str], Any, list[str]]:
    """Step 3's second chance: a fitted parameter left stuck (at a bound, or where it no longer changes anything)
    is replaced by one of its parallel alternates when that lowers the fit's cost by at least 10%.

    Returns
    -------
    (names, solution, notes)
        The parameters fitted, the solution kept, and a note per swap.
    """
    names = choice.names
    notes: list[str] = []
    for name in list(names):
        alternates = choice.alternates.get(name)
        if not alternates or not _stuck(sol, names.index(name), name, choice.slope.get(name, 0.0)):
            continue
        at = {n: _from_x(n, float(v)) for n, v in zip(names, sol.x, strict=True)}
        for alt in alternates:
            trial = [alt if n == name else n for n in names]
            if progress:
                progress(f"{name} is stuck at {at[name]:.4g}; trying {alt} in its place")
            other = fit.solve(trial, {n: v for n, v in at.items() if n != name})
            if other.cost < 0.9 * sol.cost:  # a clear gain only: the swap changes what the profile says
                notes.append(
                    f"{name} was stuck at {at[name]:.4g}; {alt} fitted in its place "
                    f"(fit cost {sol.cost:.4g} -> {other.cost:.4g})"
                )
                names, sol = trial, other
                break
    return names, sol, notes


def _confounded(names: Sequence[str], sol: Any, threshold: float = 0.95) -> list[str]:
    """Notes on what the measurements could not determine: each pair of fitted parameters whose estimates are
    correlated by at least ``threshold`` in absolute value (from the residuals' Jacobian at the solution, the
    covariance (J^T J)^-1 of a least-squares fit), and each parameter that ended at one of its bounds.

    >>> from types import SimpleNamespace
    >>> jac = np.array([[1.0, 1.0, 0.0], [1.0, 1.001, 0.0], [0.0, 0.0, 1.0]])
    >>> names = ["gloo.enqueue_latency_us", "gloo.message_latency_us", "gloo.tcp_bw_scale"]
    >>> _confounded(names, SimpleNamespace(jac=jac, x=np.array([100.0, 40.0, 0.0])))[0][:78]
    'gloo.enqueue_latency_us and gloo.message_latency_us are correlated at -1.000 i'
    """
    jac = np.asarray(sol.jac, dtype=float)
    notes = []
    for i, name in enumerate(names):
        bound = _at_bound(name, float(sol.x[i]))
        if bound is not None:
            notes.append(f"{name} ended at its bound {_from_x(name, bound):.4g}: the fit would push it further, so it "
                         "stands in for something the model lacks here, or another fitted parameter has taken its part")
    live = [i for i in range(jac.shape[1]) if float(np.linalg.norm(jac[:, i])) > 1e-12]
    if len(live) < 2:
        return notes
    cov = np.linalg.pinv(jac[:, live].T @ jac[:, live])
    sd = np.sqrt(np.clip(np.diag(cov), 1e-300, None))
    corr = cov / np.outer(sd, sd)
    for a in range(len(live)):
        for b in range(a + 1, len(live)):
            r = float(corr[a, b])
            if abs(r) >= threshold:
                notes.append(f"{names[live[a]]} and {names[live[b]]} are correlated at {r:+.3f} in this fit: the "
                             "measurements cannot tell them apart; hold one (--param the others) or add a measurement "
                             "that moves them differently")
    return notes


def _profile_meta(scenario: Scenario, measurements: Sequence[Measurement], result: CalibrationResult) -> dict[str, Any]:
    """The profile's ``fitted_on`` and ``fit`` metadata: what it was fitted to and its errors before and after."""
    return {
        "fitted_on": {
            "scenario": _shown(scenario.source_file) if scenario.source_file else scenario.name,
            "measurements": [_shown(m.file) for m in measurements],
            "fit_sizes_bytes": result.fit_sizes,
            "heldout_sizes_bytes": result.heldout_sizes,
            "date": _dt.date.today().isoformat(),
        },
        "fit": {
            "method": "scipy.optimize.least_squares (trf, soft_l1 loss, f_scale 0.05) on log(predicted/measured time)",
            "evaluations": result.evaluations,
            "fit_sizes": {
                "before": _errors(result.error("before", False)),
                "after": _errors(result.error("after", False)),
            },
            "heldout_sizes": {
                "before": _errors(result.error("before", True)),
                "after": _errors(result.error("after", True)),
            },
        },
    }


def calibrate(
    scenario: Scenario,
    measurements: Sequence[Measurement],
    *,
    holdout: str = "alternate",
    parameters: Sequence[str] | None = None,
    max_parameters: int = 5,
    max_evaluations: int = 80,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
    evaluate: Evaluate | None = None,
) -> CalibrationResult:
    """Fit a profile for ``scenario`` to ``measurements`` (the steps of the module docstring).

    Parameters
    ----------
    scenario : Scenario
        The system measured (its own ``calibration`` profile, if any, is ignored: the fit starts from presets).
    measurements : sequence of Measurement
        One or more measured sweeps (each simulated with its own backend and collective).
    holdout : str
        ``"alternate"`` (default) or ``"none"``; see :func:`split_sizes`.
    parameters : sequence of str, optional
        Fit exactly these (see the profile parameter table) instead of choosing by sensitivity.
    max_parameters : int
        Most parameters chosen by sensitivity.
    max_evaluations : int
        Budget of simulated sweeps for the least-squares search.
    progress : callable, optional
        Called with a short message as the fit proceeds.
    jobs : int
        Worker processes that simulate a sweep's sizes (as :meth:`collsim.api.Simulator.run`; 0: one per CPU).
        The fit is the same.
    evaluate : callable, optional
        Simulates each predicted sweep instead of ``jobs`` local workers (:data:`Evaluate`; ``collsim calibrate
        --dask`` passes one that runs on a Dask cluster). The fit is the same.

    Raises
    ------
    MeasurementError
        When a measurement does not fit the scenario (rank count, backend).
    ValueError
        When no parameter affects the measured times.
    """
    if not measurements:
        raise ValueError("no measurement given")
    base_sim = Simulator(scenario, Profile())
    backends = [measurement_backend(base_sim, m) for m in measurements]
    for m in measurements:
        check_ranks(base_sim, m)
    nranks = len(base_sim.topology.rank_devices())
    measurements = [m.subset([s for s in m.sizes() if s not in m.empty_sizes(nranks)]) for m in measurements]
    for m in measurements:
        if not m.rows:
            raise MeasurementError("no size with elements to move to fit (every row is below one element)",
                                   file=m.file)  # fmt: skip
    fit_sizes, held = split_sizes(sorted({s for m in measurements for s in m.sizes()}), holdout)
    fit = _Fit(base_sim, measurements, backends, fit_sizes, jobs, max_evaluations, evaluate)
    base = fit.predict({})
    if progress:
        progress(f"uncalibrated: median |time error| {np.median(np.abs(base / fit.measured - 1)) * 100:.1f}% on "
                 f"{len(fit.measured)} fit sizes")
    if parameters is None:
        choice = _choose(fit, backends, base, max_parameters)
        if progress:
            progress("sensitivity (max % change of a fit-size time): "
                     + ", ".join(f"{k} {v:.1f}" for k, v in choice.sensitivity.items()))
    else:
        choice = _Choice(list(parameters))
        for n in choice.names:
            parameter_bounds(n)
    if not choice.names:
        raise ValueError("no calibration parameter changes the predicted times of the measured sizes")
    if progress:
        progress(f"fitting {', '.join(choice.names)} on {len(fit_sizes)} sizes ({len(held)} held out)")
    sol = fit.solve(choice.names, {})
    names, sol, notes = _swap_stuck(fit, choice, sol, progress)
    notes += _confounded(names, sol)
    own = scenario.calibration_path()
    if own is not None:  # "before" is the presets' error, not the one validate shows with the scenario's profile
        notes.append(f"the scenario's own calibration profile ({own}) is not applied: the fit starts from the presets, "
                     "and 'before' is their error; the new profile replaces it")
    if len(names) >= len(fit_sizes):
        notes.append(f"{len(names)} parameters fitted on {len(fit_sizes)} size{'s' if len(fit_sizes) != 1 else ''}: "
                     "as many unknowns as data or more, so the fit sizes' error says nothing; held-out sizes or "
                     "fewer parameters (--param) tell what the profile predicts")
    profile = Profile({n: _from_x(n, float(v)) for n, v in zip(names, sol.x, strict=True)})
    before = [validate(base_sim, m) for m in measurements]
    after_sim = Simulator(scenario, profile)
    after = [validate(after_sim, m) for m in measurements]
    result = CalibrationResult(
        profile, names, choice.sensitivity, fit_sizes, held, before, after, fit.evaluations, notes
    )
    profile.meta = _profile_meta(scenario, measurements, result)
    return result
