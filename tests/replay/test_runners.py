"""The DirectRunner parity builds: Beam's in-process FnApiRunner, collecting less often while it runs."""
from __future__ import annotations

import gc

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from tensorflow_transform.beam import impl as tft_impl

from parity.replay.runners import GC_THRESHOLDS, make_options, make_runner


def test_the_direct_runner_is_fn_api_runner_itself_so_tft_finds_its_session_config() -> None:
    runner = make_runner("DirectRunner")

    assert type(runner) is FnApiRunner
    assert tft_impl._DEFAULT_TENSORFLOW_CONFIG_BY_BEAM_RUNNER_TYPE.get(type(runner)) is not None


_SEEN: list[tuple[int, ...]] = []  # module level: the runner pickles the step, which finds this by name


def _record_threshold(_: int) -> None:
    _SEEN.append(gc.get_threshold())


def test_a_pipeline_on_the_direct_runner_runs_under_the_replay_thresholds_and_restores_them() -> None:
    before = gc.get_threshold()
    _SEEN.clear()

    with beam.Pipeline(runner=make_runner("DirectRunner"), options=make_options("DirectRunner", [])) as p:
        _ = p | beam.Create([1]) | beam.Map(_record_threshold)

    assert _SEEN == [GC_THRESHOLDS]
    assert gc.get_threshold() == before


def test_nested_replay_gc_contexts_leave_the_outer_ones_thresholds_until_it_closes() -> None:
    from parity.replay.runners import replay_gc

    before = gc.get_threshold()
    with replay_gc():
        assert gc.get_threshold() == GC_THRESHOLDS
        with replay_gc():
            assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_threshold() == GC_THRESHOLDS and gc.get_freeze_count() > 0  # the inner one restored nothing
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_replay_builds_its_pipeline_under_the_replay_thresholds(tmp_path, monkeypatch) -> None:
    from parity.replay import pipeline as replay_module
    from parity import commands as run
    from parity.config import load_config

    seen = []
    expand = replay_module.ReplaySide.expand
    monkeypatch.setattr(replay_module.ReplaySide, "expand",
                        lambda self, root: seen.append(gc.get_threshold()) or expand(self, root))
    (tmp_path / "capture.jsonl").write_text('{"id": 1}\n{"id": 2}\n', encoding="utf-8")
    (tmp_path / "parity.yaml").write_text(
        "version: 1\nname: gc\ncapture: {path: capture.jsonl, key: [id]}\nsides:\n  offline: {}\n  production: {}\n",
        encoding="utf-8")
    run.replay(load_config(str(tmp_path / "parity.yaml")), "offline", str(tmp_path / "out"))
    assert seen == [GC_THRESHOLDS] and gc.get_threshold() != GC_THRESHOLDS


def test_a_configs_module_imports_under_the_loading_thresholds_and_they_are_restored_after(tmp_path) -> None:
    from parity.config.model import Ref
    from parity.console.collector import LOADING_THRESHOLDS

    (tmp_path / "seen_thresholds.py").write_text("import gc\nSEEN = gc.get_threshold()\n", encoding="utf-8")
    before = gc.get_threshold()
    seen = Ref("seen_thresholds:SEEN", str(tmp_path)).resolve()

    assert seen == LOADING_THRESHOLDS != before
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
