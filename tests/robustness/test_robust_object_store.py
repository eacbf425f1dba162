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

# The slow tier (`make test`, not `make test-fast`): each test waits out an object store that never answers, by
# design for tens of seconds.
pytestmark = pytest.mark.slow

pytest.importorskip("boto3")


def _env(credentials: bool = True) -> dict[str, str]:
    env = python_env(AWS_EC2_METADATA_DISABLED="true", AWS_CONFIG_FILE=os.devnull,
                     AWS_SHARED_CREDENTIALS_FILE=os.devnull)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        env.pop(name, None)
    if credentials:
        env.update(AWS_ACCESS_KEY_ID="parity-test", AWS_SECRET_ACCESS_KEY="parity-test")
    return env


def _run(tmp_path, env: dict[str, str], capture: str | None, out: str | None = None,
         options: tuple[str, ...] = ()) -> tuple[int, str, float]:
    """`python -m parity check` of a project whose capture is `capture` (None: the local one) into `out`: its exit
    code, its `parity: error:` lines and how long it took."""
    project = make_project(tmp_path, capture_spec={"path": capture} if capture else None, schema=None)
    started = time.monotonic()
    command = [PYTHON, "-m", "parity", "check", project.config, "--out", out or str(tmp_path / "out")]
    done = subprocess.run(command + (["--", *options] if options else []), env=env, capture_output=True, text=True,
                          timeout=170)
    errors = [line for line in done.stderr.splitlines() if line.startswith("parity: error:")]
    return done.returncode, "\n".join(errors), time.monotonic() - started


def _check(tmp_path, endpoint: str, credentials: bool = True) -> tuple[int, str, float]:
    return _run(tmp_path, _env(credentials), "s3://bucket/cap.jsonl", options=(f"--s3_endpoint_url={endpoint}",))


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


# gs://: Beam's GCS client looked up credentials five times with backoff, then retried each call for 120 s
# (was: a `gs://` capture or `--out` with no route to the store ran past 400 s). Local endpoints only, through
# the storage client's own emulator and endpoint variables; no Google credentials anywhere.

def _gcs_env(**extra: str) -> dict[str, str]:
    env = python_env(CLOUDSDK_CONFIG=os.devnull, GCE_METADATA_HOST="127.0.0.1:9", GCE_METADATA_IP="127.0.0.1:9",
                     NO_GCE_CHECK="True", **extra)
    env.pop("GOOGLE_APPLICATION_CREDENTIALS", None)
    return env


def _gs_check(tmp_path, env: dict[str, str], *, out: str | None = None) -> tuple[int, str, float]:
    return _run(tmp_path, env, "gs://bucket/caps/*.jsonl" if out is None else None, out)


def test_a_gs_capture_on_a_closed_endpoint_fails_fast_naming_the_url_the_endpoint_and_what_to_check(tmp_path):
    code, error, took = _gs_check(tmp_path, _gcs_env(STORAGE_EMULATOR_HOST="http://127.0.0.1:9"))
    assert code == 2
    assert error.startswith("parity: error: gs://bucket/caps/*.jsonl: the object store at http://127.0.0.1:9 did "
                            "not answer within 2 attempt(s), 5 s to connect and 8 s to answer each"), error
    assert "STORAGE_EMULATOR_HOST" in error and "--gcs_connect_timeout" in error
    assert took < 60


def test_a_gs_out_on_a_store_that_never_answers_fails_within_about_30_seconds(tmp_path):
    with socket.socket() as silent:  # accepts connections (the kernel does) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        code, error, took = _gs_check(tmp_path, _gcs_env(STORAGE_EMULATOR_HOST=endpoint), out="gs://bucket/run")
    assert code == 2
    assert error.startswith(f"parity: error: gs://bucket/run: the object store at {endpoint} did not answer"), error
    assert "ReadTimeout" in error or "Read timed out" in error, error
    assert took < 60, f"took {took:.0f} s"


class _Answering:
    """A local HTTP endpoint that answers every request with one status."""

    def __init__(self, status: int) -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def __enter__(self) -> "_Answering":
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _probe_env(monkeypatch, **values: str) -> None:
    for name, value in _gcs_env(**values).items():
        if name in values or name in ("CLOUDSDK_CONFIG", "GCE_METADATA_HOST", "GCE_METADATA_IP", "NO_GCE_CHECK"):
            monkeypatch.setenv(name, value)
    for name in ("GOOGLE_APPLICATION_CREDENTIALS", "STORAGE_EMULATOR_HOST", "API_ENDPOINT_OVERRIDE"):
        if name not in values:
            monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("status", [200, 404, 403])
def test_a_gcs_emulator_that_answers_anything_passes_the_probe_and_leaves_the_meaning_to_beam(monkeypatch, status):
    from parity.storage import gcs_probe

    with _Answering(status) as store:
        _probe_env(monkeypatch, STORAGE_EMULATOR_HOST=store.url)
        gcs_probe.probe(f"gs://answers-{status}/cap.jsonl", ())  # no InputError: the store is there


def test_a_store_that_refuses_an_anonymous_caller_when_no_credentials_exist_says_where_credentials_come_from(
        monkeypatch):
    from parity.errors import InputError
    from parity.storage import gcs_probe

    with _Answering(401) as store:
        _probe_env(monkeypatch, API_ENDPOINT_OVERRIDE=store.url)
        with pytest.raises(InputError) as raised:
            gcs_probe.probe("gs://private/cap.jsonl", ("--gcs_max_attempts=1",))
    message = str(raised.value)
    assert message.startswith(f"gs://private/cap.jsonl: no Google credentials were found and {store.url} refused "
                              f"bucket private to an anonymous caller (HTTP 401)"), message
    assert "GOOGLE_APPLICATION_CREDENTIALS" in message


def test_the_gcs_limits_are_read_from_the_pipeline_options_after_the_double_dash(monkeypatch):
    from parity.errors import InputError
    from parity.storage import gcs_probe

    _probe_env(monkeypatch, STORAGE_EMULATOR_HOST="127.0.0.1:9")
    with pytest.raises(InputError) as raised:
        gcs_probe.probe("gs://closed/cap.jsonl", ("--gcs_connect_timeout=1.5", "--gcs_max_attempts=3"))
    assert "the object store at http://127.0.0.1:9 did not answer within 3 attempt(s), 1.5 s to connect" in \
        str(raised.value)
