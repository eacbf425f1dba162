"""End to end: the replay engine on a small self-contained pair, through the API and the CLI."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import pytest

import parity
from parity.cli import main
from parity.storage.context import Storage

from tests.set_files import fingerprint_files, fingerprint_table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FEATURES = '''
def features(record):
    fare = record["fare"] or 0.0
    return {"fare_x2": fare * 2, "zone": record["zone"], "trips": record["trips"],
            "bucket": int(fare // 10) if record["zone"] != "c" else int(fare // 10) + OFFSET}
OFFSET = 0
'''

CONFIG = '''
version: 1
name: engine-test
capture: {{path: capture.jsonl, key: [id], max_quarantined: 0.1,
           schema: {{id: int64, t: int64, arr: int64, fare: float64, zone: string}}}}
sides:
  offline:
    capture: {{path: {left_capture}}}
    timestamp: {{field: t, unit: s}}
    window: {{type: fixed, size: 1h}}
    shard: {{key: [zone], count: 4, aggregates: {{trips: {{op: count}}}}}}
    coder: {{type: json}}
    seed: {{value: 1, ops: {{keep: {{op: sample, rate: 0.5}}}}}}
    transform: {{python: {module}:features}}
  production:
    timestamp: {{field: t, unit: {right_unit}}}
    window: {{type: fixed, size: 3600}}
    shard: {{key: [zone], count: 4, aggregates: {{trips: {{op: count}}}}}}
    coder: {{type: pickle}}
    seed: {{value: 1, ops: {{keep: {{op: sample, rate: 0.5}}}}}}
    transform: {{python: {module}:features}}
tolerance: {{max_diverged: {max_diverged}}}
'''


def _records(count: int = 60) -> list[dict]:
    rnd = random.Random(11)
    return [{"id": 2**55 + i, "t": 1_709_942_400 + i * 61, "arr": 1_709_942_400 + i * 61 + 3,
             "fare": round(rnd.uniform(2, 60), 2), "zone": rnd.choice("abc")} for i in range(count)]


def _write_pair(folder, *, records=None, extra_lines=(), right_unit="s", max_diverged=0, left_capture="capture.jsonl",
                module="engine_features_a") -> str:
    records = _records() if records is None else records
    with open(folder / "capture.jsonl", "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
        for line in extra_lines:
            handle.write(line + "\n")
    (folder / f"{module}.py").write_text(FEATURES)
    config = folder / "parity.yaml"
    config.write_text(CONFIG.format(right_unit=right_unit, max_diverged=max_diverged, left_capture=left_capture,
                                    module=module))
    return str(config)


def _accounting_holds(report: dict) -> bool:
    r = report["records"]
    return (r["left"] == r["paired"] + r["left_only"] + r["quarantined"]["left"]
            and r["right"] == r["paired"] + r["right_only"] + r["quarantined"]["right"]
            and r["paired"] == r["matched"] + r["within_tolerance"] + r["diverged"])


def test_equivalent_sides_written_differently_are_at_parity(tmp_path):
    config = _write_pair(tmp_path, module="engine_features_parity")
    report = parity.check(config, out_dir=str(tmp_path / "out"))
    assert report["verdict"] == "parity"
    assert report["records"]["matched"] == 60
    assert report["first_divergence"] is None
    assert [s["diverged"] for s in report["stages"]] == [0] * 6


def test_millisecond_timestamps_diverge_first_at_window_for_every_record(tmp_path):
    config = _write_pair(tmp_path, right_unit="ms", module="engine_features_ms")
    report = parity.check(config, out_dir=str(tmp_path / "out"))
    assert report["verdict"] == "diverged"
    assert report["first_divergence"]["stage"] == "window"
    assert report["first_divergence"]["records"] == 60
    assert report["records"]["diverged"] == 60


def test_every_record_read_is_counted_once_with_duplicates_one_sided_and_unreadable_records(tmp_path):
    records = _records(40)
    records.append(dict(records[3]))            # a duplicate key with identical content
    records.append(dict(records[5], fare=1.5))   # a duplicate key with different content
    (tmp_path / "left.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records[:30] + [{"id": 1, "t": 5, "arr": 6, "fare": 1.0,
                                                               "zone": "z"}]))
    config = _write_pair(tmp_path, records=records, left_capture="left.jsonl",
                         extra_lines=["{broken", '{"id": 7, "t": "not a time", "arr": 1, "fare": 1, "zone": "a"}',
                                      '{"t": 1, "arr": 1, "fare": 1.0, "zone": "a"}'],
                         module="engine_features_acct")
    report = parity.check(config, out_dir=str(tmp_path / "out"))
    r = report["records"]
    assert _accounting_holds(report)
    assert r["left"] == 31 and r["right"] == 45
    assert r["quarantined"] == {"left": 0, "right": 3}
    assert r["duplicate_keys"] == 2
    assert r["left_only"] == 1
    assert r["right_only"] == 45 - 3 - r["paired"]


def test_a_repeated_run_and_a_shuffled_capture_give_byte_identical_reports(tmp_path):
    records = _records(80)
    first = tmp_path / "first"
    second = tmp_path / "second"
    shuffled = tmp_path / "shuffled"
    for folder in (first, second, shuffled):
        folder.mkdir()
    _write_pair(first, records=records, right_unit="ms", module="engine_features_det")
    _write_pair(second, records=records, right_unit="ms", module="engine_features_det")
    rnd = random.Random(3)
    mixed = records[:]
    rnd.shuffle(mixed)
    _write_pair(shuffled, records=mixed, right_unit="ms", module="engine_features_det")
    texts = []
    for folder in (first, second, shuffled):
        parity.check(str(folder / "parity.yaml"), out_dir=str(folder / "out"))
        texts.append((folder / "out" / "report.json").read_bytes())
    assert texts[0] == texts[1] == texts[2]
    assert json.loads(texts[0])["records"]["diverged"] == 80


def test_cli_exit_codes_are_zero_one_and_two(tmp_path, capsys):
    good = tmp_path / "good"
    bad = tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    assert main(["check", _write_pair(good, module="engine_features_cli0"), "--out", str(good / "out")]) == 0
    assert "parity: parity" in capsys.readouterr().out
    assert main(["check", _write_pair(bad, right_unit="ms", module="engine_features_cli1"),
                 "--out", str(bad / "out")]) == 1
    assert "first divergence: stage window" in capsys.readouterr().out
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: 1\ncapture: {path: x.jsonl}\nsides: {a: {coder: {type: pikle}}, b: {}}\n")
    assert main(["check", str(broken), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "sides.a.coder.type" in err and "'pikle'" in err and "json, tfexample, avro, pickle, arrow" in err


def test_max_diverged_turns_a_small_divergence_into_parity(tmp_path):
    config = _write_pair(tmp_path, right_unit="ms", max_diverged=60, module="engine_features_max")
    report = parity.check(config, out_dir=str(tmp_path / "out"))
    assert report["records"]["diverged"] == 60
    assert report["verdict"] == "parity"


def test_replay_then_diff_gives_the_same_report_as_check(tmp_path):
    config = _write_pair(tmp_path, right_unit="ms", module="engine_features_rd")
    parity.check(config, out_dir=str(tmp_path / "checked"))
    for side in ("offline", "production"):
        assert main(["replay", config, "--side", side, "--out", str(tmp_path / "sets" / side)]) == 0
    assert main(["diff", str(tmp_path / "sets" / "offline"), str(tmp_path / "sets" / "production"),
                 "--out", str(tmp_path / "diffed"), "--config", config]) == 1
    assert (tmp_path / "diffed" / "report.json").read_bytes() == (tmp_path / "checked" / "report.json").read_bytes()


def test_show_prints_one_record_stage_by_stage_and_where_the_sides_part(tmp_path, capsys):
    config = _write_pair(tmp_path, right_unit="ms", module="engine_features_show")
    parity.check(config, out_dir=str(tmp_path / "out"))
    capsys.readouterr()
    assert main(["show", str(tmp_path / "out"), str(2**55 + 4)]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert shown["first_divergence"] == "window"
    assert [s["stage"] for s in shown["stages"]] == ["input", "window", "shard", "coder", "seed", "transform"]
    assert shown["stages"][0]["equal"] is True
    assert shown["stages"][1]["left"]["value"]["timestamp_us"] == \
        shown["stages"][1]["right"]["value"]["timestamp_us"] * 1000  # the right side read seconds as ms


def test_show_finds_each_key_in_a_set_read_a_few_rows_at_a_time_as_the_whole_table_would(tmp_path):
    """`parity show` streams each set (`FingerprintSet.row_of_key`) instead of holding every row: in batches of 7
    rows it finds each record's row exactly as a scan of the whole table (the oracle) does, and no row for a
    key that is not there."""
    from parity.sets.fingerprint_set import read_set

    config = _write_pair(tmp_path, right_unit="ms", module="engine_features_rows")
    parity.check(config, out_dir=str(tmp_path / "out"))
    for side in ("offline", "production"):
        fset = read_set(str(tmp_path / "out" / "sides" / side))
        whole = read_set(fset.path).table.to_pylist()
        assert len(whole) > 7
        for row in whole:
            assert fset.row_of_key(row["key"], rows=7) == next(r for r in whole if r["key"] == row["key"])
        assert fset.row_of_key('"no such key"', rows=7) is None


def test_report_command_renders_the_json_again_in_each_format(tmp_path):
    config = _write_pair(tmp_path, right_unit="ms", module="engine_features_rep")
    parity.check(config, out_dir=str(tmp_path / "out"))
    for fmt, name in (("md", "report.md"), ("html", "report.html"), ("junit", "junit.xml")):
        target = tmp_path / f"again.{fmt}"
        assert main(["report", str(tmp_path / "out" / "report.json"), "--format", fmt, "--out", str(target)]) == 0
        assert target.read_text() == (tmp_path / "out" / name).read_text()


def test_python_dash_m_parity_runs_the_cli(tmp_path):
    result = subprocess.run([sys.executable, "-m", "parity", "report", str(tmp_path / "missing.json"),
                             "--format", "md"], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    assert "missing.json" in result.stderr


def test_a_transform_that_raises_names_the_record_and_exits_two(tmp_path, capsys):
    config = _write_pair(tmp_path, module="engine_features_raise")
    (tmp_path / "engine_features_raise.py").write_text(textwrap.dedent('''
        def features(record):
            if record["id"] == 2**55 + 7:
                raise ValueError("bad fare")
            return {"x": 1}
    '''))
    assert main(["check", config, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert str(2**55 + 7) in err and "ValueError: bad fare" in err


def test_a_replay_leaves_no_spill_files_behind_whether_it_succeeds_or_fails(tmp_path):
    config = _write_pair(tmp_path, module="engine_features_spill")
    parity.check(config, out_dir=str(tmp_path / "out"))
    for side in ("offline", "production"):
        names = os.listdir(tmp_path / "out" / "sides" / side)
        assert {"buckets.json", "fingerprints"} <= set(names) and "_spill" not in names
    (tmp_path / "raising").mkdir()
    config = _write_pair(tmp_path / "raising", module="engine_features_spill_raise")
    (tmp_path / "raising" / "engine_features_spill_raise.py").write_text(
        "def features(record):\n    raise ValueError('no')\n")
    assert main(["check", config, "--out", str(tmp_path / "failed")]) == 2
    assert os.path.isdir(tmp_path / "failed" / "sides" / "offline")
    assert "_spill" not in os.listdir(tmp_path / "failed" / "sides" / "offline")


def test_a_spilled_batch_loads_back_equal_column_by_column(tmp_path):
    from parity.replay import spill
    from parity.replay.batch import RecBatch

    batch = RecBatch("00000-000003")
    batch.rids = [(0, 6000), (0, 6001)]
    batch.records = [{"id": 1, "fare": 2.5}, {"id": 2, "fare": None}]
    batch.values = {"window": [{"windows": [[0, 3600]]}, None]}
    spill_fn = spill.SpillFn(str(tmp_path), "read", Storage())
    spill_fn.setup()
    [path] = spill_fn.process(batch)
    assert os.path.basename(path) == "read-00000-000003.pkl"
    loaded = spill.load(path, Storage())
    assert [getattr(loaded, name) for name in RecBatch.__slots__] == \
        [getattr(batch, name) for name in RecBatch.__slots__]
    spill.remove(str(tmp_path), Storage())
    assert not os.path.exists(spill.spill_dir(str(tmp_path)))


def test_a_spill_file_stays_when_loaded_and_goes_when_consumed(tmp_path):
    from parity.replay import spill
    from parity.replay.batch import RecBatch

    spill_fn = spill.SpillFn(str(tmp_path), "staged", Storage())
    spill_fn.setup()
    [path] = spill_fn.process(RecBatch("00001-000000"))
    assert spill.load(path, Storage()).part == "00001-000000" and os.path.exists(path)
    assert spill.load(path, Storage(), consume=True).part == "00001-000000" and not os.path.exists(path)


def test_a_direct_runner_replay_removes_each_spill_file_as_soon_as_it_is_loaded(tmp_path, monkeypatch):
    from parity.replay import spill

    loads = []
    load = spill.load

    def spy(path, storage, consume=False):
        batch = load(path, storage, consume)
        loads.append((os.path.basename(path), consume, os.path.exists(path)))
        return batch

    monkeypatch.setattr(spill, "load", spy)
    config = _write_pair(tmp_path, module="engine_features_consume")
    parity.check(config, out_dir=str(tmp_path / "out"))
    consumed = sorted(entry for entry in loads if entry[1])
    assert consumed == [("read-00000-000000.pkl", True, False)] * 2  # one batch per side, gone once read
    # the steps before the stages step (the shard aggregates here) read it and leave it for the stages step
    assert all(exists for _, consume, exists in loads if not consume)


def test_a_side_with_more_quarantined_records_than_allowed_stops_with_exit_two(tmp_path, capsys):
    config = _write_pair(tmp_path, records=_records(20), extra_lines=["{broken"] * 3, module="engine_features_q")
    assert main(["check", config, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "3 of 23 records (13.0%) were quarantined, above capture.max_quarantined 0.1" in err
    assert "invalid JSON (3)" in err and "quarantine.jsonl" in err


def test_a_record_above_the_size_limit_is_quarantined_not_dropped(tmp_path):
    records = _records(30)
    records[4]["zone"] = "x" * 5000
    config = _write_pair(tmp_path, records=records, module="engine_features_big")
    text = open(config).read().replace("max_quarantined: 0.1,", "max_quarantined: 0.1, max_record_bytes: 1000,")
    open(config, "w").write(text)
    report = parity.check(config, out_dir=str(tmp_path / "out"))
    assert report["records"]["quarantined"] == {"left": 1, "right": 1}
    assert report["records"]["quarantine_reasons"]["left"] == {"record too large": 1}
    assert _accounting_holds(report)


@pytest.mark.slow  # two whole TFT replays (tests/stages/test_tft_input.py holds the batch builders' equality in the fast tier)
def test_a_tft_side_writes_the_same_set_whether_its_transform_inputs_travel_as_arrow_or_as_dicts(tmp_path,
                                                                                                  monkeypatch):
    from parity.config import load_config
    from parity.commands import replay
    from parity.stages.transform import TFTInput

    config = load_config(os.path.join(REPO, "pipelines", "taxi", "parity.yaml"))
    arrow_built = []
    columnar_batch = TFTInput.columnar_batch
    monkeypatch.setattr(TFTInput, "columnar_batch",
                        lambda self, records: arrow_built.append(len(records)) or columnar_batch(self, records))
    replay(config, "offline", str(tmp_path / "arrow"))
    monkeypatch.setattr(TFTInput, "columnar_batch", lambda self, records: None)  # every batch keeps its dicts
    replay(config, "offline", str(tmp_path / "dicts"))

    assert sum(arrow_built) == 3000
    assert fingerprint_files(tmp_path / "arrow") == fingerprint_files(tmp_path / "dicts")
    assert (tmp_path / "arrow" / "analyzers.json").read_bytes() == (tmp_path / "dicts" / "analyzers.json").read_bytes()
    assert fingerprint_table(tmp_path / "arrow").num_rows == 3000


# The slow tier (`make test`, not `make test-fast`): TFT replays of both sides, spilled and not.
@pytest.mark.slow
def test_a_spilled_side_writes_its_stage_values_before_the_spill_and_reads_back_the_same_values(tmp_path,
                                                                                                 monkeypatch):
    import pyarrow.parquet as pq

    from parity.config import load_config
    from parity.sets.fingerprint_set import STAGE_VALUES_DIR, read_set
    from tests.set_files import stage_bytes
    from parity.replay.transform_step import WriteStageValuesFn
    from parity.commands import replay

    config = load_config(os.path.join(REPO, "pipelines", "taxi", "parity.yaml"))
    spilled = []
    from parity.replay import spill

    spill_fn = spill.SpillFn.process
    monkeypatch.setattr(spill.SpillFn, "process",
                        lambda self, batch: spilled.append((self._tag, batch.input_bytes is None, batch.value_bytes))
                        or spill_fn(self, batch))
    replay(config, "offline", str(tmp_path / "apart"))
    assert {(tag, gone, not bytes_left) for tag, gone, bytes_left in spilled if tag == "staged"} == {("staged", True, True)}
    monkeypatch.setattr(WriteStageValuesFn, "process", lambda self, batch: [batch])  # every value written at the end
    replay(config, "offline", str(tmp_path / "together"))

    apart, together = read_set(str(tmp_path / "apart")), read_set(str(tmp_path / "together"))
    assert fingerprint_files(tmp_path / "apart") == fingerprint_files(tmp_path / "together")
    assert os.listdir(tmp_path / "apart" / STAGE_VALUES_DIR) and not (tmp_path / "together" / STAGE_VALUES_DIR).exists()
    assert pq.read_schema(next((tmp_path / "apart" / "values").iterdir())).names == ["key_bytes", "transform"]
    refs = list(zip(apart.table.column("part").to_pylist(), apart.table.column("row").to_pylist()))
    assert len(refs) == 3000
    assert apart.values(refs) == together.values(refs)
    wanted = {ref: ["coder", "transform"] for ref in refs[::7]}
    assert stage_bytes(apart, wanted) == stage_bytes(together, wanted)


def test_value_parts_are_written_with_lz4_and_parts_written_with_zstd_read_the_same(tmp_path):
    import pyarrow.parquet as pq

    from parity.sets.fingerprint_set import read_values, write_stage_values, write_values

    stage_columns = {"location": ["a:1", "a:2"], "input": [b"\x01", b"\x02" * 300], "window": [b"w", b"w"],
                     "shard": [b"s", b"t"], "coder": [b"c", b"d"], "seed": [b"e", b"f"]}
    write_stage_values(str(tmp_path), "p", stage_columns)
    write_values(str(tmp_path), "p", {"key_bytes": [b"k1", b"k2"], "transform": [b"x", None]})
    files = [tmp_path / "stage_values" / "p.parquet", tmp_path / "values" / "p.parquet"]
    codecs = {pq.ParquetFile(f).metadata.row_group(0).column(i).compression
              for f in files for i in range(pq.ParquetFile(f).metadata.num_columns)}
    assert codecs == {"LZ4"}
    written = read_values(str(tmp_path), "p").to_pylist()
    for f in files:  # as a replay of an earlier version wrote them
        pq.write_table(pq.read_table(f), f, compression="zstd")
    assert {pq.ParquetFile(f).metadata.row_group(0).column(0).compression for f in files} == {"ZSTD"}
    assert read_values(str(tmp_path), "p").to_pylist() == written
    assert written[1]["input"] == b"\x02" * 300 and written[1]["transform"] is None


def test_stage_values_that_do_not_match_their_part_are_refused_naming_the_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from parity.errors import FingerprintSetError
    from parity.sets.fingerprint_set import read_values, write_stage_values
    from tests.set_files import write_part_columns

    one = [b"\x00"]
    write_stage_values(str(tmp_path), "p", {"location": ["a:1"], "input": one, "window": one, "shard": one,
                                            "coder": one, "seed": one})
    write_part_columns(str(tmp_path), "p", {"key_fp": [bytes(16)], "key": ["1"], **{f"{s}_fp": [0] for s in
                       ("input", "window", "shard", "coder", "seed", "transform")}, "features": [[]]},
                       {"key_bytes": one, "transform": one})
    assert read_values(str(tmp_path), "p").to_pylist() == [
        {"key_bytes": b"\x00", "location": "a:1", "input": b"\x00", "window": b"\x00", "shard": b"\x00",
         "coder": b"\x00", "seed": b"\x00", "transform": b"\x00"}]
    pq.write_table(pa.table({"key_bytes": one * 2, "transform": one * 2}), tmp_path / "values" / "p.parquet")
    with pytest.raises(FingerprintSetError, match=r"stage_values/p\.parquet: 1 rows, but .*values/p\.parquet has 2"):
        read_values(str(tmp_path), "p")
