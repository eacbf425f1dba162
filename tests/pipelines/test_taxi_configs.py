"""The taxi parity configs: one planted bug in parity.yaml, none in parity-fixed.yaml, and the numbers the
README promises for the bug, computed here from the contract's lateness rule (CONTRACT.md section 3)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TAXI_DIR = REPO / "pipelines" / "taxi"
CAPTURE = REPO / "fixtures" / "taxi" / "capture" / "trips.jsonl"
HOUR = 3600


def _load(name: str) -> dict:
    with open(TAXI_DIR / name, encoding="utf-8") as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def trips() -> list[dict]:
    with open(CAPTURE, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _arrival_order(trip: dict) -> tuple:
    return trip["ingest_time"], trip["trip_id"]


def _late_under_contract(trips: list[dict], out_of_orderness: int, allowed: int, order=_arrival_order) -> list[dict]:
    """Records dropped as late: in arrival order, watermark = max event time seen - out_of_orderness, and a
    record whose window ended more than `allowed` before the watermark is dropped."""
    dropped, max_seen = [], None
    for trip in sorted(trips, key=order):
        window_end = (trip["event_time"] // HOUR + 1) * HOUR
        if max_seen is not None and (max_seen - out_of_orderness) - window_end > allowed:
            dropped.append(trip)
        max_seen = trip["event_time"] if max_seen is None else max(max_seen, trip["event_time"])
    return dropped


@pytest.mark.parametrize("name", ["parity.yaml", "parity-fixed.yaml"])
def test_config_reads_the_capture_with_every_field_in_the_schema(name, trips):
    config = _load(name)
    assert config["version"] == 1
    capture = config["capture"]
    assert (TAXI_DIR / capture["path"]).resolve() == CAPTURE.resolve()
    assert capture["key"] == ["trip_id"]
    assert set(capture["schema"]) == set(trips[0])
    assert capture["schema"]["tags"] == "list<string>"
    assert capture["schema"]["fare"] == "float64" and capture["schema"]["trip_id"] == "int64"
    assert list(config["sides"]) == ["offline", "production"]


@pytest.mark.parametrize("name", ["parity.yaml", "parity-fixed.yaml"])
def test_sides_differ_only_where_the_serving_path_differs(name):
    offline, production = (_load(name)["sides"][s] for s in ("offline", "production"))
    assert offline["transform"] == {"tft": "preprocess:preprocessing_fn"}
    assert production["transform"] == {"saved": {"from_side": "offline"}}
    assert offline["coder"] == {"type": "pickle"} and production["coder"] == {"type": "avro"}
    for stage in ("timestamp", "shard", "seed"):
        assert production[stage] == offline[stage], stage
    assert offline["window"] == {"type": "fixed", "size": "1h"}
    assert offline["shard"]["aggregates"] == {
        "trips_1h": {"op": "count"},
        "fare_mean_1h": {"op": "mean", "field": "fare"},
    }


def test_the_only_planted_bug_is_that_production_drops_late_trips():
    buggy, fixed = _load("parity.yaml"), _load("parity-fixed.yaml")
    assert buggy["sides"]["production"]["window"] == {
        "type": "fixed",
        "size": "1h",
        "lateness": {"arrival": "ingest_time", "out_of_orderness": "60s", "allowed": "0s"},
    }
    assert fixed["sides"]["production"]["window"] == buggy["sides"]["offline"]["window"]
    for config in (buggy, fixed):
        del config["name"], config["sides"]["production"]["window"]
    assert buggy == fixed


def test_the_capture_makes_the_bug_visible_as_the_readme_says(trips):
    dropped = _late_under_contract(trips, out_of_orderness=60, allowed=0)
    assert len(dropped) == 13
    assert all(t["ingest_time"] - t["event_time"] >= 120 for t in dropped)  # only the delayed arrivals
    groups = Counter((t["event_time"] // HOUR, t["pickup_zone"]) for t in trips)
    hit = Counter((t["event_time"] // HOUR, t["pickup_zone"]) for t in dropped)
    assert len(hit) == 13
    assert sum(groups[g] - n for g, n in hit.items()) == 124  # their group mates: shard.membership
    # Neither the order among equal ingest_times nor "more than" vs "at least" decides any record here.
    for order in (lambda t: (t["ingest_time"], t["event_time"]), lambda t: (t["ingest_time"], -t["event_time"])):
        assert _late_under_contract(trips, 60, 0, order) == _late_under_contract(trips, 60, 0)
    assert _late_under_contract(trips, 60, -1) == dropped


def test_without_lateness_no_trip_is_dropped_and_fixed_config_has_none(trips):
    assert "lateness" not in _load("parity-fixed.yaml")["sides"]["production"]["window"]
    assert _late_under_contract(trips, out_of_orderness=60, allowed=86400) == []
