"""Both sides of a check at once on Flink (issue 44): the two sides' jobs go to the session's job server together
(this process submits the first side's, the `--sides-at-once` child the second's), and the report is the one the
sides give one after the other, byte for byte. That the jobs ran at the same time is read from the job server's
own state timestamps (`GetStateStream`), not from a wall clock around the check; a python transform whose sides
meet (tests/meeting_transform.py) makes the check fail outright if they did not. A `saved: {from_side}`
second side still waits for the first side's TFT graph, with LOOPBACK workers (the gate in the pipelines' steps)
and with a worker pool's harnesses (`--environment_type=EXTERNAL`: the gate before the second job is submitted).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import grpc
import pytest

import parity
from parity import compat
from parity.sets.fingerprint_set import VALUES_DIR

from tests import meeting_transform
from tests.flink.job_states import job_ids, job_states
from tests.flink.test_flink_scenarios import assert_same_bytes

# LOOPBACK workers log "CANCELLED: Multiplexer hanging up" from their gRPC reader threads when a job ends: harmless.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIOS = os.path.join(ROOT, "fixtures", "scenarios")
TFT_SERVING = os.path.join(SCENARIOS, "clean_tft_serving", "parity.yaml")


def _jobs_since(endpoint: str, known: set[str]) -> list[dict[str, float]]:
    """The job server's jobs not in `known`, each as its states' timestamps (seconds) by state name."""
    return [{state["state"]: state["t"] for state in job["states"]} for job in job_states(endpoint, known)]


def _checked(config: str, out: str, endpoint: str, options: list[str], sides_at_once: str) -> list[dict]:
    """Runs the check on Flink; returns its two sides' jobs' state timestamps, the first submitted first (its diff
    runs in this process: with a worker pool's harnesses `--diff-on auto` would add the diff's own job)."""
    before = job_ids(endpoint)
    parity.check(config, out_dir=out, runner="FlinkRunner", pipeline_options=options, sides_at_once=sides_at_once,
                 diff_on="local")
    jobs = _jobs_since(endpoint, before)
    assert len(jobs) == 2 and all("RUNNING" in job and "DONE" in job for job in jobs), jobs
    return sorted(jobs, key=lambda job: job["RUNNING"])


def test_both_sides_jobs_run_at_once_on_flink_and_the_report_is_the_one_after_the_other_byte_for_byte(
        tmp_path, flink_options, flink_job_endpoint, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    config = meeting_transform.write_config(str(tmp_path))
    one_after_the_other = _checked(config, str(tmp_path / "off"), flink_job_endpoint, flink_options, "off")
    first, second = one_after_the_other
    assert second["RUNNING"] >= first["DONE"]  # the sequential path stays sequential
    meet = tmp_path / "meet"
    meet.mkdir()
    monkeypatch.setenv(meeting_transform.MEET_ENV, str(meet))  # each side's transform now waits for the other's
    at_once = _checked(config, str(tmp_path / "on"), flink_job_endpoint, flink_options, "on")
    first, second = at_once
    # by the job server's clock: the second job ran before the first one ended
    assert second["RUNNING"] < first["DONE"], at_once
    assert sorted(os.listdir(meet)) == ["check-offline", "check-production"]
    with open(tmp_path / "on" / "timings.json", encoding="utf-8") as handle:
        assert json.load(handle)["sides_at_once"] is True
    assert_same_bytes(str(tmp_path / "on" / "report.json"), str(tmp_path / "off" / "report.json"), "sides-meet")
    with open(tmp_path / "on" / "report.json", encoding="utf-8") as handle:
        assert json.load(handle)["records"]["diverged"] > 0  # the bucket boundary scenario's divergence is there


def _graph_written_at(out: str) -> float:
    return os.path.getmtime(os.path.join(out, "sides", "offline", "tft_output", "transform_fn", "saved_model.pb"))


def _transformed_at(out: str) -> float:
    """When the production side's first transformed batch was written: its earliest values part (a gated side
    writes its stage values, `stage_values/`, before it waits; a part's transform outputs after)."""
    folder = os.path.join(out, "sides", "production", VALUES_DIR)
    parts = [os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".parquet")]
    assert parts, folder
    return min(os.path.getmtime(path) for path in parts)


def test_a_gated_tft_second_side_at_once_on_flink_waits_for_the_first_sides_graph(
        tmp_path, flink_options, flink_job_endpoint, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    _checked(TFT_SERVING, str(tmp_path / "off"), flink_job_endpoint, flink_options, "off")
    first, second = _checked(TFT_SERVING, str(tmp_path / "on"), flink_job_endpoint, flink_options, "on")
    assert second["RUNNING"] < first["DONE"]  # the gated side's job was submitted while the TFT side's ran
    assert _transformed_at(str(tmp_path / "on")) >= _graph_written_at(str(tmp_path / "on"))
    assert_same_bytes(str(tmp_path / "on" / "report.json"), str(tmp_path / "off" / "report.json"),
                      "clean_tft_serving at once")


@pytest.fixture
def worker_pool_address():
    """parity's SDK worker pool (`python -m parity.replay.worker_pool`) for the session's embedded Flink, stopped
    by its pid at the end. Its harnesses import parity and the TFT scenario's module, as a cluster's workers must
    (docs/flink.md, "The config's modules on the workers")."""
    port = compat.free_port()
    paths = [ROOT, os.path.dirname(TFT_SERVING), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in paths if path))
    process = subprocess.Popen([sys.executable, "-m", "parity.replay.worker_pool", f"--service_port={port}"],
                               cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with grpc.insecure_channel(f"localhost:{port}") as channel:
                    grpc.channel_ready_future(channel).result(timeout=2)
                break
            except grpc.FutureTimeoutError:
                assert process.poll() is None and time.monotonic() < deadline, "the worker pool did not start"
        yield f"localhost:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_gated_second_side_whose_harnesses_run_in_a_worker_pool_waits_before_its_job_is_submitted(
        tmp_path, flink_options, flink_job_endpoint, worker_pool_address, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    external = [f"--job_endpoint={flink_job_endpoint}", "--environment_type=EXTERNAL",
                f"--environment_config={worker_pool_address}", "--parallelism=1"]
    first, second = _checked(TFT_SERVING, str(tmp_path / "on"), flink_job_endpoint, external, "on")
    # neither end of the gate reaches a pool's harness: the child submits its job once the first job has ended
    assert second["RUNNING"] >= first["DONE"]
    _checked(TFT_SERVING, str(tmp_path / "off"), flink_job_endpoint, flink_options, "off")
    assert_same_bytes(str(tmp_path / "on" / "report.json"), str(tmp_path / "off" / "report.json"),
                      "clean_tft_serving at once, harnesses in a worker pool")
