"""Issue 24, items 10, 13 and 14: inputs that ended in a traceback (read by CI as exit 1, "divergence"), in the
user's own exit code, or in a message naming nothing, now end in exit 2 with one `parity: error:` line naming
the culprit: the out path, the nested file, the manifest field, the module, the record and the feature.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from robust_helpers import PYTHON, REPO, check, good_records, jsonl_lines, make_project, python_env, run_cli

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own; one reads back a part of more than 2 GiB.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> str:
    """The out folder of a good run (report.json and the two sets under sides/)."""
    project = make_project(tmp_path_factory.mktemp("good"), lines=jsonl_lines(good_records(6)))
    assert check(project)[0] == 0
    return project.out


def _project(tmp_path):
    return make_project(tmp_path / "p", lines=jsonl_lines(good_records(6)))


# item 10: --out that cannot be a folder, for the commands that write one


@pytest.mark.parametrize("command", ["check", "replay", "diff"])
@pytest.mark.parametrize("place", ["existing-file", "under-a-file", "unwritable"])
def test_an_out_that_cannot_be_a_folder_exits_two_naming_it(command, place, done, tmp_path, capsys):
    project = _project(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    out = {"existing-file": str(afile), "under-a-file": str(afile / "out"),
           "unwritable": "/proc/parity-cannot-write-here"}[place]
    argv = {"check": ["check", project.config, "--out", out],
            "replay": ["replay", project.config, "--side", "offline", "--out", out],
            "diff": ["diff", os.path.join(done, "sides", "offline"), os.path.join(done, "sides", "production"),
                     "--out", out]}[command]
    code, _, errors = run_cli(argv, capsys)
    assert code == 2, errors
    assert errors.startswith(f"parity: error: --out {out}: "), errors
    assert ("exists and is not a folder" if place == "existing-file" else "cannot create or list the folder") \
        in errors
    assert "unexpected" not in errors
    assert afile.read_text() == "mine\n"


@pytest.mark.parametrize("place, said", [
    ("a-folder", "is a folder; `parity report --out` takes a file path"),
    ("missing-parent", "does not exist; create it first or give another path"),
    ("under-a-file", "does not exist (it is a file)"),
    ("unwritable", "cannot write the report: "),
])
def test_parity_report_out_that_cannot_be_written_exits_two_naming_it(place, said, done, tmp_path, capsys):
    (tmp_path / "afolder").mkdir()
    (tmp_path / "afile").write_text("mine\n")
    out = {"a-folder": tmp_path / "afolder", "missing-parent": tmp_path / "nope" / "r.md",
           "under-a-file": tmp_path / "afile" / "r.md", "unwritable": "/proc/parity-cannot-write.md"}[place]
    code, _, errors = run_cli(["report", os.path.join(done, "report.json"), "--format", "md", "--out", str(out)],
                              capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: --out {out}: "), errors
    assert said in errors
    assert "unexpected" not in errors


def test_a_yaml_config_nested_100000_deep_exits_two_saying_it_is_nested_too_deeply(tmp_path, capsys):
    config = tmp_path / "deep.yaml"
    config.write_text("name: " + "[" * 100_000 + "]" * 100_000 + "\n")
    code, _, errors = run_cli(["check", str(config), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: {config}: not a usable YAML config: its lists or mappings are "
                             f"nested too deeply"), errors
    assert not (tmp_path / "out").exists()


def test_parity_report_of_a_200000_deep_json_exits_two_saying_it_is_nested_too_deeply(tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    code, _, errors = run_cli(["report", str(path), "--format", "md"], capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: {path}: not a parity report: its JSON is nested too deeply"), errors


@pytest.mark.parametrize("field, value", [("environment", "none"), ("features", "blob"), ("config_name", 7)])
def test_a_manifest_field_of_the_wrong_type_exits_two_naming_the_field(field, value, done, tmp_path, capsys):
    left = str(tmp_path / "left")
    shutil.copytree(os.path.join(done, "sides", "offline"), left)
    path = os.path.join(left, "manifest.json")
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    manifest[field] = value
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)
    code, _, errors = run_cli(["diff", left, os.path.join(done, "sides", "production"), "--out",
                               str(tmp_path / "out")], capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: {path}: field '{field}' must be "), errors
    assert "replay the side again" in errors


# item 13: user code that exits


def test_a_module_calling_sys_exit_on_import_exits_two_naming_the_module(tmp_path):
    project = make_project(tmp_path, lines=jsonl_lines(good_records(4)), module_code="import sys\nsys.exit(5)\n")
    done = subprocess.run([PYTHON, "-m", "parity", "check", project.config, "--out", project.out],
                          capture_output=True, text=True, env=python_env(), cwd=REPO, timeout=600)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("parity: error: ")]
    assert len(errors) == 1, done.stderr
    assert f"sides.offline.transform.python: cannot import '{project.module}:features'" in errors[0]
    assert "the module called sys.exit(5) while it was imported" in errors[0]


@pytest.mark.parametrize("code_exit", ["0", "None", "'bye'"])
def test_sys_exit_inside_a_transform_exits_two_naming_the_record(code_exit, tmp_path, capsys):
    module = f"import sys\n\ndef features(record):\n    if record['id'] == 3:\n        sys.exit({code_exit})\n" \
             f"    return {{'v': record['v']}}\n"
    project = make_project(tmp_path, lines=jsonl_lines(good_records(6)), module_code=module)
    code, out, errors = check(project, capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: record 3: transform.python '{project.module}:features' called "
                             f"sys.exit({code_exit}); a function a config names must return or raise"), errors
    assert "[while running" not in errors
    assert not os.path.exists(os.path.join(project.out, "report.json"))


def test_sys_exit_inside_a_shard_key_function_exits_two_naming_the_record(tmp_path, capsys):
    module = "import sys\n\ndef features(record):\n    return {'v': record['v']}\n\n" \
             "def shard_key(record):\n    sys.exit(0)\n"
    project = make_project(tmp_path, lines=jsonl_lines(good_records(6)), module_code=module,
                           side={"shard": {"key": {"function": "{module}:shard_key"}, "count": 4}})
    _fill_module(project)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "record 0: window or shard key function called sys.exit(0)" in errors, errors


def _fill_module(project) -> None:
    """Puts the project's module name where the config says `{module}`."""
    with open(project.config, encoding="utf-8") as handle:
        text = handle.read()
    with open(project.config, "w", encoding="utf-8") as handle:
        handle.write(text.replace("{module}", project.module))


