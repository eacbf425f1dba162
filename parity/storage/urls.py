"""Paths that may be URLs: every file parity reads or writes goes through here (captures, the `--out` folder, its
reports and fingerprint sets, the parts workers write, spill files, `saved` graphs, `parity diff` inputs).

A local path is handled with the standard library (pyarrow opens local files natively). A
URL with a scheme (`s3://`, `gs://`, `hdfs://`, ...) goes through Beam's own FileSystems, with Beam's own
pipeline options for credentials and endpoints (`--s3_endpoint_url`, `--s3_access_key_id`, ...): parity has
no code of its own for any store. Which schemes work is what the installed Beam extras provide (`[aws]`,
`[gcp]`).

Beam's `FileSystems` reads those options from a process-wide setting, which a user's own pipeline in the same
process relies on; parity leaves it alone. It builds Beam's file system for a scheme itself, with the options the
run gave `configure` (`_filesystem`), so that nothing parity does changes what a user's code in the same process
reads or writes with. A DoFn that touches URLs on a worker calls `configure` with the run's options in its
`setup`, because a harness started by an SDK worker pool has not got them.
"""
from __future__ import annotations

import contextlib
import fnmatch
import os
import posixpath
import re
import shutil
from typing import IO, Any, Iterator, Sequence

from parity import compat
from parity.errors import InputError, ParityError
from parity.storage import files, gcs_probe, s3_clients

