"""Profiles `parity check` with cProfile and prints the top entries by cumulative and by self time.

    .venv/bin/python benchmarks/profile_check.py --records 100000 [--top 15] [--transform tft]

Uses benchmarks/run.py's cached capture and config (the same inputs as the benchmark). Beam's FnApiRunner
runs bundles in the calling thread, so the DoFns' work shows up in the profile; TensorFlow's C++ kernels
show up as the Python calls that wait for them. Writes the raw stats to `--stats` for `python -m pstats`.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv: list[str] | None = None) -> int:
    import run as bench

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--transform", choices=["tft", "python"], default="tft")
    parser.add_argument("--variant", choices=["bug", "fixed"], default="bug")
    parser.add_argument("--work", default=os.environ.get("PARITY_BENCH_WORK", "/tmp/parity-bench"))
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--stats", default=None, help="write the pstats file here (default: in --work)")
    args = parser.parse_args(argv)
    files = bench.ensure_capture(args.records, args.seed, args.work)
    run_dir = os.path.join(args.work, "profile", f"n{args.records}-{args.transform}-{args.variant}")
    shutil.rmtree(run_dir, ignore_errors=True)
    config = bench.write_config(run_dir, files, args.transform, args.variant)

    import apache_beam  # noqa: F401  (imports outside the profile)

    import parity

    if args.transform == "tft":
        import tensorflow  # noqa: F401
        import tensorflow_transform.beam  # noqa: F401
    profiler = cProfile.Profile()
    started = time.monotonic()
    profiler.enable()
    parity.check(config, out_dir=os.path.join(run_dir, "out"))
    profiler.disable()
    wall = time.monotonic() - started
    stats_path = args.stats or os.path.join(args.work, f"profile-{args.records}-{args.transform}-{args.variant}.pstats")
    profiler.dump_stats(stats_path)
    print(f"parity check of {args.records:,} records ({args.transform}) under cProfile: {wall:.1f} s; "
          f"stats in {stats_path}")
    for key, title in (("cumulative", "cumulative time"), ("tottime", "self time")):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(key).print_stats(args.top)
        text = out.getvalue()
        print(f"\n=== top {args.top} by {title} ===")
        print(text[text.find("   ncalls"):] if "   ncalls" in text else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
