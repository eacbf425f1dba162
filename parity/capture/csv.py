"""CSV captures: a header row, then one record per row, UTF-8, read with Python's `csv` module.

A schema is required (CSV cells carry no types) and every schema field must be a header column; columns the
schema lacks are kept as strings. An empty cell is None: CSV cannot tell an empty string from a null. A
`list<T>` cell holds a JSON array, e.g. `"[1, 2]"`. Blank lines are not records.

A row is quarantined at `<display_path>:<line>` (the 1-based line where the row starts) when it has the wrong
number of cells (`expected N columns, got M`), is not UTF-8, is malformed CSV (e.g. a stray quote), or does not
fit the schema. Every row of a file whose header repeats a column name is quarantined, naming the column
(`repeated field 'v': the CSV header names columns 4 and 6 so, ...`). An unterminated quote makes the rest of
the file one malformed row; its reason names the lines
it spans (`invalid CSV: unexpected end of data (lines 3-9 read as one row)`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import IO, Any

from parity.capture.items import (MAX_FIELDS, MAX_RECORD_BYTES, Quarantined, ReadItem, open_error, preview,
                                  raw_limit, read_line, too_large_reason)
from parity.capture.reasons import reader_error
from parity.capture.schema import FieldType, SchemaMismatch, coerce_record
from parity.errors import InputError
from parity.storage import urls
from parity.storage.context import Storage

_BOM = b"\xef\xbb\xbf"


class _Lines:
    """Decodes a binary file line by line for `csv.reader`, remembering the lines of the current row.

    A line that is not UTF-8 is passed on decoded with replacement characters, so that the CSV parser keeps
    its place, and noted in `bad` so that the row holding it is quarantined.
    """

    def __init__(self, handle: IO[bytes], max_record_bytes: int = MAX_RECORD_BYTES) -> None:
        self._handle = handle
        self._max_record_bytes = max_record_bytes
        self._limit = raw_limit(max_record_bytes)
        self.count = 0
        self.text: list[str] = []
        self.bad: list[str] = []

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        raw, size = read_line(self._handle, self._limit)
        if not raw:
            raise StopIteration
        self.count += 1
        if size > len(raw):  # never held whole: the row holding it is quarantined, the parser keeps its place
            self.bad.append(too_large_reason(f"line {self.count} holds", size, self._max_record_bytes))
            self.text.append(raw[:200].decode("utf-8", errors="replace"))
            return "\n"
        if self.count == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM):]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.bad.append(reader_error(f"invalid UTF-8 at line {self.count}, byte {exc.start}", exc.reason))
            text = raw.decode("utf-8", errors="replace")
        self.text.append(text)
        return text

    def start_row(self) -> None:
        self.text = []
        self.bad = []


def read(
    path: str, schema: dict[str, FieldType] | None, display_path: str, batch_size: int = 0,
    max_record_bytes: int = MAX_RECORD_BYTES, storage: Storage = Storage(),
) -> Iterator[ReadItem]:
    """Yield `(record, location)` for each row of the file and `Quarantined` for each bad row.

    Raises:
        InputError: no schema was given, the file cannot be opened, or its header is unusable.
    """
    del batch_size  # rows are read one at a time
    if schema is None:
        raise InputError(
            f"{display_path}: reading CSV captures needs field types; add `capture.schema` "
            "(e.g. {trip_id: int64, fare: float64, zone: string})"
        )
    try:
        handle = storage.open_read(path)  # bytes, so that one non-UTF-8 line is quarantined rather than fatal
    except OSError as exc:
        raise open_error(path, exc) from exc
    with handle:
        lines = _Lines(handle, max_record_bytes)
        reader = csv.reader(lines, strict=True)
        header = _header(reader, lines, schema, display_path)
        if header is None:
            return
        repeated = _repeated_column(header)
        while True:
            first_line = lines.count + 1
            lines.start_row()
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                reason = reader_error("invalid CSV", exc)
                if lines.count > first_line:  # e.g. an unterminated quote swallowed the lines after it
                    reason += f" (lines {first_line}-{lines.count} read as one row)"
                yield Quarantined(f"{display_path}:{first_line}", reason, preview("".join(lines.text)))
                if lines.count < first_line:  # nothing consumed: the parser cannot move on
                    return
                continue
            if not row and not lines.bad:
                continue
            location = f"{display_path}:{first_line}"
            result = repeated or _record(row, header, schema, lines.bad)
            if isinstance(result, str):
                yield Quarantined(location, result, preview("".join(lines.text)))
            else:
                yield result, location


def _header(reader: Any, lines: _Lines, schema: dict[str, FieldType], display_path: str) -> list[str] | None:
    """The header's column names (None for a file without any row), checked against the schema."""
    try:
        header = next((row for row in reader if row), None)
    except csv.Error as exc:
        raise InputError(f"{display_path}:{lines.count}: the CSV header is malformed: {exc}") from exc
    if header is None:
        return None
    if len(header) > MAX_FIELDS:  # checked first: everything after it handles each column
        raise InputError(f"{display_path}: the CSV header has {len(header):,} columns, above the limit of "
                         f"{MAX_FIELDS:,} fields per record; write the columns the pipelines read")
    if lines.bad and lines.bad[0].startswith("record too large"):
        raise InputError(f"{display_path}: the CSV header cannot be read: {lines.bad[0]}")
    if lines.bad:
        raise InputError(f"{display_path}: the CSV header is not UTF-8: {lines.bad[0]}")
    columns = set(header)
    missing = [name for name in schema if name not in columns]
    if missing:
        raise InputError(
            f"{display_path}: the CSV header lacks schema column(s) {', '.join(map(repr, missing))}; "
            f"it has {', '.join(map(repr, header))}"
        )
    return header


def _repeated_column(header: list[str]) -> str | None:
    """The reason every row of a file whose header repeats a column is quarantined, or None: a row cannot be
    read as a record without resolving the name to one of its cells (CONTRACT section 8, "Readers"); each row
    stays counted, so that the file's records are all accounted for."""
    first: dict[str, int] = {}
    for number, name in enumerate(header, 1):
        if name in first:
            return (f"repeated field {name!r:.60}: the CSV header names columns {first[name]} and {number} so, and "
                    f"a record is never resolved to one of its values; name each column once")
        first[name] = number
    return None


def _record(row: list[str], header: list[str], schema: dict[str, FieldType], bad: list[str]) -> dict | str:
    """The row's record, or the reason it is quarantined."""
    if bad:
        return bad[0]
    if len(row) != len(header):
        return f"expected {len(header)} columns, got {len(row)}"
    record: dict[str, Any] = {}
    for name, cell in zip(header, row):
        field_type = schema.get(name)
        if cell == "":
            record[name] = None
        elif field_type is not None and field_type.is_list:
            record[name] = _json_array(cell)
        else:
            record[name] = cell
    try:
        return coerce_record(record, schema)
    except SchemaMismatch as exc:
        return str(exc)


def _json_array(cell: str) -> Any:
    """The JSON array a list cell holds, or the cell itself so that coercion reports it."""
    try:
        value = json.loads(cell)
    except (ValueError, RecursionError):
        return cell
    return value if isinstance(value, list) else cell
