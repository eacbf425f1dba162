"""Distributed digests: a replay's workers write its fingerprint rows as key-range bucket files with their
summaries (parity.sets.buckets), the client's `finalize` reads the summaries only, and `parity diff` reads only
the buckets whose summaries differ, with the report of a diff that reads every row.

Real replays on the DirectRunner; the proof that a file is not read is that it is gone and the result is the same.
"""
from __future__ import annotations

import json
import os
import shutil
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq

from parity.cli import main
from parity.compare import hashdiff
from tests.compare.diffed import compare
from parity.config import ToleranceSpec
from parity.sets import buckets
from parity.sets.fingerprint_set import (BUCKET_FILES_DIR, BUCKETS_FILE, FINGERPRINTS, FP_SCHEMA, MANIFEST, finalize,
                                         read_set, sort_rows)

from tests.set_files import bucket_paths

RECORDS = 600
DIVERGED_ID = 7


def _project(tmp_path, diverged: bool) -> str:
    """A config of two python sides over RECORDS records; with `diverged`, production's feature differs for one
    record."""
    folder = tmp_path / "project"
    folder.mkdir()
    with open(folder / "records.jsonl", "w", encoding="utf-8") as handle:
        for i in range(RECORDS):
            handle.write(json.dumps({"id": i, "x": i * 0.5}) + "\n")
    offset = f"(1.0 if record['id'] == {DIVERGED_ID} else 0.0)" if diverged else "0.0"
    kind = "diverged" if diverged else "clean"  # a module name per content: the process imports each once
    (folder / f"bd_offline_{kind}.py").write_text("def features(record):\n    return {'y': record['x'] * 2}\n")
    (folder / f"bd_production_{kind}.py").write_text(
        f"def features(record):\n    return {{'y': record['x'] * 2 + {offset}}}\n")
    (folder / "parity.yaml").write_text(textwrap.dedent(f"""\
        version: 1
        capture: {{path: records.jsonl, key: [id], schema: {{id: int64, x: float64}}}}
        sides:
          offline: {{transform: {{python: "bd_offline_{kind}:features"}}}}
          production: {{transform: {{python: "bd_production_{kind}:features"}}}}
        """))
    return str(folder / "parity.yaml")


def _check(tmp_path, diverged: bool) -> tuple[str, str]:
    code = main(["check", _project(tmp_path, diverged), "--out", str(tmp_path / "out")])
    assert code == (1 if diverged else 0)
    sides = tmp_path / "out" / "sides"
    return str(sides / "offline"), str(sides / "production")


def _diff(left: str, right: str, out) -> bytes:
    assert main(["diff", left, right, "--out", str(out)]) in (0, 1)
    return (out / "report.json").read_bytes()


def _as_one_file(set_dir: str, target) -> str:
    """The same set in the one-file layout (`fingerprints.parquet`, as tap sets and older replays keep it)."""
    shutil.copytree(set_dir, target)
    table = read_set(set_dir).table
    shutil.rmtree(target / BUCKET_FILES_DIR)
    os.remove(target / BUCKETS_FILE)
    pq.write_table(table, target / FINGERPRINTS)
    return str(target)


def test_a_replay_writes_one_sorted_file_and_one_summary_per_key_range_its_records_fall_in(tmp_path):
    left, _ = _check(tmp_path, diverged=False)
    summaries = json.loads((tmp_path / "out" / "sides" / "offline" / BUCKETS_FILE).read_text())
    paths = bucket_paths(left)
    assert [os.path.basename(p) for p in paths] == [f"{s['bucket']:02x}.parquet" for s in summaries["buckets"]]
    assert len(paths) == 16 and sum(s["rows"] for s in summaries["buckets"]) == RECORDS
    rows = read_set(left).table
    assert rows.num_rows == RECORDS and rows.equals(sort_rows(rows))   # bucket order is key order
    for path, summary in zip(paths, summaries["buckets"]):
        assert buckets.summarize(summary["bucket"], pq.read_table(path, schema=FP_SCHEMA)) == summary
    assert not os.path.exists(os.path.join(left, "_parts"))


