"""Smoke tests of the taxi team's own Beam jobs (offline_beam.py, production_beam.py) on 300 captured trips."""

from __future__ import annotations

import importlib
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TAXI_DIR = REPO / "pipelines" / "taxi"
CAPTURE = REPO / "fixtures" / "taxi" / "capture" / "trips.jsonl"
RECORDS = 300
_MODULES = ("preprocess", "offline_beam", "production_beam")


@pytest.fixture(scope="module")
def taxi():
    """The example's modules, imported as its jobs import them (their folder first on sys.path)."""
    saved_path, saved = list(sys.path), {n: sys.modules.pop(n) for n in _MODULES if n in sys.modules}
    sys.path.insert(0, str(TAXI_DIR))
    try:
        yield {name: importlib.import_module(name) for name in _MODULES}
    finally:
        sys.path[:] = saved_path
        for name in _MODULES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def capture_300(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("capture") / "trips.jsonl"
    with open(CAPTURE, encoding="utf-8") as f:
        path.write_text("".join(line for line, _ in zip(f, range(RECORDS))), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def offline_out(taxi, capture_300, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("offline")
    taxi["offline_beam"].run(["--input", str(capture_300), "--output_dir", str(out), "--runner=FnApiRunner"])
    return out


def _served(taxi, capture_300, offline_out, out: Path, *extra: str) -> tuple[list[dict], int]:
    from apache_beam.metrics import MetricsFilter

    result = taxi["production_beam"].run(
        [
            "--input", str(capture_300), "--transform_fn_dir", str(offline_out / "transform_fn"),
            "--output_dir", str(out), "--runner=FnApiRunner", *extra,
        ]
    )  # fmt: skip
    late = result.metrics().query(MetricsFilter().with_name("late_dropped"))["counters"]
    rows = [json.loads(line) for path in sorted((out / "features").glob("part-*")) for line in open(path)]
    return rows, sum(c.committed for c in late)


def _offline_examples(offline_out: Path) -> dict[str, list[dict]]:
    import tensorflow as tf
    import tensorflow_transform as tft

    spec = tft.TFTransformOutput(str(offline_out / "transform_fn")).transformed_feature_spec()
    examples = {}
    for split in ("train", "eval"):
        files = sorted(str(p) for p in (offline_out / "transformed").glob(f"{split}-*.tfrecord.gz"))
        assert files, split
        rows = []
        for serialized in tf.data.TFRecordDataset(files, compression_type="GZIP"):
            parsed = tf.io.parse_single_example(serialized, spec)
            rows.append({name: tensor.numpy().item() for name, tensor in parsed.items()})
        examples[split] = rows
    return examples


def _row_key(features: dict) -> tuple:
    return tuple(sorted(features.items()))


def test_offline_job_writes_the_transform_fn_with_raw_and_transformed_schemas(offline_out):
    tft_dir = offline_out / "transform_fn"
    assert (tft_dir / "transform_fn" / "saved_model.pb").is_file()
    assert (tft_dir / "transformed_metadata" / "schema.pbtxt").is_file()
    assert (tft_dir / "metadata" / "schema.pbtxt").is_file()
    assert any((tft_dir / "transform_fn" / "assets").glob("company*"))


def test_offline_job_writes_every_trip_once_as_a_train_or_eval_example(offline_out):
    examples = _offline_examples(offline_out)
    assert len(examples["train"]) + len(examples["eval"]) == RECORDS
    assert 0.7 <= len(examples["train"]) / RECORDS <= 0.9
    splits = [json.loads(line) for p in (offline_out / "split").glob("part-*") for line in open(p)]
    assert len({s["trip_id"] for s in splits}) == RECORDS
    assert Counter(s["split"] for s in splits) == {k: len(v) for k, v in examples.items()}
    assert set(examples["train"][0]) >= {
        "fare_z", "company_id", "miles_bucket", "zone_hour_cross", "trips_1h", "fare_vs_zone_mean", "tips_ratio",
    }  # fmt: skip


def test_production_job_drops_the_trips_that_arrive_after_their_hour_closed(taxi, capture_300, offline_out, tmp_path):
    rows, late = _served(taxi, capture_300, offline_out, tmp_path)
    with open(capture_300, encoding="utf-8") as f:
        trips = [json.loads(line) for line in f]
    dropped = [t for t, is_late in taxi["production_beam"].drop_late(trips) if is_late]
    assert late == len(dropped) >= 1
    assert all(t["ingest_time"] - t["event_time"] >= 120 for t in dropped)
    assert len(rows) == RECORDS - late
    assert not {t["trip_id"] for t in dropped} & {r["trip_id"] for r in rows}


def test_without_the_lateness_bug_production_serves_exactly_the_offline_features(
    taxi, capture_300, offline_out, tmp_path
):
    rows, late = _served(taxi, capture_300, offline_out, tmp_path, "--allowed_lateness_s=86400")
    assert late == 0
    examples = _offline_examples(offline_out)
    offline = Counter(_row_key(row) for split in examples.values() for row in split)
    served = Counter(_row_key(row["features"]) for row in rows)
    assert served == offline
    assert Counter(r["split"] for r in rows) == {k: len(v) for k, v in examples.items()}
