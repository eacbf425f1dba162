"""Fingerprint sets written by production taps (`parity.beam.TapStage`), and how `parity diff` compares them.

A tap sees one stage of one pipeline, so a tapped set is assembled after the job from the parts each tap
wrote (docs/taps.md):

    SET/_taps/<stage>/<label>/tap.json                 the tap's settings, written when the pipeline is built
    SET/_taps/<stage>/<label>/env-<hash>.json          the environment of a worker that ran the tap
    SET/_taps/<stage>/<label>/_parts/<part>.parquet    fingerprint rows of one batch (`write_part`)
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
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from parity import canonical
from parity.config import STAGES
from parity.errors import FingerprintSetError
from parity.fingerprint_set import (FINGERPRINTS, FP_SCHEMA, MANIFEST, QUARANTINE, VALUE_SCHEMA, VALUES_DIR,
                                    FingerprintSet, PartRows, finalize, read_set, write_part,
                                    write_quarantine_part)

TAP_FORMAT = "parity.taps/1"
TAPS_DIR = "_taps"
TAP_META = "tap.json"
SAMPLE_RULE = "u / 2**64 < sample_rate, u = the first 8 bytes (big-endian) of key_fp = xxh3_128(key bytes)"
VALUES_RULE = "the keep_values records with the smallest key_fp (bytes order); none when redacted"

UNTAPPED = {"untapped": True}
DROPPED_LATE = {"dropped": "late"}
NOT_SEEN = {"dropped": "not_seen_by_tap"}
PART_ROWS = 50_000  # records per values part of a finalized tap set

_hash64 = xxhash.xxh3_64_intdigest
UNTAPPED_FP = _hash64(canonical.encode(UNTAPPED))


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
    return _hash64(canonical.encode(value))


def not_kept(fp: int) -> dict[str, str]:
    """The value a tap set stores for a stage of a record whose values were not kept.

    It names the stage's fingerprint, so two such values are equal only when the fingerprints are: the
    tolerance tier never mistakes two unknown values for equal ones (shown cut to 40 characters).
    """
    return {"error": f"not kept by the tap (fp {fp:016x})"}


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
    path = os.path.join(folder, f"env-{_hash64(text.encode()):016x}.json")
    if not os.path.exists(path):
        _write_json_atomic(path, environment)


def _write_json_atomic(path: str, data: Any) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, ensure_ascii=False)
        handle.write("\n")
    os.replace(tmp, path)


@dataclass
class _Entry:
    """One fingerprint row a tap wrote: where it is, what it says."""

    fp: int
    features: list
    key: str
    late: bool
    folder: str
    part: str
    row: int


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

    entries, quarantined = _load_entries(taps)
    records = _assemble(entries, found)
    kept = _kept_keys(records, keep_values)
    _reset_outputs(set_dir)
    _write_records(set_dir, records, kept, entries, redact)
    if quarantined:
        write_quarantine_part(set_dir, "tap", quarantined)

    environments = _worker_environments(taps)
    manifest: dict[str, Any] = {
        "side": side, "key": key_def, "config_name": config_name,
        "environment": environment if environment is not None else (environments[0] if environments else {}),
        "runner": _agree(taps, "runner") if len({t.get("runner") for t in taps}) == 1 else "mixed",
        "tap_format": TAP_FORMAT, "writer": "parity.beam.TapStage",
        "stages_tapped": found, "sample_rate": rate, "sample_rule": SAMPLE_RULE,
        "values": {"kept": len(kept) if keep_values is None or keep_values > 0 else 0,
                   "keep_values": keep_values, "redacted": redact, "rule": VALUES_RULE},
        "taps": [{k: t.get(k) for k in ("stage", "label", "late", "key", "sample_rate", "keep_values",
                                        "redact", "side")} for t in taps],
        "quarantined_later_stages": sum(1 for e in _quarantine_entries(taps, later=True)),
    }
    if len(environments) > 1:
        manifest["worker_environments"] = environments
    if transform_graph is not None:
        from parity import analyzers

        analyzers.write(set_dir, analyzers.extract(transform_graph))
    if not keep_parts:
        shutil.rmtree(os.path.join(set_dir, TAPS_DIR), ignore_errors=True)
    return finalize(set_dir, manifest)


def _reset_outputs(set_dir: str) -> None:
    for name in ("_parts", VALUES_DIR):
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


def _load_entries(taps: list[dict]) -> tuple[dict[str, dict[bytes, list[_Entry]]], list[dict]]:
    """Per stage, per key fingerprint, the rows the stage's taps wrote (sorted: duplicates pair by fp)."""
    entries: dict[str, dict[bytes, list[_Entry]]] = {s: {} for s in STAGES}
    for tap in taps:
        stage, late = tap["stage"], bool(tap.get("late"))
        column = f"{stage}_fp"
        for path in sorted(glob.glob(os.path.join(tap["dir"], "_parts", "*.parquet"))):
            part = os.path.basename(path)[:-len(".parquet")]
            try:
                table = pq.read_table(path, schema=FP_SCHEMA, columns=["key_fp", "key", column, "features"])
            except (OSError, pa.ArrowException) as exc:
                raise FingerprintSetError(f"{path}: cannot read a tap part: {exc}") from exc
            keys = table.column("key_fp").to_pylist()
            texts = table.column("key").to_pylist()
            fps = table.column(column).to_pylist()
            features = table.column("features").to_pylist()
            by_key = entries[stage]
            for row, (key_fp, text, fp, feats) in enumerate(zip(keys, texts, fps, features)):
                by_key.setdefault(key_fp, []).append(_Entry(fp, feats or [], text, late, tap["dir"], part, row))
    for by_key in entries.values():
        for rows in by_key.values():
            rows.sort(key=lambda e: (e.fp, e.features, e.folder, e.part, e.row))
    return entries, _quarantine_entries(taps, later=False) if taps else []


