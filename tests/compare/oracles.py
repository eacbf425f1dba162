"""The diff's and the cause classifier's functions as they were before their fast paths: the references the
fast ones are tested against (tests/compare/test_fast_paths.py)."""
from __future__ import annotations

from typing import Any, Callable

from parity.compare.diff import _is_integer, _is_number, numeric_within
from parity.config import Tolerance
from parity.encoding.canonical import encode


def values_within(a: Any, b: Any, tol_for: Callable[[str | None], Tolerance], name: str | None = None) -> bool:
    """`parity.compare.diff.values_within` without its float and str fast path."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return False
        return all(values_within(a[k], b[k], tol_for, k if isinstance(k, str) else name) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_within(x, y, tol_for, name) for x, y in zip(a, b))
    if _is_number(a) and _is_number(b):
        if _is_integer(a) != _is_integer(b):
            return False
        return numeric_within(a, b, tol_for(name))[0]
    return type(a) is type(b) and a == b


def same(a: Any, b: Any) -> bool:
    """`parity.compare.causes._same` without its fast path for equal scalars."""
    try:
        return encode(a) == encode(b)
    except (TypeError, ValueError, OverflowError):
        return type(a) is type(b) and a == b
