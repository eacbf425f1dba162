import pytest

from parity.capture import read_file
from parity.errors import InputError
from parity.capture.schema import parse_schema

SCHEMA = parse_schema({"trip_id": "int64", "fare": "float64", "zone": "string", "paid": "bool"})
SHOW = "capture/trips.csv"


def _write(tmp_path, data: bytes) -> str:
    path = tmp_path / "trips.csv"
    path.write_bytes(data)
    return str(path)


def _read(path, schema=SCHEMA, batch_size=100):
    batches = list(read_file(path, "csv", schema, batch_size, SHOW))
    records = [r for b in batches for r in b.records]
    locations = [loc for b in batches for loc in b.locations]
    quarantined = [q for b in batches for q in b.quarantined]
    return records, locations, quarantined


def test_rows_are_coerced_to_the_schema_and_located_by_one_based_line(tmp_path):
    path = _write(tmp_path, b"trip_id,fare,zone,paid\n1,2.5,JFK,true\n2,3,LGA,0\n")
    records, locations, quarantined = _read(path)
    assert records == [
        {"trip_id": 1, "fare": 2.5, "zone": "JFK", "paid": True},
        {"trip_id": 2, "fare": 3.0, "zone": "LGA", "paid": False},
    ]
    assert locations == [f"{SHOW}:2", f"{SHOW}:3"]
    assert quarantined == []


def test_an_empty_cell_is_none(tmp_path):
    path = _write(tmp_path, b'trip_id,fare,zone,paid\n1,,"",\n')
    records, _, _ = _read(path)
    assert records == [{"trip_id": 1, "fare": None, "zone": None, "paid": None}]


def test_columns_in_any_order_and_columns_outside_the_schema_are_kept_as_strings(tmp_path):
    path = _write(tmp_path, b"note,zone,paid,fare,trip_id\nhi,JFK,FALSE,1e2,7\n")
    records, _, _ = _read(path)
    assert records == [{"trip_id": 7, "fare": 100.0, "zone": "JFK", "paid": False, "note": "hi"}]


def test_a_row_with_the_wrong_number_of_columns_is_quarantined(tmp_path):
    path = _write(tmp_path, b"trip_id,fare,zone,paid\n1,2.5,JFK\n2,2.5,JFK,true,extra\n3,1,A,1\n")
    records, _, quarantined = _read(path)
    assert [r["trip_id"] for r in records] == [3]
    assert [(q.location, q.reason, q.preview) for q in quarantined] == [
        (f"{SHOW}:2", "expected 4 columns, got 3", "1,2.5,JFK"),
        (f"{SHOW}:3", "expected 4 columns, got 5", "2,2.5,JFK,true,extra"),
    ]


def test_a_cell_that_does_not_fit_the_schema_is_quarantined_naming_field_type_and_value(tmp_path):
    path = _write(tmp_path, b"trip_id,fare,zone,paid\n3.5,1,A,true\n1,abc,A,true\n2,1,A,maybe\n")
    records, _, quarantined = _read(path)
    assert records == []
    assert [q.reason for q in quarantined] == [
        "field 'trip_id': expected int64, got '3.5'",
        "field 'fare': expected float64, got 'abc'",
        "field 'paid': expected bool, got 'maybe'",
    ]


def test_a_non_utf8_line_is_quarantined_and_the_rest_of_the_file_is_read(tmp_path):
    path = _write(tmp_path, b"trip_id,fare,zone,paid\n1,1,caf\xe9,true\n2,1,ok,true\n")
    records, locations, quarantined = _read(path)
    assert records == [{"trip_id": 2, "fare": 1.0, "zone": "ok", "paid": True}]
    assert locations == [f"{SHOW}:3"]
    assert quarantined[0].location == f"{SHOW}:2"
    assert quarantined[0].reason == "invalid UTF-8 at line 2, byte 7: invalid continuation byte"


def test_a_quoted_field_spanning_lines_is_one_record_located_at_its_first_line(tmp_path):
    path = _write(tmp_path, b'trip_id,fare,zone,paid\r\n1,1,"two\r\nlines",true\r\n2,1,x,true\r\n')
    records, locations, _ = _read(path)
    assert [r["zone"] for r in records] == ["two\r\nlines", "x"]
    assert locations == [f"{SHOW}:2", f"{SHOW}:4"]


