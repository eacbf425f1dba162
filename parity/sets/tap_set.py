"""Fingerprint sets written by production taps (`parity.beam.TapStage`), and how `parity diff` compares them.

A tap sees one stage of one pipeline, so a tapped set is assembled after the job from the parts each tap
wrote (docs/taps.md):

    SET/_taps/<stage>/<label>/tap.json                 the tap's settings, written when the pipeline is built
    SET/_taps/<stage>/<label>/env-<hash>.json          the environment of a worker that ran the tap
    SET/_taps/<stage>/<label>/_parts/<part>.parquet    fingerprint rows of one batch (`write_tap_part`)
    SET/_taps/<stage>/<label>/values/<part>.parquet    their canonical values (kept keys only)
    SET/_taps/<stage>/<label>/_parts/<part>.quarantine.jsonl   elements the tap could not key or encode

`finalize_tap_set` (parity/sets/tap_finalize.py) merges them into a standard `parity.fingerprints/1` set
(docs/fingerprint-set.md): one row per record key, each tapped stage's fingerprint from the tap of that stage,
plus the tap fields of the manifest (`stages_tapped`, `sample_rate`, `values`, `taps`).

Stages a record has no tapped value for are filled with documented sentinels:

| sentinel | where |
|---|---|
| `{"untapped": true}` | every record, at a stage no tap covered (the diff does not compare these stages) |
| `{"dropped": "late"}` | stages after `window` of a record a `late=True` window tap saw (as the replay does) |
| `{"dropped": "not_seen_by_tap"}` | a tapped stage whose tap never saw a record that another tap saw |

**Sampling** is by record key, the same rule everywhere: a key is kept iff the first 8 bytes of its pairing
fingerprint `key_fp = xxh3_128(canonical key bytes)`, read as a big-endian unsigned integer `u`, satisfy
`u / 2**64 < rate` (exactly: `u < ceil(rate * 2**64)`). Every tap and the diff apply it to the same bytes,
so a key is tapped at every stage or at none, and the other side of a diff is restricted to the same keys.

`finalize_tap_set` is in parity/sets/tap_finalize.py. What `parity diff` does with tap sets (`align`: both
restricted to the keys sampled on both sides and to the stages tapped on both sides, other stages getting the
`untapped` fingerprint on both sides so they never diverge) is in parity/sets/tap_align.py.
"""
from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from parity.encoding import canonical
from parity.encoding.fingerprint import fingerprint, fingerprint_bytes
from parity.sets.feature_columns import map_array
from parity.sets.fingerprint_set import FP_SCHEMA, VALUE_SCHEMA, VALUES_DIR
from parity.stages import STAGES
from parity.stages.window import DROPPED_LATE
from parity.storage import urls
from parity.storage.context import Storage

TAP_FORMAT = "parity.taps/1"
TAPS_DIR = "_taps"
TAP_META = "tap.json"
SAMPLE_RULE = "u / 2**64 < sample_rate, u = the first 8 bytes (big-endian) of key_fp = xxh3_128(key bytes)"
VALUES_RULE = "the keep_values records with the smallest key_fp (bytes order); none when redacted"

UNTAPPED = {"untapped": True}
NOT_SEEN = {"dropped": "not_seen_by_tap"}
PART_ROWS = 50_000  # records per values part of a finalized tap set

UNTAPPED_FP = fingerprint(UNTAPPED)
NOT_SEEN_FP = fingerprint(NOT_SEEN)
DROPPED_LATE_FP = fingerprint(DROPPED_LATE)


