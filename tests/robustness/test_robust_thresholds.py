"""Thresholds that cannot switch their check off (issue 24, item 3).

Every comparison with NaN is false, so `max_quarantined: .nan` or `tolerance.default.abs: .nan` silently let
everything through (a 50% garbage capture passed). A NaN anywhere a number is configured is refused naming the
field; a negative tolerance says what a tolerance is, not "expected a number in [0.0, None]".
"""
from __future__ import annotations

import pytest

from robust_helpers import check, good_records, jsonl_lines, make_project

NAN_FIELDS = {
    "capture.max_quarantined": {"capture_spec": {"max_quarantined": float("nan")}},
    "sides.offline.capture.max_quarantined": {"per_side": {"offline": {"capture": {"max_quarantined": float("nan")}}}},
    "tolerance.default.abs": {"config": {"tolerance": {"default": {"abs": float("nan")}}}},
    "tolerance.default.rel": {"config": {"tolerance": {"default": {"rel": float("nan")}}}},
    "tolerance.features.v2.abs": {"config": {"tolerance": {"features": {"v2": {"abs": float("nan")}}}}},
    "sides.offline.seed.ops.s.rate": {"per_side": {"offline": {"seed": {"value": 1, "ops": {
        "s": {"op": "sample", "rate": float("nan")}}}}}},
}


@pytest.mark.parametrize("field", sorted(NAN_FIELDS))
def test_a_nan_threshold_is_refused_naming_the_field(tmp_path, capsys, field):
    project = make_project(tmp_path, **NAN_FIELDS[field])
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: {project.config}: {field}: expected a number ")
    assert errors.endswith("got NaN (.nan), which would switch the check off")


def test_a_half_garbage_capture_with_a_nan_max_quarantined_does_not_pass(tmp_path, capsys):
    lines = jsonl_lines(good_records(10)) + [b"{not json"] * 10
    project = make_project(tmp_path, lines=lines, capture_spec={"max_quarantined": float("nan")})
    code, out, errors = check(project, capsys)
    assert (code, out) == (2, "")
    assert "capture.max_quarantined" in errors


@pytest.mark.parametrize("field", ["abs", "rel"])
def test_a_negative_tolerance_says_a_tolerance_is_a_distance(tmp_path, capsys, field):
    project = make_project(tmp_path, config={"tolerance": {"default": {field: -0.5}}})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors == (f"parity: error: {project.config}: tolerance.default.{field}: expected a number >= 0 "
                      f"(a tolerance is a distance: 0 compares exactly), got -0.5")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), 10 ** 400, "9999999999999999d"],
                         ids=["nan", "inf", "-inf", "10**400", "9999999999999999d"])
def test_a_non_finite_or_huge_duration_is_refused_as_a_bad_duration(tmp_path, capsys, value):
    project = make_project(tmp_path, side={"timestamp": {"field": "t", "unit": "s"},
                                           "window": {"type": "fixed", "size": value}})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: {project.config}: sides.offline.window.size: bad duration ")
    assert len(errors) < 400
