"""Field types inferred from a capture (parity/capture/infer_schema.py) as `parity init` reads it, on a local path
and on an `s3://` URL (moto's S3 server, tests/storage/conftest.py). `tests/test_init.py` checks the types of
every format through `parity init`."""
from __future__ import annotations

import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parity.capture.infer_schema import infer
from parity.storage import urls
from parity.storage.context import Storage


@pytest.fixture(params=["local", "s3"])
def place(request, tmp_path):
    """(storage, a folder of its own) on a local disk or under s3://parity/."""
    if request.param == "local":
        return Storage(), str(tmp_path)
    server = request.getfixturevalue("storage_s3")
    return server.storage, f"s3://parity/infer/{uuid.uuid4().hex}"


def test_a_parquet_captures_fields_come_from_its_footer_and_the_stream_it_was_read_through_is_closed(place):
    storage, base = place
    storage.makedirs(base)
    path = urls.child(base, "trips.parquet")
    table = pa.table({"trip_id": pa.array([1, 2, 3], pa.int64()), "fare": pa.array([2.5, None, 4.0]),
                      "zone": pa.array(["a", "b", "c"])})
    with storage.open_write(path) as sink:
        pq.write_table(table, sink)
    sources: list = []

    class Keeping(Storage):
        def readable(self, path: str):
            sources.append(super().readable(path))
            return sources[-1]

    found = infer(path, base, storage=Keeping(storage.options))

    assert found.format == "parquet" and found.files == (path,) and found.sampled == 3
    assert [(field.name, field.type) for field in found.fields] == [
        ("trip_id", "int64"), ("fare", "optional<float64>"), ("zone", "string")]
    assert sources, "the Parquet file is read through Storage.open_parquet"
    assert all(source.closed for source in sources if not isinstance(source, str))
    assert urls.is_url(base) == any(not isinstance(source, str) for source in sources)
