"""Faults survived on the test bed (issue 26 item 5): while a check replays on the cluster, one SDK harness of the
worker pool is killed by its pid; Flink's fixed-delay restart strategy restarts the job, the check completes,
and its report.json is the undisturbed run's byte for byte: no record lost, none counted twice (part files are
named deterministically and replaced whole, so a restarted job overwrites what the failed attempt wrote)."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.cluster.test_s3_paths import cluster_check, direct_report  # noqa: F401 (a fixture)

# A drill, not part of the suite (pytest collects test_*.py only): run it by hand with
#     .venv/bin/python -m pytest tests/cluster/drill_kill_worker.py
# Of two runs here, one passed (the job restarted, the report was the same) and one hung: the killed harness's
# job stayed RUNNING for more than 12 minutes with no harness and no task failure, so the check never returned.
# Until the cause is found (Beam's cached EXTERNAL environment in the TaskManager?) and the check has an upper
# bound, surviving a killed worker is not a feature parity claims (issue 26, item 5, not done).
pytestmark = [pytest.mark.cluster, pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")]


def _kill_first(find_pids, killed: list, stop: threading.Event, delay: float = 3.0) -> None:
    """Waits until `find_pids` names a process, lets it work `delay` s, then SIGKILLs it (once)."""
    while not stop.is_set():
        pids = find_pids()
        if pids:
            time.sleep(delay)
            pids = find_pids()
            if pids:
                try:
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])
                except ProcessLookupError:
                    continue
                return
        time.sleep(0.2)


def test_a_check_survives_a_killed_sdk_worker_and_gives_the_same_report(testbed, direct_report, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    failed_before = testbed.flink.overview()["jobs-failed"]
    failures_before = testbed.flink.failures()
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_first, args=(testbed.pool.children, killed, stop), daemon=True)
    killer.start()
    try:
        report = cluster_check(testbed, "worker-killed")
    finally:
        stop.set()
        killer.join(timeout=10)
    assert killed, "no SDK harness ran in the worker pool while the check ran"
    assert report == direct_report
    assert testbed.flink.failures() > failures_before, "the killed harness made no task fail: nothing was tested"
    assert testbed.flink.overview()["jobs-failed"] == failed_before  # restarted, not failed
