"""`MISSING`: the one marker for "no value here", distinct from a present null.

A field absent from one side's value (the diff, the causes, the report's renderers) and a key not looked up
yet (a cache's `get(key, MISSING)`) use it; `None` cannot say that, since null is a value a record can hold.
"""
from __future__ import annotations

from typing import Any

__all__ = ["MISSING"]


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"  # pickled and copied as this module's one instance: `is MISSING` holds after


MISSING: Any = _Missing()
