"""The histograms of a feature's differing values in report.json: left against right values on shared bins,
and the deltas (pure, deterministic: the same numbers in any order give the same bins)."""
from __future__ import annotations

import math
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
