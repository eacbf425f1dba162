"""Live progress of a side's job: the runner's counts (`parity.replay.counters`) read while it runs and at its
end, and handed to the progress line (`parity.console.progress.counts`).

Where the counts are, as measured with Beam 2.77's client and the bundled 2.70 Flink job server:
- DirectRunner (Beam's FnApiRunner, in this process): `pipeline.run()` returns once the job has ended, with the
  totals in its metrics. While it runs, its steps run in this process and tally the line themselves.
- FlinkRunner: the Beam job service answers `GetJobMetrics` with nothing until the job has ended (it keeps the
  metrics of a finished job only), then with the totals. While the job runs, Flink's REST API holds the same
  Beam counters as the job's `__metricscontainers` accumulator (the JSON of a `GetJobMetricsResponse`, attempted
  values), which `flink_counts` reads, finding the job by its name (`--job_name`: parity names each side's job
  unless the user did). Flink's batch mode runs a task's whole partition of a fused stage as one bundle, and a
  counter reaches the runner when its bundle ends: on Flink the counts move one stage (and task) at a time.

Nothing here fails a replay because a reading failed: a reading that raises is logged once
(`counters.said_once`) and skipped.

On Flink the watch also reads the job's exceptions (`flink_failure`). Flink restarts a failed job by its restart
strategy, which is right for a lost TaskManager or SDK harness, or anything else that may pass, but only repeats a
failure that cannot: a module the workers cannot import (`FINAL`) fails every attempt alike. Such a failure stops
the job at once: the watch keeps the error and cancels the job through the job server, and the replay raises the
error (and ends the job on Flink too, `parity.replay.cancel.end_job`). A job of the same name that ran before
this one (a user's own `--job_name`) is never read: its jobs are taken before the submission
(`parity.replay.job`).
"""
from __future__ import annotations

import json
import threading
import urllib.request
import uuid
from typing import Any, Callable

from parity.console import progress
from parity.errors import ParityError, UnimportableCode, from_worker_text
from parity.replay import cancel, counters

POLL_SECONDS = 2.0  # between two readings while a job runs: a REST call or two, far below Flink's own UI
REST_TIMEOUT = 5.0  # seconds one Flink REST call may take
ACCUMULATOR = "__metricscontainers"  # Beam's Flink runner: FlinkMetricContainer.ACCUMULATOR_NAME
# Errors that a restart of the job only repeats: the same code fails to import the same way on every attempt.
# Not a UserCodeError in general (user code may raise on a resource that comes back) nor a ConfigError (one wraps a
# graph's copy from a store, which a restart may win).
FINAL = (UnimportableCode,)


def job_name(side: str) -> str:
    """A name for a side's Flink job that no other job has: Flink's REST API finds the job by it."""
    return f"parity-{side}-{uuid.uuid4().hex[:12]}"


def accumulator_counts(accumulators: dict, side: str) -> dict[str, int] | None:
    """A side's counts from Flink's `/jobs/<id>/accumulators` answer, or None when it holds no Beam metrics yet."""
    from google.protobuf import json_format

    from apache_beam.portability.api import beam_job_api_pb2
    from apache_beam.runners.portability.portable_runner import PortableMetrics

    for one in accumulators.get("user-task-accumulators", ()):
        if one.get("name") == ACCUMULATOR:
            response = json_format.Parse(one["value"], beam_job_api_pb2.GetJobMetricsResponse(),
                                         ignore_unknown_fields=True)
            return counters.totals(counters.query(PortableMetrics(response)), side)
    return None


def _get(rest: str, path: str) -> dict:
    with urllib.request.urlopen(f"{rest.rstrip('/')}{path}", timeout=REST_TIMEOUT) as response:  # noqa: S310
        return json.load(response)


def _latest(rest: str, name: str, earlier: frozenset[str] = frozenset()) -> str | None:
    """The id of the latest Flink job named `name` but those in `earlier`, or None."""
    jobs = [job for job in _get(rest, "/jobs/overview").get("jobs", ())
            if job.get("name") == name and job.get("jid") not in earlier]
    return max(jobs, key=lambda one: one.get("start-time", 0))["jid"] if jobs else None


def flink_counts(rest: str, name: str, side: str, earlier: frozenset[str] = frozenset()) -> dict[str, int] | None:
    """A side's counts from the Flink cluster whose REST API is at `rest` (`http://host:port`), for the job named
    `name` (the latest one of that name but those in `earlier`), or None when there is no such job or no count
    yet."""
    jid = _latest(rest, name, earlier)
    return None if jid is None else accumulator_counts(_get(rest, f"/jobs/{jid}/accumulators"), side)


