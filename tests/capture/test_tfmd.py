"""TFMD schemas as capture schemas: the mapping to field types, and the tensors a `tft` side then hands
`preprocessing_fn` (exactly TFX's `schema_as_feature_spec`)."""
from __future__ import annotations

import os

import pytest

from parity.capture import tfmd
from parity.config import load_config
from parity.errors import ConfigError
from parity.capture.schema import FieldType, parse_type

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA_GEN = os.path.join(ROOT, "fixtures", "tfx", "pipeline", "SchemaGen", "schema")

FEATURES = """
feature { name: "required" type: INT presence { min_fraction: 1.0 } value_count { min: 1 max: 1 } }
feature { name: "absent_sometimes" type: FLOAT presence { min_fraction: 0.5 } value_count { min: 1 max: 1 } }
feature { name: "no_presence" type: BYTES value_count { min: 1 max: 1 } }
feature { name: "may_be_empty" type: INT presence { min_fraction: 1.0 } value_count { min: 0 max: 1 } }
feature { name: "several" type: BYTES presence { min_fraction: 1.0 } value_count { min: 1 max: 3 } }
feature { name: "no_count" type: FLOAT presence { min_fraction: 1.0 } }
feature { name: "shaped" type: FLOAT presence { min_fraction: 1.0 } shape { dim { size: 1 } } }
feature { name: "shaped_scalar" type: INT presence { min_fraction: 1.0 } shape { } }
feature { name: "shaped_three" type: FLOAT presence { min_fraction: 1.0 } shape { dim { size: 3 } } }
feature { name: "old" type: INT deprecated: true }
feature { name: "planned" type: INT lifecycle_stage: PLANNED }
"""


def _write(tmp_path, text: str, name: str = "schema.pbtxt") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_types_and_shapes_come_from_the_schema_as_the_documented_mapping_says(tmp_path):
    schema = tfmd.load(_write(tmp_path, FEATURES))
    assert dict(schema.fields) == {
        "required": parse_type("int64"),
        "absent_sometimes": parse_type("optional<float32>"),
        "no_presence": parse_type("optional<bytes>"),
        "may_be_empty": parse_type("optional<int64>"),
        "several": parse_type("list<bytes>"),
        "no_count": parse_type("list<float32>"),
        "shaped": parse_type("float32"),
        "shaped_scalar": parse_type("int64"),
        "shaped_three": parse_type("list<float32>"),
    }
    assert "old" not in dict(schema.fields) and "planned" not in dict(schema.fields)


def test_the_tft_inputs_of_a_tfmd_schema_are_exactly_the_feature_spec_tfx_derives(tmp_path):
    from tensorflow_transform.tf_metadata import schema_utils

    from parity.stages.transform import TFTInput, raw_feature_spec, tfmd_schema

    schema = tfmd.load(os.path.join(SCHEMA_GEN, "2", "schema.pbtxt"))
    types = dict(schema.fields)
    tfx_spec = schema_utils.schema_as_feature_spec(tfmd_schema(schema.text)).feature_spec
    assert raw_feature_spec(types, schema.text) == tfx_spec
    assert TFTInput(types, schema.text).metadata.schema == tfmd_schema(schema.text)
    # the taxi idiom's inputs: every optional and every value_count feature sparse, the shaped one dense [1]
    assert type(tfx_spec["fare"]).__name__ == "VarLenFeature"
    assert type(tfx_spec["trip_id"]).__name__ == "VarLenFeature"
    assert type(tfx_spec["trip_miles"]).__name__ == "FixedLenFeature" and list(tfx_spec["trip_miles"].shape) == [1]
    # the shard stage's aggregates come after, typed as the mapping form types them
    with_aggregate = raw_feature_spec({**types, "trips_1h": parse_type("int64")}, schema.text)
    assert set(with_aggregate) == set(tfx_spec) | {"trips_1h"}


def test_record_batches_of_a_tfmd_side_by_column_equal_tfts_tf_example_path(tmp_path):
    from parity.stages.transform import TFTInput

    schema = tfmd.load(os.path.join(SCHEMA_GEN, "2", "schema.pbtxt"))
    tft_input = TFTInput(dict(schema.fields), schema.text)
    records = [{"trip_id": 1, "trip_start_timestamp": 5, "fare": None, "trip_miles": 1.5, "payment_type": b"Cash",
                "company": None, "pickup_community_area": 3, "tags": [b"a", b"b"]},
               {"trip_id": 2, "trip_start_timestamp": 6, "fare": 2.5, "trip_miles": 0.5, "payment_type": "Mobile",
                "company": b"Sun Taxi", "pickup_community_area": None, "tags": None}]
    by_column = tft_input.columnar_batch(records)
    assert by_column is not None
    assert by_column.equals(tft_input._via_examples(records))
    assert by_column.column("fare").to_pylist() == [[], [2.5]]  # an optional null holds no value
    assert by_column.column("trip_miles").to_pylist() == [[1.5], [0.5]]


