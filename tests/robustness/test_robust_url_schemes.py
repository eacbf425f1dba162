"""Issue 40, item 9 (part): `--out file:///abs/path` is the local folder `/abs/path` (it made a local folder
named `file:`), a `file://` capture path is read as the file it names, and a URL whose scheme no installed
Beam file system serves is refused naming the scheme and the ones served."""
from __future__ import annotations

import os

import pytest

from robust_helpers import make_project, run_cli


def test_out_as_a_file_url_writes_into_the_local_folder_it_names(tmp_path, capsys, monkeypatch):
    project = make_project(tmp_path / "project")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    code, _, errors = run_cli(["check", project.config, "--out", f"file://{out}"], capsys)
    assert code == 0, errors
    assert (out / "report.json").is_file()
    assert not os.path.exists(tmp_path / "file:"), "a local folder named file: was made"


def test_a_capture_path_as_a_file_url_is_read_as_that_file(tmp_path, capsys):
    project = make_project(tmp_path, capture_spec={"path": f"file://{tmp_path / 'cap.jsonl'}"})
    code, _, errors = run_cli(["check", project.config, "--out", str(tmp_path / "out")], capsys)
    assert code == 0, errors


@pytest.mark.parametrize("flag", ["--out", "capture"])
def test_a_url_of_a_scheme_no_beam_file_system_serves_is_refused_naming_it(tmp_path, capsys, flag):
    capture = {"path": "foo://bucket/cap.jsonl"} if flag == "capture" else None
    project = make_project(tmp_path, capture_spec=capture)
    out = "foo://bucket/run" if flag == "--out" else str(tmp_path / "out")
    code, _, errors = run_cli(["check", project.config, "--out", out], capsys)
    assert code == 2
    what = "--out foo://bucket/run" if flag == "--out" else "capture path foo://bucket/cap.jsonl"
    assert errors.startswith(f"parity: error: {what}: no file system serves the scheme foo://; the installed Beam "
                             "serves "), errors
    assert "s3://" in errors
