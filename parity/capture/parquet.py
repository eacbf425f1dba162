"""Parquet captures, read in batches of rows (`ParquetFile.iter_batches`), never whole.

Values are what `pyarrow` `to_pylist()` gives, except types without a plain JSON-like value, which become:

| Arrow type | value |
|---|---|
| `timestamp` (any unit, with or without time zone) | `int` microseconds since the epoch, UTC; nanoseconds are floored |
| `duration` | `int` microseconds; nanoseconds are floored |
| `decimal` | `str(decimal)`, e.g. `"12.50"`: exact, unlike a float |
| `date32`, `date64` | ISO date string, e.g. `"2024-01-31"` |
| `time32`, `time64` | ISO time string, e.g. `"13:45:00.250000"` |
| `map` | list of `[key, value]` lists |
| `uuid` (extension type) | the UUID's string form, e.g. `"1b4e28ba-2fa1-11d2-883f-0016d3cca427"` |
| other extension types | the value of their storage type |

With a schema, schema fields are coerced (missing columns give None) and other columns are kept.
Where the schema keeps every column's values as they are (`columnar.identity_schema`: the common case of a
file written with the schema's types), the values are not coerced one by one (coercion would keep them),
and each record comes with its canonical bytes and fingerprint, computed from the batch's columns by
`parity.encoding.columnar` (the read step then does not encode the dicts).
A row that does not fit the schema is quarantined at `<display_path>:row <index>` (0-based); so is every row
of a file whose columns nest more than `MAX_NESTING` (100) levels of lists and structs, or that repeats a
column name or a struct field name (`repeated field 'v': the Parquet file has 2 columns of that name, ...`). A file that cannot
be opened as Parquet is ONE quarantined entry located at `<display_path>` (its row count is unknown). The file
is read one row group at a time (a batch never spans two groups): a row group that breaks (a corrupt page)
quarantines each of its unread rows at `<display_path>:row <index>` (the footer gives the group's row count,
so the quarantined share is the real one), and the row groups after it are still read.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from parity.capture.items import (MAX_FIELDS, MAX_NESTING, TOO_DEEP, Quarantined, ReadItem, open_error, preview,
                                  raw_limit, too_large_reason, too_many_fields)
from parity.capture.parquet_pages import largest_page
from parity.capture.reasons import reader_error
from parity.capture.schema import FieldType, SchemaMismatch, coerce_record
from parity.choices import US_PER_UNIT
from parity.encoding import columnar
from parity.errors import first_line
from parity.storage.context import Storage

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_ONE_US = datetime.timedelta(microseconds=1)
_MAX_LOST_ROWS = 10_000_000


def read(
    path: str, schema: dict[str, FieldType] | None, display_path: str, batch_size: int = 4096,
    max_record_bytes: int = 0, storage: Storage = Storage(),
) -> Iterator[ReadItem]:
    """Yield `(record, location)` for each row of the file and `Quarantined` for each bad row or broken file.

    `max_record_bytes` is applied by the read step to each row's canonical bytes. Arrow decodes a page at a
    time, and a row cannot be sized before its page is decoded: a row group with a page that decodes to more
    than `raw_limit(max_record_bytes)` (one value of gigabytes) is quarantined row by row, never decoded
    (`oversized_page`).

    Raises:
        InputError: the file does not exist or cannot be opened by the operating system.
    """
    with contextlib.ExitStack() as opened:  # the file, closed when the reading stops
        try:
            parquet_file = opened.enter_context(storage.open_parquet(path))
            columns = parquet_file.schema_arrow
        except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
            raise open_error(path, exc) from exc
        except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ... for a file that is not Parquet
            yield Quarantined(display_path, reader_error("cannot read Parquet file",
                                                         first_line(exc, limit=10_000)), _head(path, storage))
            return
        too_deep = 1 + max((_type_depth(f.type) for f in columns), default=0) > MAX_NESTING
        # every row of a file with a repeated column or struct field name is quarantined, never materialized:
        # a record cannot hold the name twice, and a dict would keep one of the values (CONTRACT section 8,
        # "Readers")
        refused = (TOO_DEEP if too_deep else too_many_fields(len(columns), "the Parquet file has")
                   if len(columns) > MAX_FIELDS else _repeated_name(columns))
        if refused:  # each row quarantined by the footer's row count, never decoded
            total = parquet_file.metadata.num_rows
            if total > _MAX_LOST_ROWS:  # a footer claiming more rows than is plausible
                yield Quarantined(display_path, f"{refused}; the footer claims {total} rows: counted as this one "
                                                f"entry", "")
                return
            for index in range(total):
                yield Quarantined(f"{display_path}:row {index}", refused, "")
            return
        yield from _group_items(parquet_file, schema, path, display_path, batch_size, max_record_bytes, storage)


def _group_items(parquet_file: Any, schema: dict[str, FieldType] | None, path: str, display_path: str,
                 batch_size: int, max_record_bytes: int, storage: Storage) -> Iterator[ReadItem]:
    """`read`'s items of an open Parquet file, a row group at a time."""
    columns = parquet_file.schema_arrow
    row = 0
    identity = columnar.identity_schema(columns, schema)
    names = set(columns.names)
    missing = [name for name in schema if name not in names] if schema else []
    for group in range(parquet_file.num_row_groups):
        group_start, group_rows = row, parquet_file.metadata.row_group(group).num_rows
        end = group_start + group_rows
        too_large = oversized_page(path, parquet_file.metadata.row_group(group), max_record_bytes,
                                   f"row group {group} (rows {group_start}-{end - 1})", storage)
        if too_large:
            yield from _lost_rows(display_path, row, end, too_large)
            row = end
            continue
        batches = parquet_file.iter_batches(batch_size=max(batch_size, 1), row_groups=[group])
        while True:
            try:
                batch = next(batches, None)
            except Exception as exc:  # a corrupt page: the group's other rows cannot be located
                reason = reader_error(f"cannot read Parquet row group {group} (rows {group_start}-{end - 1}) "
                                      f"after row {row}", first_line(exc, limit=10_000))
                yield from _lost_rows(display_path, row, end, reason)
                row = end
                break
            if batch is None:
                break
            # the rows' canonical bytes and fingerprints from the Arrow columns, where the schema keeps
            # the values as they are (else None: the read step encodes the records)
            encoded = columnar.row_encodings(batch, missing) if identity else None
            for index, record in enumerate(_rows(batch, schema if identity else None)):
                location = f"{display_path}:row {row}"
                row += 1
                if schema is not None and not identity:
                    try:
                        record = coerce_record(record, schema)
                    except SchemaMismatch as exc:
                        yield Quarantined(location, str(exc), preview(record))
                        continue
                if encoded is None:
                    yield record, location
                else:
                    yield record, location, encoded[0][index], encoded[1][index]


