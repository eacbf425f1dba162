"""A tap set assembled after the job (`finalize_tap_set`, `parity.beam.finalize`): the parts every tap of the
set wrote merged into one standard fingerprint set, one row per record key (parity/sets/tap_set.py describes the
layout, the sentinels and the sampling rule).
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from parity.encoding import canonical
from parity.errors import FingerprintSetError
from parity.sets.fingerprint_set import (FINGERPRINTS, FP_SCHEMA, MANIFEST, PARTS_DIR, QUARANTINE, STAGE_VALUES_DIR,
                                         VALUE_SCHEMA, VALUES_DIR, finalize, read_values, write_quarantine_part)
from parity.sets.tap_set import (NOT_KEPT_BYTES, DROPPED_LATE, DROPPED_LATE_FP, NOT_SEEN, NOT_SEEN_FP, PART_ROWS,
                                 SAMPLE_RULE, TAP_FORMAT, TAP_META, TAPS_DIR, UNTAPPED, UNTAPPED_FP, VALUES_RULE)
from parity.stages import STAGES
from parity.storage import urls
from parity.storage.context import Storage


def _read_taps(set_dir: str, storage: Storage) -> list[dict[str, Any]]:
    taps = []
    for path in storage.match(urls.child(set_dir, TAPS_DIR, "*", "*", TAP_META)):
        try:
            meta = json.loads(storage.read_text(path))
        except (OSError, ValueError) as exc:
            raise FingerprintSetError(f"{path}: unreadable tap settings: {exc}") from exc
        if not isinstance(meta, dict) or meta.get("tap_format") != TAP_FORMAT:
            found = meta.get("tap_format") if isinstance(meta, dict) else type(meta).__name__
            raise FingerprintSetError(f"{path}: tap format {found!r} is not {TAP_FORMAT!r}; re-run the tapped "
                                      f"pipeline with this version of parity")
        if meta.get("stage") not in STAGES:
            raise FingerprintSetError(f"{path}: unknown stage {meta.get('stage')!r}; expected one of "
                                      f"{', '.join(STAGES)}")
        meta["dir"] = urls.parent(path)
        taps.append(meta)
    return taps


def _agree(taps: list[dict], field: str, given: Any = None, what: str = "") -> Any:
    values = {json.dumps(t.get(field), sort_keys=True) for t in taps}
    if given is not None:
        return given
    if len(values) > 1:
        listing = "; ".join(f"{t['stage']}/{t['label']}: {t.get(field)!r}" for t in taps)
        raise FingerprintSetError(f"the taps of this set disagree on {what or field} ({listing}); every tap "
                                  f"of one set must use the same {what or field}")
    return taps[0].get(field)


def _key_definition(taps: list[dict], key: Any) -> Any:
    if key is not None:
        return list(key) if isinstance(key, (list, tuple)) else key
    by_fields = {json.dumps(t["key"]) for t in taps if t.get("key_fields")}
    if len(by_fields) > 1:
        listing = "; ".join(f"{t['stage']}/{t['label']}: {t['key']!r}" for t in taps if t.get("key_fields"))
        raise FingerprintSetError(f"the taps key records by different fields ({listing}); pass the key "
                                  f"definition to finalize (key=[...]) if they denote the same key")
    if by_fields:
        return json.loads(by_fields.pop())
    functions = sorted({t["key"] for t in taps})
    return functions[0] if len(functions) == 1 else "fn:" + "+".join(f.split(":", 1)[-1] for f in functions)


def finalize_tap_set(set_dir: str, side: str | None = None, key: Sequence[str] | str | None = None,
                     stages_tapped: Sequence[str] | None = None, environment: dict[str, Any] | None = None,
                     *, config_name: str = "", keep_values: int | None | str = "tap",
                     transform_graph: str | None = None, keep_parts: bool = False,
                     storage: Storage = Storage()) -> dict[str, Any]:
    """Merges the parts the taps of one pipeline wrote under `set_dir` into a fingerprint set; returns the
    manifest. Run it once the pipeline has finished.

    Args:
        side: the side's name in the diff (default: the taps' `side`).
        key: the key definition to record, e.g. `["trip_id"]`: the config's `capture.key`, which `parity diff`
            compares (default: the taps' `key_fields`; with only `key_fn`s, `"fn:<name>"`, which no replay
            set matches).
        stages_tapped: the stages the caller expects taps of; finalize refuses when the taps differ (default:
            the stages of the taps found).
        environment: the environment manifest to record (default: the one the workers reported).
        keep_values: the number of records whose values are kept (default: the taps' `keep_values`; None
            keeps all). Redacted taps keep none whatever this says.
        transform_graph: the TFT output dir the job's transform applies: its analyzer outputs are recorded
            (`analyzers.json`), so the report compares them with the other side's.
        keep_parts: keep `_taps/` (by default it is removed once merged).
        storage: the storage context the set is read and written with (its pipeline options for a URL).

    Raises:
        FingerprintSetError: no taps, taps that disagree (side, sampling, key fields, format), or
            `stages_tapped` that does not match the taps found.
    """
    taps = _read_taps(set_dir, storage)
    if not taps:
        raise FingerprintSetError(f"{set_dir}: no taps wrote here (no {TAPS_DIR}/<stage>/<label>/{TAP_META}); "
                                  f"insert parity.beam.TapStage(stage, {set_dir!r}, ...) into the pipeline "
                                  f"and run it first")
    side = _agree(taps, "side", side, "side name")
    rate = _agree(taps, "sample_rate", None, "sample_rate (a key would be tapped at some stages only)")
    redact = any(t.get("redact") for t in taps)
    if keep_values == "tap":
        keeps = [t.get("keep_values") for t in taps]
        keep_values = None if all(k is None for k in keeps) else min(k for k in keeps if k is not None)
    if redact:
        keep_values = 0
    key_def = _key_definition(taps, key)
    found = [s for s in STAGES if any(t["stage"] == s for t in taps)]
    if stages_tapped is not None:
        expected = [s for s in STAGES if s in set(stages_tapped)]
        unknown = sorted(set(stages_tapped) - set(STAGES))
        if unknown or expected != found:
            raise FingerprintSetError(f"{set_dir}: stages_tapped says {list(stages_tapped)}, but the taps found "
                                      f"cover {found}" + (f" (unknown: {unknown})" if unknown else ""))
    late_stages = sorted({t["stage"] for t in taps if t.get("late")} - {"window"})
    if late_stages:
        raise FingerprintSetError(f"{set_dir}: late=True taps must tap the window stage, found {late_stages}")

    merged = _merge(taps, found, storage)
    kept = merged.kept(keep_values)
    quarantined = _quarantine_entries(taps, storage, later=False)
    _reset_outputs(set_dir, storage)
    _write_merged(set_dir, merged, kept, redact, storage)
    if quarantined:
        write_quarantine_part(set_dir, "tap", quarantined, storage)

    environments = _worker_environments(taps, storage)
    manifest: dict[str, Any] = {
        "side": side, "key": key_def, "config_name": config_name,
        "environment": environment if environment is not None else (environments[0] if environments else {}),
        "runner": _agree(taps, "runner") if len({t.get("runner") for t in taps}) == 1 else "mixed",
        "tap_format": TAP_FORMAT, "writer": "parity.beam.TapStage",
        "stages_tapped": found, "sample_rate": rate, "sample_rule": SAMPLE_RULE,
        "values": {"kept": merged.kept_keys(kept),
                   "keep_values": keep_values, "redacted": redact, "rule": VALUES_RULE},
        "taps": [{k: t.get(k) for k in ("stage", "label", "late", "key", "sample_rate", "keep_values",
                                        "redact", "side")} for t in taps],
        "quarantined_later_stages": sum(1 for e in _quarantine_entries(taps, storage, later=True)),
    }
    if len(environments) > 1:
        manifest["worker_environments"] = environments
    if transform_graph is not None:
        from parity.sets import analyzers

        analyzers.write(set_dir, analyzers.read_graph(transform_graph), storage)
    if not keep_parts:
        storage.delete_tree(urls.child(set_dir, TAPS_DIR))
    return finalize(set_dir, manifest, storage)


def _reset_outputs(set_dir: str, storage: Storage) -> None:
    for name in (PARTS_DIR, VALUES_DIR, STAGE_VALUES_DIR):
        storage.delete_tree(urls.child(set_dir, name))
    storage.delete([urls.child(set_dir, name) for name in (FINGERPRINTS, MANIFEST, QUARANTINE, "analyzers.json")])


def _quarantine_entries(taps: list[dict], storage: Storage, later: bool) -> list[dict]:
    """Quarantined elements of the first tapped stage (later=False) or of the other stages (later=True).

    An element a tap could not key is usually refused by every tap after it too: only the first tapped
    stage's entries count as quarantined records, so that each record is counted once.
    """
    first = next(s for s in STAGES if any(t["stage"] == s for t in taps))
    result = []
    for tap in taps:
        if (tap["stage"] == first) == later:
            continue
        for path in storage.match(urls.child(tap["dir"], "_parts", "*.quarantine.jsonl")):
            result.extend(json.loads(line) for line in storage.read_text(path).split("\n") if line.strip())
    return result


def _worker_environments(taps: list[dict], storage: Storage) -> list[dict]:
    seen: dict[str, dict] = {}
    for tap in taps:
        for path in storage.match(urls.child(tap["dir"], "env-*.json")):
            env = json.loads(storage.read_text(path))
            seen.setdefault(json.dumps(env, sort_keys=True), env)
    return [seen[k] for k in sorted(seen)]


class _Merged:
    """The records of a tap set, one per (key_fp, ordinal), with each stage's fingerprint and its source.

    Arrays are aligned by record, sorted by (key_fp bytes, ordinal); `src[s][i]` / `row[s][i]` locate record
    i's row in stage s's tap parts (`sources[src]`), -1 when stage s has none.
    """

    def __init__(self, keys: np.ndarray, fps: dict[str, np.ndarray], src: dict[str, np.ndarray],
                 row: dict[str, np.ndarray], features: list, fillers: dict[str, np.ndarray],
                 sources: list[tuple[str, str, str]]):
        self.keys, self.fps, self.src, self.row = keys, fps, src, row
        self.features, self.fillers, self.sources = features, fillers, sources

    def __len__(self) -> int:
        return len(self.keys)

    def kept(self, keep_values: int | None) -> np.ndarray:
        """Mask of the records whose values are kept: those of the `keep_values` smallest key fingerprints."""
        n = len(self)
        if keep_values is None:
            return np.ones(n, dtype=bool)
        starts = np.flatnonzero(_group_starts(self.keys))  # records are sorted by key_fp
        bound = n if keep_values >= len(starts) else int(starts[keep_values])
        return np.arange(n) < bound

    def kept_keys(self, kept: np.ndarray) -> int:
        return int((_group_starts(self.keys) & kept).sum())


def _group_starts(keys: np.ndarray) -> np.ndarray:
    """True where a run of equal key fingerprints starts (`keys`: an (n, 16) uint8 array, sorted)."""
    if len(keys) == 0:
        return np.zeros(0, dtype=bool)
    return np.concatenate([[True], (keys[1:] != keys[:-1]).any(axis=1)])


def _fixed16(array: pa.ChunkedArray | pa.Array) -> np.ndarray:
    array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
    raw = np.frombuffer(array.buffers()[1], dtype=np.uint8) if len(array) else np.zeros(0, dtype=np.uint8)
    return raw[array.offset * 16:(array.offset + len(array)) * 16].reshape(-1, 16)


def _record_ids(keys: np.ndarray, ordinals: np.ndarray) -> np.ndarray:
    """(key_fp, ordinal) as 20-byte void scalars: numpy sorts and compares them bytewise."""
    combined = np.empty((len(keys), 20), dtype=np.uint8)
    combined[:, :16] = keys
    combined[:, 16:] = ordinals.astype(">u4").view(np.uint8).reshape(-1, 4)
    return combined.view("V20").ravel()


def _stage_rows(taps: list[dict], stage: str, sources: list[tuple[str, str, str]], storage: Storage) -> pa.Table:
    """Every row the taps of one stage wrote, sorted by (key_fp, fp, source), with its source and row."""
    column = f"{stage}_fp"
    columns = ["key_fp", column] + (["features"] if stage == "transform" else [])
    tables = []
    for tap in taps:
        if tap["stage"] != stage:
            continue
        for path in storage.match(urls.child(tap["dir"], "_parts", "*.parquet")):
            try:
                table = storage.read_parquet(path, columns=columns, schema=FP_SCHEMA)
            except (OSError, pa.ArrowException) as exc:
                raise FingerprintSetError(f"{path}: cannot read a tap part: {exc}") from exc
            n = table.num_rows
            table = table.append_column("src", pa.array(np.full(n, len(sources), dtype=np.int32)))
            table = table.append_column("row", pa.array(np.arange(n, dtype=np.int32)))
            table = table.append_column("late", pa.array(np.full(n, bool(tap.get("late")))))
            sources.append((tap["dir"], urls.basename(path)[:-len(".parquet")], tap["label"]))
            tables.append(table)
    if not tables:
        fields = [FP_SCHEMA.field(c) for c in columns] + [pa.field("src", pa.int32()), pa.field("row", pa.int32()),
                                                         pa.field("late", pa.bool_())]
        return pa.schema(fields).empty_table()
    table = pa.concat_tables(tables)
    return table.sort_by([("key_fp", "ascending"), (column, "ascending"), ("src", "ascending"),
                          ("row", "ascending")])


def _merge(taps: list[dict], tapped: list[str], storage: Storage) -> _Merged:
    """Pairs the stages' rows into records: the i-th row of a key at one stage with the i-th at the others
    (rows of a key are ordered by fingerprint, so duplicates pair deterministically)."""
    sources: list[tuple[str, str, str]] = []
    tables = {s: _stage_rows(taps, s, sources, storage) for s in tapped}
    ids = {}
    for stage, table in tables.items():
        keys = _fixed16(table.column("key_fp"))
        starts = _group_starts(keys)
        index = np.arange(len(keys))
        ordinals = index - np.maximum.accumulate(np.where(starts, index, 0)) if len(keys) else index
        ids[stage] = _record_ids(keys, ordinals)
    all_ids = np.unique(np.concatenate(list(ids.values()))) if ids else np.zeros(0, dtype="V20")
    n = len(all_ids)
    record_keys = all_ids.view(np.uint8).reshape(-1, 20)[:, :16] if n else np.zeros((0, 16), dtype=np.uint8)
    late = np.zeros(n, dtype=bool)
    fps: dict[str, np.ndarray] = {}
    src: dict[str, np.ndarray] = {}
    row: dict[str, np.ndarray] = {}
    features: list = [[] for _ in range(n)]
    positions = {s: np.searchsorted(all_ids, ids[s]) for s in tapped}
    fillers: dict[str, np.ndarray] = {}
    for stage in STAGES:
        fps[stage] = np.full(n, UNTAPPED_FP, dtype=np.uint64)
        src[stage] = np.full(n, -1, dtype=np.int64)
        row[stage] = np.full(n, -1, dtype=np.int64)
        if stage not in tables:
            fillers[stage] = np.zeros(n, dtype=np.int8)  # 0: untapped
            continue
        table, pos = tables[stage], positions[stage]
        present = np.zeros(n, dtype=bool)
        present[pos] = True
        # 1: not seen by this stage's tap; 2: dropped as late at an earlier stage; -1: the tap's own value
        filler = np.where(late, 2, 1).astype(np.int8)
        filler[present] = -1
        fillers[stage] = filler
        fps[stage][~present] = np.where(late[~present], DROPPED_LATE_FP, NOT_SEEN_FP)
        fps[stage][pos] = table.column(f"{stage}_fp").to_numpy()
        src[stage][pos] = table.column("src").to_numpy()
        row[stage][pos] = table.column("row").to_numpy()
        if stage == "transform":
            for p, feats in zip(pos.tolist(), table.column("features").to_pylist()):
                features[p] = feats or []
        late[pos] |= table.column("late").to_numpy()
    return _Merged(record_keys, fps, src, row, features, fillers, sources)


_FILLERS = {0: UNTAPPED, 1: NOT_SEEN, 2: DROPPED_LATE}


def _read_values(sources: list[tuple[str, str, str]], wanted: dict[int, np.ndarray],
                 columns: list[str], storage: Storage) -> dict[int, pa.Table]:
    """The rows `wanted[src]` of each source part's values, in that order."""
    result = {}
    for index, rows in sorted(wanted.items()):
        folder, part, _ = sources[index]
        result[index] = read_values(folder, part, columns, storage).take(pa.array(rows, type=pa.int64()))
    return result


