"""Which process loaded a config, and whether the one importing its `module:attr` references now is another: an
SDK worker (a Flink TaskManager's harness, a DirectRunner worker process), where the import of a user's module
fails for reasons of that worker (its sys.path, its interpreter, its files), not of the client's config.

A `Ref` remembers the process it was made in (`here()`, kept through pickling to the workers); a failed import in
another process says so with `on_worker`, which names that worker and how to ship the modules to it.
"""
from __future__ import annotations

import getpass
import os
import socket
import sys

MAX_PATH_SHOWN = 400  # characters of the worker's sys.path in a message


def here() -> str:
    """This process, as `host:pid`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a uid with no passwd entry (a container's)
        return str(os.getuid())


def on_worker(origin: str, base_dir: str) -> str | None:
    """The clause a failed import adds when it runs in another process than `origin` (the one that loaded the
    config): which worker (host, pid, user), its interpreter and sys.path, and the fix; None in `origin` itself."""
    if not origin or origin == here():
        return None
    path = repr(sys.path)
    if len(path) > MAX_PATH_SHOWN:
        path = path[:MAX_PATH_SHOWN] + "...]"
    folder = _folder_there(base_dir)
    return (f"on an SDK worker, not in the parity process that loaded the config ({origin}): worker host "
            f"{socket.gethostname()}, pid {os.getpid()}, user {_user()}, python {sys.executable}, sys.path {path}; "
            f"the config's folder {base_dir} {folder}")


def _folder_there(path: str) -> str:
    """What the worker finds at the client's config folder `path`."""
    try:
        os.stat(path)
    except PermissionError:
        return "is not readable by this worker's user"
    except OSError:
        return "does not exist there"
    return "is there too" if os.access(path, os.R_OK | os.X_OK) else "is not readable by this worker's user"


WORKER_FIX = ("the workers import the config's modules themselves: put their folder on the worker pool's "
              "PYTHONPATH (docs/flink.md, 'The config's modules on the workers'), or stage them with Beam's "
              "--setup_file or --requirements_file")
