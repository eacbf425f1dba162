"""Issue 26's scale run: N taxi records per side through the cluster test bed, next to the DirectRunner.

    .venv/bin/python benchmarks/cluster_scale.py --records 10000000
    .venv/bin/python benchmarks/cluster_scale.py --records 100000 --rounds 1     # a quick look first

The cluster is the test bed of tests/cluster (tests/cluster/testbed.py), started here and stopped at the end:
moto's S3 server on 127.0.0.1, the standalone Flink 1.19 cluster with two TaskManagers (two slots each), the
Beam job server, and Beam's SDK worker pool run as another Unix user (`--environment_type=EXTERNAL`). The
capture (fixtures/taxi/generate.py, cached as benchmarks/run.py caches it) is uploaded to S3 once; both sides
of `pipelines/taxi/parity-fixed.yaml` read it, with the python transform (no TensorFlow), at parallelism 2;
`--out` is an `s3://` URL. The DirectRunner run reads the same records from the local disk into a local out
folder. Each run is its own `parity check` process: its wall time, CPU seconds (its own and its waited-for
children's: the second side's process) and peak memory (`os.wait4`'s ru_maxrss of the client process, and
the sampled RSS of the client with its child processes) are recorded, with the load average. The rounds are
fixed beforehand (`--rounds`), both contenders run in every round, and their order alternates.

The client's peak memory is the figure the issue bounds (1 GiB): the Flink processes, the job server, the
worker pool and the S3 server are the cluster's, not the client's, and are not counted.

Writes the run to benchmarks/results/history.md and history.jsonl (as benchmarks/run.py does) and prints it.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO, HERE]

import run as bench  # noqa: E402  (benchmarks/run.py: capture, config, process measurement, history)

from tests.cluster import testbed as bed  # noqa: E402

BUCKET = "parity"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, required=True, help="taxi records (both sides read them)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=1, help="rounds, fixed before the run")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--sdk-worker-parallelism", type=int, default=2,
                        help="SDK harnesses per TaskManager (Beam's --sdk_worker_parallelism): one per slot, since a "
                             "harness runs its bundles in threads of one Python process")
    parser.add_argument("--contenders", default="flink_s3,direct",
                        help="flink_s3 (the cluster, S3 in and out, both sides' jobs at once; the worker pool forks "
                             "its SDK harnesses from its zygote, the default), flink_s3_spawn (the same through a "
                             "second pool that starts each harness as a fresh interpreter: --harness_start spawn), "
                             "flink_s3_serial (the same as flink_s3, the sides' jobs one after the other: "
                             "--sides-at-once off), direct (DirectRunner, local disk)")
    parser.add_argument("--work", default=os.environ.get("PARITY_BENCH_WORK", "/tmp/parity-bench"),
                        help="where captures are generated and cached (as benchmarks/run.py)")
    parser.add_argument("--results", default=os.path.join(HERE, "results"))
    parser.add_argument("--keep", action="store_true", help="keep the test bed's logs (printed at the end)")
    return parser.parse_args(argv)


class Cluster:
    """The test bed's parts, started in the order tests/cluster/conftest.py starts them, stopped in reverse."""

    def __init__(self, base: str, spawn_pool: bool = False):
        from parity.replay.flink import JobServer, job_server_jar

        self.base = base
        self._stops: list = []
        try:
            jar = job_server_jar()
            self.s3 = bed.start_s3(base)
            self._stops.append(self.s3.stop)
            self.s3.client().create_bucket(Bucket=BUCKET)
            self.pool = bed.start_worker_pool(os.path.join(base, "worker"))
            self._stops.append(self.pool.stop)
            self.spawn_pool = None
            if spawn_pool:  # a fresh interpreter per harness, as before the zygote
                self.spawn_pool = bed.start_worker_pool(os.path.join(base, "worker-spawn"), harness_start="spawn")
                self._stops.append(self.spawn_pool.stop)
            self.flink = bed.start_flink(os.path.join(base, "flink"))
            self._stops.append(self.flink.stop)
            self.server = JobServer(jar, self.flink.master)
            self.server.start()
            self._stops.append(self.server.stop)
        except BaseException:
            self.stop()
            raise

    def options(self, parallelism: int, sdk_worker_parallelism: int, spawn: bool = False) -> list[str]:
        pool = self.spawn_pool if spawn else self.pool
        return [f"--job_endpoint={self.server.endpoint}", *pool.options, f"--parallelism={parallelism}",
                f"--sdk_worker_parallelism={sdk_worker_parallelism}", *self.s3.options]

    def upload(self, files: list[str], prefix: str) -> str:
        """The capture files as objects under `prefix` (once: an object already there is kept); their glob."""
        client = self.s3.client()
        for path in files:
            key = f"{prefix}/{os.path.basename(path)}"
            bench.log(f"uploading {path} -> s3://{BUCKET}/{key}")
            client.upload_file(path, BUCKET, key)
        return f"s3://{BUCKET}/{prefix}/trips-*.jsonl"

    def stop(self) -> None:
        for stop in reversed(self._stops):
            try:
                stop()
            except Exception as exc:  # stop what can be stopped
                bench.log(f"stopping a test bed part: {exc}")
        self._stops.clear()


