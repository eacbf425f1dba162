"""JSON Lines captures: one JSON object per line, optionally gzip-compressed (told from the file's first bytes,
as `.jsonl.gz` files are: `items.starts_gzip_stream`; a gzip stream that breaks makes the rest of the file one
quarantined entry, and a file whose first bytes are gzip's magic but no gzip stream is plain text).

Blank lines are not records. A line that is not UTF-8, not JSON, not an object, nested more than
`MAX_NESTING` (100) levels of arrays and objects, holding a number beyond the float64 range (`1e400`, which
`float()` would turn into an infinity: the field is named), repeating a key in one of its objects (the key
and where it stands are named: a record is never resolved to one of its values), or does not fit the schema
is quarantined at `<display_path>:<line number>` (1-based). Without a schema, values stay as `json.loads`
gives them (integers of any size stay `int`). With a schema, schema fields are coerced (missing ones become None)
and other fields are kept as they are.
"""

from __future__ import annotations

import functools
import io
import json
import math
import zlib
from collections import deque
from collections.abc import Generator, Iterator
from typing import IO, Any

import orjson

from parity.capture.items import (MAX_FIELDS, MAX_NESTING, MAX_RECORD_BYTES, TOO_DEEP, Chunk, HeadThenRest, Quarantined,
                                  ReadItem, open_capture, open_error, preview, raw_limit, read_line, too_deep,
                                  too_large_reason, too_many_fields)
from parity.capture.reasons import reader_error
from parity.capture.schema import FieldType, SchemaMismatch, coerce_records
from parity.encoding import canonical
from parity.storage.context import Storage

CHUNK = 1000  # lines whose records are coerced together, read one by one
_BOM = b"\xef\xbb\xbf"
BLOCK = 1 << 16  # bytes read at a time (a few hundred lines): their whole lines are parsed and coerced together


def read(
    path: str, schema: dict[str, FieldType] | None, display_path: str, batch_size: int = 0,
    max_record_bytes: int = MAX_RECORD_BYTES, storage: Storage = Storage(),
) -> Iterator[ReadItem]:
    """Yield `(record, location)` for each record of the file and `Quarantined` for each bad line.

    A line longer than `raw_limit(max_record_bytes)` is quarantined as `record too large`, read through in
    bounded pieces and never held whole (one line of a gzip bomb decompresses to gigabytes).

    The file is opened once and read in blocks (`_read_blocks`) until a line longer than the limit: from that
    line on it is read line by line (`_read_lines`), the bytes of the block not yet parsed first and then the
    rest of the same stream. A stream that breaks (a corrupt or cut gzip stream) ends either reader with one
    quarantined entry for the rest (`_broken_stream`).

    Raises:
        InputError: the file cannot be opened.
    """
    del batch_size  # records are coerced a block at a time, whatever the caller's batches
    limit = raw_limit(max_record_bytes)
    with _open(path, storage) as handle:
        stopped = yield from _read_blocks(handle, schema, display_path, limit)
        if stopped is None:
            return
        number, unread = stopped
        rest = io.BufferedReader(HeadThenRest(unread, handle, owns=False, read1=True))  # `handle` is ours to close
        yield from _read_lines(rest, schema, display_path, limit, max_record_bytes, start=number)


def _open(path: str, storage: Storage) -> IO[bytes]:
    try:  # bytes, so that one non-UTF-8 line is quarantined rather than fatal; gzip told from the first bytes
        return open_capture(path, storage)
    except OSError as exc:
        raise open_error(path, exc) from exc


