"""The `model` stage in report.json (contract section 8): its stage entry, its causes, its outputs among the
features, its examples, and `prediction_impact`, added to a report `build_report` assembled.

Everything here is added only when a model is configured, so a report without one keeps its bytes. The model stage
changes a record's judgement only where every earlier stage matched (`parity.compare.model_stage`), so the
records' accounting moves matched records to diverged or within_tolerance and nothing else.
"""
from __future__ import annotations

from typing import Any

from parity.compare.frozen import thawed
from parity.compare.model_stage import PREDICTION, VERSION, ModelStage
from parity.config import ToleranceSpec
from parity.encoding import canonical

STAGE = "model"


def add_model_stage(report: dict[str, Any], stage: ModelStage, tolerance: ToleranceSpec, redact: bool,
                    decision: dict[str, Any] | None) -> None:
    """Adds the model stage to `report` in place (see the module docstring)."""
    records = report["records"]
    records["matched"] -= stage.first_diverged + stage.matched_to_within
    records["diverged"] += stage.first_diverged
    records["within_tolerance"] += stage.matched_to_within
    report["stages"].append({"name": STAGE, "diverged": stage.diverged, "first_diverged": stage.first_diverged,
                             "within_tolerance": stage.within_tolerance})
    unpaired = records["left_only"] + records["right_only"]
    report["verdict"] = "parity" if records["diverged"] <= tolerance.max_diverged and \
        unpaired <= tolerance.max_unpaired else "diverged"
    if stage.first_diverged:
        entry = {"stage": STAGE, "cause": VERSION, "records": stage.first_diverged,
                 "explanation": _version_explanation(stage.first_diverged, stage.same_model)}
        report["causes"].append(entry)
        if report["first_divergence"] is None:
            report["first_divergence"] = {"stage": STAGE, "records": stage.first_diverged, "cause": VERSION,
                                          "explanation": entry["explanation"]}
    if stage.prediction_changed:
        # downstream: these records' first divergence is an earlier stage, counted under its cause there
        report["causes"].append({"stage": STAGE, "cause": PREDICTION, "records": stage.prediction_changed,
                                 "explanation": _prediction_explanation(stage.prediction_changed),
                                 "downstream": True})
    for name, stats in sorted(stage.outputs.items()):
        report["features"].append({"name": name, "stage": STAGE, "mismatched": stats.mismatched,
                                   "within_tolerance": stats.within_tolerance,
                                   "max_abs_delta": None if redact else stats.max_abs_delta, "presence": "both"})
    for cause, examples in ((VERSION, stage.version_examples), (PREDICTION, stage.prediction_examples)):
        for example in map(thawed, examples):
            report["examples"].append({
                "key": _key(example["key"], redact), "stage": STAGE, "cause": cause,
                "left": _value(example["left"], redact), "right": _value(example["right"], redact),
                "explanation": (_version_explanation(1, stage.same_model) if cause == VERSION else
                                f"the features differ from stage {example['upstream']} on, and so do the model's "
                                f"outputs")})
    flips = stage.decision_flips + stage.decision_flips_first_at_model
    report["prediction_impact"] = {
        "records_diverged_upstream": stage.records_diverged_upstream,
        "prediction_changed": stage.prediction_changed,
        "decision_flips": stage.decision_flips,
        "outputs": [{"name": name, "changed": stats.changed,
                     "max_abs_delta": None if redact else stats.impact_max_abs_delta}
                    for name, stats in sorted(stage.outputs.items())],
        "decision": decision,
        "decision_flips_at_model": stage.decision_flips_first_at_model,
        "one_side_only": stage.one_side_only,
        "same_model": stage.same_model,
        "headline": headline(report, flips, decision is not None),
    }


def headline(report: dict[str, Any], flips: int, has_decision: bool) -> str:
    """The line the summary, Markdown, HTML and JUnit lead with: "665 records diverged at transform; 7 decisions
    changed"."""
    first, diverged = report["first_divergence"], report["records"]["diverged"]
    where = "no record diverged" if not first else \
        f"{diverged} record{'' if diverged == 1 else 's'} diverged at {first['stage']}" \
        if first["records"] == diverged else f"{diverged} records diverged, first at {first['stage']}"
    if has_decision:
        return f"{where}; {flips} decision{'' if flips == 1 else 's'} changed"
    changed = report["prediction_impact"]["prediction_changed"] if "prediction_impact" in report else None
    if changed is None:
        changed = 0
    return f"{where}; {changed} prediction{'' if changed == 1 else 's'} changed"


def _version_explanation(count: int, same_model: bool | None) -> str:
    what = "the sides use different models" if same_model is False else \
        "the same model gives equal features different outputs" if same_model else \
        "the model outputs differ for equal features"
    return (f"{count} record{'' if count == 1 else 's'} with equal features on both sides get different model "
            f"outputs: {what}")


def _prediction_explanation(count: int) -> str:
    return (f"{count} record{'' if count == 1 else 's'} diverged before the model and change a model output beyond "
            f"tolerance: the outputs differ because the features differ")


def _value(value: Any, redact: bool) -> Any:
    if redact:
        from parity.encoding.fingerprint import fingerprint

        return {"fingerprint": f"{fingerprint(value):016x}"}
    return canonical.to_json(value)


def _key(key: str, redact: bool) -> Any:
    import json

    if redact:
        from parity.encoding.fingerprint import key_fingerprint_bytes

        return key_fingerprint_bytes(canonical.encode(json.loads(key))).hex()
    return json.loads(key)
