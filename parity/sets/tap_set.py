"""Fingerprint sets written by production taps (`parity.beam.TapStage`), and how `parity diff` compares them.

A tap sees one stage of one pipeline, so a tapped set is assembled after the job from the parts each tap
wrote (docs/taps.md):

    SET/_taps/<stage>/<label>/tap.json                 the tap's settings, written when the pipeline is built
    SET/_taps/<stage>/<label>/env-<hash>.json          the environment of a worker that ran the tap
    SET/_taps/<stage>/<label>/_parts/<part>.parquet    fingerprint rows of one batch (`write_tap_part`)
    SET/_taps/<stage>/<label>/values/<part>.parquet    their canonical values (kept keys only)
    SET/_taps/<stage>/<label>/_parts/<part>.quarantine.jsonl   elements the tap could not key or encode

`finalize_tap_set` merges them into a standard `parity.fingerprints/1` set (docs/fingerprint-set.md): one
row per record key, each tapped stage's fingerprint from the tap of that stage, plus the tap fields of the
manifest (`stages_tapped`, `sample_rate`, `values`, `taps`).

Stages a record has no tapped value for are filled with documented sentinels:

| sentinel | where |
|---|---|
| `{"untapped": true}` | every record, at a stage no tap covered (the diff does not compare these stages) |
| `{"dropped": "late"}` | stages after `window` of a record a `late=True` window tap saw (as the replay does) |
| `{"dropped": "not_seen_by_tap"}` | a tapped stage whose tap never saw a record that another tap saw |

**Sampling** is by record key, the same rule everywhere: a key is kept iff the first 8 bytes of its pairing
fingerprint `key_fp = xxh3_128(canonical key bytes)`, read as a big-endian unsigned integer `u`, satisfy
`u / 2**64 < rate` (exactly: `u < ceil(rate * 2**64)`). Every tap and the diff apply it to the same bytes,
so a key is tapped at every stage or at none, and the other side of a diff is restricted to the same keys.

`align` is what `parity diff` applies to two sets before pairing them: both are restricted to the keys
sampled on both sides and to the stages tapped on both sides (other stages get the `untapped` fingerprint on
both sides, so they never diverge). `write_view` writes the aligned sets to disk, for a `parity diff` that
does not align by itself.
"""
from __future__ import annotations

import glob
import json
import math
import os
import shutil
from fractions import Fraction
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from parity.encoding import canonical
from parity.encoding.fingerprint import fingerprint, fingerprint_bytes
from parity.errors import FingerprintSetError
from parity.storage.files import replacing, write_text
from parity.sets.fingerprint_set import (FINGERPRINTS, FP_SCHEMA, MANIFEST, PARTS_DIR, QUARANTINE, STAGE_VALUES_DIR,
                                    VALUE_SCHEMA, VALUES_DIR, FingerprintSet, finalize, map_array, read_set,
                                    read_values, write_quarantine_part)
from parity.stages import STAGES

TAP_FORMAT = "parity.taps/1"
TAPS_DIR = "_taps"
TAP_META = "tap.json"
SAMPLE_RULE = "u / 2**64 < sample_rate, u = the first 8 bytes (big-endian) of key_fp = xxh3_128(key bytes)"
VALUES_RULE = "the keep_values records with the smallest key_fp (bytes order); none when redacted"

UNTAPPED = {"untapped": True}
DROPPED_LATE = {"dropped": "late"}
NOT_SEEN = {"dropped": "not_seen_by_tap"}
PART_ROWS = 50_000  # records per values part of a finalized tap set

UNTAPPED_FP = fingerprint(UNTAPPED)
NOT_SEEN_FP = fingerprint(NOT_SEEN)
DROPPED_LATE_FP = fingerprint(DROPPED_LATE)


