"""report.json -> one self-contained HTML page for the on-call engineer (pure).

The page's markup lives in Jinja2 templates (`templates/`): `page.html.j2` is the shell (the CSP that forbids
scripts and every fetch, the inline CSS), `body.html.j2` the sections in reading order, `macros.html.j2` the
table cells and the inline SVG histograms. Autoescaping is on, so every `{{ value }}` a template prints is
escaped unless it is markup a template made; the report's strings reach templates only as plain data. This
module builds that data (`_view`): which rows, which classes, the plots' geometry as formatted numbers, so the
templates hold no logic beyond loops and conditions.
"""
from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import jinja2
from jinja2.ext import Extension
from markupsafe import Markup

from parity.missing import MISSING
from parity.report import text
from parity.report.text import page_printable
from parity.report.times import stage_field_utc

__all__ = ["FieldRow", "MISSING", "UnpairedExcess", "field_rows", "key_text", "render_html", "show_command",
           "unpaired_excess", "value_text"]

_VALUE_LIMIT = 2000  # characters of one value shown in a cell; a captured blob must not bloat the page

_COLOURS = {"left": "#0969da", "right": "#e16f24", "delta": "#8250df"}
_PLOT_WIDTH, _PLOT_HEIGHT, _PLOT_TOP, _PLOT_LEFT = 320, 80, 14, 10  # the bars' area inside each SVG
_MAX_PLOTS = 24  # features plotted; a report with thousands of features must stay readable

_JOINED = "{#- joined:"
_TAG = re.compile(r"(\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\})", re.DOTALL)


