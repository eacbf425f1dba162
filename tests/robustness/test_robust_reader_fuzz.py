"""Arbitrary bytes through the capture readers (hypothesis, profile `ci-readers`).

Whatever a .jsonl, .csv, .tfrecord(.gz) or .parquet file holds, `parity.capture.read_file` either yields
records and quarantined entries or raises a ParityError (an InputError naming the file); nothing else. Every
record it yields is something the replay can fingerprint (canonically encodable, not nested too deeply). For
jsonl, every non-blank line is one item, located at its line; for CSV without quotes, every non-empty line after
the header is one item, located at its line.
"""
from __future__ import annotations

import gzip
import io
import json
import re
import struct
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from parity.encoding import canonical
from parity.capture import Quarantined, ReadBatch, read_file, too_deep
from parity.capture.tfrecord import masked_crc32c
from parity.errors import ParityError
from parity.capture.schema import parse_schema

# The slow tier (`make test`, not `make test-fast`): arbitrary bytes through every capture reader (hypothesis
# profile `ci-readers`).
pytestmark = pytest.mark.slow

READERS = settings(settings.get_profile("ci-readers"))
SCHEMA = parse_schema({"id": "int64", "v": "float32", "s": "string", "ok": "bool", "l": "list<int32>",
                       "raw": "bytes"})
_BOM = b"\xef\xbb\xbf"
_LOCATION = {
    "jsonl": re.compile(r"f\.jsonl:[1-9]\d*"),
    "csv": re.compile(r"f\.csv:[1-9]\d*"),
    "tfrecord": re.compile(r"f\.tfrecord(\.gz)?:(record|offset) \d+"),
    "parquet": re.compile(r"f\.parquet(:row \d+)?"),
}


def _read(tmp_path, name: str, data: bytes, fmt: str, schema, batch_size: int) -> list[ReadBatch] | ParityError:
    path = tmp_path / name
    path.write_bytes(data)
    try:
        return list(read_file(str(path), fmt, schema, batch_size, name))
    except ParityError as exc:  # a file-level problem: must name the file
        assert name in str(exc), str(exc)
        return exc


def _items(batches: list[ReadBatch], fmt: str, batch_size: int) -> list[tuple[str, object]]:
    """(location, record or Quarantined) of every item, after checking each item's shape (a batch keeps its
    records and its quarantined entries apart, so the order is the file's only within each)."""
    items = []
    for batch in batches:
        assert 0 < len(batch.records) + len(batch.quarantined) <= batch_size
        assert len(batch.records) == len(batch.locations)
        for record, location in zip(batch.records, batch.locations):
            assert isinstance(record, dict)
            assert not too_deep(record)
            canonical.encode(record)  # the replay fingerprints it: it must be encodable
            assert _LOCATION[fmt].fullmatch(location), location
            items.append((location, record))
        for entry in batch.quarantined:
            assert isinstance(entry, Quarantined)
            assert _LOCATION[fmt].fullmatch(entry.location), entry.location
            assert isinstance(entry.reason, str) and entry.reason and "\n" not in entry.reason
            assert isinstance(entry.preview, str) and len(entry.preview) <= 120
            json.dumps(entry.reason), json.dumps(entry.preview)  # quarantine.jsonl must be able to hold them
            entry.reason.encode("utf-8"), entry.preview.encode("utf-8")
            items.append((entry.location, entry))
    return items


def _line_number(location: str) -> int:
    return int(location.rsplit(":", 1)[1])


# ---------------------------------------------------------------------------------------------- jsonl

_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10,
)
_RECORDS = st.fixed_dictionaries({}, optional={"id": st.integers() | st.text(max_size=4) | st.none(),
                                               "v": st.floats() | st.integers() | st.text(max_size=4),
                                               "s": st.text(max_size=6) | st.binary(max_size=3).map(repr),
                                               "ok": st.booleans() | st.sampled_from(["true", "maybe", 2]),
                                               "l": st.lists(st.integers(), max_size=3) | _JSON_VALUES,
                                               "x": _JSON_VALUES})
