"""The stage values of a fetch round's differing pairs, stage by stage over all the round's pairs at once.

The diff (parity.compare.diff) compares fingerprints for every record; the pairs whose fingerprints differ are
gathered FETCH_PAIRS at a time into a `Round` of plain arrays. Per stage, the round's distinct (left, right)
fingerprint pairs among those that differ there are found with numpy, their canonical bytes fetched in one call per
side (`fetch`, through `FingerprintSet.stage_columns`: each values file read once, its rows taken once and made
Python bytes); then a slice of the round at a time (`compare_slice`), they are split into their differing
top-level fields on the bytes (`fields.differing_fields`), and only what is needed decoded: the differing fields for
the tolerance tier, the whole values of a pair's first divergent stage (causes and examples; the report's stream
leaves whole input records `Undecoded` where their differing fields decide, and decodes its examples' only). The transform's
differing features are compared per feature over the slice with numpy where both sides are all floats or all ints.

`tests/compare/oracles.py` holds the per-record reading of all this (`pair_outcomes`), which the tests compare it with.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from parity.compare.outcomes import Undecoded
from parity.compare.tolerance import feature_deltas, max_abs_delta, values_within
from parity.config import Tolerance, ToleranceSpec
from parity.encoding import canonical, fields
from parity.sets.fingerprint_set import FingerprintSet
from parity.stages import STAGES

_TRANSFORM = STAGES.index("transform")
_MARKER_SET = frozenset(("dropped", "error"))
_EXACT_INTS = 2 ** 53  # ints below this in magnitude are exact float64s, and their differences exact int64s


@dataclass
class Round:
    """The differing pairs of one fetch round, in key order, as arrays over the pairs."""

    keys: list[str]
    key_fps: list[bytes]
    differs: np.ndarray                          # (stage, pair): the stage's fingerprints differ
    fps: tuple[np.ndarray, np.ndarray]           # per side, (stage, pair) uint64 fingerprints
    parts: tuple[list[str], list[str]]           # per side, the names of the values files the round reads
    codes: tuple[np.ndarray, np.ndarray]         # per side and pair, the index of its values file in `parts`
    rows: tuple[np.ndarray, np.ndarray]          # per side and pair, its row in that file

    @property
    def first(self) -> np.ndarray:
        """Each pair's first divergent stage (an index into STAGES)."""
        return np.argmax(self.differs, axis=0)


GATHERED = ("key", "key_fp", "part", "row")  # the fingerprint columns `gather` reads of a chunk


def gather(chunks: list[tuple[Any, Any, np.ndarray]]) -> Round:
    """A Round from (left chunk, right chunk, differs) per chunk: chunks holding the differing pairs' rows alone,
    pair by pair (parity.compare.hashdiff.Chunk.rows_at, with the GATHERED columns)."""
    keys: list[str] = []
    key_fps: list[bytes] = []
    fps: tuple[list, list] = ([], [])
    parts: tuple[list, list] = ([], [])
    rows: tuple[list, list] = ([], [])
    for lchunk, rchunk, _differs in chunks:
        keys.extend(lchunk.table.column("key").to_pylist())
        key_fps.extend(lchunk.table.column("key_fp").to_pylist())
        for side, chunk in enumerate((lchunk, rchunk)):
            fps[side].append(np.stack(chunk.fps) if chunk.rows else np.zeros((len(STAGES), 0), np.uint64))
            parts[side].extend(chunk.table.column("part").chunks)
            rows[side].append(np.asarray(chunk.table.column("row").to_numpy(), np.int64))
    codes, names = [], []
    for side in (0, 1):
        encoded = pc.dictionary_encode(pa.chunked_array(parts[side], pa.string())).combine_chunks()
        codes.append(np.asarray(encoded.indices.to_numpy(zero_copy_only=False), np.int64))
        names.append(encoded.dictionary.to_pylist())
    differs = np.concatenate([c[2] for c in chunks], axis=1)
    return Round(keys=keys, key_fps=key_fps, differs=differs,
                 fps=(np.concatenate(fps[0], axis=1), np.concatenate(fps[1], axis=1)),
                 parts=(names[0], names[1]), codes=(codes[0], codes[1]),
                 rows=(np.concatenate(rows[0]), np.concatenate(rows[1])))


