"""A module lock that a forked child gets new and free.

The worker pool's zygote forks each SDK harness from a process whose threads may hold a storage lock at that
moment; the child has none of those threads, so a lock copied held would never be let go. `ForkLock` replaces its
lock in the child (`os.register_at_fork`); what the lock guards stays, for its module to keep or clear.
"""
from __future__ import annotations

import os
import threading
from typing import Any


class ForkLock:
    """A `threading.Lock` (`with`, `acquire`, `release`, `locked`) that is a new, free lock in a forked child.
    For module-level locks: each one registers a fork hook for the life of the process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._renew)

    def _renew(self) -> None:
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()
