"""report.json -> a short Markdown summary for a pull-request comment or a chat message (pure).

Captured strings can hold anything, so data never reaches the output unescaped: free text goes through `_text()`
(Markdown punctuation backslash-escaped, so no links, HTML, emphasis or @-mentions), values through `_code()`
(a code span with a fence longer than any backtick run inside it); both show control characters as escapes
(`parity.report.text.printable`), and the reproduce command quotes the key so that it runs.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from parity.report.html import MISSING, field_rows, key_text, noise_rows, unpaired_excess, value_text
from parity.report.text import printable, show_command
from parity.report.times import stage_field_utc

__all__ = ["render_markdown"]

_VALUE_LIMIT = 120  # characters of one value in an example row
_MAX_FEATURES = 10
_MAX_EXAMPLES = 3
_MAX_UNPAIRED_KEYS = 5  # example keys per side in the unpaired line
_PUNCTUATION = re.compile(r"([\\`*_\[\]<>#!|~&@])")
_NEWLINES = re.compile(r"[\r\n]+")


def _text(value: Any) -> str:
    """Free text, safe in a paragraph or a table cell."""
    return _PUNCTUATION.sub(r"\\\1", printable(_NEWLINES.sub(" ", str(value))))


def _code(value: Any, *, in_table: bool = True) -> str:
    """A value as inline code; in a table cell its pipes are escaped (GFM strips the backslash there)."""
    text = printable(_NEWLINES.sub(" ", str(value)))
    if in_table:
        text = text.replace("|", "\\|")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _value(value: Any, utc: str | None = None) -> str:
    """A value as a code span; `utc` (an event time or window bounds as ISO-8601 UTC) follows it in brackets."""
    if value is MISSING:
        return "*missing*"
    text = value_text(value)
    if len(text) > _VALUE_LIMIT:
        text = text[:_VALUE_LIMIT - 3] + "..."
    return _code(text) + (f" ({_text(utc)})" if utc else "")


def _table(headers: Sequence[str], aligns: str, rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of already-escaped cells; `aligns` has one letter per column, l or r."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in aligns) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _verdict(report: Mapping[str, Any]) -> str:
    verdict = str(report.get("verdict", ""))
    marker = "**parity**" if verdict == "parity" else "**diverged**"
    sides, records = report.get("sides", {}), report.get("records", {})
    name = f" {_text(report['name'])}:" if report.get("name") else ""
    redacted = " (redacted)" if report.get("redacted") else ""
    return (f"{marker}{name} {_text(sides.get('left'))} vs {_text(sides.get('right'))}, "
            f"{_text(records.get('diverged', 0))} of {_text(records.get('paired', 0))} paired records diverged "
            f"(allowed: {_text(report.get('max_diverged', 0))}){redacted}")


def _unpaired(report: Mapping[str, Any]) -> list[str]:
    """The line that follows the verdict when the records on one side only are beyond `max_unpaired`."""
    excess = unpaired_excess(report)
    if excess is None:
        return []
    sides = report.get("sides", {})
    parts = []
    for count, keys, label in ((excess.left_only, excess.left_keys, f"only on the left ({_text(sides.get('left'))})"),
                               (excess.right_only, excess.right_keys,
                                f"only on the right ({_text(sides.get('right'))})")):
        if count:
            shown = ", ".join(_code(key_text(k), in_table=False) for k in keys[:_MAX_UNPAIRED_KEYS])
            parts.append(f"{_text(count)} {label}" + (f", e.g. {shown}" if shown else ""))
    return [f"**{_text(excess.records)} records are on one side only**, above the {_text(excess.allowed)} that "
            f"`tolerance.max_unpaired` allows: {'; '.join(parts)}", ""]


def _records(records: Mapping[str, Any]) -> str:
    counts = ", ".join(f"{label} {_text(records.get(field, 0))}" for label, field in (
        ("left", "left"), ("right", "right"), ("paired", "paired"), ("matched", "matched"),
        ("within tolerance", "within_tolerance"), ("diverged", "diverged"), ("left only", "left_only"),
        ("right only", "right_only"), ("duplicate keys", "duplicate_keys")))
    quarantined, reasons = records.get("quarantined", {}), records.get("quarantine_reasons", {})
    parts = []
    for side in ("left", "right"):
        detail = ", ".join(f"{_text(r)}: {_text(n)}" for r, n in reasons.get(side, {}).items())
        parts.append(f"{_text(quarantined.get(side, 0))} {side}" + (f" ({detail})" if detail else ""))
    return f"records: {counts}, quarantined {' / '.join(parts)}"


def _taps(taps: Mapping[str, Any] | None) -> list[str]:
    """One line when a set was written by taps: what the diff compared of it."""
    if not taps:
        return []
    outside = taps.get("outside_sample", {})
    stages = ", ".join(_code(s, in_table=False) for s in taps.get("stages_compared", []))
    return [f"taps: stages compared {stages}; sample rate {_text(taps.get('sample_rate'))}, records left out "
            f"as outside the sample {_text(outside.get('left', 0))} left / {_text(outside.get('right', 0))} right",
            ""]


def _first_divergence(report: Mapping[str, Any]) -> str:
    first = report.get("first_divergence")
    if not first:
        return "first divergence: none"
    explanation = f": {_text(first['explanation'])}" if first.get("explanation") else ""
    return (f"first divergence: stage {_code(first.get('stage'), in_table=False)}, "
            f"{_text(first.get('records'))} records, cause {_code(first.get('cause'), in_table=False)}"
            f"{explanation}")


def _impact_headline(report: Mapping[str, Any]) -> list[str]:
    """With a model: the line the report leads with (how many records diverged, how many decisions changed)."""
    impact = report.get("prediction_impact")
    return [f"**prediction impact**: {_text(impact.get('headline'))}", ""] if impact else []


def _impact(impact: Mapping[str, Any] | None) -> list[str]:
    """With a model: the prediction impact's counts and its outputs."""
    if not impact:
        return []
    rows = [[_code(o.get("name")), _text(o.get("changed", 0)),
             "" if o.get("max_abs_delta") is None else _text(o["max_abs_delta"])] for o in impact.get("outputs", [])]
    return ["", f"**prediction impact**: of {_text(impact.get('records_diverged_upstream'))} records diverged before "
                f"the model, {_text(impact.get('prediction_changed'))} change an output beyond tolerance and "
                f"{_text(impact.get('decision_flips'))} change the decision; "
                f"{_text(impact.get('decision_flips_at_model', 0))} more decisions change where only the model "
                f"differs", ""] + _table(["output", "records changed", "max abs delta"], "lrr", rows)


