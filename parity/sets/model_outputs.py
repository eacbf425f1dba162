"""The `model` stage's outputs in a fingerprint set: `model/<part>.parquet`, one row per record that reached the
model (key text, canonical bytes of its outputs, their fingerprint), written beside the batch's value part.

They live in files of their own, not in the set's stage columns, so that a set replayed without a `model:` is
byte for byte what it was before the stage existed (fingerprint sets and reports stay comparable across
releases), and `compare/model_stage.py` reads them only when a model is configured. Outputs are a few numbers per
record: a side's whole table is read at once.
"""
from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from parity.encoding import canonical
from parity.storage import urls

MODEL_DIR = "model"
SCHEMA = pa.schema([("key", pa.string()), ("outputs", pa.binary()), ("model_fp", pa.uint64())])


def write_model_part(out_dir: str, part: str, keys: list[str], encoded: list[bytes], fps: list[int]) -> None:
    """One batch's model outputs; named for the batch, so a retried bundle overwrites it."""
    folder = urls.child(out_dir, MODEL_DIR)
    urls.makedirs(folder)
    table = pa.Table.from_pydict({"key": keys, "outputs": encoded, "model_fp": fps}, schema=SCHEMA)
    with urls.open_write(urls.child(folder, f"{part}.parquet")) as handle:
        pq.write_table(table, handle)


def has_model_outputs(set_dir: str) -> bool:
    return urls.isdir(urls.child(set_dir, MODEL_DIR))


def read_model_outputs(set_dir: str) -> dict[str, tuple[int, dict[str, Any]]]:
    """Key text -> (fingerprint, outputs) of every record of the set that reached the model. A duplicate key
    keeps its smallest fingerprint, as pairing keeps duplicates in a deterministic order."""
    folder = urls.child(set_dir, MODEL_DIR)
    found: dict[str, tuple[int, dict[str, Any]]] = {}
    if not urls.isdir(folder):
        return found
    for name in sorted(urls.list_names(folder)):
        if not name.endswith(".parquet"):
            continue
        with urls.open_read(urls.child(folder, name)) as handle:
            table = pq.read_table(handle)
        for key, data, fp in zip(table.column("key").to_pylist(), table.column("outputs").to_pylist(),
                                 table.column("model_fp").to_pylist()):
            if key not in found or fp < found[key][0]:
                found[key] = (fp, canonical.decode(data))
    return found
