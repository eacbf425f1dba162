"""A replay's counts as Beam metrics (parity/replay/counters.py) and the progress line made of them
(parity/console/progress.py, parity/replay/watch.py)."""
from __future__ import annotations

import json
import socket

import apache_beam as beam
from apache_beam.metrics import monitoring_infos
from apache_beam.metrics.execution import MetricKey, MetricResult
from apache_beam.metrics.metric import MetricName, MetricResults
from apache_beam.portability.api import beam_job_api_pb2
from google.protobuf import json_format

from parity.config import load_config
from parity.storage.context import Storage
from parity.console import progress
from parity.replay import counters, watch
from parity.replay.pipeline import ReplaySide
from parity.replay.runners import make_options, make_runner
from parity.sets.fingerprint_set import finalize

CONFIG = """
version: 1
capture: {path: capture.jsonl, key: [id], max_quarantined: 0.5, schema: {id: int64, t: int64, fare: float64}}
sides:
  offline:
    timestamp: {field: t, unit: s}
    window: {type: fixed, size: 1h}
  production:
    timestamp: {field: t, unit: s}
    window: {type: fixed, size: 1h}
"""
UNREADABLE = ["{broken", '{"id": 7, "t": "not a time", "fare": 1}', '{"t": 1, "fare": 1.0}']


def _counter(step: str, name: str, committed: int | None, attempted: int) -> MetricResult:
    return MetricResult(MetricKey(step, MetricName(counters.NAMESPACE, name)), committed, attempted)


def test_the_progress_line_of_metric_results_sums_a_sides_counters_over_its_steps():
    results = {MetricResults.COUNTERS: [
        _counter("Replay[offline]/ReadBatches", "records_read.offline", 1200, 1300),
        _counter("Replay[offline]/ReadBatches", "quarantined.offline", 3, 3),
        _counter("Replay[offline]/ApplyStages", "records_staged.offline", 700, 700),
        _counter("Replay[offline]/ApplyStages.1", "records_staged.offline", None, 500),  # attempted only
        _counter("Replay[offline]/WriteSet", "records_written.offline", 900, 900),
        _counter("Replay[prod.eu]/ReadBatches", "records_read.prod.eu", 5, 5),  # another side
    ]}
    counts = counters.totals(results, "offline")
    assert counts == {"records_read": 1200, "quarantined": 3, "records_staged": 1200, "records_written": 900}
    assert progress.line("offline", counts) == "replaying offline: 1200 records read, 3 quarantined, 1200 staged, " \
                                               "900 written"
    assert counters.totals(results, "prod.eu")["records_read"] == 5
    assert progress.line("prod.eu", counters.totals(results, "prod.eu")) == \
        "replaying prod.eu: 5 records read, 0 staged, 0 written"


def test_flinks_rest_accumulator_gives_the_counts_the_job_service_would():
    infos = [monitoring_infos.int64_user_counter(counters.NAMESPACE, "records_read.offline", 240, ptransform="s1"),
             monitoring_infos.int64_user_counter(counters.NAMESPACE, "quarantined.offline", 2, ptransform="s1"),
             monitoring_infos.int64_user_counter("user", "records_read.offline", 99, ptransform="s1")]
    response = beam_job_api_pb2.GetJobMetricsResponse(
        metrics=beam_job_api_pb2.MetricResults(attempted=infos))
    accumulators = {"job-accumulators": [], "user-task-accumulators": [
        {"name": "other", "type": "LongCounter", "value": "3"},
        {"name": watch.ACCUMULATOR, "type": "MetricsAccumulator", "value": json_format.MessageToJson(response)}]}
    counts = watch.accumulator_counts(json.loads(json.dumps(accumulators)), "offline")
    assert counts == {"records_read": 240, "quarantined": 2, "records_staged": 0, "records_written": 0}
    assert watch.accumulator_counts({"user-task-accumulators": []}, "offline") is None


def test_a_log_gets_a_progress_line_when_the_counts_change_and_none_at_the_end(monkeypatch, capsys):
    monkeypatch.setenv("PARITY_PROGRESS", "log")
    progress.begin("offline")
    counts = dict.fromkeys(counters.COUNTS, 0)
    progress.counts("offline", counts)  # nothing counted yet: no line
    progress.counts("offline", {**counts, "records_read": 2000})
    progress.counts("offline", {**counts, "records_read": 2000})  # unchanged: no line
    progress.counts("offline", {**counts, "records_read": 2000, "records_written": 2000}, final=True)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("parity: event=progress side=offline read=2000 quarantined=0 staged=0 written=0 ")


def test_a_direct_runner_replays_metrics_count_every_record_of_its_fingerprint_set(tmp_path):
    lines = [json.dumps({"id": i, "t": 1_709_942_400 + 97 * i, "fare": i / 4}) for i in range(50)]
    (tmp_path / "capture.jsonl").write_text("\n".join(lines[:20] + UNREADABLE + lines[20:]) + "\n")
    (tmp_path / "parity.yaml").write_text(CONFIG)
    config = load_config(str(tmp_path / "parity.yaml"))
    side = config.side("offline")
    out = str(tmp_path / "offline")
    pipeline = beam.Pipeline(runner=make_runner("DirectRunner"), options=make_options("DirectRunner", None))
    # several batches: counted once per batch
    _ = pipeline | ReplaySide(config, side, out, batch_size=16, storage=Storage())
    result = pipeline.run()
    result.wait_until_finish()
    counts = counters.of_result(result, "offline")
    records = finalize(out, {"side": "offline"})["records"]
    assert records == {"read": 53, "fingerprinted": 50, "quarantined": 3}
    assert counts == {"records_read": records["read"], "quarantined": records["quarantined"],
                      "records_staged": records["fingerprinted"], "records_written": records["fingerprinted"]}
    assert counts["records_read"] == counts["records_written"] + counts["quarantined"]


def test_a_watch_whose_runner_and_flink_both_fail_reads_nothing_and_raises_nothing():
    class Unanswering:  # a pipeline result whose runner has gone (its job service closed)
        def metrics(self):
            raise ConnectionError("the job service is gone")

    with socket.socket() as sock:  # a port nothing listens on any more
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reading = watch.Watch("offline", Unanswering(), rest=lambda: f"http://127.0.0.1:{port}", job="parity-x")
    assert reading.reading() is None
    assert reading.final() is None
