"""The taxi team's production feature job: the streaming path that serves features to the model.

    python pipelines/taxi/production_beam.py --input fixtures/taxi/capture/trips.jsonl \\
        --transform_fn_dir /tmp/taxi-offline/transform_fn --output_dir /tmp/taxi-production [BEAM_OPTIONS]

In production the trips come from a stream; here the job reads the captured stream from a file, in its
arrival order, and replays the source's watermark itself: a file is a bounded source, so a runner would
never see a record behind the watermark. The rest is the streaming job as deployed.

What it does, and the line of pipelines/taxi/parity.yaml (`sides.production`) that restates it:

| step of this job                                              | parity.yaml, `sides.production`           |
|---------------------------------------------------------------|-------------------------------------------|
| ReadFromText + json.loads                                     | `capture`                                 |
| event time = event_time seconds                               | `timestamp: {field: event_time, unit: s}` |
| bounded-out-of-orderness watermark (60 s) over arrival order  | `window.lateness: {arrival: ingest_time,` |
|   (ingest_time); a trip whose 1h window already closed is     |   `out_of_orderness: 60s, allowed: 0s}`   |
|   dropped (allowed lateness 0), counted in `late_dropped`     |                                           |
| WindowInto(FixedWindows(3600), allowed_lateness=0)            | `window: {type: fixed, size: 1h}`         |
| GroupByKey on pickup_zone per window, count + mean of fare    | `shard: {key: [pickup_zone], aggregates}` |
| trips cross the stream as Avro (read back here from the file) | `coder: {type: avro}`                     |
| train/eval split of (42, trip_id), logged with the features   | `seed: {value: 42, ops: {in_eval: split}}` |
| offline's transform_fn via `TFTransformOutput(dir)`           | `transform: {saved: {from_side: offline}}` |
|   `.transform_features_layer()`, in a DoFn over batches       |                                           |

The lateness is the planted bug of the example (pipelines/taxi/README.md): offline counts every trip in its
hour, production drops the ones that arrive after their hour closed, and the aggregates of their groups
shrink.

Output under `--output_dir`: `features/part-*.jsonl`, one `{"trip_id", "split", "features": {...}}` per
served trip, sorted keys.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import xxhash
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms import window

WINDOW_SIZE_S = 3600
OUT_OF_ORDERNESS_S = 60
ALLOWED_LATENESS_S = 0
SPLIT_SEED = 42
SPLIT_BUCKETS = (("train", 8), ("eval", 2))
BATCH_SIZE = 256

_NAMESPACE = "taxi.production"


def parse_trip(line: str) -> dict[str, Any]:
    return json.loads(line)


def drop_late(
    trips: Iterable[dict[str, Any]],
    *,
    out_of_orderness_s: int = OUT_OF_ORDERNESS_S,
    allowed_lateness_s: int = ALLOWED_LATENESS_S,
    window_size_s: int = WINDOW_SIZE_S,
) -> Iterator[tuple[dict[str, Any], bool]]:
    """(trip, is_late) in arrival order, as the stream's source and window operator decide it.

    watermark = max event time seen so far - out_of_orderness; a trip is late when its window ended more
    than `allowed_lateness_s` before the watermark. Ties in ingest_time go by trip_id, the capture's order.
    """
    max_event_time: int | None = None
    for trip in sorted(trips, key=lambda t: (t["ingest_time"], t["trip_id"])):
        event_time = trip["event_time"]
        window_end = (event_time // window_size_s + 1) * window_size_s
        late = max_event_time is not None and window_end + allowed_lateness_s < max_event_time - out_of_orderness_s
        yield trip, late
        if max_event_time is None or event_time > max_event_time:
            max_event_time = event_time


class _ReplayWatermarkFn(beam.DoFn):
    """All trips (one element) -> the on-time ones, stamped with their event time; late ones are counted."""

    def __init__(self, out_of_orderness_s: int, allowed_lateness_s: int) -> None:
        self._out_of_orderness_s = out_of_orderness_s
        self._allowed_lateness_s = allowed_lateness_s
        self._late = Metrics.counter(_NAMESPACE, "late_dropped")
        self._on_time = Metrics.counter(_NAMESPACE, "on_time")

    def process(self, trips: list[dict[str, Any]]):
        replay = drop_late(
            trips, out_of_orderness_s=self._out_of_orderness_s, allowed_lateness_s=self._allowed_lateness_s
        )
        for trip, late in replay:
            if late:
                self._late.inc()
                continue
            self._on_time.inc()
            yield window.TimestampedValue(trip, trip["event_time"])


def attach_zone_aggregates(element: tuple[str, Iterable[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """Every trip of one (window, pickup_zone) group, with the group's trip count and mean fare."""
    _, trips = element
    trips = list(trips)
    fares = [t["fare"] for t in trips if t.get("fare") is not None]
    mean = math.fsum(fares) / len(fares) if fares else None
    for trip in trips:
        yield {**trip, "trips_1h": len(trips), "fare_mean_1h": mean}


def split_of(trip_id: int, seed: int = SPLIT_SEED) -> str:
    total = sum(n for _, n in SPLIT_BUCKETS)
    bucket = xxhash.xxh3_64_intdigest(f"{seed}:{trip_id}".encode()) % total
    for name, n in SPLIT_BUCKETS:
        if bucket < n:
            return name
        bucket -= n
    raise AssertionError("unreachable")


