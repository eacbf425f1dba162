"""The window, shard, coder and seed stages of a batch (`ApplyStagesFn`): thin adapters over the pure stage
modules, once per batch, with the side's lateness, merges and aggregates as side inputs.

Every element is a `RecBatch` (parity/replay/batch.py): the records of one batch, column by column.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Iterator, Mapping

import apache_beam as beam
import pyarrow.compute as pc

from parity.config import Ref, SideConfig
from parity.errors import UserCodeError
from parity.missing import MISSING
from parity.replay import counters, spill
from parity.replay.batch import READ, RecBatch, side_field_types
from parity.replay.culprit import first_failing, raised
from parity.replay.write_step import check_value_sizes, stage_arrays
from parity.stages import STAGES
from parity.stages import shard as shard_stage
from parity.stages import window as window_stage
from parity.stages.coder import CoderFailure, build_coder, roundtrip_batch
from parity.stages.seed import FunctionOp, SeedSpec, seed_outputs_many
from parity.stages.window import DROPPED_LATE
from parity.storage.context import Storage


_IMMUTABLE = frozenset({type(None), bool, int, float, str, bytes})
# the most windows and groups whose values `ApplyStagesFn._on_time_values` keeps across batches
_APART_LIMIT = 100_000


# the stages ApplyStagesFn computes and settles (window to seed): the input stage's bytes come from the read,
# the transform stage's values from ApplyTransformFn
SETTLED_STAGES = STAGES[1:-1]


def _seed_spec(side: SideConfig) -> SeedSpec | None:
    """The side's seed with its function ops' references imported."""
    if side.seed is None:
        return None
    ops = tuple((name, FunctionOp(op.fn.resolve()) if isinstance(op, FunctionOp) and isinstance(op.fn, Ref)
                 else op) for name, op in side.seed.ops)
    return dataclasses.replace(side.seed, ops=ops)


class ApplyStagesFn(beam.DoFn):
    """Window, shard, coder and seed stages of a batch, with the side-wide results as side inputs."""

    def __init__(self, side: SideConfig, spills: spill.SpillPolicy = spill.SpillPolicy.KEEP, *, storage: Storage):
        self._side = side
        self._spills = spills  # what becomes of each read batch's spill file once loaded
        self._storage = storage  # the run's storage context: spill files may be on a URL

    def setup(self) -> None:
        side = self._side
        self._coder = None
        if side.coder is not None:
            factory = side.coder.factory
            spec = dataclasses.replace(side.coder, factory=factory.resolve()) if isinstance(factory, Ref) \
                else side.coder
            try:
                self._coder = build_coder(spec, side_field_types(side))
            except Exception as exc:
                what = f"the factory '{factory.text}'" if isinstance(factory, Ref) else f"type {side.coder.type}"
                raise UserCodeError(f"sides.{side.name}.coder: cannot build the coder ({what}): "
                                    f"{type(exc).__name__}: {exc}") from exc
        self._seed = _seed_spec(side)
        self._counts = counters.SideCounters(side.name, counters.STAGED)
        # (window lists per windows, shard value per group) of a side without merges or aggregates: the same
        # values in every batch, and only read after (encoded), so shared by its records (`_on_time_values`)
        self._apart: tuple[dict[tuple, list], dict[bytes, dict]] = ({}, {})

    def process(self, element: str | RecBatch, late: dict, merges: dict, aggregates: dict) -> Iterator[RecBatch]:
        batch = self._read_batch(element)
        batch.expect(READ)
        count = len(batch)
        window_values, shard_values, live = self._window_and_shard(batch, late, merges, aggregates)
        live_records = [batch.records[i] for i in live] if len(live) < count else batch.records
        decoded = roundtrip_batch(self._coder, live_records) if self._coder else live_records
        coder_values, transform_inputs, passed = _coder_columns(count, live, decoded)
        seed_values: list[Any] = [DROPPED_LATE] * count
        transform_values: list[Any] = [DROPPED_LATE] * count
        if len(passed) < len(live):
            for i in set(live).difference(passed):  # the coder round trip failed: no seed, no transform
                seed_values[i] = transform_values[i] = {"error": "coder round trip failed"}
        self._seeds(batch, passed, transform_inputs, seed_values)
        batch.values = {"window": window_values, "shard": shard_values, "coder": coder_values,
                        "seed": seed_values, "transform": transform_values}
        batch.transform_inputs = transform_inputs
        encoded = [stage_arrays(batch, stage, batch.values[stage]) for stage in SETTLED_STAGES]
        # the seed stage's values come from user functions; the stages before it hold the record (whose size
        # the read bounds) and parity's own values
        seed_bytes = encoded[SETTLED_STAGES.index("seed")][0]
        check_value_sizes(batch, self._side, "seed", pc.binary_length(seed_bytes).to_numpy(zero_copy_only=False),
                          batch.values["seed"])
        batch.settle(SETTLED_STAGES, encoded)
        self._counts.add(counters.STAGED, count)
        yield batch

    def _read_batch(self, element: str | RecBatch) -> RecBatch:
        """The read batch this step stages: loaded from its spill file when the step waits for side inputs (the
        runner materialises whatever reaches such a step: parity.replay.spill), else the batch itself, from the
        read this step is fused with (`ReplaySide._staged`)."""
        if isinstance(element, RecBatch):
            return element
        return self._spills.load(element, self._storage)

    def _window_and_shard(self, batch: RecBatch, late: dict, merges: dict,
                          aggregates: dict) -> tuple[list[Any], list[Any], list[int]]:
        """The window and shard stage values of every record of the batch, and the indices of the records that
        are not dropped late (each carries its attached aggregates from here on, in its own dict).

        A side without lateness, merges or aggregates (`_all_on_time`) shares each windows' lists and each
        group's shard value between its records, column by column; otherwise each record's are looked up or
        computed in turn (`_each_record`)."""
        shard = self._side.shard
        names = [a.name for a in shard.aggregates] if shard else []
        if not late and not merges and not names:
            return self._all_on_time(batch)
        return self._each_record(batch, late, merges, aggregates, names)

    def _each_record(self, batch: RecBatch, late: dict, merges: dict, aggregates: dict,
                     names: list[str]) -> tuple[list[Any], list[Any], list[int]]:
        """`_window_and_shard` record by record: each record's expired windows, merges and aggregates."""
        count = len(batch)
        window_values: list[Any] = [None] * count
        shard_values: list[Any] = [DROPPED_LATE] * count
        live: list[int] = []
        shard_ids: dict[bytes, int] = {}
        # what every on-time record of a (group, windows) shares: its windows, aggregates and shard value
        shared: dict[tuple, tuple | None] = {}
        for i, (rid, timestamp, windows, group, group_bytes, record) in enumerate(zip(
                batch.rids, batch.timestamps, batch.windows, batch.groups, batch.group_bytes, batch.records)):
            expired = late.get(rid) if late else None
            window_lists, attached, shard_value = self._record_values(
                shared, expired, windows, group, group_bytes, merges, aggregates, names, shard_ids)
            dropped = shard_value is None  # late for each of its windows
            window_values[i] = window_stage.window_value(timestamp, window_lists, expired, dropped)
            if dropped:
                continue
            record.update(attached)  # the batch's own dict: loaded from its spill file, read by no other step
            shard_values[i] = shard_value
            live.append(i)
        return window_values, shard_values, live

    def _all_on_time(self, batch: RecBatch) -> tuple[list[Any], list[Any], list[int]]:
        """`_window_and_shard` of a side without lateness, merges or aggregates: every record is on time and
        carries no aggregates, its window lists depend only on its windows and its shard value only on its
        group. Each distinct windows' lists and group's shard value is built once (`_apart_values`) and shared
        by the records that have it."""
        window_keys = list(map(tuple, batch.windows))
        lists, shards = self._apart_values(window_keys, dict(zip(batch.group_bytes, batch.groups)), {})
        window_values = window_stage.on_time_window_values(batch.timestamps, list(map(lists.__getitem__, window_keys)))
        return window_values, list(map(shards.__getitem__, batch.group_bytes)), list(range(len(batch)))

    def _apart_values(self, window_keys: Iterable[tuple], groups: Mapping[bytes, Any],
                      shard_ids: dict[bytes, int]) -> tuple[dict[tuple, list], dict[bytes, dict]]:
        """The window lists of each of `window_keys` and the shard value of each of `groups` ({group bytes:
        group}), on a side without merges or aggregates, where neither depends on the other: kept across
        batches (`self._apart`, each map cleared when its new keys would take it past `_APART_LIMIT`), each built
        once. Returns the two maps, which hold every key asked for."""
        by_windows, by_group = self._apart
        _keep(by_windows, window_keys, lambda key: [list(w) for w in key])
        _keep(by_group, groups, lambda group_bytes: shard_stage.shard_value(self._side.shard, groups[group_bytes],
                                                                             group_bytes, {}, shard_ids))
        return by_windows, by_group

    def _record_values(self, shared: dict, expired: list[tuple] | None, windows: list[tuple], group: Any,
                       group_bytes: bytes, merges: dict, aggregates: dict, names: list[str],
                       shard_ids: dict[bytes, int]) -> tuple[list[list], dict[str, Any], dict[str, Any] | None]:
        """A record's window lists, the aggregates it carries and its shard value (None: it is late for each of
        its windows). An on-time record's are those of its (group, windows), computed once per batch and kept
        in `shared` (`_shared`), unless an aggregate is a mutable value that each record must own."""
        if not expired:
            common = self._on_time_values(shared, windows, group, group_bytes, merges, aggregates, names, shard_ids)
            if common is not None:
                return common
        kept = window_stage.final_windows(windows, expired, group_bytes, merges)
        window_lists = [list(w) for w in (kept or windows)]
        if expired and not kept:
            return window_lists, {}, None
        attached = shard_stage.attached_aggregates(kept, group_bytes, aggregates, names)
        return window_lists, attached, shard_stage.shard_value(self._side.shard, group, group_bytes, attached,
                                                               shard_ids)

    def _on_time_values(self, shared: dict, windows: list[tuple], group: Any, group_bytes: bytes, merges: dict,
                        aggregates: dict, names: list[str], shard_ids: dict[bytes, int]) -> tuple | None:
        """An on-time record's window lists, attached aggregates and shard value: those of its (group, windows),
        kept in `shared` (`_shared`; None when each record must own its aggregates). Without merges or aggregates
        neither its windows nor its (empty) aggregates depend on its group, nor its shard value on its windows:
        the window lists are then kept per windows and the shard value per group, across batches (bounded,
        `_APART_LIMIT`), so each is built once for the few windows and groups there are instead of once per
        (group, windows), which most records of a batch do not share."""
        if merges or names:
            key = (group_bytes, *windows)
            common = shared.get(key, MISSING)
            if common is MISSING:
                common = shared[key] = self._shared(windows, group, group_bytes, merges, aggregates, names,
                                                    shard_ids)
            return common
        key = (*windows,)
        by_windows, by_group = self._apart
        lists, shard_value = by_windows.get(key), by_group.get(group_bytes)
        if lists is None or shard_value is None:  # a miss: built (and kept) by the one keeper
            by_windows, by_group = self._apart_values((key,), {group_bytes: group}, shard_ids)
            lists, shard_value = by_windows[key], by_group[group_bytes]
        return lists, shard_value["aggregates"], shard_value

    def _shared(self, windows: list[tuple], group: Any, group_bytes: bytes, merges: dict, aggregates: dict,
                names: list[str], shard_ids: dict[bytes, int]) -> tuple | None:
        """The window lists, attached aggregates and shard value of every on-time record in these windows of this
        group, or None when an aggregate is a mutable value (a list per sliding window), which each record must
        get as its own object (`_record_values` then computes the same for the record alone)."""
        kept = window_stage.final_windows(windows, None, group_bytes, merges)
        attached = shard_stage.attached_aggregates(kept, group_bytes, aggregates, names)
        if not all(type(value) in _IMMUTABLE for value in attached.values()):
            return None
        return [list(w) for w in (kept or windows)], attached, shard_stage.shard_value(
            self._side.shard, group, group_bytes, attached, shard_ids)

    def _seeds(self, batch: RecBatch, passed: list[int], inputs: list, seed_values: list) -> None:
        spec = self._seed
        if spec is None:
            for i in passed:
                seed_values[i] = {}
            return
        keys = [batch.key_bytes[i] for i in passed]
        records = [inputs[i] for i in passed]
        try:
            outputs = seed_outputs_many(spec, keys, records)
        except (Exception, SystemExit):
            found = first_failing(range(len(passed)), lambda n: seed_outputs_many(spec, [keys[n]], [records[n]]),
                                  (Exception, SystemExit))
            if found is None:
                raise
            n, exc = found
            raise UserCodeError(f"record {batch.key_text(passed[n])}: a seed function of side '{self._side.name}' "
                                f"{raised(exc)}") from exc
        for i, values in zip(passed, outputs):
            seed_values[i] = values


