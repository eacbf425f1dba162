"""TensorFlow Metadata schemas (SchemaGen's `schema.pbtxt`) as capture schemas.

A TFX pipeline already states its raw features' types and shapes in a TFMD `Schema`; `capture.schema` may name
it instead of repeating it as a mapping. The field types come from each feature's `type` and shape:

| TFMD feature | parity type |
|---|---|
| `type: INT` / `FLOAT` / `BYTES` | `int64` / `float32` (tf.Example's floats) / `bytes` |
| one value (`value_count {min: 1 max: 1}`, or `shape` of one element) and `presence.min_fraction: 1` | a required scalar `T` |
| at most one value, but may be absent (`min_fraction` below 1 or unset, or `value_count.min` 0) | `optional<T>` |
| several values (`value_count.max` above 1 or unset, or a `shape` of several elements) | `list<T>` |

What a `tft` side's `preprocessing_fn` receives is decided apart from this, by the schema itself, exactly as
TFX decides it (`schema_utils.schema_as_feature_spec`): a feature with a `shape` is a dense tensor, every other
feature a `SparseTensor` (`transform.raw_feature_spec`). Features whose lifecycle stage TFX leaves out of the
feature spec (deprecated, planned, disabled, ...) are left out here too. Sparse, ragged and struct features
(`sparse_feature`, tensor representation groups, `STRUCT`) are refused: they need a layout parity does not read.

Only the protobuf text format is parsed here (no TensorFlow import): a config loads in milliseconds.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from parity.capture.schema import FieldType
from parity.storage.files import special_kind

SCHEMA_FILE = "schema.pbtxt"
_TYPES = {"INT": "int64", "FLOAT": "float32", "BYTES": "bytes"}
# the lifecycle stages tfx_bsl's tensor representation inference leaves out of a schema's feature spec
_EXCLUDED_STAGES = ("PLANNED", "ALPHA", "DEBUG_ONLY", "DEPRECATED", "DISABLED")
_EXECUTION_ID = re.compile(r"^\d+$")


class TFMDError(ValueError):
    """A TFMD schema cannot be read or holds what parity cannot map; the message says what and how to fix it."""


@dataclass(frozen=True)
class TFMDSchema:
    """A TFMD schema as a capture schema: its path, its text (the source of the TFT feature spec) and the
    field types it gives, in the schema's feature order."""

    path: str
    text: str
    fields: tuple[tuple[str, FieldType], ...]


def newest_execution(folder: str, holds: str) -> str | None:
    """A TFX component output's newest execution folder (`<folder>/<largest id>/`) among those holding `holds`
    (a file or folder name), as a pipeline root lays them out (`SchemaGen/schema/2/schema.pbtxt`,
    `Transform/transform_graph/3/transform_fn/`); None when none does."""
    if not os.path.isdir(folder):
        return None
    ids = [int(name) for name in os.listdir(folder)
           if _EXECUTION_ID.match(name) and os.path.exists(os.path.join(folder, name, holds))]
    return os.path.join(folder, str(max(ids))) if ids else None


def find_schema_file(path: str) -> str:
    """The `schema.pbtxt` that `path` names: the file itself, the one in the folder, or, in a TFX component's
    output folder (`SchemaGen/schema/`), the one of its newest execution (the largest execution id).

    Raises:
        TFMDError: there is no such file; the message says where it looked.
    """
    special = special_kind(path)
    if special is not None:
        raise TFMDError(f"{path} is {special}, not a regular file; give a schema.pbtxt or SchemaGen's output folder")
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise TFMDError(f"{path} does not exist; give a schema.pbtxt or SchemaGen's output folder")
    direct = os.path.join(path, SCHEMA_FILE)
    special = special_kind(direct)
    if special is not None:
        raise TFMDError(f"{direct} is {special}, not a regular file; give a schema.pbtxt or SchemaGen's output folder")
    if os.path.isfile(direct):
        return direct
    newest = newest_execution(path, SCHEMA_FILE)
    if newest is not None:
        return os.path.join(newest, SCHEMA_FILE)
    raise TFMDError(f"{path} is a folder without {SCHEMA_FILE} (nor execution folders holding one); give "
                    f"SchemaGen's output folder or the schema.pbtxt itself")


def load(path: str) -> TFMDSchema:
    """Reads a TFMD schema (a `schema.pbtxt` or a folder holding one) and maps its features to field types.

    Raises:
        TFMDError: the file cannot be read, is not a TFMD Schema in text format, or holds a feature parity
            cannot map; the message names the file (and line or feature).
    """
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    file = find_schema_file(path)
    try:
        with open(file, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise TFMDError(f"{file}: cannot read the schema: {exc}") from exc
    try:
        schema = text_format.Parse(text, schema_pb2.Schema())
    except text_format.ParseError as exc:
        raise TFMDError(f"{file}: not a TensorFlow Metadata Schema in text format: {exc}") from exc
    return TFMDSchema(os.path.abspath(file), text, tuple(field_types(schema, file).items()))


def field_types(schema, where: str) -> dict[str, FieldType]:
    """The parity field type of each feature of a `schema_pb2.Schema`, in the schema's order."""
    from tensorflow_metadata.proto.v0 import schema_pb2

    if schema.sparse_feature:
        names = ", ".join(f.name for f in schema.sparse_feature)
        raise TFMDError(f"{where}: sparse_feature {names}: sparse features are not supported; list their index "
                        f"and value features as plain features")
    if schema.tensor_representation_group:
        raise TFMDError(f"{where}: tensor_representation_group: custom tensor representations are not "
                        f"supported; remove them (TFX then infers one tensor per feature)")
    types: dict[str, FieldType] = {}
    for feature in schema.feature:
        if _excluded(feature, schema_pb2):
            continue
        type_name = schema_pb2.FeatureType.Name(feature.type)
        if type_name not in _TYPES:
            raise TFMDError(f"{where}: feature {feature.name!r}: type {type_name} is not supported; expected "
                            f"INT, FLOAT or BYTES")
        scalar = _TYPES[type_name]
        try:
            types[feature.name] = _shape_type(feature, scalar)
        except TFMDError as exc:
            raise TFMDError(f"{where}: {exc}") from None
    if not types:
        raise TFMDError(f"{where}: the schema has no feature parity can read")
    return types


def _excluded(feature, schema_pb2) -> bool:
    if feature.deprecated:
        return True
    stage = schema_pb2.LifecycleStage.Name(feature.lifecycle_stage)
    return stage in _EXCLUDED_STAGES


def _shape_type(feature, scalar: str) -> FieldType:
    required = feature.presence.min_fraction == 1.0
    if feature.HasField("shape"):
        size = 1
        for dim in feature.shape.dim:
            size *= dim.size
        return FieldType(scalar, optional=not required) if size == 1 else FieldType("list", FieldType(scalar))
    if feature.HasField("value_count"):
        low, high = feature.value_count.min, feature.value_count.max
        if high == 1:
            return FieldType(scalar, optional=not (required and low == 1))
    if feature.value_counts.value_count:
        raise TFMDError(f"feature {feature.name!r}: nested value_counts are not supported")
    return FieldType("list", FieldType(scalar))
