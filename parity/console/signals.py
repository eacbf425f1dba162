"""Signals: SIGINT and SIGTERM end a run the same way, and parity's child processes end with their parent.

The CLI handles SIGINT (Ctrl-C) and SIGTERM (CI cancelling a job, `kill`, a container stopping) alike: both
raise `Interrupted`, a KeyboardInterrupt, wherever the main thread is; the `finally` blocks on the way out
stop child processes and release the output folder; the CLI prints one line and exits 130 (SIGINT) or 143
(SIGTERM, 128 + 15 as a shell reports it). A Beam step turns a KeyboardInterrupt raised inside it into a
`RuntimeError: KeyboardInterrupt [while running ...]`; `raise_if_interrupted` turns it back, so an interrupted
replay is never reported as a failed one (exit 2).

A child process (the second side of `--sides-at-once`, the diff's second half, a noise replay; started with
`parity.console.children.environment`) calls `follow_parent_from_env` first:
it then ends as soon as its parent does, even when the parent is killed with SIGKILL and runs no cleanup
(on Linux the kernel kills it, PR_SET_PDEATHSIG; everywhere a thread watches the parent's pid), so that it
never goes on writing into an output folder that a new run may be using.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
import time
from typing import Iterator

EXIT_INTERRUPTED = 130  # SIGINT: 128 + 2
EXIT_TERMINATED = 143   # SIGTERM: 128 + 15
PARENT_ENV = "PARITY_PARENT_PID"
_HANDLED = (signal.SIGINT, signal.SIGTERM)
_WATCH_SECONDS = 0.2    # how often the watch thread looks at the parent pid (where prctl is missing)
_received: int | None = None


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived. Its first argument is a message (Beam appends the step to it when the signal
    lands in a step, and rebuilds the exception from its arguments), the second the signal number."""

    def __init__(self, message: str = "SIGINT", signum: int = signal.SIGINT):
        super().__init__(message, int(signum))

    @property
    def signum(self) -> int:
        return self.args[1] if len(self.args) > 1 else signal.SIGINT


_held: list[int] | None = None  # inside `deferred`: the signals that arrived, raised when it ends


def _handler(signum: int, unused_frame: object) -> None:
    global _received
    _received = signum
    # Beam logs the interrupted step's exception with its traceback as an error; after a signal nothing
    # that follows is news (the CLI prints the one line that is)
    logging.disable(logging.CRITICAL)
    if _held is not None:
        _held.append(signum)
        return
    raise Interrupted(signal.Signals(signum).name, signum)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """SIGINT and SIGTERM arriving inside the block are held until it ends, then raised as `Interrupted` (unless
    the block raised already): a job's cancel, which waits a bounded time for Flink to confirm it, is not cut
    short by a second stop (a second Ctrl-C, or the parent's SIGTERM to a child cancelling its own job), which
    would leave the job running. Nested, the outer block holds them."""
    global _held
    if _held is not None:
        yield
        return
    _held = []
    try:
        yield
    finally:
        held, _held = _held, None
    if held:
        raise Interrupted(signal.Signals(held[0]).name, held[0])


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM raise `Interrupted` inside the block (the CLI's run). A signal the process inherited
    as ignored stays ignored (`nohup`, a background job of a non-interactive shell); previous handlers are
    restored after the block."""
    global _received
    _received = None
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; a caller on another thread keeps its own
        return
    previous = {signum: signal.getsignal(signum) for signum in _HANDLED}
    for signum, current in previous.items():
        if current is not signal.SIG_IGN:
            signal.signal(signum, _handler)
    try:
        yield
    finally:
        for signum, current in previous.items():
            if current is not signal.SIG_IGN and current is not None:
                signal.signal(signum, current)
        if _received is not None:
            logging.disable(logging.NOTSET)


def received() -> int | None:
    """The signal that arrived during the CLI's run (SIGINT or SIGTERM), or None."""
    return _received


def interruption(exc: BaseException) -> int | None:
    """The signal behind `exc`: the one received, else the one of a KeyboardInterrupt in its chain (Beam
    wraps one raised in a step), else None."""
    if _received is not None:
        return _received
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return getattr(current, "signum", signal.SIGINT)
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def raise_if_interrupted(exc: BaseException) -> None:
    """Raises `Interrupted` from `exc` when `exc` is what became of an interruption."""
    signum = interruption(exc)
    if signum is not None:
        raise Interrupted(signal.Signals(signum).name, signum) from exc


def exit_code(signum: int | None) -> int:
    return EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED


def message(signum: int | None) -> str:
    if signum == signal.SIGTERM:
        return "parity: terminated (SIGTERM)"
    return "parity: interrupted"


# ------------------------------------------------------------------------------------------ child processes

def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) for a child that must end with this process."""
    env = dict(os.environ if env is None else env)
    env[PARENT_ENV] = str(os.getpid())
    return env


def follow_parent_from_env() -> None:
    """In a child started with `child_env`: end this process when its parent ends (see `follow_parent`).
    The variable is removed, so that processes this one starts do not follow the wrong parent."""
    value = os.environ.pop(PARENT_ENV, "")
    if value.isdigit():
        follow_parent(int(value))


def follow_parent(parent_pid: int) -> None:
    """Ends this process with SIGKILL as soon as the process that started it ends (`parent_pid`, or a launcher
    between the two, such as a wrapper script of the interpreter that does not exec)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass  # the watch thread below still ends this process
    parent = os.getppid()
    if parent != parent_pid and not _exists(parent_pid):  # it ended before the lines above took effect
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=_watch, args=(parent,), name="parity-parent-watch", daemon=True).start()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(parent_pid: int) -> None:
    while True:
        time.sleep(_WATCH_SECONDS)
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)
