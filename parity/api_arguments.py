"""The Python API's arguments checked as the CLI's argparse checks its flags: a notebook user's `pathlib.Path`
is a path, and a wrong argument is a `ConfigError` naming it, never a bare TypeError deep inside a run nor the
SystemExit that would end the kernel."""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from parity.errors import ConfigError


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def path(value: Any, name: str, *, optional: bool = False) -> str | None:
    """`value` as a path string: a str or any os.PathLike (`pathlib.Path`); None when `optional`."""
    if value is None and optional:
        return None
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str) and text:
            return text
    raise ConfigError(f"parity.check: {name}: expected a path (a str or os.PathLike such as pathlib.Path"
                      f"{', or None' if optional else ''}), got {_shown(value)} ({type(value).__name__})")


def choice(value: Any, name: str, choices: Sequence[str]) -> str:
    if isinstance(value, str) and value in choices:
        return value
    raise ConfigError(f"parity.check: {name}: expected one of {', '.join(choices)}, got {_shown(value)}")


def flag(value: Any, name: str, *, optional: bool = False) -> bool | None:
    """A bool (never an int standing for one); None when `optional`."""
    if isinstance(value, bool) or (value is None and optional):
        return value
    raise ConfigError(f"parity.check: {name}: expected True or False{' or None' if optional else ''}, "
                      f"got {_shown(value)}")


def pipeline_options(value: Any) -> list[str] | None:
    """Beam pipeline options as a list of strings (as they would follow `--` on the command line), checked by
    Beam's parser here (`check_beam_args`), where Beam itself would print its usage and exit 2."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"parity.check: pipeline_options: expected a list of option strings such as "
                          f"['--direct_num_workers=2'], got {_shown(value)} ({type(value).__name__})")
    options = list(value)
    for index, option in enumerate(options):
        if not isinstance(option, str):
            raise ConfigError(f"parity.check: pipeline_options[{index}]: expected an option string such as "
                              f"'--direct_num_workers=2', got {_shown(option)} ({type(option).__name__})")
    from parity.replay.runners import check_beam_args

    try:
        check_beam_args(options)
    except ConfigError as exc:
        raise ConfigError(f"parity.check: pipeline_options: {str(exc).split(': ', 1)[-1]}") from None
    return options
