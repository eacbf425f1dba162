"""parity.encoding.columnar: the canonical bytes of Arrow rows, from the columns, equal those of the rows as dicts."""

from __future__ import annotations

import math
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

import parity
from parity.encoding import canonical, columnar
from parity.capture import read_file
from parity.encoding.fingerprint import encode_fingerprints
from parity.sets.fingerprint_set import read_set
from parity.capture.schema import coerce_record, parse_type

from tests.set_files import fingerprint_table, stage_bytes

pytestmark = pytest.mark.skipif(canonical._native is None, reason="the C encoder is not built")


def _maybe(rng: random.Random, value):
    return None if rng.random() < 0.2 else value


def _every_covered_type(count: int = 300) -> pa.RecordBatch:
    rng = random.Random(5)
    m = lambda value: _maybe(rng, value)  # noqa: E731
    columns = {
        "b": pa.array([m(rng.random() < 0.5) for _ in range(count)], pa.bool_()),
        "i8": pa.array([m(rng.randint(-128, 127)) for _ in range(count)], pa.int8()),
        "i16": pa.array([m(rng.randint(-2**15, 2**15 - 1)) for _ in range(count)], pa.int16()),
        "i32": pa.array([m(rng.randint(-2**31, 2**31 - 1)) for _ in range(count)], pa.int32()),
        "i64": pa.array([m(rng.choice([0, -1, 127, 128, -128, -129, 2**63 - 1, -2**63, rng.randint(-2**63, 2**63)]))
                         for _ in range(count)], pa.int64()),
        "u8": pa.array([m(rng.randint(0, 255)) for _ in range(count)], pa.uint8()),
        "u16": pa.array([m(rng.randint(0, 2**16 - 1)) for _ in range(count)], pa.uint16()),
        "u32": pa.array([m(rng.randint(0, 2**32 - 1)) for _ in range(count)], pa.uint32()),
        "u64": pa.array([m(rng.choice([0, 2**63 - 1, 2**63, 2**64 - 1])) for _ in range(count)], pa.uint64()),
        "f64": pa.array([m(rng.choice([0.0, -0.0, math.nan, math.inf, -math.inf, 0.1, rng.random() * 1e9]))
                         for _ in range(count)], pa.float64()),
        "f32": pa.array([m(rng.choice([0.0, -0.0, math.nan, 0.1, 3e38, rng.random()])) for _ in range(count)],
                        pa.float32()),
        "s": pa.array([m(rng.choice(["", "é", "e\u0301", "x" * 200, "\U0001F600", "Near North Side"]))
                       for _ in range(count)], pa.string()),
        "ls": pa.array([m(rng.choice(["", "ab", "y" * 300])) for _ in range(count)], pa.large_string()),
        "bin": pa.array([m(rng.choice([b"", b"\x00\xff", b"z" * 129])) for _ in range(count)], pa.binary()),
        "lbin": pa.array([m(rng.choice([b"", b"q"])) for _ in range(count)], pa.large_binary()),
        "nul": pa.nulls(count),
        "tags": pa.array([m([m(rng.choice(["surge", "", "airport"])) for _ in range(rng.randint(0, 3))])
                          for _ in range(count)], pa.list_(pa.string())),
        "words": pa.array([m([rng.choice(["", "a", "z" * 40, "Near North Side"]) for _ in range(rng.randint(0, 3))])
                           for _ in range(count)], pa.list_(pa.string())),  # no null items: a path of its own
        "ints": pa.array([m([rng.randint(-5, 5) for _ in range(rng.randint(0, 3))]) for _ in range(count)],
                         pa.large_list(pa.int64())),
        "nested": pa.array([m([m([rng.random()]) for _ in range(rng.randint(0, 2))]) for _ in range(count)],
                           pa.list_(pa.list_(pa.float32()))),
        "a name longer than thirty-two bytes, to be copied whole": pa.array(range(count), pa.int64()),
    }
    return pa.RecordBatch.from_pydict(columns)


def test_rows_of_every_covered_type_encode_as_their_dicts_do():
    batch = _every_covered_type()
    expected = encode_fingerprints(batch.to_pylist())
    assert columnar.row_encodings(batch) == expected


