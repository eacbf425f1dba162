"""Event times and window bounds as ISO-8601 UTC, shown next to the raw microseconds (pure).

report.json keeps the raw integers (docs/contract.md, section 5); the Markdown and HTML reports and `parity show` add
these texts beside them, so whoever reads `1709972952000000` at 3 a.m. sees `2024-03-09T08:29:12Z` too, and a
millisecond value read as microseconds shows up as a date in January 1970.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

__all__ = ["iso_utc", "stage_field_utc", "window_utc", "window_value_utc", "windows_utc"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso_utc(micros: Any) -> str | None:
    """Microseconds since the epoch as ISO-8601 UTC, or None for a non-integer or a time outside years 1-9999.

    >>> iso_utc(1709972952000000), iso_utc(1709972952000001), iso_utc(-1)
    ('2024-03-09T08:29:12Z', '2024-03-09T08:29:12.000001Z', '1969-12-31T23:59:59.999999Z')
    """
    if not isinstance(micros, int) or isinstance(micros, bool):
        return None
    try:
        moment = _EPOCH + timedelta(microseconds=micros)
    except OverflowError:  # Beam's min and max timestamps are some 290,000 years from the epoch
        return None
    return moment.replace(tzinfo=None).isoformat() + "Z"


def window_utc(window: Any) -> str | None:
    """An interval window `[start_us, end_us]` as an ISO-8601 interval `start/end` (the end is excluded, as in
    Beam); None for the global window or anything else.

    >>> window_utc([1709971200000000, 1709974800000000])
    '2024-03-09T08:00:00Z/2024-03-09T09:00:00Z'
    """
    if not isinstance(window, (list, tuple)) or len(window) != 2:
        return None
    start, end = iso_utc(window[0]), iso_utc(window[1])
    return f"{start}/{end}" if start and end else None


def windows_utc(windows: Any) -> str | None:
    """A window stage's `windows` list as ISO-8601 intervals joined by `, `; None when none is an interval."""
    if not isinstance(windows, list):
        return None
    texts = [window_utc(w) for w in windows]
    if not any(texts):
        return None
    return ", ".join(text or str(w) for text, w in zip(texts, windows))


def stage_field_utc(stage: Any, path: str, value: Any) -> str | None:
    """The UTC text to show beside one field of a stage value, or None: only the window stage has times, its
    event time (`timestamp_us`, or any other `*_us` field) and its `windows`."""
    if stage != "window":
        return None
    if path == "windows":
        return windows_utc(value)
    if path.endswith("_us"):
        return iso_utc(value)
    return None


def window_value_utc(value: Any) -> dict[str, Any] | None:
    """A window stage value's times as UTC for `parity show`: `{"timestamp_us": "...Z", "windows": ["start/end"]}`
    (a window that is not an interval is null); None when the value holds no time."""
    if not isinstance(value, dict):
        return None
    utc: dict[str, Any] = {}
    if (timestamp := iso_utc(value.get("timestamp_us"))) is not None:
        utc["timestamp_us"] = timestamp
    windows = value.get("windows")
    if isinstance(windows, list) and any(window_utc(w) for w in windows):
        utc["windows"] = [window_utc(w) for w in windows]
    return utc or None
