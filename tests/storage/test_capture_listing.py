"""The capture listing (parity/storage/capture_listing.py, behind `parity.capture.list_capture_files`): a file, a
folder's files or a glob, on a local path and on an `s3://` URL (moto's S3 server, tests/storage/conftest.py),
leaving out parity's own output folders and fingerprint sets, with the capture path's messages word for word."""
from __future__ import annotations

import os
import uuid

import pytest

from parity.errors import InputError
from parity.storage import urls
from parity.storage.capture_listing import capture_files
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

    assert capture_files(urls.join(base, "one.jsonl"), "/", storage) == [urls.join(base, "one.jsonl")]
    assert capture_files(urls.join(base, "cap"), "/", storage) == [urls.join(base, "cap/a.jsonl"),
                                                                   urls.join(base, "cap/b.jsonl")]
    assert capture_files(urls.join(base, "**/*.jsonl"), "/", storage) == [
        urls.join(base, name) for name in ("cap/a.jsonl", "cap/b.jsonl", "cap/sub/c.jsonl", "one.jsonl")]


def test_a_glob_leaves_out_parity_output_folders_and_fingerprint_sets_on_a_local_path_and_a_url(place):
    storage, base = place
    _write(storage, base, "cap/a.jsonl", "out/.parity-out", "out/sides/offline/quarantine.jsonl",
           "set/manifest.json", "set/fingerprints.parquet", "set/quarantine.jsonl")

    assert capture_files(urls.join(base, "**/*.jsonl"), "/", storage) == [urls.join(base, "cap/a.jsonl")]


def test_a_glob_leaves_out_a_bucketed_fingerprint_set_on_a_local_path_and_a_url(place):
    storage, base = place
    _write(storage, base, "cap/a.jsonl", "set/manifest.json", "set/buckets.json", "set/quarantine.jsonl",
           "set/fingerprints/00.jsonl", "half/manifest.json", "half/b.jsonl")

    # a manifest alone makes no set: half/b.jsonl stays
    assert capture_files(urls.join(base, "**/*.jsonl"), "/", storage) == [urls.join(base, "cap/a.jsonl"),
                                                                          urls.join(base, "half/b.jsonl")]


def test_a_glob_matches_no_hidden_file_or_folder_unless_the_pattern_names_it_on_a_local_path_and_a_url(place):
    storage, base = place
    _write(storage, base, "cap/a.jsonl", "cap/.a.jsonl", ".cache/b.jsonl", "cap/.tmp/c.jsonl", "cap/sub/d.jsonl")

    assert capture_files(urls.join(base, "**/*.jsonl"), "/", storage) == [urls.join(base, "cap/a.jsonl"),
                                                                          urls.join(base, "cap/sub/d.jsonl")]
    assert capture_files(urls.join(base, "cap/*"), "/", storage) == [urls.join(base, "cap/a.jsonl")]
    assert capture_files(urls.join(base, ".cache/*.jsonl"), "/", storage) == [urls.join(base, ".cache/b.jsonl")]
    assert capture_files(urls.join(base, "cap/.*.jsonl"), "/", storage) == [urls.join(base, "cap/.a.jsonl")]


def test_a_relative_local_path_starts_at_the_base_folder(tmp_path):
    _write(Storage(), str(tmp_path), "cap/a.jsonl")
    assert capture_files("cap/*.jsonl", str(tmp_path), Storage()) == [str(tmp_path / "cap" / "a.jsonl")]


def test_a_local_path_that_names_nothing_is_refused_with_the_capture_paths_messages(tmp_path):
    storage, base = Storage(), str(tmp_path)
    _write(storage, base, "out/.parity-out", "out/q.jsonl")
    os.makedirs(tmp_path / "empty")

    with pytest.raises(InputError) as missing:
        capture_files("nope.jsonl", base, storage)
    assert str(missing.value) == (f"capture path 'nope.jsonl' does not exist (looked for {base}/nope.jsonl); check "
                                  f"capture.path (a relative path starts at the config file's folder, {base})")
    with pytest.raises(InputError) as empty:
        capture_files("empty", base, storage)
    assert str(empty.value) == (f"capture path 'empty' ({base}/empty) is a folder with no files; give a folder of "
                                f"captured files (e.g. an ExampleGen split such as Split-train/), a file or a glob")
    with pytest.raises(InputError) as ours:
        capture_files("**/*.jsonl", base, storage)
    assert str(ours.value) == (
        f"capture path '**/*.jsonl' matches no file (looked for {base}/**/*.jsonl; 1 file(s) in parity's output "
        f"folders were left out, e.g. {base}/out/q.jsonl); check capture.path (a relative path starts at the "
        f"config file's folder, {base})")


def test_a_local_fifo_among_the_matches_is_refused_before_it_is_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.jsonl")
    with pytest.raises(InputError) as refused:
        capture_files("*.jsonl", str(tmp_path), Storage())
    assert str(refused.value) == (
        f"capture path '*.jsonl': {tmp_path}/pipe.jsonl is a FIFO (named pipe), not a regular file; parity reads "
        f"capture files (opening this would wait for a writer): copy the records to a file and name it in "
        f"capture.path")


def test_a_url_that_names_nothing_or_only_parity_output_is_refused_with_the_capture_paths_messages(storage_s3):
    storage, base = storage_s3.storage, f"s3://parity/listing/{uuid.uuid4().hex}"
    _write(storage, base, "out/.parity-out", "out/q.jsonl", "out/r.jsonl")

    with pytest.raises(InputError) as ours:
        capture_files(f"{base}/**/*.jsonl", "/", storage)
    assert str(ours.value) == (f"capture path '{base}/**/*.jsonl' matches only files in parity's output folders or "
                               f"fingerprint sets (2); check capture.path")
    for pattern in (f"{base}/nope/*.jsonl", f"{base}/nope.jsonl", f"{base}/nope/"):
        with pytest.raises(InputError) as missing:
            capture_files(pattern, "/", storage)
        assert str(missing.value) == (f"capture path {pattern!r} matches no file; check capture.path and the "
                                      f"storage options (e.g. -- --s3_endpoint_url=...)")


def test_a_url_glob_is_listed_with_one_listing_request(storage_s3):
    from apache_beam.options.pipeline_options import PipelineOptions

    from parity.storage import s3_clients

    storage, base = storage_s3.storage, f"s3://parity/listing/{uuid.uuid4().hex}"
    _write(storage, base, "cap/a.jsonl", "cap/sub/b.jsonl", "out/.parity-out", "out/q.jsonl")
    client = s3_clients.bounded_client(PipelineOptions(list(storage.options)), storage.options)  # the process's
    requests = []

    def count(model, **_):
        requests.append(model.name)

    client.meta.events.register("before-call.s3", count)
    try:
        files = capture_files(f"{base}/**/*.jsonl", "/", storage)
    finally:
        client.meta.events.unregister("before-call.s3", count)

    assert files == [f"{base}/cap/a.jsonl", f"{base}/cap/sub/b.jsonl"]
    assert [name for name in requests if name.startswith("List")] == ["ListObjectsV2"], requests
