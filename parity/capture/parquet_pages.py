"""The largest decoded page of a Parquet column chunk, read from the pages' headers without decoding a page.

Arrow decodes a Parquet page whole: a page holding one value of gigabytes (a compressed bomb, or a blob column
gone wrong) is decompressed into memory before any row of it can be sized, so `capture.max_record_bytes`
cannot be applied to it afterwards. Each page header (Thrift compact protocol, parquet-format's `PageHeader`)
says how large the page is decoded (`uncompressed_page_size`, field 2) and how many bytes it takes in the file
(`compressed_page_size`, field 3), so the pages of a chunk can be walked, one small read per page, before
Arrow is asked for the chunk's rows.

Only a chunk whose `total_uncompressed_size` is above the limit is walked (no page of a smaller chunk can be
larger); writers cut pages at about 1 MiB, so such a chunk's walk reads a few hundred headers.
"""
from __future__ import annotations

from typing import IO, Any

_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)
_MAX_DEPTH = 16  # PageHeader nests three levels (header, data page header, statistics)


class _Malformed(ValueError):
    """A header that does not parse: Arrow's own reading of the chunk then says what is wrong."""


def largest_page(handle: IO[bytes], chunk: Any) -> int | None:
    """The largest `uncompressed_page_size` among the pages of `chunk` (a pyarrow `ColumnChunkMetaData`) in the
    Parquet file `handle`, or None when the headers cannot be walked (left to Arrow, which reports a broken
    chunk itself)."""
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page and chunk.dictionary_page_offset else \
        chunk.data_page_offset
    end = start + chunk.total_compressed_size
    largest = 0
    position = start
    try:
        while position < end:
            handle.seek(position)
            reader = _Reader(handle)
            fields = reader.page_sizes()
            decoded, stored = fields.get(2), fields.get(3)
            if decoded is None or stored is None or decoded < 0 or stored < 0:
                return None
            largest = max(largest, decoded)
            position += reader.consumed + stored
    except (_Malformed, OSError, ValueError):
        return None
    return largest if position == end else None  # the pages fill the chunk exactly, or the walk went astray


class _Reader:
    """Reads one Thrift compact-protocol struct from a file, keeping the top level's integer fields."""

    def __init__(self, handle: IO[bytes]) -> None:
        self._handle = handle
        self.consumed = 0

    def page_sizes(self) -> dict[int, int]:
        return self._struct(0, keep=True)

    def _byte(self) -> int:
        data = self._handle.read(1)
        if not data:
            raise _Malformed("the header ends early")
        self.consumed += 1
        return data[0]

    def _skip(self, count: int) -> None:
        if count < 0:
            raise _Malformed("a negative length")
        data = self._handle.read(count)
        if len(data) != count:
            raise _Malformed("the header ends early")
        self.consumed += count

    def _varint(self) -> int:
        value = shift = 0
        while True:
            byte = self._byte()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise _Malformed("a varint longer than 10 bytes")

    def _zigzag(self) -> int:
        value = self._varint()
        return (value >> 1) ^ -(value & 1)

    def _struct(self, depth: int, keep: bool = False) -> dict[int, int]:
        if depth > _MAX_DEPTH:
            raise _Malformed("structs nested too deeply")
        kept: dict[int, int] = {}
        field = 0
        while True:
            header = self._byte()
            kind = header & 0x0F
            if kind == _STOP:
                return kept
            delta = header >> 4
            field = field + delta if delta else self._zigzag()
            if keep and kind in (_I32, _I64):
                kept[field] = self._zigzag()
            else:
                self._value(kind, depth)

    def _value(self, kind: int, depth: int) -> None:
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self._skip(1)
        elif kind in (_I16, _I32, _I64):
            self._varint()
        elif kind == _DOUBLE:
            self._skip(8)
        elif kind == _BINARY:
            self._skip(self._varint())
        elif kind in (_LIST, _SET):
            header = self._byte()
            size = header >> 4
            if size == 15:
                size = self._varint()
            element = header & 0x0F
            for _ in range(size):
                if element in (_TRUE, _FALSE):  # a list's booleans take a byte each
                    self._skip(1)
                else:
                    self._value(element, depth + 1)
        elif kind == _MAP:
            size = self._varint()
            if size:
                types = self._byte()
                for _ in range(size):
                    self._value(types >> 4, depth + 1)
                    self._value(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            self._struct(depth + 1)
        else:
            raise _Malformed(f"an unknown field type {kind}")
