"""The DoFns and per-batch functions of a side's replay: thin adapters over the pure stage modules.

Every element is a `RecBatch`: the records of one batch, column by column, with its batch id (`part`,
`"<file>-<batch>"`, stable across runs and retries). Stages loop over the batch's lists and call the
canonical encoder and the fingerprint kernels once per column (`encode_many`, `encode_fingerprints`), not once
per value.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import operator
import os
from typing import Any, Iterable, Iterator, Sequence

import apache_beam as beam
import pyarrow as pa

from parity.console import progress

from parity.encoding import canonical

from parity.replay import spill
from parity.capture import detect_format, read_file, reason_kind
from parity.config import Ref, SideConfig
from parity.errors import InputError, ParityError, UserCodeError
from parity.missing import MISSING
from parity.encoding.fingerprint import (encode_fingerprints, feature_fingerprints, fingerprint_bytes,
                                         key_fingerprint_bytes)
from parity.sets.fingerprint_set import write_part_columns, write_quarantine_part, write_stage_values
from parity.replay.batch import READ, SETTLED, STAGED, RecBatch, key_text, side_field_types
from parity.replay.culprit import first_failing
from parity.report.redaction import redact_entry
from parity.stages import STAGES
from parity.stages import shard as shard_stage
from parity.stages import window as window_stage
from parity.stages.coder import CoderFailure, build_coder, roundtrip_batch
from parity.stages.seed import FunctionOp, SeedSpec, seed_outputs_many
from parity.storage import urls
from parity.stages.timestamp import EventTime, TimestampError, to_micros
from parity.stages.transform import PythonTransform, SavedTransform

DROPPED_LATE = {"dropped": "late"}
_IMMUTABLE = frozenset({type(None), bool, int, float, str, bytes})
# the stages ApplyStagesFn computes and settles (window to seed): the input stage's bytes come from the read,
# the transform stage's values from ApplyTransformFn
SETTLED_STAGES = STAGES[1:-1]


_IS_NONE = functools.partial(operator.is_, None)
_TIME_TYPES = frozenset({int, type(None)})  # an event time read, or none configured


def _reader_encoded(records: list, read_encoded: list | None, read_fps: list | None) -> bool:
    """Whether the reader gave every record's canonical bytes and fingerprint (a columnar read)."""
    return bool(read_encoded and read_fps and len(read_encoded) == len(read_fps) == len(records))


def _quarantine_entry(location: str, reason: str, preview: str = "") -> dict:
    return {"location": location, "reason": reason, "reason_kind": reason_kind(reason), "preview": preview[:120]}


