"""Canonical bytes -> XXH3 fingerprints, scalar and batched.

A fingerprint is ``xxh3_64`` (seed 0) of the canonical encoding v1 of a value, as an unsigned int
(0 <= fp < 2**64). It is exact: any difference in the canonical bytes (including -0.0 vs 0.0, float32
vs float64, 1 vs 1.0) gives another fingerprint; numeric tolerance is the diff's second tier. Record
keys use the 128-bit ``xxh3_128`` digest (16 bytes, big-endian), where collisions between millions of
keys must be negligible.

This is the only module that hashes: the taps, the replay, the tap sets, the shard stage and the report's
redaction call it rather than xxhash (parity.stages.seed's draws aside: they are the seed stage's own rule).

When the C encoder (``parity.encoding._canonical``) is built, ``fingerprint``, ``fingerprints``,
``key_fingerprint``, ``encode_fingerprints``, ``encode_columns`` and ``feature_fingerprints`` run in it,
encoding and hashing in one buffer without intermediate bytes objects; the Python definitions below are the
reference.

Example:
    >>> fingerprint(None) == fingerprint_bytes(b"N")
    True
    >>> len(key_fingerprint([12345]))
    16
"""

from __future__ import annotations

import array
from typing import Any, Callable

import xxhash

from parity.encoding import canonical

_encode = canonical._encode_py  # the reference definitions below are pure Python throughout

__all__ = [
    "FINGERPRINT_ALGORITHM", "KEY_FINGERPRINT_ALGORITHM", "combine", "digest_hex", "encode_columns",
    "encode_fingerprints", "feature_fingerprints", "fingerprint", "fingerprint_bytes", "fingerprints",
    "key_fingerprint", "key_fingerprint_bytes", "key_fingerprint_int",
]

FINGERPRINT_ALGORITHM = "xxh3_64"
KEY_FINGERPRINT_ALGORITHM = "xxh3_128"

_xxh3_64 = xxhash.xxh3_64_intdigest
_xxh3_128 = xxhash.xxh3_128_digest

# The hashes of bytes that are already canonical are xxhash's own functions, bound without a Python frame in
# between: the taps and the replay call them once per record.
fingerprint_bytes: Callable[[bytes], int] = _xxh3_64
"""XXH3-64 of bytes that are already canonical: ``fingerprint(v) == fingerprint_bytes(canonical.encode(v))``."""
key_fingerprint_bytes: Callable[[bytes], bytes] = _xxh3_128
"""The 16-byte key fingerprint of a key's canonical bytes: ``key_fingerprint(k) == key_fingerprint_bytes(
canonical.encode(k))``."""
key_fingerprint_int: Callable[[bytes], int] = xxhash.xxh3_128_intdigest
"""``key_fingerprint_bytes(data)`` read as a big-endian unsigned int (what key sampling compares)."""
digest_hex: Callable[[bytes], str] = xxhash.xxh3_128_hexdigest
"""``key_fingerprint_bytes(data).hex()``: a 32-digit name for bytes (a tap part, a redacted key)."""


def fingerprint(value: Any) -> int:
    """XXH3-64 of the canonical encoding of ``value``.

    Raises:
        TypeError: the value has a type the canonical encoding does not cover.
    """
    return _xxh3_64(_encode(value))


def fingerprints(values: list[Any]) -> list[int]:
    """``[fingerprint(v) for v in values]``: one loop of encode + hash, with both bound locally."""
    enc, h = _encode, _xxh3_64
    return [h(enc(v)) for v in values]


def encode_fingerprints(values: list[Any]) -> tuple[list[bytes], list[int]]:
    """``(encode_many(values), fingerprints(values))`` in one pass: each value encoded once."""
    data = canonical._encode_many_py(values)
    h = _xxh3_64
    return data, [h(b) for b in data]


def encode_columns(values: list[Any]) -> tuple[bytes, bytes, bytes]:
    """The buffers of ``encode_fingerprints(values)`` as Arrow holds them: every value's canonical bytes one
    after the other, the ``len(values) + 1`` offsets into them (native-order int32) and the fingerprints
    (native-order uint64). A batch's stage columns are built from them without one Python bytes and one int
    per value (`parity.replay.write_step.stage_arrays`).

    Raises:
        TypeError: a value has no canonical encoding.
        OverflowError: the bytes pass 2 GiB, beyond int32 offsets.
    """
    data = canonical._encode_many_py(values)
    offsets = array.array("i", [0])
    total = 0
    for item in data:
        total += len(item)
        if total > 2**31 - 1:
            raise OverflowError("the values' canonical bytes pass 2 GiB (int32 offsets)")
        offsets.append(total)
    return b"".join(data), offsets.tobytes(), array.array("Q", [_xxh3_64(item) for item in data]).tobytes()


def feature_fingerprints(features: dict[str, Any]) -> tuple[bytes, list[tuple[str, int]], int]:
    """For a transform stage value ``{name: value}``: its canonical bytes, ``sorted`` ``(name,
    fingerprint(value))`` pairs, and ``combine`` of those fingerprints (the transform stage's fingerprint).

    Raises:
        TypeError: a name is not a str, or a value has no canonical encoding.
    """
    for name in features:
        if not isinstance(name, str):  # the C definition takes str names only, and hands anything else here
            raise TypeError(f"feature names must be str, got {type(name).__name__} {name!r}")
    fps = {name: _xxh3_64(_encode(v)) for name, v in features.items()}
    return _encode(features), sorted(fps.items()), _xxh3_64(_encode(fps))


def key_fingerprint(value: Any) -> bytes:
    """The 16-byte pairing id of a record key: XXH3-128 of its canonical encoding."""
    return _xxh3_128(_encode(value))


def combine(fps: dict[str, int]) -> int:
    """One fingerprint for named fingerprints: the fingerprint of the dict ``{name: fp}``.

    Used for the transform stage, whose fingerprint is ``combine`` of the per-feature fingerprints; it
    depends on the names and fingerprints, never on the dict's order.
    """
    return fingerprint(fps)


# The pure Python definitions above, kept for the tests that compare the C functions against them.
_REFERENCE = {"fingerprint": fingerprint, "fingerprints": fingerprints, "encode_fingerprints": encode_fingerprints,
              "encode_columns": encode_columns,
              "feature_fingerprints": feature_fingerprints, "key_fingerprint": key_fingerprint}
_native = canonical._native
if _native is not None:  # the same functions in C: same results, same errors
    _native.configure(canonical._NATIVE_KINDS, canonical._encode_py, feature_fingerprints)
    fingerprint = _native.fingerprint  # type: ignore[assignment]  # noqa: F811
    fingerprints = _native.fingerprints  # type: ignore[assignment]  # noqa: F811
    encode_fingerprints = _native.encode_fingerprints  # type: ignore[assignment]  # noqa: F811
    encode_columns = _native.encode_columns  # type: ignore[assignment]  # noqa: F811
    feature_fingerprints = _native.feature_fingerprints  # type: ignore[assignment]  # noqa: F811
    key_fingerprint = _native.key_fingerprint  # type: ignore[assignment]  # noqa: F811
