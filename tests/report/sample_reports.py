"""Hand-built report dicts (the parsed report.json) for the renderer tests: a clean run and a hostile one."""
from __future__ import annotations

from typing import Any

STAGES = ("input", "window", "shard", "coder", "seed", "transform")

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
UNICODE = "Zürich – 東京 ✓"
PIPE_NEWLINE = "a|b\nc"
HOSTILE = "'\"><script>alert(2)</script><img src=x onerror=alert(3)>|\n`@all **x** [l](#) &amp;"


def _records(paired: int, matched: int, within: int, diverged: int) -> dict[str, Any]:
    return {"left": paired + 1, "right": paired + 2, "paired": paired, "matched": matched,
            "within_tolerance": within, "diverged": diverged, "left_only": 1, "right_only": 0,
            "duplicate_keys": 0, "quarantined": {"left": 0, "right": 2},
            "quarantine_reasons": {"left": {}, "right": {"invalid json": 2}}}


def _environment(right_beam: str) -> dict[str, Any]:
    left = {"apache_beam": "2.56.0", "python": "3.11.7", "runner": "DirectRunner"}
    right = {"apache_beam": right_beam, "python": "3.11.7", "runner": "DirectRunner"}
    differences = ([{"name": "apache_beam", "left": left["apache_beam"], "right": right_beam}]
                   if right_beam != left["apache_beam"] else [])
    return {"left": left, "right": right, "differences": differences}


def clean_report() -> dict[str, Any]:
    """Every paired record matches; one record on the left only, two quarantined on the right."""
    return {
        "format": "parity.report/1",
        "verdict": "parity",
        "sides": {"left": "offline", "right": "production"},
        "records": _records(100, 98, 2, 0),
        "stages": [{"name": s, "diverged": 0, "first_diverged": 0, "within_tolerance": 2 if s == "transform" else 0}
                   for s in STAGES],
        "first_divergence": None,
        "causes": [],
        "features": [{"name": "fare_z", "stage": "transform", "mismatched": 0, "within_tolerance": 2,
                      "max_abs_delta": 1e-9, "presence": "both"}],
        "examples": [],
        "analyzers": [{"name": "vocabulary:zone", "equal": True, "detail": "12 terms"}],
        "environment": _environment("2.56.0"),
        "name": "taxi-hourly",
        "encoding": "parity.canonical/1",
        "max_diverged": 0,
        "redacted": False,
    }


def diverged_report() -> dict[str, Any]:
    """Records diverge first at window (two causes) and at transform; examples carry hostile strings."""
    diverged = {"input": 0, "window": 7, "shard": 7, "coder": 7, "seed": 7, "transform": 10}
    first = {"input": 0, "window": 7, "shard": 0, "coder": 0, "seed": 0, "transform": 3}
    return {
        "format": "parity.report/1",
        "verdict": "diverged",
        "sides": {"left": "offline", "right": "production"},
        "records": _records(100, 90, 0, 10),
        "stages": [{"name": s, "diverged": diverged[s], "first_diverged": first[s], "within_tolerance": 0}
                   for s in STAGES],
        "first_divergence": {"stage": "window", "records": 7, "cause": "window.timestamp_unit",
                             "explanation": f"event times differ by a factor of 1000 {SCRIPT}"},
        "causes": [
            {"stage": "window", "cause": "window.timestamp_unit", "records": 5,
             "explanation": "event times differ by a factor of 1000 (seconds vs milliseconds)"},
            {"stage": "window", "cause": "window.boundary", "records": 2,
             "explanation": f"same event time, different window | {IMG}"},
            {"stage": "transform", "cause": "transform.mapping", "records": 3,
             "explanation": "per-record differences with equal analyzers"},
        ],
        "features": [
            {"name": "fare_z", "stage": "transform", "mismatched": 3, "within_tolerance": 0,
             "max_abs_delta": 0.25, "presence": "both"},
            {"name": f"zone_{SCRIPT}", "stage": "transform", "mismatched": 1, "within_tolerance": 0,
             "max_abs_delta": None, "presence": "left"},
            {"name": "hour", "stage": "transform", "mismatched": 0, "within_tolerance": 0,
             "max_abs_delta": None, "presence": "both"},
        ],
        "examples": [
            {"key": SCRIPT, "stage": "window", "cause": "window.timestamp_unit",
             "left": {"event_time_us": 1700000000000000, "windows": [[1699999200000000, 1700002800000000]]},
             "right": {"event_time_us": 1700000000000, "windows": [[1699999200000, 1700002800000]]},
             "explanation": "factor 1000",
             "location": {"left": "capture/a.jsonl:3", "right": f"capture/{IMG}.jsonl:3"}},
            {"key": [42, IMG], "stage": "window", "cause": "window.boundary",
             "left": {"event_time_us": 10, "windows": [[0, 3600]], "zone": UNICODE},
             "right": {"event_time_us": 10, "windows": [[0, 1800]], "zone": UNICODE}},
            {"key": "k|3\nx", "stage": "transform", "cause": "transform.mapping",
             "left": {"zone_id": 1, "fare_z": 0.5, "meta": {"note": SCRIPT, "same": 1}, "tag": PIPE_NEWLINE},
             "right": {"zone_id": 1.0, "fare_z": 0.75, "meta": {"note": IMG, "same": 1}, "extra": "x" * 300},
             "location": {"left": None, "right": None}},
            {"key": "k4", "stage": "transform", "cause": "transform.mapping",
             "left": {"zone_id": 2}, "right": {"zone_id": 3}},
        ],
        "analyzers": [{"name": "vocabulary:zone", "equal": False, "detail": f"right has {SCRIPT}"}],
        "environment": _environment(f"2.57.0{IMG}"),
        "name": "taxi-hourly",
        "encoding": "parity.canonical/1",
        "max_diverged": 0,
        "redacted": False,
        "unpaired_examples": {"left_only": [IMG], "right_only": []},
    }


def _hostile(value: Any, data_keys: bool) -> Any:
    if isinstance(value, str):
        return f"{value}{HOSTILE}"
    if isinstance(value, dict):
        return {(_hostile(k, False) if data_keys else k): _hostile(v, data_keys or k in ("left", "right"))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_hostile(v, data_keys) for v in value]
    return value


def hostile_report() -> dict[str, Any]:
    """The diverged report with every string, and every key of a data dict (a side's record, environment,
    quarantine reasons), suffixed with a payload that breaks out of HTML, attribute and Markdown contexts."""
    return _hostile(diverged_report(), False)
