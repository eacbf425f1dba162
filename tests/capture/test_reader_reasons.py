"""Issue 40, item 8: every reader words its reasons through one formatter (`parity.capture.reasons`): no word
doubled ("Invalid control character at at column 18"), and each reason with its location names the line,
record, offset or row, and the column or field where the reader knows it."""
from __future__ import annotations

import re
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parity.capture import read_file
from parity.capture.reasons import doubled_word, reader_error
from parity.capture.schema import parse_schema
from parity.capture.tfrecord import masked_crc32c

_LOCATION = re.compile(r":(\d+|record \d+|offset \d+|row \d+)$")


def _jsonl_cases() -> list[tuple[bytes, str]]:
    return [
        (b'{"id": 1, "z": "a\x01b"}', "invalid JSON: Invalid control character at column 18"),
        (b'{"id": 1, "z": ', "invalid JSON: Expecting value at column 16"),
        (b'{"id": 1, "z": "abc}', "invalid JSON: Unterminated string starting at column 16"),
        (b'{"id": 1} {"id": 2}', "invalid JSON: Extra data at column 11"),
        (b'{"id": 1, "z": "\xff"}', "invalid UTF-8 at byte 16: invalid start byte"),
        (b"[1, 2]", "expected a JSON object, got an array"),
        (b'{"id": 1' + b"0" * 5000 + b"}", "invalid JSON: Exceeds the limit (4300 digits)"),
        (b'{"id": 1, "w": 1e400}', "field 'w': the number 1e400 is out of the float64 range"),
        (b'{"id": 1, "id": 2}', "repeated field 'id': the JSON object holds it 2 times"),
        (b'{"id": "abc"}', "field 'id': expected int64, got 'abc'"),
        (b'{"id": 1, "z": "' + b"x" * 80_000 + b'"}', "record too large: the line holds 80,019 bytes"),
    ]


def _frame(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def _example(**features) -> bytes:
    from tensorflow.core.example import example_pb2

    example = example_pb2.Example()
    for name, value in features.items():
        feature = example.features.feature[name]
        (feature.bytes_list if isinstance(value, bytes) else feature.int64_list).value.append(value)
    return example.SerializeToString()


def _reasons(path, fmt, schema=None) -> list[tuple[str, str]]:
    batches = list(read_file(str(path), fmt, schema, 100, path.name, 1000))
    return [(q.location, q.reason) for b in batches for q in b.quarantined]


def _all_reasons(tmp_path) -> list[tuple[str, str, str]]:
    """(location, reason, expected start) of a quarantined entry for each kind of bad record of each reader."""
    found = []
    for index, (line, expected) in enumerate(_jsonl_cases()):
        path = tmp_path / f"j{index}.jsonl"
        path.write_bytes(b'{"id": 0}\n' + line + b"\n")
        found += [(loc, reason, expected) for loc, reason in _reasons(path, "jsonl", parse_schema({"id": "int64"}))]
    schema = parse_schema({"id": "int64", "v": "string"})
    for index, (text, expected) in enumerate([
        (b'id,v\n1,"a"x\n', "invalid CSV: ',' expected after '\"'"),
        (b'id,v\n1,"a\n2,b\n', "invalid CSV: unexpected end of data (lines 2-3 read as one row)"),
        (b"id,v\n1,\xff\n", "invalid UTF-8 at line 2, byte 2: invalid start byte"),
        (b"id,v\n1\n", "expected 2 columns, got 1"),
        (b"id,v\nx,a\n", "field 'id': expected int64, got 'x'"),
        (b"id,v,v\n1,a,b\n", "repeated field 'v': the CSV header names columns 2 and 3 so"),
    ]):
        path = tmp_path / f"c{index}.csv"
        path.write_bytes(text)
        found += [(loc, reason, expected) for loc, reason in _reasons(path, "csv", schema)]
    good = _frame(_example(id=1))
    flipped = bytearray(good)
    flipped[14] ^= 0x5A
    broken_length = bytearray(good)
    broken_length[2] ^= 0x5A
    for index, (data, expected) in enumerate([
        (bytes(flipped), "record 0: data CRC mismatch"),
        (bytes(broken_length), "truncated TFRecord framing at byte 0: length CRC mismatch"),
        (good[:-3], "truncated TFRecord framing at byte 0: the file ends inside a record"),
        (_frame(b"\xff\xff\xff\xff not a proto"), "invalid tf.Example: Error parsing message"),
        (_frame(_example(id=b"x")), "field 'id': expected int64 (from int64_list), got a bytes_list"),
        (_frame(_example(id=1) + _example(id=2)), "repeated field 'id': the tf.Example holds the feature 2 times"),
        (_frame(_example(id=1, pad=b"z" * 80_000)), "record too large: record 0: its length says"),
    ]):
        path = tmp_path / f"t{index}.tfrecord"
        path.write_bytes(data)
        found += [(loc, reason, expected) for loc, reason in _reasons(path, "tfrecord", parse_schema({"id": "int64"}))]
    for index, (table, expected) in enumerate([
        (None, "cannot read Parquet file: "),
        (pa.table({"id": ["abc"]}), "field 'id': expected int64, got 'abc'"),
        (pa.table([pa.array([1]), pa.array([2])], names=["id", "id"]), "repeated field 'id': the Parquet file has"),
    ]):
        path = tmp_path / f"p{index}.parquet"
        if table is None:
            path.write_bytes(b"PAR1 this is not a parquet file")
        else:
            pq.write_table(table, path)
        found += [(loc, reason, expected) for loc, reason in _reasons(path, "parquet", parse_schema({"id": "int64"}))]
    return found


def test_every_readers_reasons_name_their_place_and_repeat_no_word(tmp_path):
    found = _all_reasons(tmp_path)
    assert len(found) == 27, [reason for _, reason, _ in found]
    for location, reason, expected in found:
        assert reason.startswith(expected), (reason, expected)
        assert doubled_word(reason) is None, reason
        assert _LOCATION.search(location) or location.endswith(".parquet"), location  # the whole file: its name
        if reason.startswith("invalid JSON:") and "digits" not in reason:
            assert re.search(r" at column \d+$", reason), reason


@pytest.mark.parametrize("what, detail, where, reason", [
    ("invalid JSON", "Invalid control character at", "at column 18",
     "invalid JSON: Invalid control character at column 18"),
    ("invalid JSON", "Expecting value", "at column 3", "invalid JSON: Expecting value at column 3"),
    ("invalid CSV", "the the field\nsecond line", "", "invalid CSV: the field"),
    ("invalid tf.Example", "", "", "invalid tf.Example: str"),
])
def test_reader_error_joins_what_detail_and_where_without_a_doubled_word(what, detail, where, reason):
    assert reader_error(what, detail, where) == reason
