"""Fingerprint sets: what one replayed (or tapped) side leaves behind, and what `parity diff` reads.

Layout of a set (format `parity.fingerprints/1`, documented in docs/fingerprint-set.md):

    DIR/manifest.json          format, encoding, side, key definition, stages, features, counts, environment
    DIR/fingerprints.parquet   one row per record, sorted by (key_fp, input fp): key, stage fingerprints
    DIR/values/part-*.parquet  the canonical bytes of every stage value, per record (for drill-down)
    DIR/quarantine.jsonl       one line per quarantined record: location, reason, preview

Sets are read as data only: Parquet and JSON, never pickle.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from parity import canonical
from parity.config import STAGES
from parity.errors import FingerprintSetError

FORMAT = "parity.fingerprints/1"
MANIFEST = "manifest.json"
FINGERPRINTS = "fingerprints.parquet"
QUARANTINE = "quarantine.jsonl"
VALUES_DIR = "values"
PARTS_DIR = "_parts"

FP_SCHEMA = pa.schema(
    [("key_fp", pa.binary(16)), ("key", pa.string())]
    + [(f"{s}_fp", pa.uint64()) for s in STAGES]
    + [("features", pa.map_(pa.string(), pa.uint64())), ("part", pa.string()), ("row", pa.int32())])
VALUE_SCHEMA = pa.schema([("key_bytes", pa.binary()), ("location", pa.string())]
                         + [(s, pa.binary()) for s in STAGES])


@dataclass
class PartRows:
    """The rows one batch contributes: fingerprints, values, quarantined entries."""

    fingerprints: list[dict]
    values: list[dict]


def write_part(out_dir: str, part: str, rows: PartRows) -> None:
    """Writes one batch's rows; the name is derived from the batch, so a retried bundle overwrites it."""
    parts = os.path.join(out_dir, PARTS_DIR)
    values = os.path.join(out_dir, VALUES_DIR)
    os.makedirs(parts, exist_ok=True)
    os.makedirs(values, exist_ok=True)
    for row_index, row in enumerate(rows.fingerprints):
        row["part"] = part
        row["row"] = row_index
    _atomic_parquet(pa.Table.from_pylist(rows.fingerprints, schema=FP_SCHEMA),
                    os.path.join(parts, f"{part}.parquet"))
    _atomic_parquet(pa.Table.from_pylist(rows.values, schema=VALUE_SCHEMA),
                    os.path.join(values, f"{part}.parquet"))


