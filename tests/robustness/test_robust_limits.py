"""The capture package's limits and helpers that the robustness work added, and the big-capture benchmark at a
tiny size (so that it keeps working; the real run is `benchmarks/big_corrupt_capture.py --mb 1024`)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from parity.capture import MAX_NESTING, reason_kind, too_deep
from robust_helpers import REPO, python_env


def test_nesting_is_measured_without_recursion_at_any_depth():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert too_deep({"x": deep})
    assert not too_deep({"x": [[1], {"a": [2]}]})
    assert not too_deep(5) and not too_deep("text")


def test_the_nesting_limit_counts_the_record_itself():
    value: object = 1
    for _ in range(MAX_NESTING - 1):
        value = [value]
    assert not too_deep({"x": value})  # the record and MAX_NESTING - 1 lists
    assert too_deep({"x": [value]})


@pytest.mark.parametrize(("reason", "kind"), [
    ("record 3: data CRC mismatch", "data CRC mismatch"),
    ("invalid UTF-8 at byte 13: invalid continuation byte", "invalid UTF-8"),
    ("invalid UTF-8 at line 2, byte 7: invalid continuation byte", "invalid UTF-8"),
    ("truncated TFRecord framing at byte 123: length CRC mismatch; ...", "truncated TFRecord framing"),
    ("cannot read Parquet file after row 1000: bad page", "cannot read Parquet file"),
    ("field 'fare': expected float64, got 'x'", "field 'fare'"),
    ("invalid CSV: unexpected end of data (lines 3-9 read as one row)", "invalid CSV"),
    ("expected 5 columns, got 3", "expected 5 columns, got 3"),
])
def test_a_reason_kind_drops_positions_so_that_like_reasons_count_together(reason, kind):
    assert reason_kind(reason) == kind


@pytest.mark.slow  # the benchmark's whole script: a generated capture and three checks
def test_the_big_corrupt_capture_benchmark_runs_at_a_tiny_size_and_its_checks_hold(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", "big_corrupt_capture.py"), "--mb", "0.2",
                           "--work", str(tmp_path / "work")], capture_output=True, text=True, env=python_env(),
                          cwd=REPO, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.split("\n\n|", 1)[0])
    assert result["corrupt_lines"] == result["lines"] // 100 and result["corrupt_lines"] >= 20
    assert result["records"]["quarantined"] == {"left": result["corrupt_lines"], "right": result["corrupt_lines"]}
    assert all(result["checks"].values()) and result["peak_rss_largest_process_mib"] > 0


def test_a_parquet_uuid_column_is_read_as_uuid_strings_not_objects_the_replay_cannot_fingerprint(tmp_path):
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq

    from parity.encoding import canonical
    from parity.capture import read_file

    ids = [uuid.UUID(int=i * 7919) for i in range(3)]
    column = pa.array([u.bytes for u in ids], pa.uuid())
    nested = pa.ListArray.from_arrays(pa.array([0, 1, 2, 3], pa.int32()),
                                      pa.StructArray.from_arrays([column], names=["u"]))
    table = pa.table({"id": column, "nested": nested})
    pq.write_table(table, tmp_path / "u.parquet")
    records = [r for batch in read_file(str(tmp_path / "u.parquet"), "parquet", None, 10, "u.parquet")
               for r in batch.records]
    assert records == [{"id": str(u), "nested": [{"u": str(u)}]} for u in ids]
    canonical.encode(records)
