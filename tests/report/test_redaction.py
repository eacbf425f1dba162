"""Redaction: with `report: {redact: true}` no raw captured value reaches any output format.

Each case copies a scenario (its config and helper modules) into a temporary folder, points its captures at
absolute paths and turns redaction on, runs `parity.check`, then greps report.json, report.md, report.html
and junit.xml for every string of the captures (as written, HTML-escaped and JSON-escaped, upper and lower
case) and every distinctive number (trip ids, epoch times also in ms/us, fares and miles as text).
"""
from __future__ import annotations

import glob
import html
import json
import os
import re
import shutil
from typing import Any, Iterator

import pytest
import yaml

import parity

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = {  # name -> the scenario folder it copies
    "coder_ascii_lowercase": "fixtures/scenarios/coder_ascii_lowercase",  # coder values: whole records
    "shard_key_null_company": "fixtures/scenarios/shard_key_null_company",  # shard keys are strings
    "window_late_shrinks_aggregates": "fixtures/scenarios/window_late_shrinks_aggregates",  # window + shard
    "two_stage": "fixtures/golden/_configs/two_stage",  # window + transform (histograms)
    "input_edits": "fixtures/golden/_configs/two_stage",  # + an edited production capture: input, one side only
}
OUTPUTS = ("report.json", "report.md", "report.html", "junit.xml")


def _absolute(path: str, base: str) -> str:
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(base, path))


def _edited_capture(source: str, target: str) -> None:
    """Production's capture of `input_edits`: other zones and sources on some trips, two trips missing."""
    with open(source, encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    with open(target, "w", encoding="utf-8") as handle:
        for i, record in enumerate(records):
            if i in (5, 9):
                continue  # left only
            if i % 3 == 1:
                record["zone"] = f"Edited Zone {record['trip_id']}"
            handle.write(json.dumps(record) + "\n")


def _scenario(name: str, tmp_path) -> tuple[str, list[str]]:
    """(the redacted config's path, the capture files both sides read)."""
    source = os.path.join(ROOT, CASES[name])
    folder = tmp_path / name
    folder.mkdir()
    for module in glob.glob(os.path.join(source, "*.py")):
        if os.path.basename(module) != "expected.py":
            shutil.copy(module, folder)
    with open(os.path.join(source, "parity.yaml"), encoding="utf-8") as handle:
        config = yaml.safe_load(handle)
    config["capture"]["path"] = _absolute(config["capture"]["path"], source)
    captures = [config["capture"]["path"]]
    for side in config["sides"].values():
        if side and "capture" in side and "path" in side["capture"]:
            side["capture"]["path"] = _absolute(side["capture"]["path"], source)
            captures.append(side["capture"]["path"])
    if name == "input_edits":
        edited = str(folder / "production.jsonl")
        _edited_capture(config["capture"]["path"], edited)
        production = config["sides"].setdefault("production", {})
        production["capture"] = {"path": edited}
        captures.append(edited)
    config["report"] = {"redact": True, "examples": 10}
    path = folder / "parity.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return str(path), [p for pattern in captures for p in sorted(glob.glob(pattern))]


def _values(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _values(item)
    elif isinstance(value, list):
        for item in value:
            yield from _values(item)
    else:
        yield value


def raw_needles(capture_paths: list[str]) -> tuple[set[str], set[str]]:
    """(strings to find anywhere, numbers as text to find as whole numbers) of the captured records."""
    strings: set[str] = set()
    numbers: set[str] = set()
    for path in capture_paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    continue
                for value in _values(json.loads(line)):
                    if isinstance(value, str) and len(value) >= 4:
                        for form in (value, value.lower(), value.upper()):
                            strings |= {form, html.escape(form, quote=True), json.dumps(form)[1:-1]}
                    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1000:
                        numbers.add(str(value))
                        if abs(value) >= 10 ** 9:  # epoch seconds: also as ms and us, as the window stage holds them
                            numbers |= {str(value * 1000), str(value * 1_000_000)}
                    elif isinstance(value, float) and len(repr(value)) >= 4:
                        numbers.add(repr(value))
    return strings, numbers


def leaks(text: str, strings: set[str], numbers: set[str]) -> list[str]:
    found = sorted(s for s in strings if s in text)
    for number in sorted(numbers):
        # a whole number: not part of a longer number, identifier or version string (2.77 in "2.77.0")
        if re.search(rf"(?<![\w.]){re.escape(number)}(?!\w|\.\d)", text):
            found.append(number)
    return found


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_redacted_report_holds_no_raw_value_in_any_format(name: str, tmp_path) -> None:
    config, captures = _scenario(name, tmp_path)
    out = tmp_path / "out"
    report = parity.check(config, out_dir=str(out))
    assert report["redacted"] is True and report["verdict"] == "diverged"
    assert report["examples"], "the case must show examples for the check to mean something"
    strings, numbers = raw_needles(captures)
    assert len(strings) >= 8 and len(numbers) >= 50, (len(strings), len(numbers))
    problems = {}
    for file in OUTPUTS:
        text = (out / file).read_text(encoding="utf-8")
        found = leaks(text, strings, numbers)
        if found:
            problems[file] = found[:20]
    assert not problems, f"raw captured values in redacted outputs: {problems}"
    for example in report["examples"]:
        assert set(example["left"]) == {"fingerprint"} and set(example["right"]) == {"fingerprint"}
        assert re.fullmatch(r"[0-9a-f]{32}", example["key"]), example["key"]
    assert all("histograms" not in feature for feature in report["features"])


def test_the_needles_would_catch_an_unredacted_report(tmp_path) -> None:
    config, captures = _scenario("input_edits", tmp_path)
    with open(config, encoding="utf-8") as handle:
        body = yaml.safe_load(handle)
    body["report"]["redact"] = False
    with open(config, "w", encoding="utf-8") as handle:
        yaml.safe_dump(body, handle, sort_keys=False)
    out = tmp_path / "out"
    report = parity.check(config, out_dir=str(out))
    assert report["redacted"] is False
    strings, numbers = raw_needles(captures)
    for file in OUTPUTS:
        found = leaks((out / file).read_text(encoding="utf-8"), strings, numbers)
        assert found, f"{file}: the grep finds nothing even without redaction; the test would be blind"
    assert report["records"]["left_only"] == 2 and report["unpaired_examples"]["left_only"]
