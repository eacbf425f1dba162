"""`parity init`: a commented starting parity.yaml from a capture, which `parity check` then runs as it is."""
from __future__ import annotations

import csv
import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from parity.cli import main
from parity.config import load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TFX = os.path.join(ROOT, "fixtures", "tfx")
COUNT = 40
FIELDS = ("trip_id", "fare", "zone", "tags", "event_time")


def _trips() -> list[dict]:
    """Trips with a null fare every 7th, zero to two tags, and event times in seconds."""
    return [{"trip_id": 5000 + i, "fare": None if i % 7 == 3 else 5.5 + i / 4,
             "zone": ("Loop", "O'Hare", "Zürich <b>")[i % 3], "tags": ["cash", "airport"][: i % 3],
             "event_time": 1709942411 + 60 * i} for i in range(COUNT)]


def _write_jsonl(path: str, trips: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for trip in trips:
            handle.write(json.dumps(trip, ensure_ascii=False) + "\n")


def _write_parquet(path: str, trips: list[dict]) -> None:
    schema = pa.schema([("trip_id", pa.int64()), ("fare", pa.float64()), ("zone", pa.string()),
                        ("tags", pa.list_(pa.string())), ("event_time", pa.int64())])
    pq.write_table(pa.Table.from_pylist(trips, schema=schema), path)


def _write_csv(path: str, trips: list[dict]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(FIELDS)
        for trip in trips:
            writer.writerow([trip["trip_id"], "" if trip["fare"] is None else trip["fare"], trip["zone"],
                             json.dumps(trip["tags"]), trip["event_time"]])


def _write_tfrecord(path: str, trips: list[dict]) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(path) as writer:
        for trip in trips:
            feature = {"trip_id": tf.train.Feature(int64_list=tf.train.Int64List(value=[trip["trip_id"]])),
                       "zone": tf.train.Feature(bytes_list=tf.train.BytesList(value=[trip["zone"].encode()])),
                       "tags": tf.train.Feature(
                           bytes_list=tf.train.BytesList(value=[t.encode() for t in trip["tags"]])),
                       "event_time": tf.train.Feature(int64_list=tf.train.Int64List(value=[trip["event_time"]]))}
            if trip["fare"] is not None:  # as ExampleGen leaves out an empty cell
                feature["fare"] = tf.train.Feature(float_list=tf.train.FloatList(value=[trip["fare"]]))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


WRITERS = {"trips.jsonl": _write_jsonl, "trips.parquet": _write_parquet, "trips.csv": _write_csv,
           "trips.tfrecord": _write_tfrecord}
EXPECTED_SCHEMAS = {
    "trips.jsonl": {"trip_id": "int64", "fare": "optional<float64>", "zone": "string", "tags": "list<string>",
                    "event_time": "int64"},
    "trips.parquet": {"trip_id": "int64", "fare": "optional<float64>", "zone": "string", "tags": "list<string>",
                      "event_time": "int64"},
    "trips.csv": {"trip_id": "int64", "fare": "optional<float64>", "zone": "string", "tags": "list<string>",
                  "event_time": "int64"},
    "trips.tfrecord": {"trip_id": "int64", "fare": "optional<float32>", "zone": "string", "tags": "list<string>",
                       "event_time": "int64"},
}


def _capture(folder, name: str) -> str:
    path = os.path.join(folder, name)
    WRITERS[name](path, _trips())
    return path


def _report(out) -> dict:
    with open(os.path.join(out, "report.json"), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_init_infers_each_capture_format_and_parity_check_runs_the_result(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _capture(tmp_path, name)
    assert main(["init", "--capture", name, "--key", "trip_id"]) == 0
    assert "wrote parity.yaml" in capsys.readouterr().out
    config = yaml.safe_load((tmp_path / "parity.yaml").read_text(encoding="utf-8"))
    assert config["capture"] == {"path": name, "format": name.split(".")[1], "key": ["trip_id"],
                                 "schema": EXPECTED_SCHEMAS[name]}
    assert main(["check", "parity.yaml", "--out", "out"]) == 0
    records = _report(tmp_path / "out")["records"]
    assert records["paired"] == records["matched"] == COUNT
    assert records["quarantined"] == {"left": 0, "right": 0}


def test_init_refuses_to_overwrite_an_existing_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _capture(tmp_path, "trips.jsonl")
    (tmp_path / "parity.yaml").write_text("mine\n", encoding="utf-8")
    assert main(["init", "--capture", "trips.jsonl"]) == 2
    assert "parity.yaml already exists; parity init never overwrites" in capsys.readouterr().err
    assert (tmp_path / "parity.yaml").read_text(encoding="utf-8") == "mine\n"
    assert sorted(os.listdir(tmp_path)) == ["parity.yaml", "trips.jsonl"]  # no temporary file left either


def test_every_stage_key_is_shown_with_its_default_and_loads_once_uncommented(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _capture(tmp_path, "trips.jsonl")
    assert main(["init", "--capture", "trips.jsonl", "--out", "parity.yaml"]) == 0
    text = (tmp_path / "parity.yaml").read_text(encoding="utf-8")
    for key in ("timestamp:", "window:", "lateness:", "shard:", "count: 1", "hash: xxh3", "aggregates:",
                "coder:", "seed:", "ops:", "transform:", "tz: UTC", "max_quarantined: 0.01"):
        assert f"# {key}" in text or f"#   {key}" in text or f"#     {key}" in text, key
    assert "unit: s" in text and "guessed: event_time's values look like s since the epoch" in text
    assert "# key: [trip_id]" in text  # a guess, commented out: the key is the user's choice
    lines, side = [], None
    for line in text.splitlines():  # uncomment every stage key of the offline side
        if line.startswith("  ") and not line.startswith("   "):
            side = line.strip()
        if side == "offline:" and re.match(r"^    # +(?!capture:)\w+:", line):
            line = "    " + line[len("    # "):]
        lines.append(line)
    (tmp_path / "all.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    offline, production = load_config(str(tmp_path / "all.yaml"), check_refs=False).sides
    assert (offline.timestamp.field, offline.timestamp.unit, offline.timestamp.tz) == ("event_time", "s", "UTC")
    assert (offline.window.type, offline.window.size_us, offline.window.offset_us) == ("fixed", 3600 * 10**6, 0)
    assert offline.window.lateness.out_of_orderness_us == offline.window.lateness.allowed_us == 0
    assert (offline.shard.count, offline.shard.hash, len(offline.shard.aggregates)) == (1, "xxh3", 2)
    assert offline.coder.type == "json" and offline.seed.value == 42 and offline.transform.kind == "tft"
    assert (production.timestamp, production.window, production.shard, production.coder, production.seed,
            production.transform) == (None,) * 6  # the defaults: every stage key left out


def test_init_writes_the_same_text_every_time(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _capture(tmp_path, "trips.jsonl")
    assert main(["init", "--capture", "trips.jsonl", "--out", "a.yaml"]) == 0
    assert main(["init", "--capture", "trips.jsonl", "--out", "b.yaml"]) == 0
    assert (tmp_path / "a.yaml").read_bytes() == (tmp_path / "b.yaml").read_bytes()


def test_transforms_and_paths_are_written_relative_to_the_config_and_check_runs_from_elsewhere(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "conf").mkdir()
    _capture(tmp_path / "data", "trips.jsonl")
    (tmp_path / "init_features.py").write_text(
        "def features(record):\n    return {'fare_x2': (record['fare'] or 0.0) * 2, 'zone': record['zone']}\n",
        encoding="utf-8")
    assert main(["init", "--capture", "data/trips.jsonl", "--key", "trip_id", "--out", "conf/parity.yaml",
                 "--offline", "init_features:features", "--production", "init_features.py:features"]) == 0
    config = yaml.safe_load((tmp_path / "conf" / "parity.yaml").read_text(encoding="utf-8"))
    assert config["capture"]["path"] == "../data/trips.jsonl"
    assert config["sides"]["offline"] == {"transform": {"python": "../init_features.py:features"}}
    assert config["sides"]["production"] == {"transform": {"python": "../init_features.py:features"}}
    monkeypatch.chdir(tmp_path / "data")
    assert main(["check", "../conf/parity.yaml", "--out", str(tmp_path / "out")]) == 0
    report = _report(tmp_path / "out")
    assert report["records"]["matched"] == COUNT and {f["name"] for f in report["features"]} == {"fare_x2", "zone"}


def test_a_tfmd_schema_and_exported_transforms_make_a_config_that_checks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    split = os.path.join(TFX, "pipeline", "CsvExampleGen", "examples", "1", "Split-train")
    graph = os.path.join(TFX, "pipeline", "Transform", "transform_graph", "3")
    assert main(["init", "--capture", split, "--schema", os.path.join(TFX, "pipeline", "SchemaGen", "schema"),
                 "--key", "trip_id", "--offline", graph, "--production", f"saved:{graph}"]) == 0
    text = (tmp_path / "parity.yaml").read_text(encoding="utf-8")
    config = yaml.safe_load(text)
    def resolved(path: str) -> str:  # as the config's folder resolves it (outside tmp_path: written absolute)
        return os.path.normpath(os.path.join(str(tmp_path), path))

    assert resolved(config["capture"]["schema"]) == os.path.join(TFX, "pipeline", "SchemaGen", "schema")
    assert config["capture"]["format"] == "tfrecord"
    assert "#   fare: optional<float32>" in text and "#   tags: list<bytes>" in text  # the TFMD mapping, shown
    assert resolved(config["sides"]["offline"]["transform"]["saved"]) == graph
    assert resolved(config["sides"]["production"]["transform"]["saved"]) == graph
    assert main(["check", "parity.yaml", "--out", "out"]) == 0
    assert _report(tmp_path / "out")["records"]["matched"] == 240


def test_a_function_named_preprocessing_fn_is_a_tft_transform_and_the_other_side_serves_its_graph(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _capture(tmp_path, "trips.jsonl")
    assert main(["init", "--capture", "trips.jsonl", "--offline", "preprocess:preprocessing_fn"]) == 0
    text = (tmp_path / "parity.yaml").read_text(encoding="utf-8")
    assert yaml.safe_load(text)["sides"]["offline"] == {"transform": {"tft": "preprocess:preprocessing_fn"}}
    assert "    # transform: {saved: {from_side: offline}}" in text
    assert main(["init", "--capture", "trips.jsonl", "--out", "p.yaml",
                 "--offline", "python:preprocess:preprocessing_fn"]) == 0
    assert yaml.safe_load((tmp_path / "p.yaml").read_text(encoding="utf-8"))["sides"]["offline"] == \
        {"transform": {"python": "preprocess:preprocessing_fn"}}


@pytest.mark.parametrize("argv, message", [
    (["--key", "trip"], "--key trip: no such field in trips.jsonl; its fields are trip_id, fare, zone, tags, "
                        "event_time"),
    (["--production", "nowhere/"], "--production nowhere/: expected an exported TFT output folder"),
    (["--schema", "missing.pbtxt"], "--schema missing.pbtxt: missing.pbtxt does not exist"),
])
def test_bad_arguments_exit_two_naming_the_culprit_and_write_nothing(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _capture(tmp_path, "trips.jsonl")
    assert main(["init", "--capture", "trips.jsonl", *argv]) == 2
    assert message in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["trips.jsonl"]


def test_a_folder_that_is_no_tft_output_exits_two_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _capture(tmp_path, "trips.jsonl")
    (tmp_path / "empty").mkdir()
    assert main(["init", "--capture", "trips.jsonl", "--production", "empty"]) == 2
    err = capsys.readouterr().err
    assert "parity.yaml: the config parity init would write does not load: sides.production.transform.saved" in err
    assert sorted(os.listdir(tmp_path)) == ["empty", "trips.jsonl"]


def test_a_capture_that_does_not_exist_exits_two(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--capture", "nope/*.jsonl"]) == 2
    assert "capture path 'nope/*.jsonl' matches no file" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_fields_without_a_parity_type_are_shown_commented_and_read_as_they_are(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trips = [{**trip, "meta": {"driver": i}, "mixed": i if i % 2 else str(i), "never": None}
             for i, trip in enumerate(_trips())]
    _write_jsonl(str(tmp_path / "trips.jsonl"), trips)
    assert main(["init", "--capture", "trips.jsonl", "--key", "trip_id"]) == 0
    text = (tmp_path / "parity.yaml").read_text(encoding="utf-8")
    assert "    # meta:" in text and "nested objects have no parity type" in text
    assert "    # mixed:" in text and "mixed types (int, str)" in text
    assert "    # never:" in text and "null or absent in all 40 sampled records" in text
    assert set(yaml.safe_load(text)["capture"]["schema"]) == set(FIELDS)
    assert main(["check", "parity.yaml", "--out", "out"]) == 0


# The slow tier (`make test`, not `make test-fast`): a real TFX pipeline's module traced by TFT, then checked.
@pytest.mark.slow
def test_init_on_a_real_tfx_pipeline_writes_the_modules_custom_config_keys_and_names_the_run_after_the_pipeline(
        tmp_path):
    """Issue 43: `parity init` on TFX's own artifacts writes a config that runs as written up to the one thing it
    cannot know, the custom_config TFX hands the module: unfilled, the check exits 2 naming
    `transform.custom_config` and the key; filled in, it runs. Every line on stderr is parity's own."""
    import subprocess
    import sys

    penguin = os.path.join(TFX, "penguin")
    pipeline = os.path.join(penguin, "pipeline")
    config = tmp_path / "parity.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "parity", "init", "--capture",
         os.path.join(pipeline, "CsvExampleGen", "examples", "1", "Split-train"),
         "--schema", os.path.join(pipeline, "SchemaGen", "schema"),
         "--offline", os.path.join(penguin, "penguin_module.py") + ":preprocessing_fn",
         "--production", os.path.join(pipeline, "Transform"), "--out", str(config)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if line.strip()] == [], done.stderr  # no TF/absl lines
    text = config.read_text()
    assert re.search(r"^name: pipeline\b", text, re.M), text[:400]  # the pipeline root's name, not Split-train
    assert re.search(r"^      # custom_config: ", text, re.M) and re.search(r"^      #   body_mass_buckets: FILL_IN", text, re.M)

    check = [sys.executable, "-m", "parity", "check", str(config), "--out", str(tmp_path / "out")]
    failed = subprocess.run(check, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert failed.returncode == 2, failed.stderr[-2000:]
    errors = [line for line in failed.stderr.splitlines() if line.startswith("parity: error: ")]
    assert len(errors) == 1 and "sides.offline.transform.custom_config" in errors[0] \
        and "'body_mass_buckets'" in errors[0], failed.stderr[-2000:]
    assert all(line.startswith("parity: ") for line in failed.stderr.splitlines() if line.strip())

    filled = re.sub(r"^      # custom_config:.*$", "      custom_config:", text, flags=re.M)
    filled = re.sub(r"^      #   body_mass_buckets: FILL_IN.*$", "        body_mass_buckets: 4", filled, flags=re.M)
    config.write_text(filled)
    ran = subprocess.run(check + ["--force"], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert ran.returncode == 0, ran.stderr[-2000:]  # TFX's own analysis of this split: parity through the noise
    assert ran.stdout.startswith("parity: parity (offline vs production)")
    assert all(line.startswith("parity: ") for line in ran.stderr.splitlines() if line.strip()), ran.stderr[-2000:]


def test_a_commented_model_block_is_offered_and_loads_once_uncommented(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _capture(tmp_path, "trips.jsonl")
    assert main(["init", "--capture", "trips.jsonl", "--out", "parity.yaml"]) == 0
    text = (tmp_path / "parity.yaml").read_text(encoding="utf-8")
    assert "\n# model:" in text and "#   decision: {output: logits, rule: argmax}" in text
    model = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "scenarios",
                         "_models", "tip_v1")
    lines = []
    for line in text.splitlines():
        if re.match(r"^# model:|^#   \w+:", line):
            line = line[2:]
        lines.append(line.replace("saved: serving_model/", f"saved: {model}"))
    (tmp_path / "model.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    offline, production = load_config(str(tmp_path / "model.yaml"), check_refs=False).sides
    assert offline.model == production.model and offline.model.saved == model
    assert (offline.model.signature, offline.model.decision.output) == ("serving_default", "logits")