def _to_python(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    return value


class _TransformFeaturesFn(beam.DoFn):
    """A batch of trips -> (trip, features) pairs, through the exported transform_fn as serving runs it."""

    def __init__(self, transform_fn_dir: str) -> None:
        self._dir = transform_fn_dir
        self._layer = None
        self._spec: dict[str, Any] = {}

    def setup(self) -> None:
        tft_output = tft.TFTransformOutput(self._dir)
        self._spec = tft_output.raw_feature_spec()
        self._layer = tft_output.transform_features_layer()

    def _tensors(self, trips: list[dict[str, Any]]) -> dict[str, Any]:
        tensors = {}
        for name, spec in self._spec.items():
            values = [trip.get(name) for trip in trips]
            if isinstance(spec, tf.io.RaggedFeature):
                rows = [list(v or []) for v in values]
                flat = [item for row in rows for item in row]
                tensors[name] = tf.RaggedTensor.from_row_lengths(
                    tf.constant(flat, dtype=spec.dtype, shape=[len(flat)]),
                    tf.constant([len(row) for row in rows], dtype=tf.int64),
                )
            else:
                # The serving client fills nulls with the type default, as the offline job does.
                default = "" if spec.dtype == tf.string else 0
                tensors[name] = tf.constant([default if v is None else v for v in values], dtype=spec.dtype)
        return tensors

    def process(self, trips: list[dict[str, Any]]):
        outputs = self._layer(self._tensors(trips))
        arrays = {name: tensor.numpy() for name, tensor in sorted(outputs.items())}
        for i, trip in enumerate(trips):
            yield trip, {name: _to_python(array[i]) for name, array in arrays.items()}


def _feature_line(element: tuple[dict[str, Any], dict[str, Any]]) -> str:
    trip, features = element
    row = {"trip_id": trip["trip_id"], "split": split_of(trip["trip_id"]), "features": features}
    return json.dumps(row, sort_keys=True, ensure_ascii=False)


class ServeZoneFeatures(beam.PTransform):
    """Raw trips in arrival order -> (trip, features) for the trips the stream keeps."""

    def __init__(
        self,
        transform_fn_dir: str,
        *,
        out_of_orderness_s: int = OUT_OF_ORDERNESS_S,
        allowed_lateness_s: int = ALLOWED_LATENESS_S,
    ) -> None:
        super().__init__()
        self._transform_fn_dir = transform_fn_dir
        self._out_of_orderness_s = out_of_orderness_s
        self._allowed_lateness_s = allowed_lateness_s

    def expand(self, trips):
        return (
            trips
            | "CollectStream" >> beam.combiners.ToList()
            | "ReplayWatermark" >> beam.ParDo(_ReplayWatermarkFn(self._out_of_orderness_s, self._allowed_lateness_s))
            | "FixedWindows1h" >> beam.WindowInto(
                window.FixedWindows(WINDOW_SIZE_S), allowed_lateness=self._allowed_lateness_s
            )
            | "KeyByZone" >> beam.Map(lambda t: (t["pickup_zone"], t))
            | "GroupByZone" >> beam.GroupByKey()
            | "AttachAggregates" >> beam.FlatMap(attach_zone_aggregates)
            | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
            | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=BATCH_SIZE)
            | "TransformFeatures" >> beam.ParDo(_TransformFeaturesFn(self._transform_fn_dir))
        )


def build(
    pipeline: beam.Pipeline,
    input_path: str,
    transform_fn_dir: str,
    output_dir: str,
    *,
    out_of_orderness_s: int = OUT_OF_ORDERNESS_S,
    allowed_lateness_s: int = ALLOWED_LATENESS_S,
) -> None:
    serve = ServeZoneFeatures(
        transform_fn_dir, out_of_orderness_s=out_of_orderness_s, allowed_lateness_s=allowed_lateness_s
    )
    _ = (
        pipeline
        | "ReadLines" >> beam.io.ReadFromText(input_path)
        | "ParseJson" >> beam.Map(parse_trip)
        | "Serve" >> serve
        | "ToJson" >> beam.Map(_feature_line)
        | "WriteFeatures" >> beam.io.WriteToText(
            os.path.join(output_dir, "features", "part"), file_name_suffix=".jsonl"
        )
    )


def run(argv: list[str] | None = None) -> beam.runners.runner.PipelineResult:
    parser = argparse.ArgumentParser(description="Production taxi feature job (streaming path).")
    parser.add_argument("--input", required=True, help="JSON Lines file or glob of captured raw trips")
    parser.add_argument("--transform_fn_dir", required=True, help="the offline job's OUTPUT_DIR/transform_fn")
    parser.add_argument("--output_dir", required=True, help="where features/ goes")
    parser.add_argument(
        "--out_of_orderness_s", type=int, default=OUT_OF_ORDERNESS_S, help="the source's watermark delay"
    )
    parser.add_argument(
        "--allowed_lateness_s",
        type=int,
        default=ALLOWED_LATENESS_S,
        help="how long a window accepts trips after the watermark passed its end (the fix: a day, 86400)",
    )
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if options.view_as(StandardOptions).runner is None:
        options.view_as(StandardOptions).runner = "FnApiRunner"
    pipeline = beam.Pipeline(options=options)
    build(
        pipeline,
        args.input,
        args.transform_fn_dir,
        args.output_dir,
        out_of_orderness_s=args.out_of_orderness_s,
        allowed_lateness_s=args.allowed_lateness_s,
    )
    result = pipeline.run()
    result.wait_until_finish()
    return result


if __name__ == "__main__":
    run()
