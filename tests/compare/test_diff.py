"""The tolerance tier: numeric differences within tolerance, but never type changes."""
import numpy as np

from parity.compare.tolerance import numeric_within, values_within
from parity.config import Tolerance


def _tol(abs_=0.0, rel=0.0):
    return lambda _name: Tolerance(abs_, rel)


def test_numbers_within_abs_plus_rel_tolerance_are_within():
    assert values_within({"x": 1.0}, {"x": 1.0000001}, _tol(rel=1e-6))
    assert not values_within({"x": 1.0}, {"x": 1.1}, _tol(rel=1e-6))


def test_an_int_that_became_a_float_is_a_type_change_not_a_numeric_difference():
    assert not values_within({"x": 3}, {"x": 3.0}, _tol(abs_=1.0))


def test_float32_and_float64_of_the_same_value_are_within_tolerance():
    assert values_within({"x": np.float32(0.5)}, {"x": 0.5}, _tol())


def test_nan_pairs_with_nan_only_and_strings_must_be_equal():
    assert numeric_within(float("nan"), float("nan"), Tolerance())[0]
    assert not numeric_within(float("nan"), 1.0, Tolerance(abs=10))[0]
    assert not values_within({"s": "a"}, {"s": "b"}, _tol(abs_=10))
