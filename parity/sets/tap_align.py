"""What `parity diff` does with tap sets: both sets restricted to the keys sampled on both sides and to the stages
tapped on both sides (`align`), the report's `taps` section, and the aligned views written to disk.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from parity.errors import FingerprintSetError
from parity.sets.fingerprint_set import (FINGERPRINTS, FP_SCHEMA, MANIFEST, QUARANTINE, STAGE_VALUES_DIR, VALUES_DIR,
                                         FingerprintSet, read_set)
from parity.sets.tap_set import (SAMPLE_RULE, TAP_FORMAT, UNTAPPED_FP, _write_json_atomic, is_tap_set, sample_rate,
                                 sample_threshold, sampled_mask, stages_tapped)
from parity.stages import STAGES
from parity.storage.context import Storage


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
    return FingerprintSet(path=fset.path, manifest=manifest, table=table, storage=fset.storage)


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
    _write_json_atomic(os.path.join(out_dir, MANIFEST), manifest, Storage())  # a local folder
    return out_dir


def write_views(left_dir: str, right_dir: str, out_dir: str) -> tuple[str, str]:
    """Aligns two sets and writes both views under `out_dir` (`left/`, `right/`): `parity diff
    OUT/left OUT/right` then compares exactly what a tap-aware `parity diff LEFT RIGHT` compares."""
    left, right = align(read_set(left_dir), read_set(right_dir))
    return (write_view(left, os.path.join(out_dir, "left")), write_view(right, os.path.join(out_dir, "right")))


__all__ = ["align", "report_taps", "write_view", "write_views"]
