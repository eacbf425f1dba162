"""Canonical bytes -> XXH3 fingerprints, scalar and batched.

A fingerprint is ``xxh3_64`` (seed 0) of the canonical encoding v1 of a value, as an unsigned int
(0 <= fp < 2**64). It is exact: any difference in the canonical bytes (including -0.0 vs 0.0, float32
vs float64, 1 vs 1.0) gives another fingerprint; numeric tolerance is the diff's second tier. Record
keys use the 128-bit ``xxh3_128`` digest (16 bytes, big-endian), where collisions between millions of
keys must be negligible.

Example:
    >>> fingerprint(None) == fingerprint_bytes(b"N")
    True
    >>> len(key_fingerprint([12345]))
    16
"""

from __future__ import annotations

from typing import Any

import xxhash

from parity.canonical import encode

__all__ = [
    "FINGERPRINT_ALGORITHM", "KEY_FINGERPRINT_ALGORITHM", "combine", "fingerprint", "fingerprint_bytes",
    "fingerprints", "key_fingerprint",
]

FINGERPRINT_ALGORITHM = "xxh3_64"
KEY_FINGERPRINT_ALGORITHM = "xxh3_128"

_xxh3_64 = xxhash.xxh3_64_intdigest
_xxh3_128 = xxhash.xxh3_128_digest


def fingerprint_bytes(data: bytes) -> int:
    """XXH3-64 of bytes that are already canonical."""
    return _xxh3_64(data)


def fingerprint(value: Any) -> int:
    """XXH3-64 of the canonical encoding of ``value``.

    Raises:
        TypeError: the value has a type the canonical encoding does not cover.
    """
    return _xxh3_64(encode(value))


def fingerprints(values: list[Any]) -> list[int]:
    """``[fingerprint(v) for v in values]``: one loop of encode + hash, with both bound locally."""
    enc, h = encode, _xxh3_64
    return [h(enc(v)) for v in values]


def key_fingerprint(value: Any) -> bytes:
    """The 16-byte pairing id of a record key: XXH3-128 of its canonical encoding."""
    return _xxh3_128(encode(value))


def combine(fps: dict[str, int]) -> int:
    """One fingerprint for named fingerprints: the fingerprint of the dict ``{name: fp}``.

    Used for the transform stage, whose fingerprint is ``combine`` of the per-feature fingerprints; it
    depends on the names and fingerprints, never on the dict's order.
    """
    return fingerprint(fps)
