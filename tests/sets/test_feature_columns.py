"""parity.sets.feature_columns: a batch's transform columns from the C encoder's one pass equal the reference's,
record by record (`fingerprint.feature_fingerprints`, pyarrow's conversion of its pairs)."""

from __future__ import annotations

import collections

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.encoding import canonical, fingerprint
from parity.sets.feature_columns import FEATURE_MAP, feature_columns

pytestmark = pytest.mark.skipif(canonical._native is None, reason="the C encoder is not built")


_NAMES = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
def test_a_replays_fingerprint_rows_hold_each_records_feature_fingerprints():
    from parity.encoding.fingerprint import feature_fingerprints
    from parity.sets.fingerprint_set import part_fingerprints

    values = [{"fare": 7.5, "zone": "Loop", "tags": ["a"]}, {}, {"é": None}]
    found = [feature_fingerprints(v) for v in values]
    columns = {"key_fp": [bytes(16)] * 3, "key": ["1", "2", "3"],
               **{f"{s}_fp": [0, 1, 2] for s in ("input", "window", "shard", "coder", "seed")},
               "transform_fp": [f[2] for f in found], "features": [f[1] for f in found]}
    table = part_fingerprints("p-0", columns)
    assert table.column("features").to_pylist() == [f[1] for f in found]
    assert table.column("row").to_pylist() == [0, 1, 2]


_FEATURE_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.text(max_size=6)
    | st.binary(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8)
_FEATURE_DICTS = st.dictionaries(_NAMES, _FEATURE_VALUES, max_size=40)


def _reference_columns(values, featured):
    reference = fingerprint._REFERENCE["feature_fingerprints"]
    found = [reference(v) if f else (None, [], None) for v, f in zip(values, featured)]
    return [f[0] for f in found], [f[2] for f in found], [f[1] for f in found]


@settings(max_examples=200, deadline=None)
@given(st.lists(_FEATURE_DICTS, max_size=12))
def test_a_batchs_feature_columns_from_the_c_encoder_equal_the_reference_record_by_record(values):
    assert canonical._native.feature_fingerprints_many(values) is not None
    data, fps, features = feature_columns(values, [True] * len(values))
    want_data, want_fps, want_rows = _reference_columns(values, [True] * len(values))
    assert (data, fps) == (want_data, want_fps)
    assert features.equals(pa.array(want_rows, FEATURE_MAP))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(_FEATURE_DICTS, st.booleans()), max_size=8))
def test_records_left_unfeatured_get_no_columns_and_the_others_theirs(items):
    values, featured = [v for v, _ in items], [f for _, f in items]
    data, fps, features = feature_columns(values, featured)
    want_data, want_fps, want_rows = _reference_columns(values, featured)
    assert (data, fps, features.to_pylist()) == (want_data, want_fps, want_rows)


@pytest.mark.parametrize("values", [
    [{"a": 1}, {1: "a"}],                      # a name that is not a str: the reference refuses it
    [{"a": 1}, collections.OrderedDict(b=2)],  # a dict subclass
])
def test_values_the_c_encoder_does_not_take_whole_go_record_by_record(values):
    assert canonical._native.feature_fingerprints_many(values) is None
    if any(not all(type(k) is str for k in v) for v in values):
        with pytest.raises(TypeError):
            feature_columns(values, [True] * len(values))
        return
    data, fps, features = feature_columns(values, [True] * len(values))
    assert (data, fps, features.to_pylist()) == _reference_columns(values, [True] * len(values))


def test_a_value_with_no_canonical_encoding_raises_type_error():
    with pytest.raises(TypeError):
        feature_columns([{"a": 1}, {"b": object()}], [True, True])


def test_a_featured_none_is_refused_as_the_reference_refuses_it():
    # None marks a record left out in the C pass; a featured None is not a dict of features
    with pytest.raises(TypeError):
        feature_columns([{"a": 1}, None], [True, True])
    data, fps, features = feature_columns([{"a": 1}, None], [True, False])
    assert (data[1], fps[1], features.to_pylist()[1]) == (None, None, [])