def _gather(merged: _Merged, stage: str, mask: np.ndarray, column: str, into: np.ndarray, storage: Storage) -> None:
    """Copies `column` of the values rows stage `stage` wrote into `into[i]` for the records in `mask`."""
    records = np.flatnonzero(mask & (merged.src[stage] >= 0))
    if not len(records):
        return
    srcs, rows = merged.src[stage][records], merged.row[stage][records]
    wanted = {int(s): rows[srcs == s] for s in np.unique(srcs)}
    for index, table in _read_values(merged.sources, wanted, [column], storage).items():
        into[records[srcs == index]] = np.array(table.column(column).to_pylist() + [None], dtype=object)[:-1]


def _marker_bytes(fps: np.ndarray) -> list[bytes]:
    head, tail = NOT_KEPT_BYTES
    return [head + b"%016x" % fp + tail for fp in fps.tolist()]


def _key_texts(merged: _Merged, key_bytes: np.ndarray, redact: bool) -> list[str]:
    """The `key` column: the key as JSON, decoded from its canonical bytes (redacted: its fingerprint)."""
    texts = []
    flat = merged.keys
    for i, data in enumerate(key_bytes.tolist()):
        if redact or not data:
            texts.append(json.dumps(flat[i].tobytes().hex()))
        else:
            key = canonical.decode(data)
            texts.append(json.dumps(canonical.to_json(key), ensure_ascii=False, sort_keys=True))
    return texts


