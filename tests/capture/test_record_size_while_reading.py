"""Issue 40, item 2: `capture.max_record_bytes` is applied while a record is read, so that one huge line (a
gzip bomb's) is quarantined without ever being held whole, in every reader that reads records of unknown size."""
from __future__ import annotations

import gzip
import os
import struct
import subprocess
import sys
import textwrap

import pytest

from parity.capture import read_file
from parity.capture.items import raw_limit
from parity.capture.schema import parse_schema
from parity.capture.tfrecord import masked_crc32c

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT = 1000  # capture.max_record_bytes: lines above raw_limit(1000) = 69,536 bytes are refused as read


def _items(path, fmt, schema=None):
    batches = list(read_file(str(path), fmt, schema, 100, os.path.basename(str(path)), LIMIT))
    return ([r for b in batches for r in b.records], [loc for b in batches for loc in b.locations],
            [q for b in batches for q in b.quarantined])


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_a_jsonl_line_above_the_raw_limit_is_quarantined_naming_its_size_and_reading_goes_on(tmp_path, compress):
    big = b'{"id": 2, "v": "' + b"x" * 200_000 + b'"}'
    data = b'{"id": 1}\n' + big + b'\n{"id": 3}\n'
    path = tmp_path / ("cap.jsonl.gz" if compress else "cap.jsonl")
    path.write_bytes(gzip.compress(data) if compress else data)
    records, locations, quarantined = _items(path, "jsonl")
    assert records == [{"id": 1}, {"id": 3}]
    assert locations == [f"{path.name}:1", f"{path.name}:3"]
    [entry] = quarantined
    assert entry.location == f"{path.name}:2"
    assert entry.reason.startswith(f"record too large: the line holds {len(big) + 1:,} bytes, above the 69,536 bytes "
                                   "a record may take as read (4 x capture.max_record_bytes 1,000 + 64 KiB)")
    assert entry.preview.startswith('{"id": 2, "v": "xxx') and len(entry.preview) <= 120


def test_a_csv_line_above_the_raw_limit_quarantines_its_row_and_the_next_rows_are_read(tmp_path):
    path = tmp_path / "cap.csv"
    path.write_bytes(b"id,v\n1,a\n2," + b"y" * 100_000 + b"\n3,c\n")
    records, locations, quarantined = _items(path, "csv", parse_schema({"id": "int64", "v": "string"}))
    assert records == [{"id": 1, "v": "a"}, {"id": 3, "v": "c"}]
    assert locations == ["cap.csv:2", "cap.csv:4"]
    assert [(q.location, q.reason.split(",", 1)[0]) for q in quarantined] == [
        ("cap.csv:3", "record too large: line 3 holds 100")]


def _frame(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


def test_a_tfrecord_payload_above_the_raw_limit_is_quarantined_by_offset_and_the_next_records_are_read(tmp_path):
    from tensorflow.core.example import example_pb2

    def example(i: int, pad: int = 0) -> bytes:
        ex = example_pb2.Example()
        ex.features.feature["id"].int64_list.value.append(i)
        if pad:
            ex.features.feature["pad"].bytes_list.value.append(b"z" * pad)
        return ex.SerializeToString()

    frames = [_frame(example(1)), _frame(example(2, pad=100_000)), _frame(example(3))]
    path = tmp_path / "cap.tfrecord"
    path.write_bytes(b"".join(frames))
    records, _, quarantined = _items(path, "tfrecord", parse_schema({"id": "int64"}))
    assert [r["id"] for r in records] == [1, 3]
    [entry] = quarantined
    assert entry.location == f"cap.tfrecord:offset {len(frames[0])}"
    assert entry.reason.startswith(f"record too large: record 1: its length says {len(frames[1]) - 16:,} bytes")


@pytest.mark.parametrize("page_version", ["1.0", "2.0"])
@pytest.mark.parametrize("compression", ["none", "snappy", "zstd"])
def test_a_parquet_row_group_with_a_page_above_the_raw_limit_is_quarantined_unread_and_the_other_groups_are_read(
        tmp_path, page_version, compression):
    import pyarrow as pa
    import pyarrow.parquet as pq

    blob = {13: b"x" * 100_000}  # row 13's value alone decodes to more than raw_limit(1000) = 69,536 bytes
    table = pa.table({"id": list(range(30)), "v": [blob.get(i, b"ok%d" % i) for i in range(30)]})
    path = tmp_path / "cap.parquet"
    pq.write_table(table, path, row_group_size=10, compression=compression, data_page_version=page_version)
    records, locations, quarantined = _items(path, "parquet")
    assert [r["id"] for r in records] == list(range(10)) + list(range(20, 30))
    assert [q.location for q in quarantined] == [f"cap.parquet:row {i}" for i in range(10, 20)]
    reason = quarantined[0].reason
    assert reason.startswith("record too large: row group 1 (rows 10-19) has a page of column 'v' that decodes to "
                             "100,0"), reason
    assert "above the 69,536 bytes a record may take as read" in reason
    assert "Raise capture.max_record_bytes" in reason


def test_the_page_walk_fills_each_column_chunk_exactly_and_finds_its_largest_page(tmp_path):
    """`largest_page` reads only the pages' headers; a walk that strays (a header misread) ends off the chunk's
    end and gives None, so every chunk of a varied file must give a size, the blob's chunk its blob."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from parity.capture.parquet_pages import largest_page

    rows = 5000
    table = pa.table({"i": list(range(rows)), "s": [f"v{i % 50}" for i in range(rows)],
                      "l": [[1.5, None, 2.0]] * rows, "m": [{"a": i, "b": None} for i in range(rows)],
                      "blob": [b"y" * (300_000 if i == 4321 else 5) + bytes([i % 256]) for i in range(rows)]})
    path = tmp_path / "varied.parquet"
    pq.write_table(table, path, row_group_size=2000, compression="zstd", data_page_size=4096)
    metadata = pq.ParquetFile(path).metadata
    with open(path, "rb") as handle:
        sizes = {(g, metadata.row_group(g).column(c).path_in_schema): largest_page(handle, metadata.row_group(g).column(c))
                 for g in range(metadata.num_row_groups) for c in range(metadata.num_columns)}
    assert None not in sizes.values(), sizes
    assert sizes[(2, "blob")] >= 300_000 > max(size for key, size in sizes.items() if key != (2, "blob"))


def test_one_gzip_line_of_256_mib_is_read_past_in_bounded_memory(tmp_path):
    # the bomb: one .jsonl.gz line that decompresses to gigabytes went past 6 GiB of RSS; here 256 MiB,
    # with the default capture.max_record_bytes (16 MiB: lines above 64 MiB refused as read)
    path = tmp_path / "bomb.jsonl.gz"
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as out:
        out.write(b'{"id": 1}\n{"id": 2, "v": "')
        block = b"0" * (1 << 20)
        for _ in range(256):
            out.write(block)
        out.write(b'"}\n{"id": 3}\n')
    code = textwrap.dedent(f"""
        import resource, sys
        from parity.capture import read_file
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        batches = list(read_file({str(path)!r}, "jsonl", None, 100, "bomb.jsonl.gz"))
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
        print(len([r for b in batches for r in b.records]), len([q for b in batches for q in b.quarantined]), grown)
    """)
    env = dict(os.environ, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    records, quarantined, grown_mib = map(int, out.stdout.split())
    assert (records, quarantined) == (2, 1)
    assert grown_mib < 200, f"peak RSS grew {grown_mib} MiB while reading one 256 MiB line"
