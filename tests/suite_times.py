"""Seconds the slow test folders took (their tests, their services' start), printed at the end of a run so that
the CI log shows where the time went. tests/conftest.py times the folders; their conftests add start times."""
from __future__ import annotations

# folder -> the label of its line in the summary
FOLDERS = {"tests/flink/": "Flink", "tests/cluster/": "Cluster test bed"}
TIMES: dict[str, dict[str, float]] = {}


def add(label: str, key: str, seconds: float) -> None:
    entry = TIMES.setdefault(label, {})
    entry[key] = entry.get(key, 0.0) + seconds
