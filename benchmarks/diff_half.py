"""One diff process's work, under two checkouts of parity in turn: the differing pairs of half the key ranges of
two fingerprint sets, streamed and tallied in one process, as each of a check's two diff processes does.

    .venv/bin/python benchmarks/diff_half.py LEFT RIGHT --code DIR[,DIR...] [--rounds 4]

LEFT and RIGHT are replayed sides (`<out>/sides/offline` and `<out>/sides/production` of a `parity check`, kept
with `--out`). Each round runs one fresh interpreter per checkout in `--code` (a folder holding the `parity`
package, made the first entry of its `sys.path`; "." is this one), in an order that rotates round by round, and
each of them streams the first half of the key ranges (`DiffStream.of_ranges`, with the stream's input values
deferred as a check's are) into a `Tally` under `diff_gc`, as `parity.compare.halves` does. Prints every
round's CPU and wall seconds, then one JSON line with every round and each checkout's median and spread
(max - min). A checkout's counts must equal the others' (the same pairs, causes and tiers), or it fails.

A round is a whole process, so that no checkout inherits another's heap; the import is not timed. The loop is
`parity.compare.halves._summarize_half`'s, written out here, not called: an older checkout must run it as it is.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("left")
    parser.add_argument("right")
    parser.add_argument("--code", default=".", help="checkouts to compare, comma-separated (\".\": this one)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_stream_half(args.left, args.right)))
        return 0
    codes = [REPO if code == "." else os.path.abspath(code) for code in args.code.split(",")]
    rounds: dict[str, list[dict]] = {code: [] for code in codes}
    for r in range(args.rounds):
        order = codes[r % len(codes):] + codes[:r % len(codes)]
        for code in order:
            found = _run(code, args.left, args.right)
            rounds[code].append(found)
            print(f"round {r + 1} {code}: {found['cpu_s']:.2f} CPU s, {found['wall_s']:.2f} s wall, "
                  f"{found['pairs']} pairs", flush=True)
    counts = {json.dumps({k: v for k, v in found.items() if k not in ("cpu_s", "wall_s")}, sort_keys=True)
              for runs in rounds.values() for found in runs}
    if len(counts) != 1:
        print(f"the checkouts disagree: {sorted(counts)}", file=sys.stderr)
        return 1
    print(json.dumps({code: {"cpu_s": [x["cpu_s"] for x in runs], "wall_s": [x["wall_s"] for x in runs],
                             "cpu_median": round(statistics.median(x["cpu_s"] for x in runs), 2),
                             "cpu_spread": round(max(x["cpu_s"] for x in runs) - min(x["cpu_s"] for x in runs), 2)}
                      for code, runs in rounds.items()}))
    return 0


def _run(code: str, left: str, right: str) -> dict:
    env = {**os.environ, "PYTHONPATH": code + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, os.path.abspath(__file__), left, right, "--child"], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"{code}: the diff failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def _stream_half(left_dir: str, right_dir: str) -> dict:
    from parity.compare.causes import CauseContext
    from parity.compare.diff import DiffStream, diff_gc
    from parity.config import ToleranceSpec
    try:
        from parity.compare.tally import Tally
    except ImportError:  # a checkout from before the tally moved to the compare room
        from parity.report.tally import Tally
    from parity.sets import fingerprint_set
    from parity.sets.fingerprint_set import read_set

    # named BUCKET_BITS in checkouts from before the three kinds of key_fp split had names of their own
    key_range_bits = getattr(fingerprint_set, "KEY_RANGE_BITS", None) or getattr(fingerprint_set, "BUCKET_BITS")

    stream = DiffStream(read_set(left_dir), read_set(right_dir), ToleranceSpec(), keep_unpaired=10,
                        defer_input=True)
    tally = Tally(CauseContext(left_name="offline", right_name="production"), False, 10)
    half = stream.of_ranges(frozenset(range((1 << key_range_bits) // 2)))
    wall, cpu = time.perf_counter(), time.process_time()
    with diff_gc():
        for outcome in half:
            tally.add(outcome)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "pairs": half.paired - half.matched,
            "causes": sorted(f"{stage}/{cause}={n}" for (stage, cause), n in tally.cause_counts.items()),
            "within": tally.within, "stage_within": half.stage_within}


if __name__ == "__main__":
    sys.exit(main())
