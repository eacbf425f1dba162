"""The diff's stage-by-stage comparison of a fetch round (parity.compare.pair_values) gives, pair for pair, what the
per-record reference gives (tests/compare/oracles.py: `pair_outcomes`), on sets of diverse stage values written
with `tests.set_files.write_part` + the real `finalize` and read back with the small fetch rounds and chunks of
tests/compare/test_hashdiff.py."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parity.compare import diff, pair_values
from parity.config import Tolerance, ToleranceSpec
from parity.encoding import canonical
from parity.sets.fingerprint_set import read_set
from parity.stages import STAGES

from tests.compare import oracles
from tests.compare.test_hashdiff import _write_set, small_chunks  # noqa: F401  (a fixture)

_NAMES = ["a", "b", "f", "g", "dropped", "error"]
_SCALARS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, -0.0, 1.0, 1.5, 2.0, math.nan, math.inf]),
    st.integers(-3, 3), st.integers(-(2 ** 60), 2 ** 60), st.sampled_from([2 ** 53, 2 ** 70, -(2 ** 1100)]),
    st.booleans(), st.none(), st.sampled_from(["", "x", "y", "é"]), st.binary(max_size=2))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(_NAMES), inner, max_size=3),
    st.frozensets(st.integers(0, 3), max_size=2)), max_leaves=6)
_STAGE_VALUE = st.one_of(
    st.dictionaries(st.sampled_from(_NAMES), _VALUES, max_size=4),
    st.sampled_from([{"dropped": "late"}, {"error": "ValueError: a"}, {"error": "ValueError: b"}]),
    _VALUES)


@st.composite
def _pair(draw):
    """A left record's stage values and a right one that shares some stages, some fields, some values."""
    left = {s: draw(_STAGE_VALUE) for s in STAGES}
    right = {}
    for s in STAGES:
        how = draw(st.sampled_from(["same", "same", "other", "field"]))
        if how == "same":
            right[s] = left[s]
        elif how == "other" or not isinstance(left[s], dict) or not left[s]:
            right[s] = draw(_STAGE_VALUE)
        else:
            changed = dict(left[s])
            name = draw(st.sampled_from(sorted(changed)))
            changed[name] = draw(st.one_of(_VALUES, st.floats(allow_nan=True), st.integers(-5, 5)))
            right[s] = changed
    return left, right


_TOLERANCES = [ToleranceSpec(), ToleranceSpec(default=Tolerance(abs=0.5)),
               ToleranceSpec(default=Tolerance(rel=1e-3), features=(("f", Tolerance(abs=1.0)),)),
               ToleranceSpec(default=Tolerance(abs=math.inf)), ToleranceSpec(default=Tolerance(rel=math.inf))]


def _view(outcome: diff.PairOutcome) -> tuple:
    """An outcome with its values as canonical bytes (a NaN is not == itself)."""
    return (outcome.key, outcome.key_fp, outcome.differing, outcome.within, outcome.first_stage, outcome.diverged,
            canonical.encode(outcome.left), canonical.encode(outcome.right), outcome.feature_deltas, outcome.fps,
            outcome.first_fields)


def _check(tmp_path, records: list, tolerance: ToleranceSpec) -> None:
    _write_set(tmp_path / "l", [(i, left) for i, (left, _right) in enumerate(records)], seed=1)
    _write_set(tmp_path / "r", [(i, right) for i, (_left, right) in enumerate(records)], seed=2)
    lset, rset = read_set(str(tmp_path / "l")), read_set(str(tmp_path / "r"))
    stream = diff.DiffStream(lset, rset, tolerance)
    found = [_view(o) for o in stream]
    expected, within = oracles.pair_outcomes(lset, rset, tolerance)
    assert found == [_view(o) for o in expected]
    assert stream.stage_within == within


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow, HealthCheck.data_too_large])
@given(records=st.lists(_pair(), min_size=1, max_size=30), which=st.integers(0, len(_TOLERANCES) - 1),
       repeat=st.integers(0, 3))
def test_stage_by_stage_rounds_give_the_per_record_outcomes(tmp_path_factory, small_chunks, records, which, repeat):  # noqa: F811
    records = records + records[:repeat] * 20  # the same pair of values again: distinct pairs compared once
    _check(tmp_path_factory.mktemp("sets"), records, _TOLERANCES[which])


def test_many_pairs_over_several_rounds_and_files_give_the_per_record_outcomes(tmp_path, small_chunks):  # noqa: F811
    rng = np.random.default_rng(5)
    records = []
    for i in range(600):
        x = float(rng.normal())
        left = {"input": {"id": i, "x": x, "company": "A"}, "window": {"timestamp_us": i, "windows": [["global"]]},
                "shard": {"key": [i % 3], "shard": 0, "aggregates": {"n": i % 4}},
                "coder": {"id": i, "x": x}, "seed": {"split": "train"},
                "transform": {"f": x, "g": i % 5, "h": [x, 1.0], "s": "a"}}
        right = {**left, "input": {**left["input"], "company": "B" if i % 2 else "A"},
                 "transform": {"f": x + (1e-4 if i % 3 else 2.0), "g": i % 5 + (i % 4 == 0), "h": [x, 1.5], "s": "a"}}
        if i % 7 == 0:
            right["transform"] = {"error": "ValueError: bad"}
        if i % 11 == 0:
            right["coder"] = {"id": float(i), "x": x}
        if i % 13 == 0:  # equal fields that are not plain, or not within of themselves under rel: inf
            left["input"] = {"id": i, "zero": 0.0, "x": 1.0, "set": frozenset({1, 2}), "nan": math.nan}
            right["input"] = {**left["input"], "x": 2.0}
            right["coder"] = {**left["coder"], "zero": 0.0, "x": x + 1.0}
            left["coder"] = {**left["coder"], "zero": 0.0}
        records.append((left, right))
    for tolerance in _TOLERANCES:
        _check(tmp_path / str(id(tolerance)), records, tolerance)


