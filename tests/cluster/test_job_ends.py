"""A check that ends early leaves no Flink job running (issue 45, item 2): after a job timeout, and after SIGTERM,
Flink's REST API lists no job of the check as live the moment `parity check` has exited. The Beam job server's
Cancel alone ends only its own invocation ("Canceling job invocation"): the JobManager never saw a cancel, and the
job stayed RUNNING.

The checks run as `python -m parity check` processes, as an operator runs them, against a worker pool whose
harnesses die on start (`--harness_python=/bin/false`): their jobs wait for ever ("Still waiting for startup of
environment"), the case a job timeout exists for. Nothing here cancels a job for parity: the test bed's own
clean-up (`FlinkCluster.cancel_running`) runs only after the assertions.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from parity.replay.cancel import LIVE
from tests.cluster import testbed as bed
from tests.cluster.test_s3_paths import ROOT, _check_folders, _forget

pytestmark = pytest.mark.cluster

EXIT_TIMEOUT = 180.0  # seconds `parity check` has to exit once its job should end


@pytest.fixture(scope="module")
def dying_pool(testbed_dir, testbed):
    """A worker pool whose every harness exits at once, before it connects to its TaskManager."""
    pool = bed.start_worker_pool(os.path.join(testbed_dir, "worker-dying"), harness_python="/bin/false")
    yield pool
    pool.stop()


def _start_check(testbed, pool, name: str, **env: str) -> tuple[subprocess.Popen, str]:
    config, out = _check_folders(testbed, name)
    process = subprocess.Popen(
        [sys.executable, "-m", "parity", "check", config, "--out", out, "--runner", "FlinkRunner", "--",
         *testbed.options(pool=pool)],
        env=dict(os.environ, PARITY_PROGRESS="off", PYTHONPATH=ROOT, PARITY_FLINK_REST=testbed.flink.rest, **env),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    return process, config


def _finish(process: subprocess.Popen) -> str:
    try:
        output, _ = process.communicate(timeout=EXIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"parity check did not exit within {EXIT_TIMEOUT:g} s:\n{output.decode(errors='replace')[-3000:]}")
    return output.decode(errors="replace")


def _live_jobs(testbed, before: dict) -> dict[str, str]:
    return {jid: state for jid, state in testbed.flink.jobs().items() if jid not in before and state in LIVE}


def test_a_job_timeout_leaves_no_flink_job_of_the_check_running(testbed, dying_pool):
    before = testbed.flink.jobs()
    process, config = _start_check(testbed, dying_pool, "job-timeout-cancels", PARITY_FLINK_JOB_TIMEOUT="40")
    try:
        said = _finish(process)
        live = _live_jobs(testbed, before)  # at once: parity has confirmed the cancel before it exited
    finally:
        _forget(config)
        testbed.flink.cancel_running()
    assert process.returncode == 2, said
    assert set(testbed.flink.jobs()) - set(before), "no job of the check reached Flink: nothing was tested"
    assert not live, f"still live on Flink after parity exited: {live}"
    errors = [line for line in said.splitlines() if line.startswith("parity: error:")]
    assert len(errors) == 1, said
    assert "did not finish within PARITY_FLINK_JOB_TIMEOUT=40 s" in errors[0]
    assert "it was cancelled: Flink job " in errors[0] and "CANCELED" in errors[0], errors[0]


def test_a_check_stopped_with_sigterm_leaves_no_flink_job_running(testbed, dying_pool):
    before = testbed.flink.jobs()
    process, config = _start_check(testbed, dying_pool, "sigterm-cancels", PARITY_FLINK_JOB_TIMEOUT="300")
    try:
        deadline = time.monotonic() + EXIT_TIMEOUT
        while not any(state == "RUNNING" for state in _live_jobs(testbed, before).values()):
            assert process.poll() is None, _finish(process)
            assert time.monotonic() < deadline, "no job of the check ran on Flink"
            time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        said = _finish(process)
        live = _live_jobs(testbed, before)
    finally:
        _forget(config)
        testbed.flink.cancel_running()
    assert process.returncode == 143, said
    assert not live, f"still live on Flink after parity exited: {live}"
    assert set(testbed.flink.jobs().values()) >= {"CANCELED"}
