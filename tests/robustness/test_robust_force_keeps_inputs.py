"""Issue 40, item 7: `--force` never deletes the user's data. A run removes or overwrites only what parity wrote
into its `--out` (recorded in `.parity-written`), and an `--out` holding one of the run's inputs (the config,
a capture file, a TFMD schema, a module it names, a saved graph) is refused naming both, `--force` or not.

Before, `parity check --out . --force` beside the config removed a capture named `report.json` (format jsonl)
as a stale report.
"""
from __future__ import annotations

import os

import pytest

from robust_helpers import file_bytes, make_project, run_cli


def test_force_into_the_config_folder_refuses_and_keeps_a_capture_named_report_json(tmp_path, capsys):
    project = make_project(tmp_path, capture_name="report.json", capture_spec={"format": "jsonl"})
    before = file_bytes(tmp_path)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        code, _, errors = run_cli(["check", project.config, "--out", ".", "--force"], capsys)
    finally:
        os.chdir(cwd)
    assert code == 2
    assert errors.startswith(f"parity: error: --out .: it holds {project.config} (the config), an input of this run; "
                             "parity removes and writes files in its output folder, so it never takes one that "
                             "holds the run's inputs"), errors
    assert file_bytes(tmp_path) == before  # report.json (the capture) and everything else untouched


_TFMD = "".join(f'feature {{ name: "{name}" type: {kind} shape {{ dim {{ size: 1 }} }} }}\n'
                for name, kind in (("id", "INT"), ("t", "INT"), ("arr", "INT"), ("v", "FLOAT"), ("zone", "BYTES")))


@pytest.mark.parametrize("held", ["capture", "module", "schema"])
def test_an_out_holding_a_capture_file_a_module_or_the_tfmd_schema_is_refused_naming_both(tmp_path, capsys, held):
    if held == "schema":
        os.makedirs(tmp_path / "project" / "schema")
        (tmp_path / "project" / "schema" / "schema.pbtxt").write_text(_TFMD)
        project = make_project(tmp_path / "project", capture_spec={"schema": "schema"}, schema=None)
        out, what = tmp_path / "project" / "schema", "the TFMD schema of side 'offline'"
        path = out / "schema.pbtxt"
    elif held == "capture":
        os.makedirs(tmp_path / "project" / "data")
        project = make_project(tmp_path / "project", capture_name="data/report.json", capture_spec={"format": "jsonl"})
        out, what = tmp_path / "project" / "data", "a capture file of side 'offline'"
        path = out / "report.json"
    else:
        project = make_project(tmp_path / "project")
        os.makedirs(tmp_path / "project" / "code")
        os.rename(os.path.join(project.folder, f"{project.module}.py"),
                  tmp_path / "project" / "code" / f"{project.module}.py")
        text = open(project.config).read().replace(f"{project.module}:features", f"code/{project.module}.py:features")
        open(project.config, "w").write(text)
        out, what = tmp_path / "project" / "code", f"the module 'code/{project.module}.py:features' of side 'offline'"
        path = out / f"{project.module}.py"
    before = file_bytes(tmp_path)
    code, _, errors = run_cli(["check", project.config, "--out", str(out), "--force"], capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: --out {out}: it holds {path} ({what}), an input of this run; parity "
                             "removes and writes"), errors
    assert file_bytes(tmp_path) == before


def test_replay_into_the_config_folder_is_refused_naming_the_config(tmp_path, capsys):
    project = make_project(tmp_path)
    before = file_bytes(tmp_path)
    code, _, errors = run_cli(["replay", project.config, "--side", "offline", "--out", str(tmp_path), "--force"],
                              capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: --out {tmp_path}: it holds {project.config} (the config), an input of "
                             "this run"), errors
    assert file_bytes(tmp_path) == before
