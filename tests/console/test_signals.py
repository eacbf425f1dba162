"""parity.console.signals: a stop that arrives while signals are deferred (a job's cancel) is raised after."""
from __future__ import annotations

import os
import signal
import time

import pytest

from parity.console import signals


def test_a_stop_arriving_while_signals_are_deferred_is_raised_once_the_block_ends_and_not_inside_it():
    reached_the_end = False
    with signals.handled():
        with pytest.raises(signals.Interrupted) as raised:
            with signals.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # the handler runs here, and holds the signal
                reached_the_end = True
    assert reached_the_end and raised.value.signum == signal.SIGTERM
