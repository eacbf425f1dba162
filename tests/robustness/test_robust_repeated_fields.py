"""Issue 40, item 1: a record naming a field twice is quarantined with the field named, never resolved to one
of its values (CONTRACT section 8, "Readers"), through the real `parity check`.

Before, `{"id": 1, "v": 1, "v": 2}` read as `{"id": 1, "v": 2}` and matched a right side holding that record:
exit 0, a false pass. The per-format cases are in `test_robust_bad_records.py` (`*-repeated-*`) and the
reader tests of `tests/capture/`.
"""
from __future__ import annotations

import pytest

from robust_helpers import accounting_holds, check, good_records, jsonl_lines, make_project


@pytest.mark.parametrize("left_line, right_line, field", [
    (b'{"id": 100, "v": 1.0, "v": 2.0}', b'{"id": 100, "v": 2.0}', "v"),
    (b'{"id": 1, "id": 100, "v": 2.0}', b'{"id": 100, "v": 2.0}', "id"),
], ids=["value-field", "key-field"])
def test_a_record_repeating_a_field_no_longer_passes_against_its_last_value(tmp_path, capsys, left_line,
                                                                           right_line, field):
    good = jsonl_lines(good_records(6))
    project = make_project(tmp_path, lines=good + [right_line], schema=None,
                           per_side={"offline": {"capture": {"path": "left.jsonl"}}})
    (tmp_path / "left.jsonl").write_bytes(b"".join(line + b"\n" for line in good + [left_line]))
    code, out, errors = check(project, capsys)
    assert code == 1, (out, errors)  # was 0: the record read as its last value and matched
    report = project.report()
    assert report["verdict"] == "diverged"
    assert report["records"]["quarantined"] == {"left": 1, "right": 0}
    assert report["records"]["paired"] == report["records"]["matched"] == 6
    assert report["records"]["right_only"] == 1 and report["records"]["left_only"] == 0
    assert accounting_holds(report)
    [entry] = project.quarantine("left")
    assert entry["location"] == "left.jsonl:7"
    assert entry["reason"].startswith(f"repeated field '{field}': the JSON object holds it 2 times")
