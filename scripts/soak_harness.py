"""The harness soak of issue 45: is a dead SDK harness replaced, never reused, whenever it dies?

    .venv/bin/python scripts/soak_harness.py --kills 10 --seed 45          # what `make soak` runs
    .venv/bin/python scripts/soak_harness.py --kills 6 --failover region   # Flink's default failover strategy
    .venv/bin/python scripts/soak_harness.py --kills 3 --beam-option=--environment_expiration_millis=20000

Starts the cluster test bed of tests/cluster once (tests/cluster/testbed.py: moto's S3 server, Flink 1.19 with two
TaskManagers and the fixed-delay restart strategy, a Beam job server, the worker pool as another Unix user), runs
the cluster check of tests/cluster (window_late_dropped, capture and out on S3, parallelism 2) once undisturbed,
then once per planned kill: one SDK harness of the pool SIGKILLed at a moment drawn from a seeded RNG (START,
BETWEEN_BUNDLES, MID_BUNDLE: tests/cluster/moments.py says how each is read from /proc), after a drawn delay
once a job of the check runs. The plan (moments, delays) is fixed by --kills and --seed before anything starts;
when the moment comes is the cluster's business, so which bundle is hit varies from one soak to the next.

One line per run: the moment, the killed pid and when (seconds into the check), whether the check survived (it
completed and its report.json is the undisturbed run's byte for byte), its wall seconds against the undisturbed
run's, and how many task failures Flink recorded during it; then a totals line. Exit 0 when every planned kill
was made and survived, 1 otherwise, 2 when the test bed could not start. Not part of `make test`: it takes about
a quarter of an hour.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.cluster import moments  # noqa: E402
from tests.cluster.moments import Moment  # noqa: E402

MAX_DELAY = 6.0  # seconds after a job of the check runs before looking for the moment: which bundle is hit
DEFAULT_JOB_TIMEOUT = 90.0  # seconds each Flink job of a check may take (undisturbed: about 20 s here)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=10, help="disturbed runs, one harness killed in each")
    parser.add_argument("--seed", type=int, default=45, help="the plan's RNG seed (moments, delays, which harness)")
    parser.add_argument("--moments", default=",".join(m.value for m in Moment),
                        help="the moments to draw from, comma-separated (default: all three)")
    parser.add_argument("--failover", choices=("full", "region"), default="full",
                        help="the test bed's jobmanager.execution.failover-strategy (Flink's default: region)")
    parser.add_argument("--job", default="", metavar="NAME_PART",
                        help="kill only while a job whose name holds this runs, e.g. production (the side's job, "
                             "parity-SIDE-...; default: any job of the check)")
    parser.add_argument("--job-timeout", type=float, default=DEFAULT_JOB_TIMEOUT,
                        help="seconds each job may take (PARITY_FLINK_JOB_TIMEOUT): cancelled then, the run failed")
    parser.add_argument("--beam-option", action="append", default=[], metavar="OPTION",
                        help="a Beam pipeline option added to every run (repeatable), e.g. "
                             "--beam-option=--environment_expiration_millis=20000")
    parser.add_argument("--keep", action="store_true", help="keep the test bed's logs (their folder is printed)")
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error(f"--kills {args.kills}: a soak kills at least one harness")
    try:
        args.moments = [Moment(name.strip()) for name in args.moments.split(",") if name.strip()]
    except ValueError as exc:
        parser.error(f"--moments: {exc}; expected some of {', '.join(m.value for m in Moment)}")
    if not args.moments:
        parser.error("--moments: none given")
    return args


@dataclass(frozen=True)
class Kill:
    """One disturbed run's plan."""
    moment: Moment
    delay: float  # seconds after a job of the check runs
    pick: int  # which of the harnesses at the moment: candidates[pick % len(candidates)]


def plan(kills: int, seed: int, moments: list[Moment] = list(Moment)) -> list[Kill]:
    """`kills` kills, the moments as equally often as `kills` allows (10 over three: 4, 3, 3) in an order drawn
    from `seed`, each with a drawn delay and pick."""
    rng = random.Random(seed)
    order = [moments[index % len(moments)] for index in range(kills)]
    rng.shuffle(order)
    return [Kill(moment, round(rng.uniform(0, MAX_DELAY), 1), rng.randrange(1 << 16)) for moment in order]


