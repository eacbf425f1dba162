"""parity: replay captured records through an offline and a production pipeline, fingerprint every stage,
and report the first stage where the two sides diverge."""
from __future__ import annotations

from typing import Any, Sequence

from parity.errors import ConfigError, InputError, ParityError, UserCodeError

__version__ = "0.1.0"
__all__ = ["check", "ConfigError", "InputError", "ParityError", "UserCodeError", "__version__"]


def check(config_path: str, *, out_dir: str | None = None, runner: str = "DirectRunner",
          pipeline_options: Sequence[str] | None = None, noise: bool | None = None,
          sides_at_once: str = "auto", force: bool = False) -> dict[str, Any]:
    """Replays both sides of a config, diffs them, writes the reports; returns report.json as a dict.

    `noise=True` also replays each side a second time to find nondeterministic stages (`--noise`).
    `sides_at_once` (auto, on, off): replay the second side in a child process meanwhile (`--sides-at-once`).
    `force=True` writes into an `out_dir` that is not empty and was not made by parity (`--force`).
    """
    from parity import run

    return run.check(config_path, out_dir=out_dir, runner=runner, pipeline_options=pipeline_options,
                     noise=noise, sides_at_once=sides_at_once, force=force)
