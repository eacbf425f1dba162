"""Cause classification: why a record's first divergent stage diverged (docs/contract.md, section 7).

Pure functions over the two sides' decoded stage values (docs/design.md, "Stage values") and a
`CauseContext` of run-level facts (seeds, seed hashes, environments, analyzers, noise replays). One
function per stage; `classify` dispatches on the stage name. Every rule is conservative: when nothing
specific fits, the answer is `<stage>.unknown`, never a guess. An explanation is one deterministic
sentence an on-call engineer can act on; raw values in it are cut to 40 characters, or left out when
`CauseContext.redact` is set.

Example:
    >>> ctx = CauseContext(left_name="offline", right_name="production")
    >>> classify("window", {"timestamp_us": 1_700_000_000_000_000, "windows": [["global"]]},
    ...          {"timestamp_us": 1_700_000_000_000_000_000, "windows": [["global"]]}, ctx)[0]
    'window.timestamp_unit'
"""

from __future__ import annotations

import json
import math
import struct
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from parity.encoding.canonical import encode, to_json
from parity.missing import MISSING
from parity.stages import STAGES

__all__ = ["CAUSES", "STAGES", "CauseContext", "classify", "classify_coder", "classify_input",
           "classify_seed", "classify_shard", "classify_transform", "classify_window", "explain"]

# The aggregate explanation of each specific cause, after "N records: " (`explain`).
_AGGREGATE: dict[str, str] = {
    "input.content": "same key, different raw record; check the captures and readers of both sides",
    "window.timestamp_unit": "event times differ by a factor of 10^3, 10^6 or 10^9; check timestamp.unit",
    "window.timestamp_shift": "event times differ by an offset; check time zones, clocks and time fields",
    "window.boundary": "same event time, other windows; compare window type, size, offset, boundary rule",
    "window.late_dropped": "dropped as late on one side only; compare the lateness settings",
    "shard.key": "grouping keys differ; compare shard.key and the key fields' types",
    "shard.assignment": "same grouping key, other shard; compare shard.hash, shard.count, PYTHONHASHSEED",
    "shard.membership": "a group's members differ, so its aggregates differ; see the group's other records",
    "shard.combine_order": "aggregates differ only by float rounding; the combining order differs",
    "coder.float_precision": "values equal once rounded to float32; one coder stores float32",
    "coder.int_precision": "integers beyond 2^53 changed through a float64 hop in a coder",
    "coder.type": "same values, other types after the coder round trip (int/float, str/bytes, bool/int)",
    "coder.string": "strings equal after Unicode normalization or case folding differ in bytes",
    "coder.null": "null, NaN, missing and default values are conflated by one coder",
    "seed.value": "seeded outputs differ and the seeds differ; use one seed.value on both sides",
    "seed.hash": "seeded outputs differ through the hash function or its salt (PYTHONHASHSEED)",
    "seed.nondeterministic": "outputs differ between two replays of one side; some op is not seeded",
    "transform.analyzer": "the analyzer outputs differ (vocabulary, mean/var, boundaries); see analyzers",
    "transform.feature_set": "a feature exists on one side only; compare the transforms' outputs",
    "transform.numeric": "features differ only numerically, beyond tolerance",
    "transform.mapping": "features differ beyond numerics (logic, OOV handling, bucket rules)",
}
CAUSES: tuple[str, ...] = tuple(c for stage in STAGES for c in
                                [*(c for c in _AGGREGATE if c.startswith(stage + ".")), f"{stage}.unknown"])

_MAX_SHOWN = 40
_MAX_NAMES = 5
_HOUR_US = 3_600_000_000


@dataclass(frozen=True)
class CauseContext:
    """Run-level facts the per-record classifiers need; every field is optional."""

    left_seed: int | str | None = None  # None: unseeded or no seed config
    right_seed: int | str | None = None
    left_seed_hashes: tuple[str, ...] = ()  # hash names of the side's seed ops
    right_seed_hashes: tuple[str, ...] = ()
    left_env: Mapping[str, str] = field(default_factory=dict, hash=False)
    right_env: Mapping[str, str] = field(default_factory=dict, hash=False)
    analyzers_differ: bool | None = None  # None: unknown (no TFT on both sides)
    noise_bounded: frozenset[str] = frozenset()    # features with an analysis-noise bound (parity.compare.noise)
    noise_unbounded: frozenset[str] = frozenset()  # features fed by analyzer outputs that differ by rounding
    # alone, with no bound parity can derive (a bucket boundary, a min/max scaler)
    nondeterministic_stages: frozenset[str] = frozenset()  # stages differing between two replays of a side
    left_only_features: frozenset[str] = frozenset()
    right_only_features: frozenset[str] = frozenset()
    left_name: str = "left"
    right_name: str = "right"
    redact: bool = False  # True: explanations name fields and types, never raw values