@dataclass(frozen=True)
class Run:
    """What one check of the soak gave."""
    number: int  # 0: the undisturbed run
    kill: Kill | None
    killed: int | None  # the pid, None when the moment did not come while the check ran
    killed_at: float | None  # seconds into the check
    error: str | None  # the check's error, None when it completed
    identical: bool  # its report.json is the undisturbed run's, byte for byte
    seconds: float
    failures: int  # task failures Flink recorded during the run

    @property
    def survived(self) -> bool:
        return self.error is None and self.identical


def line(run: Run, total: int, undisturbed: float) -> str:
    """The run's line of the soak's output."""
    head = f"run {run.number:2d}/{total}  {run.kill.moment.value if run.kill else 'undisturbed':15s}"
    if run.kill is None:
        what = "no kill"
    elif run.killed is None:
        what = f"NOT KILLED: no harness at {run.kill.moment.value} while the check ran (delay {run.kill.delay} s)"
    else:
        what = f"killed pid {run.killed} at {run.killed_at:5.1f} s"
    if run.error is not None:
        outcome = f"FAILED ({run.error})"
    elif run.kill is None:
        outcome = "completed"
    else:
        outcome = "survived, report.json identical" if run.identical else "REPORT DIFFERS"
    timing = f"{run.seconds:6.1f} s" if run.kill is None else \
        f"{run.seconds:6.1f} s vs {undisturbed:.1f} s undisturbed ({run.seconds - undisturbed:+.1f} s)"
    return f"{head}  {what}; {outcome}; {timing}; task failures {run.failures}"


def totals(runs: list[Run], planned: int) -> tuple[str, int]:
    """The totals line and the soak's exit status: 0 when every planned kill was made and survived."""
    disturbed = [run for run in runs if run.kill is not None]
    made = [run for run in disturbed if run.killed is not None]
    survived = [run for run in made if run.survived]
    by_moment = {moment: [run for run in made if run.kill.moment is moment] for moment in Moment}
    per_moment = ", ".join(f"{moment.value} {sum(r.survived for r in done)}/{len(done)}"
                           for moment, done in by_moment.items() if done)
    undisturbed = next((run for run in runs if run.kill is None), None)
    seconds = [run.seconds for run in made]
    timing = (f"undisturbed {undisturbed.seconds:.1f} s; disturbed median {statistics.median(seconds):.1f} s, "
              f"max {max(seconds):.1f} s" if undisturbed and seconds else "no timing")
    status = 0 if (undisturbed is not None and undisturbed.error is None and len(made) == planned
                   and len(survived) == planned) else 1
    return (f"totals: kills {len(made)} of {planned} planned, survived {len(survived)} of {len(made)} "
            f"({per_moment or 'none'}); {timing}; {'PASS' if status == 0 else 'FAIL'}"), status


def _first_line(exc: BaseException) -> str:
    said = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {said[0][:300] if said else ''}"


class _Killer(threading.Thread):
    """Beside one check: waits until a job of it runs, then `kill.delay` s, then SIGKILLs a harness at the moment."""

    def __init__(self, testbed, kill: Kill, job: str = ""):
        super().__init__(daemon=True)
        self.testbed, self.kill, self.job = testbed, kill, job
        self.jobs_before = testbed.flink.jobs()
        self.done = threading.Event()
        self.started_at = time.monotonic()
        self.killed: int | None = None
        self.killed_at: float | None = None

    def run(self) -> None:
        watch = moments.HarnessWatch(self.testbed.pool)

        def wait(seconds: float) -> bool:
            """Sleeps `seconds`, looking at the harnesses every 20 ms; True once the check has ended."""
            until = time.monotonic() + seconds
            while not self.done.wait(min(0.02, max(until - time.monotonic(), 0))):
                watch.look()
                if time.monotonic() >= until:
                    return False
            return True

        while not moments.under_way(self.testbed, self.jobs_before, self.job):
            if wait(0.02):
                return
        if wait(self.kill.delay):
            return
        while True:
            candidates = moments.harnesses_at(self.testbed, self.kill.moment, watch)
            if candidates and moments.under_way(self.testbed, self.jobs_before, self.job):
                pid = candidates[self.kill.pick % len(candidates)]
                # a start is killed only if it has still not connected (the REST call above took some ms)
                if self.kill.moment is not Moment.START or pid in watch.starting():
                    pid = moments.kill(pid)
                    if pid is not None:
                        self.killed, self.killed_at = pid, time.monotonic() - self.started_at
                        return
            if wait(0.02):
                return