class ReadBatchesFn(beam.DoFn):
    """Reads one capture file into batches; keys, stamps and windows each record; quarantines the rest."""

    def __init__(self, side: SideConfig, batch_size: int, out_dir: str, reorder: bool = False,
                 redact: bool = False):
        self._side = side
        self._redact = redact  # report.redact: quarantine entries without previews or values (parity.report.redaction)
        self._reorder = reorder
        self._batch_size = batch_size
        self._out_dir = out_dir
        self._storage = urls.options()  # the run's storage options, for a worker that reads a URL

    def setup(self) -> None:
        urls.configure(self._storage)
        side = self._side
        self._event_time = EventTime(side.timestamp)
        self._windowfn = window_stage.build_windowfn(side.window)
        self._key_fn = side.shard.key_function.resolve() if side.shard and side.shard.key_function else None
        self._lateness = side.window.lateness if side.window else None
        self._arrival_unit = side.timestamp.unit if side.timestamp and side.timestamp.field else "s"
        self._arrival_tz = side.timestamp.tz if side.timestamp and side.timestamp.field else side.capture.tz

    def process(self, element: tuple[int, str, str]) -> Iterator[RecBatch]:
        file_index, path, display = element
        side = self._side
        fmt = side.capture.format or detect_format(path)
        for batch_index, read in enumerate(read_file(path, fmt, side.capture.schema_dict, self._batch_size,
                                                     display)):
            batch = RecBatch(f"{file_index:05d}-{batch_index:06d}")
            quarantined = [_quarantine_entry(q.location, q.reason, q.preview) for q in read.quarantined]
            first = batch_index * self._batch_size
            self._fill(batch, [(file_index, first + i) for i in range(len(read.records))], read.locations,
                       read.records, quarantined, read.encoded, read.fingerprints)
            progress.records_read(side.name, len(read.records) + len(read.quarantined))
            if quarantined:
                if self._redact:
                    quarantined = [redact_entry(entry) for entry in quarantined]
                write_quarantine_part(self._out_dir, batch.part, quarantined)
            if len(batch):
                yield batch.reversed() if self._reorder else batch

    def _fill(self, batch: RecBatch, rids: list[tuple[int, int]], locations: list[str], records: list[dict],
              quarantined: list[dict], read_encoded: list | None = None, read_fps: list | None = None) -> None:
        """Adds the records that can be replayed to `batch`; a quarantine entry for each of the others.

        The checks run in turn, each over the batch's column (the input bytes, their sizes, the keys, the event
        and arrival times), on the records no check before it refused: a record gets the reason of its first
        failing check, as if it were checked alone. A batch that quarantines nothing costs a few C calls per
        check. `read_encoded`/`read_fps`: the records' canonical bytes and fingerprints where the reader
        computed them from columns; used when there is one per record."""
        side = self._side
        max_bytes = side.capture.max_record_bytes
        count = len(records)
        reasons: dict[int, str] = {}  # record index -> why it is quarantined
        if _reader_encoded(records, read_encoded, read_fps):
            encoded: list[bytes | str] = read_encoded  # type: ignore[assignment]
            fps: list[int] = read_fps  # type: ignore[assignment]
        else:
            try:
                encoded, fps = encode_fingerprints(records)  # type: ignore[assignment]
            except TypeError:  # a reader value parity cannot fingerprint (e.g. a Parquet extension type)
                encoded = [_encode_or_reason(record) for record in records]
                fps = [0 if isinstance(data, str) else fingerprint_bytes(data) for data in encoded]
                reasons.update((i, data) for i, data in enumerate(encoded) if isinstance(data, str))
        if count and max(map(len, encoded)) > max_bytes:
            for i, data in enumerate(encoded):
                if len(data) > max_bytes and i not in reasons:
                    reasons[i] = f"record too large: {len(data)} bytes above capture.max_record_bytes {max_bytes}"
        keys = self._keys(records, fps, reasons)
        alive = [i for i in range(count) if i not in reasons] if reasons else range(count)
        timestamps = self._event_times(records, keys, alive, reasons)
        arrivals = self._arrivals(records, keys, reasons)
        if reasons:
            for i in sorted(reasons):
                quarantined.append(_quarantine_entry(locations[i], reasons[i], repr(records[i])))
            kept = [i for i in range(count) if i not in reasons]
            rids, locations, records, keys, encoded, fps, timestamps, arrivals = (
                [column[i] for i in kept]
                for column in (rids, locations, records, keys, encoded, fps, timestamps, arrivals))
        batch.rids, batch.locations, batch.records, batch.keys = list(rids), list(locations), list(records), keys
        batch.input_bytes, batch.input_fps = list(encoded), list(fps)  # type: ignore[arg-type]
        batch.timestamps, batch.arrivals = timestamps, arrivals
        self._key_windows_groups(batch)

    def _keys(self, records: list[dict], fps: list[int], reasons: dict[int, str]) -> list[Any]:
        """Each record's key (a key field's value, a list of them, or the input fingerprint); a reason in
        `reasons` for each record not refused yet whose key field is missing or null."""
        key_fields = self._side.capture.key
        if key_fields and len(key_fields) == 1:
            name = key_fields[0]
            keys = [record.get(name) for record in records]
            if any(map(_IS_NONE, keys)):
                for i, key in enumerate(keys):
                    if key is None and i not in reasons:
                        reasons[i] = _missing_key(name)
            return keys
        if not key_fields:
            return list(fps)
        keys = [None] * len(records)
        for i, record in enumerate(records):
            missing = [f for f in key_fields if record.get(f) is None]
            if missing:
                if i not in reasons:
                    reasons[i] = _missing_key(missing[0])
                continue
            keys[i] = [record[f] for f in key_fields]
        return keys

    def _event_times(self, records: list[dict], keys: list[Any], alive: Sequence[int],
                     reasons: dict[int, str]) -> list[int | None]:
        """The event time of each record (None for a record refused before, or with no timestamp config); a
        reason in `reasons` for each `alive` record whose time cannot be read."""
        event_time = self._event_time
        live = records if len(alive) == len(records) else [records[i] for i in alive]
        try:
            times: list = event_time.micros_many(live)
        except (Exception, SystemExit):
            found = first_failing(live, lambda record: event_time.micros_many([record]), (Exception, SystemExit))
            if found is None:
                raise
            index, error = found
            raise UserCodeError(f"record {key_text(keys[alive[index]])}: timestamp.function "
                                f"{raised(error)}") from error
        if not set(map(type, times)) <= _TIME_TYPES:  # some times cannot be read
            for index, value in enumerate(times):
                if isinstance(value, TimestampError):
                    reasons[alive[index]] = f"event time: {value}"
                    times[index] = None
        if len(alive) == len(records):
            return times
        timestamps: list[int | None] = [None] * len(records)
        for i, value in zip(alive, times):
            timestamps[i] = value
        return timestamps

    def _arrivals(self, records: list[dict], keys: list[Any], reasons: dict[int, str]) -> list[int | None]:
        """The arrival time of each record for the lateness replay (None without one); a reason in `reasons`
        for each record not refused yet whose arrival time cannot be read."""
        lateness = self._lateness
        arrivals: list[int | None] = [None] * len(records)
        if lateness is None:
            return arrivals
        unit, tz = self._arrival_unit, self._arrival_tz
        for i, record in enumerate(records):
            if i in reasons:
                continue
            try:
                arrivals[i] = to_micros(record.get(lateness.arrival), unit, tz)
            except TimestampError as exc:
                reasons[i] = f"arrival time: field '{lateness.arrival}' {exc}"
            except (Exception, SystemExit) as exc:
                raise UserCodeError(f"record {key_text(keys[i])}: timestamp.function {raised(exc)}") from exc
        return arrivals

    def _key_windows_groups(self, batch: RecBatch) -> None:
        """The filled batch's key bytes, windows, grouping keys and their bytes."""
        batch.key_bytes = canonical.encode_many(batch.keys)
        batch.windows, batch.groups = self._windows_and_groups(batch)
        try:
            batch.group_bytes = canonical.encode_many(batch.groups)
        except TypeError:  # a shard.key.function returned something parity cannot fingerprint: name it
            found = first_failing(batch.groups, canonical.encode, TypeError)
            if found is None:
                raise
            index, exc = found
            group = batch.groups[index]
            shard = self._side.shard
            what = f"shard.key.function '{shard.key_function.text}'" if shard and shard.key_function \
                else "shard.key"
            raise UserCodeError(
                f"side '{self._side.name}': record {batch.key_text(index)}: {what} returned a "
                f"{type(group).__module__}.{type(group).__qualname__}, which has no canonical encoding "
                f"({exc}); a grouping key must be None, a bool, number, str, bytes, or a list or dict "
                f"of them") from exc

    def _windows_and_groups(self, batch: RecBatch) -> tuple[list[list[tuple]], list[Any]]:
        shard, key_fn = self._side.shard, self._key_fn
        try:
            windows = window_stage.assign_many(self._windowfn, batch.timestamps, batch.records)
            groups = [shard_stage.grouping_key(shard, record, key_fn) for record in batch.records]
        except window_stage.TooManyWindowsError as exc:
            raise type(exc)(f"side '{self._side.name}': window: {exc}") from exc
        except (Exception, SystemExit):
            def alone(index: int) -> None:
                window_stage.assign_many(self._windowfn, [batch.timestamps[index]], [batch.records[index]])
                shard_stage.grouping_key(shard, batch.records[index], key_fn)

            found = first_failing(range(len(batch)), alone, (Exception, SystemExit))
            if found is None:
                raise
            index, exc = found
            if isinstance(exc, window_stage.TooManyWindowsError):
                raise type(exc)(f"side '{self._side.name}': record {batch.key_text(index)}: window: "
                                f"{exc}") from exc
            raise UserCodeError(f"record {batch.key_text(index)}: window or shard key function "
                                f"{raised(exc)}") from exc
        return windows, groups


