"""The benchmark's embedded-Flink contender (`parity_flink`) runs `parity check` on Flink beside the DirectRunner
check, and the harness compares the two: a tiny run on the session's job server (handed to the contender's
process the way parity hands its own to child processes, so no second job server starts)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from parity.replay import flink

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(REPO, "benchmarks", "run.py")


def test_the_flink_contender_checks_the_same_records_as_the_directrunner_and_is_compared_with_it(
        tmp_path, flink_job_endpoint):
    env = dict(os.environ)
    env[flink._INHERITED] = json.dumps({f"{flink.job_server_jar()}|{flink.LOCAL_MASTER}": flink_job_endpoint})
    results = tmp_path / "results"
    done = subprocess.run(
        [sys.executable, RUN, "--records", "300", "--transform", "python", "--contenders", "parity,parity_flink",
         "--variant", "diverged25", "--work", str(tmp_path / "work"), "--results", str(results)],
        cwd=REPO, capture_output=True, text=True, timeout=900, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open(results / "300-python-diverged25.json", encoding="utf-8") as handle:
        data = json.load(handle)
    direct, on_flink = data["contenders"]["parity"], data["contenders"]["parity_flink"]
    assert on_flink["runs"] == 1 and on_flink["failed"] == 0
    assert on_flink["timings"]["runner"] == "FlinkRunner"
    assert on_flink["outcome"] == direct["outcome"] and 0 < direct["outcome"]["diverged"] < 300
    assert data["ratios"]["parity_flink_over_parity_wall"] == round(on_flink["wall_s"] / direct["wall_s"], 3)
    assert any(t["target"].startswith("embedded Flink check / DirectRunner check") for t in data["targets"])
