"""What the stages step needs from the whole side, computed before it as side inputs: the records' arrival
order (lateness), the merges of merging windows, and the exact aggregates per (window, grouping key).

Every element is a `RecBatch` (parity/replay/batch.py): the records of one batch, column by column.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from parity.config import SideConfig
from parity.errors import InputError, ParityError
from parity.replay.batch import RecBatch
from parity.replay.culprit import first_failing
from parity.stages import shard as shard_stage


def final_windows(windows: list[tuple], expired: Iterable[tuple], group_bytes: bytes,
                  merges: dict) -> list[tuple]:
    """The windows a record is in after lateness (`expired`: the windows it was late for) and merging."""
    kept = [w for w in windows if w not in expired] if expired else windows
    if merges and kept:
        mapping = merges.get(group_bytes, {})
        kept = sorted({mapping.get(w, w) for w in kept})
    return kept


def arrival_rows(batch: RecBatch) -> list[tuple]:
    # The tie breaker shifted into int64 (same order): Beam's coder pickles each int beyond int64 on its own.
    return [(arrival, timestamp if timestamp is not None else 0, input_fp - _INT63, rid, windows)
            for arrival, timestamp, input_fp, rid, windows
            in zip(batch.arrivals, batch.timestamps, batch.input_fps, batch.rids, batch.windows)]


_INT63 = 1 << 63


def concat_lists(lists: Iterable[list]) -> list:
    result: list = []
    for items in lists:
        result.extend(items)
    return result


def merge_rows(batch: RecBatch, late: dict) -> Iterator[tuple[bytes, set]]:
    groups: dict[bytes, set] = {}
    for rid, windows, group_bytes in zip(batch.rids, batch.windows, batch.group_bytes):
        expired = late.get(rid, ()) if late else ()
        groups.setdefault(group_bytes, set()).update(w for w in windows if w not in expired)
    yield from groups.items()


def aggregate_partials(batch: RecBatch, side: SideConfig, late: dict, merges: dict) -> Iterator[tuple[Any, Any]]:
    """The batch's partial aggregate states per (window, group): each group's records are added at once
    (`Aggregator.add_many`), in read order. Annotated as pairs: Beam 2.78 reads the hint, and a bare `tuple`
    (`Tuple[Any, ...]`) is refused by the CombinePerKey that follows."""
    members: dict[tuple, list[int]] = {}
    for i, (rid, windows, group_bytes) in enumerate(zip(batch.rids, batch.windows, batch.group_bytes)):
        kept = final_windows(windows, late.get(rid), group_bytes, merges) if late or merges else windows
        for win in kept:
            indexes = members.get((win, group_bytes))
            if indexes is None:
                members[(win, group_bytes)] = [i]
            else:
                indexes.append(i)
    specs = side.shard.aggregates  # type: ignore[union-attr]
    aggregator = shard_stage.Aggregator(specs)
    ordered = any(spec.combine == "sequential" for spec in specs)  # only a sequential sum reads the order
    records, timestamps, input_fps = batch.records, batch.timestamps, batch.input_fps
    for group, indexes in members.items():
        orders = [(timestamps[i] or 0, input_fps[i]) for i in indexes] if ordered else [(0, 0)] * len(indexes)
        try:
            aggregator.add_many(group, [records[i] for i in indexes], orders)
        except Exception as exc:  # e.g. min of a str and a float: name the record, the aggregate and the field
            raise _aggregate_error(batch, side, indexes, exc) from exc
    yield from aggregator.groups.items()


def _aggregate_error(batch: RecBatch, side: SideConfig, indexes: list[int], exc: Exception) -> ParityError:
    """The error naming the first record of the group whose value an aggregate could not take."""
    specs = side.shard.aggregates  # type: ignore[union-attr]
    for spec in specs:
        state = shard_stage.new_state(spec)
        found = first_failing(indexes, lambda i, spec=spec, state=state: shard_stage.add_values(
            spec, state, [batch.records[i]], [(0, 0)]))
        if found is not None:
            n, error = found
            i = indexes[n]
            value = batch.records[i].get(spec.field)  # type: ignore[arg-type]
            return InputError(
                f"side '{side.name}': record {batch.key_text(i)}: shard.aggregates.{spec.name} ({spec.op} of "
                f"field '{spec.field}') cannot take the value {_clipped_repr(value)} "
                f"({type(value).__name__}) with the group's other values: {type(error).__name__}: "
                f"{_clipped_repr(str(error))}; give the field one type (capture.schema)")
    return InputError(f"side '{side.name}': the shard stage's aggregates failed: {type(exc).__name__}: {exc}")


def _clipped_repr(value: Any, limit: int = 60) -> str:
    if isinstance(value, (str, bytes)) and len(value) > limit:
        value = value[:limit]
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _attached(kept: list[tuple], group_bytes: bytes, aggregates: dict, names: list[str]) -> dict[str, Any]:
    """The aggregates a record of this group in the windows `kept` carries: one value per name, a list of
    them when it is in several windows."""
    attached: dict[str, Any] = {}
    if names:
        per_window = [aggregates.get((w, group_bytes), {}) for w in kept]
        for name in names:
            values = [agg.get(name) for agg in per_window]
            attached[name] = values[0] if len(values) == 1 else values
    return attached
