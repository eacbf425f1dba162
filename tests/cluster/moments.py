"""When to kill an SDK harness of the test bed, and the kill: shared by tests/cluster/test_faults.py and the soak
(scripts/soak_harness.py). Every moment is read from /proc (tests/cluster/testbed.py), by pid:

- START: a harness process of the pool that holds no TCP connection yet (importing Beam, before it reaches its
  TaskManager's control service). Only a HarnessWatch tells it apart from a harness that has closed its
  connections and is exiting (its environment released, its StopWorker not come yet: the first soak killed one of
  those and counted it as a start): a harness it saw appear and never saw connected;
- BETWEEN_BUNDLES: a harness connected to the three services of its TaskManager (control, state, data) that used no
  CPU over IDLE_WINDOW seconds: no bundle of it is working. Flink's batch mode runs a task's whole share of a fused
  stage as one bundle and releases a stage's harness when its tasks end (a harness lives 1.5-3.5 s here), so a
  harness idle between two bundles of its own hardly exists: this moment is a harness with its connections open
  and nothing running, between bundles or waiting for the next input of one (idle 0.5 s was never seen);
- MID_BUNDLE: a harness connected to the three that used CPU over BUSY_WINDOW seconds: processing a bundle.

A harness connected to control only (not yet to data) is none of them: killed then, its tasks wait 3 minutes for
the data client before they fail (docs/flink.md), which tests that wait, not a restart.
"""
from __future__ import annotations

import enum
import os
import signal
import time

PROGRESS_TIMEOUT = 240.0  # seconds a check has to show that its job is under way
IDLE_WINDOW = 0.1  # seconds without a CPU tick: no bundle working
BUSY_WINDOW = 0.2  # seconds with CPU ticks: in a bundle
BUSY_TICKS = 2  # clock ticks (10 ms each here) within BUSY_WINDOW that mean work, not gRPC keep-alives


class Moment(enum.Enum):
    START = "start"
    BETWEEN_BUNDLES = "between-bundles"
    MID_BUNDLE = "mid-bundle"


def poll(what: str, attempt, timeout: float = PROGRESS_TIMEOUT, step: float = 0.1):
    """Calls `attempt` until it returns something true, which is returned; fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = attempt()
        if found:
            return found
        time.sleep(step)
    raise AssertionError(f"no {what} within {timeout:g} s")


def kill(pid: int | None) -> int | None:
    """SIGKILLs `pid`; its pid, or None when there was none or it had ended meanwhile (look again)."""
    if pid is None:
        return None
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return pid


def under_way(testbed, jobs_before: dict, name_part: str = "") -> bool:
    """A job of this check runs on the cluster (Flink says RUNNING). With a harness connected to its TaskManager
    (asked for by the caller), the job is processing: a TaskManager starts an environment for its first bundle.
    (A worker-written spill file was the sign first: on an idle machine the job then ended before the kill
    failed a task.)

    `name_part`: only a job whose name holds it (`production`: parity names a side's job `parity-SIDE-...`)."""
    try:
        jobs = testbed.flink.get("/jobs/overview")["jobs"]
    except OSError:  # the REST API did not answer within its 10 s (seen once on the loaded machine): ask again
        return False
    return any(job["state"] == "RUNNING" and job["jid"] not in jobs_before and name_part in job["name"]
               for job in jobs)


def new_jobs(testbed, jobs_before: dict) -> dict[str, str]:
    return {jid: state for jid, state in testbed.flink.jobs().items() if jid not in jobs_before}


def cpu_ticks(pid: int) -> int | None:
    """User and system clock ticks process `pid` has used (/proc/PID/stat), or None once it has ended."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime and stime: fields 14 and 15 of proc(5), counted after comm


def _busy(harnesses: list[int], window: float) -> dict[int, int]:
    """The CPU ticks each of `harnesses` used over `window` s (those that ended meanwhile are left out)."""
    before = {pid: cpu_ticks(pid) for pid in harnesses}
    time.sleep(window)
    after = {pid: cpu_ticks(pid) for pid in harnesses}
    return {pid: after[pid] - before[pid] for pid in harnesses
            if before[pid] is not None and after[pid] is not None}


class HarnessWatch:
    """The pool's harnesses as seen since the watch began: those there already, those seen connected. `look` as
    often as a harness's connections may come and go (its life is 1.5-3.5 s here: every 50 ms or less)."""

    def __init__(self, pool):
        self.pool = pool
        self.there_before = set(pool.children())
        self.seen_connected: set[int] = set()

    def look(self) -> None:
        self.seen_connected.update(self.pool.connected())

    def starting(self) -> list[int]:
        """The harnesses started since the watch began that have never been seen connected, in pid order."""
        self.look()
        return sorted(pid for pid in self.pool.unconnected()
                      if pid not in self.there_before and pid not in self.seen_connected)


def harnesses_at(testbed, moment: Moment, watch: HarnessWatch) -> list[int]:
    """The pids of the pool's harnesses that are at `moment` now, in pid order (maybe none)."""
    if moment is Moment.START:
        return watch.starting()
    watch.look()
    processing = testbed.flink.processing(testbed.pool.connected())
    if moment is Moment.MID_BUNDLE:
        return sorted(pid for pid, ticks in _busy(processing, BUSY_WINDOW).items() if ticks >= BUSY_TICKS)
    return sorted(pid for pid, ticks in _busy(processing, IDLE_WINDOW).items() if ticks == 0)
