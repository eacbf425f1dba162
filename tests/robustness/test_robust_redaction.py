"""Issue 24, item 15: with `report: {redact: true}` no raw captured value reaches the terminal or a text file in
the out folder: quarantine.jsonl keeps locations and reasons with the values taken out (no preview), error
messages name records by key fingerprint and withhold what user code said, and the tracebacks and libraries'
log stay out of the out folder.
"""
from __future__ import annotations

import json
import os

import pytest

from parity.sets.redaction import key_fingerprint, redact_message, redact_reason
from robust_helpers import REPO, check, file_bytes, good_records, jsonl_lines, make_project

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own, TFT ones among them.
pytestmark = pytest.mark.slow

SECRETS = ("4111111111111111", "hunter2", "notanumber", "yesterday")
TEXT_FILES = (".json", ".jsonl", ".md", ".html", ".xml", ".log", ".txt")


def _records() -> list[bytes]:
    records = good_records(200)
    for record in records:
        record["card"] = "4111111111111111"
    lines = jsonl_lines(records)
    lines.append(json.dumps({"id": "notanumber", "t": 1, "arr": 1, "v": 1.0, "zone": "password=hunter2"}).encode())
    lines.append(b'{"id": 900, "t": 1, "v": password=hunter2, "card": "4111111111111111"}')
    lines.append(json.dumps({"id": 901, "t": "yesterday", "arr": 1, "v": 1.0, "zone": "hunter2"}).encode())
    return lines


def _text_files(folder: str) -> dict[str, str]:
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            if name.endswith(TEXT_FILES):
                with open(os.path.join(root, name), encoding="utf-8", errors="replace") as handle:
                    found[os.path.relpath(os.path.join(root, name), folder)] = handle.read()
    return found


def _project(tmp_path, redact: bool, module_code: str | None = None):
    kwargs = {"module_code": module_code} if module_code else {}
    return make_project(tmp_path, lines=_records(), config={"report": {"redact": redact}},
                        side={"timestamp": {"field": "t", "unit": "s"}}, **kwargs)


def test_redacted_quarantine_entries_keep_location_and_reason_without_values_or_previews(tmp_path, capsys):
    project = _project(tmp_path, redact=True)
    code, out, errors = check(project, capsys)
    assert code == 0, errors
    entries = project.quarantine()
    assert [(e["location"], e["reason"], e["preview"]) for e in entries] == [
        ("cap.jsonl:201", "field 'id': expected int64, got <redacted>", ""),
        ("cap.jsonl:202", "invalid JSON: Expecting value at column 26", ""),
        ("cap.jsonl:203", "field 't': expected int64, got <redacted>", "")]
    files = _text_files(project.out)
    assert "sides/offline/quarantine.jsonl" in files and "report.json" in files
    for name, text in files.items():
        for secret in SECRETS:
            assert secret not in text, (name, secret)
    for secret in SECRETS:
        assert secret not in out + errors


def test_without_redaction_quarantine_entries_keep_previews_and_values(tmp_path, capsys):
    """*guard*: the unredacted mode still shows what was read, for the engineer fixing the capture."""
    project = _project(tmp_path, redact=False)
    assert check(project, capsys)[0] == 0
    entries = project.quarantine()
    assert entries[0]["reason"] == "field 'id': expected int64, got 'notanumber'"
    assert "hunter2" in entries[1]["preview"]


def test_a_redacted_run_whose_user_code_fails_names_the_record_by_key_fingerprint_only(tmp_path, capsys):
    module = "def features(record):\n    if record['id'] == 7:\n" \
             "        raise ValueError('bad card ' + record['card'] + ' for password=hunter2')\n" \
             "    return {'v': record['v']}\n"
    project = _project(tmp_path, redact=True, module_code=module)
    os.environ["PARITY_PROGRESS"] = "off"
    from parity.cli import main

    code = main(["check", project.config, "--out", project.out])
    captured = capsys.readouterr()
    assert code == 2
    assert f"record key_fp {key_fingerprint(7)}: transform.python '{project.module}:features' raised ValueError " \
           f"(its message is withheld under report.redact)" in captured.err
    for secret in SECRETS:
        assert secret not in captured.err + captured.out
    for name, text in _text_files(project.out).items():
        for secret in SECRETS:
            assert secret not in text, (name, secret)
    assert not os.path.exists(os.path.join(project.out, "parity-error.log"))
    assert not os.path.exists(os.path.join(project.out, "libraries.log"))


