# parity: one command for each job. Everything is installed inside the repo (.venv, vendor/jars).
#   make demo    set up, then run the bundled taxi example (it has a planted bug: the verdict is "diverged")
#   make test    set up, then run the test suite (junit XML under test-results/), then the core tests again on
#                the oldest supported Beam / TFT / TensorFlow / pyarrow (scripts/test_profile.sh oldest,
#                .venv-oldest/) and on a TFX 1.21 environment's pins (scripts/test_profile.sh tfx, .venv-tfx/);
#                scripts/run_tests.sh: the engines' tier beside the rest, the profiles installed meanwhile and run by
#                whichever of the two lanes is free first
#   make test-fast  set up, then the suite without its `slow` tests (Flink, cluster, benchmarks, the scenario suites,
#                the robustness modules that run whole checks) nor the profiles, in two pytest workers: the developer's
#                loop, aimed at under 5 min
#   make explore set up, then run the property tests with new random examples (see tests/conftest.py)
#   make soak    set up, then the SDK harness soak on the cluster test bed (scripts/soak_harness.py, docs/flink.md):
#                one undisturbed check and 10 with a harness SIGKILLed at a drawn moment; ~15 min, not in `make test`
#   make setup   only the set-up (scripts/setup.sh; PARITY_SKIP_FLINK_JAR=1 skips the Flink job server)
#   make clean   remove what the demo and the tests wrote (not .venv nor vendor/jars: `make distclean`)
SHELL := /bin/bash
VENV ?= $(or $(PARITY_VENV),.venv)
PYTHON := $(VENV)/bin/python
export PARITY_VENV := $(VENV)

.PHONY: setup demo test test-fast explore soak clean distclean

setup:
	bash scripts/setup.sh

# `parity check` exits 1 on divergence, which is what the demo shows; 2 or more is a real failure.
demo: setup
	$(VENV)/bin/parity check pipelines/taxi/parity.yaml --out parity-out/taxi; test $$? -le 1

# pytest exits 5 when it collected no test: that fails like any other non-zero exit.
test: setup
	bash scripts/install_chromium.sh >&2   # the HTML report's browser test needs Debian's chromium
	bash scripts/run_tests.sh

# Everything but the tests marked `slow` (by path in tests/conftest.py: Flink, the cluster test bed, the benchmarks'
# harness; by a mark in their module: the scenario suites, the robustness modules that run whole checks, a few single
# heavy tests) and the oldest/TFX profiles: the developer's loop. CI runs `make test`, which runs every test.
# Two pytest workers (pytest-xdist), a test module to each in turn (`--dist loadfile`: a module's fixtures are built
# once, in one worker); FAST_WORKERS=1 runs them in this process.
FAST_WORKERS ?= 2
test-fast: setup
	$(PYTHON) -m pytest -q -p no:cacheprovider -m "not slow" $(if $(filter 1,$(FAST_WORKERS)),,-n $(FAST_WORKERS) --dist loadfile) tests

# The plan (which moment each kill hits, after which delay) is fixed by the seed; SOAK_ARGS="--failover region" tries
# Flink's default failover strategy. Exit 1 when a planned kill was not made or a check did not give the same report.
SOAK_ARGS ?= --kills 10 --seed 45
soak: setup
	$(PYTHON) scripts/soak_harness.py $(SOAK_ARGS)

clean:
	rm -rf parity-out test-results .pytest_cache .hypothesis build dist *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .venv-oldest .venv-tfx vendor/jars .flink-venv

# The property tests with new random examples on each run (CI and `make test` draw the same ones every time).
# A failure prints its falsifying example: pin it with @hypothesis.example(...) on the test.
explore: setup
	PARITY_HYPOTHESIS_PROFILE=explore $(PYTHON) -m pytest -q -p no:cacheprovider -m hypothesis tests --ignore=tests/flink
