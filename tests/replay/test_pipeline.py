"""A side's replay pipeline (parity/replay/pipeline.py): where the read batches are spilled and where the stages
run fused with the read."""
from __future__ import annotations

import hashlib
import json
import os

import apache_beam as beam

from parity.config import load_config
from parity.replay import spill
from parity.replay.pipeline import ReplaySide
from parity.replay.runners import make_options, make_runner
from parity.sets.fingerprint_set import finalize
from parity.storage.context import Storage

CONFIG = """
version: 1
capture: {{path: capture.jsonl, key: [id], max_quarantined: 0.5, schema: {{id: int64, t: int64, user: string, fare: float64}}}}
sides:
  offline:
    timestamp: {{field: t, unit: s}}
    window: {{type: fixed, size: 1h}}
    shard: {{key: [user], count: 4{aggregates}}}
    coder: {{type: json}}
    seed: {{value: 7, ops: {{in_sample: {{op: sample, rate: 0.5}}}}}}
  production:
    timestamp: {{field: t, unit: s}}
    window: {{type: fixed, size: 1h}}
"""
AGGREGATES = ", aggregates: {trips: {op: count}}"


def _config(tmp_path, aggregates: str = ""):
    lines = [json.dumps({"id": i, "t": 1_709_942_400 + 97 * i, "user": f"u{i % 7}", "fare": i / 4})
             for i in range(90)]
    (tmp_path / "capture.jsonl").write_text("\n".join(lines[:40] + ["{broken"] + lines[40:]) + "\n")
    (tmp_path / "parity.yaml").write_text(CONFIG.format(aggregates=aggregates))
    return load_config(str(tmp_path / "parity.yaml"))


def _step_names(config, fused_read: bool) -> list[str]:
    pipeline = beam.Pipeline(runner=make_runner("DirectRunner"), options=make_options("DirectRunner", None))
    _ = pipeline | ReplaySide(config, config.side("offline"), "/nonexistent/offline", fused_read=fused_read,
                              storage=Storage())
    return [t.unique_name for t in pipeline.to_runner_api().components.transforms.values()]


def _replay(config, out: str, fused_read: bool) -> dict[str, str]:
    """The side's fingerprint set written by one replay: {relative path: sha256} of every file."""
    pipeline = beam.Pipeline(runner=make_runner("DirectRunner"), options=make_options("DirectRunner", None))
    _ = pipeline | ReplaySide(config, config.side("offline"), out, batch_size=16, fused_read=fused_read,
                              spills=spill.SpillPolicy.CONSUME, storage=Storage())
    pipeline.run().wait_until_finish()
    finalize(out, {"side": "offline"})
    found = {}
    for folder, _dirs, files in os.walk(out):
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, out)] = hashlib.sha256(handle.read()).hexdigest()
    return found


def test_a_side_with_nothing_side_wide_is_staged_in_the_reads_step_only_where_the_read_may_be_fused(tmp_path):
    config = _config(tmp_path)
    fused = _step_names(config, fused_read=True)
    assert any(name.endswith("/ApplyStages") for name in fused)
    assert not any("SpillRead" in name for name in fused)
    # a runner whose metrics must count the records read before the later steps end: the read spills
    assert any(name.endswith("/SpillRead") for name in _step_names(config, fused_read=False))


def test_a_side_with_shard_aggregates_spills_its_read_batches_even_where_the_read_may_be_fused(tmp_path):
    names = _step_names(_config(tmp_path, AGGREGATES), fused_read=True)
    assert any(name.endswith("/SpillRead") for name in names)
    assert any("AggregatePartials" in name for name in names)


def test_a_side_staged_in_the_reads_step_writes_the_fingerprint_set_a_spilled_read_writes_byte_for_byte(tmp_path):
    config = _config(tmp_path)
    fused = _replay(config, str(tmp_path / "fused"), fused_read=True)
    spilled = _replay(config, str(tmp_path / "spilled"), fused_read=False)
    assert any(name.startswith("values") for name in fused)
    assert any("quarantine" in name for name in fused)  # the broken line is quarantined in both
    assert fused == spilled
