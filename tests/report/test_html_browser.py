"""The HTML report in a real browser: hostile captured strings are shown as text and never run.

A scenario built in a temporary folder captures trips whose string fields hold script, markup and
`javascript:` payloads; production's capture changes those fields, so they show up on both sides of the
differing examples. The report `parity.check` writes is loaded in headless Chromium (Debian's `chromium`,
installed by scripts/install_chromium.sh): its DOM must keep the page title, hold no script or image element,
and show every payload as text. A screenshot is saved as test-results/report.png.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

import parity

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "test-results")
PWNED = "pwned"
NAME = "browser-payloads </title><script>document.title='pwned'</script>"  # the config name reaches <title>
PAYLOADS = [
    "<script>document.title='pwned'</script>",
    "\"><img src=x onerror=\"document.title='pwned'\">",
    "</style><script>alert(1)</script>",
    "javascript:document.title='pwned'",
    "</title><script>document.title='pwned'</script><title>",
    "' onmouseover='document.title=\"pwned\"' x='",
]


class _Dom(HTMLParser):
    """Element names, the <title> text and all text nodes of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.title: list[str] = []
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes.extend(attrs)
        self._in_title = tag == "title" and not self.title
        if self._in_title:
            self.title.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_title:
            self.title[-1] += data


def _parse(page: str) -> _Dom:
    dom = _Dom()
    dom.feed(page)
    dom.close()
    return dom


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium is not installed: run scripts/install_chromium.sh (as root) and rerun", pytrace=False)
    return path


def run_chromium(page: str, profile: str, *extra: str) -> subprocess.CompletedProcess:
    command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", *extra, f"file://{page}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"chromium failed ({done.returncode}): {done.stderr[-2000:]}"
    return done


def _hostile_scenario(folder) -> str:
    records, edited = [], []
    for i in range(12):
        payload = PAYLOADS[i % len(PAYLOADS)]
        record = {"trip_id": 5001 + i, "event_time": 1710000000 + 60 * i, "zone": payload,
                  "note": f"rider note {i}: {payload}", "link": PAYLOADS[3] if i % 2 else f"https://x.test/{i}"}
        records.append(record)
        edited.append({**record, "note": f"{payload} (edited by production)",
                       "link": "javascript:alert(document.title='pwned')"})
    for name, rows in (("offline.jsonl", records), ("production.jsonl", edited)):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = {
        "version": 1, "name": NAME,
        "capture": {"path": str(folder / "offline.jsonl"), "format": "jsonl", "key": ["trip_id"],
                    "schema": {"trip_id": "int64", "event_time": "int64", "zone": "string", "note": "string",
                               "link": "string"}},
        "sides": {"offline": {}, "production": {"capture": {"path": str(folder / "production.jsonl")}}},
    }
    path = folder / "parity.yaml"
    path.write_text(json.dumps(config, indent=1), encoding="utf-8")  # JSON is YAML
    return str(path)


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory) -> tuple[str, dict]:
    folder = tmp_path_factory.mktemp("hostile")
    report = parity.check(_hostile_scenario(folder), out_dir=str(folder / "out"))
    return str(folder / "out" / "report.html"), report


def test_the_payloads_reach_the_examples_on_both_sides(hostile_report) -> None:
    _, report = hostile_report
    assert report["first_divergence"]["stage"] == "input"
    shown = json.dumps(report["examples"], ensure_ascii=False)
    for payload in PAYLOADS:
        assert json.dumps(payload)[1:-1] in shown, payload


def test_chromium_runs_no_script_of_the_report_and_shows_the_payloads_as_text(hostile_report, tmp_path) -> None:
    page, _ = hostile_report
    dom_text = run_chromium(page, str(tmp_path / "profile"), "--dump-dom").stdout
    dom = _parse(dom_text)
    assert dom.title == [f"parity: diverged {NAME}"], dom.title  # as rendered: no script set it to 'pwned'
    assert "script" not in dom.tags and "img" not in dom.tags and "iframe" not in dom.tags
    assert not [name for name, _ in dom.attributes if name.startswith("on")]
    assert not [v for name, v in dom.attributes if name == "href" and not (v or "").startswith("#")]
    text = "".join(dom.text)
    for payload in PAYLOADS:  # example values are shown as JSON: quotes come backslash-escaped
        assert json.dumps(payload, ensure_ascii=False)[1:-1] in text, f"not shown as text: {payload}"
    assert "(edited by production)" in text


def test_chromium_would_notice_a_script_that_ran(tmp_path) -> None:
    """The control: an unescaped payload on a page without a CSP does change the title, so the check can fail."""
    page = tmp_path / "unsafe.html"
    page.write_text(f"<!DOCTYPE html><html><head><title>safe</title></head><body>{PAYLOADS[0]}</body></html>",
                    encoding="utf-8")
    dom = _parse(run_chromium(str(page), str(tmp_path / "profile"), "--dump-dom").stdout)
    assert dom.title == [PWNED]


def test_chromium_screenshot_of_the_report_is_saved_under_test_results(hostile_report, tmp_path) -> None:
    page, _ = hostile_report
    os.makedirs(RESULTS, exist_ok=True)
    shot = os.path.join(RESULTS, "report.png")
    if os.path.exists(shot):
        os.remove(shot)
    run_chromium(page, str(tmp_path / "profile"), f"--screenshot={shot}", "--window-size=1280,2400",
                 "--hide-scrollbars", "--run-all-compositor-stages-before-draw")  # paint every tile first
    with open(shot, "rb") as handle:
        header = handle.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")) == (1280, 2400)


def _notebook_page(folder, cell_output: str) -> str:
    """A page that holds a cell's HTML output as Jupyter does: inserted into its own DOM, under no CSP."""
    page = folder / "notebook.html"
    page.write_text(f"<!DOCTYPE html><html><head><title>notebook</title></head><body><div class=\"output\">"
                    f"{cell_output}</div></body></html>", encoding="utf-8")
    return str(page)


def test_the_notebook_view_of_a_hostile_report_runs_no_script_in_the_notebook(hostile_report, tmp_path) -> None:
    _, report = hostile_report
    page = _notebook_page(tmp_path, report._repr_html_())
    dom = _parse(run_chromium(page, str(tmp_path / "profile"), "--dump-dom").stdout)
    assert dom.title == ["notebook"]
    assert dom.tags.count("iframe") == 1 and "script" not in dom.tags and "img" not in dom.tags
    assert not [name for name, _ in dom.attributes if name.startswith("on")]


def test_chromium_would_notice_a_frame_whose_script_reached_the_notebook(tmp_path) -> None:
    """The control: a frame without the sandbox runs its script, which retitles the page around it."""
    frame = '<iframe srcdoc="&lt;script&gt;parent.document.title=&#x27;pwned&#x27;&lt;/script&gt;"></iframe>'
    dom = _parse(run_chromium(_notebook_page(tmp_path, frame), str(tmp_path / "profile"), "--dump-dom").stdout)
    assert dom.title == [PWNED]
