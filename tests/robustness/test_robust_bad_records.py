"""Bad records, one kind per case, through the real `parity check`: each is quarantined, never dropped.

Every case writes a small capture of good records plus the bad one(s), runs `parity check` (both sides read the
same capture, `max_quarantined: 1.0`), and asserts:
- the exit code (0: both sides agree and nothing stopped the run; 2 when every record is quarantined, since
  then no record could be paired and there is no verdict),
- the quarantine count on both sides, and every record counted exactly once (CONTRACT section 5),
- each quarantine.jsonl entry: its location (the file and the line, record, byte offset or row) and its reason,
  which names the field and what was expected, i.e. what to fix.
"""
from __future__ import annotations

import gzip
import io
import json
import struct
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parity.capture import TOO_DEEP
from parity.capture.tfrecord import masked_crc32c
from robust_helpers import accounting_holds, check, good_records, jsonl_lines, make_project

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own.
pytestmark = pytest.mark.slow

GOOD = 6
TIMESTAMP = {"timestamp": {"field": "t", "unit": "s"}}
LATENESS = {"timestamp": {"field": "t", "unit": "s"},
            "window": {"type": "fixed", "size": "1h", "lateness": {"arrival": "arr", "allowed": "1h"}}}


@dataclass
class Case:
    """A capture with planted bad records and the quarantine entries parity must write for them."""

    capture: Callable[[], bytes]
    expected: list[tuple[str, tuple[str, ...]]]  # (location, fragments of the reason), in location order
    name: str = "cap.jsonl"
    capture_spec: dict = field(default_factory=dict)
    side: dict = field(default_factory=dict)
    schema: object = True
    good: int = GOOD


def _jsonl(*bad: bytes) -> Callable[[], bytes]:
    return lambda: b"".join(line + b"\n" for line in jsonl_lines(good_records(GOOD)) + list(bad))


# ---------------------------------------------------------------------------------------------- csv

_CSV_HEADER = b"id,t,arr,v,zone"


def _csv(*bad: bytes) -> Callable[[], bytes]:
    def build() -> bytes:
        rows = [f"{r['id']},{r['t']},{r['arr']},{r['v']},{r['zone']}".encode() for r in good_records(GOOD)]
        return b"\n".join([_CSV_HEADER, *rows, *bad]) + b"\n"
    return build


# ---------------------------------------------------------------------------------------------- tfrecord

def _example(record: dict) -> bytes:
    from tensorflow.core.example import example_pb2

    example = example_pb2.Example()
    features = example.features.feature
    for name, value in record.items():
        if isinstance(value, bytes):
            features[name].bytes_list.value.append(value)
        elif isinstance(value, str):
            features[name].bytes_list.value.append(value.encode())
        elif isinstance(value, float):
            features[name].float_list.value.append(value)
        else:
            features[name].int64_list.value.append(value)
    return example.SerializeToString()


def _frame(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def _frames() -> list[bytes]:
    return [_frame(_example(r)) for r in good_records(GOOD)]


def _offset(frames: list[bytes], index: int) -> int:
    return sum(len(f) for f in frames[:index])


def _tf_flip(index: int, byte: int) -> Callable[[], bytes]:
    """Flips one byte of record `index`'s frame (0-7: length, 8-11: length CRC, 12..: data)."""
    def build() -> bytes:
        frames = _frames()
        frame = bytearray(frames[index])
        frame[byte] ^= 0x5A
        frames[index] = bytes(frame)
        return b"".join(frames)
    return build


def _tf_cut(keep_bytes_of_last: int, compress: bool = False, cut_compressed: int = 0) -> Callable[[], bytes]:
    def build() -> bytes:
        frames = _frames()
        data = b"".join(frames[:-1]) + frames[-1][:keep_bytes_of_last]
        if compress:
            data = gzip.compress(b"".join(frames), mtime=0)
            data = data[:cut_compressed]
        return data
    return build


def _tf_extra(payload: bytes) -> Callable[[], bytes]:
    return lambda: b"".join(_frames()) + _frame(payload)




def _tf_case_offsets() -> tuple[int, int]:
    frames = _frames()
    return _offset(frames, 3), _offset(frames, GOOD - 1)


# ---------------------------------------------------------------------------------------------- parquet

def _parquet_bytes(table: pa.Table, **options) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **options)
    return sink.getvalue()


