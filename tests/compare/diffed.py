"""A diff held whole in memory, for tests on small sets: every differing pair in a list beside the counts."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parity.compare.diff import DiffStream
from parity.compare.outcomes import PairOutcome
from parity.compare.summary import DiffCounts
from parity.config import ToleranceSpec
from parity.sets.fingerprint_set import FingerprintSet


@dataclass
class Diffed:
    counts: DiffCounts
    mismatches: list[PairOutcome]        # in key order

    def __getattr__(self, name: str) -> Any:  # the counts' fields, as a stream's (left_rows, paired, ...)
        return getattr(self.counts, name)


def compare(left: FingerprintSet, right: FingerprintSet, tolerance: ToleranceSpec) -> Diffed:
    """Pairs the two sets by key and compares them stage by stage, keeping every differing pair."""
    stream = DiffStream(left, right, tolerance)
    mismatches = list(stream)
    return Diffed(stream.counts(), mismatches)
