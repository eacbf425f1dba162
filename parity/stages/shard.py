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
from typing import Any, Callable, Mapping, Sequence

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


def grouping_keys(spec: ShardSpec | None, records: Sequence[dict], key_fn: Callable | None) -> list[Any]:
    """The grouping key of each record of a batch (`grouping_key`): one field's (the common key) read as its
    column, without a call of `grouping_key` per record.

    Raises:
        Exception: whatever a `shard.key.function` raises, unchanged; the caller finds the record (one-record
            batches) and names it.
    """
    if spec is not None and key_fn is None and len(spec.key_fields) == 1:  # one field: its column
        name = spec.key_fields[0]
        return [record.get(name) for record in records]
    return [grouping_key(spec, record, key_fn) for record in records]


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


def shard_value(spec: ShardSpec | None, group: Any, group_bytes: bytes, attached: dict[str, Any],
                shard_ids: dict[bytes, int]) -> dict[str, Any]:
    """The shard stage's value of a record of this group carrying the aggregates `attached`: its grouping key,
    shard and aggregates. `shard_ids` caches each group's shard (a batch's records share few groups)."""
    shard = shard_ids.get(group_bytes)
    if shard is None:
        shard = shard_ids[group_bytes] = shard_id(spec, group, group_bytes)
    return {"key": group, "shard": shard, "aggregates": attached}


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


class GroupError(Exception):
    """An aggregate could not take a value of one (window, key) group of a batch (`partial_states`); `indexes`
    are the group's records in the batch, for the caller to find which one and name it. The aggregate's own
    exception is the `__cause__`."""

    def __init__(self, indexes: list[int]):
        super().__init__(f"an aggregate failed on one of the records {indexes}")
        self.indexes = indexes


def partial_states(aggregates: tuple[AggregateSpec, ...], windows: Sequence[list[tuple]],
                   group_bytes: Sequence[bytes], records: Sequence[dict], timestamps: Sequence[int | None],
                   input_fps: Sequence[int]) -> dict[tuple, list[list]]:
    """A batch's partial aggregate states per (window, grouping key): each group's records are added at once
    (`Aggregator.add_many`), in batch order. `windows[i]` are record i's final windows (after lateness and
    merging); a record's order is its event time, then its input fingerprint (only a sequential aggregate
    reads it). The states merge with other batches' (`merge_group_states`).

    Raises:
        GroupError: an aggregate could not take a value of a group.
    """
    members: dict[tuple, list[int]] = {}
    for i, (kept, group) in enumerate(zip(windows, group_bytes)):
        for win in kept:
            indexes = members.get((win, group))
            if indexes is None:
                members[(win, group)] = [i]
            else:
                indexes.append(i)
    aggregator = Aggregator(aggregates)
    ordered = any(spec.combine == "sequential" for spec in aggregates)  # only a sequential sum reads the order
    for group, indexes in members.items():
        orders = [(timestamps[i] or 0, input_fps[i]) for i in indexes] if ordered else [(0, 0)] * len(indexes)
        try:
            aggregator.add_many(group, [records[i] for i in indexes], orders)
        except Exception as exc:  # e.g. min of a str and a float
            raise GroupError(indexes) from exc
    return aggregator.groups


def attached_aggregates(windows: list[tuple], group_bytes: bytes, aggregates: Mapping[tuple, dict[str, Any]],
                        names: list[str]) -> dict[str, Any]:
    """The aggregates a record of this group in these (final) windows carries: one value per name, a list of
    them when it is in several windows (`aggregates`: each (window, group)'s finished values)."""
    attached: dict[str, Any] = {}
    if names:
        per_window = [aggregates.get((w, group_bytes), {}) for w in windows]
        for name in names:
            values = [agg.get(name) for agg in per_window]
            attached[name] = values[0] if len(values) == 1 else values
    return attached


def merge_group_states(aggregates: tuple[AggregateSpec, ...], states: list[list[list]]) -> list[list]:
    merged = states[0]
    for other in states[1:]:
        merged = [merge_states(a, l, r) for a, l, r in zip(aggregates, merged, other)]
    return merged


def finish_group(aggregates: tuple[AggregateSpec, ...], states: list[list]) -> dict[str, Any]:
    return {a.name: finish(a, s) for a, s in zip(aggregates, states)}
