"""Cause classification end to end: no spurious causes on clean runs, and every contract cause exercised.

- The bundled taxi example with its bug removed (`pipelines/taxi/parity-fixed.yaml`, TFT on both sides
  through `saved`, ~40 s) reports parity: no diverged record, no cause, no first divergence.
- Every clean scenario of fixtures/scenarios (its oracle expects no first divergence) reports no cause.
- The scenario suite covers all 21 causes of CONTRACT section 7: the union of the causes the scenario
  oracles derive (tests/test_scenarios.py asserts that each report's `causes` equals its oracle's).
"""
from __future__ import annotations

import importlib.util
import os

import pytest

import parity
from tests.scenario_records import raw_records

# The slow tier (`make test`, not `make test-fast`): the taxi example and every clean scenario, each a whole
# `parity check`.
pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIOS_DIR = os.path.join(ROOT, "fixtures", "scenarios")
TAXI_FIXED = os.path.join(ROOT, "pipelines", "taxi", "parity-fixed.yaml")

# CONTRACT section 7, in its order.
CONTRACT_CAUSES = (
    "input.content",
    "window.timestamp_unit",
    "window.timestamp_shift",
    "window.boundary",
    "window.late_dropped",
    "shard.key",
    "shard.assignment",
    "shard.membership",
    "shard.combine_order",
    "coder.float_precision",
    "coder.int_precision",
    "coder.type",
    "coder.string",
    "coder.null",
    "seed.value",
    "seed.hash",
    "seed.nondeterministic",
    "transform.analyzer",
    "transform.feature_set",
    "transform.numeric",
    "transform.mapping",
)
# CONTRACT section 8, "Prediction impact": the model stage's causes.
MODEL_CAUSES = ("model.prediction", "model.version")


def _scenarios() -> list[str]:
    return sorted(name for name in os.listdir(SCENARIOS_DIR)
                  if os.path.isfile(os.path.join(SCENARIOS_DIR, name, "parity.yaml")))


def _oracle(name: str) -> dict:
    """The scenario's expected.py applied to its top-level capture (as tests/test_scenarios.py does)."""
    folder = os.path.join(SCENARIOS_DIR, name)
    records = raw_records(folder)
    spec = importlib.util.spec_from_file_location(f"_causes_expected_{name}",
                                                  os.path.join(folder, "expected.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.expected(records)


def _oracle_causes(want: dict) -> set[str]:
    causes = set(want.get("causes") or {}) if "causes" in want else set()
    if want.get("cause"):
        causes.add(want["cause"])
    return causes


CLEAN = [name for name in _scenarios() if _oracle(name)["first_stage"] is None and "error" not in _oracle(name)
         and _oracle(name)["verdict"] == "parity"]  # not a scenario whose records are unpaired


def _assert_clean(report: dict, where: str) -> None:
    assert report["verdict"] == "parity", f"{where}: verdict {report['verdict']}"
    assert report["records"]["diverged"] == 0, f"{where}: {report['records']}"
    assert report["first_divergence"] is None, f"{where}: {report['first_divergence']}"
    assert report["causes"] == [], f"{where}: spurious causes {report['causes']}"
    assert report["examples"] == [], f"{where}: examples {report['examples']}"
    assert all(s["first_diverged"] == 0 for s in report["stages"]), f"{where}: {report['stages']}"


def test_the_taxi_example_with_its_bug_removed_reports_no_divergence_and_no_cause(tmp_path):
    report = parity.check(TAXI_FIXED, out_dir=str(tmp_path))
    _assert_clean(report, "pipelines/taxi/parity-fixed.yaml")
    assert report["records"]["paired"] == report["records"]["left"] == report["records"]["right"] > 0
    assert report["records"]["left_only"] == report["records"]["right_only"] == 0
    # Production serves the transform graph offline exported: the same analyzer outputs on both sides.
    assert report["analyzers"] and all(entry["equal"] for entry in report["analyzers"]), report["analyzers"]


def test_there_are_clean_scenarios():
    assert len(CLEAN) >= 2, CLEAN


@pytest.mark.parametrize("name", CLEAN)
def test_a_clean_scenario_reports_no_cause(name, tmp_path):
    report = parity.check(os.path.join(SCENARIOS_DIR, name, "parity.yaml"), out_dir=str(tmp_path))
    _assert_clean(report, name)


def test_the_contract_lists_the_21_causes_this_test_names():
    assert len(CONTRACT_CAUSES) == len(set(CONTRACT_CAUSES)) == 21
    contract = os.path.join(os.path.dirname(ROOT), "shared", "CONTRACT.md")
    if not os.path.exists(contract):
        pytest.skip("../shared/CONTRACT.md is not next to the project")
    with open(contract, encoding="utf-8") as handle:
        text = handle.read()
    section = text[text.index("## 7. Causes"):]
    listed = [line.split("`")[1] for line in section.splitlines() if line.startswith("| `")]
    assert tuple(listed) == CONTRACT_CAUSES


def test_the_scenarios_cover_every_contract_cause():
    covered: dict[str, list[str]] = {}
    for name in _scenarios():
        for cause in _oracle_causes(_oracle(name)):
            covered.setdefault(cause, []).append(name)
    missing = [cause for cause in CONTRACT_CAUSES + MODEL_CAUSES if cause not in covered]
    assert not missing, f"no scenario for {missing}"
    unknown = sorted(set(covered) - set(CONTRACT_CAUSES + MODEL_CAUSES))
    assert not unknown, f"scenarios expect causes outside the contract: {unknown}"
