"""Progress on stderr: a live line on a terminal, quiet structured lines otherwise.

The CLI turns it on (`PARITY_PROGRESS=tty` or `log`); library calls stay silent unless the variable is set.
A replay's counts (records read, quarantined, staged, written) are Beam counters that its steps keep where they
run; the client reads them from the runner (`parity.replay.watch`) and hands them to `counts`. Where the steps
run in this process (the DirectRunner, Flink's LOOPBACK environment) they also `tally` here, for a line that
moves between the runner's reports (the DirectRunner reports its metrics only once the job has ended): each
count shown is the larger of the two, and the runner's final totals end the line.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Mapping

from parity.console import terminal

_STARTED = time.monotonic()
_TALLY: dict[str, dict[str, int]] = {}  # side -> what this process's steps counted
_REPORTED: dict[str, dict[str, int]] = {}  # side -> what the runner last reported
_LOCK = threading.Lock()  # steps tally from the runner's threads, the watch reports from its own
# the counts a line shows, in order, with their words (names as in parity.replay.counters)
_WORDS = (("records_read", "records read"), ("quarantined", "quarantined"), ("records_staged", "staged"),
          ("records_written", "written"))


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


def line(side: str, counts: Mapping[str, int]) -> str:
    """The progress line of a side's counts (pure): `replaying offline: 240 records read, 240 staged, 240
    written`; quarantined records only when there are some."""
    parts = [f"{counts.get(name, 0)} {words}" for name, words in _WORDS
             if name != "quarantined" or counts.get(name, 0)]
    return f"replaying {side}: " + ", ".join(parts)


def begin(side: str) -> None:
    """A side's replay starts: nothing counted yet."""
    with _LOCK:
        _TALLY.pop(side, None)
        _REPORTED.pop(side, None)


def tally(side: str, what: str, count: int) -> None:
    """A step in this process counted `count` more (once per batch); redraws the live line on a terminal."""
    if mode() != "tty" or not count:
        return
    with _LOCK:  # the drawing too: steps on several threads, and the watch, draw the same line
        mine = _TALLY.setdefault(side, {})
        mine[what] = mine.get(what, 0) + count
        _draw(side, _shown(side))


def counts(side: str, reported: Mapping[str, int], *, final: bool = False) -> None:
    """The runner's counts for a side (`parity.replay.watch`): redraws the live line on a terminal, writes a
    structured `progress` line otherwise when they changed. `final`: the job has ended; the tally starts again
    for the next replay and a log gets no line (`replay_done` follows with the totals)."""
    current = mode()
    if current not in ("tty", "log"):
        return
    with _LOCK:
        changed = dict(reported) != _REPORTED.get(side)
        _REPORTED[side] = dict(reported)
        shown = _shown(side) if not final else dict(reported)
        if final:
            _TALLY.pop(side, None)
            _REPORTED.pop(side, None)
        if current == "tty":
            _draw(side, shown)
    if current == "log" and changed and not final and any(shown.values()):
        event("progress", side=side, **{name.removeprefix("records_"): shown.get(name, 0) for name, _ in _WORDS})


def _shown(side: str) -> dict[str, int]:
    mine, theirs = _TALLY.get(side, {}), _REPORTED.get(side, {})
    return {name: max(mine.get(name, 0), theirs.get(name, 0)) for name, _ in _WORDS}


def _draw(side: str, shown: Mapping[str, int]) -> None:
    out = terminal.stream()
    out.write(f"\r\x1b[K[parity {_elapsed()}] {line(side, shown)}")
    out.flush()
