"""The taxi team's offline feature job: a Beam batch pipeline around `preprocess.preprocessing_fn`.

    python pipelines/taxi/offline_beam.py \\
        --input fixtures/taxi/capture/trips.jsonl --output_dir /tmp/taxi-offline [BEAM_OPTIONS]

Beam options (e.g. `--runner=FlinkRunner`) pass through; without `--runner` it runs on the in-process
FnApiRunner.

What it does, and the line of pipelines/taxi/parity.yaml (`sides.offline`) that restates it:

| step of this job                                            | parity.yaml, `sides.offline`            |
|-------------------------------------------------------------|-----------------------------------------|
| ReadFromText + json.loads, nulls kept as None               | `capture` (jsonl, schema)               |
| TimestampedValue(event_time seconds)                        | `timestamp: {field: event_time, unit: s}` |
| WindowInto(FixedWindows(3600)), bounded source: none late   | `window: {type: fixed, size: 1h}`       |
| GroupByKey on pickup_zone per window, count + mean of fare  | `shard: {key: [pickup_zone], aggregates}` |
|   attached back to every trip of the group                  |   (count 16 / xxh3 model the keyed exchange) |
| dicts between fused stages (Beam's pickle-based coder)      | `coder: {type: pickle}`                 |
| train/eval split: 8 of 10 hash buckets of (42, trip_id)     | `seed: {value: 42, ops: {in_eval: split}}` |
| AnalyzeDataset(preprocessing_fn) on all trips, then         | `transform: {tft: preprocess:preprocessing_fn}` |
|   TransformDataset of each split with that transform_fn     |                                         |

Outputs under `--output_dir`:
- `transform_fn/`: the TFT output (`transform_fn/` SavedModel, `transformed_metadata/`, and the raw schema in
  `metadata/`) that serving loads with `tft.TFTransformOutput` (production_beam.py does);
- `transformed/{train,eval}-*.tfrecord.gz`: the transformed training examples (tf.Example);
- `split/part-*.jsonl`: `{"trip_id": ..., "split": "train" | "eval"}`, the assignment of each trip.

The analysis sees every trip (as parity's `tft` transform analyzes on the side's replayed records); the
examples are transformed per split with that one `transform_fn`, because TFT's instance-dict path has no
passthrough keys to split the transformed output by afterwards.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
import xxhash
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms import window
from tensorflow_transform.tf_metadata import dataset_metadata

# parity puts the config folder first on sys.path; a team runs this file directly, which does the same.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preprocess import preprocessing_fn  # noqa: E402

WINDOW_SIZE_S = 3600
SPLIT_SEED = 42
SPLIT_BUCKETS = (("train", 8), ("eval", 2))

# Raw features as the transform sees them; tf.Example carries floats as float32.
SCALAR_FEATURES: dict[str, tf.dtypes.DType] = {
    "trip_id": tf.int64,
    "event_time": tf.int64,
    "ingest_time": tf.int64,
    "pickup_zone": tf.string,
    "dropoff_zone": tf.string,
    "company": tf.string,
    "fare": tf.float32,
    "trip_miles": tf.float32,
    "trip_seconds": tf.int64,
    "payment_type": tf.string,
    "tips": tf.float32,
    # Attached by the per-(window, zone) aggregation below.
    "trips_1h": tf.int64,
    "fare_mean_1h": tf.float32,
}
_DEFAULTS = {tf.int64: 0, tf.float32: 0.0, tf.string: ""}


def raw_metadata() -> dataset_metadata.DatasetMetadata:
    """The raw schema; TFT rejects FixedLenFeature default values, so nulls are filled before the transform."""
    spec: dict[str, Any] = {name: tf.io.FixedLenFeature([], dtype) for name, dtype in SCALAR_FEATURES.items()}
    spec["tags"] = tf.io.RaggedFeature(tf.string)
    return dataset_metadata.DatasetMetadata.from_feature_spec(spec)


def parse_trip(line: str) -> dict[str, Any]:
    return json.loads(line)


def attach_zone_aggregates(element: tuple[str, Iterable[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """Every trip of one (window, pickup_zone) group, with the group's trip count and mean fare."""
    _, trips = element
    trips = list(trips)
    fares = [t["fare"] for t in trips if t.get("fare") is not None]
    # fsum: exact, so the mean does not depend on the order GroupByKey hands the values over (catalogue G2).
    mean = math.fsum(fares) / len(fares) if fares else None
    for trip in trips:
        yield {**trip, "trips_1h": len(trips), "fare_mean_1h": mean}


