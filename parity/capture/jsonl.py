"""JSON Lines captures: one JSON object per line.

Blank lines are not records. A line that is not UTF-8, not JSON, not an object, nested more than
`MAX_NESTING` (100) levels of arrays and objects, or does not fit the schema is quarantined at
`<display_path>:<line number>` (1-based). Without a schema, values stay as `json.loads` gives
them (integers of any size stay `int`). With a schema, schema fields are coerced (missing ones become None)
and other fields are kept as they are.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from parity.capture import MAX_NESTING, TOO_DEEP, Quarantined, ReadItem, open_error, preview, too_deep
from parity.schema import FieldType, SchemaMismatch, coerce_record

_BOM = b"\xef\xbb\xbf"


def read(
    path: str, schema: dict[str, FieldType] | None, display_path: str, batch_size: int = 0
) -> Iterator[ReadItem]:
    """Yield `(record, location)` for each record of the file and `Quarantined` for each bad line.

    Raises:
        InputError: the file cannot be opened.
    """
    del batch_size  # lines are read one at a time
    try:
        handle = open(path, "rb")  # bytes, so that one non-UTF-8 line is quarantined rather than fatal
    except OSError as exc:
        raise open_error(path, exc) from exc
    with handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            if not raw.strip():
                continue
            location = f"{display_path}:{number}"
            result = _parse_line(raw, schema)
            if isinstance(result, str):
                yield Quarantined(location, result, preview(_readable(raw)))
            else:
                yield result, location


def _parse_line(raw: bytes, schema: dict[str, FieldType] | None) -> dict | str:
    """The line's record, or the reason it is quarantined."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at byte {exc.start}: {exc.reason}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"invalid JSON: {exc.msg} at column {exc.colno}"
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        return f"invalid JSON: {exc}"
    except RecursionError:
        return "invalid JSON: nested too deeply"
    if not isinstance(value, dict):
        return f"expected a JSON object, got {_json_kind(value)}"
    # counting brackets is a C-speed upper bound on the depth: only lines that might be too deep are walked
    if raw.count(b"[") + raw.count(b"{") > MAX_NESTING and too_deep(value):
        return TOO_DEEP
    if schema is None:
        return value
    try:
        return coerce_record(value, schema)
    except SchemaMismatch as exc:
        return str(exc)


def _readable(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    return "a number"
