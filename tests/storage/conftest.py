"""An S3 server for the storage tests: moto's, alone (a few seconds, once per session), with the bucket
`parity`, so that each `Storage` operation is shown doing the same on a local path and on an `s3://` URL. The
cluster tests start their own with the Flink test bed (tests/cluster/conftest.py)."""
from __future__ import annotations

import shutil
import tempfile

import pytest

from tests.cluster import testbed as bed


@pytest.fixture(scope="session")
def storage_s3():
    logs = tempfile.mkdtemp(prefix="parity-storage-s3-")
    try:
        server = bed.start_s3(logs)
    except Exception as exc:  # a server that cannot start fails its tests with the reason: never a skip
        pytest.fail(f"the moto S3 server could not start: {exc}", pytrace=False)
    server.client().create_bucket(Bucket="parity")
    yield server
    server.stop()
    shutil.rmtree(logs, ignore_errors=True)
