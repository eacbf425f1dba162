"""Pairing, first divergence and the tolerance tier over two fingerprint sets (pure, in process).

Only fingerprints are compared for every record, bucket by bucket with digests first and vectorised over
Arrow/numpy columns (parity.compare.hashdiff); the stage values of a pair are read only when its fingerprints differ,
to apply tolerance and classify the cause. Memory is bounded: nothing holds all records of a side.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from parity.compare import hashdiff, pair_values
from parity.compare.frozen import FrozenMap
from parity.compare.outcomes import PairOutcome
from parity.compare.summary import DiffCounts, DiffSummary
from parity.compare.tally import Tally
from parity.config import ToleranceSpec
from parity.console.collector import collecting_less
from parity.errors import FingerprintSetError
from parity.sets.fingerprint_set import KEY_RANGE_BITS, FingerprintSet
from parity.stages import STAGES


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


# The first generation collects every million container allocations: a diff's rounds allocate large young lists
# that reference counting frees, so frequent young collections walk them and free nothing (benchmarks/RESULTS.md
# measures the difference).
DIFF_GC_THRESHOLDS = (1_000_000, 1000, 1000)


def diff_gc() -> contextlib.AbstractContextManager[None]:
    """Collects less often while the differing pairs are walked and their report built (`collecting_less`).
    Every differing pair allocates dicts, tuples and decoded values, most of them kept a while in the bounded
    memos, so the default thresholds ran full and middle collections over them again and again in a `parity
    diff` (in a check, the replay's large old generation already defers the full ones); the diff's values hold
    no reference cycles."""
    return collecting_less(DIFF_GC_THRESHOLDS)


FETCH_PAIRS = 200_000     # differing pairs whose stage values are fetched together (one read per values file and
# round, in each of the diff's processes: larger rounds read each file fewer times and hold more values at once;
# benchmarks/RESULTS.md has the sizes tried)
SLICE_PAIRS = 10_000      # of those, pairs decoded and compared at once (their decoded values held together)


class DiffStream:
    """The differing pairs of two fingerprint sets, in key order, one by one, in bounded memory.

    Iterate it once; its `counts()` are complete afterwards (parity.compare.halves.summarize does both).
    Fingerprints are compared bucket by bucket, digests first (parity.compare.hashdiff); the pairs whose fingerprints
    differ are compared FETCH_PAIRS at a time, stage by stage over all of them (parity.compare.pair_values: one
    read per values file, each distinct (stage, left fingerprint, right fingerprint) fetched, split and compared
    once, only the differing fields decoded). `keep_unpaired`: one-sided keys kept per side (None: all).
    `defer_input`: a pair whose first divergent stage is the input, and whose differing fields decide its
    tolerance tier, comes with its whole input values `Undecoded` and its differing fields in `first_split`
    (the report's tally decodes the whole records of its examples only).
    """

    def __init__(self, left: FingerprintSet, right: FingerprintSet, tolerance: ToleranceSpec,
                 keep_unpaired: int | None = None, key_ranges: frozenset[int] | None = None,
                 defer_input: bool = False) -> None:
        check_compatible(left, right)
        self._left, self._right, self._tolerance = left, right, tolerance
        self._keep = keep_unpaired
        self._ranges = key_ranges
        self.defer_input = defer_input
        self.left_rows = self.right_rows = self.paired = self.matched = 0
        self.left_only = self.right_only = self.duplicate_keys = 0
        self.buckets_whole = self.buckets_drilled = 0  # digest buckets matched whole, drilled into pairs
        self.stage_diverged = {s: 0 for s in STAGES}
        self.stage_within = {s: 0 for s in STAGES}
        self.left_only_keys: list[str] = []
        self.right_only_keys: list[str] = []

    @property
    def sets(self) -> tuple[FingerprintSet, FingerprintSet]:
        return self._left, self._right

    @property
    def keep_unpaired(self) -> int | None:
        return self._keep

    @property
    def tolerance(self) -> ToleranceSpec:
        return self._tolerance

    def of_ranges(self, key_ranges: frozenset[int]) -> DiffStream:
        """A stream of the same sets over some of their key ranges (bucket numbers) only: bucketed sets only."""
        if self._left.buckets is None or self._right.buckets is None:
            raise ValueError("key ranges are the buckets of bucketed sets (parity.sets.buckets)")
        return DiffStream(self._left, self._right, self._tolerance, self._keep, key_ranges, self.defer_input)

    def counts(self) -> DiffCounts:
        """The counts of an iterated stream."""
        return DiffCounts(self.left_rows, self.right_rows, self.paired, self.matched, self.left_only,
                          self.right_only, self.duplicate_keys, FrozenMap(self.stage_diverged),
                          FrozenMap(self.stage_within), tuple(self.left_only_keys),
                          tuple(self.right_only_keys), self._keep)

    def __iter__(self) -> Iterator[PairOutcome]:
        pending: list[_Pending] = []
        waiting = 0
        for found in self._pending():
            pending.append(found)
            waiting += found.lchunk.rows
            if waiting >= FETCH_PAIRS:
                yield from self._outcomes(pending)
                pending, waiting = [], 0
        if pending:
            yield from self._outcomes(pending)

    def differing_pairs(self) -> int:
        """The pairs whose fingerprints differ, found by reading and pairing the fingerprint rows alone (no stage
        value is read). Counts the stream's rows as iterating it would: call it on a stream of its own."""
        return sum(found.lchunk.rows for found in self._pending())

    def _pending(self) -> Iterator[_Pending]:
        """The differing pairs of each chunk pair, counting every row on the way."""
        # matched by their summaries: rows never read
        whole = hashdiff.whole_buckets(self._left, self._right, self._ranges)
        self.left_rows += whole.rows
        self.right_rows += whole.rows
        self.paired += whole.rows
        self.matched += whole.rows
        self.buckets_whole += whole.prefixes
        skip = whole.buckets if self._ranges is None else whole.buckets | _ALL_RANGES - self._ranges
        for lchunk, rchunk in hashdiff.chunks(self._left, self._right, skip):
            found = self._count(lchunk, rchunk, hashdiff.pair(lchunk, rchunk))
            if found is not None:
                yield found

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
        # the differing rows alone wait for the fetch round: at a low share of differing pairs, a round's pairs
        # span many chunks, which would otherwise all be held until it is full
        return _Pending(lchunk.rows_at(li[at], pair_values.GATHERED), rchunk.rows_at(ri[at], pair_values.GATHERED),
                        differs[:, at])

    def _outcomes(self, pending: list[_Pending]) -> Iterator[PairOutcome]:
        """Fetches the pending pairs' differing stage values (one read per values file and side), then compares
        them stage by stage over SLICE_PAIRS pairs at a time (parity.compare.pair_values) and yields their outcomes
        in key order."""
        rnd = pair_values.gather([(p.lchunk, p.rchunk, p.differs) for p in pending])
        fetched = pair_values.fetch(self._left, self._right, rnd)
        for start in range(0, len(rnd.keys), SLICE_PAIRS):
            end = min(start + SLICE_PAIRS, len(rnd.keys))
            results = pair_values.compare_slice(self._left, self._right, rnd, fetched, start, end, self._tolerance,
                                                self.defer_input)
            yield from self._slice_outcomes(rnd, results, start, end)

    def _slice_outcomes(self, rnd: pair_values.Round, results: dict[int, pair_values.StageResult], start: int,
                        end: int) -> Iterator[PairOutcome]:
        count, first = end - start, rnd.first[start:end]
        within = np.zeros((len(STAGES), count), bool)
        shown: list[list[tuple[str, Any, Any]]] = [[] for _ in range(count)]
        deltas: list[dict | None] = [None] * count
        first_fields: list[tuple | None] = [None] * count
        first_splits: list[dict | None] = [None] * count
        for s, result in results.items():
            at = result.at - start
            within[s, at] = result.within
            self.stage_within[STAGES[s]] += int(result.within.sum())
            stage = STAGES[s]
            showing = first[at] == s if stage != "transform" else None
            for i, (n, lv, rv, names) in enumerate(zip(at.tolist(), result.left, result.right, result.fields)):
                if showing is None or showing[i]:
                    shown[n].append((stage, lv, rv))
                if names is not None:
                    first_fields[n] = names
            if result.deltas is not None:
                for n, found in zip(at.tolist(), result.deltas):
                    deltas[n] = found
            if result.splits is not None:
                for n, split in zip(at.tolist(), result.splits):
                    if split is not None:
                        first_splits[n] = split
        differs = rnd.differs[:, start:end].T
        masks = (differs.astype(np.int64) << np.arange(len(STAGES))).sum(axis=1).tolist()
        within_masks = (within.T.astype(np.int64) << np.arange(len(STAGES))).sum(axis=1).tolist()
        # the fingerprints of each pair's differing stages only, pair after pair (stages in order)
        lfps, rfps = rnd.fps[0][:, start:end].T[differs].tolist(), rnd.fps[1][:, start:end].T[differs].tolist()
        at = 0
        for n, (key, key_fp, mask, wmask) in enumerate(zip(rnd.keys[start:end], rnd.key_fps[start:end], masks,
                                                            within_masks)):
            differing = _STAGE_SETS[mask]
            after = at + len(differing)
            lv, rv = {}, {}
            for stage, a, b in shown[n]:
                lv[stage], rv[stage] = a, b
            yield PairOutcome(key=key, key_fp=key_fp, differing=differing, within=_STAGE_SETS[wmask],
                              first_stage=differing[0], diverged=mask != wmask, left=lv, right=rv,
                              feature_deltas=deltas[n] if deltas[n] is not None else {},
                              fps=dict(zip(differing, zip(lfps[at:after], rfps[at:after]))),
                              first_fields=first_fields[n], first_split=first_splits[n])
            at = after


def summarized(stream: DiffStream, tally: Tally) -> DiffSummary:
    """The summary of `stream` (not yet iterated): its differing pairs added to the empty `tally` in key order."""
    return DiffSummary(tallied(stream, tally), tally.frozen())


def tallied(stream: DiffStream, tally: Tally) -> DiffCounts:
    """Adds the differing pairs of `stream` (not yet iterated) to `tally` in key order; the stream's counts."""
    for m in stream:
        tally.add(m)
    return stream.counts()


_ALL_RANGES = frozenset(range(1 << KEY_RANGE_BITS))  # every key range (bucket number) of a bucketed set
_STAGE_INDICES = [tuple(s for s in range(len(STAGES)) if mask >> s & 1) for mask in range(1 << len(STAGES))]
_STAGE_SETS = [tuple(STAGES[s] for s in indices) for indices in _STAGE_INDICES]  # stage names by bit mask


@dataclass
class _Pending:
    """Pairs of one chunk whose fingerprints differ: their rows on each side, pair by pair, and the (stage, pair)
    mask of differences."""

    lchunk: hashdiff.Chunk
    rchunk: hashdiff.Chunk
    differs: np.ndarray
