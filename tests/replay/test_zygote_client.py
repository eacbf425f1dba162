"""The pool's end of the harness zygote (parity/replay/zygote_client.py) on its own: what it raises when the zygote
cannot start. The zygote with a pool and forked harnesses: tests/replay/test_worker_pool.py."""
from __future__ import annotations

import pytest

from parity.errors import RunnerError
from parity.replay.zygote_client import Zygote, ZygoteError


def test_a_zygote_that_cannot_start_raises_a_runner_error_not_an_os_error_a_harness_start_would_take_for_its_own():
    zygote = Zygote("/nonexistent/python")
    with pytest.raises(ZygoteError, match="cannot start the harness zygote with /nonexistent/python") as raised:
        zygote.start()
    assert isinstance(raised.value, RunnerError)
    assert not isinstance(raised.value, OSError)
    assert not zygote.running
