"""The `seed` stage: seeded operations (`sample`, `split`, user `function`s) per record.

Every output is a pure function of (the side's seed value, the op's name, the record key's canonical bytes),
so that two sides with the same seed agree record by record, whatever the runner, process or worker.

**The draw.** Each `sample` and `split` op draws one unsigned integer `u` per record from

    data = repr((seed, op_name)).encode("utf-8") + b"\\x00" + key_bytes

(`repr` keeps an int seed `42` apart from a string seed `"42"`; the NUL ends the text part) with the op's
`hash`:

| hash | u | range |
|---|---|---|
| `xxh3` (default) | `xxhash.xxh3_64_intdigest(data)` | 2^64 |
| `md5` | first 8 bytes of `md5(data)`, big-endian | 2^64 |
| `crc32` | `zlib.crc32(data)` | 2^32 |
| `python` | `hash((seed, op_name, key_bytes)) & (2^64 - 1)` | 2^64 |

`python` is salted per process unless `PYTHONHASHSEED` is fixed: two workers (or two runs) disagree. That
is on purpose: it models docs/divergence-catalog.md, R1, `hash(user_id) % n` in a Beam partition function.

**sample** `{op: sample, rate: r}`: `u / range < r` -> bool.
**split** `{op: split, buckets: {train: 8, eval: 2}}`: `u % total_weight` walks the cumulative weights in
the given bucket order -> the bucket's name.
**function** `fn(record, rng) -> value`: `rng = random.Random(xxh3_64(data))`, whatever `hash` says.

**Unseeded sides** (`seed.value` null): `sample` and `split` take `u` from `os.urandom` instead of the
hash, and `function` gets `random.Random()` (seeded from `os.urandom`): outputs change on every call, on
purpose, to model unseeded TF random ops and `random.random()` samplers (docs/divergence-catalog.md, R4, R5).

Exceptions raised by a user function propagate unchanged; the caller attributes them.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import os
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from parity.encoding.fingerprint import fingerprint_bytes
from parity.stages.reference import Reference

SEED_HASHES: tuple[str, ...] = ("xxh3", "md5", "crc32", "python")
SEED_OPS: tuple[str, ...] = ("sample", "split")  # the ops a config names by `op:` (a function is `function:`)

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class SampleOp:
    """Keep a record with probability `rate`, decided by the record's draw.

    Raises:
        ValueError: `rate` outside [0, 1] or an unknown `hash`.
    """

    rate: float
    hash: str = "xxh3"

    def __post_init__(self) -> None:
        _check_hash(self.hash)
        if isinstance(self.rate, bool) or not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"sample rate must be a number in [0, 1], got {self.rate!r}")


@dataclass(frozen=True)
class SplitOp:
    """Assign a record to one of `buckets` (name, integer weight), in proportion to the weights.

    Raises:
        ValueError: no buckets, a duplicate name, a weight that is not a positive int, or an unknown `hash`.
    """

    buckets: tuple[tuple[str, int], ...]
    hash: str = "xxh3"

    def __post_init__(self) -> None:
        _check_hash(self.hash)
        object.__setattr__(self, "buckets", tuple((str(n), w) for n, w in self.buckets))
        if not self.buckets:
            raise ValueError("a split needs at least one bucket")
        names = [name for name, _ in self.buckets]
        if len(set(names)) != len(names):
            raise ValueError(f"split bucket names must be unique, got {names}")
        for name, weight in self.buckets:
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise ValueError(f"split bucket {name!r}: weight must be a positive integer, got {weight!r}")


@dataclass(frozen=True)
class FunctionOp:
    """A user function `fn(record, rng) -> value`, `rng` a `random.Random` seeded per record.

    A loaded config holds the function's reference (`module:attr`, a `Reference`); the replay imports it when it
    builds the stage.
    """

    fn: Callable[[dict[str, Any], random.Random], Any] | Reference

    @property
    def hash(self) -> str:
        """The draw's hash: `rng` is seeded from xxh3 whatever the config says."""
        return "xxh3"


SeedOp = SampleOp | SplitOp | FunctionOp


