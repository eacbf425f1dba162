"""Reading a side's capture into batches: `ReadBatchesFn`, each batch's records checked column by column
(input bytes, sizes, keys, event and arrival times) and the unreadable ones quarantined, never dropped.

Every element is a `RecBatch` (parity/replay/batch.py): the records of one batch, column by column.
"""
from __future__ import annotations

import functools
import operator
from typing import Any, Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from parity.capture import detect_format, read_file, reason_kind
from parity.config import SideConfig
from parity.encoding import canonical
from parity.encoding.fingerprint import encode_columns, fingerprint_bytes
from parity.errors import UserCodeError
from parity.replay import counters
from parity.replay.batch import RecBatch, key_text
from parity.replay.culprit import first_failing, raised
from parity.sets.fingerprint_set import write_quarantine_part
from parity.sets.redaction import redact_entry
from parity.stages import shard as shard_stage
from parity.stages import window as window_stage
from parity.stages.timestamp import EventTime, TimestampError, to_micros
from parity.storage.context import Storage

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
                 redact: bool = False, *, storage: Storage):
        self._side = side
        self._redact = redact  # report.redact: quarantine entries without previews or values (parity.sets.redaction)
        self._reorder = reorder
        self._batch_size = batch_size
        self._out_dir = out_dir
        self._storage = storage  # the run's storage context, for a worker that reads a URL

    def setup(self) -> None:
        side = self._side
        self._event_time = EventTime(side.timestamp)
        self._windowfn = window_stage.build_windowfn(side.window)
        self._key_fn = side.shard.key_function.resolve() if side.shard and side.shard.key_function else None
        self._lateness = side.window.lateness if side.window else None
        self._arrival_unit = side.timestamp.unit if side.timestamp and side.timestamp.field else "s"
        self._arrival_tz = side.timestamp.tz if side.timestamp and side.timestamp.field else side.capture.tz
        self._counts = counters.SideCounters(side.name, counters.READ, counters.QUARANTINED)

    def process(self, element: tuple[int, str, str]) -> Iterator[RecBatch]:
        file_index, path, display = element
        side = self._side
        fmt = side.capture.format or detect_format(path, self._storage)
        for batch_index, read in enumerate(read_file(path, fmt, side.capture.schema_dict, self._batch_size,
                                                     display, side.capture.max_record_bytes, self._storage)):
            batch = RecBatch(f"{file_index:05d}-{batch_index:06d}")
            quarantined = [_quarantine_entry(q.location, q.reason, q.preview) for q in read.quarantined]
            first = batch_index * self._batch_size
            self._fill(batch, [(file_index, first + i) for i in range(len(read.records))], read.locations,
                       read.records, quarantined, read.encoded, read.fingerprints)
            self._counts.add(counters.READ, len(read.records) + len(read.quarantined))
            self._counts.add(counters.QUARANTINED, len(quarantined))  # the reader's and the checks' (`_fill`)
            if quarantined:
                if self._redact:
                    quarantined = [redact_entry(entry) for entry in quarantined]
                write_quarantine_part(self._out_dir, batch.part, quarantined, self._storage)
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
        encoded, fps = _input_columns(records, read_encoded, read_fps, reasons)
        sizes = pc.binary_length(encoded).to_numpy(zero_copy_only=False)
        if count and sizes.max() > max_bytes:
            for i in np.flatnonzero(sizes > max_bytes).tolist():
                if i not in reasons:
                    reasons[i] = f"record too large: {int(sizes[i])} bytes above capture.max_record_bytes {max_bytes}"
        keys = self._keys(records, fps, reasons)
        alive = [i for i in range(count) if i not in reasons] if reasons else range(count)
        timestamps = self._event_times(records, keys, alive, reasons)
        arrivals = self._arrivals(records, keys, reasons)
        if reasons:
            for i in sorted(reasons):
                quarantined.append(_quarantine_entry(locations[i], reasons[i], repr(records[i])))
            kept = [i for i in range(count) if i not in reasons]
            rids, locations, records, keys, fps, timestamps, arrivals = (
                [column[i] for i in kept]
                for column in (rids, locations, records, keys, fps, timestamps, arrivals))
            encoded = encoded.take(pa.array(kept, pa.int64()))
        batch.rids, batch.records, batch.keys = list(rids), list(records), keys
        # only written (with the settled stages' columns): as Arrow, they spill and load as buffers
        batch.locations = pa.array(locations, pa.string())  # type: ignore[assignment]
        batch.input_bytes, batch.input_fps = encoded, list(fps)  # type: ignore[assignment]
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
            groups = shard_stage.grouping_keys(shard, batch.records, key_fn)
        except window_stage.TooManyWindowsError as exc:
            raise type(exc)(f"side '{self._side.name}': window: {exc}") from exc
        except (Exception, SystemExit):
            def alone(index: int) -> None:
                window_stage.assign_many(self._windowfn, [batch.timestamps[index]], [batch.records[index]])
                shard_stage.grouping_keys(shard, [batch.records[index]], key_fn)

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


def _input_columns(records: list[dict], read_encoded: list | None, read_fps: list | None,
                   reasons: dict[int, str]) -> tuple[pa.Array, list[int]]:
    """The canonical bytes of each record as read (a binary Arrow array: the input stage's value, only written)
    and its fingerprint; a reason in `reasons` for each record that has no canonical encoding (its bytes are
    then empty, its fingerprint 0: it is quarantined).

    The reader's own where it computed them from columns (`read_encoded`, `read_fps`: one per record); else
    the C encoder's buffers made into the array as they are (`encode_columns`), with no Python bytes per
    record; record by record only for a batch with a value parity cannot fingerprint (e.g. a Parquet extension
    type) or past 2 GiB of bytes."""
    if _reader_encoded(records, read_encoded, read_fps):
        return pa.array(read_encoded, pa.binary()), list(read_fps)  # type: ignore[arg-type]
    try:
        data, offsets, fps = encode_columns(records)
    except (TypeError, OverflowError):
        encoded = [_encode_or_reason(record) for record in records]
        reasons.update((i, item) for i, item in enumerate(encoded) if isinstance(item, str))
        return (pa.array([b"" if isinstance(item, str) else item for item in encoded], pa.binary()),
                [0 if isinstance(item, str) else fingerprint_bytes(item) for item in encoded])
    count = len(records)
    return (pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]),
            np.frombuffer(fps, np.uint64).tolist())


def _encode_or_reason(record: dict) -> bytes | str:
    try:
        return canonical.encode(record)
    except TypeError as exc:
        return f"unsupported value: {exc}"


def _missing_key(name: str) -> str:
    return f"missing key field '{name}': capture.key names it; the record lacks it or it is null"
