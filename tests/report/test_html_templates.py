"""The HTML report is rendered from Jinja2 templates with autoescaping on, and the templates ship with parity."""
from __future__ import annotations

import os
import subprocess
import sys

from sample_reports import SCRIPT, diverged_report

from parity.report import html as html_report
from parity.report import render_html

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATES = ("body.html.j2", "macros.html.j2", "page.html.j2")


def test_templates_escape_every_printed_value_by_default() -> None:
    template = html_report._TEMPLATES.from_string("<p title=\"{{ value }}\">{{ value }}</p>")
    page = template.render(value=f"{SCRIPT}\"'&")
    assert page == ("<p title=\"&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&amp;\">"
                    "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&amp;</p>")


def test_the_renderer_module_builds_data_and_leaves_every_tag_to_the_templates() -> None:
    with open(html_report.__file__, encoding="utf-8") as handle:
        source = handle.read()
    for tag in ("<td", "<tr", "<table", "<section", "<svg", "<rect", "<p>", "<code>", "<header", "<style"):
        assert tag not in source, tag


def test_joining_template_lines_never_touches_whitespace_inside_values() -> None:
    report = diverged_report()
    report["causes"][0]["explanation"] = "first line\n    indented second line"
    report["examples"][3]["left"] = {"zone_id": "a\n  b"}
    page = render_html(report)
    assert "<td>first line\n    indented second line</td>" in page
    assert '<span class="value">&quot;a\\n  b&quot;</span>' in page  # JSON text of the value


def test_the_templates_are_installed_with_the_package_and_render_from_there(tmp_path) -> None:
    build = tmp_path / "lib"
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(build)], cwd=ROOT,
                   check=True, capture_output=True)
    installed = sorted(os.listdir(build / "parity" / "report" / "templates"))
    assert installed == sorted(TEMPLATES)
    code = ("import sys, parity.report.html as h; assert h.__file__.startswith(sys.argv[1]), h.__file__; "
            "print(h.render_html({'verdict': 'parity', 'sides': {}, 'records': {}, 'stages': []})[:15])")
    result = subprocess.run([sys.executable, "-c", code, str(build)], cwd=tmp_path, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(build)})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "<!DOCTYPE html>\n"
    with open(os.path.join(ROOT, "MANIFEST.in"), encoding="utf-8") as handle:  # and in the sdist
        assert "recursive-include parity/report/templates *.j2" in handle.read().splitlines()
