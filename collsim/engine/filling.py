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
arithmetic is the Python filling's (:meth:`FluidNetwork._progressive_filling`): the same per-resource sums in the
same order (rows in the order given, each row's uses in its order), the same steps, the same saturation test and
the same tie-breaks (the first resource in order of first use). Two things differ. The order in which a round's
frozen flows give back their weight, which changes nothing when the coefficients add exactly (1, 2, 1/2 ...), as
they do for links; the tests compare both fillings bit for bit on such components and within 1e-12 on any. And a
resource leaves the filling when no unfrozen flow is left on it, where the Python filling waits for its weight to
fall to 1e-12 of the coefficient last given back: the same moment unless the coefficients on one resource differ by
twelve orders of magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["SAT_TOL", "SignatureArrays"]

#: Relative: a resource with less than this fraction of its capacity left is saturated (both fillings).
SAT_TOL = 1e-9

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


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
        self._coef: FloatArray = np.zeros((16, 4))  # per signature: units consumed per unit moved, 0 padded
        self._cap: FloatArray = np.full(16, math.inf)  # per signature: the flow's own rate cap, units/s
        self._rcap: FloatArray = np.zeros(16)  # per resource id: capacity, units/s

    def __len__(self) -> int:
        return self._n

    def add(self, uses: Sequence[tuple[Hashable, float, float]], max_rate: float) -> None:
        """Add the next signature: its ``(resource, capacity units/s, coefficient)`` uses, in order (each resource
        once), and the flow's rate cap ``max_rate`` (units/s; ``inf`` for none)."""
        s = self._n
        rows, width = self._res.shape
        if s == rows or len(uses) > width:  # grow: twice the rows, or as wide as this signature
            rows, width = (2 * rows if s == rows else rows), max(width, len(uses))
            res = np.full((rows, width), -1, dtype=np.int64)
            coef = np.zeros((rows, width))
            cap = np.full(rows, math.inf)
            res[:s, : self._res.shape[1]] = self._res[:s]
            coef[:s, : self._coef.shape[1]] = self._coef[:s]
            cap[:s] = self._cap[:s]
            self._res, self._coef, self._cap = res, coef, cap
        for k, (resource, capacity, coefficient) in enumerate(uses):
            i = self._ids.get(resource)
            if i is None:
                i = self._ids[resource] = self._nres
                self._nres += 1
                if i == len(self._rcap):
                    self._rcap = np.concatenate((self._rcap, np.zeros(len(self._rcap))))
                self._rcap[i] = capacity
            self._res[s, k] = i
            self._coef[s, k] = coefficient
        self._cap[s] = max_rate
        self._n = s + 1

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
        coef = self._coef[sigs][valid]
        per_row = valid.sum(axis=1)
        row_start = np.cumsum(per_row) - per_row
        owner = np.repeat(np.arange(nrows), per_row)  # the row of each use
        # what each use weighs: its coefficient once per flow of the row
        weigh = coef if counts is None else coef * counts[owner]
        nres = len(uniq)
        caps = self._rcap[uniq[by_first]]
        weight = np.bincount(loc, weights=weigh, minlength=nres)  # summed in use order, from 0.0, as in Python
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
            np.subtract.at(weight, where[still], weigh[uses][still])
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
