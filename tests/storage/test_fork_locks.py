"""The storage's module locks in a forked child (the harness zygote forks each SDK harness): a lock a thread of the
parent held at the fork is a new, free lock in the child (`os.register_at_fork`), never one held for ever."""
from __future__ import annotations

import os

import pytest

from parity.storage import local_copies, stores


@pytest.mark.parametrize("module, name", [(stores, "_BUILDING"), (local_copies, "_COPYING")])
def test_a_child_forked_while_the_parent_holds_a_storage_lock_can_take_it(module, name):
    with getattr(module, name):
        pid = os.fork()
        if pid == 0:  # the child: exit 0 when it may take the lock, 1 when it is held (by no thread of its own)
            try:
                os._exit(0 if getattr(module, name).acquire(blocking=False) else 1)
            finally:
                os._exit(2)
        assert getattr(module, name).locked()  # the parent's is still held by the parent
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
