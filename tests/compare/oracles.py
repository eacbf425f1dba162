"""The diff's and the cause classifier's functions as they were before their fast paths: the references the
fast ones are tested against (tests/compare/test_fast_paths.py, tests/compare/test_pair_values.py)."""
from __future__ import annotations

import math
from typing import Any, Callable

from parity.compare.outcomes import PairOutcome
from parity.compare.tolerance import _is_integer, _is_number, feature_deltas, max_abs_delta, numeric_within
from parity.config import Tolerance, ToleranceSpec
from parity.encoding.canonical import decode, encode
from parity.encoding.fields import differing_fields
from parity.sets.fingerprint_set import SORT_KEYS, FingerprintSet
from parity.stages import STAGES
from tests.set_files import stage_bytes


def values_within(a: Any, b: Any, tol_for: Callable[[str | None], Tolerance], name: str | None = None) -> bool:
    """`parity.compare.tolerance.values_within` without its float and str fast path."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return False
        return all(values_within(a[k], b[k], tol_for, k if isinstance(k, str) else name) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(values_within(x, y, tol_for, name) for x, y in zip(a, b))
    if _is_number(a) and _is_number(b):
        if _is_integer(a) != _is_integer(b):
            return False
        return numeric_within(a, b, tol_for(name))[0]
    return type(a) is type(b) and a == b


def same(a: Any, b: Any) -> bool:
    """`parity.compare.causes._same` without its fast path for equal scalars."""
    try:
        return encode(a) == encode(b)
    except (TypeError, ValueError, OverflowError):
        return type(a) is type(b) and a == b


def pair_outcomes(left: FingerprintSet, right: FingerprintSet, tolerance: ToleranceSpec) -> tuple[list, dict]:
    """`parity.compare.diff.DiffStream`'s differing pairs and its per-stage within-tolerance counts, record by record:
    each pair's stage values read and compared alone, as the diff did before it went stage by stage over a fetch
    round (parity.compare.pair_values). Pairs are (key, ordinal among the key's duplicates), in key order."""
    def rows(fset: FingerprintSet) -> dict:
        table = fset.table.sort_by(SORT_KEYS).to_pylist()
        out, seen = {}, {}
        for row in table:
            ordinal = seen[row["key_fp"]] = seen.get(row["key_fp"], -1) + 1
            out[(row["key_fp"], ordinal)] = row
        return out

    lrows, rrows = rows(left), rows(right)
    exact = all(math.isfinite(t.abs) and math.isfinite(t.rel) and t.abs >= 0 and t.rel >= 0
                for t in (tolerance.default, *(t for _n, t in tolerance.features)))

    def tol_for(name):
        return tolerance.for_feature(name) if name else tolerance.default

    outcomes, stage_within = [], {s: 0 for s in STAGES}
    for pair in sorted(lrows.keys() & rrows.keys()):
        lrow, rrow = lrows[pair], rrows[pair]
        differing = tuple(s for s in STAGES if lrow[f"{s}_fp"] != rrow[f"{s}_fp"])
        if not differing:
            continue
        refs = [(lrow["part"], lrow["row"]), (rrow["part"], rrow["row"])]
        lbytes = stage_bytes(left, {refs[0]: list(differing)})[refs[0]]
        rbytes = stage_bytes(right, {refs[1]: list(differing)})[refs[1]]
        lv, rv, within, deltas, first_fields = {}, {}, [], {}, None
        for stage in differing:
            first = stage == differing[0]
            lw, rw = (decode(lbytes[stage]) if lbytes[stage] is not None else None,
                      decode(rbytes[stage]) if rbytes[stage] is not None else None)
            found = differing_fields(lbytes[stage], rbytes[stage])
            split = None if found is None else {decode(k): (decode(a), decode(b)) for k, a, b in found[0]}
            marker = found is not None and found[2] is not None and decode(found[2]) in ("dropped", "error")
            if first:
                lv[stage], rv[stage] = lw, rw
                if split and all(type(n) is str for n in split):
                    first_fields = tuple(split)
            if stage == "transform":
                if first or split is None or marker:
                    deltas, lv[stage], rv[stage] = feature_deltas(lw, rw, tolerance), lw, rw
                else:
                    lv[stage] = {n: split[n][0] for n in sorted(split)}
                    rv[stage] = {n: split[n][1] for n in sorted(split)}
                    deltas = {n: (values_within(a, b, lambda _n, n=n: tolerance.for_feature(n)), max_abs_delta(a, b))
                              for n, (a, b) in sorted(split.items())}
            decoded = first or (stage == "transform" and marker)
            if found is None or (decoded and not (found[1] and exact)):
                ok = values_within(lw, rw, tol_for)
            else:
                ok = all(values_within(a, b, tol_for, n if isinstance(n, str) else None) for n, (a, b) in split.items())
            if ok:
                within.append(stage)
                stage_within[stage] += 1
        outcomes.append(PairOutcome(
            key=lrow["key"], key_fp=lrow["key_fp"], differing=differing, within=tuple(within),
            first_stage=differing[0], diverged=len(within) < len(differing), left=lv, right=rv, feature_deltas=deltas,
            fps={s: (lrow[f"{s}_fp"], rrow[f"{s}_fp"]) for s in differing}, first_fields=first_fields))
    return outcomes, stage_within
