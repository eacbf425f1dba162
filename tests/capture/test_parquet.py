import datetime
import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parity.capture import read_file
from parity.errors import InputError
from parity.capture.schema import parse_schema

SHOW = "capture/trips.parquet"


def _write(tmp_path, table: pa.Table, **options) -> str:
    path = str(tmp_path / "trips.parquet")
    pq.write_table(table, path, **options)
    return path


def _read(path, schema=None, batch_size=100):
    batches = list(read_file(path, "parquet", schema, batch_size, SHOW))
    records = [r for b in batches for r in b.records]
    locations = [loc for b in batches for loc in b.locations]
    quarantined = [q for b in batches for q in b.quarantined]
    return records, locations, quarantined


def test_rows_are_read_as_dicts_of_python_values_with_zero_based_row_locations(tmp_path):
    table = pa.table({"trip_id": [1, 2], "fare": [2.5, None], "zone": ["JFK", "LGA"], "tags": [["a"], []]})
    records, locations, quarantined = _read(_write(tmp_path, table))
    assert records == [
        {"trip_id": 1, "fare": 2.5, "zone": "JFK", "tags": ["a"]},
        {"trip_id": 2, "fare": None, "zone": "LGA", "tags": []},
    ]
    assert locations == [f"{SHOW}:row 0", f"{SHOW}:row 1"]
    assert quarantined == []


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_timestamp_columns_become_integer_microseconds_since_the_epoch(tmp_path, unit):
    moment = datetime.datetime(2024, 3, 1, 12, 30, 15, tzinfo=datetime.timezone.utc)
    table = pa.table({"t": pa.array([moment, None], pa.timestamp(unit, tz="UTC"))})
    records, _, _ = _read(_write(tmp_path, table))
    assert records == [{"t": 1_709_296_215_000_000}, {"t": None}]


def test_naive_and_zoned_timestamps_give_the_same_utc_microseconds(tmp_path):
    naive = datetime.datetime(1969, 12, 31, 23, 59, 59, 999_999)
    table = pa.table(
        {
            "naive": pa.array([naive], pa.timestamp("us")),
            "zoned": pa.array([naive.replace(tzinfo=datetime.timezone.utc)], pa.timestamp("us", tz="Europe/Paris")),
        }
    )
    records, _, _ = _read(_write(tmp_path, table))
    assert records == [{"naive": -1, "zoned": -1}]


def test_nanosecond_timestamps_are_floored_to_microseconds(tmp_path):
    table = pa.table({"t": pa.array([1_999, -1], pa.timestamp("ns"))})
    records, _, _ = _read(_write(tmp_path, table))
    assert records == [{"t": 1}, {"t": -1}]


def test_decimals_become_exact_strings_and_dates_iso_strings(tmp_path):
    table = pa.table(
        {
            "amount": pa.array([decimal.Decimal("12.50")], pa.decimal128(5, 2)),
            "day": pa.array([datetime.date(2024, 1, 31)], pa.date32()),
        }
    )
    records, _, _ = _read(_write(tmp_path, table))
    assert records == [{"amount": "12.50", "day": "2024-01-31"}]


def test_nested_timestamps_and_maps_are_converted_inside_structs_and_lists(tmp_path):
    moment = datetime.datetime(1970, 1, 1, 0, 0, 1)
    table = pa.table(
        {
            "s": pa.array([{"at": moment, "n": 1}], pa.struct([("at", pa.timestamp("ms")), ("n", pa.int64())])),
            "m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
        }
    )
    records, _, _ = _read(_write(tmp_path, table))
    assert records == [{"s": {"at": 1_000_000, "n": 1}, "m": [["k", 1]]}]


def test_with_a_schema_columns_are_coerced_and_missing_ones_are_none(tmp_path):
    table = pa.table({"trip_id": [1], "fare": pa.array([0.1], pa.float64()), "other": ["x"]})
    schema = parse_schema({"trip_id": "float64", "fare": "float32", "zone": "string"})
    records, _, _ = _read(_write(tmp_path, table), schema)
    assert records == [{"trip_id": 1.0, "fare": float(pa.scalar(0.1, pa.float32()).as_py()), "zone": None, "other": "x"}]
    assert type(records[0]["trip_id"]) is float


