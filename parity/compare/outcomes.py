"""What the diff says of one differing pair, and the whole values it may leave undecoded (pure data).

Its own module so that what reads the pairs (the tally, parity.compare.tally; the report after it) depends on the
shape of a pair only, not on the code that reads fingerprint sets to find them (parity.compare.diff,
parity.compare.pair_values).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(slots=True)
class PairOutcome:
    """One paired record whose fingerprints differ somewhere."""

    key: str
    key_fp: bytes
    differing: tuple[str, ...]          # stages whose fingerprints differ
    within: tuple[str, ...]             # of those, the stages whose differences are within tolerance
    first_stage: str
    diverged: bool
    left: dict[str, Any]                # decoded values: the first differing stage's, whole; the transform's when
    right: dict[str, Any]               # it differs (only its differing features unless it is the first)
    feature_deltas: dict[str, tuple[bool, float | None]] = field(default_factory=dict)
    # feature -> (within tolerance, |delta| when numeric)
    fps: dict[str, tuple[int, int]] = field(default_factory=dict)  # differing stage -> (left, right) fingerprints
    first_fields: tuple[str, ...] | None = None  # the first differing stage's top-level fields whose canonical
    # bytes differ, when both values are dicts of the same str names (the classifier need not compare them again)
    first_split: dict[str, tuple[Any, Any]] | None = None  # a stream that defers whole input values
    # (`DiffStream(defer_input=True)`): where `left`/`right` hold the input stage's whole values `Undecoded`
    # (`resolved` decodes them), its differing fields, decoded: {field: (left, right)}


class Decoder(Protocol):
    """What decodes a deferred value: a side, a distinct pair of its round, its bytes."""

    def decode(self, side: int, u: int, data: bytes | None) -> Any: ...


class Undecoded:
    """A first divergent input stage's whole value, not decoded (a stream that defers them:
    `parity.compare.pair_values.compare_slice`'s `defer_input`): the report needs the two whole records of such a
    pair for its examples only, and decoding each cost about as much as the rest of the pair's comparison.
    `resolved` decodes it."""

    __slots__ = ("_values", "_side", "_u", "data")

    def __init__(self, values: Decoder, side: int, u: int, data: bytes | None) -> None:
        self._values, self._side, self._u, self.data = values, side, u, data

    def value(self) -> Any:
        return self._values.decode(self._side, self._u, self.data)


def resolved(value: Any) -> Any:
    """`value`, or the value an `Undecoded` stands for."""
    return value.value() if type(value) is Undecoded else value