Result = tuple[str, str]
ToleranceOk = Callable[[str, Any, Any], bool]


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_SHOWN else text[:_MAX_SHOWN - 3] + "..."


def _show(value: Any, ctx: CauseContext) -> str:
    """A short deterministic rendering of a value (or `<redacted>`)."""
    if value is MISSING:
        return "missing"
    if ctx.redact:
        return "<redacted>"
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return _cut(repr(value))
    try:
        return _cut(json.dumps(to_json(value), sort_keys=True, ensure_ascii=False, separators=(",", ":")))
    except (TypeError, ValueError):
        return _cut(repr(value))


def _names(names: Any) -> str:
    """Sorted names, at most five, then a count of the rest."""
    ordered = sorted(map(str, names))
    shown = ", ".join(_cut(n) for n in ordered[:_MAX_NAMES])
    return shown + (f" and {len(ordered) - _MAX_NAMES} more" if len(ordered) > _MAX_NAMES else "")


def _type_name(value: Any) -> str:
    if value is None or value is MISSING:
        return repr(value)
    t = type(value)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _same(a: Any, b: Any) -> bool:
    """Equal as fingerprints see them (canonical bytes), falling back to typed `==`.

    Two equal strs, ints, bools, bytes or non-zero floats of one type have equal bytes: they are not encoded
    (0.0 == -0.0 but their bytes differ); every answer is the reference's (`same` in tests/compare/oracles.py).
    """
    t = type(a)
    if t is type(b) and t in _EQUAL_IS_SAME and a == b and (t is not float or a != 0.0):
        return True
    try:
        return encode(a) == encode(b)
    except (TypeError, ValueError, OverflowError):
        return type(a) is type(b) and a == b


_EQUAL_IS_SAME = frozenset((str, int, bool, bytes, float))


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_float(v: Any) -> bool:
    return isinstance(v, (float, np.floating))


def _is_number(v: Any) -> bool:
    """An int (not a bool) or float that converts to a Python float."""
    return _is_float(v) or (_is_int(v) and abs(int(v)) < 2 ** 1023)


def _floaty(a: Any, b: Any) -> bool:
    """Both numbers (not bools), at least one a float."""
    return _is_number(a) and _is_number(b) and (_is_float(a) or _is_float(b))


def _marker(stage: str, left: Any, right: Any, ctx: CauseContext) -> Result | None:
    """`<stage>.unknown` when a side was dropped as late or its stage failed, else None."""
    for name, value in ((ctx.left_name, left), (ctx.right_name, right)):
        if isinstance(value, dict) and len(value) == 1:
            if value.get("dropped") == "late":
                return f"{stage}.unknown", f"dropped as late on {name} before {stage}; see its window stage"
            if "error" in value:
                message = "<redacted>" if ctx.redact else _cut(str(value["error"]))
                return f"{stage}.unknown", f"the {stage} stage failed on {name}: {message}"
    return None


def classify_input(left: Any, right: Any, ctx: CauseContext, differing: Sequence[str] | None = None) -> Result:
    """`input.content`, naming the fields whose raw values differ.

    `differing`: the names of the fields whose canonical bytes differ, when the caller has them (the diff splits
    both records' bytes into fields): then the records are not encoded again to find them.
    """
    action = "check the capture path, format and schema each side reads"
    if differing and isinstance(left, dict) and isinstance(right, dict) and left.keys() == right.keys():
        fields = sorted(differing)
    else:
        if _same(left, right):
            return "input.unknown", "the raw records are equal; the input fingerprints differ for another reason"
        fields = [f for f in sorted(left.keys() | right.keys(), key=str)
                  if not _same(left.get(f, MISSING), right.get(f, MISSING))] \
            if isinstance(left, dict) and isinstance(right, dict) else []
    if not fields:
        return "input.content", f"the raw records differ; {action}"
    first = fields[0]
    return "input.content", (f"the raw records differ in {_names(fields)} ({first}: "
                             f"{_show(left.get(first, MISSING), ctx)} vs "
                             f"{_show(right.get(first, MISSING), ctx)}); {action}")


