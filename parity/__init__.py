"""parity: replay captured records through an offline and a production pipeline, fingerprint every stage,
and report the first stage where the two sides diverge."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

from parity.errors import ConfigError, InputError, ParityError, UserCodeError
from parity.version import __version__

if TYPE_CHECKING:
    from parity.report.result import Report

__all__ = ["check", "ConfigError", "InputError", "ParityError", "Report", "UserCodeError", "__version__"]


def check(config_path: str | os.PathLike, *, out_dir: str | os.PathLike | None = None,
          runner: str = "DirectRunner", pipeline_options: Sequence[str] | None = None, noise: bool | None = None,
          sides_at_once: str = "auto", force: bool = False, diff_on: str = "auto") -> Report:
    """Replays both sides of a config, diffs them, writes the reports; returns report.json as a `Report`: a
    dict (`report["verdict"]`) with `summary()`, `causes`, `examples`, and an HTML view in Jupyter.

    Paths are str or os.PathLike (`pathlib.Path`). `pipeline_options`: Beam options as a list of strings, as
    they would follow `--` on the command line (`["--direct_num_workers=2"]`).
    `noise=True` also replays each side a second time to find nondeterministic stages (`--noise`).
    `sides_at_once` (auto, on, off): replay the second side in a child process meanwhile (`--sides-at-once`).
    `force=True` writes into an `out_dir` that is not empty and was not made by parity (`--force`).
    `diff_on` (auto, engine, local): where the diff's per-pair work runs (`--diff-on`; auto: as a Beam job on the
    runner when it is not the DirectRunner or `out_dir` is a URL, else in this process). The report is the same.

    Raises:
        ConfigError: a bad argument (named), a bad config. Every failure is a `ParityError`, never SystemExit:
            a notebook's kernel survives it.
    """
    from parity import api_arguments as arg
    from parity.replay.runners import RUNNERS

    config_path = arg.path(config_path, "config_path")
    out_dir = arg.path(out_dir, "out_dir", optional=True)
    runner = arg.choice(runner, "runner", RUNNERS)
    noise = arg.flag(noise, "noise", optional=True)
    sides_at_once = arg.choice(sides_at_once, "sides_at_once", ("auto", "on", "off"))
    force = arg.flag(force, "force")
    from parity.choices import DIFF_ON

    diff_on = arg.choice(diff_on, "diff_on", DIFF_ON)
    pipeline_options = arg.pipeline_options(pipeline_options)

    from parity import commands as run
    from parity.errors import RunnerError
    from parity.report.result import Report

    try:
        report = run.check(config_path, out_dir=out_dir, runner=runner, pipeline_options=pipeline_options,
                           noise=noise, sides_at_once=sides_at_once, force=force, diff_on=diff_on)
    except SystemExit as exc:  # whatever library exits: the caller's process (a notebook kernel) goes on
        raise RunnerError(f"parity.check: the run called sys.exit({exc.code!r}); no verdict") from exc
    return Report(report, out_dir=out_dir or "parity-out")  # run.check's default folder


def __getattr__(name: str) -> Any:
    # `parity.Report` on first use: `import parity` (and the taps in a production job) stays free of the
    # report renderers and their template engine
    if name == "Report":
        from parity.report.result import Report

        return Report
    raise AttributeError(f"module 'parity' has no attribute {name!r}")
