"""parity.beam taps: a tapped pipeline's fingerprint set diffs against a replay as `parity check` does.

The taxi production job (pipelines/taxi/production.py) runs on the bundled capture with a tap after each
stage; its tap set is diffed against `parity replay` of the offline side and must find what `parity check
pipelines/taxi/parity.yaml` finds. A small hand-written pipeline covers sliding windows, values, redaction,
quarantine and determinism quickly.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
import pytest
import xxhash
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import window

import parity
from parity import commands as run
from parity.beam import TapStage, finalize, sampled
from parity.cli import main
from tests.compare.diffed import compare
from parity.config import ToleranceSpec, load_config
from parity.encoding import canonical
from parity.sets import tap_align, tap_finalize, tap_set
from parity.sets.fingerprint_set import read_set
from parity.stages import STAGES

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "fixtures" / "taxi" / "capture" / "trips.jsonl"


def _config_without_model() -> Path:
    """pipelines/taxi/parity.yaml without its `model:`, in a folder of its own with the example's modules: taps
    have no model stage (README, `model`), so what the taps find is compared with a check that has none either."""
    import shutil
    import tempfile

    import yaml

    folder = Path(tempfile.mkdtemp(prefix="parity-taps-config-"))
    for module in (REPO / "pipelines" / "taxi").glob("*.py"):
        shutil.copy(module, folder / module.name)
    config = yaml.safe_load((REPO / "pipelines" / "taxi" / "parity.yaml").read_text(encoding="utf-8"))
    config.pop("model", None)
    config["capture"]["path"] = str(CAPTURE)
    (folder / "parity.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return folder / "parity.yaml"


TAXI_CONFIG = _config_without_model()



# ---------------------------------------------------------------------------------------------------------
# The taxi production job


@pytest.fixture(scope="module")
def production():
    spec = importlib.util.spec_from_file_location("taxi_production", REPO / "pipelines" / "taxi" / "production.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["taxi_production"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("taxi_production", None)


@pytest.fixture(scope="module")
def check_out(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("check")
    return parity.check(str(TAXI_CONFIG), out_dir=str(out)), out


@pytest.fixture(scope="module")
def offline_set(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("offline") / "offline"
    run.replay(load_config(str(TAXI_CONFIG)), "offline", str(out))
    return out


def _run_production(production, offline_set: Path, out: Path, **settings) -> Path:
    taps = out / "taps"
    pipeline = beam.Pipeline(runner=FnApiRunner())
    production.build(pipeline, str(CAPTURE), str(offline_set / "tft_output"), str(out / "job"), tap_dir=str(taps),
                     **settings)
    pipeline.run().wait_until_finish()
    return taps


@pytest.fixture(scope="module")
def tapped_all(production, offline_set, tmp_path_factory) -> Path:
    taps = _run_production(production, offline_set, tmp_path_factory.mktemp("tapped_all"), keep_values=None)
    finalize(str(taps), side="production", key=["trip_id"], config_name="taxi-hourly",
             transform_graph=str(offline_set / "tft_output"))
    return taps


@pytest.fixture(scope="module")
def tapped_10(production, offline_set, tmp_path_factory) -> Path:
    taps = _run_production(production, offline_set, tmp_path_factory.mktemp("tapped_10"), sample_rate=0.1)
    finalize(str(taps), key=["trip_id"], config_name="taxi-hourly", transform_graph=str(offline_set / "tft_output"),
             keep_parts=True)
    return taps


def _report(path: Path) -> dict:
    return json.loads((path / "report.json").read_text(encoding="utf-8"))


@pytest.mark.slow  # a tapped job, a replay and a whole check (the oldest and tfx profiles run it too)
def test_the_tapped_production_job_diffed_against_the_offline_replay_finds_what_check_finds(
        tapped_all, offline_set, check_out, tmp_path):
    expected, _ = check_out
    code = main(["diff", str(offline_set), str(tapped_all), "--out", str(tmp_path), "--config", str(TAXI_CONFIG)])
    report = _report(tmp_path)

    assert code == (1 if expected["verdict"] == "diverged" else 0)
    assert expected["first_divergence"] is not None
    assert report["first_divergence"]["stage"] == expected["first_divergence"]["stage"]
    assert report["first_divergence"]["cause"] == expected["first_divergence"]["cause"]
    assert report["first_divergence"]["records"] == expected["first_divergence"]["records"]
    assert report["records"]["diverged"] == expected["records"]["diverged"]
    # More than the three figures: the whole report is the same, examples and analyzers included.
    for field in ("records", "stages", "causes", "features", "examples", "analyzers", "verdict"):
        assert report[field] == expected[field], field


@pytest.mark.slow  # a tapped production job and an offline replay (module fixtures); the oldest and tfx profiles run it too
def test_the_taps_compute_exactly_the_values_a_replay_of_the_production_config_computes(
        tapped_all, offline_set, tmp_path):
    # The replay applies the same exported graph as the tapped job: two offline replays can export
    # analyzers that differ in the last bits (TFT's float32 variance depends on its combining order).
    replay = tmp_path / "production"
    run.replay(load_config(str(TAXI_CONFIG)), "production", str(replay), transform_from=str(offline_set))
    code = main(["diff", str(replay), str(tapped_all), "--out", str(tmp_path / "diff")])
    report = _report(tmp_path / "diff")
    assert code == 0, report["causes"]
    records = report["records"]
    assert records["paired"] == 3000 and records["diverged"] == 0
    if _beam_version() >= (2, 77):  # the pinned Beam (constraints.txt): bit for bit
        assert records["matched"] == 3000
    else:  # older Beam combines the job's float means in another order: equal within tolerance, not in bits
        assert records["matched"] + records["within_tolerance"] == 3000
        assert all(s["name"] in ("shard", "coder", "seed", "transform") for s in report["stages"] if s["diverged"])


def _beam_version() -> tuple[int, int]:
    major, minor = beam.__version__.split(".")[:2]
    return int(major), int(minor)


def test_a_tap_set_is_a_standard_fingerprint_set_with_the_tap_fields(tapped_all):
    manifest = read_set(str(tapped_all)).manifest
    assert manifest["format"] == "parity.fingerprints/1"
    assert manifest["stages"] == list(STAGES) == manifest["stages_tapped"]
    assert manifest["key"] == ["trip_id"] and manifest["side"] == "production"
    assert manifest["sample_rate"] == 1.0 and manifest["values"]["kept"] == 3000
    assert manifest["records"] == {"read": 3000, "fingerprinted": 3000, "quarantined": 0}
    assert {(t["stage"], t["label"]) for t in manifest["taps"]} == {
        ("input", "input"), ("window", "window"), ("window", "window-late"), ("shard", "shard"),
        ("coder", "coder"), ("seed", "seed"), ("transform", "transform")}
    assert not (tapped_all / "_taps").exists()


def _sampled_keys(fset) -> set[bytes]:
    return {k for k in fset.table.column("key_fp").to_pylist() if tap_set.key_sampled(k, 0.1)}


def test_sampling_at_ten_percent_taps_the_same_keys_on_both_sides_and_the_counts_scale(
        tapped_10, tapped_all, offline_set, tmp_path):
    replay, tapped = read_set(str(offline_set)), read_set(str(tapped_10))
    tapped_keys = set(tapped.table.column("key_fp").to_pylist())
    assert tapped_keys == _sampled_keys(replay)
    assert 200 < len(tapped_keys) < 400  # ~10% of 3000

    # The full comparison, restricted to the sample afterwards: what the sampled report must say.
    full = compare(replay, read_set(str(tapped_all)), ToleranceSpec())
    diverged = [m for m in full.mismatches if m.diverged and m.key_fp in tapped_keys]
    late = [m for m in diverged if m.first_stage == "window"]

    left, right = tap_align.write_views(str(offline_set), str(tapped_10), str(tmp_path / "views"))
    assert main(["diff", left, right, "--out", str(tmp_path / "diff"), "--config", str(TAXI_CONFIG)]) == 1
    report = _report(tmp_path / "diff")
    records = report["records"]
    assert records["left"] == records["right"] == records["paired"] == len(tapped_keys)
    assert records["left_only"] == records["right_only"] == 0
    assert records["diverged"] == len(diverged) > 0
    stages = {s["name"]: s["first_diverged"] for s in report["stages"]}
    assert stages["window"] == len(late) and stages["shard"] == len(diverged) - len(late)
    if late:
        assert report["first_divergence"]["cause"] == "window.late_dropped"
    assert read_set(left).manifest["sample"] == {"rate": 0.1, "rule": tap_set.SAMPLE_RULE,
                                                 "outside_sample": 3000 - len(tapped_keys)}


def test_parity_diff_restricts_the_replay_to_the_sampled_keys_by_itself(tapped_10, offline_set, tmp_path):
    left, right = tap_align.write_views(str(offline_set), str(tapped_10), str(tmp_path / "views"))
    main(["diff", left, right, "--out", str(tmp_path / "via_views")])
    main(["diff", str(offline_set), str(tapped_10), "--out", str(tmp_path / "direct")])
    direct, via_views = _report(tmp_path / "direct"), _report(tmp_path / "via_views")
    assert direct["records"]["left_only"] == 0
    assert direct == via_views


@pytest.mark.slow  # a tapped production job and an offline replay (module fixtures); the oldest and tfx profiles run it too
def test_a_report_of_a_tap_set_says_which_stages_and_sample_it_compared(
        tapped_10, offline_set, check_out, tmp_path):
    main(["diff", str(offline_set), str(tapped_10), "--out", str(tmp_path)])
    report = _report(tmp_path)
    sampled = len(read_set(str(tapped_10)).table)
    assert report["taps"] == {"stages_compared": list(STAGES), "sample_rate": 0.1,
                              "outside_sample": {"left": 3000 - sampled, "right": 0}}
    assert report["records"]["left"] == sampled
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert (f"taps: stages compared {', '.join(f'`{s}`' for s in STAGES)}; sample rate 0.1, records left out "
            f"as outside the sample {3000 - sampled} left / 0 right") in markdown
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert f"outside the taps&#x27; sample on the left</td><td class=\"num\">{3000 - sampled}<" in html
    assert "outside the taps&#x27; sample on the right</td><td class=\"num\">0<" in html
    assert "<td>stages compared</td><td><code>input</code>, <code>window</code>" in html
    assert '<td>sample rate</td><td class="num">0.1</td>' in html and '<section id="taps">' in html
    expected, out = check_out  # two replays: no taps field, so reports without taps keep their bytes
    assert "taps" not in expected and "taps:" not in (out / "report.md").read_text(encoding="utf-8")


def test_a_key_is_never_half_tapped(tapped_10, offline_set):
    stage_keys = tap_finalize.iter_stage_keys(str(tapped_10))  # the parts each stage's taps wrote
    manifest = read_set(str(tapped_10)).manifest
    late_keys = {k for tap in manifest["taps"] if tap["late"]
                 for k in _keys_of(tapped_10 / "_taps" / "window" / tap["label"])}
    assert stage_keys["input"] == stage_keys["window"]  # on time and late together
    for stage in STAGES[2:]:
        assert stage_keys[stage] == stage_keys["input"] - late_keys, stage
    assert late_keys, "the 10% sample should hold some of the late trips"
    for key_fp in stage_keys["input"]:
        assert tap_set.key_sampled(key_fp, 0.1)
    # And in the merged set no stage lacks a record another stage tapped.
    table = read_set(str(tapped_10)).table
    not_seen = tap_set.NOT_SEEN_FP
    for stage in STAGES:
        assert not_seen not in table.column(f"{stage}_fp").to_pylist(), stage


def _keys_of(folder: Path) -> set[bytes]:
    return {k for path in folder.glob("_parts/*.parquet") for k in pq.read_table(path).column("key_fp").to_pylist()}


def test_parity_show_works_on_a_tapped_set(tapped_all, offline_set, check_out, tmp_path, capsys):
    expected, _ = check_out
    out = tmp_path / "out"
    (out / "sides").mkdir(parents=True)
    os.symlink(offline_set, out / "sides" / "offline")
    os.symlink(tapped_all, out / "sides" / "production")
    assert main(["diff", str(out / "sides" / "offline"), str(out / "sides" / "production"), "--out", str(out)]) == 1
    late = next(e for e in expected["examples"] if e["cause"] == "window.late_dropped")
    capsys.readouterr()
    assert main(["show", str(out), json.dumps(late["key"])]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert shown["first_divergence"] == "window"
    window = shown["stages"][1]
    assert window["right"]["value"]["late"] is True
    assert window["right"]["value"]["timestamp_us"] == window["left"]["value"]["timestamp_us"]
    assert shown["stages"][2]["right"]["value"] == {"dropped": "late"}


# ---------------------------------------------------------------------------------------------------------
# A small hand-written pipeline: sliding windows, values, redaction, quarantine, determinism

SMALL_CONFIG = """
version: 1
name: taps-small
capture:
  path: capture.jsonl
  key: [id]
  max_quarantined: 0.1
  schema: {id: int64, t: int64, zone: string, fare: float64}
