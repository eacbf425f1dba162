"""The histograms of a feature's differing values in report.json: left against right values on shared bins,
and the deltas (pure, deterministic: the same numbers in any order give the same bins)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

HISTOGRAM_BINS = 20


def _edge(x: float) -> float:
    return float(f"{x:.6g}")


_MAX_FLOAT = 1.7976931348623157e308


def _range(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    return (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)


def _position(v: float, lo: float, hi: float) -> float:
    """Where `v` lies in [lo, hi], 0..1 (halved operands when the width overflows a float)."""
    width = hi - lo
    if width == 0:  # values so large that +-0.5 did not widen them
        return 0.0
    if math.isfinite(width):
        return (v - lo) / width
    return (v / 2 - lo / 2) / (hi / 2 - lo / 2)


def _histogram(values: Sequence[float], lo: float, hi: float) -> list[int]:
    """Counts of `values` in HISTOGRAM_BINS equal-width bins over [lo, hi] (the last bin closed)."""
    width = hi - lo
    if width != 0 and math.isfinite(width):  # `_position` with numpy: the same float operations, value by value
        at = ((np.asarray(values, np.float64) - lo) / width * HISTOGRAM_BINS).astype(np.int64)
        return np.bincount(np.clip(at, 0, HISTOGRAM_BINS - 1), minlength=HISTOGRAM_BINS).tolist()
    counts = [0] * HISTOGRAM_BINS
    for v in values:
        index = int(_position(v, lo, hi) * HISTOGRAM_BINS)
        counts[min(max(index, 0), HISTOGRAM_BINS - 1)] += 1
    return counts


def _edges(lo: float, hi: float) -> list[float]:
    step = (hi - lo) / HISTOGRAM_BINS
    if not math.isfinite(step):
        step = hi / HISTOGRAM_BINS - lo / HISTOGRAM_BINS
    return [_edge(lo + i * step) for i in range(HISTOGRAM_BINS)] + [_edge(hi)]


def histograms(pairs: list[tuple[float, float]]) -> dict[str, Any] | None:
    """Left vs right values on shared bins, and the deltas (right - left); None under two pairs.

    HISTOGRAM_BINS equal-width bins between the minimum and the maximum (a single value is widened by
    +-0.5); the edges are rounded to 6 significant digits, the counts use the exact edges. Deterministic.
    """
    return histograms_of([a for a, _ in pairs], [b for _, b in pairs])


def histograms_of(left: Sequence[float], right: Sequence[float]) -> dict[str, Any] | None:
    """`histograms` of the pairs (left[i], right[i]), given as two sequences (e.g. packed `array('d')`s)."""
    if len(left) < 2:
        return None
    with np.errstate(over="ignore"):  # an overflow is clamped
        deltas = np.clip(np.asarray(right, np.float64) - np.asarray(left, np.float64), -_MAX_FLOAT, _MAX_FLOAT).tolist()
    lo, hi = _range(left + right)
    dlo, dhi = _range(deltas)
    return {"values": {"edges": _edges(lo, hi), "left": _histogram(left, lo, hi),
                       "right": _histogram(right, lo, hi)},
            "deltas": {"edges": _edges(dlo, dhi), "counts": _histogram(deltas, dlo, dhi)}}



# The same histograms computed in parts (parity.compare.engine: each key range's numbers stay on the worker that
# tallied them): every part's extent first, merged in any order; then each part's bin counts over the merged
# extent, summed. `histograms_of` bins value by value against the bounds, so the counts summed over the parts are
# its counts exactly. Its bounds are Python's min and max over the values in order (all left values in key
# order, then all right values), which keep the first of equal values: 0.0 and -0.0 compare equal but print
# apart in the edges, so each bound carries where it was found, and a tie goes to the earlier place.

_Bound = tuple[float, tuple[int, int]]  # a value, and its place: (0 left, 1 right; the part's number)


@dataclass(frozen=True)
class Extent:
    """What binning needs of a feature's numbers over some pairs: how many pairs, the smallest and largest value
    of both sides and the smallest and largest delta (right - left, clamped as `histograms_of` does), each with
    the place it was first found (see above)."""

    pairs: int
    lo: _Bound
    hi: _Bound
    dlo: _Bound
    dhi: _Bound

    def merged(self, other: Extent) -> Extent:
        """Both parts' extent, whichever comes first in key order."""
        return Extent(self.pairs + other.pairs, _lower(self.lo, other.lo), _higher(self.hi, other.hi),
                      _lower(self.dlo, other.dlo), _higher(self.dhi, other.dhi))

    def bounds(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """(lo, hi) of the values and of the deltas, as `histograms_of` bins them."""
        return _range([self.lo[0], self.hi[0]]), _range([self.dlo[0], self.dhi[0]])


def _lower(a: _Bound, b: _Bound) -> _Bound:
    return b if b[0] < a[0] or (b[0] == a[0] and b[1] < a[1]) else a


def _higher(a: _Bound, b: _Bound) -> _Bound:
    return b if b[0] > a[0] or (b[0] == a[0] and b[1] < a[1]) else a


def _deltas(left: Sequence[float], right: Sequence[float]) -> np.ndarray:
    with np.errstate(over="ignore"):  # an overflow is clamped
        return np.clip(np.asarray(right, np.float64) - np.asarray(left, np.float64), -_MAX_FLOAT, _MAX_FLOAT)


def extent_of(left: Sequence[float], right: Sequence[float], part: int) -> Extent | None:
    """The extent of the pairs (left[i], right[i]), in key order, of the `part`-th part; None for no pair."""
    if not len(left):
        return None
    lv, rv, dv = np.asarray(left, np.float64), np.asarray(right, np.float64), _deltas(left, right)
    # argmin and argmax give the first of equal values, as Python's min and max keep it
    return Extent(len(lv),
                  _lower((float(lv[lv.argmin()]), (0, part)), (float(rv[rv.argmin()]), (1, part))),
                  _higher((float(lv[lv.argmax()]), (0, part)), (float(rv[rv.argmax()]), (1, part))),
                  (float(dv[dv.argmin()]), (0, part)), (float(dv[dv.argmax()]), (0, part)))


Counts = tuple[list[int], list[int], list[int]]  # bin counts: left values, right values, deltas


def counts_of(left: Sequence[float], right: Sequence[float], extent: Extent) -> Counts:
    """The bin counts of some pairs on the bins of the whole `extent`."""
    (lo, hi), (dlo, dhi) = extent.bounds()
    return _histogram(left, lo, hi), _histogram(right, lo, hi), _histogram(_deltas(left, right).tolist(), dlo, dhi)


def summed_counts(a: Counts, b: Counts) -> Counts:
    return tuple([x + y for x, y in zip(mine, theirs)] for mine, theirs in zip(a, b))  # type: ignore[return-value]


def histograms_of_counts(extent: Extent, counts: Counts) -> dict[str, Any] | None:
    """`histograms_of` all the pairs, from their merged extent and their summed `counts_of`."""
    if extent.pairs < 2:
        return None
    (lo, hi), (dlo, dhi) = extent.bounds()
    left, right, deltas = counts
    return {"values": {"edges": _edges(lo, hi), "left": list(left), "right": list(right)},
            "deltas": {"edges": _edges(dlo, dhi), "counts": list(deltas)}}
