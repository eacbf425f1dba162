import gzip
import struct

import pytest
import tensorflow as tf

from parity.capture import read_file
from parity.capture.tfrecord import masked_crc32c
from parity.errors import InputError
from parity.capture.schema import parse_schema

SCHEMA = parse_schema(
    {
        "trip_id": "int64",
        "fare": "float32",
        "zone": "string",
        "raw": "bytes",
        "paid": "bool",
        "tags": "list<string>",
    }
)
SHOW = "capture/trips.tfrecord"


def _example(**features) -> bytes:
    feature = {}
    for name, values in features.items():
        if values and isinstance(values[0], bytes):
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        elif values and isinstance(values[0], float):
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        elif values:
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        else:
            feature[name] = tf.train.Feature()
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _trip(i: int) -> bytes:
    return _example(trip_id=[i], fare=[i + 0.1], zone=[b"JFK"], raw=[b"\x00\xff"], paid=[i % 2], tags=[b"a", b"b"])


def _write(path, payloads, compression=None) -> str:
    with tf.io.TFRecordWriter(str(path), options=compression) as writer:
        for payload in payloads:
            writer.write(payload)
    return str(path)


def _read(path, schema=SCHEMA, batch_size=100):
    batches = list(read_file(path, "tfrecord", schema, batch_size, SHOW))
    records = [r for b in batches for r in b.records]
    locations = [loc for b in batches for loc in b.locations]
    quarantined = [q for b in batches for q in b.quarantined]
    return records, locations, quarantined


def test_examples_written_by_tensorflow_are_read_with_schema_types(tmp_path):
    path = _write(tmp_path / "t.tfrecord", [_trip(1), _trip(2)])
    records, locations, quarantined = _read(path)
    assert quarantined == []
    assert locations == [f"{SHOW}:record 0", f"{SHOW}:record 1"]
    first = records[0]
    assert first == {
        "trip_id": 1,
        "fare": pytest.approx(1.1, rel=1e-6),
        "zone": "JFK",
        "raw": b"\x00\xff",
        "paid": True,
        "tags": ["a", "b"],
    }
    assert first["fare"] == float(tf.constant(1.1, tf.float32).numpy())
    assert records[1]["paid"] is False


def test_the_masked_crc_matches_the_one_tensorflow_writes(tmp_path):
    path = _write(tmp_path / "t.tfrecord", [b"hello"])
    data = open(path, "rb").read()
    length, length_crc = struct.unpack("<QI", data[:12])
    assert length == 5
    assert masked_crc32c(data[:8]) == length_crc
    assert masked_crc32c(b"hello") == struct.unpack("<I", data[17:21])[0]


def test_gzip_compressed_tfrecords_are_read(tmp_path):
    path = _write(tmp_path / "t.tfrecord.gz", [_trip(i) for i in range(5)], compression="GZIP")
    records, _, quarantined = _read(path)
    assert [r["trip_id"] for r in records] == [0, 1, 2, 3, 4] and quarantined == []


def test_a_missing_feature_or_one_without_values_is_none_and_an_empty_list_feature_is_empty(tmp_path):
    path = _write(tmp_path / "t.tfrecord", [_example(trip_id=[1], zone=[], tags=[])])
    records, _, _ = _read(path)
    assert records == [{"trip_id": 1, "fare": None, "zone": None, "raw": None, "paid": None, "tags": []}]


def test_features_not_in_the_schema_are_kept_as_lists_of_raw_values(tmp_path):
    path = _write(tmp_path / "t.tfrecord", [_example(trip_id=[1], zz=[b"x"], aa=[1, 2])])
    records, _, _ = _read(path, parse_schema({"trip_id": "int64"}))
    assert records == [{"trip_id": 1, "aa": [1, 2], "zz": [b"x"]}]
    assert list(records[0]) == ["trip_id", "aa", "zz"]


def test_a_scalar_feature_with_several_values_is_quarantined(tmp_path):
    path = _write(tmp_path / "t.tfrecord", [_trip(0), _example(trip_id=[1, 2])])
    records, _, quarantined = _read(path)
    assert len(records) == 1
    assert quarantined[0].location == f"{SHOW}:record 1"
    assert quarantined[0].reason == "field 'trip_id': expected one int64 value, got 2 values"


def test_a_feature_of_the_wrong_kind_is_quarantined(tmp_path):
    path = _write(tmp_path / "t.tfrecord", [_example(trip_id=[1.5])])
    _, _, quarantined = _read(path)
    assert quarantined[0].reason == "field 'trip_id': expected int64 (from int64_list), got a float_list of 1 value(s)"


def test_a_string_feature_that_is_not_utf8_is_quarantined(tmp_path):
    path = _write(tmp_path / "t.tfrecord", [_example(zone=[b"caf\xe9"])])
    _, _, quarantined = _read(path)
    assert quarantined[0].reason.startswith("field 'zone': expected string, got b'caf\\xe9' (invalid UTF-8")


def test_an_int64_beyond_int32_is_quarantined_for_an_int32_field(tmp_path):
    path = _write(tmp_path / "t.tfrecord", [_example(n=[2**40])])
    _, _, quarantined = _read(path, parse_schema({"n": "int32"}))
    assert "out of range" in quarantined[0].reason


def test_a_record_that_is_not_a_tf_example_is_quarantined(tmp_path):
    path = _write(tmp_path / "t.tfrecord", [b"\xff\xff\xff\xff", _trip(1)])
    records, _, quarantined = _read(path)
    assert len(records) == 1
    assert quarantined[0].location == f"{SHOW}:record 0"
    assert quarantined[0].reason.startswith("invalid tf.Example")


