"""A diff's summary in one process or two, one key range each: the same summary either way.

The diff's cost is per differing pair (fetching, splitting and decoding its stage values, the tolerance tier,
the cause), and it ran on one core once both replays had ended. Two bucketed sets (parity.sets.buckets) are key
ranges on disk, so their pairs split into two consecutive ranges that need nothing from each other: this process
summarizes the first, a child process (`python -m parity.compare.halves`) the second, and the child's summary is
merged after this process's own (`DiffSummary.merged`): the same report, byte for byte, as one process reading
every pair in key order.

It is done only where it pays (`_split`): two cores or more, two bucketed local sets, at least MIN_ROWS rows to
pair outside the buckets their summaries match, and at least MIN_PAIRS differing pairs expected among them, as
the first such bucket's share of differing pairs foretells (its rows are read and paired for that, no value is
read). A second interpreter takes a second or two to start, and each process reads every values file its pairs
touch: a few thousand differing pairs are faster in one process.

    summary = halves.summarize(stream, tally)   # `tally` empty; the stream not yet iterated
"""
from __future__ import annotations

import sys
from typing import Any

from parity.compare.diff import DiffStream, diff_gc, summarized
from parity.compare.summary import DiffSummary
from parity.compare.tally import Tally
from parity.console import children
from parity.console.cores import usable_cores
from parity.sets.fingerprint_set import KEY_RANGE_BITS, FingerprintSet
from parity.storage import urls
from parity.storage.context import Storage

MIN_ROWS = 200_000  # rows of both sides to pair, outside the buckets matched by their summaries
MIN_PAIRS = 40_000  # differing pairs expected (from the first bucket to pair); fewer: one process


def summarize(stream: DiffStream, tally: Tally) -> DiffSummary:
    """`stream`'s summary, its differing pairs added to the empty `tally` in key order: in two processes where
    `_split` finds it pays, else here, pair by pair."""
    ranges = _split(stream)
    if ranges is None:
        return summarized(stream, tally)
    first, second = ranges
    child = _start(stream, second, tally.fresh())
    try:
        mine = summarized(stream.of_ranges(first), tally)
        theirs: DiffSummary = child.result()
    finally:
        child.close()
    return mine.merged(theirs)


def _split(stream: DiffStream) -> tuple[frozenset[int], frozenset[int]] | None:
    """Two consecutive sets of key ranges with about half the rows to pair each, or None where one process
    does better: one core, sets not both bucketed and local, or too few rows to pair."""
    if usable_cores() < 2:
        return None
    left, right = stream.sets
    if left.buckets is None or right.buckets is None or urls.is_url(left.path) or urls.is_url(right.path):
        return None
    from parity.compare import hashdiff

    whole = hashdiff.whole_buckets(left, right).buckets
    rows = [0] * (1 << KEY_RANGE_BITS)
    for fset in (left, right):
        for bucket in fset.buckets:
            if bucket["bucket"] not in whole:
                rows[bucket["bucket"]] += bucket["rows"]
    total = sum(rows)
    if total < MIN_ROWS or _expected_pairs(stream, rows, total) < MIN_PAIRS:
        return None
    seen = 0
    for cut, count in enumerate(rows):
        if seen + count / 2 >= total / 2:
            break
        seen += count
    if not 0 < seen < total:
        return None
    return frozenset(range(cut)), frozenset(range(cut, len(rows)))


def _expected_pairs(stream: DiffStream, rows: list[int], total: int) -> float:
    """The differing pairs among `total` rows to pair, foretold by the first bucket with rows to pair."""
    first = next(bucket for bucket, count in enumerate(rows) if count)
    return stream.of_ranges(frozenset({first})).differing_pairs() * total / rows[first]


def _plain_set(fset: FingerprintSet) -> tuple[str, dict[str, Any], list[dict[str, Any]] | None, Storage]:
    return fset.path, fset.manifest, fset.buckets, fset.storage


def _start(stream: DiffStream, ranges: frozenset[int], tally: Tally) -> children.Child:
    """The child process tallying the key ranges `ranges` into `tally` (`_summarize_half`)."""
    left, right = stream.sets
    request = {"left": _plain_set(left), "right": _plain_set(right), "tolerance": stream.tolerance,
               "keep": stream.keep_unpaired, "ranges": ranges, "defer": stream.defer_input, "tally": tally}
    return children.Child.start("the diff's second half (a child process)", "parity.compare.halves", request)


def _summarize_half(request: dict[str, Any]) -> DiffSummary:
    """The child's work: the summary of its key ranges."""
    left, right = (FingerprintSet(path, manifest, buckets=buckets, storage=storage)
                   for path, manifest, buckets, storage in (request["left"], request["right"]))
    stream = DiffStream(left, right, request["tolerance"], request["keep"], request["ranges"], request["defer"])
    with diff_gc():
        return summarized(stream, request["tally"])


if __name__ == "__main__":
    sys.exit(children.serve(sys.argv[1:], _summarize_half))
