"""ApplyStagesFn's shared values: records of one (group, windows) share their window, aggregate and shard values;
the settled batch is the one the per-record path gives, for every kind of window, with late records."""
from __future__ import annotations

import collections
import json
import pickle
import random

import pyarrow as pa
import pytest

from parity import replay_steps as rs
from parity.config import load_config
from parity.stages import shard as shard_stage
from parity.stages import window as window_stage

CONFIG = """
version: 1
name: shared-values
capture: {{path: capture.jsonl, key: [id], schema: {{id: int64, t: int64, arr: int64, fare: float64, zone: string}}}}
sides:
  offline:
    timestamp: {{field: t, unit: s}}
    window: {window}
    shard: {{key: [zone], count: 4, aggregates: {{trips: {{op: count}}, fare: {{op: mean, field: fare}}}}}}
    coder: {{type: pickle}}
  production:
    timestamp: {{field: t, unit: s}}
"""
WINDOWS = {
    "fixed": "{type: fixed, size: 10m}",
    "sliding": "{type: sliding, size: 10m, period: 5m}",  # a list of aggregates per record: not shared
    "session": "{type: session, gap: 2m}",
    "fixed-late": "{type: fixed, size: 5m, lateness: {arrival: arr, out_of_orderness: 0s, allowed: 0s}}",
}


def _settled_batches(tmp_path, window: str) -> list:
    tmp_path.mkdir(exist_ok=True)
    rnd = random.Random(5)
    with open(tmp_path / "capture.jsonl", "w", encoding="utf-8") as handle:
        for i in range(400):
            t = 1_709_942_400 + i * 7
            handle.write(json.dumps({"id": i, "t": t, "arr": t + rnd.choice([0, 0, 0, 900]),
                                     "fare": round(rnd.uniform(2, 60), 2), "zone": rnd.choice("abc")}) + "\n")
    (tmp_path / "parity.yaml").write_text(CONFIG.format(window=window), encoding="utf-8")
    side = load_config(str(tmp_path / "parity.yaml")).side("offline")
    read = rs.ReadBatchesFn(side, 150, str(tmp_path / "out"))
    read.setup()
    batches = list(read.process((0, str(tmp_path / "capture.jsonl"), "capture.jsonl")))
    late = {}
    if side.window.lateness is not None:
        rows = [row for batch in batches for row in rs.arrival_rows(batch)]
        late = window_stage.late_records(side.window.lateness, rows)
    merges = {}
    windowfn = window_stage.build_windowfn(side.window)
    if window_stage.is_merging(windowfn):
        per_key = collections.defaultdict(set)
        for batch in batches:
            for key, windows in rs.merge_rows(batch, late):
                per_key[key] |= windows
        merges = {key: window_stage.merge_windows(windowfn, windows) for key, windows in per_key.items()}
    partials = collections.defaultdict(list)
    for batch in batches:
        for key, state in rs.aggregate_partials(batch, side, late, merges):
            partials[key].append(state)
    specs = side.shard.aggregates
    aggregates = {key: shard_stage.finish_group(specs, shard_stage.merge_group_states(specs, states))
                  for key, states in partials.items()}
    stages = rs.ApplyStagesFn(side)
    stages.setup()
    out = []
    for batch in batches:
        path = str(tmp_path / f"{batch.part}.pkl")
        with open(path, "wb") as handle:
            pickle.dump(batch, handle)
        out.extend(stages.process(path, late, merges, aggregates))
    return out


@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_shared_values_settle_the_batch_the_per_record_path_settles(tmp_path, monkeypatch, window):
    shared = _settled_batches(tmp_path / "a", WINDOWS[window])
    monkeypatch.setattr(rs.ApplyStagesFn, "_shared", lambda self, *args: None)  # every record on its own
    alone = _settled_batches(tmp_path / "b", WINDOWS[window])

    assert len(shared) == len(alone) > 1
    for ours, theirs in zip(shared, alone):
        assert ours.value_bytes == theirs.value_bytes and ours.value_fps == theirs.value_fps
        # settled: the part's columns as Arrow arrays, ready to pickle as buffers
        assert all(isinstance(column, pa.Array) for column in
                   [*ours.value_bytes.values(), *ours.value_fps.values(), ours.input_bytes, ours.locations])
        assert ours.transform_inputs == theirs.transform_inputs
    settled = [value for batch in shared for value in batch.transform_inputs]
    if window == "fixed-late":
        assert None in settled and any(value is not None for value in settled)  # some records were late
    if window == "sliding":
        assert all(isinstance(value["trips"], list) for value in settled)


def test_records_of_a_group_get_their_own_record_dicts(tmp_path):
    batches = _settled_batches(tmp_path, WINDOWS["fixed"])
    inputs = [value for batch in batches for value in batch.transform_inputs]
    assert len({id(value) for value in inputs}) == len(inputs) == 400
