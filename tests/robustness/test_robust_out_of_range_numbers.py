"""Numbers beyond the float64 range are quarantined with their field named, for every type (issue 24, item 4).

`float("1e400")` is an infinity: a JSON `1e400` was read as Infinity for a float64 field (or with no schema)
without a word, so `1e400` on one side and `1e401` on the other matched, while a float32 overflow was
quarantined. Now a number literal that does not fit a double is quarantined whatever the field's type, and a
string that does ("1e400" in a CSV cell) is quarantined for float fields; `Infinity`, `inf` and `-inf` spelled
out stay infinities on purpose. (Underflow, `1e-400` -> 0.0, is rounding to the nearest double, as for any
decimal literal, and is not refused.)
"""
from __future__ import annotations

import pytest

from parity.capture.schema import SchemaMismatch, coerce, parse_type
from robust_helpers import check, good_records, jsonl_lines, make_project

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own.
pytestmark = pytest.mark.slow

TYPES = ["float64", "float32", "int64", "int32", "string", "bool", "bytes", "list<float64>", None]


def _line(value_text: str) -> bytes:
    """A record whose field `w` (absent, so null, in the good records) holds the number literal."""
    return b'{"id": 777, "t": 1700000000, "arr": 1700000002, "v": 1.5, "zone": "z", "w": %s}' % value_text.encode()


@pytest.mark.parametrize("literal", ["1e400", "-1e400", "[1.5, 1e309]", "1" + "0" * 400 + ".5"],
                         ids=["1e400", "-1e400", "in-a-list", "400-digit-mantissa"])
@pytest.mark.parametrize("field_type", TYPES, ids=[str(t) for t in TYPES])
def test_a_json_number_beyond_float64_is_quarantined_naming_the_field_whatever_its_type(tmp_path, capsys,
                                                                                       field_type, literal):
    schema = None if field_type is None else {"id": "int64", "t": "int64", "arr": "int64", "v": "float64",
                                              "zone": "string", "w": field_type}
    project = make_project(tmp_path, lines=jsonl_lines(good_records(10)) + [_line(literal)], schema=schema)

    code, _, errors = check(project, capsys)

    assert (code, errors) == (0, "")
    report = project.report()
    assert report["records"]["quarantined"] == {"left": 1, "right": 1}
    (entry,) = project.quarantine("left")
    assert entry["location"] == "cap.jsonl:11"
    assert entry["reason"].startswith("field 'w': ")
    assert "out of the float64 range" in entry["reason"]


def test_1e400_and_1e401_on_the_two_sides_no_longer_match_as_one_infinity(tmp_path, capsys):
    (tmp_path / "right.jsonl").write_bytes(b"\n".join(jsonl_lines(good_records(10)) + [_line("1e401")]) + b"\n")
    project = make_project(tmp_path, lines=jsonl_lines(good_records(10)) + [_line("1e400")],
                           per_side={"production": {"capture": {"path": "right.jsonl"}}})
    code, _, _ = check(project, capsys)
    report = project.report()
    assert code == 0 and report["records"]["matched"] == 10  # the 10 good records; 777 is in neither side's pairs
    assert report["records"]["quarantined"] == {"left": 1, "right": 1}
    assert "1e401" in project.quarantine("right")[0]["reason"]


@pytest.mark.parametrize("field_type", ["float64", "float32"])
def test_a_csv_cell_beyond_float64_is_quarantined_naming_the_field(tmp_path, capsys, field_type):
    rows = ["id,t,v"] + [f"{i},{1_700_000_000 + i},{i}.5" for i in range(8)] + ["8,1700000008,1e400"]
    project = make_project(tmp_path, capture="\n".join(rows).encode() + b"\n", capture_name="cap.csv",
                           schema={"id": "int64", "t": "int64", "v": field_type})
    code, _, _ = check(project, capsys)
    assert code == 0
    (entry,) = project.quarantine("left")
    assert entry["location"] == "cap.csv:10"
    assert entry["reason"] == f"field 'v': expected {field_type}, got '1e400' (out of the float64 range: " \
                              f"magnitude above 1.8e308)"


@pytest.mark.parametrize("text", ["1e400", "-1E+400", " 1e309 "])
def test_a_string_beyond_float64_does_not_coerce_to_infinity(text):
    for name in ("float64", "float32"):
        with pytest.raises(SchemaMismatch, match=r"out of the float64 range"):
            coerce(text, parse_type(name))


@pytest.mark.parametrize("text", ["inf", "-Infinity", "+INF", "infinity"])
def test_infinity_spelled_out_stays_an_infinity(text):
    assert abs(coerce(text, parse_type("float64"))) == float("inf")