def test_numeric_feature_columns_answer_as_the_value_by_value_rule():
    lefts = [0.0, -0.0, 1.0, math.nan, math.inf, -math.inf, 1e308, 5e-324, 2.5, math.nan]
    rights = [1e-9, 0.0, 1.0000001, math.nan, math.inf, math.inf, -1e308, 0.0, math.nan, 1.0]
    for tol in (Tolerance(), Tolerance(abs=1e-6), Tolerance(rel=0.5), Tolerance(abs=math.inf), Tolerance(rel=math.inf)):
        expected = [(oracles.values_within(a, b, lambda _n: tol), diff_max(a, b)) for a, b in zip(lefts, rights)]
        assert pair_values._numeric_deltas(lefts, rights, tol) == expected
        ints = ([0, 5, -(2 ** 52), 2 ** 53 - 1], [1, 5, 2 ** 52, -(2 ** 53 - 1)])
        assert pair_values._numeric_deltas(*ints, tol) == [
            (oracles.values_within(a, b, lambda _n: tol), diff_max(a, b)) for a, b in zip(*ints)]
    assert pair_values._numeric_deltas([2 ** 53], [0], Tolerance()) is None
    assert pair_values._numeric_deltas([1.0], [1], Tolerance()) is None


def diff_max(a, b):
    from parity.compare.tolerance import max_abs_delta

    return max_abs_delta(a, b)


def test_pairs_that_differ_by_the_same_field_bytes_at_a_later_stage_give_the_per_record_outcomes(
        tmp_path, small_chunks):  # noqa: F811
    """A bug that changes one field changes it the same way in every later stage: a later stage's tier is
    known from its differing fields' bytes after the first such pair (`pair_values._split`), and must be the
    tier each pair would get on its own, under every tolerance (the shard's one differing field, `n`, is within
    0.5 of its left value on some pairs and not on others)."""
    records = []
    for i in range(300):
        company = "B" if i % 2 else "A"
        left = {"input": {"id": i, "company": "A"}, "window": {"t": i, "company": "A", "x": 1.0},
                "shard": {"key": [i % 3], "n": 1.0}, "coder": {"id": i, "company": "A", "n": 1.0},
                "seed": {"split": "train"}, "transform": {"f": float(i)}}
        right = {"input": {"id": i, "company": company},
                 "window": {"t": i, "company": company, "x": 1.25 if i % 3 == 0 else 1.0},
                 "shard": {"key": [i % 3], "n": 1.25 if i % 5 == 0 else 3.0 if i % 5 == 1 else 1.0},
                 "coder": {"id": i, "company": company, "n": 1.25 if i % 5 == 0 else 1.0},
                 "seed": {"split": "train"}, "transform": {"f": float(i) + (0.25 if i % 2 else 0.0)}}
        records.append((left, right))
    for tolerance in _TOLERANCES:
        _check(tmp_path / str(id(tolerance)), records, tolerance)


def test_pairs_that_share_their_differing_bytes_at_a_first_or_transform_stage_give_the_per_record_outcomes(
        tmp_path, small_chunks):  # noqa: F811
    """Pairs whose differing fields have the same bytes share one decoded split (`pair_values._split`), and their
    tier, feature deltas and shown values are found once for all of them (`_compare_stage`): each pair must still
    get what it would get on its own, where the stage is its first divergent one (the input, or the transform
    when the inputs agree) and where it is a later one (the transform after the input)."""
    records = []
    for i in range(300):
        planted = i % 3 != 0
        company = ("B" if i % 2 else "C") if planted else "A"
        left = {"input": {"id": i, "company": "A", "fare": float(i)}, "window": {"t": i},
                "shard": {"key": [i % 3]}, "coder": {"id": i, "company": "A"}, "seed": {"split": "train"},
                "transform": {"company_id": 0, "fare": float(i), "g": 1.0}}
        right = {"input": {"id": i, "company": company, "fare": float(i)}, "window": {"t": i},
                 "shard": {"key": [i % 3]}, "coder": {"id": i, "company": company}, "seed": {"split": "train"},
                 "transform": {"company_id": -1 if planted else 0, "fare": float(i),
                               "g": 1.25 if i % 2 else 1.5}}
        records.append((left, right))
    for tolerance in _TOLERANCES:
        _check(tmp_path / str(id(tolerance)), records, tolerance)