def _read_blocks(handle: IO[bytes], schema: dict[str, FieldType] | None, display_path: str,
                 limit: int) -> Generator[ReadItem, None, tuple[int, bytes] | None]:
    """The read items of the file's lines, a block of lines at a time (`_block_items`); returns None at the end
    of the file or where the stream breaks (its entry yielded), or, when the next line is longer than `limit`,
    the number of lines read and the bytes read past them: the lines from there on are for `_read_lines`.

    A block is one `read1` of the stream: a gzip stream gives what it decompressed before it breaks, where a
    `read` of many steps would lose the steps before the one that failed."""
    number = 0  # lines yielded so far
    pieces: list[bytes] = []  # the start of a line whose end has not been read yet
    held = 0
    while True:
        try:
            block = handle.read1(BLOCK)
        except (OSError, EOFError, zlib.error) as exc:
            yield _broken_stream(display_path, number, exc)
            return None
        if not block:
            if held > limit:
                return number, b"".join(pieces)
            if held:
                yield from _block_items(b"".join(pieces), number, schema, display_path)
            return None
        end = block.rfind(b"\n")
        if end < 0:
            pieces.append(block)
            held += len(block)
            if held > limit:
                return number, b"".join(pieces)
            continue
        buffer = b"".join((*pieces, block[:end])) if pieces else block[:end]
        rest = block[end + 1:]
        pieces, held = ([rest], len(rest)) if rest else ([], 0)
        lines = buffer.split(b"\n")
        if max(map(len, lines)) >= limit:  # the line with its newline is longer than the limit: read alone
            return number, buffer + b"\n" + rest
        yield from _block_items(buffer, number, schema, display_path, lines)
        number += len(lines)


def _block_items(buffer: bytes, number: int, schema: dict[str, FieldType] | None, display_path: str,
                 lines: list[bytes] | None = None) -> Iterator[ReadItem]:
    """The read items of the lines of `buffer` (`lines`: buffer split at its newlines, which it ends without),
    lines `number` + 1 on; one `Chunk` when all of them are records (`_parse_block`)."""
    if lines is None:
        lines = buffer.split(b"\n")
    if number == 0 and lines[0].startswith(_BOM):
        lines[0] = lines[0][len(_BOM):]
        buffer = buffer[len(_BOM):]
    values = _parse_block(buffer, lines)
    if values is not None:
        locations = [f"{display_path}:{n}" for n in range(number + 1, number + 1 + len(lines))]
        yield from _coerced_items(locations, lines, values, schema)
        return
    kept = [(f"{display_path}:{n}", raw) for n, raw in enumerate(lines, number + 1) if raw.strip()]
    yield from _coerced_items([location for location, _ in kept], [raw for _, raw in kept],
                              [_parse_line(raw) for _, raw in kept], schema)


def _parse_block(buffer: bytes, lines: list[bytes]) -> list[dict] | None:
    """Each line's JSON object when every line passes `_parse_line`'s checks, shown for the block as a whole
    (one C call per line and a few per block); None when some line may not (a blank or bad line, a repeated key,
    an integer orjson may have read as a float, a line that may nest too deeply or hold too many fields): the
    caller then parses the block's lines one by one.

    The block's counts stand for each line's: every line holds an object, so at least one `{`, and as many
    `{` in the block as lines means exactly one in each; an object with one `{` has a colon after each of its
    keys, so as many colons in the block as keys in its objects means none is repeated (orjson keeps one of
    a repeated key, with fewer keys than colons); with one `{` a line, no line nests deeper than one more
    than the block's `[` count."""
    try:
        values = list(map(orjson.loads, lines))
    except orjson.JSONDecodeError:
        return None
    if set(map(type, values)) != {dict}:
        return None
    if (buffer.count(b"{") != len(lines) or buffer.count(b":") != sum(map(len, values))
            or buffer.count(b"[") + 1 > MAX_NESTING or max(map(len, values)) > MAX_FIELDS
            or canonical.wide_float(values)):
        return None
    return values


