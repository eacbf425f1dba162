"""What every capture reader shares (parity/capture/items.py): how a capture file is opened, gzip or not, on a
local path and on an `s3://` URL (moto's S3 server, tests/storage/conftest.py)."""
from __future__ import annotations

import gzip
import uuid

import pytest

from parity.capture.items import GZIP_PEEK, open_capture, starts_gzip_stream
from parity.storage import urls
from parity.storage.context import Storage

# more than the bytes peeked to tell gzip, so that the rest of the stream is read after the peeked ones
LINES = b"".join(b'{"id": %d, "pad": "%s"}\n' % (n, b"x" * 40) for n in range(GZIP_PEEK // 40))


def _counting(storage: Storage) -> tuple[Storage, list[str]]:
    """`storage` with the same options, noting each path it opens for reading."""
    opened: list[str] = []

    class Counting(Storage):
        def open_read(self, path: str):
            opened.append(path)
            return super().open_read(path)

    return Counting(storage.options), opened


@pytest.fixture(params=["local", "s3"])
def place(request, tmp_path):
    """(storage, a folder of its own) on a local disk or under s3://parity/."""
    if request.param == "local":
        return Storage(), str(tmp_path)
    server = request.getfixturevalue("storage_s3")
    return server.storage, f"s3://parity/items/{uuid.uuid4().hex}"


@pytest.mark.parametrize("stored", [LINES, gzip.compress(LINES, mtime=0), b"\x1f\x8b\n{}\n", b"\n"],
                         ids=["plain", "gzip", "gzip-magic-then-text", "one-byte"])
def test_a_capture_is_opened_once_and_reads_its_bytes_from_the_first_decompressed_when_gzip(place, stored):
    storage, base = place
    storage.makedirs(base)
    path = urls.child(base, "cap.jsonl")
    storage.write_bytes(path, stored)
    counting, opened = _counting(storage)
    with open_capture(path, counting) as handle:
        first = handle.read(7)
        rest = handle.read()
    assert opened == [path]
    assert first + rest == (LINES if stored.startswith(b"\x1f\x8b\x08") else stored)


@pytest.mark.parametrize("stored", [b"{}\n", gzip.compress(b"{}\n", mtime=0)], ids=["plain", "gzip"])
def test_closing_a_capture_stream_closes_the_file_it_opened(tmp_path, stored):
    path = tmp_path / "cap.jsonl"
    path.write_bytes(stored)
    handles = []

    class Keeping(Storage):
        def open_read(self, path: str):
            handles.append(super().open_read(path))
            return handles[-1]

    with open_capture(str(path), Keeping()) as handle:
        assert handle.read() == b"{}\n"
        assert not handles[0].closed
    assert len(handles) == 1 and handles[0].closed


@pytest.mark.parametrize("head, gzipped", [
    (gzip.compress(b"{}\n", mtime=0), True),
    (gzip.compress(b"", mtime=0), True),  # an empty stream: its end is something
    (gzip.compress(b"{}\n" * 1000, mtime=0)[:30], True),  # cut, but its start decompresses
    (b"\x1f\x8b\n{}", False),  # the magic, then a method that is not deflate
    (b"\x1f\x8b", False),  # the magic alone: nothing decompresses
    (b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"\xff" * 20, False),  # a header, then no deflate block
    (b'{"id": 1}\n', False),
])
def test_a_file_is_gzip_when_its_first_bytes_start_a_stream_zlib_takes_and_gives_something(head, gzipped):
    assert starts_gzip_stream(head) is gzipped
