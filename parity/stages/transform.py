"""The `transform` stage: `python` functions, TFT `preprocessing_fn`s and exported TFT graphs.

`tft` analyses the side's replayed records with tensorflow-transform (`AnalyzeDataset`), exports the
transform graph, and then applies it to the records exactly like `saved` does: as a serving system applies
`transform_fn`, one batch of raw features at a time through `TFTransformOutput.transform_raw_features`.
Inputs are typed from the schema as tf.Example carries them: strings `tf.string`, integers `tf.int64`,
floats `tf.float32`; a null scalar takes the type's default (0, 0.0, b"") like a tf.Example parsed with a
default value; `list<T>` fields are `tf.io.VarLenFeature`s (SparseTensors).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

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


class TFTInput:
    """The replayed records of one side as TFT's analysis reads them: Arrow record batches.

    TFT turns instance dicts into record batches by encoding each one as a tf.Example and decoding the
    examples again (`_InstanceDictInputToTFXIOInput`), two Python calls per record. This builds the same
    record batches column by column: the arrow schema and tensor representations are the ones TFT's
    tf.Example reader gives the raw feature spec, and the values are `to_instance`'s (nulls as type
    defaults, strings as UTF-8). A batch the column builder cannot take whole (a value of another type than
    the field's, a list in a scalar field) goes the tf.Example way, record by record, so that the error and
    the values are exactly TFT's own.
    """

    def __init__(self, field_types: dict[str, FieldType]):
        from tensorflow_transform.tf_metadata import dataset_metadata
        from tfx_bsl.tfxio import tf_example_record

        self.field_types = field_types
        self.metadata = dataset_metadata.DatasetMetadata.from_feature_spec(feature_spec(field_types))
        reader = tf_example_record.TFExampleBeamRecord(physical_format="inmem", schema=self.metadata.schema,
                                                       telemetry_descriptors=["parity"])
        self.tensor_adapter_config = reader.TensorAdapterConfig()
        self._coder: Any = None
        self._decoder: Any = None

    def __getstate__(self) -> dict:
        return {"field_types": self.field_types}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["field_types"])  # type: ignore[misc]

    def record_batch(self, records: list[dict]) -> Any:
        """The records as one record batch of the analysis's arrow schema.

        Raises:
            RecordError: a record does not fit its schema (`to_instance`'s message); its `index` says which.
        """
        batch = self._by_column(records, nan_as_default=True)
        return batch if batch is not None else self._via_examples(records)

    def columnar_batch(self, records: list[dict]) -> Any:
        """The records as one record batch built column by column, or None: when a value leaves the batch to
        the tf.Example way (`record_batch` then takes it), or is a NaN in a field that is not a float (TFT
        reads it as the type's default, where the serving application refuses it). Its values are then
        what `SavedTransform.apply` makes of the records' own values, so `SavedTransform.apply_arrow` of it
        equals `apply` of them."""
        return self._by_column(records, nan_as_default=False)

    def _by_column(self, records: list[dict], nan_as_default: bool) -> Any:
        import pyarrow as pa

        schema = self.tensor_adapter_config.arrow_schema
        try:
            columns = [_arrow_column([r.get(name) for r in records], self.field_types[name],
                                     schema.field(name).type.value_type, nan_as_default)
                       for name in schema.names]
        except _NotColumnar:
            return None
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def record_batches(self, records: list[dict], size: int) -> Iterator[Any]:
        """The records as record batches of `size` rows (`record_batch` of each slice, in order).

        Raises:
            RecordError: as `record_batch`, its `index` counted from the start of `records`.
        """
        for start in range(0, len(records), size):
            try:
                yield self.record_batch(records[start:start + size])
            except RecordError as exc:
                raise RecordError(start + exc.index, str(exc)) from exc

    def _via_examples(self, records: list[dict]) -> Any:
        from tensorflow_transform.coders import example_proto_coder
        from tfx_bsl.coders import example_coder

        if self._coder is None:
            self._coder = example_proto_coder.ExampleProtoCoder(self.metadata.schema)
            self._decoder = example_coder.ExamplesToRecordBatchDecoder(self.metadata.schema.SerializeToString())
        examples = []
        for index, record in enumerate(records):
            try:
                examples.append(self._coder.encode(to_instance(record, self.field_types)))
            except (TypeError, ValueError) as exc:  # to_instance's refusal, or a value tf.Example cannot hold
                raise RecordError(index, str(exc)) from exc
        return self._decoder.DecodeBatch(examples)


class RecordError(ValueError):
    """A record of a batch does not fit its schema: `index` is its place in the batch."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index


class _NotColumnar(Exception):
    """A column holds values the column builder leaves to the tf.Example way."""


_ARROW_KINDS = {"int64": {int, bool}, "float32": {int, float, bool}, "string": {str, bytes}}


def _arrow_values(values: list, dtype_name: str, arrow_type: Any) -> Any:
    import pyarrow as pa

    if not set(map(type, values)) <= _ARROW_KINDS[dtype_name]:
        raise _NotColumnar
    if dtype_name == "string":
        try:
            return pa.array(values, type=arrow_type)  # str as its UTF-8 bytes
        except (pa.ArrowException, UnicodeError) as exc:
            raise _NotColumnar from exc
    try:
        with np.errstate(over="ignore"):  # a float64 beyond float32's range is inf, as in a tf.Example
            return pa.array(np.array(values, dtype=np.int64 if dtype_name == "int64" else np.float32))
    except (OverflowError, ValueError, TypeError) as exc:
        raise _NotColumnar from exc


def _arrow_column(values: list, ftype: FieldType, arrow_type: Any, nan_as_default: bool = True) -> Any:
    """One `large_list` column as TFT's tf.Example reader decodes it (a scalar field: one value per row).
    `nan_as_default=False`: a NaN in a scalar field that is not a float leaves the batch (`_NotColumnar`)."""
    import pyarrow as pa

    if ftype.is_list:
        dtype_name = _TF_DTYPE[ftype.element.name]  # type: ignore[union-attr]
        if not set(map(type, values)) <= {list, type(None)}:
            raise _NotColumnar  # a scalar in a list field
        rows = [() if v is None else v for v in values]
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        flat = [item for row in rows for item in row]
    else:
        dtype_name = _TF_DTYPE[ftype.name]
        default = _DEFAULT[dtype_name]
        if dtype_name == "float32" or not nan_as_default:
            # a NaN left in an int64 or string column is a float there, which `_arrow_values` refuses
            flat = [default if v is None else v for v in values]
        else:
            flat = [default if v is None or (type(v) is float and v != v) else v for v in values]
        lengths = np.ones(len(values), dtype=np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.LargeListArray.from_arrays(pa.array(offsets), _arrow_values(flat, dtype_name, arrow_type))


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
        default = _tf_value(default)
        kinds = set(map(type, values))
        if dtype == tf.string and kinds <= {str, bytes, type(None), list}:
            column = [default if v is None or type(v) is list else
                      v.encode("utf-8") if type(v) is str else v for v in values]
        elif dtype != tf.string and kinds <= {int, float}:
            column = values  # numpy converts these as it converts `_tf_value`'s
        else:
            column = []
            for value in values:
                if value is None or isinstance(value, list):
                    value = default
                column.append(_tf_value(value))
        if dtype == tf.string:
            return tf.constant(np.array(column, dtype=object), dtype=tf.string)
        return tf.constant(np.array(column, dtype=dtype.as_numpy_dtype))
    # the rows' values in one flat list and their lengths: what tf.ragged.constant builds, without its walk
    # of every nested list to find the shape
    rows = [value if isinstance(value, list) else [] if value is None else [value] for value in values]
    lengths = [len(row) for row in rows]
    flat = [item for row in rows for item in row]
    if not set(map(type, flat)) <= {int, float, bytes}:
        flat = [_tf_value(item) for item in flat]
    return _sparse(tf.constant(flat, dtype=dtype), np.cumsum([0, *lengths], dtype=np.int64))


def _sparse(values: Any, splits: np.ndarray) -> Any:
    """The SparseTensor of rows `values[splits[i]:splits[i + 1]]`: `RaggedTensor.from_row_splits(values,
    splits).to_sparse()`, built from numpy indices without the ragged tensor's validating ops (2,000 taxi
    rows of a list field: 0.07 against 0.65 ms)."""
    import tensorflow as tf

    lengths = np.diff(splits)
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    columns = np.arange(splits[-1] - splits[0], dtype=np.int64) - np.repeat(splits[:-1] - splits[0], lengths)
    width = int(lengths.max()) if len(lengths) else 0
    return tf.SparseTensor(np.stack([rows, columns], axis=1).reshape(-1, 2), values, [len(lengths), width])


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
        return self._features(len(records), lambda name, spec: _column([r.get(name) for r in records], spec, name))

    def apply_arrow(self, record_batches: list[Any]) -> list[dict]:
        """`apply` of the records of `TFTInput.columnar_batch`es (one call for all their rows), read from
        Arrow buffers instead of a Python call per value."""
        import pyarrow as pa

        table = pa.Table.from_batches(record_batches)
        return self._features(table.num_rows,
                              lambda name, spec: _arrow_tensor(table.column(name).combine_chunks(), spec))

    def _features(self, count: int, tensor: Callable[[str, Any], Any]) -> list[dict]:
        """Each of `count` records' features: the graph applied to the input tensors `tensor(name, spec)`
        builds for each raw feature."""
        if self._output is None:
            self.setup()
        if not count:
            return []
        inputs = {name: tensor(name, spec) for name, spec in sorted(self._spec.items())}
        # TensorFlow first binds the inputs to the graph's structured signature, fails, and only then calls its
        # flat one; the failed binding's message holds the repr of every input tensor, which numpy formats in
        # full up to 1,000 values (a 1,000-row taxi batch: 20 ms of 24 per call). Summarized, they cost little.
        with np.printoptions(threshold=0, edgeitems=1):
            outputs = self._output.transform_raw_features(inputs, drop_unused_features=True)
        columns = {name: _rows(t, count) for name, t in sorted(outputs.items())}
        return [{name: column[i] for name, column in columns.items()} for i in range(count)]


def _arrow_tensor(column: Any, spec: Any) -> Any:
    """The batch tensor of one `large_list` column of a `TFTInput.columnar_batch`: what `_column` builds from
    the same records (a scalar field holds one value per row; a list field becomes a SparseTensor)."""
    import pyarrow as pa
    import tensorflow as tf

    flat = column.flatten()
    if pa.types.is_binary(flat.type) or pa.types.is_large_binary(flat.type):
        values = flat.to_numpy(zero_copy_only=False)
    else:
        values = flat.to_numpy()
    if isinstance(spec, tf.io.FixedLenFeature):
        return tf.constant(values, dtype=spec.dtype)
    return _sparse(tf.constant(values, dtype=spec.dtype), column.offsets.to_numpy().astype(np.int64, copy=False))


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
