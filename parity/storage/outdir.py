"""The `--out` folder: whose it is, who writes into it now, and what an earlier run left there.

Before a command writes anything into its output folder it `claim`s it:

- a folder that is not empty and was not made by parity (no `.parity-out` marker, and entries other than
  parity's own names) is refused unless the user passes `--force`: `--out /` or `--out ~` would otherwise
  get reports written into it and earlier ones removed from it;
- an exclusive lock (`.parity-lock`, flock) refuses a second run into the same folder while the first runs;
  the kernel drops it when the process ends, however it ends;
- the outputs of an earlier run that this command writes again (reports, `sides/`, `noise/`, a set's files)
  are removed first, so a run that fails or is interrupted never leaves an old verdict for CI to publish.
  A symbolic link among them is removed as a link (its target untouched), and parity only writes names it
  removed or created itself: nothing is written through a link someone planted in the folder.

An `--out` that is a URL Beam's FileSystems support (`s3://bucket/run`, `parity.storage.context`) is claimed the
same way but for the lock: an object store has no lock, so two runs into one URL at once are the user's to
avoid (give each run its own URL). The marker is an object (`.parity-out`), a prefix holding other objects is
refused unless `--force`, and the earlier outputs are removed by deleting every object under their names.

A run removes or overwrites only what parity wrote (`.parity-written` records the names each claim is for),
`--force` or not, and never takes an `--out` that holds one of its inputs (`parity.config.inputs`).

Captures never read parity's own output: the capture listing (`parity.storage.capture_listing`) leaves out the
files in a folder parity claimed (its marker) or in a fingerprint set (`parity.storage.marks`).
"""
from __future__ import annotations

import errno
import fcntl
import os
from typing import Iterable

from parity.errors import OutputError
from parity.storage import files, urls
from parity.storage.context import Storage
from parity.storage.marks import MARKER, has_marker as _has_marker

LOCK = ".parity-lock"
# the names parity has written into the folder, one a line: the only ones a later run removes or replaces
WRITTEN = ".parity-written"
REPORTS = ("report.json", "report.md", "report.html", "junit.xml")
TIMINGS = "timings.json"
# what `parity check` writes at the top of its folder (`sides/` and `noise/` hold fingerprint sets)
# the command line's logs of a run: a failure's traceback, and what the libraries printed (parity.cli)
ERROR_LOG = "parity-error.log"
LIBRARIES_LOG = "libraries.log"
LOGS = (ERROR_LOG, LIBRARIES_LOG)
# the engine diff's work folder (parity.compare.engine): its workers' summaries until the client has read them
DIFF_WORK = "_diff_work"
CHECK_OUTPUTS = (*REPORTS, TIMINGS, "sides", "noise", *LOGS, DIFF_WORK)
DIFF_OUTPUTS = (*REPORTS, DIFF_WORK)  # what `parity diff` writes
# what `parity replay` writes into a fingerprint set's folder
SET_OUTPUTS = ("manifest.json", "fingerprints.parquet", "fingerprints", "buckets.json", "quarantine.jsonl", "analyzers.json",
               "analyzer_feeds.json", TIMINGS, "values",
               "stage_values", "_parts", "_spill", "_tft_tmp", "tft_output", *LOGS)
_OWN = (MARKER, LOCK, WRITTEN)


class Claim:
    """A claimed output folder; `release()` (or leaving the `with` block) drops the lock (a URL has none)."""

    def __init__(self, path: str, fd: int | None):
        self.path = path
        self._fd: int | None = fd
        self._locked = fd is not None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor of the open file drops its flock
            self._fd = None

    @property
    def fd(self) -> int | None:
        """The lock's descriptor: a child process given it keeps the folder locked until it ends too. None for a
        URL, which has no lock."""
        assert self._fd is not None or not self._locked
        return self._fd

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *unused: object) -> None:
        self.release()


