"""parity: replay captured records through an offline and a production pipeline, fingerprint every stage,
and report the first stage where the two sides diverge."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from parity.errors import ConfigError, InputError, ParityError, UserCodeError
from parity.version import __version__

if TYPE_CHECKING:
    from parity.report.result import Report

__all__ = ["check", "ConfigError", "InputError", "ParityError", "Report", "UserCodeError", "__version__"]


def check(config_path: str, *, out_dir: str | None = None, runner: str = "DirectRunner",
          pipeline_options: Sequence[str] | None = None, noise: bool | None = None,
          sides_at_once: str = "auto", force: bool = False) -> Report:
    """Replays both sides of a config, diffs them, writes the reports; returns report.json as a `Report`: a
    dict (`report["verdict"]`) with `summary()`, `causes`, `examples`, and an HTML view in Jupyter.

    `noise=True` also replays each side a second time to find nondeterministic stages (`--noise`).
    `sides_at_once` (auto, on, off): replay the second side in a child process meanwhile (`--sides-at-once`).
    `force=True` writes into an `out_dir` that is not empty and was not made by parity (`--force`).
    """
    from parity import commands as run
    from parity.report.result import Report

    report = run.check(config_path, out_dir=out_dir, runner=runner, pipeline_options=pipeline_options,
                       noise=noise, sides_at_once=sides_at_once, force=force)
    return Report(report, out_dir=out_dir or "parity-out")  # run.check's default folder


def __getattr__(name: str) -> Any:
    # `parity.Report` on first use: `import parity` (and the taps in a production job) stays free of the
    # report renderers and their template engine
    if name == "Report":
        from parity.report.result import Report

        return Report
    raise AttributeError(f"module 'parity' has no attribute {name!r}")
