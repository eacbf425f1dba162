"""Hypothesis profiles of the whole test suite: every property test runs the same examples on every run.

Loaded before any test module, so each `@settings(...)` and `@given` inherits the profile chosen here:

- by default (`make test`, CI): `derandomize=True` (the examples are a function of the test alone, the same on
  every run and machine), `database=None` (no `.hypothesis/` folder whose replays would make a run depend on
  the ones before it), no deadline (a loaded CI machine must not make a flaky test);
- `PARITY_HYPOTHESIS_PROFILE=explore` (`make explore`): the same tests with new random examples on every run,
  to look for bugs the fixed examples miss. A failure prints the falsifying example: pin it with
  `@hypothesis.example(...)` on the test, so that the derandomized runs keep checking it.

Named profiles for tests that need other example counts (apply them per test with
`@settings(settings.get_profile(NAME))`): `ci` (the canonical-encoding properties, 2,000 examples), `ci-readers`
(arbitrary bytes through the capture readers, 300), `ci-engine` (whole `parity.check` runs, 25).
`tests/robustness/test_robust_property_tests.py` checks that no property test leaves the chosen profile's
randomness setting.
"""
from __future__ import annotations

import os
import time

import pytest
from hypothesis import HealthCheck, settings

from tests import suite_times

PROFILE_VARIABLE = "PARITY_HYPOTHESIS_PROFILE"
MODES = ("derandomized", "explore")
MODE = os.environ.get(PROFILE_VARIABLE) or "derandomized"
if MODE not in MODES:
    raise RuntimeError(f"{PROFILE_VARIABLE}={MODE!r}: expected one of {', '.join(MODES)}")

_COMMON = dict(deadline=None, derandomize=MODE == "derandomized", database=None, print_blob=True)

settings.register_profile("parity", **_COMMON)
settings.register_profile("ci", max_examples=2000, **_COMMON)
settings.register_profile("ci-readers", max_examples=300, suppress_health_check=[HealthCheck.too_slow],
                          **_COMMON)
settings.register_profile("ci-engine", max_examples=25,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                          **_COMMON)
settings.load_profile("parity")


# The slow tiers, marked `slow` here by path: real Flink (a job server per session), the cluster test bed, the
# benchmarks' harness tests. The heaviest end-to-end tests elsewhere mark themselves (`pytestmark = pytest.mark.slow`
# in a module, `@pytest.mark.slow` on a test, each with the reason). `make test-fast` runs everything else;
# `make test` (CI) runs all of it.
SLOW_PATHS = ("tests/flink/", "tests/cluster/", "tests/benchmarks/")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.replace("\\", "/").startswith(SLOW_PATHS):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    started = time.monotonic()
    yield
    node = item.nodeid.replace("\\", "/")
    for folder, label in suite_times.FOLDERS.items():
        if folder in node:
            suite_times.add(label, folder.strip("/").split("/")[-1] + "_tests_seconds", time.monotonic() - started)


def pytest_terminal_summary(terminalreporter):
    for label, times in suite_times.TIMES.items():
        parts = [f"{key.replace('_', ' ')}: {value:.1f}" for key, value in sorted(times.items())]
        terminalreporter.write_line(f"{label}: " + ", ".join(parts))
