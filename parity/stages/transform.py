"""The `transform` stage: `python` functions, TFT `preprocessing_fn`s and exported TFT graphs.

`tft` analyses the side's replayed records with tensorflow-transform (`AnalyzeDataset`), exports the
transform graph, and then applies it to the records exactly like `saved` does: as a serving system applies
`transform_fn`, one batch of raw features at a time through `TFTransformOutput.transform_raw_features`.
Inputs are typed from the schema as tf.Example carries them: strings `tf.string`, integers `tf.int64`,
floats `tf.float32`; a null scalar takes the type's default (0, 0.0, b"") like a tf.Example parsed with a
default value; `list<T>` fields are `tf.io.VarLenFeature`s (SparseTensors).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from parity.errors import ConfigError, UserCodeError
from parity.schema import FieldType

_TF_DTYPE = {"int64": "int64", "int32": "int64", "bool": "int64", "float64": "float32",
             "float32": "float32", "string": "string", "bytes": "string"}
_DEFAULT = {"int64": 0, "float32": 0.0, "string": b""}


def feature_spec(field_types: dict[str, FieldType]) -> dict[str, Any]:
    """The TFT raw feature spec of records with these field types."""
    import tensorflow as tf

    spec: dict[str, Any] = {}
    for name, ftype in field_types.items():
        base = ftype.element if ftype.is_list else ftype
        dtype_name = _TF_DTYPE[base.name]  # type: ignore[union-attr]
        dtype = getattr(tf, dtype_name)
        if ftype.is_list:
            spec[name] = tf.io.VarLenFeature(dtype)
        else:
            # TFT schemas refuse defaults: parity fills nulls with the type default itself.
            spec[name] = tf.io.FixedLenFeature([], dtype)
    return spec


def _tf_value(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool):
        return int(value)
    return value


def to_instance(record: dict, field_types: dict[str, FieldType]) -> dict[str, Any]:
    """A record as a TFT instance dict: nulls as type defaults, strings as UTF-8 bytes."""
    instance = {}
    for name, ftype in field_types.items():
        value = record.get(name)
        if ftype.is_list:
            instance[name] = [_tf_value(v) for v in value] if isinstance(value, list) else []
            continue
        if isinstance(value, list):
            raise ValueError(f"field '{name}' holds a list ({len(value)} values) but the schema says "
                             f"{ftype.name}; sliding windows attach one aggregate per window: "
                             f"declare it as list<...>")
        dtype_name = _TF_DTYPE[ftype.name]
        if value is None or (isinstance(value, float) and value != value and dtype_name != "float32"):
            value = _DEFAULT[dtype_name]
        instance[name] = _tf_value(value)
    return instance


def _tf_name(dtype: Any) -> str:
    return "string" if dtype.name == "string" else "int64" if dtype.is_integer else "float32"


def _column(values: list, spec: Any, name: str) -> Any:
    """A batch tensor for one raw feature, built the way tf.Example parsing would build it."""
    import tensorflow as tf

    dtype = spec.dtype
    if isinstance(spec, tf.io.FixedLenFeature):
        default = spec.default_value
        if default is None:
            default = _DEFAULT[_tf_name(dtype)]
        column = []
        for value in values:
            if value is None or isinstance(value, list):
                value = default
            column.append(_tf_value(value))
        if dtype == tf.string:
            return tf.constant(np.array(column, dtype=object), dtype=tf.string)
        return tf.constant(np.array(column, dtype=dtype.as_numpy_dtype))
    rows = [[_tf_value(v) for v in value] if isinstance(value, list) else
            ([] if value is None else [_tf_value(value)]) for value in values]
    ragged = tf.ragged.constant(rows, dtype=dtype, ragged_rank=1) if any(rows) else \
        tf.RaggedTensor.from_row_lengths(tf.constant([], dtype=dtype), [0] * len(rows))
    return ragged.to_sparse()


def _values(array: np.ndarray) -> list:
    """The Python values of a 1-D output array in one call: a float32 array's numpy.float32 scalars (`list`;
    float32 stays a type of its own in fingerprints), every other dtype's Python values (`tolist`, which is
    `.item()` of each: int, float, bool, bytes)."""
    return list(array) if array.dtype == np.float32 else array.tolist()


def _rows(tensor: Any, count: int) -> list:
    """Per-record Python values of one output tensor."""
    import tensorflow as tf

    if isinstance(tensor, tf.SparseTensor):
        tensor = tf.RaggedTensor.from_sparse(tensor)
    if isinstance(tensor, tf.RaggedTensor):
        return [_values(row) for row in _ragged_rows(tensor)]
    array = tensor.numpy()
    if array.ndim == 1:
        return _values(array)
    return [_values(np.ravel(row)) for row in array]


def _ragged_rows(tensor: Any) -> list:
    values = tensor.flat_values.numpy()
    splits = tensor.row_splits.numpy()
    return [values[splits[i]:splits[i + 1]] for i in range(len(splits) - 1)]


class SavedTransform:
    """Applies an exported TFT output dir to batches of records, as a serving system does."""

    def __init__(self, tft_output_dir: str, field_types: dict[str, FieldType] | None = None):
        self.tft_output_dir = tft_output_dir
        self.field_types = field_types
        self._output: Any = None
        self._spec: dict[str, Any] = {}

    def setup(self) -> None:
        import tensorflow_transform as tft

        try:
            self._output = tft.TFTransformOutput(self.tft_output_dir)
            try:
                self._spec = self._output.raw_feature_spec()
            except OSError:
                if not self.field_types:  # no raw metadata/ and no schema to type the inputs
                    raise
                self._spec = feature_spec(self.field_types)
        except Exception as exc:
            raise ConfigError(f"{self.tft_output_dir}: not a TFT output dir "
                              f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                              f"expected transform_fn/ and transformed_metadata/ as "
                              f"tft_beam.WriteTransformFn writes them") from exc

    def apply(self, records: list[dict]) -> list[dict]:
        if self._output is None:
            self.setup()
        if not records:
            return []
        inputs = {name: _column([r.get(name) for r in records], spec, name)
                  for name, spec in sorted(self._spec.items())}
        outputs = self._output.transform_raw_features(inputs, drop_unused_features=True)
        columns = {name: _rows(tensor, len(records)) for name, tensor in sorted(outputs.items())}
        return [{name: column[i] for name, column in columns.items()} for i in range(len(records))]


class PythonTransform:
    """Applies a `transform.python` function `fn(record) -> dict` to each record."""

    def __init__(self, fn: Callable[[dict], dict], ref_text: str):
        self._fn = fn
        self._ref = ref_text

    def apply_one(self, record: dict) -> dict:
        result = self._fn(dict(record))
        if not isinstance(result, dict):
            raise UserCodeError(f"transform.python '{self._ref}' returned a {type(result).__name__}, "
                                f"expected a dict of feature name to value")
        return result
