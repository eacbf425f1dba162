"""The diff's and the classifier's fast paths give their references' answers (tests/compare/oracles.py)."""
from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.compare import causes, tolerance
from parity.config import Tolerance
from parity.encoding.canonical import decode, encode
from parity.encoding.fields import differing_fields

from tests.compare import oracles

_NUMBERS = [0.0, -0.0, 1.0, 1.0000001, -1.0, 1.5, 1e300, -1e300, math.inf, -math.inf, math.nan, 5e-324,
            0, 1, -1, 2 ** 70, 2 ** 1100, True, False, np.float32(0.5), np.float64(1.0), np.int64(1), np.bool_(True)]
_OTHERS = ["", "a", "b", "1", b"a", b"", None, [1.0], [1.0, 2.0], {"x": 1.0}, {"x": 1.5}, {"y": 1.0}, {1: 2.0}]
_VALUES = _NUMBERS + _OTHERS
_TOLERANCES = [Tolerance(), Tolerance(abs=0.1), Tolerance(rel=1e-6), Tolerance(abs=math.inf),
               Tolerance(abs=-1.0), Tolerance(abs=math.nan), Tolerance(rel=0.5, abs=1.0)]


def _answer(function, *args):
    """The function's result, or the type of what it raised (the reference raises on ints too big for floats)."""
    try:
        return function(*args)
    except Exception as error:  # noqa: BLE001 - the same exception is the same answer
        return type(error)


def test_values_within_is_the_reference():
    for tol in _TOLERANCES:
        by_name = {"x": Tolerance(abs=1.0)}
        for name in (None, "x", "y"):
            def tol_for(n, tol=tol):
                return by_name.get(n, tol) if n else tol
            for a, b in itertools.product(_VALUES, repeat=2):
                expected = _answer(oracles.values_within, a, b, tol_for, name)
                assert _answer(tolerance.values_within, a, b, tol_for, name) == expected, (a, b, tol, name)
                wrapped = ({"x": a}, {"x": b})
                assert (_answer(tolerance.values_within, *wrapped, tol_for)
                        == _answer(oracles.values_within, *wrapped, tol_for)), (a, b, tol)


def test_same_is_the_reference():
    values = _VALUES + [2 ** 200, -(2 ** 200), "é", "\ud800", b"\x00", 0.1, 0.1 + 1e-17, [0.0], [-0.0], float("-0")]
    for a, b in itertools.product(values, repeat=2):
        assert _answer(causes._same, a, b) == _answer(oracles.same, a, b), (a, b)


_FIELD_VALUES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=3),
                          st.binary(max_size=2), st.lists(st.floats(), max_size=2))


@settings(max_examples=200, deadline=None)
@given(left=st.dictionaries(st.text(max_size=3), _FIELD_VALUES, max_size=5), data=st.data())
def test_classify_input_given_the_split_fields_is_classify_input(left, data):
    right = {k: data.draw(_FIELD_VALUES) if data.draw(st.booleans()) else v for k, v in left.items()}
    lbytes, rbytes = encode(left), encode(right)
    found = differing_fields(lbytes, rbytes)
    assert found is not None
    names = tuple(decode(k) for k, _a, _b in found[0])
    for ctx in (causes.CauseContext(), causes.CauseContext(redact=True, left_name="o", right_name="p")):
        expected = causes.classify_input(decode(lbytes), decode(rbytes), ctx)
        assert causes.classify("input", decode(lbytes), decode(rbytes), ctx, differing=names or None) == expected
