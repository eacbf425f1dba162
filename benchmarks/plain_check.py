"""Issue 44: `parity check` against the plain naive design (`plain_naive.py`) on a config without aggregates.

    .venv/bin/python benchmarks/plain_check.py --records 1000000 --rounds 3

Writes (once, cached by records under `--work`) a capture of `--records` synthetic events (seeded: an event id,
an event time over three days, a user among 5,000, an amount, a category, a quantity) and a config over it, the
same on both sides except the transform: a fixed 1h window, shard by `user` (16 shards, no aggregates), the
json coder, one `sample` seed op, a three-feature python transform; the production transform plants a bug in 1
event in 100 (its hour one off), so each check has a first differing stage to find.

Every round runs both contenders, each a fresh process (`python -m parity check CONFIG --out DIR --force`, its
default `--sides-at-once auto`; `python benchmarks/plain_naive.py`), in an order rotated by one each round. The
rounds are fixed before the run (`--rounds`). Printed for every round: wall seconds and CPU seconds (user +
system of the process and the children it waited for, `os.wait4`: both include their imports), the load average
before it; then per contender the median and spread (max - min), and the ratio of the medians naive / parity in
CPU and in wall. The two contenders' counts (matched records, first differing stage) must agree in every round,
or the run stops. `--json FILE` writes the same figures. `--before-tree DIR` adds a third contender in every
round, `parity_before`: the same check from another source tree (a checkout of the code before a change, with
its C extension), first on `PYTHONPATH`; the before/after ratio is then of rounds run side by side.
`--sides-in-turn` adds another, `parity_in_turn`: this tree's check with `--sides-at-once off` (the sides one
after the other in one process), to tell what running both sides at once costs in CPU.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONTENDERS = ("parity", "plain_naive")

FEATURES = '''\
"""The three features of the plain benchmark (benchmarks/plain_check.py); production's hour is one off for
1 event in 100 (a planted bug)."""


def offline(record):
    amount = record["amount"]
    return {"amount_cents": round(amount * 100), "hour": (record["event_time"] // 3600) % 24,
            "big": amount >= 100.0}


def production(record):
    amount = record["amount"]
    hour = (record["event_time"] // 3600 + (1 if record["event_id"] % 100 == 0 else 0)) % 24
    return {"amount_cents": round(amount * 100), "hour": hour, "big": amount >= 100.0}
'''

CONFIG = """\
version: 1
name: plain-bench
capture:
  path: {capture}
  format: jsonl
  key: [event_id]
  schema: {{event_id: int64, event_time: int64, user: string, amount: float64, category: string, qty: int64}}
sides:
  offline:
    timestamp: {{field: event_time, unit: s}}
    window: {{type: fixed, size: 1h}}
    shard: {{key: [user], count: 16}}
    coder: {{type: json}}
    seed: {{value: 7, ops: {{in_sample: {{op: sample, rate: 0.1}}}}}}
    transform: {{python: "plain_features:offline"}}
  production:
    timestamp: {{field: event_time, unit: s}}
    window: {{type: fixed, size: 1h}}
    shard: {{key: [user], count: 16}}
    coder: {{type: json}}
    seed: {{value: 7, ops: {{in_sample: {{op: sample, rate: 0.1}}}}}}
    transform: {{python: "plain_features:production"}}
