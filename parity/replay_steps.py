"""The DoFns and per-batch functions of a side's replay: thin adapters over the pure stage modules.

Every element is `(part, records)`: a batch id (`"<file>-<batch>"`, stable across runs and retries) and the
list of `Rec`s of that batch.
"""
from __future__ import annotations

import xxhash
from typing import Any, Iterable, Iterator

import apache_beam as beam

from parity import canonical, progress
from parity.capture import detect_format, read_file, reason_kind
from parity.config import STAGES, SideConfig
from parity.errors import UserCodeError
from parity.fingerprint_set import PartRows, write_part, write_quarantine_part
from parity.records import Rec, side_field_types
from parity.stages import shard as shard_stage
from parity.stages import window as window_stage
from parity.stages.coder import CoderFailure, CoderSpec, build_coder, roundtrip_batch
from parity.stages.seed import FunctionOp, SampleOp, SeedSpec, SplitOp, seed_outputs
from parity.stages.timestamp import EventTime, TimestampError, to_micros
from parity.stages.transform import PythonTransform, SavedTransform

DROPPED_LATE = {"dropped": "late"}
Batch = tuple[str, list[Rec]]


def _quarantine_entry(location: str, reason: str, preview: str = "") -> dict:
    return {"location": location, "reason": reason, "reason_kind": reason_kind(reason), "preview": preview[:120]}


class ReadBatchesFn(beam.DoFn):
    """Reads one capture file into batches; keys, stamps and windows each record; quarantines the rest."""

    def __init__(self, side: SideConfig, batch_size: int, out_dir: str, reorder: bool = False):
        self._side = side
        self._reorder = reorder
        self._batch_size = batch_size
        self._out_dir = out_dir

    def setup(self) -> None:
        side = self._side
        self._event_time = EventTime(side.timestamp)
        self._windowfn = window_stage.build_windowfn(side.window)
        self._key_fn = side.shard.key_function.resolve() if side.shard and side.shard.key_function else None
        self._lateness = side.window.lateness if side.window else None
        self._arrival_unit = side.timestamp.unit if side.timestamp and side.timestamp.field else "s"

    def process(self, element: tuple[int, str, str]) -> Iterator[Batch]:
        file_index, path, display = element
        side = self._side
        fmt = side.capture.format or detect_format(path)
        for batch_index, read in enumerate(read_file(path, fmt, side.capture.schema_dict, self._batch_size,
                                                     display)):
            part = f"{file_index:05d}-{batch_index:06d}"
            quarantined = [_quarantine_entry(q.location, q.reason, q.preview) for q in read.quarantined]
            recs = []
            for record_index, (record, location) in enumerate(zip(read.records, read.locations)):
                rec, problem = self._rec((file_index, batch_index * self._batch_size + record_index),
                                         location, record)
                if problem is not None:
                    quarantined.append(_quarantine_entry(location, problem, repr(record)))
                else:
                    recs.append(rec)
            progress.records_read(side.name, len(read.records) + len(read.quarantined))
            if self._reorder:
                recs.reverse()
            if quarantined:
                write_quarantine_part(self._out_dir, part, quarantined)
            if recs:
                yield part, recs

    def _rec(self, rid: tuple[int, int], location: str, record: dict) -> tuple[Rec | None, str | None]:
        side = self._side
        try:
            data = canonical.encode(record)
        except TypeError as exc:  # a reader value parity cannot fingerprint (e.g. a Parquet extension type)
            return None, f"unsupported value: {exc}"
        if len(data) > side.capture.max_record_bytes:
            return None, (f"record too large: {len(data)} bytes above capture.max_record_bytes "
                          f"{side.capture.max_record_bytes}")
        input_fp = xxhash.xxh3_64_intdigest(data)
        key_fields = side.capture.key
        if key_fields:
            missing = [f for f in key_fields if record.get(f) is None]
            if missing:
                return None, (f"missing key field '{missing[0]}': capture.key names it; the record lacks it "
                              f"or it is null")
            key: Any = record[key_fields[0]] if len(key_fields) == 1 else [record[f] for f in key_fields]
        else:
            key = input_fp
        rec = Rec(rid, location, record, key, canonical.encode(key), input_fp)
        try:
            rec.timestamp_us = self._event_time.micros(record)
            if self._lateness is not None:
                arrival = record.get(self._lateness.arrival)
                try:
                    rec.arrival_us = to_micros(arrival, self._arrival_unit)
                except TimestampError as exc:
                    return None, f"arrival time: field '{self._lateness.arrival}' {exc}"
        except TimestampError as exc:
            return None, f"event time: {exc}"
        except Exception as exc:
            raise UserCodeError(f"record {rec.key_text()}: timestamp.function raised "
                                f"{type(exc).__name__}: {exc}") from exc
        try:
            rec.windows = window_stage.assign(self._windowfn, rec.timestamp_us, record)
            rec.group = shard_stage.grouping_key(side.shard, record, self._key_fn)
        except Exception as exc:
            raise UserCodeError(f"record {rec.key_text()}: window or shard key function raised "
                                f"{type(exc).__name__}: {exc}") from exc
        rec.group_bytes = canonical.encode(rec.group)
        return rec, None


