import math
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parity.capture.schema import FieldType, SchemaMismatch, coerce, coerce_record, coerce_records, parse_schema, parse_type

INT64 = parse_type("int64")
INT32 = parse_type("int32")
FLOAT64 = parse_type("float64")
FLOAT32 = parse_type("float32")
STRING = parse_type("string")
BYTES = parse_type("bytes")
BOOL = parse_type("bool")


@pytest.mark.parametrize("text", ["int64", "int32", "float64", "float32", "string", "bytes", "bool"])
def test_every_scalar_type_string_parses_to_a_scalar_field_type(text):
    field_type = parse_type(text)
    assert field_type == FieldType(text)
    assert not field_type.is_list
    assert str(field_type) == text


def test_list_type_parses_to_a_list_of_its_element_type_with_spaces_allowed():
    assert parse_type("list<string>") == FieldType("list", FieldType("string"))
    assert parse_type(" list< int64 > ").element == INT64
    assert parse_type("list<float32>").is_list
    assert str(parse_type("list<bool>")) == "list<bool>"


@pytest.mark.parametrize("text", ["float", "int", "list<list<int64>>", "list<>", "list<str>", "", "STRING"])
def test_unknown_type_raises_value_error_listing_the_accepted_types(text):
    with pytest.raises(ValueError) as info:
        parse_type(text)
    message = str(info.value)
    assert repr(text) in message
    for accepted in ("int64", "int32", "float64", "float32", "string", "bytes", "bool", "list<T>"):
        assert accepted in message


def test_parse_schema_keeps_the_mapping_order_and_names_the_bad_field():
    schema = parse_schema({"zone": "string", "trip_id": "int64", "tags": "list<string>"})
    assert list(schema) == ["zone", "trip_id", "tags"]
    assert schema["tags"] == FieldType("list", STRING)
    with pytest.raises(ValueError, match="field 'fare': unknown type 'flaot64'"):
        parse_schema({"trip_id": "int64", "fare": "flaot64"})


def test_schema_mismatch_is_a_value_error():
    assert issubclass(SchemaMismatch, ValueError)


def test_none_stays_none_for_every_type():
    for field_type in (INT64, FLOAT32, STRING, BYTES, BOOL, parse_type("list<int64>")):
        assert coerce(None, field_type) is None


def test_integral_floats_and_integer_strings_coerce_to_int64():
    assert coerce(3.0, INT64) == 3 and type(coerce(3.0, INT64)) is int
    assert coerce("42", INT64) == 42
    assert coerce(" -7 ", INT64) == -7
    assert type(coerce(np.int32(5), INT64)) is int
    assert coerce(2**63 - 1, INT64) == 2**63 - 1


@pytest.mark.parametrize("value", ["3.5", 3.5, "abc", True, "1_000", float("nan"), float("inf"), [1], b"1", "9" * 50])
def test_values_that_are_not_integers_do_not_coerce_to_int64(value):
    with pytest.raises(SchemaMismatch, match="expected int64, got"):
        coerce(value, INT64)


def test_integers_out_of_range_are_rejected_with_the_range():
    with pytest.raises(SchemaMismatch, match="out of range"):
        coerce(2**63, INT64)
    with pytest.raises(SchemaMismatch, match=r"expected int32, got 2147483648 \(out of range"):
        coerce(2**31, INT32)
    assert coerce(-(2**31), INT32) == -(2**31)


def test_ints_and_numeric_strings_coerce_to_float64():
    assert coerce(3, FLOAT64) == 3.0 and type(coerce(3, FLOAT64)) is float
    assert coerce("2.5", FLOAT64) == 2.5
    assert coerce("1e3", FLOAT64) == 1000.0
    assert math.isnan(coerce("nan", FLOAT64))
    assert type(coerce(np.float32(0.5), FLOAT64)) is float
    for bad in ("abc", True, "1_0", b"2.5", [1.0]):
        with pytest.raises(SchemaMismatch, match="expected float64"):
            coerce(bad, FLOAT64)


def test_float32_coercion_rounds_to_the_nearest_float32_and_returns_a_python_float():
    value = coerce(0.1, FLOAT32)
    assert type(value) is float
    assert value == struct.unpack("<f", struct.pack("<f", 0.1))[0]
    assert value != 0.1
    assert value == float(np.float32(0.1))


def test_float32_coercion_rejects_values_beyond_the_float32_range_but_keeps_infinity():
    with pytest.raises(SchemaMismatch, match="out of float32 range"):
        coerce(1e300, FLOAT32)
    assert coerce(float("inf"), FLOAT32) == float("inf")


@given(st.floats(allow_nan=False, width=64).filter(lambda x: abs(x) < 3.4e38))
def test_float32_coercion_gives_a_value_exactly_representable_in_float32(x):
    value = coerce(x, FLOAT32)
    assert float(np.float32(value)) == value
    assert coerce(value, FLOAT32) == value


def test_bytes_coerce_to_string_only_when_they_are_utf8():
    assert coerce(b"caf\xc3\xa9", STRING) == "café"
    with pytest.raises(SchemaMismatch, match=r"expected string, got b'\\xff' \(invalid UTF-8"):
        coerce(b"\xff", STRING)
    with pytest.raises(SchemaMismatch, match="expected string, got 5"):
        coerce(5, STRING)
    with pytest.raises(SchemaMismatch, match="lone surrogate"):
        coerce("\ud800", STRING)