_JSONL_LINES = st.one_of(
    _RECORDS.map(lambda r: json.dumps(r).encode()),
    _JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=30),
    st.sampled_from([b"", b"   ", b"\r", b"\t", _BOM, _BOM + b"{}", b"{", b"[" * 150 + b"]" * 150,
                     b'{"x": ' + b"[" * 120 + b"]" * 120 + b"}", b'{"id": 1' + b"0" * 5000 + b"}", b"\xff\xfe",
                     b'{"s": "\\ud800"}', b"NaN", b'{"v": Infinity}', b"\x00"]),
)
_JSONL_FILES = st.one_of(st.lists(_JSONL_LINES, max_size=12).map(b"\n".join), st.binary(max_size=300))


def _jsonl_non_blank_lines(data: bytes) -> list[int]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline ending the last line
    numbers = []
    for number, line in enumerate(lines, start=1):
        if number == 1 and line.startswith(_BOM):
            line = line[len(_BOM):]
        if line.strip():
            numbers.append(number)
    return numbers


def _gzip_lines(data: bytes) -> list[bytes] | None:
    """The lines `data` decompresses to when it starts a gzip stream (zlib takes its start and gives something:
    data, or the end of an empty stream), as far as it decompresses; None for any other bytes, which a reader
    takes as plain text."""
    if not data.startswith(b"\x1f\x8b"):
        return None
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(data[:1 << 16])
    except zlib.error:
        return None
    if not out and not inflater.eof:
        return None
    try:
        out += inflater.decompress(data[1 << 16:])
    except zlib.error:
        pass
    return out.split(b"\n")


@READERS
@given(_JSONL_FILES, st.booleans(), st.integers(1, 5))
@example(data=b"\x1f\x8b\n{}", typed=False, batch_size=1)  # gzip's magic, then no gzip stream: plain text
@example(data=b"\x1f\x8b", typed=True, batch_size=2)
@example(data=gzip.compress(b'{}\n\n{"id": 1}\n[]\n', mtime=0), typed=False, batch_size=2)  # gzip, whatever its name
def test_arbitrary_bytes_in_a_jsonl_file_give_one_item_per_non_blank_line(tmp_path_factory, data, typed,
                                                                         batch_size):
    tmp_path = tmp_path_factory.mktemp("jsonl")
    batches = _read(tmp_path, "f.jsonl", data, "jsonl", SCHEMA if typed else None, batch_size)
    assert not isinstance(batches, ParityError), "a jsonl file is never refused as a whole"
    items = _items(batches, "jsonl", batch_size)
    numbers = sorted(_line_number(location) for location, _ in items)
    decompressed = _gzip_lines(data)
    if decompressed is None:
        assert numbers == _jsonl_non_blank_lines(data)
        return
    # a gzip stream: one item per non-blank line it decompresses to, up to where it breaks; the rest one entry
    expected = _jsonl_non_blank_lines(b"\n".join(decompressed))
    broken = [entry for _, entry in items
              if isinstance(entry, Quarantined) and entry.reason.startswith("corrupt gzip stream")]
    assert len(broken) <= 1 and len(numbers) == len(set(numbers))
    kept = [n for n in numbers if not broken or n != _line_number(broken[0].location)]
    assert kept == expected[:len(kept)]
    assert broken or kept == expected


# ---------------------------------------------------------------------------------------------- csv

_CELL = st.binary(max_size=6).filter(lambda b: b'"' not in b and b"\n" not in b and b"\r" not in b)
_CSV_ROW = st.lists(_CELL | st.sampled_from([b"1", b"-7", b"2.5", b"abc", b"[1, 2]", b"true", b""]),
                    min_size=0, max_size=4).map(b",".join)


@READERS
@given(st.lists(_CSV_ROW, max_size=10), st.integers(1, 5))
def test_a_quote_free_csv_body_gives_one_item_per_non_empty_line_after_the_header(tmp_path_factory, rows,
                                                                                 batch_size):
    tmp_path = tmp_path_factory.mktemp("csv")
    data = b"id,s,l\n" + b"\n".join(rows)
    schema = parse_schema({"id": "int64", "s": "string", "l": "list<int32>"})
    batches = _read(tmp_path, "f.csv", data, "csv", schema, batch_size)
    assert not isinstance(batches, ParityError)
    items = _items(batches, "csv", batch_size)
    expected = [number for number, row in enumerate(rows, start=2) if row]
    assert sorted(_line_number(location) for location, _ in items) == expected


