"""Paths that may be URLs: the pure helpers every module that names a file uses (`child`, `join`, `is_url`,
`parent`, `basename`, `scheme`, the glob helpers), and `resolved`, which checks that a URL's scheme is served.

They read and write nothing (but `makedirs`, which makes a local folder and needs no options): reading and
writing, local or on a store, goes through a storage context (`parity.storage.context.Storage`), which carries
the run's pipeline options for the stores' credentials and endpoints.
"""
from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from typing import Any, Iterable

from parity.errors import InputError

__all__ = ["basename", "child", "filesystem_class", "glob_matches", "glob_prefix", "glob_regex", "is_url", "join",
           "makedirs", "parent", "resolved", "scheme"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GLOB = "*?["


def is_url(path: str) -> bool:
    """Whether `path` names a file through a filesystem scheme (`s3://b/k`), not a local path."""
    return bool(_SCHEME.match(path)) and not path.startswith("file://")


def resolved(path: str, what: str) -> str:
    """`path` as parity uses it: a `file://` URL as the local path it names (`file:///data/run` ->
    `/data/run`; before, a local folder named `file:` was made), another URL as it is when Beam's FileSystems
    know its scheme, and a local path as it is.

    Raises:
        InputError: a URL of a scheme no installed Beam file system serves (`foo://x`, or `gs://` without
            `apache-beam[gcp]`), or a `file://` URL that names no absolute path; `what` (`--out`, `capture
            path`) starts the message.
    """
    if path.startswith("file://"):
        rest = path[len("file://"):]
        if rest.startswith("localhost/"):
            rest = rest[len("localhost"):]
        if not rest.startswith("/"):
            raise InputError(f"{what} {path}: a file:// URL names an absolute local path, e.g. file:///data/run "
                             f"(three slashes); give that, or the path itself")
        from urllib.parse import unquote

        return unquote(rest)
    if not is_url(path):
        return path
    if filesystem_class(scheme(path)) is None:
        known = sorted(f"{fs.scheme()}://" for fs in _filesystem_classes() if fs.scheme())
        raise InputError(f"{what} {path}: no file system serves the scheme {scheme(path)}://; the installed Beam "
                         f"serves {', '.join(known)} and local paths (or file:///...): check the URL, or install "
                         f"the Beam extra for that store (e.g. apache-beam[gcp] for gs://)")
    return path


def join(base: str, *parts: str) -> str:
    """`base` joined with `parts`; an absolute path or a URL among `parts` starts again from there, as
    os.path.join does. Local results are normalized; URLs keep their `/`."""
    path = base
    for part in parts:
        if is_url(part) or os.path.isabs(part):
            path = part
        elif is_url(path):
            path = path.rstrip("/") + "/" + part
        else:
            path = os.path.join(path, part)
    return path if is_url(path) else os.path.normpath(path)


def child(folder: str, *names: str) -> str:
    """A name under `folder`: os.path.join locally (unnormalized), `/`-joined on
    a URL."""
    if not is_url(folder):
        return os.path.join(folder, *names)
    return "/".join((folder.rstrip("/"), *names))


def _filesystem_classes() -> list[Any]:
    from apache_beam.io import filesystems  # noqa: F401  (imports the file systems the installed extras provide)
    from apache_beam.io.filesystem import FileSystem

    return FileSystem.get_all_subclasses()


def filesystem_class(name: str) -> Any:
    """Beam's file system class for the scheme `name` (`s3`), or None when no installed one serves it."""
    found = [fs for fs in _filesystem_classes() if fs.scheme() == name]
    return found[0] if len(found) == 1 else None


def scheme(path: str) -> str:
    """`s3` of `s3://b/k`; `` for a local path."""
    return path.split("://", 1)[0].lower() if is_url(path) else ""


def glob_prefix(pattern: str) -> str:
    """The part of a glob before its first wildcard, cut back to a `/`: what every match starts with
    (`s3://b/runs/*/x.parquet` -> `s3://b/runs/`)."""
    fixed = pattern[:min((pattern.index(c) for c in _GLOB if c in pattern), default=len(pattern))]
    return fixed[:fixed.rfind("/") + 1]


def glob_regex(pattern: str) -> re.Pattern:
    """A glob as a regular expression over whole paths, with glob.glob(recursive=True)'s rules: `**` as a whole
    segment crosses folders, `*` does not, and a wildcard never matches a name that starts with `.` unless its
    segment starts with `.` too (`**` crosses no hidden folder), so `s3://b/**/*.jsonl` leaves out `.x.jsonl` and
    `.cache/x.jsonl` as the local glob does."""
    segments = pattern.split("/")
    out = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":  # any visible segments: none before the next one, at least one at the end
            out.append(r"[^/.][^/]*(?:/[^/.][^/]*)*" if last else r"(?:[^/.][^/]*/)*")
            continue
        # fnmatch's `*` crosses `/`: narrow it to one path segment
        regex = fnmatch.translate(segment)[4:-3].replace(".*", "[^/]*")
        hidden_ok = segment.startswith(".") or not any(char in segment for char in _GLOB)
        out.append(("" if hidden_ok else r"(?!\.)") + regex + ("" if last else "/"))
    return re.compile("".join(out), re.DOTALL)


def glob_matches(pattern: str, names: Iterable[str]) -> list[str]:
    """The names of a listing (every object under `glob_prefix(pattern)`) that the glob `pattern` matches, by
    `glob_regex`'s rules, sorted."""
    regex = glob_regex(pattern)
    return sorted(name for name in names if regex.fullmatch(name))


def parent(path: str) -> str:
    """The folder holding `path` (os.path.dirname locally)."""
    return path.rstrip("/").rsplit("/", 1)[0] if is_url(path) else os.path.dirname(path)


def basename(path: str) -> str:
    return posixpath.basename(path) if is_url(path) else os.path.basename(path)
