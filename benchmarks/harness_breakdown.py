"""Where the SDK harnesses' CPU goes in a test-bed check (`benchmarks/cluster_scale.py`): by job and by kind.

Two parts, run beside `cluster_scale.py` (benchmarks/RESULTS.md has the whole sequence):

    # every harness the pool's zygote forks, its own CPU seconds (/proc, polled twice a second) until stopped
    python benchmarks/harness_breakdown.py poll harnesses.jsonl &
    # py-spy (pip install py-spy, into a venv of its own) on the worker pool and its descendants, raw stacks
    py-spy record --pid POOL_PID --subprocesses --nonblocking --rate 50 --format raw -o stacks.txt
    # then: the samples by job and kind, and the polled CPU by job (from cluster_scale's history.jsonl)
    python benchmarks/harness_breakdown.py report stacks.txt --history results/history.jsonl --polled harnesses.jsonl

The stacks of the runs in benchmarks/RESULTS.md are in benchmarks/results/harness-profiles/ (gzipped: `report`
reads them as they are).

A sample is a thread's stack when py-spy did not see it idle: it may have been waiting for a CPU or for the GIL,
so the shares are of the harness threads' busy time, which follows their CPU time but is not it. Samples whose
innermost frame is a known wait (a condition, a socket read, a poll) count as idle. A sample's kind is the first
that matches, in the order of `KINDS`; its job is the diff's if its process ever ran the diff's steps.
"""
from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import signal
import sys
import time

IDLE_LEAVES = ("SocketIO.readinto", "do_poll (urllib3", "create_connection (urllib3", "Condition.wait",
               "channel_spin", "Thread.run (threading.py", "Queue.get", "Semaphore.acquire", "Event.wait",
               "select (selectors", "poll (selectors", "_wait_once", "_serve (grpc")


def _has(frames: list[str], *marks: str) -> bool:
    return any(mark in frame for frame in frames for mark in marks)


def kind(frames: list[str]) -> str:
    """The kind of work one sample's stack (outermost frame first) was doing."""
    leaf = frames[-1] if frames else ""
    if any(mark in leaf for mark in IDLE_LEAVES):
        return "idle"
    if ".py:" not in leaf:  # a thread with no Python frame (gRPC's, Arrow's): what it ran is not seen
        return "no Python frame (native threads)"
    if _has(frames, "bounded_client", "create_client (botocore", "Session.client (boto3",
            "Client.__init__ (apache_beam/io/aws"):
        return "S3: boto3 clients built"
    if _has(frames, "_find_and_load"):
        return "harness: imports"
    if _has(frames, "create_execution_tree", "pickler.py", "cloudpickle"):
        return "harness: bundle set-up (DoFns unpickled, operations built)"
    if _has(frames, "botocore", "urllib3", "s3io.py", "http/client.py", "boto3/", "ssl.py", "socket.py"):
        if _has(frames, "auth.py"):
            return "S3: requests, SigV4 signing (payload SHA-256)"
        if _has(frames, "httpchecksum"):
            return "S3: requests, CRC32 checksums"
        if _has(frames, "S3Uploader.put"):
            return "S3: requests, Beam's upload buffer (bytes +=)"
        return "S3: requests, HTTP and botocore"
    if _has(frames, "parity/replay/spill.py"):
        return "parity: spill pickling (written and loaded)"
    if _has(frames, "parity/replay/bucket_step.py", "parity/sets/buckets.py"):
        return "parity: bucket step (rows routed, read back, sorted, written)"
    if _has(frames, "parity/compare"):
        return "parity: diff job (sets read, pairs compared)"
    if _has(frames, "parity/replay/read_step.py", "parity/capture"):
        return "parity: capture read and parsed"
    if _has(frames, "parity/"):
        return "parity: stages, transform, fingerprints, value parts"
    if _has(frames, "data_plane.py", "coder_impl", "coders.py", "grpc", "operations.py", "windowed_value",
            "DataInputOperation", "DataOutputOperation", "sdk_worker.py", "bundle_processor.py"):
        return "Fn API and Beam's harness (elements decoded and handed on, gRPC, control)"
    return "other"


def read_stacks(path: str, depth: int = 3) -> dict[int, collections.Counter]:
    """py-spy's raw output (`frame;frame;... count`, each process's frames after a `process PID:"..."` frame)
    as {harness pid: Counter((kind, ran the diff))}. Only the pool's grandchildren count: pool -> zygote ->
    harness (the pool's own samples and the zygote's imports at its start are not a check's); `depth` 1: every
    process's (py-spy on a DirectRunner check, `--subprocesses`: the check and its child)."""
    found: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            frames = stack.split(";")
            processes = [frame for frame in frames if frame.startswith("process ")]
            if len(processes) < depth:
                continue
            pid = int(processes[-1].split(":")[0].split()[1])
            frames = [frame for frame in frames if not frame.startswith("process ")]
            found[pid][(kind(frames), _has(frames, "parity/compare", "SummarizeDiff"))] += int(count)
    return found


