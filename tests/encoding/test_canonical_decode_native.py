"""The C decoder and field splitter (parity.encoding._canonical) against the pure Python reference.

The reference is ``canonical._decode_py`` and ``canonical._dict_fields_py``; ``canonical.decode`` and
``canonical.dict_fields`` are the C ones whenever the extension is built. C decodes only what the reference
accepts and hands everything else to it, so values, errors and messages must be the reference's own.
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.encoding import canonical

from tests.encoding.strategies import HASHABLE, TEXT, nested

ROOT = Path(__file__).resolve().parents[2]
PROPERTY = settings(max_examples=2000)
VECTORS = json.loads((ROOT / "fixtures" / "canonical" / "vectors.json").read_text(encoding="ascii"))

if canonical._native is None and os.environ.get("PARITY_PURE_PYTHON", "") in ("", "0"):
    pytest.fail("parity.encoding._canonical is not built: run `make setup` or `.venv/bin/pip install -e .`",
                pytrace=False)
pytestmark = pytest.mark.skipif(canonical._native is None, reason="PARITY_PURE_PYTHON=1: no C decoder to compare")
native = canonical._native


def _typed(value) -> str:
    """The value as text with its type at every depth (repr alone would not tell an int from a numpy int); set
    items in a fixed order (a set of NaNs iterates in an order of their ids)."""
    if isinstance(value, dict):
        return "dict{" + ",".join(f"{_typed(k)}:{_typed(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return type(value).__name__ + "[" + ",".join(_typed(x) for x in value) + "]"
    if isinstance(value, frozenset):
        return "frozenset{" + ",".join(sorted(_typed(x) for x in value)) + "}"
    return f"{type(value).__name__}:{value!r}"


def _outcome(function, data):
    """What a decoder makes of `data`: the value (typed) and its bytes, or the error's type and message."""
    try:
        value = function(data)
    except Exception as exc:  # noqa: BLE001  (the C decoder may pass on what a leaf raised)
        return ("error", type(exc).__name__, str(exc))
    return ("value", _typed(value), canonical.encode(value))


def _same_as_reference(data) -> None:
    reference = _outcome(canonical._decode_py, data)
    assert _outcome(canonical.decode, data) == reference
    fast = _outcome(native.decode_c, data)
    assert fast == reference or fast[0] == "error", (fast, reference)  # C leaves what it does not take
    assert canonical.dict_fields(data) == canonical._dict_fields_py(data)
    split = native.dict_fields(data)
    assert split is NotImplemented or split == canonical._dict_fields_py(data)


def _vector_bytes():
    return [bytes.fromhex(v["bytes"]) for v in VECTORS]


def test_the_public_decode_and_dict_fields_are_the_c_ones_when_it_is_built():
    assert canonical.decode is native.decode
    assert canonical.dict_fields is canonical._dict_fields_c


def test_every_golden_vector_decodes_in_c_as_in_python():
    vectors = _vector_bytes()
    assert len(vectors) > 20
    for data in vectors:
        assert _outcome(native.decode_c, data) == _outcome(canonical._decode_py, data)
        _same_as_reference(data)


def test_every_truncation_and_every_byte_change_of_a_golden_vector_gives_the_reference_outcome():
    for data in _vector_bytes():
        for cut in range(len(data)):
            _same_as_reference(data[:cut])
        _same_as_reference(data + b"\x00")
        for at in range(len(data)):
            for byte in (0x00, 0x01, 0x7F, 0x80, 0xFF, data[at] ^ 0x01):
                _same_as_reference(data[:at] + bytes([byte]) + data[at + 1:])


def test_non_canonical_forms_are_refused_with_the_reference_message():
    cases = [
        b"i\x02\x00\x01",                              # non-minimal int
        b"i\x00",                                      # int without bytes
        b"s\x81\x00",                                  # non-minimal length
        b"f\x7f\xf8\x00\x00\x00\x00\x00\x01",          # another NaN
        b"g\x7f\xc0\x00\x01",
        b"d\x02s\x01bNs\x01aN",                        # keys out of order
        b"d\x02i\x01\x01NTN",                          # keys equal in Python (1 and True)
        b"e\x02s\x01bs\x01a",                          # set items out of order
        b"d\x01l\x01NN",                               # a list key: a tuple
        b"d\x01d\x00NN"[:4],                           # truncated
        b"d\x01d\x00N",                                # an unhashable key
        b"m\x03abc",                                   # not a Decimal
        b"m\x031.0"[:4],
        b"D\x7f\xff\xff\xff\xff\xff\xff\xff",          # beyond the date range
        b"t\x7f\xff\xff\xff\xff\xff\xff\xff",
        b"l\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01N",  # a count beyond 64 bits
        b"s\xff\xff\xff\xff\xff\xff\xff\xff\x7f",
        b"\x00", b"", b"N\x00", b"Z",
    ]
    for data in cases:
        reference = _outcome(canonical._decode_py, data)
        assert reference[0] == "error" or data == b"d\x01l\x01NN", data
        _same_as_reference(data)


