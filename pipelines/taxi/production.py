"""The taxi production feature job as a streaming-style Beam pipeline, with a parity tap after each stage.

    PYTHONPATH=. python pipelines/taxi/production.py --input fixtures/taxi/capture/trips.jsonl \\
        --tft_output OFFLINE_SET/tft_output --output_dir /tmp/taxi-prod --tap_dir /tmp/taxi-prod/taps \\
        [--sample_rate 0.1] [--keep_values 1000] [--redact] [BEAM_OPTIONS]

`--tft_output` is the transform graph the offline side exported: `parity replay pipelines/taxi/parity.yaml
--side offline --out OFFLINE_SET` writes it to `OFFLINE_SET/tft_output`. With `--tap_dir`, the job taps
each stage and, once it has finished, finalizes the tap set, which `parity diff OFFLINE_SET TAP_DIR` compares
with the offline replay (docs/taps.md). Without it the job runs without taps (benchmarks/tap_overhead.py
compares the two).

The stages as the job runs them, each followed by its tap, which fingerprints the value a parity replay of
`sides.production` in pipelines/taxi/parity.yaml computes for that stage:

- **input**: read the capture in arrival order, `json.loads`. Tap `input` (key `trip_id`): the record.
- **window**: a watermark replay over arrival order (60 s out of orderness) sends the trips whose hour had
  already closed to a late output, where they are dropped (allowed lateness 0; the planted bug of the
  example). Tap `window` with `late=True` on that output: `{timestamp_us, late: true, windows}`. The other
  trips: `TimestampedValue(event_time)`, `WindowInto(FixedWindows(3600))`; tap `window`, with Beam's own
  timestamp and window: `{timestamp_us, windows}`.
- **shard**: GroupByKey on `pickup_zone` per window; `trips_1h` (count) and `fare_mean_1h` (exact mean of
  the non-null fares) joined back to each trip; the zone's partition of the 16-partition feature topic.
  Tap `shard`: `{key, shard, aggregates}`.
- **coder**: trips cross the stream as Avro (a fastavro round trip). Tap `coder`: the record after the hop.
- **seed**: the train/eval split (8:2) seeded with 42 and the trip's key. Tap `seed`: `{"in_eval": split}`.
- **transform**: the offline `transform_fn` applied to batches of trips, as serving applies it. Tap
  `transform`: the features.

Output under `--output_dir`: `features/part-*.jsonl`, one `{"trip_id", "partition", "split", "features"}` per
served trip.
"""
from __future__ import annotations

import argparse
import io
import json
import os
from fractions import Fraction
from typing import Any, Iterable, Iterator

import apache_beam as beam
import fastavro
import numpy as np
import xxhash
from apache_beam.metrics import Metrics
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.transforms import window

from parity.encoding import canonical
from parity.beam import TapStage, finalize

WINDOW_SIZE_S = 3600
OUT_OF_ORDERNESS_S = 60
ALLOWED_LATENESS_S = 0
PARTITIONS = 16
SPLIT_SEED = 42
SPLIT_OP = "in_eval"
SPLIT_BUCKETS = (("train", 8), ("eval", 2))
BATCH_SIZE = 256
KEY = ["trip_id"]
SIDE = "production"

_NAMESPACE = "taxi.production"

# The capture schema (fixtures/taxi/README.md) plus the two aggregates; every field may be null.
FIELDS = {"trip_id": "long", "event_time": "long", "ingest_time": "long", "pickup_zone": "string",
          "dropoff_zone": "string", "company": "string", "fare": "double", "trip_miles": "double",
          "trip_seconds": "long", "payment_type": "string", "tips": "double",
          "tags": {"type": "array", "items": "string"}, "trips_1h": "long", "fare_mean_1h": "double"}
AVRO_SCHEMA = fastavro.parse_schema({
    "type": "record", "name": "Trip", "namespace": "taxi",
    "fields": [{"name": name, "type": ["null", kind], "default": None} for name, kind in sorted(FIELDS.items())]})


def parse_trip(line: str) -> dict[str, Any]:
    return json.loads(line)


# -- window: the source's watermark and Beam's late-data rule ------------------------------------------------

