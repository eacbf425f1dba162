"""The JUnit XML: one test case per stage, failing where records first diverge, and one for the records on one
side only, failing beyond `max_unpaired`; parsable by any CI."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from sample_reports import IMG, SCRIPT, STAGES, clean_report, diverged_report

from parity.report import render_junit


def _suite(report: dict) -> ET.Element:
    return ET.fromstring(render_junit(report).encode("utf-8"))


def test_clean_report_is_a_suite_of_six_passing_stage_cases_and_the_unpaired_case() -> None:
    suite = _suite(clean_report())
    assert suite.tag == "testsuite"
    assert suite.attrib == {"name": "parity.taxi-hourly", "tests": "7", "failures": "0", "errors": "0",
                            "skipped": "0"}
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [*STAGES, "unpaired"]
    assert {c.get("classname") for c in cases} == {"parity.taxi-hourly"}
    assert suite.find(".//failure") is None


def test_stages_where_records_first_diverge_fail_with_their_causes_and_counts() -> None:
    report = diverged_report()
    suite = _suite(report)
    failing = [s["name"] for s in report["stages"] if s["first_diverged"] > 0]
    assert suite.get("failures") == str(len(failing)) == "2"
    failed = {c.get("name"): c.find("failure") for c in suite.findall("testcase") if c.find("failure") is not None}
    assert list(failed) == failing == ["window", "transform"]
    assert failed["window"].get("message") == (
        "7 records first diverge at window: window.timestamp_unit (5), window.boundary (2)")
    assert failed["window"].get("type") == "window.timestamp_unit"
    assert "window.boundary: 2 records." in failed["window"].text
    shard = next(c for c in suite.findall("testcase") if c.get("name") == "shard")
    assert shard.find("failure") is None and "earlier stage" in shard.findtext("system-out")


def test_suite_carries_the_verdict_property_and_record_counts_without_failing_on_them() -> None:
    suite = _suite(diverged_report())
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties["verdict"] == "diverged"
    assert (properties["left"], properties["right"]) == ("offline", "production")
    out = suite.findtext("system-out")
    assert "left_only 1" in out and "quarantined: left 0, right 2 (invalid json: 2)" in out
    assert len(suite.findall("testcase")) == 7
    unpaired = suite.find("testcase[@name='unpaired']")
    assert unpaired.find("failure") is None  # a report without max_unpaired (before v1.1) did not count them
    assert unpaired.findtext("system-out") == "1 records on one side only, within max_unpaired 0"


def test_the_unpaired_case_fails_beyond_max_unpaired_naming_example_keys() -> None:
    report = dict(diverged_report(), max_unpaired=0, unpaired_examples={"left_only": ["k-1"], "right_only": []})
    suite = _suite(report)
    assert suite.get("failures") == "3"
    failure = suite.find("testcase[@name='unpaired']/failure")
    assert failure.get("message") == ("1 records are on one side only (1 only on the left, 0 only on the right), "
                                      "above max_unpaired 0")
    assert failure.get("type") == "unpaired"
    assert "example keys only on the left (offline): k-1" in failure.text


def test_hostile_strings_round_trip_through_attributes_and_text() -> None:
    report = diverged_report()
    hostile = f"{IMG}\n{SCRIPT} & 'quotes' \x00"
    report["name"] = hostile
    report["causes"][1]["cause"] = f"window.{IMG}"
    report["causes"][1]["explanation"] = hostile
    suite = _suite(report)
    expected = f"parity.{IMG}\n{SCRIPT} & 'quotes' \\x00"  # NUL cannot be carried by XML 1.0
    assert suite.get("name") == expected
    assert {c.get("classname") for c in suite.findall("testcase")} == {expected}
    window = suite.find("testcase[@name='window']/failure")
    assert window.get("message").endswith(f"window.{IMG} (2)")
    assert f"{IMG}\n{SCRIPT} & 'quotes' \\x00" in window.text


def test_output_has_a_declaration_and_is_deterministic() -> None:
    text = render_junit(diverged_report())
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="parity.taxi-hourly" '
                           'tests="7" failures="2" errors="0" skipped="0">')
    assert text == render_junit(diverged_report())