def raised(exc: BaseException) -> str:
    """What user code did, for a message: `raised ValueError: ...`, or `called sys.exit(0)` (which must not end
    parity with the user's exit code, nor read as Beam's bare "SystemExit: 0")."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r}); a function a config names must return or raise, not exit"
    return f"raised {type(exc).__name__}: {exc}"


def _encode_or_reason(record: dict) -> bytes | str:
    try:
        return canonical.encode(record)
    except TypeError as exc:
        return f"unsupported value: {exc}"


def _missing_key(name: str) -> str:
    return f"missing key field '{name}': capture.key names it; the record lacks it or it is null"


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


def aggregate_partials(batch: RecBatch, side: SideConfig, late: dict, merges: dict) -> Iterator[tuple]:
    """The batch's partial aggregate states per (window, group): each group's records are added at once
    (`Aggregator.add_many`), in read order."""
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


def _seed_spec(side: SideConfig) -> SeedSpec | None:
    """The side's seed with its function ops' references imported."""
    if side.seed is None:
        return None
    ops = tuple((name, FunctionOp(op.fn.resolve()) if isinstance(op, FunctionOp) and isinstance(op.fn, Ref)
                 else op) for name, op in side.seed.ops)
    return dataclasses.replace(side.seed, ops=ops)


class ApplyStagesFn(beam.DoFn):
    """Window, shard, coder and seed stages of a batch, with the side-wide results as side inputs."""

    def __init__(self, side: SideConfig, spills: spill.SpillPolicy = spill.SpillPolicy.KEEP):
        self._side = side
        self._spills = spills  # what becomes of each read batch's spill file once loaded

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

    def process(self, path: str, late: dict, merges: dict, aggregates: dict) -> Iterator[RecBatch]:
        # The read batch comes as its spill file: loaded here, inside the step that waits for the side inputs,
        # since the runner materialises whatever reaches this step (parity.replay.spill).
        batch: RecBatch = self._spills.load(path)
        batch.expect(READ)
        shard = self._side.shard
        names = [a.name for a in shard.aggregates] if shard else []
        count = len(batch)
        window_values: list[Any] = [None] * count
        shard_values: list[Any] = [DROPPED_LATE] * count
        live: list[int] = []
        live_records: list[dict] = []
        shard_ids: dict[bytes, int] = {}
        # what every on-time record of a (group, windows) shares: its windows, aggregates and shard value
        shared: dict[tuple, tuple | None] = {}
        for i, (rid, timestamp, windows, group, group_bytes, record) in enumerate(zip(
                batch.rids, batch.timestamps, batch.windows, batch.groups, batch.group_bytes, batch.records)):
            expired = late.get(rid) if late else None
            window_lists, attached, shard_value = self._record_values(
                shared, expired, windows, group, group_bytes, merges, aggregates, names, shard_ids)
            window_value: dict[str, Any] = {"timestamp_us": timestamp, "windows": window_lists}
            window_values[i] = window_value
            if expired:
                if shard_value is None:  # late for each of its windows: dropped
                    window_value["late"] = True
                    continue
                window_value["late_windows"] = [list(w) for w in expired]
            record.update(attached)  # the batch's own dict: loaded from its spill file, read by no other step
            shard_values[i] = shard_value
            live.append(i)
            live_records.append(record)
        coder_values: list[Any] = [DROPPED_LATE] * count
        seed_values: list[Any] = [DROPPED_LATE] * count
        transform_values: list[Any] = [DROPPED_LATE] * count
        transform_inputs: list[dict | None] = [None] * count
        decoded = roundtrip_batch(self._coder, live_records) if self._coder else live_records
        passed: list[int] = []
        for i, value in zip(live, decoded):
            if isinstance(value, CoderFailure):
                coder_values[i] = {"error": value.message}
                seed_values[i] = transform_values[i] = {"error": "coder round trip failed"}
                continue
            coder_values[i] = value
            transform_inputs[i] = value
            passed.append(i)
        self._seeds(batch, passed, transform_inputs, seed_values)
        batch.values = {"window": window_values, "shard": shard_values, "coder": coder_values,
                        "seed": seed_values, "transform": transform_values}
        batch.transform_inputs = transform_inputs
        encoded = [_stage_fingerprints(batch, stage, batch.values[stage]) for stage in SETTLED_STAGES]
        # the seed stage's values come from user functions; the stages before it hold the record (whose size
        # the read bounds) and parity's own values
        check_value_sizes(batch, self._side, "seed", encoded[SETTLED_STAGES.index("seed")][0], batch.values["seed"])
        batch.settle(SETTLED_STAGES, encoded)
        yield batch

    def _record_values(self, shared: dict, expired: list[tuple] | None, windows: list[tuple], group: Any,
                       group_bytes: bytes, merges: dict, aggregates: dict, names: list[str],
                       shard_ids: dict[bytes, int]) -> tuple[list[list], dict[str, Any], dict[str, Any] | None]:
        """A record's window lists, the aggregates it carries and its shard value (None: it is late for each of
        its windows). An on-time record's are those of its (group, windows), computed once per batch and kept
        in `shared` (`_shared`), unless an aggregate is a mutable value that each record must own."""
        if not expired:
            key = (group_bytes, *windows)
            common = shared.get(key, MISSING)
            if common is MISSING:
                common = shared[key] = self._shared(windows, group, group_bytes, merges, aggregates, names,
                                                    shard_ids)
            if common is not None:
                return common
        kept = final_windows(windows, expired, group_bytes, merges)
        window_lists = [list(w) for w in (kept or windows)]
        if expired and not kept:
            return window_lists, {}, None
        attached = _attached(kept, group_bytes, aggregates, names)
        return window_lists, attached, self._shard_value(group, group_bytes, attached, shard_ids)

    def _shared(self, windows: list[tuple], group: Any, group_bytes: bytes, merges: dict, aggregates: dict,
                names: list[str], shard_ids: dict[bytes, int]) -> tuple | None:
        """The window lists, attached aggregates and shard value of every on-time record in these windows of this
        group, or None when an aggregate is a mutable value (a list per sliding window), which each record must
        get as its own object (`_record_values` then computes the same for the record alone)."""
        kept = final_windows(windows, None, group_bytes, merges)
        attached = _attached(kept, group_bytes, aggregates, names)
        if not all(type(value) in _IMMUTABLE for value in attached.values()):
            return None
        return [list(w) for w in (kept or windows)], attached, self._shard_value(group, group_bytes, attached,
                                                                              shard_ids)

    def _shard_value(self, group: Any, group_bytes: bytes, attached: dict[str, Any],
                     shard_ids: dict[bytes, int]) -> dict[str, Any]:
        """The shard stage's value of a record of this group carrying `attached` (shard ids cached per batch)."""
        shard_id = shard_ids.get(group_bytes)
        if shard_id is None:
            shard_id = shard_ids[group_bytes] = shard_stage.shard_id(self._side.shard, group, group_bytes)
        return {"key": group, "shard": shard_id, "aggregates": attached}

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