def late_trips(trips: Iterable[dict[str, Any]], *, out_of_orderness_s: int = OUT_OF_ORDERNESS_S,
               allowed_lateness_s: int = ALLOWED_LATENESS_S) -> Iterator[tuple[dict[str, Any], bool]]:
    """(trip, is_late) in arrival order (`ingest_time`, then `trip_id`, the order the stream delivers).

    The watermark after a trip arrives is the largest event time seen so far minus the out-of-orderness; a
    trip is late when its window's `max_timestamp()` (end - 1 µs) plus the allowed lateness is behind the
    watermark: Beam's rule for dropping late data.
    """
    max_event_us: int | None = None
    for trip in sorted(trips, key=lambda t: (t["ingest_time"], t["trip_id"])):
        event_us = trip["event_time"] * 1_000_000
        max_event_us = event_us if max_event_us is None else max(max_event_us, event_us)
        watermark_us = max_event_us - out_of_orderness_s * 1_000_000
        end_us = (trip["event_time"] // WINDOW_SIZE_S + 1) * WINDOW_SIZE_S * 1_000_000
        yield trip, end_us - 1 + allowed_lateness_s * 1_000_000 < watermark_us


class _ReplayWatermarkFn(beam.DoFn):
    """All trips (one element) -> on-time trips stamped with their event time; late ones to the `late` output."""

    LATE = "late"

    def __init__(self, out_of_orderness_s: int, allowed_lateness_s: int) -> None:
        self._out_of_orderness_s = out_of_orderness_s
        self._allowed_lateness_s = allowed_lateness_s
        self._late = Metrics.counter(_NAMESPACE, "late_dropped")
        self._on_time = Metrics.counter(_NAMESPACE, "on_time")

    def process(self, trips: list[dict[str, Any]]):
        for trip, late in late_trips(trips, out_of_orderness_s=self._out_of_orderness_s,
                                     allowed_lateness_s=self._allowed_lateness_s):
            stamped = window.TimestampedValue(trip, trip["event_time"])
            if late:
                self._late.inc()
                yield beam.pvalue.TaggedOutput(self.LATE, stamped)
            else:
                self._on_time.inc()
                yield stamped


# -- shard: per-(window, zone) aggregates and the zone's partition ------------------------------------------

def zone_partition(zone: Any) -> int:
    """The partition of the feature topic a zone's trips go to: XXH3 of the zone's canonical bytes, mod 16."""
    return xxhash.xxh3_64_intdigest(canonical.encode(zone)) % PARTITIONS


def attach_zone_aggregates(element: tuple[str, Iterable[dict[str, Any]]]) -> Iterator[dict[str, Any]]:
    """Every trip of one (window, pickup_zone) group with the group's trip count and exact mean fare."""
    _, trips = element
    trips = list(trips)
    fares = [t["fare"] for t in trips if t.get("fare") is not None]
    # The exact mean, rounded once: independent of the order GroupByKey hands the trips over.
    mean = float(sum(map(Fraction, fares), Fraction(0)) / len(fares)) if fares else None
    for trip in trips:
        yield {**trip, "trips_1h": len(trips), "fare_mean_1h": mean}


def shard_value(trip: dict[str, Any]) -> dict[str, Any]:
    return {"key": trip["pickup_zone"], "shard": zone_partition(trip["pickup_zone"]),
            "aggregates": {"trips_1h": trip["trips_1h"], "fare_mean_1h": trip["fare_mean_1h"]}}


# -- coder: the Avro hop ------------------------------------------------------------------------------------

def avro_roundtrip(trip: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, AVRO_SCHEMA, {name: trip.get(name) for name in FIELDS})
    buffer.seek(0)
    return fastavro.schemaless_reader(buffer, AVRO_SCHEMA, None)


# -- seed: the train/eval split -----------------------------------------------------------------------------

def split_of(trip_id: int, seed: int = SPLIT_SEED) -> str:
    """8 of 10 buckets of XXH3(repr((seed, op)) NUL canonical key bytes) are train: the draw parity's `split`
    op makes (parity/stages/seed.py), so a replay of this job's config agrees with it record by record."""
    data = repr((seed, SPLIT_OP)).encode("utf-8") + b"\x00" + canonical.encode(trip_id)
    point = xxhash.xxh3_64_intdigest(data) % sum(n for _, n in SPLIT_BUCKETS)
    for name, weight in SPLIT_BUCKETS:
        if point < weight:
            return name
        point -= weight
    raise AssertionError("unreachable")


# -- transform: the offline transform_fn as serving applies it ----------------------------------------------

class _TransformFeaturesFn(beam.DoFn):
    """A batch of (trip, seeded) pairs -> (trip, seeded, features), through the exported transform graph."""

    def __init__(self, tft_output_dir: str) -> None:
        self._dir = tft_output_dir

    def setup(self) -> None:
        import tensorflow_transform as tft

        self._output = tft.TFTransformOutput(self._dir)
        self._spec = self._output.raw_feature_spec()

    def _tensors(self, trips: list[dict[str, Any]]) -> dict[str, Any]:
        import tensorflow as tf

        tensors = {}
        for name, spec in sorted(self._spec.items()):
            values = [trip.get(name) for trip in trips]
            if isinstance(spec, tf.io.VarLenFeature):
                rows = [[_tf(v) for v in value] if isinstance(value, list) else [] for value in values]
                ragged = tf.ragged.constant(rows, dtype=spec.dtype, ragged_rank=1) if any(rows) else \
                    tf.RaggedTensor.from_row_lengths(tf.constant([], dtype=spec.dtype), [0] * len(rows))
                tensors[name] = ragged.to_sparse()
                continue
            # The serving client fills nulls with the type's default, as tf.Example parsing does.
            default = b"" if spec.dtype == tf.string else 0
            column = [default if v is None else _tf(v) for v in values]
            if spec.dtype == tf.string:
                tensors[name] = tf.constant(np.array(column, dtype=object), dtype=tf.string)
            else:
                tensors[name] = tf.constant(np.array(column, dtype=spec.dtype.as_numpy_dtype))
        return tensors

    def process(self, batch: list[tuple[dict[str, Any], dict[str, Any]]]):
        outputs = self._output.transform_raw_features(self._tensors([t for t, _ in batch]),
                                                      drop_unused_features=True)
        columns = {name: _rows(tensor) for name, tensor in sorted(outputs.items())}
        for i, (trip, seeded) in enumerate(batch):
            yield trip, seeded, {name: column[i] for name, column in columns.items()}


def _tf(value: Any) -> Any:
    return value.encode("utf-8") if isinstance(value, str) else value


def _py(value: Any) -> Any:
    """Numpy scalars as the model reads them: float32 stays float32, the rest become Python scalars."""
    if isinstance(value, np.generic) and not (isinstance(value, np.floating) and value.dtype == np.float32):
        return value.item()
    return value


def _rows(tensor: Any) -> list:
    import tensorflow as tf

    if isinstance(tensor, tf.SparseTensor):
        tensor = tf.RaggedTensor.from_sparse(tensor)
    if isinstance(tensor, tf.RaggedTensor):
        values, splits = tensor.flat_values.numpy(), tensor.row_splits.numpy()
        return [[_py(v) for v in values[splits[i]:splits[i + 1]]] for i in range(len(splits) - 1)]
    array = tensor.numpy()
    if array.ndim == 1:
        return [_py(v) for v in array]
    return [[_py(v) for v in np.ravel(row)] for row in array]


def _feature_line(element: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]) -> str:
    trip, seeded, features = element
    row = {"trip_id": trip["trip_id"], "partition": zone_partition(trip["pickup_zone"]),
           "split": seeded[SPLIT_OP], "features": {k: _json_number(v) for k, v in features.items()}}
    return json.dumps(row, sort_keys=True, ensure_ascii=False)


