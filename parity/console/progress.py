"""Progress on stderr: a live line on a terminal, quiet structured lines otherwise.

The CLI turns it on (`PARITY_PROGRESS=tty` or `log`); library calls stay silent unless the variable is set.
Replay batches report records read from inside the DoFn, which runs in this process on the DirectRunner
and with Flink's LOOPBACK environment.
"""
from __future__ import annotations

import os
import sys
import time

from parity.console import terminal

_STARTED = time.monotonic()
_READ: dict[str, int] = {}


def mode() -> str:
    return os.environ.get("PARITY_PROGRESS", "")


def enable_for_cli() -> None:
    """tty when stderr is a terminal, else log; an explicit PARITY_PROGRESS (e.g. 'off') wins."""
    os.environ.setdefault("PARITY_PROGRESS", "tty" if sys.stderr.isatty() else "log")


def _elapsed() -> str:
    return f"{time.monotonic() - _STARTED:.1f}s"


def event(name: str, **fields: object) -> None:
    """A phase boundary: `replay_start`, `replay_done`, `diff_done`, ..."""
    current = mode()
    out = terminal.stream()
    if current == "log":
        pairs = " ".join(f"{k}={v}" for k, v in fields.items())
        out.write(f"parity: event={name} {pairs} elapsed={_elapsed()}\n")
    elif current == "tty":
        pairs = ", ".join(f"{k} {v}" for k, v in fields.items())
        out.write(f"\r\x1b[K[parity {_elapsed()}] {name.replace('_', ' ')}: {pairs}\n")
    out.flush()


def records_read(side: str, count: int) -> None:
    """Called per batch while reading; draws a live counter on a terminal only."""
    if mode() != "tty":
        return
    _READ[side] = _READ.get(side, 0) + count
    out = terminal.stream()
    out.write(f"\r\x1b[K[parity {_elapsed()}] replaying {side}: {_READ[side]} records read")
    out.flush()
