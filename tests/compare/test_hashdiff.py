"""The bounded-memory diff and finalize: bucketed, digest-first, streaming; same answers as a plain reference.

Sets are written with `tests.set_files.write_part` + the real `finalize`; the chunk and bucket sizes are shrunk so that a few
thousand records cross many chunk boundaries, spill buckets and fetch rounds.
"""
import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.compare import diff, hashdiff

from parity.encoding import canonical

from parity.sets import fingerprint_set
from parity.config import ToleranceSpec
from parity.stages import STAGES
from parity.storage.context import Storage
from parity.encoding.fingerprint import fingerprint, key_fingerprint
from tests.compare.diffed import compare
from parity.sets.fingerprint_set import FP_SCHEMA, finalize, read_set
from tests.set_files import PartRows, write_part

MANIFEST = {"side": "s", "key": ["id"], "config_name": "t", "environment": {}, "runner": "DirectRunner"}


def _record(key, stage_values):
    values = {"key_bytes": canonical.encode(key), "location": f"cap:{key}"}
    fps = {}
    for stage in STAGES:
        values[stage] = canonical.encode(stage_values[stage])
        fps[f"{stage}_fp"] = fingerprint(stage_values[stage])
    features = stage_values["transform"] if isinstance(stage_values["transform"], dict) else {}
    row = {"key_fp": key_fingerprint(key), "key": json.dumps(key), **fps,
           "features": [(k, fingerprint(v)) for k, v in sorted(features.items())]}
    return row, values


def _write_set(path, records, parts=7, seed=0):
    rng = random.Random(seed)
    rows = [_record(*r) for r in records]
    rng.shuffle(rows)
    for p in range(parts):
        chunk = rows[p::parts]
        write_part(str(path), f"p{p:03d}", PartRows(fingerprints=[r for r, _ in chunk], values=[v for _, v in chunk]))
    return finalize(str(path), dict(MANIFEST))


def _values(i, drift=None):
    v = {"input": {"id": i, "x": i * 1.5}, "window": {"timestamp_us": i * 10, "windows": [["global"]]},
         "shard": {"key": [i % 5], "shard": i % 3, "aggregates": {"n": i % 7}},
         "coder": {"id": i, "x": i * 1.5}, "seed": {"split": "train"},
         "transform": {"f": float(i), "g": i % 4}}
    if drift == "window":
        v["window"] = {"timestamp_us": i * 10_000, "windows": [["global"]]}
    elif drift == "transform":
        v["transform"] = {"f": float(i) + 0.5, "g": i % 4}
    elif drift == "shard":
        v["shard"] = {"key": [i % 5], "shard": i % 3, "aggregates": {"n": i % 7 + 1}}
        v["coder"] = {"id": i, "x": i * 1.5, "n": 1}
    return v


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(hashdiff, "CHUNK_ROWS", 97)
    monkeypatch.setattr(hashdiff, "DIGEST_BITS", 6)
    monkeypatch.setattr(hashdiff, "_ALL_DIGEST_BUCKETS", 1 << 6)
    monkeypatch.setattr(diff, "FETCH_PAIRS", 50)
    monkeypatch.setattr(fingerprint_set, "SORT_ROWS", 300)
    monkeypatch.setattr(fingerprint_set, "SPILL_ROWS", 250)


def _reference(left_rows, right_rows):
    """Today's pairing written plainly: (key, ordinal) pairs in input-fingerprint order."""
    def index(rows):
        seen, out = {}, {}
        for r in sorted(rows, key=lambda r: (r["key_fp"], r["input_fp"], r["part"], r["row"])):
            o = seen.get(r["key_fp"], 0)
            seen[r["key_fp"]] = o + 1
            out[(r["key_fp"], o)] = r
        return out
    lidx, ridx = index(left_rows), index(right_rows)
    paired = sorted(set(lidx) & set(ridx))
    diverged = {s: sum(lidx[k][f"{s}_fp"] != ridx[k][f"{s}_fp"] for k in paired) for s in STAGES}
    matched = sum(all(lidx[k][f"{s}_fp"] == ridx[k][f"{s}_fp"] for s in STAGES) for k in paired)
    return {"paired": len(paired), "left_only": len(set(lidx) - set(ridx)), "right_only": len(set(ridx) - set(lidx)),
            "matched": matched, "stage_diverged": diverged,
            "duplicate_keys": sum(k[1] > 0 for k in lidx) + sum(k[1] > 0 for k in ridx)}


def test_finalize_sorts_through_key_range_buckets_like_one_in_memory_sort(tmp_path, small_chunks):
    records = [(i, _values(i)) for i in range(2000)]
    manifest = _write_set(tmp_path / "a", records)
    table = pq.read_table(tmp_path / "a" / "fingerprints.parquet", schema=FP_SCHEMA)
    assert fingerprint_set.spill_bits(2000) > 2
    assert table.num_rows == 2000 and manifest["records"]["fingerprinted"] == 2000
    assert table.equals(table.sort_by(fingerprint_set.SORT_KEYS))
    assert manifest["features"] == ["f", "g"]
    assert not (tmp_path / "a" / "_parts").exists()


