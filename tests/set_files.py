"""What tests read and rewrite of a fingerprint set's rows, whichever layout it has: one `fingerprints.parquet`
(tap sets, older sets) or key-range bucket files with their summaries (`fingerprints/`, `buckets.json`: a
replay's)."""
from __future__ import annotations

import json
import os
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from parity.sets import buckets
from parity.sets.fingerprint_set import (BUCKET_FILES_DIR, BUCKETS_FILE, FINGERPRINTS, FP_PARQUET_OPTIONS,
                                         read_set, sort_rows)


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
