"""One-record references of the stages: what each stage means for a single record, written plainly.

The package has one batch implementation per stage (`EventTime.micros_many`, `window.assign_many`,
`seed.seed_outputs_many`, `shard.add_values`, `ReadBatchesFn._fill`); these are the record-by-record readings
they are checked against (tests/stages/test_batched.py and the stage tests), the way the C canonical encoder is
checked against its Python reference. A behaviour change is made in the package and here, and the tests say
whether the two still agree.
"""
from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import xxhash
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import MIN_TIMESTAMP, Timestamp

from parity.config import MAX_WINDOWS_PER_RECORD, AggregateSpec
from parity.errors import UserCodeError
from parity.replay import culprit, read_step
from parity.replay.batch import RecBatch, key_text
from parity.stages import shard, window
from parity.stages.seed import FunctionOp, SampleOp, SeedSpec, _draw, _rng
from parity.stages.timestamp import EventTime, TimestampError, to_micros


def micros(event_time: EventTime, record: dict) -> int | None:
    """Event time in µs of one record, or None when the side has no timestamp config (Beam's default).

    Raises:
        TimestampError: the time is missing or cannot be read.
    """
    spec = event_time._spec
    if spec is None:
        return None
    if event_time._fn is not None:
        return to_micros(event_time._fn(record), "s")
    if spec.field not in record:
        raise TimestampError(f"field '{spec.field}' is missing")
    try:
        return to_micros(record[spec.field], spec.unit, spec.tz)
    except TimestampError as exc:
        raise TimestampError(f"field '{spec.field}' {exc}") from None


def assign(windowfn: beam_window.WindowFn, timestamp_us: int | None, record: dict) -> list[tuple]:
    """The windows Beam's `windowfn` assigns to one record with this event time, sorted."""
    ts = MIN_TIMESTAMP if timestamp_us is None else Timestamp(micros=timestamp_us)
    context = beam_window.WindowFn.AssignContext(ts, element=record)
    if isinstance(windowfn, beam_window.SlidingWindows):  # Beam's assign builds the whole list: check first
        window._check_sliding(windowfn)
    windows = list(itertools.islice(windowfn.assign(context), MAX_WINDOWS_PER_RECORD + 1))
    if len(windows) > MAX_WINDOWS_PER_RECORD:
        raise window._too_many(None)
    return sorted(window.to_window(w) for w in windows)


def seed_outputs(spec: SeedSpec, record: dict[str, Any] | None, key_bytes: bytes) -> dict[str, Any]:
    """The output of each of `spec`'s ops for one record, keyed by op name; a user function's exception
    propagates unchanged."""
    outputs: dict[str, Any] = {}
    for name, op in spec.ops:
        if isinstance(op, FunctionOp):
            outputs[name] = op.fn(record, _rng(spec.value, name, key_bytes))
            continue
        u, size = _draw(op.hash, spec.value, name, key_bytes)
        if isinstance(op, SampleOp):
            outputs[name] = u / size < op.rate
        else:
            outputs[name] = _bucket(op.buckets, u)
    return outputs


def _bucket(buckets: tuple[tuple[str, int], ...], u: int) -> str:
    point = u % sum(weight for _, weight in buckets)
    for name, weight in buckets:
        if point < weight:
            return name
        point -= weight
    raise AssertionError("unreachable: point < total weight")


def add_value(agg: AggregateSpec, state: list, record: dict, order: tuple = (0, 0)) -> None:
    """Adds one record's value to a group's aggregate state: the shard stage's general case
    (`shard._add_value`), which `add_values` applies to a record outside its fast case (`_added_at_once`), so
    the batch checks against this compare that fast case with the general one."""
    shard._add_value(agg, state, record, order)


def aggregate_add(aggregator: shard.Aggregator, group: tuple, record: dict, order: tuple = (0, 0)) -> None:
    """Adds one record to one group of `aggregator` (`add_value` of each aggregate)."""
    states = aggregator.groups.get(group)
    if states is None:
        states = aggregator.groups[group] = [shard.new_state(a) for a in aggregator.aggregates]
    for agg, state in zip(aggregator.aggregates, states):
        add_value(agg, state, record, order)


