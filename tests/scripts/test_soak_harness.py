"""scripts/soak_harness.py's plan, arguments and verdict, without a cluster (the soak itself is `make soak`)."""
from __future__ import annotations

import collections
import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load():
    spec = importlib.util.spec_from_file_location("soak_harness", os.path.join(ROOT, "scripts", "soak_harness.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


soak = _load()
Moment = soak.Moment


def test_the_same_seed_plans_the_same_kills_and_another_seed_another_order():
    assert soak.plan(10, 45) == soak.plan(10, 45)
    assert any(soak.plan(10, 45) != soak.plan(10, seed) for seed in range(46, 50))


@pytest.mark.parametrize("kills", [1, 3, 10, 11])
def test_every_moment_is_planned_as_often_as_the_kills_allow(kills):
    counts = collections.Counter(kill.moment for kill in soak.plan(kills, 7))
    assert sum(counts.values()) == kills
    assert max(counts.values()) - min(counts.values()) <= 1
    assert len(counts) == min(kills, len(Moment))


def test_delays_fall_within_the_window_after_a_job_starts():
    assert all(0 <= kill.delay <= soak.MAX_DELAY for kill in soak.plan(30, 3))


def test_only_the_moments_asked_for_are_planned():
    args = soak.parse_args(["--kills", "4", "--moments", "mid-bundle"])
    assert {kill.moment for kill in soak.plan(args.kills, args.seed, args.moments)} == {Moment.MID_BUNDLE}


@pytest.mark.parametrize("argv", [["--kills", "0"], ["--moments", "lunch"], ["--moments", ","],
                                  ["--failover", "none"]])
def test_a_soak_that_kills_nothing_known_is_refused_with_exit_two(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        soak.parse_args(argv)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def _run(number, kill, killed=4242, error=None, identical=True, seconds=10.0):
    return soak.Run(number, kill, killed if kill else None, 1.5 if kill and killed else None, error, identical,
                    seconds, 1 if kill else 0)


def test_the_soak_passes_only_when_every_planned_kill_was_made_and_survived():
    kills = soak.plan(3, 1)
    undisturbed = _run(0, None)
    all_survived = [undisturbed, *(_run(n, kill) for n, kill in enumerate(kills, 1))]
    said, status = soak.totals(all_survived, 3)
    assert status == 0 and "kills 3 of 3 planned, survived 3 of 3" in said and said.endswith("PASS")

    differs = [*all_survived[:-1], _run(3, kills[2], identical=False)]
    failed = [*all_survived[:-1], _run(3, kills[2], error="RunnerError: timeout")]
    missed = [*all_survived[:-1], _run(3, kills[2], killed=None)]
    for runs in (differs, failed, missed, all_survived[:-1]):
        said, status = soak.totals(runs, 3)
        assert status == 1 and said.endswith("FAIL"), said


def test_each_run_line_names_the_moment_the_pid_the_outcome_and_the_time_against_the_undisturbed_run():
    kill = soak.plan(1, 2)[0]
    said = soak.line(_run(1, kill, seconds=14.0), 1, 10.0)
    assert kill.moment.value in said and "killed pid 4242" in said and "survived" in said
    assert "14.0 s vs 10.0 s undisturbed (+4.0 s)" in said
    assert "FAILED (RunnerError: timeout)" in soak.line(_run(1, kill, error="RunnerError: timeout"), 1, 10.0)
    assert "NOT KILLED" in soak.line(_run(1, kill, killed=None), 1, 10.0)
