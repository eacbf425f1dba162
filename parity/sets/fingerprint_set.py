"""Fingerprint sets: what one replayed (or tapped) side leaves behind, and what `parity diff` reads.

Layout of a set (format `parity.fingerprints/1`, documented in docs/fingerprint-set.md):

    DIR/manifest.json          format, encoding, side, key definition, stages, features, counts, environment
    DIR/fingerprints.parquet   one row per record, sorted by (key_fp, input fp): key, stage fingerprints
    DIR/values/part-*.parquet  the canonical bytes of every stage value, per record (for drill-down)
    DIR/stage_values/part-*.parquet  a spilled replay's location and stage bytes before the transform, which
                               it writes before it spills the batch; its values/ parts then hold the rest
    DIR/quarantine.jsonl       one line per quarantined record: location, reason, preview

Sets are read as data only: Parquet and JSON, never pickle. A set's folder may be a URL Beam's FileSystems
support (`s3://...`): every file here is read and written through a storage context (`parity.storage.context`),
locally exactly as before (each write whole or not at all: a local rename, or one upload that is visible once complete).
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from parity.encoding import canonical
from parity.errors import FingerprintSetError
from parity.sets.feature_columns import FEATURE_MAP, map_array
from parity.sets.model_outputs import MODEL_DIR
from parity.stages import STAGES
from parity.storage import urls
from parity.storage.context import Storage

FORMAT = "parity.fingerprints/1"
MANIFEST = "manifest.json"
FINGERPRINTS = "fingerprints.parquet"
QUARANTINE = "quarantine.jsonl"
VALUES_DIR = "values"
PARTS_DIR = "_parts"
FP_PART_SUFFIX = ".arrow"  # a tap batch's fingerprint rows until `finalize`, and a bucket's routed rows (Arrow IPC)
# A replayed set's rows in key-range bucket files, written by the job's workers with their summaries
# (parity.sets.buckets), instead of one FINGERPRINTS file: `fingerprints/<bb>.parquet` and `buckets.json`.
BUCKET_FILES_DIR = "fingerprints"
BUCKETS_FILE = "buckets.json"
# The key ranges a replay's rows are written in (parity.sets.buckets): 16 on every side. Each bucket costs objects (a
# routed file per gathering, its bucket file), each a request on an object store, so many buckets make a small
# replay into S3 slow. 16 keep a bucket at about 625,000 rows at 10M records (one worker sorts it in memory) and
# still let a diff skip the buckets a handful of diverged records leave clean; where most buckets differ, finer
# ones would not be skipped either.
KEY_RANGE_BITS = 4
ROUTED_DIR = "_routed"  # under PARTS_DIR: the job's rows by bucket on their way to the bucket files

FP_SCHEMA = pa.schema(
    [("key_fp", pa.binary(16)), ("key", pa.string())]
    + [(f"{s}_fp", pa.uint64()) for s in STAGES]
    + [("features", FEATURE_MAP), ("part", pa.string()), ("row", pa.int32())])
VALUE_SCHEMA = pa.schema([("key_bytes", pa.binary()), ("location", pa.string())]
                         + [(s, pa.binary()) for s in STAGES])
# A replay whose staged batches wait for the transform on disk (TFT's analysis, a gated `saved` side) writes the
# location and the stages before the transform as `stage_values/<part>.parquet` before it spills the batch, and
# `values/<part>.parquet` with the other columns after its transform: the spill then carries fingerprints, not
# canonical bytes, a third of the size.
STAGE_VALUES_DIR = "stage_values"
STAGE_VALUE_COLUMNS = ("location",) + tuple(STAGES[:-1])
STAGE_VALUE_SCHEMA = pa.schema([VALUE_SCHEMA.field(name) for name in STAGE_VALUE_COLUMNS])
LATE_VALUE_SCHEMA = pa.schema([field for field in VALUE_SCHEMA if field.name not in STAGE_VALUE_COLUMNS])


def part_fingerprints(part: str, fingerprints: dict[str, list | pa.Array]) -> pa.Table:
    """One batch's fingerprint rows as a table of FP_SCHEMA, from its columns (all but part and row)."""
    count = len(fingerprints["key_fp"])
    # the batch id and the row numbers made as Arrow arrays at once, not converted from a Python object per row
    columns = {**fingerprints, "part": pa.repeat(pa.scalar(part, pa.string()), count),
               "row": pa.array(np.arange(count, dtype=np.int32))}
    if isinstance(columns["features"], list):
        columns["features"] = pa.array(columns["features"], FEATURE_MAP)
    return pa.Table.from_pydict(columns, schema=FP_SCHEMA)


def write_values(out_dir: str, part: str, values: dict[str, list | pa.Array], storage: Storage = Storage()) -> None:
    """A batch's value part, `values/<part>.parquet`, from VALUE_SCHEMA's columns (or only the late ones, when the
    stages before the transform went to `write_stage_values`)."""
    _write_values_table(out_dir, part, _values_table(values), storage)


def _values_table(values: dict[str, list | pa.Array]) -> pa.Table:
    """A value part's table: VALUE_SCHEMA, or LATE_VALUE_SCHEMA when given only its columns."""
    late = values.keys() == set(LATE_VALUE_SCHEMA.names)
    return pa.Table.from_pydict(values, schema=LATE_VALUE_SCHEMA if late else VALUE_SCHEMA)


