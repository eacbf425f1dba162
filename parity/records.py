"""The state of one record as it moves through a side's stages (a plain, picklable object)."""
from __future__ import annotations

import json
from typing import Any

from parity import canonical
from parity.config import SideConfig, capture_field_types
from parity.schema import FieldType


class Rec:
    """One captured record on one side, with the value it takes at each stage so far.

    Attributes:
        rid: (file index, record index): unique within a side; never reported.
        location: where the record was read, e.g. `capture/trips.jsonl:12`.
        record: the record dict at the current stage.
        key: the record key (a list of the key fields' values, or the input fingerprint).
        key_bytes: the canonical bytes of `key`.
        input_fp: the input stage fingerprint (used to order duplicates and ties).
        timestamp_us: event time in µs, or None without a timestamp config.
        arrival_us: arrival time in µs for lateness replay, or None.
        windows: the proto windows Beam's WindowFn assigned.
        group: the grouping key, `group_bytes` its canonical bytes.
        values: stage name -> the value fingerprinted for that stage.
        transform_input: the record handed to the transform, or None when it never gets there.
    """

    __slots__ = ("rid", "location", "record", "key", "key_bytes", "input_fp", "timestamp_us", "arrival_us",
                 "windows", "group", "group_bytes", "values", "transform_input")

    def __init__(self, rid: tuple[int, int], location: str, record: dict, key: Any, key_bytes: bytes,
                 input_fp: int):
        self.rid = rid
        self.location = location
        self.record = record
        self.key = key
        self.key_bytes = key_bytes
        self.input_fp = input_fp
        self.timestamp_us: int | None = None
        self.arrival_us: int | None = None
        self.windows: list[tuple] = []
        self.group: Any = None
        self.group_bytes: bytes = b""
        self.values: dict[str, Any] = {"input": record}
        self.transform_input: dict | None = None

    def __getstate__(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state: tuple) -> None:
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)

    def key_text(self) -> str:
        return json.dumps(canonical.to_json(self.key), ensure_ascii=False, sort_keys=True)


def side_field_types(side: SideConfig) -> dict[str, FieldType] | None:
    """Types of the fields a record carries after the shard stage (schema plus aggregates)."""
    return capture_field_types(side)
