"""The `shard` stage: what a config says of it (`ShardSpec`, `AggregateSpec`), grouping key, shard id, and exact
per-(window, key) aggregates.

Aggregates are computed exactly and independently of the order records arrive in, so a report never depends
on bundle boundaries: integer sums are Python ints, float sums are kept as exact integers scaled by 2**1074
(every finite double is an integer multiple of 2**-1074) and rounded once at the end. A production pipeline
whose float sums depend on combine order is therefore different from parity's replay of it only where the
user's config says so, never by accident of the runner.
"""
from __future__ import annotations

import hashlib
import math
import zlib
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping

from parity.capture.schema import FieldType, parse_type
from parity.encoding.fingerprint import fingerprint, fingerprint_bytes
from parity.stages.reference import Reference

SHARD_HASHES = ("xxh3", "crc32", "md5", "python")
AGGREGATE_OPS = ("count", "sum", "mean", "min", "max", "distinct_count")
AGGREGATE_COMBINES = ("exact", "sequential")

_SCALE = 1074


@dataclass(frozen=True)
class AggregateSpec:
    """One of `shard.aggregates`: the aggregate's name (the field it adds to each record), op and field."""

    name: str
    op: str
    field: str | None
    combine: str = "exact"  # exact | sequential (float sum/mean in event-time order, like a streaming combiner)


@dataclass(frozen=True)
class ShardSpec:
    """A side's `shard:`: the grouping key (fields, or a user key function), the shard count and hash, and the
    aggregates computed per (window, key)."""

    key_fields: tuple[str, ...] | None
    key_function: Reference | None
    count: int
    hash: str
    aggregates: tuple[AggregateSpec, ...]


def aggregate_type(agg: AggregateSpec, schema: Mapping[str, FieldType] | None) -> FieldType:
    """The type of an aggregate's value: counts are int64, means float64, others follow the field."""
    if agg.op in ("count", "distinct_count"):
        return parse_type("int64")
    if agg.op == "mean":
        return parse_type("float64")
    source = (schema or {}).get(agg.field or "")
    if source is not None and source.name in ("int64", "int32", "bool"):
        return parse_type("int64")
    return parse_type("float64")


def grouping_key(spec: ShardSpec | None, record: dict, key_fn: Callable | None) -> Any:
    """The grouping key of a record: one field's value, a list of values, or the key function's result."""
    if spec is None:
        return None
    if key_fn is not None:
        return key_fn(record)
    fields = spec.key_fields
    if not fields:
        return None
    if len(fields) == 1:
        return record.get(fields[0])
    return [record.get(f) for f in fields]


def shard_id(spec: ShardSpec | None, key: Any, key_bytes: bytes) -> int:
    """The shard of a grouping key under the configured hash (`python` is salted per process)."""
    if spec is None:
        return 0
    count = spec.count
    if spec.hash == "xxh3":
        return fingerprint_bytes(key_bytes) % count
    if spec.hash == "crc32":
        return zlib.crc32(key_bytes) % count
    if spec.hash == "md5":
        return int.from_bytes(hashlib.md5(key_bytes).digest()[:8], "big") % count
    return hash(_hashable(key)) % count


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


# Partial aggregate states are small lists so they pickle cheaply between Beam stages.
def new_state(agg: AggregateSpec) -> list:
    if agg.combine == "sequential":
        return [[]]  # (event time, input fingerprint, value): summed in that order at the end
    if agg.op == "count":
        return [0]
    if agg.op in ("sum", "mean"):
        return [0, 0, 0, False]  # [count, int sum, scaled float sum, saw float]
    if agg.op in ("min", "max"):
        return [None]
    return [set()]  # distinct_count: fingerprints of distinct non-null values


