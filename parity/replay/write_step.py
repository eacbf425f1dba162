"""The last step of a replay: each batch's stage values encoded, fingerprinted and written as a fingerprint
set part (`WriteBatchFn`), with the size bounds on user-made values.

Every element is a `RecBatch` (parity/replay/batch.py): the records of one batch, column by column.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa

from parity.config import SideConfig
from parity.encoding import canonical
from parity.encoding.fingerprint import (encode_columns, encode_fingerprints, feature_fingerprints,
                                        key_fingerprint_bytes)
from parity.errors import UserCodeError
from parity.replay import counters
from parity.replay.batch import SETTLED, STAGED, RecBatch, key_texts
from parity.replay.culprit import first_failing
from parity.sets.feature_columns import feature_columns
from parity.sets.fingerprint_set import part_fingerprints, write_values
from parity.storage.context import Storage


def _unencodable(key: str, stage: str, value: Any, exc: TypeError) -> str:
    """Names the record, the stage and (for dict values) the field whose value cannot be fingerprinted."""
    where = ""
    if isinstance(value, dict):
        names = list(value)
        found = first_failing(names, lambda name: canonical.encode(value[name]), TypeError)
        if found is not None:
            where = f" field {names[found[0]]!r}"
    return (f"record {key}: the {stage} stage value{where} cannot be fingerprinted: {exc}; return "
            f"None, bools, numbers, str, bytes, lists, dicts, datetimes or numpy scalars/arrays")


def check_value_sizes(batch: RecBatch, side: SideConfig, stage: str, sizes: Sequence[int] | np.ndarray,
                      values: list) -> None:
    """Refuses, when it is written, a stage value whose canonical bytes (`sizes`: each value's length) pass
    `capture.max_record_bytes`, naming the side, the record, the stage and (for a dict such as the transform's
    features) its largest field: a set must be read back by `parity diff`, `show` and the reports, and a few
    values that large make a batch's value part pass what one Arrow array holds. Raising the limit lets them
    through."""
    limit = side.capture.max_record_bytes
    sizes = np.asarray(sizes, np.int64)
    if not len(sizes) or sizes.max() <= limit:
        return
    i = int(np.flatnonzero(sizes > limit)[0])
    value, where = values[i], ""
    if isinstance(value, dict) and value:
        by_field = {name: len(canonical.encode(item)) for name, item in value.items()}
        name = max(sorted(by_field), key=by_field.__getitem__)
        field = "feature" if stage == "transform" else "field"
        where = f" (its largest {field}, {name!r}, is {by_field[name]:,} bytes)"
    raise UserCodeError(f"side '{side.name}': record {batch.key_text(i)}: the {stage} stage value is {int(sizes[i]):,} "
                f"canonical bytes{where}, above capture.max_record_bytes {limit:,}; return smaller values, or "
                f"raise capture.max_record_bytes to keep values this large")


def _stage_fingerprints(batch: RecBatch, stage: str, values: list) -> tuple[list[bytes], list[int]]:
    """The canonical bytes and fingerprints of one stage's values of a batch (one kernel call)."""
    try:
        return encode_fingerprints(values)
    except TypeError:  # user code produced a value with no canonical encoding: name the record
        found = first_failing(values, canonical.encode, TypeError)
        if found is None:
            raise
        i, exc = found
        raise UserCodeError(_unencodable(batch.key_text(i), stage, values[i], exc)) from exc


def stage_arrays(batch: RecBatch, stage: str, values: list) -> tuple[pa.Array, pa.Array]:
    """The canonical bytes and fingerprints of one stage's values of a batch as Arrow arrays (binary,
    uint64), built from the encoder's buffers (`encode_columns`): no Python bytes and int per value, which a
    settled batch would only turn into these arrays. Bytes past int32 offsets go through `_stage_fingerprints`."""
    try:
        data, offsets, fps = encode_columns(values)
    except TypeError:  # user code produced a value with no canonical encoding: raised naming the record
        _stage_fingerprints(batch, stage, values)
        raise
    except OverflowError:  # over 2 GiB of a stage in one batch: what Arrow makes of the lists
        encoded, fingerprints = _stage_fingerprints(batch, stage, values)
        return pa.array(encoded, pa.binary()), pa.array(fingerprints, pa.uint64())
    count = len(values)
    return (pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)]),
            pa.Array.from_buffers(pa.uint64(), count, [None, pa.py_buffer(fps)]))


class WriteBatchFn(beam.DoFn):
    """Fingerprints every stage value of a batch, writes the batch's value part, and hands on its part name and
    fingerprint rows (a table of FP_SCHEMA) to the bucket step, which runs fused with this one: the rows are not
    written per batch (on a URL that was an object written and read back for every batch)."""

    def __init__(self, out_dir: str, side: SideConfig | None = None, *, storage: Storage):
        self._out_dir = out_dir
        self._side = side  # its capture.max_record_bytes bounds each stage value too
        self._storage = storage  # the run's storage context, for a worker that writes to a URL

    def setup(self) -> None:
        self._counts = counters.SideCounters(self._side.name if self._side else "", counters.WRITTEN)

    def process(self, batch: RecBatch) -> Iterator[tuple[str, pa.Table]]:
        count = len(batch)
        hash128 = key_fingerprint_bytes
        fp_columns: dict[str, list | pa.Array] = {
            "key_fp": list(map(hash128, batch.key_bytes)),
            "key": key_texts(batch.keys),
            "input_fp": batch.input_fps}  # hashed from input_bytes when the batch was read
        value_columns: dict[str, list | pa.Array] = {"key_bytes": batch.key_bytes}
        batch.expect(SETTLED, STAGED)
        if batch.phase == SETTLED:  # else written already, with the stages' bytes (WriteStageValuesFn)
            value_columns.update({"location": batch.locations, "input": batch.input_bytes, **batch.value_bytes})
        for stage, fps in batch.value_fps.items():  # every stage before the transform, settled by ApplyStagesFn
            fp_columns[f"{stage}_fp"] = fps
        values = batch.values["transform"]
        featured = [reached is not None for reached in batch.transform_inputs]
        try:
            data, fps, features = feature_columns(values, featured)
        except TypeError as exc:  # user code produced a value with no canonical encoding: name the record
            found = first_failing([v if f else {} for v, f in zip(values, featured)], feature_fingerprints,
                                  TypeError)
            if found is None:
                raise
            i, exc = found
            raise UserCodeError(_unencodable(batch.key_text(i), "transform", values[i], exc)) from exc
        plain = [i for i, f in enumerate(featured) if not f]  # never reached the transform: fingerprinted whole
        if plain:
            plain_data, plain_fps = _stage_fingerprints(batch, "transform", [values[i] for i in plain])
            for i, item, fp in zip(plain, plain_data, plain_fps):
                data[i], fps[i] = item, fp
        if self._side is not None:
            check_value_sizes(batch, self._side, "transform", list(map(len, data)), values)
        value_columns["transform"], fp_columns["transform_fp"] = data, fps
        fp_columns["features"] = features
        write_values(self._out_dir, batch.part, value_columns, self._storage)
        self._counts.add(counters.WRITTEN, count)
        yield batch.part, part_fingerprints(batch.part, fp_columns)
