"""What a format module's `read` yields (a record with its location, a `Quarantined` entry, a `Chunk` of
records) and the helpers every reader shares. The readers import this module, and `parity.capture` imports
the readers: the package's own `__init__` would make each reader and the package import each other."""
from __future__ import annotations

import gzip
import io
import zlib
from dataclasses import dataclass
from typing import IO, Any, Union

from parity.errors import InputError
from parity.storage.context import Storage

_PREVIEW_LIMIT = 120
# Levels of lists and dicts a record may nest, itself included. Deeper records cannot be replayed: pickling
# them between Beam stages (and encoding them) exhausts Python's recursion limit at a few hundred levels, which
# would fail the whole run; so they are quarantined.
MAX_NESTING = 100
TOO_DEEP = f"too deeply nested: more than {MAX_NESTING} levels of lists and objects"


# The most fields a record may have, and columns a CSV header or Parquet file: the limit of an inline
# capture.schema (parity.config.MAX_SCHEMA_FIELDS). Every stage handles a record's fields one by one, and a
# record of a million fields took a minute of CPU and 2.5 GB to replay.
MAX_FIELDS = 10_000


def too_many_fields(count: int, what: str = "the record has") -> str:
    """The reason a record (or every row of a file) with more than MAX_FIELDS fields is quarantined."""
    return (f"too many fields: {what} {count:,}, above the limit of {MAX_FIELDS:,} fields per record; capture "
            f"the fields the pipelines read")


# capture.max_record_bytes's default; it bounds a record's canonical bytes (parity/replay/read_step.py) and,
# through `raw_limit`, what a reader holds of one record while it reads it.
MAX_RECORD_BYTES = 16 << 20
_RAW_SLACK = 64 << 10
_SKIP_CHUNK = 1 << 20


def raw_limit(max_record_bytes: int) -> int:
    """The most bytes of one record a reader holds as it reads (a line, a CSV row's line, a TFRecord payload,
    after decompression): 4 x `capture.max_record_bytes` + 64 KiB. A record's raw form may be longer than its
    canonical bytes (JSON's quotes, separators and escapes), so the raw bound is wider than the canonical one;
    a record longer than this is quarantined as it is read, never held whole (a gzip bomb's one line)."""
    return 4 * max_record_bytes + _RAW_SLACK


def too_large_reason(what: str, size: int, max_record_bytes: int) -> str:
    """`record too large: ...` for a record refused as it is read, naming its size and the limit."""
    return (f"record too large: {what} {size:,} bytes, above the {raw_limit(max_record_bytes):,} bytes a record may "
            f"take as read (4 x capture.max_record_bytes {max_record_bytes:,} + 64 KiB); it was skipped unread. "
            f"Raise capture.max_record_bytes to read records this large")


def read_line(handle: IO[bytes], limit: int) -> tuple[bytes, int]:
    """The next line of `handle` (b"" at the end) and its length, holding at most `limit` + 1 bytes of it: a
    longer line is read through in bounded pieces and returned cut (its length says how long it was, its end
    has no newline)."""
    raw = handle.readline(limit + 1)
    if len(raw) <= limit or raw.endswith(b"\n"):
        return raw, len(raw)
    size = len(raw)
    while True:
        part = handle.readline(_SKIP_CHUNK)
        size += len(part)
        if not part or part.endswith(b"\n"):
            return raw[:limit], size


@dataclass(frozen=True)
class Quarantined:
    """A record that could not be read or did not fit the schema.

    Attributes:
        location: where it is, e.g. `capture/trips.jsonl:12`.
        reason: why it was quarantined, e.g. `field 'fare': expected float64, got 'abc'`.
        preview: at most 120 characters of the raw text, or the repr of the raw bytes.
    """

    location: str
    reason: str
    preview: str


@dataclass(frozen=True)
class Chunk:
    """Records read one after another, none quarantined among them, with their locations (same length): what a
    format module's `read` may yield in place of a `(record, location)` item per record."""

    records: list[dict]
    locations: list[str]


# What a format module's `read` yields: a record with its location (and, from a reader that computes them,
# its canonical bytes and fingerprint), a quarantined entry, or a `Chunk` of records.
ReadItem = Union[tuple[dict, str], tuple[dict, str, bytes, int], Quarantined, Chunk]


GZIP_MAGIC = b"\x1f\x8b"
# The bytes of a file's start that tell whether it is a gzip stream (`starts_gzip_stream`): far more than a gzip
# header takes, short enough to peek at before the first record is read.
GZIP_PEEK = 1 << 16


