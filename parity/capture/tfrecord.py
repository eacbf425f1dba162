"""TFRecord captures of `tf.train.Example`s, optionally gzip-compressed (told from the file's first bytes, as
ExampleGen's `data_tfrecord-00000-of-00012.gz` shards are, not from its name).

The framing is read here rather than through TensorFlow, so that a corrupt record is quarantined instead of
failing the file: each record is `uint64 length, uint32 masked crc32c(length), data, uint32 masked
crc32c(data)`, little-endian, and both checksums are verified.

- A payload longer than `raw_limit(capture.max_record_bytes)` is quarantined as `record too large` at its
  offset, read through in pieces and never held; reading goes on.
- A data checksum mismatch quarantines that record at `<display_path>:offset <byte>`; reading goes on.
- A length checksum mismatch or a file that ends inside a record loses the framing: how many records follow
  cannot be known, so the rest of the file is quarantined as ONE entry whose reason starts with
  `truncated TFRecord framing at byte <N>`.

Byte offsets count in the uncompressed stream, also for a `.gz` file.

A schema is required, because a tf.Example does not tell a scalar from a one-element list nor a string from
bytes. Scalar types take the feature's single value (no value: None; several: quarantined); list types take all
of them. `int64`, `int32`, `bool` read the int64_list, `float64`, `float32` the float_list, `string`, `bytes`
the bytes_list. A feature the schema lacks is None (or [] for an empty feature of a list type). Features not
in the schema are kept as lists of their raw values (ints, floats or bytes), after the schema's fields, sorted
by name. A tf.Example naming a feature twice (two entries of its `features` map with one key, which protobuf
resolves to the last) is quarantined naming it. Good records are located at `<display_path>:record <index>`
(0-based, counting every record).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import IO, Any

import google_crc32c

from parity.capture.items import (MAX_FIELDS, MAX_RECORD_BYTES, Quarantined, ReadItem, open_capture, open_error,
                                  preview, raw_limit, too_large_reason, too_many_fields)
from parity.capture.reasons import reader_error
from parity.capture.schema import FieldType, SchemaMismatch, coerce
from parity.errors import InputError
from parity.storage.context import Storage

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_CHUNK = 16 * 1024 * 1024  # reads a corrupt-but-checksummed huge length in pieces, never all at once
_KINDS = {
    "int64": "int64_list",
    "int32": "int64_list",
    "bool": "int64_list",
    "float64": "float_list",
    "float32": "float_list",
    "string": "bytes_list",
    "bytes": "bytes_list",
}


class _FramingLost(Exception):
    """The record boundaries can no longer be trusted from `offset` on."""

    def __init__(self, offset: int, detail: str, head: bytes = b"") -> None:
        super().__init__(detail)
        self.offset = offset
        self.detail = detail
        self.head = head


def masked_crc32c(data: bytes) -> int:
    """The masked CRC-32C TFRecord stores for `data`."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read(
    path: str, schema: dict[str, FieldType] | None, display_path: str, batch_size: int = 0,
    max_record_bytes: int = MAX_RECORD_BYTES, storage: Storage = Storage(),
) -> Iterator[ReadItem]:
    """Yield `(record, location)` for each tf.Example of the file and `Quarantined` for each bad record.

    Raises:
        InputError: no schema was given, or the file cannot be opened.
    """
    del batch_size  # records are read one at a time
    if schema is None:
        raise InputError(
            f"{display_path}: reading TFRecord captures needs field types; add `capture.schema` "
            "(e.g. {trip_id: int64, fare: float32, zone: string})"
        )
    example_class = _example_class()
    try:
        handle: IO[bytes] = open_capture(path, storage)
    except OSError as exc:
        raise open_error(path, exc) from exc
    with handle:
        frames = _frames(handle, raw_limit(max_record_bytes))
        index = 0
        while True:
            try:
                frame = next(frames, None)
            except _FramingLost as lost:
                reason = (
                    f"truncated TFRecord framing at byte {lost.offset}: {lost.detail}; the records from "
                    "there to the end of the file cannot be told apart and count as this one quarantined entry"
                )
                yield Quarantined(f"{display_path}:offset {lost.offset}", reason, preview(lost.head))
                return
            if frame is None:
                return
            offset, data, data_ok = frame
            if isinstance(data, int):  # a payload above the raw limit, skipped unread: its length
                reason = too_large_reason(f"record {index}: its length says", data, max_record_bytes)
                yield Quarantined(f"{display_path}:offset {offset}", reason, "")
            elif not data_ok:
                reason = f"record {index}: data CRC mismatch"
                yield Quarantined(f"{display_path}:offset {offset}", reason, preview(data))
            else:
                result = _parse_example(example_class, data, schema)
                if isinstance(result, str):
                    yield Quarantined(f"{display_path}:record {index}", result, preview(data))
                else:
                    yield result, f"{display_path}:record {index}"
            index += 1


