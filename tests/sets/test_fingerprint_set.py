"""A replay's fingerprint set on the disk (parity/sets/fingerprint_set.py): its value parts and its manifest."""
from __future__ import annotations

import json
import os

import apache_beam as beam

from parity.config import load_config
from parity.replay import spill
from parity.replay.pipeline import ReplaySide
from parity.replay.runners import make_options, make_runner
from parity.sets.fingerprint_set import finalize, read_set
from parity.storage.context import Storage

CONFIG = """
version: 1
capture: {path: capture.jsonl, key: [id], schema: {id: int64, t: int64, fare: float64}}
sides:
  offline:
    timestamp: {field: t, unit: s}
    window: {type: fixed, size: 1h}
  production:
    timestamp: {field: t, unit: s}
    window: {type: fixed, size: 1h}
"""


def test_a_replays_value_parts_are_synced_once_all_are_written_and_before_its_manifest(tmp_path, monkeypatch):
    lines = [json.dumps({"id": i, "t": 1_709_942_400 + 97 * i, "fare": i / 4}) for i in range(70)]
    (tmp_path / "capture.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "parity.yaml").write_text(CONFIG)
    config = load_config(str(tmp_path / "parity.yaml"))
    out = str(tmp_path / "offline")
    manifest = os.path.join(out, "manifest.json")
    synced: list[tuple[str, bool, str]] = []  # (what, manifest there then, phase)
    phase = ["replay"]
    real = os.fsync

    def fsync(fd: int) -> None:  # the real fsync, recording what it synced and when
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), os.path.exists(manifest), phase[0]))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    pipeline = beam.Pipeline(runner=make_runner("DirectRunner"), options=make_options("DirectRunner", None))
    _ = pipeline | ReplaySide(config, config.side("offline"), out, batch_size=16, fused_read=True,
                              spills=spill.SpillPolicy.CONSUME, storage=Storage())
    pipeline.run().wait_until_finish()
    phase[0] = "finalize"
    finalize(out, {"side": "offline"})
    values = os.path.join(out, "values")
    parts = sorted(os.path.join(values, name) for name in os.listdir(values))
    assert len(parts) == 5  # 70 records in batches of 16
    part_syncs = [(what, there, when) for what, there, when in synced if what.startswith(values)]
    # each part once, then the folder's entries, all in finalize and before the manifest was written
    assert sorted(what for what, _, _ in part_syncs[:-1]) == parts and part_syncs[-1][0] == values
    assert {(there, when) for _, there, when in part_syncs} == {(False, "finalize")}
    assert any(what.startswith(manifest) for what, _, _ in synced)  # the manifest is synced itself
    assert read_set(out).manifest["records"]["fingerprinted"] == 70
