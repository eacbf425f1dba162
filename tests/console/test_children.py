"""parity.console.children: a child process gets a request and sends back a value or an error; one that
leaves no result is a RunnerError naming it; close() stops it and removes its scratch folder."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from parity.console import children
from parity.errors import InputError, RunnerError

MODULES = Path(__file__).resolve().parent / "child_modules"


def _start(request: dict, **kwargs) -> children.Child:
    return children.Child.start("the test child (a child process)", "parity_test_child", request,
                                extra_env={"PYTHONPATH": str(MODULES), "PARITY_TEST_EXTRA": "seen"}, **kwargs)


def test_a_child_returns_its_works_value_and_sees_the_callers_environment():
    child = _start({"do": "return", "value": [1, 2.5, "three"]})
    try:
        assert child.result() == {"value": [1, 2.5, "three"], "extra": "seen"}
        assert child.process.returncode == 0
    finally:
        child.close()
    assert not os.path.exists(child.scratch)


def test_a_parity_error_raised_in_the_child_is_raised_in_the_parent_as_itself():
    child = _start({"do": "raise"})
    try:
        with pytest.raises(InputError, match=r"^capture.jsonl: line 3: not JSON; check capture.path$"):
            child.result()
    finally:
        child.close()


def test_a_child_that_leaves_no_result_is_a_runner_error_naming_it_its_exit_code_and_the_fix():
    child = _start({"do": "exit"}, fix="Run it again with --one-process")
    try:
        with pytest.raises(RunnerError, match=r"^the test child \(a child process\) ended with exit code 3 and no "
                                              r"result \(FileNotFoundError\); its output is above\. Run it again "
                                              r"with --one-process$"):
            child.result()
    finally:
        child.close()


def _started(request: dict, started) -> children.Child:
    child = _start(request)
    end = time.monotonic() + 30
    while not started.exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert started.exists() and child.process.poll() is None
    assert os.path.isdir(child.scratch)
    return child


def test_close_asks_a_running_child_to_stop_so_its_work_cleans_up_and_removes_its_scratch_folder(tmp_path):
    started = tmp_path / "started"
    child = _started({"do": "sleep", "started": str(started)}, started)
    child.close()
    assert child.process.returncode == 0  # SIGTERM raised in its work, which ended through its `finally`
    assert (tmp_path / "started.cleaned").read_text(encoding="utf-8") == "cleaned"
    assert not os.path.exists(child.scratch)


def test_close_kills_a_child_that_does_not_stop_within_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(children, "STOP_GRACE", 1.0)
    started = tmp_path / "started"
    child = _started({"do": "stubborn", "started": str(started)}, started)
    child.close()
    assert child.process.returncode == -9
    assert not (tmp_path / "started.cleaned").exists()
    assert not os.path.exists(child.scratch)


def test_the_environment_puts_this_processes_path_before_the_callers_and_names_this_process_as_parent():
    env = children.environment({"PYTHONPATH": "/elsewhere", "PARITY_TEST_EXTRA": "x"})
    assert env["PYTHONPATH"].split(os.pathsep) == [p for p in sys.path if p] + ["/elsewhere"]
    assert env["PARITY_TEST_EXTRA"] == "x" and env["PARITY_PARENT_PID"] == str(os.getpid())

