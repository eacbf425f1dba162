"""How many cores this process may run on: what decides whether a second process (the second side of a check,
the second half of a diff) can run beside it."""
from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container or `taskset` narrows), else the
    machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
