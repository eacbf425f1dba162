"""The raw records of a scenario's capture, read without parity's code, for the scenario oracles."""
from __future__ import annotations

import glob
import json
import os

import yaml


def raw_records(folder: str) -> list[dict]:
    """The raw records of the scenario's top-level capture: plain `json.loads` values of JSON lines, or, for
    tf.Example shards (an ExampleGen split folder or a glob of them), each example's features as lists of
    values (bytes decoded as UTF-8) read with TensorFlow's own reader."""
    with open(os.path.join(folder, "parity.yaml"), encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    pattern = os.path.join(folder, config["capture"]["path"])
    paths = sorted(glob.glob(os.path.join(pattern, "*"))) if os.path.isdir(pattern) else sorted(glob.glob(pattern))
    records = []
    for path in paths:
        if path.endswith((".jsonl", ".json")):
            with open(path, encoding="utf-8") as handle:
                records.extend(json.loads(line) for line in handle if line.strip())
        else:
            records.extend(_examples(path))
    assert records, f"{folder}: no records at {pattern}"
    return records


def _examples(path: str) -> list[dict]:
    import tensorflow as tf

    with open(path, "rb") as handle:
        gzipped = handle.read(2) == b"\x1f\x8b"
    out = []
    for data in tf.data.TFRecordDataset(path, compression_type="GZIP" if gzipped else ""):
        example = tf.train.Example.FromString(data.numpy())
        record = {}
        for key, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            values = list(getattr(feature, kind).value) if kind else []
            record[key] = [v.decode("utf-8") if isinstance(v, bytes) else v for v in values]
        out.append(record)
    return out
