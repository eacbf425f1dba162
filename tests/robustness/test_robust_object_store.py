"""Issue 40, item 9: object storage that does not answer fails within about 30 s with one `parity: error:` line
naming the URL, the endpoint and what to check (was: `s3://` with no network hung 180 s and more; Beam retries
each call for minutes). Only local endpoints: a closed port, and a socket that accepts and never answers.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from robust_helpers import PYTHON, make_project, python_env

pytest.importorskip("boto3")


def _env(credentials: bool = True) -> dict[str, str]:
    env = python_env(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=os.devnull,
                     AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(name, None)
    if credentials:
        env.update(AWS_ACCESS_KEY_ID="parity-test", AWS_SECRET_ACCESS_KEY="parity-test")
    return env


def _check(tmp_path, endpoint: str, credentials: bool = True) -> tuple[int, str, float]:
    project = make_project(tmp_path, capture_spec={"path": "s3://bucket/cap.jsonl"}, schema=None)
    started = time.monotonic()
    done = subprocess.run([PYTHON, "-m", "parity", "check", project.config, "--out", str(tmp_path / "out"), "--",
                           f"--s3_endpoint_url={endpoint}"], env=_env(credentials), capture_output=True, text=True,
                          timeout=170)
    errors = [line for line in done.stderr.splitlines() if line.startswith("parity: error:")]
    return done.returncode, "\n".join(errors), time.monotonic() - started


def test_a_closed_endpoint_fails_fast_naming_the_url_the_endpoint_and_what_to_check(tmp_path):
    code, error, took = _check(tmp_path, "http://127.0.0.1:9")
    assert code == 2
    assert error.startswith("parity: error: s3://bucket/cap.jsonl: the object store at http://127.0.0.1:9 did not "
                            "answer within 2 attempt(s), 5 s to connect and 8 s to answer each"), error
    assert "check the network, the endpoint (-- --s3_endpoint_url=...)" in error
    assert took < 60


def test_an_endpoint_that_never_answers_fails_within_about_30_seconds(tmp_path):
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        code, error, took = _check(tmp_path, endpoint)
    assert code == 2
    assert error.startswith(f"parity: error: s3://bucket/cap.jsonl: the object store at {endpoint} did not answer"), \
        error
    assert "Read timeout" in error
    assert took < 60, f"took {took:.0f} s"


def test_no_credentials_fail_fast_saying_where_credentials_come_from(tmp_path):
    code, error, took = _check(tmp_path, "http://127.0.0.1:9", credentials=False)
    assert code == 2
    assert error.startswith("parity: error: s3://bucket/cap.jsonl: no credentials for S3"), error
    assert "--s3_access_key_id" in error and "AWS_ACCESS_KEY_ID" in error
    assert took < 60