def _unit_exponent(a: int, b: int) -> int | None:
    """3, 6 or 9 when the larger of two same-signed timestamps is ~10^k times the smaller (1%)."""
    if a == 0 or b == 0 or (a < 0) != (b < 0):
        return None
    big, small = max(abs(a), abs(b)), min(abs(a), abs(b))  # exact ints: no float overflow
    return next((k for k in (3, 6, 9) if 100 * abs(big - small * 10 ** k) <= small * 10 ** k), None)


def _seconds(us: int) -> str:
    """Integer microseconds as exact decimal seconds: 1500 -> '0.0015'."""
    whole, frac = divmod(abs(us), 1_000_000)
    return ("-" if us < 0 else "") + str(whole) + (f".{frac:06d}".rstrip("0") if frac else "")


def _offset(us: int) -> str:
    sign = "+" if us >= 0 else "-"
    return f"{sign}{abs(us)} us" if abs(us) < 1000 else f"{sign}{_seconds(abs(us))} s"


def _shift_hint(lt: int, rt: int, ctx: CauseContext) -> str:
    delta = rt - lt
    if delta % _HOUR_US == 0:
        ltz, rtz = ctx.left_env.get("TZ"), ctx.right_env.get("TZ")
        tz = f"; TZ is {ltz or 'unset'} on {ctx.left_name}, {rtz or 'unset'} on {ctx.right_name}" \
            if ltz != rtz else ""
        return f" (a whole-hour offset suggests a time zone: check timestamp.tz and naive datetimes{tz})"
    if abs(delta) == 1:
        return " (1 us: float seconds truncated on one side, e.g. Timestamp(float))"
    if abs(delta) < 1000 and (lt % 1000 == 0 or rt % 1000 == 0):
        return " (sub-millisecond: one side keeps millisecond precision only)"
    return " (check the timestamp field and clock each side reads, e.g. event vs processing time)"


def _windows_text(windows: Any, ctx: CauseContext) -> str:
    if windows == [["global"]]:
        return "the global window"
    if not (isinstance(windows, list) and windows and all(isinstance(w, list) and len(w) == 2
                                                          and all(map(_is_int, w)) for w in windows)):
        return _show(windows, ctx)
    size = "/".join(_seconds(n) for n in sorted({end - start for start, end in windows}))
    if len(windows) == 1 and not ctx.redact:
        return f"[{_seconds(windows[0][0])}, {_seconds(windows[0][1])}) s ({size} s)"
    return f"{len(windows)} window(s) of {size} s"


def classify_window(left: Any, right: Any, ctx: CauseContext) -> Result:
    """`window.late_dropped`, `.timestamp_unit`, `.timestamp_shift` or `.boundary`."""
    lname, rname = ctx.left_name, ctx.right_name
    if marked := _marker("window", left, right, ctx):
        return marked
    if not (isinstance(left, dict) and isinstance(right, dict)):
        return "window.unknown", "a window value is not a dict"
    left_late, right_late = bool(left.get("late")), bool(right.get("late"))
    if left_late != right_late:
        late, kept = (lname, rname) if left_late else (rname, lname)
        return "window.late_dropped", (f"dropped as late on {late} but kept on {kept}: compare the sides' "
                                       "lateness (arrival field, out_of_orderness, allowed)")
    lt, rt = left.get("timestamp_us"), right.get("timestamp_us")
    if lt != rt:
        if not (_is_int(lt) and _is_int(rt)):
            return "window.unknown", (f"the event time is {_show(lt, ctx)} on {lname} and "
                                      f"{_show(rt, ctx)} on {rname}; check the timestamp config")
        k = _unit_exponent(int(lt), int(rt))
        if k is not None:
            big, small = (lname, rname) if abs(lt) > abs(rt) else (rname, lname)
            return "window.timestamp_unit", (f"{big}'s event times are {10 ** k}x {small}'s: the sides read "
                                             f"the timestamp in units {10 ** k}x apart (check "
                                             "timestamp.unit: s, ms, us, ns)")
        return "window.timestamp_shift", (f"{rname}'s event time is {_offset(int(rt) - int(lt))} from "
                                          f"{lname}'s{_shift_hint(int(lt), int(rt), ctx)}")
    lw, rw = left.get("windows"), right.get("windows")
    if _same(lw, rw):
        return "window.unknown", "same event time and windows; the window values differ in another key"
    edge = ""
    edges = [w for ws in (lw, rw) if isinstance(ws, list) for w in ws if isinstance(w, list) and len(w) == 2]
    if _is_int(lt) and any(lt in w for w in edges):
        edge = "; the event time lies exactly on a window edge, so check the boundary rule ([start, end))"
    return "window.boundary", (f"same event time, {lname} assigns {_windows_text(lw, ctx)} and {rname} "
                               f"{_windows_text(rw, ctx)}: compare window type, size and offset{edge}")


