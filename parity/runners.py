"""Beam runners by name, with options that never reach the internet.

`DirectRunner` means Beam's in-process FnApiRunner: Beam 2.77's DirectRunner would first try to download
the Prism runner binary. `--direct_num_workers` and `--direct_running_mode` are honoured by FnApiRunner.
"""
from __future__ import annotations

from typing import Any, Sequence

from apache_beam.options.pipeline_options import PipelineOptions

from parity.errors import ConfigError

RUNNERS = ("DirectRunner", "FlinkRunner")


def make_runner(name: str) -> Any:
    if name == "DirectRunner":
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        return FnApiRunner()
    if name == "FlinkRunner":
        from apache_beam.runners.portability.flink_runner import FlinkRunner

        return FlinkRunner()
    raise ConfigError(f"--runner: unknown runner {name!r}; expected one of {', '.join(RUNNERS)}")


def make_options(runner: str, beam_args: Sequence[str] | None) -> PipelineOptions:
    args = list(beam_args or [])
    if runner == "FlinkRunner":
        from parity.flink import flink_defaults

        args = flink_defaults(args)
    return PipelineOptions(args, save_main_session=False)