class _JoinedLines(Extension):
    """Templates whose first line starts `{#- joined:` are indented for reading, but the page needs none of
    that whitespace: on load, each line break and the indentation after it are dropped (inside a `{{ }}` or
    `{% %}` tag they become one space). Where a sentence goes on past a line break, the next line starts with
    `{{ " " }}`. Only template source is changed; data is never touched."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        if not source.startswith(_JOINED):
            return source
        parts = _TAG.split(source)
        return "".join(re.sub(r"\s*\n\s*", " ", part) if i % 2 else re.sub(r"\n[ \t]*", "", part)
                       for i, part in enumerate(parts))


def _escaped(value: Any) -> Any:
    """Every printed value with its control characters shown as escapes (`page_printable`: an ESC or NUL from a
    captured key never reaches the page raw; line breaks stay), then escaped as `html.escape` does (`&#x27;`,
    `&quot;`), so pages keep their bytes; markup a template made passes through."""
    return value if hasattr(value, "__html__") else Markup(html.escape(page_printable(str(value)), quote=True))


_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("parity.report", "templates"), autoescape=True, finalize=_escaped,
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True, extensions=[_JoinedLines], auto_reload=False)


@dataclass(frozen=True)
class FieldRow:
    """One field of an example, both sides; `path` is `field` or `field.subfield` (one level of nesting)."""

    path: str
    left: Any
    right: Any
    differs: bool


def value_text(value: Any) -> str:
    """A value as compact, deterministic JSON (the form used to compare and to show it)."""
    if value is MISSING:
        return "(missing)"
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=repr)


def field_rows(left: Any, right: Any) -> list[FieldRow]:
    """Both sides of an example key by key; dicts nested in both are compared one level down.

    Values are compared by their JSON text, so `1` and `1.0`, or `true` and `1`, differ (a coder.type cause).
    """
    if not isinstance(left, Mapping) or not isinstance(right, Mapping):
        return [FieldRow("(value)", left, right, value_text(left) != value_text(right))]
    rows: list[FieldRow] = []
    for name in sorted(set(left) | set(right), key=str):
        lv, rv = left.get(name, MISSING), right.get(name, MISSING)
        if isinstance(lv, Mapping) and isinstance(rv, Mapping) and (lv or rv):
            for sub in sorted(set(lv) | set(rv), key=str):
                ls, rs = lv.get(sub, MISSING), rv.get(sub, MISSING)
                rows.append(FieldRow(f"{name}.{sub}", ls, rs, value_text(ls) != value_text(rs)))
        else:
            rows.append(FieldRow(str(name), lv, rv, value_text(lv) != value_text(rv)))
    return rows


def key_text(key: Any) -> str:
    """A record key as users type it: strings as they are, anything else as compact JSON."""
    return key if isinstance(key, str) else json.dumps(key, ensure_ascii=False, sort_keys=True)


@dataclass(frozen=True)
class UnpairedExcess:
    """More records on one side only than `tolerance.max_unpaired` allows: why the verdict is "diverged"."""

    left_only: int
    right_only: int
    allowed: int
    left_keys: tuple[Any, ...]   # examples of the keys, as report.json holds them
    right_keys: tuple[Any, ...]

    @property
    def records(self) -> int:
        return self.left_only + self.right_only


def unpaired_excess(report: Mapping[str, Any]) -> UnpairedExcess | None:
    """The records on one side only when they are beyond `max_unpaired`; None otherwise, and for a report
    written before `max_unpaired` existed (its verdict did not count them)."""
    allowed = report.get("max_unpaired")
    records = report.get("records", {})
    left, right = int(records.get("left_only", 0) or 0), int(records.get("right_only", 0) or 0)
    if not isinstance(allowed, int) or left + right <= allowed:
        return None
    examples = report.get("unpaired_examples") or {}
    return UnpairedExcess(left, right, allowed, tuple(examples.get("left_only", [])),
                          tuple(examples.get("right_only", [])))


def show_command(out_dir: str, key: Any) -> str:
    """The shell command that shows one record stage by stage: `parity.report.text.show_command` (each word
    shell-quoted, ANSI-C quoting for control characters, so the command runs)."""
    return text.show_command(out_dir, key)


def _value(value: Any, utc: str | None = None) -> dict[str, Any]:
    """A value cell: compact JSON cut at the limit, or the missing marker; `utc` is shown beside it."""
    if value is MISSING:
        return {"missing": True, "text": "", "utc": ""}
    text = value_text(value)
    if len(text) > _VALUE_LIMIT:
        text = f"{text[:_VALUE_LIMIT]}... ({len(text) - _VALUE_LIMIT} more characters)"
    return {"missing": False, "text": text, "utc": utc or ""}


def _rows(rows: Sequence[FieldRow], stage: Any = None) -> list[dict[str, Any]]:
    """Value rows; in a window stage example, event times and window bounds get their ISO-8601 UTC beside them."""
    return [{"path": r.path, "left": _value(r.left, stage_field_utc(stage, r.path, r.left)),
             "right": _value(r.right, stage_field_utc(stage, r.path, r.right)),
             "css": "differs" if r.differs else ""} for r in rows]


def _verdict(report: Mapping[str, Any]) -> dict[str, Any]:
    verdict = str(report.get("verdict", ""))
    sides, records = report.get("sides", {}), report.get("records", {})
    quarantined = records.get("quarantined", {})
    first = report.get("first_divergence")
    excess = unpaired_excess(report)
    return {"verdict": verdict, "css": "parity" if verdict == "parity" else "diverged",
            "unpaired": _unpaired_first(excess, sides) if excess else None,
            "name": report.get("name") or "", "left": sides.get("left"), "right": sides.get("right"),
            "diverged": records.get("diverged", 0), "paired": records.get("paired", 0),
            "max_diverged": report.get("max_diverged", 0), "matched": records.get("matched", 0),
            "within_tolerance": records.get("within_tolerance", 0), "left_only": records.get("left_only", 0),
            "right_only": records.get("right_only", 0), "quarantined_left": quarantined.get("left", 0),
            "quarantined_right": quarantined.get("right", 0), "redacted": bool(report.get("redacted")),
            "first": {"stage": first.get("stage"), "records": first.get("records"), "cause": first.get("cause"),
                      "explanation": first.get("explanation", "")} if first else None}


def _unpaired_first(excess: UnpairedExcess, sides: Mapping[str, Any]) -> dict[str, Any]:
    """The paragraph that opens a report whose verdict the records on one side only decide."""
    parts = [{"count": count, "side": side, "name": sides.get(side),
              "keys": [key_text(k) for k in keys[:_UNPAIRED_SHOWN]]}
             for count, keys, side in ((excess.left_only, excess.left_keys, "left"),
                                       (excess.right_only, excess.right_keys, "right")) if count]
    return {"records": excess.records, "allowed": excess.allowed, "parts": parts}


_UNPAIRED_SHOWN = 5  # example keys per side named in the opening paragraph


def _records(records: Mapping[str, Any], taps: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    quarantined = records.get("quarantined", {})
    reasons = records.get("quarantine_reasons", {})
    rows = [{"label": label, "count": records.get(field)} for label, field in (
        ("read on the left", "left"), ("read on the right", "right"), ("paired", "paired"),
        ("matched", "matched"), ("within tolerance", "within_tolerance"), ("diverged", "diverged"),
        ("left only", "left_only"), ("right only", "right_only"), ("duplicate keys", "duplicate_keys"))]
    for side in ("left", "right"):
        detail = ", ".join(f"{reason}: {count}" for reason, count in reasons.get(side, {}).items())
        rows.append({"label": f"quarantined on the {side}" + (f" ({detail})" if detail else ""),
                     "count": quarantined.get(side, 0)})
    if taps:  # a set written by taps: only some stages and a sample of keys were compared
        outside = taps.get("outside_sample", {})
        rows += [{"label": f"outside the taps' sample on the {side}", "count": outside.get(side, 0)}
                 for side in ("left", "right")]
    return rows


def _taps(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """report.json's `taps` (present when a set was written by production taps), for its own section."""
    taps = report.get("taps")
    if not taps:
        return None
    compared = list(taps.get("stages_compared", []))
    outside = taps.get("outside_sample", {})
    return {"stages": compared, "sample_rate": taps.get("sample_rate"),
            "untapped": [s.get("name") for s in report.get("stages", []) if s.get("name") not in compared],
            "outside": {side: outside.get(side, 0) for side in ("left", "right")}}