def _coder_columns(count: int, live: list[int], decoded: list) -> tuple[list[Any], list[dict | None], list[int]]:
    """The coder stage's values of a batch of `count` records (DROPPED_LATE for those not `live`; the error of a
    `CoderFailure`), the inputs its seed and transform stages take (None where there is none), and the indices
    of the records whose round trip passed. `decoded` holds the round trip of each live record, in order."""
    if len(live) == count and CoderFailure not in set(map(type, decoded)):  # every record on time and decoded
        return list(decoded), list(decoded), list(live)
    coder_values: list[Any] = [DROPPED_LATE] * count
    inputs: list[dict | None] = [None] * count
    passed: list[int] = []
    for i, value in zip(live, decoded):
        if isinstance(value, CoderFailure):
            coder_values[i] = {"error": value.message}
            continue
        coder_values[i] = inputs[i] = value
        passed.append(i)
    return coder_values, inputs, passed


def _keep(cache: dict, keys: Iterable, build: Callable[[Any], Any]) -> None:
    """Adds to `cache` the value of each of `keys` it lacks (`build(key)`, once a key), first clearing it when
    those would take it past `_APART_LIMIT` entries: a bound on what a side's distinct windows and groups keep."""
    wanted = dict.fromkeys(keys)
    new = [key for key in wanted if key not in cache]
    if len(cache) + len(new) > _APART_LIMIT:
        cache.clear()
        new = list(wanted)
    for key in new:
        cache[key] = build(key)
