"""A replay's counts on the embedded Flink: in the job's Beam metrics at its end, and in Flink's REST API while it
runs (what `parity.replay.watch` reads on a cluster, where the steps' own process is not the client's)."""
from __future__ import annotations

import os
import threading
import time
import uuid

import apache_beam as beam

from parity.config import load_config
from parity.replay import counters, watch
from parity.replay.job import replay_side
from parity.replay.pipeline import ReplaySide
from parity.replay.runners import make_options, make_runner
from parity.sets.fingerprint_set import finalize
from parity.storage.context import Storage

from tests.flink import held_transform

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRIPS = os.path.join(ROOT, "fixtures", "scenarios", "_data", "trips.jsonl")  # 240 records
CONFIG = """
version: 1
capture: {{path: {trips}, key: [trip_id],
           schema: {{trip_id: int64, event_time: int64, ingest_time: int64, zone: string, company: string,
                    fare: float64, miles: float64}}}}
sides:
  offline:
    timestamp: {{field: event_time, unit: s}}
    window: {{type: fixed, size: 1h}}
    {transform}
  production:
    timestamp: {{field: event_time, unit: s}}
    window: {{type: fixed, size: 1h}}
"""
DEADLINE = 180.0  # seconds the held replay's read may take to show in Flink's REST API


def _config(tmp_path, transform: str = ""):
    path = tmp_path / "parity.yaml"
    path.write_text(CONFIG.format(trips=TRIPS, transform=transform))
    return load_config(str(path))


def test_a_replay_on_flink_carries_its_counts_in_the_jobs_metrics(tmp_path, flink_options, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    config = _config(tmp_path)
    out = str(tmp_path / "offline")
    pipeline = beam.Pipeline(runner=make_runner("FlinkRunner"),
                             options=make_options("FlinkRunner", flink_options))
    _ = pipeline | ReplaySide(config, config.side("offline"), out, storage=Storage.of(flink_options))
    result = pipeline.run()
    result.wait_until_finish()
    counts = counters.of_result(result, "offline")
    records = finalize(out, {"side": "offline"})["records"]
    assert records["read"] == 240
    assert counts == {"records_read": 240, "quarantined": records["quarantined"],
                      "records_staged": records["fingerprinted"], "records_written": records["fingerprinted"]}


def test_while_a_replay_holds_in_its_transform_flinks_rest_api_already_counts_its_records_read(
        tmp_path, flink_job_server, flink_options, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    config = _config(tmp_path, "transform: {python: 'tests.flink.held_transform:features'}")
    name = f"parity-test-held-{uuid.uuid4().hex[:8]}"
    offset = flink_job_server.log_size()
    outcome: dict = {}

    def replay() -> None:
        try:
            outcome["manifest"] = replay_side(config, config.side("offline"), str(tmp_path / "offline"),
                                              runner="FlinkRunner", beam_args=[*flink_options, f"--job_name={name}"])
        except BaseException as exc:  # raised again in the test's thread
            outcome["error"] = exc

    held_transform.RELEASE.clear()
    thread = threading.Thread(target=replay, daemon=True)
    thread.start()
    counts = None
    try:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline and thread.is_alive():
            rest = flink_job_server.rest_after(offset)
            try:
                counts = watch.flink_counts(rest, name, "offline") if rest else None
            except OSError:  # the job's MiniCluster is not up yet
                counts = None
            if counts and counts["records_read"] == 240:
                break
            time.sleep(0.2)
        held = thread.is_alive()
    finally:
        held_transform.RELEASE.set()
        thread.join(timeout=300)
    assert "error" not in outcome, outcome.get("error")
    assert held, "the replay ended before its counts were read"
    assert counts is not None and counts["records_read"] == 240, counts
    assert counts["records_written"] == 0  # its transform had not let a batch through yet
    assert outcome["manifest"]["records"]["read"] == 240
