"""Client memory of a clean pair's finalize and diff, at several record counts: with the replay's bucket
summaries (parity.sets.buckets) the client reads summaries only, so its peak must not grow with the records.

For each count N: N records `{id, x}` (jsonl), both sides the same python transform, each side replayed by
`parity replay` on the DirectRunner (not measured: its workers run in that process). Then, each in a fresh
Python process, measured with getrusage's peak RSS:
- `bucketed`: `finalize` again on each set (it reads `buckets.json` only) and `parity diff` of the two sets;
- `one file`: the same rows rewritten as the one-file layout (`fingerprints.parquet`, as tap sets and older
  replays keep them) and `parity diff` of those, which streams every row: the reference.
Reported per count and layout: the process's peak RSS, its RSS after the imports (before any set is opened) and
the difference, and the wall time of finalize + diff.

    .venv/bin/python benchmarks/digests_memory.py [--records 100000 400000] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = """version: 1
capture: {path: records.jsonl, key: [id], schema: {id: int64, x: float64}}
sides:
  offline: {transform: {python: "dm_features:features"}}
  production: {transform: {python: "dm_features:features"}}
"""

# run in a fresh process: prints {"base_mib", "peak_mib", "seconds"}
MEASURE = r"""
import json, os, resource, sys, time
import pyarrow, numpy
import parity.commands, parity.compare.diff, parity.report.model  # what a diff imports, before the base
from parity.cli import main
from parity.sets.fingerprint_set import finalize, read_set
def rss_mib():
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
base = rss_mib()
left, right, out, refinalize = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
started = time.monotonic()
if refinalize:
    for folder in (left, right):
        manifest = read_set(folder).manifest
        finalize(folder, {k: manifest[k] for k in ("side", "key", "config_name", "environment", "runner")})
code = main(["diff", left, right, "--out", out])
seconds = time.monotonic() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"code": code, "base_mib": round(base, 1), "peak_mib": round(peak, 1),
                  "seconds": round(seconds, 2)}))
"""


def _project(folder: str, records: int) -> str:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "records.jsonl"), "w", encoding="utf-8") as handle:
        for i in range(records):
            handle.write(f'{{"id": {i}, "x": {i * 0.5}}}\n')
    with open(os.path.join(folder, "dm_features.py"), "w", encoding="utf-8") as handle:
        handle.write("def features(record):\n    return {'y': record['x'] * 2, 'z': record['id'] % 7}\n")
    path = os.path.join(folder, "parity.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(CONFIG)
    return path


def _one_file(set_dir: str, target: str) -> str:
    """The set in the one-file layout (what every replay wrote before bucket files)."""
    code = (f"import shutil, os, pyarrow.parquet as pq\n"
            f"from parity.sets.fingerprint_set import read_set\n"
            f"table = read_set({set_dir!r}).table\n"
            f"shutil.copytree({set_dir!r}, {target!r})\n"
            f"shutil.rmtree(os.path.join({target!r}, 'fingerprints'))\n"
            f"os.remove(os.path.join({target!r}, 'buckets.json'))\n"
            f"pq.write_table(table, os.path.join({target!r}, 'fingerprints.parquet'), compression='zstd')\n")
    subprocess.run([sys.executable, "-c", code], check=True, env=_env())
    return target


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _measure(left: str, right: str, out: str, refinalize: bool) -> dict:
    done = subprocess.run([sys.executable, "-c", MEASURE, left, right, out, "1" if refinalize else "0"],
                          check=True, capture_output=True, text=True, env=_env())
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[100_000, 400_000])
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="parity-digests-")
    rows = []
    for records in args.records:
        folder = os.path.join(work, str(records))
        shutil.rmtree(folder, ignore_errors=True)
        config = _project(folder, records)
        started = time.monotonic()
        sets = []
        for side in ("offline", "production"):
            out = os.path.join(folder, "sides", side)
            subprocess.run([sys.executable, "-m", "parity", "replay", config, "--side", side, "--out", out],
                           check=True, capture_output=True, env=_env())
            sets.append(out)
        replay_seconds = time.monotonic() - started
        bucketed = _measure(*sets, os.path.join(folder, "diff-bucketed"), refinalize=True)
        one = [_one_file(s, s + "-one") for s in sets]
        one_file = _measure(*one, os.path.join(folder, "diff-one"), refinalize=False)
        with open(os.path.join(folder, "diff-bucketed", "report.json"), "rb") as a, \
                open(os.path.join(folder, "diff-one", "report.json"), "rb") as b:
            same = a.read() == b.read()
        for layout, result in (("bucketed", bucketed), ("one file", one_file)):
            rows.append((records, layout, result, replay_seconds, same))
    print("| records per side | layout | exit | peak RSS MiB | RSS after imports MiB | peak - imports MiB | "
          "finalize + diff s | reports identical |")
    print("|---|---|---|---|---|---|---|---|")
    for records, layout, result, _replay, same in rows:
        print(f"| {records:,} | {layout} | {result['code']} | {result['peak_mib']:.1f} | {result['base_mib']:.1f} | "
              f"{result['peak_mib'] - result['base_mib']:.1f} | {result['seconds']:.2f} | {same} |")
    print(f"(replays of both sides: {', '.join(f'{r:,}: {s:.0f} s' for r, l, _, s, _ in rows if l == 'bucketed')};"
          f" work folder {work})")


if __name__ == "__main__":
    main()
