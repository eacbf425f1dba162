"""The diff as a Beam job (parity.compare.engine) gives the local diff's report.json byte for byte.

Each scenario is checked once with the local diff (`diff_on="local"`); its two fingerprint sets are then diffed
again with `diff_on="engine"` on the in-process DirectRunner (FnApiRunner), one key range per element, and the
report must be the check's, byte for byte. Scenarios: every record diverged (window units), two stages with
feature histograms and few examples kept, the model stage (prediction impact), analysis noise (TFX re-analysis:
within tolerance by noise beside real numeric divergences; slow: TFT analyses the capture). A redacted check
removes its sets' values once reported, so redaction is compared as two whole checks.
"""
from __future__ import annotations

import json
import os
import random
import shutil

import pytest
import yaml

import parity
from parity import commands
from parity.compare import engine
from parity.compare.summary import DiffSummary
from parity.config import load_config
from parity.sets.fingerprint_set import read_set

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIOS = {
    "all_diverged": "fixtures/scenarios/window_unit_ms_vs_s/parity.yaml",
    "two_stage_histograms": "fixtures/golden/_configs/two_stage/parity.yaml",
    "model_stage": "fixtures/golden/_configs/model_logits/parity.yaml",
    "analysis_noise": pytest.param("fixtures/scenarios/tfx_raw_fare_one_in_a_million/parity.yaml",
                                   marks=pytest.mark.slow),  # TFT analyses the capture: tens of seconds
}