def _json_number(value: Any) -> Any:
    if isinstance(value, list):
        return [_json_number(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


# -- the job ------------------------------------------------------------------------------------------------

def _trip_key(element: tuple) -> int:
    return element[0]["trip_id"]


class _Taps:
    """TapStage factory of one job: the same set, side, sampling and values for every stage (or no taps)."""

    def __init__(self, tap_dir: str | None, **settings: Any) -> None:
        self.tap_dir = tap_dir
        self.settings = settings

    def __call__(self, pcoll: beam.PCollection, label: str, stage: str, **kwargs: Any) -> beam.PCollection:
        if self.tap_dir is None:
            return pcoll
        if "key_fn" not in kwargs:
            kwargs["key_fields"] = KEY
        return pcoll | label >> TapStage(stage, self.tap_dir, side=SIDE, **self.settings, **kwargs)


def build(pipeline: beam.Pipeline, input_path: str, tft_output_dir: str, output_dir: str, *,
          tap_dir: str | None = None, sample_rate: float = 1.0, keep_values: int | None = 1000,
          redact: bool = False, out_of_orderness_s: int = OUT_OF_ORDERNESS_S,
          allowed_lateness_s: int = ALLOWED_LATENESS_S) -> None:
    """Adds the job to `pipeline`; with `tap_dir`, a parity tap after each stage (finalize after the run)."""
    tap = _Taps(tap_dir, sample_rate=sample_rate, keep_values=keep_values, redact=redact)
    trips = pipeline | "ReadCapture" >> beam.io.ReadFromText(input_path) | "ParseJson" >> beam.Map(parse_trip)
    trips = tap(trips, "TapInput", "input")

    stamped = (trips
               | "CollectStream" >> beam.combiners.ToList()
               | "ReplayWatermark" >> beam.ParDo(_ReplayWatermarkFn(out_of_orderness_s, allowed_lateness_s))
               .with_outputs(_ReplayWatermarkFn.LATE, main="on_time"))
    late = stamped[_ReplayWatermarkFn.LATE] | "LateWindows" >> beam.WindowInto(window.FixedWindows(WINDOW_SIZE_S))
    tap(late, "TapLate", "window", late=True)  # the late output ends here: the stream drops these trips

    windowed = stamped.on_time | "FixedWindows1h" >> beam.WindowInto(
        window.FixedWindows(WINDOW_SIZE_S), allowed_lateness=allowed_lateness_s)
    windowed = tap(windowed, "TapWindow", "window")

    sharded = (windowed
               | "KeyByZone" >> beam.Map(lambda t: (t["pickup_zone"], t))
               | "GroupByZone" >> beam.GroupByKey()
               | "AttachAggregates" >> beam.FlatMap(attach_zone_aggregates))
    sharded = tap(sharded, "TapShard", "shard", value_fn=shard_value)

    decoded = (sharded
               | "GlobalWindow" >> beam.WindowInto(window.GlobalWindows())
               | "AvroHop" >> beam.Map(avro_roundtrip))
    decoded = tap(decoded, "TapCoder", "coder")

    seeded = decoded | "SeededSplit" >> beam.Map(lambda t: (t, {SPLIT_OP: split_of(t["trip_id"])}))
    seeded = tap(seeded, "TapSeed", "seed", key_fn=_trip_key, value_fn=lambda e: e[1])

    served = (seeded
              | "Batch" >> beam.BatchElements(min_batch_size=1, max_batch_size=BATCH_SIZE)
              | "TransformFeatures" >> beam.ParDo(_TransformFeaturesFn(tft_output_dir)))
    served = tap(served, "TapTransform", "transform", key_fn=_trip_key, value_fn=lambda e: e[2])

    _ = (served
         | "ToJson" >> beam.Map(_feature_line)
         | "WriteFeatures" >> beam.io.WriteToText(os.path.join(output_dir, "features", "part"),
                                                  file_name_suffix=".jsonl"))


def run(argv: list[str] | None = None) -> dict[str, Any] | None:
    """Runs the job; with --tap_dir, finalizes the tap set and returns its manifest."""
    parser = argparse.ArgumentParser(description="Taxi production feature job (streaming path) with parity taps.")
    parser.add_argument("--input", required=True, help="JSON Lines file or glob of captured raw trips")
    parser.add_argument("--tft_output", required=True, help="the offline side's exported TFT output dir")
    parser.add_argument("--output_dir", required=True, help="where features/ goes")
    parser.add_argument("--tap_dir", default=None, help="fingerprint set the taps write (default: no taps)")
    parser.add_argument("--sample_rate", type=float, default=1.0)
    parser.add_argument("--keep_values", type=lambda s: None if s == "all" else int(s), default=1000,
                        help="records whose values the set keeps (a count, or 'all')")
    parser.add_argument("--redact", action="store_true")
    parser.add_argument("--out_of_orderness_s", type=int, default=OUT_OF_ORDERNESS_S)
    parser.add_argument("--allowed_lateness_s", type=int, default=ALLOWED_LATENESS_S)
    args, beam_args = parser.parse_known_args(argv)
    options = PipelineOptions(beam_args)
    if options.view_as(StandardOptions).runner is None:
        options.view_as(StandardOptions).runner = "FnApiRunner"
    pipeline = beam.Pipeline(options=options)
    build(pipeline, args.input, args.tft_output, args.output_dir, tap_dir=args.tap_dir,
          sample_rate=args.sample_rate, keep_values=args.keep_values, redact=args.redact,
          out_of_orderness_s=args.out_of_orderness_s, allowed_lateness_s=args.allowed_lateness_s)
    pipeline.run().wait_until_finish()
    if args.tap_dir is None:
        return None
    return finalize(args.tap_dir, side=SIDE, key=KEY, config_name="taxi-hourly",
                    transform_graph=args.tft_output)


if __name__ == "__main__":
    run()