def _funnel(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    paired = int(report.get("records", {}).get("paired", 0) or 0)
    still, rows = paired, []
    for stage in report.get("stages", []):
        diverged = int(stage.get("diverged", 0) or 0)
        still -= int(stage.get("first_diverged", 0) or 0)
        width = 100.0 * diverged / paired if paired else 0.0
        rows.append({"name": stage.get("name"), "width": f"{min(width, 100.0):.1f}", "diverged": diverged,
                     "first_diverged": stage.get("first_diverged", 0),
                     "within_tolerance": stage.get("within_tolerance", 0), "still": still})
    return rows


def _causes(causes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"stage": c.get("stage"), "cause": c.get("cause"), "records": c.get("records"),
             "explanation": c.get("explanation", "")} for c in causes]


def _features(features: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(features, key=lambda f: (-(f.get("mismatched") or 0), -(f.get("within_tolerance") or 0),
                                           str(f.get("name"))))


def _feature_rows(ordered: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": f.get("name"), "stage": f.get("stage", ""), "mismatched": f.get("mismatched"),
             "within_tolerance": f.get("within_tolerance"), "max_abs_delta": _short(f.get("max_abs_delta")),
             "presence": f.get("presence", ""), "css": "differs" if f.get("mismatched") else ""} for f in ordered]


def _short(value: Any) -> Any:
    """A float shown to 6 significant digits (report.json keeps the exact value); anything else as is."""
    return f"{value:.6g}" if isinstance(value, float) else value


def _number(value: Any) -> float | None:
    """A finite float from the report, or None (the plots read numbers only, never text)."""
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _counts(value: Any, bins: int) -> list[int] | None:
    if not isinstance(value, list) or len(value) != bins:
        return None
    try:
        counts = [int(c) for c in value]
    except (TypeError, ValueError, OverflowError):
        return None
    return counts if all(c >= 0 for c in counts) else None


