"""The same `parity check` from two source trees, side by side: did a change of the code change its speed?

    .venv/bin/python benchmarks/compare_trees.py --before /work/before --after . --records 1000000 --rounds 3

Both trees run the same check (the taxi config of benchmarks/run.py, `fixed` variant unless `--variant`) on the
same generated capture, each in its own process through the public `parity.check`, with the tree first on
`PYTHONPATH` and the same interpreter and packages. The rounds are fixed before the run and the order alternates
(before, after; after, before; ...), so that neither tree always runs on the quieter machine. With `--at-once`
each round starts both trees' checks at the same moment instead: on a shared machine whose load moves from minute
to minute, whatever else runs then falls on both alike (the two checks share the cores, so each one's figures are
higher than alone; their ratio is what it measures). Every round is
reported (wall, CPU seconds with the child process, peak RSS, the replay and diff times parity recorded, the load
average before it), then the medians, their spread, and after/before ratios. The two reports must be
byte-identical, or the comparison is void: the script says so and exits 1.

Writes `--results` (default benchmarks/results/trees-<records>-<variant>.md) and appends the run to the results
folder's history files.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run as bench  # noqa: E402  (benchmarks/run.py: the capture, the config and the process runner)

_CHECK = ("import json, sys, parity; "
          "report = parity.check(sys.argv[1], out_dir=sys.argv[2]); "
          "print(json.dumps({'verdict': report['verdict']}))")


def _timings(out_dir: str) -> dict:
    seconds = {}
    for path in (os.path.join(out_dir, "timings.json"),):
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                seconds.update({k: v for k, v in json.load(handle).items() if k.endswith("seconds")})
    return seconds


def _digest(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


def one_round(tree: str, label: str, config: str, run_dir: str, round_index: int) -> dict:
    out_dir = os.path.join(run_dir, f"{label}-r{round_index}")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    load = bench._load_average()
    result = bench.run_process([sys.executable, "-c", _CHECK, config, out_dir],
                               os.path.join(run_dir, f"{label}-r{round_index}.log"), env=env)
    result.pop("rss_timeline_mib", None)
    result.update(round=round_index, tree=label, load_before=load, timings=_timings(out_dir),
                  report_sha256=_digest(os.path.join(out_dir, "report.json")))
    return result


def summarize(rounds: list[dict]) -> dict:
    out = {}
    for label in ("before", "after"):
        mine = [r for r in rounds if r["tree"] == label]
        out[label] = {key: {"median": round(statistics.median(r[key] for r in mine), 2),
                            "spread": round(max(r[key] for r in mine) - min(r[key] for r in mine), 2)}
                      for key in ("process_s", "cpu_s", "peak_rss_mib")}
    out["after_over_before"] = {key: round(out["after"][key]["median"] / out["before"][key]["median"], 3)
                                for key in ("process_s", "cpu_s", "peak_rss_mib")}
    return out


def render(result: dict) -> str:
    lines = [f"# Two trees, one check: {result['records']} records, variant {result['variant']}", "",
             f"before `{result['before']}` ({result['machine_before']}), after `{result['after']}` "
             f"({result['machine'].get('commit')}); {result['rounds']} rounds each, "
             f"{'both at once' if result.get('at_once') else 'alternating'}; "
             f"reports identical: {result['reports_identical']}", "",
             "| round | tree | wall s | CPU s | peak RSS MiB | replays and diff (s) | load before |",
             "|---|---|---|---|---|---|---|"]
    for r in result["every_round"]:
        parts = ", ".join(f"{k.removesuffix('_seconds')} {v:.1f}" for k, v in sorted(r["timings"].items())
                          if isinstance(v, (int, float)))
        lines.append(f"| {r['round']} | {r['tree']} | {r['process_s']:.1f} | {r['cpu_s']:.1f} | "
                     f"{r['peak_rss_mib']:.0f} | {parts} | {r['load_before']} |")
    s = result["summary"]
    lines += ["", "| | wall s (median, spread) | CPU s | peak RSS MiB |", "|---|---|---|---|"]
    for label in ("before", "after"):
        cells = [f"{s[label][k]['median']} ({s[label][k]['spread']})" for k in ("process_s", "cpu_s", "peak_rss_mib")]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    ratio = s["after_over_before"]
    lines.append(f"| after / before | {ratio['process_s']} | {ratio['cpu_s']} | {ratio['peak_rss_mib']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="source tree (a checkout) of the code before")
    parser.add_argument("--after", default=os.path.dirname(HERE), help="source tree after (default: this one)")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--variant", default="fixed", choices=sorted(bench.VARIANTS))
    parser.add_argument("--rounds", type=int, default=3, help="rounds per tree, fixed before the run")
    parser.add_argument("--work", default=os.environ.get("PARITY_BENCH_WORK", "/tmp/parity-bench"))
    parser.add_argument("--results", default=None)
    parser.add_argument("--at-once", action="store_true",
                        help="start both trees' checks together in each round, rather than one after the other")
    args = parser.parse_args(argv)
    files = bench.ensure_capture(args.records, args.seed, args.work)
    run_dir = os.path.join(args.work, "runs", f"trees-n{args.records}-{args.variant}-{int(time.time())}")
    os.makedirs(run_dir)
    production = bench.production_capture(files, args.variant)
    config = bench.write_config(run_dir, files, "tft", args.variant, production)
    machine = bench.machine_state()
    trees = {"before": args.before, "after": args.after}
    rounds = []
    for index in range(1, args.rounds + 1):
        order = ("before", "after") if index % 2 else ("after", "before")
        if args.at_once:
            bench.log(f"round {index}: {' and '.join(order)} at once")
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                started = [pool.submit(one_round, trees[label], label, config, run_dir, index) for label in order]
                finished = [future.result() for future in started]
        else:
            finished = []
            for label in order:
                bench.log(f"round {index}: {label} ({trees[label]})")
                finished.append(one_round(trees[label], label, config, run_dir, index))
        for done in finished:
            bench.log(f"  {done['tree']}: {done['process_s']:.1f} s wall, {done['cpu_s']:.1f} s CPU, exit {done['exit']}")
        rounds.extend(finished)
    failed = [r for r in rounds if r["exit"] != 0]
    reports = {r["report_sha256"] for r in rounds}
    before_commit = os.popen(f"git -C {args.before} rev-parse --short HEAD 2>/dev/null").read().strip()
    result = {"records": args.records, "variant": args.variant, "rounds": args.rounds, "before": args.before,
              "after": args.after, "machine_before": before_commit, "machine": machine,
              "reports_identical": len(reports) == 1 and None not in reports, "every_round": rounds,
              "at_once": args.at_once,
              "summary": summarize(rounds) if not failed else None}
    if failed:
        print(f"{len(failed)} round(s) failed; logs in {run_dir}", file=sys.stderr)
        return 1
    text = render(result)
    path = args.results or os.path.join(HERE, "results", f"trees-{args.records}-{args.variant}.md")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    with open(os.path.join(os.path.dirname(path), "history.md"), "a", encoding="utf-8") as handle:
        handle.write("\n## " + os.path.basename(path)[:-3] + "\n\n" + text.removeprefix("# "))
    with open(os.path.join(os.path.dirname(path), "history.jsonl"), "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"file": os.path.basename(path), "result": result}, separators=(",", ":")) + "\n")
    print(text)
    if not result["reports_identical"]:
        print("the two trees' reports differ: the comparison is void", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
