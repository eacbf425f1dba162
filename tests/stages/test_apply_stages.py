"""ApplyStagesFn's shared values: records of one (group, windows) share their window, aggregate and shard values;
the settled batch is the one the per-record path gives, for every kind of window, with late records."""
from __future__ import annotations

import collections
import json
import pickle
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from parity.replay import read_step, side_inputs, stages_step
from parity.config import load_config
from parity.stages.timestamp import EventTime
from parity.stages import shard as shard_stage
from parity.stages import window as window_stage
from parity.storage.context import Storage
from tests.stages import oracles

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


def _settled_batches(tmp_path, window: str, aggregates: bool = True, batches_of: int = 150) -> list:
    tmp_path.mkdir(exist_ok=True)
    rnd = random.Random(5)
    with open(tmp_path / "capture.jsonl", "w", encoding="utf-8") as handle:
        for i in range(400):
            t = 1_709_942_400 + i * 7
            handle.write(json.dumps({"id": i, "t": t, "arr": t + rnd.choice([0, 0, 0, 900]),
                                     "fare": round(rnd.uniform(2, 60), 2), "zone": rnd.choice("abc")}) + "\n")
    config = CONFIG.format(window=window)
    if not aggregates:
        config = config.replace(", aggregates: {trips: {op: count}, fare: {op: mean, field: fare}}", "")
    (tmp_path / "parity.yaml").write_text(config, encoding="utf-8")
    side = load_config(str(tmp_path / "parity.yaml")).side("offline")
    assert bool(side.shard.aggregates) == aggregates
    read = read_step.ReadBatchesFn(side, batches_of, str(tmp_path / "out"), storage=Storage())
    read.setup()
    batches = list(read.process((0, str(tmp_path / "capture.jsonl"), "capture.jsonl")))
    late = {}
    if side.window.lateness is not None:
        rows = [row for batch in batches for row in side_inputs.arrival_rows(batch)]
        late = window_stage.late_records(side.window.lateness, rows)
    merges = {}
    windowfn = window_stage.build_windowfn(side.window)
    if window_stage.is_merging(windowfn):
        per_key = collections.defaultdict(set)
        for batch in batches:
            for key, windows in side_inputs.merge_rows(batch, late):
                per_key[key] |= windows
        merges = {key: window_stage.merge_windows(windowfn, windows) for key, windows in per_key.items()}
    partials = collections.defaultdict(list)
    for batch in batches:
        for key, state in side_inputs.aggregate_partials(batch, side, late, merges):
            partials[key].append(state)
    specs = side.shard.aggregates
    aggregates = {key: shard_stage.finish_group(specs, shard_stage.merge_group_states(specs, states))
                  for key, states in partials.items()}
    stages = stages_step.ApplyStagesFn(side, storage=Storage())
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
    monkeypatch.setattr(stages_step.ApplyStagesFn, "_shared", lambda self, *args: None)  # every record on its own
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


@pytest.mark.parametrize("window", ["fixed", "sliding", "fixed-late"])
def test_without_aggregates_the_values_kept_per_windows_and_per_group_settle_what_the_per_record_path_settles(
        tmp_path, monkeypatch, window):
    calls = []
    shard_value = shard_stage.shard_value
    monkeypatch.setattr(shard_stage, "shard_value", lambda *args: calls.append(args[2]) or shard_value(*args))
    apart = _settled_batches(tmp_path / "a", WINDOWS[window], aggregates=False, batches_of=60)
    built_apart = len(calls)
    monkeypatch.setattr(stages_step.ApplyStagesFn, "_on_time_values", lambda self, *args: None)  # each on its own
    monkeypatch.setattr(stages_step.ApplyStagesFn, "_all_on_time",
                        lambda self, batch: self._each_record(batch, {}, {}, {}, []))
    alone = _settled_batches(tmp_path / "b", WINDOWS[window], aggregates=False, batches_of=60)

    assert len(apart) == len(alone) > 2  # values kept from one batch serve the next ones
    for ours, theirs in zip(apart, alone):
        assert ours.value_bytes == theirs.value_bytes and ours.value_fps == theirs.value_fps
        assert ours.transform_inputs == theirs.transform_inputs
    built_alone = len(calls) - built_apart  # the per-record path: one per record it did not drop
    assert built_apart == 3  # one per zone, for every batch
    assert built_alone == 400 if window != "fixed-late" else 3 < built_alone < 400


def test_the_values_kept_across_batches_settle_the_same_batches_when_their_bound_clears_them(tmp_path, monkeypatch):
    kept = _settled_batches(tmp_path / "a", WINDOWS["fixed"], aggregates=False, batches_of=60)
    monkeypatch.setattr(stages_step, "_APART_LIMIT", 1)  # cleared before nearly every batch
    cleared = _settled_batches(tmp_path / "b", WINDOWS["fixed"], aggregates=False, batches_of=60)

    assert len(kept) == len(cleared) > 2
    for ours, theirs in zip(kept, cleared):
        assert ours.value_bytes == theirs.value_bytes and ours.value_fps == theirs.value_fps