def _add_value(agg: AggregateSpec, state: list, record: dict, order: tuple) -> None:
    """Adds one record's value to a group's state (`add_values`' general case)."""
    if agg.combine == "sequential":
        value = record.get(agg.field)  # type: ignore[arg-type]
        if value is not None and not isinstance(value, bool) and isinstance(value, (int, float)):
            state[0].append((order, float(value)))
        return
    if agg.op == "count":
        state[0] += 1
        return
    value = record.get(agg.field)  # type: ignore[arg-type]
    if value is None or (isinstance(value, float) and math.isnan(value) and agg.op != "distinct_count"):
        return
    if agg.op in ("sum", "mean"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value)
            except (TypeError, ValueError, OverflowError):
                return
            if math.isnan(value):  # a string "NaN" is skipped like a NaN float (it has no integer ratio)
                return
        state[0] += 1
        if isinstance(value, int):
            state[1] += value
        else:
            if math.isinf(value):
                state[2] = value if not isinstance(state[2], float) or state[2] == value else math.nan
            elif not isinstance(state[2], float):
                num, den = float(value).as_integer_ratio()
                state[2] += num * ((1 << _SCALE) // den)
            state[3] = True
    elif agg.op == "distinct_count":
        state[0].add(fingerprint(value))
    elif state[0] is None or (value < state[0] if agg.op == "min" else value > state[0]):
        state[0] = value


def merge_states(agg: AggregateSpec, left: list, right: list) -> list:
    if agg.combine == "sequential":
        return [left[0] + right[0]]
    if agg.op == "count":
        return [left[0] + right[0]]
    if agg.op in ("sum", "mean"):
        if isinstance(left[2], float) or isinstance(right[2], float):
            floats = [s for s in (left[2], right[2]) if isinstance(s, float)]
            scaled: Any = floats[0] if len(set(floats)) == 1 else math.nan
        else:
            scaled = left[2] + right[2]
        return [left[0] + right[0], left[1] + right[1], scaled, left[3] or right[3]]
    if agg.op == "distinct_count":
        return [left[0] | right[0]]
    values = [v for v in (left[0], right[0]) if v is not None]
    if not values:
        return [None]
    return [min(values) if agg.op == "min" else max(values)]


def finish(agg: AggregateSpec, state: list) -> Any:
    if agg.combine == "sequential":
        # Plain float additions in event-time order: what a streaming combiner computes, rounding included.
        items = sorted(state[0])
        if not items:
            return None if agg.op == "mean" else 0.0
        total = 0.0
        for _, value in items:
            total += value
        return total if agg.op == "sum" else total / len(items)
    if agg.op == "count":
        return state[0]
    if agg.op == "distinct_count":
        return len(state[0])
    if agg.op in ("min", "max"):
        return state[0]
    count, int_sum, scaled, saw_float = state
    if agg.op == "mean" and count == 0:
        return None
    if isinstance(scaled, float):  # an infinity or NaN was summed
        total: Any = scaled
        return total if agg.op == "sum" else total
    exact = Fraction(int_sum) + Fraction(scaled, 1 << _SCALE)
    if agg.op == "sum":
        return float(exact) if saw_float else int(exact)
    return float(exact / count)


def add_values(agg: AggregateSpec, state: list, records: list[dict], orders: list[tuple]) -> None:
    """Adds each record's value to a group's state, in turn (`orders[i]` is `records[i]`'s order, which only a
    sequential aggregate reads); the state is mergeable with other batches' (`merge_states`).

    Raises:
        Exception: a value the state cannot take (e.g. the min of a str and a float); the caller finds the
            record (one-record batches on a fresh state) and names it.
    """
    if _added_at_once(agg, state, records):
        return
    for record, order in zip(records, orders):
        _add_value(agg, state, record, order)


def _added_at_once(agg: AggregateSpec, state: list, records: list[dict]) -> bool:
    """Whether `add_values` was done in one step: a count adds the records' number, and a sum or mean of finite
    floats (and nulls) adds their exact scaled sum; False, with the state untouched, for any other aggregate or
    value."""
    if agg.combine == "sequential":
        return False
    if agg.op == "count":
        state[0] += len(records)
        return True
    if agg.op not in ("sum", "mean"):
        return False
    values = [record.get(agg.field) for record in records]  # type: ignore[arg-type]
    floats = [value for value in values if value is not None]
    if set(map(type, floats)) != {float} or not all(map(math.isfinite, floats)):
        return False
    state[0] += len(floats)
    if not isinstance(state[2], float):  # else an infinity or NaN summed before rules the sum
        state[2] += sum(map(_scaled, floats))
    state[3] = True
    return True


def _scaled(value: float) -> int:
    """A finite float as the exact integer `value * 2**1074` (its ratio's denominator is a power of two)."""
    num, den = value.as_integer_ratio()
    return num << (_SCALE + 1 - den.bit_length())


class Aggregator:
    """Accumulates the aggregates of many (window, key) groups; mergeable across batches."""

    def __init__(self, aggregates: tuple[AggregateSpec, ...]):
        self.aggregates = aggregates
        self.groups: dict[tuple, list[list]] = {}

    def add_many(self, group: tuple, records: list[dict], orders: list[tuple]) -> None:
        """Adds the records (`orders[i]` is `records[i]`'s order) to one group's states (`add_values`)."""
        states = self.groups.get(group)
        if states is None:
            states = self.groups[group] = [new_state(a) for a in self.aggregates]
        for agg, state in zip(self.aggregates, states):
            add_values(agg, state, records, orders)


def merge_group_states(aggregates: tuple[AggregateSpec, ...], states: list[list[list]]) -> list[list]:
    merged = states[0]
    for other in states[1:]:
        merged = [merge_states(a, l, r) for a, l, r in zip(aggregates, merged, other)]
    return merged


def finish_group(aggregates: tuple[AggregateSpec, ...], states: list[list]) -> dict[str, Any]:
    return {a.name: finish(a, s) for a, s in zip(aggregates, states)}
