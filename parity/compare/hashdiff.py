"""Hash-first pairing of two fingerprint sets, bucket by bucket (pure, vectorised, bounded memory).

Both sets are sorted by key_fp, so they are read side by side, CHUNK_ROWS rows at a time, and compared in
digest buckets: a digest bucket is a key_fp range (its leading DIGEST_BITS bits), the same on both sides. Per bucket each
side gets its row count and one digest per stage: the sum (mod 2^64) of a 64-bit mix of the key and the stage
fingerprint, so a digest does not depend on row order. A bucket whose counts and digests agree at every stage
and that holds no duplicate key is matched as a whole (data-diff's checksums, applied per stage); the other
buckets are drilled into: their records are paired by (key, ordinal among the key's duplicates) and compared
stage by stage, with numpy over whole columns. Two buckets with different contents get equal digests with a
probability of about 2^-64 per stage.

Two sets the replay wrote as key-range bucket files (parity.sets.buckets) carry a summary per key range: a
bucket whose summaries agree (`whole_buckets`) is matched without reading its rows, and only the other buckets'
files are read and go through the chunks below.

Example:
    >>> for chunk in chunks(left_set, right_set):
    ...     pairs = pair(chunk.left, chunk.right)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from parity.sets.buckets import key_words as _words
from parity.sets.buckets import row_digests
from parity.sets.buckets import uint64_column as _uint64
from parity.sets.fingerprint_set import FP_SCHEMA, FingerprintSet
from parity.stages import STAGES

DIGEST_BITS = 16          # 65,536 key ranges: ~150 records per bucket at 10M records
CHUNK_ROWS = 65_536       # fingerprint rows read per side before the complete buckets among them are compared
_ALL_DIGEST_BUCKETS = 1 << DIGEST_BITS


@dataclass
class Chunk:
    """Fingerprint rows of one side for a range of complete buckets, in key order."""

    table: pa.Table
    hi: np.ndarray          # key_fp as two big-endian uint64 words: (hi, lo) order is the bytes' order
    lo: np.ndarray
    fps: list[np.ndarray]   # one uint64 array per stage

    @property
    def rows(self) -> int:
        return len(self.hi)

    def column(self, name: str, positions: np.ndarray) -> list:
        return self.table.column(name).take(pa.array(positions, type=pa.int64())).to_pylist()

    def rows_at(self, positions: np.ndarray, columns: tuple[str, ...]) -> Chunk:
        """The rows at `positions` alone, in that order, with the named table columns only: a chunk that keeps
        none of this one's buffers alive (what waits for a fetch round holds its differing rows, not the
        chunks they came from)."""
        return Chunk(table=self.table.select(list(columns)).take(pa.array(positions, type=pa.int64())),
                     hi=self.hi[positions], lo=self.lo[positions], fps=[f[positions] for f in self.fps])


@dataclass
class Pairs:
    """The outcome of pairing one chunk of each side (positions are row positions within the chunks)."""

    left: np.ndarray            # paired rows, in left row order
    right: np.ndarray
    left_only: np.ndarray
    right_only: np.ndarray
    duplicates: int             # rows that repeat a key already seen on their side
    matched_whole: int          # pairs in buckets matched by their digests (not in left/right)
    buckets_whole: int
    buckets_drilled: int


@dataclass(frozen=True)
class WholeBuckets:
    """Key-range buckets of two bucketed sets (parity.sets.buckets) matched by their summaries alone: their
    rows are never read."""

    buckets: frozenset[int]     # the key ranges (bucket numbers) matched
    rows: int                   # rows on each side (equal)
    prefixes: int               # the hashdiff buckets (DIGEST_BITS) their rows fall in


def whole_buckets(left: FingerprintSet, right: FingerprintSet, among: frozenset[int] | None = None) -> WholeBuckets:
    """The buckets (of `among`, or all) whose summaries agree on both sides (rows, duplicate rows none, the key
    digest and every stage's), as `pair` would find every hashdiff bucket within them; none unless both sets are
    bucketed."""
    if left.buckets is None or right.buckets is None:
        return WholeBuckets(frozenset(), 0, 0)
    theirs = {b["bucket"]: b for b in right.buckets}
    same = [b for b in left.buckets if b["bucket"] in theirs and _agree(b, theirs[b["bucket"]])
            and (among is None or b["bucket"] in among)]
    return WholeBuckets(frozenset(b["bucket"] for b in same), sum(b["rows"] for b in same),
                        sum(b["prefixes"] for b in same))


def _agree(left: dict, right: dict) -> bool:
    return (left["rows"] == right["rows"] and left["duplicates"] == right["duplicates"] == 0
            and left["digests"] == right["digests"] and left["prefixes"] == right["prefixes"])


def chunks(left: FingerprintSet, right: FingerprintSet,
           skip: frozenset[int] = frozenset()) -> Iterator[tuple[Chunk, Chunk]]:
    """Both sets' rows, a range of complete buckets at a time (the same range on both sides); the rows of the
    bucketed sets' buckets in `skip` (`whole_buckets`) are left out."""
    lstream, rstream = _Stream(left, skip), _Stream(right, skip)
    while True:
        lstream.fill()
        rstream.fill()
        if lstream.finished and rstream.finished:
            return
        bound = min(lstream.bound(), rstream.bound())
        yield lstream.take(bound), rstream.take(bound)


def pair(left: Chunk, right: Chunk) -> Pairs:
    """Pairs the rows of two chunks: duplicates of a key pair in row order (input-fingerprint order)."""
    lord, rord = _ordinals(left.hi, left.lo), _ordinals(right.hi, right.lo)
    lclean, rclean, whole, drilled = _clean_rows(left, right, lord, rord)
    lsel, rsel = np.flatnonzero(~lclean), np.flatnonzero(~rclean)
    side = np.r_[np.zeros(len(lsel), np.int8), np.ones(len(rsel), np.int8)]
    hi, lo = np.r_[left.hi[lsel], right.hi[rsel]], np.r_[left.lo[lsel], right.lo[rsel]]
    ords = np.r_[lord[lsel], rord[rsel]]
    order = np.lexsort((side, ords, lo, hi))
    hi, lo, ords = hi[order], lo[order], ords[order]
    at = np.flatnonzero((hi[1:] == hi[:-1]) & (lo[1:] == lo[:-1]) & (ords[1:] == ords[:-1]))
    li, ri = lsel[order[at]], rsel[order[at + 1] - len(lsel)]   # within a (key, ordinal) the left row sorts first
    lpaired, rpaired = lclean.copy(), rclean.copy()
    lpaired[li] = True
    rpaired[ri] = True
    return Pairs(left=li, right=ri, left_only=np.flatnonzero(~lpaired), right_only=np.flatnonzero(~rpaired),
                 duplicates=int((lord > 0).sum() + (rord > 0).sum()), matched_whole=int(lclean.sum()),
                 buckets_whole=whole, buckets_drilled=drilled)


class _Stream:
    """Reads one set in key order and hands out the rows of complete buckets."""

    def __init__(self, fset: FingerprintSet, skip: frozenset[int] = frozenset()) -> None:
        self._tables = fset.iter_tables(CHUNK_ROWS, skip)
        self._table = FP_SCHEMA.empty_table()
        self._buckets = np.zeros(0, np.int64)
        self._done = False

    @property
    def finished(self) -> bool:
        return self._done and self._table.num_rows == 0

    def fill(self) -> None:
        """Reads until CHUNK_ROWS rows spanning more than one bucket are buffered, or the set ends."""
        added = [self._table]
        rows = self._table.num_rows
        while not self._done and (rows < CHUNK_ROWS or self._one_bucket(added)):
            table = next(self._tables, None)
            if table is None:
                self._done = True
            elif table.num_rows:
                added.append(table)
                rows += table.num_rows
        if len(added) > 1:
            self._table = pa.concat_tables(added)
            self._buckets = _bucket_of(_words(self._table.column("key_fp"))[0])

    @staticmethod
    def _one_bucket(tables: list[pa.Table]) -> bool:
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return False
        first = _bucket_of(_words(tables[0].column("key_fp").slice(0, 1))[0])[0]
        last_table = tables[-1]
        last = _bucket_of(_words(last_table.column("key_fp").slice(last_table.num_rows - 1, 1))[0])[0]
        return first == last

    def bound(self) -> int:
        """Buckets below this one are complete in the buffer."""
        if self._done or not self._table.num_rows:
            return _ALL_DIGEST_BUCKETS
        return int(self._buckets[-1])

    def take(self, bound: int) -> Chunk:
        cut = int(np.searchsorted(self._buckets, bound, side="left"))
        head, self._table = self._table.slice(0, cut), self._table.slice(cut)
        self._buckets = self._buckets[cut:]
        hi, lo = _words(head.column("key_fp"))
        return Chunk(table=head, hi=hi, lo=lo, fps=[_uint64(head.column(f"{stage}_fp")) for stage in STAGES])


def _bucket_of(hi: np.ndarray) -> np.ndarray:
    return (hi >> np.uint64(64 - DIGEST_BITS)).astype(np.int64)






def _ordinals(hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """0 for the first record of a key, 1 for its first duplicate, ... (rows are sorted by key)."""
    n = len(hi)
    if n == 0:
        return np.zeros(0, np.int64)
    starts = np.r_[True, (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])]
    index = np.arange(n)
    return index - np.maximum.accumulate(np.where(starts, index, 0))




def _digests(chunk: Chunk, ords: np.ndarray, index: np.ndarray, buckets: int) -> np.ndarray:
    """Per bucket: [rows, duplicate rows, key digest, one digest per stage] (uint64; sums wrap)."""
    out = np.zeros((3 + len(STAGES), buckets), np.uint64)
    if chunk.rows == 0:
        return out
    starts = np.flatnonzero(np.r_[True, index[1:] != index[:-1]])
    at = index[starts]
    columns = [np.ones(chunk.rows, np.uint64), (ords > 0).astype(np.uint64)]
    columns += row_digests(chunk.hi, chunk.lo, chunk.fps)  # the key's, then each stage's
    for c, values in enumerate(columns):
        out[c, at] = np.add.reduceat(values, starts)
    return out


def _clean_rows(left: Chunk, right: Chunk, lord: np.ndarray,
                rord: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Rows of buckets whose counts and per-stage digests agree and that hold no duplicate key."""
    lb, rb = _bucket_of(left.hi), _bucket_of(right.hi)
    names = np.union1d(lb, rb)
    li, ri = np.searchsorted(names, lb), np.searchsorted(names, rb)
    ld, rd = _digests(left, lord, li, len(names)), _digests(right, rord, ri, len(names))
    clean = (ld == rd).all(axis=0) & (ld[1] == 0) & (rd[1] == 0)
    whole = int(clean.sum())
    return clean[li], clean[ri], whole, len(names) - whole
