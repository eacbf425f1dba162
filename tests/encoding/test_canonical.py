"""Canonical encoding v1: the properties fingerprints rely on."""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.encoding.canonical import decode, encode, encode_many, to_json

from tests.encoding.strategies import nested, text

ROOT = Path(__file__).resolve().parents[2]
PROPERTY = settings(max_examples=2000)


def _roundtrips(value) -> bool:
    data = encode(value)
    return encode(decode(data)) == data


def test_dict_key_order_does_not_change_the_bytes():
    assert encode({"a": 1, "b": [2.0], "c": None}) == encode({"c": None, "b": [2.0], "a": 1})
    assert encode({1: "x", "1": "y"}) == encode({"1": "y", 1: "x"})


def test_one_one_point_zero_true_string_one_and_bytes_one_all_differ():
    encodings = {encode(v) for v in (1, 1.0, True, "1", b"1", np.float32(1.0), decimal.Decimal(1))}
    assert len(encodings) == 7


def test_dicts_that_python_calls_equal_but_differ_in_key_type_encode_differently():
    assert {1: "x"} == {True: "x"}
    assert encode({1: "x"}) != encode({True: "x"})
    assert encode({"a": 1}) != encode({"a": True})


def test_every_nan_payload_encodes_the_same():
    payloads = ["7ff8000000000000", "7ff0000000000001", "fff8000000000000", "7fffffffffffffff"]
    nans = [struct.unpack(">d", bytes.fromhex(p))[0] for p in payloads] + [float("nan"), np.float64("nan")]
    assert {encode(x) for x in nans} == {bytes.fromhex("667ff8000000000000")}
    nans32 = np.frombuffer(bytes.fromhex("7fc00000ffc000017f800001"), dtype=">f4")
    assert {encode(x) for x in nans32} | {encode(np.float32("nan"))} == {bytes.fromhex("677fc00000")}


def test_negative_zero_differs_from_zero():
    assert encode(-0.0) != encode(0.0)
    assert encode(np.float32(-0.0)) != encode(np.float32(0.0))
    assert math.copysign(1.0, decode(encode(-0.0))) == -1.0


def test_float32_differs_from_float64_of_the_same_value():
    assert float(np.float32(0.5)) == 0.5
    assert encode(np.float32(0.5)) != encode(0.5)
    assert type(decode(encode(np.float32(0.5)))) is np.float32


def test_float16_encodes_as_float32():
    assert encode(np.float16(1.5)) == encode(np.float32(1.5))


def test_numpy_integers_encode_like_python_ints():
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        assert encode(t(7)) == encode(7), t
    assert encode(np.uint64(2**64 - 1)) == encode(2**64 - 1)
    assert encode(np.bool_(True)) == encode(True)
    assert encode(np.float64(0.1)) == encode(0.1)


def test_big_ints_beyond_64_bits_round_trip():
    for n in (2**63, -(2**63) - 1, 2**64, -(2**64), 2**1024 + 1, -(3**700)):
        assert decode(encode(n)) == n
    assert encode(2**64) != encode(2**64 + 1)


def test_ints_use_minimal_twos_complement():
    assert encode(0).hex() == "690100"
    assert encode(127).hex() == "69017f"
    assert encode(128).hex() == "69020080"
    assert encode(-128).hex() == "690180"
    assert encode(-129).hex() == "6902ff7f"


def test_int_subclasses_encode_as_their_integer_value():
    class Flag(enum.IntFlag):
        A = 1
        B = 2

    assert encode(Flag.A | Flag.B) == encode(3)
    assert encode(enum.IntEnum("E", {"X": -5}).X) == encode(-5)


def test_nested_values_round_trip():
    value = {"trip": {"id": 7, "tags": ["a", "b"], "geo": (1.5, -2.5)}, "raw": b"\x00\xff", "w": [[None]],
             "s": {"x", "y"}, "when": datetime.date(2024, 1, 2), 3: decimal.Decimal("1.50")}
    back = decode(encode(value))
    assert back["trip"]["geo"] == [1.5, -2.5]
    assert back["s"] == frozenset({"x", "y"})
    assert back[3] == decimal.Decimal("1.50")
    assert encode(back) == encode(value)


def test_tuples_encode_like_lists_and_decode_as_lists():
    assert encode((1, "a")) == encode([1, "a"])
    assert decode(encode((1, "a"))) == [1, "a"]
    assert decode(encode({(1, 2): "k"})) == {(1, 2): "k"}


def test_sets_encode_in_canonical_order_and_decode_to_frozensets():
    assert encode({"b", "a", 3}) == encode(frozenset({3, "a", "b"}))
    assert decode(encode({"b", "a"})) == frozenset({"a", "b"})
    assert encode(decode(encode({(1, "x"), (2, "y")}))) == encode({(2, "y"), (1, "x")})