def _histogram(edges: Sequence[float], series: Sequence[tuple[str, str, list[int]]], label: str,
               zero_line: bool = False) -> dict[str, Any]:
    """The geometry of bars of one or more count series on shared bins (side by side within a bin), with the
    range below; every number is formatted here. `series` is (colour key, name, counts)."""
    bins, width, height = len(edges) - 1, _PLOT_WIDTH, _PLOT_HEIGHT
    top, left = _PLOT_TOP, _PLOT_LEFT
    peak = max((c for _, _, counts in series for c in counts), default=0) or 1
    slot = width / bins
    bar = (slot - 2) / len(series)
    bars = []
    for i in range(bins):
        for j, (colour, name, counts) in enumerate(series):
            if not counts[i]:
                continue
            h = max(counts[i] / peak * height, 1.5)  # a bin of one record stays visible
            tip = f"[{edges[i]:.6g}, {edges[i + 1]:.6g}{']' if i == bins - 1 else ')'}: {name} {counts[i]}"
            bars.append({"x": f"{left + i * slot + 1 + j * bar:.1f}", "y": f"{top + height - h:.1f}",
                         "width": f"{bar:.1f}", "height": f"{h:.1f}", "fill": _COLOURS[colour], "tip": tip})
    lo, hi = edges[0], edges[-1]
    base = top + height
    zero = None
    if zero_line and lo < 0 < hi:
        zero = {"x": f"{left + (0 - lo) / (hi - lo) * width:.1f}", "y1": top - 4, "y2": base}
    return {"width": left * 2 + width, "height": base + 16, "label": label, "bars": bars, "zero": zero,
            "axis": {"x1": left, "x2": left + width, "y": base}, "peak": peak, "peak_y": top - 4,
            "range_y": base + 12, "low": f"{lo:.6g}", "high": f"{hi:.6g}"}


def _plot(feature: Mapping[str, Any], sides: Mapping[str, Any]) -> dict[str, Any] | None:
    """One feature's figure: left vs right values, then the deltas; None when its histograms are malformed."""
    hist = feature.get("histograms")
    if not isinstance(hist, Mapping):
        return None
    values, deltas = hist.get("values") or {}, hist.get("deltas") or {}
    if not isinstance(values, Mapping) or not isinstance(deltas, Mapping):
        return None
    edges = [_number(x) for x in values.get("edges") or []]
    delta_edges = [_number(x) for x in deltas.get("edges") or []]
    if len(edges) < 2 or len(delta_edges) < 2 or None in edges or None in delta_edges:
        return None
    left, right = _counts(values.get("left"), len(edges) - 1), _counts(values.get("right"), len(edges) - 1)
    counts = _counts(deltas.get("counts"), len(delta_edges) - 1)
    if left is None or right is None or counts is None:
        return None
    name = str(feature.get("name"))
    lname, rname = str(sides.get("left", "left")), str(sides.get("right", "right"))
    return {"name": name, "pairs": sum(left), "left": lname, "right": rname,
            "value_plot": _histogram(edges, [("left", f"left ({lname})", left), ("right", f"right ({rname})", right)],
                                     f"{name}: values, left ({lname}) vs right ({rname})"),
            "delta_plot": _histogram(delta_edges, [("delta", "right - left", counts)],
                                     f"{name}: deltas, right ({rname}) minus left ({lname})", zero_line=True)}


def _distributions(features: Sequence[Mapping[str, Any]], sides: Mapping[str, Any], redacted: bool) -> dict:
    if redacted:
        return {"redacted": True, "figures": [], "more": 0}
    plots = [p for p in (_plot(f, sides) for f in features) if p]
    return {"redacted": False, "figures": plots[:_MAX_PLOTS], "more": len(plots) - _MAX_PLOTS}


def _location(example: Mapping[str, Any]) -> str:
    location = example.get("location") or {}
    return "; ".join(f"{side}: {location[side]}" for side in ("left", "right") if location.get(side))


def _examples(report: Mapping[str, Any], out_dir: str) -> list[dict[str, Any]]:
    return [{"key": key_text(example.get("key")), "stage": example.get("stage"), "cause": example.get("cause"),
             "explanation": example.get("explanation") or "", "location": _location(example),
             "rows": _rows(field_rows(example.get("left"), example.get("right")), example.get("stage")),
             "command": show_command(out_dir, example.get("key"))} for example in report.get("examples", [])]


def _analyzers(analyzers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": a.get("name"), "outcome": "noise" if a.get("noise") else "equal" if a.get("equal") else "differ",
             "detail": a.get("detail", ""), "css": "" if a.get("equal") else "differs"} for a in analyzers]


