"""The offline tensorflow-transform `preprocessing_fn` of the taxi example.

parity imports this module as `preprocess` (pipelines/taxi is first on `sys.path` when it loads
parity.yaml), and offline_beam.py runs it in the team's own batch job. It must stay importable as a
top-level module: no relative imports.

Inputs are dense `[batch]` tensors typed from the capture schema (strings `tf.string`, integers
`tf.int64`, floats `tf.float32`), with nulls already replaced by the type's default (`b""`, 0, 0.0),
plus the two per-(1h window, pickup_zone) aggregates that the shard stage attaches: `trips_1h` and
`fare_mean_1h`. `tags` (list<string>) may arrive as a `tf.RaggedTensor` or a `tf.SparseTensor`; it is
optional here, and `n_tags` is only produced when it is present.
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_transform as tft

MILES_BUCKETS = 5
ZONE_HOUR_BUCKETS = 64
COMPANY_VOCAB = "company"  # pinned so the asset keeps its name across refactors (catalogue T8)

# Features this function always outputs, with their dtypes; `n_tags` is added when `tags` is an input.
OUTPUT_FEATURES = {
    "fare_z": tf.float32,
    "company_id": tf.int64,
    "miles_bucket": tf.int64,
    "zone_hour_cross": tf.int64,
    "trips_1h": tf.int64,
    "fare_vs_zone_mean": tf.float32,
    "tips_ratio": tf.float32,
}


def _float(x: tf.Tensor) -> tf.Tensor:
    return tf.cast(x, tf.float32)


def _hour_of_day(event_time_s: tf.Tensor) -> tf.Tensor:
    """UTC hour of day of an epoch-seconds tensor (floor division: right for pre-1970 too)."""
    return tf.math.floormod(tf.math.floordiv(tf.cast(event_time_s, tf.int64), 3600), 24)


def _tag_count(tags: tf.Tensor | tf.RaggedTensor | tf.SparseTensor) -> tf.Tensor:
    if isinstance(tags, tf.RaggedTensor):
        return tf.cast(tags.row_lengths(), tf.int64)
    if isinstance(tags, tf.SparseTensor):
        ones = tf.SparseTensor(tags.indices, tf.ones_like(tags.values, tf.int64), tags.dense_shape)
        # reshape: reduce_sum of a SparseTensor loses the static rank TFT needs for a FixedLenFeature.
        return tf.reshape(tf.sparse.reduce_sum(ones, axis=1), [-1])
    # A dense [batch, n] tensor padded with b"".
    return tf.reduce_sum(tf.cast(tf.not_equal(tags, b""), tf.int64), axis=1)


def preprocessing_fn(inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """Taxi features: z-scored fare, company ids, mileage buckets, a zone x hour cross, zone ratios."""
    fare = _float(inputs["fare"])
    zone_hour = tf.strings.join(
        [inputs["pickup_zone"], tf.strings.as_string(_hour_of_day(inputs["event_time"]))],
        separator="|",
    )
    outputs = {
        "fare_z": tft.scale_to_z_score(fare),
        # A null company arrives as b""; TFT keeps empty strings out of vocabularies, so it lands in
        # the OOV bucket together with companies the analysis never saw.
        "company_id": tft.compute_and_apply_vocabulary(
            inputs["company"], num_oov_buckets=1, vocab_filename=COMPANY_VOCAB
        ),
        "miles_bucket": tft.bucketize(_float(inputs["trip_miles"]), num_buckets=MILES_BUCKETS),
        "zone_hour_cross": tf.strings.to_hash_bucket_fast(zone_hour, ZONE_HOUR_BUCKETS),
        "trips_1h": tf.cast(inputs["trips_1h"], tf.int64),
        "fare_vs_zone_mean": fare - _float(inputs["fare_mean_1h"]),
        # max(fare, 1): a missing fare (0.0) or a flag-fall-only trip must not blow the ratio up.
        "tips_ratio": _float(inputs["tips"]) / tf.maximum(fare, 1.0),
    }
    if "tags" in inputs:
        outputs["n_tags"] = _tag_count(inputs["tags"])
    return outputs
