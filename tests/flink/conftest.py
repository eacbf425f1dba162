"""Real Flink in the test session: one Beam Flink job server (embedded MiniCluster, `[local]`) for every test
that asks for `flink_job_endpoint`; its start time and the Flink tests' total time are reported at the end
(terminal summary, and as properties of the junit XML test suite)."""
from __future__ import annotations

import time

import pytest

from parity.replay.flink import JobServer, job_server_jar

# Beam options every Flink test passes with the session job server.
FLINK_OPTIONS = ("--environment_type=LOOPBACK", "--parallelism=1")

_TIMES: dict[str, float] = {}


@pytest.fixture(scope="session")
def flink_job_server(record_testsuite_property):
    """The session's job server; a start failure (RunnerError: no jar, no Java, timeout) fails the tests."""
    server = JobServer(job_server_jar(), "[local]")
    server.start()
    _TIMES["job_server_start_seconds"] = round(server.start_seconds or 0.0, 1)
    record_testsuite_property("flink_job_server_start_seconds", _TIMES["job_server_start_seconds"])
    yield server
    server.stop()


@pytest.fixture(scope="session")
def flink_job_endpoint(flink_job_server) -> str:
    return flink_job_server.endpoint


@pytest.fixture(scope="session")
def flink_options(flink_job_endpoint) -> list[str]:
    """`parity.check(..., runner="FlinkRunner", pipeline_options=flink_options)` runs on the session job server."""
    return [f"--job_endpoint={flink_job_endpoint}", *FLINK_OPTIONS]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started = time.monotonic()
    yield
    if "tests/flink/" in item.nodeid.replace("\\", "/"):
        _TIMES["flink_tests_seconds"] = _TIMES.get("flink_tests_seconds", 0.0) + time.monotonic() - started


def pytest_terminal_summary(terminalreporter):
    if _TIMES:
        parts = [f"{key.replace('_', ' ')}: {value:.1f}" for key, value in sorted(_TIMES.items())]
        terminalreporter.write_line("Flink: " + ", ".join(parts))
