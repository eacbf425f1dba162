"""The capture listing behind `Storage.list_capture` (parity/storage/capture_listing.py): a file, a folder's
files or a glob, on a local path and on an `s3://` URL (moto's S3 server, tests/storage/conftest.py), leaving out
parity's own output folders and fingerprint sets, with the capture path's messages word for word."""
from __future__ import annotations

import os
import uuid

import pytest

from parity.errors import InputError
from parity.storage import urls
from parity.storage.context import Storage


@pytest.fixture(params=["local", "s3"])
def place(request, tmp_path):
    """(storage, a folder of its own) on a local disk or under s3://parity/."""
    if request.param == "local":
        return Storage(), str(tmp_path / "place")
    server = request.getfixturevalue("storage_s3")
    return server.storage, f"s3://parity/listing/{uuid.uuid4().hex}"


def _write(storage: Storage, base: str, *names: str) -> None:
    for name in names:
        path = urls.join(base, name)
        storage.makedirs(urls.parent(path))
        storage.write_bytes(path, b"{}\n")


def test_a_file_a_folders_files_and_a_glob_are_listed_sorted_on_a_local_path_and_a_url(place):
    storage, base = place
    _write(storage, base, "cap/b.jsonl", "cap/a.jsonl", "cap/.a.crc", "cap/sub/c.jsonl", "one.jsonl")

    assert storage.list_capture(urls.join(base, "one.jsonl"), "/") == [urls.join(base, "one.jsonl")]
    assert storage.list_capture(urls.join(base, "cap"), "/") == [urls.join(base, "cap/a.jsonl"),
                                                                  urls.join(base, "cap/b.jsonl")]
    assert storage.list_capture(urls.join(base, "**/*.jsonl"), "/") == [
        urls.join(base, name) for name in ("cap/a.jsonl", "cap/b.jsonl", "cap/sub/c.jsonl", "one.jsonl")]


def test_a_glob_leaves_out_parity_output_folders_and_fingerprint_sets_on_a_local_path_and_a_url(place):
    storage, base = place
    _write(storage, base, "cap/a.jsonl", "out/.parity-out", "out/sides/offline/quarantine.jsonl",
           "set/manifest.json", "set/fingerprints.parquet", "set/quarantine.jsonl")

    assert storage.list_capture(urls.join(base, "**/*.jsonl"), "/") == [urls.join(base, "cap/a.jsonl")]


def test_a_glob_leaves_out_a_bucketed_fingerprint_set_on_a_local_path_and_a_url(place):
    storage, base = place
    _write(storage, base, "cap/a.jsonl", "set/manifest.json", "set/buckets.json", "set/quarantine.jsonl",
           "set/fingerprints/00.jsonl", "half/manifest.json", "half/b.jsonl")

    # a manifest alone makes no set: half/b.jsonl stays
    assert storage.list_capture(urls.join(base, "**/*.jsonl"), "/") == [urls.join(base, "cap/a.jsonl"),
                                                                         urls.join(base, "half/b.jsonl")]


def test_a_glob_matches_no_hidden_file_or_folder_unless_the_pattern_names_it_on_a_local_path_and_a_url(place):
    storage, base = place
    _write(storage, base, "cap/a.jsonl", "cap/.a.jsonl", ".cache/b.jsonl", "cap/.tmp/c.jsonl", "cap/sub/d.jsonl")

    assert storage.list_capture(urls.join(base, "**/*.jsonl"), "/") == [urls.join(base, "cap/a.jsonl"),
                                                                         urls.join(base, "cap/sub/d.jsonl")]
    assert storage.list_capture(urls.join(base, "cap/*"), "/") == [urls.join(base, "cap/a.jsonl")]
    assert storage.list_capture(urls.join(base, ".cache/*.jsonl"), "/") == [urls.join(base, ".cache/b.jsonl")]
    assert storage.list_capture(urls.join(base, "cap/.*.jsonl"), "/") == [urls.join(base, "cap/.a.jsonl")]


def test_a_relative_local_path_starts_at_the_base_folder(tmp_path):
    _write(Storage(), str(tmp_path), "cap/a.jsonl")
    assert Storage().list_capture("cap/*.jsonl", str(tmp_path)) == [str(tmp_path / "cap" / "a.jsonl")]


def test_a_local_path_that_names_nothing_is_refused_with_the_capture_paths_messages(tmp_path):
    storage, base = Storage(), str(tmp_path)
    _write(storage, base, "out/.parity-out", "out/q.jsonl")
    os.makedirs(tmp_path / "empty")

    with pytest.raises(InputError) as missing:
        storage.list_capture("nope.jsonl", base)
    assert str(missing.value) == (f"capture path 'nope.jsonl' does not exist (looked for {base}/nope.jsonl); check "
                                  f"capture.path (a relative path starts at the config file's folder, {base})")
    with pytest.raises(InputError) as empty:
        storage.list_capture("empty", base)
    assert str(empty.value) == (f"capture path 'empty' ({base}/empty) is a folder with no files; give a folder of "
                                f"captured files (e.g. an ExampleGen split such as Split-train/), a file or a glob")
    with pytest.raises(InputError) as ours:
        storage.list_capture("**/*.jsonl", base)
    assert str(ours.value) == (
        f"capture path '**/*.jsonl' matches no file (looked for {base}/**/*.jsonl; 1 file(s) in parity's output "
        f"folders were left out, e.g. {base}/out/q.jsonl); check capture.path (a relative path starts at the "
        f"config file's folder, {base})")


def test_a_local_fifo_among_the_matches_is_refused_before_it_is_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")
    with pytest.raises(InputError) as refused:
        Storage().list_capture("*.jsonl", str(tmp_path))
    assert str(refused.value) == (
        f"capture path '*.jsonl': {tmp_path}/pipe.jsonl is a FIFO (named pipe), not a regular file; parity reads "
        f"capture files (opening this would wait for a writer): copy the records to a file and name it in "
        f"capture.path")


def test_a_url_that_names_nothing_or_only_parity_output_is_refused_with_the_capture_paths_messages(storage_s3):
    storage, base = storage_s3.storage, f"s3://parity/listing/{uuid.uuid4().hex}"
    _write(storage, base, "out/.parity-out", "out/q.jsonl", "out/r.jsonl")

    with pytest.raises(InputError) as ours:
        storage.list_capture(f"{base}/**/*.jsonl", "/")
    assert str(ours.value) == (f"capture path '{base}/**/*.jsonl' matches only files in parity's output folders or "
                               f"fingerprint sets (2); check capture.path")
    for pattern in (f"{base}/nope/*.jsonl", f"{base}/nope.jsonl", f"{base}/nope/"):
        with pytest.raises(InputError) as missing:
            storage.list_capture(pattern, "/")
        assert str(missing.value) == (f"capture path {pattern!r} matches no file; check capture.path and the "
                                      f"storage options (e.g. -- --s3_endpoint_url=...)")
