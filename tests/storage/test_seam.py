"""The one seam for paths (parity/storage/context.py): each `Storage` operation that callers use instead of
asking whether a path is a URL does the same thing on a local path and on an `s3://` URL (moto's S3 server,
tests/storage/conftest.py). Where the two must differ (an empty file, a folder to make first, where the client's
scratch files go), the test says how."""
from __future__ import annotations

import os
import pickle
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parity.storage import urls
from parity.storage.context import Storage

TABLE = pa.table({"key": pa.array([b"a", b"b", b"c"]), "rows": pa.array([1, 2, 3], pa.int64())})


@pytest.fixture(params=["local", "s3"])
def place(request, tmp_path):
    """(storage, a folder of its own) on a local disk or under s3://parity/."""
    if request.param == "local":
        return Storage(), str(tmp_path / "place")
    server = request.getfixturevalue("storage_s3")
    return server.storage, f"s3://parity/seam/{uuid.uuid4().hex}"


def _ipc_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_an_arrow_file_opens_the_same_rows_from_a_local_path_and_a_url(place):
    storage, base = place
    storage.makedirs(base)
    path = urls.child(base, "part.arrow")
    storage.write_bytes(path, _ipc_bytes(TABLE))

    with storage.open_arrow(path) as source:
        assert pa.ipc.open_file(source).read_all().equals(TABLE)
    with storage.open_arrow(path) as source:  # closed after the block, wherever it came from
        pass
    assert source.closed


def test_a_parquet_file_opens_with_its_footer_and_rows_from_a_local_path_and_a_url(place):
    storage, base = place
    storage.makedirs(base)
    path = urls.child(base, "rows.parquet")
    with storage.open_write(path) as sink:
        pq.write_table(TABLE, sink)

    with storage.open_parquet(path) as reader:
        assert reader.metadata.num_rows == 3
        assert reader.read(columns=["rows"]).column("rows").to_pylist() == [1, 2, 3]
    assert reader.closed


def _keeping(storage: Storage) -> tuple[Storage, list]:
    """`storage` with the same options, keeping what each `readable` call gave."""
    sources: list = []

    class Keeping(Storage):
        def readable(self, path: str):
            sources.append(super().readable(path))
            return sources[-1]

    return Keeping(storage.options), sources


def _a_parquet_file_and_a_bad_one(storage: Storage, base: str) -> tuple[str, str]:
    """`TABLE` as `base`/rows.parquet, and `base`/bad.parquet, which is no Parquet file."""
    storage.makedirs(base)
    path, bad = urls.child(base, "rows.parquet"), urls.child(base, "bad.parquet")
    with storage.open_write(path) as sink:
        pq.write_table(TABLE, sink)
    storage.write_bytes(bad, b"not a parquet file")
    return path, bad


def test_a_parquet_file_closes_the_stream_it_reads_after_its_block_an_error_in_it_or_a_file_that_is_no_parquet(place):
    storage, base = place
    path, bad = _a_parquet_file_and_a_bad_one(storage, base)
    keeping, sources = _keeping(storage)

    with keeping.open_parquet(path) as reader:
        assert reader.metadata.num_rows == 3
    with pytest.raises(KeyError), keeping.open_parquet(path):
        raise KeyError("the block raised")
    with pytest.raises(pa.ArrowInvalid), keeping.open_parquet(bad):
        pass

    # locally `readable` gives the path (`Storage` opens and closes the file); on a URL, the stream it opened
    assert sources == [path, path, bad] if not urls.is_url(base) else len(sources) == 3
    streams = [source for source in sources if not isinstance(source, str)]
    assert len(streams) == (3 if urls.is_url(base) else 0)
    assert all(stream.closed for stream in streams)


def test_a_parquet_table_is_read_with_its_columns_and_schema_and_its_stream_closed_on_a_local_path_and_a_url(place):
    storage, base = place
    path, bad = _a_parquet_file_and_a_bad_one(storage, base)
    keeping, sources = _keeping(storage)
    wide = pa.schema([("key", pa.large_binary()), ("rows", pa.int64())])

    assert keeping.read_parquet(path).equals(TABLE)
    assert keeping.read_parquet(path, columns=["rows"]).column_names == ["rows"]
    assert keeping.read_parquet(path, schema=wide).schema == wide
    with pytest.raises(pa.ArrowInvalid):
        keeping.read_parquet(bad)

    streams = [source for source in sources if not isinstance(source, str)]
    assert len(sources) == 4 and len(streams) == (4 if urls.is_url(base) else 0)
    assert all(stream.closed for stream in streams)


