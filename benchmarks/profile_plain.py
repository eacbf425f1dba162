"""Issue 44: where `parity check`'s CPU goes on the plain config (`plain_check.py`), per side and in the diff.

    .venv/bin/python benchmarks/profile_plain.py --records 1000000 [--json FILE]

On `plain_check.py`'s synthetic events and config, runs the check's three parts one after the other, each in a
fresh process: the offline side's replay, the production side's replay (`parity.commands.replay`, as the check
runs them; here in turn, not at once) and the diff of the two sets with the reports (`parity.commands.diff`).
Each part runs twice: once plain, for its CPU seconds (`time.process_time`, the part only, imports before), and
once under cProfile, with a `gc.callbacks` clock around every collection. Then every function's own time is
put in one component:

| component | what |
|---|---|
| read + parse | parity/capture (the readers, quarantine), the JSON parser under them |
| stage values | parity/stages and the replay's stage steps (window, shard, coder, seed values, batches) |
| encoder + fingerprints | parity/encoding (canonical bytes, xxh3), the C encoder, xxhash |
| user transform | the config's transform module |
| Arrow | pyarrow (conversions to and from Python, tables) |
| spill | parity/replay/spill: batches pickled to files and loaded back (`parity.replay.spill`) |
| writes | parity/sets, parity/storage and the replay's write step (fingerprint and value parts) |
| Beam | apache_beam (the runner, coders, bundles, DoFn calls), `RecBatchCoder` (batches between stages) |
| diff | parity/compare and parity/report (diff part only) |
| other | the rest (parity's remaining modules, the standard library) |

A built-in function's and a standard-library function's own time goes to the component of the function that
called it (C calls from pyarrow and from the encoders keep their own component): `json.loads` called by the
capture reader is read + parse, called by the json coder it is a stage value. GC is the time inside collections, measured apart (cProfile
also charges it to whatever function ran when a collection started: the table takes it out of that share, in
proportion). cProfile's clock is the wall clock (a CPU-time timer gave own times that added up to three times
the part's CPU seconds), so on a shared machine the profiled seconds also hold the time others ran; they are
longer than the plain ones too (cProfile costs per Python call); the table
gives µs per record under the profile and the same shares scaled to the plain run's CPU, which is an
estimate: cProfile inflates the components with many small Python calls more than those in C.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import shutil
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PARTS = ("offline", "production", "diff")
COMPONENTS = ("read + parse", "stage values", "encoder + fingerprints", "user transform", "Arrow", "spill",
              "writes", "GC", "Beam", "diff", "other")


def run_part(part: str, config_path: str, out: str, profile: str | None) -> dict[str, Any]:
    """One part in this process: its CPU and wall seconds, and its GC seconds when profiled."""
    import apache_beam  # noqa: F401  (imports outside the clock and the profile)

    import parity.commands as commands
    from parity.config import load_config

    config = load_config(config_path)
    gc_seconds = [0.0]
    gc_started = [0.0]

    def on_gc(phase: str, _info: dict) -> None:
        if phase == "start":
            gc_started[0] = time.process_time()
        else:
            gc_seconds[0] += time.process_time() - gc_started[0]

    profiler = cProfile.Profile() if profile else None
    if profiler:
        gc.callbacks.append(on_gc)
        profiler.enable()
    cpu, wall = time.process_time(), time.monotonic()
    if part == "diff":
        commands.diff(os.path.join(out, "sides", "offline"), os.path.join(out, "sides", "production"), out,
                      config=config, force=True)
    else:
        commands.replay(config, part, os.path.join(out, "sides", part), force=True)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    if profiler:
        profiler.disable()
        gc.callbacks.remove(on_gc)
        profiler.dump_stats(profile)
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "gc_s": round(gc_seconds[0], 3)}


def component(func: tuple[str, int, str], transform_module: str) -> str | None:
    """The component of a function by its file, or None for a built-in (charged to its callers)."""
    path, _line, name = func
    path = path.replace("\\", "/")
    if path == "~":
        if "pyarrow" in name:
            return "Arrow"
        if "_canonical" in name or "xxhash" in name or "xxh3" in name or "_columnar" in name:
            return "encoder + fingerprints"
        return None
    if transform_module and path.endswith(f"/{transform_module}.py"):
        return "user transform"
    if "/site-packages/" not in path and "/parity/" not in path:
        return None  # the standard library (json, pickle, os): charged to its callers, as a built-in
    if "/pyarrow/" in path:
        return "Arrow"
    if "/apache_beam/" in path or "/dill/" in path or "/cloudpickle/" in path:
        return "Beam"
    if "/parity/" in path:
        rel = path.split("/parity/", 1)[1]
        if rel.startswith("capture/") or rel.startswith("replay/read_step"):
            return "read + parse"
        if rel.startswith("encoding/"):
            return "encoder + fingerprints"
        if rel.startswith("replay/spill"):
            return "spill"
        if rel.startswith("replay/batch") and name in ("encode", "decode", "__reduce__", "_rebuild",
                                                       "estimate_size"):
            return "Beam"
        if rel.startswith(("stages/", "replay/stages_step", "replay/batch", "replay/transform_step",
                           "replay/bucket_step", "replay/side_inputs", "replay/spill")):
            return "stage values"
        if rel.startswith(("sets/", "storage/", "replay/write_step")):
            return "writes"
        if rel.startswith(("compare/", "report/")):
            return "diff"
    return "other"


def breakdown(stats_path: str, transform_module: str) -> dict[str, float]:
    """Own seconds per component of one profile (built-ins charged to their callers, by the callers' share)."""
    stats = pstats.Stats(stats_path).stats  # type: ignore[attr-defined]
    out = dict.fromkeys(COMPONENTS, 0.0)

    def charge(func: tuple, seconds: float, depth: int = 0) -> None:
        kind = component(func, transform_module)
        if kind is not None:
            out[kind] += seconds
            return
        callers = stats[func][4]
        total = sum(c[2] for c in callers.values()) or sum(c[1] for c in callers.values())
        if not callers or not total or depth > 8:
            out["other"] += seconds
            return
        for caller, figures in callers.items():
            share = (figures[2] if sum(c[2] for c in callers.values()) else figures[1]) / total
            charge(caller, seconds * share, depth + 1)

    for func, (_cc, _nc, tottime, _ct, _callers) in stats.items():
        charge(func, tottime)
    return out


def top_own(stats_path: str, count: int = 25) -> list[tuple[str, float]]:
    """The functions with the most own time (for the components' contents)."""
    stats = pstats.Stats(stats_path).stats  # type: ignore[attr-defined]
    rows = sorted(((f"{path.rsplit('site-packages/', 1)[-1].rsplit('/w44/', 1)[-1]}:{line}({name})", tt)
                   for (path, line, name), (_cc, _nc, tt, _ct, _callers) in stats.items()), key=lambda r: -r[1])
    return [(name, round(tt, 3)) for name, tt in rows[:count]]


def main(argv: list[str] | None = None) -> int:
    import plain_check

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--work", default=os.environ.get("PARITY_BENCH_WORK", "/tmp/parity-bench"))
    parser.add_argument("--json", default=None)
    parser.add_argument("--tables", action="store_true",
                        help="only the tables, from the stats and results an earlier run left in --work")
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)  # one part, in a child process
    parser.add_argument("--profile", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    config = plain_check.ensure_inputs(args.records, args.work)
    out = os.path.join(args.work, "plain-profile", "out")
    if args.part:
        result = run_part(args.part, config, out, args.profile)
        with open(args.result, "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        return 0
    if not args.tables:
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
    figures: dict[str, Any] = {"records": args.records, "parts": {}}
    for part in PARTS:
        for profiled in (False, True):
            result_path = os.path.join(args.work, "plain-profile", f"{part}-{int(profiled)}.json")
            stats = os.path.join(args.work, "plain-profile", f"{part}.pstats") if profiled else None
            command = [sys.executable, __file__, "--records", str(args.records), "--work", args.work, "--part", part,
                       "--result", result_path] + (["--profile", stats] if stats else [])
            load = os.getloadavg()[0]
            if not args.tables:
                subprocess.run(command, check=True, cwd=REPO, env={**os.environ, "PARITY_PROGRESS": "off"})
            with open(result_path, encoding="utf-8") as handle:
                result = json.load(handle)
            row = figures["parts"].setdefault(part, {})
            row["profiled" if profiled else "plain"] = {**result, "load_before": round(load, 2)}
            print(f"[profile {time.strftime('%H:%M:%S')}] {part} {'profiled' if profiled else 'plain'}: {result} "
                  f"(load before {load:.2f})", flush=True)
        seconds = breakdown(stats, "plain_features")
        gc_s = row["profiled"]["gc_s"]
        profiled_total = sum(seconds.values())
        # collections ran inside whatever was running: take them out of every component in proportion
        scale = (profiled_total - gc_s) / profiled_total if profiled_total else 1.0
        seconds = {k: v * scale for k, v in seconds.items()}
        seconds["GC"] = gc_s
        row["profiled_seconds"] = {k: round(v, 3) for k, v in seconds.items()}
        row["top_own_seconds"] = top_own(stats)
        print(f"top own time ({part}, profiled):")
        for name, tt in row["top_own_seconds"]:
            print(f"  {tt:8.3f} s  {name}")
    n = args.records
    print(f"\n| component | " + " | ".join(f"{p}: µs/record profiled (plain est.)" for p in PARTS) + " |")
    print("|---|" + "---|" * len(PARTS))
    for name in COMPONENTS:
        cells = []
        for part in PARTS:
            row = figures["parts"][part]
            total = sum(row["profiled_seconds"].values())
            value = row["profiled_seconds"][name]
            estimate = value / total * row["plain"]["cpu_s"] if total else 0.0
            cells.append(f"{value / n * 1e6:.1f} ({estimate / n * 1e6:.1f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    cells = []
    for part in PARTS:
        row = figures["parts"][part]
        cells.append(f"{sum(row['profiled_seconds'].values()) / n * 1e6:.1f} ({row['plain']['cpu_s'] / n * 1e6:.1f})")
    print("| **total** | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(figures, handle, indent=2)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