def sample_threshold(rate: float) -> int:
    """The integer bound of the sampling rule: a key is sampled iff `u < sample_threshold(rate)`."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0 or \
            math.isnan(rate):
        raise ValueError(f"sample_rate must be a number in [0, 1], got {rate!r}")
    return math.ceil(Fraction(rate) * (1 << 64))


def key_sampled(key_fp: bytes, rate: float) -> bool:
    """Whether a record key (given by its 16-byte pairing fingerprint) is in the sample at `rate`."""
    return int.from_bytes(key_fp[:8], "big") < sample_threshold(rate)


def sampled_mask(key_fps: pa.ChunkedArray | pa.Array, rate: float) -> np.ndarray:
    """Vectorised `key_sampled` over a fixed_size_binary(16) column."""
    threshold = sample_threshold(rate)
    array = key_fps.combine_chunks() if isinstance(key_fps, pa.ChunkedArray) else key_fps
    if threshold >= 1 << 64:
        return np.ones(len(array), dtype=bool)
    if len(array) == 0:
        return np.zeros(0, dtype=bool)
    raw = np.frombuffer(array.buffers()[1], dtype=np.uint8)[array.offset * 16:(array.offset + len(array)) * 16]
    high = raw.reshape(-1, 16)[:, :8].copy().view(">u8").ravel()
    return high < np.uint64(threshold)


def marker_fp(value: Any) -> int:
    return fingerprint(value)


def not_kept(fp: int) -> dict[str, str]:
    """The value a tap set stores for a stage of a record whose values were not kept.

    It names the stage's fingerprint, so two such values are equal only when the fingerprints are: the
    tolerance tier never mistakes two unknown values for equal ones (shown cut to 40 characters).
    """
    return {"error": f"not kept by the tap (fp {fp:016x})"}


def _not_kept_bytes() -> tuple[bytes, bytes]:
    """The canonical bytes of `not_kept(fp)` around the 16 hex digits, to build many of them quickly."""
    sample = canonical.encode(not_kept(0))
    head, tail = sample[:-17], sample[-1:]
    assert head + b"%016x" % 0xFEDCBA9876543210 + tail == canonical.encode(not_kept(0xFEDCBA9876543210))
    return head, tail


_NOT_KEPT_BYTES = _not_kept_bytes()


# ---------------------------------------------------------------------------------------------------------
# The manifest of a tap set, and of any set seen through the tap fields


def stages_tapped(manifest: dict[str, Any]) -> list[str]:
    """The stages a set holds real values for: `stages_tapped` of a tap set, every stage of a replay."""
    stages = manifest.get("stages_tapped")
    return list(manifest.get("stages", STAGES)) if stages is None else list(stages)


def sample_rate(manifest: dict[str, Any]) -> float:
    rate = manifest.get("sample_rate", 1.0)
    return 1.0 if rate is None else rate


def is_tap_set(manifest: dict[str, Any]) -> bool:
    return "tap_format" in manifest


# ---------------------------------------------------------------------------------------------------------
# Writing: the parts of one tap (called by parity.beam) and the final merge


def tap_dir(set_dir: str, stage: str, label: str) -> str:
    return os.path.join(set_dir, TAPS_DIR, stage, label)


def write_tap_meta(set_dir: str, meta: dict[str, Any]) -> str:
    """Starts one tap's folder: removes what an earlier run of the tap left, writes its settings."""
    folder = tap_dir(set_dir, meta["stage"], meta["label"])
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder, exist_ok=True)
    _write_json_atomic(os.path.join(folder, TAP_META), meta)
    return folder


def write_worker_environment(folder: str, environment: dict[str, Any]) -> None:
    text = json.dumps(environment, sort_keys=True)
    path = os.path.join(folder, f"env-{fingerprint_bytes(text.encode()):016x}.json")
    if not os.path.exists(path):
        _write_json_atomic(path, environment)


def write_tap_part(folder: str, part: str, stage: str, key_fps: list[bytes], fps: list[int],
                   features: tuple[list[int], list[str], list[int]] | None, key_bytes: list[bytes] | None,
                   values: list[bytes | None]) -> None:
    """Writes one batch of one tap as a part of the standard layout (`write_part`'s schemas, both as Parquet:
    `_parts/<part>.parquet` and `values/<part>.parquet`; `finalize` reads these as it reads a replay's
    `.arrow` fingerprint parts), column by column. Only the tap's stage is filled;
    `key` is left null (finalize writes it once per record), and a value is null when it is not kept.

    `features` (transform stage): each record's feature count (-1: none, a null entry), and the names and
    fingerprints of all records' features one after the other, flat (no container per record)."""
    n = len(key_fps)
    nulls_fp = pa.nulls(n, pa.uint64())
    fp_table = pa.table(
        [pa.array(key_fps, pa.binary(16)), pa.nulls(n, pa.string())]
        + [pa.array(fps, pa.uint64()) if s == stage else nulls_fp for s in STAGES]
        + [_feature_map(*features) if features is not None else pa.nulls(n, FP_SCHEMA.field("features").type),
           pa.array([part] * n, pa.string()), pa.array(np.arange(n, dtype=np.int32))], schema=FP_SCHEMA)
    nulls_value = pa.nulls(n, pa.binary())
    value_table = pa.table(
        [pa.array(key_bytes, pa.binary()) if key_bytes is not None else pa.array([b""] * n, pa.binary()),
         pa.nulls(n, pa.string())]
        + [pa.array(values, pa.binary()) if s == stage else nulls_value for s in STAGES], schema=VALUE_SCHEMA)
    for table, sub in ((fp_table, "_parts"), (value_table, VALUES_DIR)):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
        path = os.path.join(folder, sub, f"{part}.parquet")
        with replacing(path) as temporary:
            pq.write_table(table, temporary, compression="zstd")


