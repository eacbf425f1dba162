"""The `model` stage's outputs in a fingerprint set: `model/<part>.parquet`, one row per record that reached the
model (key text, canonical bytes of its outputs, their fingerprint), written beside the batch's value part.

They live in files of their own, not in the set's stage columns, so that a set replayed without a `model:` is
byte for byte what it was before the stage existed (fingerprint sets and reports stay comparable across
releases), and `compare/model_stage.py` reads them only when a model is configured. Outputs are a few numbers per
record: a side's whole table is read at once, and only the outputs of differing records are decoded.
"""
from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from parity.encoding import canonical
from parity.storage import urls
from parity.storage.context import Storage

MODEL_DIR = "model"
SCHEMA = pa.schema([("key", pa.string()), ("outputs", pa.binary()), ("model_fp", pa.uint64())])


def write_model_part(out_dir: str, part: str, keys: list[str], encoded: list[bytes], fps: list[int],
                     storage: Storage) -> None:
    """One batch's model outputs; named for the batch, so a retried bundle overwrites it."""
    folder = urls.child(out_dir, MODEL_DIR)
    storage.makedirs(folder)
    table = pa.Table.from_pydict({"key": keys, "outputs": encoded, "model_fp": fps}, schema=SCHEMA)
    with storage.open_write(urls.child(folder, f"{part}.parquet")) as handle:
        pq.write_table(table, handle)


def has_model_outputs(set_dir: str, storage: Storage) -> bool:
    return storage.isdir(urls.child(set_dir, MODEL_DIR))


def read_model_outputs(set_dir: str, storage: Storage, keys: pa.Array | None = None) -> dict[str, tuple[int, bytes]]:
    """Key text -> (fingerprint, canonical bytes of the outputs) of every record of the set that reached the
    model (of those whose key text is among `keys`, when given); decode with `canonical.decode` only what is
    compared (equal fingerprints need no values). A duplicate key keeps its smallest fingerprint, as pairing
    keeps duplicates in a deterministic order."""
    found: dict[str, tuple[int, bytes]] = {}
    for table in _parts(set_dir, storage):
        if keys is not None:  # one key range's (parity.compare.engine), filtered before a row becomes an object
            table = table.filter(pc.is_in(table.column("key"), value_set=keys))
        for key, data, fp in zip(table.column("key").to_pylist(), table.column("outputs").to_pylist(),
                                 table.column("model_fp").to_pylist()):
            if key not in found or fp < found[key][0]:
                found[key] = (fp, data)
    return found


def first_outputs(set_dir: str, storage: Storage) -> bytes | None:
    """The canonical bytes of the outputs of the set's first record (`read_model_outputs`' first entry: the first
    row of the first part that has one), or None: a model gives every record the same output names."""
    for table in _parts(set_dir, storage):
        if table.num_rows:
            return table.column("outputs")[0].as_py()
    return None


def outputs_of_key(set_dir: str, key: str, storage: Storage) -> tuple[int, dict[str, Any]] | None:
    """(fingerprint, outputs) of the record whose key text is `key` (the smallest fingerprint of a duplicate),
    or None; each part is filtered by key before anything is decoded (`parity show` asks for one record)."""
    found: tuple[int, bytes] | None = None
    for table in _parts(set_dir, storage):
        rows = table.filter(pc.equal(table.column("key"), key))
        for data, fp in zip(rows.column("outputs").to_pylist(), rows.column("model_fp").to_pylist()):
            if found is None or fp < found[0]:
                found = (fp, data)
    return None if found is None else (found[0], canonical.decode(found[1]))


def _parts(set_dir: str, storage: Storage) -> Iterator[pa.Table]:
    """The set's model parts, in name order (none when the set holds no model outputs)."""
    folder = urls.child(set_dir, MODEL_DIR)
    if not storage.isdir(folder):
        return
    for name in sorted(storage.list_names(folder)):
        if name.endswith(".parquet"):
            yield storage.read_parquet(urls.child(folder, name))
