"""The `transform` stage: what a config says of it (`TransformSpec`), `python` functions, TFT `preprocessing_fn`s
and exported TFT graphs.

`tft` analyses the side's replayed records with tensorflow-transform (`AnalyzeDataset`), exports the
transform graph, and then applies it to the records exactly like `saved` does: as a serving system applies
`transform_fn`, one batch of raw features at a time through `TFTransformOutput.transform_raw_features`.
Inputs are typed from the schema as tf.Example carries them: strings `tf.string`, integers `tf.int64`,
floats `tf.float32`. Which tensor a field becomes is what TFX would make of the same schema
(`raw_feature_spec`): with a TFMD schema, `schema_utils.schema_as_feature_spec` of it, as TFX Transform does (a
feature with a `shape` is dense, any other a `SparseTensor`); with a mapping schema, `list<T>` and
`optional<T>` fields are `tf.io.VarLenFeature`s (SparseTensors: a null holds no value) and the other scalars
`FixedLenFeature`s, a null taking the type's default (0, 0.0, b"") like a tf.Example parsed with a default.

`saved` graphs are applied as serving applies them, whichever way they were exported: a TF2 SavedModel
eagerly, a TF1-compat one (`force_tf_compat_v1`, TFX Transform's default for years) in a `tf.compat.v1.Graph`
built once per worker, with placeholders from the graph's raw feature spec fed batch by batch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any, Callable, Iterator

import numpy as np

from parity.capture.schema import FieldType
from parity.capture.tfmd import newest_execution
from parity.errors import ConfigError, UserCodeError
from parity.stages.reference import Reference
from parity.storage.context import Storage

_TF_DTYPE = {"int64": "int64", "int32": "int64", "bool": "int64", "float64": "float32",
             "float32": "float32", "string": "string", "bytes": "string"}
_DEFAULT = {"int64": 0, "float32": 0.0, "string": b""}


@dataclass(frozen=True)
class TransformSpec:
    """A side's `transform:`: a `python` function or TFT `preprocessing_fn` (`ref`), or a `saved` graph (its
    `path`, or the side whose graph it applies: `from_side`)."""

    kind: str  # tft | saved | python
    ref: Reference | None = None
    path: str | None = None
    from_side: str | None = None
    custom_config: str | None = None  # tft: the JSON text of TFX Transform's `custom_config` (a frozen mapping)


def feature_spec(field_types: dict[str, FieldType]) -> dict[str, Any]:
    """The TFT raw feature spec of records with these field types (a mapping schema's)."""
    import tensorflow as tf

    spec: dict[str, Any] = {}
    for name, ftype in field_types.items():
        base = ftype.element if ftype.is_list else ftype
        dtype_name = _TF_DTYPE[base.name]  # type: ignore[union-attr]
        dtype = getattr(tf, dtype_name)
        if ftype.is_sparse:
            spec[name] = tf.io.VarLenFeature(dtype)
        else:
            # TFT schemas refuse defaults: parity fills nulls with the type default itself.
            spec[name] = tf.io.FixedLenFeature([], dtype)
    return spec


def tfmd_schema(text: str) -> Any:
    """The `schema_pb2.Schema` of a TFMD schema's text."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    return text_format.Parse(text, schema_pb2.Schema())


def raw_metadata(field_types: dict[str, FieldType], tfmd_text: str | None = None) -> Any:
    """The `DatasetMetadata` of the raw features a side's transform reads: a TFMD schema as it is (TFX hands
    Transform the same), plus the fields it lacks (the shard stage's aggregates) typed as `feature_spec` types
    them; or, without one, the metadata of `feature_spec(field_types)`."""
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    if tfmd_text is None:
        return dataset_metadata.DatasetMetadata.from_feature_spec(feature_spec(field_types))
    schema = tfmd_schema(tfmd_text)
    known = set(schema_utils.schema_as_feature_spec(schema).feature_spec)
    extra = {name: ftype for name, ftype in field_types.items() if name not in known}
    if extra:
        schema.feature.extend(schema_utils.schema_from_feature_spec(feature_spec(extra)).feature)
    return dataset_metadata.DatasetMetadata(schema)


def raw_feature_spec(field_types: dict[str, FieldType], tfmd_text: str | None = None) -> dict[str, Any]:
    """The feature spec `preprocessing_fn`'s inputs follow: `raw_metadata`'s, as TFX derives it."""
    from tensorflow_transform.tf_metadata import schema_utils

    return schema_utils.schema_as_feature_spec(raw_metadata(field_types, tfmd_text).schema).feature_spec


def _tf_value(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool):
        return int(value)
    return value


def to_instance(record: dict, field_types: dict[str, FieldType],
                sparse: frozenset[str] | None = None) -> dict[str, Any]:
    """A record as a TFT instance dict: nulls as type defaults, strings as UTF-8 bytes. `sparse` names the
    scalar fields read as `VarLenFeature`s (default: the optional ones): a value as one value, a null as none."""
    instance = {}
    for name, ftype in field_types.items():
        value = record.get(name)
        if ftype.is_list:
            instance[name] = [_tf_value(v) for v in value] if isinstance(value, list) else []
            continue
        if ftype.optional if sparse is None else name in sparse:
            if isinstance(value, list):
                raise ValueError(f"field '{name}' holds a list ({len(value)} values) but the schema says "
                                 f"{ftype}; declare it as list<...>")
            instance[name] = [] if value is None else [_tf_value(value)]
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

    def __init__(self, field_types: dict[str, FieldType], tfmd_text: str | None = None):
        import tensorflow as tf
        from tensorflow_transform.tf_metadata import schema_utils
        from tfx_bsl.tfxio import tf_example_record

        self.field_types = field_types
        self.tfmd_text = tfmd_text
        self.metadata = raw_metadata(field_types, tfmd_text)
        spec = schema_utils.schema_as_feature_spec(self.metadata.schema).feature_spec
        for name, one in spec.items():
            if not isinstance(one, (tf.io.FixedLenFeature, tf.io.VarLenFeature)):
                raise ConfigError(f"feature {name!r}: a {type(one).__name__} is not supported; parity feeds "
                                  f"FixedLenFeature and VarLenFeature inputs")
        # scalar fields TFX reads as VarLenFeatures (SparseTensors); FixedLenFeature fields: their value count
        self._sparse = frozenset(name for name, one in spec.items()
                                 if isinstance(one, tf.io.VarLenFeature) and not field_types[name].is_list)
        self._fixed = {name: int(np.prod(one.shape)) for name, one in spec.items()
                       if isinstance(one, tf.io.FixedLenFeature)}
        # scalar fields read as a FixedLenFeature of shape [1]: tf.Example encoding takes their value as a list
        self._boxed = frozenset(name for name, one in spec.items() if isinstance(one, tf.io.FixedLenFeature)
                                and list(one.shape) and not field_types[name].is_list)
        reader = tf_example_record.TFExampleBeamRecord(physical_format="inmem", schema=self.metadata.schema,
                                                       telemetry_descriptors=["parity"])
        self.tensor_adapter_config = reader.TensorAdapterConfig()
        self._coder: Any = None
        self._decoder: Any = None

    def __getstate__(self) -> dict:
        return {"field_types": self.field_types, "tfmd_text": self.tfmd_text}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["field_types"], state.get("tfmd_text"))  # type: ignore[misc]

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
                                     schema.field(name).type.value_type, nan_as_default,
                                     sparse=name in self._sparse, size=self._fixed.get(name, 1))
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
                instance = to_instance(record, self.field_types, self._sparse)
                for name in self._boxed:
                    instance[name] = [instance[name]]
                examples.append(self._coder.encode(instance))
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


def _arrow_column(values: list, ftype: FieldType, arrow_type: Any, nan_as_default: bool = True,
                  sparse: bool = False, size: int = 1) -> Any:
    """One `large_list` column as TFT's tf.Example reader decodes it (a scalar field: one value per row; a
    `sparse` one, read as a VarLenFeature: its value, or none for a null). `nan_as_default=False`: a NaN in a
    scalar field that is not a float leaves the batch (`_NotColumnar`). A list read as a FixedLenFeature of
    `size` values, and any value the builder does not take, leave it to the tf.Example way too."""
    import pyarrow as pa

    if ftype.is_list and size != 1:
        raise _NotColumnar  # a FixedLenFeature of several values: the tf.Example way checks each count
    if sparse:
        dtype_name = _TF_DTYPE[ftype.name]
        if list in set(map(type, values)):
            raise _NotColumnar  # a list in a scalar field: to_instance names it
        lengths = np.fromiter((value is not None for value in values), dtype=np.int64, count=len(values))
        flat = [value for value in values if value is not None]
    elif ftype.is_list:
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
            array = np.array(column, dtype=object)
        else:
            with np.errstate(over="ignore"):  # a float64 beyond float32's range is inf, as in a tf.Example
                array = np.array(column, dtype=dtype.as_numpy_dtype)
        return tf.constant(_shaped(array, spec, name), dtype=dtype)
    # the rows' values in one flat list and their lengths: what tf.ragged.constant builds, without its walk
    # of every nested list to find the shape
    rows = [value if isinstance(value, list) else [] if value is None else [value] for value in values]
    lengths = [len(row) for row in rows]
    flat = [item for row in rows for item in row]
    if not set(map(type, flat)) <= {int, float, bytes}:
        flat = [_tf_value(item) for item in flat]
    return _sparse(tf.constant(flat, dtype=dtype), np.cumsum([0, *lengths], dtype=np.int64))


def _shaped(array: np.ndarray, spec: Any, name: str) -> np.ndarray:
    """A FixedLenFeature's column of one value per row as the `[batch, *shape]` array serving parses it to
    (`shape` `[]` or `[1]`; one of several values is not a scalar field, and tf.Example parsing refuses it)."""
    shape = list(spec.shape)
    if int(np.prod(shape)) != 1:
        raise ValueError(f"feature {name!r} has a fixed shape {shape} in the graph's raw feature spec, but the "
                         f"records hold one value; declare the field as list<...> in capture.schema")
    return array.reshape([-1, *shape]) if shape else array


def _sparse(values: Any, splits: np.ndarray) -> Any:
    """The SparseTensor of rows `values[splits[i]:splits[i + 1]]`: `RaggedTensor.from_row_splits(values,
    splits).to_sparse()`, built from numpy indices without the ragged tensor's validating ops, which cost
    several times more."""
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
    """Per-record Python values of one output: an eager tensor, or the numpy array a TF1 session returns for
    a dense one."""
    import tensorflow as tf

    if isinstance(tensor, tf.SparseTensor):
        tensor = tf.RaggedTensor.from_sparse(tensor)
    if isinstance(tensor, tf.RaggedTensor):
        return [_values(row) for row in _ragged_rows(tensor)]
    array = tensor if isinstance(tensor, np.ndarray) else tensor.numpy()
    if array.ndim == 1:
        return _values(array)
    return [_values(np.ravel(row)) for row in array]


def _ragged_rows(tensor: Any) -> list:
    values = tensor.flat_values.numpy()
    splits = tensor.row_splits.numpy()
    return [values[splits[i]:splits[i + 1]] for i in range(len(splits) - 1)]


GRAPH_DIR = "transform_fn"


def find_graph_dir(path: str) -> str:
    """The exported TFT output folder that `path` names: the folder holding `transform_fn/` itself, or, as a TFX
    pipeline root lays out the Transform component's artifact, `Transform/` or `Transform/transform_graph/`,
    whose execution folders (`transform_graph/<id>/`) hold one each: the newest (largest id) is taken.

    Raises:
        ConfigError: no exported graph is there; the message says what was looked for.
    """
    if os.path.isdir(os.path.join(path, GRAPH_DIR)):
        return path
    if os.path.isdir(os.path.join(path, "transform_graph")):
        return find_graph_dir(os.path.join(path, "transform_graph"))
    newest = newest_execution(path, GRAPH_DIR)
    if newest is not None:
        return newest
    raise ConfigError(f"{path}: no exported transform graph there; expected a TFT output folder holding "
                      f"transform_fn/ (as tft_beam.WriteTransformFn writes it), or a TFX Transform component's "
                      f"transform_graph/<execution id>/ folders")


def local_graph(path: str, storage: Storage) -> str:
    """The exported graph at `path` where TensorFlow can load it: `path` itself when local; for a URL
    (`saved: s3://...`), `find_graph_dir` of its local copy (`Storage.local_copy`, made once per process).
    TensorFlow's own file system (tf.io.gfile) reads only local paths, `gs://` and `ram://` in this installation
    (no `s3://`: that needs tensorflow-io, which has no build for TF 2.21); copying through Beam's FileSystems
    works for every scheme Beam reads, on the client and on workers alike.

    Raises:
        ConfigError: nothing can be read under the URL, or it holds no exported graph.
    """
    try:
        target = storage.local_copy(path, prefix="parity-saved-")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot copy the exported transform graph to a local folder: {exc}; check "
                          f"the URL and the storage options (e.g. -- --s3_endpoint_url=...)") from exc
    if target == path:  # a local path, already the graph's folder (the config's loader found it)
        return path
    try:
        return find_graph_dir(target)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace(target, path.rstrip("/"))) from exc


class SavedTransform:
    """Applies an exported TFT output dir to batches of records, as a serving system does: a TF2 export eagerly
    (`TFTransformOutput.transform_raw_features`), a TF1-compat export in a graph and session of its own (built
    once, at the first batch), since TFT can only import a TF1 SavedModel into a graph."""

    def __init__(self, tft_output_dir: str, field_types: dict[str, FieldType] | None = None,
                 tfmd_text: str | None = None, storage: Storage = Storage()):
        self.tft_output_dir = tft_output_dir
        self._storage = storage
        self.field_types = field_types
        self.tfmd_text = tfmd_text
        self._output: Any = None
        self._spec: dict[str, Any] = {}
        self._session: Any = None  # a TF1-compat graph's (session, input placeholders, output tensors)

    def setup(self) -> None:
        import tensorflow_transform as tft

        try:
            self.tft_output_dir = local_graph(self.tft_output_dir, self._storage)  # a URL's graph: its local copy
            self._output = tft.TFTransformOutput(self.tft_output_dir)
            try:
                self._spec = self._output.raw_feature_spec()
            except OSError:
                if not self.field_types:  # no raw metadata/ and no schema to type the inputs
                    raise
                self._spec = raw_feature_spec(self.field_types, self.tfmd_text)
            if exported_as_v1(self.tft_output_dir):
                self._session = self._tf1_session()
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"{self.tft_output_dir}: not a TFT output dir that can be applied "
                              f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); "
                              f"expected transform_fn/ and transformed_metadata/ as "
                              f"tft_beam.WriteTransformFn writes them") from exc

    def _tf1_session(self) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """The graph a TF1-compat export is applied in: one placeholder per raw feature of the graph's own spec
        (a sparse one for a VarLenFeature), the transformed features, and a session with the tables initialized."""
        import tensorflow as tf

        graph = tf.compat.v1.Graph()
        with graph.as_default():
            placeholders: dict[str, Any] = {}
            for name, spec in sorted(self._spec.items()):
                if isinstance(spec, tf.io.FixedLenFeature):
                    placeholders[name] = tf.compat.v1.placeholder(spec.dtype, [None, *spec.shape])
                elif isinstance(spec, tf.io.VarLenFeature):
                    placeholders[name] = tf.compat.v1.sparse_placeholder(spec.dtype, [None, None])
                else:
                    raise ConfigError(f"{self.tft_output_dir}: raw feature {name!r} is a {type(spec).__name__}; "
                                      f"parity feeds FixedLenFeature and VarLenFeature inputs")
            outputs = dict(self._output.transform_raw_features(placeholders, drop_unused_features=True))
            initialize = tf.compat.v1.tables_initializer()
        session = tf.compat.v1.Session(graph=graph)
        session.run(initialize)
        return session, placeholders, outputs

    def apply(self, records: list[dict]) -> list[dict]:
        return self._features(len(records), lambda name, spec: _column([r.get(name) for r in records], spec, name))

    def apply_arrow(self, record_batches: list[Any]) -> list[dict]:
        """`apply` of the records of `TFTInput.columnar_batch`es (one call for all their rows), read from
        Arrow buffers instead of a Python call per value."""
        import pyarrow as pa

        table = pa.Table.from_batches(record_batches)
        return self._features(table.num_rows,
                              lambda name, spec: _arrow_tensor(table.column(name).combine_chunks(), spec, name))

    def _features(self, count: int, tensor: Callable[[str, Any], Any]) -> list[dict]:
        """Each of `count` records' features: the graph applied to the input tensors `tensor(name, spec)`
        builds for each raw feature."""
        if self._output is None:
            self.setup()
        if not count:
            return []
        inputs = {name: tensor(name, spec) for name, spec in sorted(self._spec.items())}
        if self._session is not None:
            outputs = _run_tf1(self._session, inputs)
        else:
            # TensorFlow first binds the inputs to the graph's structured signature, fails, and only then calls
            # its flat one; the failed binding's message holds the repr of every input tensor, which numpy
            # formats in full up to 1,000 values (a 1,000-row batch: most of the call). Summarized, they cost
            # little.
            with np.printoptions(threshold=0, edgeitems=1):
                outputs = self._output.transform_raw_features(inputs, drop_unused_features=True)
        columns = {name: _rows(t, count) for name, t in sorted(outputs.items())}
        return [{name: column[i] for name, column in columns.items()} for i in range(count)]


def exported_as_v1(tft_output_dir: str) -> bool:
    """Whether an exported TFT graph is a TF1-compat SavedModel (`force_tf_compat_v1=True`)."""
    from tensorflow_transform.saved import saved_transform_io

    return bool(saved_transform_io.exported_as_v1(os.path.join(tft_output_dir, GRAPH_DIR)))


def _run_tf1(session: tuple[Any, dict[str, Any], dict[str, Any]], inputs: dict[str, Any]) -> dict[str, Any]:
    """A TF1-compat graph's outputs for one batch of input tensors, as `_rows` reads them: dense ones as the
    session's numpy arrays, sparse and ragged ones as eager tensors."""
    import tensorflow as tf

    run, placeholders, outputs = session
    feed = {}
    for name, placeholder in placeholders.items():
        value = inputs[name]
        if isinstance(value, tf.SparseTensor):
            feed[placeholder] = tf.compat.v1.SparseTensorValue(value.indices.numpy(), value.values.numpy(),
                                                               value.dense_shape.numpy())
        else:
            feed[placeholder] = value.numpy()
    results = run.run(outputs, feed_dict=feed)
    converted = {}
    for name, result in results.items():
        if isinstance(result, tf.compat.v1.SparseTensorValue):
            converted[name] = tf.SparseTensor(result.indices, result.values, result.dense_shape)
        elif isinstance(result, tf.compat.v1.ragged.RaggedTensorValue):
            converted[name] = tf.RaggedTensor.from_nested_row_splits(result.flat_values,
                                                                     result.nested_row_splits)
        else:
            converted[name] = np.asarray(result)  # `_rows` reads a dense result as it is
    return converted


