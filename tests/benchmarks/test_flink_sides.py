"""benchmarks/flink_sides.py's measurement: the probe on a check's PYTHONPATH (benchmarks/phases/sitecustomize.py)
records a real Beam pipeline's phases in the process it runs in, and the phases of a check are read from such
events and the job server's job states."""
from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import flink_sides  # noqa: E402


def test_the_probe_records_a_pipelines_construction_and_run_in_the_process_that_runs_it(tmp_path):
    events = tmp_path / "phases.jsonl"
    env = dict(os.environ, PARITY_PHASES=str(events),
               PYTHONPATH=os.pathsep.join([os.path.join(REPO, "benchmarks", "phases"), REPO]))
    code = ("import apache_beam as beam\n"
            "from parity.console import progress\n"
            "with beam.Pipeline(runner='FnApiRunner') as p:\n"
            "    _ = p | beam.Create([1, 2]) | beam.Map(str)\n"
            "progress.event('diff_done', paired=2)\n")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    said = [json.loads(line) for line in events.read_text(encoding="utf-8").splitlines()]
    whats = [event["what"] for event in said]
    assert whats[0] == "process_start" and whats[-1] == "process_exit"
    for what in ("pipeline_construct_start", "pipeline_run_start", "pipeline_run_end", "parity:diff_done"):
        assert what in whats, whats
    assert whats.index("pipeline_construct_start") < whats.index("pipeline_run_start") < whats.index("pipeline_run_end")
    assert {event["pid"] for event in said} == {said[0]["pid"]}  # one process: the one that ran the pipeline
    assert [event["t"] for event in said] == sorted(event["t"] for event in said)


def test_a_checks_phases_and_its_jobs_overlap_are_read_from_the_probes_events_and_the_job_servers_states():
    def event(what, t, pid=1, **fields):
        return {"what": what, "t": t, "pid": pid, **fields}

    events = [event("process_start", 100.0), event("parity:replay_start", 101.0, side="offline"),
              event("pipeline_construct_start", 101.1), event("submit_start", 101.5), event("job_prepare_start", 101.6),
              event("job_prepare_end", 101.7), event("submit_end", 102.0), event("harness_connect_start", 104.0),
              event("job_wait_end", 107.0), event("parity:replay_done", 107.5, side="offline"),
              event("process_start", 101.2, pid=2), event("parity:replay_start", 103.0, pid=2, side="production"),
              event("pipeline_construct_start", 103.1, pid=2), event("submit_start", 103.4, pid=2),
              event("submit_end", 104.0, pid=2), event("job_wait_end", 108.0, pid=2),
              event("parity:replay_done", 108.2, pid=2, side="production"), event("parity:diff_done", 109.0),
              event("process_exit", 109.5)]
    jobs = [{"name": "a", "states": [{"state": "STOPPED", "t": 101.6}, {"state": "RUNNING", "t": 102.0},
                                     {"state": "DONE", "t": 106.9}]},
            {"name": "b", "states": [{"state": "STOPPED", "t": 103.5}, {"state": "RUNNING", "t": 104.0},
                                     {"state": "DONE", "t": 107.9}]}]
    phases = flink_sides._spans(events, jobs)
    offline, production = phases["side_offline"], phases["side_production"]
    assert (offline["pid"], production["pid"]) == ("main", "child")
    assert offline["construct_s"] == 0.4 and offline["submit_s"] == 0.5 and offline["job_s"] == 5.0
    assert offline["prepare_s"] == 0.1 and offline["harness_asked_after_submit_s"] == 2.0
    assert offline["finalize_s"] == 0.5 and production["replay_start_at_s"] == 3.0
    assert phases["after_replays_to_diff_done_s"] == 0.8 and phases["diff_done_to_exit_s"] == 0.5
    assert phases["jobs_overlap_s"] == 2.9  # b ran from 104.0, a ended at 106.9