def test_nesting_deeper_than_c_goes_is_decoded_or_refused_by_the_reference():
    for depth in (99, 100, 101, 150, 251):
        value: object = "x"
        for _ in range(depth):
            value = [value] if depth % 2 else {"k": value}
        data = canonical.encode(value)
        assert canonical.decode(data) == value
        _same_as_reference(data)
        dict_data = canonical.encode({"a": value, "b": 1})
        assert canonical.dict_fields(dict_data) == canonical._dict_fields_py(dict_data)
    deep = b"l\x01" * 50_000 + b"N"  # the reference's recursion limit: the same RecursionError
    assert _outcome(canonical.decode, deep)[:2] == _outcome(canonical._decode_py, deep)[:2] == (
        "error", "RecursionError")
    with pytest.raises(RecursionError):
        canonical._dict_fields_py(b"d\x01s\x01a" + deep)
    with pytest.raises(RecursionError):
        canonical.dict_fields(b"d\x01s\x01a" + deep)


def test_bytes_likes_and_none_are_taken_as_the_reference_takes_them():
    data = canonical.encode({"a": [1, 2.5]})
    assert canonical.decode(bytearray(data)) == canonical.decode(memoryview(data)) == {"a": [1, 2.5]}
    assert canonical.dict_fields(None) is None and canonical.dict_fields(b"") is None
    for split in (canonical.dict_fields, canonical._dict_fields_py):  # a bytearray key: the reference's TypeError
        with pytest.raises(TypeError, match="unhashable type: 'bytearray'"):
            split(bytearray(data))


def test_datetimes_dates_decimals_and_float32_come_back_as_the_reference_gives_them():
    value = {"t": datetime.datetime(2024, 3, 10, 10, 34, 56, 789012), "d": datetime.date(2024, 3, 10),
             "m": decimal.Decimal("1.10"), "g": np.float32(0.1), "n": np.float32("nan"),
             "keys": {(1, "a"): frozenset({datetime.date(2020, 1, 1), decimal.Decimal("-0")})}}
    data = canonical.encode(value)
    assert _outcome(native.decode_c, data) == _outcome(canonical._decode_py, data)
    assert type(canonical.decode(data)["g"]) is np.float32


# ------------------------------------------------------------------------------------------ properties

_SCALARS = (HASHABLE | st.floats(width=32).map(np.float32) | st.decimals(places=3)
            | st.datetimes(datetime.datetime(1900, 1, 1), datetime.datetime(2200, 1, 1)))
_VALUES = nested(_SCALARS | st.frozensets(HASHABLE, max_size=4))


@PROPERTY
@given(_VALUES)
def test_c_and_python_decode_every_encodable_value_alike(value):
    data = canonical.encode(value)
    assert _outcome(native.decode_c, data) == _outcome(canonical._decode_py, data)
    _same_as_reference(data)


# The slow tier (`make test`, not `make test-fast`): the heaviest of the 2,000-example properties.
@pytest.mark.slow
@PROPERTY
@given(st.dictionaries(TEXT | HASHABLE, _VALUES, max_size=8), st.data())
def test_c_and_python_agree_on_damaged_dict_bytes(value, draw):
    data = canonical.encode(value)
    _same_as_reference(data)
    if data:
        at = draw.draw(st.integers(0, len(data) - 1))
        cut = draw.draw(st.integers(0, len(data)))
        byte = draw.draw(st.integers(0, 255))
        _same_as_reference(data[:at] + bytes([byte]) + data[at + 1:])
        _same_as_reference(data[:cut])
        _same_as_reference(data[:at] + data[at + 1:])


@PROPERTY
@given(st.binary(max_size=40))
def test_c_and_python_agree_on_arbitrary_bytes(data):
    _same_as_reference(data)
    _same_as_reference(b"d" + data)
    _same_as_reference(b"l" + data)


def test_dict_keys_decode_as_the_reference_decodes_them_past_the_key_cache():
    # the C decoder keeps decoded keys of up to 40 bytes in 1024 slots: more names than slots, names that share
    # a slot, names past 40 bytes, lone surrogates and non-ASCII names all come back as the reference's
    names = [f"field_{i}" for i in range(3000)] + ["x" * 39, "x" * 40, "x" * 41, "é" * 30, "\ud800", "", "a\x00b"]
    for round_ in range(2):  # the second time, from the cache where they stayed
        for start in range(0, len(names), 50):
            value = {name: [round_, name] for name in names[start:start + 50]}
            data = canonical.encode(value)
            decoded = canonical.decode(data)
            assert decoded == canonical._decode_py(data) == value
            assert list(decoded) == list(canonical._decode_py(data))


def test_a_decoded_key_is_hashed_and_usable_as_any_str():
    data = canonical.encode({"zone": 1, "fare": 2.5})
    first, second = canonical.decode(data), canonical.decode(data)
    assert first == second == {"zone": 1, "fare": 2.5}
    assert {key: None for key in first}.keys() == {"zone", "fare"}