sides:
  offline:
    timestamp: {field: t, unit: s}
    window: {type: sliding, size: 1h, period: 30m}
  production:
    timestamp: {field: t, unit: s}
    window: {type: sliding, size: 1h, period: 30m}
"""


def _small_records(count: int = 40) -> list[dict]:
    return [{"id": 2**55 + 7 * i, "t": 1_709_942_400 + i * 437, "zone": "abc"[i % 3],
             "fare": None if i % 11 == 0 else round(3.5 + i * 1.25, 2)} for i in range(count)]


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("small")
    records = _small_records()
    with open(folder / "capture.jsonl", "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
        handle.write(json.dumps({"id": None, "t": 1_709_942_400, "zone": "a", "fare": 1.0}) + "\n")
    (folder / "parity.yaml").write_text(SMALL_CONFIG)
    replay = folder / "replay"
    run.replay(load_config(str(folder / "parity.yaml")), "production", str(replay))
    return {"folder": folder, "capture": folder / "capture.jsonl", "replay": replay}


def _small_pipeline(capture: Path, set_dir: Path, stages=STAGES, **settings) -> None:
    """The small config's production side by hand: taps everywhere, the window tap on sliding windows."""
    common = dict(settings, key_fields=["id"])
    values = {"shard": lambda r: {"key": None, "shard": 0, "aggregates": {}}, "seed": lambda r: {}}
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        records = pipeline | beam.io.ReadFromText(str(capture)) | beam.Map(json.loads)
        for stage in stages:
            if stage == "window":
                _ = (records
                     | "Stamp" >> beam.Map(lambda r: window.TimestampedValue(r, r["t"]))
                     | "Sliding" >> beam.WindowInto(window.SlidingWindows(3600, 1800))
                     | "TapWindow" >> TapStage("window", str(set_dir), **common))
            else:
                records = records | f"Tap{stage}" >> TapStage(stage, str(set_dir), value_fn=values.get(stage),
                                                              **common)


