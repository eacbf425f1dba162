"""Every read of a set's Parquet files (parity/sets/fingerprint_set.py, tap_finalize.py, model_outputs.py) closes
what it opened, on a local path and on an `s3://` URL (moto's S3 server, tests/storage/conftest.py): pyarrow never
closes a file object it is given, and a check that reads many parts from an object store kept a stream (and its
connection) per part. The reads go through `Storage.open_parquet` and `Storage.read_parquet`; a test storage
keeps every source `readable` gave, and each stream among them must be closed once the read returns."""
from __future__ import annotations

import hashlib
import json
import os
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parity.sets import buckets, model_outputs, tap_finalize
from parity.sets.fingerprint_set import (FINGERPRINTS, FP_SCHEMA, PARTS_DIR, VALUE_SCHEMA, finalize,
                                         part_fingerprints, read_set, read_values, remove_values, write_values)
from parity.sets.tap_set import TAP_FORMAT, TAP_META, TAPS_DIR
from parity.stages import STAGES
from parity.storage import urls
from parity.storage.context import Storage

MANIFEST = {"side": "offline", "key": ["id"], "config_name": "streams", "environment": {}, "runner": "test"}
RECORDS = 6


@pytest.fixture(params=["local", "s3"])
def place(request, tmp_path):
    """(storage, a folder of its own) on a local disk or under s3://parity/."""
    if request.param == "local":
        return Storage(), str(tmp_path / "place")
    server = request.getfixturevalue("storage_s3")
    return server.storage, f"s3://parity/streams/{uuid.uuid4().hex}"


class _Keeping(Storage):
    """A storage that keeps every source its `readable` gave (a path locally, a stream on a URL)."""

    sources: list

    def readable(self, path: str):
        source = super().readable(path)
        self.sources.append(source)
        return source


def _keeping(storage: Storage) -> _Keeping:
    keeping = _Keeping(storage.options)
    object.__setattr__(keeping, "sources", [])
    return keeping


