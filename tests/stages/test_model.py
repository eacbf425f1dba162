"""The model stage's batch function (`LoadedModel.apply`) against the per-record oracle, its loaders (SavedModel,
.keras), its errors, and the comparison of two sides' outputs (`compare_models`)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from oracles import model_outputs
from parity.compare.model_stage import Upstream, compare_models
from parity.config import ToleranceSpec
from parity.config.model import Tolerance
from parity.errors import ConfigError
from parity.stages.model import DecisionSpec, LoadedModel, ModelSpec, model_identity

MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "fixtures", "scenarios", "_models")
V1, V2, KERAS = (os.path.join(MODELS, name) for name in ("tip_v1", "tip_v2", "tip_v1.keras"))
RECORDS = [{"fare": 10.0, "miles": 2.0}, {"fare": 3.5, "miles": [7.25]}, {"fare": 55.0, "miles": np.float32(0.5)},
           {"fare": 0.0, "miles": 30.0, "zone": "Loop"}]


def test_one_batch_call_gives_each_record_what_the_model_gives_it_alone():
    """Equal up to float32 rounding, not bit for bit: TensorFlow's vectorised sigmoid computes a batch's tail
    elements another way than a batch of one (catalogue T7), so `tip` can differ in its last bits."""
    batch = LoadedModel(ModelSpec(saved=V1), "offline").apply(RECORDS)
    alone = [model_outputs(V1, r) for r in RECORDS]
    for got, want in zip(batch, alone):
        assert got.keys() == want.keys()
        assert got["logits"] == want["logits"]  # a matmul and an add: exact
        assert got["tip"] == pytest.approx(want["tip"], rel=1e-6)  # a few float32 ulps


def test_a_keras_file_and_the_savedmodel_of_the_same_weights_agree():
    keras_out = LoadedModel(ModelSpec(saved=KERAS), "offline").apply(RECORDS)
    saved_out = LoadedModel(ModelSpec(saved=V1), "offline").apply(RECORDS)
    for k, s in zip(keras_out, saved_out):
        assert k.keys() == s.keys()
        for name in k:
            assert np.allclose(k[name], s[name], rtol=1e-6)


def test_inputs_map_model_inputs_to_differently_named_features():
    spec = ModelSpec(saved=V1, inputs=(("miles", "trip_miles"),))
    got = LoadedModel(spec, "offline").apply([{"fare": 10.0, "trip_miles": 2.0}])
    assert got == LoadedModel(ModelSpec(saved=V1), "offline").apply([{"fare": 10.0, "miles": 2.0}])


def test_outputs_limit_what_the_stage_keeps():
    got = LoadedModel(ModelSpec(saved=V1, outputs=("tip",)), "offline").apply(RECORDS[:1])
    assert list(got[0]) == ["tip"]


def test_a_missing_feature_names_the_input_the_feature_and_the_features_there_are():
    with pytest.raises(ConfigError, match=r"model input 'miles' takes feature 'km'.*expected one of fare, miles"):
        LoadedModel(ModelSpec(saved=V1, inputs=(("miles", "km"),)), "offline").apply(RECORDS[:1])


def test_a_feature_of_the_wrong_type_names_the_input_its_dtype_and_what_is_accepted():
    with pytest.raises(ConfigError, match=r"model input 'fare' \(float32, shape \[N\]\) cannot be fed feature 'fare'"
                                          r".*expected float32"):
        LoadedModel(ModelSpec(saved=V1), "offline").apply([{"fare": "ten", "miles": 1.0}])


def test_a_feature_of_the_wrong_length_cannot_be_fed_to_an_n_by_1_input():
    with pytest.raises(ConfigError, match=r"model input 'miles' \(float32, shape \[N, 1\]\)"):
        LoadedModel(ModelSpec(saved=V1), "offline").apply([{"fare": 1.0, "miles": [1.0, 2.0]}])


def test_a_folder_that_is_no_model_cannot_be_loaded(tmp_path):
    with pytest.raises(ConfigError, match="cannot load the model"):
        LoadedModel(ModelSpec(saved=str(tmp_path)), "offline")


def test_an_unknown_signature_names_the_ones_there_are():
    with pytest.raises(ConfigError, match="expected one of serving_default"):
        LoadedModel(ModelSpec(saved=V1, signature="predict"), "offline")


def test_an_unknown_decision_output_names_the_outputs_there_are():
    with pytest.raises(ConfigError, match="expected one of logits, tip"):
        LoadedModel(ModelSpec(saved=V1, decision=DecisionSpec(output="score")), "offline")


def test_model_identity_tells_two_versions_apart_and_is_stable():
    assert model_identity(V1) == model_identity(V1) != model_identity(V2)


def test_threshold_and_argmax_decisions():
    assert DecisionSpec("tip", "threshold", 0.5).decide(0.5) is True
    assert DecisionSpec("tip", "threshold", 0.5).decide([0.49]) is False
    assert DecisionSpec("logits").decide([0.1, 0.3]) == 1


def _table(outputs: dict) -> dict:
    """A side's model outputs as `read_model_outputs` gives them: key -> (fingerprint, canonical bytes)."""
    from parity.encoding import canonical
    from parity.encoding.fingerprint import fingerprint

    return {key: (fingerprint(value), canonical.encode(value)) for key, value in outputs.items()}


