"""Pairing, first divergence and the tolerance tier over two fingerprint sets (pure, in process).

Only fingerprints are compared for every record (vectorised over Arrow/numpy columns); the stage values of a
pair are read only when its fingerprints differ, to apply tolerance and classify the cause.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from parity.config import STAGES, Tolerance, ToleranceSpec
from parity.errors import FingerprintSetError
from parity.fingerprint_set import FingerprintSet

MISSING = object()


@dataclass
class PairOutcome:
    """One paired record whose fingerprints differ somewhere."""

    key: str
    key_fp: bytes
    differing: tuple[str, ...]          # stages whose fingerprints differ
    within: tuple[str, ...]             # of those, the stages whose differences are within tolerance
    first_stage: str
    diverged: bool
    left: dict[str, Any]                # decoded stage values (plus location)
    right: dict[str, Any]
    feature_deltas: dict[str, tuple[bool, float | None]] = field(default_factory=dict)
    # feature -> (within tolerance, |delta| when numeric)


@dataclass
class DiffOutcome:
    left_rows: int
    right_rows: int
    paired: int
    matched: int
    left_only: int
    right_only: int
    duplicate_keys: int
    stage_diverged: dict[str, int]
    stage_within: dict[str, int]
    mismatches: list[PairOutcome]        # sorted by key fingerprint
    left_only_keys: list[str]
    right_only_keys: list[str]


def check_compatible(left: FingerprintSet, right: FingerprintSet) -> None:
    """Refuses (exit 2) to diff sets that cannot be compared record by record."""
    lm, rm = left.manifest, right.manifest
    for field_name, what in (("key", "key definition"), ("stages", "stages")):
        if lm.get(field_name) != rm.get(field_name):
            raise FingerprintSetError(
                f"the fingerprint sets have different {what}: {left.path} has {lm.get(field_name)!r}, "
                f"{right.path} has {rm.get(field_name)!r}; replay both sides with the same capture.key")


def _ordinals(keys: list[bytes]) -> list[int]:
    """0 for the first record of a key, 1 for its first duplicate, ... (rows are sorted by key)."""
    ordinals, previous, count = [], None, 0
    for key in keys:
        count = count + 1 if key == previous else 0
        ordinals.append(count)
        previous = key
    return ordinals


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
    """True when `a` and `b` differ only in numbers, each within its tolerance (dict keys name fields)."""
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


def _is_integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer))


def compare(left: FingerprintSet, right: FingerprintSet, tolerance: ToleranceSpec) -> DiffOutcome:
    """Pairs the two sets by key (duplicates in input-fingerprint order) and compares them stage by stage."""
    check_compatible(left, right)
    lt, rt = left.table, right.table
    lkeys = lt.column("key_fp").to_pylist()
    rkeys = rt.column("key_fp").to_pylist()
    lord, rord = _ordinals(lkeys), _ordinals(rkeys)
    rindex = {(k, o): j for j, (k, o) in enumerate(zip(rkeys, rord))}
    li, ri, left_only = [], [], []
    for i, pair_key in enumerate(zip(lkeys, lord)):
        j = rindex.pop(pair_key, None)
        if j is None:
            left_only.append(i)
        else:
            li.append(i)
            ri.append(j)
    right_only = sorted(rindex.values())
    lidx, ridx = np.array(li, dtype=np.int64), np.array(ri, dtype=np.int64)
    differs = {}
    for stage in STAGES:
        lcol = lt.column(f"{stage}_fp").to_numpy()
        rcol = rt.column(f"{stage}_fp").to_numpy()
        differs[stage] = lcol[lidx] != rcol[ridx] if len(lidx) else np.zeros(0, dtype=bool)
    any_diff = np.zeros(len(lidx), dtype=bool)
    for stage in STAGES:
        any_diff |= differs[stage]
    mismatch_positions = np.nonzero(any_diff)[0]
    mismatches = _outcomes(left, right, lidx, ridx, mismatch_positions, differs, tolerance)
    stage_diverged = {s: int(differs[s].sum()) for s in STAGES}
    stage_within = {s: sum(1 for m in mismatches if s in m.within) for s in STAGES}
    lkey_text = lt.column("key").to_pylist()
    rkey_text = rt.column("key").to_pylist()
    return DiffOutcome(
        left_rows=lt.num_rows, right_rows=rt.num_rows, paired=len(li),
        matched=len(li) - len(mismatch_positions), left_only=len(left_only), right_only=len(right_only),
        duplicate_keys=sum(1 for o in lord if o) + sum(1 for o in rord if o),
        stage_diverged=stage_diverged, stage_within=stage_within, mismatches=mismatches,
        left_only_keys=[lkey_text[i] for i in left_only], right_only_keys=[rkey_text[j] for j in right_only])


def _outcomes(left: FingerprintSet, right: FingerprintSet, lidx: np.ndarray, ridx: np.ndarray,
              positions: np.ndarray, differs: dict[str, np.ndarray],
              tolerance: ToleranceSpec) -> list[PairOutcome]:
    lt, rt = left.table, right.table
    lrefs = [(lt.column("part")[int(lidx[p])].as_py(), lt.column("row")[int(lidx[p])].as_py()) for p in positions]
    rrefs = [(rt.column("part")[int(ridx[p])].as_py(), rt.column("row")[int(ridx[p])].as_py()) for p in positions]
    lvalues, rvalues = left.values(lrefs), right.values(rrefs)

    def tol_for(name: str | None) -> Tolerance:
        return tolerance.for_feature(name) if name else tolerance.default

    outcomes = []
    for p, lref, rref in zip(positions, lrefs, rrefs):
        i = int(lidx[p])
        lv, rv = lvalues[lref], rvalues[rref]
        differing = tuple(s for s in STAGES if differs[s][p])
        within = tuple(s for s in differing if values_within(lv[s], rv[s], tol_for))
        deltas: dict[str, tuple[bool, float | None]] = {}
        if "transform" in differing:
            deltas = _feature_deltas(lv["transform"], rv["transform"], tolerance)
        outcomes.append(PairOutcome(
            key=lt.column("key")[i].as_py(), key_fp=lt.column("key_fp")[i].as_py(), differing=differing,
            within=within, first_stage=differing[0], diverged=len(within) < len(differing),
            left=lv, right=rv, feature_deltas=deltas))
    return outcomes


def _feature_deltas(left: Any, right: Any, tolerance: ToleranceSpec) -> dict[str, tuple[bool, float | None]]:
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
        deltas[name] = (ok, _max_abs_delta(a, b))
    return deltas


def _is_marker(value: dict) -> bool:
    return set(value) in ({"dropped"}, {"error"})


def _same(a: Any, b: Any) -> bool:
    from parity import canonical

    return canonical.encode(a) == canonical.encode(b)


def _max_abs_delta(a: Any, b: Any) -> float | None:
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        deltas = [d for d in (_max_abs_delta(x, y) for x, y in zip(a, b)) if d is not None]
        return max(deltas) if deltas else None
    if _is_number(a) and _is_number(b):
        fa, fb = float(a), float(b)
        if math.isfinite(fa) and math.isfinite(fb):
            return abs(fa - fb)
    return None
