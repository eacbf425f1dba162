"""Naive ISO 8601 event times are read in the side's time zone (issue 24, item 2).

CONTRACT section 3: `unit: iso8601` parses strings, and naive ones are read in `tz` (an IANA zone name, default
UTC). A side's `capture.tz` is that zone for its naive event and arrival times; `timestamp.tz` overrides it for
one side. Zone names are checked when the config loads. Before, `capture.tz` was accepted (even `Mars/Olympus`)
and ignored: naive times were read as UTC whatever it said.
"""
from __future__ import annotations

import datetime as dt

import pytest

from parity.config import load_config
from parity.stages.timestamp import EventTime
from tests.stages.oracles import micros
from robust_helpers import check, make_project

CHICAGO = "America/Chicago"  # UTC-6 in winter (CST), UTC-5 in summer (CDT); DST starts 2026-03-08, ends 2026-11-01
# naive wall-clock times in Chicago -> the instant they denote, in UTC
WALL_TIMES = {
    "2026-01-15T12:00:00": "2026-01-15T18:00:00",  # winter: CST
    "2026-07-15T12:00:00": "2026-07-15T17:00:00",  # summer: CDT
    "2026-03-08T01:59:59": "2026-03-08T07:59:59",  # the last second before the spring-forward gap
    "2026-03-08T03:00:00": "2026-03-08T08:00:00",  # the first second after it
    "2026-03-08T02:30:00": "2026-03-08T08:30:00",  # inside the gap: read with the offset before it (fold=0)
    "2026-11-01T01:30:00": "2026-11-01T06:30:00",  # happens twice: the first time (CDT, fold=0)
    "2026-11-01T02:30:00": "2026-11-01T08:30:00",  # after the fall back: CST
}
SCHEMA = {"id": "int64", "when": "string", "v": "float64", "zone": "string"}


def _records() -> list[dict]:
    return [{"id": i, "when": wall, "v": 1.5 * i, "zone": "abc"[i % 3]} for i, wall in enumerate(WALL_TIMES)]


def _micros(utc_text: str) -> int:
    instant = dt.datetime.fromisoformat(utc_text).replace(tzinfo=dt.timezone.utc)
    return (instant - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1)


def _project(folder, **kwargs):
    import json

    lines = [json.dumps(r).encode() for r in _records()]
    return make_project(folder, lines=lines, schema=SCHEMA, **kwargs)


def test_capture_tz_reads_naive_iso_times_in_that_zone_across_both_dst_changes(tmp_path):
    project = _project(tmp_path, capture_spec={"tz": CHICAGO},
                       side={"timestamp": {"field": "when", "unit": "iso8601"}})
    side = load_config(project.config, check_refs=False).side("offline")
    assert side.timestamp.tz == CHICAGO
    event_time = EventTime(side.timestamp)
    got = {wall: micros(event_time, {"when": wall}) for wall in WALL_TIMES}
    assert got == {wall: _micros(utc) for wall, utc in WALL_TIMES.items()}
    # a time with its own offset is not naive: the zone does not apply
    assert micros(event_time, {"when": "2026-07-15T12:00:00+00:00"}) == _micros("2026-07-15T12:00:00")


def test_timestamp_tz_overrides_the_capture_tz_for_its_side(tmp_path):
    project = _project(tmp_path, capture_spec={"tz": CHICAGO},
                       side={"timestamp": {"field": "when", "unit": "iso8601"}},
                       per_side={"production": {"timestamp": {"field": "when", "unit": "iso8601", "tz": "UTC"}}})
    config = load_config(project.config, check_refs=False)
    assert (config.side("offline").timestamp.tz, config.side("production").timestamp.tz) == (CHICAGO, "UTC")


def test_a_side_whose_capture_says_chicago_agrees_with_a_side_whose_timestamp_says_chicago(tmp_path, capsys):
    window = {"type": "fixed", "size": "1h"}
    project = _project(tmp_path, side={"timestamp": {"field": "when", "unit": "iso8601"}, "window": window},
                       per_side={"offline": {"capture": {"tz": CHICAGO}},
                                 "production": {"timestamp": {"field": "when", "unit": "iso8601", "tz": CHICAGO}}})
    code, _, errors = check(project, capsys)
    assert (code, errors) == (0, "")
    assert project.report()["records"]["matched"] == len(WALL_TIMES)


def test_naive_times_read_in_chicago_and_in_utc_diverge_at_window_by_the_dst_offsets(tmp_path, capsys):
    window = {"type": "fixed", "size": "1h"}
    project = _project(tmp_path, side={"timestamp": {"field": "when", "unit": "iso8601"}, "window": window},
                       per_side={"offline": {"capture": {"tz": CHICAGO}}}, config={"report": {"examples": 20}})
    code, _, errors = check(project, capsys)
    report = project.report()
    assert (code, errors) == (1, "")
    assert report["first_divergence"]["stage"] == "window"
    assert report["first_divergence"]["cause"] == "window.timestamp_shift"
    shifts = {(e["left"]["timestamp_us"] - e["right"]["timestamp_us"]) // 3_600_000_000 for e in report["examples"]}
    assert shifts == {5, 6}  # summer and winter


def test_arrival_times_of_the_lateness_replay_are_read_in_the_same_zone(tmp_path, capsys):
    import json

    records = [dict(r, arr=r["when"]) for r in _records()]
    window = {"type": "fixed", "size": "1h", "lateness": {"arrival": "arr"}}
    project = make_project(tmp_path, lines=[json.dumps(r).encode() for r in records],
                           schema=dict(SCHEMA, arr="string"), capture_spec={"tz": CHICAGO},
                           side={"timestamp": {"field": "when", "unit": "iso8601"}, "window": window},
                           per_side={"production": {"timestamp": {"field": "when", "unit": "iso8601",
                                                                  "tz": CHICAGO},
                                                    "capture": {"tz": "UTC"}}})
    code, _, errors = check(project, capsys)
    assert (code, errors) == (0, "")  # arrival read in UTC on one side would drop records as late there
    assert project.report()["records"]["matched"] == len(WALL_TIMES)


@pytest.mark.parametrize("where", ["capture", "side-capture", "timestamp"])
@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../../etc/passwd", "UTC+3"])
def test_an_unknown_time_zone_is_refused_naming_the_field(tmp_path, capsys, where, zone):
    timestamp = {"field": "when", "unit": "iso8601"}
    if where == "timestamp":
        kwargs = {"side": {"timestamp": dict(timestamp, tz=zone)}}
        field = "sides.offline.timestamp.tz"
    elif where == "side-capture":
        kwargs = {"side": {"timestamp": timestamp}, "per_side": {"offline": {"capture": {"tz": zone}}}}
        field = "sides.offline.capture.tz"
    else:
        kwargs = {"side": {"timestamp": timestamp}, "capture_spec": {"tz": zone}}
        field = "capture.tz"
    project = _project(tmp_path, **kwargs)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: {project.config}: {field}: ")
    assert "unknown time zone" in errors or "expected a non-empty string" in errors
