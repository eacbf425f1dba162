"""Fixed hypothesis profiles of the robustness suite (issue 8), the same on every run and machine.

The profiles are registered here and applied per test with `@settings(settings.get_profile(NAME))`, never
loaded globally, so that the rest of the test suite keeps its own settings:

- `ci`: the canonical-encoding properties, 2,000 examples each;
- `ci-readers`: arbitrary bytes through the capture readers (a file write and a read per example);
- `ci-engine`: whole `parity.check` runs (about a second per example).

`derandomize=True` makes every run draw the same examples; `database=None` keeps hypothesis from writing a
`.hypothesis/` folder; no deadline, because a loaded CI machine must not turn into a flaky test.
"""
from __future__ import annotations

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, derandomize=True, database=None, print_blob=True)

settings.register_profile("ci", max_examples=2000, **_COMMON)
settings.register_profile("ci-readers", max_examples=300, suppress_health_check=[HealthCheck.too_slow],
                          **_COMMON)
settings.register_profile("ci-engine", max_examples=25,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
                          **_COMMON)
