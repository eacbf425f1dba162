"""A large diff's differing pairs tallied in two processes, one key range each.

The diff's cost is per differing pair (fetching, splitting and decoding its stage values, the tolerance tier,
the cause), and it ran on one core once both replays had ended. Two bucketed sets (parity.sets.buckets) are key
ranges on disk, so their pairs split into two consecutive ranges that need nothing from each other: this process
tallies the first, a child process (`python -m parity.report.halves`) the second, and the child's tally and
counts are added after this process's own (`Tally.merge`, `DiffStream.add_counts`): the same report, byte for
byte, as one process reading every pair in key order.

It is done only where it pays (`_split`): two cores or more, two bucketed local sets, at least MIN_ROWS rows to
pair outside the buckets their summaries match, and at least MIN_PAIRS differing pairs expected among them, as
the first such bucket's share of differing pairs foretells (its rows are read and paired for that, no value is
read). A second interpreter takes a second or two to start, and each process reads every values file its pairs
touch: a few thousand differing pairs are faster in one process.

    halves.tally_pairs(stream, tally)   # then stream's counts are complete, as after iterating it
"""
from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Sequence

from parity.compare.diff import DiffOutcome, DiffStream, diff_gc
from parity.console import signals
from parity.console.cores import usable_cores
from parity.errors import RunnerError, portable
from parity.report.tally import Tally
from parity.sets.fingerprint_set import BUCKET_BITS, FingerprintSet
from parity.storage import urls

MIN_ROWS = 200_000  # rows of both sides to pair, outside the buckets matched by their summaries
MIN_PAIRS = 40_000  # differing pairs expected (from the first bucket to pair); fewer: one process


def tally_pairs(outcome: DiffOutcome | DiffStream, tally: Tally) -> None:
    """Adds `outcome`'s differing pairs to `tally` in key order; a `DiffStream`'s counts are complete afterwards.
    In two processes where `_split` finds it pays, else here, pair by pair."""
    ranges = _split(outcome)
    if ranges is None:
        for m in outcome.mismatches:
            tally.add(m)
        return
    assert isinstance(outcome, DiffStream)
    first, second = ranges
    child = _Child.start(outcome, second, tally.fresh())
    try:
        mine = outcome.of_ranges(first)
        for m in mine:
            tally.add(m)
        theirs, counts = child.result()
    finally:
        child.close()
    outcome.add_counts(mine.counts())
    outcome.add_counts(counts)
    tally.merge(theirs)


def _split(outcome: DiffOutcome | DiffStream) -> tuple[frozenset[int], frozenset[int]] | None:
    """Two consecutive sets of key ranges with about half the rows to pair each, or None where one process
    does better: a list of pairs, one core, sets not both bucketed and local, or too few rows to pair."""
    if not isinstance(outcome, DiffStream) or usable_cores() < 2:
        return None
    left, right = outcome.sets
    if left.buckets is None or right.buckets is None or urls.is_url(left.path) or urls.is_url(right.path):
        return None
    from parity.compare import hashdiff

    whole = hashdiff.whole_buckets(left, right).buckets
    rows = [0] * (1 << BUCKET_BITS)
    for fset in (left, right):
        for bucket in fset.buckets:
            if bucket["bucket"] not in whole:
                rows[bucket["bucket"]] += bucket["rows"]
    total = sum(rows)
    if total < MIN_ROWS or _expected_pairs(outcome, rows, total) < MIN_PAIRS:
        return None
    seen = 0
    for cut, count in enumerate(rows):
        if seen + count / 2 >= total / 2:
            break
        seen += count
    if not 0 < seen < total:
        return None
    return frozenset(range(cut)), frozenset(range(cut, len(rows)))


def _expected_pairs(outcome: DiffStream, rows: list[int], total: int) -> float:
    """The differing pairs among `total` rows to pair, foretold by the first bucket with rows to pair."""
    first = next(bucket for bucket, count in enumerate(rows) if count)
    return outcome.of_ranges(frozenset({first})).differing_pairs() * total / rows[first]


def _plain_set(fset: FingerprintSet) -> tuple[str, dict[str, Any], list[dict[str, Any]] | None]:
    return fset.path, fset.manifest, fset.buckets


class _Child:
    """The child process tallying the second key ranges, and its result file."""

    def __init__(self, proc: subprocess.Popen, scratch: str) -> None:
        self._proc, self._scratch = proc, scratch

    @classmethod
    def start(cls, stream: DiffStream, ranges: frozenset[int], tally: Tally) -> _Child:
        scratch = tempfile.mkdtemp(prefix="parity-diff-")
        left, right = stream.sets
        request = {"left": _plain_set(left), "right": _plain_set(right), "tolerance": stream.tolerance,
                   "keep": stream.keep_unpaired, "ranges": ranges, "defer": stream.defer_input, "tally": tally,
                   "options": urls.options(),
                   "result": os.path.join(scratch, "result.pickle")}
        with open(os.path.join(scratch, "request.pickle"), "wb") as handle:
            pickle.dump(request, handle, protocol=pickle.HIGHEST_PROTOCOL)
        env = signals.child_env()  # the child ends with this process, even one killed with SIGKILL
        env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
        proc = subprocess.Popen([sys.executable, "-m", "parity.report.halves", scratch], env=env,
                                stdin=subprocess.DEVNULL)
        return cls(proc, scratch)

    def result(self) -> tuple[Tally, dict[str, Any]]:
        """The child's tally and its stream's counts, or the error it raised."""
        code = self._proc.wait()
        try:
            with open(os.path.join(self._scratch, "result.pickle"), "rb") as handle:
                status, value = pickle.load(handle)
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            raise RunnerError(f"the diff's second half (a child process) ended with exit code {code} and no "
                              f"result ({type(exc).__name__}); its output is above") from exc
        if status == "ok":
            return value
        raise value

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        shutil.rmtree(self._scratch, ignore_errors=True)


def child_main(argv: Sequence[str]) -> int:
    signals.follow_parent_from_env()
    scratch = argv[0]
    with open(os.path.join(scratch, "request.pickle"), "rb") as handle:
        request = pickle.load(handle)
    try:
        urls.configure(request["options"])
        left, right = (FingerprintSet(path, manifest, buckets=buckets)
                       for path, manifest, buckets in (request["left"], request["right"]))
        stream = DiffStream(left, right, request["tolerance"], request["keep"], request["ranges"], request["defer"])
        tally: Tally = request["tally"]
        with diff_gc():
            for m in stream:
                tally.add(m)
        outcome: tuple[str, Any] = ("ok", (tally, stream.counts()))
    except BaseException as exc:  # every error goes back to the parent, which raises it
        outcome = ("error", portable(exc))
    with open(request["result"], "wb") as handle:
        pickle.dump(outcome, handle, protocol=pickle.HIGHEST_PROTOCOL)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
