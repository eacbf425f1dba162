"""Analysis noise (parity.compare.noise): which analyzer outputs are noise, and the bound each feature gets.

The oracle is float32 arithmetic done here with numpy: a z-score computed as TFT's graph computes it, once with
each side's constants; every record's difference must fall within the bound, and a 1e-6 change must not.
"""
import math

import numpy as np
import pytest

from parity.compare import analyzers
from parity.compare.noise import AnalysisNoise, judge
from parity.compare.tolerance import values_within
from parity.config import Tolerance, ToleranceSpec

MEAN, VAR = "constant:scale_to_z_score_sub_y", "constant:scale_to_z_score_sqrt_x"
FEEDS = {MEAN: ["fare_xf"], VAR: ["fare_xf"]}


def _f32(x: float) -> float:
    return float(np.float32(x))


def _next(x: float, ulps: int = 1) -> float:
    value = np.float32(x)
    for _ in range(abs(ulps)):
        value = np.nextafter(value, np.float32(np.inf if ulps > 0 else -np.inf))
    return float(value)


def _judged(left: dict, right: dict, lf: dict = FEEDS, rf: dict = FEEDS) -> tuple[list[dict], AnalysisNoise]:
    return judge(analyzers.compare(left, right), left, right, lf, rf)


def _z(x: np.ndarray, mean: float, var: float) -> np.ndarray:
    """y = (x - mean) / sqrt(var) in float32, as TFT's scale_to_z_score graph computes it."""
    return (x.astype(np.float32) - np.float32(mean)) / np.sqrt(np.float32(var))


def test_statistics_that_differ_in_their_last_bits_are_marked_noise_and_give_their_feature_a_bound():
    left = {MEAN: _f32(8.177), VAR: _f32(20.0666)}
    right = {MEAN: _next(left[MEAN], 2), VAR: _next(left[VAR], -3)}
    entries, noise = _judged(left, right)
    assert [e.get("noise") for e in entries] == [True, True]
    assert all(e["equal"] for e in entries)  # the words stay "equal within float32 rounding"
    assert noise.judged == (VAR, MEAN) and noise.features == {"fare_xf"} and not noise.unbounded
    bound, = noise.bounds
    assert bound.analyzers == (VAR, MEAN) and 0 < bound.abs < 1e-6 and 0 < bound.rel < 1e-6
    assert "scale_to_z_score" in bound.why and repr(left[MEAN]) in bound.why


def test_every_record_of_a_float32_z_score_moved_by_noisy_constants_is_within_the_bound():
    rng = np.random.default_rng(7)
    x = rng.lognormal(2.0, 0.6, 20_000).astype(np.float32)
    left = {MEAN: _f32(float(x.mean())), VAR: _f32(float(x.var()))}
    for ulps in (1, 3, 8):
        right = {MEAN: _next(left[MEAN], ulps), VAR: _next(left[VAR], -ulps)}
        _entries, noise = _judged(left, right)
        tol = noise.widen(ToleranceSpec()).for_feature("fare_xf")
        yl, yr = _z(x, left[MEAN], left[VAR]), _z(x, right[MEAN], right[VAR])
        assert (yl != yr).mean() > 0.5  # most records differ
        within = np.abs(yl.astype(np.float64) - yr) <= tol.abs + tol.rel * np.abs(yr.astype(np.float64))
        assert within.all(), (ulps, int((~within).sum()))


def test_a_change_of_one_in_a_million_on_a_noisy_feature_is_beyond_its_bound():
    x = np.linspace(1.0, 40.0, 2_000, dtype=np.float32)
    left = {MEAN: _f32(8.177), VAR: _f32(20.0666)}
    right = {MEAN: _next(left[MEAN]), VAR: _next(left[VAR])}
    _entries, noise = _judged(left, right)
    tol = noise.widen(ToleranceSpec()).for_feature("fare_xf")
    yl = _z(x, left[MEAN], left[VAR]).astype(np.float64)
    yr = _z(x * np.float32(1 + 1e-6), right[MEAN], right[VAR]).astype(np.float64)  # a serving bug of 1e-6
    beyond = np.abs(yl - yr) > tol.abs + tol.rel * np.abs(yr)
    assert beyond[x > 20].all()  # far from the mean the change is several times the noise


def test_a_feature_no_noisy_analyzer_feeds_gets_no_bound():
    left = {MEAN: _f32(8.177), VAR: _f32(20.0666), "constant:scale_to_z_score_1_sub_y": 3.0,
            "constant:scale_to_z_score_1_sqrt_x": 4.0}
    right = {**left, MEAN: _next(left[MEAN])}
    feeds = {**FEEDS, "constant:scale_to_z_score_1_sub_y": ["miles_xf"],
             "constant:scale_to_z_score_1_sqrt_x": ["miles_xf"]}
    _entries, noise = _judged(left, right, feeds, feeds)
    assert noise.features == {"fare_xf"}
    widened = noise.widen(ToleranceSpec())
    assert widened.for_feature("miles_xf") == Tolerance() and widened.for_feature("year_xf") == Tolerance()


