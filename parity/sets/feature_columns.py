"""The fingerprint set's `features` column: per record, its transform features' fingerprints as a
map<string, uint64>, and the transform stage's bytes and fingerprints that come with them.

`feature_columns` builds a batch's in one pass of the C encoder, which writes the map's buffers directly: a
Python object per feature, and pyarrow's conversion of them entry by entry, were most of a replay's fingerprint
rows (benchmarks/RESULTS.md). `map_array` assembles a map array from its parts on every pyarrow parity supports.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from parity.encoding import canonical, fingerprint

FEATURE_MAP = pa.map_(pa.string(), pa.uint64())


def feature_columns(values: list, featured: list[bool]) -> tuple[list, list, pa.Array]:
    """The transform stage's columns of a batch: per record, its value's canonical bytes, its fingerprint and its
    features (`fingerprint.feature_fingerprints`), the features as the set's `features` column (FEATURE_MAP); for
    a record whose `featured` is False, None, None and no features (the caller fingerprints that value whole).

    The C encoder does it all in one pass over the batch; where a featured value is not a plain dict of str names,
    or without the C encoder, record by record, and pyarrow converts their (name, fp) pairs. The same columns
    either way (tests/sets/test_feature_columns.py).

    Raises:
        TypeError: a featured value has no canonical encoding, or a name that is not a str.
    """
    native = canonical._native
    # None marks a record left out (a featured None is not a dict of features: record by record, which refuses it)
    if native is not None and not any(f and v is None for v, f in zip(values, featured)):
        done = native.feature_fingerprints_many([v if f else None for v, f in zip(values, featured)])
        if done is not None:
            data, fps, offsets, name_offsets, names, feature_fps = done
            entries = len(feature_fps) // 8
            keys = pa.StringArray.from_buffers(entries, pa.py_buffer(name_offsets), pa.py_buffer(names))
            items = pa.Array.from_buffers(pa.uint64(), entries, [None, pa.py_buffer(feature_fps)])
            return data, fps, map_array(np.frombuffer(offsets, np.int32), keys, items, FEATURE_MAP)
    data: list = [None] * len(values)
    fps: list = [None] * len(values)
    rows: list[list] = [[] for _ in values]
    for i, (value, wanted) in enumerate(zip(values, featured)):
        if wanted:
            data[i], rows[i], fps[i] = fingerprint.feature_fingerprints(value)
    return data, fps, pa.array(rows, FEATURE_MAP)


def map_array(offsets: Any, keys: pa.Array, items: pa.Array, map_type: pa.DataType,
              mask: pa.Array | None = None) -> pa.Array:
    """`MapArray.from_arrays` of the given type (its field names and nullability), `mask` marking null rows.
    pyarrow before 13 takes neither a type nor a mask: its array is built with null offsets for the null
    rows, then cast to the type."""
    try:
        return pa.MapArray.from_arrays(offsets, keys, items, type=map_type, mask=mask)
    except TypeError:
        if mask is not None:
            values = np.asarray(offsets.to_numpy(zero_copy_only=False) if isinstance(offsets, pa.Array) else offsets)
            nulls = np.append(np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool), False)
            offsets = pa.array(values, type=pa.int32(), mask=nulls)
        array = pa.MapArray.from_arrays(offsets, keys, items)
        return array if array.type == map_type else array.cast(map_type)
