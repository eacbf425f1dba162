"""The report model: report.json as an ordered dict, built from a diff outcome (pure, deterministic).

Keys are inserted in the order of docs/contract.md, section 5; additions come after the required fields.
Nothing here depends on the runner, the wall clock or absolute paths, so the same inputs give byte-identical reports.

Redaction (`report.redact`) leaves field names, hashes and counts: keys and example values become
fingerprints, analyzer details keep their counts only, features carry no `histograms` and a null
`max_abs_delta`, and a |delta| in an explanation is shown as its power of ten. A delta can be a raw value
(a sum that lost one member differs by that member's value), so deltas are not kept exactly.
"""
from __future__ import annotations

import json
import math
import re
from array import array
from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np

from parity.compare.causes import CauseContext, classify, explain
from parity.compare.diff import DiffOutcome, PairOutcome
from parity.config import ToleranceSpec
from parity.encoding import canonical
from parity.stages import STAGES

FORMAT = "parity.report/1"
HISTOGRAM_BINS = 20


def _json_value(value: Any, redact: bool) -> Any:
    if redact:
        from parity.encoding.fingerprint import fingerprint

        return {"fingerprint": f"{fingerprint(value):016x}"}
    return canonical.to_json(value)


def _key(outcome: PairOutcome, redact: bool) -> Any:
    return outcome.key_fp.hex() if redact else json.loads(outcome.key)


def build_report(*, name: str, sides: tuple[str, str], outcome: DiffOutcome,
                 quarantined: tuple[int, int], quarantine_reasons: tuple[Mapping[str, int], Mapping[str, int]],
                 tolerance: ToleranceSpec, examples: int, redact: bool, cause_context: CauseContext,
                 environments: tuple[Mapping[str, Any], Mapping[str, Any]],
                 feature_names: tuple[list[str], list[str]] = ([], []),
                 analyzers: list[dict] | None = None,
                 noise: Mapping[str, Mapping[str, list[str]]] | None = None) -> dict[str, Any]:
    """Assembles report.json (a plain dict in contract order).

    Reads `outcome.mismatches` once, in order (it may be a `parity.compare.diff.DiffStream`), and `outcome`'s counts
    after that. Records whose first divergent stage has the same pair of fingerprints are classified once.
    """
    stage_order = {s: i for i, s in enumerate(STAGES)}
    first_counts: Counter = Counter()
    cause_counts: Counter = Counter()
    kept: Counter = Counter()
    example_list: list[dict] = []
    feature_stats = _FeatureStats(numeric_pairs=not redact)
    classified: dict[tuple, tuple[str, str]] = {}
    within = 0
    for m in outcome.mismatches:
        feature_stats.add(m)
        if not m.diverged:
            within += 1
            continue
        stage, (cause, explanation) = m.first_stage, _cause(m, cause_context, redact, classified)
        first_counts[stage] += 1
        cause_counts[(stage, cause)] += 1
        if kept[(stage, cause)] >= examples:
            continue
        kept[(stage, cause)] += 1
        example_list.append({"key": _key(m, redact), "stage": stage, "cause": cause,
                             "left": _json_value(m.left.get(stage), redact),
                             "right": _json_value(m.right.get(stage), redact),
                             "explanation": explanation})
    diverged = sum(first_counts.values())
    stages = [{"name": s, "diverged": outcome.stage_diverged[s], "first_diverged": first_counts.get(s, 0),
               "within_tolerance": outcome.stage_within[s]} for s in STAGES]
    causes = [{"stage": stage, "cause": cause, "records": count, "explanation": explain(cause, count)}
              for (stage, cause), count in sorted(cause_counts.items(),
                                                  key=lambda kv: (stage_order[kv[0][0]], -kv[1], kv[0][1]))]
    first = None
    for s in STAGES:
        if first_counts.get(s):
            top = max((c for c in causes if c["stage"] == s), key=lambda c: (c["records"], [-ord(x) for x in
                                                                                        c["cause"]]))
            first = {"stage": s, "records": first_counts[s], "cause": top["cause"],
                     "explanation": top["explanation"]}
            break
    # No capture locations here: a reordered capture must give the same bytes (`parity show` has them).
    example_list.sort(key=lambda e: (stage_order[e["stage"]], e["cause"]))
    left_total = outcome.left_rows + quarantined[0]
    right_total = outcome.right_rows + quarantined[1]
    records = {"left": left_total, "right": right_total, "paired": outcome.paired, "matched": outcome.matched,
               "within_tolerance": within, "diverged": diverged, "left_only": outcome.left_only,
               "right_only": outcome.right_only, "duplicate_keys": outcome.duplicate_keys,
               "quarantined": {"left": quarantined[0], "right": quarantined[1]},
               "quarantine_reasons": {"left": dict(sorted(quarantine_reasons[0].items())),
                                      "right": dict(sorted(quarantine_reasons[1].items()))}}
    _check_accounting(records)
    env_left, env_right = environments
    differences = [{"name": k, "left": env_left.get(k), "right": env_right.get(k)}
                   for k in sorted(set(env_left) | set(env_right)) if env_left.get(k) != env_right.get(k)]
    unpaired = outcome.left_only + outcome.right_only
    return {
        "format": FORMAT,
        "verdict": "parity" if diverged <= tolerance.max_diverged and unpaired <= tolerance.max_unpaired
        else "diverged",
        "sides": {"left": sides[0], "right": sides[1]},
        "records": records,
        "stages": stages,
        "first_divergence": first,
        "causes": causes,
        "features": feature_stats.features(feature_names, redact),
        "examples": example_list,
        "analyzers": [_redacted_analyzer(a) for a in analyzers or []] if redact else analyzers or [],
        "environment": {"left": dict(sorted(env_left.items())), "right": dict(sorted(env_right.items())),
                        "differences": differences},
        "name": name,
        "encoding": canonical.ENCODING_VERSION,
        "max_diverged": tolerance.max_diverged,
        "max_unpaired": tolerance.max_unpaired,
        "redacted": redact,
        "noise": ({side: {"stages": list(v["stages"]), "features": list(v["features"])}
                   for side, v in noise.items()} if noise is not None else None),
        "unpaired_examples": {"left_only": [_unpaired(k, redact) for k in outcome.left_only_keys[:examples]],
                              "right_only": [_unpaired(k, redact) for k in outcome.right_only_keys[:examples]]},
    }


