"""Canonical bytes and fingerprints of Arrow record batches, column by column, without a dict per row.

`row_encodings(batch)` gives, for each row of a `pyarrow.RecordBatch`, the canonical bytes and ``xxh3_64``
of the dict ``{name: value}`` that ``batch.to_pylist()`` would give for that row: exactly
``fingerprint.encode_fingerprints(batch.to_pylist())``, computed by the C encoder (``encode_batch``)
straight from the Arrow buffers, which it reads through the Arrow C data interface
(``__arrow_c_array__``). Covered: null, bool, the integer types, float32/float64, string, binary (and
their large forms), and lists (and large lists) of any of these, nested to any depth. Any other column
(structs, maps, timestamps, decimals, dictionaries, float16), two equal names, or a build without the C
encoder give None: the caller then encodes the rows as dicts, with the same bytes.

The Parquet reader (`parity/capture/parquet.py`) uses `row_encodings` for the `input` stage of each record
batch whose columns the schema leaves as they are (`identity_schema`): the replay steps after it hold a
record's bytes and fingerprint as Python objects.

Example:
    >>> import pyarrow as pa
    >>> from parity.encoding import canonical
    >>> batch = pa.RecordBatch.from_pydict({"fare": [7.5, None], "zone": ["A", "B"]})
    >>> data, fps = row_encodings(batch)
    >>> data == canonical.encode_many(batch.to_pylist())
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import pyarrow as pa

from parity.encoding import canonical

__all__ = ["covered", "identity_schema", "row_encodings"]

_FLAT = {
    pa.null(), pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
    pa.uint64(), pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
}

# Arrow types whose `to_pylist()` values a schema type keeps unchanged (parity.capture.schema.coerce): a batch whose
# columns all pair up this way reads as its own rows, so their encodings are the records' encodings.
_SMALL_INTS = {pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16()}
_IDENTITY: dict[str, set] = {
    "int64": _SMALL_INTS | {pa.int64(), pa.uint32()},
    "int32": _SMALL_INTS,
    "float64": {pa.float64(), pa.float32()},
    "float32": {pa.float32()},
    "string": {pa.string(), pa.large_string()},
    "bytes": {pa.binary(), pa.large_binary()},
    "bool": {pa.bool_()},
}


def covered(arrow_type: pa.DataType) -> bool:
    """Whether `row_encodings` encodes columns of this type."""
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return covered(arrow_type.value_type)
    return arrow_type in _FLAT


class FieldType(Protocol):
    """What the encoding reads of a capture field type (`parity.capture.schema.FieldType`, which it does not
    import: the encoding imports nothing of the readers above it, hints included)."""

    @property
    def name(self) -> str: ...

    @property
    def element(self) -> FieldType | None: ...

    @property
    def is_list(self) -> bool: ...


def _identical(arrow_type: pa.DataType, wanted: FieldType) -> bool:
    """Whether `coerce(value, wanted)` is the value itself for every `to_pylist()` value of `arrow_type`."""
    if arrow_type == pa.null():
        return True
    if wanted.is_list:
        return ((pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type))
                and _identical(arrow_type.value_type, wanted.element))
    return arrow_type in _IDENTITY[wanted.name]


def identity_schema(arrow_schema: pa.Schema, schema: Mapping[str, FieldType] | None) -> bool:
    """Whether `coerce_record` leaves every row of batches of `arrow_schema` as `to_pylist()` gives it (but
    for schema fields missing from the file, which it adds as None), and `row_encodings` covers the columns."""
    names = arrow_schema.names
    if len(set(names)) != len(names):
        return False
    for field in arrow_schema:
        if not covered(field.type):
            return False
        wanted = schema.get(field.name) if schema else None
        if wanted is not None and not _identical(field.type, wanted):
            return False
    return True


def row_encodings(batch: pa.RecordBatch, null_fields: Iterable[str] = (),
                  float32_as_float64: bool = True) -> tuple[list[bytes], list[int]] | None:
    """Each row's canonical bytes and fingerprint, the row being ``{name: value}`` over the batch's columns
    plus a None for each of `null_fields` the batch lacks; None when a column is not covered (see the module
    docstring) or without the C encoder.

    float32 values are encoded as the Python floats ``to_pylist()`` makes of them (tag ``f``), or, with
    ``float32_as_float64=False``, as float32 (tag ``g``, as numpy.float32 values are).
    """
    native = canonical._native
    if native is None:
        return None
    names = tuple(batch.schema.names)
    nulls = tuple(name for name in null_fields if name not in names)
    return native.encode_batch(batch, names, nulls, float32_as_float64)
