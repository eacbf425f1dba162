"""A `transform.python` function that holds a replay in its transform stage until a test releases it: with
LOOPBACK workers it runs in the test's process, so the test and the step share `RELEASE`."""
from __future__ import annotations

import threading

RELEASE = threading.Event()
HOLD_LIMIT = 300.0  # seconds: a test that never releases fails its replay rather than hanging the session


def features(record: dict) -> dict:
    if not RELEASE.wait(timeout=HOLD_LIMIT):
        raise RuntimeError(f"held_transform: not released within {HOLD_LIMIT:g} s")
    return {"fare": record["fare"]}
