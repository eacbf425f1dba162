"""Issue 40: a gzip bomb, a Parquet value of gigabytes and a million-column CSV header under a memory cap end in
a clean exit 2, in bounded time.

Each check runs in a child whose address space is capped (`resource.setrlimit(RLIMIT_AS)`, 3 GiB: the
interpreter, Beam and pyarrow need about half of it), so a reader that held the bomb's 2 GiB line, or built
anything quadratic in the header, would die of MemoryError or be killed instead of exiting 2 with one line.
"""
from __future__ import annotations

import gzip
import resource
import subprocess
import sys
import time

import pytest

# The slow tier (`make test`, not `make test-fast`): each check runs in a capped child on inputs that decode to
# gigabytes.
pytestmark = pytest.mark.slow

CAP_BYTES = 3 << 30
TIME_BOUND = 180  # seconds: the subprocess is killed past it (a hang fails the test, it does not stall the suite)
CONFIG = """version: 1
name: bounded
capture:
  path: {path}
  format: {fmt}
  key: [id]{schema}
sides:
  offline: {{}}
  production: {{}}
"""


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))


def _capped_error(tmp_path, capture: str, fmt: str, schema: str = "") -> str:
    """Checks a config of `capture` in a child capped at CAP_BYTES: exit 2 within TIME_BOUND, no traceback and no
    MemoryError, and one `parity: error:` line, which it returns."""
    config = tmp_path / "parity.yaml"
    config.write_text(CONFIG.format(path=capture, fmt=fmt, schema=schema))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "parity", "check", str(config), "--out", str(tmp_path / "out")],
                          preexec_fn=_capped, capture_output=True, text=True, timeout=TIME_BOUND)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("parity: error: ")]
    assert len(errors) == 1, done.stderr[-2000:]
    assert time.monotonic() - started < TIME_BOUND
    return errors[0]


@pytest.mark.parametrize("compressed", [True, False], ids=["gzip-bomb", "plain"])
def test_a_line_of_gigabytes_is_quarantined_under_a_memory_cap_and_the_check_exits_two(tmp_path, compressed):
    """One line decompressing to 2 GiB (a gzip file of a few MiB), beside one good record: the line is
    quarantined naming its size while it is read, the share quarantined is over the default limit, exit 2."""
    path = tmp_path / ("cap.jsonl.gz" if compressed else "cap.jsonl")
    size = (2 << 30) if compressed else (256 << 20)  # the plain file is written to disk: a smaller line
    opener = gzip.open(path, "wb", compresslevel=1) if compressed else open(path, "wb")
    with opener as handle:
        handle.write(b'{"id": 1, "v": "')
        chunk = b"a" * (1 << 24)
        for _ in range(size // len(chunk)):
            handle.write(chunk)
        handle.write(b'"}\n{"id": 2, "v": "ok"}\n')
    error = _capped_error(tmp_path, path.name, "jsonl")
    assert "record too large" in error and "capture.max_quarantined" in error, error
    quarantine = (tmp_path / "out" / "sides" / "offline" / "quarantine.jsonl").read_text()
    assert "record too large" in quarantine and "bytes" in quarantine


def test_a_csv_header_of_a_million_columns_exits_two_naming_the_limit_under_a_memory_cap(tmp_path):
    path = tmp_path / "cap.csv"
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("id," + ",".join(f"c{i}" for i in range(1_000_000)) + "\n")
        handle.write("1," + ",".join("0" for _ in range(1_000_000)) + "\n")
    error = _capped_error(tmp_path, path.name, "csv", schema="\n  schema: {id: int64, c0: int64}")
    assert "1,000,001 columns" in error and "10,000" in error, error


def test_a_parquet_value_of_gigabytes_is_quarantined_unread_under_a_memory_cap(tmp_path):
    """One value of 1.5 GiB in a zstd Parquet file of a few MiB, beside good rows in other row groups: Arrow
    would decode its page whole; its row group is quarantined from the pages' headers, never decoded, and
    the share quarantined is over the default limit, exit 2. Before, Arrow began decoding the page: under the
    cap its allocation failed and the group was quarantined as `cannot read Parquet row group 0`, a reason that
    hid the cause; without a cap the value was held whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "cap.parquet"
    with pq.ParquetWriter(path, pa.schema([("id", pa.int64()), ("v", pa.binary())]), compression="zstd") as writer:
        writer.write_table(pa.table({"id": [1], "v": pa.array([b"a" * (3 << 29)], pa.binary())}))
        writer.write_table(pa.table({"id": [2], "v": [b"ok"]}))
    error = _capped_error(tmp_path, path.name, "parquet")
    assert "record too large" in error and "capture.max_quarantined" in error, error
    quarantine = (tmp_path / "out" / "sides" / "offline" / "quarantine.jsonl").read_text()
    assert "has a page of column 'v' that decodes to 1,610,612,7" in quarantine, quarantine[:2000]


def test_parity_init_samples_no_row_group_whose_page_would_decode_to_a_gigabyte(tmp_path):
    """`parity init` guesses numbers from the first row group's rows; a group holding a value of 1 GiB is not
    sampled (the types come from the file's schema), so init stays small (was: the group decoded whole)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "cap.parquet"
    pq.write_table(pa.table({"id": [1, 2], "v": pa.array([b"a" * (1 << 30), b"ok"], pa.binary())}), path,
                   compression="zstd")
    measure = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:]); "
               "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", measure, sys.executable, "-m", "parity", "init", "--capture",
                           str(path), "--out", str(tmp_path / "parity.yaml")], capture_output=True, text=True,
                          timeout=TIME_BOUND)
    code, peak_kib = map(int, done.stdout.split()[-2:])
    assert code == 0, done.stderr[-2000:]
    assert "v: bytes" in (tmp_path / "parity.yaml").read_text()  # its type, from the file's schema
    assert peak_kib < 700 << 10, f"parity init peaked at {peak_kib >> 10} MiB"  # measured: 220 MiB; 4,333 before
