"""Field types of the capture `schema` and coercion of read values to them.

A schema maps field names to type strings: `int64`, `int32`, `float64`, `float32`, `string`, `bytes`,
`bool`, or `list<T>` with `T` one of the scalar types. Coercion turns a value as a reader produced it (a JSON
value, a CSV cell, a tf.Example value, a Parquet value) into the Python value the type denotes:

| type | Python value |
|---|---|
| `int64`, `int32` | `int` in the type's range |
| `float64` | `float` |
| `float32` | `float` exactly representable in float32 (rounded to nearest) |
| `string` | `str` (valid Unicode; bytes must be UTF-8) |
| `bytes` | `bytes` (a `str` is encoded as UTF-8) |
| `bool` | `bool` |
| `list<T>` | `list` of the element type's values |
| `optional<T>` | as `T`; the field may be absent |

`None` (a null) stays `None`, at the top level and inside lists. `optional<T>` reads and fingerprints exactly
like `T`: it only changes what a `tft` side's `preprocessing_fn` receives (a `SparseTensor` with no value where
the field is null, as TFX hands an optional feature, instead of a dense tensor holding the type's default).
"""

from __future__ import annotations

import math
import numbers
import operator
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

SCALAR_TYPES: tuple[str, ...] = ("int64", "int32", "float64", "float32", "string", "bytes", "bool")
ACCEPTED_TYPES = ", ".join(SCALAR_TYPES) + ", list<T>, optional<T> (T one of the others)"

_INT_RANGES = {"int64": (-(2**63), 2**63 - 1), "int32": (-(2**31), 2**31 - 1)}
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_LIST_TYPE = re.compile(r"list\s*<\s*(\w+)\s*>")
_OPTIONAL_TYPE = re.compile(r"optional\s*<\s*(\w+)\s*>")
_BOOL_TEXT = {"true": True, "false": False, "1": True, "0": False}
_REPR_LIMIT = 80


class SchemaMismatch(ValueError):
    """A value cannot be coerced to its field type; the message names the type and the value."""


@dataclass(frozen=True)
class FieldType:
    """A field type: a scalar (`element` is None) or `list` of a scalar `element`.

    `optional` marks a scalar that may be absent (`optional<T>`, or a TFMD feature whose presence is below 1):
    a `tft` side hands it to `preprocessing_fn` as a `SparseTensor`, as TFX does. Lists are always sparse.
    """

    name: str
    element: FieldType | None = None
    optional: bool = False

    @property
    def is_list(self) -> bool:
        """Whether this is a `list<T>` type."""
        return self.element is not None

    @property
    def is_sparse(self) -> bool:
        """Whether a `tft` side hands it to `preprocessing_fn` as a SparseTensor (a list, or an optional scalar)."""
        return self.element is not None or self.optional

    def __str__(self) -> str:
        if self.element is not None:
            return f"list<{self.element}>"
        return f"optional<{self.name}>" if self.optional else self.name