def fill(read: read_step.ReadBatchesFn, batch: RecBatch, rids: list[tuple[int, int]], locations: list[str],
         records: list[dict], quarantined: list[dict], read_encoded: list | None = None,
         read_fps: list | None = None) -> None:
    """`ReadBatchesFn._fill` record by record: each record checked alone, in order (its input bytes, their
    size, its key, its event and arrival times), added to `batch` or quarantined with its first failing
    check's reason."""
    side = read._side
    max_bytes = side.capture.max_record_bytes
    key_fields = side.capture.key
    single_key = key_fields[0] if key_fields and len(key_fields) == 1 else None
    lateness, arrival_unit, arrival_tz = read._lateness, read._arrival_unit, read._arrival_tz
    fps: list | None = None
    if read_step._reader_encoded(records, read_encoded, read_fps):
        encoded: list[bytes | str] = read_encoded  # type: ignore[assignment]
        fps = read_fps
    else:
        encoded = [read_step._encode_or_reason(record) for record in records]
    for index, (rid, location, record, data) in enumerate(zip(rids, locations, records, encoded)):
        if isinstance(data, str):
            quarantined.append(read_step._quarantine_entry(location, data, repr(record)))
            continue
        if len(data) > max_bytes:
            quarantined.append(read_step._quarantine_entry(
                location, f"record too large: {len(data)} bytes above capture.max_record_bytes {max_bytes}",
                repr(record)))
            continue
        input_fp = fps[index] if fps is not None else xxhash.xxh3_64_intdigest(data)
        if single_key is not None:
            key: Any = record.get(single_key)
            if key is None:
                quarantined.append(read_step._quarantine_entry(location, read_step._missing_key(single_key), repr(record)))
                continue
        elif key_fields:
            missing = [f for f in key_fields if record.get(f) is None]
            if missing:
                quarantined.append(read_step._quarantine_entry(location, read_step._missing_key(missing[0]), repr(record)))
                continue
            key = [record[f] for f in key_fields]
        else:
            key = input_fp
        try:
            timestamp = micros(read._event_time, record)
            arrival = None
            if lateness is not None:
                try:
                    arrival = to_micros(record.get(lateness.arrival), arrival_unit, arrival_tz)
                except TimestampError as exc:
                    quarantined.append(read_step._quarantine_entry(location, f"arrival time: field "
                                                               f"'{lateness.arrival}' {exc}", repr(record)))
                    continue
        except TimestampError as exc:
            quarantined.append(read_step._quarantine_entry(location, f"event time: {exc}", repr(record)))
            continue
        except (Exception, SystemExit) as exc:
            raise UserCodeError(f"record {key_text(key)}: timestamp.function {culprit.raised(exc)}") from exc
        batch.rids.append(rid)
        batch.locations.append(location)
        batch.records.append(record)
        batch.keys.append(key)
        batch.input_bytes.append(data)
        batch.input_fps.append(input_fp)
        batch.timestamps.append(timestamp)
        batch.arrivals.append(arrival)
    batch.locations = pa.array(batch.locations, pa.string())  # a read batch holds these two as Arrow
    batch.input_bytes = pa.array(batch.input_bytes, pa.binary())
    read._key_windows_groups(batch)


def model_outputs(saved: str, features: dict) -> dict:
    """The model stage of one record: its features fed to the SavedModel's `serving_default` alone (a batch of
    one, shaped as the signature asks), outputs as plain floats (one value) or lists."""
    import numpy as np
    import tensorflow as tf

    fn = tf.saved_model.load(saved).signatures["serving_default"]
    tensors = {}
    for name, spec in fn.structured_input_signature[1].items():
        value = features[name]
        value = value[0] if isinstance(value, list) and len(value) == 1 else value
        array = np.array([value], dtype=spec.dtype.as_numpy_dtype)
        tensors[name] = tf.constant(array.reshape([1] + [d or 1 for d in spec.shape.as_list()[1:]]))
    out = {}
    for name, tensor in fn(**tensors).items():
        array = np.asarray(tensor).astype(np.float64).reshape(-1)
        out[name] = array.item() if array.size == 1 else array.tolist()
    return out
