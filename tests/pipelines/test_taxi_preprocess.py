"""The taxi example's preprocessing_fn under a real TFT analysis, and its plain-Python features."""

from __future__ import annotations

import importlib
import json
import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TAXI_DIR = REPO / "pipelines" / "taxi"
CAPTURE = REPO / "fixtures" / "taxi" / "capture" / "trips.jsonl"
SAMPLE = 500
_MODULES = ("preprocess", "python_features")


@pytest.fixture(scope="module")
def taxi():
    """The example's modules, imported as parity imports them (config folder first on sys.path)."""
    saved_path, saved = list(sys.path), {n: sys.modules.pop(n) for n in _MODULES if n in sys.modules}
    sys.path.insert(0, str(TAXI_DIR))
    try:
        yield {name: importlib.import_module(name) for name in _MODULES}
    finally:
        sys.path[:] = saved_path
        for name in _MODULES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def _sample() -> list[dict]:
    with open(CAPTURE, encoding="utf-8") as f:
        return [json.loads(line) for line, _ in zip(f, range(SAMPLE))]


@pytest.fixture(scope="module")
def analyzed(taxi, tmp_path_factory):
    """(raw records, {trips_1h: transformed row}, vocabulary) of one AnalyzeAndTransformDataset run."""
    import apache_beam as beam
    import tensorflow as tf
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from tensorflow_transform.tf_metadata import dataset_metadata

    scalars = {
        "trip_id": tf.int64, "event_time": tf.int64, "ingest_time": tf.int64, "pickup_zone": tf.string,
        "dropoff_zone": tf.string, "company": tf.string, "fare": tf.float32, "trip_miles": tf.float32,
        "trip_seconds": tf.int64, "payment_type": tf.string, "tips": tf.float32,
        "trips_1h": tf.int64, "fare_mean_1h": tf.float32,
    }  # fmt: skip
    defaults = {tf.int64: 0, tf.float32: 0.0, tf.string: ""}
    # TFT rejects FixedLenFeature default values in a schema; nulls are filled in the instances instead,
    # which is what parity hands the preprocessing_fn.
    spec = {name: tf.io.FixedLenFeature([], dtype) for name, dtype in scalars.items()}
    spec["tags"] = tf.io.RaggedFeature(tf.string)
    metadata = dataset_metadata.DatasetMetadata.from_feature_spec(spec)

    records = _sample()
    instances = []
    for i, record in enumerate(records):
        # trips_1h = a distinct count per record, so each output row names its input row.
        inst = {**record, "trips_1h": i + 1, "fare_mean_1h": record["fare"]}
        for name, dtype in scalars.items():
            if inst[name] is None:
                inst[name] = defaults[dtype]
        instances.append(inst)

    tmp = tmp_path_factory.mktemp("tft")
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        with tft_beam.Context(temp_dir=str(tmp / "tmp")):
            (transformed, _), transform_fn = (
                pipeline | "Instances" >> beam.Create(instances),
                metadata,
            ) | "AnalyzeAndTransform" >> tft_beam.AnalyzeAndTransformDataset(taxi["preprocess"].preprocessing_fn)
            _ = transform_fn | "Write" >> tft_beam.WriteTransformFn(str(tmp / "out"))
            _ = (
                transformed
                | "ToJson" >> beam.Map(lambda row: json.dumps(row, default=lambda v: v.item()))
                | "WriteRows" >> beam.io.WriteToText(str(tmp / "rows"), shard_name_template="")
            )
    with open(tmp / "rows", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    vocabulary = tft.TFTransformOutput(str(tmp / "out")).vocabulary_by_name("company")
    by_index = {row["trips_1h"] - 1: row for row in rows}
    assert len(by_index) == len(records)
    return records, by_index, [token.decode("utf-8") for token in vocabulary]


def test_vocabulary_holds_every_company_including_unicode_names(analyzed):
    records, _, vocabulary = analyzed
    companies = {r["company"] for r in records if r["company"] is not None}
    assert set(vocabulary) == companies
    assert {"Ça Roule Cab Co", "Taxi Naïve LLC", "北京出租车"} <= set(vocabulary)


def test_company_id_follows_the_vocabulary_and_null_takes_the_oov_bucket(analyzed):
    records, rows, vocabulary = analyzed
    oov = len(vocabulary)
    for i, record in enumerate(records):
        expected = oov if record["company"] is None else vocabulary.index(record["company"])
        assert rows[i]["company_id"] == expected
    assert any(r["company"] is None for r in records)


def test_fare_z_is_standardized_over_the_analyzed_records(analyzed):
    records, rows, _ = analyzed
    z = [rows[i]["fare_z"] for i in range(len(records))]
    mean = sum(z) / len(z)
    var = sum((v - mean) ** 2 for v in z) / len(z)
    assert abs(mean) < 1e-4
    assert abs(var - 1.0) < 1e-3
    fares = [r["fare"] or 0.0 for r in records]
    cheapest, dearest = fares.index(min(fares)), fares.index(max(fares))
    assert rows[cheapest]["fare_z"] == min(z) and rows[dearest]["fare_z"] == max(z)


def test_miles_buckets_are_five_ordered_buckets(analyzed):
    records, rows, _ = analyzed
    buckets = [rows[i]["miles_bucket"] for i in range(len(records))]
    assert set(buckets) == {0, 1, 2, 3, 4}
    by_miles = sorted(range(len(records)), key=lambda i: records[i]["trip_miles"])
    assert [buckets[i] for i in by_miles] == sorted(buckets)  # monotone in trip_miles


def test_zone_hour_cross_is_a_stable_hash_bucket_of_zone_and_utc_hour(analyzed):
    records, rows, _ = analyzed
    seen: dict[tuple[str, int], int] = {}
    for i, record in enumerate(records):
        bucket = rows[i]["zone_hour_cross"]
        assert 0 <= bucket < 64
        key = (record["pickup_zone"], record["event_time"] // 3600 % 24)
        assert seen.setdefault(key, bucket) == bucket
    assert len(set(seen.values())) > 10


def test_passthrough_and_ratio_features(analyzed):
    records, rows, _ = analyzed
    for i, record in enumerate(records):
        row = rows[i]
        fare = record["fare"] or 0.0
        assert row["trips_1h"] == i + 1
        assert row["fare_vs_zone_mean"] == 0.0  # fare_mean_1h = fare in this test
        assert row["tips_ratio"] == pytest.approx(record["tips"] / max(fare, 1.0), rel=1e-6)
        assert row["n_tags"] == len(record["tags"])


def test_python_features_handle_nulls_and_aggregates(taxi):
    python_features = taxi["python_features"].python_features
    record = {
        "event_time": 1710061200, "pickup_zone": "Loop", "dropoff_zone": "Garfield Ridge", "company": None,
        "fare": None, "trip_miles": 9.5, "trip_seconds": 0, "payment_type": "Credit Card", "tips": 2.0,
        "tags": ["airport", "surge"], "trips_1h": 3, "fare_mean_1h": 20.5,
    }  # fmt: skip
    features = python_features(record)
    assert features["hour_utc"] == 9 and features["hour_local"] == 4  # CDT after 2024-03-10T08:00Z
    assert features["company"] == "(none)" and features["fare_missing"] is True
    assert features["log_fare"] is None and features["fare_per_mile"] is None and features["mph"] is None
    assert features["tips_ratio"] == 2.0 and features["is_airport"] and features["is_surge"]
    assert features["n_tags"] == 2 and features["trips_1h"] == 3 and features["fare_vs_zone_mean"] is None


def test_python_features_on_the_capture_are_json_ready(taxi):
    python_features = taxi["python_features"].python_features
    for record in _sample():
        features = python_features(record)
        json.dumps(features, allow_nan=False)
        assert all(not (isinstance(v, float) and math.isnan(v)) for v in features.values())