def _read_lines(handle: IO[bytes], schema: dict[str, FieldType] | None, display_path: str, limit: int,
                max_record_bytes: int, start: int = 0) -> Iterator[ReadItem]:
    """`read`'s items line by line: `handle` holds the file's lines from line `start` + 1 on."""
    pending: list[tuple[str, bytes, dict | str]] = []
    number = start
    while True:
        try:
            raw, size = read_line(handle, limit)
            if not raw:
                break
        except (OSError, EOFError, zlib.error) as exc:  # a corrupt or cut gzip stream: the rest is lost
            yield from _pending_items(pending, schema)
            yield _broken_stream(display_path, number, exc)
            return
        number += 1
        cut = size > len(raw)  # a line above the limit, read past
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM):]
        if cut:
            pending.append((f"{display_path}:{number}", raw[:200],
                            too_large_reason("the line holds", size, max_record_bytes)))
        elif not raw.strip():
            continue
        else:
            pending.append((f"{display_path}:{number}", raw, _parse_line(raw)))
        if len(pending) == CHUNK:
            yield from _pending_items(pending, schema)
            pending = []
    yield from _pending_items(pending, schema)


def _broken_stream(display_path: str, number: int, exc: BaseException) -> Quarantined:
    """The one entry for the rest of a stream that broke after line `number` (a corrupt or cut gzip stream)."""
    return Quarantined(f"{display_path}:{number + 1}",
                       f"corrupt gzip stream: {exc} after line {number}; the lines from here on cannot be told "
                       f"apart and count as this one quarantined entry", "")


def _pending_items(pending: list[tuple[str, bytes, dict | str]],
                   schema: dict[str, FieldType] | None) -> Iterator[ReadItem]:
    if pending:
        locations, raws, values = map(list, zip(*pending))
        yield from _coerced_items(locations, raws, values, schema)


def _coerced_items(locations: list[str], raws: list[bytes], values: list[dict | str],
                   schema: dict[str, FieldType] | None) -> Iterator[ReadItem]:
    """The read items of parsed lines (each line's object, or the reason it is quarantined), in line order: their
    records coerced together (`coerce_records`), as one `Chunk` when none is quarantined."""
    parsed = [value for value in values if not isinstance(value, str)]
    coerced_list = parsed if schema is None else coerce_records(parsed, schema)
    if len(parsed) == len(values) and not any(isinstance(value, SchemaMismatch) for value in coerced_list):
        if coerced_list:
            yield Chunk(coerced_list, locations)
        return
    coerced = iter(coerced_list)
    for location, raw, value in zip(locations, raws, values):
        if not isinstance(value, str):
            value = next(coerced)
            if isinstance(value, SchemaMismatch):
                value = str(value)
        if isinstance(value, str):
            yield Quarantined(location, value, preview(_readable(raw)))
        else:
            yield value, location


def _parse_line(raw: bytes) -> dict | str:
    """The line's JSON object, or the reason it is quarantined."""
    # orjson parses a line in a fraction of json's time and gives the same values wherever it accepts one;
    # what it refuses (NaN, lone surrogates, bad UTF-8 or JSON) goes json's way, which decides and words
    # the reason. So does a line where orjson may have read an integer as a float: a float of magnitude 2**63 or
    # more (`canonical.wide_float`, in C), where orjson reads an integer below -2**63 or from 2**64 up.
    try:
        value, reason = orjson.loads(raw), None
    except orjson.JSONDecodeError:
        value, reason = _json_value(raw)
    else:
        # orjson keeps the last of a repeated key; json's pass (with `_pairs`) finds them, needed unless the line
        # surely repeats none: one object, and no more colons than keys (every key is followed by one)
        if type(value) is dict and (canonical.wide_float(value)
                                    or raw.count(b"{") != 1 or raw.count(b":") != len(value)):
            value, reason = _json_value(raw)
    if reason is not None:
        return reason
    if not isinstance(value, dict):
        return f"expected a JSON object, got {_json_kind(value)}"
    if len(value) > MAX_FIELDS:
        return too_many_fields(len(value))
    # counting brackets is a C-speed upper bound on the depth: only lines that might be too deep are walked
    if raw.count(b"[") + raw.count(b"{") > MAX_NESTING and too_deep(value):
        return TOO_DEEP
    return value


