"""The coder stage: each built-in coder loses exactly what its format loses, and failures are reported."""

from __future__ import annotations

import pickle
import struct
from typing import Any

import numpy as np
import pytest
from apache_beam.coders import Coder, FastPrimitivesCoder
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.encoding import canonical
from parity.capture.schema import parse_schema
from parity.stages.coder import (
    CODER_TYPES,
    ArrowRecordCoder,
    AvroRecordCoder,
    CoderFailure,
    CoderSpec,
    JsonRecordCoder,
    PickleRecordCoder,
    TFExampleRecordCoder,
    build_coder,
    json_roundtrip_known,
    roundtrip_batch,
)

BIG_ID = 2**53 + 1  # not representable as a double
FARE = 12.3  # not representable as a float32
FARE_AS_FLOAT32 = struct.unpack("<f", struct.pack("<f", FARE))[0]

TAXI_TYPES = parse_schema({
    "trip_id": "int64", "fare": "float64", "zone": "string", "tip": "float64", "tags": "list<string>",
    "passengers": "int32", "shared": "bool", "trips_1h": "int64",
})


def taxi_record() -> dict[str, Any]:
    return {"trip_id": BIG_ID, "fare": FARE, "zone": "Zürich Hbf – 東京 🚕", "tip": None,
            "tags": ["airport", "night"], "passengers": 2, "shared": False, "trips_1h": 17}


def roundtrip(coder: Coder, record: dict[str, Any]) -> dict[str, Any]:
    (result,) = roundtrip_batch(coder, [record])
    assert not isinstance(result, CoderFailure), result
    return result