@pytest.mark.parametrize("rows", [200, 2000])  # one in-memory sort; key-range buckets
def test_finalize_writes_dictionaries_for_batch_ids_and_feature_names_and_statistics_for_keys(tmp_path, small_chunks,
                                                                                            rows):
    _write_set(tmp_path / "a", [(i, _values(i)) for i in range(rows)])
    metadata = pq.ParquetFile(tmp_path / "a" / "fingerprints.parquet").metadata
    dictionary, statistics = set(), set()
    for group in range(metadata.num_row_groups):
        for index in range(metadata.num_columns):
            column = metadata.row_group(group).column(index)
            if column.has_dictionary_page:
                dictionary.add(column.path_in_schema)
            if column.is_stats_set:
                statistics.add(column.path_in_schema)
    assert dictionary == {"part", "features.key_value.key"}
    assert statistics == {"key_fp", "key"}


def test_value_parts_are_written_without_statistics_a_part_being_read_whole(tmp_path, small_chunks):
    _write_set(tmp_path / "a", [(i, _values(i)) for i in range(200)])
    parts = sorted((tmp_path / "a" / "values").glob("*.parquet"))
    assert parts
    for path in parts:
        metadata = pq.ParquetFile(path).metadata
        assert metadata.num_rows > 0
        assert not any(metadata.row_group(group).column(index).is_stats_set
                       for group in range(metadata.num_row_groups) for index in range(metadata.num_columns))


@pytest.mark.parametrize("rows", [200, 2000])  # one in-memory sort; key-range buckets
def test_finalize_removes_each_part_as_soon_as_it_has_read_it(tmp_path, small_chunks, monkeypatch, rows):
    left_when_read = []
    read = fingerprint_set._read_fp_part

    def spy(path, storage):
        left_when_read.append(len(list((tmp_path / "a" / "_parts").glob("*.arrow"))))
        return read(path, storage)

    monkeypatch.setattr(fingerprint_set, "_read_fp_part", spy)
    manifest = _write_set(tmp_path / "a", [(i, _values(i)) for i in range(rows)])
    assert left_when_read == [7, 6, 5, 4, 3, 2, 1]  # the set's seven parts, one fewer at each read
    assert manifest["records"]["fingerprinted"] == rows


def test_finalize_reads_arrow_and_parquet_parts_alike(tmp_path, small_chunks):
    records = [(i, _values(i)) for i in range(600)]
    _write_set(tmp_path / "arrow", records)
    rows = [_record(*r) for r in records]
    for p in range(3):  # the same rows as Parquet parts, as tap_set writes them
        chunk = rows[p::3]
        write_part(str(tmp_path / "mixed"), f"p{p:03d}", PartRows([r for r, _ in chunk], [v for _, v in chunk]))
    parts = tmp_path / "mixed" / "_parts"
    arrow_parts = sorted(parts.glob("*.arrow"))
    assert len(arrow_parts) == 3 and not list(parts.glob("*.parquet"))
    for path in arrow_parts[:2]:
        pq.write_table(fingerprint_set._read_fp_part(str(path), Storage()), path.with_suffix(".parquet"))
        path.unlink()
    finalize(str(tmp_path / "mixed"), dict(MANIFEST))

    ours, reference = (_without_locations(pq.read_table(tmp_path / name / "fingerprints.parquet"))
                       for name in ("mixed", "arrow"))
    assert ours.num_rows == 600 and ours.equals(reference)
    assert not parts.exists()


def test_the_streamed_diff_counts_like_a_plain_pairing_with_duplicates_and_one_sided_keys(tmp_path, small_chunks):
    left = [(i, _values(i)) for i in range(1500)] + [(7, _values(7)), (7, _values(8)), (11, _values(3))]
    right = [(i, _values(i, drift=("window" if i % 17 == 0 else "transform" if i % 5 == 0 else
                                   "shard" if i % 11 == 0 else None)))
             for i in range(100, 1700)] + [(7, _values(8)), (300, _values(1))]
    _write_set(tmp_path / "l", left, seed=1)
    _write_set(tmp_path / "r", right, seed=2)
    lset, rset = read_set(str(tmp_path / "l")), read_set(str(tmp_path / "r"))
    outcome = compare(lset, rset, ToleranceSpec())
    expected = _reference(lset.table.to_pylist(), rset.table.to_pylist())
    for name, value in expected.items():
        assert getattr(outcome, name) == value, name
    assert outcome.paired == outcome.matched + len(outcome.mismatches)
    keys = [m.key_fp for m in outcome.mismatches]
    assert keys == sorted(keys)
    assert len(outcome.left_only_keys) == outcome.left_only and sorted({int(k) for k in outcome.left_only_keys}) == \
        list(range(100))
    order = [key_fingerprint(json.loads(k)) for k in outcome.left_only_keys]
    assert order == sorted(order)
    windowed = [m for m in outcome.mismatches if m.first_stage == "window"]
    assert windowed and all(m.left["window"]["timestamp_us"] * 1000 == m.right["window"]["timestamp_us"]
                            for m in windowed)
    assert all(m.first_stage in m.left and m.first_stage in m.right for m in outcome.mismatches)
    shifted = [m for m in outcome.mismatches if m.first_stage == "shard"]
    assert shifted and all(m.differing == ("shard", "coder") and m.diverged for m in shifted)
    drifted = [m for m in outcome.mismatches if m.first_stage == "transform"]
    assert drifted and all(m.feature_deltas == {"f": (False, 0.5)} for m in drifted)


