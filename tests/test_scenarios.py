"""The scenario suite: every folder of fixtures/scenarios with a parity.yaml is replayed end to end.

Each scenario plants one divergence from the catalogue (or none, for the clean pairs) and carries an
`expected.py` oracle that derives the verdict, the first divergent stage, the diverged count and the cause
from the raw records in plain Python, independently of parity's code.
"""
from __future__ import annotations

import glob
import importlib.util
import os
import re

import pytest

import parity
from scenario_records import raw_records

# The slow tier (`make test`, not `make test-fast`): every scenario of fixtures/scenarios is a whole `parity check`,
# TFT and TFX ones among them.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS_DIR = os.path.join(ROOT, "fixtures", "scenarios")
STAGES = ("input", "window", "shard", "coder", "seed", "transform")
CATALOGUE_ID = re.compile(r"\b[WGCRTE]\d{1,2}\b")


def _scenario_names() -> list[str]:
    return sorted(name for name in os.listdir(SCENARIOS_DIR)
                  if os.path.isfile(os.path.join(SCENARIOS_DIR, name, "parity.yaml")))


SCENARIOS = _scenario_names()


def _raw_records(name: str) -> list[dict]:
    return raw_records(os.path.join(SCENARIOS_DIR, name))


def _oracle(name: str) -> dict:
    path = os.path.join(SCENARIOS_DIR, name, "expected.py")
    spec = importlib.util.spec_from_file_location(f"_scenario_expected_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.expected(_raw_records(name))


def _want_causes(want: dict) -> dict[str, int]:
    """The oracle's records per cause: its `causes`, or all diverged records under its one `cause`."""
    if "causes" in want:
        return {c: n for c, n in want["causes"].items() if n}
    return {want["cause"]: want["diverged"]} if want.get("cause") and want["diverged"] else {}


@pytest.mark.parametrize("name", SCENARIOS)
def test_parity_reports_what_the_scenario_oracle_derives_from_the_raw_records(name, tmp_path):
    """Verdict, first stage and cause, the diverged count (exact, or within `diverged_range` for a
    scenario whose divergences are random draws), and the full `causes` list: every diverged record is
    attributed to the cause the oracle derives, none to another."""
    want = _oracle(name)
    if "error" in want:
        _assert_usage_error(name, want["error"], tmp_path)
        return
    report = parity.check(os.path.join(SCENARIOS_DIR, name, "parity.yaml"), out_dir=str(tmp_path))
    first = report["first_divergence"]
    diverged = report["records"]["diverged"]
    got = {"verdict": report["verdict"], "first_stage": first["stage"] if first else None}
    assert got == {k: want[k] for k in ("verdict", "first_stage")}, \
        f"{name}: parity says {got}, the oracle {want}; first_divergence={first}"
    if "diverged_range" in want:
        low, high = want["diverged_range"]
        assert low <= diverged <= high, f"{name}: {diverged} diverged, expected {low}..{high}"
        # The diverged records' count is the draw's: it stands in for the oracle's open (None) counts.
        want = {**want, "diverged": diverged,
                "stages_first_diverged": {s: diverged if n is None else n
                                          for s, n in want.get("stages_first_diverged", {}).items()}}
    else:
        assert diverged == want["diverged"], f"{name}: {diverged} diverged, the oracle {want['diverged']}"
    if want.get("cause") is not None:
        assert first["cause"] == want["cause"], f"{name}: cause {first['cause']!r}, expected {want['cause']!r}"
    for field in ("left_only", "right_only", "within_tolerance", "duplicate_keys", "paired"):
        if field in want:
            assert report["records"][field] == want[field], f"{name}: records.{field}"
    if "stages_first_diverged" in want:
        got_stages = {s["name"]: s["first_diverged"] for s in report["stages"] if s["first_diverged"]}
        want_stages = {s: n for s, n in want["stages_first_diverged"].items() if n}
        assert got_stages == want_stages, f"{name}: first_diverged per stage"
    got_causes = {c["cause"]: c["records"] for c in report["causes"]}
    assert got_causes == _want_causes(want), f"{name}: causes {report['causes']}"
    assert all(c["stage"] == c["cause"].split(".")[0] for c in report["causes"]), report["causes"]
    if "analyzers" in want:
        entries = {e["name"]: e for e in report["analyzers"]}
        for analyzer, expectation in want["analyzers"].items():
            assert analyzer in entries, f"{name}: no analyzer {analyzer!r} in {sorted(entries)}"
            assert entries[analyzer]["equal"] == expectation["equal"], f"{name}: {entries[analyzer]}"
            for text in expectation.get("detail_contains", ()):
                assert text in entries[analyzer]["detail"], f"{name}: {entries[analyzer]}"
    if "analysis_noise" in want:  # section 8: the records only rounding in the analyzers made differ
        _assert_analysis_noise(name, report, want["analysis_noise"])
    else:
        assert "analysis_noise" not in report, f"{name}: analysis noise judged: {report.get('analysis_noise')}"
    for feature, counts in want.get("features", {}).items():
        got_feature = next(f for f in report["features"] if f["name"] == feature)
        assert {k: got_feature[k] for k in counts} == counts, f"{name}: feature {got_feature}"
    if "analyzers_all_equal" in want:
        assert report["analyzers"], f"{name}: no analyzers compared"
        assert all(e["equal"] for e in report["analyzers"]) == want["analyzers_all_equal"], \
            f"{name}: analyzers {report['analyzers']}"
    if "prediction_impact" in want:  # section 8: a model is configured
        _assert_prediction_impact(name, report, want)
    else:
        assert "prediction_impact" not in report and "model" not in [s["name"] for s in report["stages"]], name


def _assert_prediction_impact(name: str, report: dict, want: dict) -> None:
    """The model stage is the last stage, and prediction_impact has the oracle's counts: records diverged before
    the model, outputs changed, decisions flipped, and per output the records it changed (with a positive delta)."""
    assert [s["name"] for s in report["stages"]][-1] == "model", f"{name}: {report['stages']}"
    impact, expect = report["prediction_impact"], want["prediction_impact"]
    got = {k: impact[k] for k in ("records_diverged_upstream", "prediction_changed", "decision_flips")}
    assert got == {k: expect[k] for k in got}, f"{name}: prediction_impact {impact}"
    if "outputs" in expect:
        changed = {o["name"]: o["changed"] for o in impact["outputs"] if o["changed"]}
        assert changed == expect["outputs"], f"{name}: outputs {impact['outputs']}"
        assert all(o["max_abs_delta"] > 0 for o in impact["outputs"] if o["changed"]), impact
    if "decision_flips_at_model" in want:
        assert impact["decision_flips_at_model"] == want["decision_flips_at_model"], f"{name}: {impact}"
    flips = impact["decision_flips"] + impact["decision_flips_at_model"]
    assert impact["headline"].endswith(f"; {flips} decision{'' if flips == 1 else 's'} changed"), impact


def _assert_analysis_noise(name: str, report: dict, want: dict) -> None:
    """The noise section names the oracle's features, each with a positive bound and its analyzers, which the
    analyzers section marks noise; within_tolerance counts the noise records, and no diverged record is
    attributed to noise."""
    noise = report.get("analysis_noise")
    assert noise is not None, f"{name}: no analysis_noise in the report"
    assert noise["cause"] == "transform.analysis_noise"
    names = [f["name"] for f in noise["features"]]
    if "features_among" in want:  # which z-scores a TFX run's batching moved is the run's draw
        assert names and set(names) <= set(want["features_among"]), f"{name}: {noise}"
    else:
        assert names == want["features"], f"{name}: {noise}"
    assert noise["unbounded"] == want.get("unbounded", []), f"{name}: {noise}"
    marked = {e["name"] for e in report["analyzers"] if e.get("noise")}
    assert marked == set(noise["analyzers"]) and marked, f"{name}: {report['analyzers']}"
    for feature in noise["features"]:
        assert feature["abs"] >= 0 and 0 < feature["rel"] < 1e-5 and set(feature["analyzers"]) & marked
        assert feature["why"] and feature["records"] >= 0
    assert noise["records"] <= report["records"]["within_tolerance"]
    assert noise["records"] >= want.get("records_at_least", 0), f"{name}: {noise['records']} noise records"
    assert "transform.analysis_noise" not in {c["cause"] for c in report["causes"]}


def _assert_usage_error(name: str, want: dict, tmp_path) -> None:
    """A scenario whose run has no verdict: `parity check` exits 2 with one message naming the culprit, prints
    no traceback, writes no report, and leaves the traceback in its log file."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "parity", "check", os.path.join(SCENARIOS_DIR, name, "parity.yaml"),
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == want["exit"], f"{name}: exit {done.returncode}, stderr: {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr, f"{name}: a traceback on the terminal: {done.stderr[-2000:]}"
    errors = [line for line in done.stderr.splitlines() if line.startswith("parity: error: ")]
    assert len(errors) == 1, done.stderr
    for text in want["contains"]:
        assert text in errors[0], f"{name}: {text!r} not in {errors[0]!r}"
    assert not (tmp_path / "report.json").exists()
    log = errors[0].rsplit("(traceback: ", 1)[1].split(";", 1)[0]
    assert "Traceback" in open(log, encoding="utf-8").read()


def test_every_scenario_has_a_readme_naming_its_catalogue_mechanism_stage_and_cause():
    for name in SCENARIOS:
        path = os.path.join(SCENARIOS_DIR, name, "README.md")
        assert os.path.isfile(path), f"{name}: no README.md"
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        assert CATALOGUE_ID.search(text), f"{name}: README.md names no catalogue mechanism id"
        want = _oracle(name)
        if "error" in want:
            assert f"exit {want['error']['exit']}" in text, f"{name}: README.md does not name its exit code"
        elif want["first_stage"] is None:
            assert "parity" in text, f"{name}: README.md of a clean scenario should say it expects parity"
        else:
            assert f"`{want['first_stage']}`" in text, f"{name}: README.md does not name its stage"
        if want.get("cause"):
            assert want["cause"] in text, f"{name}: README.md does not name its cause"


def test_scenarios_cover_every_stage_at_least_twice_and_input_at_least_once():
    assert len(SCENARIOS) >= 12
    stages = [_oracle(name)["first_stage"] for name in SCENARIOS]
    counts = {stage: stages.count(stage) for stage in STAGES}
    assert counts["input"] >= 1, counts
    assert all(counts[stage] >= 2 for stage in STAGES if stage != "input"), counts
    assert None in stages, "no clean (parity) scenario"


def test_scenario_helper_modules_have_unique_names():
    seen: dict[str, str] = {}
    for name in SCENARIOS:
        for path in glob.glob(os.path.join(SCENARIOS_DIR, name, "*.py")):
            module = os.path.basename(path)[:-3]
            if module == "expected":
                continue
            assert module not in seen, f"module {module} in both {seen[module]} and {name}"
            seen[module] = name


TFX_SCENARIOS = [name for name in SCENARIOS if name.startswith("tfx_")]


@pytest.mark.parametrize("name", [name for name in TFX_SCENARIOS if "error" not in _oracle(name)])
def test_a_tfx_scenario_through_the_command_line_exits_with_its_verdicts_code(name, tmp_path):
    """What CI sees: `parity check` on TFX artifacts exits 0 for parity and 1 for divergence, and says so."""
    import subprocess
    import sys

    want = _oracle(name)
    done = subprocess.run([sys.executable, "-m", "parity", "check", os.path.join(SCENARIOS_DIR, name, "parity.yaml"),
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == (0 if want["verdict"] == "parity" else 1), done.stderr[-2000:]
    assert done.stdout.startswith(f"parity: {want['verdict']} (offline vs production)")
    assert all(line.startswith("parity: ") for line in done.stderr.splitlines() if line.strip()), done.stderr[-2000:]
