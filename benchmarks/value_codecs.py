"""Value parts written and read with zstd and with LZ4, side by side in one process, on a replayed side's parts.

    .venv/bin/python benchmarks/value_codecs.py SET [--repeat 3] [--columns input,coder,transform]

A diff reads each values file its fetch round touches once per round and process, only the columns of the
stages that differ (`FingerprintSet.stage_columns`); a replay writes each part once. SET is a fingerprint set
a replay wrote (`<out>/sides/offline` of a `parity check`): its parts (`values/`, and `stage_values/` where the
side spilled) are read once, then each round, for each codec in turn (the order alternating round by round),
written again into a temporary folder with parity's own writer under that codec, and read back by
`read_values` with `--columns`, part after part, as one fetch round reads them (the first round checks they
equal the set's own). Prints every round's CPU and wall seconds (write, read), then one JSON line with every
round, each measure's median and spread (max - min), and the folder's size per codec.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Iterable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

CODECS = ("zstd", "lz4")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("set", help="a replayed fingerprint set (a side's folder)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--columns", default="input,coder,transform",
                        help="the columns read back (a 100%%-diverged taxi round reads input, coder, transform)")
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq

    from parity.sets import fingerprint_set
    from parity.sets.fingerprint_set import STAGE_VALUES_DIR, VALUES_DIR, read_values
    from parity.storage.context import Storage

    columns = args.columns.split(",")
    parts = sorted(name[:-len(".parquet")] for name in os.listdir(os.path.join(args.set, VALUES_DIR)))
    tables = {(folder, part): pq.read_table(os.path.join(args.set, folder, f"{part}.parquet"))
              for folder in (VALUES_DIR, STAGE_VALUES_DIR) for part in parts
              if os.path.exists(os.path.join(args.set, folder, f"{part}.parquet"))}
    rounds: dict[str, list[dict[str, float]]] = {codec: [] for codec in CODECS}
    sizes: dict[str, int] = {}
    for r in range(args.repeat):
        for codec in (CODECS if r % 2 == 0 else CODECS[::-1]):
            work = tempfile.mkdtemp(prefix=f"parity-codec-{codec}-")
            try:
                for folder in (VALUES_DIR, STAGE_VALUES_DIR):
                    os.makedirs(os.path.join(work, folder))
                wrote = _timed(lambda: _each(lambda item: fingerprint_set._write_value_part(
                    item[1], os.path.join(work, item[0][0], f"{item[0][1]}.parquet"), Storage(), codec),
                    tables.items()))
                read = _timed(lambda: _each(lambda part: read_values(work, part, columns), parts))
                if r == 0 and any(not read_values(work, part, columns).equals(read_values(args.set, part, columns))
                                  for part in parts):
                    raise SystemExit(f"{codec}: the values read back differ from the set's")
                sizes[codec] = sum(os.path.getsize(os.path.join(root, name))
                                   for root, _dirs, names in os.walk(work) for name in names)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            rounds[codec].append({"write_cpu_s": wrote[0], "write_wall_s": wrote[1], "read_cpu_s": read[0],
                                  "read_wall_s": read[1]})
            print(f"round {r + 1}: {codec}: write {wrote[0]:.2f} CPU s ({wrote[1]:.2f} wall), read {read[0]:.2f} "
                  f"CPU s ({read[1]:.2f} wall)", file=sys.stderr)
    measures = ("write_cpu_s", "write_wall_s", "read_cpu_s", "read_wall_s")
    summary = {codec: {"rounds": rounds[codec], "bytes": sizes[codec],
                       **{f"{what}_median": statistics.median(x[what] for x in rounds[codec]) for what in measures},
                       **{f"{what}_spread": round(max(x[what] for x in rounds[codec])
                                                  - min(x[what] for x in rounds[codec]), 3) for what in measures}}
               for codec in CODECS}
    print(json.dumps({"set": args.set, "parts": len(parts), "files": len(tables), "columns": columns,
                      "repeat": args.repeat, **summary}, sort_keys=True))
    return 0


def _each(do: Callable[[Any], Any], items: Iterable[Any]) -> None:
    """`do(item)` for each item, each result dropped at once (as a fetch round drops each file's table)."""
    for item in items:
        do(item)


def _timed(work: Callable[[], Any]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of `work()`."""
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    return round(time.process_time() - cpu, 3), round(time.perf_counter() - wall, 3)


if __name__ == "__main__":
    sys.exit(main())
