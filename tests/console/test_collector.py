"""`collecting_less` changes the garbage collector only for the call it wraps: a caller's thresholds and frozen
objects are as they were after it."""
from __future__ import annotations

import gc

from parity.console.collector import collecting_less


def _tracked(objects: list) -> list[bool]:
    """Whether each of `objects` is in one of the collector's three generations: a frozen object is in none."""
    ids = {id(o) for o in gc.get_objects()}
    return [id(o) in ids for o in objects]


def test_a_callers_frozen_objects_stay_frozen_and_its_thresholds_come_back():
    kept = [[n] for n in range(100)]  # lists: objects the collector tracks
    thresholds = gc.get_threshold()
    gc.freeze()  # the caller's own, as a server preloading its modules does
    try:
        assert not any(_tracked(kept))
        with collecting_less((50_000, 50, 100)):
            assert gc.get_threshold() == (50_000, 50, 100)
            during = [[n] for n in range(10)]
        # before: gc.unfreeze() thawed the caller's objects too. The freeze count is not compared: another thread
        # of the test process (pytest-xdist's channel) may free some frozen object meanwhile.
        assert not any(_tracked(kept))
        assert all(_tracked(during))
        assert gc.get_threshold() == thresholds
    finally:
        gc.unfreeze()
    assert all(_tracked(kept))


def test_without_a_callers_frozen_objects_the_context_freezes_and_thaws_its_own():
    gc.unfreeze()
    with collecting_less((50_000, 50, 100)):
        assert gc.get_freeze_count() > 0  # the objects alive when it started, out of the collections
    assert gc.get_freeze_count() == 0