def report(stacks: str, history: str | None, polled: str | None, depth: int = 3) -> str:
    found = read_stacks(stacks, depth)
    job_of = {pid: "the diff's job" if any(diff for (_, diff) in counts) else "the sides' jobs"
              for pid, counts in found.items()}
    lines = []
    by_job: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for pid, counts in found.items():
        for (name, _), count in counts.items():
            by_job[job_of[pid]][name] += count
            by_job["all harnesses"][name] += count
    for job in ("the sides' jobs", "the diff's job", "all harnesses"):
        counts = by_job.get(job)
        if not counts:
            continue
        busy = sum(count for name, count in counts.items() if name != "idle")
        processes = len(found) if job == "all harnesses" else sum(1 for pid in found if job_of[pid] == job)
        lines += ["", f"{job}: {processes} harness processes, {busy} busy samples (idle: {counts['idle']})", "",
                  "| kind | busy samples | share |", "|---|---|---|"]
        lines += [f"| {name} | {count} | {100 * count / busy:.1f}% |" for name, count in counts.most_common()
                  if name != "idle"]
    if history and polled:
        lines += ["", *polled_by_job(history, polled)]
    return "\n".join(lines)


def polled_by_job(history: str, polled: str) -> list[str]:
    """Each flink_s3 round of the history file's runs: its harnesses' polled CPU, the sides' jobs' and the diff's
    (a harness first seen once the diff's Flink job had started is the diff's)."""
    with open(polled, encoding="utf-8") as handle:
        harnesses = [json.loads(line) for line in handle]
    lines = []
    with open(history, encoding="utf-8") as handle:
        runs = [run for line in handle for run in json.loads(line)["runs"].get("flink_s3", [])]
    for run in runs:
        jobs = run.get("flink_jobs") or []
        if not jobs or not all(job.get("start_ms") for job in jobs):
            continue
        start = min(job["start_ms"] for job in jobs) / 1000 - 30
        end = max(job["end_ms"] for job in jobs) / 1000 + 30
        diff = min((job["start_ms"] for job in jobs if job["job"].startswith("parity-diff")), default=None)
        seen = [h for h in harnesses if start <= h["first"] <= end]
        if not seen:
            continue
        of_diff = [h for h in seen if diff is not None and h["first"] >= diff / 1000 - 1]
        sides = [h for h in seen if h not in of_diff]
        lines.append(f"round {run['round']}: harnesses polled: the sides' jobs {len(sides)} processes "
                     f"{sum(h['cpu'] for h in sides):.1f} CPU s, the diff's job {len(of_diff)} processes "
                     f"{sum(h['cpu'] for h in of_diff):.1f} CPU s (cluster_scale's sdk_workers: "
                     f"{run['cluster_cpu_s']['sdk_workers']})")
    return lines


def poll(out: str) -> None:
    """Until SIGTERM or SIGINT: every child of a harness zygote, its own CPU seconds (utime + stime) when last
    seen, twice a second; written to `out` as JSON lines at the end (a child's last half second may be missed)."""
    tick = os.sysconf("SC_CLK_TCK")
    seen: dict[int, dict] = {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    while not stop:
        stats, zygotes = {}, set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", encoding="utf-8") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    command = handle.read()
            except OSError:
                continue
            stats[int(name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
            if b"harness_zygote import main" in command:
                zygotes.add(int(name))
        now = time.time()
        for pid, (parent, cpu) in stats.items():
            if parent in zygotes:
                entry = seen.setdefault(pid, {"pid": pid, "first": now, "zygote": parent})
                entry["last"], entry["cpu"] = now, cpu
        time.sleep(0.5)
    with open(out, "w", encoding="utf-8") as handle:
        for entry in sorted(seen.values(), key=lambda e: e["first"]):
            handle.write(json.dumps(entry) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    polling = commands.add_parser("poll", help="poll the harnesses' CPU until stopped")
    polling.add_argument("out")
    reporting = commands.add_parser("report", help="the samples by job and kind")
    reporting.add_argument("stacks")
    reporting.add_argument("--history", help="cluster_scale's history.jsonl")
    reporting.add_argument("--polled", help="the poll's JSON lines")
    reporting.add_argument("--every-process", action="store_true",
                           help="every process's samples (a DirectRunner check), not only the pool's harnesses'")
    args = parser.parse_args(argv)
    if args.command == "poll":
        poll(args.out)
    else:
        print(report(args.stacks, args.history, args.polled, 1 if args.every_process else 3))
    return 0


if __name__ == "__main__":
    sys.exit(main())