def _feature_map(counts: list[int], names: list[str], fps: list[int]) -> pa.MapArray:
    sizes = np.array(counts, dtype=np.int64)
    offsets = np.zeros(len(sizes) + 1, dtype=np.int32)
    np.cumsum(np.maximum(sizes, 0), out=offsets[1:])
    mask = pa.array(sizes < 0) if (sizes < 0).any() else None
    return map_array(offsets, pa.array(names, pa.string()), pa.array(fps, pa.uint64()),
                     FP_SCHEMA.field("features").type, mask=mask)


def _write_json_atomic(path: str, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def _read_taps(set_dir: str) -> list[dict[str, Any]]:
    taps = []
    for path in sorted(glob.glob(os.path.join(set_dir, TAPS_DIR, "*", "*", TAP_META))):
        try:
            with open(path, encoding="utf-8") as handle:
                meta = json.load(handle)
        except (OSError, ValueError) as exc:
            raise FingerprintSetError(f"{path}: unreadable tap settings: {exc}") from exc
        if not isinstance(meta, dict) or meta.get("tap_format") != TAP_FORMAT:
            found = meta.get("tap_format") if isinstance(meta, dict) else type(meta).__name__
            raise FingerprintSetError(f"{path}: tap format {found!r} is not {TAP_FORMAT!r}; re-run the tapped "
                                      f"pipeline with this version of parity")
        if meta.get("stage") not in STAGES:
            raise FingerprintSetError(f"{path}: unknown stage {meta.get('stage')!r}; expected one of "
                                      f"{', '.join(STAGES)}")
        meta["dir"] = os.path.dirname(path)
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
                     transform_graph: str | None = None, keep_parts: bool = False) -> dict[str, Any]:
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

    Raises:
        FingerprintSetError: no taps, taps that disagree (side, sampling, key fields, format), or
            `stages_tapped` that does not match the taps found.
    """
    taps = _read_taps(set_dir)
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

    merged = _merge(taps, found)
    kept = merged.kept(keep_values)
    quarantined = _quarantine_entries(taps, later=False)
    _reset_outputs(set_dir)
    _write_merged(set_dir, merged, kept, redact)
    if quarantined:
        write_quarantine_part(set_dir, "tap", quarantined)

    environments = _worker_environments(taps)
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
        "quarantined_later_stages": sum(1 for e in _quarantine_entries(taps, later=True)),
    }
    if len(environments) > 1:
        manifest["worker_environments"] = environments
    if transform_graph is not None:
        from parity.compare import analyzers

        analyzers.write(set_dir, analyzers.extract(transform_graph))
    if not keep_parts:
        shutil.rmtree(os.path.join(set_dir, TAPS_DIR), ignore_errors=True)
    return finalize(set_dir, manifest)


def _reset_outputs(set_dir: str) -> None:
    for name in (PARTS_DIR, VALUES_DIR, STAGE_VALUES_DIR):
        shutil.rmtree(os.path.join(set_dir, name), ignore_errors=True)
    for name in (FINGERPRINTS, MANIFEST, QUARANTINE, "analyzers.json"):
        path = os.path.join(set_dir, name)
        if os.path.exists(path):
            os.remove(path)


def _quarantine_entries(taps: list[dict], later: bool) -> list[dict]:
    """Quarantined elements of the first tapped stage (later=False) or of the other stages (later=True).

    An element a tap could not key is usually refused by every tap after it too: only the first tapped
    stage's entries count as quarantined records, so that each record is counted once.
    """
    first = next(s for s in STAGES if any(t["stage"] == s for t in taps))
    result = []
    for tap in taps:
        if (tap["stage"] == first) == later:
            continue
        for path in sorted(glob.glob(os.path.join(tap["dir"], "_parts", "*.quarantine.jsonl"))):
            with open(path, encoding="utf-8") as handle:
                result.extend(json.loads(line) for line in handle if line.strip())
    return result


def _worker_environments(taps: list[dict]) -> list[dict]:
    seen: dict[str, dict] = {}
    for tap in taps:
        for path in sorted(glob.glob(os.path.join(tap["dir"], "env-*.json"))):
            with open(path, encoding="utf-8") as handle:
                env = json.load(handle)
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


def _stage_rows(taps: list[dict], stage: str, sources: list[tuple[str, str, str]]) -> pa.Table:
    """Every row the taps of one stage wrote, sorted by (key_fp, fp, source), with its source and row."""
    column = f"{stage}_fp"
    columns = ["key_fp", column] + (["features"] if stage == "transform" else [])
    tables = []
    for tap in taps:
        if tap["stage"] != stage:
            continue
        for path in sorted(glob.glob(os.path.join(tap["dir"], "_parts", "*.parquet"))):
            try:
                table = pq.read_table(path, schema=FP_SCHEMA, columns=columns)
            except (OSError, pa.ArrowException) as exc:
                raise FingerprintSetError(f"{path}: cannot read a tap part: {exc}") from exc
            n = table.num_rows
            table = table.append_column("src", pa.array(np.full(n, len(sources), dtype=np.int32)))
            table = table.append_column("row", pa.array(np.arange(n, dtype=np.int32)))
            table = table.append_column("late", pa.array(np.full(n, bool(tap.get("late")))))
            sources.append((tap["dir"], os.path.basename(path)[:-len(".parquet")], tap["label"]))
            tables.append(table)
    if not tables:
        fields = [FP_SCHEMA.field(c) for c in columns] + [pa.field("src", pa.int32()), pa.field("row", pa.int32()),
                                                         pa.field("late", pa.bool_())]
        return pa.schema(fields).empty_table()
    table = pa.concat_tables(tables)
    return table.sort_by([("key_fp", "ascending"), (column, "ascending"), ("src", "ascending"),
                          ("row", "ascending")])


def _merge(taps: list[dict], tapped: list[str]) -> _Merged:
    """Pairs the stages' rows into records: the i-th row of a key at one stage with the i-th at the others
    (rows of a key are ordered by fingerprint, so duplicates pair deterministically)."""
    sources: list[tuple[str, str, str]] = []
    tables = {s: _stage_rows(taps, s, sources) for s in tapped}
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
                 columns: list[str]) -> dict[int, pa.Table]:
    """The rows `wanted[src]` of each source part's values, in that order."""
    result = {}
    for index, rows in sorted(wanted.items()):
        folder, part, _ = sources[index]
        result[index] = read_values(folder, part, columns).take(pa.array(rows, type=pa.int64()))
    return result


