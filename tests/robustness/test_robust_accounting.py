"""Accounting as a property: random small captures with random corruption through the real `parity check`
(hypothesis, profile `ci-engine`: 25 derandomized examples of about a second each).

Per side, every record read is counted exactly once as paired, `<side>_only` or quarantined, paired records
split into matched + within_tolerance + diverged (CONTRACT section 5), the quarantined count is exactly the
number of corrupt lines planted, and quarantine.jsonl lists exactly their line numbers.
"""
from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import parity
from parity.errors import InputError
from robust_helpers import accounting_holds, make_project

# The slow tier (`make test`, not `make test-fast`): 25 whole `parity check` runs (hypothesis profile `ci-engine`).
pytestmark = pytest.mark.slow

ENGINE = settings(settings.get_profile("ci-engine"))

# Each planted line must be quarantined exactly once, whatever its neighbours.
CORRUPT = {
    "invalid-json": b'{"id": 1, "v": ',
    "not-an-object": b"[1, 2]",
    "not-utf8": b'{"id": 1, "zone": "\xff"}',
    "schema-mismatch": b'{"id": "abc", "t": 1700000000}',
    "missing-key": b'{"t": 1700000000, "v": 1.0}',
    "null-key": b'{"id": null, "t": 1700000000}',
    "null-timestamp": b'{"id": 424242, "t": null}',
    "bad-timestamp-type": b'{"id": 424243, "t": "noon"}',
    "too-large": json.dumps({"id": 424244, "t": 1700000000, "zone": "z" * 700}).encode(),
    "too-deep": b'{"id": 424245, "t": 1700000000, "x": ' + b"[" * 120 + b"]" * 120 + b"}",
}
SCHEMA = {"id": "int64", "t": "int64", "v": "float64", "zone": "string"}


def _record(key: int, version: int = 0) -> dict:
    return {"id": key, "t": 1_700_000_000 + 60 * key, "v": round(key * 1.5 + version, 2), "zone": "abc"[key % 3]}


@st.composite
def _capture_pair(draw):
    """(left lines, right lines, planted corrupt line numbers per side, expected counts)."""
    keys = draw(st.lists(st.integers(0, 12), min_size=1, max_size=10))  # repeats are duplicate keys
    right_keys = [k for k in keys if draw(st.booleans()) or k % 4] + draw(st.lists(st.integers(13, 16), max_size=3))
    changed = set(draw(st.lists(st.sampled_from(sorted(set(keys))), max_size=3)))
    sides = []
    for side_keys, version in ((keys, 0), (right_keys, 1)):
        lines = [json.dumps(_record(k, version if k in changed else 0)).encode() for k in side_keys]
        for kind in draw(st.lists(st.sampled_from(sorted(CORRUPT)), max_size=4)):
            lines.insert(draw(st.integers(0, len(lines))), CORRUPT[kind])
        for _ in range(draw(st.integers(0, 2))):  # blank lines are not records and never quarantined
            lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from([b"", b"  ", b"\t"])))
        planted = [n for n, line in enumerate(lines, start=1) if line in CORRUPT.values()]
        sides.append((lines, planted, Counter(side_keys)))
    return sides, changed


@ENGINE
@given(_capture_pair())
def test_every_record_read_is_counted_once_and_quarantined_equals_the_corrupt_lines_planted(tmp_path_factory,
                                                                                             pair):
    (left_lines, left_planted, left_keys), (right_lines, right_planted, right_keys) = pair[0]
    changed = pair[1]
    folder = tmp_path_factory.mktemp("acct")
    (folder / "right.jsonl").write_bytes(b"".join(line + b"\n" for line in right_lines))
    project = make_project(folder, lines=left_lines, schema=SCHEMA, capture_spec={"max_record_bytes": 600},
                           side={"timestamp": {"field": "t", "unit": "s"}},
                           per_side={"production": {"capture": {"path": "right.jsonl"}}})

    if not right_lines or all(not line.strip() for line in right_lines):
        with pytest.raises(InputError, match="side 'production': the capture 'right.jsonl' holds no records"):
            parity.check(project.config, out_dir=project.out)
        return
    report = parity.check(project.config, out_dir=project.out)
    records = report["records"]
    assert accounting_holds(report), records
    assert records["quarantined"] == {"left": len(left_planted), "right": len(right_planted)}
    assert records["left"] == sum(left_keys.values()) + len(left_planted)
    assert records["right"] == sum(right_keys.values()) + len(right_planted)
    every_key = set(left_keys) | set(right_keys)
    assert records["paired"] == sum(min(left_keys[k], right_keys[k]) for k in every_key)
    assert records["left_only"] == sum(max(0, left_keys[k] - right_keys[k]) for k in every_key)
    assert records["right_only"] == sum(max(0, right_keys[k] - left_keys[k]) for k in every_key)
    assert records["duplicate_keys"] == sum(c - 1 for c in left_keys.values()) + \
        sum(c - 1 for c in right_keys.values())
    if all(left_keys[k] <= 1 and right_keys[k] <= 1 for k in every_key):  # no duplicates: the model is exact
        paired_keys = {k for k in every_key if left_keys[k] and right_keys[k]}
        assert records["diverged"] == len(changed & paired_keys)
    for side, planted in (("left", left_planted), ("right", right_planted)):
        locations = [entry["location"] for entry in project.quarantine(side)]
        name = "cap.jsonl" if side == "left" else "right.jsonl"
        assert sorted(locations, key=lambda loc: int(loc.rsplit(":", 1)[1])) == [f"{name}:{n}" for n in planted]
