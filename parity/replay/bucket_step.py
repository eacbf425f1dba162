"""The replay's last writes, done by the workers: the batches' fingerprint rows routed to key-range buckets,
each bucket sorted, written and summarized (`WriteBuckets`), then every summary in one file (parity.sets.buckets).

The client then reads the summaries only (`finalize`), and `parity diff` reads only the buckets whose summaries
differ between the sides, so neither grows with the records of a clean run.
"""
from __future__ import annotations

import hashlib
from typing import Any, Iterable, Iterator

import apache_beam as beam
import pyarrow as pa
from apache_beam.transforms.window import GlobalWindows

from parity.sets import buckets
from parity.sets.fingerprint_set import BUCKETS_FILE, FP_PART_SUFFIX, PARTS_DIR, ROUTED_DIR
from parity.storage import urls
from parity.storage.context import Storage

ROUTE_ROWS = 100_000  # rows a worker gathers from its batches before it splits them: ~400 per bucket, not ~8


class WriteBuckets(beam.PTransform):
    """Writes a side's fingerprint rows as bucket files and their summaries.

    Input: a PCollection of (part name, fingerprint rows) (`WriteBatchFn`'s output). Output: the path of
    `buckets.json`, once.

    Example:
        >>> rows | "WriteBuckets" >> WriteBuckets(out_dir, storage)
    """

    def __init__(self, out_dir: str, storage: Storage) -> None:
        super().__init__()
        self.out_dir = out_dir
        self.storage = storage

    def expand(self, rows: beam.PCollection) -> beam.PCollection:
        return (rows
                | "RouteRows" >> beam.ParDo(_RouteRowsFn(self.out_dir, self.storage))
                | "GroupBuckets" >> beam.GroupByKey()
                | "WriteBucket" >> beam.Map(_write_bucket, self.out_dir, self.storage)
                | "AllSummaries" >> beam.combiners.ToList()
                | "WriteSummaries" >> beam.Map(_write_summaries, self.out_dir, self.storage))


class _RouteRowsFn(beam.DoFn):
    """Gathers the batches' fingerprint rows, and per ROUTE_ROWS rows of a bundle writes each bucket's rows as one
    Arrow IPC file under `_parts/_routed/<bb>/` and hands on (bucket, its path): the GroupByKey carries paths,
    never rows (the in-process runners hold what they group in memory), one per bucket and gathering.

    The routed files are whole or absent (a rename) but not fsynced: only this job's `WriteBucket` reads them,
    finalize removes them, and a replay's claim of the folder removes `_parts` when it starts, so no run reads
    one after a crash."""

    def __init__(self, out_dir: str, storage: Storage) -> None:
        self._out_dir = out_dir
        self._storage = storage  # the run's storage context, for a worker that reads and writes a URL
        self._tables: list[pa.Table] = []
        self._parts: list[str] = []
        self._rows = 0

    def start_bundle(self) -> None:
        self._tables, self._parts, self._rows = [], [], 0

    def process(self, element: tuple[str, pa.Table]) -> Iterator[tuple[int, str]]:
        part, table = element
        self._tables.append(table)
        self._parts.append(part)
        self._rows += table.num_rows
        if self._rows >= ROUTE_ROWS:
            yield from self._flush()

    def finish_bundle(self) -> Iterator[Any]:
        for element in self._flush():
            yield GlobalWindows.windowed_value(element)

    def _flush(self) -> Iterator[tuple[int, str]]:
        tables, parts = self._tables, self._parts
        self._tables, self._parts, self._rows = [], [], 0
        if not tables:
            return
        # named after the parts it holds: a retried bundle rewrites the same files
        name = hashlib.sha256("\n".join(sorted(parts)).encode("utf-8")).hexdigest()[:24]
        for bucket, rows in buckets.split_rows(pa.concat_tables(tables)):
            path = urls.join(self._out_dir, PARTS_DIR, ROUTED_DIR, f"{bucket:02x}", f"{name}{FP_PART_SUFFIX}")
            self._storage.makedirs(urls.parent(path))
            self._storage.write_bytes(path, buckets.to_ipc(rows), durable=False)
            yield bucket, path


def _write_bucket(grouped: tuple[int, Iterable[str]], out_dir: str, storage: Storage) -> dict[str, Any]:
    bucket, paths = grouped
    return buckets.write_bucket(out_dir, bucket, [buckets.from_ipc(storage.read_bytes(path)) for path in sorted(paths)],
                                storage)


def _write_summaries(summaries: list[dict[str, Any]], out_dir: str, storage: Storage) -> str:
    quarantine = storage.match(urls.join(out_dir, PARTS_DIR, "*.quarantine.jsonl"))
    buckets.write_summaries(out_dir, summaries, quarantine, storage)
    return urls.join(out_dir, BUCKETS_FILE)