# item 14: values too large for a fingerprint set


def test_a_transform_returning_20_mib_strings_exits_two_naming_the_record_and_the_feature(tmp_path, capsys):
    module = "def features(record):\n    return {'blob': 'x' * (20 << 20) + str(record['id']), 'id': record['id']}\n"
    project = make_project(tmp_path, lines=jsonl_lines(good_records(3)), module_code=module)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors.startswith("parity: error: side 'offline': record 0: the transform stage value is 20,971,541 "
                             "canonical bytes (its largest feature, 'blob', is 20,971,526 bytes), above "
                             "capture.max_record_bytes 16,777,216; return smaller values, or raise "
                             "capture.max_record_bytes"), errors


def test_values_of_a_part_passing_2_gib_in_all_are_read_back(tmp_path):
    """103 records of 21 MiB (under a raised capture.max_record_bytes) in one values part: `parity diff` and
    `show` read them (was "cannot read the values of a fingerprint set: offset overflow"). About 5 GB of
    memory for a few seconds."""
    import pyarrow as pa

    from parity.encoding import canonical
    from parity.stages import STAGES
    from parity.sets.fingerprint_set import FingerprintSet
    from tests.set_files import stage_bytes, write_part_columns

    count, blob = 103, canonical.encode({"blob": "x" * (21 << 20)})
    small = canonical.encode(None)
    fingerprints = {"key_fp": [i.to_bytes(16, "big") for i in range(count)], "key": [str(i) for i in range(count)],
                    **{f"{stage}_fp": [1] * count for stage in STAGES}, "features": [[("blob", 1)]] * count}
    values = {"key_bytes": [canonical.encode(i) for i in range(count)], "location": ["cap.jsonl:1"] * count,
              **{stage: [small] * count for stage in STAGES}}
    values["transform"] = pa.chunked_array([pa.array([blob] * 50, pa.binary()),
                                            pa.array([blob] * (count - 50), pa.binary())])
    write_part_columns(str(tmp_path), "p0", fingerprints, values)
    del values
    fset = FingerprintSet(str(tmp_path), {})
    assert len(stage_bytes(fset, {("p0", 100): ["transform"]})[("p0", 100)]["transform"]) == len(blob)
    assert len(fset.values([("p0", 101)])[("p0", 101)]["transform"]["blob"]) == 21 << 20
