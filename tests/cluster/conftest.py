"""The cluster test bed for the whole session (tests/cluster/testbed.py): an S3 server, a two-TaskManager Flink
1.19 cluster, a Beam job server for it, and an SDK worker pool run as another Unix user. It starts once, the
first time a test asks for `testbed`, and stops at the end of the session; its start time is reported at the
end (terminal summary, and a property of the junit XML test suite).

Tests marked `cluster` run their Python work in the worker pool (`--environment_type=EXTERNAL`), never in the
pytest process: a path only the client can see fails there, as on a real cluster.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass

import pytest

from tests import suite_times
from tests.cluster import testbed as bed

JOB_TIMEOUT = float(os.environ.get("PARITY_TESTBED_JOB_TIMEOUT", "300"))  # seconds one test bed job may take


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: runs on the cluster test bed (S3, Flink with two TaskManagers, "
                                       "an SDK worker pool as another user)")


@dataclass(frozen=True)
class TestBed:
    s3: bed.S3Server
    flink: bed.FlinkCluster
    pool: bed.WorkerPool
    job_endpoint: str
    bucket: str
    # A second pool, as the same user, for a check that runs at the same time as another: a pool knows its
    # harnesses by worker id, which every job numbers from 1 on each TaskManager; parity's pool stops the oldest
    # live harness under an id, which with two live jobs may be the other job's, and that job may then wait for
    # ever (docs/flink.md, "Concurrent jobs and one worker pool").
    other_pool: bed.WorkerPool

    def options(self, parallelism: int = 2, pool: bed.WorkerPool | None = None) -> list[str]:
        """Beam options for a job on the test bed: its job server, the worker pool, and Beam's S3 options."""
        return [f"--job_endpoint={self.job_endpoint}", *(pool or self.pool).options, f"--parallelism={parallelism}",
                *self.s3.options]

    def finish(self, result, timeout: float = JOB_TIMEOUT) -> None:
        """Waits for a Beam job on the test bed; one that has not ended in `timeout` s is cancelled and fails
        the test (an SDK harness that cannot start leaves a Flink job waiting for ever)."""
        from apache_beam.runners.runner import PipelineState

        state = result.wait_until_finish(duration=int(timeout * 1000))
        if not PipelineState.is_terminal(state):
            result.cancel()
            pytest.fail(f"the job did not finish within {timeout:g} s (state {state}); worker pool log: "
                        f"{self.pool.log}")
        assert state == PipelineState.DONE, state

    def url(self, *parts: str) -> str:
        return "s3://" + "/".join((self.bucket, *parts))


@pytest.fixture(scope="session")
def testbed_dir():
    """The test bed's own folder: logs, Flink's run folder, the worker user's HOME and TMPDIR (under /tmp, not
    under the client's root-only tmp_path, so that the worker user can reach its own part)."""
    base = tempfile.mkdtemp(prefix="parity-testbed-")
    os.chmod(base, 0o755)
    yield base
    if os.environ.get("PARITY_TESTBED_KEEP") != "1":  # 1: keep the logs (Flink's, the pool's, moto's) to read
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def s3_server(testbed_dir):
    """moto's S3 server alone (a few seconds), with the bucket `parity`: for tests of paths without Flink."""
    try:
        server = bed.start_s3(testbed_dir)
    except Exception as exc:
        pytest.fail(f"the S3 server of the test bed could not start: {exc}", pytrace=False)
    server.client().create_bucket(Bucket="parity")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def testbed(testbed_dir, s3_server, record_testsuite_property):
    from parity.replay.flink import JobServer, job_server_jar

    started = time.monotonic()
    stops = []
    try:
        jar = job_server_jar()  # before anything starts: a missing jar fails at once
        s3 = s3_server
        pool = bed.start_worker_pool(os.path.join(testbed_dir, "worker"))
        stops.append(pool.stop)
        other_pool = bed.start_worker_pool(os.path.join(testbed_dir, "worker-other"))
        stops.append(other_pool.stop)
        flink = bed.start_flink(os.path.join(testbed_dir, "flink"))
        stops.append(flink.stop)
        server = JobServer(jar, flink.master)
        server.start()
        stops.append(server.stop)
    except Exception as exc:  # a test bed that cannot start fails its tests with the reason: never a skip
        for stop in reversed(stops):
            stop()
        pytest.fail(f"the cluster test bed could not start: {exc}", pytrace=False)
    start_seconds = round(time.monotonic() - started, 1)
    suite_times.add("Cluster test bed", "testbed_start_seconds", start_seconds)
    record_testsuite_property("cluster_testbed_start_seconds", start_seconds)
    yield TestBed(s3, flink, pool, server.endpoint, "parity", other_pool)
    for stop in reversed(stops):
        stop()


@pytest.fixture
def client_dir(tmp_path):
    """A folder only the client (root) can enter, as a local disk of the submitting host."""
    path = tmp_path / "client"
    path.mkdir()
    os.chmod(path, 0o700)
    os.chmod(tmp_path, 0o700)
    return path