def _gather(merged: _Merged, stage: str, mask: np.ndarray, column: str, into: np.ndarray) -> None:
    """Copies `column` of the values rows stage `stage` wrote into `into[i]` for the records in `mask`."""
    records = np.flatnonzero(mask & (merged.src[stage] >= 0))
    if not len(records):
        return
    srcs, rows = merged.src[stage][records], merged.row[stage][records]
    wanted = {int(s): rows[srcs == s] for s in np.unique(srcs)}
    for index, table in _read_values(merged.sources, wanted, [column]).items():
        into[records[srcs == index]] = np.array(table.column(column).to_pylist() + [None], dtype=object)[:-1]


def _marker_bytes(fps: np.ndarray) -> list[bytes]:
    head, tail = _NOT_KEPT_BYTES
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


def _write_merged(set_dir: str, merged: _Merged, kept: np.ndarray, redact: bool) -> None:
    """Writes the records as the batch parts of a standard set (`_parts/`, `values/`), for `finalize`."""
    n = len(merged)
    key_bytes = np.full(n, b"", dtype=object)
    location = np.full(n, "", dtype=object)
    values: dict[str, np.ndarray] = {}
    if not redact:
        missing = np.ones(n, dtype=bool)
        for stage in STAGES:  # from the earliest stage that has the record
            _gather(merged, stage, missing, "key_bytes", key_bytes)
            for i in np.flatnonzero(missing & kept & (merged.src[stage] >= 0)).tolist():
                folder, part, label = merged.sources[merged.src[stage][i]]
                location[i] = f"tap {stage}/{label}/{part}:{merged.row[stage][i]}"
            missing &= merged.src[stage] < 0
    texts = _key_texts(merged, key_bytes, redact)
    for stage in STAGES:
        column = np.array(_marker_bytes(merged.fps[stage]) + [b""], dtype=object)[:-1]
        if not redact:
            stored = np.full(n, None, dtype=object)
            _gather(merged, stage, kept, stage, stored)
            own = kept & (merged.src[stage] >= 0) & (stored != None)  # noqa: E711 (elementwise)
            column[own] = stored[own]
            for code, filler in _FILLERS.items():
                column[kept & (merged.fillers[stage] == code)] = canonical.encode(filler)
        values[stage] = column
    parts_dir, values_dir = os.path.join(set_dir, "_parts"), os.path.join(set_dir, VALUES_DIR)
    os.makedirs(parts_dir, exist_ok=True)
    os.makedirs(values_dir, exist_ok=True)
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
        pq.write_table(fp_table, os.path.join(parts_dir, f"{part}.parquet"), compression="zstd")
        pq.write_table(value_table, os.path.join(values_dir, f"{part}.parquet"), compression="zstd")
        if n == 0:
            break