def assert_same_values_and_types(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual == expected
    for name, value in expected.items():
        assert type(actual[name]) is type(value), name


@pytest.mark.parametrize("coder", [
    JsonRecordCoder(), AvroRecordCoder(TAXI_TYPES), PickleRecordCoder(), ArrowRecordCoder(),
], ids=["json", "avro", "pickle", "arrow"])
def test_lossless_coders_round_trip_the_taxi_record_exactly(coder: Coder) -> None:
    assert_same_values_and_types(roundtrip(coder, taxi_record()), taxi_record())


def test_tfexample_rounds_the_fare_to_float32_and_keeps_everything_else() -> None:
    decoded = roundtrip(TFExampleRecordCoder(TAXI_TYPES), taxi_record())

    assert decoded["fare"] == FARE_AS_FLOAT32 != FARE
    assert_same_values_and_types(decoded, {**taxi_record(), "fare": FARE_AS_FLOAT32})


def test_tfexample_without_types_returns_bytes_and_unwraps_single_values() -> None:
    record = {"trip_id": BIG_ID, "fare": FARE, "zone": "Zürich", "tip": None, "tags": ["airport", "night"],
              "one_tag": ["solo"], "flag": True}

    decoded = roundtrip(TFExampleRecordCoder(), record)

    assert decoded == {"trip_id": BIG_ID, "fare": FARE_AS_FLOAT32, "zone": "Zürich".encode(),
                       "tags": [b"airport", b"night"], "one_tag": b"solo", "flag": 1}
    assert type(decoded["flag"]) is int


def test_tfexample_keeps_empty_lists_apart_from_missing_ones() -> None:
    decoded = roundtrip(TFExampleRecordCoder(TAXI_TYPES), {**taxi_record(), "tags": []})
    assert decoded["tags"] == []

    decoded = roundtrip(TFExampleRecordCoder(TAXI_TYPES), {**taxi_record(), "tags": None})
    assert decoded["tags"] is None


def test_tfexample_fills_typed_fields_missing_from_the_record_with_none() -> None:
    record = taxi_record()
    del record["zone"]

    assert roundtrip(TFExampleRecordCoder(TAXI_TYPES), record)["zone"] is None


def test_avro_float32_field_rounds_the_fare() -> None:
    types = {**TAXI_TYPES, **parse_schema({"fare": "float32"})}

    decoded = roundtrip(AvroRecordCoder(types), taxi_record())

    assert_same_values_and_types(decoded, {**taxi_record(), "fare": FARE_AS_FLOAT32})


def test_avro_field_without_a_type_travels_as_its_string() -> None:
    record = {**taxi_record(), "fare_mean_1h": 11.5, "note": None}

    decoded = roundtrip(AvroRecordCoder(TAXI_TYPES), record)

    assert decoded == {**taxi_record(), "fare_mean_1h": "11.5", "note": None}
    assert list(decoded) == sorted(decoded)


def test_avro_accepts_field_type_strings() -> None:
    coder = AvroRecordCoder({"trip_id": "int64", "tags": "list<string>"})

    assert roundtrip(coder, {"trip_id": BIG_ID, "tags": ["a"]}) == {"trip_id": BIG_ID, "tags": ["a"]}


def test_json_turns_bytes_into_str() -> None:
    decoded = roundtrip(JsonRecordCoder(), {"trip_id": 1, "payload": "Zürich".encode()})

    assert decoded == {"trip_id": 1, "payload": "Zürich"}


def test_json_writes_numpy_scalars_as_python_values() -> None:
    decoded = roundtrip(JsonRecordCoder(), {"fare": np.float32(0.1), "n": np.int64(3), "ok": np.bool_(True)})

    assert decoded == {"fare": float(np.float32(0.1)), "n": 3, "ok": True}
    assert type(decoded["fare"]) is float and type(decoded["ok"]) is bool


def test_json_keeps_nan_infinity_and_negative_zero() -> None:
    decoded = roundtrip(JsonRecordCoder(), {"a": float("nan"), "b": float("-inf"), "c": -0.0})

    assert np.isnan(decoded["a"]) and decoded["b"] == float("-inf")
    assert str(decoded["c"]) == "-0.0"


def test_json_int_as_double_rounds_ids_beyond_two_to_the_53() -> None:
    coder = build_coder(CoderSpec("json", options={"int_as_double": True}), TAXI_TYPES)

    decoded = roundtrip(coder, taxi_record())

    assert decoded["trip_id"] == 2**53 and type(decoded["trip_id"]) is int
    assert_same_values_and_types(decoded, {**taxi_record(), "trip_id": 2**53})


def test_pickle_keeps_numpy_scalars_as_numpy_scalars() -> None:
    decoded = roundtrip(PickleRecordCoder(), {"fare": np.float32(0.1)})

    assert type(decoded["fare"]) is np.float32


def test_arrow_promotes_a_list_mixing_ints_and_floats_to_floats() -> None:
    decoded = roundtrip(ArrowRecordCoder(), {"values": [1, 2.5]})

    assert decoded["values"] == [1.0, 2.5] and type(decoded["values"][0]) is float


def test_arrow_round_trips_an_empty_record() -> None:
    assert roundtrip(ArrowRecordCoder(), {}) == {}


@pytest.mark.parametrize("record, coder, exception", [
    ({"trip_id": 2**64}, ArrowRecordCoder(), "OverflowError"),
    ({"trip_id": "abc"}, AvroRecordCoder(TAXI_TYPES), "ValueError"),
    ({"payload": b"\xff\xfe"}, JsonRecordCoder(), "UnicodeDecodeError"),
    ({"nested": {"a": 1}}, TFExampleRecordCoder(), "TypeError"),
    ({"tags": ["a", None]}, TFExampleRecordCoder(TAXI_TYPES), "TypeError"),
    ({"hook": lambda: None}, PickleRecordCoder(), "PicklingError"),
], ids=["arrow-int-overflow", "avro-str-in-long", "json-invalid-utf8", "tfexample-dict",
        "tfexample-null-item", "pickle-lambda"])
def test_a_record_the_format_cannot_hold_becomes_a_coder_failure(
        record: dict[str, Any], coder: Coder, exception: str) -> None:
    good = {"trip_id": 7}

    results = roundtrip_batch(coder, [good, record, good])

    assert results[0]["trip_id"] == results[2]["trip_id"] == 7
    assert isinstance(results[1], CoderFailure)
    assert results[1].message.startswith("encode: " + exception + ": ")


def test_the_pickle_batch_round_trip_gives_each_record_what_its_own_round_trip_gives() -> None:
    records = [taxi_record(), {**taxi_record(), "fare": np.float32(0.1), "tags": []}, {"trip_id": 2**70}]

    batched = roundtrip_batch(PickleRecordCoder(), records)

    assert batched == [pickle.loads(pickle.dumps(record, protocol=4)) for record in records]
    assert [type(value) for value in batched[1].values()] == [type(value) for value in records[1].values()]
    assert all(out is not record for out, record in zip(batched, records))


class _UpperCaseStringsCoder(Coder):
    """A user coder whose sink upper-cases strings."""

    def encode(self, value: dict[str, Any]) -> bytes:
        return pickle.dumps({k: v.upper() if isinstance(v, str) else v for k, v in value.items()})

    def decode(self, encoded: bytes) -> dict[str, Any]:
        return pickle.loads(encoded)


def test_a_custom_beam_coder_from_a_factory_is_used_as_is() -> None:
    coder = build_coder(CoderSpec(factory=_UpperCaseStringsCoder), TAXI_TYPES)

    assert roundtrip(coder, {"zone": "midtown", "n": 1}) == {"zone": "MIDTOWN", "n": 1}


def test_a_beam_builtin_coder_from_a_factory_round_trips_the_record() -> None:
    coder = build_coder(CoderSpec(factory=FastPrimitivesCoder), None)

    assert_same_values_and_types(roundtrip(coder, taxi_record()), taxi_record())


def test_a_custom_coder_that_decodes_to_a_non_dict_becomes_a_coder_failure() -> None:
    (result,) = roundtrip_batch(FastPrimitivesCoder(), [[1, 2]])  # type: ignore[list-item]

    assert result == CoderFailure("decode: TypeError: FastPrimitivesCoder decoded a list, expected a dict")


def test_a_factory_that_returns_no_coder_is_refused() -> None:
    with pytest.raises(TypeError, match="expected an apache_beam.coders.Coder"):
        build_coder(CoderSpec(factory=dict), None)


@pytest.mark.parametrize("kind, expected", [
    ("json", JsonRecordCoder), ("tfexample", TFExampleRecordCoder), ("avro", AvroRecordCoder),
    ("pickle", PickleRecordCoder), ("arrow", ArrowRecordCoder),
])
def test_build_coder_builds_each_type(kind: str, expected: type) -> None:
    assert kind in CODER_TYPES
    assert type(build_coder(CoderSpec(kind), TAXI_TYPES)) is expected


def test_coder_spec_takes_options_as_pairs_from_the_config_loader() -> None:
    assert CoderSpec("json", options=(("int_as_double", True),)).options == {"int_as_double": True}


@pytest.mark.parametrize("kwargs, message", [
    ({"type": "pikle"}, "unknown coder 'pikle'; expected one of json, tfexample, avro, pickle, arrow"),
    ({}, "exactly one of"),
    ({"type": "json", "factory": JsonRecordCoder}, "exactly one of"),
    ({"type": "avro", "options": {"int_as_double": True}}, "coder 'avro' has no option 'int_as_double'"),
    ({"type": "json", "options": {"int_as_double": "yes"}}, "int_as_double must be true or false"),
])
def test_invalid_coder_specs_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CoderSpec(**kwargs)


@pytest.mark.parametrize("coder", [
    JsonRecordCoder(int_as_double=True), TFExampleRecordCoder(TAXI_TYPES), AvroRecordCoder(TAXI_TYPES),
    PickleRecordCoder(), ArrowRecordCoder(),
], ids=["json", "tfexample", "avro", "pickle", "arrow"])
def test_coders_pickle_after_use_and_stay_equal(coder: Coder) -> None:
    roundtrip(coder, taxi_record())

    clone = pickle.loads(pickle.dumps(coder))

    assert clone == coder
    assert roundtrip(clone, taxi_record()) == roundtrip(coder, taxi_record())


def test_deterministic_coders_say_so() -> None:
    coders = (JsonRecordCoder(), TFExampleRecordCoder(), AvroRecordCoder(), PickleRecordCoder(),
              ArrowRecordCoder())

    deterministic = {type(c).__name__: c.is_deterministic() for c in coders}

    assert deterministic == {"JsonRecordCoder": True, "TFExampleRecordCoder": True, "AvroRecordCoder": True,
                             "PickleRecordCoder": False, "ArrowRecordCoder": True}


@pytest.mark.parametrize("kind", ["json", "tfexample", "avro", "arrow"])
def test_deterministic_coders_encode_equal_records_built_in_different_orders_identically(kind: str) -> None:
    coder = build_coder(CoderSpec(kind), TAXI_TYPES)
    record = taxi_record()

    assert coder.encode(record) == coder.encode(dict(reversed(record.items())))


_PLAIN = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80), st.floats(allow_nan=True),
              st.text(max_size=6), st.binary(max_size=6)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=10)