def _write_values_table(out_dir: str, part: str, values: pa.Table, storage: Storage) -> None:
    storage.makedirs(urls.child(out_dir, VALUES_DIR))
    _write_value_part(values, urls.child(out_dir, VALUES_DIR, f"{part}.parquet"), storage)


def write_stage_values(out_dir: str, part: str, values: dict[str, list | pa.Array],
                       storage: Storage = Storage()) -> None:
    """A batch's location and stage bytes before the transform (STAGE_VALUE_COLUMNS), written before the batch
    is spilled to wait for its transform: `stage_values/<part>.parquet`. Its `values/<part>.parquet` then holds
    only the other columns (`write_values` given them alone)."""
    folder = urls.child(out_dir, STAGE_VALUES_DIR)
    storage.makedirs(folder)
    _write_value_part(pa.Table.from_pydict(values, schema=STAGE_VALUE_SCHEMA), urls.child(folder, f"{part}.parquet"),
                      storage)


def read_values(set_dir: str, part: str, columns: list[str] | None = None, storage: Storage = Storage()) -> pa.Table:
    """`columns` (default: all of VALUE_SCHEMA, in its order) of a part's values rows, from `values/<part>.parquet`
    and, for a part whose stages before the transform were written apart, `stage_values/<part>.parquet`.

    Raises:
        FingerprintSetError: a file cannot be read as those columns, naming it.
    """
    columns = list(VALUE_SCHEMA.names) if columns is None else columns
    path = urls.child(set_dir, VALUES_DIR, f"{part}.parquet")
    early = urls.child(set_dir, STAGE_VALUES_DIR, f"{part}.parquet")
    if not storage.exists(early):
        return _read_parquet(path, columns, VALUE_SCHEMA, storage)
    late = [c for c in columns if c not in STAGE_VALUE_COLUMNS]
    staged = [c for c in columns if c in STAGE_VALUE_COLUMNS]
    tables = [_read_parquet(path, late, LATE_VALUE_SCHEMA, storage) if late else None,
              _read_parquet(early, staged, STAGE_VALUE_SCHEMA, storage) if staged else None]
    if tables[0] is not None and tables[1] is not None and tables[0].num_rows != tables[1].num_rows:
        raise FingerprintSetError(f"{early}: {tables[1].num_rows} rows, but {path} has {tables[0].num_rows}; the "
                                  f"set is damaged: replay the side again")
    found = {name: table.column(name) for table in tables if table is not None for name in table.column_names}
    return pa.table([found[c] for c in columns], names=columns)


def _read_parquet(path: str, columns: list[str], schema: pa.Schema, storage: Storage) -> pa.Table:
    """The columns, canonical bytes as `large_binary`: a part whose values pass 2 GiB in all (a transform
    returning 20 MiB strings, 103 records) is read in chunks, and `take` of `binary` chunks concatenates them
    behind 32-bit offsets ("offset overflow"). Read as they are written, then cast chunk by chunk: reading with
    the schema given goes through Arrow's datasets and took 3.5 times as long (a 2,000-row part, two columns)."""
    wanted = pa.schema([pa.field(f.name, pa.large_binary()) if pa.types.is_binary(f.type) else f
                        for f in (schema.field(name) for name in columns)])
    try:
        with storage.open_parquet(path) as reader:
            missing = [name for name in columns if name not in reader.schema_arrow.names]
            if missing:
                raise FingerprintSetError(f"{path}: cannot read the values of a fingerprint set: no column "
                                          f"{', '.join(missing)}")
            return reader.read(columns=columns).select(columns).cast(wanted)
    except (OSError, pa.ArrowException) as exc:
        raise FingerprintSetError(f"{path}: cannot read the values of a fingerprint set: {exc}") from exc


