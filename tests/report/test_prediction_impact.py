"""The model stage in the reports (contract section 8): only where a model is configured, and leading the summary,
Markdown, HTML and JUnit with how many decisions changed."""
from __future__ import annotations

import json
import os

from parity.report import render_html, render_junit, render_markdown
from parity.report.result import Report

GOLDEN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "fixtures", "golden")


def _golden(name: str) -> dict:
    with open(os.path.join(GOLDEN, name, "report.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_a_report_without_a_model_has_no_model_stage_and_no_prediction_impact():
    for name in ("clean_same_semantics", "two_stage"):
        report = _golden(name)
        assert "prediction_impact" not in report
        assert "model" not in [s["name"] for s in report["stages"]]
        assert "prediction impact" not in render_markdown(report).lower()
        assert 'id="impact"' not in render_html(report)


def test_the_summary_and_every_format_lead_with_how_many_decisions_changed():
    report = _golden("model_transform_km_flips_decisions")
    headline = report["prediction_impact"]["headline"]
    assert headline.startswith("240 records diverged at transform; ") and headline.endswith(" decisions changed")
    assert Report(report).summary().splitlines()[1] == f"  prediction impact: {headline}"
    assert render_markdown(report).splitlines()[2] == f"**prediction impact**: {headline}"
    page = render_html(report)
    assert page.index(headline) < page.index("paired records diverged")
    assert f'<property name="prediction_impact" value="{headline}" />' in render_junit(report)


def test_the_model_stage_is_last_and_its_downstream_cause_is_not_a_first_divergence():
    report = _golden("model_transform_km_flips_decisions")
    assert report["stages"][-1]["name"] == "model" and report["stages"][-1]["first_diverged"] == 0
    downstream = [c for c in report["causes"] if c.get("downstream")]
    assert [c["cause"] for c in downstream] == ["model.prediction"]
    first = sum(c["records"] for c in report["causes"] if not c.get("downstream"))
    assert first == report["records"]["diverged"]
    junit = render_junit(report)
    assert "model.prediction" not in junit.split('name="transform"')[1].split("</testcase>")[0]
