"""A large diff summarized in two processes (parity.compare.halves) gives the report of one process, byte for byte.

Real replays on the DirectRunner write bucketed sets with pairs of every kind: diverged at the input and at the
transform, within tolerance, one-sided keys on both sides; the examples kept per cause are fewer than each half
finds. `MIN_ROWS` and `MIN_PAIRS` decide whether the child process is used: the tests set them either way.
"""
from __future__ import annotations

import json
import os
import textwrap

import pytest

from parity.cli import main
from parity.compare.causes import CauseContext
from parity.compare.diff import DiffStream, summarized
from parity.compare.tally import Tally
from parity.config import ToleranceSpec
from parity.compare import halves
from parity.sets.fingerprint_set import read_set

from tests.set_files import bucket_paths

RECORDS = 3000


def _check(tmp_path) -> tuple[str, str, str]:
    folder = tmp_path / "project"
    folder.mkdir()
    with open(folder / "offline.jsonl", "w", encoding="utf-8") as off, \
            open(folder / "production.jsonl", "w", encoding="utf-8") as prod:
        for i in range(RECORDS):
            record = {"id": i, "x": i * 0.5, "tag": "a"}
            if i % 97 != 0:
                off.write(json.dumps(record) + "\n")           # every 97th: production only
            if i % 89 != 1:
                if i % 7 == 0:
                    record["tag"] = "b"                        # diverged at the input
                prod.write(json.dumps(record) + "\n")          # every 89th (+1): offline only
    (folder / "halves_offline.py").write_text("def features(record):\n    return {'y': record['x'] * 2}\n")
    (folder / "halves_production.py").write_text(textwrap.dedent("""\
        def features(record):
            i = record['id']
            shift = 1.0 if i % 3 == 0 else 1e-9 if i % 5 == 0 else 0.0
            return {'y': record['x'] * 2 + shift}
        """))
    (folder / "parity.yaml").write_text(textwrap.dedent("""\
        version: 1
        capture: {key: [id], schema: {id: int64, x: float64, tag: string}}
        sides:
          offline: {capture: {path: offline.jsonl}, transform: {python: "halves_offline:features"}}
          production: {capture: {path: production.jsonl}, transform: {python: "halves_production:features"}}
        tolerance: {default: {abs: 1.0e-6}}
        report: {examples: 3}
        """))
    assert main(["check", str(folder / "parity.yaml"), "--out", str(tmp_path / "out")]) == 1
    sides = tmp_path / "out" / "sides"
    return str(sides / "offline"), str(sides / "production"), str(folder / "parity.yaml")


def _reports(out) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("report.json", "junit.xml")}


@pytest.fixture
def sides(tmp_path):
    return _check(tmp_path)


def test_two_processes_give_the_report_of_one_byte_for_byte(sides, tmp_path, monkeypatch):
    left, right, config = sides
    started = []
    start = halves._start

    def spy(*args, **kwargs):
        started.append(args[1])
        return start(*args, **kwargs)

    monkeypatch.setattr(halves, "_start", spy)
    monkeypatch.setattr(halves, "MIN_ROWS", 10**12)
    assert main(["diff", left, right, "--out", str(tmp_path / "one"), "--config", config]) == 1
    assert started == []
    monkeypatch.setattr(halves, "MIN_ROWS", 0)
    monkeypatch.setattr(halves, "MIN_PAIRS", 0)
    assert main(["diff", left, right, "--out", str(tmp_path / "two"), "--config", config]) == 1
    assert len(started) == 1 and 0 < len(started[0]) < 16
    assert _reports(tmp_path / "two") == _reports(tmp_path / "one")
    report = json.loads((tmp_path / "two" / "report.json").read_bytes())
    records = report["records"]
    assert records["left_only"] > 0 and records["right_only"] > 0 and records["within_tolerance"] > 0
    assert {c["cause"] for c in report["causes"]} >= {"input.content", "transform.numeric"}
    assert all(c["records"] > 2 * 3 for c in report["causes"])  # more than the examples kept, in each half


def test_the_summaries_of_two_key_ranges_merge_into_the_summary_of_the_whole_diff_leaving_both_as_they_were(sides):
    left, right = (read_set(path) for path in sides[:2])
    tally = Tally(CauseContext(left_name="offline", right_name="production"), False, 3)
    whole = summarized(DiffStream(left, right, ToleranceSpec(), keep_unpaired=3), tally)
    stream = DiffStream(left, right, ToleranceSpec(), keep_unpaired=3)
    first = summarized(stream.of_ranges(frozenset(range(8))), tally.fresh())
    second = summarized(stream.of_ranges(frozenset(range(8, 16))), tally.fresh())
    before = (first.counts, tuple(first.tally.example_list), second.counts, tuple(second.tally.example_list))
    merged = first.merged(second)
    assert merged.counts == whole.counts
    assert len(merged.counts.left_only_keys) == 3 and merged.counts.left_only > 3
    for name in ("first_counts", "cause_counts", "example_list", "within"):
        assert getattr(merged.tally, name) == getattr(whole.tally, name), name
    names = (["y"], ["y"])
    assert merged.tally.feature_stats.features(names) == whole.tally.feature_stats.features(names)
    assert (first.counts, first.tally.example_list, second.counts, second.tally.example_list) == before
    assert 0 < first.counts.paired < whole.counts.paired