@dataclass
class _Record:
    key_fp: bytes
    key: str
    ordinal: int
    stages: dict[str, Any]  # stage -> _Entry, or a sentinel dict


def _assemble(entries: dict[str, dict[bytes, list[_Entry]]], tapped: list[str]) -> list[_Record]:
    keys = sorted({k for s in tapped for k in entries[s]})
    records = []
    for key_fp in keys:
        lists = {s: entries[s].get(key_fp, []) for s in tapped}
        count = max(len(rows) for rows in lists.values())
        text = next(rows[0].key for rows in lists.values() if rows)
        for ordinal in range(count):
            late = False
            stages: dict[str, Any] = {}
            for stage in STAGES:
                if stage not in lists:
                    stages[stage] = UNTAPPED
                elif ordinal < len(lists[stage]):
                    entry = lists[stage][ordinal]
                    stages[stage] = entry
                    late = late or entry.late
                else:
                    stages[stage] = DROPPED_LATE if late else NOT_SEEN
            records.append(_Record(key_fp, text, ordinal, stages))
    return records


def _kept_keys(records: list[_Record], keep_values: int | None) -> set[bytes]:
    keys = sorted({r.key_fp for r in records})
    return set(keys if keep_values is None else keys[:max(0, keep_values)])


def _write_records(set_dir: str, records: list[_Record], kept: set[bytes],
                   entries: dict[str, dict[bytes, list[_Entry]]], redact: bool) -> None:
    encode = canonical.encode
    needed: dict[tuple[str, str], set[int]] = {}
    for record in records:
        for value in record.stages.values():
            if isinstance(value, _Entry) and (record.key_fp in kept or not redact):
                needed.setdefault((value.folder, value.part), set()).add(value.row)
    loaded = _load_values(needed)
    for start in range(0, len(records), PART_ROWS):
        fp_rows, value_rows = [], []
        for record in records[start:start + PART_ROWS]:
            fp_row: dict[str, Any] = {"key_fp": record.key_fp, "key": record.key, "features": []}
            value_row: dict[str, Any] = {"key_bytes": b"", "location": ""}
            keep = record.key_fp in kept
            for stage in STAGES:
                value = record.stages[stage]
                if isinstance(value, _Entry):
                    fp_row[f"{stage}_fp"] = value.fp
                    if stage == "transform":
                        fp_row["features"] = value.features
                    stored = loaded.get((value.folder, value.part, value.row))
                    if stored is not None:
                        if not value_row["key_bytes"] and stored["key_bytes"]:
                            value_row["key_bytes"] = stored["key_bytes"]
                        if not value_row["location"]:
                            value_row["location"] = f"tap {stage}/{os.path.basename(value.folder)}/" \
                                                    f"{value.part}:{value.row}"
                    data = stored.get(stage) if keep and stored is not None else None
                    value_row[stage] = data if data is not None else encode(not_kept(value.fp))
                else:
                    data = encode(value)
                    fp_row[f"{stage}_fp"] = _hash64(data)
                    value_row[stage] = data if keep else encode(not_kept(fp_row[f"{stage}_fp"]))
            fp_rows.append(fp_row)
            value_rows.append(value_row)
        write_part(set_dir, f"tap-{start // PART_ROWS:05d}", PartRows(fp_rows, value_rows))


def _load_values(needed: dict[tuple[str, str], set[int]]) -> dict[tuple[str, str, int], dict]:
    loaded: dict[tuple[str, str, int], dict] = {}
    for (folder, part), rows in sorted(needed.items()):
        path = os.path.join(folder, VALUES_DIR, f"{part}.parquet")
        try:
            table = pq.read_table(path, schema=VALUE_SCHEMA)
        except (OSError, pa.ArrowException) as exc:
            raise FingerprintSetError(f"{path}: cannot read a tap's values: {exc}") from exc
        ordered = sorted(rows)
        for row, values in zip(ordered, table.take(pa.array(ordered, type=pa.int64())).to_pylist()):
            loaded[(folder, part, row)] = values
    return loaded


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
    for name in (VALUES_DIR, QUARANTINE, "analyzers.json"):
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