__all__ = ["basename", "child", "configure", "resolved", "copy_tree_to_local", "local_copy", "delete", "delete_tree", "exists", "is_url", "isdir",
           "isfile", "join", "list_folder", "list_names", "list_tree", "makedirs", "match", "open_read", "open_write",
           "options", "parent", "read_bytes", "read_text", "readable", "remove", "scheme", "write_bytes", "write_text"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GLOB = "*?["
_options: tuple[str, ...] = ()


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
    if _filesystem_class(scheme(path)) is None:
        known = sorted(f"{fs.scheme()}://" for fs in _filesystem_classes() if fs.scheme())
        raise InputError(f"{what} {path}: no file system serves the scheme {scheme(path)}://; the installed Beam "
                         f"serves {', '.join(known)} and local paths (or file:///...): check the URL, or install "
                         f"the Beam extra for that store (e.g. apache-beam[gcp] for gs://)")
    return path


def configure(options: Sequence[str] | None) -> None:
    """The run's pipeline options (a list of `--name=value` strings), with which parity's own file access builds
    Beam's file systems, so that URLs use the run's credentials and endpoints. Unknown options are ignored. No
    options, when none were given before either, change nothing (a worker keeps what its DoFns set)."""
    global _options
    options = tuple(options or ())
    if not options and not _options:
        return
    _options = options
    s3_clients.use_options(options)  # its S3 time limits (--s3_read_timeout=...)


def options() -> tuple[str, ...]:
    """The options last given to `configure`: what a DoFn carries to its workers."""
    return _options


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


def readable(path: str) -> Any:
    """What a reader that takes a file name or a file object (pyarrow's) opens: the path itself locally (pyarrow
    opens and maps it natively); on a URL a seekable binary file object from `open_read` (Beam's
    downloading streams seek with ranged reads, so a Parquet reader fetches its footer and the columns it
    wants, not the whole object)."""
    if not is_url(path):
        _regular(path)
        return path
    return open_read(path)


def _regular(path: str) -> None:
    """Refuses a local path that is a FIFO, a device or a socket before it is opened: opening a FIFO blocks until
    a writer comes, and a device may never end, so a `parity report` or `parity diff` given one hung until
    killed.

    Raises:
        OSError: naming the path and what it is, which callers turn into their own error.
    """
    special = files.special_kind(path)
    if special is not None:
        raise OSError(f"{path} is {special}, not a regular file; parity reads only regular files (and folders "
                      f"where one is asked for)")


def _filesystem_classes() -> list[Any]:
    from apache_beam.io import filesystems  # noqa: F401  (imports the file systems the installed extras provide)
    from apache_beam.io.filesystem import FileSystem

    return FileSystem.get_all_subclasses()


def _filesystem_class(name: str) -> Any:
    """Beam's file system class for the scheme `name` (`s3`), or None when no installed one serves it."""
    found = [fs for fs in _filesystem_classes() if fs.scheme() == name]
    return found[0] if len(found) == 1 else None


_built: dict[tuple[str, tuple[str, ...]], Any] = {}


def _filesystem(path: str) -> Any:
    """Beam's file system for `path`'s scheme, built with the run's options (`configure`), after a bounded check
    that the store `path` is on answers (`s3_clients.probe`, `gcs_probe.probe`, once per bucket and options):
    Beam retries an unreachable store for minutes. One per scheme and options: Beam's S3 file system is given
    the options object its client reuse knows (`s3_clients.storage_options`)."""
    name = scheme(path)
    if name == "s3":
        s3_clients.probe(path, _options)
    elif name == "gs":
        gcs_probe.probe(path, _options)
    key = (name, _options)
    found = _built.get(key)
    if found is None:
        cls = _filesystem_class(name)
        if cls is None:
            raise ValueError(f"no installed Beam file system serves {name}://")
        found = _built[key] = cls(pipeline_options=s3_clients.storage_options(_options))
    return found


def open_read(path: str) -> IO[bytes]:
    """The bytes of `path`, as a binary file object (compression is left to the caller)."""
    if not is_url(path):
        _regular(path)
        return open(path, "rb")
    from apache_beam.io.filesystem import CompressionTypes

    try:
        return _filesystem(path).open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except Exception as exc:  # Beam raises its own errors (BeamIOError, a client's): an OSError to callers
        raise _os_error(path, exc) from exc


def read_bytes(path: str) -> bytes:
    with open_read(path) as handle:
        return handle.read()


def write_bytes(path: str, data: bytes) -> None:
    """Writes `path` whole or not at all. Locally: `parity.storage.files.write_bytes`. On an
    object store: one upload, which becomes visible only once complete (S3, GCS), so a reader never sees part
    of it and a retried writer replaces it.

    Raises:
        OSError: also for empty `data` on a URL: Beam's S3 upload (2.77) completes a multipart upload of no part,
            which S3 refuses; callers write no file where it would be empty.
    """
    if not is_url(path):
        files.write_bytes(path, data)  # the project's one atomic local write
        return
    if not data:
        raise OSError(f"{path}: an empty object cannot be written through Beam's FileSystems (an S3 multipart "
                      f"upload needs a part); write nothing instead")
    from apache_beam.io.filesystem import CompressionTypes

    try:
        with _filesystem(path).create(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            handle.write(data)
    except Exception as exc:
        raise _os_error(path, exc) from exc


def write_text(path: str, text: str) -> None:
    """`write_bytes` of `text` as UTF-8 (locally `parity.storage.files.write_text`)."""
    if not is_url(path):
        files.write_text(path, text)
        return
    write_bytes(path, text.encode("utf-8"))


def read_text(path: str) -> str:
    """The UTF-8 text of `path`."""
    if not is_url(path):
        _regular(path)
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    return read_bytes(path).decode("utf-8")


@contextlib.contextmanager
def open_write(path: str) -> Iterator[Any]:
    """Yields where a streaming writer that takes a file name or a file object (pyarrow's `pq.write_table`,
    `pq.ParquetWriter`, `pa.ipc.new_file`) writes `path` whole or not at all: locally a temporary path beside
    it, renamed to `path` when the block ends (`parity.storage.files.replacing`); on an object store a binary
    file object from Beam's `FileSystems.create`, one upload that becomes visible only when it is closed at
    the end of the block (a block that raises leaves the object as it was: the upload is not completed).

    Example:
        with urls.open_write(path) as sink:
            pq.write_table(table, sink)
    """
    if not is_url(path):
        with files.replacing(path) as temporary:
            yield temporary
        return
    from apache_beam.io.filesystem import CompressionTypes

    try:
        handle = _filesystem(path).create(path, compression_type=CompressionTypes.UNCOMPRESSED)
    except Exception as exc:
        raise _os_error(path, exc) from exc
    try:
        yield handle
    except BaseException:
        _abandon(handle)
        raise
    try:
        handle.close()
    except Exception as exc:
        raise _os_error(path, exc) from exc


def _abandon(handle: Any) -> None:
    """Drops an upload without completing it, so that a writer that raised leaves no half object: Beam's
    uploading streams (`filesystemio.UploaderStream`, S3's and others') complete the upload when closed, which
    the garbage collector would otherwise do."""
    compat.abandon_upload(handle)
    with contextlib.suppress(Exception):
        handle.close()


def makedirs(path: str) -> None:
    """Creates the local folder `path` (and its parents); nothing for a URL, where folders are only the `/`
    in object names."""
    if not is_url(path):
        os.makedirs(path, exist_ok=True)


def scheme(path: str) -> str:
    """`s3` of `s3://b/k`; `` for a local path."""
    return path.split("://", 1)[0].lower() if is_url(path) else ""


def exists(path: str) -> bool:
    if not is_url(path):
        return os.path.exists(path)
    try:
        return bool(_filesystem(path).exists(path)) or bool(list_folder(path))
    except Exception as exc:
        raise _os_error(path, exc) from exc


def isfile(path: str) -> bool:
    """Whether `path` is a file (a local file, or an object that exists under exactly that key)."""
    if not is_url(path):
        return os.path.isfile(path)
    if path.endswith("/"):
        return False
    try:
        return bool(_filesystem(path).exists(path))
    except Exception as exc:
        raise _os_error(path, exc) from exc


def isdir(path: str) -> bool:
    """Whether `path` is a folder (a local folder, or a URL prefix with at least one object under `path/`)."""
    if not is_url(path):
        return os.path.isdir(path)
    return bool(_match_prefix(path.rstrip("/") + "/"))


def list_names(path: str) -> list[str]:
    """The names directly in the folder `path`, files and folders alike, hidden ones too, sorted (os.listdir's
    names, sorted). For a URL: the next segment of every object under `path/`."""
    if not is_url(path):
        return sorted(os.listdir(path))
    prefix = path.rstrip("/") + "/"
    return sorted({found[len(prefix):].split("/", 1)[0] for found in _match_prefix(prefix)} - {""})


def list_tree(path: str) -> list[str]:
    """Every file under the folder `path`, at any depth, sorted."""
    if not is_url(path):
        return sorted(os.path.join(folder, name) for folder, _, names in os.walk(path) for name in names)
    return sorted(_match_prefix(path.rstrip("/") + "/"))


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
        results = _filesystem(prefix).match([prefix + "**"])
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
        present = [p for p in remote if _filesystem(p).exists(p)]
        for name in sorted({scheme(p) for p in present}):
            same = [p for p in present if scheme(p) == name]
            _filesystem(same[0]).delete(same)


def delete_tree(path: str) -> None:
    """Removes the folder `path` and everything under it; nothing if missing. For a URL: every object whose
    name starts with `path/`, and an object named `path` itself."""
    if not is_url(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    found = _match_prefix(path.rstrip("/") + "/")
    if _filesystem(path).exists(path.rstrip("/")):
        found.append(path.rstrip("/"))
    for start in range(0, len(found), 1000):  # S3 deletes at most 1000 objects a request
        try:
            _filesystem(path).delete(found[start:start + 1000])
        except Exception as exc:
            raise _os_error(path, exc) from exc


def remove(path: str) -> None:
    """Removes a file or a folder tree at `path`, whichever it is; nothing if missing. Locally a link goes as
    a link, never its target (links inside a tree too: what the out folder's claim relies on); for a URL,
    `delete_tree`."""
    if not is_url(path):
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)
        return
    delete_tree(path)


def copy_tree_to_local(path: str, target: str) -> str:
    """Copies every object under the URL folder `path` into the local folder `target` (made if missing), keeping
    their relative names; returns `target`. For a reader that opens local files only (TensorFlow's loader of a
    `saved` graph, where tf.io.gfile has no filesystem for the scheme)."""
    prefix = path.rstrip("/") + "/"
    found = _match_prefix(prefix)
    if not found:
        raise FileNotFoundError(f"{path}: no object under this prefix")
    for source in found:
        rest = source[len(prefix):]
        if not rest or rest.endswith("/"):
            continue
        local = os.path.join(target, *rest.split("/"))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with open_read(source) as handle, open(local, "wb") as out:
            shutil.copyfileobj(handle, out, 1 << 20)
    return target


_LOCAL_COPIES: dict[str, str] = {}  # a URL -> its local copy, made once per process


def local_copy(path: str, prefix: str = "parity-copy-") -> str:
    """`path` where a library that opens only local files can read it (TensorFlow's loaders: tf.io.gfile has no
    `s3://` without tensorflow-io): `path` itself when local; for a URL, a copy of its object (when one exists
    under exactly that name, e.g. a `.keras` file) or of the folder under it, in a local temporary folder named
    with `prefix`, made once per process and removed when it exits. Workers call it too.

    Raises:
        OSError: nothing can be read under the URL.
    """
    if not is_url(path):
        return path
    key = path.rstrip("/")
    if key not in _LOCAL_COPIES:
        import atexit
        import tempfile

        target = tempfile.mkdtemp(prefix=prefix)
        atexit.register(shutil.rmtree, target, True)
        if isfile(key):
            local = os.path.join(target, basename(key))
            with open_read(key) as source, open(local, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
            _LOCAL_COPIES[key] = local
        else:
            _LOCAL_COPIES[key] = copy_tree_to_local(key, target)
    return _LOCAL_COPIES[key]


def _os_error(path: str, exc: Exception) -> Exception:
    """Beam's and the store's errors as an OSError naming the path, as local file errors are (parity's own,
    e.g. an unreachable store's, as they are)."""
    if isinstance(exc, (OSError, ParityError)):
        return exc
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return OSError(f"{path}: {message}")


def parent(path: str) -> str:
    """The folder holding `path` (os.path.dirname locally)."""
    return path.rstrip("/").rsplit("/", 1)[0] if is_url(path) else os.path.dirname(path)


def basename(path: str) -> str:
    return posixpath.basename(path) if is_url(path) else os.path.basename(path)
