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

import pytest

from tests import suite_times
from tests.cluster import testbed as bed


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: runs on the cluster test bed (S3, Flink with two TaskManagers, "
                                       "an SDK worker pool as another user)")


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
    started = time.monotonic()
    try:
        started_bed = bed.start_testbed(testbed_dir, s3_server)
    except Exception as exc:  # a test bed that cannot start fails its tests with the reason: never a skip
        pytest.fail(f"the cluster test bed could not start: {exc}", pytrace=False)
    start_seconds = round(time.monotonic() - started, 1)
    suite_times.add("Cluster test bed", "testbed_start_seconds", start_seconds)
    record_testsuite_property("cluster_testbed_start_seconds", start_seconds)
    yield started_bed
    started_bed.stop()


@pytest.fixture
def client_dir(tmp_path):
    """A folder only the client (root) can enter, as a local disk of the submitting host."""
    path = tmp_path / "client"
    path.mkdir()
    os.chmod(path, 0o700)
    os.chmod(tmp_path, 0o700)
    return path
