"""Field types of a capture, inferred from a sample of its records, for `parity init` (pure but for reading).

Per format, from what the file itself says:

- parquet: the file's Arrow schema (and its null counts), exactly: `int64`, `int32`, `float64`, `float32`,
  `string`, `bytes`, `bool`, `list<T>`;
- tfrecord: the features of the first tf.Examples: `int64_list` -> `int64`, `float_list` -> `float32` (the
  floats tf.Example holds), `bytes_list` -> `string` when every sampled value is UTF-8, else `bytes`; more than
  one value in a record -> `list<T>`;
- jsonl: the values of the first records: `int64`, `float64` (numbers with a fraction, or ints and floats
  mixed), `string`, `bool`, `list<T>`;
- csv: the cells of the first rows: `int64`, `float64`, `bool` (true/false), `list<T>` (JSON arrays), else
  `string`.

A scalar field that is absent, null or empty in some sampled record is `optional<T>` (it reads the same; a
`tft` side receives it as a SparseTensor, as TFX hands an optional feature). A field whose type cannot be told
(nested objects, types mixed, no value in the sample, an Arrow type without a parity type) gets no type: it is
left out of the schema, and readers that need none (jsonl, parquet) keep it as they read it.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterable

from parity.capture import detect_format, list_capture_files, read_file
from parity.errors import InputError
from parity.storage.context import Storage

__all__ = ["CaptureSample", "InferredField", "infer"]

SAMPLE_RECORDS = 1000  # records read per capture: enough to see optional fields, quick on any file
_INT64 = (-(2**63), 2**63 - 1)
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_BOOL_TEXT = {"true", "false"}


@dataclass(frozen=True)
class InferredField:
    """One field: its parity type (None: left out of the schema), why, and a few numbers seen (for guesses
    such as an event time's unit)."""

    name: str
    type: str | None
    note: str
    numbers: tuple[float, ...] = ()


@dataclass(frozen=True)
class CaptureSample:
    """What `infer` found: the format, the files the capture names, how many records it read, the fields."""

    format: str
    files: tuple[str, ...]
    sampled: int
    fields: tuple[InferredField, ...]


def infer(pattern: str, base_dir: str, fmt: str | None = None, sample: int = SAMPLE_RECORDS,
          storage: Storage = Storage()) -> CaptureSample:
    """The fields of the capture `pattern` names (a file, folder or glob relative to `base_dir`), from its first
    file's schema (Parquet) or first `sample` records.

    Raises:
        InputError: nothing matches, the format cannot be told, or no record could be read.
    """
    files = list_capture_files(pattern, base_dir, storage)
    fmt = fmt or detect_format(files[0], storage)
    first = files[0]
    if fmt == "parquet":
        return _parquet(first, files, storage)
    if fmt == "csv":
        return _csv(first, files, sample, storage)
    records = _records(first, fmt, sample, storage)
    if not records:
        raise InputError(f"{first}: no readable record among the first {sample}; parity init infers the schema "
                         f"from the records (give --schema, or a capture whose first records read)")
    fields = _tfexample_fields(records) if fmt == "tfrecord" else _json_fields(records)
    return CaptureSample(fmt, tuple(files), len(records), fields)


def _records(path: str, fmt: str, sample: int, storage: Storage) -> list[dict]:
    records: list[dict] = []
    # tf.Example: an empty schema keeps every feature as the list of its raw values
    for batch in read_file(path, fmt, {} if fmt == "tfrecord" else None, min(sample, 1024), path, storage=storage):
        records.extend(batch.records)
        if len(records) >= sample:
            break
    return records[:sample]


def _names(records: Iterable[dict]) -> list[str]:
    """Field names in the order they first appear."""
    seen: dict[str, None] = {}
    for record in records:
        for name in record:
            seen.setdefault(str(name), None)
    return list(seen)


def _numbers(values: Iterable[Any]) -> tuple[float, ...]:
    found = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
             and math.isfinite(float(v))]
    return tuple(found[:50])


def _scalar_type(values: list[Any]) -> tuple[str | None, str]:
    """The type of JSON scalars (no None among them), or None and why."""
    kinds = {type(v) for v in values}
    if kinds == {bool}:
        return "bool", "bool"
    if kinds <= {int} and all(_INT64[0] <= v <= _INT64[1] for v in values):
        return "int64", "int64"
    if kinds <= {int, float} and bool not in kinds:
        return "float64", "float64" if kinds == {float} else "float64 (ints and floats)"
    if kinds == {str}:
        return "string", "string"
    if dict in kinds:
        return None, "nested objects have no parity type"
    names = sorted(k.__name__ for k in kinds)
    return None, f"mixed types ({', '.join(names)})"