def test_strings_coerce_to_bytes_as_utf8():
    assert coerce("café", BYTES) == b"caf\xc3\xa9"
    assert coerce(bytearray(b"ab"), BYTES) == b"ab" and type(coerce(bytearray(b"ab"), BYTES)) is bytes
    with pytest.raises(SchemaMismatch, match="expected bytes"):
        coerce(1, BYTES)


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), (1, True), (0, False), ("true", True), ("FALSE", False), ("1", True),
     ("0", False), (np.bool_(True), True)],
)
def test_booleans_accept_true_false_zero_one_and_their_strings(value, expected):
    assert coerce(value, BOOL) is expected


@pytest.mark.parametrize("value", [2, "yes", 1.0, "", [True]])
def test_other_values_do_not_coerce_to_bool(value):
    with pytest.raises(SchemaMismatch, match="expected bool"):
        coerce(value, BOOL)


def test_lists_coerce_element_wise_and_name_the_bad_element():
    assert coerce([1, 2.0, "3", None], parse_type("list<int64>")) == [1, 2, 3, None]
    assert coerce((b"a",), parse_type("list<string>")) == ["a"]
    with pytest.raises(SchemaMismatch, match="element 1: expected int64, got 'x'"):
        coerce([1, "x"], parse_type("list<int64>"))
    with pytest.raises(SchemaMismatch, match="expected list<string>, got 'abc'"):
        coerce("abc", parse_type("list<string>"))


def test_mismatch_message_truncates_the_value_repr_to_80_characters():
    with pytest.raises(SchemaMismatch) as info:
        coerce("x" * 10_000, INT64)
    shown = str(info.value).removeprefix("expected int64, got ")
    assert len(shown) == 80
    assert shown.endswith("...")


def test_coerce_record_fills_missing_fields_with_none_and_keeps_other_fields():
    schema = parse_schema({"id": "int64", "fare": "float64", "zone": "string"})
    record = coerce_record({"extra": [1], "fare": 3, "id": "7"}, schema)
    assert record == {"id": 7, "fare": 3.0, "zone": None, "extra": [1]}
    assert list(record) == ["id", "fare", "zone", "extra"]
    with pytest.raises(SchemaMismatch, match="field 'fare': expected float64, got 'abc'"):
        coerce_record({"fare": "abc"}, schema)


_ANY_VALUE = (st.none() | st.booleans() | st.integers() | st.integers(-(2**64), 2**64) | st.floats()
              | st.text(max_size=6) | st.binary(max_size=4)
              | st.lists(st.none() | st.integers() | st.floats() | st.text(max_size=4) | st.booleans(), max_size=3))
_ALL_TYPES = parse_schema({f"f_{name}": name for name in
                           ["int64", "int32", "float64", "float32", "string", "bytes", "bool", "list<int64>",
                            "list<float64>", "list<string>", "list<float32>"]})
_FIELD_NAMES = st.sampled_from(sorted(_ALL_TYPES) + ["extra_a", "extra_b"])


def _coerced_one_by_one(record: dict, schema: dict) -> dict | str:
    try:
        return coerce_record(record, schema)
    except SchemaMismatch as exc:
        return f"error: {exc}"


@given(st.lists(st.dictionaries(_FIELD_NAMES, _ANY_VALUE, max_size=6), min_size=1, max_size=6),
       st.sampled_from([_ALL_TYPES, {"f_int64": INT64}, {"f_string": STRING, "f_float64": FLOAT64}]))
def test_coerce_records_by_column_gives_what_coerce_record_gives_each_record(records, schema):
    got = [f"error: {value}" if isinstance(value, SchemaMismatch) else value
           for value in coerce_records(records, schema)]
    expected = [_coerced_one_by_one(record, schema) for record in records]
    assert [repr(value) for value in got] == [repr(value) for value in expected]  # NaN, -0.0 and order too
    assert [type(v) for g in got if isinstance(g, dict) for v in g.values()] == \
        [type(v) for e in expected if isinstance(e, dict) for v in e.values()]


def test_coerce_records_keeps_a_clean_record_in_schema_order_and_reorders_the_others():
    schema = parse_schema({"id": "int64", "zone": "string"})
    ordered, other = {"id": 1, "zone": "Zürich"}, {"zone": "a", "id": 2}

    same, reordered = coerce_records([ordered], schema), coerce_records([ordered, other], schema)

    assert same[0] is ordered
    assert reordered == [ordered, other] and [list(r) for r in reordered] == [["id", "zone"], ["id", "zone"]]
    assert str(coerce_records([{"id": 1, "zone": "\ud800"}], schema)[0]).startswith("field 'zone'")


def test_coerce_records_takes_clean_columns_whole_and_still_names_the_first_bad_field():
    schema = parse_schema({"id": "int64", "zone": "string", "tags": "list<string>"})
    records = [{"zone": "a", "id": 1, "tags": ["x"]}, {"id": 2**63, "zone": "b"}, {"id": 3, "zone": 4, "more": 1}]
    out = coerce_records(records, schema)
    assert out[0] == {"id": 1, "zone": "a", "tags": ["x"]} and list(out[0]) == ["id", "zone", "tags"]
    assert str(out[1]).startswith("field 'id': expected int64")
    assert str(out[2]).startswith("field 'zone': expected string")
