"""One exception tree for parity; each exception carries its process exit code."""
from __future__ import annotations

import pickle
import re


class ParityError(Exception):
    """Base of every error parity raises on purpose; `exit_code` is the process exit code."""

    exit_code = 2


class ConfigError(ParityError):
    """The config file is invalid: the message names file, field path, bad value and what is accepted."""


class InputError(ParityError):
    """Input files are missing or unreadable as a whole."""


class UserCodeError(ParityError):
    """A module:attr reference failed to import, or user code raised."""


class UnimportableCode(UserCodeError):
    """A module:attr reference that cannot be imported where it runs: the same code fails the same way on every
    attempt of a job, so a runner's restart only repeats it (`parity.replay.watch.FINAL`)."""


class FingerprintSetError(ParityError):
    """A fingerprint set is missing, malformed, or incompatible with the other side."""


class RunnerError(ParityError):
    """The Beam runner could not be set up or the job failed for a reason outside user code."""


class OutputError(ParityError):
    """The output folder cannot be used: another's folder (without --force), locked by another run, a file."""


def first_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message as one line of a `parity: error:` message: its first line without the
    `[while running '...']` Beam appends inside a step (its type's name when it says nothing), at most `limit`
    characters."""
    text = str(exc).split(" [while running", 1)[0].strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= limit else line[:limit - 3] + "..."


def portable(exc: BaseException) -> BaseException:
    """The exception itself when it pickles back whole (a child process sends it to its parent), else a
    RunnerError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return RunnerError(f"{type(exc).__name__}: {exc}")


# The errors a worker's traceback text is searched for (`from_worker_text`)
_TEXT_KINDS = {cls.__name__: cls for cls in (UnimportableCode, UserCodeError, ConfigError, InputError,
                                             FingerprintSetError)}
# a kind's name as a whole word, alone or after its module's dotted name, then its message
_NAMED = re.compile(r"(?<![\w.])(?:\w+\.)*(" + "|".join(_TEXT_KINDS) + r"): ")


def from_worker_text(text: str) -> ParityError | None:
    """The ParityError named last in a worker's traceback text (a multi-process runner, or Flink's job exception,
    sends a step's error as text), rebuilt with its message's first line; None when it names none. A class whose
    name merely ends like one (botocore's `InvalidConfigError`) is not one."""
    found = list(_NAMED.finditer(text))
    if not found:
        return None
    last = found[-1]
    message = text[last.end():].split("\n")[0].strip()
    return _TEXT_KINDS[last.group(1)](without_beam_suffix(message))


def without_beam_suffix(message: str) -> str:
    """The message without the ` [while running 'Replay[x]/Step']` Beam appends to errors raised in a DoFn."""
    return message.split(" [while running", 1)[0].split("[while running", 1)[0].strip()