def _one_run(testbed, number: int, kill: Kill | None, reference: bytes | None,
             args: argparse.Namespace) -> tuple[Run, bytes | None]:
    from tests.cluster.test_s3_paths import cluster_check

    failures_before = testbed.flink.failures()
    killer = _Killer(testbed, kill, args.job) if kill else None
    started = time.monotonic()
    report, error = None, None
    if killer:
        killer.start()
    try:
        report = cluster_check(testbed, f"soak-{number:02d}", job_timeout=args.job_timeout)
    except Exception as exc:  # noqa: BLE001 - a failed check is a result of the soak, not its end
        error = _first_line(exc)
    seconds = time.monotonic() - started
    if killer:
        killer.done.set()
        killer.join()
    run = Run(number, kill, killer.killed if killer else None, killer.killed_at if killer else None, error,
              report is not None and (reference is None or report == reference), seconds,
              testbed.flink.failures() - failures_before)
    return run, report


def _say(text: str) -> None:
    print(text, flush=True)


def soak(args: argparse.Namespace) -> int:
    import apache_beam

    from tests.cluster import testbed as bed

    os.environ["PARITY_PROGRESS"] = "off"
    kills = plan(args.kills, args.seed, args.moments)
    base = tempfile.mkdtemp(prefix="parity-soak-")
    os.chmod(base, 0o755)
    _say(f"soak: {args.kills} kills, seed {args.seed}, moments {', '.join(m.value for m in args.moments)}"
         + (f", in a job named *{args.job}*" if args.job else "") + "; plan: "
         + ", ".join(f"{k.moment.value}+{k.delay}s" for k in kills))
    started = time.monotonic()
    s3 = testbed = None
    try:
        s3 = bed.start_s3(base)
        s3.client().create_bucket(Bucket="parity")
        testbed = bed.start_testbed(base, s3, failover_strategy=args.failover)
    except Exception as exc:  # noqa: BLE001
        _say(f"soak: the test bed could not start: {exc}")
        if s3:
            s3.stop()
        return 2
    config = {entry["key"]: entry["value"] for entry in testbed.flink.get("/jobmanager/config")}
    _say(f"soak: test bed up in {time.monotonic() - started:.1f} s (logs {base}); Beam SDK "
         f"{apache_beam.__version__}, Flink failover-strategy {config.get('jobmanager.execution.failover-strategy')}, "
         f"restart attempts {config.get('restart-strategy.fixed-delay.attempts')}, job timeout {args.job_timeout:g} s"
         + (f", Beam options {' '.join(args.beam_option)}" if args.beam_option else ""))
    testbed = dataclasses.replace(testbed, extra_options=tuple(args.beam_option))
    runs: list[Run] = []
    try:
        undisturbed, reference = _one_run(testbed, 0, None, None, args)
        runs.append(undisturbed)
        _say(line(undisturbed, args.kills, undisturbed.seconds))
        if undisturbed.error is None:
            for number, kill in enumerate(kills, 1):
                run, _ = _one_run(testbed, number, kill, reference, args)
                runs.append(run)
                _say(line(run, args.kills, undisturbed.seconds))
    finally:
        testbed.stop()
        s3.stop()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    said, status = totals(runs, args.kills)
    _say(said + f"; whole soak {(time.monotonic() - started) / 60:.1f} min")
    return status


def main(argv: list[str] | None = None) -> int:
    return soak(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