tolerance: {{max_diverged: {max_diverged}}}
"""

CATEGORIES = ("food", "travel", "books", "games", "music", "home", "garden", "toys")


def log(message: str) -> None:
    print(f"[plain {time.strftime('%H:%M:%S')}] {message}", flush=True)


def ensure_inputs(records: int, work: str) -> str:
    """The config of `records` synthetic events (capture written once, seed 44), its features module beside it."""
    folder = os.path.join(work, f"plain-n{records}")
    config = os.path.join(folder, "parity.yaml")
    if os.path.exists(os.path.join(folder, "COMPLETE")):
        return config
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    rng = random.Random(44)
    start = 1_709_251_200  # 2024-03-01T00:00:00Z
    with open(os.path.join(folder, "events.jsonl"), "w", encoding="utf-8") as handle:
        for i in range(records):
            handle.write(json.dumps({"event_id": i, "event_time": start + rng.randrange(3 * 86_400),
                                     "user": f"u{rng.randrange(5_000):04d}", "amount": round(rng.uniform(1, 200), 2),
                                     "category": rng.choice(CATEGORIES), "qty": rng.randrange(1, 10)}) + "\n")
    with open(os.path.join(folder, "plain_features.py"), "w", encoding="utf-8") as handle:
        handle.write(FEATURES)
    with open(config, "w", encoding="utf-8") as handle:
        handle.write(CONFIG.format(capture=os.path.join(folder, "events.jsonl"), max_diverged=records))
    with open(os.path.join(folder, "COMPLETE"), "w", encoding="utf-8") as handle:
        handle.write(f"{records}\n")
    return config


def command(name: str, config: str, scratch: str) -> list[str]:
    if name in ("parity", "parity_before", "parity_in_turn"):
        return [sys.executable, "-m", "parity", "check", config, "--out", os.path.join(scratch, "out"), "--force"] + \
            (["--sides-at-once", "off"] if name == "parity_in_turn" else [])
    return [sys.executable, os.path.join(HERE, "plain_naive.py"), "--config", config, "--work", scratch,
            "--result", os.path.join(scratch, "result.json")]


def counts(name: str, scratch: str) -> dict[str, int]:
    """{matched, first:<stage>...} of a contender's run: the figures both must agree on."""
    if name == "plain_naive":
        with open(os.path.join(scratch, "result.json"), encoding="utf-8") as handle:
            return json.load(handle)["outcome"]
    with open(os.path.join(scratch, "out", "report.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    out = {"matched": report["records"]["matched"]}
    for stage in report["stages"]:
        if stage.get("first_diverged"):
            out[f"first:{stage['name']}"] = stage["first_diverged"]
    for side in ("left_only", "right_only"):
        if report["records"][side]:
            out[side] = report["records"][side]
    return out


def run_one(name: str, config: str, scratch: str, before_tree: str | None = None) -> dict[str, Any]:
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    load = os.getloadavg()[0]
    env = {**os.environ, "PARITY_PROGRESS": "off"}
    tree = REPO
    if name == "parity_before":  # the same check from another source tree, first on the path
        tree = before_tree
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (before_tree, env.get("PYTHONPATH"))))
    started = time.monotonic()
    with open(os.path.join(scratch, "log.txt"), "w", encoding="utf-8") as out:
        proc = subprocess.Popen(command(name, config, scratch), stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=tree)
        _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    code = os.waitstatus_to_exitcode(status)
    if name == "plain_naive" and code != 0 or name != "plain_naive" and code not in (0, 1):
        raise SystemExit(f"{name} exited {code}; see {scratch}/log.txt")
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "load_before": round(load, 2), "counts": counts(name, scratch)}