def exception_texts(answer: dict) -> list[str]:
    """The stack traces in Flink's `/jobs/<id>/exceptions` answer: the exception history's entries (Flink 1.15
    on), then the deprecated root exception, where older Flinks put it."""
    history = answer.get("exceptionHistory") or {}
    texts = [entry.get("stacktrace") or "" for entry in history.get("entries", ())]
    return [text for text in [*texts, answer.get("root-exception") or ""] if text]


def flink_failure(rest: str, name: str, earlier: frozenset[str] = frozenset()) -> ParityError | None:
    """The `FINAL` error that failed an attempt of the job named `name` (not one of `earlier`), or None."""
    jid = _latest(rest, name, earlier)
    if jid is None:
        return None
    for text in exception_texts(_get(rest, f"/jobs/{jid}/exceptions")):
        error = from_worker_text(text)
        if isinstance(error, FINAL):
            return error
    return None


def _larger(*readings: dict[str, int] | None) -> dict[str, int] | None:
    found = [one for one in readings if one is not None]
    if not found:
        return None
    return {what: max(one[what] for one in found) for what in counters.COUNTS}


class Watch:
    """Reads a running job's counts every POLL_SECONDS on a thread of its own, and once more at its end.

        watch = Watch(side.name, result, rest=lambda: "http://localhost:8081", job="parity-offline-...")
        with watch:
            result.wait_until_finish()
        totals = watch.final()
    """

    def __init__(self, side: str, result: Any, *, rest: Callable[[], str | None] | None = None,
                 job: str | None = None, earlier: frozenset[str] = frozenset(), interval: float = POLL_SECONDS):
        self.side = side
        self._result = result
        self._rest = rest  # Flink's REST address, once known (the embedded Flink says it when its job starts)
        self._job = job
        self._earlier = earlier  # ids of jobs of that name from before this one's submission
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = progress.mode() in ("tty", "log")
        self.failure: ParityError | None = None  # a FINAL error an attempt of the job failed with; it is cancelled

    def reading(self) -> dict[str, int] | None:
        """The counts now: the larger of the runner's metrics and, on Flink, its REST accumulators."""
        return _larger(counters.of_result(self._result, self.side), self._flink())

    def _flink(self) -> dict[str, int] | None:
        if self._rest is None or self._job is None:
            return None
        try:
            rest = self._rest()
            return flink_counts(rest, self._job, self.side, self._earlier) if rest else None
        except Exception as exc:  # a cluster that does not answer: progress only, never the run
            counters.said_once(f"flink:{type(exc).__name__}", f"Flink's REST API did not give the job's counts "
                               f"({type(exc).__name__}: {exc}); progress shows them when the job ends")
            return None

    def _failed(self) -> ParityError | None:
        if self._rest is None or self._job is None:
            return None
        try:
            rest = self._rest()
            return flink_failure(rest, self._job, self._earlier) if rest else None
        except Exception as exc:  # a cluster that does not answer: Flink's restarts and the job's end still hold
            counters.said_once(f"flink-exceptions:{type(exc).__name__}", f"Flink's REST API did not give the job's "
                               f"exceptions ({type(exc).__name__}: {exc})")
            return None

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            failure = self._failed()
            if failure is not None and not self._stop.is_set():
                self.failure = failure
                cancel.stop_invocation(self._result)  # the wait returns; the replay ends the job on Flink too
                return
            counts = self.reading() if self._shown else None
            if counts is not None and not self._stop.is_set():
                progress.counts(self.side, counts)

    def __enter__(self) -> "Watch":
        flink = self._rest is not None and self._job is not None
        if (self._shown or flink) and not _ended(self._result):
            self._thread = threading.Thread(target=self._run, name=f"parity-watch-{self.side}", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def final(self) -> dict[str, int] | None:
        """The job's totals, once it has ended (shown as the line's last state); None when the runner cannot
        say."""
        counts = counters.of_result(self._result, self.side)
        if counts is None or not any(counts.values()):
            counts = _larger(counts, self._flink())
        if counts is not None:
            progress.counts(self.side, counts, final=True)
        return counts


def _ended(result: Any) -> bool:
    """Whether the job has ended already (the DirectRunner's `run()` returns then): nothing to watch."""
    from apache_beam.runners.runner import PipelineState

    try:
        return PipelineState.is_terminal(result.state)
    except Exception:
        return False
