"""Issue-5 benchmark harness: parity against its floor and the alternatives, side by side, in one command.

    .venv/bin/python benchmarks/run.py --records 100000
    .venv/bin/python benchmarks/run.py --records 1000000 --repeat 2 --once naive,tfdv
    .venv/bin/python benchmarks/run.py --records 1000000 --transform python --contenders floor,parity

Generates (once, cached by records and seed) a taxi capture with fixtures/taxi/generate.py, writes a parity
config equal to pipelines/taxi/parity.yaml pointing at it (absolute paths, preprocess.py copied beside it),
then runs every contender on the same records on the same runner (Beam's FnApiRunner), each in its own
process, alternating contenders round by round (`--repeat`) so they share the machine's load; medians are
reported. Peak memory is the larger of the contender process's peak RSS (`os.wait4` rusage) and the sum of
its and its descendants' RSS, sampled twice a second.

Writes `benchmarks/results/<records>[-python][-<variant>].md` and `.json` (the newest run of that size and variant)
and appends the run to `benchmarks/results/history.md` and `history.jsonl`. See benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import copy
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
CONTENDERS = ("floor", "floor_concurrent", "parity", "parity_serial", "parity_flink", "naive", "tfdv", "kernel")
DEFAULT_CONTENDERS = ("floor", "parity", "naive", "tfdv", "kernel")
DEFAULT_TFDV_PYTHON = os.path.join(REPO, ".bench-venvs", "tfdv", "bin", "python")
CHUNK = 1_000_000  # records per generated file (the generator holds a file's records in memory)

TARGETS = {
    "parity_over_floor": 1.25,
    "fingerprint_diff_speedup_vs_naive": 10.0,
    "tfdv_over_parity": 3.0,
    "tfdv_cpu_over_parity_cpu": 2.0,  # issue 27, at equal cores, on the 25% divergence variant
    "kernel_vs_plain_xxh3": 1.0,
    "peak_rss_gib_at_1m": 3.0,
    "time_100k_to_1m": 11.0,
    "peak_rss_gib_python_10m": 4.0,
    "flink_over_direct": 2.5,  # issue 27: the embedded Flink check against the DirectRunner check, wall time
}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ------------------------------------------------------------------------------------------------ inputs


def ensure_capture(records: int, seed: int, work: str) -> list[str]:
    """The capture files of (records, seed), generated once: one file up to 1M records, then 1M per file
    (file i > 0 drawn from seed `seed * 1000 + i`; trip ids are 60-63-bit random, so they stay unique)."""
    folder = os.path.join(work, "captures", f"n{records}-s{seed}")
    marker = os.path.join(folder, "COMPLETE")
    chunks = [(i, min(CHUNK, records - i * CHUNK)) for i in range(max(1, -(-records // CHUNK)))]
    files = [os.path.join(folder, f"trips-{i:03d}.jsonl") for i, _ in chunks]
    if os.path.exists(marker):
        return files
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for (i, count), path in zip(chunks, files):
        log(f"generating {count} records (seed {seed if i == 0 else seed * 1000 + i}) -> {path}")
        subprocess.run([sys.executable, os.path.join(REPO, "fixtures", "taxi", "generate.py"),
                        "--records", str(count), "--seed", str(seed if i == 0 else seed * 1000 + i),
                        "--out", path], check=True)
    with open(marker, "w", encoding="utf-8") as handle:
        handle.write(f"{records} {seed}\n")
    return files


# a divergence sweep: the fixed config, with this share (%) of the production side's records planted to diverge
SWEEP = {"fixed": 0, "diverged1": 1, "diverged25": 25, "diverged100": 100}
VARIANTS = ("bug", *SWEEP)
PLANTED_COMPANY = "Planted Cab Co"


def planted(trip_id: int, percent: int) -> bool:
    """Whether a record is among the `percent` % planted to diverge: by its key's hash, so every contender and
    every run plants the same records."""
    import xxhash

    return xxhash.xxh3_64_intdigest(str(trip_id).encode()) % 100 < percent


def planted_capture(files: list[str], percent: int) -> list[str]:
    """The production side's capture of a sweep level: the same records, in the same order, with `company` (a
    field no aggregate or grouping key reads, so the divergence stays in its own records and does not spread
    through an hour's aggregates) set to a name the offline vocabulary lacks on `percent` % of them. Written
    once beside the capture (cached).

    At 0% too: a file of its own, written the same way, so that the levels differ in the share planted and in
    nothing else. With the offline side's own file instead, the clean check read one file for both sides, and
    ran 0.7 and 2.7 s faster (1.3 and 1.5 s less system CPU) than with a copy of it (two rounds at 1,000,000
    records, benchmarks/RESULTS.md): an advantage of the 0% level that had nothing to do with divergence."""
    import orjson

    folder = os.path.join(os.path.dirname(files[0]), f"production-d{percent}")
    marker = os.path.join(folder, "COMPLETE")
    out = [os.path.join(folder, os.path.basename(path)) for path in files]
    if os.path.exists(marker):
        return out
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    count = 0
    for source, target in zip(files, out):
        log(f"planting {percent}% divergent records -> {target}")
        with open(source, "rb") as reader, open(target, "wb") as writer:
            for line in reader:
                record = orjson.loads(line)
                if planted(record["trip_id"], percent):
                    record["company"] = PLANTED_COMPANY
                    count += 1
                writer.write(orjson.dumps(record) + b"\n")
    with open(marker, "w", encoding="utf-8") as handle:
        handle.write(f"{percent} {count}\n")
    return out


def production_capture(files: list[str], variant: str) -> list[str]:
    """The production side's capture: a sweep level's own (`planted_capture`), else the offline side's."""
    return planted_capture(files, SWEEP[variant]) if variant in SWEEP else files