def _json_value(raw: bytes) -> tuple[Any, str | None]:
    """The line's value as `json.loads` reads it, or None and the reason it cannot."""
    try:
        text = raw.decode("utf-8").rstrip("\r\n")  # a position past the end is on the line, not line 2
    except UnicodeDecodeError as exc:
        return None, reader_error(f"invalid UTF-8 at byte {exc.start}", exc.reason)
    out_of_range: list[str] = []
    repeated: list[_Repeated] = []
    try:
        value = json.loads(text, parse_float=functools.partial(_float, out_of_range=out_of_range),
                           object_pairs_hook=functools.partial(_pairs, repeated=repeated))
        if out_of_range:
            return None, _out_of_range_reason(value, out_of_range[0])
        if repeated:
            return None, _repeated_reason(value)
        return value, None
    except json.JSONDecodeError as exc:
        return None, reader_error("invalid JSON", exc.msg, f"at column {exc.colno}")
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        return None, reader_error("invalid JSON", exc)
    except RecursionError:
        return None, "invalid JSON: nested too deeply"


class _Repeated(dict):
    """A JSON object that holds `key` more than once (`count` times), with its last value for each key."""

    __slots__ = ("key", "count")


def _pairs(pairs: list[tuple[str, Any]], repeated: list[_Repeated]) -> dict:
    """An object's dict; a `_Repeated` one (noted in `repeated`) when a key appears twice, so that the record
    is quarantined naming it rather than read as one of its values (CONTRACT section 8, "Readers")."""
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    marked = _Repeated(value)
    seen: dict[str, int] = {}
    for key, _ in pairs:
        seen[key] = seen.get(key, 0) + 1
    marked.key = next(key for key, _ in pairs if seen[key] > 1)
    marked.count = seen[marked.key]
    repeated.append(marked)
    return marked


def _repeated_reason(value: Any) -> str:
    """`repeated field 'v': ...` (or `field 'a': at ['b']: repeated key 'c': ...`) for the shallowest object of
    `value` that repeats a key (found breadth-first, no recursion)."""
    queue: deque[tuple[Any, list]] = deque([(value, [])])
    while queue:
        item, path = queue.popleft()
        if isinstance(item, _Repeated):
            where = _path_text(path)
            name = f"repeated key {item.key!r:.60}" if where else f"repeated field {item.key!r:.60}"
            return (f"{where}{name}: the JSON object holds it {item.count} times, and a record is never resolved to "
                    f"one of its values; write each field once")
        if isinstance(item, dict):
            queue.extend((v, path + [k]) for k, v in item.items())
        elif isinstance(item, list):
            queue.extend((v, path + [i]) for i, v in enumerate(item))
    return "a JSON object repeats a key"


class _OutOfRange:
    """A JSON number literal beyond the float64 range (`float()` of it is an infinity), where it stood."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _float(text: str, out_of_range: list[str]) -> float | _OutOfRange:
    value = float(text)
    if math.isinf(value):  # a JSON number literal is finite: only overflow gives an infinity here
        out_of_range.append(text)
        return _OutOfRange(text)
    return value


def _out_of_range_reason(value: Any, text: str) -> str:
    """`field 'v': ...` naming where the first out-of-range number stands (found breadth-first, no recursion)."""
    shown = text if len(text) <= 40 else f"{text[:20]}...{text[-12:]} ({len(text)} characters)"
    queue: deque[tuple[Any, list]] = deque([(value, [])])
    where = ""
    while queue:
        item, path = queue.popleft()
        if isinstance(item, _OutOfRange):
            where = _path_text(path)
            break
        if isinstance(item, dict):
            queue.extend((v, path + [k]) for k, v in item.items())
        elif isinstance(item, list):
            queue.extend((v, path + [i]) for i, v in enumerate(item))
    return f"{where}the number {shown} is out of the float64 range (magnitude above 1.8e308)"


def _path_text(path: list) -> str:
    if not path or not isinstance(path[0], str):
        return ""
    rest = "".join(f"[{p}]" if isinstance(p, int) else f"[{p!r:.40}]" for p in path[1:])
    return f"field {path[0]!r:.60}: " + (f"at {rest}: " if rest else "")


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