def _close_float(a: Any, b: Any) -> bool:
    x, y = (float(a), float(b)) if _floaty(a, b) else (math.nan, math.nan)
    return math.isfinite(x) and math.isfinite(y) and abs(x - y) < 1e-9 * max(abs(x), abs(y))


def classify_shard(left: Any, right: Any, ctx: CauseContext,
                   tolerance_ok: ToleranceOk | None = None) -> Result:
    """`shard.key`, `.assignment`, `.combine_order` or `.membership`."""
    lname, rname = ctx.left_name, ctx.right_name
    if marked := _marker("shard", left, right, ctx):
        return marked
    if not (isinstance(left, dict) and isinstance(right, dict) and "key" in left and "key" in right):
        return "shard.unknown", "a shard value lacks its grouping key"
    lk, rk = left["key"], right["key"]
    if not _same(lk, rk):
        if isinstance(lk, list) and isinstance(rk, list) and len(lk) == len(rk):
            lk, rk = next(((x, y) for x, y in zip(lk, rk) if not _same(x, y)), (lk, rk))
        kind = _pair_kind(lk, rk)
        note = {"type": " (equal values of different types)",
                "string": " (equal after Unicode normalization or case folding)"}.get(kind, "")
        return "shard.key", (f"grouping keys differ, {_show(lk, ctx)} on {lname} and {_show(rk, ctx)} on "
                             f"{rname}{note}: compare shard.key and the key fields' types")
    if not _same(left.get("shard"), right.get("shard")):
        return "shard.assignment", (f"same grouping key, shard {_cut(str(left.get('shard')))} on {lname} and "
                                    f"{_cut(str(right.get('shard')))} on {rname}: compare shard.hash, "
                                    "shard.count and PYTHONHASHSEED")
    la, ra = left.get("aggregates"), right.get("aggregates")
    if not (isinstance(la, dict) and isinstance(ra, dict)):
        return "shard.unknown", "same key and shard; the aggregates are not comparable"
    only = la.keys() ^ ra.keys()
    if only:
        return "shard.unknown", f"aggregates {_names(only)} exist on one side only: compare shard.aggregates"
    diff = [n for n in sorted(la, key=str) if not _same(la[n], ra[n])]
    if not diff:
        return "shard.unknown", "same key, shard and aggregates; the shard values differ in another key"
    first = diff[0]
    if all(_close_float(la[n], ra[n]) or (tolerance_ok is not None and _floaty(la[n], ra[n])
                                          and tolerance_ok(str(n), la[n], ra[n])) for n in diff):
        delta = abs(float(la[first]) - float(ra[first]))
        return "shard.combine_order", (f"same key and shard, aggregates {_names(diff)} differ only by "
                                       f"rounding (|delta| {delta:.3g} on {first}): the combining order "
                                       "differs")
    return "shard.membership", (f"same key and shard, aggregates {_names(diff)} differ ({first}: "
                                f"{_show(la[first], ctx)} vs {_show(ra[first], ctx)}): the group's members "
                                "differ; look for records of it that diverged earlier, were dropped as late "
                                "or exist on one side only")