def _open_files_under(base: str) -> list[str]:
    """The files under the local folder `base` this process holds open (its descriptors' targets)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the descriptor of the listing itself, closed by now
            continue
        if target.startswith(base + os.sep):
            found.append(target)
    return found


def _assert_all_closed(keeping: _Keeping, base: str) -> None:
    """Each stream a read opened is closed; locally no file under `base` is left open."""
    assert keeping.sources, "the reads went through Storage.readable"
    streams = [source for source in keeping.sources if not isinstance(source, str)]
    if urls.is_url(base):
        assert len(streams) == len(keeping.sources)
        assert [stream for stream in streams if not stream.closed] == []
    else:
        assert streams == []
        assert _open_files_under(base) == []


def _fingerprints(keys: range) -> dict:
    return {"key_fp": [hashlib.md5(str(i).encode()).digest() for i in keys], "key": [json.dumps(i) for i in keys],
            **{f"{stage}_fp": [i * 7 + n for i in keys] for n, stage in enumerate(STAGES)},
            "features": [[("f", i)] for i in keys]}


def _values(keys: range) -> dict:
    return {name: [f"cap:{i}" if name == "location" else json.dumps(i).encode() for i in keys]
            for name in VALUE_SCHEMA.names}


def _write_parquet(storage: Storage, path: str, table: pa.Table) -> None:
    storage.makedirs(urls.parent(path))
    with storage.open_write(path) as sink:
        pq.write_table(table, sink)


def _one_file_set(storage: Storage, base: str) -> str:
    """A tap-style set (`fingerprints.parquet`) finalized from two Parquet parts, with values and model parts."""
    set_dir = urls.child(base, "set")
    for part, keys in (("p0", range(0, 3)), ("p1", range(3, RECORDS))):
        _write_parquet(storage, urls.child(set_dir, PARTS_DIR, f"{part}.parquet"),
                       part_fingerprints(part, _fingerprints(keys)))
        write_values(set_dir, part, _values(keys), storage)
        model_outputs.write_model_part(set_dir, part, [json.dumps(i) for i in keys], [b"\x00"] * len(keys),
                                       list(keys), storage)
    finalize(set_dir, MANIFEST, storage)
    return set_dir


def test_finalizing_a_set_from_parquet_parts_closes_every_part_it_reads(place):
    storage, base = place
    set_dir = urls.child(base, "set")
    for part, keys in (("p0", range(0, 3)), ("p1", range(3, RECORDS))):
        _write_parquet(storage, urls.child(set_dir, PARTS_DIR, f"{part}.parquet"),
                       part_fingerprints(part, _fingerprints(keys)))
    keeping = _keeping(storage)

    assert finalize(set_dir, MANIFEST, keeping)["records"]["fingerprinted"] == RECORDS
    _assert_all_closed(keeping, base)


def test_reading_a_one_file_set_its_rows_values_and_model_outputs_closes_every_stream(place):
    storage, base = place
    set_dir = _one_file_set(storage, base)
    keeping = _keeping(storage)

    fset = read_set(set_dir, keeping)
    assert fset.num_rows == RECORDS
    assert sum(table.num_rows for table in fset.iter_tables(4)) == RECORDS
    assert fset.table.num_rows == RECORDS
    assert read_values(set_dir, "p1", ["input"], keeping).column("input").to_pylist() == [b"3", b"4", b"5"]
    assert len(model_outputs.read_model_outputs(set_dir, keeping)) == RECORDS
    _assert_all_closed(keeping, base)
    assert len(keeping.sources) >= 7


def test_a_set_read_in_batches_and_left_half_way_closes_its_stream_when_the_reading_is_closed(place):
    storage, base = place
    set_dir = _one_file_set(storage, base)
    keeping = _keeping(storage)
    fset = read_set(set_dir, keeping)
    keeping.sources.clear()

    batches = fset.iter_tables(2)
    assert next(batches).num_rows == 2
    if urls.is_url(base):
        assert not keeping.sources[-1].closed  # still reading
    else:
        assert _open_files_under(base) == [keeping.sources[-1]]  # still reading: what the probe sees
    batches.close()
    _assert_all_closed(keeping, base)


def test_removing_a_sets_values_closes_the_fingerprint_file_it_rewrites(place):
    storage, base = place
    set_dir = _one_file_set(storage, base)
    keeping = _keeping(storage)

    remove_values(set_dir, keeping)
    _assert_all_closed(keeping, base)
    assert sorted(read_set(set_dir, storage).table.column("key").to_pylist()) == \
        sorted(hashlib.md5(str(i).encode()).digest().hex() for i in range(RECORDS))  # rewritten as key fingerprints


def test_reading_a_bucketed_sets_key_ranges_closes_every_bucket_file(place):
    storage, base = place
    set_dir = urls.child(base, "bucketed")
    table = part_fingerprints("p0", _fingerprints(range(RECORDS)))
    summaries = [buckets.write_bucket(set_dir, bucket, [rows], storage) for bucket, rows in buckets.split_rows(table)]
    buckets.write_summaries(set_dir, summaries, [], storage)
    finalize(set_dir, MANIFEST, storage)
    keeping = _keeping(storage)

    fset = read_set(set_dir, keeping)
    keys = [fset.keys_of_range(summary["bucket"]) for summary in summaries]
    assert sum(len(found) for found in keys) == RECORDS
    assert sum(table.num_rows for table in fset.iter_tables(4)) == RECORDS
    _assert_all_closed(keeping, base)


def test_reading_a_tap_sets_parts_closes_every_part(place):
    storage, base = place
    set_dir = urls.child(base, "tapped")
    tap_dir = urls.join(set_dir, TAPS_DIR, "input", "t0")
    storage.makedirs(tap_dir)
    storage.write_text(urls.child(tap_dir, TAP_META), json.dumps({"tap_format": TAP_FORMAT, "stage": "input"}))
    for part, keys in (("p0", range(0, 3)), ("p1", range(3, RECORDS))):
        _write_parquet(storage, urls.join(tap_dir, "_parts", f"{part}.parquet"),
                       part_fingerprints(part, _fingerprints(keys)))
    keeping = _keeping(storage)

    assert len(tap_finalize.iter_stage_keys(set_dir, keeping)["input"]) == RECORDS
    taps = [{"stage": "input", "dir": tap_dir, "label": "t0"}]
    assert tap_finalize._stage_rows(taps, "input", [], keeping).num_rows == RECORDS
    _assert_all_closed(keeping, base)
    assert len(keeping.sources) == 4