def test_a_corrupt_data_byte_quarantines_that_record_by_offset_and_reading_goes_on(tmp_path):
    payloads = [_trip(i) for i in range(3)]
    path = _write(tmp_path / "t.tfrecord", payloads)
    data = bytearray(open(path, "rb").read())
    second = 12 + len(payloads[0]) + 4
    data[second + 12 + 3] ^= 0x01
    open(path, "wb").write(bytes(data))
    records, locations, quarantined = _read(path)
    assert [r["trip_id"] for r in records] == [0, 2]
    assert locations == [f"{SHOW}:record 0", f"{SHOW}:record 2"]
    assert len(quarantined) == 1
    assert quarantined[0].location == f"{SHOW}:offset {second}"
    assert quarantined[0].reason == "record 1: data CRC mismatch"


def test_a_corrupt_length_loses_the_framing_and_the_rest_of_the_file_is_one_quarantined_entry(tmp_path):
    payloads = [_trip(i) for i in range(4)]
    path = _write(tmp_path / "t.tfrecord", payloads)
    data = bytearray(open(path, "rb").read())
    second = 12 + len(payloads[0]) + 4
    data[second] ^= 0x01
    open(path, "wb").write(bytes(data))
    records, _, quarantined = _read(path)
    assert [r["trip_id"] for r in records] == [0]
    assert len(quarantined) == 1
    assert quarantined[0].location == f"{SHOW}:offset {second}"
    assert quarantined[0].reason.startswith(f"truncated TFRecord framing at byte {second}: length CRC mismatch")
    assert "count as this one quarantined entry" in quarantined[0].reason


@pytest.mark.parametrize("cut", [5, 12 + 10, 12 + 40])
def test_a_file_cut_inside_a_record_quarantines_the_tail_as_one_entry(tmp_path, cut):
    payloads = [_trip(0), _trip(1)]
    path = _write(tmp_path / "t.tfrecord", payloads)
    second = 12 + len(payloads[0]) + 4
    data = open(path, "rb").read()[: second + cut]
    open(path, "wb").write(data)
    records, _, quarantined = _read(path)
    assert [r["trip_id"] for r in records] == [0]
    assert len(quarantined) == 1
    assert quarantined[0].reason.startswith(f"truncated TFRecord framing at byte {second}: the file ends inside")


def test_a_cut_gzip_stream_keeps_the_records_before_the_cut_and_quarantines_the_tail(tmp_path):
    raw = _write(tmp_path / "plain.tfrecord", [_trip(i) for i in range(200)])
    compressed = gzip.compress(open(raw, "rb").read())
    path = tmp_path / "t.tfrecord.gz"
    path.write_bytes(compressed[: len(compressed) // 2])
    records, _, quarantined = _read(str(path))
    assert 0 < len(records) < 200
    assert [r["trip_id"] for r in records] == list(range(len(records)))
    assert len(quarantined) == 1
    assert quarantined[0].reason.startswith("truncated TFRecord framing at byte")


def test_reading_a_tfrecord_without_a_schema_raises_input_error_asking_for_capture_schema(tmp_path):
    path = _write(tmp_path / "t.tfrecord", [_trip(0)])
    with pytest.raises(InputError, match=r"add `capture.schema`"):
        _read(path, schema=None)


def test_batches_hold_at_most_batch_size_records_and_every_record_is_counted(tmp_path):
    payloads = [_trip(i) if i % 5 else _example(trip_id=[i, i]) for i in range(23)]
    path = _write(tmp_path / "t.tfrecord", payloads)
    batches = list(read_file(path, "tfrecord", SCHEMA, 4, SHOW))
    assert all(len(b.records) <= 4 for b in batches)
    assert sum(len(b.records) for b in batches) + sum(len(b.quarantined) for b in batches) == 23
    assert sum(len(b.quarantined) for b in batches) == 5


def test_an_empty_file_has_no_records(tmp_path):
    path = tmp_path / "t.tfrecord"
    path.write_bytes(b"")
    assert list(read_file(str(path), "tfrecord", SCHEMA, 10, SHOW)) == []


def _features_field(*entries: bytes) -> bytes:
    """An Example's bytes whose `features` message holds these map entries as they are (keys may repeat)."""
    features = b"".join(b"\x0a" + bytes([len(entry)]) + entry for entry in entries)
    return b"\x0a" + bytes([len(features)]) + features


def _entry(name: bytes, value: int) -> bytes:
    feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[value])).SerializeToString()
    return b"\x0a" + bytes([len(name)]) + name + b"\x12" + bytes([len(feature)]) + feature


@pytest.mark.parametrize("payload", [
    _features_field(_entry(b"trip_id", 1), _entry(b"paid", 0), _entry(b"paid", 1)),  # one map, the key twice
    _trip(1) + _example(paid=[0]),  # two Examples' bytes back to back: protobuf merges them into one
], ids=["one-map", "merged-messages"])
def test_an_example_naming_a_feature_twice_is_quarantined_naming_it(tmp_path, payload):
    # CONTRACT section 8, "Readers" (issue 40, item 1): protobuf kept the last entry of the map, silently
    path = _write(tmp_path / "t.tfrecord", [_trip(0), payload])
    records, _, quarantined = _read(path)
    assert [r["trip_id"] for r in records] == [0]
    assert [(q.location, q.reason) for q in quarantined] == [
        (f"{SHOW}:record 1", "repeated field 'paid': the tf.Example holds the feature 2 times, and a record is never "
                             "resolved to one of its values; write each feature once")]
