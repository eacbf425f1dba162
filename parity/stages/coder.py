"""The `coder` stage: record coders as Beam `Coder`s and the per-batch encode/decode round trip.

Each built-in coder is a faithful model of what its format does to a record's values, so that a side whose
production path goes through, say, tf.Example shows the float32 rounding it really suffers
(docs/divergence-catalog.md, C1-C8):

- `json`: `json.dumps(sort_keys=True, allow_nan=True)`. Bytes -> str (their UTF-8 text), numpy scalars ->
  Python scalars, tuples -> lists; with `int_as_double`, ints beyond 2^53 are rounded through float64.
- `tfexample`: a `tf.train.Example`. Floats -> float32; untyped str -> bytes; None -> absent -> None.
- `avro`: fastavro schemaless with a record schema from the field types. `float32` fields rounded, ints in
  double fields -> float, untyped fields -> `str(value)`.
- `pickle`: protocol 4. Nothing changes (numpy scalars stay numpy scalars).
- `arrow`: a one-row `RecordBatch` in an IPC stream. Numpy scalars -> Python scalars, mixed int/float lists
  -> floats, ints beyond int64 fail.

A record the format cannot hold (an int beyond int64 for Arrow, a str in an Avro `long` field, invalid UTF-8
bytes for JSON) fails its round trip: `roundtrip_batch` turns that into a `CoderFailure`, reported, not
dropped.
"""

from __future__ import annotations

import functools
import io
import json
import math
import numbers
import pickle
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from types import ModuleType
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
from apache_beam.coders import Coder

from parity.capture.schema import SCALAR_TYPES, FieldType, parse_type
from parity.encoding import canonical
from parity.stages.reference import Reference

CODER_TYPES: tuple[str, ...] = ("json", "tfexample", "avro", "pickle", "arrow")

_OPTIONS: dict[str, tuple[str, ...]] = {
    "json": ("int_as_double",), "tfexample": (), "avro": (), "pickle": (), "arrow": ()}
# (scalar type name, is_list): a FieldType reduced to plain data, so coders pickle and compare by value.
_Type = tuple[str, bool]


@dataclass(frozen=True)
class CoderSpec:
    """Which coder a side uses (`coder:` in a config): a built-in `type` with its `options`, or a `factory`
    returning a Beam Coder. A loaded config holds the factory's reference (`module:attr`, a `Reference`); the
    replay imports it when it builds the stage.

    Raises:
        ValueError: neither or both of `type` and `factory`, an unknown type, or an option the type lacks.
    """

    type: str | None = None
    factory: Callable[[], Coder] | Reference | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The config loader hands options over as (name, value) pairs; keep one shape.
        object.__setattr__(self, "options", dict(self.options))
        if (self.type is None) == (self.factory is None):
            raise ValueError("a coder needs exactly one of 'type' or a factory")
        if self.factory is not None:
            if self.options:
                raise ValueError(f"a custom coder factory takes no options, got {sorted(self.options)}")
            return
        if self.type not in CODER_TYPES:
            raise ValueError(f"unknown coder {self.type!r}; expected one of {', '.join(CODER_TYPES)}")
        unknown = sorted(set(self.options) - set(_OPTIONS[self.type]))
        if unknown:
            accepted = ", ".join(_OPTIONS[self.type]) or "none"
            raise ValueError(f"coder {self.type!r} has no option {unknown[0]!r}; accepted: {accepted}")
        if not isinstance(self.options.get("int_as_double", False), bool):
            raise ValueError(f"int_as_double must be true or false, got {self.options['int_as_double']!r}")


@dataclass(frozen=True)
class CoderFailure:
    """A record whose encode/decode raised; `message` is `"<encode|decode>: <ExceptionType>: <text>"`."""

    message: str


def build_coder(spec: CoderSpec, field_types: Mapping[str, FieldType | str] | None = None) -> Coder:
    """The Beam Coder `spec` names; `field_types` types the record's fields (tfexample and avro use them).

    Raises:
        TypeError: a factory returned something that is not an `apache_beam.coders.Coder`.
    """
    if spec.factory is not None:
        coder = spec.factory()
        if not isinstance(coder, Coder):
            raise TypeError(f"coder factory {spec.factory!r} returned {type(coder).__name__}, "
                            f"expected an apache_beam.coders.Coder")
        return coder
    if spec.type == "json":
        return JsonRecordCoder(int_as_double=spec.options.get("int_as_double", False))
    if spec.type == "tfexample":
        return TFExampleRecordCoder(field_types)
    if spec.type == "avro":
        return AvroRecordCoder(field_types)
    if spec.type == "pickle":
        return PickleRecordCoder()
    return ArrowRecordCoder()


