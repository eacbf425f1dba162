"""The `model:` block of a config (contract section 8): top-level, overridden per side, and its errors, each
naming the file, the field and what would be accepted."""
from __future__ import annotations

import os
import textwrap

import pytest

from parity.config import load_config
from parity.errors import ConfigError

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "fixtures", "scenarios", "_models")


def _config(tmp_path, model: str, production: str = "") -> str:
    path = tmp_path / "parity.yaml"
    path.write_text(textwrap.dedent(f"""\
        version: 1
        capture: {{path: trips.jsonl, key: [id]}}
        {model}
        sides:
          offline: {{}}
          production: {{{production}}}
        """))
    return str(path)


def test_a_top_level_model_applies_to_both_sides_and_a_side_may_override_it(tmp_path):
    config = load_config(_config(tmp_path, f"model: {{saved: {MODELS}/tip_v1, decision: {{output: logits}}}}",
                                 f"model: {{saved: {MODELS}/tip_v1.keras}}"))
    offline, production = config.sides
    assert offline.model.saved == f"{MODELS}/tip_v1" and offline.model.decision.rule == "argmax"
    assert production.model.saved == f"{MODELS}/tip_v1.keras" and production.model.decision is None


def test_without_a_model_no_side_has_one(tmp_path):
    assert [s.model for s in load_config(_config(tmp_path, "")).sides] == [None, None]


def test_inputs_outputs_and_a_threshold_decision_are_read(tmp_path):
    config = load_config(_config(tmp_path, f"model: {{saved: {MODELS}/tip_v1, inputs: {{miles: trip_miles}}, "
                                           f"outputs: [tip], decision: {{output: tip, rule: threshold, at: 0.7}}}}"))
    spec = config.sides[0].model
    assert spec.feature_for("miles") == "trip_miles" and spec.feature_for("fare") == "fare"
    assert spec.outputs == ("tip",) and (spec.decision.rule, spec.decision.at) == ("threshold", 0.7)


@pytest.mark.parametrize("model, field, says", [
    ("model: {saved: nowhere}", "model.saved", "neither a SavedModel folder"),
    ("model: {saved: MODELS/tip_v1, decision: {output: logits, rule: top1}}", "model.decision.rule",
     "expected one of argmax, threshold"),
    ("model: {saved: MODELS/tip_v1, inputs: [fare]}", "model.inputs", "expected a mapping"),
    ("model: {saved: MODELS/tip_v1, serving: x}", "model.serving", "expected one of saved, signature"),
])
def test_a_bad_model_block_names_the_file_the_field_and_what_is_accepted(tmp_path, model, field, says):
    path = _config(tmp_path, model.replace("MODELS", MODELS))
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value).startswith(f"{path}: {field}: ") and says in str(raised.value)


def test_a_model_may_be_named_by_url_and_an_object_store_url_is_read_where_the_stage_runs(tmp_path):
    config = load_config(_config(tmp_path, f"model: {{saved: 'file://{MODELS}/tip_v1'}}",
                                 "model: {saved: 's3://models/tip/v7'}"))
    offline, production = config.sides
    assert offline.model.saved == f"{MODELS}/tip_v1"
    assert production.model.saved == "s3://models/tip/v7"  # copied to a local folder by the worker that loads it
