"""Pairing, first divergence and the tolerance tier over two fingerprint sets (pure, in process).

Only fingerprints are compared for every record, bucket by bucket with digests first and vectorised over
Arrow/numpy columns (parity.compare.hashdiff); the stage values of a pair are read only when its fingerprints differ,
to apply tolerance and classify the cause. Memory is bounded: nothing holds all records of a side.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from parity.compare import hashdiff
from parity.config import Tolerance, ToleranceSpec
from parity.console.collector import collecting_less
from parity.encoding import canonical, fields
from parity.errors import FingerprintSetError
from parity.missing import MISSING
from parity.sets.fingerprint_set import FingerprintSet
from parity.stages import STAGES


@dataclass
class PairOutcome:
    """One paired record whose fingerprints differ somewhere."""

    key: str
    key_fp: bytes
    differing: tuple[str, ...]          # stages whose fingerprints differ
    within: tuple[str, ...]             # of those, the stages whose differences are within tolerance
    first_stage: str
    diverged: bool
    left: dict[str, Any]                # decoded values: the first differing stage's, whole; the transform's when
    right: dict[str, Any]               # it differs (only its differing features unless it is the first)
    feature_deltas: dict[str, tuple[bool, float | None]] = field(default_factory=dict)
    # feature -> (within tolerance, |delta| when numeric)
    fps: dict[str, tuple[int, int]] = field(default_factory=dict)  # differing stage -> (left, right) fingerprints


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
    fixes = {"key": "replay both sides with the same capture.key",
             "stages": "the sets were written by parity versions with other stages: replay both sides (or tap "
                       "both pipelines) with this version of parity"}
    for field_name, what in (("key", "key definition"), ("stages", "stages")):
        if lm.get(field_name) != rm.get(field_name):
            raise FingerprintSetError(
                f"the fingerprint sets have different {what}: {left.path} has {_clip(lm.get(field_name))}, "
                f"{right.path} has {_clip(rm.get(field_name))}; {fixes[field_name]}")


def _clip(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


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
    values need; every answer is the reference's (tests/compare_oracles.py).
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


DIFF_GC_THRESHOLDS = (100_000, 1000, 1000)


def diff_gc() -> contextlib.AbstractContextManager[None]:
    """Collects less often while the differing pairs are walked and their report built (`collecting_less`).
    Every differing pair allocates dicts, tuples and decoded values, most of them kept a while in the bounded
    memos, so the default thresholds ran full and middle collections over them again and again in a `parity
    diff` (in a check, the replay's large old generation already defers the full ones); the diff's values hold
    no reference cycles."""
    return collecting_less(DIFF_GC_THRESHOLDS)


FETCH_PAIRS = 50_000      # differing pairs whose stage values are fetched together (one read per values file)
_DECODED_CACHE = 20_000   # decoded values (and tolerance verdicts) remembered at once while pairs are yielded


def compare(left: FingerprintSet, right: FingerprintSet, tolerance: ToleranceSpec) -> DiffOutcome:
    """Pairs the two sets by key (duplicates in input-fingerprint order) and compares them stage by stage.

    Keeps every differing pair, with its values, in memory (small sets, tests); `DiffStream` yields them.
    """
    stream = DiffStream(left, right, tolerance)
    mismatches = list(stream)
    return DiffOutcome(
        left_rows=stream.left_rows, right_rows=stream.right_rows, paired=stream.paired, matched=stream.matched,
        left_only=stream.left_only, right_only=stream.right_only, duplicate_keys=stream.duplicate_keys,
        stage_diverged=stream.stage_diverged, stage_within=stream.stage_within, mismatches=mismatches,
        left_only_keys=stream.left_only_keys, right_only_keys=stream.right_only_keys)


class DiffStream:
    """The differing pairs of two fingerprint sets, in key order, one by one, in bounded memory.

    Iterate it once; the counts (the fields of `DiffOutcome` but `mismatches`) are complete afterwards.
    Fingerprints are compared bucket by bucket, digests first (parity.compare.hashdiff); the pairs whose fingerprints
    differ have their stage values fetched FETCH_PAIRS at a time (one read per values file), decoding only the
    stages that differ, each distinct (stage, fingerprint) once, and tolerance is applied once per distinct
    (stage, left fingerprint, right fingerprint). `keep_unpaired`: one-sided keys kept per side (None: all).
    """

    def __init__(self, left: FingerprintSet, right: FingerprintSet, tolerance: ToleranceSpec,
                 keep_unpaired: int | None = None) -> None:
        check_compatible(left, right)
        self._left, self._right, self._tolerance = left, right, tolerance
        self._keep = keep_unpaired
        self.left_rows = self.right_rows = self.paired = self.matched = 0
        self.left_only = self.right_only = self.duplicate_keys = 0
        self.buckets_whole = self.buckets_drilled = 0
        self.stage_diverged = {s: 0 for s in STAGES}
        self.stage_within = {s: 0 for s in STAGES}
        self.left_only_keys: list[str] = []
        self.right_only_keys: list[str] = []

    @property
    def mismatches(self) -> DiffStream:
        """The stream itself (what `DiffOutcome.mismatches` holds), for `build_report`."""
        return self

    def __iter__(self) -> Iterator[PairOutcome]:
        pending: list[_Pending] = []
        waiting = 0
        whole = hashdiff.whole_buckets(self._left, self._right)  # matched by their summaries: rows never read
        self.left_rows += whole.rows
        self.right_rows += whole.rows
        self.paired += whole.rows
        self.matched += whole.rows
        self.buckets_whole += whole.prefixes
        for lchunk, rchunk in hashdiff.chunks(self._left, self._right, whole.buckets):
            found = self._count(lchunk, rchunk, hashdiff.pair(lchunk, rchunk))
            if found is not None:
                pending.append(found)
                waiting += len(found.lpos)
            if waiting >= FETCH_PAIRS:
                yield from self._outcomes(pending)
                pending, waiting = [], 0
        if pending:
            yield from self._outcomes(pending)

    def _count(self, lchunk: hashdiff.Chunk, rchunk: hashdiff.Chunk, pairs: hashdiff.Pairs) -> _Pending | None:
        self.left_rows += lchunk.rows
        self.right_rows += rchunk.rows
        self.duplicate_keys += pairs.duplicates
        self.buckets_whole += pairs.buckets_whole
        self.buckets_drilled += pairs.buckets_drilled
        self.paired += pairs.matched_whole + len(pairs.left)
        self.matched += pairs.matched_whole
        self.left_only += len(pairs.left_only)
        self.right_only += len(pairs.right_only)
        for keys, chunk, rows in ((self.left_only_keys, lchunk, pairs.left_only),
                                  (self.right_only_keys, rchunk, pairs.right_only)):
            room = len(rows) if self._keep is None else max(0, min(len(rows), self._keep - len(keys)))
            if room:
                keys.extend(chunk.column("key", rows[:room]))
        li, ri = pairs.left, pairs.right
        differs = np.zeros((len(STAGES), len(li)), bool)
        for s, stage in enumerate(STAGES):
            differs[s] = lchunk.fps[s][li] != rchunk.fps[s][ri]
            self.stage_diverged[stage] += int(differs[s].sum())
        any_diff = differs.any(axis=0)
        self.matched += int(len(li) - any_diff.sum())
        if not any_diff.any():
            return None
        at = np.flatnonzero(any_diff)
        return _Pending(lchunk, rchunk, li[at], ri[at], differs[:, at])

    def _outcomes(self, pending: list[_Pending]) -> Iterator[PairOutcome]:
        """Fetches the differing stage values of the pending pairs (as bytes), then yields their outcomes."""
        values = _PairValues(self._left, self._right, _fetch(self._left, pending, left=True),
                             _fetch(self._right, pending, left=False), self._tolerance)
        for found in pending:
            lfps = [fps[found.lpos].tolist() for fps in found.lchunk.fps]
            rfps = [fps[found.rpos].tolist() for fps in found.rchunk.fps]
            differs = found.differs.T.tolist()
            keys, key_fps = found.lchunk.column("key", found.lpos), found.lchunk.column("key_fp", found.lpos)
            for n, (key, key_fp) in enumerate(zip(keys, key_fps)):
                lv: dict[str, Any] = {}
                rv: dict[str, Any] = {}
                within, fps = [], {}
                differing = tuple(stage for stage, d in zip(STAGES, differs[n]) if d)
                deltas: dict[str, tuple[bool, float | None]] = {}
                for s, stage in enumerate(STAGES):
                    if not differs[n][s]:
                        continue
                    fps[stage] = lfps[s][n], rfps[s][n]
                    if stage == differing[0]:
                        lv[stage], rv[stage] = values.whole(s, *fps[stage])
                    if stage == "transform":
                        deltas, lv[stage], rv[stage] = values.features(s, *fps[stage], whole=stage == differing[0])
                    if values.within(s, *fps[stage]):
                        within.append(stage)
                        self.stage_within[stage] += 1
                yield PairOutcome(key=key, key_fp=key_fp, differing=differing, within=tuple(within),
                                  first_stage=differing[0], diverged=len(within) < len(differing),
                                  left=lv, right=rv, feature_deltas=deltas, fps=fps)


class _PairValues:
    """Stage values of one fetch round's pairs, decoded on demand and each at most once (bounded memos).

    A dict value (every stage value but markers) is first split into its top-level fields without decoding;
    fields with equal bytes on both sides are equal (and within tolerance), so only the differing fields are
    decoded, unless the whole value is needed (the first divergent stage: causes and examples).
    """

    def __init__(self, left: FingerprintSet, right: FingerprintSet, lbytes: dict, rbytes: dict,
                 tolerance: ToleranceSpec) -> None:
        self._sets, self._bytes, self._tolerance = (left, right), (lbytes, rbytes), tolerance
        self._whole: dict[tuple[int, int, int], Any] = {}
        self._within: dict[tuple[int, int, int], bool] = {}
        self._features: dict[tuple[int, int, bool], tuple] = {}
        self._fields: dict[tuple[int, int, int], tuple | None] = {}
        self._names: dict[bytes, Any] = {}
        self._by_feature = dict(tolerance.features)
        # every tolerance finds two equal finite numbers within (|delta| 0 <= abs + rel*|b|)
        self._exact_match_within = all(math.isfinite(t.abs) and math.isfinite(t.rel) and t.abs >= 0 and t.rel >= 0
                                       for t in (tolerance.default, *(t for _n, t in tolerance.features)))

    def _tol_for(self, name: str | None) -> Tolerance:
        """`ToleranceSpec.for_feature` of a name from a dict built once (it builds one per call)."""
        return self._by_feature.get(name, self._tolerance.default) if name else self._tolerance.default

    def _one(self, side: int, s: int, fp: int) -> Any:
        memo = (side, s, fp)
        if memo not in self._whole:
            _remember(self._whole)
            data, part, row = self._bytes[side][(s, fp)]
            self._whole[memo] = self._sets[side].decode_value(part, row, STAGES[s], data)
        return self._whole[memo]

    def whole(self, s: int, lfp: int, rfp: int) -> tuple[Any, Any]:
        return self._one(0, s, lfp), self._one(1, s, rfp)

    def _split(self, s: int, lfp: int, rfp: int) -> tuple | None:
        """(decoded differing fields {name: (left, right)}, the only field's name or None, plain (see
        `fields.differing_fields`)) when both values are dicts with the same field names; None otherwise."""
        memo = (s, lfp, rfp)
        if memo not in self._fields:
            _remember(self._fields)
            ldata, lpart, lrow = self._bytes[0][(s, lfp)]
            rdata, rpart, rrow = self._bytes[1][(s, rfp)]
            found = fields.differing_fields(ldata, rdata)
            if found is None:
                self._fields[memo] = None
            else:
                stage, (lset, rset), names, differing = STAGES[s], self._sets, self._names, {}
                for k, a, b in found[0]:  # a known name is not looked up twice
                    name = names[k] if k in names else self._name(lpart, lrow, stage, k)
                    differing[name] = lset.decode_value(lpart, lrow, stage, a), rset.decode_value(rpart, rrow, stage, b)
                only = self._name(lpart, lrow, stage, found[2]) if found[2] is not None else None
                self._fields[memo] = (differing, only, found[1])
        return self._fields[memo]

    def _name(self, part: str, row: int, stage: str, data: bytes) -> Any:
        """A dict key from its canonical bytes (keys repeat from record to record: decoded once)."""
        if data not in self._names:
            _remember(self._names)
            self._names[data] = self._sets[0].decode_value(part, row, stage, data)
        return self._names[data]

    def within(self, s: int, lfp: int, rfp: int) -> bool:
        """values_within of the two values: of their differing dict fields only (fields with equal bytes are
        within), except for decoded whole values whose equal fields are not all plain, or under a tolerance
        that could refuse an exact match, which are walked whole."""
        memo = (s, lfp, rfp)
        if memo not in self._within:
            _remember(self._within)
            split = self._split(s, lfp, rfp)
            decoded = (0, s, lfp) in self._whole and (1, s, rfp) in self._whole
            if split is None or (decoded and not (split[2] and self._exact_match_within)):
                verdict = values_within(*self.whole(s, lfp, rfp), self._tol_for)
            else:
                verdict, tol_for = True, self._tol_for
                for name, (a, b) in split[0].items():
                    if not values_within(a, b, tol_for, name if isinstance(name, str) else None):
                        verdict = False
                        break
            self._within[memo] = verdict
        return self._within[memo]

    def features(self, s: int, lfp: int, rfp: int, whole: bool) -> tuple[dict, Any, Any]:
        """(feature deltas, left value, right value) of the transform stage; the values are whole when `whole`
        or when they are not two dicts of the same features, else dicts of the differing features only."""
        memo = (lfp, rfp, whole)
        if memo not in self._features:
            _remember(self._features)
            split = None if whole else self._split(s, lfp, rfp)
            if split is None or split[1] in ("dropped", "error"):  # a marker: no features
                left, right = self.whole(s, lfp, rfp)
                self._features[memo] = (_feature_deltas(left, right, self._tolerance), left, right)
            else:
                deltas, left, right = {}, {}, {}
                for name in sorted(split[0]):
                    a, b = split[0][name]
                    left[name], right[name] = a, b
                    tol = self._by_feature.get(name, self._tolerance.default)
                    deltas[name] = (values_within(a, b, lambda _n: tol), _max_abs_delta(a, b))
                self._features[memo] = (deltas, left, right)
        return self._features[memo]


def _remember(memo: dict) -> None:
    if len(memo) >= _DECODED_CACHE:
        memo.clear()


@dataclass
class _Pending:
    """Pairs of one chunk whose fingerprints differ: row positions and the (stage, pair) mask of differences."""

    lchunk: hashdiff.Chunk
    rchunk: hashdiff.Chunk
    lpos: np.ndarray
    rpos: np.ndarray
    differs: np.ndarray


def _fetch(fset: FingerprintSet, pending: list[_Pending], left: bool) -> dict[tuple[int, int], tuple]:
    """(canonical bytes, part, row) by (stage index, fingerprint) for the differing stages of the pending pairs,
    each distinct value read once."""
    wanted: dict[tuple[int, int], tuple[str, int]] = {}
    stages_at: dict[tuple[str, int], list[str]] = {}
    for found in pending:
        chunk, positions = (found.lchunk, found.lpos) if left else (found.rchunk, found.rpos)
        parts, rows = chunk.column("part", positions), chunk.column("row", positions)
        for s, stage in enumerate(STAGES):
            at = np.flatnonzero(found.differs[s])
            for n, fp in zip(at.tolist(), chunk.fps[s][positions[at]].tolist()):
                if (s, fp) not in wanted:
                    ref = wanted[(s, fp)] = (parts[n], rows[n])
                    stages_at.setdefault(ref, []).append(stage)
    data = fset.stage_bytes(stages_at)
    return {(s, fp): (data[ref][STAGES[s]], *ref) for (s, fp), ref in wanted.items()}


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
