"""The storage context of a run: every file parity reads or writes goes through a `Storage` (captures, the `--out`
folder, its reports and fingerprint sets, the parts workers write, spill files, `saved` graphs, `parity diff`
inputs, a tap's set).

A `Storage` is the run's pipeline options (a tuple of `--name=value` strings), frozen and picklable: a command
builds it from the options it was given and passes it down, and a DoFn carries it to its workers, so the same
options reach a harness started by an SDK worker pool. Nothing reads a "current" setting: two contexts with other
options in one process (a tap in a user's job beside parity's own run, two taps) each reach their own store.

It is the one seam for paths: no caller asks whether a path is local or a URL to choose how to read, write,
list or make a folder; each asks `Storage` (`open_arrow`, `open_parquet`, `read_parquet`, `open_write_stream`,
`makedirs`, `local_scratch`, `write_text_or_absent`, `prune_empty_folders`, ...), and the one local-or-URL
branch of each operation is here (but the capture listing's, in `parity.storage.capture_listing`, which lists a
URL through these listings: its local side refuses FIFOs and devices, and its messages are the capture path's;
`parity.capture.list_capture_files` calls it). Callers still ask
`urls.is_url` for policy (a bigger batch for a URL out folder, where the diff runs, a path shown relative to the
config's folder).

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
options (`parity.storage.stores`: one per scheme and options, kept in a module cache that holds no current
setting): for `s3://` parity's `S3Store` (`parity.storage.s3_clients`), Beam's S3IO with one client per thread;
for other schemes Beam's file system class. The pure path helpers (`child`, `join`, `is_url`, `parent`,
`basename`, `scheme`, the glob helpers, `makedirs`, `resolved`) are plain functions in `parity.storage.urls`:
they need no options.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from typing import IO, Any, Iterator, Sequence

from parity.errors import ParityError
from parity.storage import files, local_copies, stores, urls

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
            return stores.local_store().open(path)
        try:
            store = self._store(path)
            return store.open(path)
        except Exception as exc:  # Beam raises its own errors (BeamIOError, a client's): an OSError to callers
            error = stores.os_error(path, exc)
            missing = not isinstance(error, (FileNotFoundError, ParityError)) and not stores.exists_quietly(
                path, self.options)
            if missing:
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
            raise stores.os_error(path, exc) from exc

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
            raise stores.os_error(path, exc) from exc
        try:
            yield handle
        except BaseException:
            stores.abandon(handle)
            raise
        try:
            handle.close()
        except Exception as exc:
            raise stores.os_error(path, exc) from exc

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

    @contextlib.contextmanager
    def open_parquet(self, path: str) -> Iterator[Any]:
        """Yields a `pyarrow.parquet.ParquetFile` of `path` (a local file, or a seekable stream on a URL, so only the
        footer and the columns read are fetched), and closes it and the file it reads when the block ends: pyarrow
        leaves a file object it was given open.

        Example:
            with storage.open_parquet(path) as parquet_file:
                rows = parquet_file.metadata.num_rows
        """
        import pyarrow.parquet as pq

        with self._reading(path) as source:
            parquet_file = pq.ParquetFile(source)
            try:
                yield parquet_file
            finally:
                parquet_file.close(force=True)

    def read_parquet(self, path: str, columns: Sequence[str] | None = None, schema: Any = None) -> Any:
        """The Parquet file `path` as a `pyarrow.Table`, as `pq.read_table(path, columns=..., schema=...)` reads
        it (`schema`: the table's schema, its columns cast to it), with the stream it reads on a URL closed
        before it returns (`open_parquet` for what reads a file in batches or only its footer).

        Example:
            keys = storage.read_parquet(path, columns=["key_fp"]).column("key_fp")
        """
        import pyarrow.parquet as pq

        with self._reading(path) as source:
            return pq.read_table(source, columns=None if columns is None else list(columns), schema=schema)

    @contextlib.contextmanager
    def _reading(self, path: str) -> Iterator[Any]:
        """A file object of `path`, closed when the block ends, however it ends: a reader given a file object
        (pyarrow's) never closes it, and a check that reads many parts from an object store would otherwise keep a
        stream (and its connection) per part. A local file is opened here too (an Arrow `OSFile`), not left to
        Arrow by its path: Arrow's reads of a path close the file on its I/O threads, at times after the read has
        returned, so a file could still be open when the caller goes on to replace or remove it."""
        import pyarrow as pa

        source = self.readable(path)
        stream = pa.OSFile(source) if isinstance(source, str) else source
        try:
            yield stream
        finally:
            stream.close()

    # -- what is there ---------------------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        if not urls.is_url(path):
            return stores.local_store().exists(path)
        try:
            return self._store(path).exists(path) or bool(self.list_folder(path))
        except Exception as exc:
            raise stores.os_error(path, exc) from exc

    def isfile(self, path: str) -> bool:
        """Whether `path` is a file (a local file, or an object that exists under exactly that key)."""
        if not urls.is_url(path):
            return os.path.isfile(path)
        if path.endswith("/"):
            return False
        try:
            return self._store(path).exists(path)
        except Exception as exc:
            raise stores.os_error(path, exc) from exc

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
        """The files a glob names, sorted, by glob.glob(recursive=True)'s rules on a URL too (`urls.glob_matches`):
        `**` crosses folders, `*` does not, and a wildcard matches no hidden name the pattern does not start
        with `.`."""
        if not urls.is_url(pattern):
            import glob

            return sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        return urls.glob_matches(pattern, self._match_prefix(urls.glob_prefix(pattern)))

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
                raise stores.os_error(remote[0], exc) from exc

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
            raise stores.os_error(path, exc) from exc

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

    def local_copy(self, path: str, prefix: str = "parity-copy-") -> str:
        """`path` where a library that opens only local files can read it (TensorFlow's loaders: tf.io.gfile has
        no `s3://` without tensorflow-io): `path` itself when local; for a URL, a copy of its object (when one
        exists under exactly that name, e.g. a `.keras` file) or of the folder under it, in a local temporary
        folder named with `prefix`, made once per process and options and removed when it exits
        (`parity.storage.local_copies`). Workers call it too.

        Raises:
            OSError: nothing can be read under the URL.
        """
        if not urls.is_url(path):
            return path
        return local_copies.local_copy(self, path, prefix)

    # -- the store of a URL ----------------------------------------------------------------------------------

    def _match_prefix(self, prefix: str) -> list[str]:
        """Every object whose name starts with `prefix` (Beam's match of `prefix**`; its `*` stops at a `/`)."""
        try:
            return list(self._store(prefix).list_prefix(prefix))
        except Exception as exc:
            raise stores.os_error(prefix, exc) from exc

    def _store(self, path: str) -> Any:
        """The file system of `path`'s scheme built with these options (`parity.storage.stores.store_of`: after a
        bounded check that the store answers; one per scheme and options, kept for the process)."""
        return stores.store_of(path, self.options)


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
