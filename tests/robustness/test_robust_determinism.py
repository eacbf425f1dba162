"""Determinism: the same inputs and config give a byte-identical report.json (CONTRACT section 5).

The scenario `window_late_shrinks_aggregates` is the most order-sensitive one: a global pass in arrival order
(lateness), per-(window, key) aggregates combined across batches, and side inputs. It is replayed three times,
on a shuffled copy of its capture, and with the DirectRunner's multi-process mode on two workers
(`--direct_num_workers=2 --direct_running_mode=multi_processing`, which the FnApiRunner honours). The Flink
runner is the subject of a later issue (issue 6); its equality with the DirectRunner is tested there.
"""
from __future__ import annotations

import json
import os
import random

import pytest
import yaml

import parity
from robust_helpers import REPO

# The slow tier (`make test`, not `make test-fast`): three whole checks of the same scenario, two of them with
# worker processes.
pytestmark = pytest.mark.slow

SCENARIO = os.path.join(REPO, "fixtures", "scenarios", "window_late_shrinks_aggregates")
MULTI_PROCESS = ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _copy(folder, *, shuffle_seed: int | None = None) -> str:
    """The scenario's config in `folder`, reading its capture by absolute path (or a shuffled copy of it)."""
    folder.mkdir()
    with open(os.path.join(SCENARIO, "parity.yaml"), encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    capture = os.path.normpath(os.path.join(SCENARIO, config["capture"]["path"]))
    if shuffle_seed is not None:
        with open(capture, encoding="utf-8") as handle:
            lines = [line for line in handle if line.strip()]
        random.Random(shuffle_seed).shuffle(lines)
        capture = str(folder / "shuffled.jsonl")
        with open(capture, "w", encoding="utf-8") as handle:
            handle.writelines(lines)
    config["capture"]["path"] = capture
    path = folder / "parity.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return str(path)


def test_three_runs_a_shuffled_capture_and_two_worker_processes_give_byte_identical_reports(tmp_path,
                                                                                           monkeypatch):
    # the worker processes import parity by name: make it importable wherever pytest was started
    monkeypatch.setenv("PYTHONPATH", REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = {f"run{i}": (_copy(tmp_path / f"run{i}"), None) for i in (1, 2, 3)}
    runs["shuffled"] = (_copy(tmp_path / "shuffled", shuffle_seed=8), None)
    runs["two-workers"] = (_copy(tmp_path / "two-workers"), MULTI_PROCESS)
    reports = {}
    for name, (config, options) in runs.items():
        out = tmp_path / name / "out"
        parity.check(config, out_dir=str(out), pipeline_options=options)
        reports[name] = (out / "report.json").read_bytes()
    first = reports["run1"]
    assert json.loads(first)["records"]["diverged"] > 0, "the scenario must diverge, or the test shows little"
    different = [name for name, data in reports.items() if data != first]
    assert not different, f"report.json differs from run1's in: {different}"