# ---------------------------------------------------------------------------------------------------------
# Reading: what `parity diff` does with a tap set


def _check_tap_manifest(fset: FingerprintSet) -> None:
    manifest = fset.manifest
    if not is_tap_set(manifest):
        return
    where = os.path.join(fset.path, MANIFEST)
    if manifest.get("tap_format") != TAP_FORMAT:
        raise FingerprintSetError(f"{where}: tap format {manifest.get('tap_format')!r} is not {TAP_FORMAT!r}; "
                                  f"re-run the tapped pipeline and finalize with this version of parity")
    stages = manifest.get("stages_tapped")
    if not isinstance(stages, list) or not stages or any(s not in STAGES for s in stages):
        raise FingerprintSetError(f"{where}: stages_tapped {stages!r} must be a non-empty list of "
                                  f"{', '.join(STAGES)}")
    rate = manifest.get("sample_rate")
    try:
        sample_threshold(rate)
    except ValueError as exc:
        raise FingerprintSetError(f"{where}: {exc}") from exc


def align(left: FingerprintSet, right: FingerprintSet) -> tuple[FingerprintSet, FingerprintSet]:
    """Makes two sets comparable record by record when either was written by taps.

    - Both are restricted to the keys sampled on both sides (the smaller sample rate: the sample of a
      smaller rate is contained in the sample of a larger one), so the counts of the report are those of
      the sample and nothing is one-sided because of sampling. Records outside the sample are left out of
      `records` and counted in the manifest's `sample.outside_sample`.
    - Stages tapped on one side only are not compared: both sides get the `{"untapped": true}`
      fingerprint there (and no per-feature fingerprints when that stage is `transform`).

    Two replay sets come back unchanged. Refuses (FingerprintSetError, exit 2) tap sets of an unknown tap
    format and pairs of sets with no tapped stage in common.
    """
    _check_tap_manifest(left)
    _check_tap_manifest(right)
    ls, rs = stages_tapped(left.manifest), stages_tapped(right.manifest)
    lr, rr = sample_rate(left.manifest), sample_rate(right.manifest)
    compared = [s for s in STAGES if s in ls and s in rs]
    if not compared:
        raise FingerprintSetError(f"the fingerprint sets have no tapped stage in common: {left.path} has "
                                  f"{ls}, {right.path} has {rs}; tap at least one stage the other set holds")
    rate = min(lr, rr)
    if compared == list(STAGES) and lr == rr == 1.0:
        return left, right
    return _aligned(left, compared, rate), _aligned(right, compared, rate)


def report_taps(left: FingerprintSet, right: FingerprintSet) -> dict[str, Any] | None:
    """report.json's `taps` of two sets as `align` returned them: what the diff compared, or None when
    neither set was written by taps (the report then has no `taps` field).

    `stages_compared`: the stages tapped on both sides (the others never diverge); `sample_rate`: the rate
    both sides were restricted to; `outside_sample`: per side, the records the diff left out because their
    keys are outside that sample.
    """
    if not (is_tap_set(left.manifest) or is_tap_set(right.manifest)):
        return None
    compared = left.manifest.get("stages_compared", list(STAGES))
    rate = min(sample_rate(left.manifest), sample_rate(right.manifest))
    return {"stages_compared": list(compared), "sample_rate": rate,
            "outside_sample": {side: int((fset.manifest.get("sample") or {}).get("outside_sample", 0))
                               for side, fset in (("left", left), ("right", right))}}


