"""Issue 40, item 6: a FIFO (or any file that is not a regular file) given as the config, a capture file, a
schema or a module is refused before it is opened, with a message naming it; before, opening it blocked until
the run was killed (the config, a module file), or the message said the file did not exist.

Each case runs `python -m parity check` in a child with a timeout, so that a run that blocks fails the test.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from robust_helpers import PYTHON, make_project, python_env

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own.
pytestmark = [pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="os.mkfifo: POSIX only"), pytest.mark.slow]


def _check(config: str, cwd: str) -> tuple[int, str]:
    try:
        done = subprocess.run([PYTHON, "-m", "parity", "check", config, "--out", os.path.join(cwd, "out")],
                              cwd=cwd, env=python_env(), capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("parity check blocked on the FIFO for 90 s")
    errors = [line for line in done.stderr.splitlines() if line.startswith("parity: error:")]
    return done.returncode, errors[0] if errors else done.stderr[-2000:]


def test_a_fifo_as_the_config_is_refused_naming_it(tmp_path):
    config = tmp_path / "parity.yaml"
    os.mkfifo(config)
    code, error = _check(str(config), str(tmp_path))
    assert code == 2
    assert error == (f"parity: error: {config}: is a FIFO (named pipe), not a regular file; pass the path of a "
                     f"parity YAML config file")


@pytest.mark.parametrize("path", ["pipe.jsonl", "*.jsonl", "captures"], ids=["literal", "glob", "folder"])
def test_a_fifo_among_the_capture_files_is_refused_naming_it(tmp_path, path):
    project = make_project(tmp_path, capture_spec={"path": path})
    os.remove(tmp_path / "cap.jsonl")
    fifo = tmp_path / ("captures" if path == "captures" else "") / "pipe.jsonl"
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    code, error = _check(project.config, str(tmp_path))
    assert code == 2
    assert error.startswith(f"parity: error: capture path {path!r}: {fifo} is a FIFO (named pipe), not a regular "
                            "file; parity reads capture files"), error


def test_a_fifo_as_the_tfmd_schema_is_refused_naming_it(tmp_path):
    project = make_project(tmp_path, capture_spec={"schema": "schema.pbtxt"})
    os.mkfifo(tmp_path / "schema.pbtxt")
    code, error = _check(project.config, str(tmp_path))
    assert code == 2
    assert error.startswith(f"parity: error: {project.config}: capture.schema: {tmp_path / 'schema.pbtxt'} is a FIFO "
                            "(named pipe), not a regular file"), error


@pytest.mark.parametrize("reference", ["module", "file"])
def test_a_fifo_as_the_transform_module_is_refused_naming_it(tmp_path, reference):
    project = make_project(tmp_path, side={"transform": {"python": "fifo_mod:features" if reference == "module"
                                                         else "fifo_mod.py:features"}})
    os.mkfifo(tmp_path / "fifo_mod.py")
    code, error = _check(project.config, str(tmp_path))
    assert code == 2
    assert f"{tmp_path / 'fifo_mod.py'} is a FIFO (named pipe), not a regular file; a module a config names must " \
           "be a Python file" in error, error
    assert error.startswith(f"parity: error: {project.config}: sides.offline.transform.python: cannot import"), error


def _cli(args: list[str], cwd: str) -> tuple[int, str]:
    try:
        done = subprocess.run([PYTHON, "-m", "parity", *args], cwd=cwd, env=python_env(), capture_output=True,
                              text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail(f"parity {args[0]} blocked on the FIFO for 90 s")
    errors = [line for line in done.stderr.splitlines() if line.startswith("parity: error:")]
    return done.returncode, errors[0] if errors else done.stderr[-2000:]


def test_a_fifo_as_the_report_json_of_parity_report_is_refused_naming_it(tmp_path):
    os.mkfifo(tmp_path / "report.json")
    code, error = _cli(["report", str(tmp_path / "report.json"), "--format", "md"], str(tmp_path))
    assert code == 2
    assert error.startswith(f"parity: error: {tmp_path / 'report.json'}: cannot read a report.json: "
                            f"{tmp_path / 'report.json'} is a FIFO (named pipe), not a regular file"), error


@pytest.mark.parametrize("member", ["manifest.json", "buckets.json"])
def test_a_fifo_inside_a_fingerprint_set_given_to_parity_diff_is_refused_naming_it(tmp_path, member):
    import shutil

    project = make_project(tmp_path / "project")
    code, error = _check(project.config, str(tmp_path / "project"))
    assert code == 0, error
    sides = tmp_path / "project" / "out" / "sides"
    shutil.copytree(sides / "production", tmp_path / "right")
    target = tmp_path / "right" / member  # both read by every diff (the buckets' digests decide what else is)
    os.remove(target)
    os.mkfifo(target)
    code, error = _cli(["diff", str(sides / "offline"), str(tmp_path / "right"), "--out", str(tmp_path / "d")],
                       str(tmp_path))
    assert code == 2
    assert f"{target} is a FIFO (named pipe), not a regular file" in error, error
