"""What a contender script leaves behind, written one way by all of them: its counts of first differences (from a
Beam job, a few bytes) and its result file for the harness (`run.py` reads it)."""
from __future__ import annotations

import json
from typing import Any


def count_into(outcomes: Any, summary_path: str) -> None:
    """Counts the elements of the PCollection `outcomes` (one per record: what it found) and writes {outcome:
    count}, sorted, to `summary_path` when the pipeline runs; `read_counts` reads it back after."""
    import apache_beam as beam

    def write(counts: list) -> None:  # the counts only: a few bytes
        with open(summary_path, "w", encoding="utf-8") as handle:
            json.dump(dict(sorted(counts)), handle, indent=2)

    _ = (outcomes
         | "Count" >> beam.combiners.Count.PerElement()
         | "All" >> beam.combiners.ToList()
         | "Write" >> beam.Map(write))


def read_counts(summary_path: str) -> dict[str, Any]:
    """{"outcome": {outcome: count}}, as `count_into` wrote it: the contender's part of its result."""
    with open(summary_path, encoding="utf-8") as handle:
        return {"outcome": json.load(handle)}


def write_result(path: str, result: dict[str, Any]) -> None:
    """The contender's result file: indented, sorted keys, a final newline."""
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=2, sort_keys=True)
        handle.write("\n")