def test_a_row_that_does_not_fit_the_schema_is_quarantined_at_its_row(tmp_path):
    table = pa.table({"trip_id": ["1", "x", "3"]})
    records, locations, quarantined = _read(_write(tmp_path, table), parse_schema({"trip_id": "int64"}))
    assert records == [{"trip_id": 1}, {"trip_id": 3}]
    assert locations == [f"{SHOW}:row 0", f"{SHOW}:row 2"]
    assert len(quarantined) == 1
    assert quarantined[0].location == f"{SHOW}:row 1"
    assert quarantined[0].reason == "field 'trip_id': expected int64, got 'x'"
    assert quarantined[0].preview == "{'trip_id': 'x'}"


def test_a_file_that_is_not_parquet_is_one_quarantined_entry_for_the_file(tmp_path):
    path = tmp_path / "trips.parquet"
    path.write_bytes(b"this is not a parquet file at all")
    records, _, quarantined = _read(str(path))
    assert records == []
    assert len(quarantined) == 1
    assert quarantined[0].location == SHOW
    assert quarantined[0].reason.startswith("cannot read Parquet file: ")
    assert "\n" not in quarantined[0].reason
    assert quarantined[0].preview.startswith("b'this is not")


def test_a_corrupt_row_group_quarantines_each_of_its_rows_and_the_groups_around_it_are_read(tmp_path):
    table = pa.table({"id": list(range(3000)), "s": [f"x{i}" for i in range(3000)]})
    path = _write(tmp_path, table, row_group_size=1000, compression="snappy")
    page = pq.ParquetFile(path).metadata.row_group(1).column(0).data_page_offset
    data = bytearray(open(path, "rb").read())
    for k in range(page + 30, page + 60):
        data[k] ^= 0xFF
    open(path, "wb").write(bytes(data))
    records, _, quarantined = _read(path, batch_size=500)
    assert [r["id"] for r in records] == list(range(1000)) + list(range(2000, 3000))
    assert [q.location for q in quarantined] == [f"{SHOW}:row {row}" for row in range(1000, 2000)]
    assert all(q.reason.startswith("cannot read Parquet row group 1 (rows 1000-1999) after row 1000: ")
               for q in quarantined)


def test_batches_follow_batch_size_across_row_groups_and_count_every_row(tmp_path):
    table = pa.table({"trip_id": [str(i) if i % 100 else "bad" for i in range(2500)]})
    path = _write(tmp_path, table, row_group_size=700)
    batches = list(read_file(path, "parquet", parse_schema({"trip_id": "int64"}), 1000, SHOW))
    assert all(len(b.records) <= 1000 for b in batches)
    assert sum(len(b.records) for b in batches) == 2475
    assert sum(len(b.quarantined) for b in batches) == 25
    rows = [loc for b in batches for loc in b.locations] + [q.location for b in batches for q in b.quarantined]
    assert sorted(int(loc.rsplit(" ", 1)[1]) for loc in rows) == list(range(2500))


def test_a_missing_file_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read capture file"):
        _read(str(tmp_path / "nope.parquet"))


_REPEATED_END = "and a record is never resolved to one of its values; write each"


@pytest.mark.parametrize("schema", [None, parse_schema({"id": "int64", "v": "int64"})])
def test_every_row_of_a_file_repeating_a_column_name_is_quarantined_naming_it(tmp_path, schema):
    # CONTRACT section 8, "Readers" (issue 40, item 1): the rows were read with the last column's values
    table = pa.table([pa.array([1, 2]), pa.array([3, 4]), pa.array([5, 6])], names=["id", "v", "v"])
    records, _, quarantined = _read(_write(tmp_path, table), schema)
    assert records == []
    assert [q.location for q in quarantined] == [f"{SHOW}:row 0", f"{SHOW}:row 1"]
    assert {q.reason for q in quarantined} == {
        f"repeated field 'v': the Parquet file has 2 columns of that name, {_REPEATED_END} column once"}


def test_every_row_of_a_file_whose_struct_repeats_a_field_name_is_quarantined_naming_where(tmp_path):
    inner = pa.StructArray.from_arrays([pa.array([1, 2]), pa.array([3, 4])], names=["c", "c"])
    outer = pa.StructArray.from_arrays([inner], names=["b"])
    table = pa.table([pa.array([1, 2]), outer], names=["id", "a"])
    records, _, quarantined = _read(_write(tmp_path, table))
    assert records == []
    assert {q.reason for q in quarantined} == {
        f"field 'a': at ['b']: repeated key 'c': its struct has 2 fields of that name, {_REPEATED_END} field once"}
    assert len(quarantined) == 2
