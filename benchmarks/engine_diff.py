"""The client's cost of a diff whose every record diverged: the local diff (this process, and a child process
where it pays: `parity.compare.halves`) against the engine diff (`parity.compare.engine`: a Beam job over the
sets' key ranges, the client merging the summaries), on the same two fingerprint sets.

    .venv/bin/python benchmarks/engine_diff.py [--records 200000] [--rounds 3] [--flink] [--work DIR]

The sets come from the benchmark fixtures (benchmarks/run.py): the taxi capture of `--records` records, its
production side planted to diverge on 100% of them (`diverged100`: `company` a name the offline vocabulary
lacks), the python transform, one `parity check --diff-on local` (not timed) whose sides/ are kept. Then every
round runs `parity diff` once per contender, in an order that rotates round by round, each a fresh process:

- `local`: `--diff-on local`;
- `engine-direct`: `--diff-on engine` on the DirectRunner, i.e. Beam's FnApiRunner in the client process: the
  per-pair work is still the client's here, so this contender shows the engine's overhead, not its offload;
- `engine-flink` (with `--flink`): `--diff-on engine --runner FlinkRunner` on a job server this script starts
  (embedded Flink, `[local]`) with EXTERNAL SDK workers (`python -m parity.replay.worker_pool`, started by this
  script, parallelism 2): the workers are not the client's processes, so the client's CPU and memory are its own.

Each process's CPU seconds (user + system, with the children it waited for) and peak RSS (its own or its
process tree's, sampled twice a second: `run.run_process`) are recorded; every round's figures are printed, then
one JSON line with each contender's rounds, medians and spreads (max - min). Every contender's report.json must be
the same bytes, or the script fails.
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import run as bench  # noqa: E402  benchmarks/run.py: the capture, the planted level, the config, the processes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3, help="0: make the sets only")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--flink", action="store_true", help="also the engine diff on Flink (EXTERNAL workers)")
    parser.add_argument("--work", default=os.environ.get("PARITY_BENCH_WORK", "/tmp/parity-bench"))
    args = parser.parse_args(argv)

    config, left, right = _sets(args)
    if args.rounds < 1:  # the sets only
        return 0
    contenders = ["local", "engine-direct"] + (["engine-flink"] if args.flink else [])
    flink_args: list[str] = []
    stop = []
    if args.flink:
        flink_args, stop = _flink()
    runs: dict[str, list[dict]] = {name: [] for name in contenders}
    reports: dict[str, bytes] = {}
    try:
        for r in range(args.rounds):
            for name in contenders[r % len(contenders):] + contenders[:r % len(contenders)]:
                out = os.path.join(args.work, "engine_diff", f"{name}-r{r + 1}")
                command = [sys.executable, "-m", "parity", "diff", left, right, "--out", out, "--config", config,
                           "--force", "--diff-on", "local" if name == "local" else "engine"]
                if name == "engine-flink":
                    command += ["--runner", "FlinkRunner", "--", *flink_args]
                found = bench.run_process(command, out + ".log", env={**os.environ, "PARITY_PROGRESS": "off"})
                if found["exit"] not in (0, 1):
                    raise SystemExit(f"{name}: parity diff failed (exit {found['exit']}); see {out}.log")
                with open(os.path.join(out, "report.json"), "rb") as handle:
                    reports[f"{name} round {r + 1}"] = handle.read()
                runs[name].append({k: found[k] for k in ("process_s", "cpu_s", "peak_rss_mib")})
                print(f"round {r + 1} {name}: {found['cpu_s']:.2f} CPU s, {found['process_s']:.2f} s wall, "
                      f"{found['peak_rss_mib']:.0f} MiB peak", flush=True)
    finally:
        for process in stop:
            process()
    if len(set(reports.values())) != 1:
        print(f"the report.json differ: {sorted(reports)}", file=sys.stderr)
        return 1
    diverged = json.loads(next(iter(reports.values())))["records"]
    print(json.dumps({"records": args.records, "paired": diverged["paired"], "diverged": diverged["diverged"],
                      "rounds": args.rounds, "cores": os.cpu_count(),
                      **{name: _summary(found) for name, found in runs.items()}}))
    return 0


def _summary(runs: list[dict]) -> dict:
    summary: dict = {"rounds": runs}
    for key in ("cpu_s", "process_s", "peak_rss_mib"):
        values = [run[key] for run in runs]
        summary[f"{key}_median"] = round(statistics.median(values), 2)
        summary[f"{key}_spread"] = round(max(values) - min(values), 2)
    return summary


def _sets(args: argparse.Namespace) -> tuple[str, str, str]:
    """(config, left set, right set) of the planted capture's check, made once (cached under --work)."""
    files = bench.ensure_capture(args.records, args.seed, args.work)
    production = bench.planted_capture(files, 100)
    run_dir = os.path.join(args.work, "engine_diff", f"n{args.records}-s{args.seed}")
    out = os.path.join(run_dir, "out")
    left, right = os.path.join(out, "sides", "offline"), os.path.join(out, "sides", "production")
    config = os.path.join(run_dir, "config", "parity.yaml")
    if not os.path.exists(os.path.join(out, "report.json")):
        config = bench.write_config(run_dir, files, "python", "diverged100", production)
        bench.log(f"checking {args.records} records once for the sets -> {out}")
        subprocess.run([sys.executable, "-m", "parity", "check", config, "--out", out, "--force", "--diff-on",
                        "local"], cwd=REPO, check=False, env={**os.environ, "PARITY_PROGRESS": "off"})
    return config, left, right


def _flink() -> tuple[list[str], list]:
    """The Beam options of the engine diff on Flink, and how to stop what this script started for it: a job
    server and a pool of EXTERNAL SDK workers, both this script's processes (not the client's)."""
    sys.path.insert(0, REPO)
    from parity import compat
    from parity.replay.flink import JobServer, job_server_jar

    server = JobServer(job_server_jar(), "[local]")
    server.start()
    port = compat.free_port()
    pool = subprocess.Popen([sys.executable, "-m", "parity.replay.worker_pool", f"--service_port={port}"],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(3)

    def stop_pool() -> None:
        pool.terminate()
        pool.wait(timeout=30)

    return ([f"--job_endpoint={server.endpoint}", "--environment_type=EXTERNAL",
             f"--environment_config=localhost:{port}", "--parallelism=2"], [stop_pool, server.stop])


if __name__ == "__main__":
    sys.exit(main())
