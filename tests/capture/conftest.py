"""The moto S3 server of the storage tests (tests/storage/conftest.py), for the capture tests that read a
capture from an `s3://` URL as from a local path."""
from tests.storage.conftest import storage_s3  # noqa: F401