def claim(path: str, outputs: Iterable[str], *, known: Iterable[str] = (), force: bool = False,
          flag: str = "--out", inputs: Iterable[tuple[str, str]] = (), storage: Storage = Storage()) -> Claim:
    """Makes `path` this run's output folder: refuses another's folder (unless `force`), locks it, and removes
    the earlier outputs named in `outputs` (names directly in the folder). A folder without parity's marker
    counts as parity's when it holds nothing but `outputs` and `known` (names parity writes there that this
    command keeps, e.g. the fingerprint sets `parity diff` reads).

    Only what parity wrote there is removed or replaced, `force` or not: the names a claim is for are recorded
    in `.parity-written` (WRITTEN), and an output name in the folder that no record holds (a user's
    `report.json`) is refused, naming it. (A folder of an earlier release, without the record, counts as
    parity's when it holds parity's marker or parity's names only.) `inputs`, `(path, what)` of each file or
    folder the run reads: an `--out` holding one is refused, naming both (the run would remove or write beside
    its own inputs). `storage`: the run's storage context, for a URL.

    Raises:
        OutputError: the path is a file, another run holds the lock, the folder is not parity's and `force` is
            off, it holds an input of the run or a file of an output's name parity did not write, or the lock file
            is a link; the message names the folder and the way out.
    """
    outputs, known = tuple(outputs), tuple(known)
    if urls.is_url(path):
        return _claim_url(path, outputs, known, force, flag, tuple(inputs), storage)
    if os.path.lexists(path) and not os.path.isdir(path):
        raise OutputError(f"{flag} {path}: exists and is not a folder; give a folder (parity creates it when "
                          f"it is missing)")
    try:
        os.makedirs(path, exist_ok=True)
        entries = sorted(os.listdir(path))
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot create or list the folder: {exc.strerror or exc}") from exc
    ours = _has_marker(path) or all(name in (*_OWN, *outputs, *known) for name in entries)
    if not ours and not force:
        raise _foreign(flag, path, entries)
    _refuse_inputs(path, flag, inputs)
    written = _written(path, entries, ours, outputs, known)
    _refuse_unwritten(flag, path, [name for name in outputs if name in entries and name not in written])
    fd = _lock(path, flag)
    try:
        if ours and not _has_marker(path):
            storage.remove(os.path.join(path, MARKER))  # a link planted under the marker's name goes, as a link
            _write_marker(path)
        storage.remove(os.path.join(path, WRITTEN))  # as a link, if one was planted: rewritten below
        files.write_text(os.path.join(path, WRITTEN), "".join(f"{name}\n" for name in sorted({*written, *outputs})))
        for name in outputs:
            storage.remove(os.path.join(path, name))
    except OSError as exc:
        os.close(fd)
        raise OutputError(f"{flag} {path}: cannot prepare the folder: {exc.filename or path}: "
                          f"{exc.strerror or exc}") from exc
    except BaseException:
        os.close(fd)
        raise
    _CLAIMED.add(os.path.realpath(path))
    return Claim(path, fd)


def _claim_url(path: str, outputs: tuple[str, ...], known: tuple[str, ...], force: bool, flag: str,
               inputs: tuple[tuple[str, str], ...], storage: Storage) -> Claim:
    """`claim` of a URL: the same refusal, marker and removal of earlier outputs, without a lock."""
    try:
        if storage.isfile(path):
            raise OutputError(f"{flag} {path}: an object of that name exists, not a folder; give a folder URL "
                              f"(parity writes its files under it)")
        entries = storage.list_names(path)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot list the folder: {exc}; check the URL and the storage options "
                          f"(e.g. -- --s3_endpoint_url=...)") from exc
    ours = MARKER in entries or all(name in (*_OWN, *outputs, *known) for name in entries)
    if not ours and not force:
        raise _foreign(flag, path, entries)
    _refuse_inputs(path, flag, inputs)
    try:
        record = storage.read_bytes(urls.child(path, WRITTEN)).decode("utf-8") if WRITTEN in entries else None
    except (OSError, UnicodeDecodeError) as exc:
        raise OutputError(f"{flag} {path}: cannot read {WRITTEN}: {exc}") from exc
    written = _names_written(record, entries, ours, outputs, known)
    _refuse_unwritten(flag, path, [name for name in outputs if name in entries and name not in written])
    try:
        if MARKER not in entries and ours:
            storage.write_text(urls.child(path, MARKER), _MARKER_TEXT)
        storage.write_text(urls.child(path, WRITTEN), "".join(f"{name}\n" for name in sorted({*written, *outputs})))
        for name in outputs:
            storage.remove(urls.child(path, name))
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot prepare the folder: {exc}") from exc
    return Claim(path, None)