@pytest.mark.parametrize("reason, redacted", [
    ("field 'v': expected float32, got 1e+300 (out of float32 range)",
     "field 'v': expected float32, got <redacted> (out of float32 range)"),
    ("field 'w': the number 1e400 is out of the float64 range (magnitude above 1.8e308)",
     "field 'w': the number <redacted> is out of the float64 range (magnitude above 1.8e308)"),
    ("field 'zone': expected string, got '\\ud800' (a lone surrogate is not valid Unicode)",
     "field 'zone': expected string, got <redacted> (a lone surrogate is not valid Unicode)"),
    ("field 'tags': expected list<string>, got [1, 2]", "field 'tags': expected list<string>, got <redacted>"),
    ("expected 5 columns, got 3", "expected 5 columns, got 3"),
    ("expected a JSON object, got an array", "expected a JSON object, got an array"),
])
def test_redact_reason_takes_out_the_values_a_reason_shows_and_keeps_the_rest(reason, redacted):
    assert redact_reason(reason) == redacted


def test_redact_message_names_records_by_fingerprint_and_withholds_what_user_code_said():
    message = "record [1, \"a b\"]: transform.python 'm:f' raised KeyError: 'hunter2'; see the docs"
    assert redact_message(message) == (f"record key_fp {key_fingerprint([1, 'a b'])}: transform.python 'm:f' "
                                       f"raised KeyError (its message is withheld under report.redact); see the docs")


def test_a_redacted_check_leaves_no_raw_value_in_any_file_of_the_out_folder_binary_ones_included(tmp_path, capsys):
    project = _project(tmp_path, redact=True)
    code, _, errors = check(project, capsys)
    assert code == 0, errors
    files = file_bytes(project.out)
    assert any(name.startswith("sides/offline/fingerprints") for name in files)
    for name, data in files.items():
        for secret in SECRETS:
            assert secret.encode() not in data, (name, secret)
    from parity.errors import FingerprintSetError
    from parity.sets.fingerprint_set import read_set

    fset = read_set(os.path.join(project.out, "sides", "offline"))
    keys = fset.table.column("key").to_pylist()
    assert keys == [fp.hex() for fp in fset.table.column("key_fp").to_pylist()]  # keys as their fingerprints
    with pytest.raises(FingerprintSetError, match="removed at the end of a check under report.redact"):
        fset.values([(fset.table.column("part")[0].as_py(), 0)])


def test_a_redacted_tft_check_keeps_no_vocabulary_token_in_the_out_folder(tmp_path):
    import parity

    examples = os.path.join(REPO, "fixtures", "tfx", "pipeline", "CsvExampleGen", "examples", "1", "Split-train")
    schema = os.path.join(REPO, "fixtures", "tfx", "pipeline", "SchemaGen", "schema")
    module = os.path.join(REPO, "fixtures", "tfx", "taxi_module.py")
    config = tmp_path / "parity.yaml"
    config.write_text(f"version: 1\ncapture: {{path: {examples}, key: [trip_id], schema: {schema}}}\n"
                      f"sides:\n  offline: {{transform: {{tft: '{module}:preprocessing_fn'}}}}\n"
                      f"  production: {{transform: {{saved: {{from_side: offline}}}}}}\nreport: {{redact: true}}\n",
                      encoding="utf-8")
    report = parity.check(str(config), out_dir=str(tmp_path / "out"))
    assert report["verdict"] == "parity"
    for name, data in file_bytes(str(tmp_path / "out")).items():
        for token in (b"Flash Cab", b"Credit Card", b"airport"):  # values of the capture and vocabulary tokens
            assert token not in data, (name, token)
