"""What tests read and rewrite of a fingerprint set's rows, whichever layout it has: one `fingerprints.parquet`
(tap sets, older sets) or key-range bucket files with their summaries (`fingerprints/`, `buckets.json`: a
replay's)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from parity.sets import buckets
from parity.sets.fingerprint_set import (BUCKET_FILES_DIR, BUCKETS_FILE, FINGERPRINTS, FP_PARQUET_OPTIONS,
                                         FP_PART_SUFFIX, FP_SCHEMA, PARTS_DIR, VALUE_SCHEMA, part_fingerprints,
                                         read_set, read_values, sort_rows, write_values)
from parity.stages import STAGES


def fingerprint_files(set_dir) -> dict[str, bytes]:
    """The bytes of every file holding the set's fingerprint rows (and their summaries), by name."""
    set_dir = str(set_dir)
    if not os.path.exists(os.path.join(set_dir, BUCKETS_FILE)):
        return {FINGERPRINTS: open(os.path.join(set_dir, FINGERPRINTS), "rb").read()}
    folder = os.path.join(set_dir, BUCKET_FILES_DIR)
    found = {BUCKETS_FILE: open(os.path.join(set_dir, BUCKETS_FILE), "rb").read()}
    for name in sorted(os.listdir(folder)):
        found[f"{BUCKET_FILES_DIR}/{name}"] = open(os.path.join(folder, name), "rb").read()
    return found


def fingerprint_table(set_dir) -> pa.Table:
    """All fingerprint rows of the set, in key order."""
    return read_set(str(set_dir)).table


def bucket_paths(set_dir) -> list[str]:
    folder = os.path.join(str(set_dir), BUCKET_FILES_DIR)
    return [os.path.join(folder, name) for name in sorted(os.listdir(folder))]


def rewrite_rows(set_dir, edit: Callable[[pa.Table], pa.Table]) -> None:
    """Rewrites every bucket file of a replayed set through `edit`, and its summaries to match (as a set whose
    workers wrote those rows)."""
    set_dir = str(set_dir)
    path = os.path.join(set_dir, BUCKETS_FILE)
    with open(path, encoding="utf-8") as handle:
        document = json.load(handle)
    summaries = []
    for bucket_path in bucket_paths(set_dir):
        table = sort_rows(edit(pq.read_table(bucket_path)))
        pq.write_table(table, bucket_path, **FP_PARQUET_OPTIONS)
        summaries.append(buckets.summarize(int(os.path.basename(bucket_path)[:2], 16), table))
    document["buckets"] = summaries
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(document, handle)


@dataclass
class PartRows:
    """The rows one batch contributes, a dict per row: fingerprints (FP_SCHEMA but part and row) and values."""

    fingerprints: list[dict]
    values: list[dict]


def write_part(out_dir, part: str, rows: PartRows) -> None:
    """One batch's rows as a replay's worker once wrote them by hand (`_parts/<part>.arrow`, an Arrow IPC file,
    and `values/<part>.parquet`), for `finalize` to make a set of: tests build sets of chosen rows this way."""
    for row_index, row in enumerate(rows.fingerprints):
        row["part"], row["row"] = part, row_index
    _write_part(str(out_dir), part, pa.Table.from_pylist(rows.fingerprints, schema=FP_SCHEMA),
                pa.Table.from_pylist(rows.values, schema=VALUE_SCHEMA).to_pydict())


def write_part_columns(out_dir, part: str, fingerprints: dict, values: dict) -> None:
    """`write_part` of one batch given column by column (FP_SCHEMA's columns but part and row, and
    VALUE_SCHEMA's)."""
    _write_part(str(out_dir), part, part_fingerprints(part, fingerprints), values)


def _write_part(out_dir: str, part: str, fingerprints: pa.Table, values: dict) -> None:
    os.makedirs(os.path.join(out_dir, PARTS_DIR), exist_ok=True)
    with pa.OSFile(os.path.join(out_dir, PARTS_DIR, f"{part}{FP_PART_SUFFIX}"), "wb") as sink, \
            pa.ipc.new_file(sink, FP_SCHEMA) as writer:
        writer.write_table(fingerprints)
    write_values(out_dir, part, values)


def stage_bytes(fset, wanted: dict[tuple[str, int], list[str]]) -> dict[tuple[str, int], dict[str, bytes | None]]:
    """The canonical bytes of some stages of some records, record by record (the reading `stage_columns` does by
    column): {(part, row): [stage, ...]} -> {(part, row): {stage: bytes}}."""
    by_part: dict[str, dict[int, list[str]]] = {}
    for (part, row), stages in wanted.items():
        by_part.setdefault(part, {}).setdefault(row, []).extend(stages)
    result: dict[tuple[str, int], dict[str, bytes | None]] = {}
    for part, rows in sorted(by_part.items()):
        columns = [s for s in STAGES if any(s in stages for stages in rows.values())]
        order = sorted(rows)
        table = read_values(fset.path, part, columns).take(order)
        data = {stage: table.column(stage).to_pylist() for stage in columns}
        for n, row in enumerate(order):
            result[(part, row)] = {stage: data[stage][n] for stage in rows[row]}
    return result
