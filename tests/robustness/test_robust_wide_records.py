"""Issue 40, item 3: a CSV header, a Parquet file, a JSON object, a tf.Example or a TFMD schema wider than
10,000 fields is refused or quarantined naming the limit, before anything handles its fields one by one.

Before, `parity check` of a CSV whose header had 1,000,001 columns replayed its one row for 62 s of CPU and
2.5 GB of RSS and passed.
"""
from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.parquet as pq

from parity.capture import read_file
from parity.capture.items import MAX_FIELDS
from robust_helpers import check, make_project

TOO_MANY = "too many fields: {what} 10,001, above the limit of 10,000 fields per record"


def test_a_csv_header_of_a_million_columns_exits_two_in_seconds_naming_the_limit(tmp_path, capsys):
    columns = ["id", "v"] + [f"c{i}" for i in range(999_999)]
    capture = (",".join(columns) + "\n" + ",".join(["1", "a"] + ["x"] * 999_999) + "\n").encode()
    project = make_project(tmp_path, capture=capture, capture_name="cap.csv", schema={"id": "int64", "v": "string"})
    started = time.monotonic()
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors.startswith("parity: error: cap.csv: the CSV header has 1,000,001 columns, above the limit of "
                             "10,000 fields per record; write the columns the pipelines read")
    assert time.monotonic() - started < 60


def test_a_json_object_of_more_than_10000_fields_is_quarantined_naming_the_limit(tmp_path):
    wide = json.dumps({f"f{i}": i for i in range(MAX_FIELDS + 1)}).encode()
    path = tmp_path / "cap.jsonl"
    path.write_bytes(b'{"f0": 1}\n' + wide + b"\n")
    batches = list(read_file(str(path), "jsonl", None, 100, "cap.jsonl"))
    assert [r for b in batches for r in b.records] == [{"f0": 1}]
    assert [(q.location, q.reason.split(";")[0]) for b in batches for q in b.quarantined] == [
        ("cap.jsonl:2", TOO_MANY.format(what="the record has"))]


def test_every_row_of_a_parquet_file_of_more_than_10000_columns_is_quarantined_naming_the_limit(tmp_path):
    path = tmp_path / "cap.parquet"
    pq.write_table(pa.table({f"c{i}": [1, 2, 3] for i in range(MAX_FIELDS + 1)}), path)
    batches = list(read_file(str(path), "parquet", None, 100, "cap.parquet"))
    assert [r for b in batches for r in b.records] == []
    entries = [(q.location, q.reason.split(";")[0]) for b in batches for q in b.quarantined]
    assert entries == [(f"cap.parquet:row {i}", TOO_MANY.format(what="the Parquet file has")) for i in range(3)]


def test_a_tf_example_of_more_than_10000_features_is_quarantined_naming_the_limit(tmp_path):
    import tensorflow as tf

    from parity.capture.schema import parse_schema

    wide = tf.train.Example(features=tf.train.Features(feature={
        f"f{i}": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])) for i in range(MAX_FIELDS + 1)}))
    path = tmp_path / "cap.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        writer.write(wide.SerializeToString())
    batches = list(read_file(str(path), "tfrecord", parse_schema({"f0": "int64"}), 100, "cap.tfrecord"))
    assert [(q.location, q.reason.split(";")[0]) for b in batches for q in b.quarantined] == [
        ("cap.tfrecord:record 0", TOO_MANY.format(what="the tf.Example has"))]


def test_a_tfmd_schema_of_more_than_10000_features_is_refused_naming_the_limit(tmp_path):
    from parity.config import load_config
    from parity.errors import ConfigError

    (tmp_path / "schema.pbtxt").write_text("".join(f'feature {{ name: "f{i}" type: INT }}\n'
                                                   for i in range(MAX_FIELDS + 1)))
    (tmp_path / "parity.yaml").write_text("version: 1\ncapture: {path: cap.jsonl, schema: schema.pbtxt}\n"
                                          "sides: {a: {}, b: {}}\n")
    try:
        load_config(str(tmp_path / "parity.yaml"))
    except ConfigError as exc:
        assert "capture.schema: the TFMD schema 'schema.pbtxt' has 10,001 features, above the limit of 10,000" \
            in str(exc)
    else:
        raise AssertionError("a TFMD schema of 10,001 features was accepted")