def noise_rows(noise: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of an analysis-noise table (HTML and Markdown): each feature's bound, records and why, then the
    features that have none."""
    rows = [{"name": f.get("name"), "bound": f"{f.get('abs')} + {f.get('rel')} × |y|", "records": f.get("records", 0),
             "why": f.get("why", "")} for f in noise.get("features", [])]
    return rows + [{"name": name, "bound": "none (diverges)", "records": "",
                    "why": "fed by an analyzer output parity derives no bound for"} for name in noise.get("unbounded", [])]


def _analysis_noise(noise: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The analysis-noise section: the records it explains and each feature's bound (section 8)."""
    if not noise:
        return None
    return {"cause": noise.get("cause"), "explanation": noise.get("explanation", ""), "rows": noise_rows(noise)}


def _environment(environment: Mapping[str, Any]) -> dict[str, Any]:
    differences = [{"setting": True, "name": d.get("name"), "left": _value(d.get("left", MISSING)),
                    "right": _value(d.get("right", MISSING))} if isinstance(d, Mapping)
                   else {"setting": False, "text": d} for d in environment.get("differences", [])]
    return {"differences": differences,
            "full": _rows(field_rows(environment.get("left", {}), environment.get("right", {})))}


def _unpaired(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    unpaired = report.get("unpaired_examples") or {}
    return [{"label": side.replace("_", " "), "key_texts": [key_text(k) for k in unpaired.get(side, [])]}
            for side in ("left_only", "right_only") if unpaired.get(side)]


def _reproduce(report: Mapping[str, Any], out_dir: str) -> dict[str, Any]:
    keys = [e.get("key") for e in report.get("examples", [])][:3]
    return {"commands": [show_command(out_dir, k) for k in keys] or [show_command(out_dir, "KEY")],
            "render": f"parity report {out_dir}/report.json"}


def _view(report: Mapping[str, Any], out_dir: str) -> dict[str, Any]:
    """What the templates print, section by section (plain data; the templates escape all of it)."""
    sides = report.get("sides", {})
    redacted = bool(report.get("redacted"))
    features = _features(report.get("features", []))
    return {
        "left": sides.get("left"), "right": sides.get("right"), "redacted": redacted,
        "verdict": _verdict(report), "funnel": _funnel(report), "causes": _causes(report.get("causes", [])),
        "features": _feature_rows(features), "distributions": _distributions(features, sides, redacted),
        "examples": _examples(report, out_dir), "analyzers": _analyzers(report.get("analyzers", [])),
        "analysis_noise": _analysis_noise(report.get("analysis_noise")),
        "environment": _environment(report.get("environment", {})),
        "records": _records(report.get("records", {}), report.get("taps")), "taps": _taps(report),
        "unpaired": _unpaired(report), "reproduce": _reproduce(report, out_dir),
        "format": report.get("format", ""), "encoding": report.get("encoding", ""),
        "impact": _prediction_impact(report.get("prediction_impact")),
    }


def _prediction_impact(impact: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The model stage's headline and, per output, the records it changed with a bar for its largest |delta|
    (the chart of output deltas: bars scaled to the largest); None without a model."""
    if not impact:
        return None
    outputs = impact.get("outputs", [])
    peak = max((o.get("max_abs_delta") or 0.0 for o in outputs), default=0.0)
    decision = impact.get("decision")
    rule = None if not decision else (f"argmax of {decision.get('output')}" if decision.get("rule") == "argmax"
                                      else f"{decision.get('output')} >= {decision.get('at')}")
    return {"headline": impact.get("headline", ""), "rule": rule,
            "upstream": impact.get("records_diverged_upstream", 0), "changed": impact.get("prediction_changed", 0),
            "flips": impact.get("decision_flips", 0), "flips_at_model": impact.get("decision_flips_at_model", 0),
            "outputs": [{"name": o.get("name"), "changed": o.get("changed", 0),
                         "delta": "" if o.get("max_abs_delta") is None else f"{o['max_abs_delta']:.6g}",
                         "width": 0 if not peak or not o.get("max_abs_delta") else
                         round(100 * o["max_abs_delta"] / peak, 1)} for o in outputs]}


def render_html(report: Mapping[str, Any], *, out_dir: str = "<dir>") -> str:
    """The report as one self-contained HTML5 page (inline CSS, no scripts, no external fetches).

    Args:
        report: the parsed report.json (docs/contract.md, section 5, plus parity's additions).
        out_dir: the output directory to name in the reproduce commands.
    """
    title = f"parity: {report.get('verdict', '')} {report.get('name') or ''}".strip()
    return _TEMPLATES.get_template("page.html.j2").render(title=title, view=_view(report, out_dir))