def test_the_split_gives_each_process_about_half_of_the_rows_to_pair(sides, monkeypatch):
    left, right = (read_set(path) for path in sides[:2])
    stream = DiffStream(left, right, ToleranceSpec())
    monkeypatch.setattr(halves, "MIN_ROWS", 0)
    monkeypatch.setattr(halves, "MIN_PAIRS", 0)
    first, second = halves._split(stream)
    rows = {b["bucket"]: b["rows"] for b in left.buckets}
    mine = sum(rows.get(b, 0) for b in first)
    assert first | second == frozenset(range(16)) and not first & second and max(first) < min(second)
    assert abs(mine - RECORDS / 2) < RECORDS / 4


def test_one_core_or_a_small_diff_stays_in_one_process(sides, monkeypatch):
    left, right = (read_set(path) for path in sides[:2])
    stream = DiffStream(left, right, ToleranceSpec())
    monkeypatch.setattr(halves, "MIN_ROWS", 0)
    monkeypatch.setattr(halves, "MIN_PAIRS", 0)
    assert halves._split(stream) is not None
    monkeypatch.setattr(halves, "usable_cores", lambda: 1)
    assert halves._split(stream) is None
    monkeypatch.undo()
    monkeypatch.setattr(halves, "MIN_PAIRS", 0)
    monkeypatch.setattr(halves, "MIN_ROWS", 2 * RECORDS + 1)
    assert halves._split(stream) is None


def test_a_diff_expected_to_find_few_differing_pairs_stays_in_one_process(sides, monkeypatch):
    left, right = (read_set(path) for path in sides[:2])
    stream = DiffStream(left, right, ToleranceSpec())
    monkeypatch.setattr(halves, "MIN_ROWS", 0)
    differing = DiffStream(left, right, ToleranceSpec()).differing_pairs()
    assert 0 < differing < 2 * RECORDS
    monkeypatch.setattr(halves, "MIN_PAIRS", 4 * differing)  # the first bucket's share foretells about `differing`
    assert halves._split(stream) is None
    monkeypatch.setattr(halves, "MIN_PAIRS", differing // 4)
    assert halves._split(stream) is not None


def test_an_error_in_the_second_half_stops_the_diff_with_exit_2_naming_the_file(sides, tmp_path, monkeypatch,
                                                                               capsys):
    left, right, _config = sides
    monkeypatch.setattr(halves, "MIN_ROWS", 0)
    monkeypatch.setattr(halves, "MIN_PAIRS", 0)
    stream = DiffStream(read_set(left), read_set(right), ToleranceSpec())
    _first, second = halves._split(stream)
    damaged = [path for path in bucket_paths(right) if int(os.path.basename(path)[:2], 16) == max(second)][0]
    with open(damaged, "wb") as handle:
        handle.write(b"not parquet")
    assert main(["diff", left, right, "--out", str(tmp_path / "two")]) == 2
    assert os.path.basename(damaged) in capsys.readouterr().err


def test_a_stream_that_defers_the_whole_input_records_gives_the_report_of_one_that_decodes_them(sides, tmp_path,
                                                                                              monkeypatch):
    from parity import commands
    from parity.compare import pair_values

    left, right, config = sides
    monkeypatch.setattr(halves, "MIN_ROWS", 10**12)
    decoded = []
    value = pair_values.Undecoded.value
    monkeypatch.setattr(pair_values.Undecoded, "value", lambda self: decoded.append(self) or value(self))
    assert main(["diff", left, right, "--out", str(tmp_path / "deferred"), "--config", config]) == 1

    class Eager(DiffStream):
        def __init__(self, *args, **kwargs):
            kwargs["defer_input"] = False
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(commands, "DiffStream", Eager)
    assert main(["diff", left, right, "--out", str(tmp_path / "eager"), "--config", config]) == 1
    assert _reports(tmp_path / "deferred") == _reports(tmp_path / "eager")
    report = json.loads((tmp_path / "eager" / "report.json").read_text())
    input_records = next(c["records"] for c in report["causes"] if c["stage"] == "input")
    assert input_records > 3 * 10  # many more input-diverged records than the 3 examples the report keeps
    assert 0 < len(decoded) <= 2 * 3  # only the examples' whole records were decoded, both sides of each