def _funnel(stages: Sequence[Mapping[str, Any]]) -> list[str]:
    return _table(["stage", "diverged", "first diverged"], "lrr",
                  [[_code(s.get("name")), _text(s.get("diverged", 0)), _text(s.get("first_diverged", 0))]
                   for s in stages])


def _causes(causes: Sequence[Mapping[str, Any]]) -> list[str]:
    if not causes:
        return []
    return ["", "**causes**", ""] + _table(
        ["stage", "cause", "records", "explanation"], "llrl",
        [[_code(c.get("stage")), _code(c.get("cause")), _text(c.get("records", 0)), _text(c.get("explanation", ""))]
         for c in causes])


def _analysis_noise(noise: Mapping[str, Any] | None) -> list[str]:
    """The records only analysis noise made differ, and the bound applied to each feature (section 8)."""
    if not noise:
        return []
    rows = [[_code(row["name"]), _text(row["bound"]), _text(row["records"]), _text(row["why"])]
            for row in noise_rows(noise)]
    return ["", f"**analysis noise** ({_code(noise.get('cause'), in_table=False)}): {_text(noise.get('explanation'))}",
            ""] + _table(["feature", "bound on \\|delta\\|", "records", "why"], "llrl", rows)


def _features(features: Sequence[Mapping[str, Any]]) -> list[str]:
    top = sorted((f for f in features if f.get("mismatched") or f.get("within_tolerance")),
                 key=lambda f: (-(f.get("mismatched") or 0), -(f.get("within_tolerance") or 0), str(f.get("name"))))
    if not top:
        return []
    rows = [[_code(f.get("name")), _text(f.get("mismatched", 0)), _text(f.get("within_tolerance", 0)),
             "" if f.get("max_abs_delta") is None else _text(f["max_abs_delta"])] for f in top[:_MAX_FEATURES]]
    return ["", "**top features**", ""] + _table(["feature", "mismatched", "within tolerance", "max abs delta"],
                                                 "lrrr", rows)


def _pick_examples(examples: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The first example of each (stage, cause) in report order, then the rest, up to the limit."""
    seen: set[tuple[str, str]] = set()
    first, rest = [], []
    for example in examples:
        group = (str(example.get("stage")), str(example.get("cause")))
        (rest if group in seen else first).append(example)
        seen.add(group)
    return (first + rest)[:_MAX_EXAMPLES]


def _examples(report: Mapping[str, Any]) -> list[str]:
    examples = _pick_examples(report.get("examples", []))
    if not examples:
        return []
    sides = report.get("sides", {})
    lines = ["", f"**examples** ({len(examples)} of {len(report.get('examples', []))})"]
    for example in examples:
        differing = [r for r in field_rows(example.get("left"), example.get("right")) if r.differs]
        lines += ["", f"key {_code(key_text(example.get('key')), in_table=False)}: stage "
                      f"{_code(example.get('stage'), in_table=False)}, cause "
                      f"{_code(example.get('cause'), in_table=False)}", ""]
        if not differing:
            lines.append("the values shown are equal; their fingerprints differ (see `parity show`)")
            continue
        lines += _table(["field", f"left ({_text(sides.get('left'))})", f"right ({_text(sides.get('right'))})"],
                        "lll", [[_code(r.path), _value(r.left, stage_field_utc(example.get("stage"), r.path, r.left)),
                                 _value(r.right, stage_field_utc(example.get("stage"), r.path, r.right))]
                                for r in differing])
    return lines


def render_markdown(report: Mapping[str, Any], *, out_dir: str = "<dir>") -> str:
    """The report as a short Markdown summary (verdict, first divergence, funnel, causes, features, examples).

    Args:
        report: the parsed report.json (docs/contract.md, section 5, plus parity's additions).
        out_dir: the output directory to name in the reproduce command.
    """
    lines = [_verdict(report), ""] + _impact_headline(report) + _unpaired(report) \
        + [_records(report.get("records", {})), ""] \
        + _taps(report.get("taps")) \
        + [_first_divergence(report), ""]
    lines += _funnel(report.get("stages", []))
    lines += _impact(report.get("prediction_impact"))
    lines += _causes(report.get("causes", []))
    lines += _analysis_noise(report.get("analysis_noise"))
    lines += _features(report.get("features", []))
    lines += _examples(report)
    examples = report.get("examples", [])
    key = examples[0].get("key") if examples else "KEY"
    lines += ["", f"reproduce: {_code(show_command(out_dir, key), in_table=False)}"]
    return "\n".join(lines) + "\n"
