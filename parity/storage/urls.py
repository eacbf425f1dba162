"""Paths that may be URLs: the capture files a run reads go through here (its other paths are local so far).

A local path is handled with the standard library, exactly as before (nothing about local runs changes). A
URL with a scheme (`s3://`, `gs://`, `hdfs://`, ...) goes through Beam's own FileSystems, with Beam's own
pipeline options for credentials and endpoints (`--s3_endpoint_url`, `--s3_access_key_id`, ...): parity has
no code of its own for any store. Which schemes work is what the installed Beam extras provide (`[aws]`,
`[gcp]`).

Beam reads those options from a process-wide setting. The client sets it from the run's pipeline options
(`configure`); a DoFn that touches URLs on a worker calls `configure` with the same options in its `setup`,
because a harness started by an SDK worker pool does not hand the job's options to FileSystems (the
harness's `sdk_worker_main` would; the pool's does not).
"""
from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from typing import IO, Sequence

from parity.storage import files

__all__ = ["configure", "delete", "exists", "is_url", "isfile", "join", "list_folder", "match", "open_read",
           "read_bytes", "write_bytes"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GLOB = "*?["
_options: tuple[str, ...] = ()


def is_url(path: str) -> bool:
    """Whether `path` names a file through a filesystem scheme (`s3://b/k`), not a local path."""
    return bool(_SCHEME.match(path)) and not path.startswith("file://")


def configure(options: Sequence[str] | None) -> None:
    """Hands the run's pipeline options (a list of `--name=value` strings) to Beam's FileSystems, so that
    URLs use the run's credentials and endpoints. Unknown options are ignored; calling again with the same
    options costs nothing."""
    global _options
    options = tuple(options or ())
    if options == _options:
        return
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions(list(options)))
    _options = options


def options() -> tuple[str, ...]:
    """The options last given to `configure`: what a DoFn carries to its workers."""
    return _options


def join(base: str, *parts: str) -> str:
    """`base` joined with `parts`; an absolute path or a URL among `parts` starts again from there, as
    os.path.join does. Local results are normalized as before; URLs keep their `/`."""
    path = base
    for part in parts:
        if is_url(part) or os.path.isabs(part):
            path = part
        elif is_url(path):
            path = path.rstrip("/") + "/" + part
        else:
            path = os.path.join(path, part)
    return path if is_url(path) else os.path.normpath(path)


def _filesystems():
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def open_read(path: str) -> IO[bytes]:
    """The bytes of `path`, as a binary file object (compression is left to the caller)."""
    if not is_url(path):
        return open(path, "rb")
    from apache_beam.io.filesystem import CompressionTypes

    try:
        return _filesystems().open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except Exception as exc:  # Beam raises its own errors (BeamIOError, a client's): an OSError to callers
        raise _os_error(path, exc) from exc


def read_bytes(path: str) -> bytes:
    with open_read(path) as handle:
        return handle.read()


def write_bytes(path: str, data: bytes) -> None:
    """Writes `path` whole or not at all. Locally: `parity.storage.files.write_bytes`. On an
    object store: one upload, which becomes visible only once complete (S3, GCS), so a reader never sees part
    of it and a retried writer replaces it."""
    if not is_url(path):
        files.write_bytes(path, data)  # the project's one atomic local write
        return
    from apache_beam.io.filesystem import CompressionTypes

    try:
        with _filesystems().create(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            handle.write(data)
    except Exception as exc:
        raise _os_error(path, exc) from exc


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    try:
        return bool(_filesystems().exists(path)) or bool(list_folder(path))
    except Exception as exc:
        raise _os_error(path, exc) from exc


def isfile(path: str) -> bool:
    """Whether `path` is a file (a local file, or an object that exists under exactly that key)."""
    if not is_url(path):
        return os.path.isfile(path)
    if path.endswith("/"):
        return False
    try:
        return bool(_filesystems().exists(path))
    except Exception as exc:
        raise _os_error(path, exc) from exc


def list_folder(path: str) -> list[str]:
    """The files directly in the folder `path` (no subfolders, no hidden names), sorted; [] if none."""
    if not is_url(path):
        if not os.path.isdir(path):
            return []
        return sorted(os.path.join(path, name) for name in os.listdir(path)
                      if not name.startswith(".") and os.path.isfile(os.path.join(path, name)))
    prefix = path.rstrip("/") + "/"
    found = []
    for found_path in _match_prefix(prefix):
        rest = found_path[len(prefix):]
        if rest and "/" not in rest and not rest.startswith("."):
            found.append(found_path)
    return sorted(found)


def match(pattern: str) -> list[str]:
    """The files a glob names, sorted (`**` crosses folders, `*` does not, as glob.glob(recursive=True))."""
    if not is_url(pattern):
        import glob

        return sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    fixed = pattern[:min((pattern.index(c) for c in _GLOB if c in pattern), default=len(pattern))]
    fixed = fixed[:fixed.rfind("/") + 1]
    regex = _glob_regex(pattern)
    return sorted(p for p in _match_prefix(fixed) if regex.fullmatch(p))


def _glob_regex(pattern: str) -> re.Pattern:
    parts = re.split(r"(\*\*/?)", pattern)
    out = []
    for part in parts:
        if part in ("**", "**/"):
            out.append("(?:.*/)?" if part == "**/" else ".*")
        else:
            # fnmatch's `*` crosses `/`: narrow it to one path segment
            out.append(fnmatch.translate(part)[4:-3].replace(".*", "[^/]*"))
    return re.compile("".join(out), re.DOTALL)


def _match_prefix(prefix: str) -> list[str]:
    """Every object whose name starts with `prefix` (Beam's match of `prefix**`; its `*` stops at a `/`)."""
    try:
        results = _filesystems().match([prefix + "**"])
    except Exception as exc:
        raise _os_error(prefix, exc) from exc
    return [meta.path for result in results for meta in result.metadata_list]


def delete(paths: Sequence[str]) -> None:
    """Removes files; one already gone is not an error."""
    local = [p for p in paths if not is_url(p)]
    for path in local:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    remote = [p for p in paths if is_url(p)]
    if remote:
        remote = [p for p in remote if _filesystems().exists(p)]
        if remote:
            _filesystems().delete(remote)


def _os_error(path: str, exc: Exception) -> OSError:
    """Beam's and the store's errors as an OSError naming the path, as local file errors are."""
    if isinstance(exc, OSError):
        return exc
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return OSError(f"{path}: {message}")


def basename(path: str) -> str:
    return posixpath.basename(path) if is_url(path) else os.path.basename(path)
