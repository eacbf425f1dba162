"""`transform.python` functions whose two sides meet: with PARITY_TEST_MEET_DIR set, each side's first record
waits (up to MEET_LIMIT) until the other side has reached its own transform, so a check passes only when both
sides' replays run at the same time; unset, they are transform_bucket_boundary's functions as they are. The sides
run in two processes (`--sides-at-once`: this process and its child; a check's noise replays: two `parity replay
--reorder` processes) and meet through files in that folder, named by the phase (`check`, `noise`) and side."""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "fixtures", "scenarios", "transform_bucket_boundary"))

import sc_transform_bucket_boundary_fns as fns  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEET_ENV = "PARITY_TEST_MEET_DIR"
MEET_LIMIT = 180.0  # seconds: sides that never meet fail their replay rather than hanging the session
_met: set[tuple[str, str, str]] = set()


def _meet(side: str, other: str) -> None:
    folder = os.environ.get(MEET_ENV)
    phase = "noise" if "--reorder" in sys.argv else "check"  # a noise replay is `parity replay ... --reorder`
    # one meeting per folder, phase and side: a test process that met in an earlier test's folder meets again
    if not folder or (folder, phase, side) in _met:
        return
    with open(os.path.join(folder, f"{phase}-{side}"), "w", encoding="utf-8") as handle:
        handle.write(f"{time.time()}\n")
    deadline = time.monotonic() + MEET_LIMIT
    while not os.path.exists(os.path.join(folder, f"{phase}-{other}")):
        if time.monotonic() > deadline:
            raise RuntimeError(f"meeting_transform: side {side} waited {MEET_LIMIT:g} s for side {other}'s job")
        time.sleep(0.05)
    _met.add((folder, phase, side))


def offline_features(record: dict) -> dict:
    _meet("offline", "production")
    return fns.offline_features(record)


def production_features(record: dict) -> dict:
    _meet("production", "offline")
    return fns.production_features(record)


def write_config(folder: str, noise: bool = False) -> str:
    """A parity.yaml in `folder` whose sides are these functions, over the scenarios' shared capture."""
    scenarios = os.path.join(ROOT, "fixtures", "scenarios")
    text = f"""version: 1
name: sides-meet
capture:
  path: {os.path.join(scenarios, "_data", "trips.jsonl")}
  format: jsonl
  key: [trip_id]
  schema: {{trip_id: int64, event_time: int64, ingest_time: int64, zone: string, company: string,
           fare: float64, miles: float64}}
sides:
  offline:
    transform: {{python: "tests.meeting_transform:offline_features"}}
  production:
    transform: {{python: "tests.meeting_transform:production_features"}}
report: {{noise: {"true" if noise else "false"}}}
"""
    path = os.path.join(folder, "parity.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    return path