def _written(path: str, entries: list[str], ours: bool, outputs: tuple[str, ...], known: tuple[str, ...]) -> set[str]:
    """The names parity has written into the local folder `path` (`_names_written`)."""
    record = None
    written_path = os.path.join(path, WRITTEN)
    if WRITTEN in entries and os.path.isfile(written_path) and not os.path.islink(written_path):
        try:
            with open(written_path, encoding="utf-8") as handle:
                record = handle.read(1 << 20)
        except (OSError, UnicodeDecodeError):
            record = None
    return _names_written(record, entries, ours, outputs, known)


def _names_written(record: str | None, entries: list[str], ours: bool, outputs: tuple[str, ...],
                   known: tuple[str, ...]) -> set[str]:
    """The names of `.parity-written`'s record; without one (a folder an earlier release wrote), every
    output and known name in a folder that is parity's, and none in another's."""
    if record is not None:
        return {line for line in record.splitlines() if line}
    return {name for name in entries if name in (*outputs, *known)} if ours else set()


def _refuse_unwritten(flag: str, path: str, names: list[str]) -> None:
    if names:
        shown = ", ".join(names)
        raise OutputError(f"{flag} {path}: it holds {shown}, which parity did not write there and would replace; "
                          f"parity removes or overwrites only its own files, --force or not: move "
                          f"{'it' if len(names) == 1 else 'them'} away or give another {flag}")


def _refuse_inputs(path: str, flag: str, inputs: Iterable[tuple[str, str]]) -> None:
    """Refuses an output folder that holds (or is) a file or folder the run reads."""
    if urls.is_url(path):
        root = path.rstrip("/") + "/"
        held = [(item, what) for item, what in inputs if urls.is_url(item) and (item + "/").startswith(root)]
    else:
        root = os.path.realpath(path)
        held = [(item, what) for item, what in inputs if not urls.is_url(item)
                and os.path.commonpath([root, os.path.realpath(item)]) == root]
    if held:
        item, what = held[0]
        raise OutputError(f"{flag} {path}: it holds {item} ({what}), an input of this run; parity removes and "
                          f"writes files in its output folder, so it never takes one that holds the run's inputs: give an "
                          f"{flag} outside the folders of the config, the capture and the code it names")


def _foreign(flag: str, path: str, entries: list[str]) -> OutputError:
    """The refusal of a folder parity did not make and that is not empty, naming what it holds."""
    shown = ", ".join(entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
    return OutputError(
        f"{flag} {path}: the folder is not empty and was not made by parity (it holds {shown}); parity "
        f"removes its earlier outputs from the folder it writes to: give a new or empty folder, or pass "
        f"--force to write into this one")


_CLAIMED: set[str] = set()  # the folders this process claimed: its logs may go there, not into another run's


def is_claimed(path: str) -> bool:
    """Whether this process claimed `path` as its output folder (and it is still parity's): where its logs go.
    Never a URL: the command line's logs stay in the local temporary folder then (a log is written when a run
    fails, and the store may be why)."""
    if urls.is_url(path):
        return False
    return os.path.realpath(path) in _CLAIMED and os.path.isdir(path) and not os.path.islink(path) \
        and _has_marker(path)


def _write_marker(path: str) -> None:
    fd = os.open(os.path.join(path, MARKER), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(_MARKER_TEXT)


_MARKER_TEXT = "made by parity: its output folder (reports, fingerprint sets); parity may remove what is in it\n"


def _lock(path: str, flag: str) -> int:
    lock_path = os.path.join(path, LOCK)
    if os.path.islink(lock_path):  # planted: parity only ever makes a plain file there, never removed
        os.unlink(lock_path)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputError(f"{flag} {path}: {LOCK} is a symbolic link; parity never writes through a link: "
                              f"remove it") from exc
        raise OutputError(f"{flag} {path}: cannot create the lock file {lock_path}: {exc.strerror}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise OutputError(f"{flag} {path}: another parity run{who} is writing into this folder; wait for it "
                              f"to end or give another {flag}") from exc
        raise OutputError(f"{flag} {path}: cannot lock {lock_path}: {exc.strerror}") from exc
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
    return fd