def test_taps_on_a_hand_written_pipeline_equal_its_replay_sliding_windows_included(small, tmp_path):
    taps = tmp_path / "taps"
    _small_pipeline(small["capture"], taps, keep_values=None)
    manifest = finalize(str(taps), key=["id"])
    assert manifest["records"] == {"read": 41, "fingerprinted": 40, "quarantined": 1}
    assert main(["diff", str(small["replay"]), str(taps), "--out", str(tmp_path / "diff")]) == 0
    report = _report(tmp_path / "diff")
    assert report["records"]["matched"] == 40 and report["records"]["quarantined"] == {"left": 1, "right": 1}
    windows = read_set(str(taps)).values([("tap-00000", 0)])[("tap-00000", 0)]["window"]["windows"]
    assert len(windows) == 2  # one record, both sliding windows


def test_elements_without_a_key_are_quarantined_once_not_once_per_tap(small, tmp_path):
    taps = tmp_path / "taps"
    _small_pipeline(small["capture"], taps)
    manifest = finalize(str(taps), key=["id"])
    assert manifest["records"]["quarantined"] == 1
    assert manifest["quarantine_reasons"] == {"missing key field 'id'": 1}
    assert manifest["quarantined_later_stages"] == len(STAGES) - 1


def test_values_are_kept_for_the_smallest_key_fingerprints_across_bundles(small, tmp_path):
    taps = tmp_path / "taps"
    _small_pipeline(small["capture"], taps, keep_values=5, batch_size=7)
    manifest = finalize(str(taps), key=["id"])
    fset = read_set(str(taps))
    rows = fset.table.to_pylist()
    values = fset.values([(r["part"], r["row"]) for r in rows])
    kept = sorted(r["key_fp"] for r in rows if values[(r["part"], r["row"])]["input"].get("error") is None)
    assert kept == sorted(r["key_fp"] for r in rows)[:5]
    assert manifest["values"]["kept"] == 5
    not_kept = next(values[(r["part"], r["row"])] for r in rows if r["key_fp"] not in kept)
    assert not_kept["window"]["error"].startswith("not kept by the tap")
    # The diff still pairs and counts every record; the stage values it lacks are never taken for equal.
    assert main(["diff", str(small["replay"]), str(taps), "--out", str(tmp_path / "diff")]) == 0


