"""Issue 42: the `model` stage's cost per record, beside the same check without it, at 100,000 records.

    .venv/bin/python benchmarks/model_stage.py --records 100000 --rounds 3

Writes a capture of `--records` synthetic trips (seeded; fare, miles, zone) and two configs over it that differ
only in `model:`: both sides apply the same python transform (production's miles in kilometres for 1 trip in 50,
a planted transform bug), and the `with model` config feeds the features to the committed fixed-weight SavedModel
`fixtures/scenarios/_models/tip_v1` with `decision: argmax` of its logits. Rounds alternate the two configs
(without, with, without, with, ...), each a fresh `parity check` process on the DirectRunner; every round's wall
time and CPU seconds (the process and its children, from `os.wait4`) are printed, then the difference per record
of the medians. The reports' counts must be the same in every round of a config (a difference stops the run).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fresh_check import fresh_check  # noqa: E402 (beside this script)
MODEL = os.path.join(ROOT, "fixtures", "scenarios", "_models", "tip_v1")
ZONES = ("Loop", "O'Hare", "Near North Side", "Lincoln Park", "Uptown", "Lake View")

FEATURES = '''\
def offline(record):
    return {"fare": record["fare"], "miles": record["miles"]}


def production(record):
    km = record["trip_id"] % 50 == 0
    return {"fare": record["fare"], "miles": record["miles"] * (1.609344 if km else 1.0)}
'''


def _write_inputs(work: str, records: int) -> tuple[str, str]:
    rng = random.Random(42)
    with open(os.path.join(work, "trips.jsonl"), "w", encoding="utf-8") as handle:
        for i in range(records):
            handle.write(json.dumps({"trip_id": i, "fare": round(rng.uniform(3, 60), 2),
                                     "miles": round(rng.uniform(0.1, 20), 2), "zone": rng.choice(ZONES)}) + "\n")
    with open(os.path.join(work, "bench_model_fns.py"), "w", encoding="utf-8") as handle:
        handle.write(FEATURES)
    base = ("version: 1\nname: model-stage-bench\ncapture:\n  path: trips.jsonl\n  key: [trip_id]\n"
            "  schema: {trip_id: int64, fare: float64, miles: float64, zone: string}\n"
            "sides:\n  offline:\n    transform: {python: \"bench_model_fns:offline\"}\n"
            "  production:\n    transform: {python: \"bench_model_fns:production\"}\n")
    paths = []
    for name, extra in (("without", ""), ("with", f"model:\n  saved: {MODEL}\n"
                                                    "  decision: {output: logits, rule: argmax}\n")):
        path = os.path.join(work, f"{name}.yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(base + extra)
        paths.append(path)
    return paths[0], paths[1]


_check = fresh_check  # (exit code, wall seconds, CPU seconds, report.json) of one check in a fresh process


def _counts(report: dict) -> dict:
    impact = report.get("prediction_impact") or {}
    return {"diverged": report["records"]["diverged"], "paired": report["records"]["paired"],
            "prediction_changed": impact.get("prediction_changed"), "decision_flips": impact.get("decision_flips")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3, help="checks per config, fixed before the run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="parity-model-bench-") as work:
        configs = dict(zip(("without", "with"), _write_inputs(work, args.records)))
        walls: dict[str, list[float]] = {"without": [], "with": []}
        cpus: dict[str, list[float]] = {"without": [], "with": []}
        seen: dict[str, dict] = {}
        for round_ in range(args.rounds):
            for name, config in configs.items():
                code, wall, cpu, report = _check(config, os.path.join(work, f"out-{name}"))
                counts = _counts(report)
                if seen.setdefault(name, counts) != counts:
                    raise SystemExit(f"{name}: round {round_ + 1} counts {counts} differ from {seen[name]}")
                walls[name].append(wall)
                cpus[name].append(cpu)
                print(f"round {round_ + 1} {name:>7} model: exit {code}, wall {wall:.1f} s, CPU {cpu:.1f} s, {counts}",
                      flush=True)
    print()
    print(f"| config | records | wall s per round | CPU s per round | median wall | median CPU |")
    print("|---|---|---|---|---|---|")
    for name in configs:
        print(f"| {name} model | {args.records} | {', '.join(f'{w:.1f}' for w in walls[name])} | "
              f"{', '.join(f'{c:.1f}' for c in cpus[name])} | {statistics.median(walls[name]):.1f} | "
              f"{statistics.median(cpus[name]):.1f} |")
    dw = statistics.median(walls["with"]) - statistics.median(walls["without"])
    dc = statistics.median(cpus["with"]) - statistics.median(cpus["without"])
    print(f"\nthe model stage: {dw / args.records * 1e6:.1f} µs wall and {dc / args.records * 1e6:.1f} µs CPU per "
          f"record (difference of the medians; both sides apply the model, so per record of a side it is half)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