def _read(path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize("config", SCENARIOS.values(), ids=list(SCENARIOS))
def test_the_engine_diff_writes_the_local_diffs_report_byte_for_byte(config, tmp_path):
    config_path = os.path.join(ROOT, config)
    checked = tmp_path / "check"
    local = parity.check(config_path, out_dir=checked, diff_on="local")
    loaded = load_config(config_path)
    left, right = (str(checked / "sides" / side.name) for side in loaded.sides)
    assert read_set(left).buckets is not None  # replayed sets have key ranges: the engine spreads them
    report = commands.diff(left, right, str(tmp_path / "engine"), config=loaded, diff_on="engine")
    assert _read(tmp_path / "engine" / "report.json") == _read(checked / "report.json")
    assert report["records"] == local["records"]
    assert not os.path.exists(tmp_path / "engine" / "_diff_work")  # the job's summaries are removed once read


def _redacted(tmp_path) -> str:
    """two_stage with `report: {redact: true, examples: 1}`, its captures by absolute path."""
    source = os.path.join(ROOT, "fixtures/golden/_configs/two_stage")
    folder = tmp_path / "redacted"
    shutil.copytree(source, folder)
    with open(folder / "parity.yaml", encoding="utf-8") as handle:
        document = yaml.safe_load(handle)
    for side in document["sides"].values():
        capture = side.get("capture") or {}
        if "path" in capture and not os.path.isabs(capture["path"]):
            capture["path"] = os.path.normpath(os.path.join(source, capture["path"]))
    if "path" in document.get("capture", {}) and not os.path.isabs(document["capture"]["path"]):
        document["capture"]["path"] = os.path.normpath(os.path.join(source, document["capture"]["path"]))
    document.setdefault("report", {}).update({"redact": True, "examples": 1})
    with open(folder / "parity.yaml", "w", encoding="utf-8") as handle:
        yaml.safe_dump(document, handle)
    return str(folder / "parity.yaml")


def test_a_redacted_check_whose_diff_ran_on_the_engine_writes_the_local_report(tmp_path):
    config = _redacted(tmp_path)
    parity.check(config, out_dir=tmp_path / "local", diff_on="local")
    report = parity.check(config, out_dir=tmp_path / "engine", diff_on="engine")
    assert report["records"]["diverged"] > 0 and report["examples"]
    assert _read(tmp_path / "engine" / "report.json") == _read(tmp_path / "local" / "report.json")


def test_the_client_merges_the_summaries_in_key_order_whatever_order_they_come_in(tmp_path):
    config_path = os.path.join(ROOT, SCENARIOS["two_stage_histograms"])
    parity.check(config_path, out_dir=tmp_path / "check", diff_on="local")
    loaded = load_config(config_path)
    left, right = (read_set(str(tmp_path / "check" / "sides" / side.name)) for side in loaded.sides)
    parts = _parts(left, right, loaded)
    in_order = _essence(engine.merged_in_order(parts))
    assert len(in_order["examples"]) >= 2
    for seed in range(5):
        shuffled = list(parts)
        random.Random(seed).shuffle(shuffled)
        assert _essence(engine.merged_in_order(shuffled)) == in_order
    backwards = _essence(engine.merged_in_order([(len(parts) - 1 - i, s) for i, s in parts]))
    assert backwards["examples"] != in_order["examples"]  # the order is the ranges', so it can be wrong


def _parts(left, right, config) -> list[tuple[int, DiffSummary]]:
    from parity.compare.causes import CauseContext
    from parity.compare.diff import DiffStream, summarized
    from parity.compare.tally import Tally

    parts = []
    for key_range in range(engine.RANGES):
        stream = DiffStream(left, right, config.tolerance, keep_unpaired=config.report.examples,
                            key_ranges=frozenset({key_range}))
        parts.append((key_range, summarized(stream, Tally(CauseContext(), False, 1))))
    return parts


def _essence(summary: DiffSummary) -> dict:
    return {"counts": summary.counts, "examples": [(e["key"], e["stage"], e["cause"]) for e in
                                                   summary.tally.example_list],
            "causes": dict(summary.tally.cause_counts)}


def test_features_of_empty_lists_and_one_sided_keys_give_the_local_report_on_the_engine(tmp_path):
    # offline [] against production [[]] for `nest`: its pairs differ but hold no number to bin; a numeric
    # feature diverged on every third record, within tolerance on others; keys on one side only on both sides
    folder = tmp_path / "project"
    folder.mkdir()
    with open(folder / "offline.jsonl", "w", encoding="utf-8") as off, \
            open(folder / "production.jsonl", "w", encoding="utf-8") as prod:
        for i in range(400):
            record = {"id": i, "x": i * 0.25}
            if i % 41:
                off.write(json.dumps(record) + "\n")
            if i % 43 != 1:
                prod.write(json.dumps(record) + "\n")
    (folder / "engine_offline.py").write_text("def features(record):\n"
                                              "    return {'y': record['x'] * 2, 'nest': []}\n")
    (folder / "engine_production.py").write_text(
        "def features(record):\n"
        "    i = record['id']\n"
        "    shift = 1.0 if i % 3 == 0 else 1e-9 if i % 5 == 0 else 0.0\n"
        "    return {'y': record['x'] * 2 + shift, 'nest': [[]]}\n")
    (folder / "parity.yaml").write_text(
        "version: 1\n"
        "capture: {key: [id], schema: {id: int64, x: float64}}\n"
        "sides:\n"
        "  offline: {capture: {path: offline.jsonl}, transform: {python: \"engine_offline:features\"}}\n"
        "  production: {capture: {path: production.jsonl}, transform: {python: \"engine_production:features\"}}\n"
        "tolerance: {default: {abs: 1.0e-6}}\n"
        "report: {examples: 2}\n")
    config = str(folder / "parity.yaml")
    local = parity.check(config, out_dir=tmp_path / "local", diff_on="local")
    features = {f["name"]: f for f in local["features"]}
    assert features["nest"]["histograms"] is None and features["y"]["histograms"] is not None
    assert local["records"]["left_only"] and local["records"]["right_only"]
    loaded = load_config(config)
    left, right = (str(tmp_path / "local" / "sides" / side.name) for side in loaded.sides)
    commands.diff(left, right, str(tmp_path / "engine"), config=loaded, diff_on="engine")
    assert _read(tmp_path / "engine" / "report.json") == _read(tmp_path / "local" / "report.json")


def test_a_set_damaged_under_the_engine_diff_fails_naming_the_file_and_leaves_no_work_folder(tmp_path):
    from parity.errors import FingerprintSetError
    from parity.sets.fingerprint_set import bucket_file

    config_path = os.path.join(ROOT, SCENARIOS["all_diverged"])
    parity.check(config_path, out_dir=tmp_path / "check", diff_on="local")
    loaded = load_config(config_path)
    left, right = (str(tmp_path / "check" / "sides" / side.name) for side in loaded.sides)
    damaged = bucket_file(left, read_set(left).buckets[0]["bucket"])
    with open(damaged, "wb") as handle:
        handle.write(b"not parquet")
    with pytest.raises(FingerprintSetError, match=os.path.basename(damaged)):
        commands.diff(left, right, str(tmp_path / "engine"), config=loaded, diff_on="engine")
    assert not os.path.exists(tmp_path / "engine" / "_diff_work")
    assert not os.path.exists(tmp_path / "engine" / "report.json")


@pytest.mark.parametrize("runner, options, elsewhere", [
    ("DirectRunner", [], False),
    ("DirectRunner", ["--direct_num_workers=2"], False),
    ("FlinkRunner", [], False),                                   # parity's Flink default: LOOPBACK
    ("FlinkRunner", ["--environment_type=LOOPBACK"], False),
    ("FlinkRunner", ["--environment_type", "loopback"], False),
    ("FlinkRunner", ["--environment_type=EXTERNAL", "--environment_config=localhost:50000"], True),
    ("FlinkRunner", ["--environment_type=PROCESS"], True),
    ("PortableRunner", [], True),                                  # Beam's portable default: DOCKER
])
def test_auto_puts_the_diff_on_the_engine_only_where_the_sdk_workers_run_outside_the_client(runner, options,
                                                                                            elsewhere):
    from parity.replay.flink import steps_in_this_process

    assert (not steps_in_this_process(runner, options)) is elsewhere
