"""The state of one batch of records as it moves through a side's stages: one object per batch, by column.

A batch is one Beam element. Its state is kept column by column in plain lists (not one object per record), so
that Beam's coder pickles a batch as a handful of lists that the C pickler walks without calling back into
Python, and every stage loops over plain lists. A batch goes through three phases (`READ`, `SETTLED`,
`STAGED`); each says which slots hold data, and a step checks the phase it takes (`RecBatch.expect`).
"""
from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import pyarrow as pa
from apache_beam import coders as beam_coders

from parity.capture.schema import FieldType
from parity.config import SideConfig, capture_field_types
from parity.encoding import canonical


def key_text(key: Any) -> str:
    """A record key as the JSON text reports show (`123`, `"a"`, `[1, "a"]`)."""
    if type(key) is int:  # the common key; json.dumps writes an int as its repr
        return repr(key)
    return json.dumps(canonical.to_json(key), ensure_ascii=False, sort_keys=True)


def key_texts(keys: list[Any]) -> list[str]:
    """`key_text` of each of a batch's keys: a batch of int keys (the common key) in one `map` of `repr`, any
    other key by `key_text`."""
    if set(map(type, keys)) <= {int}:
        return list(map(repr, keys))
    return [key_text(key) for key in keys]


# The phases a batch goes through, in order (`RecBatch.phase`); each names the slots that hold data then.
READ = "read"
"""Filled by `ReadBatchesFn`: every slot but `part`, `values`, `value_bytes`, `value_fps` and
`transform_arrow` has one item per record, in read order: `input_bytes` and `locations` as Arrow arrays (binary,
string: only written, they spill as two buffers each), the others as lists; `transform_inputs` is empty; the three
dicts are empty and `transform_arrow` is None."""
SETTLED = "settled"
"""After `ApplyStagesFn` (`RecBatch.settle`): the stages before the transform are kept only as their canonical
bytes and fingerprints (`value_bytes`, `value_fps`: stage name -> Arrow array), `values` holds only the
transform stage's list (each record's transform value, once `ApplyTransformFn` has run), `transform_inputs` has
one item per record, and `records`, `timestamps`, `arrivals`, `windows`, `groups` and `group_bytes` are empty
lists. `input_bytes` and `locations` are Arrow arrays, as read. `rids`, `keys`, `key_bytes` and
`input_fps` stay lists. `transform_arrow` may hold the transform inputs as Arrow (`with_arrow_inputs`)."""
STAGED = "staged"
"""A settled batch whose locations and stage bytes were written before a spill (`RecBatch.staged`):
`input_bytes` and `locations` are None and `value_bytes` is empty; the other slots are as when settled."""
PHASES = (READ, SETTLED, STAGED)