@pytest.mark.parametrize("start,length", [(3, 200), (7, None), (0, 0), (299, 1)])
def test_a_sliced_batch_encodes_its_own_rows(start, length):
    batch = _every_covered_type().slice(start, length)
    expected = encode_fingerprints(batch.to_pylist())
    assert columnar.row_encodings(batch) == expected


def test_null_fields_the_batch_lacks_are_encoded_as_none():
    batch = _every_covered_type(50)
    rows = [dict(row, extra=None) for row in batch.to_pylist()]
    assert columnar.row_encodings(batch, ["extra"]) == encode_fingerprints(rows)
    assert columnar.row_encodings(pa.RecordBatch.from_pydict({"t": pa.array([1], pa.timestamp("s"))})) is None


@pytest.mark.parametrize("start,length", [(0, None), (1, 1100), (3, 511), (0, 512)])
def test_long_and_sliced_batches_encode_as_their_dicts_do(start, length):
    batch = _every_covered_type(1200).slice(start, length)
    assert columnar.row_encodings(batch) == encode_fingerprints(batch.to_pylist())


def _with_offsets(array: pa.Array, offsets: list[int]) -> pa.Array:
    """`array` (a string or list array without nulls) with its offsets replaced: what a corrupt producer might
    hand over (from_buffers checks only the span of the first and last offsets)."""
    offsets_buffer = pa.py_buffer(np.array(offsets, np.int32).tobytes())
    if pa.types.is_list(array.type):
        return pa.Array.from_buffers(array.type, len(array), [None, offsets_buffer], children=[array.values])
    return pa.Array.from_buffers(array.type, len(array), [None, offsets_buffer, array.buffers()[2]])


@pytest.mark.parametrize("column", [
    _with_offsets(pa.array(["ab", "cd", "ef"]), [0, 4, 2, 6]),  # a cell ending before it starts
    _with_offsets(pa.array([["a"], ["b", "c"]]), [0, 2, 1]),  # a list ending before it starts
    _with_offsets(pa.array([[1], [2, 3]]), [0, 2, 1]),  # the same, of integers
    pa.ListArray.from_arrays([0, 1, 2], _with_offsets(pa.array(["a", "b"]), [0, 1, 0])),  # its items' offsets
], ids=["backwards", "list-backwards", "int-list-backwards", "items-backwards"])
def test_offsets_outside_the_values_raise_rather_than_read_past_them(column):
    batch = pa.RecordBatch.from_arrays([pa.array(range(len(column))), column], names=["id", "x"])
    with pytest.raises(ValueError, match="offsets outside its values"):
        columnar.row_encodings(batch)


def test_offsets_outside_the_values_late_in_a_long_batch_raise():
    good = pa.array([["a"], ["b", "c"]] * 400, pa.list_(pa.large_string()))  # written by put_cell
    offsets = good.offsets.to_numpy().copy()
    offsets[700] = offsets[699] - 1  # a list in the second half ends before it starts
    column = pa.Array.from_buffers(good.type, 800, [None, pa.py_buffer(offsets.tobytes())], children=[good.values])
    batch = pa.RecordBatch.from_arrays([pa.array(range(800)), column], names=["id", "x"])
    with pytest.raises(ValueError, match="offsets outside its values"):
        columnar.row_encodings(batch)


def test_a_batch_sliced_out_of_a_table_with_list_offsets_encodes_its_own_rows():
    table = pa.Table.from_batches([_every_covered_type()]).slice(17, 50)
    for batch in table.to_batches():
        assert columnar.row_encodings(batch) == encode_fingerprints(batch.to_pylist())


def test_null_fields_are_added_as_none_and_present_names_are_not_doubled():
    batch = _every_covered_type(20)
    rows = [dict(row, extra=None) for row in batch.to_pylist()]
    assert columnar.row_encodings(batch, ["extra", "s"]) == encode_fingerprints(rows)