def _parquet_good(count: int = GOOD) -> pa.Table:
    return pa.Table.from_pylist(good_records(count))


def _parquet_bad_value() -> bytes:
    rows = [dict(r, id=str(r["id"])) for r in good_records(GOOD)]
    rows[3]["id"] = "abc"
    return _parquet_bytes(pa.Table.from_pylist(rows))


def _parquet_corrupt_row_group() -> bytes:
    data = bytearray(_parquet_bytes(_parquet_good(3000), row_group_size=1000, compression="snappy"))
    meta = pq.ParquetFile(io.BytesIO(bytes(data))).metadata
    page = meta.row_group(1).column(0).data_page_offset
    for k in range(page + 30, page + 60):
        data[k] ^= 0xFF
    return bytes(data)


def _parquet_too_deep() -> bytes:
    value_type, value = pa.int64(), 1
    for _ in range(120):
        value_type, value = pa.list_(value_type), [value]
    return _parquet_bytes(pa.table({"id": list(range(3)), "x": pa.array([value] * 3, value_type)}))


def _cases() -> dict[str, Case]:
    at_3, at_last = _tf_case_offsets()
    deep = b'{"id": 7, "x": ' + b"[" * 600 + b"]" * 600 + b"}"  # JSON reads it; Beam could not pickle it
    return {
        # jsonl
        "jsonl-invalid-json": Case(_jsonl(b'{"id": 7, "v": '), [("cap.jsonl:7", ("invalid JSON", "column"))]),
        "jsonl-not-an-object": Case(_jsonl(b"[7, 1.5]"),
                                    [("cap.jsonl:7", ("expected a JSON object, got an array",))]),
        "jsonl-not-utf8": Case(_jsonl(b'{"id": 7, "zone": "\xff\xfe"}'),
                               [("cap.jsonl:7", ("invalid UTF-8 at byte 19",))]),
        "jsonl-integer-beyond-digit-limit": Case(_jsonl(b'{"id": 1' + b"0" * 5000 + b"}"),
                                                 [("cap.jsonl:7", ("invalid JSON", "4300 digits"))]),
        "jsonl-nested-too-deep": Case(_jsonl(deep), [("cap.jsonl:7", (TOO_DEEP,))], schema=None),
        "jsonl-repeated-field": Case(_jsonl(b'{"id": 7, "v": 1.0, "v": 2.0}'),
                                     [("cap.jsonl:7", ("repeated field 'v': the JSON object holds it 2 times",))]),
        "jsonl-repeated-key-field": Case(_jsonl(b'{"id": 7, "id": 8}'),
                                         [("cap.jsonl:7", ("repeated field 'id'", "never resolved"))]),
        "jsonl-repeated-nested-key": Case(_jsonl(b'{"id": 7, "x": {"y": [{"z": 1, "z": 2}]}}'),
                                          [("cap.jsonl:7", ("field 'x': at ['y'][0]: repeated key 'z'",))],
                                          schema=None),
        "jsonl-gzip-line-above-raw-limit": Case(
            lambda: gzip.compress(_jsonl(b'{"id": 7, "v": "' + b"0" * 3_000_000 + b'"}')(), mtime=0),
            [("cap.jsonl.gz:7", ("record too large: the line holds 3,000,019 bytes, above the 67,536 bytes",
                                 "capture.max_record_bytes 500"))],
            name="cap.jsonl.gz", capture_spec={"max_record_bytes": 500}, schema=None),
        "int-field-abc": Case(_jsonl(b'{"id": "abc", "v": 1.0}'),
                              [("cap.jsonl:7", ("field 'id': expected int64, got 'abc'",))]),
        "float32-overflow": Case(_jsonl(b'{"id": 7, "v": 1e300}'),
                                 [("cap.jsonl:7", ("field 'v': expected float32", "out of float32 range"))],
                                 schema={"id": "int64", "v": "float32"}),
        "bool-maybe": Case(_jsonl(b'{"id": 7, "ok": "maybe"}'),
                           [("cap.jsonl:7", ("field 'ok': expected bool, got 'maybe'",))],
                           schema={"id": "int64", "ok": "bool"}),
        "string-lone-surrogate": Case(_jsonl(b'{"id": 7, "zone": "\\ud800"}'),
                                      [("cap.jsonl:7", ("field 'zone': expected string", "lone surrogate"))]),
        "missing-key-field": Case(_jsonl(b'{"v": 1.0}'),
                                  [("cap.jsonl:7", ("missing key field 'id'", "capture.key names it"))]),
        "null-key": Case(_jsonl(b'{"id": null, "v": 1.0}'),
                         [("cap.jsonl:7", ("missing key field 'id'", "or it is null"))]),
        "missing-timestamp": Case(_jsonl(b'{"id": 7}'), [("cap.jsonl:7", ("event time: field 't' is missing",))],
                                  side=TIMESTAMP, schema=None),
        "null-timestamp": Case(_jsonl(b'{"id": 7, "t": null}'),
                               [("cap.jsonl:7", ("event time: field 't' is null",))], side=TIMESTAMP),
        "unparsable-timestamp": Case(_jsonl(b'{"id": 7, "t": "yesterday"}'),
                                     [("cap.jsonl:7", ("event time: field 't'", "in unit 's'", "'yesterday'"))],
                                     side=TIMESTAMP, schema=None),
        "non-finite-timestamp": Case(_jsonl(b'{"id": 7, "t": Infinity}'),
                                     [("cap.jsonl:7", ("event time: field 't' is not finite",))],
                                     side=TIMESTAMP, schema=None),
        "bad-arrival-time-with-lateness": Case(_jsonl(b'{"id": 7, "t": 1700000000, "arr": "soon"}'),
                                               [("cap.jsonl:7", ("arrival time: field 'arr'", "'soon'"))],
                                               side=LATENESS, schema=None),
        "record-above-size-limit": Case(_jsonl(json.dumps({"id": 7, "zone": "x" * 1000}).encode()),
                                        [("cap.jsonl:7", ("record too large", "capture.max_record_bytes 500"))],
                                        capture_spec={"max_record_bytes": 500}),
        # csv
        "csv-wrong-column-count": Case(_csv(b"7,1,2"), [("cap.csv:8", ("expected 5 columns, got 3",))],
                                       name="cap.csv"),
        "csv-stray-quote": Case(_csv(b'7,1,2,"3.5"x,a'), [("cap.csv:8", ("invalid CSV", "expected after"))],
                                name="cap.csv"),
        "csv-unterminated-quote": Case(_csv(b'7,1,2,"3.5,a', b"8,1,2,3.5,b"),
                                       [("cap.csv:8", ("invalid CSV", "lines 8-9 read as one row"))],
                                       name="cap.csv"),
        "csv-not-utf8": Case(_csv(b"7,1,2,3.5,\xff"), [("cap.csv:8", ("invalid UTF-8 at line 8",))],
                             name="cap.csv"),
        "csv-value-not-fitting-schema": Case(_csv(b"7,1,2,abc,a"),
                                             [("cap.csv:8", ("field 'v': expected float64, got 'abc'",))],
                                             name="cap.csv"),
        "csv-repeated-header-column": Case(lambda: b"id,t,arr,v,zone,v\n1,2,3,4.5,a,5.5\n2,2,3,4.5,b,5.5\n",
                                           [(f"cap.csv:{line}", ("repeated field 'v': the CSV header names columns 4 "
                                                                  "and 6 so",)) for line in (2, 3)],
                                           name="cap.csv", good=0),
        # tfrecord
        "tfrecord-data-crc": Case(_tf_flip(3, 20), [(f"cap.tfrecord:offset {at_3}", ("record 3: data CRC mismatch",))],
                                  name="cap.tfrecord", good=GOOD - 1),
        "tfrecord-length-crc": Case(_tf_flip(3, 2), [(f"cap.tfrecord:offset {at_3}",
                                                      ("truncated TFRecord framing at byte", "length CRC mismatch",
                                                       "count as this one quarantined entry"))],
                                    name="cap.tfrecord", good=3),
        "tfrecord-truncated": Case(_tf_cut(20), [(f"cap.tfrecord:offset {at_last}",
                                                  ("truncated TFRecord framing", "the file ends inside a record"))],
                                   name="cap.tfrecord", good=GOOD - 1),
        "tfrecord-gzip-truncated": Case(_tf_cut(0, compress=True, cut_compressed=60),
                                        [("cap.tfrecord.gz:offset 0", ("truncated TFRecord framing", "gzip"))],
                                        name="cap.tfrecord.gz", good=0),
        "tfrecord-not-a-tf-example": Case(_tf_extra(b"\xff\xff\xff\xff not a proto"),
                                          [(f"cap.tfrecord:record {GOOD}", ("invalid tf.Example",))],
                                          name="cap.tfrecord"),
        "tfrecord-wrong-feature-kind": Case(_tf_extra(_example({"id": 7, "v": b"x"})),
                                            [(f"cap.tfrecord:record {GOOD}",
                                              ("field 'v': expected float64 (from float_list)", "bytes_list"))],
                                            name="cap.tfrecord"),
        "tfrecord-repeated-feature": Case(_tf_extra(_example({"id": 7, "v": 1.0}) + _example({"v": 2.0})),
                                          [(f"cap.tfrecord:record {GOOD}",
                                            ("repeated field 'v': the tf.Example holds the feature 2 times",))],
                                          name="cap.tfrecord"),
        # parquet
        "parquet-repeated-column": Case(lambda: _parquet_bytes(pa.table(
                                            [pa.array([1, 2]), pa.array([1.5, 2.5]), pa.array([3.5, 4.5])],
                                            names=["id", "v", "v"])),
                                        [(f"cap.parquet:row {i}", ("repeated field 'v': the Parquet file has 2 "
                                                                   "columns of that name",)) for i in range(2)],
                                        name="cap.parquet", good=0, schema={"id": "int64", "v": "float64"}),
        "parquet-not-parquet": Case(lambda: b"PAR1 this is not a parquet file",
                                    [("cap.parquet", ("cannot read Parquet file",))], name="cap.parquet", good=0),
        "parquet-truncated": Case(lambda: _parquet_bytes(_parquet_good())[:-40],
                                  [("cap.parquet", ("cannot read Parquet file",))], name="cap.parquet", good=0),
        # The corrupt middle group's 1000 rows are each quarantined; the groups before and after are read.
        "parquet-corrupt-row-group": Case(_parquet_corrupt_row_group,
                                          [(f"cap.parquet:row {row}",
                                            ("cannot read Parquet row group 1 (rows 1000-1999) after row 1000",))
                                           for row in range(1000, 2000)],
                                          name="cap.parquet", good=2000, capture_spec={"max_quarantined": 0.5}),
        "parquet-value-not-fitting-schema": Case(_parquet_bad_value,
                                                 [("cap.parquet:row 3", ("field 'id': expected int64, got 'abc'",))],
                                                 name="cap.parquet", good=GOOD - 1),
        "parquet-nested-too-deep": Case(_parquet_too_deep, [(f"cap.parquet:row {i}", (TOO_DEEP,)) for i in range(3)],
                                        name="cap.parquet", good=0, schema={"id": "int64"}),
    }


