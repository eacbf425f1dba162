"""Event time of a record as integer microseconds since the epoch (the `window` stage's clock): what a config says
of it (`TimestampSpec`) and its one batch function (`EventTime.micros_many`).

Conversions follow Beam: integer values are exact; float seconds are truncated toward zero the way
`apache_beam.utils.timestamp.Timestamp(seconds)` truncates (`int(seconds * 10**6)`), so a record stamped
here gets the same window as `TimestampedValue(record, seconds)` in a Beam job.
"""
from __future__ import annotations

import datetime as _dt
import zoneinfo
from dataclasses import dataclass
from typing import Any, Callable

from parity.choices import US_PER_UNIT
from parity.stages.reference import Reference

TIME_UNITS = ("s", "ms", "us", "ns", "iso8601")

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_FACTOR = US_PER_UNIT


@dataclass(frozen=True)
class TimestampSpec:
    """A side's `timestamp:`: the field holding the event time and its unit (and zone, for ISO 8601 text
    without one), or a user `function` of the record returning seconds."""

    field: str | None
    unit: str
    tz: str
    function: Reference | None


class TimestampError(ValueError):
    """A record's event time is missing or cannot be read; the record is quarantined."""


def to_micros(value: Any, unit: str, tz: str = "UTC") -> int:
    """Converts one raw time value in `unit` to integer microseconds since the epoch."""
    if value is None:
        raise TimestampError("is null")
    if isinstance(value, bool):
        raise TimestampError(f"is a bool ({value!r}), expected a number")
    if unit == "iso8601":
        if not isinstance(value, str):
            raise TimestampError(f"expected an ISO 8601 string, got {value!r:.60}")
        try:
            parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise TimestampError(f"is not ISO 8601: {value!r:.60}") from exc
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=zoneinfo.ZoneInfo(tz))
        return (parsed - _EPOCH) // _dt.timedelta(microseconds=1)
    if isinstance(value, str):
        raise TimestampError(f"expected a number in unit '{unit}', got the string {value!r:.60}")
    if unit == "ns":
        return value // 1000 if isinstance(value, int) else int(value / 1000)
    factor = _FACTOR[unit]
    if isinstance(value, int):
        return value * factor
    try:
        if value != value or value in (float("inf"), float("-inf")):
            raise TimestampError(f"is not finite ({value!r})")
        return int(value * factor)
    except TypeError as exc:
        raise TimestampError(f"expected a number, got {type(value).__name__}") from exc


class EventTime:
    """Reads the event time of records as configured by `sides.<side>.timestamp`."""

    def __init__(self, spec: TimestampSpec | None):
        self._spec = spec
        self._fn: Callable | None = spec.function.resolve() if spec and spec.function else None

    def micros_many(self, records: list[dict]) -> list[int | None | TimestampError]:
        """The event time in µs of each record (None for each when the side has no timestamp config, Beam's
        default), or a `TimestampError` in place of one that cannot be read: that record is quarantined.

        Raises:
            Exception: whatever a `timestamp.function` raises (other than `TimestampError`), unchanged; the
                caller finds the record (one-record batches) and names it.
        """
        spec = self._spec
        if spec is None:
            return [None] * len(records)
        exact = self._exact_ints(records)
        if exact is not None:
            return exact
        return [self._one(record) for record in records]

    def _exact_ints(self, records: list[dict]) -> list[int] | None:
        """`micros_many` when each is one multiplication (a field in s, ms or us holding an exact int in every
        record), in one pass over the batch; else None, and each record goes through `to_micros`."""
        spec = self._spec
        if spec is None or self._fn is not None or spec.unit not in _FACTOR:
            return None
        values = [record.get(spec.field) for record in records]
        if set(map(type, values)) != {int}:  # a missing field or a null is None; a bool is not an int here
            return None
        factor = _FACTOR[spec.unit]
        return [value * factor for value in values]

    def _one(self, record: dict) -> int | TimestampError:
        spec = self._spec
        try:
            if self._fn is not None:
                return to_micros(self._fn(record), "s")
            if spec.field not in record:  # type: ignore[union-attr]
                raise TimestampError(f"field '{spec.field}' is missing")  # type: ignore[union-attr]
            try:
                return to_micros(record[spec.field], spec.unit, spec.tz)  # type: ignore[union-attr]
            except TimestampError as exc:
                raise TimestampError(f"field '{spec.field}' {exc}") from None  # type: ignore[union-attr]
        except TimestampError as exc:
            return exc