@settings(max_examples=300)
@given(st.lists(st.dictionaries(st.text(max_size=4), _PLAIN, max_size=5), max_size=6))
def test_the_pickle_round_trip_of_plain_records_is_what_pickle_gives_back(records: list[dict]) -> None:
    expected = pickle.loads(pickle.dumps(records, protocol=4))

    batched = roundtrip_batch(PickleRecordCoder(), records)

    # the same types, values and float bits (pickle's own bytes of both), record by record
    assert pickle.dumps(batched, protocol=4) == pickle.dumps(expected, protocol=4)
    assert [canonical.encode(r) for r in batched] == [canonical.encode(r) for r in expected]


class _Zone(str):
    """A str subclass whose pickle gives back a plain str, lower-cased."""

    def __reduce__(self):
        return str, (self.lower(),)


def test_a_batch_with_one_value_that_is_not_plain_goes_through_pickle() -> None:
    records = [taxi_record(), {**taxi_record(), "pickup_zone": _Zone("LOOP")}]

    batched = roundtrip_batch(PickleRecordCoder(), records)

    assert batched[1]["pickup_zone"] == "loop" and type(batched[1]["pickup_zone"]) is str
    assert batched[0] == records[0] and batched[0] is not records[0]


# ------------------------------------------------------------------ the json coder's known round trip


