"""The analyzer outputs of two sides compared (what `parity/sets/analyzers.py` read from each side's graph):
which vocabularies and statistics differ, and how, for the report's `analyzers` section.
"""
from __future__ import annotations

import math
from typing import Any

_MAX_TOKENS_SHOWN = 5


def kind_of(name: str) -> str:
    """`vocabulary` and `statistic` are analyzer outputs; `lookup` constants parameterise a mapping
    (table sizes with OOV buckets, default values), so they tell mapping differences, not analyzer ones."""
    if name.startswith("vocabulary:"):
        return "vocabulary"
    label = name.split(":", 1)[-1].lower()
    if "lookup" in label or "vocab" in label or label.endswith("default_value"):
        return "lookup"
    return "statistic"


def compare(left: dict[str, Any] | None, right: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One entry per analyzer output on either side: `{name, equal, detail, kind}`, sorted by name.

    A constant exported by one side only is graph structure (`kind: graph`), not an analyzer difference.
    """
    if left is None or right is None:
        return []
    entries = []
    for name in sorted(set(left) | set(right)):
        if name not in left or name not in right:
            side = "right" if name in right else "left"
            kind = "vocabulary" if name.startswith("vocabulary:") else "graph"
            entries.append({"name": name, "equal": False, "detail": f"exported by the {side} side only",
                            "kind": kind})
            continue
        a, b = left[name], right[name]
        if name.startswith("vocabulary:"):
            entries.append({"name": name, "equal": a == b, "detail": _vocabulary_detail(a, b),
                            "kind": "vocabulary"})
        else:
            entries.append({"name": name, "equal": same_numbers(a, b), "detail": _constant_detail(a, b),
                            "kind": kind_of(name)})
    return entries


def analyzers_differ(entries: list[dict[str, Any]]) -> bool | None:
    """True when a real analyzer output (vocabulary or statistic) differs, other than by analysis noise
    (`"noise": true`, parity.compare.noise); None when nothing was compared."""
    if not entries:
        return None
    return any(not e["equal"] and not e.get("noise") and e.get("kind", "statistic") in ("vocabulary", "statistic")
               for e in entries)


def _vocabulary_detail(a: list[str], b: list[str]) -> str:
    if a == b:
        return f"{len(a)} tokens, same order"
    only_left = sorted(set(a) - set(b))
    only_right = sorted(set(b) - set(a))
    if not only_left and not only_right:
        moved = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
        return (f"same {len(a)} tokens in a different order (first difference at rank {moved}: "
                f"{a[moved]!r} vs {b[moved]!r}); ties or counts differ")
    parts = [f"{len(a)} vs {len(b)} tokens"]
    if only_left:
        parts.append(f"left only: {_tokens(only_left)}")
    if only_right:
        parts.append(f"right only: {_tokens(only_right)}")
    return "; ".join(parts)


def _tokens(tokens: list[str]) -> str:
    shown = ", ".join(repr(t[:40]) for t in tokens[:_MAX_TOKENS_SHOWN])
    more = len(tokens) - _MAX_TOKENS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def flat(value: Any) -> list:
    """The numbers of a (nested) list of an analyzer output, in order; a scalar as a list of one."""
    if isinstance(value, list):
        return [x for item in value for x in flat(item)]
    return [value]


# Analyzer statistics are float32 and summed in bundle order, which runners choose: two runs over the same
# data differ in the last bits (seen on Flink vs the DirectRunner). Within this relative distance they count
# as equal, so a mapping difference is not blamed on the analyzers.
FLOAT32_REL = 1e-6


def _close(x: Any, y: Any) -> bool:
    if x == y:
        return True
    if isinstance(x, float) and isinstance(y, float):
        if math.isnan(x) and math.isnan(y):
            return True
        return abs(x - y) <= FLOAT32_REL * max(abs(x), abs(y))
    return False


def same_numbers(a: Any, b: Any) -> bool:
    """Equal numbers, or each pair within float32 rounding (`FLOAT32_REL`), element by element."""
    fa, fb = flat(a), flat(b)
    if len(fa) != len(fb):
        return False
    return all(_close(x, y) for x, y in zip(fa, fb))


def _constant_detail(a: Any, b: Any) -> str:
    fa, fb = flat(a), flat(b)
    if same_numbers(a, b):  # same words whether exact or within float32 rounding: runners must agree
        return f"{len(fa)} value{'s' if len(fa) != 1 else ''}, equal (within float32 rounding)"
    if len(fa) != len(fb):
        return f"{len(fa)} vs {len(fb)} values"
    diffs = [(i, x, y) for i, (x, y) in enumerate(zip(fa, fb)) if x != y]
    i, x, y = diffs[0]
    where = "" if len(fa) == 1 else f" at index {i} ({len(diffs)} of {len(fa)} differ)"
    return f"{x!r} vs {y!r}{where}"
