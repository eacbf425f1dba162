"""Issue 24, item 16: control bytes in captured keys, config names and a manifest's side name reach neither the
terminal nor report.md nor junit.xml raw (`parity.report.text.printable` shows them as escapes), and the
reproduce command for a key holding them is quoted so that it runs (`shell_quote`).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from parity.cli import main
from parity.report.text import printable, shell_quote, show_command
from robust_helpers import check, good_records, jsonl_lines, make_project, run_cli

ESC_TITLE = "\x1b]0;pwned\x07"  # an OSC sequence: retitles the terminal that prints it
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what must not be in a terminal line or a report


@pytest.mark.parametrize("text, shown", [
    ("plain zone", "plain zone"),
    (ESC_TITLE, "\\x1b]0;pwned\\x07"),
    ("a\x00b", "a\\x00b"),
    ("line\nbreak\ttab\r", "line\\nbreak\\ttab\\r"),
    ("\x7f\x85\x9b", "\\x7f\\x85\\x9b"),
    ("abc\u202edcba", "abc\\u202edcba"),
    ("C:\\dir é ✓", "C:\\dir é ✓"),
])
def test_printable_shows_every_control_character_as_an_escape_and_leaves_other_text_alone(text, shown):
    assert printable(text) == shown


@pytest.mark.parametrize("word", ["plain", "it's", "a b", "", "\x1b[31mred\x1b[0m", "new\nline", "nul\x00byte",
                                  "quote' and \\ backslash\x07", "bidi\u202eevil", "é\x1b✓"])
def test_shell_quote_gives_back_the_word_in_bash_and_shows_no_control_character(word):
    if "\x00" in word:  # no shell passes a NUL in an argument: the quoting must still be visible and valid
        assert shell_quote(word) == "$'nul\\x00byte'"
        return
    quoted = shell_quote(word)
    assert not RAW.search(quoted) and "\u202e" not in quoted
    done = subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, timeout=30)
    assert done.returncode == 0
    assert done.stdout.decode("utf-8") == word


def test_show_command_quotes_a_key_with_control_characters_so_that_it_runs():
    assert show_command("out dir", "k\x1b1") == "parity show 'out dir' $'k\\x1b1'"
    assert show_command("<dir>", 12) == "parity show <dir> 12"


def _project_with_hostile_keys(tmp_path, name: str = "robust"):
    records = good_records(4)
    for record in records:
        record["id"] = f"k{ESC_TITLE}{record['id']}\n"
    module = "def features(record):\n    return {'v': record['v']}\n" \
             "def production(record):\n    return {'v': record['v'] + 1}\n"
    return make_project(tmp_path, lines=jsonl_lines(records), module_code=module, config={"name": name},
                        schema={"id": "string", "t": "int64", "arr": "int64", "v": "float64", "zone": "string"},
                        per_side={"production": {"transform": {"python": "MODULE:production"}}})


def _fix_module(project) -> None:
    with open(project.config, encoding="utf-8") as handle:
        text = handle.read()
    with open(project.config, "w", encoding="utf-8") as handle:
        handle.write(text.replace("MODULE:", f"{project.module}:"))


def test_a_config_name_and_keys_with_esc_reach_report_md_and_junit_only_escaped(tmp_path, capsys):
    project = _project_with_hostile_keys(tmp_path, name=f"hourly{ESC_TITLE}")
    _fix_module(project)
    code, out, _ = check(project, capsys)
    assert code == 1
    assert not RAW.search(out), out
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    junit = (tmp_path / "out" / "junit.xml").read_text(encoding="utf-8")
    for text in (markdown, junit):
        assert not RAW.search(text.replace("\n", "").replace("\t", ""))
    assert "hourly\\\\x1b\\]0;pwned\\\\x07" in markdown  # \x1b, its backslash escaped for Markdown
    assert "\\x1b]0;pwned\\x07" in junit


def test_the_reproduce_command_in_report_md_for_a_key_with_control_characters_runs(tmp_path, capsys):
    project = _project_with_hostile_keys(tmp_path)
    _fix_module(project)
    assert check(project, capsys)[0] == 1
    markdown = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    command = re.search(r"reproduce: `(parity show .*)`$", markdown, re.M).group(1)
    assert re.search(r"\$'k\\x1b\]0;pwned\\x07\d\\x0a'$", command), command
    words = subprocess.run(["bash", "-c", command.replace("parity show ", "printf '%s\\0' ", 1)],
                           capture_output=True, timeout=30, cwd=tmp_path)
    directory, key = words.stdout.decode("utf-8").split("\0")[:2]
    assert directory == project.out
    assert key in {record["id"] for record in
                   (json.loads(line) for line in (tmp_path / "cap.jsonl").read_text().splitlines())}


def test_parity_diff_prints_a_manifest_side_name_with_esc_escaped(tmp_path, capsys):
    project = make_project(tmp_path / "p", lines=jsonl_lines(good_records(6)))
    assert check(project, capsys)[0] == 0
    capsys.readouterr()
    left = str(tmp_path / "left")
    shutil.copytree(os.path.join(project.out, "sides", "offline"), left)
    path = os.path.join(left, "manifest.json")
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    manifest["side"] = f"offline{ESC_TITLE}"
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)
    code, out, errors = run_cli(["diff", left, os.path.join(project.out, "sides", "production"), "--out",
                                 str(tmp_path / "out")], capsys)
    assert code == 0, errors
    assert not RAW.search(out), out
    assert "parity: parity (offline\\x1b]0;pwned\\x07 vs production)" in out
    assert not RAW.search((tmp_path / "out" / "report.md").read_text(encoding="utf-8").replace("\n", ""))


def test_an_error_message_naming_a_key_with_esc_shows_it_escaped(tmp_path, capsys):
    records = good_records(3)
    for record in records:
        record["id"] = f"k{ESC_TITLE}{record['id']}"
    module = "def features(record):\n    raise ValueError('no ' + record['id'])\n"
    project = make_project(tmp_path, lines=jsonl_lines(records), module_code=module,
                           schema={"id": "string", "t": "int64", "arr": "int64", "v": "float64", "zone": "string"})
    os.environ["PARITY_PROGRESS"] = "off"
    code = main(["check", project.config, "--out", project.out])
    err = capsys.readouterr().err
    assert code == 2
    assert not RAW.search(err.replace("\n", "")), err
    assert 'record "k\\u001b]0;pwned\\u00070": transform.python' in err  # the key as JSON
    assert "raised ValueError: no k\\x1b]0;pwned\\x070 (traceback: " in err


def test_parity_show_and_report_json_on_stdout_escape_the_controls_json_leaves_raw(tmp_path, capsys):
    records = good_records(3)
    for record in records:
        record["zone"] = "next\x85line \u202eevil"
    project = make_project(tmp_path, lines=jsonl_lines(records))
    assert check(project, capsys)[0] == 0
    code, out, _ = run_cli(["show", project.out, "1"], capsys)
    assert code == 0
    assert "\x85" not in out and "\u202e" not in out
    assert "next\\u0085line \\u202eevil" in out
    assert json.loads(out)["stages"][0]["left"]["value"]["zone"] == "next\x85line \u202eevil"
    code, out, _ = run_cli(["report", os.path.join(project.out, "report.json"), "--format", "json"], capsys)
    assert code == 0 and not RAW.search(out.replace("\n", ""))
    assert json.loads(out) == project.report()


def test_report_html_shows_control_characters_of_keys_and_names_escaped_and_keeps_line_breaks():
    from parity.report.html import render_html

    report = {"format": "parity.report/1", "name": "bad\x1b]0;pwned\x07name", "verdict": "diverged",
              "sides": {"left": "off\x00line", "right": "production"},
              "records": {"paired": 1, "matched": 0, "within_tolerance": 0, "diverged": 1, "left_only": 0,
                          "right_only": 0, "left": 1, "right": 1, "duplicate_keys": 0,
                          "quarantined": {"left": 0, "right": 0}},
              "stages": [{"name": "input", "diverged": 1, "first_diverged": 1}],
              "first_divergence": {"stage": "input", "records": 1, "cause": "input.content",
                                   "explanation": "two\nlines"},
              "causes": [{"stage": "input", "cause": "input.content", "records": 1, "explanation": "two\nlines"}],
              "examples": [{"key": "k\x1b[31m", "stage": "input", "cause": "input.content",
                            "left": {"v": "\x1b[2J"}, "right": {"v": 2}}]}
    page = render_html(report, out_dir="out")
    assert "\x1b" not in page and "\x00" not in page and "\x07" not in page
    assert "\\x1b" in page and "\\x00" in page
    assert "two\nlines" in page  # a value's own line break is whitespace on a page: kept
    assert "parity show out $&#x27;k\\x1b[31m&#x27;" in page  # the reproduce command runs in bash
