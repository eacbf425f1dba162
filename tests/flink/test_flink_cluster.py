"""A standalone Flink 1.19 session cluster on localhost (scripts/flink_cluster.sh: JobManager + TaskManager from
PyPI's apache-flink and apache-flink-libraries in .flink-venv): a replay submitted to it at localhost:8081 gives
the DirectRunner's report.json byte for byte.

The set-up installs Flink when .flink-venv lacks it (about 3 minutes, 220 MB from PyPI, measured on 2 cores) and
starts the cluster (about 30-70 s). If that fails, the test FAILS with the script's reason: it is not skipped.
A cluster that already answers at localhost:8081 is used as it is and left running.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request

import pytest

import parity
from parity.replay import flink

# LOOPBACK workers log "CANCELLED: Multiplexer hanging up" from their gRPC reader threads when a job ends: harmless
# (the report bytes are what is checked).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "flink_cluster.sh")
REST = "localhost:8081"
SETUP_TIMEOUT = float(os.environ.get("PARITY_FLINK_CLUSTER_SETUP_TIMEOUT", "900"))  # install + start, seconds
CONFIG = os.path.join(ROOT, "fixtures", "scenarios", "window_late_dropped", "parity.yaml")


def _get(path: str) -> dict:
    with urllib.request.urlopen(f"http://{REST}{path}", timeout=10) as response:
        return json.load(response)


@pytest.fixture(scope="module")
def flink_cluster(record_testsuite_property):
    already = subprocess.run([SCRIPT, "status"], capture_output=True, text=True).returncode == 0
    started = time.monotonic()
    if not already:
        try:
            done = subprocess.run([SCRIPT, "start"], capture_output=True, text=True, timeout=SETUP_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            subprocess.run([SCRIPT, "stop"], capture_output=True, text=True)
            pytest.fail(f"scripts/flink_cluster.sh start did not finish within {SETUP_TIMEOUT:g} s "
                        f"(PARITY_FLINK_CLUSTER_SETUP_TIMEOUT): {(exc.stderr or b'')[-2000:]!r}")
        if done.returncode != 0:
            pytest.fail(f"the standalone Flink cluster could not be installed or started "
                        f"(scripts/flink_cluster.sh start, exit {done.returncode}):\n{done.stderr[-3000:]}")
    record_testsuite_property("flink_cluster_setup_seconds", round(time.monotonic() - started, 1))
    overview = _get("/overview")
    minor = flink.flink_version()
    assert overview["flink-version"].startswith(minor + "."), \
        f"the cluster at {REST} runs Flink {overview['flink-version']}; the job server needs {minor}"
    yield REST
    if not already:
        subprocess.run([SCRIPT, "stop"], capture_output=True, text=True, timeout=120)


def test_a_replay_submitted_to_the_standalone_cluster_gives_the_direct_runners_report(
        flink_cluster, tmp_path, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    finished_before = _get("/overview")["jobs-finished"]
    try:
        # What a user types: parity starts its job server for that master (the default path, no --job_endpoint).
        parity.check(CONFIG, out_dir=str(tmp_path / "cluster"), runner="FlinkRunner",
                     pipeline_options=[f"--flink_master={flink_cluster}", "--environment_type=LOOPBACK"])
    finally:
        flink.stop_job_servers()
    # Both sides ran as jobs on the cluster, and finished; at once (`auto`): its REST API said the slots of both
    # jobs were free (issue 44)
    assert _get("/overview")["jobs-finished"] - finished_before == 2
    with open(tmp_path / "cluster" / "timings.json", encoding="utf-8") as handle:
        assert json.load(handle).get("sides_at_once") is True
    parity.check(CONFIG, out_dir=str(tmp_path / "direct"), runner="DirectRunner")
    cluster, direct = ((tmp_path / run / "report.json").read_bytes() for run in ("cluster", "direct"))
    assert cluster == direct, "report.json differs between the standalone cluster and the DirectRunner"