def test_the_mapping_form_says_optional_with_optional_of_a_type(tmp_path):
    from parity.stages.transform import feature_spec

    assert str(parse_type("optional<float64>")) == "optional<float64>"
    assert parse_type("optional<float64>") == FieldType("float64", optional=True)
    spec = feature_spec({"fare": parse_type("optional<float64>"), "miles": parse_type("float64")})
    assert type(spec["fare"]).__name__ == "VarLenFeature" and type(spec["miles"]).__name__ == "FixedLenFeature"
    with pytest.raises(ValueError, match="optional<T>"):
        parse_type("optional<list<int64>>")


def test_a_schemagen_output_folder_gives_its_newest_executions_schema(tmp_path):
    for execution in ("2", "10", "9"):
        (tmp_path / execution).mkdir()
        (tmp_path / execution / "schema.pbtxt").write_text(FEATURES, encoding="utf-8")
    assert tfmd.find_schema_file(str(tmp_path)) == str(tmp_path / "10" / "schema.pbtxt")


def _config(tmp_path, schema: str) -> str:
    (tmp_path / "cap.jsonl").write_text('{"trip_id": 1}\n', encoding="utf-8")
    path = tmp_path / "parity.yaml"
    path.write_text(f"version: 1\ncapture: {{path: cap.jsonl, key: [trip_id], schema: {schema}}}\n"
                    f"sides: {{offline: {{}}, production: {{}}}}\n", encoding="utf-8")
    return str(path)


def test_a_config_names_a_schema_pbtxt_relative_to_its_folder(tmp_path):
    config = load_config(_config(tmp_path, os.path.relpath(SCHEMA_GEN, tmp_path)))
    side = config.sides[0]
    assert side.capture.tfmd_text is not None
    assert side.capture.schema_dict["fare"] == parse_type("optional<float32>")
    assert side.capture.schema_dict["payment_type"] == parse_type("bytes")


@pytest.mark.parametrize(("text", "message"), [
    ("feature { name: 'x' type: INT ", r"not a TensorFlow Metadata Schema in text format: .*1:\d+"),
    ("sparse_feature { name: 's' }", "sparse features are not supported"),
    ("feature { name: 's' type: STRUCT }", "type STRUCT is not supported"),
])
def test_a_bad_tfmd_schema_is_a_config_error_naming_the_file_and_what_to_do(tmp_path, text, message):
    path = _write(tmp_path, text, "bad.pbtxt")
    with pytest.raises(ConfigError, match=message) as raised:
        load_config(_config(tmp_path, "bad.pbtxt"))
    assert f"capture.schema: {path}" in str(raised.value)


def test_a_missing_schema_path_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist; give a schema.pbtxt or SchemaGen's output folder"):
        load_config(_config(tmp_path, "nowhere/schema.pbtxt"))


def test_a_preprocessing_fn_taking_custom_config_gets_the_configs_mapping_as_tfx_hands_it(tmp_path):
    import parity
    from parity import commands as run

    (tmp_path / "cc_module.py").write_text(
        "import tensorflow as tf\n\n"
        "def preprocessing_fn(inputs, custom_config):\n"
        "    fare = tf.sparse.to_dense(inputs['fare'], default_value=-1.0)[:, 0]\n"
        "    return {'fare_scaled': fare * custom_config['fare_scale']}\n",
        encoding="utf-8")
    examples = os.path.join(ROOT, "fixtures", "tfx", "pipeline", "CsvExampleGen", "examples", "1", "Split-train")
    config = tmp_path / "parity.yaml"
    config.write_text(f"version: 1\ncapture: {{path: {examples}, key: [trip_id], schema: {SCHEMA_GEN}}}\n"
                      "sides:\n  offline: {transform: {tft: 'cc_module:preprocessing_fn', "
                      "custom_config: {fare_scale: 2.0}}}\n  production: {transform: {saved: {from_side: offline}}}\n",
                      encoding="utf-8")
    report = parity.check(str(config), out_dir=str(tmp_path / "out"))
    assert report["verdict"] == "parity"
    from parity.sets.fingerprint_set import read_set

    keys = read_set(str(tmp_path / "out" / "sides" / "offline")).table.column("key").to_pylist()[:12]
    seen = set()
    for key in keys:
        stages = {e["stage"]: e for e in run.show(str(tmp_path / "out"), key)["stages"]}
        fare = stages["input"]["left"]["value"]["fare"]
        seen.add(fare is None)
        assert stages["transform"]["left"]["value"]["fare_scaled"] == pytest.approx(
            2.0 * fare if fare is not None else -2.0), key
    assert seen == {True, False}, "a present and a missing fare"


def test_custom_config_with_a_preprocessing_fn_that_takes_none_is_a_config_error(tmp_path):
    import parity

    (tmp_path / "plain_module.py").write_text("def preprocessing_fn(inputs):\n    return dict(inputs)\n",
                                              encoding="utf-8")
    (tmp_path / "cap.jsonl").write_text('{"trip_id": 1, "fare": 2.5}\n', encoding="utf-8")
    config = tmp_path / "parity.yaml"
    config.write_text("version: 1\ncapture: {path: cap.jsonl, key: [trip_id], schema: {trip_id: int64, "
                      "fare: float64}}\nsides:\n  offline: {transform: {tft: 'plain_module:preprocessing_fn', "
                      "custom_config: {a: 1}}}\n  production: {}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="takes no custom_config parameter"):
        parity.check(str(config), out_dir=str(tmp_path / "out"))