def test_malformed_quoting_is_quarantined_as_invalid_csv(tmp_path):
    path = _write(tmp_path, b'trip_id,fare,zone,paid\n1,1,"a"b,true\n2,1,x,true\n')
    records, _, quarantined = _read(path)
    assert [r["trip_id"] for r in records] == [2]
    assert quarantined[0].location == f"{SHOW}:2"
    assert quarantined[0].reason.startswith("invalid CSV: ")


def test_an_unterminated_quote_quarantines_the_rest_of_the_file_as_one_entry(tmp_path):
    path = _write(tmp_path, b'trip_id,fare,zone,paid\n1,1,x,true\n2,1,"open,true\n3,1,x,true\n')
    records, _, quarantined = _read(path)
    assert [r["trip_id"] for r in records] == [1]
    assert len(quarantined) == 1 and quarantined[0].location == f"{SHOW}:3"


def test_blank_lines_are_not_records(tmp_path):
    path = _write(tmp_path, b"\ntrip_id,fare,zone,paid\n\n1,1,A,true\n\n")
    records, locations, quarantined = _read(path)
    assert len(records) == 1 and quarantined == []
    assert locations == [f"{SHOW}:4"]


def test_list_cells_hold_json_arrays(tmp_path):
    schema = parse_schema({"id": "int64", "tags": "list<string>", "ns": "list<int64>"})
    path = _write(tmp_path, b'id,tags,ns\n1,"[""a"", ""b""]","[1, 2]"\n2,a;b,[]\n')
    records, _, quarantined = _read(path, schema)
    assert records == [{"id": 1, "tags": ["a", "b"], "ns": [1, 2]}]
    assert quarantined[0].reason == "field 'tags': expected list<string>, got 'a;b'"


def test_a_byte_order_mark_before_the_header_is_ignored(tmp_path):
    path = _write(tmp_path, b"\xef\xbb\xbftrip_id,fare,zone,paid\n1,1,A,1\n")
    records, _, _ = _read(path)
    assert records[0]["trip_id"] == 1


def test_reading_csv_without_a_schema_raises_input_error_asking_for_capture_schema(tmp_path):
    path = _write(tmp_path, b"a\n1\n")
    with pytest.raises(InputError, match=r"add `capture.schema`"):
        _read(path, schema=None)


def test_a_header_lacking_a_schema_column_raises_input_error_naming_it(tmp_path):
    path = _write(tmp_path, b"trip_id,fare,zone\n1,1,A\n")
    with pytest.raises(InputError, match="lacks schema column\\(s\\) 'paid'; it has 'trip_id', 'fare', 'zone'"):
        _read(path)


def test_every_row_of_a_file_whose_header_repeats_a_column_is_quarantined_naming_it(tmp_path):
    # CONTRACT section 8, "Readers": never resolved to one of the cells (issue 40, item 1); each row counted
    path = _write(tmp_path, b"trip_id,fare,zone,paid,zone\n1,2.5,JFK,true,LGA\n\n2,3,LGA,0,JFK\n")
    records, _, quarantined = _read(path)
    assert records == []
    assert [q.location for q in quarantined] == [f"{SHOW}:2", f"{SHOW}:4"]
    assert {q.reason for q in quarantined} == {
        "repeated field 'zone': the CSV header names columns 3 and 5 so, and a record is never resolved to one "
        "of its values; name each column once"}


def test_an_empty_file_has_no_records(tmp_path):
    assert _read(_write(tmp_path, b"")) == ([], [], [])


def test_batches_hold_at_most_batch_size_records_and_every_row_is_counted(tmp_path):
    rows = [b"trip_id,fare,zone,paid"] + [b"%d,1,A,true" % i if i % 4 else b"x,1,A,true" for i in range(30)]
    path = _write(tmp_path, b"\n".join(rows) + b"\n")
    batches = list(read_file(path, "csv", SCHEMA, 6, SHOW))
    assert all(len(b.records) <= 6 for b in batches)
    assert sum(len(b.records) for b in batches) == 22
    assert sum(len(b.quarantined) for b in batches) == 8
    lines = [loc for b in batches for loc in b.locations] + [q.location for b in batches for q in b.quarantined]
    assert sorted(int(loc.rsplit(":", 1)[1]) for loc in lines) == list(range(2, 32))
