"""Property tests are the same on every run; exploring new examples is a separate command (issue 24, item 18).

`tests/stages/test_shard.py`'s property test drew new random examples on every run, so one local `make test`
found that a string "NaN" summed by an aggregate crashed the replay (`ValueError: cannot convert NaN to integer
ratio`, naming neither record nor field) while CI could pass or fail by luck. Now `tests/conftest.py` loads a
derandomized profile for the whole suite, `make explore` (`PARITY_HYPOTHESIS_PROFILE=explore`) draws new
examples, and what it finds is pinned with `@example` (the NaN string is pinned on that test).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from hypothesis import settings

from robust_helpers import PYTHON, REPO, check, good_records, jsonl_lines, make_project, python_env

# The slow tier (`make test`, not `make test-fast`): its tests run pytest and the conftest in processes of their own.
pytestmark = pytest.mark.slow

TESTS = os.path.join(REPO, "tests")
EXPLORING = os.environ.get("PARITY_HYPOTHESIS_PROFILE") == "explore"


def _property_test_modules() -> list[str]:
    found = []
    for folder, _, files in os.walk(TESTS):
        for name in sorted(files):
            path = os.path.join(folder, name)
            if name.startswith("test_") and name.endswith(".py"):
                with open(path, encoding="utf-8") as handle:
                    if "@given" in handle.read():
                        found.append(path)
    return sorted(found)


def _property_tests(path: str) -> list[tuple[str, settings]]:
    """(name, effective settings) of each hypothesis test of the module at `path`, imported afresh."""
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = "property_check_" + os.path.relpath(path, TESTS).replace(os.sep, "_")[:-3]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    tests = []
    for attr, value in sorted(vars(module).items()):
        if attr.startswith("test_") and getattr(value, "is_hypothesis_test", False):
            tests.append((attr, getattr(value, "_hypothesis_internal_use_settings", settings.default)))
    return tests


@pytest.mark.skipif(EXPLORING, reason="exploring draws new examples on purpose")
def test_every_property_test_runs_derandomized_without_an_example_database():
    modules = _property_test_modules()
    assert len(modules) >= 8  # the suite's property tests are found at all
    loose = []
    for path in modules:
        for name, effective in _property_tests(path):
            if not effective.derandomize or effective.database is not None:
                loose.append(f"{os.path.relpath(path, REPO)}::{name} (derandomize={effective.derandomize}, "
                             f"database={effective.database!r})")
    assert not loose, "property tests that draw differently on each run:\n" + "\n".join(loose)


_DRAWS = '''
import json, os, runpy, sys
runpy.run_path(os.path.join(sys.argv[1], "tests", "conftest.py"))
from hypothesis import given, settings, strategies as st

def draws():
    seen = []

    @settings(max_examples=20)
    @given(st.integers())
    def collect(value):
        seen.append(value)

    collect()
    return seen

print(json.dumps([draws(), draws()]))
'''


@pytest.mark.parametrize("mode, same", [(None, True), ("derandomized", True), ("explore", False)])
def test_the_default_profile_draws_the_same_examples_every_run_and_explore_draws_new_ones(mode, same):
    env = python_env()
    env.pop("PARITY_HYPOTHESIS_PROFILE", None)
    if mode:
        env["PARITY_HYPOTHESIS_PROFILE"] = mode
    runs = []
    for _ in range(2):  # two processes: nothing carried over between them
        done = subprocess.run([PYTHON, "-c", _DRAWS, REPO], env=env, cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.extend(json.loads(done.stdout))
    assert (runs[0] == runs[1] == runs[2] == runs[3]) is same


def test_an_unknown_profile_name_stops_the_suite_naming_the_choices():
    env = dict(python_env(), PARITY_HYPOTHESIS_PROFILE="random")
    done = subprocess.run([PYTHON, "-c", "import runpy; runpy.run_path('tests/conftest.py')"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "PARITY_HYPOTHESIS_PROFILE='random': expected one of derandomized, explore" in done.stderr


def test_make_explore_runs_only_the_property_tests_with_the_explore_profile():
    # run from `make test` too: a nested make would add "Entering/Leaving directory" lines, so none are asked for
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "-n", "explore"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    command = [line for line in done.stdout.splitlines() if "pytest" in line][-1]
    assert "PARITY_HYPOTHESIS_PROFILE=explore" in command and "-m hypothesis" in command
    collected = subprocess.run([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m",
                                "hypothesis", "tests/stages/test_shard.py"], env=python_env(), cwd=REPO,
                               capture_output=True, text=True, timeout=300)
    assert collected.returncode == 0, collected.stdout[-2000:]
    names = [line for line in collected.stdout.splitlines() if "::" in line]
    assert names == ["tests/stages/test_shard.py::"
                     "test_adding_a_group_at_once_leaves_the_state_adding_its_records_one_by_one_leaves"]


def _aggregating_project(tmp_path, values: list, op: str = "sum"):
    records = [dict(r, fare=value) for r, value in zip(good_records(len(values)), values)]
    side = {"timestamp": {"field": "t", "unit": "s"}, "window": {"type": "fixed", "size": "1d"},
            "shard": {"key": ["zone"], "count": 2, "aggregates": {"fare_agg": {"op": op, "field": "fare"}}}}
    return make_project(tmp_path, lines=jsonl_lines(records), schema=None, side=side)


@pytest.mark.parametrize("op", ["sum", "mean"])
def test_a_nan_string_in_a_field_an_aggregate_sums_is_skipped_like_a_nan_float(tmp_path, capsys, op):
    project = _aggregating_project(tmp_path, [1.5, "NaN", 2.5, " nan ", 4.0, 0.5], op)
    code, _, errors = check(project, capsys)
    assert (code, errors) == (0, "")
    assert project.report()["records"]["matched"] == 6


def test_an_aggregate_that_cannot_compare_a_fields_values_exits_two_naming_record_aggregate_and_field(tmp_path,
                                                                                                     capsys):
    project = _aggregating_project(tmp_path, [1.5, 2.5, 4.0, "abc", 1.0, 2.0], "max")
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors.startswith("parity: error: side 'offline': record 3: shard.aggregates.fare_agg (max of field "
                             "'fare') cannot take the value 'abc' (str) with the group's other values: TypeError:")
