"""The storage context of a run: every file parity reads or writes goes through a `Storage` (captures, the `--out`
folder, its reports and fingerprint sets, the parts workers write, spill files, `saved` graphs, `parity diff`
inputs, a tap's set).

A `Storage` is the run's pipeline options (a tuple of `--name=value` strings), frozen and picklable: a command
builds it from the options it was given and passes it down, and a DoFn carries it to its workers, so the same
options reach a harness started by an SDK worker pool. Nothing reads a "current" setting: two contexts with other
options in one process (a tap in a user's job beside parity's own run, two taps) each reach their own store.

It is the one seam for paths: no caller asks whether a path is local or a URL to choose how to read, write,
list or make a folder; each asks `Storage` (`open_arrow`, `open_parquet`, `open_write_stream`, `makedirs`,
`local_scratch`, `write_text_or_absent`, `prune_empty_folders`, ...), and the one local-or-URL branch of each
operation is here. Callers still ask `urls.is_url` for policy (a bigger batch for a URL out folder, where the
diff runs, a path shown relative to the config's folder); one listing keeps a branch of its own, the capture
files' (`parity.capture.list_capture_files`), whose local side refuses FIFOs and devices and tells parity's own
output by its markers on disk, and whose messages differ.

A URL with a scheme (`s3://`, `gs://`, `hdfs://`, ...) goes through Beam's own file systems, with Beam's own
pipeline options for credentials and endpoints (`--s3_endpoint_url`, `--s3_access_key_id`, ...): parity has no
code of its own for any store. Which schemes work is what the installed Beam extras provide (`[aws]`, `[gcp]`).

A local path goes through Beam's `LocalFileSystem` where it does exactly what the standard library does, with
the same errors: opening for reading (`open_read`, `read_bytes`; `io.open`, after the refusal of a FIFO or a
device) and `exists` (`os.path.exists`). The standard library stays where Beam's local file system lacks what
is needed or would change a result or a message:
- writes (`write_bytes`, `write_text`, `open_write`, `open_write_stream`): `files.replacing`, a temporary file
  fsynced and renamed into place; Beam's `create` writes the file itself, in place, with no fsync;
- `write_text_in_place`: a plain `open(path, "w")`, which writes through a link or into `/dev/stdout`;
- `read_text`: text mode, which reads `\r\n` as `\n` (Beam's open is binary);
- `open_arrow`: a memory map, which Beam's file systems do not offer; `readable`: the path itself, which Arrow
  opens and maps natively;
- `makedirs`: `os.makedirs(exist_ok=True)`; Beam's `mkdirs` refuses a folder that exists, and the parts and
  spills of every batch make theirs again;
- `isfile`, `isdir` and the listings: Beam's local `match` applies fnmatch rules (hidden names match `*`) and
  stats every file it lists, where parity's listings follow `glob.glob` and `os.listdir`;
- `delete`, `delete_tree`, `remove`, `prune_empty_folders`: Beam's `delete` refuses a missing file and removes
  folders whole, where parity skips a missing file and removes a link as a link.

Beam's `FileSystems` reads its options from a process-wide setting, which a user's own pipeline in the same
process relies on; parity leaves it alone. A context builds the file system of a scheme itself with its own
options (one per scheme and options, kept in a module cache that holds no current setting): for `s3://`
parity's `S3Store` (`parity.storage.s3_clients`), Beam's S3IO with one client per thread; for other schemes
Beam's file system class. The pure path helpers (`child`, `join`, `is_url`, `parent`, `basename`, `scheme`, the
glob helpers, `makedirs`, `resolved`) are plain functions in `parity.storage.urls`: they need no options.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import threading
from typing import IO, Any, Iterator, Sequence

from parity import compat
from parity.errors import ParityError
from parity.storage import files, gcs_probe, s3_clients, urls

__all__ = ["Storage"]


@dataclasses.dataclass(frozen=True)
class Storage:
    """The pipeline options parity's file access uses for URLs (`--s3_endpoint_url=...`); unknown options are
    ignored. `Storage()` has none: local paths, and URLs with Beam's defaults (credentials from the environment).

    Example:
        storage = Storage.of(["--s3_endpoint_url=http://localhost:9000"])
        storage.write_text("s3://bucket/run/report.json", text)
    """

    options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", tuple(str(option) for option in self.options))

    @classmethod
    def of(cls, options: Sequence[str] | None) -> Storage:
        """The context of a run given these pipeline options (None: none)."""
        return cls(tuple(options or ()))

    # -- reading ---------------------------------------------------------------------------------------------

    def open_read(self, path: str) -> IO[bytes]:
        """The bytes of `path`, as a binary file object (compression is left to the caller)."""
        if not urls.is_url(path):
            _regular(path)
            return _local_store().open(path)
        try:
            store = self._store(path)
            return store.open(path)
        except Exception as exc:  # Beam raises its own errors (BeamIOError, a client's): an OSError to callers
            error = _os_error(path, exc)
            if not isinstance(error, (FileNotFoundError, ParityError)) and not _exists_quietly(self, path):
                raise FileNotFoundError(str(error)) from exc  # as a missing local file is: callers tell it apart
            raise error from exc

    def readable(self, path: str) -> Any:
        """What a reader that takes a file name or a file object (pyarrow's) opens: the path itself locally
        (pyarrow opens and maps it natively); on a URL a seekable binary file object from `open_read` (Beam's
        downloading streams seek with ranged reads, so a Parquet reader fetches its footer and the columns it
        wants, not the whole object)."""
        if not urls.is_url(path):
            _regular(path)
            return path
        return self.open_read(path)

    def read_bytes(self, path: str) -> bytes:
        with self.open_read(path) as handle:
            return handle.read()

    def read_text(self, path: str) -> str:
        """The UTF-8 text of `path`."""
        if not urls.is_url(path):
            _regular(path)
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        return self.read_bytes(path).decode("utf-8")

    # -- writing ---------------------------------------------------------------------------------------------

    def write_bytes(self, path: str, data: bytes, durable: bool = True) -> None:
        """Writes `path` whole or not at all. Locally: `parity.storage.files.write_bytes` (fsynced unless `durable`
        is False, for a file that no run reads after a crash). On an object store: one upload, which becomes
        visible only once complete (S3, GCS), so a reader never sees part of it and a retried writer replaces it.

        Raises:
            OSError: also for empty `data` on a URL: Beam's S3 upload (2.77) completes a multipart upload of no
                part, which S3 refuses; callers write no file where it would be empty.
        """
        if not urls.is_url(path):
            files.write_bytes(path, data, durable=durable)  # the project's one atomic local write
            return
        if not data:
            raise OSError(f"{path}: an empty object cannot be written through Beam's FileSystems (an S3 multipart "
                          f"upload needs a part); write nothing instead")
        try:
            with self._store(path).create(path) as handle:
                handle.write(data)
        except Exception as exc:
            raise _os_error(path, exc) from exc

    def write_text(self, path: str, text: str) -> None:
        """`write_bytes` of `text` as UTF-8 (locally `parity.storage.files.write_text`)."""
        if not urls.is_url(path):
            files.write_text(path, text)
            return
        self.write_bytes(path, text.encode("utf-8"))

    @contextlib.contextmanager
    def open_write(self, path: str, durable: bool = True) -> Iterator[Any]:
        """Yields where a streaming writer that takes a file name or a file object (pyarrow's `pq.write_table`,
        `pq.ParquetWriter`, `pa.ipc.new_file`) writes `path` whole or not at all: locally a temporary path beside
        it, renamed to `path` when the block ends (`parity.storage.files.replacing`: fsynced unless `durable` is
        False, for a file whose folder `sync_folder` makes durable later, or that no run reads after a crash); on
        an object store a binary file object from the store's `create`, one upload that becomes visible only when
        it is closed at the end of the block (a block that raises leaves the object as it was: the upload is not
        completed).

        Example:
            with storage.open_write(path) as sink:
                pq.write_table(table, sink)
        """
        if not urls.is_url(path):
            with files.replacing(path, durable=durable) as temporary:
                yield temporary
            return
        with self._uploading(path) as handle:
            yield handle

    def sync_folder(self, path: str) -> None:
        """Makes every file in the folder `path` and the folder's entries durable, for files written with
        `durable=False` that must be on the disk before a later write (a set's value parts, before its
        manifest): locally `parity.storage.files.sync_folder` (a missing folder is none to sync); on an object
        store nothing, since an upload is durable once it is complete."""
        if not urls.is_url(path):
            files.sync_folder(path)

    @contextlib.contextmanager
    def open_write_stream(self, path: str, durable: bool = True) -> Iterator[IO[bytes]]:
        """Yields a binary file object that writes `path` whole or not at all, for a writer that takes only a file
        object (`pickle.dump`): locally a new temporary file beside `path`, renamed to `path` when the block ends
        (`parity.storage.files.replacing`: atomic, and fsynced unless `durable` is False, for a file no later
        run reads); on an object store the store's upload, as `open_write`'s.

        Example:
            with storage.open_write_stream(path) as handle:
                pickle.dump(batch, handle)
        """
        if not urls.is_url(path):
            with files.replacing(path, durable=durable) as temporary, open(temporary, "wb") as handle:
                yield handle
            return
        with self._uploading(path) as handle:
            yield handle

    def write_text_or_absent(self, path: str, text: str) -> None:
        """`write_text`, except that an empty `text` on an object store writes nothing (an upload of no part is
        refused: `write_bytes`): for files whose reader takes a missing file as empty (a set's
        `quarantine.jsonl`). Locally an empty file is written, as always."""
        if text or not urls.is_url(path):
            self.write_text(path, text)

    def write_text_in_place(self, path: str, text: str) -> None:
        """Writes UTF-8 `text` to `path` as `open(path, "w")` does locally: into the file itself, through a link,
        into a device or a pipe (`--out /dev/stdout`), with no temporary file beside it (a reader may see part of
        it while it is written: for files a person asked for by name, not for files parity reads back). On an
        object store one upload, as `write_text`."""
        if not urls.is_url(path):
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            return
        self.write_text(path, text)

    def makedirs(self, path: str) -> None:
        """Makes the folder `path` and its parents, where a writer that opens files by name needs them first:
        locally `os.makedirs` (an existing folder is no error; Beam's `LocalFileSystem.mkdirs` refuses one); on a
        URL nothing, since a folder there is only the `/` in object names."""
        if not urls.is_url(path):
            os.makedirs(path, exist_ok=True)

    def can_create_in(self, folder: str) -> bool:
        """Whether a file can be created directly in `folder` without making it first: a local folder that
        exists; always on a URL (objects need no folder)."""
        return urls.is_url(folder) or os.path.isdir(folder)

    @contextlib.contextmanager
    def local_scratch(self, folder: str, prefix: str = "parity-scratch-") -> Iterator[str]:
        """Yields a local folder for the client's own temporary files that belong beside `folder`: `folder`
        itself when it is local (its user removes what it writes there); for a URL a new local temporary folder
        named with `prefix`, removed with everything in it when the block ends (spilling to an object store
        would upload and download every byte)."""
        if not urls.is_url(folder):
            yield folder
            return
        import tempfile

        scratch = tempfile.mkdtemp(prefix=prefix)
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    @contextlib.contextmanager
    def _uploading(self, path: str) -> Iterator[IO[bytes]]:
        """The store's upload of `path`, completed when the block ends and abandoned when it raises."""
        try:
            handle = self._store(path).create(path)
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

    # -- reading Arrow and Parquet ---------------------------------------------------------------------------

    def open_arrow(self, path: str) -> Any:
        """The Arrow IPC file `path` as a pyarrow source for `pa.ipc.open_file`, to close after use (`with`):
        locally a memory map (the rows are not copied; Beam's local file system has no memory map); on a URL
        the whole object, read in one request (the files read this way are one batch's rows, read whole
        anyway)."""
        import pyarrow as pa

        if not urls.is_url(path):
            return pa.memory_map(path)
        return pa.BufferReader(self.read_bytes(path))

    def open_parquet(self, path: str) -> Any:
        """A `pyarrow.parquet.ParquetFile` of `path` (`readable`: the path locally, so Arrow maps it; a
        seekable stream on a URL, so only the footer and the columns read are fetched)."""
        import pyarrow.parquet as pq

        return pq.ParquetFile(self.readable(path))

    # -- what is there ---------------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        if not urls.is_url(path):
            return _local_store().exists(path)
        try:
            return self._store(path).exists(path) or bool(self.list_folder(path))
        except Exception as exc:
            raise _os_error(path, exc) from exc

    def isfile(self, path: str) -> bool:
        """Whether `path` is a file (a local file, or an object that exists under exactly that key)."""
        if not urls.is_url(path):
            return os.path.isfile(path)
        if path.endswith("/"):
            return False
        try:
            return self._store(path).exists(path)
        except Exception as exc:
            raise _os_error(path, exc) from exc

    def isdir(self, path: str) -> bool:
        """Whether `path` is a folder (a local folder, or a URL prefix with at least one object under `path/`)."""
        if not urls.is_url(path):
            return os.path.isdir(path)
        return bool(self._match_prefix(path.rstrip("/") + "/"))

    def list_names(self, path: str) -> list[str]:
        """The names directly in the folder `path`, files and folders alike, hidden ones too, sorted (os.listdir's
        names, sorted). For a URL: the next segment of every object under `path/`."""
        if not urls.is_url(path):
            return sorted(os.listdir(path))
        prefix = path.rstrip("/") + "/"
        return sorted({found[len(prefix):].split("/", 1)[0] for found in self._match_prefix(prefix)} - {""})

    def list_tree(self, path: str) -> list[str]:
        """Every file under the folder `path`, at any depth, sorted."""
        if not urls.is_url(path):
            return sorted(os.path.join(folder, name) for folder, _, names in os.walk(path) for name in names)
        return sorted(self._match_prefix(path.rstrip("/") + "/"))

    def list_folder(self, path: str) -> list[str]:
        """The files directly in the folder `path` (no subfolders, no hidden names), sorted; [] if none."""
        if not urls.is_url(path):
            if not os.path.isdir(path):
                return []
            return sorted(os.path.join(path, name) for name in os.listdir(path)
                          if not name.startswith(".") and os.path.isfile(os.path.join(path, name)))
        prefix = path.rstrip("/") + "/"
        found = []
        for found_path in self._match_prefix(prefix):
            rest = found_path[len(prefix):]
            if rest and "/" not in rest and not rest.startswith("."):
                found.append(found_path)
        return sorted(found)

    def match(self, pattern: str) -> list[str]:
        """The files a glob names, sorted (`**` crosses folders, `*` does not, as glob.glob(recursive=True))."""
        if not urls.is_url(pattern):
            import glob

            return sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        regex = urls.glob_regex(pattern)
        return sorted(p for p in self._match_prefix(urls.glob_prefix(pattern)) if regex.fullmatch(p))

    # -- removing --------------------------------------------------------------------------------------------

    def delete(self, paths: Sequence[str]) -> None:
        """Removes files; one already gone is not an error."""
        for path in (p for p in paths if not urls.is_url(p)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        remote = [p for p in paths if urls.is_url(p)]
        if remote:
            try:
                present = [p for p in remote if self._store(p).exists(p)]
                for name in sorted({urls.scheme(p) for p in present}):
                    same = [p for p in present if urls.scheme(p) == name]
                    self._store(same[0]).delete(same)
            except Exception as exc:
                raise _os_error(remote[0], exc) from exc

    def delete_tree(self, path: str) -> None:
        """Removes the folder `path` and everything under it; nothing if missing. For a URL: every object whose
        name starts with `path/`, and an object named `path` itself."""
        if not urls.is_url(path):
            shutil.rmtree(path, ignore_errors=True)
            return
        found = self._match_prefix(path.rstrip("/") + "/")
        try:
            if self._store(path).exists(path.rstrip("/")):
                found.append(path.rstrip("/"))
            for start in range(0, len(found), 1000):  # S3 deletes at most 1000 objects a request
                self._store(path).delete(found[start:start + 1000])
        except Exception as exc:
            raise _os_error(path, exc) from exc

    def remove(self, path: str) -> None:
        """Removes a file or a folder tree at `path`, whichever it is; nothing if missing. Locally a link goes as
        a link, never its target (links inside a tree too: what the out folder's claim relies on); for a URL,
        `delete_tree`."""
        if not urls.is_url(path):
            if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
                os.unlink(path)
            elif os.path.isdir(path):
                shutil.rmtree(path)
            return
        self.delete_tree(path)

    def prune_empty_folders(self, path: str) -> None:
        """Removes the folder `path` and the folders under it that are empty once the ones below them are gone,
        deepest first; a folder that holds a file stays. Nothing on a URL, where a folder is only the `/` in
        object names and goes with its last object."""
        if urls.is_url(path) or not os.path.isdir(path):
            return
        for folder, _, _ in sorted(os.walk(path), reverse=True):
            if not os.listdir(folder):
                os.rmdir(folder)

    # -- local copies ----------------------------------------------------------------------------------------

    def copy_tree_to_local(self, path: str, target: str) -> str:
        """Copies every object under the URL folder `path` into the local folder `target` (made if missing),
        keeping their relative names; returns `target`. For a reader that opens local files only (TensorFlow's
        loader of a `saved` graph, where tf.io.gfile has no filesystem for the scheme)."""
        prefix = path.rstrip("/") + "/"
        found = self._match_prefix(prefix)
        if not found:
            raise FileNotFoundError(f"{path}: no object under this prefix")
        for source in found:
            rest = source[len(prefix):]
            if not rest or rest.endswith("/"):
                continue
            local = os.path.join(target, *rest.split("/"))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with self.open_read(source) as handle, open(local, "wb") as out:
                shutil.copyfileobj(handle, out, 1 << 20)
        return target

    def local_copy(self, path: str, prefix: str = "parity-copy-") -> str:
        """`path` where a library that opens only local files can read it (TensorFlow's loaders: tf.io.gfile has
        no `s3://` without tensorflow-io): `path` itself when local; for a URL, a copy of its object (when one
        exists under exactly that name, e.g. a `.keras` file) or of the folder under it, in a local temporary
        folder named with `prefix`, made once per process and options and removed when it exits. Workers call
        it too.

        Raises:
            OSError: nothing can be read under the URL.
        """
        if not urls.is_url(path):
            return path
        key = (path.rstrip("/"), self.options)
        with _COPYING:
            if key not in _LOCAL_COPIES:
                _LOCAL_COPIES[key] = self._copy(key[0], prefix)
            return _LOCAL_COPIES[key]

    def _copy(self, url: str, prefix: str) -> str:
        import atexit
        import tempfile

        target = tempfile.mkdtemp(prefix=prefix)
        atexit.register(shutil.rmtree, target, True)
        if self.isfile(url):
            local = os.path.join(target, urls.basename(url))
            with self.open_read(url) as source, open(local, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
            return local
        return self.copy_tree_to_local(url, target)

    # -- the store of a URL ----------------------------------------------------------------------------------

    def _match_prefix(self, prefix: str) -> list[str]:
        """Every object whose name starts with `prefix` (Beam's match of `prefix**`; its `*` stops at a `/`)."""
        try:
            return list(self._store(prefix).list_prefix(prefix))
        except Exception as exc:
            raise _os_error(prefix, exc) from exc

    def _store(self, path: str) -> Any:
        """The file system of `path`'s scheme built with these options, after a bounded check that the store
        `path` is on answers (`s3_clients.probe`, `gcs_probe.probe`, once per bucket and options): Beam retries
        an unreachable store for minutes. One per scheme and options, kept for the process."""
        name = urls.scheme(path)
        if name == "s3":
            s3_clients.probe(path, self.options)
        elif name == "gs":
            gcs_probe.probe(path, self.options)
        key = (name, self.options)
        found = _STORES.get(key)
        if found is None:
            with _BUILDING:
                found = _STORES.get(key)
                if found is None:
                    found = _STORES[key] = _build_store(name, self.options)
        return found


_STORES: dict[tuple[str, tuple[str, ...]], Any] = {}  # (scheme, options) -> its file system, built once
_BUILDING = threading.Lock()
_LOCAL_COPIES: dict[tuple[str, tuple[str, ...]], str] = {}  # (URL, options) -> its local copy, made once
_COPYING = threading.Lock()


def _build_store(name: str, options: tuple[str, ...]) -> Any:
    if name == "s3" and compat.s3io_module() is not None and compat.boto3_client_module() is not None:
        return s3_clients.S3Store(options)
    cls = urls.filesystem_class(name)
    if cls is None:
        raise ValueError(f"no installed Beam file system serves {name}://")
    from apache_beam.options.pipeline_options import PipelineOptions

    return _BeamStore(cls(pipeline_options=PipelineOptions(list(options))))


class _BeamStore:
    """Beam's file system of a scheme (GCS, HDFS, ...) with the calls `Storage` makes, as `S3Store` has them."""

    def __init__(self, filesystem: Any) -> None:
        self._fs = filesystem

    def open(self, path: str) -> Any:
        from apache_beam.io.filesystem import CompressionTypes

        return self._fs.open(path, compression_type=CompressionTypes.UNCOMPRESSED)

    def create(self, path: str) -> Any:
        from apache_beam.io.filesystem import CompressionTypes

        return self._fs.create(path, compression_type=CompressionTypes.UNCOMPRESSED)

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(path))

    def list_prefix(self, prefix: str) -> Iterator[str]:
        return (meta.path for result in self._fs.match([prefix + "**"]) for meta in result.metadata_list)

    def delete(self, paths: Sequence[str]) -> None:
        self._fs.delete(list(paths))


@functools.lru_cache(maxsize=None)
def _local_store() -> Any:
    """Beam's LocalFileSystem, as a `_BeamStore` (one for the process: it takes no options)."""
    from apache_beam.io.localfilesystem import LocalFileSystem

    return _BeamStore(LocalFileSystem(pipeline_options=None))


def _exists_quietly(storage: Storage, path: str) -> bool:
    """Whether the store of `path` says it exists; True when it cannot say (the open's own error is the one to
    show)."""
    try:
        return bool(storage._store(path).exists(path))
    except Exception:
        return True


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


def _abandon(handle: Any) -> None:
    """Drops an upload without completing it, so that a writer that raised leaves no half object: Beam's
    uploading streams (`filesystemio.UploaderStream`, S3's and others') complete the upload when closed, which
    the garbage collector would otherwise do."""
    compat.abandon_upload(handle)
    with contextlib.suppress(Exception):
        handle.close()


def _os_error(path: str, exc: Exception) -> Exception:
    """Beam's and the store's errors as an OSError naming the path, as local file errors are (parity's own,
    e.g. an unreachable store's, as they are)."""
    if isinstance(exc, (OSError, ParityError)):
        return exc
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return OSError(f"{path}: {message}")
