"""What the report needs of the differing pairs, gathered pair by pair in key order (pure, deterministic).

`Tally.add` takes a `PairOutcome` at a time: counts per first stage and cause, the first examples of each
(stage, cause), per-feature statistics and the numbers behind their histograms. A tally is the accumulator of one
key range; `Tally.frozen` gives what it gathered as one frozen value (parity.compare.tallied), which is what a
`DiffSummary` holds: two of consecutive key ranges merge into exactly the tally of both ranges read in order, so
the pairs of one diff can be tallied in parts (parity.compare.halves, parity.compare.engine) and give the same
report byte for byte.
"""
from __future__ import annotations

import json
import math
import re
from array import array
from collections import Counter
from typing import Any

import numpy as np

from parity.compare.causes import CauseContext, classify
from parity.compare.outcomes import PairOutcome
from parity.compare.model_stage import Upstream
from parity.compare.noise import AnalysisNoise
from parity.compare.outcomes import resolved
from parity.config import ToleranceSpec
from parity.encoding import canonical
from parity.compare.frozen import FrozenMap, frozen_json
from parity.compare.tallied import FrozenFeatureStats, FrozenNoise, FrozenTally


class Tally:
    """The report's view of the differing pairs read so far (see the module docstring)."""

    def __init__(self, cause_context: CauseContext, redact: bool, examples: int,
                 noise: AnalysisNoise = AnalysisNoise(), tolerance: ToleranceSpec = ToleranceSpec(),
                 track_upstream: bool = False) -> None:
        self.cause_context, self.redact, self.examples = cause_context, redact, examples
        self.noise, self.tolerance = noise, tolerance  # the user's tolerance: noise is what it does not take
        self.noise_records = 0
        self.noise_features: dict[str, int] = {}
        self.first_counts: Counter = Counter()
        self.cause_counts: Counter = Counter()
        self.kept: Counter = Counter()
        self.example_list: list[dict] = []      # in key order (the report sorts them by stage and cause)
        self.feature_stats = FeatureStats(numeric_pairs=not redact)
        self.within = 0
        self._classified: dict[tuple, tuple[str, str]] = {}
        # with a model stage: each differing pair's judgement (key -> Upstream), which the model stage carries on
        self.upstream: dict[str, Upstream] | None = {} if track_upstream else None

    def fresh(self) -> Tally:
        """An empty tally with this one's settings (for another key range)."""
        return Tally(self.cause_context, self.redact, self.examples, self.noise, self.tolerance,
                     self.upstream is not None)

    def add(self, m: PairOutcome) -> None:
        if self.upstream is not None:
            self.upstream[m.key] = Upstream(m.diverged, m.first_stage)
        self.feature_stats.add(m)
        explained = self._noise(m) if self.noise.bounds and m.feature_deltas else ()
        if not m.diverged:
            self.within += 1
            if explained:
                self.noise_records += 1
            return
        stage, (cause, explanation) = m.first_stage, _cause(m, self.cause_context, self.redact, self._classified,
                                                            noise=explained)
        self.first_counts[stage] += 1
        self.cause_counts[(stage, cause)] += 1
        if self.kept[(stage, cause)] >= self.examples:
            return
        if explanation is None:  # worded for the examples only
            explanation = _cause(m, self.cause_context, self.redact, self._classified, worded=True,
                                 noise=explained)[1]
        self.kept[(stage, cause)] += 1
        self.example_list.append({"key": _key(m, self.redact), "stage": stage, "cause": cause,
                                  "left": _json_value(resolved(m.left.get(stage)), self.redact),
                                  "right": _json_value(resolved(m.right.get(stage)), self.redact),
                                  "explanation": explanation})

    def _noise(self, m: PairOutcome) -> tuple[str, ...]:
        """The features of a pair whose differences only analysis noise takes as within (counted per feature)."""
        left, right = m.left.get("transform"), m.right.get("transform")
        if not isinstance(left, dict) or not isinstance(right, dict):
            return ()
        found = tuple(name for name, (ok, _delta) in sorted(m.feature_deltas.items())
                      if ok and name in left and name in right
                      and self.noise.explains(name, left[name], right[name], self.tolerance))
        for name in found:
            self.noise_features[name] = self.noise_features.get(name, 0) + 1
        return found

    def frozen(self, upstream: bool = True) -> FrozenTally:
        """What this tally gathered so far, as one frozen value (a copy: adding to this tally leaves it as it
        is); without the judgements for the model stage unless `upstream`."""
        return FrozenTally(self.examples, self.redact, FrozenMap(self.first_counts),
                           FrozenMap(self.cause_counts),
                           tuple(frozen_json(example) for example in self.example_list), self.within,
                           FrozenNoise(self.noise_records, FrozenMap(self.noise_features)),
                           self.feature_stats.frozen(),
                           FrozenMap(self.upstream) if upstream and self.upstream is not None else None)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_classified": {}}  # a memo: not worth its pickled bytes


