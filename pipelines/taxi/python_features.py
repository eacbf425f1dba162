"""Plain-Python taxi features, for a side configured with `transform: {python: python_features:python_features}`.

No TensorFlow: a per-record function over the record dict parity builds (capture fields with `None` for
nulls, lists for `tags`, plus the shard aggregates when the side has them). Every feature is a pure
function of the record, so the two sides can only disagree through their inputs.
"""

from __future__ import annotations

import math
from typing import Any

AIRPORT_ZONES = frozenset({"O'Hare", "Garfield Ridge"})
# America/Chicago entered daylight time at 2024-03-10T08:00:00Z; the capture spans that switch.
# Fixed here so the features do not depend on the worker's tz database (catalogue E3).
_DST_START_2024 = 1710057600
_CST_OFFSET = -6 * 3600
_CDT_OFFSET = -5 * 3600


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _local_hour(event_time: int) -> int:
    """Chicago local hour for March 2024 (the capture's span), floor division for pre-1970 too."""
    offset = _CDT_OFFSET if event_time >= _DST_START_2024 else _CST_OFFSET
    return ((event_time + offset) // 3600) % 24


def python_features(record: dict[str, Any]) -> dict[str, Any]:
    """Features of one trip record.

    >>> f = python_features({"event_time": 1709942411, "pickup_zone": "O'Hare", "dropoff_zone": "Loop",
    ...                      "company": None, "fare": 40.0, "trip_miles": 16.0, "trip_seconds": 1800,
    ...                      "payment_type": "Cash", "tips": 0.0, "tags": ["airport"]})
    >>> f["hour_utc"], f["hour_local"], f["is_airport"], f["fare_per_mile"], f["company"]
    (0, 18, True, 2.5, '(none)')
    """
    event_time = int(record["event_time"])
    fare = _number(record.get("fare"))
    miles = _number(record.get("trip_miles"))
    seconds = _number(record.get("trip_seconds"))
    tips = _number(record.get("tips")) or 0.0
    tags = list(record.get("tags") or [])
    company = record.get("company")

    features: dict[str, Any] = {
        "hour_utc": (event_time // 3600) % 24,
        "hour_local": _local_hour(event_time),
        "is_airport": record.get("pickup_zone") in AIRPORT_ZONES
        or record.get("dropoff_zone") in AIRPORT_ZONES,
        "company": company if company else "(none)",
        "fare_missing": fare is None,
        "log_fare": math.log1p(fare) if fare is not None and fare >= 0 else None,
        "fare_per_mile": fare / miles if fare is not None and miles else None,
        "mph": miles / (seconds / 3600) if miles is not None and seconds else None,
        "tips_ratio": tips / max(fare or 0.0, 1.0),
        "is_cash": record.get("payment_type") == "Cash",
        "n_tags": len(tags),
        "is_surge": "surge" in tags,
    }
    if "trips_1h" in record:
        features["trips_1h"] = int(record["trips_1h"])
    if "fare_mean_1h" in record:
        mean = _number(record["fare_mean_1h"])
        features["fare_vs_zone_mean"] = fare - mean if fare is not None and mean is not None else None
    return features
