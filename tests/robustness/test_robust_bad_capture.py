"""Bad captures as a whole: the run stops with exit 2 and a message naming the file or pattern and the fix.

Also the quarantine share limit: a side whose quarantined share passes `capture.max_quarantined` stops the run.
"""
from __future__ import annotations

import os

import pytest

from robust_helpers import REPO, check, good_records, jsonl_lines, make_project

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own.
pytestmark = pytest.mark.slow


def test_a_quarantined_share_above_the_limit_stops_with_exit_two_naming_reasons_and_the_fix(tmp_path, capsys):
    lines = jsonl_lines(good_records(18)) + [b"{broken", b"[1]"]
    project = make_project(tmp_path, lines=lines, capture_spec={"max_quarantined": 0.05})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "side 'offline': 2 of 20 records (10.0%) were quarantined" in errors
    assert "above capture.max_quarantined 0.05" in errors
    assert "expected a JSON object, got an array (1)" in errors and "invalid JSON (1)" in errors
    assert os.path.join(project.out, "sides", "offline", "quarantine.jsonl") in errors
    assert "Fix the capture or the schema, or raise capture.max_quarantined" in errors


def test_the_default_quarantine_limit_is_one_percent(tmp_path, capsys):
    at_limit = make_project(tmp_path / "at", lines=jsonl_lines(good_records(99)) + [b"{broken"],
                            capture_spec={"max_quarantined": None})
    assert check(at_limit, capsys)[0] == 0
    above = make_project(tmp_path / "above", lines=jsonl_lines(good_records(98)) + [b"{broken"] * 2,
                         capture_spec={"max_quarantined": None})
    code, _, errors = check(above, capsys)
    assert code == 2
    assert "2 of 100 records (2.0%) were quarantined, above capture.max_quarantined 0.01" in errors


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"], ids=["empty-file", "blank-lines-only"])
def test_an_empty_capture_stops_with_exit_two_naming_the_side_and_the_capture(content, tmp_path, capsys):
    project = make_project(tmp_path, capture=content)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "side 'offline': the capture 'cap.jsonl' holds no records" in errors


def test_a_glob_matching_no_file_stops_with_exit_two_naming_the_pattern_and_capture_path(tmp_path, capsys):
    project = make_project(tmp_path, capture_spec={"path": "captures/*.jsonl"})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "capture path 'captures/*.jsonl' matches no file" in errors
    assert os.path.join(str(tmp_path), "captures", "*.jsonl") in errors
    assert "check capture.path (a relative path starts at the config file's folder" in errors


def test_a_missing_capture_file_stops_with_exit_two_naming_it_and_capture_path(tmp_path, capsys):
    project = make_project(tmp_path, capture_spec={"path": "gone.jsonl"})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "capture path 'gone.jsonl' does not exist" in errors and "check capture.path" in errors


def test_an_empty_folder_as_capture_path_stops_with_exit_two(tmp_path, capsys):
    (tmp_path / "captures").mkdir()
    project = make_project(tmp_path, capture_spec={"path": "captures"})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "capture path 'captures'" in errors and "is a folder with no files" in errors


def test_an_unknown_extension_stops_with_exit_two_telling_to_set_capture_format(tmp_path, capsys):
    project = make_project(tmp_path, capture_name="cap.txt", capture_spec={"path": "*.txt"})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "cannot tell the format of" in errors and "cap.txt" in errors
    assert "set capture.format to one of jsonl, tfrecord, parquet, csv" in errors


def test_a_csv_header_lacking_a_schema_column_stops_with_exit_two_naming_file_and_columns(tmp_path, capsys):
    project = make_project(tmp_path, capture=b"id,t\n1,2\n", capture_name="cap.csv", capture_spec={"path": "cap.csv"})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "cap.csv: the CSV header lacks schema column(s) 'arr', 'v', 'zone'; it has 'id', 't'" in errors


def test_a_csv_header_that_is_not_utf8_stops_with_exit_two(tmp_path, capsys):
    project = make_project(tmp_path, capture=b"id,\xff\n1,2\n", capture_name="cap.csv",
                           capture_spec={"path": "cap.csv"},
                           schema={"id": "int64"})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "cap.csv: the CSV header is not UTF-8: invalid UTF-8 at line 1" in errors


@pytest.mark.parametrize("name", ["cap.csv", "cap.tfrecord"])
def test_a_csv_or_tfrecord_capture_without_schema_stops_with_exit_two_asking_for_capture_schema(name, tmp_path,
                                                                                                 capsys):
    project = make_project(tmp_path, capture=b"id\n1\n", capture_name=name, capture_spec={"path": name}, schema=None)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert f"{name}: reading" in errors and "needs field types; add `capture.schema`" in errors


def test_a_file_level_error_in_a_worker_process_keeps_its_message(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))  # for the workers
    project = make_project(tmp_path, capture=b"id,t\n1,2\n", capture_name="cap.csv", capture_spec={"path": "cap.csv"})
    code, _, errors = check(project, capsys, "--", "--direct_num_workers=2", "--direct_running_mode=multi_processing")
    assert code == 2
    assert "cap.csv: the CSV header lacks schema column(s) 'arr', 'v', 'zone'; it has 'id', 't'" in errors
