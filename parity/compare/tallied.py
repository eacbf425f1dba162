"""A tally as one frozen value (`FrozenTally`): what a `DiffSummary` holds of its differing pairs, made by
`Tally.frozen` (parity.compare.tally) once a key range's pairs are all added, and read by the report.

Nothing in it can be changed once built: counts are read-only mappings, examples and histograms frozen JSON
(read-only mappings and tuples; `thawed` gives them back as plain JSON for the report), the numbers behind the
histograms packed bytes. The read-only mappings are `FrozenMap`s (parity.compare.frozen), which pickle as they are
(a child process or an engine worker sends these). Two frozen tallies of consecutive key ranges merge
(`FrozenTally.merged`) into a new one, exactly the tally of both ranges read in order; both are left as they were.
"""
from __future__ import annotations

from array import array
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Mapping

from parity.compare.frozen import FrozenMap, frozen_json, thawed
from parity.compare.histograms import histograms_of
from parity.compare.model_stage import Upstream


_NO_STATS = (0, 0, None)


@dataclass(frozen=True)
class FrozenFeatureStats:
    """Per feature, over the differing pairs: (mismatched, within tolerance, largest |delta|); unless redacted
    (`numbers` None), the (left, right) numbers behind the histograms as packed doubles; or the histograms
    themselves, computed elsewhere over a whole diff (`histograms`, parity.compare.engine)."""

    stats: Mapping[str, tuple[int, int, float | None]]
    numbers: Mapping[str, tuple[bytes, bytes]] | None
    histograms: Mapping[str, Any] | None = None

    def merged(self, later: FrozenFeatureStats) -> FrozenFeatureStats:
        """These statistics followed by those of a later key range's pairs (their numbers after these)."""
        if self.histograms is not None or later.histograms is not None:
            raise ValueError("histograms are of a whole diff: merge the statistics before adding them")
        stats = dict(self.stats)
        for name, (mismatched, within, delta) in later.stats.items():
            mine = stats.get(name, _NO_STATS)
            largest = delta if delta is not None and (mine[2] is None or delta > mine[2]) else mine[2]
            stats[name] = (mine[0] + mismatched, mine[1] + within, largest)
        numbers = self.numbers
        if self.numbers is not None and later.numbers is not None:
            joined = dict(self.numbers)
            for name, (lefts, rights) in later.numbers.items():
                mine_left, mine_right = joined.get(name, (b"", b""))
                joined[name] = (mine_left + lefts, mine_right + rights)
            numbers = FrozenMap(joined)
        return FrozenFeatureStats(FrozenMap(stats), numbers)

    def with_histograms(self, histograms: Mapping[str, Any]) -> FrozenFeatureStats:
        """These statistics with every feature's histograms given (a feature absent has none), which `features`
        then gives instead of binning numbers of its own; the numbers are dropped."""
        return FrozenFeatureStats(self.stats, FrozenMap({}) if self.numbers is not None else None,
                                  FrozenMap({name: frozen_json(h) for name, h in histograms.items()}))

    def features(self, feature_names: tuple[list[str], list[str]], redact: bool = False) -> list[dict]:
        """The report's `features`: one entry per feature named by either side or counted here, by name."""
        left_names, right_names = set(feature_names[0]), set(feature_names[1])
        features = []
        for name in sorted(set(self.stats) | left_names | right_names):
            mismatched, within, delta = self.stats.get(name, _NO_STATS)
            presence = "both" if (name in left_names) == (name in right_names) else \
                "left" if name in left_names else "right"
            feature = {"name": name, "stage": "transform", "mismatched": mismatched, "within_tolerance": within,
                       "max_abs_delta": None if redact else delta, "presence": presence}
            if not redact:  # histograms are built from raw values: a redacted report has none
                if self.histograms is not None:
                    feature["histograms"] = thawed(self.histograms.get(name))
                else:
                    lefts, rights = (self.numbers or {}).get(name, (b"", b""))
                    feature["histograms"] = histograms_of(array("d", lefts), array("d", rights))
            features.append(feature)
        return features


@dataclass(frozen=True)
class FrozenNoise:
    """Records (and per feature, record values) whose difference only analysis noise explains."""

    records: int
    features: Mapping[str, int]

    def merged(self, later: FrozenNoise) -> FrozenNoise:
        return FrozenNoise(self.records + later.records, _summed(self.features, later.features))


@dataclass(frozen=True)
class FrozenTally:
    """The report's view of a key range's differing pairs (see the module docstring): counts per first stage and
    per (stage, cause), the first `examples` examples of each (stage, cause) in key order, the pairs within
    tolerance, analysis noise, per-feature statistics, and (with a model stage) each differing pair's judgement
    by key (`upstream`), which the model stage is compared with."""

    examples: int
    redact: bool
    first_counts: Mapping[str, int]
    cause_counts: Mapping[tuple[str, str], int]
    example_list: tuple[Mapping[str, Any], ...]
    within: int
    noise_count: FrozenNoise
    feature_stats: FrozenFeatureStats
    upstream: Mapping[str, Upstream] | None = None

    def merged(self, later: FrozenTally) -> FrozenTally:
        """This tally followed by that of the key range after its own, as a new tally (this one's settings)."""
        kept = Counter((e["stage"], e["cause"]) for e in self.example_list)
        examples = list(self.example_list)
        for example in later.example_list:  # the first `examples` of each (stage, cause), in key order
            kind = (example["stage"], example["cause"])
            if kept[kind] < self.examples:
                kept[kind] += 1
                examples.append(example)
        upstream = self.upstream
        if upstream is not None and later.upstream is not None:
            upstream = FrozenMap({**upstream, **later.upstream})
        return FrozenTally(self.examples, self.redact,
                           _summed(self.first_counts, later.first_counts),
                           _summed(self.cause_counts, later.cause_counts),
                           tuple(examples), self.within + later.within, self.noise_count.merged(later.noise_count),
                           self.feature_stats.merged(later.feature_stats), upstream)

    def with_histograms(self, histograms: Mapping[str, Any]) -> FrozenTally:
        """This tally with its features' histograms computed elsewhere (`FrozenFeatureStats.with_histograms`)."""
        return replace(self, feature_stats=self.feature_stats.with_histograms(histograms))


def _summed(mine: Mapping[Any, int], theirs: Mapping[Any, int]) -> Mapping[Any, int]:
    summed = dict(mine)
    for name, count in theirs.items():
        summed[name] = summed.get(name, 0) + count
    return FrozenMap(summed)
