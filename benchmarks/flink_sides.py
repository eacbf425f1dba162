"""Issue 44 (parts 2 and 4): a small check on Flink, its sides one after the other against both at once, beside the
DirectRunner check, with where each one's wall time goes.

    .venv/bin/python benchmarks/flink_sides.py --records 30000 --rounds 3

The Flink is the tests' (tests/flink/conftest.py): one Beam Flink job server started here, its jobs on an embedded
Flink (`[local]`, a MiniCluster in the job server's JVM), LOOPBACK SDK workers (the harness runs in the parity
process), parallelism 1. The job server starts once, before the rounds (its start is measured and shown apart: a
`parity check` without `--job_endpoint` starts one itself, once, and its children reuse it); every check is its own
`parity check` process on it, with the taxi config's python transform on N records per side, 25% of the production
side's planted to diverge (benchmarks/run.py's `diverged25`).

Contenders, each in every round, their order rotated by one place each round:
- `direct`: the DirectRunner check (`--sides-at-once off`: on this capture size auto says off too);
- `flink_off`: the Flink check with `--sides-at-once off` (the sides' jobs one after the other);
- `flink_on`: the Flink check with `--sides-at-once on` (both sides' jobs submitted together);
- `cli_off`, `cli_on`: the same two as a user runs them, `parity check --runner FlinkRunner` without `--job_endpoint`:
  each check starts its own job server (a fresh JVM: its start, and its first jobs' class loading and compilation,
  are the check's; its CPU is in the check's, the JVM being the check's child process);
- `cli_on_c2` (not run unless named): `cli_on` with the job server's JVM options as before issue 44 (`CONTENDER_ENV`).

Per run: wall seconds; the check's CPU seconds (`os.wait4`: the process and the children it waited for, which with
LOOPBACK include the SDK harnesses' work); the job server JVM's CPU seconds over the run (/proc/PID/stat, its
threads together: the Flink side of the work); and the phases (benchmarks/phases/sitecustomize.py, a probe on the
checks' PYTHONPATH): interpreter start to the first pipeline, each side's pipeline construction, Beam's submission
(LOOPBACK pool start, job service connect, prepare, artifact staging, run request), the job (submission to its end),
the set's finalization, the diff and reports; and each job's states with the job server's own timestamps
(`GetStateStream`), which show whether the two sides' jobs ran at the same time.

Writes benchmarks/results/flink_sides-N.json and .md and prints the markdown.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE]

import run as bench  # noqa: E402  (benchmarks/run.py: capture, config, machine state)
from tests.flink.job_states import job_ids, job_states  # noqa: E402  (the Flink tests' reader of the same)

CONTENDERS = ("direct", "flink_off", "flink_on", "cli_off", "cli_on")
# A contender's own environment: `cli_on_c2` is `cli_on` with the job server's JVM as before issue 44 (the JIT's
# top tier and the JVM's default collector, G1 here): the later -XX options win over parity's JVM_OPTIONS.
CONTENDER_ENV = {"cli_on_c2": {"PARITY_FLINK_JVM_OPTIONS": "-XX:TieredStopAtLevel=4 -XX:-UseSerialGC -XX:+UseG1GC"}}
FLINK_OPTIONS = ("--environment_type=LOOPBACK", "--parallelism=1")  # tests/flink/conftest.py's


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=30000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3, help="rounds, fixed before the run")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--work", default=os.environ.get("PARITY_BENCH_WORK", "/tmp/parity-bench"))
    parser.add_argument("--results", default=os.path.join(HERE, "results"))
    return parser.parse_args(argv)


def jvm_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all its threads together (/proc/PID/stat, fields 14 and 15)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spans(events: list[dict], jobs: list[dict]) -> dict[str, Any]:
    """The phases of one check from its probe events (seconds), and its jobs' spans from the job server's states."""
    if not events:
        return {}
    events.sort(key=lambda e: e["t"])
    origin = events[0]["t"]
    main_pid = events[0]["pid"]
    out: dict[str, Any] = {}

    def first(what: str, pid: int | None = None, after: float = 0.0) -> float | None:
        return next((e["t"] for e in events if e["what"] == what and (pid is None or e["pid"] == pid)
                     and e["t"] >= after), None)

    server = next((e for e in events if e["what"] == "parity:flink_job_server_started"), None)
    if server is not None:  # a check that started its own job server (cli_*)
        out["job_server_start_s"] = server.get("seconds")
    built = first("pipeline_construct_start", main_pid)
    out["start_to_first_pipeline_s"] = round(built - origin, 2) if built else None
    sides = [e for e in events if e["what"] == "parity:replay_start"]
    for start in sides:
        pid, side = start["pid"], start["side"]
        t0 = start["t"]
        seq = {what: first(what, pid, t0) for what in (
            "pipeline_construct_start", "submit_start", "loopback_pool_start_start", "loopback_pool_start_end",
            "job_service_connect_start", "job_service_connect_end", "job_prepare_start", "job_prepare_end",
            "artifact_staging_start", "artifact_staging_end", "job_run_request_start", "job_run_request_end",
            "submit_end", "job_wait_end", "parity:replay_done")}
        row = {"pid": "main" if pid == main_pid else "child",
               "replay_start_at_s": round(t0 - origin, 2)}

        def span(a: str, b: str) -> float | None:
            return round(seq[b] - seq[a], 2) if seq.get(a) and seq.get(b) else None

        row.update(construct_s=span("pipeline_construct_start", "submit_start"),
                   loopback_pool_s=span("loopback_pool_start_start", "loopback_pool_start_end"),
                   connect_s=span("job_service_connect_start", "job_service_connect_end"),
                   prepare_s=span("job_prepare_start", "job_prepare_end"),
                   staging_s=span("artifact_staging_start", "artifact_staging_end"),
                   run_request_s=span("job_run_request_start", "job_run_request_end"),
                   submit_s=span("submit_start", "submit_end"),
                   job_s=span("submit_end", "job_wait_end"),
                   finalize_s=span("job_wait_end", "parity:replay_done"),
                   replay_s=round(seq["parity:replay_done"] - t0, 2) if seq["parity:replay_done"] else None,
                   done_at_s=round(seq["parity:replay_done"] - origin, 2) if seq["parity:replay_done"] else None)
        harness = [e["t"] for e in events if e["what"] == "harness_connect_start" and e["pid"] == pid
                   and e["t"] >= t0 and (not seq["job_wait_end"] or e["t"] <= seq["job_wait_end"])]
        if harness and seq["submit_end"]:
            row["harness_asked_after_submit_s"] = round(min(harness) - seq["submit_end"], 2)
        out[f"side_{side}"] = row
    done = first("parity:diff_done", main_pid)
    last_replay = max((e["t"] for e in events if e["what"] == "parity:replay_done"), default=None)
    if done and last_replay:
        out["after_replays_to_diff_done_s"] = round(done - last_replay, 2)
    exit_at = first("process_exit", main_pid)
    if exit_at and done:
        out["diff_done_to_exit_s"] = round(exit_at - done, 2)
    out["jobs"] = []
    for job in jobs:
        states = {s["state"]: s["t"] for s in job["states"]}
        t_start = states.get("STOPPED") or states.get("STARTING")
        out["jobs"].append({
            "name": job["name"],
            "prepared_at_s": round(t_start - origin, 2) if t_start else None,
            "running_at_s": round(states["RUNNING"] - origin, 2) if "RUNNING" in states else None,
            "done_at_s": round(states["DONE"] - origin, 2) if "DONE" in states else None,
            "states": [s["state"] for s in job["states"]]})
    spans = [(j["running_at_s"], j["done_at_s"]) for j in out["jobs"] if j["running_at_s"] is not None
             and j["done_at_s"] is not None]
    if len(spans) == 2:
        (a0, a1), (b0, b1) = sorted(spans)
        out["jobs_overlap_s"] = round(max(0.0, min(a1, b1) - b0), 2)
    return out


def run_check(name: str, config: str, out_dir: str, endpoint: str | None, jvm_pid: int | None,
              phases: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "parity", "check", config, "--out", out_dir, "--force"]
    if name == "direct":
        command += ["--sides-at-once", "off"]
    elif name.startswith("cli_"):
        command += ["--runner", "FlinkRunner", "--sides-at-once", name.split("_")[1]]
    else:
        command += ["--runner", "FlinkRunner", "--sides-at-once", name.removeprefix("flink_"), "--",
                    f"--job_endpoint={endpoint}", *FLINK_OPTIONS]
    env = dict(os.environ, PARITY_PROGRESS="off", PARITY_PHASES=phases, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([os.path.join(HERE, "phases"), REPO]), **CONTENDER_ENV.get(name, {}))
    if os.path.exists(phases):
        os.remove(phases)
    known = job_ids(endpoint) if endpoint else set()
    jvm_before = jvm_cpu_seconds(jvm_pid) if jvm_pid else None
    started = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=REPO)
    _stderr_tail = proc.stderr.read()[-2000:] if proc.stderr else b""  # type: ignore[union-attr]
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    entry: dict[str, Any] = {"exit": os.waitstatus_to_exitcode(status), "wall_s": round(wall, 2),
                             "cpu_s": round(usage.ru_utime + usage.ru_stime, 2)}
    if jvm_pid:
        entry["jvm_cpu_s"] = round(jvm_cpu_seconds(jvm_pid) - jvm_before, 2)  # type: ignore[operator]
    report = os.path.join(out_dir, "report.json")
    if entry["exit"] not in (0, 1) or not os.path.exists(report):
        entry["error"] = _stderr_tail.decode("utf-8", "replace")
        return entry
    with open(report, "rb") as handle:
        data = handle.read()
    entry["report_sha256"] = hashlib.sha256(data).hexdigest()[:16]
    entry["diverged"] = json.loads(data)["records"]["diverged"]
    with open(os.path.join(out_dir, "timings.json"), encoding="utf-8") as handle:
        entry["timings"] = json.load(handle)
    events = []
    if os.path.exists(phases):
        with open(phases, encoding="utf-8") as handle:
            events = [json.loads(line) for line in handle if line.strip()]
    entry["phases"] = _spans(events, job_states(endpoint, known) if endpoint else [])
    return entry


def summarize(runs: dict[str, list[dict]]) -> dict[str, Any]:
    rows = {}
    for name, entries in runs.items():
        ok = [e for e in entries if "error" not in e]
        if not ok:
            rows[name] = {"failed": len(entries)}
            continue
        row = {"runs": len(ok), "failed": len(entries) - len(ok)}
        for key in ("wall_s", "cpu_s", "jvm_cpu_s"):
            values = [e[key] for e in ok if key in e]
            if values:
                row[key] = round(statistics.median(values), 2)
                row[f"{key}_spread"] = [min(values), max(values)]
        rows[name] = row
    ratios = {}
    for a, b in (("flink_on", "flink_off"), ("flink_off", "direct"), ("flink_on", "direct"), ("cli_on", "cli_off"),
                 ("cli_off", "direct"), ("cli_on", "direct"), ("cli_on", "cli_on_c2")):
        for key in ("wall_s", "cpu_s"):
            if key in rows.get(a, {}) and key in rows.get(b, {}):
                ratios[f"{a}_over_{b}_{key.removesuffix('_s')}"] = round(rows[a][key] / rows[b][key], 3)
    return {"rows": rows, "ratios": ratios}


def render(result: dict[str, Any]) -> str:
    args = result["args"]
    lines = [f"### Flink check, sides one after the other and at once: {args['records']:,} records per side, "
             f"{args['rounds']} rounds", "",
             f"`{result['command']}` (commit {result['machine'].get('commit', '?')}, {result['machine'].get('cpus')} "
             f"CPUs, load before {result['machine'].get('load_average_before')}); job server start "
             f"{result['job_server_start_s']} s (once, before the rounds)", "",
             "| contender | runs | wall s (median, spread) | check CPU s | job server CPU s |", "|---|---|---|---|---|"]
    for name, row in result["summary"]["rows"].items():
        if "wall_s" not in row:
            lines.append(f"| {name} | failed {row['failed']} | | | |")
            continue
        jvm = f"{row['jvm_cpu_s']} ({row['jvm_cpu_s_spread'][0]}-{row['jvm_cpu_s_spread'][1]})" \
            if "jvm_cpu_s" in row else "-"
        lines.append(f"| {name} | {row['runs']} | {row['wall_s']} ({row['wall_s_spread'][0]}-"
                     f"{row['wall_s_spread'][1]}) | {row['cpu_s']} ({row['cpu_s_spread'][0]}-{row['cpu_s_spread'][1]})"
                     f" | {jvm} |")
    lines += ["", "Ratios (medians): " + ", ".join(f"{k} {v}" for k, v in result["summary"]["ratios"].items()), "",
              "Every round (s; phases: start = interpreter start to the first pipeline; per side: construct, submit "
              "[loopback pool, connect, prepare, staging, run request], job = submission to end, finalize; jobs: "
              "RUNNING..DONE by the job server's clock, from the check's start):", ""]
    for name, entries in result["runs"].items():
        for e in entries:
            if "error" in e:
                lines.append(f"- r{e['round']} {name}: FAILED exit {e['exit']}: {e['error'][-300:]}")
                continue
            p = e.get("phases", {})
            parts = [f"r{e['round']} {name}: wall {e['wall_s']}, cpu {e['cpu_s']}"
                     + (f", jvm cpu {e['jvm_cpu_s']}" if "jvm_cpu_s" in e else "")
                     + f", report {e['report_sha256']}", f"start {p.get('start_to_first_pipeline_s')}"
                     + (f" (job server {p['job_server_start_s']})" if "job_server_start_s" in p else "")]
            for key, side in sorted((k, v) for k, v in p.items() if k.startswith("side_")):
                said = [f"{key.removeprefix('side_')}[{side['pid']}] at {side['replay_start_at_s']}"]
                if side.get("submit_s") is not None:  # a portable runner's job (Flink)
                    asked = side.get("harness_asked_after_submit_s")
                    rest = round(side["job_s"] - asked, 2) if asked is not None and side["job_s"] is not None else None
                    said.append(f"construct {side['construct_s']}, submit {side['submit_s']} [pool "
                                f"{side['loopback_pool_s']}, connect {side['connect_s']}, prepare {side['prepare_s']}, "
                                f"staging {side['staging_s']}, run {side['run_request_s']}], job {side['job_s']} "
                                f"[harness asked {asked} after submit, then {rest} to the job's end], finalize "
                                f"{side['finalize_s']}")
                said.append(f"done at {side['done_at_s']}")
                parts.append(", ".join(said))
            for job in p.get("jobs", []):
                parts.append(f"job running {job['running_at_s']}..{job['done_at_s']}")
            if "jobs_overlap_s" in p:
                parts.append(f"jobs overlap {p['jobs_overlap_s']}")
            parts.append(f"diff+reports {p.get('after_replays_to_diff_done_s')}, exit {p.get('diff_done_to_exit_s')}")
            lines.append("- " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    contenders = args.contenders.split(",")
    files = bench.ensure_capture(args.records, args.seed, args.work)
    production = bench.production_capture(files, "diverged25")
    run_dir = os.path.join(args.work, "runs", f"flink-sides-n{args.records}")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    config = bench.write_config(run_dir, files, "python", "diverged25", production)
    machine = bench.machine_state()
    server = None
    start_s = None
    if any(name.startswith("flink") for name in contenders):
        from parity.replay.flink import JobServer, job_server_jar

        server = JobServer(job_server_jar(), "[local]")
        server.start()
        start_s = round(server.start_seconds or 0.0, 2)
        bench.log(f"job server at {server.endpoint} in {start_s} s")
    runs: dict[str, list[dict]] = {name: [] for name in contenders}
    try:
        for round_index in range(1, args.rounds + 1):
            for name in bench.round_order(contenders, round_index):
                out_dir = os.path.join(run_dir, f"{name}-r{round_index}")
                flink = name.startswith("flink")  # on this benchmark's job server (cli_*: their own)
                entry = run_check(name, config, out_dir, server.endpoint if flink and server else None,
                                  server._process.pid if flink and server and server._process else None,
                                  os.path.join(run_dir, f"{name}-r{round_index}.phases.jsonl"))
                entry["round"] = round_index
                runs[name].append(entry)
                bench.log(f"round {round_index} {name}: exit {entry['exit']}, wall {entry['wall_s']} s, cpu "
                          f"{entry['cpu_s']} s" + (f", jvm {entry.get('jvm_cpu_s')} s" if flink else ""))
                shutil.rmtree(out_dir, ignore_errors=True)
    finally:
        if server is not None:
            server.stop()
    result = {"args": vars(args), "machine": machine, "job_server_start_s": start_s,
              "command": "python benchmarks/flink_sides.py " + " ".join(sys.argv[1:] if argv is None else argv),
              "runs": runs, "summary": summarize(runs)}
    hashes = {e["report_sha256"] for entries in runs.values() for e in entries if "report_sha256" in e}
    result["reports_identical"] = len(hashes) == 1
    os.makedirs(args.results, exist_ok=True)
    base = os.path.join(args.results, f"flink_sides-{args.records}")
    with open(base + ".json", "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2, sort_keys=True)
    text = render(result) + f"\nreport.json identical across every run: {result['reports_identical']}\n"
    with open(base + ".md", "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)
    return 0 if result["reports_identical"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