def _aligned(fset: FingerprintSet, compared: list[str], rate: float) -> FingerprintSet:
    table = fset.table
    manifest = json.loads(json.dumps(fset.manifest))
    outside = 0
    if rate < sample_rate(fset.manifest):
        mask = sampled_mask(table.column("key_fp"), rate)
        outside = int((~mask).sum())
        table = table.filter(pa.array(mask))
    for stage in STAGES:
        if stage in compared:
            continue
        index = table.schema.get_field_index(f"{stage}_fp")
        table = table.set_column(index, f"{stage}_fp",
                                 pa.array(np.full(table.num_rows, UNTAPPED_FP, dtype=np.uint64)))
        if stage == "transform":
            index = table.schema.get_field_index("features")
            table = table.set_column(index, "features",
                                     pa.array([[]] * table.num_rows, type=FP_SCHEMA.field("features").type))
            manifest["features"] = []
    records = dict(manifest.get("records", {}))
    quarantined = records.get("quarantined", 0)
    records.update({"fingerprinted": table.num_rows, "read": table.num_rows + quarantined})
    manifest["records"] = records
    previous = manifest.get("sample") or {}
    manifest["sample"] = {"rate": rate, "rule": SAMPLE_RULE,
                          "outside_sample": previous.get("outside_sample", 0) + outside}
    manifest["sample_rate"] = rate
    manifest["stages_compared"] = compared
    return FingerprintSet(path=fset.path, manifest=manifest, table=table)


def write_view(fset: FingerprintSet, out_dir: str) -> str:
    """Writes an aligned set (from `align`) as a fingerprint set of its own: fingerprints and manifest, with
    links to the original's values, quarantine and analyzers. `parity diff` reads it like any set."""
    if os.path.abspath(out_dir) == os.path.abspath(fset.path):
        raise FingerprintSetError(f"{out_dir}: a view must not overwrite the set it shows")
    os.makedirs(out_dir, exist_ok=True)
    pq.write_table(fset.table.cast(FP_SCHEMA), os.path.join(out_dir, FINGERPRINTS), compression="zstd")
    for name in (VALUES_DIR, STAGE_VALUES_DIR, QUARANTINE, "analyzers.json"):
        source, target = os.path.join(fset.path, name), os.path.join(out_dir, name)
        if os.path.lexists(target):
            shutil.rmtree(target) if os.path.isdir(target) and not os.path.islink(target) else os.remove(target)
        if os.path.exists(source):
            os.symlink(os.path.abspath(source), target)
    manifest = dict(fset.manifest)
    manifest["view_of"] = os.path.abspath(fset.path)
    _write_json_atomic(os.path.join(out_dir, MANIFEST), manifest)
    return out_dir


def write_views(left_dir: str, right_dir: str, out_dir: str) -> tuple[str, str]:
    """Aligns two sets and writes both views under `out_dir` (`left/`, `right/`): `parity diff
    OUT/left OUT/right` then compares exactly what a tap-aware `parity diff LEFT RIGHT` compares."""
    left, right = align(read_set(left_dir), read_set(right_dir))
    return (write_view(left, os.path.join(out_dir, "left")), write_view(right, os.path.join(out_dir, "right")))


def iter_stage_keys(set_dir: str) -> dict[str, set[bytes]]:
    """The key fingerprints each stage's taps wrote (before finalize): what `finalize` merges."""
    result: dict[str, set[bytes]] = {}
    for tap in _read_taps(set_dir):
        keys = result.setdefault(tap["stage"], set())
        for path in glob.glob(os.path.join(tap["dir"], "_parts", "*.parquet")):
            keys.update(pq.read_table(path, columns=["key_fp"]).column("key_fp").to_pylist())
    return result


__all__: Iterable[str] = [
    "DROPPED_LATE", "NOT_SEEN", "SAMPLE_RULE", "TAP_FORMAT", "UNTAPPED", "align", "finalize_tap_set",
    "iter_stage_keys", "key_sampled", "not_kept", "sample_threshold", "sampled_mask", "stages_tapped",
    "write_view", "write_views",
]