def test_strings_are_not_unicode_normalised():
    assert encode("\u00e9") != encode("e\u0301")
    assert _roundtrips("\ud800 lone surrogate")


def test_long_strings_and_bytes_carry_multi_byte_lengths():
    for value in ("x" * 300, b"y" * 70_000, list(range(200))):
        assert _roundtrips(value)
    assert encode("x" * 200)[:3].hex() == "73c801"


def test_bytes_like_values_encode_as_bytes():
    assert encode(bytearray(b"ab")) == encode(memoryview(b"ab")) == encode(b"ab") == encode(np.bytes_(b"ab"))
    assert decode(encode(bytearray(b"ab"))) == b"ab"


def test_aware_datetimes_are_converted_to_utc_and_naive_ones_read_as_utc():
    naive = datetime.datetime(2024, 3, 10, 10, 0, 0, 1)
    aware = datetime.datetime(2024, 3, 10, 12, 0, 0, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert encode(naive) == encode(aware)
    assert decode(encode(naive)) == naive.replace(tzinfo=datetime.timezone.utc)
    assert encode(datetime.datetime(1970, 1, 1)).hex() == "740000000000000000"
    assert encode(datetime.date(1970, 1, 2)).hex() == "440000000000000001"
    assert encode(datetime.date(2024, 1, 1)) != encode(datetime.datetime(2024, 1, 1))


def test_numpy_arrays_encode_element_wise_with_types_from_the_dtype():
    assert encode(np.array([1, 2], dtype=np.int32)) == encode([1, 2])
    assert encode(np.array([0.5, 1.0])) == encode([0.5, 1.0])
    assert encode(np.array([0.5], dtype=np.float32)) == encode([np.float32(0.5)])
    assert encode(np.array([[1.5]], dtype=np.float32)) == encode([[np.float32(1.5)]])
    assert encode(np.array([np.nan], dtype=np.float32)) == encode([np.float32("nan")])
    assert encode(np.array(["a", "b"])) == encode(["a", "b"])
    assert encode(np.array(4)) == encode(4)
    assert encode(np.array([True])) == encode([True])


def test_unsupported_types_raise_type_error_naming_the_type():
    with pytest.raises(TypeError, match="builtins.object"):
        encode(object())
    with pytest.raises(TypeError, match="builtins.complex"):
        encode({"deep": [1, {"x": 1j}]})
    with pytest.raises(TypeError, match="complex128"):
        encode(np.array([1j]))
    with pytest.raises(TypeError, match="Point"):
        encode(type("Point", (), {})())
    with pytest.raises(TypeError, match="builtins.object"):
        to_json([object()])


def test_str_subclasses_encode_and_render_as_their_characters():
    color = enum.Enum("Color", {"RED": "r"}, type=str).RED
    assert encode(color) == encode("r")
    assert to_json({color: color}) == {"r": "r"}


def test_container_subclasses_encode_like_their_base():
    point = collections.namedtuple("Point", "x y")(1, 2)
    assert encode(point) == encode([1, 2])
    assert encode(collections.OrderedDict([("b", 1), ("a", 2)])) == encode({"a": 2, "b": 1})


def test_dict_keys_with_equal_canonical_bytes_still_encode_deterministically():
    first, second = float("nan"), float("nan")
    assert encode({first: 1, second: 2}) == encode({second: 2, first: 1})
    assert _roundtrips({first: 1, second: 2})


def test_encode_many_equals_encode_of_each_value():
    values = [None, {"a": 1}, [1.5, "x"], 2**70, np.float32(3)]
    assert encode_many(values) == [encode(v) for v in values]


@pytest.mark.parametrize("data, reason", [
    ("", "truncated"), ("4e4e", "trailing"), ("690300", "truncated"), ("66000000", "truncated"),
    ("69020001", "non-canonical"),                # 1 with a non-minimal length
    ("667ff8000000000001", "non-canonical"),      # a NaN other than the canonical one
    ("6402730162690101730161690102", "non-canonical"),  # dict keys out of order
    ("6502690102690101", "non-canonical"),        # set items out of order
    ("6502690101690101", "non-canonical"),        # a set with the same item twice
    ("6c8000", "non-canonical"),                  # a list length as a non-minimal uleb128
    ("640254690101690101690102", "non-canonical"),  # {True: 1, 1: 2} collapses in Python
    ("6d05312e304531", "non-canonical"),          # Decimal("1.0E1") prints as "10"
    ("6d0178", "invalid canonical bytes"), ("6d0331e001", "ascii"), ("73029fff", "utf-8"),
    ("7a", "unknown canonical tag 0x7a"), ("64016400690101", "invalid canonical bytes"),  # a dict as a key
    ("64016400", "truncated"),
    ("747fffffffffffffff", "invalid canonical bytes"), ("447fffffffffffffff", "invalid canonical bytes"),
])
def test_decode_rejects_bytes_that_are_not_canonical(data, reason):
    raw = bytes.fromhex(data)
    with pytest.raises(ValueError, match=reason):
        decode(raw)


def test_encode_is_stable_across_processes_with_other_hash_seeds():
    value = {"zone": "JFK", "tags": {"night", "airport", "toll", "shared"}, "ids": frozenset({"a", "b", "c"}),
             "fare": 12.5}
    script = (
        "from parity.encoding.canonical import encode\n"
        "print(encode({'zone': 'JFK', 'tags': {'night', 'airport', 'toll', 'shared'},"
        " 'ids': frozenset({'a', 'b', 'c'}), 'fare': 12.5}).hex())\n"
    )
    outputs = set()
    for seed in ("1", "2", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                              check=True)
        outputs.add(done.stdout.strip())
    assert outputs == {encode(value).hex()}


def test_to_json_renders_special_floats_as_strings():
    assert to_json([float("nan"), float("inf"), float("-inf"), 1.5, np.float32(0.5)]) == [
        "NaN", "Infinity", "-Infinity", 1.5, 0.5]


def test_to_json_renders_bytes_as_text_or_base64():
    assert to_json(b"abc") == {"$bytes": "abc"}
    assert to_json(b"\xff\x00") == {"$base64": "/wA="}


def test_to_json_orders_dict_keys_canonically_and_renders_other_keys_as_json_text():
    rendered = to_json({"b": 1, "a": 2, 5: None, (1, "x"): 0, None: 3})
    assert list(rendered) == ["null", "5", "[1,\"x\"]", "a", "b"]


def test_to_json_strings_are_always_encodable_as_utf_8():
    rendered = to_json({"\ud800": "x\udfff"})
    assert rendered == {"\\ud800": "x\\udfff"}
    json.dumps(rendered, ensure_ascii=False).encode("utf-8")


def test_to_json_renders_sets_sorted_and_datetimes_in_iso_8601_utc():
    assert to_json({"b", "a"}) == ["a", "b"]
    local = datetime.datetime(2024, 1, 1, 2, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert to_json(local) == "2024-01-01T00:00:00+00:00"
    assert to_json(datetime.datetime(2024, 1, 1)) == "2024-01-01T00:00:00+00:00"
    assert to_json(datetime.date(2024, 1, 1)) == "2024-01-01"
    assert to_json(decimal.Decimal("1.10")) == "1.10"


def test_to_json_is_deterministic_and_serialisable():
    value = {"z": {3, 1, 2}, "a": [np.int64(1), np.float32(2.5), b"x", None, True], "n": float("nan")}
    text = json.dumps(to_json(value), allow_nan=False)
    assert text == json.dumps(to_json(dict(reversed(list(value.items())))), allow_nan=False)


# ------------------------------------------------------------------------------------------ properties

_TEXT = text(20)
_SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-(2**130), 2**130) | st.floats()
            | st.floats(width=32).map(np.float32) | _TEXT | st.binary(max_size=20))
_HASHABLE = st.none() | st.booleans() | st.integers() | _TEXT | st.binary(max_size=8)
_VALUES = nested(_SCALARS | st.frozensets(_HASHABLE, max_size=5), keys=_TEXT, dict_size=5, hashable_keys=None,
                 max_leaves=25)


@PROPERTY
@given(_VALUES)
def test_decoding_then_encoding_gives_back_the_same_bytes(value):
    data = encode(value)
    assert encode(decode(data)) == data


_FIELDS = _SCALARS | st.lists(_SCALARS, max_size=3) | st.dictionaries(_TEXT, _SCALARS, max_size=3)


@PROPERTY
@given(st.dictionaries(_TEXT, _FIELDS, max_size=8))
def test_dict_insertion_order_never_changes_the_bytes(value):
    assert encode(dict(reversed(list(value.items())))) == encode(value)


@PROPERTY
@given(st.lists(st.integers(-(2**70), 2**70), max_size=4), st.lists(st.floats(), max_size=4))
def test_numbers_decode_to_their_exact_values(ints, floats):
    assert decode(encode(ints)) == ints
    back = decode(encode(floats))
    assert [struct.pack(">d", x) for x in back if x == x] == [struct.pack(">d", x) for x in floats if x == x]
