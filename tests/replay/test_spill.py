"""Spilled batches (`parity.replay.spill`): written whole under their name, read back as written, and not
synced to the disk (no run after a crash reads one)."""
from __future__ import annotations

import os

from parity.replay import spill
from parity.replay.batch import RecBatch
from parity.storage.context import Storage


def test_a_spilled_batch_loads_as_written_and_its_file_is_never_synced(tmp_path, monkeypatch):
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    batch = RecBatch("00000-000001")
    batch.rids, batch.records, batch.keys = [(0, 0), (0, 1)], [{"a": 1}, {"a": 2}], [1, 2]
    path = str(tmp_path / "read-00000-000001.pkl")

    spill.write(path, batch, Storage())
    loaded = spill.SpillPolicy.CONSUME.load(path, Storage())

    assert synced == []
    assert (loaded.part, loaded.rids, loaded.records, loaded.keys) == (
        batch.part, batch.rids, batch.records, batch.keys)
    assert os.listdir(tmp_path) == []  # consumed: removed once read