def test_a_bucket_whose_digests_agree_is_matched_without_pairing(tmp_path, small_chunks):
    records = [(i, _values(i)) for i in range(1000)]
    _write_set(tmp_path / "l", records, seed=1)
    _write_set(tmp_path / "r", records[:-1] + [(999, _values(999, drift="transform"))], seed=2)
    stream = diff.DiffStream(read_set(str(tmp_path / "l")), read_set(str(tmp_path / "r")), ToleranceSpec())
    found = list(stream)
    assert [m.key for m in found] == ["999"] and found[0].differing == ("transform",)
    assert stream.matched == 999 and stream.paired == 1000
    assert stream.buckets_drilled == 1 and stream.buckets_whole >= 40


def test_pairing_pairs_duplicates_in_row_order_and_leaves_the_rest_one_sided():
    key = np.array([5, 5, 5, 9], np.uint64)
    left = hashdiff.Chunk(table=None, hi=key, lo=np.zeros(4, np.uint64), fps=[np.arange(4, dtype=np.uint64)] * 6)
    right = hashdiff.Chunk(table=None, hi=key[:2].copy(), lo=np.zeros(2, np.uint64),
                           fps=[np.arange(2, dtype=np.uint64)] * 6)
    pairs = hashdiff.pair(left, right)
    assert pairs.left.tolist() == [0, 1] and pairs.right.tolist() == [0, 1]
    assert pairs.left_only.tolist() == [2, 3] and pairs.right_only.tolist() == []
    assert pairs.duplicates == 3


def test_a_canonical_dict_splits_into_the_bytes_of_its_fields_for_every_value_type():
    import datetime
    import decimal

    value = {"none": None, "t": True, "f": False, "i": -(2 ** 70), "small": 5, "x": 1.25,
             "x32": np.float32(0.5), "s": "é" * 200, "b": b"\x00\xff", "l": [1, [2.5, "a"], {"k": None}],
             "set": frozenset({1, 2}), "when": datetime.datetime(2024, 1, 2, tzinfo=datetime.timezone.utc),
             "day": datetime.date(2024, 1, 2), "dec": decimal.Decimal("1.50"), 7: {"nested": [None]}}
    fields = canonical.dict_fields(canonical.encode(value))
    assert {canonical.decode(k): canonical.decode(v) for k, v in fields.items()} == value
    assert canonical.dict_fields(canonical.encode([1, 2])) is None
    assert canonical.dict_fields(canonical.encode(value)[:-1]) is None
    assert canonical.dict_fields(b"\x64\x01\x99") is None


_MAPS = st.lists(st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(["a", "bb", "ccc", ""]),
                                                          st.integers(0, 2 ** 64 - 1)), max_size=4)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(_MAPS, min_size=1, max_size=4), seed=st.integers(0, 10 ** 6), cut=st.integers(0, 3),
       uniform=st.booleans())
def test_taking_rows_gives_what_arrows_take_gives_map_column_included(chunks, seed, cut, uniform):
    if uniform:  # every row with as many entries: the one-pass gather
        chunks = [[[("a", i), ("bb", i + 1)] for i in range(len(chunk))] for chunk in chunks]
    arrays = [pa.array(chunk, pa.map_(pa.string(), pa.uint64())) for chunk in chunks]
    arrays = [array.slice(min(cut, len(array))) for array in arrays]  # chunks that start inside their child
    table = pa.Table.from_batches([pa.record_batch([array, pa.array(range(len(array)), pa.int64())],
                                                   names=["features", "n"]) for array in arrays])
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, table.num_rows, size=table.num_rows * 2) if table.num_rows else np.zeros(0, int)
    expected = table.take(pa.array(indices, pa.int64()))
    got = fingerprint_set.take_rows(table, indices)
    assert got.equals(expected) and got.schema == expected.schema


def _without_locations(table):
    """The table without its `part` and `row` columns (select: pyarrow 10 has no drop_columns)."""
    return table.select([name for name in table.column_names if name not in ("part", "row")])