def split_of(trip_id: int, seed: int = SPLIT_SEED) -> str:
    """Deterministic train/eval assignment of a trip: 8 of 10 buckets of XXH3(seed, trip_id) are train."""
    total = sum(n for _, n in SPLIT_BUCKETS)
    bucket = xxhash.xxh3_64_intdigest(f"{seed}:{trip_id}".encode()) % total
    for name, n in SPLIT_BUCKETS:
        if bucket < n:
            return name
        bucket -= n
    raise AssertionError("unreachable")


def to_instance(trip: dict[str, Any]) -> dict[str, Any]:
    """The TFT instance dict: nulls become the type default (b"", 0, 0.0), tags a list of strings."""
    instance = {}
    for name, dtype in SCALAR_FEATURES.items():
        value = trip.get(name)
        instance[name] = _DEFAULTS[dtype] if value is None else value
    instance["tags"] = list(trip.get("tags") or [])
    return instance


class _ReadTrips(beam.PTransform):
    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    def expand(self, pbegin):
        return (
            pbegin
            | "ReadLines" >> beam.io.ReadFromText(self._path)
            | "ParseJson" >> beam.Map(parse_trip)
        )


class AttachZoneAggregates(beam.PTransform):
    """Trips -> the same trips with `trips_1h` and `fare_mean_1h` of their (1h window, pickup_zone)."""

    def expand(self, trips):
        return (
            trips
            | "StampEventTime" >> beam.Map(lambda t: window.TimestampedValue(t, t["event_time"]))
            | "FixedWindows1h" >> beam.WindowInto(window.FixedWindows(WINDOW_SIZE_S))
            | "KeyByZone" >> beam.Map(lambda t: (t["pickup_zone"], t))
            | "GroupByZone" >> beam.GroupByKey()
            | "AttachAggregates" >> beam.FlatMap(attach_zone_aggregates)
            | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
        )


def build(pipeline: beam.Pipeline, input_path: str, output_dir: str) -> None:
    """Adds the offline job to `pipeline`; call inside `tft_beam.Context`."""
    trips = (
        pipeline
        | "ReadTrips" >> _ReadTrips(input_path)
        | "ZoneAggregates" >> AttachZoneAggregates()
    )
    splits = trips | "AssignSplit" >> beam.Map(lambda t: (t["trip_id"], split_of(t["trip_id"])))
    (
        splits
        | "SplitToJson" >> beam.Map(lambda kv: json.dumps({"trip_id": kv[0], "split": kv[1]}, sort_keys=True))
        | "WriteSplit" >> beam.io.WriteToText(os.path.join(output_dir, "split", "part"), file_name_suffix=".jsonl")
    )

    instances = trips | "ToInstances" >> beam.Map(to_instance)
    # Analyze on every trip, as parity's `tft` transform analyzes on the side's replayed records; the
    # examples are then transformed per split with that one transform_fn.
    transform_fn = (instances, raw_metadata()) | "Analyze" >> tft_beam.AnalyzeDataset(preprocessing_fn)
    tft_output_dir = os.path.join(output_dir, "transform_fn")
    _ = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(tft_output_dir)
    # The raw schema next to it, where TFTransformOutput.raw_feature_spec() looks: serving builds its input
    # tensors from it.
    _ = raw_metadata() | "WriteRawMetadata" >> tft_beam.WriteMetadata(
        os.path.join(tft_output_dir, tft.TFTransformOutput.RAW_METADATA_DIR), pipeline
    )
    for name, _n in SPLIT_BUCKETS:
        label = name.title()
        part = instances | f"Select{label}" >> beam.Filter(lambda inst, name=name: split_of(inst["trip_id"]) == name)
        examples, examples_metadata = ((part, raw_metadata()), transform_fn) | f"Transform{label}" >> (
            tft_beam.TransformDataset()
        )
        _ = examples | f"Write{label}" >> beam.io.WriteToTFRecord(
            os.path.join(output_dir, "transformed", name),
            coder=tft.coders.ExampleProtoCoder(examples_metadata.schema),
            file_name_suffix=".tfrecord.gz",
        )


def run(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Offline taxi feature job (batch).")
    parser.add_argument("--input", required=True, help="JSON Lines file or glob of raw trips")
    parser.add_argument("--output_dir", required=True, help="where transform_fn/, transformed/, split/ go")
    parser.add_argument("--temp_dir", default=None, help="TFT temp dir (default: OUTPUT_DIR/tmp)")
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if options.view_as(StandardOptions).runner is None:
        # The in-process portable runner: no Prism download, and what the DirectRunner runs batch jobs on.
        options.view_as(StandardOptions).runner = "FnApiRunner"
    temp_dir = args.temp_dir or os.path.join(args.output_dir, "tmp")
    with beam.Pipeline(options=options) as pipeline:
        with tft_beam.Context(temp_dir=temp_dir):
            build(pipeline, args.input, args.output_dir)


if __name__ == "__main__":
    run()