def _shared_config(base: str, files: list[str], capture: str) -> str:
    """The python-transform taxi config with its capture at `capture`, in a folder the worker user can read
    (its modules are imported on the workers: they must be there, as on a real cluster's worker image)."""
    config = bench.write_config(os.path.join(base, "shared"), files, "python", variant="fixed")
    import yaml

    with open(config, encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    doc["capture"]["path"] = capture
    with open(config, "w", encoding="utf-8") as handle:
        yaml.safe_dump(doc, handle, sort_keys=False, allow_unicode=True)
    for folder in (os.path.join(base, "shared"), os.path.dirname(config)):
        os.chmod(folder, 0o755)
    for name in os.listdir(os.path.dirname(config)):
        os.chmod(os.path.join(os.path.dirname(config), name), 0o644)
    return config


# Where a run's CPU went: each process of the machine by what its command line says it is. A process's own and its
# reaped children's CPU seconds count (the worker pool reaps the SDK harnesses it stops).
PARTS = (("s3_server", ("moto.server",)), ("flink_taskmanagers", ("TaskManagerRunner",)),
         ("flink_jobmanager", ("StandaloneSessionClusterEntrypoint",)),
         ("job_server", ("job-server", "JobServerDriver")),
         ("sdk_workers", ("worker_pool", "SdkHarness", "harness_zygote")))  # a forked harness: its zygote's command


def _process_cpu() -> dict[int, tuple[str, float]]:
    """Every process's (part, CPU seconds with its reaped children), for the parts in PARTS."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                command = handle.read().decode(errors="replace")
            with open(f"/proc/{name}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        part = next((part for part, marks in PARTS if any(mark in command for mark in marks)), None)
        if part is not None:
            found[int(name)] = (part, sum(int(f) for f in fields[11:15]) / tick)
    return found


def _machine_cpu() -> float:
    """CPU seconds the whole machine has spent busy since boot (all CPUs, /proc/stat)."""
    with open("/proc/stat", encoding="utf-8") as handle:
        fields = [int(f) for f in handle.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def _cpu_spent(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    spent: dict[str, float] = {part: 0.0 for part, _ in PARTS}
    for pid, (part, seconds) in after.items():
        earlier = before.get(pid)
        spent[part] += seconds - (earlier[1] if earlier and earlier[0] == part else 0.0)
    return {part: round(seconds, 1) for part, seconds in spent.items()}


def _run(name: str, command: list[str], log_path: str) -> dict[str, Any]:
    load = os.getloadavg()[0]
    bench.log(f"{name}: {' '.join(command)}")
    processes, machine = _process_cpu(), _machine_cpu()
    result = bench.run_process(command, log_path, env=dict(os.environ, PARITY_PROGRESS="off"))
    result["machine_cpu_s"] = round(_machine_cpu() - machine, 1)
    result["cluster_cpu_s"] = _cpu_spent(processes, _process_cpu())
    result["load_before"] = round(load, 2)
    if result["exit"] not in (0, 1):
        raise SystemExit(f"{name} failed (exit {result['exit']}); its output: {log_path}\n{bench._tail(log_path, 30)}")
    bench.log(f"{name}: {result['process_s']:.1f} s wall, {result['cpu_s']:.1f} CPU s, "
              f"peak RSS (client and children) {result['peak_rss_mib']:.0f} MiB; machine {result['machine_cpu_s']} "
              f"CPU s; cluster {result['cluster_cpu_s']}")
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run stops its test bed too (finally)
    contenders = [c for c in args.contenders.split(",") if c]
    files = bench.ensure_capture(args.records, args.seed, args.work)
    base = tempfile.mkdtemp(prefix="parity-scale-")
    os.chmod(base, 0o755)
    parity = os.path.join(os.path.dirname(sys.executable), "parity")
    runs: dict[str, list[dict]] = {name: [] for name in contenders}
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    state_before = bench.machine_state()
    cluster = Cluster(base, spawn_pool="flink_s3_spawn" in contenders) \
        if any(name.startswith("flink_s3") for name in contenders) else None
    try:
        capture = cluster.upload(files, f"capture-n{args.records}-s{args.seed}") if cluster else None
        for round_index in range(args.rounds):
            for name in bench.round_order(contenders, round_index + 1):
                out_local = os.path.join(base, f"out-{name}-{round_index}")
                if name.startswith("flink_s3"):
                    config = _shared_config(base, files, capture)
                    # the sides at once is asked for: with a given job server and no --flink_master, auto cannot
                    # read Flink's free slots and would replay them one after the other
                    command = [parity, "check", config, "--runner", "FlinkRunner",
                               "--sides-at-once", "off" if name == "flink_s3_serial" else "on",
                               "--out", f"s3://{BUCKET}/out-{name}-{round_index}", "--",
                               *cluster.options(args.parallelism, args.sdk_worker_parallelism,
                                                spawn=name == "flink_s3_spawn")]
                else:
                    config = bench.write_config(os.path.join(base, "direct"), files, "python", variant="fixed")
                    command = [parity, "check", config, "--out", out_local]
                jobs_before = {job["jid"] for job in cluster.flink.get("/jobs/overview")["jobs"]} if cluster else set()
                run = _run(name, command, os.path.join(base, f"{name}-{round_index}.log"))
                run.update(round=round_index + 1, timings=_timings(cluster, name, round_index, out_local))
                if name.startswith("flink_s3"):
                    run["flink_jobs"] = _flink_steps(cluster, jobs_before)
                runs[name].append(run)
                shutil.rmtree(out_local, ignore_errors=True)
    finally:
        if cluster:
            cluster.stop()
        if args.keep:
            bench.log(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    result = {"benchmark": "cluster_scale", "records": args.records, "seed": args.seed, "rounds": args.rounds,
              "parallelism": args.parallelism, "sdk_worker_parallelism": args.sdk_worker_parallelism,
              "started": started, "machine_before": state_before,
              "machine_after": bench.machine_state(), "runs": runs, "summary": _summary(runs)}
    text = _markdown(result)
    print(text)
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "history.md"), "a", encoding="utf-8") as handle:
        handle.write("\n" + text)
    with open(os.path.join(args.results, "history.jsonl"), "a", encoding="utf-8") as handle:
        handle.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


def _flink_steps(cluster: Cluster, before: set[str], top: int = 6) -> list[dict[str, Any]]:
    """Where the cluster's time went by step: each new job's (one per side) longest-running vertices, as Flink's
    REST API reports them (a vertex is a chain of fused Beam steps; its duration includes waiting for input)."""
    steps = []
    for job in cluster.flink.get("/jobs/overview")["jobs"]:
        if job["jid"] in before:
            continue
        detail = cluster.flink.get(f"/jobs/{job['jid']}")
        vertices = sorted(detail.get("vertices", []), key=lambda v: -v.get("duration", 0))[:top]
        steps.append({"job": job["name"], "seconds": round(job.get("duration", 0) / 1000, 1),
                      "start_ms": job.get("start-time"), "end_ms": job.get("end-time"),
                      "vertices": [{"name": v["name"][:160], "seconds": round(v.get("duration", 0) / 1000, 1),
                                    "parallelism": v.get("parallelism")} for v in vertices]})
    return sorted(steps, key=lambda s: s["job"])


def _timings(cluster: Cluster | None, name: str, round_index: int, out_local: str) -> dict[str, Any]:
    """The check's own timings.json (each side's replay, the diff): where the wall time went."""
    try:
        if name.startswith("flink_s3"):
            body = cluster.s3.client().get_object(Bucket=BUCKET, Key=f"out-{name}-{round_index}/timings.json")["Body"]
            return json.loads(body.read())
        with open(os.path.join(out_local, "timings.json"), encoding="utf-8") as handle:
            return json.load(handle)
    except Exception as exc:  # noqa: BLE001 - a figure missing from the results, not a failed run
        return {"error": str(exc)}


def _summary(runs: dict[str, list[dict]]) -> dict[str, Any]:
    summary = {}
    for name, rounds in runs.items():
        walls = [r["process_s"] for r in rounds]
        summary[name] = {"wall_median_s": round(statistics.median(walls), 1),
                         "wall_spread_s": round(max(walls) - min(walls), 1),
                         "cpu_median_s": round(statistics.median(r["cpu_s"] for r in rounds), 1),
                         "peak_rss_max_mib": max(r["peak_rss_mib"] for r in rounds)}
    if "flink_s3" in summary and "direct" in summary:
        summary["flink_over_direct_wall"] = round(summary["flink_s3"]["wall_median_s"]
                                                  / summary["direct"]["wall_median_s"], 2)
    if "flink_s3_serial" in summary and "direct" in summary:
        summary["flink_serial_over_direct_wall"] = round(summary["flink_s3_serial"]["wall_median_s"]
                                                         / summary["direct"]["wall_median_s"], 2)
    for name in ("flink_s3", "flink_s3_spawn", "flink_s3_serial"):
        harness = [r["cluster_cpu_s"]["sdk_workers"] for r in runs.get(name, []) if "cluster_cpu_s" in r]
        if harness and "direct" in summary:
            summary[f"{name}_sdk_workers_cpu_median_s"] = round(statistics.median(harness), 1)
            summary[f"{name}_sdk_workers_cpu_over_direct_cpu"] = round(statistics.median(harness)
                                                                       / summary["direct"]["cpu_median_s"], 2)
    return summary


def _markdown(result: dict[str, Any]) -> str:
    state = result["machine_before"]
    lines = [f"## cluster_scale: {result['records']:,} records per side, parallelism {result['parallelism']} "
             f"({result.get('sdk_worker_parallelism', 1)} SDK harnesses per TaskManager), "
             f"{result['rounds']} round(s), {result['started']}", "",
             f"commit {state.get('commit')}, {state.get('cpus')} CPUs, load before "
             f"{state.get('load_average_before')}, after {result['machine_after'].get('load_average_before')}", "",
             "| contender | round | wall s | client CPU s | client peak RSS MiB (with children) | machine CPU s | "
             "cluster CPU s by part | check timings s | load before |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, rounds in result["runs"].items():
        for run in rounds:
            cluster = ", ".join(f"{k} {v}" for k, v in run.get("cluster_cpu_s", {}).items() if v)
            timings = ", ".join(f"{k.replace('_seconds', '')} {v}" for k, v in sorted(run.get("timings", {}).items())
                                if k.endswith("_seconds"))
            lines.append(f"| {name} | {run['round']} | {run['process_s']:.1f} | {run['cpu_s']:.1f} | "
                         f"{run['peak_rss_mib']:.0f} | {run.get('machine_cpu_s', '')} | {cluster} | {timings} | "
                         f"{run['load_before']} |")
    for name, rounds in result["runs"].items():
        for run in rounds:
            jobs = sorted((job for job in run.get("flink_jobs", []) if job.get("start_ms") and job.get("end_ms")),
                          key=lambda job: job["start_ms"])
            if len(jobs) == 2:  # by Flink's JobManager clock: how long the two sides' jobs ran at the same time
                together = max(0, min(jobs[0]["end_ms"], jobs[1]["end_ms"]) - jobs[1]["start_ms"]) / 1000
                lines += ["", f"{name} round {run['round']}: the sides' Flink jobs ran {jobs[0]['seconds']} s and "
                              f"{jobs[1]['seconds']} s, {together:.1f} s of it at the same time"]
            for job in run.get("flink_jobs", []):
                lines += ["", f"{name} round {run['round']}, Flink job {job['job']}: {job['seconds']} s; its longest "
                              f"vertices (fused steps, waiting included):", ""]
                lines += [f"- {v['seconds']} s (parallelism {v['parallelism']}): {v['name']}" for v in job["vertices"]]
    lines += ["", "```", json.dumps(result["summary"], indent=2, sort_keys=True), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
