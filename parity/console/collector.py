"""Cyclic garbage collection while parity's own hot loops run and its modules import: collect less often, restore it
after.

A replay decodes batches and a diff walks differing pairs; both allocate many short-lived containers that
reference counting frees, and at Python's default thresholds the collector keeps walking them (and, in its
full passes, every object the process holds). `collecting_less` raises the thresholds and freezes the objects
alive when it starts out of the collections, then restores both. Nested, the inner context changes nothing,
so a step that opens one inside another keeps the outer's setting until the outer closes.

A process that froze objects itself (`gc.freeze()` before it called `parity.check`) keeps them frozen: the
context then freezes nothing, since `gc.unfreeze` would thaw the caller's objects with parity's.
"""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator

_depth = 0  # collecting_less contexts open in this process: only the outermost one sets and restores


@contextlib.contextmanager
def collecting_less(thresholds: tuple[int, int, int]) -> Iterator[None]:
    global _depth
    if _depth:
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
        return
    before = gc.get_threshold()
    freezing = gc.get_freeze_count() == 0  # the caller's own frozen objects are never thawed
    if freezing:
        gc.freeze()
    gc.set_threshold(*thresholds)
    _depth = 1
    try:
        yield
    finally:
        _depth = 0
        gc.set_threshold(*before)
        if freezing:
            gc.unfreeze()


# While modules load (parity's own, Beam's, and TensorFlow's through a config's module): nearly every object an
# import makes lives on, and at Python's default thresholds the collector makes full passes over them while
# `parity check` starts, freeing nothing (benchmarks/RESULTS.md measures it).
LOADING_THRESHOLDS = (50_000, 50, 100)


def loading() -> contextlib.AbstractContextManager[None]:
    """Collects less often while modules are imported (`collecting_less`): around a command's imports and a
    config's user modules. Inside a replay's or a diff's own setting it changes nothing."""
    return collecting_less(LOADING_THRESHOLDS)