@dataclass
class StageResult:
    """One stage's comparison over the round's pairs that differ there (`at`)."""

    at: np.ndarray                 # the pairs (indices into the round) whose fingerprints differ at this stage
    within: np.ndarray             # per pair of `at`: the difference is within tolerance
    left: list[Any]                # per pair of `at`: the value the outcome shows (see `compare_slice`), or None
    right: list[Any]
    deltas: list[dict] | None      # the transform: per pair of `at`, {feature: (within, |delta| or None)}
    fields: list[tuple | None]     # per pair of `at` where the stage is its first divergent one: the names of the
                                   # top-level fields whose bytes differ, when both are dicts of the same str names
    splits: list[dict | None] | None = None  # per pair of `at`, where the input stage is its first divergent one and
                                   # its whole values are deferred (`Undecoded`): {field: (left, right)} of the
                                   # differing fields, decoded


class _Values:
    """The canonical bytes of one stage's distinct pairs in a slice, and the decoding that names its record when a
    value is not canonical bytes."""

    def __init__(self, sets: tuple[FingerprintSet, FingerprintSet], rnd: Round, stage: int, rep: np.ndarray,
                 data: tuple[list, list]) -> None:
        self._sets, self._rnd, self._stage, self._rep, self.data = sets, rnd, stage, rep, data

    def decode(self, side: int, u: int, data: bytes | None) -> Any:
        """A value (or a field of one) of distinct pair `u` from its bytes; a damaged value names its file and row."""
        try:
            return canonical.decode(data) if data is not None else None
        except ValueError:
            pair = int(self._rep[u])
            part = self._rnd.parts[side][int(self._rnd.codes[side][pair])]
            return self._sets[side].decode_value(part, int(self._rnd.rows[side][pair]), STAGES[self._stage], data)


@dataclass
class Fetched:
    """A round's stage values as fetched: per differing stage, its pairs (`at`), their distinct (left, right)
    fingerprint pairs (the first pair of each, `rep`; each pair's, `inverse`) and those pairs' canonical bytes per
    side, and where each distinct pair's bytes are among them (`FingerprintSet.stage_columns`; decoded values only
    for the slice being compared)."""

    stages: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, tuple[list, np.ndarray],
                            tuple[list, np.ndarray]]]  # per side: bytes, and where each distinct pair's are


def fetch(left: FingerprintSet, right: FingerprintSet, rnd: Round) -> Fetched:
    """The canonical bytes of the round's distinct differing stage values, one `stage_columns` call per side."""
    plans = {}
    wanted: tuple[dict, dict] = ({}, {})
    for s in range(len(STAGES)):
        at = np.flatnonzero(rnd.differs[s])
        if not len(at):
            continue
        rep, inverse = _distinct(rnd.fps[0][s][at], rnd.fps[1][s][at])
        rep = at[rep]
        plans[s] = (at, rep, inverse)
        for side in (0, 1):
            wanted[side][STAGES[s]] = (rnd.codes[side][rep], rnd.rows[side][rep])
    data = (left.stage_columns(rnd.parts[0], wanted[0]), right.stage_columns(rnd.parts[1], wanted[1]))
    return Fetched({s: (at, rep, inverse, data[0][STAGES[s]], data[1][STAGES[s]])
                    for s, (at, rep, inverse) in plans.items()})