def sample_threshold(rate: float) -> int:
    """The integer bound of the sampling rule: a key is sampled iff `u < sample_threshold(rate)`."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0 or \
            math.isnan(rate):
        raise ValueError(f"sample_rate must be a number in [0, 1], got {rate!r}")
    return math.ceil(Fraction(rate) * (1 << 64))


def key_sampled(key_fp: bytes, rate: float) -> bool:
    """Whether a record key (given by its 16-byte pairing fingerprint) is in the sample at `rate`."""
    return int.from_bytes(key_fp[:8], "big") < sample_threshold(rate)


def sampled_mask(key_fps: pa.ChunkedArray | pa.Array, rate: float) -> np.ndarray:
    """Vectorised `key_sampled` over a fixed_size_binary(16) column."""
    threshold = sample_threshold(rate)
    array = key_fps.combine_chunks() if isinstance(key_fps, pa.ChunkedArray) else key_fps
    if threshold >= 1 << 64:
        return np.ones(len(array), dtype=bool)
    if len(array) == 0:
        return np.zeros(0, dtype=bool)
    raw = np.frombuffer(array.buffers()[1], dtype=np.uint8)[array.offset * 16:(array.offset + len(array)) * 16]
    high = raw.reshape(-1, 16)[:, :8].copy().view(">u8").ravel()
    return high < np.uint64(threshold)


def not_kept(fp: int) -> dict[str, str]:
    """The value a tap set stores for a stage of a record whose values were not kept.

    It names the stage's fingerprint, so two such values are equal only when the fingerprints are: the
    tolerance tier never mistakes two unknown values for equal ones (shown cut to 40 characters).
    """
    return {"error": f"not kept by the tap (fp {fp:016x})"}


def _not_kept_bytes() -> tuple[bytes, bytes]:
    """The canonical bytes of `not_kept(fp)` around the 16 hex digits, to build many of them quickly."""
    sample = canonical.encode(not_kept(0))
    head, tail = sample[:-17], sample[-1:]
    assert head + b"%016x" % 0xFEDCBA9876543210 + tail == canonical.encode(not_kept(0xFEDCBA9876543210))
    return head, tail


NOT_KEPT_BYTES = _not_kept_bytes()


# ---------------------------------------------------------------------------------------------------------
# The manifest of a tap set, and of any set seen through the tap fields


def stages_tapped(manifest: dict[str, Any]) -> list[str]:
    """The stages a set holds real values for: `stages_tapped` of a tap set, every stage of a replay."""
    stages = manifest.get("stages_tapped")
    return list(manifest.get("stages", STAGES)) if stages is None else list(stages)


def sample_rate(manifest: dict[str, Any]) -> float:
    rate = manifest.get("sample_rate", 1.0)
    return 1.0 if rate is None else rate


def is_tap_set(manifest: dict[str, Any]) -> bool:
    return "tap_format" in manifest


# ---------------------------------------------------------------------------------------------------------
# Writing: the parts of one tap (called by parity.taps); tap_finalize.py merges them


def tap_dir(set_dir: str, stage: str, label: str) -> str:
    return urls.child(set_dir, TAPS_DIR, stage, label)


def write_tap_meta(set_dir: str, meta: dict[str, Any], storage: Storage) -> str:
    """Starts one tap's folder: removes what an earlier run of the tap left, writes its settings."""
    folder = tap_dir(set_dir, meta["stage"], meta["label"])
    storage.delete_tree(folder)
    storage.makedirs(folder)
    _write_json_atomic(urls.child(folder, TAP_META), meta, storage)
    return folder


def write_worker_environment(folder: str, environment: dict[str, Any], storage: Storage) -> None:
    text = json.dumps(environment, sort_keys=True)
    path = urls.child(folder, f"env-{fingerprint_bytes(text.encode()):016x}.json")
    if not storage.exists(path):
        _write_json_atomic(path, environment, storage)


def write_tap_part(folder: str, part: str, stage: str, key_fps: list[bytes], fps: list[int],
                   features: tuple[list[int], list[str], list[int]] | None, key_bytes: list[bytes] | None,
                   values: list[bytes | None], storage: Storage) -> None:
    """Writes one batch of one tap as a part of the standard layout (FP_SCHEMA and VALUE_SCHEMA, both as Parquet:
    `_parts/<part>.parquet` and `values/<part>.parquet`; `finalize` reads these as it reads a replay's
    `.arrow` fingerprint parts), column by column. Only the tap's stage is filled;
    `key` is left null (finalize writes it once per record), and a value is null when it is not kept.

    `features` (transform stage): each record's feature count (-1: none, a null entry), and the names and
    fingerprints of all records' features one after the other, flat (no container per record)."""
    n = len(key_fps)
    nulls_fp = pa.nulls(n, pa.uint64())
    fp_table = pa.table(
        [pa.array(key_fps, pa.binary(16)), pa.nulls(n, pa.string())]
        + [pa.array(fps, pa.uint64()) if s == stage else nulls_fp for s in STAGES]
        + [_feature_map(*features) if features is not None else pa.nulls(n, FP_SCHEMA.field("features").type),
           pa.array([part] * n, pa.string()), pa.array(np.arange(n, dtype=np.int32))], schema=FP_SCHEMA)
    nulls_value = pa.nulls(n, pa.binary())
    value_table = pa.table(
        [pa.array(key_bytes, pa.binary()) if key_bytes is not None else pa.array([b""] * n, pa.binary()),
         pa.nulls(n, pa.string())]
        + [pa.array(values, pa.binary()) if s == stage else nulls_value for s in STAGES], schema=VALUE_SCHEMA)
    for table, sub in ((fp_table, "_parts"), (value_table, VALUES_DIR)):
        storage.makedirs(urls.child(folder, sub))
        path = urls.child(folder, sub, f"{part}.parquet")
        with storage.open_write(path) as target:
            pq.write_table(table, target, compression="zstd")


def _feature_map(counts: list[int], names: list[str], fps: list[int]) -> pa.MapArray:
    sizes = np.array(counts, dtype=np.int64)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(np.maximum(sizes, 0), out=offsets[1:])
    mask = pa.array(sizes < 0) if (sizes < 0).any() else None
    return map_array(offsets, pa.array(names, pa.string()), pa.array(fps, pa.uint64()),
                     FP_SCHEMA.field("features").type, mask=mask)


def _write_json_atomic(path: str, data: Any, storage: Storage) -> None:
    storage.write_text(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


__all__ = [
    "DROPPED_LATE", "NOT_SEEN", "SAMPLE_RULE", "TAP_FORMAT", "UNTAPPED", "key_sampled", "not_kept",
    "sample_threshold", "sampled_mask", "stages_tapped",
]