def json_roundtrip(record: Any, int_as_double: bool = False) -> Any:
    """The real round trip, through the coder's own encode and decode."""
    coder = JsonRecordCoder(int_as_double=int_as_double)
    return coder.decode(coder.encode(record))


def same_objects(actual: Any, expected: Any) -> bool:
    """Equal values of the same types, dict keys in the same order, floats bit for bit."""
    if type(actual) is not type(expected):
        return False
    if type(actual) is float:
        return struct.pack("<d", actual) == struct.pack("<d", expected)
    if type(actual) is dict:
        return list(actual) == list(expected) and all(same_objects(actual[k], expected[k]) for k in actual)
    if type(actual) is list:
        return len(actual) == len(expected) and all(map(same_objects, actual, expected))
    return actual == expected


class _Count(int):
    pass


@pytest.mark.parametrize("record", [
    {"trip_id": 7, "fare": 12.3, "zone": "Zürich Hbf – 東京 🚕", "tip": None, "shared": False},
    {"b": 1, "a": 2, "C": 3, "_": 4, "é": 5},  # sorted as json's sort_keys sorts them
    {"zero": -0.0, "tiny": 5e-324, "huge": 1.7976931348623157e308, "whole": 5.0},
    {"flag": True, "count": 1, "off": False, "none": 0},
    {"edge": 2**53, "low": -(2**53)},
    {"tags": ["a", 1, 2.5, None, True], "empty": []},
    {"control": "\x00\n\t\"\\", "astral": "🚕"},
    {},
], ids=["taxi", "key-order", "floats", "bool-vs-int", "ints-at-2-to-the-53", "lists", "escapes", "empty"])
@pytest.mark.parametrize("int_as_double", [False, True], ids=["exact-ints", "int-as-double"])
def test_the_known_json_round_trip_gives_what_the_real_one_gives(record: dict, int_as_double: bool) -> None:
    known = json_roundtrip_known([record])

    assert known is not None
    assert same_objects(known, [json_roundtrip(record, int_as_double)])
    assert list(known[0]) == sorted(record)


