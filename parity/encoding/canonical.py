"""Canonical encoding v1: values <-> canonical bytes, and a JSON view for reports.

Every fingerprint in parity is a hash of these bytes, so the same value gives the same bytes on every
machine, process (whatever ``PYTHONHASHSEED``), runner and release. The format is tagged and
self-delimiting; one ASCII tag byte starts every value:

    N None   T/F bool   i int   f float64   g float32   s str   b bytes   l list
    d dict   e set   t datetime   D date   m Decimal

The specification, the versioning rule and worked examples are in ``docs/canonical-encoding.md``;
``fixtures/canonical/vectors.json`` pins the bytes. Any change of the bytes of any value bumps
``ENCODING_VERSION``.

Example:
    >>> encode({"b": 1, "a": [None]}).hex()
    '64027301616c014e730162690101'
    >>> decode(encode((1, "a")))
    [1, 'a']
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
import os
import struct
from operator import itemgetter
from typing import Any, Callable

import numpy as np

__all__ = ["ENCODING_VERSION", "decode", "dict_fields", "encode", "encode_many", "to_json"]

ENCODING_VERSION = "parity.canonical/1"

_Encoder = Callable[[Any, bytearray], None]

_TAG_F64 = struct.Struct(">Bd").pack
_TAG_F32 = struct.Struct(">Bf").pack
_TAG_I64 = struct.Struct(">Bq").pack
_NAN64 = b"f\x7f\xf8\x00\x00\x00\x00\x00\x00"
_NAN32 = b"g\x7f\xc0\x00\x00"
_EPOCH_AWARE = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_STR_HEADS = [bytes((0x73, n)) for n in range(0x80)]  # tag + one-byte length, the common case
_INT_HEADS = [bytes((0x69, n)) for n in range(0x80)]
# Sorted key order of dicts whose keys are all exactly `str`, by the tuple of keys in insertion order:
# records of one capture share their keys, so sorting once per key layout is enough.
_KEY_ORDER: dict[tuple, tuple[tuple[str, bytes], ...]] = {}
_KEY_ORDER_MAX = 4096


def _uleb128(n: int, buf: bytearray) -> None:
    while n >= 0x80:
        buf.append((n & 0x7F) | 0x80)
        n >>= 7
    buf.append(n)


def _enc_none(v: Any, buf: bytearray) -> None:
    buf.append(0x4E)


def _enc_bool(v: Any, buf: bytearray) -> None:
    buf.append(0x54 if v else 0x46)


def _int_head(n: int) -> bytes:
    head = bytearray(b"i")
    _uleb128(n, head)
    return bytes(head)


def _enc_int(v: int, buf: bytearray) -> None:
    # Minimal two's complement: one sign bit more than the magnitude needs; 0 is one byte 0x00.
    n = (v if v >= 0 else ~v).bit_length() // 8 + 1
    buf += _INT_HEADS[n] if n < 0x80 else _int_head(n)
    buf += v.to_bytes(n, "big", signed=True)


def _enc_int_like(v: Any, buf: bytearray) -> None:
    # numpy integers and int subclasses (IntFlag's ~ is not the integer ~)
    _enc_int(int(v), buf)


def _enc_float64(v: float, buf: bytearray) -> None:
    buf += _NAN64 if v != v else _TAG_F64(0x66, v)


def _enc_float32(v: Any, buf: bytearray) -> None:
    # float32 -> Python float is exact, and so is packing it back to 4 bytes (float16 widens exactly).
    buf += _NAN32 if v != v else _TAG_F32(0x67, v)


def _enc_str(v: str, buf: bytearray) -> None:
    try:
        b = v.encode()
    except UnicodeEncodeError:  # lone surrogates: kept, as their 3-byte forms, so every str encodes
        b = v.encode("utf-8", "surrogatepass")
    if len(b) < 0x80:
        buf += _STR_HEADS[len(b)]
    else:
        buf.append(0x73)
        _uleb128(len(b), buf)
    buf += b


def _enc_bytes(v: Any, buf: bytearray) -> None:
    if type(v) is not bytes:
        v = bytes(v)
    buf.append(0x62)
    _uleb128(len(v), buf)
    buf += v


def _enc_list(v: Any, buf: bytearray) -> None:
    buf.append(0x6C)
    _uleb128(len(v), buf)
    get = _ENCODERS.get
    for x in v:
        (get(type(x)) or _resolve(x))(x, buf)


def _dict_key_order(v: dict) -> tuple[tuple[Any, bytes], ...] | None:
    """Keys with their canonical bytes in canonical order; None when two keys share their bytes."""
    pairs = sorted(((k, _encode_py(k)) for k in v), key=itemgetter(1))
    for i in range(1, len(pairs)):
        if pairs[i - 1][1] == pairs[i][1]:  # e.g. two distinct NaN objects as keys
            return None
    return tuple(pairs)


def _enc_dict(v: dict, buf: bytearray) -> None:
    buf.append(0x64)
    _uleb128(len(v), buf)
    if not v:
        return
    layout = tuple(v)
    order = _KEY_ORDER.get(layout)
    if order is None:
        order = _dict_key_order(v)
        if order is None:
            # Equal key bytes: order those entries by their value bytes too, so the result stays unique.
            for kb, vb in sorted((_encode_py(k), _encode_py(x)) for k, x in v.items()):
                buf += kb
                buf += vb
            return
        if all(type(k) is str for k in layout):
            if len(_KEY_ORDER) >= _KEY_ORDER_MAX:
                _KEY_ORDER.clear()
            _KEY_ORDER[layout] = order
    get = _ENCODERS.get
    for k, kb in order:
        buf += kb
        x = v[k]
        t = type(x)
        # The commonest field types inline: a call per field is most of the cost of a record.
        if t is str:
            try:
                b = x.encode()
            except UnicodeEncodeError:
                b = x.encode("utf-8", "surrogatepass")
            if len(b) < 0x80:
                buf += _STR_HEADS[len(b)]
                buf += b
            else:
                _enc_str(x, buf)
        elif t is int:
            n = (x if x >= 0 else ~x).bit_length() // 8 + 1
            buf += _INT_HEADS[n] if n < 0x80 else _int_head(n)
            buf += x.to_bytes(n, "big", signed=True)
        elif t is float:
            buf += _NAN64 if x != x else _TAG_F64(0x66, x)
        else:
            (get(t) or _resolve(x))(x, buf)


def _enc_set(v: Any, buf: bytearray) -> None:
    buf.append(0x65)
    _uleb128(len(v), buf)
    for b in sorted(_encode_py(x) for x in v):
        buf += b


def _datetime_micros(v: _dt.datetime) -> int:
    if type(v) is not _dt.datetime:  # subclasses (e.g. pandas.Timestamp) subtract to other types
        v = _dt.datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.tzinfo,
                         fold=v.fold)
    delta = v - (_EPOCH_NAIVE if v.utcoffset() is None else _EPOCH_AWARE)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _enc_datetime(v: _dt.datetime, buf: bytearray) -> None:
    buf += _TAG_I64(0x74, _datetime_micros(v))


def _enc_date(v: _dt.date, buf: bytearray) -> None:
    buf += _TAG_I64(0x44, v.toordinal() - _EPOCH_ORDINAL)


def _enc_decimal(v: decimal.Decimal, buf: bytearray) -> None:
    b = str(v).encode("ascii")
    buf.append(0x6D)
    _uleb128(len(b), buf)
    buf += b


def _check_dtype(v: np.ndarray) -> None:
    kind, size = v.dtype.kind, v.dtype.itemsize
    if kind in "biuUSO" or (kind == "f" and size in (2, 4, 8)):
        return
    raise TypeError(f"cannot canonically encode numpy.ndarray of dtype {v.dtype}")


def _enc_ndarray(v: np.ndarray, buf: bytearray) -> None:
    _check_dtype(v)
    if v.ndim == 0:
        x = v[()]
        (_ENCODERS.get(type(x)) or _resolve(x))(x, buf)
    elif v.dtype.kind == "f" and v.dtype.itemsize < 8:
        buf.append(0x6C)
        _uleb128(len(v), buf)
        if v.ndim > 1:
            for row in v:
                _enc_ndarray(row, buf)
        else:
            for x in v.tolist():  # exact Python floats of float32/float16 values
                buf += _NAN32 if x != x else _TAG_F32(0x67, x)
    else:
        _enc_list(v.tolist(), buf)  # nested lists of int, float, bool, str, bytes or objects


_ENCODERS: dict[type, _Encoder] = {
    type(None): _enc_none, bool: _enc_bool, np.bool_: _enc_bool, int: _enc_int,
    float: _enc_float64, np.float64: _enc_float64, np.float32: _enc_float32, np.float16: _enc_float32,
    str: _enc_str, np.str_: _enc_str, bytes: _enc_bytes, np.bytes_: _enc_bytes, bytearray: _enc_bytes,
    memoryview: _enc_bytes, list: _enc_list, tuple: _enc_list, dict: _enc_dict, set: _enc_set,
    frozenset: _enc_set, _dt.datetime: _enc_datetime, _dt.date: _enc_date, decimal.Decimal: _enc_decimal,
    np.ndarray: _enc_ndarray,
}
_ENCODERS.update(dict.fromkeys(
    (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
     np.intc, np.uintc, np.longlong, np.ulonglong), _enc_int_like))

# Subclasses, in the order that makes the first match right (datetime is a date; bool is an int).
_FALLBACKS: tuple[tuple[type | tuple[type, ...], _Encoder], ...] = (
    ((int, np.integer), _enc_int_like), (float, _enc_float64), (str, _enc_str),
    ((bytes, bytearray, memoryview), _enc_bytes), ((list, tuple), _enc_list), (dict, _enc_dict),
    ((set, frozenset), _enc_set), (_dt.datetime, _enc_datetime), (_dt.date, _enc_date),
    (decimal.Decimal, _enc_decimal), (np.ndarray, _enc_ndarray),
)


def _resolve(v: Any) -> _Encoder:
    """The encoder of a value whose exact type is not in the dispatch table; remembers the type."""
    t = type(v)
    for base, enc in _FALLBACKS:
        if isinstance(v, base):
            _ENCODERS[t] = enc
            return enc
    raise TypeError(f"cannot canonically encode a value of type {t.__module__}.{t.__qualname__}")


def _encode_py(value: Any) -> bytes:
    """``encode`` in pure Python: the reference implementation, and the C encoder's fallback."""
    buf = bytearray()
    (_ENCODERS.get(type(value)) or _resolve(value))(value, buf)
    return bytes(buf)


