"""report.json -> JUnit XML, one test case per stage, so CI shows parity like any test suite (pure).

A stage fails when records first diverge there. Records on one side only are no stage's divergence: the test
case `unpaired` after the stages fails when there are more of them than `max_unpaired` allows (which makes the
verdict "diverged"). Duplicates and quarantined records are reported in the suite's `<system-out>` and fail
nothing.
The tree is built with ElementTree, so escaping is the parser's job; characters XML 1.0 cannot carry at all
(control characters a captured string may hold) are replaced by a visible `\\xNN` form.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, Mapping, Sequence

from parity.report.html import key_text, unpaired_excess
from parity.report.text import printable, show_command

__all__ = ["render_junit"]

# what XML 1.0 cannot carry, and what it can but a terminal or CI log viewer acts on (DEL, C1 controls, bidi
# overrides); tabs and newlines stay: a failure's detail is several lines
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
                      "\ufffe\uffff\ud800-\udfff]")


def _x(value: Any) -> str:
    """Text or an attribute value that XML 1.0 can carry."""
    return _NOT_XML.sub(lambda m: printable(m.group()) if printable(m.group()) != m.group()
                        else f"\\x{ord(m.group()):02x}", str(value))


def _element(parent: ET.Element | None, tag: str, attrs: Sequence[tuple[str, Any]] = (),
             text: str | None = None) -> ET.Element:
    """An element with attributes in the given order (ElementTree keeps insertion order)."""
    element = ET.Element(tag) if parent is None else ET.SubElement(parent, tag)
    for name, value in attrs:
        element.set(name, _x(value))
    if text is not None:
        element.text = _x(text)
    return element


def _stage_failure(stage: Mapping[str, Any], causes: Sequence[Mapping[str, Any]],
                   keys: Sequence[Any]) -> tuple[str, str, str]:
    """(message, type, detail) of a stage where records first diverge."""
    name = str(stage.get("name"))
    mine = [c for c in causes if c.get("stage") == name and not c.get("downstream")]  # downstream: counted earlier
    summary = ", ".join(f"{c.get('cause')} ({c.get('records')})" for c in mine) or f"{name}.unknown"
    message = f"{stage.get('first_diverged')} records first diverge at {name}: {summary}"
    lines = [message, ""]
    lines += [f"{c.get('cause')}: {c.get('records')} records. {c.get('explanation', '')}".rstrip() for c in mine]
    if keys:
        lines += ["", "example keys: " + ", ".join(key_text(k) for k in keys),
                  "show one: " + show_command("DIR", keys[0])]
    top = max(mine, key=lambda c: c.get("records") or 0)["cause"] if mine else f"{name}.unknown"
    return message, str(top), "\n".join(lines)


UNPAIRED_CASE = "unpaired"
_UNPAIRED_KEYS = 5  # example keys per side in the failure's detail


def _unpaired_case(suite: ET.Element, name: str, report: Mapping[str, Any]) -> bool:
    """The `unpaired` test case; True when it fails."""
    case = _element(suite, "testcase", [("classname", name), ("name", UNPAIRED_CASE)])
    excess = unpaired_excess(report)
    records = report.get("records", {})
    if excess is None:
        unpaired = (records.get("left_only") or 0) + (records.get("right_only") or 0)
        if unpaired:
            _element(case, "system-out", text=f"{unpaired} records on one side only, within max_unpaired "
                                               f"{report.get('max_unpaired', 0)}")
        return False
    sides = report.get("sides", {})
    message = (f"{excess.records} records are on one side only ({excess.left_only} only on the left, "
               f"{excess.right_only} only on the right), above max_unpaired {excess.allowed}")
    lines = [message, ""]
    for label, keys in ((f"left ({sides.get('left')})", excess.left_keys),
                        (f"right ({sides.get('right')})", excess.right_keys)):
        if keys:
            lines.append(f"example keys only on the {label}: " + ", ".join(key_text(k) for k in keys[:_UNPAIRED_KEYS]))
    _element(case, "failure", [("message", message), ("type", "unpaired")], "\n".join(lines))
    return True


def _records_text(report: Mapping[str, Any]) -> str:
    records = report.get("records", {})
    counts = ", ".join(f"{field} {records.get(field, 0)}" for field in (
        "left", "right", "paired", "matched", "within_tolerance", "diverged", "left_only", "right_only",
        "duplicate_keys"))
    quarantined, reasons = records.get("quarantined", {}), records.get("quarantine_reasons", {})
    parts = []
    for side in ("left", "right"):
        detail = ", ".join(f"{r}: {n}" for r, n in reasons.get(side, {}).items())
        parts.append(f"{side} {quarantined.get(side, 0)}" + (f" ({detail})" if detail else ""))
    first = report.get("first_divergence")
    first_text = (f"first divergence: {first.get('stage')}, {first.get('records')} records, {first.get('cause')}: "
                  f"{first.get('explanation', '')}" if first else "first divergence: none")
    sides = report.get("sides", {})
    impact = report.get("prediction_impact")
    lead = [f"prediction impact: {impact.get('headline')}"] if impact else []
    return "\n".join(lead + [f"verdict {report.get('verdict')}: {sides.get('left')} (left) vs {sides.get('right')} (right)",
                      f"records: {counts}", f"quarantined: {', '.join(parts)}", first_text])


def render_junit(report: Mapping[str, Any]) -> str:
    """The report as JUnit XML: a `<testsuite>` with one `<testcase>` per stage.

    A stage's test case fails (`<failure>`) when records first diverge there; the message names how many and
    the causes of that stage with their counts. Output is deterministic: attribute order is fixed.
    """
    name = f"parity.{report.get('name') or 'unnamed'}"
    stages = report.get("stages", [])
    causes = report.get("causes", [])
    failing = [s for s in stages if (s.get("first_diverged") or 0) > 0]
    unpaired_fails = unpaired_excess(report) is not None
    suite = _element(None, "testsuite", [("name", name), ("tests", len(stages) + 1),
                                         ("failures", len(failing) + unpaired_fails), ("errors", 0),
                                         ("skipped", 0)])
    properties = _element(suite, "properties")
    sides = report.get("sides", {})
    for prop, value in (("verdict", report.get("verdict")), ("left", sides.get("left")),
                        ("right", sides.get("right")), ("max_diverged", report.get("max_diverged")),
                        ("max_unpaired", report.get("max_unpaired")),
                        ("format", report.get("format")), ("encoding", report.get("encoding")),
                        ("redacted", str(bool(report.get("redacted"))).lower()),
                        ("prediction_impact", (report.get("prediction_impact") or {}).get("headline"))):
        if value is not None:
            _element(properties, "property", [("name", prop), ("value", value)])
    for stage in stages:
        stage_name = str(stage.get("name"))
        case = _element(suite, "testcase", [("classname", name), ("name", stage_name)])
        if stage in failing:
            keys = [e.get("key") for e in report.get("examples", []) if e.get("stage") == stage_name][:5]
            message, kind, detail = _stage_failure(stage, causes, keys)
            _element(case, "failure", [("message", message), ("type", kind)], detail)
        elif stage.get("diverged"):
            text = f"{stage.get('diverged')} records differ at {stage_name}, all of them first diverged at an " \
                   "earlier stage"
            impact = report.get("prediction_impact") if stage_name == "model" else None
            if impact:  # the model stage also carries records within tolerance upstream through
                text += f" or were within tolerance there; {impact.get('headline')}"
            _element(case, "system-out", text=text)
    _unpaired_case(suite, name, report)
    _element(suite, "system-out", text=_records_text(report))
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