def test_records_of_a_group_get_their_own_record_dicts(tmp_path):
    batches = _settled_batches(tmp_path, WINDOWS["fixed"])
    inputs = [value for batch in batches for value in batch.transform_inputs]
    assert len({id(value) for value in inputs}) == len(inputs) == 400


def _slots(batch) -> bytes:
    """A batch's slots, each as its pickle: an Arrow array as its type and values (built from the C encoder's
    buffers or from a list of bytes, the same values pickle as different buffers), every other slot as it is."""
    return pickle.dumps([(str(value.type), value.to_pylist()) if isinstance(value, pa.Array) else value
                         for value in (getattr(batch, name) for name in batch.__slots__)])


def _read_batches(tmp_path, lines: list[dict], timestamp: str = "{field: t, unit: s}"):
    tmp_path.mkdir(exist_ok=True)
    with open(tmp_path / "capture.jsonl", "w", encoding="utf-8") as handle:
        for line in lines:
            handle.write(json.dumps(line) + "\n")
    config = CONFIG.format(window=WINDOWS["fixed"]).replace("{field: t, unit: s}", timestamp, 1)
    config = config.replace("capture: {path: capture.jsonl,", "capture: {path: capture.jsonl, max_record_bytes: 200,")
    (tmp_path / "parity.yaml").write_text(config, encoding="utf-8")
    read = read_step.ReadBatchesFn(load_config(str(tmp_path / "parity.yaml")).side("offline"), 4, str(tmp_path / "out"),
                                   storage=Storage())
    read.setup()
    batches = list(read.process((0, str(tmp_path / "capture.jsonl"), "capture.jsonl")))
    quarantined = sorted((tmp_path / "out" / "_parts").glob("*.quarantine.jsonl"))
    return [_slots(batch) for batch in batches], [path.read_text(encoding="utf-8") for path in quarantined]


@pytest.mark.parametrize("timestamp", ["{field: t, unit: s}", "{field: t, unit: ms}", "{field: t, unit: ns}"])
def test_a_read_batch_built_column_by_column_is_the_one_built_record_by_record(tmp_path, monkeypatch, timestamp):
    rnd = random.Random(7)
    lines = [{"id": i, "t": 1_709_942_400 + i * 7, "arr": 0, "fare": round(rnd.uniform(2, 60), 2),
              "zone": rnd.choice("abc")} for i in range(20)]
    lines[5]["id"] = None            # a null key: quarantined
    lines[9]["t"] = "soon"           # not an int64: quarantined by the reader, its batch's others are clean
    lines[14]["zone"] = "z" * 300    # beyond max_record_bytes: quarantined
    calls = []
    exact_ints = EventTime._exact_ints
    monkeypatch.setattr(EventTime, "_exact_ints", lambda self, records: calls.append(exact_ints(self, records))
                        or calls[-1])
    fast = _read_batches(tmp_path / "a", lines, timestamp)
    monkeypatch.setattr(read_step.ReadBatchesFn, "_fill", oracles.fill)  # record by record
    slow = _read_batches(tmp_path / "b", lines, timestamp)

    assert fast == slow
    assert len(fast[1]) == 3 and len(fast[0]) == 5  # three batches quarantine a record, five are read
    # every batch's event times came at once, its refused records left out (not with a ns unit: `to_micros`
    # divides)
    assert [times is not None for times in calls] == [not timestamp.endswith("ns}")] * 5


def test_event_times_come_at_once_only_when_each_is_an_exact_int_in_s_ms_or_us():
    from parity.config import TimestampSpec

    def spec(unit):
        return TimestampSpec(field="t", unit=unit, tz="UTC", function=None)
    records = [{"t": 3}, {"t": -2}]
    assert EventTime(spec("s"))._exact_ints(records) == [3_000_000, -2_000_000]
    assert EventTime(spec("ms"))._exact_ints(records) == [3_000, -2_000]
    assert EventTime(spec("us"))._exact_ints(records) == [3, -2]
    assert EventTime(None).micros_many(records) == [None, None]
    for other in ({"t": True}, {"t": 1.0}, {"t": None}, {}, {"t": "3"}):
        assert EventTime(spec("s"))._exact_ints(records + [other]) is None, other
    assert EventTime(spec("ns"))._exact_ints(records) is None
    for record in records:  # the same as one by one
        assert oracles.micros(EventTime(spec("ms")), record) == EventTime(spec("ms")).micros_many([record])[0]