def final_windows(rec: Rec, late: dict, merges: dict) -> tuple[list[tuple], list[tuple]]:
    """(windows the record is in after lateness and merging, windows it was late for)."""
    expired = late.get(rec.rid, ())
    kept = [w for w in rec.windows if w not in expired]
    if merges and kept:
        mapping = merges.get(rec.group_bytes, {})
        kept = sorted({mapping.get(w, w) for w in kept})
    return kept, list(expired)


def arrival_rows(batch: Batch) -> list[tuple]:
    return [(r.arrival_us, r.timestamp_us if r.timestamp_us is not None else 0, r.input_fp, r.rid, r.windows)
            for r in batch[1]]


def concat_lists(lists: Iterable[list]) -> list:
    result: list = []
    for items in lists:
        result.extend(items)
    return result


def merge_rows(batch: Batch, late: dict) -> Iterator[tuple[bytes, set]]:
    groups: dict[bytes, set] = {}
    for rec in batch[1]:
        expired = late.get(rec.rid, ())
        groups.setdefault(rec.group_bytes, set()).update(w for w in rec.windows if w not in expired)
    yield from groups.items()


def aggregate_partials(batch: Batch, side: SideConfig, late: dict, merges: dict) -> Iterator[tuple]:
    aggregator = shard_stage.Aggregator(side.shard.aggregates)  # type: ignore[union-attr]
    for rec in batch[1]:
        kept, _ = final_windows(rec, late, merges)
        for win in kept:
            aggregator.add((win, rec.group_bytes), rec.record, (rec.timestamp_us or 0, rec.input_fp))
    yield from aggregator.groups.items()


def _seed_spec(side: SideConfig) -> SeedSpec | None:
    if side.seed is None:
        return None
    ops = []
    for op in side.seed.ops:
        if op.op == "sample":
            ops.append((op.name, SampleOp(op.rate, op.hash)))
        elif op.op == "split":
            ops.append((op.name, SplitOp(op.buckets, op.hash)))
        else:
            ops.append((op.name, FunctionOp(op.function.resolve())))  # type: ignore[union-attr]
    return SeedSpec(side.seed.value, tuple(ops))


class ApplyStagesFn(beam.DoFn):
    """Window, shard, coder and seed stages of a batch, with the side-wide results as side inputs."""

    def __init__(self, side: SideConfig):
        self._side = side

    def setup(self) -> None:
        side = self._side
        self._coder = None
        if side.coder is not None:
            factory = side.coder.factory.resolve() if side.coder.factory else None
            spec = CoderSpec(type=side.coder.type, factory=factory, options=dict(side.coder.options))
            try:
                self._coder = build_coder(spec, side_field_types(side))
            except Exception as exc:
                raise UserCodeError(f"sides.{side.name}.coder: cannot build the coder: "
                                    f"{type(exc).__name__}: {exc}") from exc
        self._seed = _seed_spec(side)

    def process(self, batch: Batch, late: dict, merges: dict, aggregates: dict) -> Iterator[Batch]:
        part, recs = batch
        shard = self._side.shard
        names = [a.name for a in shard.aggregates] if shard else []
        live = []
        for rec in recs:
            kept, expired = final_windows(rec, late, merges)
            window_value: dict[str, Any] = {"timestamp_us": rec.timestamp_us,
                                            "windows": [list(w) for w in (kept or rec.windows)]}
            if expired and not kept:
                window_value["late"] = True
                rec.values["window"] = window_value
                for stage in STAGES[2:]:
                    rec.values[stage] = DROPPED_LATE
                continue
            if expired:
                window_value["late_windows"] = [list(w) for w in expired]
            rec.values["window"] = window_value
            record = dict(rec.record)
            attached: dict[str, Any] = {}
            if names:
                per_window = [aggregates.get((w, rec.group_bytes), {}) for w in kept]
                for name in names:
                    values = [agg.get(name) for agg in per_window]
                    attached[name] = values[0] if len(values) == 1 else values
                record.update(attached)
            rec.values["shard"] = {"key": rec.group,
                                   "shard": shard_stage.shard_id(shard, rec.group, rec.group_bytes),
                                   "aggregates": attached}
            rec.record = record
            live.append(rec)
        decoded = roundtrip_batch(self._coder, [r.record for r in live]) if self._coder else \
            [r.record for r in live]
        for rec, value in zip(live, decoded):
            if isinstance(value, CoderFailure):
                rec.values["coder"] = {"error": value.message}
                rec.values["seed"] = rec.values["transform"] = {"error": "coder round trip failed"}
                continue
            rec.values["coder"] = value
            try:
                rec.values["seed"] = seed_outputs(self._seed, value, rec.key_bytes) if self._seed else {}
            except Exception as exc:
                raise UserCodeError(f"record {rec.key_text()}: a seed function of side '{self._side.name}' "
                                    f"raised {type(exc).__name__}: {exc}") from exc
            rec.transform_input = value
        yield part, recs