def write_quarantine_part(out_dir: str, part: str, entries: list[dict]) -> None:
    parts = os.path.join(out_dir, PARTS_DIR)
    os.makedirs(parts, exist_ok=True)
    path = os.path.join(parts, f"{part}.quarantine.jsonl")
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        for entry in entries:
            handle.write(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n")
    os.replace(path + ".tmp", path)


def _atomic_parquet(table: pa.Table, path: str) -> None:
    pq.write_table(table, path + ".tmp", compression="zstd")
    os.replace(path + ".tmp", path)


def finalize(out_dir: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Merges the batch parts into the sorted fingerprint file and writes the manifest."""
    parts_dir = os.path.join(out_dir, PARTS_DIR)
    fp_parts = sorted(glob.glob(os.path.join(parts_dir, "*.parquet")))
    tables = [pq.read_table(p, schema=FP_SCHEMA) for p in fp_parts]
    table = pa.concat_tables(tables) if tables else FP_SCHEMA.empty_table()
    table = table.sort_by([("key_fp", "ascending"), ("input_fp", "ascending"), ("part", "ascending"),
                           ("row", "ascending")])
    pq.write_table(table, os.path.join(out_dir, FINGERPRINTS), compression="zstd")
    quarantined: list[dict] = []
    for path in sorted(glob.glob(os.path.join(parts_dir, "*.quarantine.jsonl"))):
        with open(path, encoding="utf-8") as handle:
            quarantined.extend(json.loads(line) for line in handle if line.strip())
    quarantined.sort(key=lambda e: (e["location"], e["reason"]))
    with open(os.path.join(out_dir, QUARANTINE), "w", encoding="utf-8") as handle:
        for entry in quarantined:
            handle.write(json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n")
    for path in fp_parts + sorted(glob.glob(os.path.join(parts_dir, "*.quarantine.jsonl"))):
        os.remove(path)
    if os.path.isdir(parts_dir) and not os.listdir(parts_dir):
        os.rmdir(parts_dir)
    features: set[str] = set()
    for chunk in table.column("features").chunks:
        features.update(chunk.keys.to_pylist())
    reasons: dict[str, int] = {}
    for entry in quarantined:
        reasons[entry["reason_kind"]] = reasons.get(entry["reason_kind"], 0) + 1
    manifest = dict(manifest)
    manifest.update({
        "format": FORMAT,
        "encoding": canonical.ENCODING_VERSION,
        "stages": list(STAGES),
        "features": sorted(features),
        "records": {"read": table.num_rows + len(quarantined), "fingerprinted": table.num_rows,
                    "quarantined": len(quarantined)},
        "quarantine_reasons": dict(sorted(reasons.items())),
    })
    with open(os.path.join(out_dir, MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, ensure_ascii=False, sort_keys=True)
        handle.write("\n")
    return manifest


@dataclass
class FingerprintSet:
    """A fingerprint set opened for reading."""

    path: str
    manifest: dict[str, Any]
    table: pa.Table

    @property
    def side(self) -> str:
        return self.manifest.get("side", os.path.basename(self.path.rstrip("/")))

    def quarantined(self) -> list[dict]:
        path = os.path.join(self.path, QUARANTINE)
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]

    def values(self, refs: Iterable[tuple[str, int]]) -> dict[tuple[str, int], dict[str, Any]]:
        """Decoded stage values (and location, key bytes) of the given (part, row) records."""
        by_part: dict[str, list[int]] = {}
        for part, row in refs:
            by_part.setdefault(part, []).append(row)
        result: dict[tuple[str, int], dict[str, Any]] = {}
        for part, rows in sorted(by_part.items()):
            if not part or os.path.basename(part) != part or part in (".", ".."):
                raise FingerprintSetError(f"{self.path}/{FINGERPRINTS}: part {part!r} is not a file name; the set "
                                          f"is damaged: replay the side again")
            path = os.path.join(self.path, VALUES_DIR, f"{part}.parquet")
            try:
                table = pq.read_table(path, schema=VALUE_SCHEMA).take(pa.array(sorted(set(rows))))
            except (OSError, pa.ArrowException) as exc:
                raise FingerprintSetError(f"{path}: cannot read the values of a fingerprint set: {exc}") from exc
            for row, record in zip(sorted(set(rows)), table.to_pylist()):
                decoded: dict[str, Any] = {"location": record["location"], "key_bytes": record["key_bytes"]}
                for stage in STAGES:
                    data = record[stage]
                    try:
                        decoded[stage] = canonical.decode(data) if data is not None else None
                    except ValueError as exc:  # data only: anything but canonical bytes is refused, never run
                        raise FingerprintSetError(
                            f"{path}: row {row}, stage {stage}: the value is not canonical bytes "
                            f"({exc}); the set is damaged or was not written by parity: replay the side again") from exc
                result[(part, row)] = decoded
        return result


def read_set(path: str) -> FingerprintSet:
    """Opens a fingerprint set, refusing clearly what parity cannot read."""
    manifest_path = os.path.join(path, MANIFEST)
    try:
        with open(manifest_path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except FileNotFoundError as exc:
        raise FingerprintSetError(f"{path}: not a fingerprint set (no {MANIFEST}); pass a folder written by "
                                  f"`parity replay` or by a parity.beam tap") from exc
    except (OSError, ValueError) as exc:
        raise FingerprintSetError(f"{manifest_path}: unreadable manifest: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise FingerprintSetError(f"{manifest_path}: format {found!r} is not {FORMAT!r}; re-run `parity replay` "
                                  f"with this version of parity")
    if manifest.get("encoding") != canonical.ENCODING_VERSION:
        raise FingerprintSetError(f"{manifest_path}: canonical encoding {manifest.get('encoding')!r} is not "
                                  f"{canonical.ENCODING_VERSION!r}; fingerprints of different encodings cannot "
                                  f"be compared: replay both sides with the same parity version")
    records = manifest.get("records")
    if not isinstance(records, dict) or not all(isinstance(records.get(k), int) and not isinstance(records.get(k), bool)
                                                for k in ("read", "fingerprinted", "quarantined")):
        raise FingerprintSetError(f"{manifest_path}: field 'records' must hold the integers read, fingerprinted and "
                                  f"quarantined, got {str(records)[:80]}; the set is damaged: replay the side again")
    if not isinstance(manifest.get("side", ""), str) or not isinstance(manifest.get("quarantine_reasons", {}), dict):
        raise FingerprintSetError(f"{manifest_path}: fields 'side' (a string) and 'quarantine_reasons' (a mapping) "
                                  f"are malformed; the set is damaged: replay the side again")
    try:
        table = pq.read_table(os.path.join(path, FINGERPRINTS), schema=FP_SCHEMA)
    except (OSError, pa.ArrowException) as exc:
        raise FingerprintSetError(f"{path}/{FINGERPRINTS}: cannot read: {exc}") from exc
    return FingerprintSet(path=path, manifest=manifest, table=table)
