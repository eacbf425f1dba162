"""Real Flink in the test session: one Beam Flink job server (embedded MiniCluster, `[local]`) for every test
that asks for `flink_job_endpoint`; its start time and the Flink tests' total time are reported at the end
(terminal summary, and as properties of the junit XML test suite)."""
from __future__ import annotations


import pytest

from parity.replay.flink import JobServer, job_server_jar

from tests import suite_times

# Beam options every Flink test passes with the session job server.
FLINK_OPTIONS = ("--environment_type=LOOPBACK", "--parallelism=1")



@pytest.fixture(scope="session")
def flink_job_server(record_testsuite_property):
    """The session's job server; a start failure (RunnerError: no jar, no Java, timeout) fails the tests."""
    server = JobServer(job_server_jar(), "[local]")
    server.start()
    suite_times.add("Flink", "job_server_start_seconds", round(server.start_seconds or 0.0, 1))
    record_testsuite_property("flink_job_server_start_seconds", round(server.start_seconds or 0.0, 1))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def flink_job_endpoint(flink_job_server) -> str:
    return flink_job_server.endpoint


@pytest.fixture(scope="session")
def flink_options(flink_job_endpoint) -> list[str]:
    """`parity.check(..., runner="FlinkRunner", pipeline_options=flink_options)` runs on the session job server."""
    return [f"--job_endpoint={flink_job_endpoint}", *FLINK_OPTIONS]