def with_arrow_inputs(batch: RecBatch, tft_input: Any, chunk: int) -> RecBatch:
    """The batch with the records that reach the transform as Arrow record batches of at most `chunk` rows
    (`transform_arrow`, `TFTInput.columnar_batch`) in place of their dicts, when every value converts
    column by column (else the batch as it is). A spilled batch then pickles a few Arrow buffers where it
    pickled a dict per record, and the graph is applied to them (`SavedTransform.apply_arrow`, which
    equals `apply` of the dicts)."""
    todo = [i for i, value in enumerate(batch.transform_inputs) if value is not None]
    records = [batch.transform_inputs[i] for i in todo]
    chunks = [tft_input.columnar_batch(records[start:start + chunk]) for start in range(0, len(records), chunk)]
    if not chunks or any(one is None for one in chunks):
        return batch
    out = copy.copy(batch)  # the same columns; only the transform inputs are replaced
    out.transform_inputs = [None if value is None else True for value in batch.transform_inputs]
    out.transform_arrow = chunks
    return out


class WriteStageValuesFn(beam.DoFn):
    """Writes a settled batch's locations and stage bytes before the transform (`write_stage_values`) and yields
    the batch without them (`input_bytes`, `locations` None, `value_bytes` empty): the step before a batch is
    spilled to wait for its transform, so that the spill carries its fingerprints but not its canonical bytes."""

    def __init__(self, out_dir: str):
        self._out_dir = out_dir

    def process(self, batch: RecBatch) -> Iterator[RecBatch]:
        write_stage_values(self._out_dir, batch.part, {"location": batch.locations, "input": batch.input_bytes,
                                                       **batch.value_bytes})
        yield batch.staged()  # the input batch is not changed: the TFT analysis reads it too