def test_outputs_of_equal_features_that_differ_diverge_first_at_the_model():
    left = _table({"1": {"p": [0.0, 1.0]}, "2": {"p": [1.0, 0.0]}})
    right = _table({"1": {"p": [1.0, 0.0]}, "2": {"p": [1.0, 0.0]}})
    stage = compare_models(left, right, {}, ToleranceSpec(), DecisionSpec("p"), ["p"], 10, False)
    assert (stage.diverged, stage.first_diverged, stage.decision_flips_first_at_model) == (1, 1, 1)
    assert stage.records_diverged_upstream == 0 and stage.version_examples[0]["key"] == "1"


def test_a_record_within_tolerance_upstream_carries_its_judgement_through_the_model():
    left, right = _table({"1": {"p": 0.5}}), _table({"1": {"p": 0.75}})
    stage = compare_models(left, right, {"1": Upstream(False, "transform")}, ToleranceSpec(), None, ["p"], 10, True)
    assert (stage.first_diverged, stage.within_tolerance, stage.matched_to_within) == (0, 1, 0)
    assert stage.outputs["p"].mismatched == 0 and stage.outputs["p"].within_tolerance == 1


def test_output_tolerance_applies_by_output_name():
    left, right = _table({"1": {"p": 0.5}}), _table({"1": {"p": 0.5001}})
    tolerance = ToleranceSpec(features=(("p", Tolerance(abs=1e-3)),))
    stage = compare_models(left, right, {}, tolerance, None, ["p"], 10, True)
    assert (stage.first_diverged, stage.matched_to_within) == (0, 1)


def test_prediction_impact_counts_only_records_diverged_upstream():
    left = _table({"1": {"p": 0.2}, "2": {"p": 0.2}, "3": {"p": 0.2}})
    right = _table({"1": {"p": 0.7}, "2": {"p": 0.2}, "3": {"p": 0.3}})
    upstream = {k: Upstream(True, "transform") for k in ("1", "2", "3")}
    stage = compare_models(left, right, upstream, ToleranceSpec(), DecisionSpec("p", "threshold", 0.5), ["p"], 10,
                           True)
    assert (stage.records_diverged_upstream, stage.prediction_changed, stage.decision_flips) == (3, 2, 1)
    assert stage.outputs["p"].changed == 2 and stage.outputs["p"].impact_max_abs_delta == pytest.approx(0.5)


def test_a_record_that_reaches_the_model_on_one_side_only_counts_upstream_but_has_no_delta():
    left, right = _table({"1": {"p": 0.2}, "2": {"p": 0.2}}), _table({"2": {"p": 0.2}})
    upstream = {"1": Upstream(True, "window"), "2": Upstream(True, "shard")}
    stage = compare_models(left, right, upstream, ToleranceSpec(), None, ["p"], 10, True)
    assert (stage.records_diverged_upstream, stage.one_side_only, stage.prediction_changed) == (2, 1, 0)


def test_a_records_outputs_do_not_depend_on_where_in_its_batch_it_falls():
    """Unpadded, 125 of 1,480 such outputs differed in their last bits (TensorFlow's vectorised sigmoid computes a
    batch's tail another way): two sides that drop different records would have shown a false model.version."""
    import random

    model = LoadedModel(ModelSpec(saved=V1), "offline")
    rng = random.Random(1)
    records = [{"fare": round(rng.uniform(3, 60), 2), "miles": round(rng.uniform(0.1, 20), 2)} for _ in range(200)]
    whole = model.apply(records)
    for start in range(0, 40, 3):
        for size in (1, 37, 65):
            assert model.apply(records[start:start + size]) == whole[start:start + size], (start, size)