def test_float32_can_encode_as_numpy_float32_instead_of_python_float():
    batch = pa.RecordBatch.from_pydict({"x": pa.array([0.1, None, math.nan, -0.0], pa.float32())})
    rows = [{"x": None if v is None else np.float32(v)} for v in batch.column(0).to_pylist()]
    assert columnar.row_encodings(batch, float32_as_float64=False) == encode_fingerprints(rows)
    assert columnar.row_encodings(batch) == encode_fingerprints(batch.to_pylist())
    assert columnar.row_encodings(batch)[0] != columnar.row_encodings(batch, float32_as_float64=False)[0]


@pytest.mark.parametrize("array", [
    pa.array([1, 2], pa.timestamp("us")), pa.array([1.5, 2.5], pa.float16()),
    pa.array([{"a": 1}, {"a": 2}]), pa.array(["a", "b"]).dictionary_encode(),
    pa.array([[1], [2]], pa.list_(pa.timestamp("s"))), pa.array([1, 2], pa.decimal128(5, 2)),
], ids=["timestamp", "float16", "struct", "dictionary", "list-of-timestamp", "decimal"])
def test_a_column_of_a_type_not_covered_gives_none_so_the_rows_are_encoded_as_dicts(array):
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2]), array], names=["id", "x"])
    assert not columnar.covered(array.type)
    assert columnar.row_encodings(batch) is None


def test_two_columns_of_one_name_give_none():
    batch = pa.RecordBatch.from_arrays([pa.array([1]), pa.array([2])], names=["x", "x"])
    assert columnar.row_encodings(batch) is None
    assert not columnar.identity_schema(batch.schema, None)


_SCALARS = {
    pa.int64(): st.integers(-2**63, 2**63 - 1), pa.int16(): st.integers(-2**15, 2**15 - 1),
    pa.uint64(): st.integers(0, 2**64 - 1), pa.float64(): st.floats(allow_nan=True),
    pa.float32(): st.floats(width=32, allow_nan=True), pa.bool_(): st.booleans(),
    pa.string(): st.text(max_size=40), pa.binary(): st.binary(max_size=40),
    pa.list_(pa.string()): st.lists(st.one_of(st.none(), st.text(max_size=5)), max_size=4),
    pa.list_(pa.binary()): st.lists(st.binary(max_size=40), max_size=4),
    pa.large_list(pa.string()): st.lists(st.text(max_size=40), max_size=4),
}


@st.composite
def _batches(draw):
    types = draw(st.lists(st.sampled_from(list(_SCALARS)), min_size=1, max_size=6))
    names = draw(st.lists(st.text(min_size=0, max_size=12), min_size=len(types), max_size=len(types), unique=True))
    rows = draw(st.integers(0, 12))
    arrays = [pa.array(draw(st.lists(st.one_of(st.none(), _SCALARS[t]), min_size=rows, max_size=rows)), t)
              for t in types]
    batch = pa.RecordBatch.from_arrays(arrays, names=names)
    start = draw(st.integers(0, rows))
    return batch.slice(start, draw(st.integers(0, rows - start)))


@settings(max_examples=150, deadline=None)
@given(_batches())
def test_any_batch_of_covered_columns_encodes_as_its_dicts_do(batch):
    expected = encode_fingerprints(batch.to_pylist())
    assert columnar.row_encodings(batch) == expected


@pytest.mark.parametrize("arrow_type,schema_type,identical", [
    (pa.int64(), "int64", True), (pa.int32(), "int64", True), (pa.uint32(), "int64", True),
    (pa.uint64(), "int64", False), (pa.int64(), "int32", False), (pa.float32(), "float64", True),
    (pa.float64(), "float32", False), (pa.int64(), "float64", False), (pa.string(), "string", True),
    (pa.binary(), "string", False), (pa.string(), "bytes", False), (pa.bool_(), "bool", True),
    (pa.list_(pa.string()), "list<string>", True), (pa.list_(pa.int64()), "list<float64>", False),
    (pa.string(), "list<string>", False), (pa.null(), "float32", True), (pa.timestamp("s"), "int64", False),
])
def test_identity_schema_holds_only_where_coercion_keeps_every_value(arrow_type, schema_type, identical):
    arrow_schema = pa.schema([("id", pa.int64()), ("x", arrow_type)])
    assert columnar.identity_schema(arrow_schema, {"x": parse_type(schema_type)}) is identical


