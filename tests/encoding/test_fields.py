"""differing_fields (parity/encoding/fields.py): the C splitter against its Python reference, and what `plain`
promises the tolerance tier (equal fields of a plain pair are within any tolerance of each other)."""

from __future__ import annotations

import datetime
import decimal
import os

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from parity.compare.tolerance import values_within
from parity.config import Tolerance
from parity.encoding import canonical, fields

PROPERTY = settings(max_examples=1500)

if canonical._native is None and os.environ.get("PARITY_PURE_PYTHON", "") in ("", "0"):
    pytest.fail("parity.encoding._canonical is not built: run `make setup` or `.venv/bin/pip install -e .`",
                pytrace=False)
native = canonical._native
needs_c = pytest.mark.skipif(native is None, reason="PARITY_PURE_PYTHON=1: no C splitter to compare")


def _same_as_reference(left, right) -> None:
    reference = fields._differing_fields_py(left, right)
    assert fields.differing_fields(left, right) == reference
    if native is not None:
        fast = native.differing_fields(left, right)
        assert fast is NotImplemented or fast == reference, (left, right, fast, reference)


def test_a_record_pair_splits_into_the_fields_that_differ():
    left = canonical.encode({"fare": 8.5, "company": "A", "tags": ["x"], "trip_id": 1})
    right = canonical.encode({"fare": 8.5, "company": "B", "tags": ["x"], "trip_id": 1})
    assert fields.differing_fields(left, right) == ([(canonical.encode("company"), canonical.encode("A"),
                                                      canonical.encode("B"))], True, None)
    _same_as_reference(left, right)


def test_markers_name_their_only_field_and_other_keys_give_none():
    late, error = canonical.encode({"dropped": "late"}), canonical.encode({"error": "boom"})
    assert fields.differing_fields(late, late) == ([], True, canonical.encode("dropped"))
    assert fields.differing_fields(late, error) is None
    assert fields.differing_fields(late, canonical.encode([1])) is None
    assert fields.differing_fields(None, late) is None
    for left, right in ((late, error), (late, late), (None, late), (b"", b""), (late, b"d\x01")):
        _same_as_reference(left, right)


def test_equal_fields_holding_sets_decimals_huge_ints_or_other_keys_are_not_plain():
    for odd in (frozenset({1.0}), decimal.Decimal("NaN"), 2**1100, {1: "a"}, {(float("nan"),): 1},
                [frozenset()]):
        left = canonical.encode({"a": odd, "b": 1})
        right = canonical.encode({"a": odd, "b": 2})
        assert fields.differing_fields(left, right)[1] is False, odd
        _same_as_reference(left, right)
    for fine in (None, True, 2**900, float("nan"), np.float32("nan"), "s", b"b", [1, [2.5]], {"k": {"j": []}},
                 datetime.datetime(2024, 1, 1), datetime.date(2024, 1, 1)):
        left = canonical.encode({"a": fine, "b": 1})
        right = canonical.encode({"a": fine, "b": 2})
        assert fields.differing_fields(left, right)[1] is True, fine
        _same_as_reference(left, right)
    assert fields.differing_fields(canonical.encode({1: "a"}), canonical.encode({1: "b"}))[1] is False


def test_nesting_deeper_than_c_goes_is_left_to_the_reference():
    for depth in (99, 100, 101, 150, 300):
        value: object = 1
        for _ in range(depth):
            value = [value] if depth % 2 else {"k": value}
        left = canonical.encode({"a": value, "b": 1})
        right = canonical.encode({"a": value, "b": 2})
        assert fields.differing_fields(left, right)[1] is True
        _same_as_reference(left, right)


_TEXT = st.text(max_size=6)
_HASHABLE = st.none() | st.booleans() | st.integers() | st.floats() | _TEXT | st.binary(max_size=4)
_SCALARS = (_HASHABLE | st.integers(-(2**1100), 2**1100) | st.floats(width=32).map(np.float32)
            | st.decimals(places=2) | st.dates() | st.frozensets(_HASHABLE, max_size=3))
_VALUES = st.recursive(_SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(_TEXT, c, max_size=3)
                       | st.dictionaries(_HASHABLE, c, max_size=2), max_leaves=12)
_RECORDS = st.dictionaries(_TEXT | _HASHABLE, _VALUES, max_size=6)


# The slow tier (`make test`, not `make test-fast`): the heaviest of the 1,500-example properties.
@pytest.mark.slow
@PROPERTY
@given(_RECORDS, _RECORDS, st.data())
def test_c_and_python_split_record_pairs_alike(left, right, data):
    shared = {**left, **right}
    changed = {k: data.draw(_VALUES) if data.draw(st.booleans()) else v for k, v in shared.items()}
    for a, b in ((shared, changed), (left, right), (shared, shared)):
        _same_as_reference(canonical.encode(a), canonical.encode(b))
    raw = canonical.encode(changed)
    if raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        _same_as_reference(canonical.encode(shared), raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1:])
        _same_as_reference(canonical.encode(shared), raw[:at])


@PROPERTY
@given(_RECORDS, st.floats(0, 10), st.floats(0, 10))
def test_the_equal_fields_of_a_plain_pair_are_within_any_tolerance(record, abs_tol, rel_tol):
    assume(len({canonical.encode(key) for key in record}) == len(record))  # else: the next test
    data = canonical.encode(record)
    found = fields.differing_fields(data, data)
    assert found is not None and found[0] == []
    if found[1]:  # decoded twice, as the diff decodes the two sides
        assert values_within(canonical.decode(data), canonical.decode(data), lambda _n: Tolerance(abs_tol, rel_tol))


def test_a_dict_whose_keys_share_their_bytes_is_not_split_and_the_diff_decodes_it_whole():
    record = {float("nan"): None, float("nan"): 1}  # two NaN objects: two keys, one canonical key
    data = canonical.encode(record)

    assert fields.differing_fields(data, data) is None
    assert len(canonical.decode(data)) == 2


@needs_c
@PROPERTY
@given(st.binary(max_size=30), st.binary(max_size=30))
def test_c_and_python_agree_on_arbitrary_bytes(left, right):
    _same_as_reference(b"d" + left, b"d" + right)
    _same_as_reference(b"d" + left, b"d" + left)