def compare_slice(left: FingerprintSet, right: FingerprintSet, rnd: Round, fetched: Fetched, start: int, end: int,
                  tolerance: ToleranceSpec, defer_input: bool = False) -> dict[int, StageResult]:
    """Each stage's comparison over the round's pairs `start` to `end` whose fingerprints differ there (a slice
    of the round at a time: decoded values are held for a slice, not for the round).

    `left`/`right` of a pair hold its whole decoded values where the stage is its first divergent one; at the
    transform stage otherwise, the values of the differing features only (whole when the two values are not
    dicts of the same names, or when one is a marker); elsewhere None. `within` is the tolerance tier: the
    differing fields' values compared (fields of equal bytes are within), or the whole values walked where the
    split does not apply, or, at a first divergent stage, where an equal field could still be refused (it is not
    plain, or a tolerance is infinite).

    `defer_input`: where the input stage is a pair's first divergent one and its differing fields decide the
    tolerance tier, its whole values are left `Undecoded` and its differing fields given (`StageResult.splits`).
    """
    by_feature = dict(tolerance.features)

    def tol_for(name: str | None) -> Tolerance:  # `ToleranceSpec.for_feature`, from a dict built once
        return by_feature.get(name, tolerance.default) if name else tolerance.default

    # every tolerance finds two equal finite numbers within (|delta| 0 <= abs + rel*|b|)
    exact_match_within = all(math.isfinite(t.abs) and math.isfinite(t.rel) and t.abs >= 0 and t.rel >= 0
                             for t in (tolerance.default, *(t for _n, t in tolerance.features)))
    first = rnd.first
    results = {}
    for s, (at, rep, inverse, ldata, rdata) in fetched.stages.items():
        lo, hi = np.searchsorted(at, [start, end]).tolist()
        if lo == hi:
            continue
        used, local = np.unique(inverse[lo:hi], return_inverse=True)
        lbytes, rbytes = ([values[i] for i in order[used].tolist()] for values, order in (ldata, rdata))
        values = _Values((left, right), rnd, s, rep[used], (lbytes, rbytes))
        is_first = first[at[lo:hi]] == s
        results[s] = _compare_stage(s, values, at[lo:hi], local.reshape(-1), is_first, tol_for, exact_match_within,
                                    tolerance, defer_input and s == 0)
    return results


