"""The python transform stage (parity/stages/transform.py, `PythonTransform`): a batch at once, the same as
record by record."""
from __future__ import annotations

import pytest

from parity.errors import UserCodeError
from parity.stages.transform import PythonTransform


def _features(record):
    record["seen"] = True  # a function that changes its input: it gets a copy
    return {"double": record["x"] * 2, "name": str(record["x"])}


def test_a_batch_through_a_python_transform_gives_each_records_features_as_one_record_alone_does():
    records = [{"x": i} for i in range(5)]
    python = PythonTransform(_features, "m:_features")
    many = python.apply_many(records)
    assert many == [python.apply_one(record) for record in records]
    assert many[3] == {"double": 6, "name": "3"}
    assert records == [{"x": i} for i in range(5)]  # the records themselves are left as they were


@pytest.mark.parametrize("fn, message", [
    (lambda r: [r["x"]] if r["x"] == 2 else {"x": r["x"]}, "returned a list, expected a dict of feature name"),
    (lambda r: {("a", 1): 1} if r["x"] == 3 else {"x": 1}, "returned a feature named ('a', 1) (tuple); feature "
                                                            "names must be strings"),
])
def test_a_batch_with_a_result_that_is_no_dict_of_str_names_is_refused_with_the_message_of_that_record_alone(
        fn, message):
    python = PythonTransform(fn, "m:f")
    records = [{"x": i} for i in range(5)]
    with pytest.raises(UserCodeError, match="transform.python 'm:f' " + message.replace("(", r"\(").replace(
            ")", r"\)")):
        python.apply_many(records)
    with pytest.raises(UserCodeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        [python.apply_one(record) for record in records]


def test_a_batch_whose_function_raises_raises_what_it_raised():
    python = PythonTransform(lambda r: {"inv": 1 / r["x"]}, "m:f")
    with pytest.raises(ZeroDivisionError):
        python.apply_many([{"x": 1}, {"x": 0}, {"x": 2}])
