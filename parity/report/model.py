"""The report model: report.json as an ordered dict, built from a diff's summary (pure, deterministic).

The diff is computed in parity.compare (`parity.compare.summary.DiffSummary`); nothing here reads a fingerprint set
or starts a process.

Keys are inserted in the order of docs/contract.md, section 5; additions come after the required fields.
Nothing here depends on the runner, the wall clock or absolute paths, so the same inputs give byte-identical reports.

Redaction (`report.redact`) leaves field names, hashes and counts: keys and example values become
fingerprints, analyzer details keep their counts only, features carry no `histograms` and a null
`max_abs_delta`, and a |delta| in an explanation is shown as its power of ten. A delta can be a raw value
(a sum that lost one member differs by that member's value), so deltas are not kept exactly.
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping

from parity.compare.causes import explain
from parity.compare.noise import CAUSE as NOISE_CAUSE
from parity.compare.noise import AnalysisNoise
from parity.compare.summary import DiffSummary
from parity.compare.frozen import thawed
from parity.compare.tallied import FrozenNoise
from parity.config import ToleranceSpec
from parity.encoding import canonical
from parity.report.prediction_impact import add_model_stage
from parity.stages import STAGES

FORMAT = "parity.report/1"


def build_report(*, name: str, sides: tuple[str, str], summary: DiffSummary,
                 quarantined: tuple[int, int], quarantine_reasons: tuple[Mapping[str, int], Mapping[str, int]],
                 tolerance: ToleranceSpec,
                 environments: tuple[Mapping[str, Any], Mapping[str, Any]],
                 feature_names: tuple[list[str], list[str]] = ([], []),
                 analyzers: list[dict] | None = None,
                 noise: Mapping[str, Mapping[str, list[str]]] | None = None,
                 analysis_noise: AnalysisNoise = AnalysisNoise(),
                 decision: dict[str, Any] | None = None) -> dict[str, Any]:
    """Assembles report.json (a plain dict in contract order) from `summary`.

    Examples and redaction are as the summary's tally was made (parity.compare.tally). With a model stage in the summary
    (a model configured on both sides), parity.report.prediction_impact adds it; without one the report has no
    trace of a model stage.
    """
    stage_order = {s: i for i, s in enumerate(STAGES)}
    tally, counts = summary.tally, summary.counts
    examples, redact = tally.examples, tally.redact
    first_counts, cause_counts, example_list = tally.first_counts, tally.cause_counts, tally.example_list
    within, feature_stats = tally.within, tally.feature_stats
    diverged = sum(first_counts.values())
    stages = [{"name": s, "diverged": counts.stage_diverged[s], "first_diverged": first_counts.get(s, 0),
               "within_tolerance": counts.stage_within[s]} for s in STAGES]
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
    example_list = [thawed(e) for e in sorted(example_list, key=lambda e: (stage_order[e["stage"]], e["cause"]))]
    left_total = counts.left_rows + quarantined[0]
    right_total = counts.right_rows + quarantined[1]
    records = {"left": left_total, "right": right_total, "paired": counts.paired, "matched": counts.matched,
               "within_tolerance": within, "diverged": diverged, "left_only": counts.left_only,
               "right_only": counts.right_only, "duplicate_keys": counts.duplicate_keys,
               "quarantined": {"left": quarantined[0], "right": quarantined[1]},
               "quarantine_reasons": {"left": dict(sorted(quarantine_reasons[0].items())),
                                      "right": dict(sorted(quarantine_reasons[1].items()))}}
    _check_accounting(records)
    env_left, env_right = environments
    differences = [{"name": k, "left": env_left.get(k), "right": env_right.get(k)}
                   for k in sorted(set(env_left) | set(env_right)) if env_left.get(k) != env_right.get(k)]
    unpaired = counts.left_only + counts.right_only
    report = {
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
        "unpaired_examples": {"left_only": [_unpaired(k, redact) for k in counts.left_only_keys[:examples]],
                              "right_only": [_unpaired(k, redact) for k in counts.right_only_keys[:examples]]},
    }
    if analysis_noise:  # only where analyzer outputs differ by rounding: other reports keep their bytes
        report["analysis_noise"] = _analysis_noise(analysis_noise, tally.noise_count, redact)
    if summary.model is not None:
        add_model_stage(report, summary.model, tolerance, redact, decision)
    return report


def _analysis_noise(judged: AnalysisNoise, count: FrozenNoise, redact: bool) -> dict[str, Any]:
    """The report's `analysis_noise`: how many records only analysis noise made differ, and per feature the bound
    applied and why (docs/contract.md, section 8)."""
    records = count.records
    features = []
    for bound in judged.bounds:
        entry = {**bound.as_json(), "records": count.features.get(bound.feature, 0)}
        if redact:  # the constants are values of the data
            entry["why"] = entry["why"].split(":", 1)[0] + ": analyzer outputs equal within float rounding"
        features.append(entry)
    return {"cause": NOISE_CAUSE, "records": records,
            "explanation": (f"{records} record{'' if records == 1 else 's'} differ only by analysis noise: the "
                            "sides' analyzer outputs differ by float rounding alone, and each difference is within "
                            "the bound those differences give its feature (counted within_tolerance)"),
            "analyzers": list(judged.judged), "features": features,
            "unbounded": sorted(judged.unbounded)}


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


def _check_accounting(records: dict) -> None:
    for side in ("left", "right"):
        total = records["paired"] + records[f"{side}_only"] + records["quarantined"][side]
        if total != records[side]:
            raise AssertionError(f"accounting broken on the {side} side: {records}")  # a bug in parity
    if records["paired"] != records["matched"] + records["within_tolerance"] + records["diverged"]:
        raise AssertionError(f"accounting broken for pairs: {records}")
