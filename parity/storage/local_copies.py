"""Local copies of what lies under a URL, for a library that opens only local files (TensorFlow's loaders of a
`saved` graph or a `.keras` file: tf.io.gfile has no `s3://` without tensorflow-io), behind
`Storage.local_copy`: made once per process and options, in a local temporary folder removed when the process
exits. Workers call it too.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import IO, Protocol

from parity.storage import urls
from parity.storage.fork_lock import ForkLock

__all__ = ["Source", "copy_tree", "local_copy"]

_LOCAL_COPIES: dict[tuple[str, tuple[str, ...]], str] = {}  # (URL, options) -> its local copy, made once
_COPYING = ForkLock()  # new and free in a forked child (a harness of the pool's zygote)


class Source(Protocol):
    """What a copy reads a URL through (`Storage`)."""

    options: tuple[str, ...]

    def isfile(self, path: str) -> bool: ...

    def list_tree(self, path: str) -> list[str]: ...

    def open_read(self, path: str) -> IO[bytes]: ...


def copy_tree(source: Source, path: str, target: str) -> str:
    """Copies every object under the URL folder `path` into the local folder `target` (made if missing),
    keeping their relative names; returns `target`.

    Raises:
        FileNotFoundError: no object lies under `path`.
    """
    prefix = path.rstrip("/") + "/"
    found = source.list_tree(path)
    if not found:
        raise FileNotFoundError(f"{path}: no object under this prefix")
    for name in found:
        rest = name[len(prefix):]
        if not rest or rest.endswith("/"):
            continue
        local = os.path.join(target, *rest.split("/"))
        os.makedirs(os.path.dirname(local), exist_ok=True)
        with source.open_read(name) as handle, open(local, "wb") as out:
            shutil.copyfileobj(handle, out, 1 << 20)
    return target


def local_copy(source: Source, url: str, prefix: str) -> str:
    """A local copy of the object at `url` (when one exists under exactly that name) or of the folder under
    it, in a local temporary folder named with `prefix`: made once per process and options.

    Raises:
        OSError: nothing can be read under the URL.
    """
    key = (url.rstrip("/"), source.options)
    with _COPYING:
        if key not in _LOCAL_COPIES:
            _LOCAL_COPIES[key] = _copy(source, key[0], prefix)
        return _LOCAL_COPIES[key]


def _copy(source: Source, url: str, prefix: str) -> str:
    target = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, target, True)
    if source.isfile(url):
        local = os.path.join(target, urls.basename(url))
        with source.open_read(url) as handle, open(local, "wb") as out:
            shutil.copyfileobj(handle, out, 1 << 20)
        return local
    return copy_tree(source, url, target)