def oversized_page(path: str, group: Any, max_record_bytes: int, rows: str, storage: Storage = Storage()) -> str | None:
    """The reason the rows of a row group (`group`, its metadata; `rows` names them) are quarantined unread when
    one of its pages decodes to more than a record may take as read (`raw_limit`); else None. Only the chunks
    larger than the limit are walked (`parquet_pages.largest_page`), through one handle per call."""
    if max_record_bytes <= 0:
        return None
    limit = raw_limit(max_record_bytes)
    suspects = [chunk for chunk in (group.column(i) for i in range(group.num_columns))
                if chunk.total_uncompressed_size > limit]
    if not suspects:
        return None
    with storage.open_read(path) as handle:
        for chunk in suspects:
            largest = largest_page(handle, chunk)
            if largest is not None and largest > limit:
                return too_large_reason(f"{rows} has a page of column {chunk.path_in_schema!r:.80} that decodes to",
                                        largest, max_record_bytes)
    return None


def _lost_rows(display_path: str, start: int, end: int, reason: str) -> Iterator[Quarantined]:
    """Each unread row of `start`..`end` quarantined with `reason`: a row is a record, counted one by one (one
    entry when a footer claims more rows than is plausible)."""
    if end - start > _MAX_LOST_ROWS:
        yield Quarantined(f"{display_path}:row {start}", f"{reason}; the footer claims {end - start} unread rows: "
                                                          f"counted as this one entry", "")
        return
    for lost in range(start, end):
        yield Quarantined(f"{display_path}:row {lost}", reason, "")


def _rows(batch: pa.RecordBatch, identity: Mapping[str, FieldType] | None = None) -> list[dict[str, Any]]:
    """The batch's rows as dicts of plain Python values (see the module docstring for the conversions).

    `identity`: a schema that keeps every column's values (`columnar.identity_schema`); the rows are then
    what `coerce_record` would make of them (its fields first, in its order, a None for each one the file
    lacks, then the other columns), built without coercing each value."""
    columns = {name: _column_values(batch.column(i)) for i, name in enumerate(batch.schema.names)}
    if identity is not None:
        nulls = [None] * batch.num_rows
        columns = {**{name: columns.get(name, nulls) for name in identity},
                   **{name: values for name, values in columns.items() if name not in identity}}
    names = list(columns)
    if not names:
        return [{} for _ in range(batch.num_rows)]
    return [dict(zip(names, values)) for values in zip(*columns.values())]


