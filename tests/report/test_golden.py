"""Golden files: every format of real `parity.check` runs, compared byte for byte.

Scenarios: a clean pair, a one-stage divergence (window), two two-stage divergences (window then shard;
window on some records and transform on others, whose HTML draws the feature distributions), and a transform
divergence seen through a model (the `model` stage and `prediction_impact`). Each run uses
`--out parity-out` from a temporary working folder, so the `parity show` lines are the ones users get from
that command line. The environment block (library versions, CPU flags, variables of this machine) is the one
part of a report that depends on the machine: its values are replaced by placeholders before rendering.

A missing or different golden fails. `PARITY_REGEN_GOLDEN=1` writes the goldens instead; a golden that was
missing still fails under `CI=true`, so CI never passes on a golden it wrote itself.
"""
from __future__ import annotations

import copy
import difflib
import os
from typing import Any

import pytest

import parity
from parity.report import render_html, render_json, render_junit, render_markdown

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN_DIR = os.path.join(ROOT, "fixtures", "golden")
OUT_DIR = "parity-out"  # as on the command line `parity check CONFIG --out parity-out`
SCENARIOS = {
    "clean_same_semantics": "fixtures/scenarios/clean_same_semantics/parity.yaml",
    "window_unit_ms_vs_s": "fixtures/scenarios/window_unit_ms_vs_s/parity.yaml",
    "window_late_shrinks_aggregates": "fixtures/scenarios/window_late_shrinks_aggregates/parity.yaml",
    "two_stage": "fixtures/golden/_configs/two_stage/parity.yaml",
    # the km scenario comparing logits only: its sigmoid output differs in the last bits between TensorFlow releases
    "model_transform_km_flips_decisions": "fixtures/golden/_configs/model_logits/parity.yaml",
}
EXPECTED_FIRST_STAGES = {  # stages with first_diverged > 0: what makes each scenario the kind it stands for
    "clean_same_semantics": [],
    "window_unit_ms_vs_s": ["window"],
    "window_late_shrinks_aggregates": ["window", "shard"],
    "two_stage": ["window", "transform"],
    "model_transform_km_flips_decisions": ["transform"],  # and the model's prediction impact (section 8)
}
FILES = ("report.json", "report.md", "report.html", "junit.xml")


def normalized(report: dict[str, Any]) -> dict[str, Any]:
    """The report with this machine's environment values replaced by placeholders (names kept)."""
    report = copy.deepcopy(report)
    environment = report["environment"]
    for side in ("left", "right"):
        environment[side] = {name: f"<{side} {name}>" for name in environment[side]}
    environment["differences"] = [{"name": d["name"], "left": f"<left {d['name']}>",
                                   "right": f"<right {d['name']}>"} for d in environment["differences"]]
    return report


def rendered(report: dict[str, Any]) -> dict[str, str]:
    return {"report.json": render_json(report), "report.md": render_markdown(report, out_dir=OUT_DIR),
            "report.html": render_html(report, out_dir=OUT_DIR), "junit.xml": render_junit(report)}


def check_golden(path: str, text: str) -> str | None:
    """None when `path` holds exactly `text`; otherwise what is wrong (after writing it when regenerating)."""
    regenerate = os.environ.get("PARITY_REGEN_GOLDEN") == "1"
    in_ci = os.environ.get("CI", "").lower() == "true"
    old = None
    if os.path.exists(path):
        with open(path, encoding="utf-8", newline="") as handle:
            old = handle.read()
    if old == text:
        return None
    if regenerate:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        if old is None and in_ci:
            return f"{path}: golden was missing; written, but CI must not pass on a golden it wrote: commit it"
        return None
    if old is None:
        return f"{path}: golden missing; run with PARITY_REGEN_GOLDEN=1, review and commit it"
    diff = "".join(list(difflib.unified_diff(old.splitlines(True), text.splitlines(True), "golden", "now"))[:60])
    return f"{path}: differs from the golden (PARITY_REGEN_GOLDEN=1 rewrites it after review):\n{diff}"


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_format_matches_its_golden_file_byte_for_byte(name: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    report = parity.check(os.path.join(ROOT, SCENARIOS[name]), out_dir=OUT_DIR)
    assert [s["name"] for s in report["stages"] if s["first_diverged"]] == EXPECTED_FIRST_STAGES[name]

    # `parity check --out parity-out` itself wrote these bytes (the environment aside)
    written = {}
    for file in FILES:
        with open(os.path.join(OUT_DIR, file), encoding="utf-8", newline="") as handle:
            written[file] = handle.read()
    assert written == rendered(report)
    assert str(tmp_path) not in "".join(written.values())

    problems = [check_golden(os.path.join(GOLDEN_DIR, name, file), text)
                for file, text in rendered(normalized(report)).items()]
    problems = [p for p in problems if p]
    assert not problems, "\n\n".join(problems)


def test_two_stage_golden_html_draws_the_transform_distributions() -> None:
    with open(os.path.join(GOLDEN_DIR, "two_stage", "report.html"), encoding="utf-8") as handle:
        page = handle.read()
    assert page.count('<figure class="plot">') == 1 and page.count("<svg") == 2
    assert "<code>fare_per_mile</code> <span class=\"muted\">10 differing pairs</span>" in page
    assert "parity show parity-out 7" in page and "<dir>" not in page


def test_a_missing_golden_fails_and_is_not_written(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("PARITY_REGEN_GOLDEN", raising=False)
    path = tmp_path / "g" / "report.md"
    assert "golden missing" in (check_golden(str(path), "text\n") or "")
    assert not path.exists()


def test_regenerating_writes_the_golden_but_a_missing_one_still_fails_under_ci(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PARITY_REGEN_GOLDEN", "1")
    monkeypatch.setenv("CI", "true")
    path = tmp_path / "g" / "report.md"
    assert "CI must not pass" in (check_golden(str(path), "text\n") or "")
    assert path.read_text(encoding="utf-8") == "text\n"
    assert check_golden(str(path), "text\n") is None  # present now: CI passes on the committed file
    assert check_golden(str(path), "other\n") is None  # regenerating rewrites a golden that differs
    assert path.read_text(encoding="utf-8") == "other\n"
    monkeypatch.delenv("CI")
    other = tmp_path / "h" / "junit.xml"
    assert check_golden(str(other), "<x/>\n") is None and other.read_text(encoding="utf-8") == "<x/>\n"


def test_a_different_golden_fails_with_a_diff(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("PARITY_REGEN_GOLDEN", raising=False)
    path = tmp_path / "report.md"
    path.write_text("one\ntwo\n", encoding="utf-8")
    problem = check_golden(str(path), "one\nthree\n") or ""
    assert "differs from the golden" in problem and "-two" in problem and "+three" in problem
    assert path.read_text(encoding="utf-8") == "one\ntwo\n"