def spread(values: list[float]) -> float:
    return round(max(values) - min(values), 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3, help="fixed before the run")
    parser.add_argument("--work", default=os.environ.get("PARITY_BENCH_WORK", "/tmp/parity-bench"))
    parser.add_argument("--json", default=None, help="write every round and the medians here")
    parser.add_argument("--before-tree", default=None,
                        help="also run parity's check from this source tree (a checkout of the code before a change) "
                             "in every round, as the contender parity_before")
    parser.add_argument("--sides-in-turn", action="store_true",
                        help="also run this tree's check with --sides-at-once off in every round (parity_in_turn)")
    args = parser.parse_args(argv)
    contenders = (("parity_before",) if args.before_tree else ()) + CONTENDERS + \
        (("parity_in_turn",) if args.sides_in_turn else ())
    config = ensure_inputs(args.records, args.work)
    log(f"config {config}; {args.rounds} rounds of {', '.join(contenders)}; load {os.getloadavg()}")
    rounds: list[dict[str, Any]] = []
    seen: dict[str, int] | None = None
    for index in range(args.rounds):
        shift = index % len(contenders)
        for position, name in enumerate(contenders[shift:] + contenders[:shift]):
            row = run_one(name, config, os.path.join(args.work, "plain-runs", name), args.before_tree)
            seen = seen or row["counts"]
            if row["counts"] != seen:
                raise SystemExit(f"round {index + 1} {name}: counts {row['counts']} differ from {seen}")
            rounds.append({"round": index + 1, "position": position + 1, "contender": name, **row})
            log(f"round {index + 1} #{position + 1} {name:>11}: wall {row['wall_s']:.1f} s, CPU {row['cpu_s']:.1f} s "
                f"(load before {row['load_before']}) {row['counts']}")
    summary: dict[str, Any] = {"records": args.records, "rounds": args.rounds, "counts": seen, "contenders": {}}
    print("\n| contender | wall s, every round | CPU s, every round | median wall (spread) | median CPU (spread) |")
    print("|---|---|---|---|---|")
    for name in contenders:
        walls = [r["wall_s"] for r in rounds if r["contender"] == name]
        cpus = [r["cpu_s"] for r in rounds if r["contender"] == name]
        summary["contenders"][name] = {"wall_s": walls, "cpu_s": cpus, "median_wall_s": statistics.median(walls),
                                       "median_cpu_s": statistics.median(cpus), "wall_spread_s": spread(walls),
                                       "cpu_spread_s": spread(cpus)}
        print(f"| {name} | {', '.join(f'{w:.1f}' for w in walls)} | {', '.join(f'{c:.1f}' for c in cpus)} | "
              f"{statistics.median(walls):.1f} ({spread(walls):.1f}) | {statistics.median(cpus):.1f} "
              f"({spread(cpus):.1f}) |")
    ours, theirs = summary["contenders"]["parity"], summary["contenders"]["plain_naive"]
    summary["naive_over_parity_cpu"] = round(theirs["median_cpu_s"] / ours["median_cpu_s"], 3)
    summary["naive_over_parity_wall"] = round(theirs["median_wall_s"] / ours["median_wall_s"], 3)
    summary["parity_cpu_us_per_record_and_side"] = round(ours["median_cpu_s"] / args.records / 2 * 1e6, 1)
    summary["naive_cpu_us_per_record_and_side"] = round(theirs["median_cpu_s"] / args.records / 2 * 1e6, 1)
    print(f"\nplain naive / parity, ratio of the medians: CPU {summary['naive_over_parity_cpu']}, wall "
          f"{summary['naive_over_parity_wall']} (target: CPU >= 3); CPU per record and side: parity "
          f"{summary['parity_cpu_us_per_record_and_side']} µs, plain naive {summary['naive_cpu_us_per_record_and_side']} µs")
    if args.before_tree:
        before = summary["contenders"]["parity_before"]
        summary["parity_over_parity_before_cpu"] = round(ours["median_cpu_s"] / before["median_cpu_s"], 3)
        summary["parity_over_parity_before_wall"] = round(ours["median_wall_s"] / before["median_wall_s"], 3)
        summary["naive_over_parity_before_cpu"] = round(theirs["median_cpu_s"] / before["median_cpu_s"], 3)
        print(f"parity (this tree) / parity_before, ratio of the medians: CPU {summary['parity_over_parity_before_cpu']}, "
              f"wall {summary['parity_over_parity_before_wall']}; plain naive / parity_before, CPU "
              f"{summary['naive_over_parity_before_cpu']}")
    if args.sides_in_turn:
        in_turn = summary["contenders"]["parity_in_turn"]
        summary["in_turn_over_parity_cpu"] = round(in_turn["median_cpu_s"] / ours["median_cpu_s"], 3)
        summary["in_turn_over_parity_wall"] = round(in_turn["median_wall_s"] / ours["median_wall_s"], 3)
        print(f"parity_in_turn (--sides-at-once off) / parity, ratio of the medians: CPU "
              f"{summary['in_turn_over_parity_cpu']}, wall {summary['in_turn_over_parity_wall']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({**summary, "every_round": rounds}, handle, indent=2)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