def _column_values(column: pa.Array) -> list[Any]:
    arrow_type = column.type
    if pa.types.is_timestamp(arrow_type) or pa.types.is_duration(arrow_type):
        # integers straight from Arrow: exact for every unit, and no datetime objects per value
        raw = column.view(pa.int64()).to_pylist()
        if arrow_type.unit == "ns":
            return [None if v is None else v // 1_000 for v in raw]
        factor = US_PER_UNIT[arrow_type.unit]
        return [None if v is None else v * factor for v in raw]
    values = column.to_pylist()
    if _needs_conversion(arrow_type):
        return [_convert(v) for v in values]
    return values


def _repeated_name(columns: pa.Schema) -> str | None:
    """The reason rows are quarantined when the file repeats a column name, or a struct repeats a field name at
    any depth (Arrow and Parquet allow both); None when every name is unique where it stands."""
    stack: list[tuple[list[str], list[pa.Field], bool]] = [([], list(columns), False)]
    while stack:
        path, fields, in_list = stack.pop()
        seen: set[str] = set()
        for item in fields:
            if item.name in seen:
                count = sum(1 for other in fields if other.name == item.name)
                if not path:
                    return (f"repeated field {item.name!r:.60}: the Parquet file has {count} columns of that name, "
                            f"and a record is never resolved to one of its values; write each column once")
                where = f"field {path[0]!r:.60}: " + "".join(f"at [{p!r:.40}]" for p in path[1:2]) + "".join(
                    f"[{p!r:.40}]" for p in path[2:]) + (": " if len(path) > 1 else "")
                return (f"{where}repeated key {item.name!r:.60}: its struct has {count} fields of that name, and "
                        f"a record is never resolved to one of its values; write each field once")
            seen.add(item.name)
        for item in fields:
            inner = item.type
            while isinstance(inner, pa.BaseExtensionType) or pa.types.is_dictionary(inner):
                inner = inner.storage_type if isinstance(inner, pa.BaseExtensionType) else inner.value_type
            if inner.num_fields:  # a list's value field is no name of the record's
                listed = not pa.types.is_struct(inner)
                stack.append((path if in_list else path + [item.name],
                              [inner.field(i) for i in range(inner.num_fields)], listed))
    return None


def _type_depth(arrow_type: pa.DataType) -> int:
    """Levels of lists and dicts a value of this type converts to (0 for a scalar)."""
    if isinstance(arrow_type, pa.BaseExtensionType):
        return _type_depth(arrow_type.storage_type)
    if pa.types.is_dictionary(arrow_type):
        return _type_depth(arrow_type.value_type)
    if arrow_type.num_fields == 0:
        return 0
    return 1 + max(_type_depth(arrow_type.field(i).type) for i in range(arrow_type.num_fields))


def _needs_conversion(arrow_type: pa.DataType) -> bool:
    if isinstance(arrow_type, pa.BaseExtensionType):  # e.g. uuid, whose values are uuid.UUID objects
        return True
    if (
        pa.types.is_timestamp(arrow_type)
        or pa.types.is_duration(arrow_type)
        or pa.types.is_decimal(arrow_type)
        or pa.types.is_date(arrow_type)
        or pa.types.is_time(arrow_type)
        or pa.types.is_map(arrow_type)
    ):
        return True
    if pa.types.is_dictionary(arrow_type):
        return _needs_conversion(arrow_type.value_type)
    return any(_needs_conversion(arrow_type.field(i).type) for i in range(arrow_type.num_fields))


def _convert(value: Any) -> Any:
    """A nested value with the module's conversions applied."""
    if isinstance(value, datetime.datetime):  # also pandas.Timestamp, a subclass
        aware = value if value.tzinfo is not None else value.replace(tzinfo=datetime.timezone.utc)
        return (aware - _EPOCH) // _ONE_US
    if isinstance(value, datetime.timedelta):
        return value // _ONE_US
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return [_convert(v) for v in value]
    if isinstance(value, tuple):  # map entries
        return [_convert(v) for v in value]
    if isinstance(value, dict):
        return {k: _convert(v) for k, v in value.items()}
    return value



def _head(path: str, storage: Storage) -> str:
    try:
        with storage.open_read(path) as handle:
            return preview(handle.read(64))
    except OSError:
        return ""