def _encode_many_py(values: list[Any]) -> list[bytes]:
    get, resolve, out = _ENCODERS.get, _resolve, []
    append = out.append
    for v in values:
        buf = bytearray()
        (get(type(v)) or resolve(v))(v, buf)
        append(bytes(buf))
    return out


# numpy scalar types the C encoder handles itself, by kind (parity/encoding/_canonical.c); the rest it hands to
# _encode_py, so both implementations give the same bytes and raise the same errors.
_NATIVE_KINDS: dict[type, int] = {
    np.bool_: 1, np.float64: 3, np.float32: 4, np.float16: 4, np.str_: 5, np.bytes_: 6,
    **dict.fromkeys((np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                     np.intc, np.uintc, np.longlong, np.ulonglong), 2),
}


def _load_native() -> Any:
    """``parity.encoding._canonical`` configured, or None: not built, built for another encoding version, or
    ``PARITY_PURE_PYTHON=1`` (the tests' way to run the reference)."""
    if os.environ.get("PARITY_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from parity.encoding import _canonical
    except ImportError:
        return None
    if _canonical.ENCODING_VERSION != ENCODING_VERSION or _canonical.API_VERSION != 8:
        return None  # a stale build of an older source: `pip install -e .` (make setup) rebuilds it
    _canonical.configure(_NATIVE_KINDS, _encode_py)
    return _canonical


_native = _load_native()
IMPLEMENTATION = "c" if _native is not None else "python"


def encode(value: Any) -> bytes:
    """The canonical bytes of a value.

    Raises:
        TypeError: the value, or a value inside it, has a type the encoding does not cover.
    """
    return _encode_py(value)


def encode_many(values: list[Any]) -> list[bytes]:
    """The canonical bytes of each value, in order (one loop; cheaper than calling ``encode``)."""
    return _encode_many_py(values)


_PLAIN_SCALARS = frozenset({type(None), bool, int, float, str, bytes})
MAX_PLAIN_DEPTH = 128


def _plain_py(values: list | tuple) -> bool:
    """Whether every value is built only of exact dicts, lists and tuples of None, bool, int, float, str and
    bytes, at most MAX_PLAIN_DEPTH deep: data that pickle gives back equal and of the same types (floats bit
    for bit). Subclasses, numpy values, datetimes and everything else are not plain."""
    if type(values) not in (list, tuple):
        raise TypeError("plain() expects a list or tuple of values")
    stack: list[tuple[Any, int]] = [(values, -1)]
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind in _PLAIN_SCALARS:
            continue
        if depth >= MAX_PLAIN_DEPTH:
            return False
        if kind is dict:
            stack.extend((item, depth + 1) for pair in value.items() for item in pair)
        elif kind is list or kind is tuple:
            stack.extend((item, depth + 1) for item in value)
        else:
            return False
    return True


plain = _plain_py

_INT_LIMIT = 2.0 ** 63


def _wide_float_py(value: Any) -> bool:
    """Whether a float that is not strictly between -2**63 and 2**63 (a NaN too) is among the values of
    `value`'s exact dicts and lists, at any depth (dict keys are not looked at). `capture.jsonl` asks it of each
    line orjson read: orjson reads an integer below -2**63 or from 2**64 up as a float, where json reads an int."""
    stack: list = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            if not -_INT_LIMIT < item < _INT_LIMIT:
                return True
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
    return False


wide_float = _wide_float_py

if _native is not None:  # the same functions in C: same bytes, same errors
    encode = _native.encode  # type: ignore[assignment]  # noqa: F811
    encode_many = _native.encode_many  # type: ignore[assignment]  # noqa: F811
    plain = _native.plain  # type: ignore[assignment]  # noqa: F811
    wide_float = _native.wide_float  # type: ignore[assignment]  # noqa: F811


# ---------------------------------------------------------------------------------------------- decode


def _read_uleb128(data: bytes, pos: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        byte = data[pos]  # IndexError: truncated
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return n, pos


def _read_sized(data: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = _read_uleb128(data, pos)
    if pos + n > len(data):
        raise IndexError("truncated")
    return data[pos:pos + n], pos + n


def _dec(data: bytes, pos: int, hashable: bool) -> tuple[Any, int]:
    """The value at ``pos`` and the offset after it; ``hashable`` (dict keys, set items): lists as tuples.

    Lenient about canonical form: ``decode`` checks that by encoding the result again.
    """
    tag = data[pos]
    pos += 1
    if tag == 0x4E:
        return None, pos
    if tag == 0x54 or tag == 0x46:
        return tag == 0x54, pos
    if tag == 0x69:
        raw, pos = _read_sized(data, pos)
        return int.from_bytes(raw, "big", signed=True), pos
    if tag == 0x66:
        return struct.unpack_from(">d", data, pos)[0], pos + 8
    if tag == 0x67:
        return np.float32(struct.unpack_from(">f", data, pos)[0]), pos + 4
    if tag == 0x73:
        raw, pos = _read_sized(data, pos)
        return raw.decode("utf-8", "surrogatepass"), pos
    if tag == 0x62:
        return _read_sized(data, pos)
    if tag == 0x6C or tag == 0x65:
        n, pos = _read_uleb128(data, pos)
        items = []
        for _ in range(n):
            x, pos = _dec(data, pos, hashable or tag == 0x65)
            items.append(x)
        return (frozenset(items) if tag == 0x65 else tuple(items) if hashable else items), pos
    if tag == 0x64:
        n, pos = _read_uleb128(data, pos)
        out = {}
        for _ in range(n):
            k, pos = _dec(data, pos, True)
            out[k], pos = _dec(data, pos, False)
        return out, pos
    if tag == 0x74:
        return _EPOCH_AWARE + _dt.timedelta(microseconds=struct.unpack_from(">q", data, pos)[0]), pos + 8
    if tag == 0x44:
        return _dt.date.fromordinal(struct.unpack_from(">q", data, pos)[0] + _EPOCH_ORDINAL), pos + 8
    if tag == 0x6D:
        raw, pos = _read_sized(data, pos)
        return decimal.Decimal(raw.decode("ascii")), pos
    raise ValueError(f"unknown canonical tag 0x{tag:02x} at offset {pos - 1}")


_FIXED_SIZE = {0x4E: 0, 0x54: 0, 0x46: 0, 0x66: 8, 0x67: 4, 0x74: 8, 0x44: 8}  # None, bools, floats, datetimes
_SIZED = frozenset((0x69, 0x73, 0x62, 0x6D))                                  # int, str, bytes, decimal
_DICT, _LIST, _SET = 0x64, 0x6C, 0x65


def _skip(data: bytes, pos: int) -> int:
    """The offset after the canonical value at `pos` (docs/canonical-encoding.md), without decoding it."""
    tag = data[pos]
    if tag in _SIZED:
        n = data[pos + 1]
        if n < 0x80:  # a one-byte length: most ints and strings
            return pos + 2 + n
        n, pos = _read_uleb128(data, pos + 1)
        return pos + n
    size = _FIXED_SIZE.get(tag)
    if size is not None:
        return pos + 1 + size
    if tag in (_LIST, _SET, _DICT):
        n, pos = _read_uleb128(data, pos + 1)
        for _ in range(2 * n if tag == _DICT else n):
            pos = _skip(data, pos)
        return pos
    raise ValueError(f"unknown canonical tag 0x{tag:02x}")


def dict_fields(data: bytes | None) -> dict[bytes, bytes] | None:
    """A canonical dict's entries as {key bytes: value bytes}, undecoded (the diff decodes only the fields that
    differ); None when `data` is not one canonical dict."""
    return _dict_fields_py(data)


def _dict_fields_py(data: bytes | None) -> dict[bytes, bytes] | None:
    """``dict_fields`` in pure Python: the reference, and what the C one leaves (values nested deeper than it
    goes)."""
    if not data or data[0] != _DICT:
        return None
    try:
        n, pos = _read_uleb128(data, 1)
        fields = {}
        for _ in range(n):
            middle = _skip(data, pos)
            end = _skip(data, middle)
            fields[data[pos:middle]] = data[middle:end]
            pos = end
    except (IndexError, ValueError):
        return None  # decoded whole, which names what is wrong
    return fields if pos == len(data) and len(fields) == n else None


def decode(data: bytes) -> Any:
    """The value of canonical bytes: ``encode(decode(b)) == b`` for every ``b`` it accepts.

    Values come back as Python types: tuples as lists (tuples inside dict keys and sets), sets as
    frozensets, float32 as ``numpy.float32``, datetimes as aware UTC ``datetime``.

    Raises:
        ValueError: the bytes are truncated, have trailing bytes, or are not canonical (e.g. a
            non-minimal int, another NaN, dict keys out of order, keys that are equal in Python).
    """
    return _decode_py(data)


def _decode_py(data: bytes) -> Any:
    """``decode`` in pure Python: the reference, and the C decoder's fallback for everything it does not accept."""
    data = bytes(data)
    try:
        value, pos = _dec(data, 0, False)
    except (IndexError, struct.error) as exc:
        raise ValueError(f"canonical bytes truncated ({len(data)} bytes)") from exc
    except (TypeError, OverflowError, ArithmeticError) as exc:  # unhashable key, date range, bad Decimal
        raise ValueError(f"invalid canonical bytes: {exc}") from exc
    if pos != len(data):
        raise ValueError(f"trailing bytes after the canonical value at offset {pos}")
    again = encode(value)
    if again != data:
        at = next((i for i, (a, b) in enumerate(zip(again, data)) if a != b), min(len(again), len(data)))
        raise ValueError(f"non-canonical bytes: they differ from the canonical encoding at offset {at}")
    return value


def _dict_fields_c(data: bytes | None) -> dict[bytes, bytes] | None:
    """``dict_fields`` by the C splitter; what it leaves (NotImplemented: nested deeper than it goes) by the
    reference."""
    fields = _native.dict_fields(data)
    return _dict_fields_py(data) if fields is NotImplemented else fields


if _native is not None:  # the same functions in C: same values, same errors
    _native.configure_decoder(np.float32, _dec, _decode_py)  # what C does not take, the reference decodes
    decode = _native.decode  # type: ignore[assignment]  # noqa: F811
    dict_fields = _dict_fields_c  # type: ignore[assignment]  # noqa: F811


# ----------------------------------------------------------------------------------------------- JSON


def _json_float(v: float) -> float | str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def _json_str(s: str) -> str:
    s = str.__str__(s)  # the characters, also of str-mixin Enums (whose str() is "Cls.NAME")
    try:
        s.encode()
    except UnicodeEncodeError:  # lone surrogates as visible escapes, so reports stay writable as UTF-8
        return s.encode("utf-8", "backslashreplace").decode()
    return s


def _json_key(k: Any) -> str:
    if isinstance(k, str):
        return _json_str(k)
    return json.dumps(to_json(k), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def to_json(value: Any) -> Any:
    """A deterministic JSON-serialisable view of a value, for reports (lossy; not a second encoding).

    Floats: NaN and +/-inf as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``. Strings as they
    are, but lone surrogates as ``\\udXXX`` text. Bytes: ``{"$bytes": text}`` when valid UTF-8, else
    ``{"$base64": ...}``. Dicts in canonical key order, with non-str keys as their compact JSON text; sets
    as lists in canonical order; datetimes as ISO 8601 in UTC; dates as ISO 8601; Decimals as strings.

    Raises:
        TypeError: the value has a type the canonical encoding does not cover.
    """
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.float32, np.float16)):
        return _json_float(float(value))
    if isinstance(value, str):
        return _json_str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return {"$bytes": raw.decode("utf-8")}
        except UnicodeDecodeError:
            return {"$base64": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [to_json(x) for x in value]
    if isinstance(value, np.ndarray):
        _check_dtype(value)
        return to_json(value[()]) if value.ndim == 0 else [to_json(x) for x in value]
    if isinstance(value, dict):
        keyed = sorted(((encode(k), k) for k in value), key=itemgetter(0))
        return {_json_key(k): to_json(value[k]) for _, k in keyed}
    if isinstance(value, (set, frozenset)):
        return [to_json(x) for _, x in sorted(((encode(x), x) for x in value), key=itemgetter(0))]
    if isinstance(value, _dt.datetime):
        return (_EPOCH_AWARE + _dt.timedelta(microseconds=_datetime_micros(value))).isoformat()
    if isinstance(value, _dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    t = type(value)
    raise TypeError(f"cannot canonically encode a value of type {t.__module__}.{t.__qualname__}")