CASES = _cases()


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_bad_record_is_quarantined_with_its_location_and_reason_and_counted_once(kind, tmp_path, capsys):
    case = CASES[kind]
    project = make_project(tmp_path, capture=case.capture(), capture_name=case.name,
                           capture_spec=dict(case.capture_spec), side=case.side, schema=case.schema)
    code, _, errors = check(project, capsys)
    planted = len(case.expected)
    if case.good:
        assert code == 0, errors
        report = project.report()
        assert report["records"]["quarantined"] == {"left": planted, "right": planted}
        assert report["records"]["left"] == report["records"]["right"] == case.good + planted
        assert report["records"]["paired"] == report["records"]["matched"] == case.good
        assert accounting_holds(report)
    else:  # every record quarantined: nothing to pair, so no verdict (issue 24, item 1); the quarantine is written
        assert code == 2, errors
        assert errors.startswith("parity: error: no record could be paired, so there is no verdict: side 'offline' "
                                 f"(left) has all {planted} records quarantined"), errors
    for side in ("left", "right"):
        entries = project.quarantine(side)
        assert [e["location"] for e in entries] == [location for location, _ in case.expected]
        for entry, (_, fragments) in zip(entries, case.expected):
            for fragment in fragments:
                assert fragment in entry["reason"], (entry, fragment)
            assert len(entry["preview"]) <= 120