def _json_fields(records: list[dict]) -> tuple[InferredField, ...]:
    fields = []
    for name in _names(records):
        values = [r.get(name) for r in records]
        present = [v for v in values if v is not None]
        missing = len(values) - len(present)
        gap = f", null or absent in {missing}" if missing else ""
        if not present:
            fields.append(InferredField(name, None, f"null or absent in all {len(values)} sampled records"))
            continue
        if all(isinstance(v, list) for v in present):
            items = [item for v in present for item in v if item is not None]
            if not items:
                fields.append(InferredField(name, None, "lists without a value in the sample"))
                continue
            element, why = _scalar_type(items)
            if element is None:
                fields.append(InferredField(name, None, f"lists of {why}"))
                continue
            fields.append(InferredField(name, f"list<{element}>", f"lists of {why} in {len(present)}{gap}"))
            continue
        kind, why = _scalar_type(present)
        if kind is None:
            fields.append(InferredField(name, None, why))
            continue
        fields.append(InferredField(name, f"optional<{kind}>" if missing else kind, f"{why} in {len(present)}{gap}",
                                    _numbers(present)))
    return tuple(fields)


def _tfexample_fields(records: list[dict]) -> tuple[InferredField, ...]:
    fields = []
    for name in _names(records):
        lists = [r.get(name) or [] for r in records]
        values = [v for values in lists for v in values]
        empty = sum(1 for values in lists if not values)
        gap = f", absent or empty in {empty}" if empty else ""
        if not values:
            fields.append(InferredField(name, None, "no value in any sampled tf.Example"))
            continue
        kinds = {type(v) for v in values}
        if kinds == {int}:
            element, why = "int64", "int64_list"
        elif kinds == {float}:
            element, why = "float32", "float_list"
        elif kinds == {bytes}:
            try:
                for value in values:
                    value.decode("utf-8")
                element, why = "string", "bytes_list of UTF-8 text"
            except UnicodeDecodeError:
                element, why = "bytes", "bytes_list"
        else:
            fields.append(InferredField(name, None, "the feature's kind differs between examples"))
            continue
        most = max(len(v) for v in lists)
        if most > 1:
            fields.append(InferredField(name, f"list<{element}>", f"{why}, up to {most} values"))
        else:
            fields.append(InferredField(name, f"optional<{element}>" if empty else element,
                                        f"{why}, one value in {len(lists) - empty}{gap}", _numbers(values)))
    return tuple(fields)


def _parquet(path: str, files: list[str], storage: Storage) -> CaptureSample:
    """The fields of a Parquet capture, from its first file's schema, read through `storage` (on a URL pyarrow
    fetches the footer and the first row group with ranged reads, not the whole object)."""
    with contextlib.ExitStack() as opened:
        try:
            parquet_file = opened.enter_context(storage.open_parquet(path))
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for a file it cannot open
            raise InputError(f"{path}: cannot open as Parquet: {exc}") from exc
        metadata = parquet_file.metadata
        nulls: dict[str, int] = {}
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            for column in range(row_group.num_columns):
                chunk = row_group.column(column)
                stats = chunk.statistics
                if stats is not None and stats.has_null_count:
                    nulls[chunk.path_in_schema] = nulls.get(chunk.path_in_schema, 0) + stats.null_count
        sample = _parquet_sample(parquet_file, path, storage)
        schema = parquet_file.schema_arrow
    fields = []
    for arrow_field in schema:
        kind, why = _arrow_type(arrow_field.type)
        if kind is None:
            fields.append(InferredField(arrow_field.name, None, why))
            continue
        optional = not kind.startswith("list<") and nulls.get(arrow_field.name, 0) > 0
        note = f"Arrow {arrow_field.type}" + (f", {nulls[arrow_field.name]} nulls" if optional else "")
        fields.append(InferredField(arrow_field.name, f"optional<{kind}>" if optional else kind, note,
                                    _numbers(sample.get(arrow_field.name, []))))
    return CaptureSample("parquet", tuple(files), metadata.num_rows, tuple(fields))