_CLASSIFIED_CACHE = 100_000  # distinct (stage, fingerprints) classifications remembered at once


def _cause(m: PairOutcome, context: CauseContext, redact: bool,
           classified: dict[tuple, tuple[str, str]]) -> tuple[str, str]:
    """(cause, explanation) of a diverged record, from its first divergent stage's values (memoised by their
    fingerprints: classification is a function of the two values and the run's context)."""
    memo = (m.first_stage, *m.fps[m.first_stage]) if m.first_stage in m.fps else None
    if memo is not None and memo in classified:
        return classified[memo]
    cause, explanation = classify(m.first_stage, m.left.get(m.first_stage), m.right.get(m.first_stage), context,
                                  differing=m.first_fields)
    if m.first_stage in context.nondeterministic_stages:
        cause = "seed.nondeterministic"
        explanation = (f"two replays of the same side disagree at stage {m.first_stage} (noise "
                       f"baseline): this difference is nondeterminism, not the other side")
    if redact:
        explanation = _DELTA.sub(lambda match: f"|delta| {_magnitude(match.group(1))}", explanation)
    if memo is not None:
        if len(classified) >= _CLASSIFIED_CACHE:
            classified.clear()
        classified[memo] = (cause, explanation)
    return cause, explanation


_DELTA = re.compile(r"\|delta\| ([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


def _magnitude(text: str) -> str:
    """A delta as the power of ten at or above it: '67.87' -> '<= 1e+02' (the exact value can be raw data)."""
    value = abs(float(text))
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else text
    return f"<= 1e{math.ceil(math.log10(value)):+03d}"


_COUNTED = re.compile(r"^(?:\d+ tokens, same order|\d+ values?, equal|\d+ vs \d+ values|"
                      r"exported by the (?:left|right) side only)$")
_TOKEN_COUNTS = re.compile(r"^(\d+ vs \d+ tokens|same \d+ tokens in a different order)")
_WHERE = re.compile(r" at index \d+ \(\d+ of \d+ differ\)$")


def _redacted_analyzer(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An analyzer comparison with counts only: vocabulary tokens and constants are values of the data."""
    detail = str(entry.get("detail", ""))
    if not _COUNTED.match(detail):
        counts, where = _TOKEN_COUNTS.match(detail), _WHERE.search(detail)
        if counts:
            detail = f"{counts.group(1)} (tokens redacted)"
        elif where:
            detail = f"values differ{where.group(0)} (values redacted)"
        else:
            detail = "differ (values redacted)" if not entry.get("equal") else "equal (values redacted)"
    return {**entry, "detail": detail}


def _unpaired(key_text: str, redact: bool) -> Any:
    if redact:
        from parity.encoding.fingerprint import fingerprint

        return f"{fingerprint(key_text):016x}"
    return json.loads(key_text)


class _FeatureStats:
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

    def features(self, feature_names: tuple[list[str], list[str]], redact: bool = False) -> list[dict]:
        left_names, right_names = set(feature_names[0]), set(feature_names[1])
        names = set(self._stats) | left_names | right_names
        features = []
        for name in sorted(names):
            entry = self._stats.get(name, {"mismatched": 0, "within_tolerance": 0, "max_abs_delta": None})
            presence = "both" if (name in left_names) == (name in right_names) else \
                "left" if name in left_names else "right"
            feature = {"name": name, "stage": "transform", "mismatched": entry["mismatched"],
                       "within_tolerance": entry["within_tolerance"],
                       "max_abs_delta": None if redact else entry["max_abs_delta"], "presence": presence}
            if not redact:  # histograms are built from raw values: a redacted report has none
                lefts, rights = (self._pairs or {}).get(name, (array("d"), array("d")))
                feature["histograms"] = histograms_of(lefts, rights)
            features.append(feature)
        return features


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


def _edge(x: float) -> float:
    return float(f"{x:.6g}")


_MAX_FLOAT = 1.7976931348623157e308


def _range(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    return (lo - 0.5, hi + 0.5) if lo == hi else (lo, hi)


def _position(v: float, lo: float, hi: float) -> float:
    """Where `v` lies in [lo, hi], 0..1 (halved operands when the width overflows a float)."""
    width = hi - lo
    if width == 0:  # values so large that +-0.5 did not widen them
        return 0.0
    if math.isfinite(width):
        return (v - lo) / width
    return (v / 2 - lo / 2) / (hi / 2 - lo / 2)


def _histogram(values: Sequence[float], lo: float, hi: float) -> list[int]:
    """Counts of `values` in HISTOGRAM_BINS equal-width bins over [lo, hi] (the last bin closed)."""
    width = hi - lo
    if width != 0 and math.isfinite(width):  # `_position` with numpy: the same float operations, value by value
        at = ((np.asarray(values, np.float64) - lo) / width * HISTOGRAM_BINS).astype(np.int64)
        return np.bincount(np.clip(at, 0, HISTOGRAM_BINS - 1), minlength=HISTOGRAM_BINS).tolist()
    counts = [0] * HISTOGRAM_BINS
    for v in values:
        index = int(_position(v, lo, hi) * HISTOGRAM_BINS)
        counts[min(max(index, 0), HISTOGRAM_BINS - 1)] += 1
    return counts


def _edges(lo: float, hi: float) -> list[float]:
    step = (hi - lo) / HISTOGRAM_BINS
    if not math.isfinite(step):
        step = hi / HISTOGRAM_BINS - lo / HISTOGRAM_BINS
    return [_edge(lo + i * step) for i in range(HISTOGRAM_BINS)] + [_edge(hi)]


def histograms(pairs: list[tuple[float, float]]) -> dict[str, Any] | None:
    """Left vs right values on shared bins, and the deltas (right - left); None under two pairs.

    HISTOGRAM_BINS equal-width bins between the minimum and the maximum (a single value is widened by
    +-0.5); the edges are rounded to 6 significant digits, the counts use the exact edges. Deterministic.
    """
    return histograms_of([a for a, _ in pairs], [b for _, b in pairs])


def histograms_of(left: Sequence[float], right: Sequence[float]) -> dict[str, Any] | None:
    """`histograms` of the pairs (left[i], right[i]), given as two sequences (e.g. packed `array('d')`s)."""
    if len(left) < 2:
        return None
    with np.errstate(over="ignore"):  # an overflow is clamped
        deltas = np.clip(np.asarray(right, np.float64) - np.asarray(left, np.float64), -_MAX_FLOAT, _MAX_FLOAT).tolist()
    lo, hi = _range(left + right)
    dlo, dhi = _range(deltas)
    return {"values": {"edges": _edges(lo, hi), "left": _histogram(left, lo, hi),
                       "right": _histogram(right, lo, hi)},
            "deltas": {"edges": _edges(dlo, dhi), "counts": _histogram(deltas, dlo, dhi)}}


def _check_accounting(records: dict) -> None:
    for side in ("left", "right"):
        total = records["paired"] + records[f"{side}_only"] + records["quarantined"][side]
        if total != records[side]:
            raise AssertionError(f"accounting broken on the {side} side: {records}")  # a bug in parity
    if records["paired"] != records["matched"] + records["within_tolerance"] + records["diverged"]:
        raise AssertionError(f"accounting broken for pairs: {records}")