def _write_merged(set_dir: str, merged: _Merged, kept: np.ndarray, redact: bool, storage: Storage) -> None:
    """Writes the records as the batch parts of a standard set (`_parts/`, `values/`), for `finalize`."""
    n = len(merged)
    key_bytes = np.full(n, b"", dtype=object)
    location = np.full(n, "", dtype=object)
    values: dict[str, np.ndarray] = {}
    if not redact:
        missing = np.ones(n, dtype=bool)
        for stage in STAGES:  # from the earliest stage that has the record
            _gather(merged, stage, missing, "key_bytes", key_bytes, storage)
            for i in np.flatnonzero(missing & kept & (merged.src[stage] >= 0)).tolist():
                folder, part, label = merged.sources[merged.src[stage][i]]
                location[i] = f"tap {stage}/{label}/{part}:{merged.row[stage][i]}"
            missing &= merged.src[stage] < 0
    texts = _key_texts(merged, key_bytes, redact)
    for stage in STAGES:
        column = np.array(_marker_bytes(merged.fps[stage]) + [b""], dtype=object)[:-1]
        if not redact:
            stored = np.full(n, None, dtype=object)
            _gather(merged, stage, kept, stage, stored, storage)
            own = kept & (merged.src[stage] >= 0) & (stored != None)  # noqa: E711 (elementwise)
            column[own] = stored[own]
            for code, filler in _FILLERS.items():
                column[kept & (merged.fillers[stage] == code)] = canonical.encode(filler)
        values[stage] = column
    parts_dir, values_dir = urls.child(set_dir, "_parts"), urls.child(set_dir, VALUES_DIR)
    storage.makedirs(parts_dir)
    storage.makedirs(values_dir)
    flat_keys = merged.keys.reshape(-1)
    for number, start in enumerate(range(0, max(n, 1), PART_ROWS)):
        stop = min(n, start + PART_ROWS)
        count, part = stop - start, f"tap-{number:05d}"
        key_fp = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(16), count, [None, pa.py_buffer(flat_keys[start * 16:stop * 16].tobytes())])
        fp_table = pa.table(
            [key_fp, pa.array(texts[start:stop], pa.string())]
            + [pa.array(merged.fps[s][start:stop], pa.uint64()) for s in STAGES]
            + [pa.array(merged.features[start:stop], FP_SCHEMA.field("features").type),
               pa.array([part] * count, pa.string()), pa.array(np.arange(count, dtype=np.int32))],
            schema=FP_SCHEMA)
        value_table = pa.table(
            [pa.array(key_bytes[start:stop].tolist(), pa.binary()), pa.array(location[start:stop].tolist(),
                                                                              pa.string())]
            + [pa.array(values[s][start:stop].tolist(), pa.binary()) for s in STAGES], schema=VALUE_SCHEMA)
        for table, folder in ((fp_table, parts_dir), (value_table, values_dir)):
            with storage.open_write(urls.child(folder, f"{part}.parquet")) as target:
                pq.write_table(table, target, compression="zstd")
        if n == 0:
            break


def iter_stage_keys(set_dir: str, storage: Storage = Storage()) -> dict[str, set[bytes]]:
    """The key fingerprints each stage's taps wrote (before finalize): what `finalize` merges."""
    result: dict[str, set[bytes]] = {}
    for tap in _read_taps(set_dir, storage):
        keys = result.setdefault(tap["stage"], set())
        for path in storage.match(urls.child(tap["dir"], "_parts", "*.parquet")):
            keys.update(storage.read_parquet(path, columns=["key_fp"]).column("key_fp").to_pylist())
    return result


__all__ = ["finalize_tap_set", "iter_stage_keys"]
