"""Renderers from the report dict (the parsed report.json) to each output format; all pure."""
from __future__ import annotations

import json
from typing import Any, Callable, Mapping

from parity.report.html import render_html
from parity.report.junit import render_junit
from parity.report.markdown import render_markdown

__all__ = ["RENDERERS", "render_html", "render_json", "render_junit", "render_markdown"]


def render_json(report: Mapping[str, Any]) -> str:
    """report.json text: keys in the dict's own order (the report builder orders them per the contract)."""
    return json.dumps(report, indent=2, ensure_ascii=False) + "\n"


RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "md": render_markdown,
    "html": render_html,
    "junit": render_junit,
    "json": render_json,
}
