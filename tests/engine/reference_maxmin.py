"""Test oracles for the fluid engine, written from the definition of max-min fairness (not from the engine).

The engine's model (collsim/engine/fluid.py): a flow streaming at rate ``x`` consumes ``coef * x`` of every resource
it uses, and every resource's total consumption stays within its capacity. Max-min fairness is on the rates ``x``
themselves: coefficients change what a flow costs, not what it is entitled to. The max-min fair vector is the
unique feasible ``x`` such that no rate can grow without shrinking a rate that is no larger.

Three oracles, each independent of the engine's code:

* :func:`assert_max_min_fair` -- the bottleneck characterisation (Bertsekas & Gallager, *Data Networks*, on
  max-min fairness; it holds unchanged for positive coefficients): feasible, and every flow is at its own cap or has
  a saturated resource on which no flow has a higher rate;
* :func:`water_filling` -- the textbook construction, recomputed from the coefficient matrix every round;
* :func:`lp_max_min_violation` -- the definition itself, one linear program per flow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import simpy
from scipy.optimize import linprog

from collsim.engine import Flow, FluidNetwork, Resource, Tag


class RatedFlow(Protocol):
    """What :func:`assert_max_min_fair` reads from a flow (a :class:`collsim.engine.Flow` has it)."""

    @property
    def uses(self) -> tuple[tuple[Resource, float], ...]: ...

    @property
    def max_rate(self) -> float: ...

    @property
    def rate(self) -> float: ...


def assert_max_min_fair(flows: Iterable[RatedFlow], rel_tol: float = 1e-8) -> None:
    """Assert that the flows' rates are the max-min fair allocation of their resources.

    Parameters
    ----------
    flows : iterable of RatedFlow
        Every flow sharing the resources (their ``uses`` hold each resource at most once, as the engine merges).
    rel_tol : float
        Relative tolerance: on capacities (over capacity, saturated) and on rates (equal, at the cap).

    Raises
    ------
    AssertionError
        If a resource is loaded above its capacity, or a flow below its cap has no *bottleneck*: a saturated
        resource on which its rate is the largest. A flow that crosses a saturated resource only where some other
        flow gets more is starved for that flow's sake, which max-min fairness forbids (e.g. A on l1, B on l1+l2,
        C on l2, unit links: A=1, B=0, C=1 saturates both links but B has no bottleneck; 0.5 each is fair).
    """
    flows = list(flows)
    load: dict[Resource, float] = {}
    top: dict[Resource, float] = {}  # the largest rate among each resource's flows
    for f in flows:
        if not f.rate >= 0:
            raise AssertionError(f"negative or NaN rate {f.rate}")
        for res, coef in f.uses:
            load[res] = load.get(res, 0.0) + coef * f.rate
            top[res] = max(top.get(res, 0.0), f.rate)
    for res, value in load.items():
        if value > res.capacity * (1 + rel_tol):
            raise AssertionError(f"{res.name}: load {value} above capacity {res.capacity}")
    for f in flows:
        if f.rate > f.max_rate * (1 + rel_tol):
            raise AssertionError(f"flow at {f.rate} above its cap {f.max_rate}")
        if f.rate >= f.max_rate * (1 - rel_tol):
            continue
        bottlenecks = [
            res.name
            for res, _coef in f.uses
            if load[res] >= res.capacity * (1 - rel_tol) and f.rate >= top[res] * (1 - rel_tol)
        ]
        if not bottlenecks:
            where = ", ".join(f"{r.name} (load {load[r]:.6g}/{r.capacity:.6g}, top {top[r]:.6g})" for r, _ in f.uses)
            raise AssertionError(f"flow at {f.rate} has no bottleneck: {where}")


class MaxMinCheckedNetwork(FluidNetwork):
    """A :class:`FluidNetwork` that, after every solve, also asserts :func:`assert_max_min_fair` on its flows."""

    def __init__(self, env: simpy.Environment, *, record: bool = False) -> None:
        super().__init__(env, record=record, check=True)

    def check_invariants(self, rel_tol: float = 1e-6) -> None:
        """The engine's own invariants, then max-min fairness."""
        super().check_invariants(rel_tol)
        assert_max_min_fair(self.active)


# ---------------------------------------------------------------------------------------------------- instances
@dataclass(frozen=True)
class FlowSpec:
    """A flow of an instance: ``(resource index, coefficient)`` pairs (repeats add up) and a rate cap."""

    uses: tuple[tuple[int, float], ...]
    max_rate: float = math.inf


@dataclass(frozen=True)
class Instance:
    """Resources (by capacity) and the flows streaming over them."""

    capacities: tuple[float, ...]
    flows: tuple[FlowSpec, ...]

    def matrix(self) -> np.ndarray:
        """Coefficient matrix ``A`` (resources x flows): flows at rates ``x`` load the resources with ``A @ x``."""
        a = np.zeros((len(self.capacities), len(self.flows)))
        for j, f in enumerate(self.flows):
            for k, coef in f.uses:
                a[k, j] += coef
        return a


