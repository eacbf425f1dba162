"""The fields of two canonical dicts compared on their bytes, so the diff decodes only the fields that differ.

A canonical dict is its entries in ascending order of their keys' bytes, each key's bytes then its value's
(docs/canonical-encoding.md), so two stage values split into the same keys line up field by field without being
decoded. `differing_fields` is the C splitter when the extension is built; `_differing_fields_py` is its
reference, and what the C one leaves (NotImplemented) goes to it.
"""
from __future__ import annotations

from parity.encoding import canonical

Fields = tuple[list[tuple[bytes, bytes, bytes]], bool, "bytes | None"]

_PLAIN_FIXED = {0x4E: 0, 0x54: 0, 0x46: 0, 0x66: 8, 0x67: 4, 0x74: 8, 0x44: 8}  # None, bools, floats, datetimes
_STR, _BYTES, _INT, _LIST, _DICT = 0x73, 0x62, 0x69, 0x6C, 0x64


def differing_fields(left: bytes | None, right: bytes | None) -> Fields | None:
    """The fields whose bytes differ when `left` and `right` are canonical dicts with the same keys, else None.

    Returns ([(key bytes, left value bytes, right value bytes)] in key order, plain, the key's bytes when the
    dicts have one field, else None). `plain`: every key is a str and every field of equal bytes is built only
    of values that `tolerance.values_within` finds within any tolerance of an equal copy (no set, Decimal, int of
    128 bytes or more, or dict key other than a str: decoded twice, a NaN in them is not `==` itself).
    """
    return _differing_fields_py(left, right)


def _differing_fields_py(left: bytes | None, right: bytes | None) -> Fields | None:
    """``differing_fields`` in pure Python: the reference."""
    lf, rf = canonical._dict_fields_py(left), canonical._dict_fields_py(right)
    if lf is None or rf is None or lf.keys() != rf.keys():
        return None
    differing = [(key, value, rf[key]) for key, value in lf.items() if value != rf[key]]
    plain = all(key[0] == _STR for key in lf) and all(_plain_end(value, 0) == len(value)
                                                      for key, value in lf.items() if value == rf[key])
    return differing, plain, next(iter(lf)) if len(lf) == 1 else None


def _plain_end(data: bytes, pos: int) -> int:
    """The offset after the plain value at `pos` (see `differing_fields`), or -1 when it is not plain."""
    try:
        tag = data[pos]
        if tag in _PLAIN_FIXED or tag in (_STR, _BYTES):
            return canonical._skip(data, pos)
        if tag == _INT:
            return canonical._skip(data, pos) if data[pos + 1] < 0x80 else -1
        if tag in (_LIST, _DICT):
            n, pos = canonical._read_uleb128(data, pos + 1)
            for _ in range(n):
                if tag == _DICT:
                    if data[pos] != _STR:
                        return -1
                    pos = canonical._skip(data, pos)
                pos = _plain_end(data, pos)
                if pos < 0:
                    return -1
            return pos
    except (IndexError, ValueError):
        pass
    return -1


def _differing_fields_c(left: bytes | None, right: bytes | None) -> Fields | None:
    """``differing_fields`` by the C splitter; what it leaves (NotImplemented) by the reference."""
    found = canonical._native.differing_fields(left, right)
    return _differing_fields_py(left, right) if found is NotImplemented else found


if canonical._native is not None:  # the same function in C: the same results
    differing_fields = _differing_fields_c  # type: ignore[assignment]  # noqa: F811
