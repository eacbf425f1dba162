"""What the stages step needs from the whole side, computed before it as side inputs: the records' arrival
order (lateness), the merges of merging windows, and the exact aggregates per (window, grouping key). Each is
a batch's columns handed to its stage's function (`parity.stages.window`, `parity.stages.shard`); a record an
aggregate cannot take is named here.

Every element is a `RecBatch` (parity/replay/batch.py): the records of one batch, column by column.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from parity.config import SideConfig
from parity.errors import InputError, ParityError
from parity.replay.batch import RecBatch
from parity.replay.culprit import first_failing
from parity.stages import shard as shard_stage
from parity.stages import window as window_stage


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
    """The batch's proto-windows per grouping key (`window.windows_per_group`), for the merges."""
    yield from window_stage.windows_per_group(batch.rids, batch.windows, batch.group_bytes, late).items()


def aggregate_partials(batch: RecBatch, side: SideConfig, late: dict, merges: dict) -> Iterator[tuple[Any, Any]]:
    """The batch's partial aggregate states per (window, group) (`shard.partial_states`), each record in its
    windows after lateness and merging. Annotated as pairs: Beam 2.78 reads the hint, and a bare `tuple`
    (`Tuple[Any, ...]`) is refused by the CombinePerKey that follows."""
    windows = batch.windows
    if late or merges:
        windows = [window_stage.final_windows(record_windows, late.get(rid), group_bytes, merges)
                   for rid, record_windows, group_bytes in zip(batch.rids, batch.windows, batch.group_bytes)]
    try:
        states = shard_stage.partial_states(side.shard.aggregates, windows,  # type: ignore[union-attr]
                                            batch.group_bytes, batch.records, batch.timestamps, batch.input_fps)
    except shard_stage.GroupError as exc:  # e.g. min of a str and a float: name the record, the aggregate and the field
        cause = exc.__cause__
        raise _aggregate_error(batch, side, exc.indexes, cause) from cause  # type: ignore[arg-type]
    yield from states.items()


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