def _same_value_other_type(a: Any, b: Any) -> bool:
    if type(a) is type(b):
        return False
    if isinstance(a, (bool, np.bool_, int, float, np.number)) and \
            isinstance(b, (bool, np.bool_, int, float, np.number)):
        x, y = (v.item() if isinstance(v, np.generic) else v for v in (a, b))  # exact, not numpy's promotion
        return (_is_float(x) and _is_float(y) and math.isnan(x) and math.isnan(y)) or x == y
    text, raw = (a, b) if isinstance(a, str) else (b, a)
    return isinstance(text, str) and isinstance(raw, bytes) and raw == text.encode("utf-8", "surrogatepass")


def _int_hop(a: Any, b: Any) -> bool:
    """One side an int beyond 2^53, the other that int rounded through a float64."""
    for x, y in ((a, b), (b, a)):
        y = y.item() if isinstance(y, np.generic) else y
        if _is_int(x) and _is_number(y) and 2 ** 53 < abs(int(x)) < 2 ** 1023 and \
                float(int(x)) == y != int(x):
            return True
    return False


def _float32_equal(a: Any, b: Any) -> bool:
    try:
        return _floaty(a, b) and math.isfinite(a) and struct.pack("<f", a) == struct.pack("<f", b)
    except OverflowError:  # beyond float32's range
        return False


def _string_form(a: Any, b: Any) -> str | None:
    if not (isinstance(a, str) and isinstance(b, str)):
        return None
    for form in ("NFC", "NFKC"):
        if unicodedata.normalize(form, a) == unicodedata.normalize(form, b):
            return f"{form} normalization"
    if a.casefold() == b.casefold() or \
            unicodedata.normalize("NFKC", a).casefold() == unicodedata.normalize("NFKC", b).casefold():
        return "case folding"
    return None