class SavedInputsFn(beam.DoFn):
    """A gated `saved` side's staged batches with their transform inputs as Arrow (`with_arrow_inputs`), once
    the graph's raw feature spec is found (its `metadata/`, which a TFT side writes before its job runs) and
    is the one the side's own field types give; until then, or when it differs, batches keep their dicts."""

    def __init__(self, field_types: dict, graph_dirs: list[str], tfmd_text: str | None = None):
        self._field_types = field_types
        self._graph_dirs = graph_dirs
        self._tfmd_text = tfmd_text

    def setup(self) -> None:
        from parity.stages.transform import TFTInput

        self._tft_input = TFTInput(self._field_types, self._tfmd_text)
        self._matches: bool | None = None  # unknown until a graph's metadata is found

    def process(self, batch: RecBatch) -> Iterator[RecBatch]:
        if self._matches is None:
            self._matches = self._graph_spec_matches()
        if not self._matches:
            yield batch
            return
        yield with_arrow_inputs(batch, self._tft_input, max(1, len(batch.transform_inputs)))

    def _graph_spec_matches(self) -> bool | None:
        import tensorflow_transform as tft
        from tensorflow_transform.tf_metadata import schema_utils

        for path in self._graph_dirs:
            if not os.path.isdir(os.path.join(path, tft.TFTransformOutput.RAW_METADATA_DIR)):
                continue
            try:
                raw = tft.TFTransformOutput(path).raw_feature_spec()
            except Exception:  # not written whole yet: look again at the next batch
                return None
            return raw == schema_utils.schema_as_feature_spec(self._tft_input.metadata.schema).feature_spec
        return None


