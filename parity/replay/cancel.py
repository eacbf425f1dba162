"""Ending a side's Flink job when its replay ends early: a job timeout, Ctrl-C or SIGTERM, a failure.

The Beam job server's Cancel is not enough. With the bundled job server (Beam 2.70's Flink runner) and a remote
Flink master, Cancel ends the job server's invocation ("Canceling job invocation" in its log) while the Flink job
goes on RUNNING: the JobManager never sees a cancel (issue 45: still RUNNING 57 s after parity said it was
cancelled). So the job is also cancelled through Flink's REST API (`PATCH /jobs/<id>?mode=cancel`), found by its
name (`--job_name`, which parity sets for each side: `parity.replay.watch.job_name`), and the REST API is asked
until none of that name is left live, within a bound. The outcome is said in words for parity's message.

A job that is still being submitted (the job server uploads its jars first) has no Flink job yet: one that shows
up while the bound lasts is cancelled too.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from typing import Any, Callable

from parity.console import signals

CANCEL_WAIT = 60.0   # seconds to wait until no job of the side's name is live on Flink
CALL_TIMEOUT = 10.0  # seconds one job-server or REST call may take
POLL = 0.5
FIRST_LOOK = 10.0    # seconds to look for a job of the name before believing none was submitted (a cancel
#                      that came while the job server uploaded the job may still see it listed a moment later)
# Flink's job states that hold slots or may still run tasks (JobStatus): all but FINISHED, CANCELED, FAILED
LIVE = frozenset({"INITIALIZING", "CREATED", "RUNNING", "FAILING", "CANCELLING", "RESTARTING", "SUSPENDED",
                  "RECONCILING"})


def _call(fn: Callable[[], Any], timeout: float = CALL_TIMEOUT) -> tuple[bool, Any]:
    """(True, what `fn` returned) or (False, what it raised, or None when it did not return within `timeout` s):
    a gRPC call of Beam's own has no deadline, and a job server that hangs must not hang parity's exit."""
    out: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            out.append((True, fn()))
        except Exception as exc:  # noqa: BLE001 - handed back to the caller
            out.append((False, exc))

    thread = threading.Thread(target=run, name="parity-cancel", daemon=True)
    thread.start()
    thread.join(timeout)
    return out[0] if out else (False, None)


def jobs_named(rest: str, name: str) -> dict[str, str]:
    """The Flink jobs of name `name` at Flink's REST API `rest` (`http://host:port`): id -> state."""
    with urllib.request.urlopen(f"{rest.rstrip('/')}/jobs/overview", timeout=CALL_TIMEOUT) as response:  # noqa: S310
        jobs = json.load(response).get("jobs", ())
    return {job["jid"]: job.get("state", "") for job in jobs if job.get("name") == name}


def cancel_on_flink(rest: str, jid: str) -> None:
    """`PATCH /jobs/<jid>?mode=cancel`: the JobManager cancels the job (202 Accepted)."""
    request = urllib.request.Request(f"{rest.rstrip('/')}/jobs/{jid}?mode=cancel", method="PATCH")
    with urllib.request.urlopen(request, timeout=CALL_TIMEOUT):  # noqa: S310
        pass


def stop_invocation(result: Any) -> None:
    """Cancels the job server's invocation of a job (its `wait_until_finish` then returns), within CALL_TIMEOUT;
    the caller still ends the Flink job itself (`end_job`)."""
    _call(result.cancel)


def end_job(result: Any | None, rest: Callable[[], str | None] | None, name: str | None,
            wait: float = CANCEL_WAIT) -> str:
    """Cancels a side's job through the job server (`result.cancel()`) and through Flink's REST API, and waits
    (at most `wait` s) until Flink lists no job of that name as live; returns what happened, for a message
    (`it was cancelled: Flink job ... CANCELED`, or what is left and how to end it). A stop that arrives
    meanwhile waits for it (`signals.deferred`)."""
    with signals.deferred():
        return _end_job(result, rest, name, wait)


def _end_job(result: Any | None, rest: Callable[[], str | None] | None, name: str | None, wait: float) -> str:
    if result is not None:
        _call(result.cancel)
    address = None
    if rest is not None and name is not None:
        ok, found = _call(rest)
        address = found if ok else None
    if not address:
        return ("it was cancelled through the Beam job server only, which may leave the Flink job running on a "
                "remote cluster: no Flink REST address is known to confirm it (pass --flink_master or set "
                "PARITY_FLINK_REST=http://JOBMANAGER:8081)")
    deadline = time.monotonic() + wait
    asked: set[str] = set()
    jobs: dict[str, str] = {}
    failed: str | None = None
    while True:
        try:
            jobs = jobs_named(address, name)  # type: ignore[arg-type]
            for jid, state in jobs.items():
                if state in LIVE and state != "CANCELLING" and jid not in asked:
                    cancel_on_flink(address, jid)
                    asked.add(jid)
            failed = None
        except Exception as exc:  # noqa: BLE001 - the REST API did not answer (or not JSON): ask again until the bound
            failed = f"{type(exc).__name__}: {exc}"
        live = {jid: state for jid, state in jobs.items() if state in LIVE}
        looked = time.monotonic() + wait - deadline
        if failed is None and not live and (jobs or (looked >= FIRST_LOOK and _submission_over(result))):
            break
        if failed is not None and _submission_over(result):  # an embedded Flink ends with its job, REST and all
            break
        if time.monotonic() >= deadline:
            break
        time.sleep(POLL)
    said = ", ".join(f"{jid} {state}" for jid, state in sorted(jobs.items()))
    if failed is not None:
        return (f"it was cancelled through the Beam job server, and Flink's REST API at {address} did not answer to "
                f"confirm it ({failed}): an embedded Flink ends with its job; on a cluster, check {address} for a "
                f"job named {name}")
    live = {jid: state for jid, state in jobs.items() if state in LIVE}
    if live:
        return (f"it is still live on Flink {wait:g} s after its cancel ({said}); cancel it at {address} "
                f"(`curl -X PATCH '{address}/jobs/<id>?mode=cancel'`)")
    if not jobs:
        return f"it was cancelled before Flink listed a job named {name} (Flink's REST API at {address})"
    return f"it was cancelled: Flink job {said} (Flink's REST API at {address})"


def _submission_over(result: Any | None) -> bool:
    """Whether the job server says the job has ended (so no Flink job of its name will show up any more)."""
    if result is None:
        return True
    from apache_beam.runners.runner import PipelineState

    ok, state = _call(lambda: result.state)
    return ok and PipelineState.is_terminal(state)