def _parquet_sample(parquet_file: Any, path: str, storage: Storage) -> dict[str, list]:
    """The first row group's first rows, for the numbers' guesses; none when that group holds a page the
    capture's reader would refuse to decode (a value of gigabytes): the types come from the schema."""
    from parity.capture.items import MAX_RECORD_BYTES
    from parity.capture.parquet import oversized_page

    if parquet_file.metadata.num_row_groups == 0:
        return {}
    if oversized_page(path, parquet_file.metadata.row_group(0), MAX_RECORD_BYTES, "row group 0", storage):
        return {}
    try:
        return parquet_file.read_row_group(0).slice(0, SAMPLE_RECORDS).to_pydict()
    except Exception:  # the numbers only feed guesses; the types come from the schema
        return {}


def _arrow_type(arrow_type: Any) -> tuple[str | None, str]:
    import pyarrow as pa
    import pyarrow.types as t

    if t.is_dictionary(arrow_type):
        return _arrow_type(arrow_type.value_type)
    if t.is_boolean(arrow_type):
        return "bool", ""
    if t.is_int64(arrow_type) or t.is_uint32(arrow_type):
        return "int64", ""
    if t.is_integer(arrow_type) and not t.is_uint64(arrow_type):
        return "int32", ""
    if t.is_float16(arrow_type) or t.is_float32(arrow_type):
        return "float32", ""
    if t.is_float64(arrow_type):
        return "float64", ""
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "string", ""
    if t.is_binary(arrow_type) or t.is_large_binary(arrow_type) or t.is_fixed_size_binary(arrow_type):
        return "bytes", ""
    if isinstance(arrow_type, (pa.ListType, pa.LargeListType)):
        element, _ = _arrow_type(arrow_type.value_type)
        if element is not None and not element.startswith("list<"):
            return f"list<{element}>", ""
    return None, f"Arrow {arrow_type} has no parity type (the reader keeps its values as docs/capture says)"


def _csv(path: str, files: list[str], sample: int, storage: Storage) -> CaptureSample:
    try:
        with io.TextIOWrapper(storage.open_read(path), encoding="utf-8-sig", errors="replace",
                              newline="") as handle:
            rows = csv.reader(handle)
            header = next(rows, None)
            if not header:
                raise InputError(f"{path}: no header row; a CSV capture starts with its column names")
            cells: list[list[str]] = [[] for _ in header]
            sampled = 0
            for row in rows:
                if len(row) != len(header):
                    continue  # a blank line, or a row the reader quarantines: it says nothing of the types
                for column, cell in enumerate(row):
                    cells[column].append(cell)
                sampled += 1
                if sampled >= sample:
                    break
    except (OSError, csv.Error) as exc:
        raise InputError(f"cannot read capture file {path} as CSV: {exc}") from exc
    fields = []
    for name, column in zip(header, cells):
        present = [c for c in column if c != ""]
        empty = len(column) - len(present)
        gap = f", empty in {empty}" if empty else ""
        kind, why, numbers = _csv_type(present)
        if kind is None:
            fields.append(InferredField(name, None, why))
            continue
        optional = empty and not kind.startswith("list<")
        fields.append(InferredField(name, f"optional<{kind}>" if optional else kind,
                                    f"{why} in {len(present)}{gap}", numbers))
    return CaptureSample("csv", tuple(files), sampled, tuple(fields))


def _csv_type(cells: list[str]) -> tuple[str | None, str, tuple[float, ...]]:
    if not cells:
        return None, "empty in every sampled row", ()
    stripped = [c.strip() for c in cells]
    if all(_INT_TEXT.fullmatch(c) for c in stripped):
        numbers = [int(c) for c in stripped]
        if all(_INT64[0] <= n <= _INT64[1] for n in numbers):
            return "int64", "integers", _numbers(numbers)
    floats = []
    for cell in stripped:
        try:
            floats.append(float(cell))
        except ValueError:
            break
    else:
        if "_" not in "".join(stripped):
            return "float64", "numbers", _numbers(floats)
    if all(c.lower() in _BOOL_TEXT for c in stripped):
        return "bool", "true/false", ()
    if all(c.startswith("[") for c in stripped):
        try:
            lists = [json.loads(c) for c in stripped]
        except ValueError:
            lists = []
        items = [item for value in lists if isinstance(value, list) for item in value if item is not None]
        if lists and all(isinstance(v, list) for v in lists) and items:
            element, why = _scalar_type(items)
            if element is not None:
                return f"list<{element}>", f"JSON arrays of {why}", ()
    return "string", "text", ()

