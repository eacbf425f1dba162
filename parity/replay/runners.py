"""Beam runners by name, with options that never reach the internet.

`DirectRunner` means Beam's in-process FnApiRunner: Beam 2.77's DirectRunner would first try to download
the Prism runner binary. `--direct_num_workers` and `--direct_running_mode` are honoured by FnApiRunner.
"""
from __future__ import annotations

import contextlib
from typing import Any, Sequence

from apache_beam.options.pipeline_options import PipelineOptions

from parity.choices import RUNNERS
from parity.console.collector import collecting_less
from parity.errors import ConfigError



# Cyclic garbage collection while a replay runs: the first generation collected every GC_THRESHOLDS[0]
# container allocations instead of Python's 700, and the objects that exist before the run (Beam, TensorFlow,
# the pipeline) frozen out of full collections. Decoding a batch allocates thousands of dicts and lists,
# nearly all freed by reference counting; at 700 the collector runs every few hundred records and its full
# passes walk every live object of the process.
GC_THRESHOLDS = (50_000, 50, 100)


def replay_gc() -> contextlib.AbstractContextManager[None]:
    """Collects less often while a pipeline is built and runs in this process (`collecting_less`); nested
    (`parity.commands.replay` around the construction of its pipeline, the runner's `run_pipeline` within it),
    the inner one changes nothing. It starts before the pipeline is built because TFT's tracing of the
    preprocessing function allocates enough to trigger full collections."""
    return collecting_less(GC_THRESHOLDS)


def make_runner(name: str) -> Any:
    if name == "DirectRunner":
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        # FnApiRunner itself (TFT looks its TensorFlow session config up by the runner's exact type), its
        # `run_pipeline`, which runs the whole pipeline, wrapped in `replay_gc`
        runner = FnApiRunner()
        run_pipeline = runner.run_pipeline

        def run_under_replay_gc(pipeline: Any, options: Any) -> Any:
            with replay_gc():
                return run_pipeline(pipeline, options)

        runner.run_pipeline = run_under_replay_gc  # type: ignore[method-assign]
        return runner
    if name == "FlinkRunner":
        from apache_beam.runners.portability.flink_runner import FlinkRunner

        from parity.replay.flink import bounded, job_timeout

        runner = FlinkRunner()
        timeout = job_timeout()  # read now: a bad value stops the run before its job is submitted
        submit = runner.run_pipeline

        def run_bounded(pipeline: Any, options: Any) -> Any:
            return bounded(submit(pipeline, options), timeout)

        runner.run_pipeline = run_bounded  # type: ignore[method-assign]
        return runner
    raise ConfigError(f"--runner: unknown runner {name!r}; expected one of {', '.join(RUNNERS)}")


def check_beam_args(beam_args: Sequence[str] | None) -> None:
    """Refuses pipeline options after `--` that Beam cannot parse (`--direct_num_workers=abc`), with argparse's
    own one-line reason: Beam parses them only when the job starts, and then prints its whole usage text and
    exits 2, which read as user code calling sys.exit(2)."""
    import io

    if not beam_args:
        return
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            PipelineOptions(list(beam_args)).get_all_options()
    except SystemExit as exc:
        lines = [line for line in said.getvalue().splitlines() if line.strip()]
        reason = lines[-1].split(" error: ", 1)[-1] if lines else f"exit {exc.code}"
        raise ConfigError(f"the Beam pipeline options after --: {reason}; pass options Beam's PipelineOptions "
                          f"accept (e.g. --direct_num_workers=2), or remove them") from None


def make_options(runner: str, beam_args: Sequence[str] | None) -> PipelineOptions:
    args = list(beam_args or [])
    if runner == "FlinkRunner":
        from parity.replay.flink import flink_defaults

        args = flink_defaults(args)
    return PipelineOptions(args, save_main_session=False)