def test_redacted_taps_keep_no_values_and_record_keys_as_fingerprints(small, tmp_path):
    taps = tmp_path / "taps"
    _small_pipeline(small["capture"], taps, redact=True)
    manifest = finalize(str(taps), key=["id"])
    assert manifest["values"] == {"kept": 0, "keep_values": 0, "redacted": True, "rule": tap_set.VALUES_RULE}
    fset = read_set(str(taps))
    rows = fset.table.to_pylist()
    assert all(json.loads(r["key"]) == r["key_fp"].hex() for r in rows)
    for value in fset.values([(r["part"], r["row"]) for r in rows]).values():
        assert value["key_bytes"] == b""
        assert all(set(value[s]) == {"error"} and value[s]["error"].startswith("not kept") for s in STAGES)
    assert all(not e["preview"] for e in fset.quarantined())
    assert main(["diff", str(small["replay"]), str(taps), "--out", str(tmp_path / "diff")]) == 0


def test_a_rerun_into_the_same_folder_gives_the_same_set(small, tmp_path):
    taps = tmp_path / "taps"
    tables = []
    for _ in range(2):
        _small_pipeline(small["capture"], taps, keep_values=10, batch_size=9)
        finalize(str(taps), key=["id"])
        tables.append(pq.read_table(taps / "fingerprints.parquet"))
    assert tables[0].equals(tables[1])


