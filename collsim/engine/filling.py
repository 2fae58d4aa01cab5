"""Progressive filling over arrays: the max-min fair rates of a large component in NumPy.

:class:`collsim.engine.fluid.FluidNetwork` solves each component that changed with a progressive filling (raise every
unfrozen rate together until a resource or a flow's own cap binds, freeze those flows, repeat). In Python that costs
a few microseconds per flow and use, paid again every time anything in the component changes; at 1024 GPUs without
symmetry the components of a 256 MiB NVLSTree allreduce hold 2,000-4,000 flows and the fillings take most of the run.
Their rounds are few (one per distinct rate level: 1-3 in the components of 16 or more flows of a 64 MiB run at 1024
GPUs), so the work is in building the component and freezing its flows, which vectorises: :meth:`SignatureArrays.fill`
does the same rounds on arrays.

Both fillings take a row per signature with its number of flows (the flows of a signature are alike: they weigh
that many times its coefficients and freeze together), so their cost follows the signatures, not the flows. The
arithmetic is the Python filling's (:meth:`FluidNetwork._progressive_filling`): a resource's weight summed exactly
(:func:`exact`) and rounded once, the same steps, the same saturation test and the same tie-breaks (the first resource
in order of first use), and a resource leaves the filling when no unfrozen flow is left on it. So the two give the
same rates bit for bit (the tests compare them on random components), and a row of ``n`` flows gives what the ``n``
flows given one by one give.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["EXACT_SCALE", "SAT_TOL", "ExactCoef", "SignatureArrays", "exact", "units"]

#: Relative: a resource with less than this fraction of its capacity left is saturated (both fillings).
SAT_TOL = 1e-9

#: Every finite float is an integer number of 2**-1074 (``exact``): coefficients are kept exactly in that unit, and
#: the fillings sum a resource's weights as integers in a coarser one, ``2**-SignatureArrays.scale`` (the finest
#: coefficient's), rounding a sum to the nearest float only where a share is computed (Python's int -> float and
#: integer true division are correctly rounded). A resource's weight is then the same float whatever the order and
#: grouping of the rows on it: two rows of one flow each give what one row of two flows gives (the symmetric
#: quotient's row of ``|F| / |O|`` members against the rows of the members themselves), and giving back a frozen
#: row's weight leaves the exact sum of the others.
EXACT_SCALE = 1 << 1074


@functools.lru_cache(maxsize=65536)
def exact(coef: float) -> int:
    """``coef`` (a finite float) as an integer number of ``1 / EXACT_SCALE`` units, exactly.

    Float sums depend on their order; the exact sum, rounded once, does not:

    >>> (0.1 + 0.2) + 0.3, 0.1 + (0.2 + 0.3)
    (0.6000000000000001, 0.6)
    >>> (exact(0.1) + exact(0.2) + exact(0.3)) / EXACT_SCALE
    0.6
    """
    num, den = coef.as_integer_ratio()  # den is a power of two, at most 2**1074
    return num << (1075 - den.bit_length())


class ExactCoef(float):
    """A coefficient whose exact value, ``units / EXACT_SCALE``, is not a float: the float is its rounding, and the
    fillings weigh the exact value (the symmetry quotient's ``m |F| / |O|``, the sum of the members' rows on one
    resource, rounded only where a share is computed).

    >>> c = ExactCoef(3 * exact(0.1))
    >>> c == 0.30000000000000004, units(c) == 3 * exact(0.1), units(c) == exact(c)
    (True, True, False)
    """

    __slots__ = ("units",)
    units: int

    def __new__(cls, exact_units: int) -> ExactCoef:
        self = super().__new__(cls, exact_units / EXACT_SCALE)
        self.units = exact_units
        return self

    def __reduce__(self) -> tuple[type[ExactCoef], tuple[int]]:
        return (ExactCoef, (self.units,))


def units(coef: float) -> int:
    """The exact value of a coefficient in ``1 / EXACT_SCALE`` units: an :class:`ExactCoef`'s own, else
    :func:`exact`."""
    u = getattr(coef, "units", None)
    return exact(coef) if u is None else u


IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
ExactArray = npt.NDArray[Any]  # exact weights: halves (float64) or Python integers (object)

# The array filling keeps each use's exact weight in two float64 halves, integers in units of 2**-scale (the table's
# finest coefficient): ``high * 2**_LOW + low`` with ``low < 2**_LOW``. `bincount` sums them exactly while the sums
# stay below 2**53 (checked per filling), giving back a frozen row's weight keeps them exact, and a resource's
# weight, ``high * 2**(_LOW - scale) + low * 2**-scale``, is one float addition of two exact floats: correctly
# rounded, the float the Python filling divides out. A table or a filling outside those bounds sums Python integers
# instead (the same floats, slower).
_LOW = 26
_EXACT_SUM = 2.0**53  # float64 holds every integer below this exactly


class SignatureArrays:
    """What each signature (a flow's resources, coefficients and rate cap) is, as padded arrays.

    Signatures are added in the network's numbering (0, 1, 2 ...); resources get an integer id at their first use.
    Each signature is written once into arrays that grow by doubling (no Python copy of it is kept).

    Examples
    --------
    Two flows share a 10 B/s link; the second also crosses a 2 B/s one:

    >>> table = SignatureArrays()
    >>> table.add([("a", 10.0, 1.0)], math.inf)
    >>> table.add([("a", 10.0, 1.0), ("b", 2.0, 1.0)], math.inf)
    >>> table.fill(np.array([0, 1])).tolist()
    [8.0, 2.0]
    """

    def __init__(self) -> None:
        self._ids: dict[Hashable, int] = {}
        self._n = 0  # signatures added
        self._nres = 0  # resources seen
        self._res: IntArray = np.full((16, 4), -1, dtype=np.int64)  # per signature: resource ids, -1 padded
        #: The unit of :attr:`weights`: ``2**-scale``, the finest coefficient's (it only grows).
        self.scale = 0
        #: Per signature: ``(resource, coefficient)`` pairs, each coefficient (units consumed per unit moved) exactly,
        #: as a Python int in units of ``2**-scale`` (the Python filling reads these).
        self.weights: list[tuple[tuple[Hashable, int], ...]] = []
        self._ints: dict[int, int] = {}  # one object per value of those ints (most signatures share a few: memory)
        # the same as two halves per use (see _LOW), 0 padded; self._wide once one does not fit
        self._halves: FloatArray = np.zeros((16, 4, 2))
        self._wide = False
        self._cap: FloatArray = np.full(16, math.inf)  # per signature: the flow's own rate cap, units/s
        self._rcap: FloatArray = np.zeros(16)  # per resource id: capacity, units/s

    def __len__(self) -> int:
        return self._n

    def add(self, uses: Sequence[tuple[Hashable, float, float | int]], max_rate: float) -> None:
        """Add the next signature: its ``(resource, capacity units/s, coefficient)`` uses, in order (each resource
        once), and the flow's rate cap ``max_rate`` (units/s; ``inf`` for none). A coefficient is a float, or an
        int: its exact value in ``1 / EXACT_SCALE`` units (:func:`units`)."""
        s = self._n
        rows, width = self._res.shape
        if s == rows or len(uses) > width:  # grow: twice the rows, or as wide as this signature
            rows, width = (2 * rows if s == rows else rows), max(width, len(uses))
            res = np.full((rows, width), -1, dtype=np.int64)
            halves = np.zeros((rows, width, 2))
            cap = np.full(rows, math.inf)
            res[:s, : self._res.shape[1]] = self._res[:s]
            halves[:s, : self._halves.shape[1]] = self._halves[:s]
            cap[:s] = self._cap[:s]
            self._res, self._halves, self._cap = res, halves, cap
        exact_units: list[tuple[Hashable, int]] = []
        for k, (resource, capacity, coefficient) in enumerate(uses):
            i = self._ids.get(resource)
            if i is None:
                i = self._ids[resource] = self._nres
                self._nres += 1
                if i == len(self._rcap):
                    self._rcap = np.concatenate((self._rcap, np.zeros(len(self._rcap))))
                self._rcap[i] = capacity
            self._res[s, k] = i
            exact_units.append((resource, coefficient if isinstance(coefficient, int) else units(coefficient)))
        finest = max((1075 - (u & -u).bit_length() for _, u in exact_units if u > 0), default=0)
        if finest > self.scale:  # finer than the table's unit: every signature in the new unit
            self._in_unit(finest)
        self.weights.append(self._pairs(exact_units, 1074 - self.scale))  # exact: none is finer than the unit
        self._halves[s, : len(uses)] = self._halves_of(self.weights[s])
        self._cap[s] = max_rate
        self._n = s + 1

    def _in_unit(self, scale: int) -> None:
        """Every signature's weights (and halves) in the finer unit ``2**-scale``."""
        shift = self.scale - scale  # negative: a left shift
        self.scale, self._ints = scale, {}
        self.weights = [self._pairs(row, shift) for row in self.weights]
        for r, row in enumerate(self.weights):
            self._halves[r, : len(row)] = self._halves_of(row)

    def _pairs(self, row: Sequence[tuple[Hashable, int]], shift: int) -> tuple[tuple[Hashable, int], ...]:
        """``row``'s coefficients shifted right by ``shift`` bits (left if negative), each value one shared int."""
        ints = self._ints
        return tuple((r, ints.setdefault(v := u >> shift if shift >= 0 else u << -shift, v)) for r, u in row)

    def _halves_of(self, row: Sequence[tuple[Hashable, int]]) -> FloatArray:
        """A signature's weights (ints in units of ``2**-scale``) as (high, low) halves, one row per use. Sets
        :attr:`_wide` when one does not fit."""
        if self._wide or self.scale > 1000 or any(v >> _LOW >= 1 << 53 for _, v in row):
            self._wide = True  # the fillings sum Python integers from now on; the halves are not read
            return np.zeros((len(row), 2))
        return np.array([(v >> _LOW, v & ((1 << _LOW) - 1)) for _, v in row], dtype=np.float64).reshape(len(row), 2)

    def _nearest(self, total: ExactArray) -> FloatArray:
        """Exact weights as the nearest floats: summed halves (rows of (high, low), exact integers in float64: one
        correctly rounded addition) or Python ints in units of ``2**-scale`` (correctly rounded division)."""
        if total.dtype == object:
            return (total / (1 << self.scale)).astype(np.float64)
        return total[:, 0] * 2.0 ** (_LOW - self.scale) + total[:, 1] * 2.0**-self.scale

    def _weights(
        self,
        sigs: IntArray,
        valid: npt.NDArray[np.bool_],
        counts: IntArray | None,
        owner: IntArray,
        loc: IntArray,
        nres: int,
    ) -> tuple[ExactArray, ExactArray]:
        """Each use's exact weight (its coefficient times its row's count) and each resource's exact total: as
        halves (float64) where they fit (see _LOW), else as Python integers (:meth:`_nearest` rounds either)."""
        if not self._wide:
            weigh = self._halves[sigs][valid]
            if counts is not None:
                weigh = weigh * counts[owner][:, None]  # exact below 2**53, as the sums that hold it are (checked)
            halves = [np.bincount(loc, weights=weigh[:, k], minlength=nres) for k in (0, 1)]
            summed = np.stack(halves, axis=1).astype(np.float64, copy=False)
            if not summed.size or float(summed.max()) < _EXACT_SUM:  # every product and partial sum exact
                return weigh, summed
        weights = self.weights
        weigh = np.array([v for sig in sigs.tolist() for _, v in weights[sig]], dtype=object)  # row by row, as `valid`
        if counts is not None:
            weigh = weigh * counts[owner].astype(object)
        total = np.zeros(nres, dtype=object)
        np.add.at(total, loc, weigh)
        return weigh, total

    def fill(self, sigs: IntArray, counts: IntArray | None = None) -> FloatArray:
        """Max-min fair rates (units/s) of flows with signatures ``sigs``, one row each, in that order: the
        progressive filling of :meth:`collsim.engine.fluid.FluidNetwork._progressive_filling` on arrays (a flow bound
        by nothing gets ``inf``). With ``counts``, row ``k`` stands for ``counts[k]`` alike flows (one rate for all
        of them: alike flows freeze together), each weighing on a resource ``counts[k]`` times its coefficient:
        the rates of every flow given once where the coefficients add exactly."""
        nrows = len(sigs)
        rates = np.zeros(nrows)
        if nrows == 0:
            return rates
        # local resource ids in order of first use (the Python filling's order: sums, tie-breaks)
        table = self._res[sigs]
        valid = table >= 0
        uniq, first, inverse = np.unique(table[valid], return_index=True, return_inverse=True)
        by_first = np.argsort(first, kind="stable")
        local_of = np.empty(len(uniq), dtype=np.int64)
        local_of[by_first] = np.arange(len(uniq))
        loc = local_of[inverse.reshape(-1)]  # every use, row by row, each row's uses in order
        per_row = valid.sum(axis=1)
        row_start = np.cumsum(per_row) - per_row
        owner = np.repeat(np.arange(nrows), per_row)  # the row of each use
        nres = len(uniq)
        caps = self._rcap[uniq[by_first]]
        # what each use weighs, exactly: its coefficient once per flow of the row; per resource, the exact weight of
        # its unfrozen rows (`total`), and that rounded once (`weight`), as in Python
        weigh, total = self._weights(sigs, valid, counts, owner, loc, nres)
        weight = self._nearest(total)
        unfrozen_on = np.bincount(loc, minlength=nres)  # per resource: its uses by rows not frozen yet
        left = caps.copy()
        live = weight > 0
        frozen = np.zeros(nrows, dtype=bool)
        max_rate = self._cap[sigs]
        order = np.argsort(max_rate, kind="stable")
        by_cap = order.tolist()
        caps_sorted = max_rate[order].tolist()  # gathered by the array, not by the list (no conversion of it)
        nfrozen = 0
        cp = 0
        level = 0.0
        while nfrozen < nrows:
            lv = np.flatnonzero(live)
            step = math.inf
            binding = -1
            if lv.size:
                share = left[lv] / weight[lv]
                k = int(np.argmin(share))
                if share[k] < step:  # strictly below: an infinite share binds nothing (as in Python)
                    step, binding = float(share[k]), int(lv[k])
            while cp < nrows and frozen[by_cap[cp]]:
                cp += 1
            if cp < nrows and caps_sorted[cp] - level < step:
                step, binding = caps_sorted[cp] - level, -1
            if math.isinf(step):
                rates[~frozen] = math.inf
                break
            step = max(step, 0.0)
            level += step
            left[lv] -= step * weight[lv]
            newly = lv[left[lv] <= SAT_TOL * caps[lv]]
            to_freeze: list[int] = []
            if binding < 0 and cp < nrows:  # a flow cap binds: that row, then every row at that cap
                to_freeze.append(by_cap[cp])
            while cp < nrows and (frozen[by_cap[cp]] or caps_sorted[cp] - level <= SAT_TOL * max(level, 1.0)):
                to_freeze.append(by_cap[cp])
                cp += 1
            sat = newly if binding < 0 or binding in newly else np.append(newly, binding)
            live[sat] = False
            # the rows to freeze, as a mask over rows (then in row order, each once): those capped at this level,
            # and every row on a resource that saturated
            freeze = np.zeros(nrows, dtype=bool)
            freeze[to_freeze] = True
            if sat.size:
                on_sat = np.zeros(nres, dtype=bool)
                on_sat[sat] = True
                freeze[owner[on_sat[loc]]] = True
            new = np.flatnonzero(freeze & ~frozen)
            if not new.size:
                continue
            frozen[new] = True
            nfrozen += len(new)
            rates[new] = level
            uses = _segments(row_start[new], per_row[new])
            where = loc[uses]
            still = live[where]
            given = where[still]
            np.subtract.at(total, given, weigh[uses][still])
            weight[given] = self._nearest(total[given])
            np.subtract.at(unfrozen_on, where, 1)
            live[where[unfrozen_on[where] == 0]] = False  # no unfrozen flow left on it
        return rates


def _segments(starts: IntArray, lengths: IntArray) -> IntArray:
    """The indices ``starts[k] .. starts[k] + lengths[k] - 1`` of every segment, concatenated in order."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(total)