def _distinct(lfps: np.ndarray, rfps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the first pair of each distinct (left, right) fingerprint pair, each pair's distinct index)."""
    if not len(lfps):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.lexsort((rfps, lfps))
    lo, ro = lfps[order], rfps[order]
    starts = np.r_[True, (lo[1:] != lo[:-1]) | (ro[1:] != ro[:-1])]
    inverse = np.empty(len(order), np.int64)
    inverse[order] = np.cumsum(starts) - 1
    return order[starts], inverse


def _compare_stage(s: int, values: _Values, at: np.ndarray, inverse: np.ndarray, is_first: np.ndarray,
                   tol_for: Callable[[str | None], Tolerance], exact_match_within: bool,
                   tolerance: ToleranceSpec, defer: bool = False) -> StageResult:
    count = int(inverse.max()) + 1 if len(inverse) else 0
    first_u = np.zeros(count, bool)
    first_u[inverse[is_first]] = True
    other_u = np.zeros(count, bool)
    other_u[inverse[~is_first]] = True
    transform = s == _TRANSFORM
    try:  # canonical.decode, and on a damaged value again with the decoder that names its file and row
        wholes, founds, kinds, markers, splits = _split(values.data, first_u.tolist(), transform, _decode, {},
                                                        values if defer and exact_match_within else None)
    except ValueError:
        wholes, founds, kinds, markers, splits = _split(values.data, first_u.tolist(), transform, values.decode, {},
                                                        values if defer and exact_match_within else None)
    # what follows from a split alone, once per split (pairs that differ by the same bytes share one)
    tiers = [_split_within(split, tol_for) for split in splits]
    named = [tuple(split) if split and all(type(n) is str for n in split) else None for split in splits]
    within_first, within_other = [False] * count, [False] * count
    names: list[tuple | None] = [None] * count
    for u, (found, k, marker, whole, whole_needed, other) in enumerate(zip(founds, kinds, markers, wholes,
                                                                            first_u.tolist(), other_u.tolist())):
        # equal fields are within when they are plain and every tolerance takes an exact match: then the
        # differing fields decide; else the whole values are walked where they were decoded anyway
        strict = found is not None and found[1] and exact_match_within
        if whole_needed:
            within_first[u] = tiers[k] if strict else values_within(*whole, tol_for)
            if k is not None:
                names[u] = named[k]
        if other:
            walk_whole = found is None or (marker and not strict)
            within_other[u] = values_within(*whole, tol_for) if walk_whole else tiers[k]
    shown = [None if marker else k for k, marker in zip(kinds, markers)]  # a marker is shown whole
    inv = inverse.tolist()
    firsts = is_first.tolist()
    within = np.array([within_first[u] if f else within_other[u] for u, f in zip(inv, firsts)], bool)
    deltas = None
    if transform:
        whole_deltas = {u: feature_deltas(*wholes[u], tolerance) for u in range(count) if wholes[u] is not None}
        # the splits shown in place of whole values: those of the pairs for which the transform is a later stage
        later: list[dict | None] = [None] * len(splits)
        for k, other in zip(shown, other_u.tolist()):
            if other and k is not None:
                later[k] = splits[k]
        split_deltas = _split_deltas(later, tolerance)
        deltas = [whole_deltas[u] if f or shown[u] is None else split_deltas[shown[u]] for u, f in zip(inv, firsts)]
        sides = [None if split is None else tuple({n: v[side] for n, v in sorted(split.items())} for side in (0, 1))
                 for split in later]
        left = [wholes[u][0] if f or shown[u] is None else sides[shown[u]][0] for u, f in zip(inv, firsts)]
        right = [wholes[u][1] if f or shown[u] is None else sides[shown[u]][1] for u, f in zip(inv, firsts)]
    else:
        left = [wholes[u][0] if f else None for u, f in zip(inv, firsts)]
        right = [wholes[u][1] if f else None for u, f in zip(inv, firsts)]
    shown_names = [names[u] if f else None for u, f in zip(inv, firsts)]
    shown_splits = [splits[shown[u]] if f and shown[u] is not None and type(wholes[u][0]) is Undecoded else None
                    for u, f in zip(inv, firsts)] if defer else None
    return StageResult(at=at, within=within, left=left, right=right, deltas=deltas, fields=shown_names,
                       splits=shown_splits)


def _split(data: tuple[list, list], whole_needed: list[bool], transform: bool, decode: Callable[..., Any],
           names: dict[bytes, Any], defer: _Values | None = None) -> tuple[list, list, list, list, list[dict]]:
    """Per distinct pair: its whole decoded values or None, `differing_fields` of its bytes, the index of its
    split among the splits (None without one), and whether the values are markers at the transform
    (`{"dropped": ...}`, `{"error": ...}`); then the splits, {name: (left, right)} of differing fields decoded.
    Whole values are decoded where the stage is a pair's first divergent one, or where the split does not apply
    or finds markers. `defer` (the stage's values, where every tolerance takes an exact match): a first divergent
    stage's whole values whose split is plain are left `Undecoded`.

    Pairs of a slice often differ in the same fields by the same bytes (the one field a bug changes, to the same
    few values), so there is one split per distinct differing bytes, decoded once and shared by those pairs, and
    `_compare_stage` finds its tier, feature deltas and shown values once. A pair for which a stage before the
    transform is not the first divergent one needs only its tier: it costs one `differing_fields` and no
    decoding. Splits are shared at every stage, not only at the transform: benchmarks/RESULTS.md measures it."""
    ldata, rdata = data
    wholes: list[tuple[Any, Any] | None] = []
    founds: list[Any] = []
    kinds: list[int | None] = []
    markers: list[bool] = []
    splits: list[dict] = []
    index: dict[tuple, int] = {}  # differing fields' bytes -> their split's index
    differing_fields = fields.differing_fields
    for u, (a, b, needed) in enumerate(zip(ldata, rdata, whole_needed)):
        found = differing_fields(a, b)
        if not needed:
            whole = None
        elif defer is not None and found is not None and found[1]:
            whole = Undecoded(defer, 0, u, a), Undecoded(defer, 1, u, b)
        else:
            whole = decode(0, u, a), decode(1, u, b)
        k, marker = None, False
        if found is not None:
            same = tuple(found[0])
            k = index.get(same)
            if k is None:
                k = index[same] = len(splits)
                splits.append(_decoded(found, u, decode, names))
            only = found[2]
            marker = transform and only is not None and _named(only, u, decode, names) in _MARKER_SET
        if whole is None and (k is None or marker):
            whole = decode(0, u, a), decode(1, u, b)
        wholes.append(whole)
        founds.append(found)
        kinds.append(k)
        markers.append(marker)
    return wholes, founds, kinds, markers, splits


def _decoded(found: Any, u: int, decode: Callable[..., Any], names: dict[bytes, Any]) -> dict:
    """{name: (left, right)} of the differing fields `differing_fields` found in distinct pair `u`."""
    return {_named(k, u, decode, names): (decode(0, u, x), decode(1, u, y)) for k, x, y in found[0]}


def _named(key: bytes, u: int, decode: Callable[..., Any], names: dict[bytes, Any]) -> Any:
    """A field's name from its key's bytes, decoded once per `_split` (`names` keeps them)."""
    return names[key] if key in names else names.setdefault(key, decode(0, u, key))


def _decode(_side: int, _u: int, data: bytes | None) -> Any:
    return canonical.decode(data) if data is not None else None


def _split_within(split: dict, tol_for: Callable[[str | None], Tolerance]) -> bool:
    """values_within of two dicts from their differing fields only (fields of equal bytes are within)."""
    for name, (a, b) in split.items():
        if not values_within(a, b, tol_for, name if isinstance(name, str) else None):
            return False
    return True


def _split_deltas(splits: list[dict | None], tolerance: ToleranceSpec) -> list[dict | None]:
    """Per split (or None), {feature: (within, |delta|)} of its differing features in name order, computed per
    feature over all pairs: with numpy where a feature's values are all floats or all ints below 2^53 on both
    sides, else value by value (`tolerance.values_within`, `tolerance.max_abs_delta`)."""
    by_feature, default = dict(tolerance.features), tolerance.default
    columns: dict[Any, tuple[list[int], list, list]] = {}
    for u, split in enumerate(splits):
        if split is not None:
            for name, (a, b) in split.items():
                us, lefts, rights = columns.setdefault(name, ([], [], []))
                us.append(u)
                lefts.append(a)
                rights.append(b)
    answers: dict[Any, list[tuple[bool, float | None]]] = {}
    for name, (_us, lefts, rights) in columns.items():
        tol = by_feature.get(name, default)
        found = _numeric_deltas(lefts, rights, tol)
        if found is None:
            found = [(values_within(a, b, lambda _n, tol=tol: tol), max_abs_delta(a, b)) for a, b in zip(lefts, rights)]
        answers[name] = found
    out: list[dict | None] = [None if split is None else {} for split in splits]
    at = {name: 0 for name in columns}
    for u, split in enumerate(splits):
        if split is None:
            continue
        mine = out[u]
        for name in sorted(split):
            mine[name] = answers[name][at[name]]  # type: ignore[index]
            at[name] += 1
    return out


def _numeric_deltas(lefts: list, rights: list, tol: Tolerance) -> list[tuple[bool, float | None]] | None:
    """(within, |delta|) of each (left, right) pair with numpy, as `tolerance.values_within` and `tolerance.max_abs_delta`
    answer them, when every value is a Python float, or every value a Python int below 2^53 in magnitude; None
    otherwise."""
    kinds = set(map(type, lefts)) | set(map(type, rights))
    if kinds == {float}:
        a, b = np.array(lefts, np.float64), np.array(rights, np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            nan_a, nan_b = np.isnan(a), np.isnan(b)
            infinite = np.isinf(a) | np.isinf(b)
            delta = np.abs(a - b)
            within = np.where(nan_a | nan_b, nan_a & nan_b,
                              np.where(infinite, a == b, delta <= tol.abs + tol.rel * np.abs(b)))
        finite = ~(nan_a | nan_b | infinite)
        return [(w, d if f else None) for w, d, f in zip(within.tolist(), delta.tolist(), finite.tolist())]
    if kinds == {int}:
        if max(map(abs, lefts)) >= _EXACT_INTS or max(map(abs, rights)) >= _EXACT_INTS:
            return None
        a, b = np.array(lefts, np.int64), np.array(rights, np.int64)
        fa, fb = a.astype(np.float64), b.astype(np.float64)
        within = np.abs(a - b).astype(np.float64) <= tol.abs + tol.rel * np.abs(fb)
        return list(zip(within.tolist(), np.abs(fa - fb).tolist()))
    return None