def _pair_kind(a: Any, b: Any) -> str:
    """The coder cause name (without the stage) for one pair of unequal scalar values."""
    if _same_value_other_type(a, b):
        return "type"
    if _int_hop(a, b):
        return "int_precision"
    if _float32_equal(a, b):
        return "float_precision"
    if _string_form(a, b):
        return "string"
    if any(v is MISSING or v is None or (_is_float(v) and math.isnan(v)) for v in (a, b)):
        return "null"
    return "unknown"


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any]:
    """Descend into same-shaped lists and dicts to the first unequal pair: (path, a, b)."""
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        steps = [(f"{path}[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b))]
    elif isinstance(a, dict) and isinstance(b, dict):
        steps = [(f"{path}.{k}" if path else str(k), a.get(k, MISSING), b.get(k, MISSING))
                 for k in sorted(a.keys() | b.keys(), key=str)]
    else:
        return path, a, b
    step = next((t for t in steps if not _same(t[1], t[2])), None)
    return _first_difference(*step[1:], step[0]) if step else (path, a, b)


def classify_coder(left: Any, right: Any, ctx: CauseContext) -> Result:
    """The first differing field (sorted names) decides: `coder.type`, `.int_precision`, ..."""
    lname, rname = ctx.left_name, ctx.right_name
    if marked := _marker("coder", left, right, ctx):
        return marked
    if _same(left, right):
        return "coder.unknown", "the round-tripped records are equal; the coder fingerprints differ otherwise"
    path, a, b = _first_difference(left, right, "")
    kind = _pair_kind(a, b)
    where = f"field {path}: " if path else ""
    if kind == "type":
        what = f"{_type_name(a)} on {lname}, {_type_name(b)} on {rname}, same value"
    elif kind == "string":
        what = f"{_show(a, ctx)} vs {_show(b, ctx)} are equal after {_string_form(a, b)}"
    elif kind == "null" and (a is MISSING or b is MISSING):
        gone, kept, value = (lname, rname, b) if a is MISSING else (rname, lname, a)
        what = f"missing on {gone} after the round trip, {_show(value, ctx)} on {kept}"
    else:
        what = f"{_show(a, ctx)} on {lname}, {_show(b, ctx)} on {rname}"
    action = _AGGREGATE.get(f"coder.{kind}", "no known coder pattern; compare an example with `parity show`")
    return f"coder.{kind}", f"{where}{what}: {action}"


def _hash_seed_note(ctx: CauseContext) -> str:
    lhs, rhs = ctx.left_env.get("PYTHONHASHSEED"), ctx.right_env.get("PYTHONHASHSEED")
    if not (ctx.left_env or ctx.right_env):  # no manifests: say what to check
        return "; hash() is salted per process unless PYTHONHASHSEED is fixed on both sides"
    if lhs != rhs or lhs in (None, "", "random"):
        return (f"; PYTHONHASHSEED is {lhs or 'unset'} on {ctx.left_name} and {rhs or 'unset'} on "
                f"{ctx.right_name}, and hash() is salted per process unless it is fixed")
    return f"; PYTHONHASHSEED is {lhs} on both sides, so compare the Python versions (hash() changes)"


def classify_seed(left: Any, right: Any, ctx: CauseContext) -> Result:
    """`seed.nondeterministic`, `.value` or `.hash`."""
    lname, rname = ctx.left_name, ctx.right_name
    if marked := _marker("seed", left, right, ctx):
        return marked
    if not (isinstance(left, dict) and isinstance(right, dict)):
        return "seed.unknown", "a seed value is not a dict of op outputs"
    ops = [op for op in sorted(left.keys() & right.keys(), key=str) if not _same(left[op], right[op])]
    only = left.keys() ^ right.keys()
    if "seed" in ctx.nondeterministic_stages:
        return "seed.nondeterministic", (f"two replays of one side disagree on the seeded outputs "
                                         f"({_names(ops or only)}): an op draws from an unseeded source "
                                         "(seed.value unset, os.urandom, random.random)")
    if not ops:
        return "seed.unknown", f"seed ops {_names(only)} run on one side only: compare seed.ops"
    differing = f"seeded outputs {_names(ops)} differ"
    lseed, rseed = (_cut(repr(v)) if v is not None else "unseeded" for v in (ctx.left_seed, ctx.right_seed))
    if lseed != rseed:
        return "seed.value", (f"{differing} and the seeds differ ({lname} {lseed}, {rname} {rseed}): use one "
                              "seed.value on both sides")
    lh, rh = set(ctx.left_seed_hashes), set(ctx.right_seed_hashes)
    if lh and rh and lh != rh:
        note = _hash_seed_note(ctx) if "python" in lh | rh else ""
        return "seed.hash", f"{differing}: {lname} hashes with {_names(lh)}, {rname} with {_names(rh)}{note}"
    if "python" in lh | rh:
        side = "both sides use" if lh == rh else f"{lname if 'python' in lh else rname} uses"
        return "seed.hash", f"{differing}: {side} the python hash{_hash_seed_note(ctx)}"
    unseeded = "; both sides are unseeded, so rerun with --noise" if lseed == "unseeded" else ""
    return "seed.unknown", (f"{differing} with equal seeds and hashes: compare the ops' parameters and "
                            f"functions{unseeded}")


def _numbers(v: Any) -> list[float] | None:
    """The finite numbers of a numeric scalar or (nested) list/array, else None."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        parts = [_numbers(item) for item in v]
        return None if any(p is None for p in parts) else [x for p in parts for x in p or ()]
    return [float(v)] if _is_number(v) and math.isfinite(float(v)) else None


def _has_float(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_float(v) for v in value)
    return isinstance(value, (float, np.floating))


def classify_transform(left: Any, right: Any, ctx: CauseContext,
                       tolerance_ok: ToleranceOk | None = None) -> Result:
    """`transform.feature_set`, `.analyzer`, `.numeric` or `.mapping`."""
    lname, rname = ctx.left_name, ctx.right_name
    if marked := _marker("transform", left, right, ctx):
        return marked
    if "transform" in ctx.nondeterministic_stages:
        return "transform.unknown", ("two replays of one side disagree at transform: the transform is "
                                     "nondeterministic (unseeded random ops?), so the sides cannot match")
    if not (isinstance(left, dict) and isinstance(right, dict)):
        return "transform.unknown", "a transform value is not a dict of features"
    left_only = (left.keys() - right.keys()) | (ctx.left_only_features & left.keys())
    right_only = (right.keys() - left.keys()) | (ctx.right_only_features & right.keys())
    if left_only or right_only:
        parts = [f"{_names(names)} only on {side}" for names, side in
                 ((left_only, lname), (right_only, rname)) if names]
        return "transform.feature_set", (f"features differ: {'; '.join(parts)}: compare the transforms' "
                                         "outputs")
    pairs = {f: (_numbers(left[f]), _numbers(right[f])) for f in sorted(left, key=str)
             if not _same(left[f], right[f])}
    within = {f for f, (x, y) in pairs.items() if tolerance_ok is not None and x is not None and y is not None
              and tolerance_ok(str(f), left[f], right[f])}
    beyond = [f for f in pairs if f not in within] or list(pairs)
    if not beyond:
        return "transform.unknown", "all features are equal; the transform fingerprints differ otherwise"
    if ctx.analyzers_differ is True:
        return "transform.analyzer", (f"features {_names(beyond)} differ and the analyzer outputs differ: "
                                      "the sides analyzed different data or versions (see analyzers)")
    if ctx.noise_unbounded and all(f in ctx.noise_unbounded for f in beyond):
        return "transform.analyzer", (f"features {_names(beyond)} differ, and analyzer outputs they are computed "
                                      "from differ in their last bits (analysis noise, e.g. a bucket boundary "
                                      "moved by rounding) in a way parity derives no bound for (see analyzers)")
    # Integer features are ids and buckets: a different integer is a mapping difference, not numerics.
    if all(x is not None and y is not None and len(x) == len(y) and
           (_has_float(left[f]) or _has_float(right[f])) for f, (x, y) in ((f, pairs[f]) for f in beyond)):
        deltas = {f: max((abs(a - b) for a, b in zip(*pairs[f])), default=0.0) for f in beyond}
        worst = max(beyond, key=deltas.__getitem__)  # the first (sorted) of the largest
        if deltas[worst] == 0:
            return "transform.unknown", (f"features {_names(beyond)} differ only in numeric type (e.g. "
                                         f"{_type_name(left[worst])} vs {_type_name(right[worst])})")
        scale = max((abs(v) for v in pairs[worst][0] + pairs[worst][1]), default=0.0)
        small = " (<= 1e-6 relative: float32 or batch-size numerics?)" \
            if scale and deltas[worst] <= 1e-6 * scale else ""
        unknown = "" if ctx.analyzers_differ is False else "; analyzers not compared"
        noisy = [f for f in beyond if f in ctx.noise_bounded]
        beyond_noise = f"; beyond the analysis-noise bound of {_names(noisy)}" if noisy else ""
        return "transform.numeric", (f"features {_names(beyond)} differ numerically, max |delta| "
                                     f"{deltas[worst]:.6g} on {worst}{small}{unknown}{beyond_noise}")
    first = next((f for f in beyond if pairs[f][0] is None or pairs[f][1] is None
                  or len(pairs[f][0] or []) != len(pairs[f][1] or [])), beyond[0])
    return "transform.mapping", (f"features {_names(beyond)} differ ({first}: {_show(left[first], ctx)} on "
                                 f"{lname}, {_show(right[first], ctx)} on {rname}): the per-record logic "
                                 "differs (OOV handling, bucket rules, string mapping)")


def classify(stage: str, left: Any, right: Any, ctx: CauseContext,
             tolerance_ok: ToleranceOk | None = None, differing: Sequence[str] | None = None) -> Result:
    """(cause, one-sentence explanation) for a record whose first divergent stage is `stage`.

    `differing`: the names of the top-level fields whose canonical bytes differ, when known (`classify_input`).

    Raises:
        ValueError: `stage` is not one of `STAGES`.
    """
    if stage in ("shard", "transform"):
        classifier = classify_shard if stage == "shard" else classify_transform
        cause, text = classifier(left, right, ctx, tolerance_ok)
    elif stage == "input":
        cause, text = classify_input(left, right, ctx, differing)
    elif stage in STAGES:
        cause, text = {"window": classify_window, "coder": classify_coder, "seed": classify_seed}[stage](left, right,
                                                                                                     ctx)
    else:
        raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
    if stage in ctx.nondeterministic_stages and stage not in ("seed", "transform"):
        text += "; replays of one side also disagree at this stage"
    return cause, text


def explain(cause: str, count: int) -> str:
    """The aggregate explanation of `cause` covering `count` records (report.causes)."""
    records = f"{count} record{'' if count == 1 else 's'}"
    stage = cause.split(".", 1)[0]
    default = f"diverge first at {stage} ({cause}); compare an example with `parity show`"
    return f"{records}: {_AGGREGATE.get(cause, default)}"
