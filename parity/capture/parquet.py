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

With a schema, schema fields are coerced (missing columns give None) and other columns are kept.
A row that does not fit the schema is quarantined at `<display_path>:row <index>` (0-based). A file that cannot
be opened as Parquet is ONE quarantined entry located at `<display_path>` (its row count is unknown); a file
that breaks after some rows quarantines the rest as one entry at `<display_path>:row <first unread row>`.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from parity.capture import Quarantined, ReadItem, open_error, preview
from parity.schema import FieldType, SchemaMismatch, coerce_record

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_US_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}
_ONE_US = datetime.timedelta(microseconds=1)


def read(
    path: str, schema: dict[str, FieldType] | None, display_path: str, batch_size: int = 4096
) -> Iterator[ReadItem]:
    """Yield `(record, location)` for each row of the file and `Quarantined` for each bad row or broken file.

    Raises:
        InputError: the file does not exist or cannot be opened by the operating system.
    """
    try:
        parquet_file = pq.ParquetFile(path)
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise open_error(path, exc) from exc
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError and others for a file that is not Parquet
        yield Quarantined(display_path, f"cannot read Parquet file: {_first_line(exc)}", _head(path))
        return
    row = 0
    with parquet_file:
        batches = parquet_file.iter_batches(batch_size=max(batch_size, 1))
        while True:
            try:
                batch = next(batches, None)
            except Exception as exc:  # a corrupt page or row group: the rows after it cannot be located
                reason = (
                    f"cannot read Parquet file after row {row}: {_first_line(exc)}; "
                    "the remaining rows count as this one quarantined entry"
                )
                yield Quarantined(f"{display_path}:row {row}", reason, "")
                return
            if batch is None:
                return
            for record in _rows(batch):
                location = f"{display_path}:row {row}"
                row += 1
                if schema is None:
                    yield record, location
                    continue
                try:
                    yield coerce_record(record, schema), location
                except SchemaMismatch as exc:
                    yield Quarantined(location, str(exc), preview(record))


def _rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """The batch's rows as dicts of plain Python values (see the module docstring for the conversions)."""
    columns = {name: _column_values(batch.column(i)) for i, name in enumerate(batch.schema.names)}
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
        factor = _US_PER_UNIT[arrow_type.unit]
        return [None if v is None else v * factor for v in raw]
    values = column.to_pylist()
    if _needs_conversion(arrow_type):
        return [_convert(v) for v in values]
    return values


def _needs_conversion(arrow_type: pa.DataType) -> bool:
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
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, list):
        return [_convert(v) for v in value]
    if isinstance(value, tuple):  # map entries
        return [_convert(v) for v in value]
    if isinstance(value, dict):
        return {k: _convert(v) for k, v in value.items()}
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _head(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return preview(handle.read(64))
    except OSError:
        return ""
