"""The tolerance tier: whether two stage values differ only in numbers, each within its tolerance, and by how much.

A pair whose fingerprints differ at a stage is `within_tolerance` there when `values_within` says so
(docs/contract.md, section 2); the transform's differing features also get their largest |delta| for the report.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from parity.config import Tolerance, ToleranceSpec
from parity.encoding import canonical
from parity.missing import MISSING


def numeric_within(a: Any, b: Any, tol: Tolerance) -> tuple[bool, float | None]:
    """(|a - b| <= abs + rel*|b|, |a - b|) for two numbers; (False, None) if either is not a number."""
    if not _is_number(a) or not _is_number(b):
        return False, None
    fa, fb = float(a), float(b)
    if math.isnan(fa) or math.isnan(fb):
        return math.isnan(fa) and math.isnan(fb), None
    if math.isinf(fa) or math.isinf(fb):
        return fa == fb, None if fa != fb else 0.0
    delta = abs(fa - fb) if not (isinstance(a, int) and isinstance(b, int)) else float(abs(a - b))
    return delta <= tol.abs + tol.rel * abs(fb), delta


def _is_number(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return False
    return isinstance(value, (int, float, np.integer, np.floating))


def values_within(a: Any, b: Any, tol_for: Callable[[str | None], Tolerance], name: str | None = None) -> bool:
    """True when `a` and `b` differ only in numbers, each within its tolerance (dict keys name fields).

    Two Python floats, ints or strs (most differing fields) are answered first, without the type tests the other
    values need; every answer is the reference's (tests/compare/oracles.py).
    """
    ta = type(a)
    if ta is type(b):
        if ta is float:
            if a != a or b != b:  # NaN: within only of a NaN
                return a != a and b != b
            if a in _INFS or b in _INFS:
                return a == b
            tol = tol_for(name)
            return abs(a - b) <= tol.abs + tol.rel * abs(b)
        if ta is int:  # floats of both first: an int too large for a float raises as in numeric_within
            tol = tol_for(name)
            _, fb = float(a), float(b)
            return float(abs(a - b)) <= tol.abs + tol.rel * abs(fb)
        if ta is str:
            return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return False
        return all(values_within(a[k], b[k], tol_for, k if isinstance(k, str) else name) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_within(x, y, tol_for, name) for x, y in zip(a, b))
    if _is_number(a) and _is_number(b):
        if _is_integer(a) != _is_integer(b):  # int vs float is a type change (coder.type), not numerics
            return False
        return numeric_within(a, b, tol_for(name))[0]
    return type(a) is type(b) and a == b


_INFS = (math.inf, -math.inf)


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer))



def feature_deltas(left: Any, right: Any, tolerance: ToleranceSpec) -> dict[str, tuple[bool, float | None]]:
    if not isinstance(left, dict) or not isinstance(right, dict) or _is_marker(left) or _is_marker(right):
        return {}
    deltas = {}
    for name in sorted(set(left) | set(right)):
        a, b = left.get(name, MISSING), right.get(name, MISSING)
        if a is MISSING or b is MISSING:
            deltas[name] = (False, None)
            continue
        if _same(a, b):
            continue
        tol = tolerance.for_feature(name)
        ok = values_within(a, b, lambda _n: tol)
        deltas[name] = (ok, max_abs_delta(a, b))
    return deltas


def _is_marker(value: dict) -> bool:
    return set(value) in ({"dropped"}, {"error"})


def _same(a: Any, b: Any) -> bool:
    return canonical.encode(a) == canonical.encode(b)


def max_abs_delta(a: Any, b: Any) -> float | None:
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        deltas = [d for d in (max_abs_delta(x, y) for x, y in zip(a, b)) if d is not None]
        return max(deltas) if deltas else None
    if _is_number(a) and _is_number(b):
        fa, fb = float(a), float(b)
        if math.isfinite(fa) and math.isfinite(fb):
            return abs(fa - fb)
    return None
