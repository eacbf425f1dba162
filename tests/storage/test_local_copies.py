"""Local copies of what lies under a URL (parity/storage/local_copies.py, behind `Storage.local_copy`), on moto's
S3 server (tests/storage/conftest.py): a folder with its relative names, an object under its own name, made once
per process and options."""
from __future__ import annotations

import os
import uuid

import pytest


def test_a_url_folder_is_copied_once_with_its_relative_names_and_an_object_under_its_own_name(storage_s3):
    storage, base = storage_s3.storage, f"s3://parity/copies/{uuid.uuid4().hex}"
    storage.write_bytes(f"{base}/saved/saved_model.pb", b"graph")
    storage.write_bytes(f"{base}/saved/variables/variables.index", b"index")
    storage.write_bytes(f"{base}/model.keras", b"keras")

    folder = storage.local_copy(f"{base}/saved/", prefix="parity-test-copy-")
    assert sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, _, names in os.walk(folder) for name in names) == [
        "saved_model.pb", os.path.join("variables", "variables.index")]
    with open(os.path.join(folder, "variables", "variables.index"), "rb") as handle:
        assert handle.read() == b"index"
    assert storage.local_copy(f"{base}/saved", prefix="parity-test-copy-") == folder  # once per process

    model = storage.local_copy(f"{base}/model.keras")
    assert os.path.basename(model) == "model.keras" and open(model, "rb").read() == b"keras"


def test_a_url_with_nothing_under_it_has_no_local_copy(storage_s3):
    storage = storage_s3.storage
    with pytest.raises(FileNotFoundError, match="no object under this prefix"):
        storage.local_copy(f"s3://parity/copies/{uuid.uuid4().hex}/none")
