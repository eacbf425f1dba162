"""The file system that serves a path, as `Storage` calls it (`open`, `create`, `exists`, `list_prefix`,
`delete`): for a URL the one of its scheme, built with the run's pipeline options and kept for the process (one
per scheme and options, in a module cache that holds no current setting: `store_of`); for `s3://` parity's
`S3Store` (`parity.storage.s3_clients`), Beam's S3IO with one client per thread; for other schemes Beam's file
system class (`BeamStore`); for a local path Beam's `LocalFileSystem` (`local_store`). Beam's and the stores'
errors reach `Storage`'s callers as OSErrors naming the path (`os_error`), and an upload a writer gave up on is
dropped, never completed (`abandon`).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator, Sequence

from parity import compat
from parity.errors import ParityError
from parity.storage import gcs_probe, s3_clients, urls
from parity.storage.fork_lock import ForkLock

__all__ = ["BeamStore", "abandon", "exists_quietly", "local_store", "os_error", "store_of"]


_STORES: dict[tuple[str, tuple[str, ...]], Any] = {}  # (scheme, options) -> its file system, built once
# new and free in a forked child (a harness of the pool's zygote); the stores built stay, each building its clients
# again in a child of its own accord (`S3Store` by pid, `s3_clients`' own fork hook)
_BUILDING = ForkLock()


def store_of(path: str, options: tuple[str, ...]) -> Any:
    """The file system of `path`'s scheme built with `options`, after a bounded check that the store `path` is
    on answers (`s3_clients.probe`, `gcs_probe.probe`, once per bucket and options): Beam retries an unreachable
    store for minutes. One per scheme and options, kept for the process."""
    name = urls.scheme(path)
    if name == "s3":
        s3_clients.probe(path, options)
    elif name == "gs":
        gcs_probe.probe(path, options)
    key = (name, options)
    found = _STORES.get(key)
    if found is None:
        with _BUILDING:
            found = _STORES.get(key)
            if found is None:
                found = _STORES[key] = _build(name, options)
    return found


def exists_quietly(path: str, options: tuple[str, ...]) -> bool:
    """Whether the store of `path` says it exists; True when it cannot say (the open's own error is the one to
    show)."""
    try:
        return bool(store_of(path, options).exists(path))
    except Exception:
        return True


def _build(name: str, options: tuple[str, ...]) -> Any:
    if name == "s3" and compat.s3io_module() is not None and compat.boto3_client_module() is not None:
        return s3_clients.S3Store(options)
    cls = urls.filesystem_class(name)
    if cls is None:
        raise ValueError(f"no installed Beam file system serves {name}://")
    from apache_beam.options.pipeline_options import PipelineOptions

    return BeamStore(cls(pipeline_options=PipelineOptions(list(options))))


class BeamStore:
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
def local_store() -> Any:
    """Beam's LocalFileSystem, as a `BeamStore` (one for the process: it takes no options)."""
    from apache_beam.io.localfilesystem import LocalFileSystem

    return BeamStore(LocalFileSystem(pipeline_options=None))


def abandon(handle: Any) -> None:
    """Drops an upload without completing it, so that a writer that raised leaves no half object: Beam's
    uploading streams (`filesystemio.UploaderStream`, S3's and others') complete the upload when closed, which
    the garbage collector would otherwise do."""
    compat.abandon_upload(handle)
    with contextlib.suppress(Exception):
        handle.close()


def os_error(path: str, exc: Exception) -> Exception:
    """Beam's and the store's errors as an OSError naming the path, as local file errors are (parity's own,
    e.g. an unreachable store's, as they are)."""
    if isinstance(exc, (OSError, ParityError)):
        return exc
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return OSError(f"{path}: {message}")
