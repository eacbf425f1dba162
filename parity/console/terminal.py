"""What reaches the user's terminal: parity's own lines, and none of the libraries' logs.

TensorFlow's C++ runtime and absl write to file descriptor 2 directly (oneDNN and CUDA notices, `cuInit`), some
before any Python logging setting can apply, and Python libraries log through handlers bound to `sys.stderr`.
While a command runs, `libraries_to(log)` points descriptor 2 and `sys.stderr` at a log file, and parity writes
its own progress, summary and errors to `stream()`: the terminal (or whatever `sys.stderr` was, such as a test's
capture). A child process that replays a side gets the terminal's descriptor through `TERMINAL_FD_ENV`.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import IO, Iterator

TERMINAL_FD_ENV = "PARITY_TERMINAL_FD"
_terminal: IO[str] | None = None


def stream() -> IO[str]:
    """Where parity's own lines go: the terminal while the libraries' go to a log, else `sys.stderr`."""
    return _terminal if _terminal is not None else sys.stderr


def terminal_fd() -> int | None:
    """The descriptor of the terminal stream while the libraries' output is diverted (for a child), or None."""
    if _terminal is None:
        return None
    try:
        return _terminal.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def quiet_libraries() -> None:
    """At the default verbosity the libraries say nothing on the terminal (what they still say goes to the
    run's libraries.log, `libraries_to`); a DoFn's exception is logged by Beam as it unwinds, and parity reports
    it once itself."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import logging

    logging.getLogger("absl").setLevel(logging.ERROR)
    logging.getLogger("apache_beam").setLevel(logging.CRITICAL)


def adopt_terminal_from_env() -> None:
    """In a child process: parity's own lines go to the descriptor the parent passed (`TERMINAL_FD_ENV`)."""
    global _terminal
    fd = os.environ.get(TERMINAL_FD_ENV, "")
    if fd.isdigit():
        try:
            _terminal = io.TextIOWrapper(os.fdopen(int(fd), "wb", buffering=0), encoding="utf-8",
                                         errors="backslashreplace", write_through=True)
        except OSError:
            _terminal = None


@contextlib.contextmanager
def libraries_to(log_path: str) -> Iterator[None]:
    """Sends descriptor 2 and `sys.stderr` to `log_path` (appended) for the block; parity's lines go on to
    `stream()`. Both are restored afterwards, whatever happens."""
    global _terminal
    sys.stderr.flush()
    previous_stderr, previous_terminal = sys.stderr, _terminal
    saved_fd = os.dup(2)
    try:
        if _uses_fd2(previous_stderr):  # the real stderr: keep writing to what descriptor 2 was
            _terminal = io.TextIOWrapper(os.fdopen(os.dup(saved_fd), "wb", buffering=0), encoding="utf-8",
                                         errors="backslashreplace", write_through=True)
        else:  # a capture (tests) or another stream: parity's lines go there as before
            _terminal = previous_stderr
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0, closefd=False), encoding="utf-8",
                                      errors="backslashreplace", write_through=True)
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(saved_fd, 2)
        os.close(saved_fd)
        if _terminal is not previous_stderr and _terminal is not None:
            with contextlib.suppress(Exception):
                _terminal.flush()
                _terminal.close()
        sys.stderr, _terminal = previous_stderr, previous_terminal


@contextlib.contextmanager
def user_output_to_stderr() -> Iterator[None]:
    """For the block, what user code prints (`print()` in a transform, a worker process writing to its
    descriptor 1) goes where the libraries' output goes: `sys.stderr` and descriptor 2 (the run's libraries
    log, or the terminal's stderr with -v). Stdout then holds parity's summary alone, which scripts parse."""
    sys.stdout.flush()
    previous = sys.stdout
    saved = os.dup(1) if _uses_fd(previous, 1) else None
    try:
        if saved is not None:  # the real stdout: child and worker processes inherit descriptor 1 too
            sys.stderr.flush()
            os.dup2(2, 1)
            sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0, closefd=False), encoding="utf-8",
                                          errors="backslashreplace", write_through=True)
        else:  # a capture (tests) or another stream
            sys.stdout = sys.stderr
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)
        sys.stdout = previous


def _uses_fd2(handle: IO[str]) -> bool:
    return _uses_fd(handle, 2)


def _uses_fd(handle: IO[str], fd: int) -> bool:
    try:
        return handle.fileno() == fd
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False