def _parquet(path, count=250):
    rng = random.Random(3)
    table = pa.table({
        "id": pa.array(range(2**55, 2**55 + count), pa.int64()),
        "t": pa.array([1_709_942_400 + i * 61 for i in range(count)], pa.int64()),
        "fare": pa.array([_maybe(rng, round(rng.uniform(2, 60), 2)) for _ in range(count)], pa.float64()),
        "zone": pa.array([rng.choice("abc") for _ in range(count)], pa.string()),
        "tags": pa.array([[rng.choice(["x", "y"])] for _ in range(count)], pa.list_(pa.string())),
    })
    pq.write_table(table, path, row_group_size=100)
    return table


def test_the_parquet_reader_gives_each_records_encoding_when_the_schema_keeps_the_values(tmp_path):
    path = str(tmp_path / "capture.parquet")
    _parquet(path)
    schema = {"id": parse_type("int64"), "fare": parse_type("float64"), "zone": parse_type("string"),
              "absent": parse_type("int64")}
    batches = list(read_file(path, "parquet", schema, 64, "capture.parquet"))
    assert sum(len(b.records) for b in batches) == 250
    rows = pq.read_table(path).to_pylist()
    read = [record for batch in batches for record in batch.records]
    # the rows as coercion would make them, field order included, without coercing value by value
    assert [list(r.items()) for r in read] == [list(coerce_record(r, schema).items()) for r in rows]
    for batch in batches:
        assert None not in batch.encoded
        assert (batch.encoded, batch.fingerprints) == encode_fingerprints(batch.records)
        assert all(record["absent"] is None for record in batch.records)
    converting = dict(schema, t=parse_type("float64"))  # ints become floats: the records are encoded as dicts
    for batch in read_file(path, "parquet", converting, 64, "capture.parquet"):
        assert batch.encoded == [] and batch.fingerprints == []
        assert all(isinstance(record["t"], float) for record in batch.records)


def test_a_replay_of_a_parquet_capture_writes_the_same_set_with_or_without_the_column_encoder(tmp_path, monkeypatch):
    _parquet(str(tmp_path / "capture.parquet"))
    (tmp_path / "columnar_features.py").write_text(
        "def features(record):\n"
        "    return {'fare': record['fare'], 'zone': record['zone'], 'n': len(record['tags'])}\n")
    (tmp_path / "parity.yaml").write_text(
        "version: 1\nname: columnar\n"
        "capture: {path: capture.parquet, key: [id], schema: {id: int64, t: int64, fare: float64, zone: string, "
        "tags: list<string>}}\n"
        "sides:\n"
        "  offline: {timestamp: {field: t, unit: s}, window: {type: fixed, size: 1h}, "
        "transform: {python: columnar_features:features}}\n"
        "  production: {timestamp: {field: t, unit: s}, window: {type: fixed, size: 1h}, "
        "transform: {python: columnar_features:features}}\n")
    calls = []
    encode = columnar.row_encodings
    monkeypatch.setattr(columnar, "row_encodings", lambda *a, **k: calls.append(1) or encode(*a, **k))
    with_columns = parity.check(str(tmp_path / "parity.yaml"), out_dir=str(tmp_path / "columns"))
    assert calls, "the Parquet reader did not use the column encoder"
    monkeypatch.setattr(columnar, "row_encodings", lambda *a, **k: None)
    as_dicts = parity.check(str(tmp_path / "parity.yaml"), out_dir=str(tmp_path / "dicts"))
    assert with_columns == as_dicts and with_columns["records"]["matched"] == 250
    for side in ("offline", "production"):
        sets = [fingerprint_table(os.path.join(tmp_path, out, "sides", side)) for out in ("columns", "dicts")]
        assert sets[0].equals(sets[1])
        # each input fingerprint is the hash of the input bytes the set keeps for the record
        written = read_set(os.path.join(tmp_path, "columns", "sides", side))
        rows = written.table.select(["part", "row", "input_fp"]).to_pylist()
        kept = stage_bytes(written, {(r["part"], r["row"]): ["input"] for r in rows})
        assert len(rows) == 250
        assert all(xxhash.xxh3_64_intdigest(kept[(r["part"], r["row"])]["input"]) == r["input_fp"] for r in rows)
