"""Records on one side only decide the verdict too (issue 24, item 1; CONTRACT sections 3, 4, 5 and 7).

`tolerance.max_unpaired` (default 0) bounds `left_only + right_only`; beyond it the verdict is "diverged" (exit
1) and every report says so first, with examples of the unpaired keys. A run where no record could be paired
at all has no verdict: exit 2, for `parity check` and `parity diff` alike. Each case here passed as "parity"
(exit 0, "first divergence: none") before.
"""
from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest

from robust_helpers import accounting_holds, check, good_records, jsonl_lines, make_project, run_cli

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own.
pytestmark = pytest.mark.slow


def _two_captures(tmp_path, left: list[dict], right: list[dict], **kwargs):
    """A project whose offline side reads `left` and production side reads `right`."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "right.jsonl").write_bytes(b"".join(line + b"\n" for line in jsonl_lines(right)))
    per_side = {"production": {"capture": {"path": "right.jsonl"}}}
    return make_project(tmp_path, lines=jsonl_lines(left), per_side=per_side, **kwargs)


def _report_files(project) -> dict[str, str]:
    return {name: open(os.path.join(project.out, name), encoding="utf-8").read()
            for name in ("report.md", "report.html", "junit.xml")}


def test_a_production_capture_missing_half_the_records_diverges_and_every_report_says_so_first(tmp_path, capsys):
    records = good_records(24)
    project = _two_captures(tmp_path, records, records[::2])

    code, out, errors = check(project, capsys)

    assert (code, errors) == (1, "")
    report = project.report()
    assert report["verdict"] == "diverged" and report["max_unpaired"] == 0
    assert report["first_divergence"] is None  # no paired record diverged: the unpaired ones decide
    assert (report["records"]["left_only"], report["records"]["right_only"]) == (12, 0)
    examples = report["unpaired_examples"]["left_only"]  # report.examples (10) of them, in key-hash order
    assert len(examples) == 10 and set(examples) < set(range(1, 24, 2))
    assert accounting_holds(report)
    assert out.splitlines()[1] == ("  unpaired: 12 records on one side only (12 left only, 0 right only), "
                                   "above tolerance.max_unpaired 0")
    files = _report_files(project)
    markdown = files["report.md"].splitlines()
    assert markdown[0].startswith("**diverged**")
    assert markdown[2].startswith("**12 records are on one side only**, above the 0 that "
                                  "`tolerance.max_unpaired` allows: 12 only on the left (offline), e.g. `")
    header = files["report.html"].split("</header>")[0]
    assert "<strong>12 records are on one side only</strong>" in header
    assert header.index("records are on one side only") < header.index("paired records diverged")
    suite = ET.fromstring(files["junit.xml"])
    assert suite.get("failures") == "1" and suite.get("tests") == "7"
    failure = suite.find("testcase[@name='unpaired']/failure")
    assert failure is not None and failure.get("message") == (
        "12 records are on one side only (12 only on the left, 0 only on the right), above max_unpaired 0")
    assert "example keys only on the left (offline): " in failure.text


@pytest.mark.parametrize("kind", ["extra-records", "redelivered-duplicates", "some-keys-typed-as-strings"])
def test_records_on_one_side_only_of_every_kind_make_the_verdict_diverged(tmp_path, capsys, kind):
    records = good_records(20)
    right = {"extra-records": records + good_records(20, start=100),
             "redelivered-duplicates": records + records[:5],
             "some-keys-typed-as-strings": records[:15] + [dict(r, id=str(r["id"])) for r in records[15:]]}[kind]
    project = _two_captures(tmp_path, records, right, schema=None)

    code, _, errors = check(project, capsys)

    report = project.report()
    assert (code, errors, report["verdict"]) == (1, "", "diverged")
    expected = {"extra-records": (0, 20), "redelivered-duplicates": (0, 5), "some-keys-typed-as-strings": (5, 5)}
    assert (report["records"]["left_only"], report["records"]["right_only"]) == expected[kind]
    assert report["records"]["diverged"] == 0


def test_max_unpaired_allows_exactly_that_many_records_on_one_side_only(tmp_path, capsys):
    records = good_records(20)
    for allowed, want in ((6, 0), (5, 1)):
        folder = tmp_path / f"allowed{allowed}"
        project = _two_captures(folder, records, records[3:] + good_records(3, start=100),
                                config={"tolerance": {"max_unpaired": allowed}})
        code, out, _ = check(project, capsys)
        report = project.report()
        assert (code, report["verdict"], report["max_unpaired"]) == (want, ["parity", "diverged"][want], allowed)
        assert ("unpaired:" in out) == bool(want)


def test_a_negative_max_unpaired_is_refused_naming_the_field(tmp_path, capsys):
    project = make_project(tmp_path, config={"tolerance": {"max_unpaired": -1}})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors == f"parity: error: {project.config}: tolerance.max_unpaired: expected an integer >= 0, got -1"


def test_a_check_where_every_record_of_a_side_is_quarantined_has_no_verdict_and_exits_two(tmp_path, capsys):
    records = good_records(10)
    broken = [dict(r, id="not a number") for r in records]  # fails the int64 schema: all quarantined
    project = _two_captures(tmp_path, records, broken)

    code, _, errors = check(project, capsys)

    assert code == 2
    assert errors.startswith("parity: error: no record could be paired, so there is no verdict: side 'offline' "
                             "(left) has 10 records (0 quarantined); side 'production' (right) has all 10 "
                             "records quarantined (see ")
    assert not os.path.exists(os.path.join(project.out, "report.json"))


def test_a_check_whose_sides_share_no_key_has_no_verdict_and_names_example_keys(tmp_path, capsys):
    records = good_records(10)
    project = _two_captures(tmp_path, records, [dict(r, id=str(r["id"])) for r in records], schema=None)

    code, _, errors = check(project, capsys)

    assert code == 2
    assert "no record key is on both sides (e.g. left keys " in errors
    assert 'right keys "' in errors and '(1 and "1" differ)' in errors


def test_parity_diff_of_two_unrelated_fingerprint_sets_has_no_verdict_and_exits_two(tmp_path, capsys):
    left = make_project(tmp_path / "a", lines=jsonl_lines(good_records(12)))
    right = make_project(tmp_path / "b", lines=jsonl_lines(good_records(30, start=500)))
    sets = []
    for project, side in ((left, "offline"), (right, "production")):
        out = os.path.join(project.folder, "set")
        assert run_cli(["replay", project.config, "--side", side, "--out", out], capsys)[0] == 0
        sets.append(out)

    code, _, errors = run_cli(["diff", *sets, "--out", str(tmp_path / "diff")], capsys)

    assert code == 2
    assert errors.startswith("parity: error: no record could be paired, so there is no verdict: side 'offline' "
                             "(left) has 12 records (0 quarantined); side 'production' (right) has 30 records")
    assert not os.path.exists(tmp_path / "diff" / "report.json")


def test_a_redacted_no_verdict_message_names_key_fingerprints_not_keys(tmp_path, capsys):
    records = [dict(r, id=1000 + r["id"]) for r in good_records(4)]
    project = _two_captures(tmp_path, records, [dict(r, id=str(r["id"])) for r in records], schema=None,
                            config={"report": {"redact": True}})
    code, _, errors = check(project, capsys)
    assert code == 2 and "no record key is on both sides" in errors
    assert "1000" not in errors and "1001" not in errors


def test_an_old_report_without_max_unpaired_renders_as_before(tmp_path, capsys):
    records = good_records(10)
    project = _two_captures(tmp_path, records, records[:8], config={"tolerance": {"max_unpaired": 5}})
    assert check(project, capsys)[0] == 0
    report = project.report()
    del report["max_unpaired"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(report))
    code, out, _ = run_cli(["report", str(path), "--format", "md"], capsys)
    assert code == 0 and "one side only" not in out
