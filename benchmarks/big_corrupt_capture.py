"""A big capture with 1% corrupt records through `parity check`: every corrupt line quarantined, nothing lost,
and the peak memory of the run.

Generates (deterministically) a JSON Lines capture of `--mb` MiB in which every 100th line is corrupt, rotating
through ten kinds of corruption (invalid JSON, not an object, not UTF-8, a value not fitting the schema, a
missing or null key, a null or non-numeric timestamp, a record above `capture.max_record_bytes`, a record nested
too deeply). Both sides read it through a python transform with `max_quarantined: 0.02`. Then it checks that
report.json counts exactly the corrupt lines as quarantined on each side, every line as read, and the
accounting of CONTRACT section 5; and reports wall time, records per second and peak memory.

Peak memory: `resource.getrusage(RUSAGE_CHILDREN).ru_maxrss` (the largest single process of the run; psutil is
not a dependency) and the peak of the summed RSS of the whole process tree, sampled every 0.2 s from /proc.

    .venv/bin/python benchmarks/big_corrupt_capture.py [--mb 1024] [--work DIR] [--keep]

Exit 0 when every check holds, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVERY = 100  # one line in EVERY is corrupt: 1%
MAX_RECORD_BYTES = 2048
CORRUPT = [
    b'{"id": 1, "t": ',                                               # invalid JSON
    b'[1, 2, 3]',                                                     # not an object
    b'{"id": 7, "t": 1700000000, "zone": "\xff\xfe"}',                # not UTF-8
    b'{"id": "seven", "t": 1700000000}',                              # int64 field "seven"
    b'{"t": 1700000000, "fare": 1.5}',                                # missing key
    b'{"id": null, "t": 1700000000}',                                 # null key
    b'{"id": 8, "t": null}',                                          # null timestamp
    b'{"id": 9, "t": "noon"}',                                        # non-numeric timestamp
    b'{"id": 10, "t": 1700000000, "zone": "' + b"z" * 3000 + b'"}',   # above max_record_bytes
    b'{"id": 11, "t": 1700000000, "x": ' + b"[" * 150 + b"]" * 150 + b"}",  # nested too deeply
]
ZONES = ["JFK Airport", "Midtown", "Harlem", "SoHo", "Astoria", "Flushing", "Red Hook", "Tribeca"]
CONFIG = """version: 1
name: big-corrupt-capture
capture:
  path: capture.jsonl
  key: [id]
  schema: {id: int64, t: int64, fare: float64, miles: float64, zone: string, paid: bool}
  max_quarantined: 0.02
  max_record_bytes: %d
sides:
  offline:
    timestamp: {field: t, unit: s}
    window: {type: fixed, size: 1h}
    transform: {python: "big_corrupt_features:features"}
  production:
    timestamp: {field: t, unit: s}
    window: {type: fixed, size: 1h}
    transform: {python: "big_corrupt_features:features"}
