"""The S3 server of the storage tests (tests/storage/conftest.py), for the sets read from an `s3://` URL."""
from tests.storage.conftest import storage_s3  # noqa: F401