def test_partial_taps_compare_only_the_stages_tapped(small, tmp_path):
    taps = tmp_path / "taps"
    _small_pipeline(small["capture"], taps, stages=("input", "window"))
    manifest = finalize(str(taps), key=["id"])
    assert manifest["stages_tapped"] == ["input", "window"]
    table = read_set(str(taps)).table
    assert set(table.column("transform_fp").to_pylist()) == {tap_set.UNTAPPED_FP}
    left, right = tap_align.write_views(str(small["replay"]), str(taps), str(tmp_path / "views"))
    assert main(["diff", left, right, "--out", str(tmp_path / "diff")]) == 0
    assert read_set(left).manifest["stages_compared"] == ["input", "window"]
    assert _report(tmp_path / "diff")["taps"] == {"stages_compared": ["input", "window"], "sample_rate": 1.0,
                                                  "outside_sample": {"left": 0, "right": 0}}


def test_the_sampling_rule_is_the_documented_one_and_nested_across_rates():
    keys = [2**60 + 7919 * i for i in range(5000)]
    for rate in (0.0, 0.05, 0.1, 0.5, 1.0):
        chosen = {k for k in keys if sampled(k, rate)}
        for k in keys:  # u / 2**64 < rate, u = the first 8 bytes of xxh3_128(canonical key bytes)
            u = int.from_bytes(xxhash.xxh3_128_digest(canonical.encode(k))[:8], "big")
            assert (k in chosen) == (u / 2**64 < rate)
        assert abs(len(chosen) - rate * len(keys)) < 0.02 * len(keys) + 1
    assert {k for k in keys if sampled(k, 0.05)} <= {k for k in keys if sampled(k, 0.1)}


def test_tapstage_refuses_what_it_cannot_tap():
    with pytest.raises(ValueError, match="unknown stage"):
        TapStage("sink", "/tmp/x", key_fields=["id"])
    with pytest.raises(ValueError, match="exactly one of key_fields"):
        TapStage("input", "/tmp/x")
    with pytest.raises(ValueError, match="window' only"):
        TapStage("shard", "/tmp/x", key_fields=["id"], late=True)
    with pytest.raises(ValueError, match="sample_rate"):
        TapStage("input", "/tmp/x", key_fields=["id"], sample_rate=1.5)


def test_the_taps_log_nothing_in_the_users_job(tmp_path, caplog):
    """A tapped bundle used to log Beam's "Process method returned None (element won't be emitted)" warning for
    the tap DoFns, in the user's own production job."""
    import logging

    records = [{"id": i, "event_time": 1_700_000_000 + i} for i in range(5)]
    with caplog.at_level(logging.INFO, logger="apache_beam"):
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            stamped = (pipeline | beam.Create(records)
                       | beam.Map(lambda r: window.TimestampedValue(r, r["event_time"])))
            _ = stamped | "TapInput" >> TapStage("input", str(tmp_path / "taps"), key_fields=["id"])
            _ = (stamped | beam.WindowInto(window.FixedWindows(60))
                 | "TapWindow" >> TapStage("window", str(tmp_path / "taps"), key_fields=["id"]))
    said = [r.getMessage() for r in caplog.records if "returned None" in r.getMessage()]
    assert said == []
    assert any((tmp_path / "taps").rglob("*")), "the taps wrote nothing"


def test_the_taps_run_in_a_users_job_without_importing_tensorflow(tmp_path):
    """parity.beam needs only apache-beam, pyarrow and xxhash: a production job that taps its stages must not pay
    for (or depend on) TensorFlow, TFT or tfx-bsl."""
    import subprocess

    code = f"""
import os, sys
import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from parity.beam import TapStage, finalize
taps = {str(tmp_path / "taps")!r}
with beam.Pipeline(runner=FnApiRunner()) as p:
    _ = (p | beam.Create([{{"id": i, "v": i * 0.5}} for i in range(20)])
         | "TapInput" >> TapStage("input", taps, key_fields=["id"]))
finalize(taps, side="production", key=["id"], config_name="x")
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "tensorflow_transform", "tfx_bsl"))
assert not heavy, heavy[:5]
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(REPO), timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
    assert (tmp_path / "taps" / "manifest.json").exists()
