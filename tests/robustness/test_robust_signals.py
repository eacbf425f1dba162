"""Signals (issue 24, items 8, 9 and 11): SIGINT and SIGTERM stop a run cleanly at any moment, and the child
process of `--sides-at-once on` never outlives its parent.

Each test runs the real CLI in a subprocess and signals it for real, at a point the user code announces: it
writes `reached` and then waits (at most a minute) for `release`, which the test writes after the signal has
been sent. A signal lands in the main thread; TensorFlow runs a `tf.py_function` in one of its own threads
while the main thread waits inside TensorFlow, so the interruption is raised there when the function returns.

The subprocess starts with SIGINT at its default: a background job of a non-interactive shell (as CI may run
pytest) inherits SIGINT ignored, and parity, like any program, leaves an ignored SIGINT ignored.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import yaml

from robust_helpers import PYTHON, REPO, good_records, jsonl_lines, make_project, python_env

# The slow tier (`make test`, not `make test-fast`): each test runs the CLI in a subprocess, often a TFT run, and
# signals it at a moment of the run.
pytestmark = pytest.mark.slow

HOOKS = '''
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# "<hook>:<call number>[@<command>]", e.g. "pyfunc:2", or "record:1@replay": only in a `parity replay` process
POINT, _, COMMAND = os.environ.get("PARITY_TEST_POINT", "").partition("@")


def _hook(name):
    """Counts the calls of hook `name` in this process; at the call POINT names, says so and waits."""
    if COMMAND and COMMAND not in sys.argv[1:2]:
        return
    with open(os.path.join(HERE, f"calls-{name}-{os.getpid()}"), "a") as handle:
        handle.write("x")
    with open(os.path.join(HERE, f"calls-{name}-{os.getpid()}")) as handle:
        calls = len(handle.read())
    if POINT != f"{name}:{calls}":
        return
    with open(os.path.join(HERE, f"reached-{os.getpid()}"), "w") as handle:
        handle.write(POINT)
    end = time.monotonic() + 60  # bounded: a test that failed must not leave a process behind for long
    while not os.path.exists(os.path.join(HERE, "release")) and time.monotonic() < end:
        time.sleep(0.01)
'''

PYTHON_SIDE = HOOKS + '''

def features(record):
    if record["id"] == 3:
        _hook("record")
    return {"v": record["v"]}
'''

TFT_SIDE = HOOKS + '''
import tensorflow as tf
import tensorflow_transform as tft


def _in_graph(values):
    _hook("pyfunc")  # once per batch the graph runs on: the analysis first, then the transform
    return values


def preprocessing_fn(inputs):
    _hook("trace")  # TFT traces this while the pipeline is built, and again to export the transform graph
    values = tf.py_function(_in_graph, [tf.cast(inputs["v"], tf.float32)], tf.float32)
    values.set_shape([None])
    return {"v_z": tft.scale_to_z_score(values)}


def features(record):
    return {"v_z": record["v"]}
'''

REPORTS = ("report.json", "report.md", "report.html", "junit.xml", "timings.json")


def _project(folder, code, tft=False):
    project = make_project(folder, lines=jsonl_lines(good_records(40)), module_code=code)
    if tft:
        with open(project.config, encoding="utf-8") as handle:
            document = yaml.safe_load(handle)
        document["sides"]["offline"]["transform"] = {"tft": f"{project.module}:preprocessing_fn"}
        with open(project.config, "w", encoding="utf-8") as handle:
            yaml.safe_dump(document, handle, sort_keys=False)
    return project


def _start(project, *extra, point=""):
    """`parity check` in a subprocess; its output goes to files (a child holding a pipe open would keep a
    reader waiting after its parent ended)."""
    env = python_env(PARITY_TEST_POINT=point)
    with open(os.path.join(project.folder, "stdout"), "w") as out, \
            open(os.path.join(project.folder, "stderr"), "w") as err:
        return subprocess.Popen([PYTHON, "-m", "parity", "check", project.config, "--out", project.out, *extra],
                                cwd=REPO, env=env, stdout=out, stderr=err,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_reached(project, proc, count=1, timeout=180.0):
    """The pids of the processes that reached the test's point, once `count` have (or the run ended)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        reached = [name for name in os.listdir(project.folder) if name.startswith("reached-")]
        if len(reached) >= count:
            return sorted(int(name.split("-", 1)[1]) for name in reached)
        if proc.poll() is not None:
            code, out, err = _finish(project, proc)
            pytest.fail(f"the run ended (exit {code}) before reaching the point:\n{out}\n{err}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail("the run did not reach the point in time")


def _release(project):
    with open(os.path.join(project.folder, "release"), "w"):
        pass


def _alive(pid):
    """Whether `pid` runs (a zombie waiting for a parent that will not reap it does not)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _ended_within(pid, seconds):
    end = time.monotonic() + seconds
    while _alive(pid) and time.monotonic() < end:
        time.sleep(0.02)
    return not _alive(pid)


def _finish(project, proc, timeout=120):
    """The exit code, stdout and stderr of the run, once it has ended."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    with open(os.path.join(project.folder, "stdout")) as out, open(os.path.join(project.folder, "stderr")) as err:
        return proc.returncode, out.read(), err.read()


# ---------------------------------------------------------------------------------------------- item 11

@pytest.mark.parametrize("point", ["trace:1", "pyfunc:1", "trace:4", "pyfunc:2"],
                         ids=["while-tft-traces-the-preprocessing-fn", "inside-the-tft-analysis-step",
                              "while-the-transform-graph-is-exported", "inside-the-tft-transform-step"])
def test_ctrl_c_at_any_point_of_a_tft_run_exits_130_interrupted_without_a_traceback(point, tmp_path):
    project = _project(tmp_path, TFT_SIDE, tft=True)
    proc = _start(project, "--sides-at-once", "off", point=point)
    _wait_reached(project, proc)
    proc.send_signal(signal.SIGINT)
    _release(project)
    code, out, err = _finish(project, proc)
    assert code == 130, err
    assert err.rstrip().endswith("parity: interrupted")
    assert "Traceback" not in err and "RuntimeError" not in err and "parity: error" not in err
    assert not any(os.path.exists(os.path.join(project.out, name)) for name in REPORTS)


def test_ctrl_c_inside_a_python_transform_step_exits_130_interrupted(tmp_path):
    project = _project(tmp_path, PYTHON_SIDE)
    proc = _start(project, "--sides-at-once", "off", point="record:1")
    _wait_reached(project, proc)
    proc.send_signal(signal.SIGINT)
    _release(project)
    code, out, err = _finish(project, proc)
    assert code == 130, err
    assert err.rstrip().endswith("parity: interrupted")
    assert "Traceback" not in err and "parity: error" not in err


# ---------------------------------------------------------------------------------------------- item 9

def test_sigterm_is_handled_like_ctrl_c_exits_143_with_a_message_and_stops_the_second_side_child(tmp_path):
    project = _project(tmp_path, PYTHON_SIDE)
    proc = _start(project, "--sides-at-once", "on", point="record:1")
    pids = _wait_reached(project, proc, count=2)  # this process in the first side, its child in the second
    (child,) = [pid for pid in pids if pid != proc.pid]
    try:
        proc.send_signal(signal.SIGTERM)
        code, out, err = _finish(project, proc)
        assert code == 143, err
        assert "parity: terminated (SIGTERM)" in err
        assert "Traceback" not in err and "parity: error" not in err
        assert _ended_within(child, 10), "the second side's child outlived its parent"
        assert not any(os.path.exists(os.path.join(project.out, name)) for name in REPORTS)
    finally:
        _release(project)


def test_the_second_side_child_dies_with_a_parent_killed_by_sigkill(tmp_path):
    project = _project(tmp_path, PYTHON_SIDE)
    proc = _start(project, "--sides-at-once", "on", point="record:1")
    pids = _wait_reached(project, proc, count=2)
    (child,) = [pid for pid in pids if pid != proc.pid]
    try:
        proc.kill()
        proc.wait()
        assert _ended_within(child, 10), "the second side's child outlived its parent (killed with SIGKILL)"
    finally:
        _release(project)


def test_a_noise_replay_dies_with_a_parent_killed_by_sigkill(tmp_path):
    project = _project(tmp_path, PYTHON_SIDE)
    proc = _start(project, "--noise", "--sides-at-once", "off", point="record:1@replay")
    (child,) = _wait_reached(project, proc)  # only the `parity replay` of the noise baseline stops there
    assert child != proc.pid
    try:
        proc.kill()
        proc.wait()
        assert _ended_within(child, 10), "the noise replay outlived its parent (killed with SIGKILL)"
    finally:
        _release(project)