class ApplyTransformFn(beam.DoFn):
    """The transform stage of a batch: a python function, an exported TFT graph, or a pass-through."""

    def __init__(self, side: SideConfig, saved_dir: str | None, spills: spill.SpillPolicy | None = None):
        self._side = side
        # None for a gated `saved` transform (`parity.replay.gate`): the graph's folder comes as the side input
        self._saved_dir = saved_dir
        self._spills = spills  # batches come as spill files, loaded under this policy (with TFT, while the
        # analysis runs); None: batches come whole

    def setup(self) -> None:
        spec = self._side.transform
        self._python = PythonTransform(spec.ref.resolve(), spec.ref.text) \
            if spec is not None and spec.kind == "python" else None  # type: ignore[union-attr]
        self._saved = SavedTransform(self._saved_dir, side_field_types(self._side),
                                     self._side.capture.tfmd_text) if self._saved_dir else None

    def process(self, batch, *side_inputs):  # no hints: Beam checks *args hints
        if self._spills is not None:
            batch = self._spills.load(batch)
        if self._saved is None and side_inputs:
            # the gated `saved` transform: the graph's folder arrives as a side input once it exists
            self._saved_dir = side_inputs[0]
            self._saved = SavedTransform(self._saved_dir, side_field_types(self._side), self._side.capture.tfmd_text)
        inputs = batch.transform_inputs
        todo = [i for i, value in enumerate(inputs) if value is not None]
        if self._saved is not None:
            outputs = self._apply_saved(batch, todo)
        elif self._python is not None:
            outputs = []
            apply_one = self._python.apply_one
            for i in todo:
                try:
                    outputs.append(apply_one(inputs[i]))
                except UserCodeError as exc:
                    raise UserCodeError(f"record {batch.key_text(i)}: {exc}") from exc
                except (Exception, SystemExit) as exc:  # sys.exit() in a step: Beam's "SystemExit: 0", unnamed
                    raise UserCodeError(f"record {batch.key_text(i)}: transform.python "
                                        f"'{self._side.transform.ref.text}' {raised(exc)}") from exc  # type: ignore[union-attr]
        else:
            outputs = [dict(inputs[i]) for i in todo]
        values = batch.values["transform"]
        for i, features in zip(todo, outputs):
            values[i] = features
        yield batch

    def _apply_saved(self, batch: RecBatch, todo: list[int]) -> list[dict]:
        saved = self._saved
        inputs = batch.transform_inputs
        arrow = batch.transform_arrow
        try:
            if arrow is not None:
                return saved.apply_arrow(arrow)  # type: ignore[union-attr]
            return saved.apply([inputs[i] for i in todo])  # type: ignore[union-attr,misc]
        except UserCodeError:
            raise
        except Exception as batch_exc:
            if arrow is not None:
                rows = [one.slice(j, 1) for one in arrow for j in range(one.num_rows)]
                found = first_failing(rows, lambda row: saved.apply_arrow([row]))  # type: ignore[union-attr]
            else:
                found = first_failing([inputs[i] for i in todo],
                                      lambda record: saved.apply([record]))  # type: ignore[union-attr]
            if found is not None:
                n, exc = found
                raise UserCodeError(f"record {batch.key_text(todo[n])}: the transform graph "
                                    f"{self._saved_dir} raised {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
            raise UserCodeError(f"the transform graph {self._saved_dir} raised on a batch: "
                                f"{type(batch_exc).__name__}: {batch_exc}") from batch_exc


def _unencodable(key: str, stage: str, value: Any, exc: TypeError) -> str:
    """Names the record, the stage and (for dict values) the field whose value cannot be fingerprinted."""
    where = ""
    if isinstance(value, dict):
        names = list(value)
        found = first_failing(names, lambda name: canonical.encode(value[name]), TypeError)
        if found is not None:
            where = f" field {names[found[0]]!r}"
    return (f"record {key}: the {stage} stage value{where} cannot be fingerprinted: {exc}; return "
            f"None, bools, numbers, str, bytes, lists, dicts, datetimes or numpy scalars/arrays")


def check_value_sizes(batch: RecBatch, side: SideConfig, stage: str, data: list[bytes], values: list) -> None:
    """Refuses, when it is written, a stage value whose canonical bytes pass `capture.max_record_bytes`,
    naming the side, the record, the stage and (for a dict such as the transform's features) its largest
    field: a set must be read back by `parity diff`, `show` and the reports, and a few values that large make
    a batch's value part pass what one Arrow array holds. Raising the limit lets them through."""
    limit = side.capture.max_record_bytes
    if not data or max(map(len, data)) <= limit:
        return
    i = next(n for n, item in enumerate(data) if len(item) > limit)
    value, where = values[i], ""
    if isinstance(value, dict) and value:
        sizes = {name: len(canonical.encode(item)) for name, item in value.items()}
        name = max(sorted(sizes), key=sizes.__getitem__)
        field = "feature" if stage == "transform" else "field"
        where = f" (its largest {field}, {name!r}, is {sizes[name]:,} bytes)"
    raise UserCodeError(f"side '{side.name}': record {batch.key_text(i)}: the {stage} stage value is {len(data[i]):,} "
                f"canonical bytes{where}, above capture.max_record_bytes {limit:,}; return smaller values, or "
                f"raise capture.max_record_bytes to keep values this large")


def _stage_fingerprints(batch: RecBatch, stage: str, values: list) -> tuple[list[bytes], list[int]]:
    """The canonical bytes and fingerprints of one stage's values of a batch (one kernel call)."""
    try:
        return encode_fingerprints(values)
    except TypeError:  # user code produced a value with no canonical encoding: name the record
        found = first_failing(values, canonical.encode, TypeError)
        if found is None:
            raise
        i, exc = found
        raise UserCodeError(_unencodable(batch.key_text(i), stage, values[i], exc)) from exc


class WriteBatchFn(beam.DoFn):
    """Fingerprints every stage value of a batch and writes the batch's part of the fingerprint set."""

    def __init__(self, out_dir: str, side: SideConfig | None = None):
        self._out_dir = out_dir
        self._side = side  # its capture.max_record_bytes bounds each stage value too

    def process(self, batch: RecBatch) -> Iterator[str]:
        count = len(batch)
        hash128 = key_fingerprint_bytes
        fp_columns: dict[str, list | pa.Array] = {
            "key_fp": [hash128(b) for b in batch.key_bytes],
            "key": [key_text(k) for k in batch.keys],
            "input_fp": batch.input_fps}  # hashed from input_bytes when the batch was read
        value_columns: dict[str, list | pa.Array] = {"key_bytes": batch.key_bytes}
        batch.expect(SETTLED, STAGED)
        if batch.phase == SETTLED:  # else written already, with the stages' bytes (WriteStageValuesFn)
            value_columns.update({"location": batch.locations, "input": batch.input_bytes, **batch.value_bytes})
        for stage, fps in batch.value_fps.items():  # every stage before the transform, settled by ApplyStagesFn
            fp_columns[f"{stage}_fp"] = fps
        values = batch.values["transform"]
        features_column: list[list] = [[] for _ in range(count)]
        data = [b""] * count
        fps: list[int] = [0] * count
        plain = []
        for i, (value, reached) in enumerate(zip(values, batch.transform_inputs)):
            if reached is None:
                plain.append(i)
                continue
            try:
                data[i], features_column[i], fps[i] = feature_fingerprints(value)
            except TypeError as exc:
                raise UserCodeError(_unencodable(batch.key_text(i), "transform", value, exc)) from exc
        if plain:
            plain_data, plain_fps = _stage_fingerprints(batch, "transform", [values[i] for i in plain])
            for i, item, fp in zip(plain, plain_data, plain_fps):
                data[i], fps[i] = item, fp
        if self._side is not None:
            check_value_sizes(batch, self._side, "transform", data, values)
        value_columns["transform"], fp_columns["transform_fp"] = data, fps
        fp_columns["features"] = features_column
        write_part_columns(self._out_dir, batch.part, fp_columns, value_columns)
        yield batch.part