def _arrow_tensor(column: Any, spec: Any, name: str = "") -> Any:
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
        return tf.constant(_shaped(values, spec, name), dtype=spec.dtype)
    return _sparse(tf.constant(values, dtype=spec.dtype), column.offsets.to_numpy().astype(np.int64, copy=False))


def _shown(value: Any, limit: int = 60) -> str:
    import reprlib

    shower = reprlib.Repr()
    shower.maxstring = shower.maxother = limit
    text = shower.repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class PythonTransform:
    """Applies a `transform.python` function `fn(record) -> dict` to each record."""

    def __init__(self, fn: Callable[[dict], dict], ref_text: str):
        self._fn = fn
        self._ref = ref_text

    def apply_one(self, record: dict) -> dict:
        return self._checked(self._fn(dict(record)))

    def apply_many(self, records: list[dict]) -> list[dict]:
        """`apply_one` of each record, in order: the function mapped over copies of the records and its results
        checked a batch at a time (C-speed `map`s), with no Python call of parity's per record.

        Raises:
                UserCodeError: a result is not a dict of str names (`apply_one`'s message, for the first such).
            Exception, SystemExit: whatever the function raises, unchanged.
        Either way the caller finds the record (`apply_one` on each record alone, in order) to name it.
        """
        results = list(map(self._fn, map(dict, records)))
        if not all(map(isinstance, results, repeat(dict))) or not set(map(type, chain.from_iterable(results))) <= {str}:
            for result in results:  # the first result apply_one refuses
                self._checked(result)
        return results

    def _checked(self, result: Any) -> dict:
        """`result` of the function, when it is a dict whose names are all str; else a UserCodeError."""
        if not isinstance(result, dict):
            raise UserCodeError(f"transform.python '{self._ref}' returned a {type(result).__name__}, "
                                f"expected a dict of feature name to value")
        for name in result:
            if type(name) is not str:  # else Arrow's "Expected bytes, got a 'tuple' object" when the set is written
                raise UserCodeError(f"transform.python '{self._ref}' returned a feature named {_shown(name)} "
                                    f"({type(name).__name__}); feature names must be strings")
        return result