FILL_VARIANTS = {
    "two-key-fields": ("key: [id, zone],", "{field: t, unit: s}", ""),
    "no-key": ("", "{field: t, unit: ms}", ""),
    "iso-times": ("key: [id],", "{field: w, unit: iso8601}", ""),
    "lateness": ("key: [id],", "{field: t, unit: s}",
                 "window: {type: fixed, size: 5m, lateness: {arrival: arr, out_of_orderness: 0s, allowed: 0s}}"),
}


@pytest.mark.parametrize("variant", sorted(FILL_VARIANTS))
def test_a_read_batch_is_the_one_its_records_checked_one_by_one_give(tmp_path, monkeypatch, variant):
    key, timestamp, window = FILL_VARIANTS[variant]
    config = f"""
version: 1
name: fill
capture: {{path: capture.jsonl, {key} max_record_bytes: 200,
          schema: {{id: int64, t: int64, arr: int64, w: string, zone: string}}}}
sides:
  offline:
    timestamp: {timestamp}
    {window}
  production:
    timestamp: {timestamp}
"""
    rnd = random.Random(3)
    lines = [{"id": i, "t": 1_709_942_400 + i * 7, "arr": 1_709_942_400 + i * 7 + rnd.choice([0, 900]),
              "w": f"2026-03-08T0{i % 4}:30:00", "zone": rnd.choice("abc")} for i in range(40)]
    lines[3]["id"] = None            # a null key field
    lines[7]["zone"] = None          # a null second key field
    lines[11]["zone"] = "z" * 300    # beyond max_record_bytes
    lines[15]["w"] = "soon"          # not ISO 8601
    lines[19]["arr"] = None          # no arrival time
    lines[23]["t"] = None            # no event time
    lines[24]["id"] = None
    lines[24]["t"] = None            # two reasons: the first check's is given
    lines[30]["w"] = None
    lines[30]["arr"] = None

    def read(folder):
        folder.mkdir()
        with open(folder / "capture.jsonl", "w", encoding="utf-8") as handle:
            for line in lines:
                handle.write(json.dumps(line) + "\n")
        (folder / "parity.yaml").write_text(config, encoding="utf-8")
        fn = read_step.ReadBatchesFn(load_config(str(folder / "parity.yaml")).side("offline"), 8, str(folder / "out"),
                                       storage=Storage())
        fn.setup()
        batches = list(fn.process((0, str(folder / "capture.jsonl"), "capture.jsonl")))
        quarantined = sorted((folder / "out" / "_parts").glob("*.quarantine.jsonl"))
        return [_slots(batch) for batch in batches], [path.read_text(encoding="utf-8") for path in quarantined]

    batched = read(tmp_path / "a")
    monkeypatch.setattr(read_step.ReadBatchesFn, "_fill", oracles.fill)
    one_by_one = read(tmp_path / "b")
    assert batched == one_by_one
    assert batched[1] and len(batched[0]) == 5  # some records were quarantined


def test_a_stage_column_is_its_values_bytes_and_fingerprints_and_a_bad_value_is_refused_naming_its_record(tmp_path):
    from parity.encoding.fingerprint import encode_fingerprints
    from parity.errors import UserCodeError
    from parity.replay.batch import RecBatch
    from parity.replay.write_step import check_value_sizes, stage_arrays

    (tmp_path / "parity.yaml").write_text(CONFIG.format(window=WINDOWS["fixed"]).replace(
        "capture: {path: capture.jsonl,", "capture: {path: capture.jsonl, max_record_bytes: 40,"), encoding="utf-8")
    side = load_config(str(tmp_path / "parity.yaml")).side("offline")
    batch = RecBatch("00000-000000")
    batch.keys = [10, 11, 12]
    values = [{"split": "train"}, None, {"split": "eval", "n": [1.5, 2**70]}]
    data, fps = stage_arrays(batch, "seed", values)
    assert (data.type, fps.type) == (pa.binary(), pa.uint64())
    assert (data.to_pylist(), fps.to_pylist()) == tuple(encode_fingerprints(values))
    check_value_sizes(batch, side, "seed", pc.binary_length(data).to_numpy(), values)  # every value within 40 bytes

    with pytest.raises(UserCodeError, match=r"record 12: the seed stage value field 'n' cannot be fingerprinted"):
        stage_arrays(batch, "seed", [{}, {}, {"n": object()}])
    large = [{}, {"split": "x" * 50}, {}]
    with pytest.raises(UserCodeError, match=r"side 'offline': record 11: the seed stage value is 61 canonical bytes "
                                            r"\(its largest field, 'split', is 52 bytes\), above capture.max_record_"
                                            r"bytes 40"):
        check_value_sizes(batch, side, "seed", pc.binary_length(stage_arrays(batch, "seed", large)[0]).to_numpy(),
                          large)
