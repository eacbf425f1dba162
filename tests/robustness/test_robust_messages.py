"""Issue 24, item 17: messages that named nothing now name the record, the function, the file, the field or the
option, and parity's summary is alone on stdout whatever user code prints.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess

import pytest

from robust_helpers import PYTHON, REPO, check, good_records, jsonl_lines, make_project, python_env, run_cli

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own.
pytestmark = pytest.mark.slow


def _substitute(project) -> None:
    """Puts the project's module name where its config says MODULE."""
    with open(project.config, encoding="utf-8") as handle:
        text = handle.read()
    with open(project.config, "w", encoding="utf-8") as handle:
        handle.write(text.replace("MODULE:", f"{project.module}:"))


def test_a_transform_returning_a_tuple_feature_name_exits_two_naming_the_record_and_the_name(tmp_path, capsys):
    module = "def features(record):\n    return {('a', 1): 1}\n"
    project = make_project(tmp_path, lines=jsonl_lines(good_records(4)), module_code=module)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: record 0: transform.python '{project.module}:features' returned a "
                             f"feature named ('a', 1) (tuple); feature names must be strings"), errors
    assert "ArrowTypeError" not in errors


def test_a_shard_key_function_returning_an_object_exits_two_naming_the_record_and_the_function(tmp_path, capsys):
    module = "def features(record):\n    return {'v': record['v']}\n\ndef key(record):\n    return object()\n"
    project = make_project(tmp_path, lines=jsonl_lines(good_records(4)), module_code=module,
                           per_side={"offline": {"shard": {"key": {"function": "MODULE:key"}, "count": 4}}})
    _substitute(project)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: side 'offline': record 0: shard.key.function '{project.module}:key' "
                             f"returned a builtins.object, which has no canonical encoding"), errors
    assert "[while running" not in errors


@pytest.mark.parametrize("name, spec", [("cap.jsonl.gz", {}), ("cap.jsonl", {"format": "jsonl"}),
                                        ("cap.ndjson.gz", {})])
def test_a_gzipped_jsonl_capture_is_read_like_the_plain_one(name, spec, tmp_path, capsys):
    data = b"".join(line + b"\n" for line in jsonl_lines(good_records(8)))
    project = make_project(tmp_path, capture=gzip.compress(data, mtime=0), capture_name=name,
                           capture_spec=dict(spec, max_quarantined=None))
    code, out, errors = check(project, capsys)
    assert code == 0, errors
    assert project.report()["records"]["paired"] == 8
    assert project.report()["records"]["quarantined"] == {"left": 0, "right": 0}


def test_a_cut_gzipped_jsonl_capture_quarantines_the_rest_as_one_entry_saying_gzip(tmp_path, capsys):
    data = b"".join(line + b"\n" for line in jsonl_lines(good_records(400)))
    packed = gzip.compress(data, mtime=0)
    project = make_project(tmp_path, capture=packed[:len(packed) // 2], capture_name="cap.jsonl.gz")
    code, _, errors = check(project, capsys)
    assert code == 0, errors
    entries = project.quarantine()
    assert len(entries) == 1
    assert entries[0]["reason"].startswith("corrupt gzip stream: ")
    assert "the lines from here on cannot be told apart and count as this one quarantined entry" in \
        entries[0]["reason"]
    read = project.report()["records"]["left"]
    assert entries[0]["location"] == f"cap.jsonl.gz:{read}"  # the line after the last one read


def test_parity_diff_of_sets_with_other_stages_says_to_replay_with_this_version_not_capture_key(tmp_path, capsys):
    project = make_project(tmp_path / "p", lines=jsonl_lines(good_records(6)))
    assert check(project, capsys)[0] == 0
    left = str(tmp_path / "left")
    shutil.copytree(os.path.join(project.out, "sides", "offline"), left)
    path = os.path.join(left, "manifest.json")
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    manifest["stages"] = manifest["stages"][:-1]
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)
    code, _, errors = run_cli(["diff", left, os.path.join(project.out, "sides", "production"), "--out",
                               str(tmp_path / "out")], capsys)
    assert code == 2
    assert "the fingerprint sets have different stages" in errors
    assert "replay both sides (or tap both pipelines) with this version of parity" in errors
    assert "capture.key" not in errors


def test_an_empty_config_exits_two_saying_it_is_empty(tmp_path, capsys):
    config = tmp_path / "parity.yaml"
    config.write_text("# nothing yet\n")
    code, _, errors = run_cli(["check", str(config), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: {config}: the config is empty (or only comments); a parity config "
                             f"is a YAML mapping"), errors
    assert "got None" not in errors


def test_a_bad_beam_option_exits_two_with_one_line_naming_it_and_writes_nothing(tmp_path):
    project = make_project(tmp_path, lines=jsonl_lines(good_records(4)))
    done = subprocess.run([PYTHON, "-m", "parity", "check", project.config, "--out", project.out, "--",
                           "--direct_num_workers=abc"], capture_output=True, text=True, env=python_env(), cwd=REPO,
                          timeout=600)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "parity: error: the Beam pipeline options after --: argument --direct_num_workers: invalid int value: "
        "'abc'; pass options Beam's PipelineOptions accept (e.g. --direct_num_workers=2), or remove them"]
    assert not os.path.exists(project.out)


def test_an_unexpected_error_in_a_step_names_the_step_without_beams_suffix(tmp_path, capsys):
    module = "class Features(dict):\n    def items(self):\n        raise RuntimeError('no items today')\n\n" \
             "def features(record):\n    return Features(v=record['v'])\n"
    project = make_project(tmp_path, lines=jsonl_lines(good_records(4)), module_code=module)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors.startswith("parity: error: the replay of side 'offline' failed on DirectRunner in its step "
                             "WriteSet: RuntimeError: no items today"), errors
    assert "[while running" not in errors


@pytest.mark.parametrize("at_once", ["off", "on"])
def test_a_transform_that_prints_leaves_the_summary_alone_on_stdout(at_once, tmp_path):
    module = "def features(record):\n    print('hello from the transform', record['id'])\n" \
             "    return {'v': record['v']}\n"
    project = make_project(tmp_path, lines=jsonl_lines(good_records(5)), module_code=module)
    done = subprocess.run([PYTHON, "-m", "parity", "check", project.config, "--out", project.out,
                           "--sides-at-once", at_once], capture_output=True, text=True, env=python_env(), cwd=REPO,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "parity: parity (offline vs production)"
    assert len(done.stdout.splitlines()) == 3 and "hello" not in done.stdout
    with open(os.path.join(project.out, "libraries.log"), encoding="utf-8") as handle:
        assert handle.read().count("hello from the transform") == 10  # both sides' five records
