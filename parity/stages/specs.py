"""What a config says about the timestamp, window and shard stages, as frozen dataclasses, and the choices
each accepts: the stage modules read them, parity.config builds them from the YAML (the seed and coder stages
keep theirs in their own modules, `SeedSpec` and `CoderSpec`).

A module of its own, importing nothing heavy, so that loading a config does not import Beam (the window stage
does) and the stages need not import the config that is built from them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parity.config.model import Ref

TIME_UNITS = ("s", "ms", "us", "ns", "iso8601")
WINDOW_TYPES = ("fixed", "sliding", "session", "global")
SHARD_HASHES = ("xxh3", "crc32", "md5", "python")
AGGREGATE_OPS = ("count", "sum", "mean", "min", "max", "distinct_count")
AGGREGATE_COMBINES = ("exact", "sequential")
MAX_WINDOWS_PER_RECORD = 10_000       # windows a sliding window puts one record in (size / period)


@dataclass(frozen=True)
class TimestampSpec:
    field: str | None
    unit: str
    tz: str
    function: Ref | None


@dataclass(frozen=True)
class LatenessSpec:
    arrival: str
    out_of_orderness_us: int
    allowed_us: int


@dataclass(frozen=True)
class WindowSpec:
    type: str  # fixed | sliding | session | global | windowfn
    size_us: int = 0
    period_us: int = 0
    offset_us: int = 0
    gap_us: int = 0
    windowfn: Ref | None = None
    lateness: LatenessSpec | None = None


@dataclass(frozen=True)
class AggregateSpec:
    name: str
    op: str
    field: str | None
    combine: str = "exact"  # exact | sequential (float sum/mean in event-time order, like a streaming combiner)


@dataclass(frozen=True)
class ShardSpec:
    key_fields: tuple[str, ...] | None
    key_function: Ref | None
    count: int
    hash: str
    aggregates: tuple[AggregateSpec, ...]
