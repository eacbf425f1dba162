"""What a diff found, as one frozen value: the record counts and the tally of its differing pairs (and, with a
model, the model stage compared), which is all the report is rendered from (parity.report.model).

Two summaries of consecutive key ranges merge (`DiffSummary.merged`) into exactly the summary of both ranges
read in order, so the pairs of one diff can be summarized in parts: in two processes (parity.compare.halves) or
by anything else that splits a diff by key range, and give the same report byte for byte.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from parity.compare.frozen import FrozenMap
from parity.compare.model_stage import ModelStage
from parity.compare.tallied import FrozenTally
from parity.stages import STAGES


@dataclass(frozen=True)
class DiffCounts:
    """The record counts of a diff over some key ranges: rows per side, how they paired, per stage the pairs
    whose fingerprints differ and those of them within tolerance, and the first one-sided keys per side (at most
    `keep`, in key order; None keeps all)."""

    left_rows: int = 0
    right_rows: int = 0
    paired: int = 0
    matched: int = 0
    left_only: int = 0
    right_only: int = 0
    duplicate_keys: int = 0
    stage_diverged: Mapping[str, int] = field(default_factory=lambda: _per_stage({}))
    stage_within: Mapping[str, int] = field(default_factory=lambda: _per_stage({}))
    left_only_keys: tuple[str, ...] = ()
    right_only_keys: tuple[str, ...] = ()
    keep: int | None = None

    _SUMS = ("left_rows", "right_rows", "paired", "matched", "left_only", "right_only", "duplicate_keys")

    def merged(self, later: DiffCounts) -> DiffCounts:
        """These counts followed by those of the key ranges after them."""
        def first(mine: tuple[str, ...], theirs: tuple[str, ...]) -> tuple[str, ...]:
            return (mine + theirs)[:self.keep]

        return DiffCounts(
            **{name: getattr(self, name) + getattr(later, name) for name in self._SUMS},
            stage_diverged=FrozenMap({s: self.stage_diverged[s] + later.stage_diverged[s] for s in STAGES}),
            stage_within=FrozenMap({s: self.stage_within[s] + later.stage_within[s] for s in STAGES}),
            left_only_keys=first(self.left_only_keys, later.left_only_keys),
            right_only_keys=first(self.right_only_keys, later.right_only_keys), keep=self.keep)


def _per_stage(counts: Mapping[str, int]) -> Mapping[str, int]:
    return FrozenMap({s: counts.get(s, 0) for s in STAGES})


@dataclass(frozen=True)
class DiffSummary:
    """What a diff found (see the module docstring). `tally` is the differing pairs' tally, frozen
    (parity.compare.tallied); `model` the model stage compared, when both sides have one."""

    counts: DiffCounts
    tally: FrozenTally
    model: ModelStage | None = None

    def merged(self, later: DiffSummary) -> DiffSummary:
        """This summary followed by that of the key ranges after its own. Neither is changed. A model stage is
        compared over a whole diff once its pairs are all tallied, so summaries with one do not merge."""
        if self.model is not None or later.model is not None:
            raise ValueError("a summary with its model stage compared is whole: merge before comparing the model")
        return DiffSummary(self.counts.merged(later.counts), self.tally.merged(later.tally))

    def with_model(self, model: ModelStage) -> DiffSummary:
        return DiffSummary(self.counts, self.tally, model)

    def with_histograms(self, histograms: Mapping[str, Any]) -> DiffSummary:
        """This summary with its features' histograms computed elsewhere, over the whole diff
        (parity.compare.engine)."""
        return DiffSummary(self.counts, self.tally.with_histograms(histograms), self.model)