def test_the_known_json_round_trip_gives_new_dicts_and_new_lists() -> None:
    record = {"tags": ["a"], "n": 1}

    (known,) = json_roundtrip_known([record])

    assert known is not record and known["tags"] is not record["tags"]


@pytest.mark.parametrize("record", [
    {"x": float("nan")},  # json writes NaN and reads back a new nan: its sign and payload are lost
    {"x": -float("nan")},
    {"x": float("inf")},
    {"x": [float("-inf")]},
    {"x": 2**53 + 1},  # rounded under int_as_double
    {"x": -(2**53) - 1},
    {"x": 10**5000},  # beyond Python's int digit limit: json cannot write it
    {"x": "\ud800"},  # a lone surrogate
    {"x": "\ud83d\ude00"},  # a surrogate pair written as two code points reads back as one: "😀"
    {"\udfff": 1},
    {1: "a"},  # json writes the key as "1"
    {None: "a"},
    {"x": {"y": 1}},
    {"x": [[1]]},
    {"x": (1, 2)},  # read back as a list
    {"x": b"abc"},  # read back as a str
    {"x": _Count(3)},
    {"x": np.float64(1.5)},
    {"x": np.int64(3)},
], ids=["nan", "negative-nan", "inf", "inf-in-list", "beyond-2-to-the-53", "below-minus-2-to-the-53",
        "beyond-digit-limit", "lone-surrogate", "surrogate-pair", "surrogate-key", "int-key", "none-key",
        "nested-dict", "nested-list", "tuple", "bytes", "int-subclass", "numpy-float", "numpy-int"])
def test_the_json_round_trip_is_not_known_for_values_it_may_change(record: dict) -> None:
    assert json_roundtrip_known([{"ok": 1}, record]) is None


@pytest.mark.parametrize("record", [
    {"x": float("nan"), "y": -0.0}, {"x": -float("nan")}, {"x": float("-inf")}, {"x": 2**53 + 1},
    {"x": "\ud83d\ude00"}, {"x": "\ud800"}, {1: "a", 2: True}, {"x": {"y": [1, (2, 3)]}}, {"x": b"abc"},
    {"x": np.float32(0.1)},
], ids=["nan", "negative-nan", "inf", "beyond-2-to-the-53", "surrogate-pair", "lone-surrogate", "int-key",
        "nested", "bytes", "numpy"])
@pytest.mark.parametrize("int_as_double", [False, True], ids=["exact-ints", "int-as-double"])
def test_a_json_batch_with_a_declined_record_gives_each_record_its_real_round_trip(
        record: dict, int_as_double: bool) -> None:
    records = [taxi_record(), record, {"b": 1, "a": [2.5]}]

    batched = roundtrip_batch(JsonRecordCoder(int_as_double=int_as_double), records)

    expected = [json_roundtrip(r, int_as_double) for r in records]
    # NaN is not equal to itself: compare the canonical bytes, which hold the float's bits
    assert [canonical.encode(r) for r in batched] == [canonical.encode(r) for r in expected]
    assert [list(r) for r in batched] == [list(r) for r in expected]


