"""The model stage beyond report.json's counts (contract section 8): under `report.redact` its outputs are values of
the data, so the report holds none (fingerprints and counts only) and the sides' sets keep no `model/` parts once it
is written; `parity show` ends with the model stage."""
from __future__ import annotations

import json
import os
import shutil

import parity

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = os.path.join(ROOT, "fixtures", "scenarios", "model_transform_km_flips_decisions")


def test_a_redacted_model_report_holds_no_output_value_and_the_sets_keep_no_model_parts(tmp_path):
    folder = tmp_path / "scenario"
    shutil.copytree(SCENARIO, folder)
    config = folder / "parity.yaml"
    text = config.read_text(encoding="utf-8").replace("../_data/", os.path.join(ROOT, "fixtures/scenarios/_data/"))
    text = text.replace("../_models/", os.path.join(ROOT, "fixtures/scenarios/_models/"))
    config.write_text(text + "report: {redact: true}\n", encoding="utf-8")
    report = parity.check(str(config), out_dir=str(tmp_path / "out"))
    impact = report["prediction_impact"]
    assert impact["decision_flips"] > 0 and all(o["max_abs_delta"] is None for o in impact["outputs"])
    model_examples = [e for e in report["examples"] if e["stage"] == "model"]
    assert model_examples and all(set(e["left"]) == {"fingerprint"} for e in model_examples)
    assert all(f["max_abs_delta"] is None for f in report["features"] if f["stage"] == "model")
    for side in ("offline", "production"):
        assert not (tmp_path / "out" / "sides" / side / "model").exists()
    text = json.dumps(report)
    assert "logits\": [" not in text


def test_show_ends_with_the_model_stage_and_names_it_where_only_the_models_differ(tmp_path):
    from parity.commands import show

    report = parity.check(os.path.join(ROOT, "fixtures", "scenarios", "model_version_v1_vs_v2", "parity.yaml"),
                          out_dir=str(tmp_path / "out"))
    key = report["examples"][0]["key"]
    shown = show(str(tmp_path / "out"), json.dumps(key))
    assert [s["stage"] for s in shown["stages"]][-1] == "model" and shown["first_divergence"] == "model"
    model = shown["stages"][-1]
    assert set(model["left"]["value"]) == {"logits", "tip"} and not model["equal"]