def water_filling(inst: Instance, rel_tol: float = 1e-12) -> np.ndarray:
    """Max-min fair rates by water-filling: raise every unfixed rate together; fix what can rise no more.

    Every round recomputes, from the coefficient matrix and the rates fixed so far, the common level at which the
    next resource fills or the next cap is reached; it then fixes the flows at their cap and every flow crossing a
    full resource.

    Parameters
    ----------
    inst : Instance
        The resources and flows.
    rel_tol : float
        A resource is full when the level it allows is within ``rel_tol`` of the round's level.

    Returns
    -------
    numpy.ndarray
        The rate of every flow, in the order of ``inst.flows`` (``inf`` for a flow with no resource and no cap).
    """
    a = inst.matrix()
    c = np.asarray(inst.capacities, dtype=float)
    cap = np.array([f.max_rate for f in inst.flows], dtype=float)
    nflows = a.shape[1]
    x = np.zeros(nflows)
    fixed = np.zeros(nflows, dtype=bool)
    for _round in range(nflows + len(c) + 1):
        free = ~fixed
        if not free.any():
            return x
        slack = c - a[:, fixed] @ x[fixed]
        weight = a[:, free].sum(axis=1)
        room = np.full(len(c), math.inf)
        np.divide(slack, weight, out=room, where=weight > 0)
        level = max(min(float(room.min(initial=math.inf)), float(cap[free].min())), 0.0)
        if math.isinf(level):
            x[free] = math.inf
            return x
        x[free] = level
        full = (weight > 0) & (room <= level * (1 + rel_tol))
        fixed |= free & ((cap <= level * (1 + rel_tol)) | (a[full] > 0).any(axis=0))
    raise AssertionError("water filling did not end")  # every round fixes a flow: unreachable


def lp_max_min_violation(inst: Instance, rates: Sequence[float], rel_tol: float = 1e-9) -> tuple[int, float] | None:
    """Check rates against the definition of max-min fairness with one linear program per flow.

    ``x`` is max-min fair iff for every flow ``f`` no feasible ``y`` has ``y_f > x_f`` while keeping
    ``y_g >= x_g`` for every other flow with ``x_g <= x_f``. For each ``f`` this maximises ``y_f`` under those
    constraints (lower bounds relaxed by ``rel_tol``).

    Parameters
    ----------
    inst : Instance
        The resources and flows (capacities and caps are scaled to O(1) for the solver).
    rates : sequence of float
        The allocation to check, in the order of ``inst.flows``; all finite.
    rel_tol : float
        Relative slack on the lower bounds.

    Returns
    -------
    tuple of (int, float) or None
        ``(f, best)``: the first flow whose rate the solver can raise, and the rate it reaches (in the caller's
        units); None when no flow can be raised by more than 1e-6 relative.
    """
    x = np.asarray(rates, dtype=float)
    scale = float(max(inst.capacities))
    a = inst.matrix()
    c = np.asarray(inst.capacities) / scale
    xs = x / scale
    caps = [f.max_rate / scale for f in inst.flows]
    for f in range(len(x)):
        bounds: list[tuple[float, float | None]] = []
        for g in range(len(x)):
            lo = xs[g] * (1 - rel_tol) if g != f and x[g] <= x[f] * (1 + rel_tol) else 0.0
            bounds.append((lo, None if math.isinf(caps[g]) else max(caps[g], lo)))
        objective = np.zeros(len(x))
        objective[f] = -1.0
        res = linprog(objective, A_ub=a, b_ub=c, bounds=bounds, method="highs")
        if res.status != 0:
            raise AssertionError(f"LP for flow {f} failed ({res.message}): the rates are not feasible")
        best = -res.fun * scale
        if best > x[f] * (1 + 1e-6) + 1e-9 * scale:
            return f, best
    return None


def engine_rates(inst: Instance, network: type[FluidNetwork] = FluidNetwork) -> tuple[list[float], FluidNetwork]:
    """The rates the engine gives the instance's flows when they all start at t=0.

    The flows start with :meth:`FluidNetwork.transfer`; the clock then runs only through the events of t=0, which
    include the one rate solve.

    Parameters
    ----------
    inst : Instance
        The resources and flows (each flow moves 1 MB: its size does not change the rates).
    network : type
        The network class to use (e.g. :class:`MaxMinCheckedNetwork`).

    Returns
    -------
    tuple of (list of float, FluidNetwork)
        Each flow's rate in the order of ``inst.flows``, and the network.
    """
    env = simpy.Environment()
    net = network(env)
    res = [net.resource(f"r{k}", c) for k, c in enumerate(inst.capacities)]
    for j, f in enumerate(inst.flows):
        net.transfer(1e6, [(res[k], coef) for k, coef in f.uses], max_rate=f.max_rate, tag=Tag(str(j), "send", ""))
    while env.peek() <= 0.0:
        env.step()
    by_tag: dict[str, Flow] = {f.tag.label: f for f in net.active}
    return [by_tag[str(j)].rate for j in range(len(inst.flows))], net
