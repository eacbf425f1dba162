"""A RecBatch names its phase (read, settled, staged), and each phase the slots that hold data."""
from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from parity.replay.batch import READ, SETTLED, STAGED, RecBatch, RecBatchCoder


def _read_batch() -> RecBatch:
    batch = RecBatch("00000-000000")
    batch.rids, batch.keys, batch.key_bytes = [(0, 0), (0, 1)], [1, 2], [b"1", b"2"]
    batch.locations, batch.input_bytes = pa.array(["c:1", "c:2"]), pa.array([b"x", b"y"], pa.binary())
    batch.records, batch.input_fps = [{"a": 1}, {"a": 2}], [7, 8]
    batch.timestamps, batch.arrivals, batch.windows = [1, 2], [None, None], [[("global",)], [("global",)]]
    batch.groups, batch.group_bytes = [None, None], [b"n", b"n"]
    batch.values = {"window": [{}, {}], "transform": [None, None]}
    batch.transform_inputs = [{"a": 1}, None]
    return batch


def test_a_batch_goes_from_read_to_settled_to_staged_and_each_step_states_the_phase_it_takes():
    batch = _read_batch()
    assert batch.phase == READ and batch.reversed().phase == READ and batch.reversed().keys == [2, 1]
    assert batch.reversed().input_bytes.to_pylist() == [b"y", b"x"]
    batch.settle(("window",), [(pa.array([b"w1", b"w2"]), pa.array([1, 2], pa.uint64()))])
    assert batch.phase == SETTLED and batch.records == [] and list(batch.values) == ["transform"]
    assert all(isinstance(column, pa.Array) for column in (batch.input_bytes, batch.locations,
                                                           batch.value_bytes["window"], batch.value_fps["window"]))
    staged = batch.staged()
    assert staged.phase == STAGED and staged.input_bytes is None and staged.locations is None
    assert staged.value_bytes == {} and staged.value_fps is batch.value_fps
    assert batch.phase == SETTLED and batch.input_bytes is not None  # the settled batch is not changed
    with pytest.raises(AssertionError, match="is staged; this step takes a batch that is settled"):
        staged.staged()
    with pytest.raises(AssertionError, match="is settled; this step takes a batch that is read"):
        batch.settle(("window",), [])


def test_a_batch_pickles_with_its_phase():
    batch = _read_batch()
    batch.settle(("window",), [(pa.array([b"w1", b"w2"]), pa.array([1, 2], pa.uint64()))])
    for one in (batch, batch.staged()):
        back = RecBatchCoder().decode(RecBatchCoder().encode(one))
        assert back.phase == one.phase and back.keys == one.keys and back.value_fps["window"].equals(
            one.value_fps["window"])
        assert RecBatchCoder().estimate_size(one) > 64
    assert pickle.loads(pickle.dumps(batch)).phase == SETTLED


def test_a_batchs_key_texts_are_each_keys_key_text_whatever_the_keys_types():
    from parity.replay.batch import key_text, key_texts

    assert key_texts([1, -20, 2**70]) == ["1", "-20", str(2**70)]
    mixed = [1, True, "a", [1, "b"], None, 2.5]
    assert key_texts(mixed) == [key_text(k) for k in mixed] == ["1", "true", '"a"', '[1, "b"]', "null", "2.5"]
    assert key_texts([]) == []
