"""The files a capture path names (`capture.path`: a file, a folder or a glob, local or a URL), for
`parity.capture.list_capture_files`.

A local path is listed with `glob.glob` and `os.listdir` (a FIFO or a device among the files is refused before
anything opens it, since it would block); a URL through the store's listings (`Storage.isfile`, `list_folder`,
`list_tree`: the `Listing` it is given), whose glob follows `glob.glob`'s rules (`urls.glob_matches`) over one
listing of the glob's fixed folder. Either way hidden names are not matched by a wildcard, and the files under a
folder parity claimed as its output or under a fingerprint set (`parity.storage.marks.is_parity_folder`, one rule
for both) are left out: `**/*.jsonl` with `--out` under the config's folder read an earlier side's
quarantine.jsonl, and the counts changed with every run.
"""
from __future__ import annotations

import glob
import os
from typing import Protocol

from parity.errors import InputError
from parity.storage import urls
from parity.storage.files import special_kind
from parity.storage.marks import is_parity_folder, local_holds


class Listing(Protocol):
    """The listings of a store that a URL capture path is listed with (`Storage`'s)."""

    def isfile(self, path: str) -> bool: ...

    def list_folder(self, path: str) -> list[str]: ...

    def list_tree(self, path: str) -> list[str]: ...


def capture_files(pattern: str, base_dir: str, listing: Listing) -> list[str]:
    """The files a capture `path` names, sorted.

    Args:
        pattern: a file, a folder (its files, not its subfolders nor hidden files: an ExampleGen split such as
            `Split-train/`) or a glob (`**` allowed), relative to `base_dir` unless absolute.
        base_dir: the folder of the config file.
        listing: the store's listings, for a URL (the run's `Storage`).

    Raises:
        InputError: nothing matches; the message names the pattern.
    """
    pattern = urls.resolved(pattern, "capture path")  # file:///x is /x; a scheme Beam lacks: refused
    if urls.is_url(pattern):
        return _url_files(pattern, listing)
    return _local_files(pattern, base_dir)


def _local_files(pattern: str, base_dir: str) -> list[str]:
    full = os.path.normpath(os.path.join(base_dir, os.path.expanduser(pattern)))
    _refuse_special(full, pattern)
    if os.path.isfile(full):  # a literal name wins, even when it holds glob characters such as `[`
        return [full]
    if os.path.isdir(full):  # e.g. an ExampleGen split, `Split-train/`: its shards
        names = [os.path.join(full, name) for name in os.listdir(full) if not name.startswith(".")]
        for name in names:
            _refuse_special(name, pattern)
        files = sorted(name for name in names if os.path.isfile(name))
        if files:
            return files
        raise InputError(f"capture path {pattern!r} ({full}) is a folder with no files; give a folder of "
                         f"captured files (e.g. an ExampleGen split such as Split-train/), a file or a glob")
    if any(char in full for char in "*?["):
        matched = glob.glob(full, recursive=True)
        for name in matched:
            _refuse_special(name, pattern)
        found = sorted(p for p in matched if os.path.isfile(p))
        # never parity's own output (an earlier side's quarantine.jsonl, a report): `**/*.jsonl` with --out
        # under the config's folder read it, and the counts changed with every run
        fixed = _fixed_folder(full)
        matches = [p for p in found if not is_parity_output(p, stop=fixed)]
        if matches:
            return matches
        left_out = f"; {len(found)} file(s) in parity's output folders were left out, e.g. {found[0]}" if found else ""
        raise InputError(f"capture path {pattern!r} matches no file (looked for {full}{left_out}); check "
                         f"capture.path (a relative path starts at the config file's folder, {base_dir})")
    raise InputError(f"capture path {pattern!r} does not exist (looked for {full}); check capture.path "
                     f"(a relative path starts at the config file's folder, {base_dir})")


def _refuse_special(path: str, pattern: str) -> None:
    """Refuses a FIFO, device or socket among the capture files before anything opens it (it would block)."""
    special = special_kind(path)
    if special is not None:
        raise InputError(f"capture path {pattern!r}: {path} is {special}, not a regular file; parity reads capture "
                         f"files (opening this would wait for a writer): copy the records to a file and name it in "
                         f"capture.path")


def is_parity_output(path: str, stop: str = os.sep) -> bool:
    """Whether the local file `path` lies in a folder parity claimed (its marker) or in a fingerprint set,
    looking at its folders up to `stop` (the capture pattern's fixed part, included)."""
    stop = os.path.abspath(stop)
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        if is_parity_folder(local_holds(folder)):
            return True
        if folder == stop or os.path.dirname(folder) == folder:
            return False
        folder = os.path.dirname(folder)


def _url_files(pattern: str, listing: Listing) -> list[str]:
    """`capture_files` for a URL (`s3://bucket/capture/*.jsonl`), through the store's listings."""
    try:
        if listing.isfile(pattern):
            return [pattern]
        if any(char in pattern for char in "*?["):
            fixed = urls.glob_prefix(pattern)
            names = listing.list_tree(fixed)  # the matches, and the marks of parity's folders among them
            files = urls.glob_matches(pattern, names)
            found = len(files)
            # never parity's own output (an out URL under the glob's folder), as on disk
            files = _not_parity_output(files, set(names), fixed)
        else:
            files = listing.list_folder(pattern)
            found = len(files)
    except OSError as exc:
        raise InputError(f"capture path {pattern!r} cannot be listed: {exc}") from exc
    if files:
        return files
    if found:
        raise InputError(f"capture path {pattern!r} matches only files in parity's output folders or fingerprint "
                         f"sets ({found}); check capture.path")
    raise InputError(f"capture path {pattern!r} matches no file; check capture.path and the storage options "
                     f"(e.g. -- --s3_endpoint_url=...)")


def _not_parity_output(files: list[str], names: set[str], fixed: str) -> list[str]:
    """The URLs of `files` outside parity's output folders and fingerprint sets below `fixed`
    (`parity.storage.marks.is_parity_folder`, the local listing's rule), from `names`, every object under `fixed`."""

    def ours(folder: str) -> bool:
        return is_parity_folder(lambda name: f"{folder}/{name}" in names)

    kept = []
    for path in files:
        folder = urls.parent(path)
        while len(folder) + 1 >= len(fixed) and not ours(folder):
            folder = urls.parent(folder)
        if len(folder) + 1 < len(fixed):
            kept.append(path)
    return kept


def _fixed_folder(pattern: str) -> str:
    """The deepest folder of a glob pattern that holds no glob character."""
    parts = pattern.split(os.sep)
    index = next(i for i, part in enumerate(parts) if any(char in part for char in "*?["))
    return os.sep.join(parts[:index]) or os.sep
