"""`collecting_less` changes the garbage collector only for the call it wraps: a caller's thresholds and frozen
objects are as they were after it."""
from __future__ import annotations

import gc

from parity.console.collector import collecting_less


def test_a_callers_frozen_objects_stay_frozen_and_its_thresholds_come_back():
    kept = [object() for _ in range(100)]
    thresholds = gc.get_threshold()
    gc.freeze()  # the caller's own, as a server preloading its modules does
    try:
        frozen = gc.get_freeze_count()
        with collecting_less((50_000, 50, 100)):
            assert gc.get_threshold() == (50_000, 50, 100)
            during = [object() for _ in range(10)]
        assert gc.get_freeze_count() == frozen  # before: gc.unfreeze() thawed the caller's objects too
        assert gc.get_threshold() == thresholds
    finally:
        gc.unfreeze()
    assert kept and during


def test_without_a_callers_frozen_objects_the_context_freezes_and_thaws_its_own():
    gc.unfreeze()
    with collecting_less((50_000, 50, 100)):
        assert gc.get_freeze_count() > 0  # the objects alive when it started, out of the collections
    assert gc.get_freeze_count() == 0
