"""`parity.check` returns a `Report`: still report.json's dict, plus a notebook view and plain-Python accessors."""
from __future__ import annotations

import copy
import json
import os
import pickle
from html.parser import HTMLParser

import pytest
from sample_reports import HOSTILE, hostile_report

import parity
from parity.report import render_html, render_json
from parity.report.result import Report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MS_VS_S = os.path.join(ROOT, "fixtures", "scenarios", "window_unit_ms_vs_s", "parity.yaml")


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _elements(markup: str) -> _Elements:
    parser = _Elements()
    parser.feed(markup)
    parser.close()
    return parser


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[Report, str]:
    folder = tmp_path_factory.mktemp("checked")
    cwd = os.getcwd()
    os.chdir(folder)  # `--out out` as a user gives it, relative
    try:
        return parity.check(MS_VS_S, out_dir="out"), str(folder / "out")
    finally:
        os.chdir(cwd)


def test_check_returns_a_report_that_is_still_the_report_json_dict(checked) -> None:
    report, out = checked
    assert isinstance(report, Report) and isinstance(report, dict)
    with open(os.path.join(out, "report.json"), encoding="utf-8") as handle:
        text = handle.read()
    assert report == json.loads(text) and render_json(report) == text
    assert json.dumps(report, indent=2, ensure_ascii=False) + "\n" == text
    assert report["verdict"] == report.verdict == "diverged"
    assert copy.deepcopy(report) == report and pickle.loads(pickle.dumps(report)) == report
    assert dict(report) == report and type(dict(report)) is dict


def test_summary_causes_and_examples_are_plain_python(checked) -> None:
    report, _ = checked
    assert report.summary().splitlines() == [
        "parity: diverged (offline vs production)",
        "  records: 240 paired, 0 matched, 0 within tolerance, 240 diverged, 0 left only, 0 right only, "
        "quarantined 0/0",
        f"  first divergence: stage window, 240 records, cause window.timestamp_unit: "
        f"{report['first_divergence']['explanation']}",
        "  report: out/report.html (also report.json, report.md, junit.xml)"]
    assert report.causes == report["causes"] and [c["cause"] for c in report.causes] == ["window.timestamp_unit"]
    assert all(type(c) is dict for c in report.causes)
    assert report.examples == report["examples"] and len(report.examples) == 10
    assert {e["stage"] for e in report.examples} == {"window"}
    assert "report:" not in Report(dict(report)).summary()  # a folder is only named when it is known


def test_in_a_notebook_the_report_shows_as_its_html_page_in_a_sandboxed_frame(checked) -> None:
    report, out = checked
    shown = report._repr_html_()
    elements = _elements(shown).elements
    assert [tag for tag, _ in elements] == ["iframe"]
    attributes = elements[0][1]
    assert attributes["sandbox"] == ""  # no scripts, no same-origin access to the notebook
    with open(os.path.join(out, "report.html"), encoding="utf-8") as handle:
        assert attributes["srcdoc"] == handle.read() == report.to_html()  # the very bytes of report.html


def test_hostile_strings_cannot_leave_the_notebook_frame() -> None:
    report = Report(hostile_report(), out_dir="out")
    shown = report._repr_html_()
    parsed = _elements(shown)
    assert [tag for tag, _ in parsed.elements] == ["iframe"] and not "".join(parsed.text).strip()
    assert parsed.elements[0][1]["srcdoc"] == render_html(hostile_report(), out_dir="out")
    assert HOSTILE not in shown and "<script" not in shown


def test_the_report_type_is_part_of_the_public_api() -> None:
    assert parity.Report is Report and "Report" in parity.__all__


def test_the_summary_says_how_many_records_only_analysis_noise_made_differ_and_per_feature() -> None:
    from test_markdown import _noise_report

    summary = Report(_noise_report()).summary().splitlines()
    assert summary[2] == ("  analysis noise: 7 records within tolerance only through it (analyzer outputs that differ "
                          "by float rounding; per feature: fare_xf 7); not skew")
    from sample_reports import clean_report

    assert not any("analysis noise" in line for line in Report(clean_report()).summary().splitlines())