class ApplyTransformFn(beam.DoFn):
    """The transform stage of a batch: a python function, an exported TFT graph, or a pass-through."""

    def __init__(self, side: SideConfig, saved_dir: str | None):
        self._side = side
        self._saved_dir = saved_dir

    def setup(self) -> None:
        spec = self._side.transform
        self._python = PythonTransform(spec.ref.resolve(), spec.ref.text) \
            if spec is not None and spec.kind == "python" else None  # type: ignore[union-attr]
        self._saved = SavedTransform(self._saved_dir, side_field_types(self._side)) if self._saved_dir else None

    def process(self, batch, *unused_side_inputs):  # no hints: Beam checks *args hints
        part, recs = batch
        todo = [r for r in recs if r.transform_input is not None]
        if self._saved is not None:
            outputs = self._apply_saved(todo)
        elif self._python is not None:
            outputs = []
            for rec in todo:
                try:
                    outputs.append(self._python.apply_one(rec.transform_input))  # type: ignore[arg-type]
                except UserCodeError as exc:
                    raise UserCodeError(f"record {rec.key_text()}: {exc}") from exc
                except Exception as exc:
                    raise UserCodeError(f"record {rec.key_text()}: transform.python "
                                        f"'{self._side.transform.ref.text}' raised "  # type: ignore[union-attr]
                                        f"{type(exc).__name__}: {exc}") from exc
        else:
            outputs = [dict(r.transform_input) for r in todo]  # type: ignore[arg-type]
        for rec, features in zip(todo, outputs):
            rec.values["transform"] = features
        yield part, recs

    def _apply_saved(self, todo: list[Rec]) -> list[dict]:
        saved = self._saved
        try:
            return saved.apply([r.transform_input for r in todo])  # type: ignore[union-attr,misc]
        except UserCodeError:
            raise
        except Exception as batch_exc:
            for rec in todo:  # find the record to name
                try:
                    saved.apply([rec.transform_input])  # type: ignore[union-attr,list-item]
                except Exception as exc:
                    raise UserCodeError(f"record {rec.key_text()}: the transform graph "
                                        f"{self._saved_dir} raised {type(exc).__name__}: "
                                        f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
            raise UserCodeError(f"the transform graph {self._saved_dir} raised on a batch: "
                                f"{type(batch_exc).__name__}: {batch_exc}") from batch_exc


def _unencodable(rec: Rec, stage: str, value: Any, exc: TypeError) -> str:
    """Names the record, the stage and (for dict values) the field whose value cannot be fingerprinted."""
    where = ""
    if isinstance(value, dict):
        for name, item in value.items():
            try:
                canonical.encode(item)
            except TypeError:
                where = f" field {name!r}"
                break
    return (f"record {rec.key_text()}: the {stage} stage value{where} cannot be fingerprinted: {exc}; return "
            f"None, bools, numbers, str, bytes, lists, dicts, datetimes or numpy scalars/arrays")


class WriteBatchFn(beam.DoFn):
    """Fingerprints every stage value of a batch and writes the batch's part of the fingerprint set."""

    def __init__(self, out_dir: str):
        self._out_dir = out_dir

    def process(self, batch: Batch) -> Iterator[str]:
        part, recs = batch
        encode = canonical.encode
        hash64 = xxhash.xxh3_64_intdigest
        hash128 = xxhash.xxh3_128_digest
        fp_rows, value_rows = [], []
        for rec in recs:
            fp_row: dict[str, Any] = {"key_fp": hash128(rec.key_bytes), "key": rec.key_text()}
            value_row: dict[str, Any] = {"key_bytes": rec.key_bytes, "location": rec.location}
            for stage in STAGES:
                value = rec.values.get(stage)
                try:
                    data = encode(value)
                except TypeError as exc:  # user code produced a value with no canonical encoding
                    raise UserCodeError(_unencodable(rec, stage, value, exc)) from exc
                value_row[stage] = data
                if stage == "transform" and rec.transform_input is not None:
                    features = {name: hash64(encode(v)) for name, v in value.items()}
                    fp_row["features"] = sorted(features.items())
                    fp_row["transform_fp"] = hash64(encode(features))
                else:
                    fp_row[f"{stage}_fp"] = hash64(data)
            fp_row.setdefault("features", [])
            fp_rows.append(fp_row)
            value_rows.append(value_row)
        write_part(self._out_dir, part, PartRows(fp_rows, value_rows))
        yield part
