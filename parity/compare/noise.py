"""Analysis noise told from skew (docs/contract.md, section 8, "Analysis noise is not skew"): pure.

TFT's analyzers are not bit-reproducible. `tft.mean`/`tft.var` sum float32 batch statistics whose boundaries
follow auto-tuned batch sizes and the runner's bundles (divergence catalogue G3), so two runs over the same data,
TFX's own Transform included, export constants that differ in their last bits, and every record of a z-scored
feature then differs by ~1e-7. Counting those records as diverged buries a real bug under the whole data set;
a blanket tolerance would hide a real 1e-7 skew in any feature.

So the bound is derived, per feature, from the analyzer outputs that feature is computed from, and only when
every analyzer output of the two sides is equal or differs by float rounding alone (vocabularies equal,
statistics within `parity.compare.analyzers.FLOAT32_REL`, quantile boundaries within the sketch's epsilon): then each feature fed by
such a constant gets the |delta| its constants' differences can cause, and a record's difference within it is `within_tolerance` under the cause
`transform.analysis_noise`. The propagation is exact for the scaler TFT builds from them, `scale_to_z_score`:
with y = (x - m) / s on both sides for the same x,

    y_right - y_left = y_left * (s_left / s_right - 1) + (m_left - m_right) / s_right

so |delta| <= rel * |y| + abs with rel = |s_left / s_right - 1| and abs = |m_left - m_right| / s_right, each
doubled (|y_left| against the |y_right| the tolerance reads), plus 8 float32 units of rounding in rel (each
side rounds x - m, sqrt and the division once). A feature fed by a noisy constant of any other kind (a bucket
boundary moved by rounding, a min/max scaler) gets no bound: its differing records diverge, and the classifier
names the analyzers (`transform.analyzer`).

Which constants feed which feature is read from each side's graph (`parity.sets.analyzers.read_graph`); a constant
whose features differ between the sides' graphs gives no bound.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from parity.compare.analyzers import flat
from parity.compare.tolerance import values_within
from parity.config import Tolerance, ToleranceSpec

CAUSE = "transform.analysis_noise"
ROUNDING = 8 * 2.0 ** -24   # float32 units of rounding per side's z-score (x - m, sqrt, divide), both sides
QUANTILES_EPSILON = 0.01  # tft.bucketize's default sketch epsilon below 100 buckets
SLACK = 2.0                 # the analytic terms doubled: the tolerance scales by |y_right|, the terms by |y_left|

_Z_SCORE = re.compile(r"^constant:(?P<op>(?:.*_)?scale_to_z_score(?:_\d+)?)_(?P<part>sub_y|sqrt_x)$")


@dataclass(frozen=True)
class Bound:
    """The analysis-noise bound of one feature: |delta| <= abs + rel * |right value|, and why."""

    feature: str
    abs: float
    rel: float
    analyzers: tuple[str, ...]
    why: str

    def as_json(self) -> dict[str, Any]:
        return {"name": self.feature, "abs": self.abs, "rel": self.rel, "analyzers": list(self.analyzers),
                "why": self.why}


@dataclass(frozen=True)
class AnalysisNoise:
    """What the two sides' analyzer outputs allow as noise: a bound per feature (`bounds`), and the features fed
    by a noisy analyzer output that has no bound (`unbounded`: their differences diverge)."""

    bounds: tuple[Bound, ...] = ()
    unbounded: frozenset[str] = frozenset()
    judged: tuple[str, ...] = ()  # the analyzer outputs judged noise (they differ, by rounding alone)

    def __bool__(self) -> bool:
        return bool(self.judged)

    @functools.cached_property
    def features(self) -> frozenset[str]:
        """The features with a bound (asked once per differing feature of a pair: built once)."""
        return frozenset(b.feature for b in self.bounds)

    def widen(self, tolerance: ToleranceSpec) -> ToleranceSpec:
        """`tolerance` with each bounded feature's tolerance widened to its bound, term by term: the diff's
        tolerance tier then takes noise as within."""
        if not self.bounds:
            return tolerance
        features = dict(tolerance.features)
        for b in self.bounds:
            mine = tolerance.for_feature(b.feature)
            features[b.feature] = Tolerance(abs=max(mine.abs, b.abs), rel=max(mine.rel, b.rel))
        return replace(tolerance, features=tuple(sorted(features.items())))

    def explains(self, name: str, left: Any, right: Any, tolerance: ToleranceSpec) -> bool:
        """True when a feature's values differ beyond the user's `tolerance` but within its noise bound (the
        caller knows they are within the widened tolerance)."""
        if name not in self.features:
            return False
        user = tolerance.for_feature(name)
        return not values_within(left, right, lambda _n: user, name)


def judge(entries: Sequence[dict[str, Any]], left: Mapping[str, Any] | None, right: Mapping[str, Any] | None,
          left_feeds: Mapping[str, Sequence[str]], right_feeds: Mapping[str, Sequence[str]]
          ) -> tuple[list[dict[str, Any]], AnalysisNoise]:
    """The analyzer entries (`parity.compare.analyzers.compare`) with `"noise": true` on those judged analysis
    noise, and the bounds that follow; nothing is judged noise when a vocabulary or a statistic differs beyond
    rounding (then the sides analyzed other data: `transform.analyzer`)."""
    if left is None or right is None:
        return list(entries), AnalysisNoise()
    real = [e for e in entries if e.get("kind") in ("vocabulary", "statistic")]
    if any(not e["equal"] and not _boundaries_within_epsilon(e["name"], left.get(e["name"]), right.get(e["name"]))
           for e in real):
        return list(entries), AnalysisNoise()
    noisy = [e["name"] for e in real if e["kind"] == "statistic" and left[e["name"]] != right[e["name"]]]
    if not noisy:
        return list(entries), AnalysisNoise()
    marked = [{**e, "noise": True} if e["name"] in noisy else e for e in entries]
    fed: dict[str, set[str]] = {}  # feature -> the labels feeding it, on both sides' graphs alike
    for label in set(left_feeds) & set(right_feeds):
        if sorted(left_feeds[label]) == sorted(right_feeds[label]):
            for feature in left_feeds[label]:
                fed.setdefault(feature, set()).add(label)
    bounds, unbounded = [], set()
    for feature in sorted(set(f for label in noisy for f in left_feeds.get(label, ())) |
                          set(f for label in noisy for f in right_feeds.get(label, ()))):
        bound = _z_score_bound(feature, fed.get(feature, set()), set(noisy), left, right)
        if bound is None:
            unbounded.add(feature)
        else:
            bounds.append(bound)
    return marked, AnalysisNoise(bounds=tuple(bounds), unbounded=frozenset(unbounded), judged=tuple(noisy))


def _boundaries_within_epsilon(name: str, left: Any, right: Any) -> bool:
    """Quantile boundaries (`tft.bucketize`'s `apply_buckets` constant) of the same count, each within
    `QUANTILES_EPSILON` of the boundaries' span of its counterpart (divergence catalogue G4).

    TFT's sketch guarantees a rank error of epsilon (0.01 below 100 buckets), which needs the data to check; the
    span is its value-space stand-in. The judgement widens nothing: a record whose bucket the moved boundary
    changes still diverges (`transform.analyzer`), as the contract wants boundaries that give the same bucket."""
    if "apply_buckets" not in name or left is None or right is None:
        return False
    flat_l, flat_r = flat(left), flat(right)
    if len(flat_l) != len(flat_r) or not flat_l:
        return False
    if not all(isinstance(v, float) and math.isfinite(v) for v in flat_l + flat_r):
        return False
    span = max(flat_l) - min(flat_l) if len(flat_l) > 1 else abs(flat_l[0])
    return all(abs(a - b) <= QUANTILES_EPSILON * span for a, b in zip(flat_l, flat_r))


def _z_score_bound(feature: str, labels: set[str], noisy: set[str], left: Mapping[str, Any],
                   right: Mapping[str, Any]) -> Bound | None:
    """The bound of a feature computed by one `scale_to_z_score` from its mean (`sub_y`) and variance (`sqrt_x`)
    constants, when every noisy constant feeding it is one of those two; None otherwise."""
    ops: dict[str, dict[str, str]] = {}
    for label in labels:
        match = _Z_SCORE.match(label)
        if match:
            ops.setdefault(match.group("op"), {})[match.group("part")] = label
        elif label in noisy:
            return None  # a noisy constant the bound cannot follow
    if len(ops) != 1 or not (noisy & labels):
        return None
    (op, parts), = ops.items()
    if set(parts) != {"sub_y", "sqrt_x"}:
        return None
    values = [left[parts["sub_y"]], right[parts["sub_y"]], left[parts["sqrt_x"]], right[parts["sqrt_x"]]]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        return None  # elementwise or per-key statistics: not followed
    mean_l, mean_r, var_l, var_r = (float(v) for v in values)
    if var_l <= 0 or var_r <= 0:
        return None  # TFT passes x - m through unscaled where the variance is 0
    s_l, s_r = math.sqrt(var_l), math.sqrt(var_r)
    rel = SLACK * abs(s_l / s_r - 1) + ROUNDING
    abs_ = SLACK * abs(mean_l - mean_r) / s_r
    why = (f"{op}: mean {mean_l!r} vs {mean_r!r}, variance {var_l!r} vs {var_r!r} (float rounding); "
           f"y = (x - mean) / sqrt(variance) on both sides moves by at most {abs_:.3g} + {rel:.3g} * |y|")
    return Bound(feature=feature, abs=abs_, rel=rel, analyzers=tuple(sorted(parts.values())), why=why)