def test_a_stream_writer_writes_the_whole_file_or_leaves_the_old_one_on_a_local_path_and_a_url(place):
    storage, base = place
    storage.makedirs(base)
    path = urls.child(base, "batch.pkl")
    with storage.open_write_stream(path) as handle:
        pickle.dump({"batch": list(range(5))}, handle)
    assert pickle.loads(storage.read_bytes(path)) == {"batch": list(range(5))}

    with pytest.raises(RuntimeError, match="half way"):
        with storage.open_write_stream(path) as handle:
            handle.write(b"partial")
            raise RuntimeError("half way")
    assert pickle.loads(storage.read_bytes(path)) == {"batch": list(range(5))}  # the old file, whole
    assert storage.list_folder(base) == [path]  # and no temporary file beside it


def test_text_that_may_be_empty_is_an_empty_file_locally_and_no_object_on_a_url(place):
    storage, base = place
    storage.makedirs(base)
    empty, full = urls.child(base, "empty.jsonl"), urls.child(base, "full.jsonl")
    storage.write_text_or_absent(empty, "")
    storage.write_text_or_absent(full, "{}\n")

    assert storage.read_text(full) == "{}\n"
    if urls.is_url(base):
        assert not storage.exists(empty)  # S3 refuses an upload of no part: the reader takes missing as empty
    else:
        assert storage.read_text(empty) == ""


def test_a_file_written_in_place_goes_through_a_local_link_and_is_one_object_on_a_url(place):
    storage, base = place
    storage.makedirs(base)
    path = urls.child(base, "report.md")
    if not urls.is_url(base):  # a link named by --out: its target is written, the link stays (/dev/stdout works)
        target = os.path.join(base, "target.md")
        open(target, "w").close()
        os.symlink(target, path)
    storage.write_text_in_place(path, "# report\n")

    assert storage.read_text(path) == "# report\n"
    if not urls.is_url(base):
        assert os.path.islink(path) and open(target).read() == "# report\n"


def test_a_missing_folder_is_made_locally_and_needs_nothing_on_a_url(place):
    storage, base = place
    folder = urls.child(base, "a", "b")
    assert storage.can_create_in(folder) == urls.is_url(base)
    storage.makedirs(folder)
    storage.makedirs(folder)  # an existing folder is no error

    assert storage.can_create_in(folder)
    assert storage.isdir(folder) != urls.is_url(base)  # on a URL a folder exists only once an object is under it
    storage.write_text(urls.child(folder, "x.txt"), "x")
    assert storage.isdir(folder) and storage.list_folder(folder) == [urls.child(folder, "x.txt")]


def test_a_scratch_folder_is_the_folder_itself_locally_and_a_removed_local_one_for_a_url(place):
    storage, base = place
    with storage.local_scratch(base, prefix="parity-seam-") as scratch:
        assert not urls.is_url(scratch)
        os.makedirs(scratch, exist_ok=True)
        with open(os.path.join(scratch, "spill.arrow"), "wb") as handle:
            handle.write(b"x")
    if urls.is_url(base):
        assert os.path.basename(scratch).startswith("parity-seam-") and not os.path.exists(scratch)
        assert not storage.exists(base)  # nothing was uploaded
    else:
        assert scratch == base and os.path.exists(os.path.join(base, "spill.arrow"))  # its user removes its files


def test_emptied_folders_are_pruned_deepest_first_and_a_folder_with_a_file_stays(place):
    storage, base = place
    storage.makedirs(urls.child(base, "parts", "routed", "0a"))
    storage.makedirs(urls.child(base, "parts", "kept"))
    storage.write_text(urls.child(base, "parts", "kept", "one.txt"), "1")
    storage.prune_empty_folders(urls.child(base, "parts"))

    assert storage.list_names(urls.child(base, "parts")) == ["kept"]
    assert storage.read_text(urls.child(base, "parts", "kept", "one.txt")) == "1"
    storage.delete([urls.child(base, "parts", "kept", "one.txt")])
    storage.prune_empty_folders(urls.child(base, "parts"))
    assert not storage.exists(urls.child(base, "parts"))
    storage.prune_empty_folders(urls.child(base, "never"))  # a missing folder: nothing to do


def test_a_missing_file_is_a_file_not_found_error_naming_it_on_a_local_path_and_a_url(place):
    storage, base = place
    storage.makedirs(base)
    path = urls.child(base, "none.json")
    for read in (storage.open_read, storage.read_bytes, storage.read_text):
        with pytest.raises(FileNotFoundError, match="none.json"):
            read(path)
    assert not storage.exists(path)


def test_a_url_no_store_serves_is_an_os_error_naming_it_not_a_missing_file():
    with pytest.raises(OSError, match=r"foo://bucket/x.json: no installed Beam file system serves foo://") as raised:
        Storage().open_read("foo://bucket/x.json")
    assert not isinstance(raised.value, FileNotFoundError)