class FeatureStats:
    """Per feature, over the differing pairs: mismatched and within-tolerance counts, the largest |delta|, and
    (unless redacted) the (left, right) numbers behind the histograms, kept as packed floats."""

    def __init__(self, numeric_pairs: bool) -> None:
        self._stats: dict[str, dict[str, Any]] = {}
        self._pairs: dict[str, tuple[array, array]] | None = {} if numeric_pairs else None

    def add(self, m: PairOutcome) -> None:
        stats = self._stats
        for name, (ok, delta) in m.feature_deltas.items():
            entry = stats.get(name)
            if entry is None:
                entry = stats[name] = {"mismatched": 0, "within_tolerance": 0, "max_abs_delta": None}
            entry["within_tolerance" if ok else "mismatched"] += 1
            if delta is not None and (entry["max_abs_delta"] is None or delta > entry["max_abs_delta"]):
                entry["max_abs_delta"] = delta
        if self._pairs is None or not m.feature_deltas:
            return
        left, right = m.left.get("transform"), m.right.get("transform")
        if not isinstance(left, dict) or not isinstance(right, dict):
            return
        pairs = self._pairs
        for name in m.feature_deltas:
            if name not in left or name not in right:
                continue
            a, b = _numbers(left[name]), _numbers(right[name])
            if a is not None and b is not None and len(a) == len(b):
                found = pairs.get(name)
                if found is None:
                    found = pairs[name] = (array("d"), array("d"))
                found[0].extend(a)
                found[1].extend(b)

    def take_numbers(self) -> dict[str, tuple[array, array]]:
        """The (left, right) numbers behind the histograms, per feature, handed over (this tally keeps none): the
        engine diff (parity.compare.engine) bins them where they were tallied, so that summaries stay small."""
        taken, self._pairs = self._pairs or {}, {} if self._pairs is not None else None
        return taken

    def frozen(self) -> FrozenFeatureStats:
        """These statistics as one frozen value (a copy)."""
        stats = {name: (entry["mismatched"], entry["within_tolerance"], entry["max_abs_delta"])
                 for name, entry in self._stats.items()}
        numbers = None if self._pairs is None else \
            {name: (lefts.tobytes(), rights.tobytes()) for name, (lefts, rights) in self._pairs.items()}
        return FrozenFeatureStats(FrozenMap(stats), None if numbers is None else FrozenMap(numbers))


def _numbers(value: Any) -> list[float] | None:
    """The finite numbers of a numeric scalar or (nested) list, in order; None for anything else."""
    kind = type(value)
    if kind is float:  # most features: no other test needed
        return [value] if math.isfinite(value) else None
    if kind is int:
        try:
            return [float(value)]
        except OverflowError:  # an int beyond the float range
            return None
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        parts = [_numbers(item) for item in value]
        return None if any(p is None for p in parts) else [x for p in parts for x in p or ()]
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond the float range
        return None
    return [number] if math.isfinite(number) else None


_CLASSIFIED_CACHE = 100_000  # distinct (stage, fingerprints) classifications remembered at once


def _cause(m: PairOutcome, context: CauseContext, redact: bool, classified: dict[tuple, tuple[str, str]],
           worded: bool = False, noise: tuple[str, ...] = ()) -> tuple[str, str | None]:
    """(cause, explanation) of a diverged record, from its first divergent stage's values (memoised by their
    fingerprints: classification is a function of the two values and the run's context).

    A record whose whole input values were not decoded (`PairOutcome.first_split`: the stream deferred them) is
    classified from its differing fields, which is all `classify_input` reads of two records with the same
    fields: its cause is `input.content`, and its explanation None unless `worded` (the caller words the
    examples it keeps only; each planted record's input is distinct, so the memo never spared that work)."""
    split = m.first_split if m.first_stage == "input" and m.first_fields else None
    if split is not None:
        if not worded:
            nondeterministic = m.first_stage in context.nondeterministic_stages
            return ("seed.nondeterministic" if nondeterministic else "input.content"), None
        left, right = {name: pair[0] for name, pair in split.items()}, {name: pair[1] for name, pair in split.items()}
        return _classified(m, left, right, context, redact)
    memo = (m.first_stage, *m.fps[m.first_stage]) if m.first_stage in m.fps else None
    if memo is not None and memo in classified:
        return classified[memo]
    cause, explanation = _classified(m, resolved(m.left.get(m.first_stage)), resolved(m.right.get(m.first_stage)),
                                     context, redact, noise)
    if memo is not None:
        if len(classified) >= _CLASSIFIED_CACHE:
            classified.clear()
        classified[memo] = (cause, explanation)
    return cause, explanation


def _classified(m: PairOutcome, left: Any, right: Any, context: CauseContext, redact: bool,
                noise: tuple[str, ...] = ()) -> tuple[str, str]:
    """`classify`'s answer; features whose differences analysis noise explains (`noise`) are left out of it."""
    within = (lambda name, _a, _b: name in noise) if noise else None
    cause, explanation = classify(m.first_stage, left, right, context, tolerance_ok=within,
                                  differing=m.first_fields)
    if m.first_stage in context.nondeterministic_stages:
        cause = "seed.nondeterministic"
        explanation = (f"two replays of the same side disagree at stage {m.first_stage} (noise "
                       f"baseline): this difference is nondeterminism, not the other side")
    if redact:
        explanation = _DELTA.sub(lambda match: f"|delta| {_magnitude(match.group(1))}", explanation)
    return cause, explanation


_DELTA = re.compile(r"\|delta\| ([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


def _magnitude(text: str) -> str:
    """A delta as the power of ten at or above it: '67.87' -> '<= 1e+02' (the exact value can be raw data)."""
    value = abs(float(text))
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else text
    return f"<= 1e{math.ceil(math.log10(value)):+03d}"


def _json_value(value: Any, redact: bool) -> Any:
    if redact:
        from parity.encoding.fingerprint import fingerprint

        return {"fingerprint": f"{fingerprint(value):016x}"}
    return canonical.to_json(value)


def _key(outcome: PairOutcome, redact: bool) -> Any:
    return outcome.key_fp.hex() if redact else json.loads(outcome.key)