def starts_gzip_stream(head: bytes) -> bool:
    """Whether `head`, a file's first `GZIP_PEEK` bytes (or all of it), starts a gzip stream: gzip's magic, then
    a header and deflate data that decompress without error as far as `head` goes, and give something (data, or
    the end of an empty stream).

    A capture is gzip when its bytes are, whatever its name (ExampleGen's `.gz` shards, a gzipped file under
    `capture.format: jsonl`); any other file is read as the bytes it holds. A text file whose first line merely
    starts with the magic (the bytes 1f 8b, a newline, `{}`) is plain text, its lines read or quarantined one by
    one as Beam's ReadFromText would read a `.jsonl`; taken for gzip, its first bytes would fail and every line
    after them would be lost in one "corrupt gzip stream" entry. A gzip stream that breaks further on is still gzip: the
    lines before the break are read."""
    if not head.startswith(GZIP_MAGIC):
        return False
    inflater = zlib.decompressobj(wbits=31)  # 31: a gzip header and trailer around deflate data
    try:
        out = inflater.decompress(head, GZIP_PEEK)  # bounded: a few bytes of a bomb may inflate to gigabytes
    except zlib.error:
        return False
    return bool(out) or inflater.eof


def read_head(handle: IO[bytes], size: int = GZIP_PEEK) -> bytes:
    """The first `size` bytes of `handle` (fewer only at its end): a stream's `read` may return less."""
    pieces = []
    left = size
    while left > 0:
        piece = handle.read(left)
        if not piece:
            break
        pieces.append(piece)
        left -= len(piece)
    return b"".join(pieces)


def is_gzip(path: str, storage: Storage = Storage()) -> bool:
    """Whether a file is gzip-compressed, told from its first bytes (`starts_gzip_stream`), not its name."""
    try:
        with storage.open_read(path) as handle:
            return starts_gzip_stream(read_head(handle))
    except OSError:
        return False


def too_deep(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether lists, tuples and dicts nest more than `limit` levels in `value` (iterative: any depth is safe)."""
    if not isinstance(value, (dict, list, tuple)):
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))
    return False


def preview(raw: Any) -> str:
    """At most 120 characters showing a raw record: the text itself, or the repr of bytes and other values."""
    if isinstance(raw, str):
        text = raw[: _PREVIEW_LIMIT + 1].rstrip("\r\n")
    else:
        if isinstance(raw, (bytes, bytearray)):
            raw = bytes(raw[: _PREVIEW_LIMIT + 1]).rstrip(b"\r\n")
        text = repr(raw)
    return text if len(text) <= _PREVIEW_LIMIT else text[: _PREVIEW_LIMIT - 3] + "..."


def open_error(path: str, exc: OSError) -> InputError:
    """The InputError for a capture file that cannot be opened."""
    return InputError(f"cannot read capture file {path}: {exc.strerror or exc}")


class _GzipFile(gzip.GzipFile):
    """A gzip stream over an open file that closes the file too."""

    def __init__(self, raw: IO[bytes]) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


class HeadThenRest(io.RawIOBase):
    """A stream's bytes once some have been read from it: `head` (the bytes read), then the rest of `stream`, one
    `read` call (`read1` for a buffered stream whose earlier reads must not be lost when one fails) per fill.
    `open_capture` gives a file's first bytes back this way after telling gzip from them, and the JSON Lines reader
    the bytes its blocks read past the last whole line. It closes `stream` with itself only when it `owns` it."""

    def __init__(self, head: bytes, stream: IO[bytes], *, owns: bool, read1: bool = False) -> None:
        super().__init__()
        self._head = memoryview(head)
        self._stream = stream
        self._owns = owns
        self._read = stream.read1 if read1 else stream.read  # type: ignore[attr-defined]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            size = min(len(buffer), len(self._head))
            buffer[:size] = self._head[:size]
            self._head = self._head[size:]
            return size
        data = self._read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            if self._owns:
                self._stream.close()
        finally:
            super().close()


def open_capture(path: str, storage: Storage = Storage()) -> IO[bytes]:
    """A capture file's bytes, decompressed when it is gzip (told from its first bytes, `starts_gzip_stream`):
    a local path or a URL Beam's FileSystems read (`s3://...`). The file is opened once: its first bytes are
    read to tell gzip, then given back ahead of the rest."""
    raw = storage.open_read(path)
    try:
        head = read_head(raw)
    except BaseException:
        raw.close()
        raise
    # `read`, not `read1`: every store's stream has it
    stream = io.BufferedReader(HeadThenRest(head, raw, owns=True), buffer_size=GZIP_PEEK)
    return _GzipFile(stream) if starts_gzip_stream(head) else stream
