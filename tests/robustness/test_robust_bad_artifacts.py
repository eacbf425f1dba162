"""Bad fingerprint sets given to `parity diff` and bad report.json files given to `parity report`: exit 2 naming
the file and what to do, never a traceback.
"""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from parity.errors import FingerprintSetError
from parity.sets.fingerprint_set import read_set
from robust_helpers import check, good_records, jsonl_lines, make_project, run_cli
from tests.set_files import bucket_paths


@pytest.fixture(scope="module")
def sets(tmp_path_factory) -> tuple[str, str]:
    """The two fingerprint sets of a good run: (offline, production)."""
    folder = tmp_path_factory.mktemp("good")
    project = make_project(folder, lines=jsonl_lines(good_records(10)))
    assert check(project)[0] == 0
    sides = os.path.join(project.out, "sides")
    return os.path.join(sides, "offline"), os.path.join(sides, "production")


def _copy(source: str, target) -> str:
    shutil.copytree(source, target)
    return str(target)


def _edit_manifest(folder: str, edit) -> None:
    path = os.path.join(folder, "manifest.json")
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    edit(manifest)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle)


def _diff(left: str, right: str, tmp_path, capsys) -> tuple[int, str]:
    code, _, errors = run_cli(["diff", left, right, "--out", str(tmp_path / "diff-out")], capsys)
    return code, errors


def test_a_fingerprint_set_of_another_format_version_exits_two_saying_to_replay_again(sets, tmp_path, capsys):
    left = _copy(sets[0], tmp_path / "left")
    _edit_manifest(left, lambda m: m.update(format="parity.fingerprints/2"))
    code, errors = _diff(left, sets[1], tmp_path, capsys)
    assert code == 2
    assert f"{left}/manifest.json: format 'parity.fingerprints/2' is not 'parity.fingerprints/1'" in errors
    assert "re-run `parity replay` with this version of parity" in errors


def test_a_fingerprint_set_of_another_canonical_encoding_exits_two(sets, tmp_path, capsys):
    right = _copy(sets[1], tmp_path / "right")
    _edit_manifest(right, lambda m: m.update(encoding="parity.canonical/2"))
    code, errors = _diff(sets[0], right, tmp_path, capsys)
    assert code == 2
    assert f"{right}/manifest.json: canonical encoding 'parity.canonical/2' is not 'parity.canonical/1'" in errors
    assert "replay both sides with the same parity version" in errors


def test_a_folder_without_manifest_exits_two_saying_what_folder_to_pass(sets, tmp_path, capsys):
    left = _copy(sets[0], tmp_path / "left")
    os.remove(os.path.join(left, "manifest.json"))
    code, errors = _diff(left, sets[1], tmp_path, capsys)
    assert code == 2
    assert f"{left}: not a fingerprint set (no manifest.json); pass a folder written by `parity replay`" in errors


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", "\ufeff\x00"], ids=["not-json", "not-an-object",
                                                                               "garbage"])
def test_an_unreadable_manifest_exits_two_naming_it(content, sets, tmp_path, capsys):
    left = _copy(sets[0], tmp_path / "left")
    with open(os.path.join(left, "manifest.json"), "w", encoding="utf-8") as handle:
        handle.write(content)
    code, errors = _diff(left, sets[1], tmp_path, capsys)
    assert code == 2
    assert f"{left}/manifest.json: " in errors
    assert "unreadable manifest" in errors or "is not 'parity.fingerprints/1'" in errors


def test_sets_with_incompatible_keys_exit_two_saying_to_use_the_same_capture_key(sets, tmp_path, capsys):
    left = _copy(sets[0], tmp_path / "left")
    _edit_manifest(left, lambda m: m.update(key=["zone"]))
    code, errors = _diff(left, sets[1], tmp_path, capsys)
    assert code == 2
    assert f"different key definition: {left} has ['zone'], {sets[1]} has ['id']" in errors
    assert "replay both sides with the same capture.key" in errors


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_missing_or_corrupt_bucket_summaries_exit_two_naming_them(damage, sets, tmp_path, capsys):
    left = _copy(sets[0], tmp_path / "left")
    path = os.path.join(left, "buckets.json")
    if damage == "missing":
        os.remove(path)
    else:
        with open(path, "wb") as handle:
            handle.write(b"garbage")
    code, errors = _diff(left, sets[1], tmp_path, capsys)
    assert code == 2
    assert f"{left}/buckets.json: cannot read" in errors


@pytest.mark.parametrize("damage", ["missing", "garbage"])
def test_a_missing_or_corrupt_bucket_file_is_named_when_read_and_never_opened_when_its_summaries_agree(
        damage, sets, tmp_path, capsys):
    left = _copy(sets[0], tmp_path / "left")
    path = bucket_paths(left)[0]
    if damage == "missing":
        os.remove(path)
    else:
        with open(path, "wb") as handle:
            handle.write(b"garbage")
    with pytest.raises(FingerprintSetError, match=re.escape(f"{path}: cannot read")):
        _ = read_set(left).table
    code, _errors = _diff(left, sets[1], tmp_path, capsys)  # the sides agree: the diff reads summaries only
    assert code == 0


def test_a_manifest_lacking_required_fields_exits_two_naming_the_field(sets, tmp_path, capsys):
    left = _copy(sets[0], tmp_path / "left")
    _edit_manifest(left, lambda m: m.pop("records"))
    code, errors = _diff(left, sets[1], tmp_path, capsys)
    assert code == 2
    assert f"{left}/manifest.json" in errors and "records" in errors


# ------------------------------------------------------------------------------------------ report.json

@pytest.mark.parametrize(("content", "fragment"), [
    (b"[1, 2]", "not a parity report (format parity.report/1)"),
    (b'{"format": "datacompy/1"}', "not a parity report (format parity.report/1)"),
    (b"{bad", "cannot read a report.json: Expecting property name"),
    (b"\xff\xfe\x00", "cannot read a report.json: 'utf-8' codec can't decode"),
], ids=["a-list", "another-format", "not-json", "not-utf8"])
def test_a_report_json_that_is_not_one_exits_two_naming_it(content, fragment, tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_bytes(content)
    for fmt in ("md", "html", "junit"):
        code, _, errors = run_cli(["report", str(path), "--format", fmt], capsys)
        assert code == 2
        assert f"parity: error: {path}: {fragment}" in errors


def test_a_missing_report_json_exits_two_naming_it(tmp_path, capsys):
    code, _, errors = run_cli(["report", str(tmp_path / "gone.json"), "--format", "md"], capsys)
    assert code == 2
    assert f"{tmp_path / 'gone.json'}: cannot read a report.json" in errors


def test_a_report_json_with_a_malformed_body_exits_two_naming_the_field(tmp_path, capsys):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"format": "parity.report/1", "verdict": "parity", "sides": {"left": "a", "right": "b"},
                                "stages": [], "records": 5}))
    code, _, errors = run_cli(["report", str(path), "--format", "junit"], capsys)
    assert code == 2
    assert str(path) in errors and "records" in errors
