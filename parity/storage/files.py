"""The one atomic write: a file is written whole under its name or not at all.

Everything parity writes that a reader may open while it is written (reports, manifests, fingerprint and
value parts, tap settings, spilled batches, a side's result) goes through `replacing`: the bytes go to a new
temporary file beside the target, which then takes the target's name in one rename. A crash or a full disk
leaves the old file or none, never half of one; a retried bundle writing the same part replaces it whole.
The temporary file is always a new one (never a link's target), and the rename replaces a link at the
target's name rather than what it points to.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import stat
import threading
from typing import Iterator

__all__ = ["replacing", "special_kind", "sync_folder", "write_bytes", "write_text"]

_SPECIAL = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
            (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_kind(path: str) -> str | None:
    """What `path` is when it exists and is neither a regular file nor a folder ("a FIFO (named pipe)", "a
    character device", ...), else None. Asked before opening a file parity reads: opening a FIFO blocks until a
    writer comes, and reading a device may never end, so a run given one would hang until killed."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return next((kind for test, kind in _SPECIAL if test(mode)), None)


@contextlib.contextmanager
def replacing(path: str, durable: bool = True) -> Iterator[str]:
    """Yields a temporary path beside `path` for a writer that opens files by name (Parquet, Arrow IPC);
    renames it to `path` when the block ends, removes it when the block raises.

    The temporary name is the process's, the thread's and a random token's, so two writers of one path (two
    threads of an SDK harness, two processes on a shared folder) never write one temporary file. Its bytes
    reach the disk before the rename, and the rename before the call returns (`_durable`): after a crash a
    reader finds the old file or the whole new one, never a renamed file whose bytes were still in the page
    cache. `durable=False` leaves both to the kernel, for a file no run reads after a crash (a replay's
    spilled batches: the folder is removed when the replay starts and when it ends): the rename still makes
    it whole or absent to every reader while the machine runs.

    Example:
        with replacing(path) as temporary:
            pq.write_table(table, temporary)
    """
    while True:
        temporary = f"{path}.{os.getpid()}-{threading.get_ident():x}-{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            break
        except FileExistsError:  # the same token drawn twice: draw again
            continue
    os.close(fd)
    try:
        yield temporary
        if durable:
            _durable(temporary)
        os.replace(temporary, path)
        if durable:
            _durable(os.path.dirname(path) or ".")
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise


def _durable(path: str) -> None:
    """fsync of a file's bytes or of a folder's entries; a file system that cannot sync a folder (some network
    and FUSE mounts refuse) keeps what it promises without it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError:
        if not os.path.isdir(path):
            raise
    finally:
        os.close(fd)


def sync_folder(path: str) -> None:
    """fsync of every regular file directly in the folder `path`, then of the folder's entries: makes files that
    `replacing(durable=False)` wrote there as durable as `replacing` would have, in one pass once they are all
    written. A folder that does not exist has nothing to sync."""
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return
    for entry in entries:
        if entry.is_file(follow_symlinks=False):
            _durable(entry.path)
    _durable(path)


def write_bytes(path: str, data: bytes, durable: bool = True) -> None:
    """Writes `path` whole or not at all (`replacing`; `durable` as there)."""
    with replacing(path, durable=durable) as temporary, open(temporary, "wb") as handle:
        handle.write(data)


def write_text(path: str, text: str) -> None:
    """Writes `path` whole or not at all, as UTF-8 (`replacing`)."""
    with replacing(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