def write_quarantine_part(out_dir: str, part: str, entries: list[dict], storage: Storage) -> None:
    parts = urls.child(out_dir, PARTS_DIR)
    storage.makedirs(parts)
    path = urls.child(parts, f"{part}.quarantine.jsonl")
    storage.write_text(path, "".join(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n" for entry in entries))


def _read_fp_part(path: str, storage: Storage) -> pa.Table:
    """A fingerprint part: an Arrow IPC file, or a Parquet file (the parts `tap_set` merges taps into)."""
    if path.endswith(FP_PART_SUFFIX):
        with storage.open_arrow(path) as source:
            return pa.ipc.open_file(source).read_all()
    return storage.read_parquet(path, schema=FP_SCHEMA)


def _fp_part_rows(path: str, storage: Storage) -> int:
    if path.endswith(FP_PART_SUFFIX):
        with storage.open_arrow(path) as source:
            reader = pa.ipc.open_file(source)
            return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
    with storage.open_parquet(path) as parquet_file:
        return parquet_file.metadata.num_rows


# Value parts: columns of mostly distinct canonical bytes, so no dictionary pages (they cost write time and save no
# space), and no min/max statistics (a part is read whole, by name). LZ4, not zstd: a diff reads each values file
# its round's pairs touch once per round and process, and a replay writes each once; LZ4 reads and writes them for
# less CPU than zstd, for larger files (benchmarks/value_codecs.py measures both).
VALUE_PARQUET_OPTIONS: dict[str, Any] = {"compression": "lz4", "use_dictionary": False, "write_statistics": False}


def _write_value_part(table: pa.Table, path: str, storage: Storage, compression: str | None = None) -> None:
    """Writes a value part `table` to `path` through a temporary file (VALUE_PARQUET_OPTIONS; `compression` other
    than theirs only for benchmarks/value_codecs.py, which compares codecs with this same writer).

    Whole or absent (the rename), but not fsynced here: a set is trusted only once its manifest is written, and
    `_write_manifest` first syncs the value folders in one pass (`Storage.sync_folder`), so after a crash a
    folder whose parts may have been lost has no manifest, and a set with a manifest has every part on the disk.
    Syncing each part as it is written (a file and its folder, hundreds of parts per side) bought nothing more."""
    options = VALUE_PARQUET_OPTIONS if compression is None else {**VALUE_PARQUET_OPTIONS, "compression": compression}
    with storage.open_write(path, durable=False) as target:
        pq.write_table(table, target, **options)


# fingerprints.parquet: dictionary pages only for the columns of few distinct values (the batch id, the feature
# names), min/max statistics only for the keys: faster to write and smaller than with every column's.
FP_PARQUET_OPTIONS: dict[str, Any] = {"compression": "zstd", "use_dictionary": ["part", "features.key_value.key"],
                                      "write_statistics": ["key_fp", "key"]}
SORT_KEYS = [("key_fp", "ascending"), ("input_fp", "ascending"), ("part", "ascending"), ("row", "ascending")]
# Rows sorted in memory at once by `finalize`: a set of more rows is first split by key_fp prefix into spill
# ranges of about this size (spilled as Arrow IPC files), each then sorted alone, so memory does not grow with the
# set. Three things split key_fp by its leading bits, each with its own name: these spill ranges (up to
# MAX_SPILL_BITS), a replay's key ranges (KEY_RANGE_BITS, its bucket files) and the diff's digest buckets
# (parity.compare.hashdiff.DIGEST_BITS).
SORT_ROWS = 200_000
MAX_SPILL_BITS = 8        # at most 256 spill ranges (the first byte of key_fp), so at most 256 spill files per flush
SPILL_ROWS = 100_000       # rows buffered across all spill ranges before they are spilled
SPILL_DIR = "_spill"


def spill_bits(rows: int, range_rows: int | None = None) -> int:
    """How many leading bits of key_fp split `rows` rows into spill ranges of about `range_rows` (0: one)."""
    range_rows = range_rows or SORT_ROWS
    bits = 0
    while (rows >> bits) > range_rows and bits < MAX_SPILL_BITS:
        bits += 1
    return bits


def key_prefix(key_fps: pa.Array | pa.ChunkedArray, bits: int) -> np.ndarray:
    """The leading `bits` bits of each 16-byte key fingerprint (a spill range; key order is kept)."""
    if isinstance(key_fps, pa.ChunkedArray):
        key_fps = key_fps.combine_chunks() if key_fps.num_chunks != 1 else key_fps.chunk(0)
    if bits == 0 or len(key_fps) == 0:
        return np.zeros(len(key_fps), dtype=np.int64)
    data = np.frombuffer(key_fps.buffers()[1], dtype=np.uint8)
    first = data[key_fps.offset * 16:(key_fps.offset + len(key_fps)) * 16:16].astype(np.int64)
    return first >> (8 - bits)


def _sorted_fingerprints(fp_parts: list[str], out_path: str, spill_dir: str, storage: Storage) -> tuple[int, set[str]]:
    """Writes the rows of all parts to `out_path` sorted by SORT_KEYS; returns (rows, feature names).

    Up to SORT_ROWS rows are concatenated and sorted in memory. Larger sets take one pass over the parts that
    spills each part's rows into spill ranges (the leading bits of key_fp), then sort and write range by range:
    range order is key order, so the output is the same sorted rows, with at most a range (plus the spill buffer)
    in memory.

    Each part is removed once read, so that the pages it held in the page cache go to the spill files and the
    output written next (the kernel fills pages it has not handed out lately several times slower:
    parity.replay.spill).
    """
    rows = sum(_fp_part_rows(path, storage) for path in fp_parts)
    features: set[str] = set()
    bits = spill_bits(rows)
    if bits == 0:
        tables = [_read_and_remove(p, storage) for p in fp_parts]
        table = pa.concat_tables(tables) if tables else FP_SCHEMA.empty_table()
        table = sort_rows(table)
        with storage.open_write(out_path) as target:
            pq.write_table(table, target, **FP_PARQUET_OPTIONS)
        _add_features(features, table)
        return table.num_rows, features
    os.makedirs(spill_dir, exist_ok=True)
    spills: dict[int, list[str]] = {}
    buffered: dict[int, list[pa.Table]] = {}
    count = 0

    def spill() -> None:
        for prefix, tables in buffered.items():
            path = os.path.join(spill_dir, f"b{prefix:03d}-{len(spills.get(prefix, [])):06d}.arrow")
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, FP_SCHEMA) as writer:
                writer.write_table(pa.concat_tables(tables))
            spills.setdefault(prefix, []).append(path)
        buffered.clear()

    for path in fp_parts:
        table = _read_and_remove(path, storage)
        prefixes = key_prefix(table.column("key_fp"), bits)
        order = np.argsort(prefixes, kind="stable")
        table, prefixes = take_rows(table, order), prefixes[order]
        starts = np.flatnonzero(np.r_[True, prefixes[1:] != prefixes[:-1]]) if len(prefixes) else np.zeros(0, int)
        for start, end in zip(starts, np.r_[starts[1:], len(prefixes)]):
            buffered.setdefault(int(prefixes[start]), []).append(table.slice(int(start), int(end - start)))
        count += table.num_rows
        if count >= SPILL_ROWS:
            spill()
            count = 0
    spill()
    written = 0
    with storage.open_write(out_path) as target, pq.ParquetWriter(target, FP_SCHEMA, **FP_PARQUET_OPTIONS) as writer:
        for prefix in sorted(spills):
            tables = []
            for path in spills[prefix]:
                with pa.OSFile(path, "rb") as source:
                    tables.append(pa.ipc.open_stream(source).read_all())
                os.remove(path)
            table = sort_rows(pa.concat_tables(tables))
            writer.write_table(table)
            _add_features(features, table)
            written += table.num_rows
    os.rmdir(spill_dir)
    return written, features


def bucket_file(set_dir: str, bucket: int) -> str:
    """Where a bucketed set keeps the rows of key-range bucket `bucket` (its first key byte)."""
    return urls.join(set_dir, BUCKET_FILES_DIR, f"{bucket:02x}.parquet")


def sort_rows(table: pa.Table) -> pa.Table:
    """`table.sort_by(SORT_KEYS)`, its rows moved by `take_rows`."""
    return take_rows(table, pc.sort_indices(table, sort_keys=SORT_KEYS).to_numpy())


def take_rows(table: pa.Table, indices: np.ndarray) -> pa.Table:
    """`table.take(indices)`: the map column (`features`) gathered by `_take_map`, which Arrow's own take moves
    several times slower than every other column together."""
    columns = [_take_map(column, indices) if pa.types.is_map(column.type) else column.take(indices)
               for column in table.columns]
    return pa.Table.from_arrays(columns, schema=table.schema)


def _take_map(column: pa.ChunkedArray, indices: np.ndarray) -> pa.Array:
    """The rows `indices` of a map column, gathered with numpy on its offsets and Arrow's take on its keys and
    items (flat arrays, which Arrow takes fast); a column with null maps goes Arrow's way."""
    chunks = column.chunks
    if not chunks or any(chunk.null_count for chunk in chunks):
        return column.take(indices)
    starts, lengths, keys, items, base = [], [], [], [], 0
    for chunk in chunks:
        offsets = chunk.offsets.to_numpy().astype(np.int64)  # this chunk's rows, into its whole child
        first, last = int(offsets[0]), int(offsets[-1])
        entries = chunk.values.slice(first, last - first)
        chunk_keys, chunk_items = entries.flatten()
        keys.append(chunk_keys)
        items.append(chunk_items)
        starts.append(offsets[:-1] - first + base)
        lengths.append(np.diff(offsets))
        base += last - first
    indices = np.asarray(indices, dtype=np.int64)
    row_starts, row_lengths = np.concatenate(starts)[indices], np.concatenate(lengths)[indices]
    new_offsets = np.zeros(len(indices) + 1, dtype=np.int32)
    np.cumsum(row_lengths, out=new_offsets[1:])
    if len(row_lengths) and (row_lengths == row_lengths[0]).all():  # as many features in every row: one pass
        gather = (row_starts[:, None] + np.arange(row_lengths[0], dtype=np.int64)[None, :]).ravel()
    else:
        gather = np.repeat(row_starts - new_offsets[:-1], row_lengths) + np.arange(new_offsets[-1], dtype=np.int64)
    return map_array(pa.array(new_offsets), pa.concat_arrays(keys).take(gather), pa.concat_arrays(items).take(gather),
                     column.type)


def _read_and_remove(path: str, storage: Storage) -> pa.Table:
    table = _read_fp_part(path, storage)  # an Arrow IPC part stays mapped (and readable) until the table is freed
    storage.delete([path])
    return table


def _add_features(features: set[str], table: pa.Table) -> None:
    for chunk in table.column("features").chunks:
        features.update(pc.unique(chunk.keys).to_pylist())


def finalize(out_dir: str, manifest: dict[str, Any], storage: Storage = Storage()) -> dict[str, Any]:
    """Writes the manifest of a set: from its bucket summaries when the job wrote them (`buckets.json`: a
    replay), reading nothing else; else (a tap set) after merging the batch parts into the sorted fingerprint
    file (in bounded memory)."""
    if storage.isfile(urls.join(out_dir, BUCKETS_FILE)):
        return _finalize_buckets(out_dir, manifest, storage)
    parts_dir = urls.child(out_dir, PARTS_DIR)
    listed = storage.list_folder(parts_dir)  # the parts workers wrote: local files, or objects under the set's URL
    fp_parts = [path for path in listed if path.endswith((FP_PART_SUFFIX, ".parquet"))]
    quarantine_parts = [path for path in listed if path.endswith(".quarantine.jsonl")]
    # the sort's spill files are the client's own: beside the parts locally, in a local temporary folder when
    # the set is on a URL
    with storage.local_scratch(parts_dir, prefix="parity-finalize-") as scratch:
        fingerprinted, features = _sorted_fingerprints(fp_parts, urls.child(out_dir, FINGERPRINTS),
                                                      os.path.join(scratch, SPILL_DIR), storage)
    quarantined: list[dict] = []
    for path in quarantine_parts:
        quarantined.extend(json.loads(line) for line in storage.read_text(path).split("\n") if line.strip())
    quarantined.sort(key=lambda e: (e["location"], e["reason"]))
    text = "".join(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n" for entry in quarantined)
    storage.write_text_or_absent(urls.child(out_dir, QUARANTINE), text)  # a missing file reads as []
    storage.delete(quarantine_parts)  # the fingerprint parts are gone
    storage.prune_empty_folders(parts_dir)
    reasons: dict[str, int] = {}
    for entry in quarantined:
        reasons[entry["reason_kind"]] = reasons.get(entry["reason_kind"], 0) + 1
    return _write_manifest(out_dir, manifest, fingerprinted, features, len(quarantined), reasons, storage)


def _finalize_buckets(out_dir: str, manifest: dict[str, Any], storage: Storage) -> dict[str, Any]:
    """The manifest from `buckets.json` (the summaries the job's workers wrote; its size does not grow with the
    records); the job's batch parts are removed."""
    summary = _read_buckets(out_dir, storage)
    fingerprinted = sum(b["rows"] for b in summary["buckets"])
    features = {name for b in summary["buckets"] for name in b["features"]}
    quarantined = summary["quarantined"]
    parts_dir = urls.join(out_dir, PARTS_DIR)
    storage.delete(storage.match(urls.join(parts_dir, f"*{FP_PART_SUFFIX}"))
                   + storage.match(urls.join(parts_dir, "*.quarantine.jsonl"))
                   + storage.match(urls.join(parts_dir, ROUTED_DIR, "*", f"*{FP_PART_SUFFIX}")))
    storage.prune_empty_folders(parts_dir)  # the emptied folders
    return _write_manifest(out_dir, manifest, fingerprinted, features, quarantined, summary["quarantine_reasons"],
                           storage)


def _write_manifest(out_dir: str, manifest: dict[str, Any], fingerprinted: int, features: Any, quarantined: int,
                    reasons: dict[str, int], storage: Storage) -> dict[str, Any]:
    """`manifest` with what both kinds of set (a replay's bucketed one, a tap set) record of their rows, written as
    the set's manifest.json, last (`read_set` refuses a folder without one), once the value parts, written
    without an fsync each (`_write_value_part`), are on the disk."""
    for folder in (VALUES_DIR, STAGE_VALUES_DIR):
        storage.sync_folder(urls.child(out_dir, folder))
    manifest = dict(manifest)
    manifest.update({
        "format": FORMAT,
        "encoding": canonical.ENCODING_VERSION,
        "stages": list(STAGES),
        "features": sorted(features),
        "records": {"read": fingerprinted + quarantined, "fingerprinted": fingerprinted, "quarantined": quarantined},
        "quarantine_reasons": dict(sorted(reasons.items())),
    })
    storage.write_text(urls.child(out_dir, MANIFEST), json.dumps(manifest, indent=2, ensure_ascii=False, sort_keys=True)
                       + "\n")
    return manifest


def _read_buckets(set_dir: str, storage: Storage) -> dict[str, Any]:
    """`buckets.json`, checked for the fields the readers use.

    Raises:
        FingerprintSetError: it is unreadable or malformed, naming it.
    """
    path = urls.join(set_dir, BUCKETS_FILE)
    try:
        summary = json.loads(storage.read_bytes(path))
    except (OSError, ValueError) as exc:
        raise FingerprintSetError(f"{path}: cannot read: {exc}; the set is damaged: replay the side again") from exc
    buckets = summary.get("buckets") if isinstance(summary, dict) else None
    fields = (("bucket", int), ("rows", int), ("duplicates", int), ("prefixes", int), ("digests", list),
              ("features", list))
    if not isinstance(buckets, list) or not all(
            isinstance(b, dict) and all(isinstance(b.get(f), t) for f, t in fields)
            and len(b["digests"]) == 1 + len(STAGES) and 0 <= b["bucket"] < 256 for b in buckets) \
            or summary.get("bucket_bits") != KEY_RANGE_BITS \
            or [b["bucket"] for b in buckets] != sorted({b["bucket"] for b in buckets}) \
            or not isinstance(summary.get("quarantined"), int) \
            or not isinstance(summary.get("quarantine_reasons"), dict):
        raise FingerprintSetError(f"{path}: malformed bucket summaries, or buckets of another parity version (this "
                                  f"one writes bucket_bits {KEY_RANGE_BITS}); replay the side again")
    return summary


class FingerprintSet:
    """A fingerprint set opened for reading.

    `table` (all fingerprint rows) is read on first use; `iter_tables` streams the rows in key order without
    holding them all, which is what `parity diff` does. A set built from a table in memory (e.g. an aligned
    tap set) streams that table. `buckets`: a replayed set's bucket summaries (`buckets.json`, in bucket
    order), or None for a set of one fingerprints file. `storage`: the context its files are read with.
    """

    def __init__(self, path: str, manifest: dict[str, Any], table: pa.Table | None = None,
                 buckets: list[dict[str, Any]] | None = None, storage: Storage = Storage()) -> None:
        self.path = path
        self.storage = storage
        self.manifest = manifest
        self._table = table
        self.buckets = buckets if table is None else None

    def __repr__(self) -> str:
        return f"FingerprintSet(path={self.path!r}, side={self.side!r})"

    @property
    def table(self) -> pa.Table:
        if self._table is None and self.buckets is not None:
            tables = list(self.iter_tables(1 << 30))
            self._table = pa.concat_tables(tables) if tables else FP_SCHEMA.empty_table()
        if self._table is None:
            path = urls.child(self.path, FINGERPRINTS)
            try:
                self._table = self.storage.read_parquet(path, schema=FP_SCHEMA)
            except (OSError, pa.ArrowException) as exc:
                raise FingerprintSetError(f"{path}: cannot read: {exc}") from exc
        return self._table

    @property
    def side(self) -> str:
        return self.manifest.get("side", os.path.basename(self.path.rstrip("/")))

    @property
    def num_rows(self) -> int:
        if self._table is not None:
            return self._table.num_rows
        if self.buckets is not None:
            return sum(b["rows"] for b in self.buckets)
        with _open_fingerprints(self.path, self.storage) as reader:
            return reader.metadata.num_rows

    def iter_tables(self, rows: int, skip: frozenset[int] = frozenset()) -> Iterator[pa.Table]:
        """The fingerprint rows in file order (sorted by key), about `rows` at a time, as FP_SCHEMA tables;
        of a bucketed set, the buckets in `skip` are left out (and their files not opened)."""
        if self.buckets is not None:  # bucket order is key order (the files, even once `table` was read)
            for bucket in self.buckets:
                if bucket["bucket"] not in skip:
                    yield from _iter_parquet(bucket_file(self.path, bucket["bucket"]), rows, self.storage)
            return
        if self._table is not None:
            for batch in self._table.to_batches(max_chunksize=rows):
                yield pa.Table.from_batches([batch], schema=self._table.schema).cast(FP_SCHEMA)
            return
        path = urls.child(self.path, FINGERPRINTS)
        with _open_fingerprints(self.path, self.storage) as reader:
            try:
                for batch in reader.iter_batches(batch_size=rows, columns=FP_SCHEMA.names):
                    yield pa.Table.from_batches([batch]).cast(FP_SCHEMA)
            except (OSError, pa.ArrowException) as exc:
                raise FingerprintSetError(f"{path}: cannot read: {exc}") from exc

    def keys_of_range(self, key_range: int) -> pa.Array:
        """The key texts of a bucketed set's key range (its bucket file's `key` column alone; empty when the range
        holds no row)."""
        if self.buckets is None:
            raise ValueError("key ranges are the buckets of bucketed sets (parity.sets.buckets)")
        if not any(bucket["bucket"] == key_range for bucket in self.buckets):
            return pa.array([], pa.string())
        path = bucket_file(self.path, key_range)
        try:
            with self.storage.open_parquet(path) as reader:
                return reader.read(columns=["key"]).column("key").combine_chunks()
        except (OSError, pa.ArrowException, KeyError) as exc:
            raise FingerprintSetError(f"{path}: cannot read: {exc}; the set is damaged: replay the side "
                                      f"again") from exc

    def row_of_key(self, key_json: str, rows: int = 1 << 16) -> dict[str, Any] | None:
        """The fingerprint row of the record whose key is `key_json` (the first, should a key repeat), or None;
        read `rows` at a time, so that one record of a set of millions is found without holding the set."""
        for table in self.iter_tables(rows):
            found = table.filter(pc.equal(table.column("key"), key_json))
            if found.num_rows:
                return found.slice(0, 1).to_pylist()[0]
        return None

    def quarantined(self) -> list[dict]:
        path = urls.child(self.path, QUARANTINE)
        if not self.storage.exists(path):
            return []
        return [json.loads(line) for line in self.storage.read_text(path).split("\n") if line.strip()]

    def stage_columns(self, parts: list[str],
                      wanted: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, tuple[list, np.ndarray]]:
        """The canonical bytes of some stages of some records, by column: {stage: (part codes, rows)} ->
        {stage: (canonical bytes, order)}, where a part code indexes `parts` and the value asked j-th is
        `values[order[j]]` (bytes, or None). Each values file is read once, with the columns of the stages asked of
        it, and each stage's rows taken once from it and made Python bytes there: the requests of a fetch round are
        grouped by part with numpy. The values stay in file order (the caller picks the ones it wants through
        `order`).

        Python bytes, not an Arrow array: a value of a few hundred bytes costs about as much memory either way, and
        the comparison needs Python bytes in the end, so the round's values are copied once, not three times (an
        Arrow array of the round, then a slice of it taken, then converted)."""
        stages = [s for s in STAGES if s in wanted]
        if not stages:
            return {}
        counts = [len(wanted[s][0]) for s in stages]
        codes = np.concatenate([np.asarray(wanted[s][0], np.int64) for s in stages])
        rows = np.concatenate([np.asarray(wanted[s][1], np.int64) for s in stages])
        which = np.repeat(np.arange(len(stages)), counts)
        order = np.argsort(codes << 32 | rows, kind="stable")  # by part, then row: a row is below 2^31
        starts = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1]]) if len(order) else order
        values: list[list] = [[] for _ in stages]
        asked: list[list[np.ndarray]] = [[] for _ in stages]
        offsets = np.r_[0, np.cumsum(counts)]
        for start, end in zip(starts.tolist(), np.r_[starts[1:], len(order)].tolist()):
            group = order[start:end]
            part = parts[int(codes[group[0]])]
            path = self._values_path(part)  # refuses a part that is not a file name
            kinds = which[group]
            columns = [stages[i] for i in np.unique(kinds).tolist()]
            table = read_values(self.path, part, columns, self.storage)
            for stage in columns:  # each stage's rows taken straight from the file's column: one take a stage
                i = stages.index(stage)
                mine = kinds == i
                values[i].extend(_take(table.select([stage]), rows[group[mine]], path).column(0).to_pylist())
                asked[i].append(group[mine] - offsets[i])
        return {stage: (values[i], np.argsort(np.concatenate(asked[i])) if counts[i] else np.zeros(0, np.int64))
                for i, stage in enumerate(stages)}

    def decode_value(self, part: str, row: int, stage: str, data: bytes | None) -> Any:
        """A stage value (or a part of one) from its canonical bytes, as `stage_columns` gave them; refuses
        anything else, naming the values file, row and stage."""
        try:
            return canonical.decode(data) if data is not None else None
        except ValueError:
            return self._decode(self._values_path(part), row, stage, data)

    def _values_path(self, part: str) -> str:
        if not part or os.path.basename(part) != part or part in (".", ".."):
            raise FingerprintSetError(f"{self.path}/{FINGERPRINTS}: part {part!r} is not a file name; the set "
                                      f"is damaged: replay the side again")
        return urls.child(self.path, VALUES_DIR, f"{part}.parquet")

    @staticmethod
    def _decode(path: str, row: int, stage: str, data: bytes | None) -> Any:
        try:
            return canonical.decode(data) if data is not None else None
        except ValueError as exc:  # data only: anything but canonical bytes is refused, never run
            raise FingerprintSetError(
                f"{path}: row {row}, stage {stage}: the value is not canonical bytes "
                f"({exc}); the set is damaged or was not written by parity: replay the side again") from exc

    def values(self, refs: Iterable[tuple[str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
        """Decoded stage values (and location, key bytes) of the given (part, row) records."""
        if self.manifest.get(VALUES_REMOVED):
            raise FingerprintSetError(f"{self.path}: the values of this set were removed at the end of a check "
                                      f"under report.redact (it keeps fingerprints and counts only); replay the side "
                                      f"without redaction to see or diff its values")
        by_part: dict[str, list[int]] = {}
        for part, row in refs:
            by_part.setdefault(part, []).append(row)
        result: dict[tuple[str, int], dict[str, Any]] = {}
        for part, rows in sorted(by_part.items()):
            path = self._values_path(part)  # refuses a part that is not a file name
            order = sorted(set(rows))
            table = _take(read_values(self.path, part, storage=self.storage), order, path)
            for row, record in zip(order, table.to_pylist()):
                decoded: dict[str, Any] = {"location": record["location"], "key_bytes": record["key_bytes"]}
                for stage in STAGES:
                    data = record[stage]
                    try:
                        decoded[stage] = canonical.decode(data) if data is not None else None
                    except ValueError as exc:  # data only: anything but canonical bytes is refused, never run
                        raise FingerprintSetError(
                            f"{path}: row {row}, stage {stage}: the value is not canonical bytes "
                            f"({exc}); the set is damaged or was not written by parity: replay the side again") from exc
                result[(part, row)] = decoded
        return result


def _take(table: pa.Table, rows: list[int] | np.ndarray, path: str) -> pa.Table:
    try:
        return table.take(pa.array(rows, pa.int64()))
    except (IndexError, pa.ArrowException) as exc:
        raise FingerprintSetError(f"{path}: cannot read the values of a fingerprint set: {exc}") from exc


VALUES_REMOVED = "values_removed"  # a manifest's mark: `remove_values` ran on the set


def remove_values(set_dir: str, storage: Storage, also: Iterable[str] = ()) -> None:
    """What a check under `report.redact` leaves of a side's set once its reports are written: fingerprints,
    counts and the (redacted) quarantine, with no raw value. The value parts (`values/`, `stage_values/`, the model
    stage's outputs `model/`) and
    `also` (names in the set: the TFT graph, whose vocabularies are values, and analyzers.json) are removed,
    and the key column holds each key's fingerprint (its `key_fp` in hex, as redacted messages name records)."""
    for name in (VALUES_DIR, STAGE_VALUES_DIR, MODEL_DIR, *also):
        storage.remove(urls.child(set_dir, name))
    bucketed = storage.isfile(urls.child(set_dir, BUCKETS_FILE))
    for path in (storage.match(urls.join(set_dir, BUCKET_FILES_DIR, "*.parquet")) if bucketed
                 else [urls.child(set_dir, FINGERPRINTS)]):
        table = storage.read_parquet(path)
        keys = pa.array([fp.hex() for fp in table.column("key_fp").to_pylist()], pa.string())
        table = table.set_column(table.schema.get_field_index("key"), table.schema.field("key"), keys)
        with storage.open_write(path) as target:
            pq.write_table(table, target, **FP_PARQUET_OPTIONS)
    manifest_path = urls.child(set_dir, MANIFEST)
    manifest = json.loads(storage.read_text(manifest_path))
    manifest[VALUES_REMOVED] = True
    storage.write_text(manifest_path, json.dumps(manifest, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


def read_set(path: str, storage: Storage = Storage()) -> FingerprintSet:
    """Opens a fingerprint set with the storage context `storage`, refusing clearly what parity cannot read."""
    manifest_path = urls.child(path, MANIFEST)
    try:
        manifest = json.loads(storage.read_text(manifest_path))
    except FileNotFoundError as exc:
        raise FingerprintSetError(f"{path}: not a fingerprint set (no {MANIFEST}); pass a folder written by "
                                  f"`parity replay` or by a parity.beam tap") from exc
    except (OSError, ValueError) as exc:
        raise FingerprintSetError(f"{manifest_path}: unreadable manifest: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise FingerprintSetError(f"{manifest_path}: format {found!r} is not {FORMAT!r}; re-run `parity replay` "
                                  f"with this version of parity")
    if manifest.get("encoding") != canonical.ENCODING_VERSION:
        raise FingerprintSetError(f"{manifest_path}: canonical encoding {manifest.get('encoding')!r} is not "
                                  f"{canonical.ENCODING_VERSION!r}; fingerprints of different encodings cannot "
                                  f"be compared: replay both sides with the same parity version")
    records = manifest.get("records")
    if not isinstance(records, dict) or not all(isinstance(records.get(k), int) and not isinstance(records.get(k), bool)
                                                for k in ("read", "fingerprinted", "quarantined")):
        raise FingerprintSetError(f"{manifest_path}: field 'records' must hold the integers read, fingerprinted and "
                                  f"quarantined, got {str(records)[:80]}; the set is damaged: replay the side again")
    if not isinstance(manifest.get("side", ""), str) or not isinstance(manifest.get("quarantine_reasons", {}), dict):
        raise FingerprintSetError(f"{manifest_path}: fields 'side' (a string) and 'quarantine_reasons' (a mapping) "
                                  f"are malformed; the set is damaged: replay the side again")
    for field, kind, what in _MANIFEST_FIELDS:
        if field in manifest and not isinstance(manifest[field], kind):
            raise FingerprintSetError(f"{manifest_path}: field '{field}' must be {what}, got "
                                      f"{json.dumps(manifest[field])[:80]}; the set is damaged: replay the side "
                                      f"again")
    if storage.exists(urls.join(path, BUCKETS_FILE)) or storage.exists(urls.join(path, BUCKET_FILES_DIR)):
        # a bucketed set (its summaries refused when missing): its bucket files are opened when read
        return FingerprintSet(path=path, manifest=manifest, buckets=_read_buckets(path, storage)["buckets"],
                              storage=storage)
    with _open_fingerprints(path, storage) as reader:  # the rows are read when used: `parity diff` streams them
        missing = [name for name in FP_SCHEMA.names if name not in reader.schema_arrow.names]
    if missing:
        raise FingerprintSetError(f"{path}/{FINGERPRINTS}: cannot read: columns {', '.join(missing)} are "
                                  f"missing; the set is damaged: replay the side again")
    return FingerprintSet(path=path, manifest=manifest, storage=storage)


# optional manifest fields that `parity diff` reads, with the type it reads them as
_MANIFEST_FIELDS = (("environment", dict, "a mapping of library to version"),
                    ("features", list, "a list of feature names"),
                    ("config_name", (str, type(None)), "a string"))


@contextlib.contextmanager
def _open_fingerprints(path: str, storage: Storage) -> Iterator[pq.ParquetFile]:
    """The set's fingerprints file (`Storage.open_parquet`), closed when the block ends; a file that cannot be
    opened is a damaged set."""
    with contextlib.ExitStack() as stack:
        try:
            reader = stack.enter_context(storage.open_parquet(urls.child(path, FINGERPRINTS)))
        except (OSError, pa.ArrowException) as exc:
            raise FingerprintSetError(f"{path}/{FINGERPRINTS}: cannot read: {exc}") from exc
        yield reader


def _iter_parquet(path: str, rows: int, storage: Storage) -> Iterator[pa.Table]:
    """A bucket file's rows, about `rows` at a time, as FP_SCHEMA tables."""
    try:
        with storage.open_parquet(path) as reader:
            missing = [name for name in FP_SCHEMA.names if name not in reader.schema_arrow.names]
            if missing:
                raise FingerprintSetError(f"{path}: cannot read: columns {', '.join(missing)} are missing; the set "
                                          f"is damaged: replay the side again")
            for batch in reader.iter_batches(batch_size=rows, columns=FP_SCHEMA.names):
                yield pa.Table.from_batches([batch]).cast(FP_SCHEMA)
    except (OSError, pa.ArrowException) as exc:
        raise FingerprintSetError(f"{path}: cannot read: {exc}; the set is damaged: replay the side again") from exc