def test_finalize_writes_the_manifest_from_the_summaries_alone(tmp_path):
    left, _ = _check(tmp_path, diverged=False)
    with open(os.path.join(left, MANIFEST), encoding="utf-8") as handle:
        manifest = json.load(handle)
    shutil.rmtree(os.path.join(left, BUCKET_FILES_DIR))  # finalize must not need a row
    assert finalize(left, {k: manifest[k] for k in ("side", "key", "config_name", "environment", "runner")}) == \
        manifest
    assert manifest["records"]["fingerprinted"] == RECORDS and manifest["features"] == ["y"]


def test_a_clean_check_reads_no_bucket_file(tmp_path):
    left, right = _check(tmp_path, diverged=False)
    before = _diff(left, right, tmp_path / "before")
    for path in bucket_paths(left) + bucket_paths(right):
        os.remove(path)
    assert _diff(left, right, tmp_path / "after") == before
    report = json.loads(before)
    assert report["verdict"] == "parity" and report["records"]["matched"] == RECORDS


def test_a_diverged_check_reads_only_the_buckets_whose_summaries_differ(tmp_path):
    left, right = _check(tmp_path, diverged=True)
    before = _diff(left, right, tmp_path / "before")
    differing = [b for b in read_set(left).buckets if b["bucket"] not in hashdiff.whole_buckets(
        read_set(left), read_set(right)).buckets]
    assert len(differing) == 1 and differing[0]["rows"] >= 1
    keep = f"{differing[0]['bucket']:02x}.parquet"
    for path in bucket_paths(left) + bucket_paths(right):
        if os.path.basename(path) != keep:
            os.remove(path)
    assert _diff(left, right, tmp_path / "after") == before
    report = json.loads(before)
    assert report["records"]["diverged"] == 1 and report["records"]["matched"] == RECORDS - 1


def test_a_bucketed_set_whose_rows_were_read_whole_still_diffs_only_its_differing_buckets(tmp_path):
    left, right = _check(tmp_path, diverged=True)
    fresh = compare(read_set(left), read_set(right), ToleranceSpec())
    loaded = [read_set(left), read_set(right)]
    assert [fset.table.num_rows for fset in loaded] == [RECORDS, RECORDS]
    again = compare(*loaded, ToleranceSpec())
    assert (again.left_rows, again.paired, again.matched, len(again.mismatches)) == \
        (fresh.left_rows, fresh.paired, fresh.matched, len(fresh.mismatches)) == (RECORDS, RECORDS, RECORDS - 1, 1)


def test_bucketed_sets_give_the_report_of_the_one_file_layout_byte_for_byte(tmp_path):
    left, right = _check(tmp_path, diverged=True)
    bucketed = _diff(left, right, tmp_path / "bucketed")
    one_left, one_right = _as_one_file(left, tmp_path / "one-left"), _as_one_file(right, tmp_path / "one-right")
    assert read_set(one_left).buckets is None
    assert _diff(one_left, one_right, tmp_path / "one") == bucketed
    assert _diff(left, one_right, tmp_path / "mixed") == bucketed   # one bucketed side: every row is read


def test_a_bucket_summary_does_not_depend_on_how_its_rows_were_batched():
    keys = [bytes([7 << (8 - buckets.KEY_RANGE_BITS)]) + i.to_bytes(15, "big") for i in range(50)]
    table = pa.table({"key_fp": keys, "key": [str(i) for i in range(50)],
                      **{f"{stage}_fp": [i * 31 + n for i in range(50)] for n, stage in enumerate(
                          ("input", "window", "shard", "coder", "seed", "transform"))},
                      "features": [[("f", i)] for i in range(50)], "part": ["p"] * 50, "row": list(range(50))},
                     schema=FP_SCHEMA)
    whole = buckets.summarize(7, sort_rows(table))
    halves = sort_rows(pa.concat_tables([table.slice(25), table.slice(0, 25)]))
    assert buckets.summarize(7, halves) == whole
    assert whole["rows"] == 50 and whole["duplicates"] == 0 and whole["features"] == ["f"]
    assert [b for b, _ in buckets.split_rows(table)] == [7]
