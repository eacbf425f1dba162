"""A replayed set's fingerprint rows as key-range bucket files, each with its summary, written by the workers.

A side's job routes its fingerprint rows by the leading KEY_RANGE_BITS bits of `key_fp` (16 buckets, the same on
every side whatever its size), so that each bucket is sorted and written by a worker as
`fingerprints/<bb>.parquet` (two hex digits), and summarized: its rows, its duplicate rows, one digest of its
keys and one per stage, its feature names. The job then writes every summary, with the quarantine's counts, as
`buckets.json`: the client's `finalize` reads that file only, and `parity diff` matches two buckets whose
summaries agree without reading their rows (parity.compare.hashdiff).

A digest is the sum (mod 2^64) of a 64-bit mix of the key and the stage fingerprint (`row_digests`): it does not
depend on row order, and it is additive, so a bucket's digest is the sum of its rows' whatever the batches they
came in. Only buckets holding rows get a file and a summary.

Example:
    >>> for bucket, table in split_rows(part_table):
    ...     ...                     # grouped by bucket by the job, then:
    >>> summary = write_bucket(out_dir, bucket, tables, storage)
"""
from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from parity.errors import FingerprintSetError
from parity.sets.fingerprint_set import (KEY_RANGE_BITS, BUCKET_FILES_DIR, BUCKETS_FILE, FP_PARQUET_OPTIONS, FP_SCHEMA,
                                         QUARANTINE, bucket_file, sort_rows)
from parity.stages import STAGES
from parity.storage import urls
from parity.storage.context import Storage

PREFIX_BITS = 16           # parity.compare.hashdiff's buckets: a summary counts the ones its rows fall in
SALTS = np.array([0x9E3779B97F4A7C15 * (i + 1) % (1 << 64) for i in range(len(STAGES))], dtype=np.uint64)


def key_words(key_fps: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """16-byte key fingerprints as (hi, lo) uint64 arrays that compare like the bytes."""
    array = key_fps.combine_chunks() if isinstance(key_fps, pa.ChunkedArray) else key_fps
    n = len(array)
    if n == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint64)
    if array.null_count:
        raise FingerprintSetError("a fingerprint set holds a record without a key fingerprint; the set is "
                                  "damaged: replay the side again")
    words = np.frombuffer(array.buffers()[1], dtype=">u8", count=(array.offset + n) * 2)[array.offset * 2:]
    words = words.reshape(n, 2).astype(np.uint64)
    return words[:, 0].copy(), words[:, 1].copy()


def uint64_column(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A fingerprint column as uint64 (a null as 0)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return np.asarray(array.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.uint64)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise (uint64 arithmetic wraps)."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def row_digests(hi: np.ndarray, lo: np.ndarray, fps: list[np.ndarray]) -> list[np.ndarray]:
    """Each row's contribution to the digests: [key, one per stage] (uint64 arrays; sum them, wrapping)."""
    key = mix(hi ^ mix(lo))
    return [key] + [mix(key ^ mix(stage_fps ^ salt)) for stage_fps, salt in zip(fps, SALTS)]


def split_rows(table: pa.Table) -> Iterator[tuple[int, pa.Table]]:
    """(bucket, its rows) for every bucket `table` has rows in, in bucket order (rows keep their order)."""
    if not table.num_rows:
        return
    hi, _ = key_words(table.column("key_fp"))
    buckets = (hi >> np.uint64(64 - KEY_RANGE_BITS)).astype(np.int64)
    order = np.argsort(buckets, kind="stable")
    table, buckets = table.take(pa.array(order, pa.int64())), buckets[order]
    starts = np.flatnonzero(np.r_[True, buckets[1:] != buckets[:-1]])
    for start, end in zip(starts.tolist(), np.r_[starts[1:], len(buckets)].tolist()):
        yield int(buckets[start]), table.slice(start, end - start)


def to_ipc(table: pa.Table) -> bytes:
    """A table as Arrow IPC stream bytes (a slice's own rows only), as the job's routed files hold them."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, FP_SCHEMA) as writer:
        writer.write_table(table.cast(FP_SCHEMA))
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def summarize(bucket: int, table: pa.Table) -> dict[str, Any]:
    """A bucket's summary from its rows sorted by key: rows, duplicate rows (rows repeating the key before
    them), digests ([key, one per stage], as ints), the number of hashdiff buckets its rows fall in
    (`prefixes`), and the sorted names of the features its rows carry."""
    hi, lo = key_words(table.column("key_fp"))
    fps = [uint64_column(table.column(f"{stage}_fp")) for stage in STAGES]
    n = len(hi)
    new_key = np.r_[True, (hi[1:] != hi[:-1]) | (lo[1:] != lo[:-1])] if n else np.zeros(0, bool)
    prefixes = hi >> np.uint64(64 - PREFIX_BITS)
    digests = [int(np.add.reduce(values, dtype=np.uint64)) if n else 0 for values in row_digests(hi, lo, fps)]
    features: set[str] = set()
    for chunk in table.column("features").chunks:
        features.update(pc.unique(chunk.keys).to_pylist())
    return {"bucket": bucket, "rows": n, "duplicates": int(n - new_key.sum()), "digests": digests,
            "prefixes": int(len(np.unique(prefixes))), "features": sorted(features)}


def write_bucket(out_dir: str, bucket: int, tables: Iterable[pa.Table], storage: Storage) -> dict[str, Any]:
    """Sorts a bucket's rows, writes them as `fingerprints/<bb>.parquet` in one write (a retry overwrites it),
    and returns its summary."""
    tables = list(tables)
    table = sort_rows(pa.concat_tables(tables) if tables else FP_SCHEMA.empty_table())
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **FP_PARQUET_OPTIONS)
    path = bucket_file(out_dir, bucket)
    storage.makedirs(urls.parent(path))
    storage.write_bytes(path, sink.getvalue().to_pybytes())
    return summarize(bucket, table)


def write_summaries(out_dir: str, summaries: Iterable[dict[str, Any]], quarantine_parts: list[str],
                    storage: Storage) -> None:
    """Writes the side's `quarantine.jsonl` (the quarantine parts' entries, sorted by location and reason) and
    `buckets.json` (every bucket's summary in bucket order, the quarantine's counts): the last writes of the
    job, once every bucket is written."""
    entries = []
    for path in sorted(quarantine_parts):
        text = storage.read_bytes(path).decode("utf-8")
        entries.extend(json.loads(line) for line in text.splitlines() if line.strip())
    entries.sort(key=lambda e: (e["location"], e["reason"]))
    text = "".join(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n" for entry in entries)
    storage.write_text_or_absent(urls.join(out_dir, QUARANTINE), text)  # a missing file reads as []
    reasons: dict[str, int] = {}
    for entry in entries:
        reasons[entry["reason_kind"]] = reasons.get(entry["reason_kind"], 0) + 1
    document = {"bucket_bits": KEY_RANGE_BITS, "folder": BUCKET_FILES_DIR,
                "buckets": sorted(summaries, key=lambda s: s["bucket"]),
                "quarantined": len(entries), "quarantine_reasons": dict(sorted(reasons.items()))}
    storage.write_bytes(urls.join(out_dir, BUCKETS_FILE),
                       (json.dumps(document, indent=1, sort_keys=True) + "\n").encode("utf-8"))