""" % MAX_RECORD_BYTES
FEATURES = '''
def features(record):
    fare = record["fare"] or 0.0
    return {"fare": fare, "per_mile": fare / record["miles"] if record["miles"] else None,
            "zone": record["zone"], "paid": record["paid"]}
'''


def generate(path: str, size_bytes: int) -> tuple[int, int]:
    """Writes the capture; returns (lines, corrupt lines). The same size always gives the same bytes."""
    lines = corrupt = 0
    written = 0
    with open(path, "wb", buffering=1 << 20) as handle:
        while written < size_bytes:
            chunk = []
            for _ in range(1000):
                if lines % EVERY == EVERY // 2:
                    line = CORRUPT[corrupt % len(CORRUPT)]
                    corrupt += 1
                else:
                    i = lines
                    line = (b'{"id": %d, "t": %d, "fare": %d.%02d, "miles": %d.%d, "zone": "%s", "paid": %s}'
                            % (i, 1_700_000_000 + i * 3, 3 + i % 97, i % 100, 1 + i % 23, i % 10,
                               ZONES[i % len(ZONES)].encode(), b"true" if i % 3 else b"false"))
                chunk.append(line)
                lines += 1
            data = b"\n".join(chunk) + b"\n"
            handle.write(data)
            written += len(data)
    return lines, corrupt


class TreeRss:
    """Samples the summed RSS of a process and its descendants from /proc; keeps the peak (bytes)."""

    def __init__(self, pid: int, interval: float = 0.2):
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "TreeRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _children(self) -> dict[int, list[int]]:
        tree: dict[int, list[int]] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", encoding="utf-8") as handle:
                        parent = int(handle.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                tree.setdefault(parent, []).append(int(name))
        return tree

    def _rss(self, pid: int) -> int:
        try:
            with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            tree = self._children()
            todo, total = [self.pid], 0
            while todo:
                pid = todo.pop()
                total += self._rss(pid)
                todo.extend(tree.get(pid, []))
            self.peak = max(self.peak, total)
            self._stop.wait(self.interval)


def run(mb: float, work: str) -> dict:
    os.makedirs(work, exist_ok=True)
    capture = os.path.join(work, "capture.jsonl")
    started = time.monotonic()
    lines, corrupt = generate(capture, int(mb * (1 << 20)))
    generate_seconds = time.monotonic() - started
    with open(os.path.join(work, "parity.yaml"), "w", encoding="utf-8") as handle:
        handle.write(CONFIG)
    with open(os.path.join(work, "big_corrupt_features.py"), "w", encoding="utf-8") as handle:
        handle.write(FEATURES)
    out = os.path.join(work, "out")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PARITY_PROGRESS="log", TF_CPP_MIN_LOG_LEVEL="2")
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "parity", "check", os.path.join(work, "parity.yaml"),
                                "--out", out], env=env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    with TreeRss(process.pid) as tree:
        stdout, stderr = process.communicate()
    seconds = time.monotonic() - started
    max_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux reports KiB
    result = {"mb": mb, "capture_bytes": os.path.getsize(capture), "lines": lines, "corrupt_lines": corrupt,
              "generate_seconds": round(generate_seconds, 1), "exit_code": process.returncode,
              "check_seconds": round(seconds, 1), "records_per_second": round(2 * lines / seconds),
              "peak_rss_largest_process_mib": round(max_rss / (1 << 20)),
              "peak_rss_process_tree_mib": round(tree.peak / (1 << 20)), "checks": {}}
    if process.returncode != 0:
        result["stderr_tail"] = stderr.strip().splitlines()[-5:]
        return result
    with open(os.path.join(out, "report.json"), encoding="utf-8") as handle:
        records = json.load(handle)["records"]
    result["records"] = records
    result["checks"] = {
        "quarantined == corrupt lines (both sides)": records["quarantined"] == {"left": corrupt, "right": corrupt},
        "read == lines (both sides)": records["left"] == records["right"] == lines,
        "paired == good lines": records["paired"] == lines - corrupt,
        "accounting (CONTRACT 5)": records["left"] == records["paired"] + records["left_only"]
        + records["quarantined"]["left"] and records["right"] == records["paired"] + records["right_only"]
        + records["quarantined"]["right"] and records["paired"] == records["matched"]
        + records["within_tolerance"] + records["diverged"],
    }
    result["stdout"] = stdout.strip().splitlines()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=1024, help="capture size in MiB (default 1024)")
    parser.add_argument("--work", default=None, help="working folder (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the working folder")
    args = parser.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="parity-big-corrupt-")
    try:
        result = run(args.mb, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    ok = result["exit_code"] == 0 and result["checks"] and all(result["checks"].values())
    print(f"\n| capture | lines | corrupt | quarantined (left/right) | exit | check time | records/s (both sides) "
          f"| peak RSS, largest process | peak RSS, process tree | checks |\n"
          f"|---|---|---|---|---|---|---|---|---|---|\n"
          f"| {result['capture_bytes'] / (1 << 20):.0f} MiB | {result['lines']} | {result['corrupt_lines']} | "
          f"{'/'.join(str(v) for v in result.get('records', {}).get('quarantined', {}).values()) or '-'} | "
          f"{result['exit_code']} | {result['check_seconds']} s | {result['records_per_second']} | "
          f"{result['peak_rss_largest_process_mib']} MiB | {result['peak_rss_process_tree_mib']} MiB | "
          f"{'pass' if ok else 'FAIL'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
