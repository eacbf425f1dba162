"""Security: parity reads configs, captures and fingerprint sets as data and never becomes a way in.

- YAML is loaded safely: python object tags are refused and construct nothing.
- Only the modules a config names are imported; a module lying next to the config is not.
- Report HTML escapes captured strings (unit tests: tests/report/test_html.py; redaction:
  tests/report/test_redaction.py); here end to end, from a hostile capture to report.html.
- Output stays inside `--out`: reports, sides/, noise/ and nothing else (the Python interpreter's own
  __pycache__ next to imported user modules aside).
- Fingerprint sets are data: a pickled object in a binary column or in Arrow extension metadata is never
  unpickled.
"""
from __future__ import annotations

import html
import json
import os
import pickle
import shutil
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from parity.encoding import canonical
from parity.config import load_config
from parity.errors import ConfigError, ParityError
from parity.sets.fingerprint_set import read_set
from robust_helpers import REPO, check, good_records, jsonl_lines, make_project, run_cli, unique_module
from tests.set_files import bucket_paths, rewrite_rows

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own.
pytestmark = pytest.mark.slow


class _Planted:
    """Unpickling this creates a marker file: proof that a payload was executed."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


# ---------------------------------------------------------------------------------------------- YAML

@pytest.mark.parametrize("tag", [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!!python/object/apply:builtins.open ['{marker}', 'w']",
    "!!python/object/new:builtins.open ['{marker}', 'w']",
    "!!python/name:os.system",
    "!!python/module:os",
])
@pytest.mark.parametrize("where", ["name", "sides"])
def test_yaml_python_object_tags_are_refused_and_construct_nothing(tag, where, tmp_path, capsys):
    marker = tmp_path / "MARKER"
    value = tag.format(marker=marker)
    if where == "name":
        text = f"version: 1\nname: {value}\ncapture: {{path: cap.jsonl}}\nsides: {{a: {{}}, b: {{}}}}\n"
    else:
        text = f"version: 1\ncapture: {{path: cap.jsonl}}\nsides:\n  a:\n    seed:\n      value: {value}\n  b: {{}}\n"
    config = tmp_path / "parity.yaml"
    config.write_text(text)
    (tmp_path / "cap.jsonl").write_text('{"id": 1}\n')
    code, _, errors = run_cli(["check", str(config), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert f"{config}: not valid YAML: could not determine a constructor for the tag" in errors
    assert "python/" in errors
    assert not marker.exists()
    with pytest.raises(ConfigError):
        load_config(str(config))
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------- imports

def _user_modules(folder) -> set[str]:
    """Names of the imported modules whose source lies in `folder`."""
    folder = os.path.realpath(str(folder))
    return {name for name, module in list(sys.modules.items())
            if os.path.realpath(getattr(module, "__file__", None) or "").startswith(folder + os.sep)}


def test_loading_a_config_imports_exactly_the_modules_it_names(tmp_path):
    named, decoy = unique_module("named"), unique_module("decoy")
    marker = tmp_path / "DECOY_IMPORTED"
    (tmp_path / f"{named}.py").write_text("def features(record):\n    return {}\n")
    (tmp_path / f"{decoy}.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                          "def features(record):\n    return {}\n")
    (tmp_path / "cap.jsonl").write_text('{"id": 1}\n')
    (tmp_path / "parity.yaml").write_text(
        f"version: 1\nname: {decoy}\ncapture: {{path: cap.jsonl, key: [id]}}\n"
        f"sides:\n  a: {{transform: {{python: '{named}:features'}}}}\n  {decoy}: {{}}\n")
    before = set(sys.modules)
    load_config(str(tmp_path / "parity.yaml"))
    assert _user_modules(tmp_path) == {named}
    assert {name for name in set(sys.modules) - before if name.startswith(("named_", "decoy_"))} == {named}
    assert not marker.exists()


def test_a_whole_check_imports_only_the_named_module(tmp_path, capsys):
    project = make_project(tmp_path, lines=jsonl_lines(good_records(5)))
    marker = tmp_path / "DECOY_IMPORTED"
    (tmp_path / "preprocess.py").write_text(f"open({str(marker)!r}, 'w').close()\n")  # a tempting name
    assert check(project, capsys)[0] == 0
    assert _user_modules(tmp_path) == {project.module}
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------- HTML

HOSTILE = "<script>alert('x')</script>"
HOSTILE_ATTR = '"><img src=x onerror=alert(1)>'


def test_hostile_captured_strings_reach_report_html_escaped_only(tmp_path, capsys):
    lines = [json.dumps({"id": f"{HOSTILE}{i}", "zone": HOSTILE_ATTR, "v": float(i)}).encode() for i in range(4)]
    code_text = "def features(record):\n    return {'zone': record['zone']}\n" \
                "def production(record):\n    return {'zone': record['zone'] + '<b>'}\n"
    module = unique_module("hostile")
    (tmp_path / f"{module}.py").write_text(code_text)
    project = make_project(tmp_path, lines=lines, schema=None, side={"transform": {"python": f"{module}:features"}},
                           per_side={"production": {"transform": {"python": f"{module}:production"}}})
    code, _, _ = check(project, capsys)
    assert code == 1
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>" not in page
    assert html.escape(HOSTILE, quote=True) in page or html.escape(HOSTILE, quote=False) in page


# ---------------------------------------------------------------------------------------------- output paths

def _tree(folder) -> set[str]:
    """Every file and folder under `folder`, relative, without the interpreter's __pycache__ folders."""
    found = set()
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in dirs + files:
            found.add(os.path.relpath(os.path.join(root, name), folder))
    return found