def _frames(handle: IO[bytes], limit: int) -> Iterator[tuple[int, bytes | int, bool]]:
    """Yield `(offset, data, data CRC ok)` per record, or `(offset, length, False)` for a payload longer than
    `limit` bytes, read through in pieces and never held; raise `_FramingLost` when the framing breaks."""
    offset = 0
    while True:
        header = _read_exactly(handle, _HEADER.size, offset)
        if not header:
            return
        if len(header) < _HEADER.size:
            detail = f"the file ends inside a record header ({len(header)} of 12 bytes)"
            raise _FramingLost(offset, detail, header)
        length, length_crc = _HEADER.unpack(header)
        if masked_crc32c(header[:8]) != length_crc:
            raise _FramingLost(offset, "length CRC mismatch", header)
        if length > limit:
            skipped = _skip(handle, length, offset)
            footer = _read_exactly(handle, _FOOTER.size, offset)
            if skipped < length or len(footer) < _FOOTER.size:
                detail = f"the file ends inside a record (its length says {length} data bytes)"
                raise _FramingLost(offset, detail, header)
            yield offset, length, False
            offset += _HEADER.size + length + _FOOTER.size
            continue
        data = _read_exactly(handle, length, offset)
        footer = _read_exactly(handle, _FOOTER.size, offset)
        if len(data) < length or len(footer) < _FOOTER.size:
            detail = f"the file ends inside a record (its length says {length} data bytes)"
            raise _FramingLost(offset, detail, header + data[:64])
        yield offset, data, masked_crc32c(data) == _FOOTER.unpack(footer)[0]
        offset += _HEADER.size + length + _FOOTER.size


def _read_exactly(handle: IO[bytes], size: int, offset: int) -> bytes:
    """Up to `size` bytes; fewer only at the end of the file."""
    parts = []
    remaining = size
    try:
        while remaining > 0:
            part = handle.read(min(remaining, _CHUNK))
            if not part:
                break
            parts.append(part)
            remaining -= len(part)
    except (OSError, EOFError, zlib.error) as exc:  # a corrupt or cut gzip stream
        raise _FramingLost(offset, f"corrupt gzip stream ({exc})") from exc
    return b"".join(parts)


def _skip(handle: IO[bytes], size: int, offset: int) -> int:
    """Reads past up to `size` bytes, `_CHUNK` at a time; the count read (fewer only at the end of the file)."""
    skipped = 0
    try:
        while skipped < size:
            part = handle.read(min(size - skipped, _CHUNK))
            if not part:
                break
            skipped += len(part)
    except (OSError, EOFError, zlib.error) as exc:  # a corrupt or cut gzip stream
        raise _FramingLost(offset, f"corrupt gzip stream ({exc})") from exc
    return skipped


def _parse_example(example_class: Any, data: bytes, schema: dict[str, FieldType]) -> dict | str:
    """The record a serialized tf.Example holds, or the reason it is quarantined."""
    try:
        example = example_class.FromString(data)
    except Exception as exc:  # protobuf's DecodeError lives in different modules per backend
        return reader_error("invalid tf.Example", exc)
    # protobuf keeps the last entry of a map key written twice: a wire size other than the parsed message's
    # says something was merged or re-encoded, and only then are the entries' keys counted
    if example.ByteSize() != len(data):
        repeated = _repeated_feature(data)
        if repeated is not None:
            return repeated
    features = example.features.feature
    if len(features) > MAX_FIELDS:
        return too_many_fields(len(features), "the tf.Example has")
    record: dict[str, Any] = {}
    try:
        for name, field_type in schema.items():
            record[name] = _feature_value(features[name] if name in features else None, field_type)
    except SchemaMismatch as exc:
        return f"field {name!r}: {exc}"
    for name in sorted(set(features) - set(schema)):
        kind = features[name].WhichOneof("kind")
        record[name] = list(getattr(features[name], kind).value) if kind else []
    return record


def _wire_fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """`(field number, wire type, value start, value end)` of each field of a protobuf message's bytes; the value
    bounds only for length-delimited fields (wire type 2). Stops at bytes that are not a field."""
    pos = start
    while pos < end:
        tag, pos = _varint(data, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _varint(data, pos, end)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(data, pos, end)
            yield number, wire, pos, pos + length
            pos += length
        else:
            return


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return value, end


def _repeated_feature(data: bytes) -> str | None:
    """The reason a serialized tf.Example is quarantined when it names a feature twice (its `features` map holds
    one key in two entries, which protobuf resolves to the last), else None."""
    counts: dict[bytes, int] = {}
    for number, _, start, end in _wire_fields(data, 0, len(data)):
        if number != 1:  # Example.features (a second one merges into the first, keys included)
            continue
        for entry_number, _, entry_start, entry_end in _wire_fields(data, start, end):
            if entry_number != 1:  # Features.feature, a map entry: key = 1, value = 2
                continue
            for key_number, _, key_start, key_end in _wire_fields(data, entry_start, entry_end):
                if key_number == 1:
                    key = data[key_start:key_end]
                    counts[key] = counts.get(key, 0) + 1
    for key, count in counts.items():
        if count > 1:
            name = key.decode("utf-8", errors="backslashreplace")
            return (f"repeated field {name!r:.60}: the tf.Example holds the feature {count} times, and a record is "
                    f"never resolved to one of its values; write each feature once")
    return None


def _feature_value(feature: Any, field_type: FieldType) -> Any:
    if feature is None:
        return None
    scalar = field_type.element or field_type
    kind = feature.WhichOneof("kind")
    values = list(getattr(feature, kind).value) if kind else []
    if not values:
        return [] if field_type.is_list else None
    if kind != _KINDS[scalar.name]:
        expected = f"expected {field_type} (from {_KINDS[scalar.name]})"
        raise SchemaMismatch(f"{expected}, got a {kind} of {len(values)} value(s)")
    if field_type.is_list:
        return coerce(values, field_type)
    if len(values) > 1:
        raise SchemaMismatch(f"expected one {field_type} value, got {len(values)} values")
    return coerce(values[0], field_type)


def _example_class() -> Any:
    # imported here: `tensorflow.core` loads all of TensorFlow, seconds that only TFRecord reading needs
    from tensorflow.core.example import example_pb2

    return example_pb2.Example
