"""junit.xml validates against the JUnit schema CI systems read (fixtures/junit/junit.xsd)."""
from __future__ import annotations

import os

import xmlschema

from parity.report.junit import render_junit
from tests.report.sample_reports import clean_report, diverged_report, hostile_report

SCHEMA = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "junit", "junit.xsd")


def test_every_junit_rendering_is_valid_against_the_junit_schema():
    schema = xmlschema.XMLSchema(SCHEMA)
    for report in (clean_report(), diverged_report(), hostile_report()):
        schema.validate(render_junit(report).encode("utf-8"))


def test_the_schema_rejects_a_testcase_without_a_name():
    schema = xmlschema.XMLSchema(SCHEMA)
    assert not schema.is_valid('<testsuite name="x" tests="1"><testcase classname="c"/></testsuite>')
