"""Pickles that only this run's diff job can have written (`parity.compare.engine`).

The engine's workers hand their summaries to the client as files in a work folder under the run's out folder. An
out folder may sit on shared storage (`s3://team-bucket/...`) that others can write, and unpickling runs code: a
file planted there would run in the client. So each run draws a secret, the job carries it to its workers inside
its own DoFns (Beam's channel from the client to its workers, which already carries pickled code), each file holds
the HMAC-SHA256 of its name and pickle under that secret, and the client unpickles only a file whose MAC matches:
a file copied under another name (one key range's summary as another's) does not.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import posixpath
from typing import Any

from parity.errors import RunnerError

MAC_SIZE = 32  # bytes of HMAC-SHA256, before the pickle


def new_secret() -> bytes:
    return os.urandom(32)


def _mac(secret: bytes, path: str, data: bytes) -> bytes:
    mac = hmac.new(secret, posixpath.basename(path).encode("utf-8") + b"\0", hashlib.sha256)
    mac.update(data)
    return mac.digest()


def sealed(secret: bytes, value: Any, path: str) -> bytes:
    """`value` pickled for the file `path`, after the MAC of the file's name and the pickle under `secret`."""
    data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    return _mac(secret, path, data) + data


def opened(secret: bytes, blob: bytes, path: str) -> Any:
    """The value `sealed` wrote for `path`; RunnerError (exit 2), unpickling nothing, when its MAC does not
    match."""
    mac, data = blob[:MAC_SIZE], blob[MAC_SIZE:]
    if len(blob) < MAC_SIZE or not hmac.compare_digest(mac, _mac(secret, path, data)):
        raise RunnerError(f"{path}: not written by this check's diff job (its signature does not match), so it was "
                          f"not read: something else wrote into the out folder while the check ran; run it again "
                          f"into an out folder that only it writes")
    return pickle.loads(data)  # noqa: S301 - written by this run's own job, as its MAC shows
