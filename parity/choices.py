"""The closed sets of names that the config, the CLI, the Python API and the readers share, defined once each.

A light module (no import of parity, numpy, pyarrow or Beam), so that the CLI builds its parser without
loading the readers or Beam.
"""
from __future__ import annotations

FORMATS: tuple[str, ...] = ("jsonl", "tfrecord", "parquet", "csv")  # capture formats
RUNNERS: tuple[str, ...] = ("DirectRunner", "FlinkRunner")        # `--runner`, `parity.check(runner=...)`
DIFF_ON: tuple[str, ...] = ("auto", "engine", "local")             # `--diff-on`: where a diff's per-pair work runs
US_PER_UNIT = {"us": 1, "ms": 1_000, "s": 1_000_000}               # time units of timestamps, in microseconds