def parse_type(text: str) -> FieldType:
    """Parse a type string such as `float32` or `list<string>`.

    Raises:
        ValueError: `text` is not a type; the message lists the accepted types.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a type string, got {_show(text)}; expected one of {ACCEPTED_TYPES}")
    stripped = text.strip()
    if stripped in SCALAR_TYPES:
        return FieldType(stripped)
    match = _LIST_TYPE.fullmatch(stripped)
    if match and match.group(1) in SCALAR_TYPES:
        return FieldType("list", FieldType(match.group(1)))
    match = _OPTIONAL_TYPE.fullmatch(stripped)
    if match and match.group(1) in SCALAR_TYPES:
        return FieldType(match.group(1), optional=True)
    raise ValueError(f"unknown type {_show(text)}; expected one of {ACCEPTED_TYPES}")


def parse_schema(mapping: Mapping[str, Any]) -> dict[str, FieldType]:
    """Parse a mapping of field name to type string (or FieldType), keeping its order.

    Raises:
        ValueError: a field name is not a non-empty string or a type is invalid; the message names the field.
    """
    schema: dict[str, FieldType] = {}
    for name, text in mapping.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"field names must be non-empty strings, got {_show(name)}")
        if isinstance(text, FieldType):
            schema[name] = text
            continue
        try:
            schema[name] = parse_type(text)
        except ValueError as exc:
            raise ValueError(f"field {name!r}: {exc}") from exc
    return schema


def coerce(value: Any, field_type: FieldType) -> Any:
    """Convert a read value to the Python value `field_type` denotes.

    Raises:
        SchemaMismatch: the value does not fit the type, e.g. `"3.5"` or `True` for `int64`.
    """
    if value is None:
        return None
    if field_type.element is not None:
        return _coerce_list(value, field_type, field_type.element)
    return _SCALAR_COERCERS[field_type.name](value, field_type.name)


def coerce_record(record: Mapping[str, Any], schema: Mapping[str, FieldType]) -> dict[str, Any]:
    """Coerce each schema field of `record`; missing fields become None, fields not in the schema stay as-is.

    The result holds the schema's fields first, in schema order, then the other fields in record order.

    Raises:
        SchemaMismatch: a field does not fit its type; the message starts with `field '<name>': `.
    """
    out: dict[str, Any] = {}
    for name, field_type in schema.items():
        try:
            out[name] = coerce(record.get(name), field_type)
        except SchemaMismatch as exc:
            raise SchemaMismatch(f"field {name!r}: {exc}") from None
    for name, value in record.items():
        if name not in schema:
            out[name] = value
    return out


def coerce_records(records: list[Mapping[str, Any]], schema: Mapping[str, FieldType]) -> list:
    """`coerce_record` of each record, column by column: the record, or the `SchemaMismatch` it raises.

    A column whose values all fit as they are (`None`s, in-range ints for int64, floats for float64, ASCII
    strs for string, lists of these for lists) is taken whole, with a few C-speed checks instead of a
    Python call per value; any other column is coerced value by value. The results and errors equal
    `coerce_record`'s (the first failing field in schema order is named); a list that fits is the record's
    own list object, not a copy, and a record of exactly the schema's fields, in its order, that all fit
    is itself.
    """
    names = tuple(schema)
    count = len(records)
    if not names or not count:
        return [coerce_record(record, schema) for record in records]
    if len(names) == 1:
        rows = [(record.get(names[0]),) for record in records]
        complete = False
    else:
        try:  # every record has every schema field: one C call per record
            rows = list(map(operator.itemgetter(*names), records))
            complete = True
        except KeyError:
            rows = [tuple(record.get(name) for name in names) for record in records]
            complete = False
    columns = list(zip(*rows))
    errors: dict[int, SchemaMismatch] = {}
    changed = False
    for position, (name, field_type) in enumerate(schema.items()):
        column = columns[position]
        if _column_fits(column, field_type):
            continue
        coerced = list(column)
        for index, value in enumerate(column):
            try:
                coerced[index] = coerce(value, field_type)
            except SchemaMismatch as exc:
                errors.setdefault(index, SchemaMismatch(f"field {name!r}: {exc}"))
        columns[position] = coerced
        changed = True
    if not changed and complete and all(map(names.__eq__, map(tuple, records))):
        return list(records)  # every record holds exactly the schema's fields in its order, each fits: itself
    if changed:
        rows = list(zip(*columns))
    out: list = [dict(zip(names, row)) for row in rows]
    # fields not in the schema follow, in record order
    width = len(names)
    others = range(count) if not complete else [i for i, size in enumerate(map(len, records)) if size != width]
    known = set(names)
    for index in others:
        record = records[index]
        if record.keys() <= known:
            continue
        for name, value in record.items():
            if name not in known:
                out[index][name] = value
    for index, error in errors.items():
        out[index] = error
    return out


_NONE = type(None)


def _column_fits(column: list, field_type: FieldType) -> bool:
    """Whether `coerce` would give back every value of `column` as it is (a list: an equal new list)."""
    element = field_type.element
    if element is not None:
        if not set(map(type, column)) <= {list, _NONE}:
            return False
        column = [item for value in column if value for item in value]
        field_type = element
    kinds = set(map(type, column)) - {_NONE}
    name = field_type.name
    if not kinds:
        return True
    if kinds == {int} and name == "int64":
        present = [value for value in column if value is not None]
        return _INT_RANGES["int64"][0] <= min(present) and max(present) <= _INT_RANGES["int64"][1]
    if kinds == {float}:
        return name == "float64"
    if kinds == {str} and name == "string":
        text = "".join(value for value in column if value is not None)
        if text.isascii():
            return True
        try:  # non-ASCII fits too, unless a lone surrogate (which `coerce` refuses) is among it
            text.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    return False


def _coerce_list(value: Any, field_type: FieldType, element: FieldType) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise _mismatch(str(field_type), value)
    out = []
    for index, item in enumerate(value):
        try:
            out.append(coerce(item, element))
        except SchemaMismatch as exc:
            raise SchemaMismatch(f"element {index}: {exc}") from None
    return out


def _to_int(value: Any, type_name: str) -> int:
    if type(value) is int:  # the common case first (a bool's type is bool): no ABC check
        result = value
    elif isinstance(value, bool) or _is_numpy_bool(value):
        raise _mismatch(type_name, value)
    elif isinstance(value, numbers.Integral):
        result = int(value)
    elif isinstance(value, numbers.Real):
        as_float = float(value)
        if not math.isfinite(as_float) or not as_float.is_integer():
            raise _mismatch(type_name, value)
        result = int(as_float)
    elif isinstance(value, str):
        text = value.strip()
        # the length bound keeps int() away from its 4300-digit limit; longer never fits int64
        if len(text) > 40 or not _INT_TEXT.fullmatch(text):
            raise _mismatch(type_name, value)
        result = int(text)
    else:
        raise _mismatch(type_name, value)
    low, high = _INT_RANGES[type_name]
    if not low <= result <= high:
        raise SchemaMismatch(f"expected {type_name}, got {_show(value)} (out of range {low}..{high})")
    return result


def _to_float64(value: Any, type_name: str) -> float:
    if type(value) is float:  # the common case first: no ABC check
        return value
    if isinstance(value, bool) or _is_numpy_bool(value):
        raise _mismatch(type_name, value)
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except OverflowError:
            raise _out_of_range(type_name, value) from None
    if isinstance(value, str):
        text = value.strip()
        if "_" in text:  # float() accepts "1_0"; no serializer writes it
            raise _mismatch(type_name, value)
        try:
            result = float(text)
        except ValueError:
            raise _mismatch(type_name, value) from None
        # "inf", "-Infinity" are infinities on purpose; "1e400" is a finite number float() cannot hold
        if math.isinf(result) and text.lstrip("+-").lower() not in ("inf", "infinity"):
            raise _out_of_range(type_name, value)
        return result
    raise _mismatch(type_name, value)


def _out_of_range(type_name: str, value: Any) -> SchemaMismatch:
    return SchemaMismatch(f"expected {type_name}, got {_show(value)} (out of the float64 range: magnitude above "
                          f"1.8e308)")


def _to_float32(value: Any, type_name: str) -> float:
    as_float = _to_float64(value, type_name)
    try:
        return struct.unpack("<f", struct.pack("<f", as_float))[0]
    except OverflowError:
        raise SchemaMismatch(f"expected {type_name}, got {_show(value)} (out of float32 range)") from None


def _to_str(value: Any, type_name: str) -> str:
    if isinstance(value, str):
        text = str(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SchemaMismatch(
                f"expected {type_name}, got {_show(value)} (invalid UTF-8: {exc.reason})"
            ) from None
    else:
        raise _mismatch(type_name, value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _surrogate(type_name, value) from None
    return text


def _to_bytes(value: Any, type_name: str) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise _surrogate(type_name, value) from None
    raise _mismatch(type_name, value)


def _to_bool(value: Any, type_name: str) -> bool:
    if isinstance(value, bool) or _is_numpy_bool(value):
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(int(value))
    if isinstance(value, str) and value.strip().lower() in _BOOL_TEXT:
        return _BOOL_TEXT[value.strip().lower()]
    raise _mismatch(type_name, value)


_SCALAR_COERCERS = {
    "int64": _to_int,
    "int32": _to_int,
    "float64": _to_float64,
    "float32": _to_float32,
    "string": _to_str,
    "bytes": _to_bytes,
    "bool": _to_bool,
}


def _is_numpy_bool(value: Any) -> bool:
    return isinstance(value, np.bool_)  # not an int subclass, unlike bool


def _mismatch(type_name: str, value: Any) -> SchemaMismatch:
    return SchemaMismatch(f"expected {type_name}, got {_show(value)}")


def _surrogate(type_name: str, value: Any) -> SchemaMismatch:
    return SchemaMismatch(f"expected {type_name}, got {_show(value)} (a lone surrogate is not valid Unicode)")


def _show(value: Any) -> str:
    """The value's repr, at most 80 characters."""
    if isinstance(value, (str, bytes, bytearray)) and len(value) > _REPR_LIMIT:
        value = value[: _REPR_LIMIT + 1]  # repr of a huge string costs its length; the tail is cut anyway
    text = repr(value)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."
