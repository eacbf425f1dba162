"""Frozen JSON: a JSON value whose objects are read-only mappings (`FrozenMap`) and whose arrays are tuples, for the
examples and histograms that a diff's frozen summaries hold (parity.compare.tallied, parity.compare.model_stage), and
its way back to plain JSON for the report.
"""
from __future__ import annotations

from typing import Any


class FrozenMap(dict):
    """A dict that refuses every change after it is built. Unlike `types.MappingProxyType` it pickles and deep-copies
    (as a new FrozenMap of the same items), so a frozen summary a worker sends, or `dataclasses.asdict` of one, needs
    no state of its own; and it is a dict, so `json` writes it as one."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a frozen mapping cannot be changed")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore

    def __reduce__(self) -> tuple:
        return FrozenMap, (dict(self),)


def frozen_json(value: Any) -> Any:
    """A JSON value with its objects as read-only mappings and its arrays as tuples (a `FrozenMap` is returned as
    it is: what it holds was frozen when it was built)."""
    if isinstance(value, FrozenMap):
        return value
    if isinstance(value, dict):
        return FrozenMap({name: frozen_json(item) for name, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen_json(item) for item in value)
    return value


def thawed(value: Any) -> Any:
    """A frozen JSON value (`frozen_json`) as plain JSON: dicts and lists, new ones, which the caller owns."""
    if isinstance(value, dict):
        return {name: thawed(item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thawed(item) for item in value]
    return value
