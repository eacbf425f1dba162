"""Event times and window bounds appear as ISO-8601 UTC beside the raw microseconds in report.md, report.html
and `parity show`; report.json keeps the raw integers."""
from __future__ import annotations

import json
import os

from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP
from sample_reports import diverged_report

import parity
from parity.cli import main
from parity.report import render_html, render_markdown
from parity.report.times import iso_utc, stage_field_utc, window_utc, window_value_utc, windows_utc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MS_VS_S = os.path.join(ROOT, "fixtures", "scenarios", "window_unit_ms_vs_s", "parity.yaml")


def test_microseconds_become_iso_utc_and_times_outside_the_calendar_become_none() -> None:
    assert iso_utc(0) == "1970-01-01T00:00:00Z"
    assert iso_utc(1709972952000000) == "2024-03-09T08:29:12Z"
    assert iso_utc(1709972952000123) == "2024-03-09T08:29:12.000123Z"
    assert iso_utc(-1) == "1969-12-31T23:59:59.999999Z"
    assert iso_utc(MIN_TIMESTAMP.micros) is None and iso_utc(MAX_TIMESTAMP.micros) is None
    assert iso_utc(253402300800000000) is None  # year 10000
    assert iso_utc(1.5) is None and iso_utc("1") is None and iso_utc(True) is None and iso_utc(None) is None


def test_windows_become_iso_intervals_and_the_global_window_stays_as_it_is() -> None:
    assert window_utc([0, 3600000000]) == "1970-01-01T00:00:00Z/1970-01-01T01:00:00Z"
    assert window_utc(["global"]) is None
    assert windows_utc([[0, 1000000], [1000000, 2000000]]) == \
        "1970-01-01T00:00:00Z/1970-01-01T00:00:01Z, 1970-01-01T00:00:01Z/1970-01-01T00:00:02Z"
    assert windows_utc([["global"]]) is None
    assert window_value_utc({"timestamp_us": 0, "windows": [["global"]]}) == {"timestamp_us": "1970-01-01T00:00:00Z"}
    assert window_value_utc({"fingerprint": "00ff"}) is None


def test_only_the_window_stage_has_times() -> None:
    assert stage_field_utc("window", "timestamp_us", 0) == "1970-01-01T00:00:00Z"
    assert stage_field_utc("window", "windows", [[0, 1]]) == "1970-01-01T00:00:00Z/1970-01-01T00:00:00.000001Z"
    assert stage_field_utc("window", "late", True) is None
    assert stage_field_utc("shard", "timestamp_us", 0) is None
    assert stage_field_utc("input", "event_time_us", 0) is None


def test_markdown_and_html_examples_show_utc_beside_the_microseconds_of_both_sides() -> None:
    report = diverged_report()  # left read seconds, right read them as milliseconds
    markdown = render_markdown(report)
    assert ("| `event_time_us` | `1700000000000000` (2023-11-14T22:13:20Z) | `1700000000000` "
            "(1970-01-20T16:13:20Z) |") in markdown
    assert "`[[1699999200000000, 1700002800000000]]` (2023-11-14T22:00:00Z/2023-11-14T23:00:00Z)" in markdown
    page = render_html(report)
    assert ('<span class="value">1700000000000000</span> <span class="muted">2023-11-14T22:13:20Z</span>'
            in page)
    assert '<span class="muted">2023-11-14T22:00:00Z/2023-11-14T23:00:00Z</span>' in page
    transform = page[page.index("cause <code>transform.mapping"):]
    assert "<span class=\"muted\">19" not in transform and "<span class=\"muted\">20" not in transform


def test_a_redacted_report_shows_no_times() -> None:
    report = diverged_report()
    for example in report["examples"]:
        example["left"], example["right"] = {"fingerprint": "0a"}, {"fingerprint": "0b"}
    report["redacted"] = True
    assert "Z</span>" not in render_html(report) and "Z)" not in render_markdown(report)


def test_report_json_keeps_raw_microseconds_and_parity_show_adds_utc(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    report = parity.check(MS_VS_S, out_dir="out")
    example = report["examples"][0]
    assert isinstance(example["left"]["timestamp_us"], int) and isinstance(example["right"]["timestamp_us"], int)
    assert "Z/" not in (tmp_path / "out" / "report.json").read_text(encoding="utf-8")
    capsys.readouterr()
    assert main(["show", "out", json.dumps(example["key"])]) == 1
    window = json.loads(capsys.readouterr().out)["stages"][1]
    assert window["left"]["value"]["timestamp_us"] == example["left"]["timestamp_us"]
    assert window["left"]["utc"]["timestamp_us"] == iso_utc(example["left"]["timestamp_us"])
    assert window["left"]["utc"]["timestamp_us"].startswith("2024-03-")
    assert window["right"]["utc"]["timestamp_us"].startswith("1970-01-20T")  # ms read as µs
    assert window["right"]["utc"]["windows"] == [window_utc(w) for w in window["right"]["value"]["windows"]]