class RecBatch:
    """The records of one batch on one side, with the value each takes at each stage so far.

    Which slots hold what depends on the batch's `phase` (`READ`, `SETTLED`, `STAGED`: see each constant);
    a step states the phases it takes with `expect`.

    Attributes:
        part: the batch id (`"<file>-<batch>"`), stable across runs and retries.
        phase: `READ`, `SETTLED` or `STAGED`.
        rids: (file index, record index) per record: unique within a side; never reported.
        locations: where each record was read, e.g. `capture/trips.jsonl:12`.
        records: the record dicts at the current stage.
        keys: the record keys (a key field's value, a list of them, or the input fingerprint).
        key_bytes: the canonical bytes of each key.
        input_bytes: the canonical bytes of each record as read (the input stage value).
        input_fps: the input stage fingerprints (used to order duplicates and ties).
        timestamps: event times in µs, or None without a timestamp config.
        arrivals: arrival times in µs for lateness replay, or None.
        windows: the proto windows Beam's WindowFn assigned to each record.
        groups: the grouping keys, `group_bytes` their canonical bytes.
        values: stage name -> the list of values fingerprinted for that stage (from `window` on); once the
            batch is settled (`settle`), only the transform stage's.
        transform_inputs: the record handed to the transform, or None when it never gets there; True when it is
            in `transform_arrow` instead.
        transform_arrow: on a TFT side, the records handed to the transform (in batch order) as the analysis's
            Arrow record batches (`TFTInput.columnar_batch`), in place of their dicts; or None.
        value_bytes, value_fps: stage name -> the canonical bytes and fingerprints of that stage's values, for
            the stages a settled batch no longer keeps as values.

    A batch is one Beam element: its slots are plain lists (Arrow arrays once settled) and `phase` a str, so
    that it pickles as a tuple of them (`__reduce__`) that the C pickler walks without calling back into
    Python.
    """

    __slots__ = ("part", "phase", "rids", "locations", "records", "keys", "key_bytes", "input_bytes", "input_fps",
                 "timestamps", "arrivals", "windows", "groups", "group_bytes", "values", "transform_inputs",
                 "value_bytes", "value_fps", "transform_arrow")

    def __init__(self, part: str):
        self.part = part
        self.phase = READ
        self.rids: list[tuple[int, int]] = []
        self.locations: list[str] = []
        self.records: list[dict] = []
        self.keys: list[Any] = []
        self.key_bytes: list[bytes] = []
        self.input_bytes: list[bytes] = []
        self.input_fps: list[int] = []
        self.timestamps: list[int | None] = []
        self.arrivals: list[int | None] = []
        self.windows: list[list[tuple]] = []
        self.groups: list[Any] = []
        self.group_bytes: list[bytes] = []
        self.values: dict[str, list] = {}
        self.transform_inputs: list[dict | None] = []
        self.value_bytes: dict[str, list[bytes]] = {}
        self.value_fps: dict[str, list[int]] = {}
        self.transform_arrow: list | None = None

    def expect(self, *phases: str) -> None:
        """Fails loudly when a step is handed a batch in a phase it does not take (a wiring error in the
        pipeline, not a user's): its slots would not hold what the step reads."""
        if self.phase not in phases:
            raise AssertionError(f"batch {self.part} is {self.phase}; this step takes a batch that is "
                                 f"{' or '.join(phases)}")

    def settle(self, stages: tuple[str, ...], encoded: list[tuple[pa.Array, pa.Array]]) -> None:
        """Keeps `stages` only as their canonical bytes and fingerprints (`encoded`, in the same order: binary and
        uint64 arrays, `parity.replay.write_step.stage_arrays`), and
        drops what only the stages before the transform read (the records, windows, groups, times): `READ` to
        `SETTLED`.

        A settled batch is what waits for the transform (spilled, while TFT analyses the side): bytes
        pickle and load at memory speed, where each record's stage values are several dicts and lists, and
        as Arrow arrays (the columns of its fingerprint set part, built now rather than after the spill) a
        pickle is a few buffers, cheaper to spill and load than lists of bytes.
        """
        self.expect(READ)
        for stage, (data, fps) in zip(stages, encoded):
            self.value_bytes[stage] = data
            self.value_fps[stage] = fps
            del self.values[stage]
        for name in ("records", "timestamps", "arrivals", "windows", "groups", "group_bytes"):
            setattr(self, name, [])
        self.phase = SETTLED

    def staged(self) -> "RecBatch":
        """This settled batch without its locations and stage bytes (`input_bytes`, `locations` None,
        `value_bytes` empty), once they are written: `SETTLED` to `STAGED`. This batch is not changed."""
        self.expect(SETTLED)
        out = copy.copy(self)  # the same columns, but for those dropped
        out.input_bytes = out.locations = None  # type: ignore[assignment]
        out.value_bytes = {}
        out.phase = STAGED
        return out

    def __len__(self) -> int:
        return len(self.rids)

    def __reduce__(self) -> tuple:
        # A tuple of plain lists: pickled in C, no per-record Python calls.
        return _rebuild, (tuple(getattr(self, name) for name in self.__slots__),)

    def reversed(self) -> "RecBatch":
        """The same records in reverse order (the noise replay's other order); a `READ` batch."""
        self.expect(READ)
        out = RecBatch(self.part)
        for name in self.__slots__[2:]:
            column = getattr(self, name)
            if column is None:  # transform_arrow, not built yet
                continue
            if isinstance(column, dict):
                setattr(out, name, {stage: items[::-1] for stage, items in column.items()})
            else:
                setattr(out, name, column[::-1])
        return out

    def key_text(self, index: int) -> str:
        return key_text(self.keys[index])


class RecBatchCoder(beam_coders.Coder):
    """Beam coder of `RecBatch` elements: pickle, as Beam's fallback does, with a cheap size estimate.

    Beam samples elements to estimate a PCollection's size; its pickle fallback estimates by pickling the
    whole batch, which for a replay cost more pickling than the batches' real trips between stages.
    """

    def encode(self, value: RecBatch) -> bytes:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, encoded: bytes) -> RecBatch:
        return pickle.loads(encoded)

    def estimate_size(self, value: RecBatch) -> int:
        data = value.key_bytes if value.phase == STAGED else value.input_bytes
        return 2 * (data.nbytes if isinstance(data, pa.Array) else sum(map(len, data))) + 64

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self) -> type:
        return RecBatch


beam_coders.registry.register_coder(RecBatch, RecBatchCoder)


def _rebuild(state: tuple) -> RecBatch:
    batch = RecBatch.__new__(RecBatch)
    for name, value in zip(RecBatch.__slots__, state):
        setattr(batch, name, value)
    return batch


def side_field_types(side: SideConfig) -> dict[str, FieldType] | None:
    """Types of the fields a record carries after the shard stage (schema plus aggregates)."""
    return capture_field_types(side)