def roundtrip_batch(coder: Coder, records: Iterable[dict[str, Any]]) -> list[dict[str, Any] | CoderFailure]:
    """Encode then decode each record; a record that raises becomes a `CoderFailure` in its place.

    A built-in coder with a `roundtrip_many` method round-trips the whole batch in one call first (the same
    values: each record is encoded and decoded alone either way); when that raises, records go one by one.
    """
    many = getattr(coder, "roundtrip_many", None) if type(coder) in _BATCHED else None
    if many is not None:
        records = list(records)
        try:
            return many(records)
        except Exception:  # some record fails: find which, one at a time
            pass
    out: list[dict[str, Any] | CoderFailure] = []
    for record in records:
        phase = "encode"
        try:
            data = coder.encode(record)
            phase = "decode"
            decoded = coder.decode(data)
            if not isinstance(decoded, dict):
                raise TypeError(f"{type(coder).__name__} decoded a {type(decoded).__name__}, expected a dict")
        except Exception as exc:  # any failure of (possibly user) coder code is reported per record
            out.append(CoderFailure(f"{phase}: {type(exc).__name__}: {exc}"))
        else:
            out.append(decoded)
    return out


class JsonRecordCoder(Coder):
    """JSON text, as a JSON sink and source would carry the record.

    Bytes are written as their UTF-8 text (so they come back as str; invalid UTF-8 fails), numpy scalars as
    their Python value, NaN/Infinity as Python's non-standard tokens. Python's json keeps big ints exact;
    `int_as_double=True` models a consumer that parses every number as a double (JavaScript, Jackson with
    doubles, jq): an int beyond 2^53 comes back rounded through float64, then as an int again.
    """

    def __init__(self, int_as_double: bool = False) -> None:
        self.int_as_double = int_as_double

    def encode(self, value: dict[str, Any]) -> bytes:
        return json.dumps(value, sort_keys=True, allow_nan=True, default=_json_default).encode("utf-8")

    def decode(self, encoded: bytes) -> dict[str, Any]:
        if self.int_as_double:
            return json.loads(encoded, parse_int=_int_through_double)
        return json.loads(encoded)

    def roundtrip_many(self, values: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`decode(encode(v))` of each value. A batch whose round trip is known (`json_roundtrip_known`: flat
        records of plain JSON scalars) is not encoded; any other goes through `encode` and `decode` record by
        record. Raises when any record fails or decodes to something other than a dict."""
        known = json_roundtrip_known(values)
        if known is not None:
            return known
        decoded = [self.decode(self.encode(value)) for value in values]
        if not all(type(value) is dict for value in decoded):
            raise TypeError("a record decoded to something other than a dict")  # roundtrip_batch says which
        return decoded

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> type:
        return dict

    def __repr__(self) -> str:
        return f"JsonRecordCoder(int_as_double={self.int_as_double})"


# Values whose JSON text reads back as an equal value of the same type (with limits: `_json_column_known`).
_JSON_SCALARS = frozenset({type(None), bool, int, float, str})
# Ints within it are written and read back exactly by either reading (a double holds every one of them).
_JSON_EXACT_INT = 2 ** 53


def json_roundtrip_known(records: list[Any]) -> list[dict[str, Any]] | None:
    """What `JsonRecordCoder`'s round trip gives for each record, when it is known without running it; else None.

    It is known for exact dicts of str keys whose values are None, bool, int within +-2**53, finite float or
    str, or exact lists of those (`_json_column_known` checks them a column at a time): `json.dumps` writes each
    such value as text that `json.loads` reads back equal and of the same type, with or without
    `int_as_double` (floats bit for bit, -0.0 included, as `repr` writes them; strs and keys without
    surrogates, which `ensure_ascii` would write as escapes that read back paired). The round trip then gives
    each record as a new dict with its keys in sorted order (`sort_keys`) and new lists. Declined (None), so
    that the real round trip runs: a NaN or an infinity (read back as a new float, its sign and payload lost),
    a larger int (rounded under `int_as_double`; beyond Python's digit limit json cannot write it), bytes
    (read back as str), tuples (as lists), nested dicts and lists, subclasses, numpy values, non-str keys."""
    if set(map(type, records)) - {dict}:
        return None
    keys = set(chain.from_iterable(records))
    if not _json_column_known(keys, frozenset({str})):
        return None
    order = sorted(keys)
    if set(map(len, records)) - {len(order)}:  # the records differ in their keys: their values as one column
        values = list(chain.from_iterable(map(dict.values, records)))
        if not _json_column_known(values, _JSON_SCALARS | {list}):
            return None
        return [{key: list(record[key]) if type(record[key]) is list else record[key] for key in sorted(record)}
                for record in records]
    columns = [list(map(itemgetter(key), records)) for key in order]
    for index, column in enumerate(columns):
        if not _json_column_known(column, _JSON_SCALARS | {list}):
            return None
        if list in set(map(type, column)):
            columns[index] = [list(value) if type(value) is list else value for value in column]
    if not order:
        return [{} for _ in records]
    return [dict(zip(order, row)) for row in zip(*columns)]


def _json_column_known(column: Any, kinds: frozenset[type]) -> bool:
    """Whether each value of `column` (a collection) has one of the exact types `kinds` allows (a list's items:
    the JSON scalars) and reads back from its JSON text as `json_roundtrip_known` says: ints within +-2**53,
    floats finite, strs without surrogates."""
    found = set(map(type, column))
    if found - kinds:
        return False
    for kind in found:
        values = column if len(found) == 1 else [value for value in column if type(value) is kind]
        if kind is int:
            if not -_JSON_EXACT_INT <= min(values) <= max(values) <= _JSON_EXACT_INT:
                return False
        elif kind is float:
            if not all(map(math.isfinite, values)):
                return False
        elif kind is str:
            text = "".join(values)
            if not text.isascii():
                try:
                    text.encode("utf-8")  # fails on a surrogate
                except UnicodeEncodeError:
                    return False
        elif kind is list:
            if not _json_column_known(list(chain.from_iterable(values)), _JSON_SCALARS):
                return False
    return True


class TFExampleRecordCoder(Coder):
    """A `tf.train.Example` per record, serialized deterministically (sorted feature map).

    Encoding follows the declared field type when the field has one (as TFT's `ExampleProtoCoder` does),
    otherwise the value's Python type: ints and bools -> `int64_list`, floats -> `float_list` (float32: the
    precision loss of docs/divergence-catalog.md, C3), str (UTF-8) and bytes -> `bytes_list`, lists
    element-wise, None -> the feature is absent. An empty list is a present feature with an empty list.

    Decoding uses the field types: `string` -> str, `bytes` -> bytes, floats -> float, ints -> int,
    `bool` -> bool, absent -> None (for every typed field, as `tf.io.parse_example` with a schema does),
    scalar types take the single value, list types keep lists. A field without a type is decoded from
    whichever list is set (int64 -> int, float -> float, bytes -> bytes), a single value unwrapped.
    """

    def __init__(self, field_types: Mapping[str, FieldType | str] | None = None) -> None:
        self.types = _normalize_types(field_types)

    def encode(self, value: dict[str, Any]) -> bytes:
        example = _example_pb2().Example()
        features = example.features.feature
        for name, item in value.items():
            if item is None:
                continue
            items = list(item) if isinstance(item, (list, tuple, np.ndarray)) else [item]
            declared = self.types.get(name)
            kind = _PROTO_KIND[declared[0]] if declared else _infer_kind(items)
            feature = features[name]  # creates the (possibly empty) feature
            if kind is None:
                continue
            proto_list = getattr(feature, kind)
            proto_list.SetInParent()
            proto_list.value.extend(_PROTO_VALUES[kind](items))
        return example.SerializeToString(deterministic=True)

    def decode(self, encoded: bytes) -> dict[str, Any]:
        example = _example_pb2().Example.FromString(encoded)
        out: dict[str, Any] = {name: None for name in self.types}
        for name, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            values = list(getattr(feature, kind).value) if kind else []
            declared = self.types.get(name)
            if declared is None:
                out[name] = values[0] if len(values) == 1 else values
                continue
            scalar, is_list = declared
            converted = [_FROM_PROTO[scalar](v) for v in values]
            if is_list:
                out[name] = converted
            elif len(converted) == 1:
                out[name] = converted[0]
            else:
                raise ValueError(f"feature {name!r} of type {scalar} holds {len(converted)} values, "
                                 f"expected 1")
        return {name: out[name] for name in sorted(out)}

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> type:
        return dict


class AvroRecordCoder(Coder):
    """Avro binary (fastavro schemaless), with a record schema built from the field types.

    Every typed field is a union with null: `int64` -> long, `int32` -> int, `float64` -> double,
    `float32` -> float (rounded), `string`, `bytes`, `bool` -> boolean, `list<T>` -> array of T (a None
    element fails, as it does in a non-nullable Avro array). Fields in sorted name order; a typed field
    missing from the record comes back as None (Avro has no "absent"). Fields without a type travel as
    `str(value)` (None stays None) in one extra map field, `__parity_untyped__`, spread back on decode:
    so an untyped int 7 comes back as "7". Values are checked as fastavro checks them: a bool in a long,
    a str in a bytes field or an int beyond the type's range fails the record.
    """

    def __init__(self, field_types: Mapping[str, FieldType | str] | None = None) -> None:
        self.types = _normalize_types(field_types)
        if _UNTYPED in self.types:
            raise ValueError(f"field name {_UNTYPED!r} is reserved by the avro coder")
        self.schema = fastavro.parse_schema(_avro_schema(self.types))
        self._names = frozenset(self.types)
        self._plain_schemas: dict[tuple, Any] = {}

    def encode(self, value: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, self.schema, self._row(value), disable_tuple_notation=True)
        return buffer.getvalue()

    def decode(self, encoded: bytes) -> dict[str, Any]:
        return self._record(fastavro.schemaless_reader(io.BytesIO(encoded), self.schema, None))

    def roundtrip_many(self, values: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`decode(encode(v))` of each value, as one Avro container of the batch (the same datum encoding;
        fastavro loops over the records in compiled code); for records holding exactly the typed fields, only
        the fields whose round trip could change a value are encoded (`_roundtrip_typed`). Raises when any
        record fails."""
        names = self._names
        if all(v.keys() == names for v in values):
            return self._roundtrip_typed(values)
        buffer = io.BytesIO()
        fastavro.writer(buffer, self.schema, [self._row(v) for v in values], disable_tuple_notation=True)
        buffer.seek(0)
        return [self._record(row) for row in fastavro.reader(buffer)]

    def _roundtrip_typed(self, values: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The round trip of records holding exactly the typed fields, field by field over the batch.

        A field whose Avro round trip gives back every value of this batch unchanged (`_same_after_avro`:
        None or the type's exact Python type, in range, encodable; never a float field, which rounds to 32
        bits) is not encoded: each value itself comes back (lists copied, as decoding makes new ones). The
        other fields go through fastavro, as one container of the batch with only those fields (an Avro
        record's fields are encoded one after the other, so the others do not change them); among them, one
        whose values all have the exact type (no None: `_all_exact`) is written without the `["null", T]`
        union, which changes its bytes by the union index only. Any failure raises, and `roundtrip_batch`
        then takes the records one by one through `encode` and `decode`. The records come back with their
        fields in sorted order, as `decode` gives them."""
        types = self.types
        columns = {name: [v[name] for v in values] for name in types}
        kept = {name for name, spec in types.items() if _same_after_avro(spec, columns[name])}
        coded = tuple(name for name in sorted(types) if name not in kept)
        decoded: list[dict[str, Any]] = []
        if coded:
            key = (frozenset(name for name in coded if _all_exact(types[name], columns[name])), coded)
            schema = self._plain_schemas.get(key)
            if schema is None:
                schema = self._plain_schemas[key] = fastavro.parse_schema(
                    _avro_schema({name: types[name] for name in coded}, untyped=False, plain=key[0]))
            buffer = io.BytesIO()
            fastavro.writer(buffer, schema, values, disable_tuple_notation=True)  # other fields are not written
            buffer.seek(0)
            decoded = list(fastavro.reader(buffer))
        order = sorted(types)
        out_columns = []
        for name in order:
            if name not in kept:
                out_columns.append([row[name] for row in decoded])
            elif types[name][1]:
                out_columns.append([list(item) for item in columns[name]])
            else:
                out_columns.append(columns[name])
        return [dict(zip(order, row)) for row in zip(*out_columns)] if order else [{} for _ in values]

    def _row(self, value: dict[str, Any]) -> dict[str, Any]:
        types = self.types
        row: dict[str, Any] = {name: value.get(name) for name in types}
        if value.keys() - types.keys():
            row[_UNTYPED] = {name: None if item is None else str(item)
                             for name, item in sorted(value.items()) if name not in types}
        else:
            row[_UNTYPED] = {}
        return row

    @staticmethod
    def _record(row: dict[str, Any]) -> dict[str, Any]:
        untyped = row.pop(_UNTYPED)
        if not untyped:  # the reader gives the fields in schema order, which is sorted name order
            return row
        row.update(untyped)
        return {name: row[name] for name in sorted(row)}

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> type:
        return dict


class PickleRecordCoder(Coder):
    """`pickle` protocol 4: exact for Python values (numpy scalars stay numpy scalars); not deterministic."""

    def encode(self, value: dict[str, Any]) -> bytes:
        return pickle.dumps(value, protocol=4)

    def decode(self, encoded: bytes) -> dict[str, Any]:
        return pickle.loads(encoded)

    def roundtrip_many(self, values: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`decode(encode(v))` of each value, pickled as one list: one C call each way instead of one per
        record. Raises when any record fails.

        Records of plain data (`canonical.plain`: exact dicts, lists and tuples of None, bool, int, float, str,
        bytes) come back as they are: pickle's round trip of them is the identity (the same types, equal
        values, floats bit for bit), and checking costs a small fraction of the round trip. Anything else (numpy scalars, datetimes, user classes) is pickled."""
        if canonical.plain(values):
            return list(values)
        return pickle.loads(pickle.dumps(values, protocol=4))

    def to_type_hint(self) -> type:
        return dict


class ArrowRecordCoder(Coder):
    """A one-row Arrow `RecordBatch` in the IPC stream format, columns in sorted name order.

    Types are inferred from the values by `RecordBatch.from_pylist`: ints -> int64 (beyond it the record
    fails), floats -> double, a list mixing ints and floats -> list<double>, None -> null, numpy scalars ->
    their Arrow type (decoded as Python scalars).
    """

    def encode(self, value: dict[str, Any]) -> bytes:
        batch = pa.RecordBatch.from_pylist([{name: value[name] for name in sorted(value)}])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        return sink.getvalue().to_pybytes()

    def decode(self, encoded: bytes) -> dict[str, Any]:
        rows = pa.ipc.open_stream(encoded).read_next_batch().to_pylist()
        return rows[0] if rows else {}  # a record without fields makes a batch without rows

    def is_deterministic(self) -> bool:
        return True

    def to_type_hint(self) -> type:
        return dict


# Built-in coders with a batch round trip (a user's subclass may override encode/decode: it goes one by one).
_BATCHED: frozenset[type] = frozenset({AvroRecordCoder, JsonRecordCoder, PickleRecordCoder})


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _int_through_double(text: str) -> int:
    return int(float(text))


_PROTO_KIND = {"int64": "int64_list", "int32": "int64_list", "bool": "int64_list", "float64": "float_list",
               "float32": "float_list", "string": "bytes_list", "bytes": "bytes_list"}


def _from_string(value: bytes) -> str:
    return value.decode("utf-8")


_FROM_PROTO: dict[str, Callable[[Any], Any]] = {
    "int64": int, "int32": int, "bool": bool, "float64": float, "float32": float, "string": _from_string,
    "bytes": bytes}


@functools.cache
def _example_pb2() -> ModuleType:
    # Imported on first use: it pulls in tensorflow (seconds), and a module never sits in the coder's state.
    from tensorflow.core.example import example_pb2
    return example_pb2


def _infer_kind(items: list[Any]) -> str | None:
    probe = next((v for v in items if v is not None), None)
    if probe is None:
        return None
    if isinstance(probe, (bool, np.bool_, numbers.Integral)):
        return "int64_list"
    if isinstance(probe, numbers.Real):
        return "float_list"
    if isinstance(probe, (str, bytes)):
        return "bytes_list"
    raise TypeError(f"a tf.Example feature cannot hold a {type(probe).__name__}")


def _to_bytes(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes):
        return value
    raise TypeError(f"a bytes_list cannot hold a {type(value).__name__}")


def _to_bytes_list(items: list[Any]) -> list[bytes]:
    return [_to_bytes(v) for v in items]


def _to_int64_list(items: list[Any]) -> list[Any]:
    # protobuf deprecates bools in int64 fields; anything else not an int is left for protobuf to refuse.
    return [int(v) if isinstance(v, (bool, np.bool_)) else v for v in items]


def _as_is(items: list[Any]) -> list[Any]:
    return items


_PROTO_VALUES: dict[str, Callable[[list[Any]], list[Any]]] = {
    "int64_list": _to_int64_list, "float_list": _as_is, "bytes_list": _to_bytes_list}


_UNTYPED = "__parity_untyped__"
_AVRO_TYPES = {"int64": "long", "int32": "int", "float64": "double", "float32": "float", "string": "string",
               "bytes": "bytes", "bool": "boolean"}


_EXACT = {"int64": (int, -2**63, 2**63), "int32": (int, -2**31, 2**31), "float64": (float,), "float32": (float,),
          "string": (str,), "bytes": (bytes,), "bool": (bool,)}


def _all_exact(spec: _Type, column: list[Any], none: bool = False) -> bool:
    """Whether every value of the column has the exact Python type of the field (list elements too, none of
    them None) and, for ints, lies within the Avro type's range; with `none`, a value may also be None."""
    scalar, is_list = spec
    exact = _EXACT[scalar]
    kind = exact[0]
    if none and None in column:
        column = [v for v in column if v is not None]
    if is_list:
        if not set(map(type, column)) <= {list}:
            return False
        column = [item for v in column for item in v]
    if not set(map(type, column)) <= {kind}:
        return False
    return len(exact) == 1 or not column or (exact[1] <= min(column) and max(column) < exact[2])


def _same_after_avro(spec: _Type, column: list[Any]) -> bool:
    """Whether the Avro round trip gives back every value of the column unchanged: each is None (the union's
    null) or as `_all_exact` wants it, and strings are ones UTF-8 can encode (a lone surrogate fails the
    record). Longs, ints, doubles (the same 64 bits), booleans, bytes and strings then decode to equal
    values; floats never do (rounded to 32 bits)."""
    scalar, is_list = spec
    if scalar == "float32" or not _all_exact(spec, column, none=True):
        return False
    if scalar == "string":
        texts = [item for v in column if v is not None for item in v] if is_list else column
        for text in texts:
            if text is not None and not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    return False
    return True


def _avro_schema(types: Mapping[str, _Type], untyped: bool = True, plain: frozenset = frozenset()) -> dict[str, Any]:
    fields: list[dict[str, Any]] = []
    for name in sorted(types):
        scalar, is_list = types[name]
        avro_type: Any = {"type": "array", "items": _AVRO_TYPES[scalar]} if is_list else _AVRO_TYPES[scalar]
        if name in plain:
            fields.append({"name": name, "type": avro_type})
            continue
        fields.append({"name": name, "type": ["null", avro_type], "default": None})
    if untyped:
        fields.append({"name": _UNTYPED, "type": {"type": "map", "values": ["null", "string"]}, "default": {}})
    return {"type": "record", "name": "ParityRecord", "namespace": "parity", "fields": fields}


def _normalize_types(field_types: Mapping[str, FieldType | str] | None) -> dict[str, _Type]:
    """`FieldType`s (or type strings such as `list<string>`) -> {name: (scalar name, is_list)}."""
    out: dict[str, _Type] = {}
    for name, field_type in (field_types or {}).items():
        if isinstance(field_type, str):
            field_type = parse_type(field_type)
        if field_type.is_list:
            element = field_type.element
            scalar, is_list = getattr(element, "name", element), True
        else:
            scalar, is_list = field_type.name, False
        if scalar not in SCALAR_TYPES:
            raise ValueError(f"field {name!r}: unsupported type {field_type}; expected one of "
                             f"{', '.join(SCALAR_TYPES)} or list<T>")
        out[name] = (scalar, is_list)
    return out
