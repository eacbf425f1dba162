"""The transform stage's column builders against the per-record paths they stand for.

`TFTInput.record_batch` must give the record batches TFT's own instance-dict path gives (a tf.Example per
record, decoded again), and `_column` the tensors its per-value loop and `tf.ragged.constant` gave.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.capture.schema import parse_type
from parity.stages.transform import RecordError, TFTInput, _column, _tf_value, feature_spec

CI = settings(settings.get_profile("ci"), max_examples=300)

TYPES = {"n": parse_type("int64"), "flag": parse_type("bool"), "x": parse_type("float32"),
         "d": parse_type("float64"), "s": parse_type("string"), "b": parse_type("bytes"),
         "xs": parse_type("list<float32>"), "ns": parse_type("list<int64>"), "ss": parse_type("list<string>"),
         "ox": parse_type("optional<float64>"), "on": parse_type("optional<int64>"),
         "os": parse_type("optional<string>")}

_INT = st.integers(-(2**63), 2**63 - 1)
_FLOAT = st.floats(allow_nan=True, allow_infinity=True) | st.floats(-1e6, 1e6)
_TEXT = st.text(max_size=8)  # no lone surrogates: they fail the record either way, checked below
_FIELDS = {
    "n": st.none() | _INT | st.floats(allow_nan=True).filter(math.isnan),
    "flag": st.none() | st.booleans(),
    "x": st.none() | _FLOAT | _INT.filter(lambda v: abs(v) < 2**60) | st.booleans(),
    "d": st.none() | _FLOAT,
    "s": st.none() | _TEXT | st.just(float("nan")),
    "b": st.none() | st.binary(max_size=8),
    "xs": st.none() | st.lists(_FLOAT | st.integers(-1000, 1000), max_size=4),
    "ns": st.none() | st.lists(_INT, max_size=4),
    "ss": st.none() | st.lists(_TEXT | st.binary(max_size=4), max_size=4),
    "ox": st.none() | _FLOAT,  # optional: a null holds no value (TFX's VarLenFeature), not the type's default
    "on": st.none() | _INT,
    "os": st.none() | _TEXT,
}
_RECORD = st.fixed_dictionaries({}, optional=_FIELDS)


@pytest.fixture(scope="module")
def tft_input() -> TFTInput:
    return TFTInput(TYPES)


def _same_batches(left, right) -> None:
    assert left.schema == right.schema
    for name in left.schema.names:
        a, b = left.column(name), right.column(name)
        assert a.offsets.to_pylist() == b.offsets.to_pylist(), name
        values_a, values_b = a.flatten(), b.flatten()
        if values_a.type == "float":  # the same bits, so that NaN and -0.0 count
            assert np.array_equal(np.asarray(values_a).view(np.uint32), np.asarray(values_b).view(np.uint32)), name
        else:
            assert values_a.to_pylist() == values_b.to_pylist(), name


@CI
@given(st.lists(_RECORD, min_size=1, max_size=12))
def test_record_batches_built_by_column_are_the_ones_tfts_tf_example_path_gives(tft_input, records):
    _same_batches(tft_input.record_batch(records), tft_input._via_examples(records))


def test_a_list_in_a_scalar_field_names_the_record_as_to_instance_does(tft_input):
    records = [{"n": 1}, {"n": [1, 2]}]
    with pytest.raises(RecordError, match="field 'n' holds a list") as raised:
        tft_input.record_batch(records)
    assert raised.value.index == 1


def test_a_lone_surrogate_fails_its_record(tft_input):
    with pytest.raises(RecordError) as raised:
        tft_input.record_batch([{"s": "ok"}, {"s": "\ud800"}])
    assert raised.value.index == 1


def test_a_record_batch_survives_pickling_with_its_config(tft_input):
    import pickle

    again = pickle.loads(pickle.dumps(tft_input))
    assert again.tensor_adapter_config.arrow_schema == tft_input.tensor_adapter_config.arrow_schema
    _same_batches(again.record_batch([{"n": 3, "ss": ["a"]}]), tft_input.record_batch([{"n": 3, "ss": ["a"]}]))


def _reference_column(values, spec):
    """`_column` as it was: a per-value loop, and tf.ragged.constant for the sparse features."""
    import tensorflow as tf

    dtype = spec.dtype
    if isinstance(spec, tf.io.FixedLenFeature):
        default = {"string": b"", "int64": 0}.get(dtype.name, 0.0)
        column = [_tf_value(default if v is None or isinstance(v, list) else v) for v in values]
        if dtype == tf.string:
            return tf.constant(np.array(column, dtype=object), dtype=tf.string)
        return tf.constant(np.array(column, dtype=dtype.as_numpy_dtype))
    rows = [[_tf_value(v) for v in value] if isinstance(value, list) else
            ([] if value is None else [_tf_value(value)]) for value in values]
    ragged = tf.ragged.constant(rows, dtype=dtype, ragged_rank=1) if any(rows) else \
        tf.RaggedTensor.from_row_lengths(tf.constant([], dtype=dtype), [0] * len(rows))
    return ragged.to_sparse()


def _same_tensors(left, right) -> None:
    import tensorflow as tf

    if isinstance(left, tf.SparseTensor):
        assert isinstance(right, tf.SparseTensor)
        for a, b in ((left.indices, right.indices), (left.values, right.values),
                     (left.dense_shape, right.dense_shape)):
            _same_tensors(a, b)
        return
    assert left.dtype == right.dtype and left.shape == right.shape
    a, b = left.numpy(), right.numpy()
    if a.dtype.kind == "f":
        assert np.array_equal(a.view(np.uint32 if a.itemsize == 4 else np.uint64),
                              b.view(np.uint32 if b.itemsize == 4 else np.uint64))
    else:
        assert a.tolist() == b.tolist()


_SERVING = {"n": st.none() | st.integers(-(2**62), 2**62) | st.booleans() | st.just([1]),
            "x": st.none() | _FLOAT | st.integers(-1000, 1000) | st.booleans() | st.just([]),
            "s": st.none() | _TEXT | st.binary(max_size=4) | st.just(["a"]),
            "xs": st.none() | st.lists(_FLOAT | st.integers(-9, 9) | st.booleans(), max_size=3) | _FLOAT,
            "ns": st.none() | st.lists(st.integers(-9, 9) | st.booleans(), max_size=3) | st.integers(-9, 9),
            "ss": st.none() | st.lists(_TEXT | st.binary(max_size=4), max_size=3) | _TEXT,
            "ox": st.none() | _FLOAT | st.integers(-1000, 1000), "os": st.none() | _TEXT | st.binary(max_size=4)}


@CI
@given(st.sampled_from(sorted(_SERVING)).flatmap(
    lambda name: st.tuples(st.just(name), st.lists(_SERVING[name], min_size=1, max_size=8))))
def test_serving_tensors_built_by_column_are_the_ones_the_per_value_loop_built(field_and_values):
    name, values = field_and_values
    spec = feature_spec({name: TYPES[name]})[name]
    _same_tensors(_column(values, spec, name), _reference_column(values, spec))


def test_a_null_inside_a_list_fails_its_record_instead_of_the_batch(tft_input):
    with pytest.raises(RecordError) as raised:
        tft_input.record_batch([{"ns": [1]}, {"ns": [2]}, {"ns": [3, None]}])
    assert raised.value.index == 2


def test_the_replay_names_the_record_that_does_not_fit_and_skips_records_that_never_reach_the_transform(tft_input):
    from parity.errors import UserCodeError
    from parity.replay.batch import RecBatch
    from parity.replay.pipeline import TFT_BATCH_SIZE, _tft_record_batches

    batch = RecBatch("0-0")
    batch.keys = list(range(2 * TFT_BATCH_SIZE + 5))
    batch.transform_inputs = [None if i % 2 else {"n": i} for i in batch.keys]
    sizes = [rb.num_rows for rb in _tft_record_batches(batch, tft_input)]
    assert sizes == [TFT_BATCH_SIZE, 3]  # the even records reach the transform
    batch.transform_inputs[2 * TFT_BATCH_SIZE + 2] = {"n": [1, 2]}
    with pytest.raises(UserCodeError, match=rf"^record {2 * TFT_BATCH_SIZE + 2}: field 'n' holds a list"):
        list(_tft_record_batches(batch, tft_input))


@CI
@given(st.lists(_RECORD, min_size=1, max_size=12), st.integers(0, 3))
def test_serving_tensors_read_from_a_columnar_batch_are_the_ones_built_from_the_records(tft_input, records, skip):
    from parity.stages.transform import _arrow_tensor

    batch = tft_input.columnar_batch(records)
    if batch is None:  # left to the tf.Example way: such a batch keeps its dicts
        return
    skip = min(skip, len(records) - 1)
    batch, records = batch.slice(skip), records[skip:]  # a slice: offsets that do not start at 0
    for name, spec in feature_spec(TYPES).items():
        _same_tensors(_arrow_tensor(batch.column(name), spec), _column([r.get(name) for r in records], spec, name))


def test_a_tft_batch_hands_its_records_on_as_arrow_only_when_every_chunk_converts_by_column(tft_input):
    from parity.replay.batch import RecBatch
    from parity.replay.pipeline import TFT_BATCH_SIZE, _tft_record_batches, _with_tft_input

    batch = RecBatch("0-0")
    batch.keys = list(range(3 * TFT_BATCH_SIZE // 2 + 7))
    batch.transform_inputs = [None if i % 3 == 0 else {"n": i, "ss": ["a"] * (i % 4)} for i in batch.keys]
    reaching = sum(value is not None for value in batch.transform_inputs)
    expected = list(_tft_record_batches(batch, tft_input))

    out = _with_tft_input(batch, tft_input)

    assert out.transform_inputs == [None if i % 3 == 0 else True for i in batch.keys]
    assert batch.transform_inputs[1] == {"n": 1, "ss": ["a"]}  # the input batch is left as it was
    assert [rb.num_rows for rb in out.transform_arrow] == [rb.num_rows for rb in expected] == \
        [TFT_BATCH_SIZE, reaching - TFT_BATCH_SIZE]
    for ours, theirs in zip(_tft_record_batches(out, tft_input), expected):
        _same_batches(ours, theirs)
    batch.transform_inputs[-1] = {"n": 1.5}  # a float in an int64 field: the tf.Example way decides
    assert _with_tft_input(batch, tft_input) is batch


def test_a_gated_saved_side_hands_on_arrow_only_once_the_graphs_raw_features_are_the_ones_its_records_make(tmp_path):
    from tensorflow_transform.tf_metadata import metadata_io

    from parity.replay.batch import RecBatch
    from parity.replay.steps import SavedInputsFn

    graph = tmp_path / "offline" / "tft_output"
    step = SavedInputsFn(TYPES, [str(graph), str(tmp_path / "offline")])
    step.setup()
    batch = RecBatch("0-0")
    batch.keys = [0, 1, 2]
    batch.transform_inputs = [{"n": 1, "s": "a"}, None, {"n": 2, "ss": ["b", "c"]}]

    (before,) = step.process(batch)  # no graph metadata yet: the dicts, and a look again at the next batch
    metadata_io.write_metadata(TFTInput(TYPES).metadata, str(graph / "metadata"))
    (after,) = step.process(batch)

    assert before is batch and before.transform_arrow is None
    assert after.transform_inputs == [True, None, True] and [rb.num_rows for rb in after.transform_arrow] == [2]
    _same_batches(after.transform_arrow[0], TFTInput(TYPES).record_batch([batch.transform_inputs[i] for i in (0, 2)]))

    other = SavedInputsFn({**TYPES, "n": parse_type("string")}, [str(graph)])  # the graph reads n as an int
    other.setup()
    (kept,) = other.process(batch)
    assert kept is batch


def test_a_nan_in_an_int_or_string_field_leaves_the_serving_batch_but_is_the_default_for_the_analysis(tft_input):
    for name in ("n", "s", "flag"):
        records = [{name: float("nan")}, {}]
        assert tft_input.columnar_batch(records) is None  # the serving application refuses it
        analysis = tft_input.record_batch(records)  # TFT reads it as the type's default
        assert analysis.column(name).to_pylist() == analysis.slice(1).column(name).to_pylist() * 2
    assert tft_input.columnar_batch([{"x": float("nan")}, {"d": float("nan")}]) is not None  # floats keep NaN