def test_equal_analyzers_judge_nothing_noise_and_widen_nothing():
    left = {MEAN: 8.0, VAR: 2.0, "vocabulary:zone": ["a", "b"]}
    entries, noise = _judged(left, dict(left))
    assert not noise and not any(e.get("noise") for e in entries)
    assert noise.widen(ToleranceSpec()) == ToleranceSpec()


@pytest.mark.parametrize("change", [
    {"vocabulary:zone": ["b", "a"]},         # a vocabulary in another order
    {"constant:scale_to_z_score_1_sub_y": 3.1},  # another statistic beyond rounding
])
def test_any_analyzer_difference_beyond_rounding_judges_nothing_noise(change):
    left = {MEAN: _f32(8.177), VAR: 2.0, "vocabulary:zone": ["a", "b"], "constant:scale_to_z_score_1_sub_y": 3.0}
    right = {**left, MEAN: _next(left[MEAN]), **change}
    entries, noise = _judged(left, right)
    assert not noise and not any(e.get("noise") for e in entries)
    assert analyzers.analyzers_differ(entries) is True


def test_a_noisy_bucket_boundary_leaves_its_feature_unbounded():
    boundaries = "constant:bucketize_apply_buckets"
    left = {boundaries: [[_f32(6.12), _f32(7.99)]]}
    right = {boundaries: [[_next(left[boundaries][0][0]), left[boundaries][0][1]]]}
    feeds = {boundaries: ["fare_bucket_xf"]}
    entries, noise = _judged(left, right, feeds, feeds)
    assert entries[0]["noise"] is True
    assert not noise.bounds and noise.unbounded == {"fare_bucket_xf"}


def test_graphs_that_feed_a_constant_to_other_features_give_no_bound():
    left = {MEAN: _f32(8.177), VAR: _f32(20.0666)}
    right = {MEAN: _next(left[MEAN]), VAR: left[VAR]}
    _entries, noise = _judged(left, right, FEEDS, {MEAN: ["other_xf"], VAR: ["fare_xf"]})
    assert not noise.bounds


def test_a_zero_variance_gives_no_bound():
    left, right = {MEAN: _f32(8.177), VAR: 0.0}, {MEAN: _next(_f32(8.177)), VAR: 0.0}
    _entries, noise = _judged(left, right)
    assert not noise.bounds and noise.unbounded == {"fare_xf"}


def test_widening_keeps_a_wider_user_tolerance_and_explains_only_what_the_user_tolerance_does_not_take():
    left = {MEAN: _f32(8.177), VAR: _f32(20.0666)}
    right = {MEAN: _next(left[MEAN], 4), VAR: _next(left[VAR], 4)}
    _entries, noise = _judged(left, right)
    user = ToleranceSpec(features=(("fare_xf", Tolerance(abs=1e-3)),))
    widened = noise.widen(user).for_feature("fare_xf")
    assert widened.abs == 1e-3 and widened.rel == noise.bounds[0].rel
    a, b = 1.2345678, 1.2345678 + 3e-7
    assert values_within(a, b, lambda _n: noise.widen(ToleranceSpec()).for_feature("fare_xf"))
    assert noise.explains("fare_xf", a, b, ToleranceSpec())
    assert not noise.explains("fare_xf", a, b, user)  # the user's own tolerance takes it
    assert not noise.explains("year_xf", 2007, 2006, ToleranceSpec())


def test_the_bound_is_the_propagated_difference_of_the_constants():
    left = {MEAN: 10.0, VAR: 4.0}
    right = {MEAN: 10.000002, VAR: 4.000004}
    _entries, noise = _judged(left, right)
    bound, = noise.bounds
    assert math.isclose(bound.abs, 2 * 0.000002 / math.sqrt(4.000004), rel_tol=1e-9)
    assert math.isclose(bound.rel, 2 * abs(2.0 / math.sqrt(4.000004) - 1) + 8 * 2.0 ** -24, rel_tol=1e-9)


def test_quantile_boundaries_within_the_sketchs_epsilon_are_noise_and_beyond_it_are_an_analyzer_difference():
    boundaries = "constant:bucketize_apply_buckets"
    feeds = {boundaries: ["fare_bucket_xf"]}
    left = {boundaries: [[6.12, 7.99, 10.25]]}
    near = {boundaries: [[6.13, 7.98, 10.25]]}   # 0.01 apart, a span of 4.13: within 1% of it
    far = {boundaries: [[6.3, 7.99, 10.25]]}     # 0.18 apart: beyond
    entries, noise = _judged(left, near, feeds, feeds)
    assert entries[0]["equal"] is False and entries[0]["noise"] is True
    assert analyzers.analyzers_differ(entries) is False
    assert noise.unbounded == {"fare_bucket_xf"} and not noise.bounds
    entries, noise = _judged(left, far, feeds, feeds)
    assert not noise and "noise" not in entries[0] and analyzers.analyzers_differ(entries) is True
    entries, noise = _judged(left, {boundaries: [[6.12, 7.99]]}, feeds, feeds)  # another count of buckets
    assert not noise and analyzers.analyzers_differ(entries) is True