def write_config(run_dir: str, files: list[str], transform: str, variant: str = "bug",
                 production_files: list[str] | None = None) -> str:
    """pipelines/taxi/parity.yaml (`variant` other than bug: parity-fixed.yaml) with the capture path made
    absolute, the production side's capture overridden for a sweep level, its modules copied beside it, and
    without its `model:`."""
    import yaml

    source = os.path.join(REPO, "pipelines", "taxi")
    name = "parity.yaml" if variant == "bug" else "parity-fixed.yaml"
    with open(os.path.join(source, name), encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    # the model stage (issue 42) has its own benchmark (model_stage.py): this one's figures stay comparable with
    # its history, and the python variant's features are not the model's inputs
    config.pop("model", None)
    folder = os.path.dirname(files[0])
    config["capture"]["path"] = files[0] if len(files) == 1 else os.path.join(folder, "trips-*.jsonl")
    if production_files and production_files != files:
        planted_folder = os.path.dirname(production_files[0])
        config["sides"]["production"]["capture"] = {
            "path": production_files[0] if len(production_files) == 1 else os.path.join(planted_folder,
                                                                                        "trips-*.jsonl")}
    if transform == "python":
        config["name"] = config["name"] + "-python"
        for side in config["sides"].values():
            side["transform"] = {"python": "python_features:python_features"}
    config_dir = os.path.join(run_dir, "config")
    os.makedirs(config_dir, exist_ok=True)
    for module in ("preprocess.py", "python_features.py"):
        shutil.copy(os.path.join(source, module), os.path.join(config_dir, module))
    path = os.path.join(config_dir, "parity.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(config, handle, sort_keys=False, allow_unicode=True)
    return path


# --------------------------------------------------------------------------------------------- processes


def _rss_kib(pid: int) -> int:
    """The resident memory of a process and all its descendants together (KiB)."""
    total = 0
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    total = int(line.split()[1])
                    break
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                total += sum(_rss_kib(int(child)) for child in handle.read().split())
    except (OSError, ValueError):
        pass
    return total


def run_process(command: list[str], log_path: str, env: dict | None = None,
                max_rss_gib: float = 0.0) -> dict[str, Any]:
    """Runs a command to completion; returns its wall seconds, exit code and peak RSS (MiB, with descendants).

    With `max_rss_gib`, the process's RSS is polled twice a second and the process is killed (SIGKILL, by
    its pid) when it exceeds the limit, so that one contender cannot exhaust a shared machine's memory;
    the result then says `killed_over_rss_gib`.
    """
    started = time.monotonic()
    killed = False
    with open(log_path, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        limit_kib = int(max_rss_gib * 1024 * 1024)
        timeline: list[list[float]] = []  # [seconds, RSS MiB] every 5 s: where the memory goes
        tree_peak_kib = 0  # the process and its descendants together, sampled twice a second
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss = _rss_kib(proc.pid)
            tree_peak_kib = max(tree_peak_kib, rss)
            elapsed = time.monotonic() - started
            if not timeline or elapsed - timeline[-1][0] >= 5:
                timeline.append([round(elapsed, 1), round(rss / 1024)])
            if limit_kib and not killed and rss > limit_kib:
                proc.kill()
                killed = True
            time.sleep(0.5)
    proc.returncode = os.waitstatus_to_exitcode(status)  # already reaped: keep Popen from waiting again
    # the larger of the process's own peak and its tree's sampled one (parity check's second side runs in a
    # child process: the two together are what the machine must hold)
    peak_kib = max(usage.ru_maxrss, tree_peak_kib)
    result = {"process_s": round(time.monotonic() - started, 3), "exit": proc.returncode,
              "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),  # with the children it waited for
              "peak_rss_mib": round(peak_kib / 1024, 1), "rss_timeline_mib": timeline}
    if killed:
        result["killed_over_rss_gib"] = max_rss_gib
    return result


def _tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return ""


def _partial_parity_timings(work: str) -> dict[str, Any]:
    """The replay times of the sides a failed (or killed) parity run finished."""
    out = {}
    for side in ("offline", "production"):
        path = os.path.join(work, "sides", side, "timings.json")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                out[f"replay_{side}_seconds"] = json.load(handle).get("replay_seconds")
    return out


class Harness:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.files = ensure_capture(args.records, args.seed, args.work)
        self.run_dir = os.path.join(args.work, "runs",
                                    f"n{args.records}-s{args.seed}-{args.transform}-{args.variant}")
        shutil.rmtree(self.run_dir, ignore_errors=True)
        os.makedirs(self.run_dir)
        self.production_files = production_capture(self.files, args.variant)
        self.config = write_config(self.run_dir, self.files, args.transform, args.variant, self.production_files)
        self.runs: dict[str, list[dict]] = {c: [] for c in args.contenders}
        self.examples_dir: str | None = None
        self.kept_parity_out: str | None = None
        self.env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
        self.env.pop("PYTHONPATH", None)

    def _scratch(self, name: str, round_index: int) -> tuple[str, str, str]:
        work = os.path.join(self.run_dir, f"{name}-r{round_index}")
        return work, os.path.join(self.run_dir, f"{name}-r{round_index}.result.json"), \
            os.path.join(self.run_dir, f"{name}-r{round_index}.log")

    def command(self, name: str, work: str, result: str) -> list[str]:
        a = self.args
        py = sys.executable
        common = ["--config", self.config, "--work", work, "--result", result]
        production = ["--production-files", *self.production_files] if self.production_files != self.files else []
        if name in ("floor", "floor_concurrent", "parity", "parity_serial", "parity_flink", "kernel"):
            return [py, os.path.join(HERE, "contenders.py"), name, *common, "--transform", a.transform,
                    "--kernel-records", str(a.kernel_records), "--files", *self.files, *production]
        if name == "naive":
            return [py, os.path.join(HERE, "naive.py"), *common, "--files", *self.files, *production]
        if name == "tfdv":
            assert self.examples_dir
            return [a.tfdv_python, os.path.join(HERE, "tfdv_skew.py"), "--work", work, "--result", result,
                    "--base", os.path.join(self.examples_dir, "offline.tfrecord"),
                    "--test", os.path.join(self.examples_dir, "production.tfrecord")]
        raise ValueError(name)

    def ensure_examples(self) -> None:
        """tf.Examples of both sides' final features (from a parity run's values) for TFDV: not timed."""
        if self.examples_dir:
            return
        parity_out = self.kept_parity_out
        if parity_out is None:
            log("tfdv: running parity once (not timed) for the two sides' final features")
            parity_out, result, log_path = self._scratch("parity-for-tfdv", 0)
            done = run_process(self.command("parity", parity_out, result), log_path, self.env)
            if done["exit"] != 0:
                raise RuntimeError(f"parity run for TFDV's inputs failed:\n{_tail(log_path)}")
        dest = os.path.join(self.run_dir, "tfexamples")
        result = os.path.join(self.run_dir, "export.result.json")
        log_path = os.path.join(self.run_dir, "export.log")
        done = run_process([sys.executable, os.path.join(HERE, "contenders.py"), "export", "--config",
                            self.config, "--work", dest, "--result", result, "--parity-out", parity_out],
                           log_path, self.env)
        if done["exit"] != 0:
            raise RuntimeError(f"exporting tf.Examples failed:\n{_tail(log_path)}")
        with open(result, encoding="utf-8") as handle:
            log(f"tfdv: exported {json.load(handle)['examples']} tf.Examples")
        self.examples_dir = dest
        shutil.rmtree(parity_out, ignore_errors=True)
        self.kept_parity_out = None

    def run_one(self, name: str, round_index: int, position: int = 0) -> None:
        a = self.args
        if name == "tfdv":
            if not os.path.exists(a.tfdv_python):
                if not self.runs[name]:
                    self.runs[name].append({"skipped": f"no TFDV interpreter at {a.tfdv_python}"})
                    log(f"tfdv: skipped (no {a.tfdv_python}; see benchmarks/README.md)")
                return
            self.ensure_examples()
        work, result, log_path = self._scratch(name, round_index)
        log(f"round {round_index}: {name} ...")
        load = _load_average()
        done = run_process(self.command(name, work, result), log_path, self.env, a.max_rss_gib)
        entry: dict[str, Any] = {"round": round_index, "position": position, "load_before": load, **done}
        if done["exit"] == 0 and os.path.exists(result):
            with open(result, encoding="utf-8") as handle:
                entry.update(json.load(handle))
        else:
            entry["error"] = (f"killed: RSS above {a.max_rss_gib} GiB after {done['process_s']:.0f} s\n"
                              if "killed_over_rss_gib" in done else "") + _tail(log_path)
            if name == "parity":
                entry["partial_timings"] = _partial_parity_timings(work)
            log(f"{name} FAILED (exit {done['exit']}); log {log_path}:\n{entry['error']}")
        self.runs[name].append(entry)
        if "wall_s" in entry:
            log(f"round {round_index}: {name} wall {entry['wall_s']:.1f} s, process {done['process_s']:.1f} s, "
                f"peak RSS {done['peak_rss_mib']:.0f} MiB")
        sides_written = all(os.path.exists(os.path.join(work, "sides", side, "manifest.json"))
                            for side in ("offline", "production"))
        keep = name == "parity" and "tfdv" in a.contenders and self.examples_dir is None \
            and self.kept_parity_out is None and sides_written
        if keep:
            self.kept_parity_out = work
        elif not a.keep:
            shutil.rmtree(work, ignore_errors=True)

    def run(self) -> dict[str, Any]:
        self.start()
        for round_index in range(1, self.args.repeat + 1):  # the number of rounds is fixed before the run starts
            self.run_round(round_index)
        return self.finish()

    def start(self) -> None:
        self.machine = machine_state()  # before the first round: the commit, the packages, the CPUs, the load

    def run_round(self, round_index: int) -> None:
        a = self.args
        for position, name in enumerate(round_order(a.contenders, round_index)):
            if round_index > 1 and name in a.once:
                continue
            self.run_one(name, round_index, position)

    def finish(self) -> dict[str, Any]:
        if self.kept_parity_out and not self.args.keep:
            shutil.rmtree(self.kept_parity_out, ignore_errors=True)
        result = summarize(self.args, self.runs)
        result["machine"] = self.machine
        result["machine"]["load_average_after"] = _load_average()
        return result


def round_order(contenders: list[str], round_index: int) -> list[str]:
    """The contenders of a round, rotated by one place each round: none always runs first (cold caches) or
    last (a machine warmed, or loaded, by the others)."""
    shift = (round_index - 1) % len(contenders) if contenders else 0
    return contenders[shift:] + contenders[:shift]


def _load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def machine_state() -> dict[str, Any]:
    """What a results file must record to be compared with another: the commit (and whether the tree had
    uncommitted changes), the versions of the packages the contenders run on, the CPUs this process may use,
    and the load average (1, 5, 15 minutes) when the run started."""
    from importlib import metadata

    def git(*command: str) -> str:
        done = subprocess.run(["git", *command], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    packages = {}
    for package in ("apache-beam", "tensorflow", "tensorflow-transform", "tfx-bsl", "pyarrow", "numpy", "xxhash"):
        try:
            packages[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            packages[package] = None
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    return {"commit": git("rev-parse", "HEAD") or None, "uncommitted_changes": bool(git("status", "--porcelain")),
            "python": sys.version.split()[0], "packages": packages, "cpus": cpus, "cpu_model": _cpu_model(),
            "load_average_before": _load_average()}


def _cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo): the figures of two machines with as many CPUs are not alike (a pass on
    an AMD EPYC ran the same contenders at other ratios than the passes before it)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


# ------------------------------------------------------------------------------------------------ tables


def _round(value: float | None) -> float | None:  # None: no round recorded it (CPU seconds are new)
    return None if value is None else round(value, 3)


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


def summarize(args: argparse.Namespace, runs: dict[str, list[dict]]) -> dict[str, Any]:
    n = args.records
    rows: dict[str, dict[str, Any]] = {}
    for name, entries in runs.items():
        ok = [e for e in entries if "wall_s" in e]
        row: dict[str, Any] = {"runs": len(ok), "failed": sum(1 for e in entries if "error" in e)}
        failures = [{k: e[k] for k in ("round", "process_s", "peak_rss_mib", "killed_over_rss_gib",
                                        "partial_timings") if k in e} | {"error": e["error"].strip()[:300]}
                    for e in entries if "error" in e]
        if failures:
            row["failures"] = failures
        if entries and "skipped" in entries[0]:
            row["skipped"] = entries[0]["skipped"]
        if ok:
            wall = _median(ok, "wall_s")
            cpus = [e["cpu_s"] for e in ok if isinstance(e.get("cpu_s"), (int, float))]
            row.update({"wall_s": round(wall, 3), "wall_s_runs": [e["wall_s"] for e in ok],
                        "wall_s_spread": round(max(e["wall_s"] for e in ok) - min(e["wall_s"] for e in ok), 3),
                        "process_s": round(_median(ok, "process_s"), 3),
                        "cpu_s": _round(_median(ok, "cpu_s")), "cpu_s_runs": cpus,
                        "cpu_s_spread": round(max(cpus) - min(cpus), 3) if cpus else None,
                        "peak_rss_mib": max(e["peak_rss_mib"] for e in ok)})
            if name != "kernel":
                row["records_per_s"] = round(n / wall) if wall else None
        if name == "kernel" and ok:
            rps: dict[str, list[float]] = {}
            for e in ok:
                for k, v in e["records_per_second"].items():
                    rps.setdefault(k, []).append(v)
            row["kernel_records"] = ok[0]["records"]
            row["hashes_per_record_stages"] = ok[0]["hashes_per_record_stages"]
            row["kernel_records_per_s"] = {k: round(statistics.median(v)) for k, v in rps.items()}
            for ratio in _KERNEL_RATIOS:
                if all(ratio in e for e in ok):
                    row[ratio] = round(statistics.median(e[ratio] for e in ok), 4)
        if name == "naive" and ok:
            row["outcome"] = ok[-1].get("outcome")
        if name in ("parity", "parity_serial", "parity_flink", "floor", "floor_concurrent") and ok:
            row["timings"] = ok[-1].get("timings")
        if name in ("parity", "parity_serial", "parity_flink") and ok:
            row["outcome"] = {k: v for k, v in (ok[-1].get("records") or {}).items() if isinstance(v, int)}
        if name == "tfdv" and ok:
            row["outcome"] = ok[-1].get("outcome")
        rows[name] = row
    ratios = _ratios(rows)
    result = {"records": n, "seed": args.seed, "transform": args.transform, "variant": args.variant,
              "repeat": args.repeat,
              "once": sorted(args.once), "runner": "FnApiRunner (in process)", "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "contenders": rows, "ratios": ratios,
              "runs": runs}
    result["scaling"] = _scaling(args, rows)
    result["targets"] = _targets(args, rows, ratios, result["scaling"])
    return result


def _ratios(rows: dict[str, dict]) -> dict[str, Any]:
    def wall(name: str) -> float | None:
        return rows.get(name, {}).get("wall_s")

    floor, par, naive, tfdv = wall("floor"), wall("parity"), wall("naive"), wall("tfdv")
    out: dict[str, Any] = {}
    if floor:
        for name in ("parity", "naive", "tfdv"):
            if wall(name):
                out[f"{name}_over_floor"] = round(wall(name) / floor, 3)
    if floor and par:
        out["parity_minus_floor_s"] = round(par - floor, 3)
    if floor and naive:
        out["naive_minus_floor_s"] = round(naive - floor, 3)
    if floor and par and naive:
        # the fingerprint+diff part of each: a ratio of parts only where parity's part stands out of the noise
        out["fingerprint_diff_speedup_vs_naive"] = _part_ratio(naive - floor, par - floor,
                                                               _noise(rows, ("floor", "parity"), "wall_s_spread"))
    if par and tfdv:
        out["tfdv_over_parity"] = round(tfdv / par, 3)
    # like with like: parity's two sides at once against the concurrent floor, one after the other against the
    # serial one, in wall time and in CPU seconds
    for ours, theirs in (("parity", "floor_concurrent"), ("parity_serial", "floor")):
        for unit in ("wall_s", "cpu_s"):
            a, b = rows.get(ours, {}).get(unit), rows.get(theirs, {}).get(unit)
            if a and b:
                out[f"{ours}_over_{theirs}_{unit.removesuffix('_s')}"] = round(a / b, 3)
    # the embedded Flink check (its job server started by the check, counted) against the DirectRunner check
    for unit in ("wall_s", "cpu_s"):
        a, b = rows.get("parity_flink", {}).get(unit), rows.get("parity", {}).get(unit)
        if a and b:
            out[f"parity_flink_over_parity_{unit.removesuffix('_s')}"] = round(a / b, 3)
    # the same in CPU seconds: parity's second side runs in a child process on the other core, which the
    # wall time hides and the CPU time does not (CPU counts whole processes, imports included)
    cpu = {name: rows.get(name, {}).get("cpu_s") for name in ("floor", "parity", "naive", "tfdv")}
    if cpu["floor"] and cpu["parity"]:
        out["parity_cpu_over_floor_cpu"] = round(cpu["parity"] / cpu["floor"], 3)
    if cpu["tfdv"] and cpu["parity"]:  # TFDV with as many worker processes as parity has cores
        out["tfdv_cpu_over_parity_cpu"] = round(cpu["tfdv"] / cpu["parity"], 3)
    if cpu["floor"] and cpu["parity"] and cpu["naive"]:
        out["fingerprint_diff_speedup_vs_naive_cpu"] = _part_ratio(
            cpu["naive"] - cpu["floor"], cpu["parity"] - cpu["floor"],
            _noise(rows, ("floor", "parity"), "cpu_s_spread"))
    kernel = rows.get("kernel", {})
    for ratio, key in _KERNEL_RATIOS.items():
        if ratio in kernel:
            out[key] = kernel[ratio]
    return out


NOT_MEASURABLE = "not measurable"


def _noise(rows: dict[str, dict], names: tuple[str, ...], spread: str) -> float | None:
    """The larger spread (max - min over the rounds) of the named contenders; None with one round each."""
    spreads = [rows.get(name, {}).get(spread) for name in names]
    if any(value is None for value in spreads) or all(rows.get(n, {}).get("runs", 0) < 2 for n in names):
        return None
    return max(spreads)  # type: ignore[type-var]


def _part_ratio(other: float, ours: float, noise: float | None) -> float | str:
    """other / ours, where `ours` is parity's part over the floor; "not measurable" when that part is not
    above zero, or is within the rounds' noise (never a clamped stand-in for it)."""
    if ours <= 0 or (noise is not None and ours <= noise):
        return NOT_MEASURABLE
    return round(other / ours, 2)


# the kernel contender's ratios (its row) -> their names among the run's ratios
_KERNEL_RATIOS = {
    "ratio_record": "kernel_vs_plain_xxh3_record",
    "ratio_stages": "kernel_vs_plain_xxh3_stages",
    "ratio_arrow": "kernel_vs_plain_xxh3_arrow",
    "ratio_c_record": "kernel_vs_c_xxh3_record",
    "ratio_c_arrow": "kernel_vs_c_xxh3_arrow",
}


def _result_path(results_dir: str, records: int, transform: str, ext: str, variant: str = "bug") -> str:
    suffix = ("" if transform == "tft" else f"-{transform}") + ("" if variant == "bug" else f"-{variant}")
    return os.path.join(results_dir, f"{records}{suffix}.{ext}")


def _scaling(args: argparse.Namespace, rows: dict[str, dict]) -> dict[str, Any]:
    """Time ratio against the other size's results (100k <-> 1M) when they are in the results folder."""
    out: dict[str, Any] = {}
    pairs = {1_000_000: 100_000, 10_000_000: 1_000_000}
    small = pairs.get(args.records)
    if small is None:
        return out
    path = _result_path(args.results, small, args.transform, "json", args.variant)
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as handle:
        other = json.load(handle)
    for name, row in rows.items():
        if name == "kernel":  # the kernel hashes the same --kernel-records at every size
            continue
        before = other.get("contenders", {}).get(name, {}).get("wall_s")
        if before and row.get("wall_s"):
            out[f"{name}_{small}_to_{args.records}"] = round(row["wall_s"] / before, 2)
    return out


def _targets(args: argparse.Namespace, rows: dict, ratios: dict, scaling: dict) -> list[dict[str, Any]]:
    """Each issue-5 target measured in this run: value, target, met, and by how much."""
    out = []

    def add(name: str, value: float | str | None, target: float, higher_is_better: bool, note: str = "") -> None:
        if value is None:
            return
        if isinstance(value, str):  # "not measurable": neither met nor missed
            out.append({"target": name, "value": value, "limit": target, "better": ">=" if higher_is_better
                        else "<=", "met": None, "margin": None, "note": note})
            return
        met = value >= target if higher_is_better else value <= target
        factor = (value / target) if higher_is_better else (target / value if value else float("inf"))
        out.append({"target": name, "value": value, "limit": target, "better": ">=" if higher_is_better
                    else "<=", "met": met, "margin": round(factor, 3), "note": note})

    n = args.records
    at = f" (at {n:,} records; the target is for 1,000,000)" if n != 1_000_000 else ""
    add("parity / floor wall time", ratios.get("parity_over_floor"), TARGETS["parity_over_floor"], False, at)
    for unit, label in (("wall", "wall time"), ("cpu", "CPU seconds")):
        add(f"parity (sides at once) / concurrent floor, {label}",
            ratios.get(f"parity_over_floor_concurrent_{unit}"), TARGETS["parity_over_floor"], False, at)
        add(f"parity (one side after the other) / serial floor, {label}",
            ratios.get(f"parity_serial_over_floor_{unit}"), TARGETS["parity_over_floor"], False, at)
    for unit, label in (("wall", "wall time"), ("cpu", "CPU seconds")):
        add(f"embedded Flink check / DirectRunner check, {label} (the job server's start counted)",
            ratios.get(f"parity_flink_over_parity_{unit}"), TARGETS["flink_over_direct"], False, at)
    add("(naive - floor) / (parity - floor)", ratios.get("fingerprint_diff_speedup_vs_naive"),
        TARGETS["fingerprint_diff_speedup_vs_naive"], True,
        "parity's part within the rounds' noise" if ratios.get("fingerprint_diff_speedup_vs_naive")
        == NOT_MEASURABLE else "")
    add("(naive - floor) / (parity - floor), CPU seconds", ratios.get("fingerprint_diff_speedup_vs_naive_cpu"),
        TARGETS["fingerprint_diff_speedup_vs_naive"], True)
    add("tfdv / parity wall time", ratios.get("tfdv_over_parity"), TARGETS["tfdv_over_parity"], True)
    add("tfdv / parity CPU seconds (TFDV on as many worker processes as parity's cores)",
        ratios.get("tfdv_cpu_over_parity_cpu"), TARGETS["tfdv_cpu_over_parity_cpu"], True)
    add("kernel records/s / plain xxh3 loop (one hash per record)", ratios.get("kernel_vs_plain_xxh3_record"),
        TARGETS["kernel_vs_plain_xxh3"], True)
    add("kernel records/s / plain xxh3 loop (WriteBatchFn stages)", ratios.get("kernel_vs_plain_xxh3_stages"),
        TARGETS["kernel_vs_plain_xxh3"], True)
    add("kernel records/s / plain xxh3 loop (Arrow record batches, parity.encoding.columnar)",
        ratios.get("kernel_vs_plain_xxh3_arrow"), TARGETS["kernel_vs_plain_xxh3"], True,
        "a bytes object and an int per row, as the replay's read step takes them")
    add("kernel records/s / C xxh3 loop, one thread each (record dicts: the JSONL, CSV and TFRecord read path)",
        ratios.get("kernel_vs_c_xxh3_record"), TARGETS["kernel_vs_plain_xxh3"], True,
        "the C loop hashes bytes encoded beforehand; the kernel encodes them too")
    add("kernel records/s / C xxh3 loop, one thread each (Arrow record batches: the Parquet read path)",
        ratios.get("kernel_vs_c_xxh3_arrow"), TARGETS["kernel_vs_plain_xxh3"], True,
        "the C loop hashes bytes encoded beforehand; the kernel encodes them too")
    rss = rows.get("parity", {}).get("peak_rss_mib")
    if rss:
        limit = TARGETS["peak_rss_gib_python_10m"] if args.transform == "python" else \
            TARGETS["peak_rss_gib_at_1m"]
        add("parity peak RSS (GiB)", round(rss / 1024, 3), limit, False,
            at if args.transform == "tft" else f" (at {n:,} records; the target is 10,000,000)")
    key = "parity_100000_to_1000000"
    if key in scaling:
        add("parity time 100k -> 1M", scaling[key], TARGETS["time_100k_to_1m"], False)
    return out


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render_markdown(result: dict[str, Any]) -> str:
    n = result["records"]
    rows = result["contenders"]
    floor = rows.get("floor", {}).get("wall_s")
    variant = result.get("variant", "bug")
    config = "parity.yaml, planted late-data bug" if variant == "bug" else \
        "parity-fixed.yaml, no divergence (production reads its own copy of the capture)" \
        if not SWEEP.get(variant) else \
        f"parity-fixed.yaml, {SWEEP[variant]}% of the production records planted to diverge"
    lines = [f"# parity benchmark: {n:,} taxi records per side ({result['transform']} transform; {config})",
             "",
             f"Seed {result['seed']}, runner {result['runner']}, {result['cpus']} CPUs, {result['date']}; "
             f"contenders alternate round by round ({result['repeat']} rounds"
             + (f"; {', '.join(result['once'])} in round 1 only" if result["once"] else "") + "), "
             "medians shown. `wall` is the contender's own work (imports excluded), `process` the whole "
             "process, `CPU` the whole process's CPU seconds (user + system, its child processes included); "
             "peak RSS is the process's and its children's together (max over rounds). Ratios are within this "
             "run.", "",
             "| contender | runs | wall s | process s | CPU s | records/s | peak RSS MiB | wall / floor | "
             "wall spread s | CPU spread s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        if name == "kernel":
            continue
        if row.get("skipped"):
            lines.append(f"| {name} | skipped: {row['skipped']} | | | | | | |")
            continue
        ratio = round(row["wall_s"] / floor, 3) if floor and row.get("wall_s") else None
        lines.append(f"| {name} | {row['runs']}{' (+' + str(row['failed']) + ' failed)' if row['failed'] else ''}"
                     f" | {_fmt(row.get('wall_s'))} | {_fmt(row.get('process_s'))} | {_fmt(row.get('cpu_s'))} | "
                     f"{_fmt(row.get('records_per_s'))} | {_fmt(row.get('peak_rss_mib'), 0)} | {_fmt(ratio, 3)} | "
                     f"{_fmt(row.get('wall_s_spread'))} | {_fmt(row.get('cpu_s_spread'))} |")
    lines += _every_round(result)
    kernel = rows.get("kernel")
    if kernel and kernel.get("kernel_records_per_s"):
        k = kernel["kernel_records_per_s"]
        lines += ["", f"## kernel ({kernel['kernel_records']:,} records, in one process, medians)", "",
                  "| loop | records/s | vs plain xxh3 |", "|---|---|---|"]
        labels = {"plain_xxh3_record": "plain `xxh3_64_intdigest` over the records' pre-encoded canonical bytes",
                  "plain_xxh3_json_record": "plain `xxh3_64_intdigest` over the records' pre-encoded sorted JSON",
                  "parity_fingerprints_record": "`parity.encoding.fingerprint.fingerprints(records)`",
                  "parity_arrow_batch_record": "`parity.encoding.columnar.row_encodings(batch)`: bytes + xxh3 of Arrow "
                                               "record batches' rows (the Parquet read path)",
                  "c_xxh3_record": "C loop (benchmarks/native/xxh3_loop.c, one thread) over the same canonical "
                                   "bytes in one buffer",
                  "parity_encode_many_record": "`canonical.encode_many` + xxh3",
                  "json_dumps_xxh3_record": "`json.dumps(sort_keys)` + xxh3 in the loop (naive's kernel)",
                  "plain_xxh3_stages": f"plain xxh3 over pre-encoded stage bytes "
                                       f"({kernel['hashes_per_record_stages']} hashes/record)",
                  "parity_writebatch_stages": "WriteBatchFn's encode + hash of the 6 stages and features"}
        for key, label in labels.items():
            base = k["plain_xxh3_stages" if key.endswith("stages") else "plain_xxh3_record"]
            lines.append(f"| {label} | {_fmt(k.get(key))} | {_fmt(k[key] / base if k.get(key) else None, 4)} |")
    ratios = result["ratios"]
    if ratios:
        lines += ["", "## ratios", "", "| ratio | value |", "|---|---|"]
        lines += [f"| {k} | {_fmt(v, 3) if isinstance(v, float) else v} |" for k, v in ratios.items()]
    if result.get("scaling"):
        lines += ["", "## scaling (wall time ratio between sizes)", "", "| contender | ratio |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in result["scaling"].items()]
    if result["targets"]:
        lines += ["", "## issue-5 targets", "", "| target | value | limit | met | margin |", "|---|---|---|---|---|"]
        for t in result["targets"]:
            note = t["note"].strip()
            note = f" {note}" if note.startswith("(") else f" ({note})" if note else ""
            met = "–" if t["met"] is None else "yes" if t["met"] else "NO"
            margin = "–" if t["margin"] is None else f"{t['margin']:.2f}x"
            lines.append(f"| {t['target']}{note} | {_fmt(t['value'], 3)} | {t['better']} {t['limit']} | "
                         f"{met} | {margin} |")
    failures = [(name, f) for name, row in rows.items() for f in row.get("failures", [])]
    if failures:
        lines += ["", "## failed runs", ""]
        for name, f in failures:
            what = (f"killed when its RSS passed {f['killed_over_rss_gib']} GiB"
                    if "killed_over_rss_gib" in f else "failed: " + f["error"].splitlines()[-1][:160])
            lines.append(f"- {name}, round {f.get('round')}: {what} after {_fmt(f.get('process_s'))} s "
                         f"(peak RSS {_fmt(f.get('peak_rss_mib'), 0)} MiB)"
                         + (f"; finished before that: `{json.dumps(f['partial_timings'], sort_keys=True)}`"
                            if f.get("partial_timings") else ""))
    outcomes = [(name, row["outcome"]) for name, row in rows.items() if row.get("outcome")]
    if outcomes:
        lines += ["", "## what each comparer found (sanity check: the same records give the same findings)", ""]
        lines += [f"- {name}: `{json.dumps(outcome, sort_keys=True)}`" for name, outcome in outcomes]
    for name in ("floor", "parity"):
        timings = rows.get(name, {}).get("timings")
        if timings:
            lines += ["", f"{name}'s parts (last round): `{json.dumps(timings, sort_keys=True)}`"]
    lines.append("")
    return "\n".join(lines)


def _every_round(result: dict[str, Any]) -> list[str]:
    """Every round of every contender, in the order they ran, none left out: the medians above hide nothing."""
    entries = [(e.get("round", 0), e.get("position", 0), name, e) for name, runs in result.get("runs", {}).items()
               for e in runs if "round" in e]
    if not entries:
        return []
    machine = result.get("machine") or {}
    lines = ["", "## every round", ""]
    if machine:
        packages = ", ".join(f"{k} {v}" for k, v in (machine.get("packages") or {}).items() if v)
        lines += [f"Commit `{machine.get('commit')}`" + (" (with uncommitted changes)" if
                                                         machine.get("uncommitted_changes") else "")
                  + f", Python {machine.get('python')}, {machine.get('cpus')} CPUs"
                  + (f" ({machine['cpu_model']})" if machine.get("cpu_model") else "")
                  + f"; {packages}. Load average "
                  f"(1, 5, 15 min) {machine.get('load_average_before')} before, "
                  f"{machine.get('load_average_after')} after.", ""]
    lines += ["| round | order | contender | wall s | CPU s | peak RSS MiB | load before (1 min) | parts s | "
              "outcome |", "|---|---|---|---|---|---|---|---|---|"]
    for round_index, position, name, e in sorted(entries, key=lambda item: item[:2]):
        load = (e.get("load_before") or [None])[0]
        outcome = "failed" if "error" in e else "ok"
        lines.append(f"| {round_index} | {position + 1} | {name} | {_fmt(e.get('wall_s'))} | {_fmt(e.get('cpu_s'))} | "
                     f"{_fmt(e.get('peak_rss_mib'), 0)} | {_fmt(load, 2)} | {_parts(e.get('timings'))} | {outcome} |")
    return lines


def _parts(timings: dict | None) -> str:
    """A round's replay and diff apart (parity's timings.json), or a floor's sides: where a divergence costs."""
    if not timings:
        return ""
    keys = sorted(k for k, v in timings.items() if k.endswith("seconds") and isinstance(v, (int, float))
                  and not k.endswith("own_seconds"))
    return ", ".join(f"{k.removesuffix('_seconds')} {timings[k]:.1f}" for k in keys)


def write_results(result: dict[str, Any], results_dir: str) -> tuple[str, str]:
    os.makedirs(results_dir, exist_ok=True)
    md = _result_path(results_dir, result["records"], result["transform"], "md", result["variant"])
    js = _result_path(results_dir, result["records"], result["transform"], "json", result["variant"])
    with open(js, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2, sort_keys=False)
        handle.write("\n")
    with open(md, "w", encoding="utf-8") as handle:
        handle.write(render_markdown(result))
    append_history(result, results_dir, os.path.basename(js))
    return md, js


def append_history(result: dict[str, Any], results_dir: str, name: str) -> None:
    """Every run also goes into the folder's two history files, so that earlier runs stay readable without one
    committed file per run: `history.md` (the tables, a section per run) and `history.jsonl` (a line per run)."""
    stamp = result.get("machine", {}).get("started") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(os.path.join(results_dir, "history.md"), "a", encoding="utf-8") as handle:
        table = render_markdown(result).strip().replace("\n# ", "\n### ")
        handle.write(f"\n## {name.removesuffix('.json')} ({stamp})\n\n{table.removeprefix('# ')}\n")
    with open(os.path.join(results_dir, "history.jsonl"), "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"file": name, "result": result}, separators=(",", ":")) + "\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--records", type=int, required=True, help="taxi records per capture (both sides read it)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--transform", choices=["tft", "python"], default="tft",
                        help="tft: the taxi config as shipped; python: both sides use python_features")
    parser.add_argument("--variant", default="bug",
                        help="one or several (comma-separated, run one after the other): bug: "
                             "pipelines/taxi/parity.yaml (production drops late trips: most records diverge "
                             "through their hour's aggregates); fixed: parity-fixed.yaml (no divergence); "
                             "diverged1, diverged25, diverged100: parity-fixed.yaml with that share of the "
                             "production records planted to diverge (the divergence sweep)")
    parser.add_argument("--contenders", default=",".join(DEFAULT_CONTENDERS),
                        help=f"comma-separated, from {','.join(CONTENDERS)}; the order of round 1, rotated each "
                             f"round (default {','.join(DEFAULT_CONTENDERS)})")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds, fixed before the run (the order rotates by one contender each round); "
                             "every round is reported")
    parser.add_argument("--once", default="", help="contenders to run in round 1 only, e.g. naive,tfdv")
    parser.add_argument("--work", default=os.environ.get("PARITY_BENCH_WORK", "/tmp/parity-bench"),
                        help="scratch folder: generated captures (cached) and per-run output")
    parser.add_argument("--results", default=os.path.join(HERE, "results"), help="where the tables go")
    parser.add_argument("--tfdv-python", default=DEFAULT_TFDV_PYTHON,
                        help="interpreter of the TFDV virtualenv (skipped when it does not exist)")
    parser.add_argument("--kernel-records", type=int, default=100_000, help="records the kernel hashes")
    parser.add_argument("--keep", action="store_true", help="keep each contender's scratch output")
    parser.add_argument("--max-rss-gib", type=float, default=10.0,
                        help="kill a contender whose RSS exceeds this (0: no limit); the table says so")
    args = parser.parse_args(argv)
    args.variants = [v.strip() for v in args.variant.split(",") if v.strip()]
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad or not args.variants:
        parser.error(f"unknown variant(s) {bad}; expected {', '.join(VARIANTS)}")
    args.variant = args.variants[0]
    args.contenders = [c.strip() for c in args.contenders.split(",") if c.strip()]
    unknown = [c for c in args.contenders if c not in CONTENDERS]
    if unknown:
        parser.error(f"unknown contender(s) {unknown}; expected {', '.join(CONTENDERS)}")
    if args.transform == "python" and "tfdv" in args.contenders:
        args.contenders.remove("tfdv")  # TFDV compares tf.Examples of TFT features; not this variant
    if args.transform == "python" and "floor_concurrent" in args.contenders:
        args.contenders.remove("floor_concurrent")  # the TFT floor: no graph to wait for in the python variant
    args.once = {c.strip() for c in args.once.split(",") if c.strip()}
    args.work = os.path.abspath(args.work)
    args.results = os.path.abspath(args.results)
    args.tfdv_python = os.path.abspath(args.tfdv_python)
    return args


def main(argv: list[str] | None = None) -> int:
    """Every sweep level in one command, each its own results file. The levels take turns within each round,
    rotated like the contenders (round 1: fixed, diverged1, ...; round 2: diverged1, ..., fixed): a ratio between
    levels then compares rounds run side by side, not one level's rounds against another's run minutes later on a
    machine whose speed drifts (a clean check's two rounds ran at 40.4 and 43.2 s, then 47.8 s ten minutes on)."""
    args = parse_args(argv)
    harnesses = {}
    for variant in args.variants:
        one = copy.copy(args)
        one.variant = variant
        log(f"{args.records} records, transform {args.transform}, variant {variant}, contenders "
            f"{', '.join(args.contenders)}, {args.repeat} round(s); work {args.work}")
        harnesses[variant] = Harness(one)
        harnesses[variant].start()
    for round_index in range(1, args.repeat + 1):
        for variant in round_order(args.variants, round_index):
            if len(args.variants) > 1:
                log(f"round {round_index}: variant {variant}")
            harnesses[variant].run_round(round_index)
    failed = []
    for variant, harness in harnesses.items():
        result = harness.finish()
        md, js = write_results(result, args.results)
        log(f"wrote {md} and {js}")
        print(render_markdown(result))
        failed += [f"{variant}/{name}" for name, row in result["contenders"].items() if row.get("failed")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