def test_a_json_batch_with_a_record_it_cannot_write_still_fails_only_that_record() -> None:
    records = [{"trip_id": 1}, {"payload": b"\xff"}, {"trip_id": 10**5000}, {1: "a", "b": 2}, {"trip_id": 3}]

    batched = roundtrip_batch(JsonRecordCoder(), records)

    assert batched[0] == {"trip_id": 1} and batched[4] == {"trip_id": 3}
    assert batched[1].message.startswith("encode: UnicodeDecodeError: ")
    assert batched[2].message.startswith("encode: ValueError: ")
    assert batched[3].message.startswith("encode: TypeError: ")


_JSON_KNOWN_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5))
_JSON_ODD_SCALARS = st.one_of(
    st.integers(min_value=2**53 + 1, max_value=2**70), st.integers(max_value=-(2**53) - 1, min_value=-(2**70)),
    st.sampled_from([float("nan"), -float("nan"), float("inf"), float("-inf")]),
    st.sampled_from(["\ud800", "\udfff", "a\ud83d\ude00b"]), st.binary(max_size=4), st.builds(np.float64, st.floats()),
    st.builds(_Count, st.integers(min_value=0, max_value=9)))
_JSON_VALUES = st.recursive(
    st.one_of(_JSON_KNOWN_SCALARS, _JSON_KNOWN_SCALARS, _JSON_KNOWN_SCALARS, _JSON_ODD_SCALARS),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(st.text(max_size=2), inner, max_size=2)),
    max_leaves=4)
_JSON_KEYS = st.one_of(st.text(max_size=3), st.text(max_size=3), st.sampled_from(["\ud800", 1, None, 2.5]))
_JSON_KNOWN_VALUES = st.one_of(_JSON_KNOWN_SCALARS, st.lists(_JSON_KNOWN_SCALARS, max_size=3))
_JSON_KNOWN_RECORDS = st.dictionaries(st.text(max_size=3), _JSON_KNOWN_VALUES, max_size=5)
# most batches all known (so that the known round trip runs), the others with a record of anything
_JSON_BATCHES = st.one_of(
    st.lists(_JSON_KNOWN_RECORDS, max_size=5),
    st.lists(st.text(max_size=3), max_size=4).flatmap(  # every record with the same keys
        lambda keys: st.lists(st.fixed_dictionaries({key: _JSON_KNOWN_VALUES for key in keys}), max_size=5)),
    st.lists(st.one_of(_JSON_KNOWN_RECORDS, st.dictionaries(_JSON_KEYS, _JSON_VALUES, max_size=5)), max_size=5),
    st.builds(lambda records, at, key, odd: records[:at] + [{**(records or [{}])[0], key: odd}] + records[at:],
              st.lists(_JSON_KNOWN_RECORDS, max_size=3), st.integers(0, 3), st.text(max_size=3),  # one odd value
              st.one_of(_JSON_ODD_SCALARS, st.lists(_JSON_ODD_SCALARS, min_size=1, max_size=2))))


def _known_scalar(value: Any) -> bool:
    if type(value) is int:
        return abs(value) <= 2**53
    if type(value) is float:
        return value == value and abs(value) != float("inf")
    if type(value) is str:
        return not any("\ud800" <= char <= "\udfff" for char in value)
    return value is None or type(value) is bool


def _known_record(record: Any) -> bool:
    """The independent statement of which records `json_roundtrip_known` accepts."""
    return type(record) is dict and all(
        type(key) is str and _known_scalar(key) and (
            _known_scalar(value) or type(value) is list and all(_known_scalar(item) for item in value))
        for key, value in record.items())


@settings(max_examples=500)
@given(_JSON_BATCHES, st.booleans())
def test_the_known_json_round_trip_is_the_real_one_for_every_batch_it_accepts_and_declines_all_others(
        records: list[dict], int_as_double: bool) -> None:
    known = json_roundtrip_known(records)

    if not all(_known_record(record) for record in records):
        assert known is None
        return
    assert known is not None
    assert same_objects(known, [json_roundtrip(record, int_as_double) for record in records])
    assert same_objects(roundtrip_batch(JsonRecordCoder(int_as_double=int_as_double), records), known)