@READERS
@given(st.binary(max_size=300) | st.lists(_CSV_ROW | st.sampled_from([b'"', b'a"b', b'"x\ny"', b"\r"]),
                                          max_size=8).map(lambda rows: b"id,s\n" + b"\n".join(rows)),
       st.integers(1, 5))
def test_arbitrary_bytes_in_a_csv_file_are_read_or_refused_each_row_counted_once(tmp_path_factory, data,
                                                                                    batch_size):
    tmp_path = tmp_path_factory.mktemp("csvany")
    batches = _read(tmp_path, "f.csv", data, "csv", parse_schema({"id": "int64", "s": "string"}), batch_size)
    if isinstance(batches, ParityError):
        return
    numbers = [_line_number(location) for location, _ in _items(batches, "csv", batch_size)]
    assert len(numbers) == len(set(numbers)), "each row is counted once"
    assert all(2 <= n <= data.count(b"\n") + 1 for n in numbers)


# ---------------------------------------------------------------------------------------------- tfrecord

def _frame(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc32c(header)) + payload + struct.pack("<I", masked_crc32c(payload))


def _example(record: dict) -> bytes:
    from tensorflow.core.example import example_pb2

    example = example_pb2.Example()
    for name, values in record.items():
        feature = example.features.feature[name]
        for value in values:
            if isinstance(value, bytes):
                feature.bytes_list.value.append(value)
            elif isinstance(value, float):
                feature.float_list.value.append(value)
            else:
                feature.int64_list.value.append(value)
    return example.SerializeToString()


_FEATURE_VALUES = st.one_of(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3),
                            st.lists(st.floats(width=32), max_size=3), st.lists(st.binary(max_size=5), max_size=3))
_EXAMPLES = st.dictionaries(st.sampled_from(["id", "v", "s", "ok", "l", "raw", "other"]), _FEATURE_VALUES,
                            max_size=6).map(_example)


@st.composite
def _tfrecord_files(draw) -> bytes:
    payloads = draw(st.lists(_EXAMPLES | st.binary(max_size=20), max_size=6))
    data = bytearray(b"".join(_frame(p) for p in payloads))
    for _ in range(draw(st.integers(0, 3))):  # damage: flipped bytes anywhere, then maybe a cut
        if data:
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    if data and draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


@READERS
@given(_tfrecord_files() | st.binary(max_size=200), st.booleans(), st.integers(1, 5))
def test_arbitrary_bytes_in_a_tfrecord_file_are_read_or_quarantined(tmp_path_factory, data, compressed,
                                                                    batch_size):
    tmp_path = tmp_path_factory.mktemp("tfrecord")
    name = "f.tfrecord.gz" if compressed else "f.tfrecord"
    if compressed:
        whole = gzip.compress(data, mtime=0)
        data = whole[:len(whole) * 2 // 3] if len(data) % 2 else whole
    batches = _read(tmp_path, name, data, "tfrecord", SCHEMA, batch_size)
    assert not isinstance(batches, ParityError)
    _items(batches, "tfrecord", batch_size)


# ---------------------------------------------------------------------------------------------- parquet

def _parquet_seed() -> bytes:
    sink = io.BytesIO()
    table = pa.table({"id": [1, 2, 3, None], "v": [1.5, None, 2.5, 3.0], "s": ["a", "b", None, "d"],
                      "l": [[1], [], None, [2, 3]], "ok": [True, False, None, True],
                      "m": pa.array([[("k", 1)], [], None, [("j", 2)]], pa.map_(pa.string(), pa.int64()))})
    pq.write_table(table, sink, row_group_size=2)
    return sink.getvalue()


_PARQUET = _parquet_seed()


@st.composite
def _parquet_files(draw) -> bytes:
    data = bytearray(_PARQUET)
    for _ in range(draw(st.integers(0, 4))):
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    if draw(st.booleans()):
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


@READERS
@given(_parquet_files() | st.binary(max_size=200), st.booleans(), st.integers(1, 5))
def test_arbitrary_bytes_in_a_parquet_file_are_read_or_quarantined(tmp_path_factory, data, typed, batch_size):
    tmp_path = tmp_path_factory.mktemp("parquet")
    schema = parse_schema({"id": "int64", "v": "float64", "s": "string", "l": "list<int32>"}) if typed else None
    batches = _read(tmp_path, "f.parquet", data, "parquet", schema, batch_size)
    assert not isinstance(batches, ParityError)
    _items(batches, "parquet", batch_size)