@dataclass(frozen=True)
class SeedSpec:
    """A side's seed (`seed:` in a config): its `value` (None: unseeded) and its named ops, in output order."""

    value: int | str | None
    ops: tuple[tuple[str, SeedOp], ...]


def seed_outputs_many(spec: SeedSpec, key_bytes: list[bytes],
                      records: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The output of each of `spec`'s ops for each record, keyed by op name (in op order), computed op by op
    over the batch: each `sample` and `split` op's seed prefix is built once, not per record.

    Args:
        spec: the side's seed value and ops.
        key_bytes: the canonical bytes of each record's key.
        records: the records (after the coder stage); only function ops read them (None: the spec has none).

    Raises:
        ValueError: the spec has a `function` op and no records were given.
        Exception: whatever a user function raises, unchanged; the caller finds the record (one-record
            batches) and names it.
    """
    outputs: list[dict[str, Any]] = [{} for _ in key_bytes]
    for name, op in spec.ops:
        if isinstance(op, FunctionOp):
            if records is None:
                raise ValueError(f"seed op {name!r} is a function: it reads the records, and none were given")
            fn, value = op.fn, spec.value
            for out, record, kb in zip(outputs, records, key_bytes):
                out[name] = fn(record, _rng(value, name, kb))
            continue
        if spec.value is None or op.hash == "python":
            draws = [_draw(op.hash, spec.value, name, kb) for kb in key_bytes]
        else:
            prefix = _draw_bytes(spec.value, name, b"")
            if op.hash == "xxh3":
                h64 = fingerprint_bytes
                draws = [(h64(prefix + kb), 1 << 64) for kb in key_bytes]
            else:
                draws = [draw(op.hash, spec.value, name, kb) for kb in key_bytes]
        if isinstance(op, SampleOp):
            rate = op.rate
            for out, (u, size) in zip(outputs, draws):
                out[name] = u / size < rate
        else:
            # a bucket per draw: the first bucket whose running weight total exceeds u mod the total (a
            # SplitOp's weights are positive), found by bisection instead of summing the weights per record
            names = [bucket for bucket, _ in op.buckets]
            ends = list(itertools.accumulate(weight for _, weight in op.buckets))
            total = ends[-1]
            for out, (u, _) in zip(outputs, draws):
                out[name] = names[bisect.bisect_right(ends, u % total)]
    return outputs


def draw(hash_name: str, seed: int | str, op_name: str, key_bytes: bytes) -> tuple[int, int]:
    """The seeded draw `(u, range)` of one record for one op: `0 <= u < range` (see the module doc).

    Raises:
        ValueError: an unknown `hash_name`.
    """
    _check_hash(hash_name)
    if hash_name == "python":
        return hash((seed, op_name, key_bytes)) & _MASK64, 1 << 64
    data = _draw_bytes(seed, op_name, key_bytes)
    if hash_name == "xxh3":
        return fingerprint_bytes(data), 1 << 64
    if hash_name == "md5":
        return int.from_bytes(hashlib.md5(data).digest()[:8], "big"), 1 << 64
    return zlib.crc32(data), 1 << 32


def _draw(hash_name: str, seed: int | str | None, op_name: str, key_bytes: bytes) -> tuple[int, int]:
    if seed is None:
        return int.from_bytes(os.urandom(8), "big"), 1 << 64
    return draw(hash_name, seed, op_name, key_bytes)


def _rng(seed: int | str | None, op_name: str, key_bytes: bytes) -> random.Random:
    if seed is None:
        return random.Random()  # seeded from os.urandom: unseeded on purpose
    return random.Random(fingerprint_bytes(_draw_bytes(seed, op_name, key_bytes)))


def _draw_bytes(seed: int | str, op_name: str, key_bytes: bytes) -> bytes:
    return repr((seed, op_name)).encode("utf-8") + b"\x00" + key_bytes


def _check_hash(hash_name: str) -> None:
    if hash_name not in SEED_HASHES:
        raise ValueError(f"unknown hash {hash_name!r}; expected one of {', '.join(SEED_HASHES)}")