def test_a_check_with_noise_writes_nothing_outside_the_output_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))  # noise subprocesses
    project = make_project(tmp_path / "project", lines=jsonl_lines(good_records(6)))
    before = _tree(tmp_path)
    assert check(project, capsys, "--noise")[0] == 0
    created = _tree(tmp_path) - before
    out = os.path.relpath(project.out, tmp_path)
    assert created and all(path == out or path.startswith(out + os.sep) for path in created), \
        sorted(p for p in created if not p.startswith(out))
    top = {path.split(os.sep)[2] for path in created if path.count(os.sep) >= 2}
    assert top == {"report.json", "report.md", "report.html", "junit.xml", "timings.json", "sides", "noise",
                   ".parity-out", ".parity-lock", ".parity-written"}  # parity's marker of its own folder, the run's
    # lock, and the record of the names parity wrote there (issue 40, item 7)


@pytest.mark.parametrize("name", ["../../evil", "/tmp/parity-evil-side", "a/b", ".."])
def test_a_side_name_that_is_a_path_is_refused_before_anything_is_written(name, tmp_path, capsys):
    project = make_project(tmp_path / "project", lines=jsonl_lines(good_records(3)))
    text = open(project.config).read().replace("  offline:\n", f"  {json.dumps(name)}:\n", 1)
    open(project.config, "w").write(text)
    shutil.rmtree("/tmp/parity-evil-side", ignore_errors=True)
    before = _tree(tmp_path)
    code, _, errors = check(project, capsys)
    escaped = [p for p in _tree(tmp_path) - before if not p.startswith(os.path.join("project", "out"))]
    leaked = os.path.exists("/tmp/parity-evil-side")
    shutil.rmtree("/tmp/parity-evil-side", ignore_errors=True)
    assert not escaped and not leaked
    assert code == 2
    assert f"{project.config}: sides.{name}" in errors and "side names" in errors


# ---------------------------------------------------------------------------------------------- fingerprint sets

@pytest.fixture
def planted_set(tmp_path) -> tuple[str, str, str]:
    """(a fingerprint set whose stage values are pickled objects, the other side's set, the marker path)."""
    project = make_project(tmp_path / "project", lines=jsonl_lines(good_records(5)))
    assert check(project)[0] == 0
    marker = str(tmp_path / "UNPICKLED")
    payload = pickle.dumps(_Planted(marker))
    assert pickle.loads(pickle.dumps(_Planted(str(tmp_path / "SELF_TEST")))) is not None  # the payload works
    assert os.path.exists(tmp_path / "SELF_TEST")
    left = str(tmp_path / "left")
    shutil.copytree(os.path.join(project.out, "sides", "offline"), left)
    values = os.path.join(left, "values")
    for name in os.listdir(values):
        table = pq.read_table(os.path.join(values, name))
        columns = {column: table.column(column).to_pylist() for column in table.column_names}
        for stage in ("input", "transform"):
            columns[stage] = [payload] * table.num_rows
        pq.write_table(pa.table(columns, schema=table.schema), os.path.join(values, name))
    def flipped(fingerprints: pa.Table) -> pa.Table:  # so that the diff fetches the values
        columns = {column: fingerprints.column(column).to_pylist() for column in fingerprints.column_names}
        columns["input_fp"] = [fp ^ 1 for fp in columns["input_fp"]]
        return pa.table(columns, schema=fingerprints.schema)

    rewrite_rows(left, flipped)
    return left, os.path.join(project.out, "sides", "production"), marker


def test_a_pickled_stage_value_in_a_fingerprint_set_is_refused_as_data_never_unpickled(planted_set):
    left, _, marker = planted_set
    fingerprint_set = read_set(left)
    refs = list(zip(fingerprint_set.table.column("part").to_pylist(), fingerprint_set.table.column("row").to_pylist()))
    with pytest.raises((ParityError, ValueError), match="canonical|fingerprint set"):
        fingerprint_set.values(refs[:1])
    with pytest.raises(ValueError, match="unknown canonical tag 0x80"):
        canonical.decode(pickle.dumps(_Planted(marker)))
    assert not os.path.exists(marker)


@pytest.mark.parametrize("command", ["diff", "show"])
def test_diff_and_show_of_a_set_with_a_pickled_value_exit_two_naming_the_file(command, planted_set, tmp_path,
                                                                             capsys):
    left, right, marker = planted_set
    if command == "diff":
        argv = ["diff", left, right, "--out", str(tmp_path / "diff-out")]
    else:
        folder = tmp_path / "show"
        shutil.copytree(left, folder / "sides" / "offline")
        shutil.copytree(right, folder / "sides" / "production")
        argv = ["show", str(folder), "0"]
    try:
        code, _, errors = run_cli(argv, capsys)
    finally:
        assert not os.path.exists(marker)
    assert code == 2
    assert "values" in errors and "not canonical" in errors


def test_arrow_extension_metadata_holding_a_pickle_is_not_unpickled_when_a_set_is_read(planted_set, tmp_path):
    left, _, marker = planted_set
    payload = pickle.dumps(_Planted(marker))
    for path in bucket_paths(left):
        table = pq.read_table(path)
        fields = [field.with_metadata({b"ARROW:extension:name": b"arrow.py_extension_type",
                                       b"ARROW:extension:metadata": payload}) if field.name == "key" else field
                  for field in table.schema]
        pq.write_table(table.cast(pa.schema(fields)), path)
    fingerprint_set = read_set(left)
    assert fingerprint_set.table.num_rows == 5
    assert not os.path.exists(marker)
