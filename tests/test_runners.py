"""The DirectRunner parity builds: Beam's in-process FnApiRunner, collecting less often while it runs."""
from __future__ import annotations

import gc

import apache_beam as beam
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from tensorflow_transform.beam import impl as tft_impl

from parity.runners import GC_THRESHOLDS, make_options, make_runner


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
