"""report.json -> one self-contained HTML page for the on-call engineer (pure).

The page has no scripts and fetches nothing: a Content-Security-Policy meta forbids both, and every data value
goes through `_e()` because captured records can hold any string. Markup our own code produces is wrapped in
`_Html` so table helpers know what is already safe; anything else they are given is escaped. The feature
distributions are inline SVG drawn from the report's `histograms` numbers (parsed as floats and ints, so no
report text reaches the drawing except escaped labels).
"""
from __future__ import annotations

import html
import json
import math
import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

__all__ = ["FieldRow", "MISSING", "UnpairedExcess", "field_rows", "key_text", "render_html", "show_command",
           "unpaired_excess", "value_text"]

_VALUE_LIMIT = 2000  # characters of one value shown in a cell; a captured blob must not bloat the page

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1100px;padding:1em 2em;
color:#1f2328;background:#fff}
h1{font-size:1.6em;margin:.2em 0}h2{font-size:1.2em;margin:1.6em 0 .5em;border-bottom:1px solid #d0d7de}
h3{font-size:1em;margin:1.2em 0 .3em}
table{border-collapse:collapse;margin:.4em 0;width:100%}
th,td{border:1px solid #d0d7de;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
code,.value{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.92em}
.value{white-space:pre-wrap;word-break:break-all}
.verdict{padding:.8em 1em;border-radius:6px;border:1px solid}
.verdict.parity{background:#dafbe1;border-color:#4ac26b}.verdict.diverged{background:#ffebe9;border-color:#ff8182}
.marker{font-weight:700;text-transform:uppercase;letter-spacing:.05em}
.barcell{width:40%}.bar{height:.9em;background:#cf222e;min-width:0}.bar.zero{background:none}
tr.differs td{background:#fff8c5}tr.differs td.field{font-weight:700}
.missing{color:#6e7781;font-style:italic}.muted{color:#6e7781}
.plots{display:flex;flex-wrap:wrap;gap:.8em;margin:.6em 0}
figure.plot{margin:0;padding:.5em .6em;border:1px solid #d0d7de;border-radius:6px;box-sizing:border-box;
width:calc((100% - 1.6em) / 3);min-width:250px;max-width:360px}
figure.plot figcaption{margin-bottom:.2em;overflow-wrap:anywhere}
.plotlabel{font-size:.85em;color:#57606a;margin:.3em 0 0}
.swatch{display:inline-block;width:.8em;height:.8em;margin:0 .25em 0 .6em;vertical-align:-.05em;border-radius:2px}
.swatch.left{background:#0969da}.swatch.right{background:#e16f24}.swatch.delta{background:#8250df}
svg.hist{display:block;width:100%;height:auto}
svg.hist text{font:10px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;fill:#57606a}
svg.hist .axis{stroke:#8c959f;stroke-width:1}svg.hist .zero{stroke:#1f2328;stroke-width:1;stroke-dasharray:3 2}
"""

_COLOURS = {"left": "#0969da", "right": "#e16f24", "delta": "#8250df"}
_PLOT_WIDTH, _PLOT_HEIGHT, _PLOT_TOP, _PLOT_LEFT = 320, 80, 14, 10  # the bars' area inside each SVG
_MAX_PLOTS = 24  # features plotted; a report with thousands of features must stay readable


class _Html(str):
    """Markup produced by this module (never from data); table helpers pass it through unescaped."""


class _Td(_Html):
    """A whole table cell (`<td>...</td>`) produced by this module."""


def _e(value: Any) -> str:
    """The one way data reaches the page."""
    return html.escape(str(value), quote=True)


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()  # a field absent on one side (distinct from a present null)


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
    """The shell command that shows one record stage by stage (key shell-quoted; a `<dir>` placeholder kept)."""
    directory = out_dir if out_dir.startswith("<") else shlex.quote(out_dir)
    return f"parity show {directory} {shlex.quote(key_text(key))}"


def _cell(value: Any, cls: str = "") -> _Td:
    content = value if isinstance(value, _Html) else _e(value)
    attr = f' class="{_e(cls)}"' if cls else ""
    return _Td(f"<td{attr}>{content}</td>")


def _num(value: Any) -> _Td:
    return _cell("" if value is None else value, "num")


def _code(value: Any, cls: str = "") -> _Td:
    return _cell(_Html(f"<code>{_e(value)}</code>"), cls)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]], row_classes: Sequence[str] = ()) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = row_classes[i] if i < len(row_classes) and row_classes[i] else ""
        attr = f' class="{_e(cls)}"' if cls else ""
        cells = "".join(c if isinstance(c, _Td) else _cell(c) for c in row)
        body.append(f"<tr{attr}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _value(value: Any) -> _Html:
    if value is MISSING:
        return _Html('<span class="missing">(missing)</span>')
    text = value_text(value)
    if len(text) > _VALUE_LIMIT:
        text = f"{text[:_VALUE_LIMIT]}... ({len(text) - _VALUE_LIMIT} more characters)"
    return _Html(f'<span class="value">{_e(text)}</span>')


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{_e(anchor)}"><h2>{_e(title)}</h2>{body}</section>'


def _verdict(report: Mapping[str, Any]) -> str:
    verdict = str(report.get("verdict", ""))
    cls = "parity" if verdict == "parity" else "diverged"
    sides, records = report.get("sides", {}), report.get("records", {})
    quarantined = records.get("quarantined", {})
    excess = unpaired_excess(report)
    lines = [_unpaired_first(excess, sides)] if excess else []
    lines += [f"<p>{_e(sides.get('left'))} (left) vs {_e(sides.get('right'))} (right): "
              f"{_e(records.get('diverged', 0))} of {_e(records.get('paired', 0))} paired records diverged "
              f"(allowed: {_e(report.get('max_diverged', 0))}).</p>",
              f"<p>Records: {_e(records.get('matched', 0))} matched, {_e(records.get('within_tolerance', 0))} "
              f"within tolerance, {_e(records.get('left_only', 0))} left only, "
              f"{_e(records.get('right_only', 0))} right only, {_e(quarantined.get('left', 0))} + "
              f"{_e(quarantined.get('right', 0))} quarantined (see <a href=\"#records\">records</a>).</p>"]
    first = report.get("first_divergence")
    if first:
        lines.append(f"<p>First divergence at stage <strong>{_e(first.get('stage'))}</strong>: "
                     f"{_e(first.get('records'))} records, cause <code>{_e(first.get('cause'))}</code>.</p>"
                     f"<p>{_e(first.get('explanation', ''))}</p>")
    else:
        lines.append("<p>No paired record diverged.</p>")
    if report.get("redacted"):
        lines.append('<p class="muted">Redacted: values are shown as fingerprints only.</p>')
    name = f" {_e(report['name'])}" if report.get("name") else ""
    return (f'<header class="verdict {cls}"><h1><span class="marker">{_e(verdict)}</span>{name}</h1>'
            f'{"".join(lines)}</header>')


def _unpaired_first(excess: UnpairedExcess, sides: Mapping[str, Any]) -> str:
    """The paragraph that opens a report whose verdict the records on one side only decide."""
    parts = []
    for count, keys, label in ((excess.left_only, excess.left_keys, f"only on the left ({_e(sides.get('left'))})"),
                               (excess.right_only, excess.right_keys,
                                f"only on the right ({_e(sides.get('right'))})")):
        if count:
            shown = ", ".join(f"<code>{_e(key_text(k))}</code>" for k in keys[:_UNPAIRED_SHOWN])
            parts.append(f"{_e(count)} {label}" + (f", e.g. {shown}" if shown else ""))
    return (f'<p class="unpaired"><strong>{_e(excess.records)} records are on one side only</strong>, above '
            f"the {_e(excess.allowed)} that <code>tolerance.max_unpaired</code> allows: {'; '.join(parts)} "
            f'(see <a href="#unpaired">records on one side only</a>).</p>')


_UNPAIRED_SHOWN = 5  # example keys per side named in the opening paragraph


def _records(records: Mapping[str, Any], taps: Mapping[str, Any] | None = None) -> str:
    quarantined = records.get("quarantined", {})
    reasons = records.get("quarantine_reasons", {})
    rows = [[label, _num(records.get(field))] for label, field in (
        ("read on the left", "left"), ("read on the right", "right"), ("paired", "paired"),
        ("matched", "matched"), ("within tolerance", "within_tolerance"), ("diverged", "diverged"),
        ("left only", "left_only"), ("right only", "right_only"), ("duplicate keys", "duplicate_keys"))]
    for side in ("left", "right"):
        detail = ", ".join(f"{reason}: {count}" for reason, count in reasons.get(side, {}).items())
        rows.append([f"quarantined on the {side}" + (f" ({detail})" if detail else ""),
                     _num(quarantined.get(side, 0))])
    note = ""
    if taps:  # a set written by taps: only some stages and a sample of keys were compared
        outside = taps.get("outside_sample", {})
        for side in ("left", "right"):
            rows.append([f"outside the taps' sample on the {side}", _num(outside.get(side, 0))])
        stages = ", ".join(f"<code>{_e(s)}</code>" for s in taps.get("stages_compared", []))
        note = f"<p>Taps: stages compared {stages}; sample rate {_e(taps.get('sample_rate'))}.</p>"
    return _section("records", "Records", _table(["", "records"], rows) + note)


def _funnel(report: Mapping[str, Any]) -> str:
    paired = int(report.get("records", {}).get("paired", 0) or 0)
    still, rows = paired, []
    for stage in report.get("stages", []):
        diverged = int(stage.get("diverged", 0) or 0)
        still -= int(stage.get("first_diverged", 0) or 0)
        width = 100.0 * diverged / paired if paired else 0.0
        bar = _Td(f'<td class="barcell"><div class="bar{" zero" if not diverged else ""}" '
                    f'style="width:{_e(f"{min(width, 100.0):.1f}")}%"></div></td>')
        rows.append([_code(stage.get('name')), bar, _num(diverged),
                     _num(stage.get("first_diverged", 0)), _num(stage.get("within_tolerance", 0)), _num(still)])
    note = "<p>Bars are diverged records as a share of the paired records; each stage sees all paired records.</p>"
    return _section("funnel", "Stage funnel", note + _table(
        ["stage", "share diverged", "diverged", "first diverged here", "within tolerance", "still matching after"],
        rows))


def _causes(causes: Sequence[Mapping[str, Any]]) -> str:
    if not causes:
        return _section("causes", "Causes", "<p>None.</p>")
    rows = [[c.get("stage"), _code(c.get("cause")), _num(c.get("records")),
             c.get("explanation", "")] for c in causes]
    return _section("causes", "Causes", _table(["stage", "cause", "records", "explanation"], rows))


def _features(features: Sequence[Mapping[str, Any]], sides: Mapping[str, Any], redacted: bool) -> str:
    if not features:
        return _section("features", "Features", "<p>No features.</p>")
    ordered = sorted(features, key=lambda f: (-(f.get("mismatched") or 0), -(f.get("within_tolerance") or 0),
                                              str(f.get("name"))))
    rows = [[_code(f.get("name")), f.get("stage", ""), _num(f.get("mismatched")),
             _num(f.get("within_tolerance")), _num(_short(f.get("max_abs_delta"))), f.get("presence", "")]
            for f in ordered]
    classes = ["differs" if f.get("mismatched") else "" for f in ordered]
    table = _table(["feature", "stage", "mismatched", "within tolerance", "max |delta|", "present on"], rows,
                   classes)
    return _section("features", "Features", table + _distributions(ordered, sides, redacted))


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


def _histogram_svg(edges: Sequence[float], series: Sequence[tuple[str, str, list[int]]], label: str,
                   zero_line: bool = False) -> str:
    """Bars of one or more count series on shared bins (side by side within a bin), with the range below.

    `series` is (css colour key, name, counts); every number is formatted by this function, `label` escaped.
    """
    bins, width, height = len(edges) - 1, _PLOT_WIDTH, _PLOT_HEIGHT
    top, left = _PLOT_TOP, _PLOT_LEFT
    peak = max((c for _, _, counts in series for c in counts), default=0) or 1
    slot = width / bins
    bar = (slot - 2) / len(series)
    parts = []
    for i in range(bins):
        for j, (colour, name, counts) in enumerate(series):
            if not counts[i]:
                continue
            h = max(counts[i] / peak * height, 1.5)  # a bin of one record stays visible
            tip = f"[{edges[i]:.6g}, {edges[i + 1]:.6g}{']' if i == bins - 1 else ')'}: {name} {counts[i]}"
            parts.append(f'<rect x="{left + i * slot + 1 + j * bar:.1f}" y="{top + height - h:.1f}" '
                         f'width="{bar:.1f}" height="{h:.1f}" fill="{_COLOURS[colour]}">'
                         f"<title>{_e(tip)}</title></rect>")
    lo, hi = edges[0], edges[-1]
    if zero_line and lo < 0 < hi:
        x = left + (0 - lo) / (hi - lo) * width
        parts.append(f'<line class="zero" x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{top + height}"/>')
    base = top + height
    parts.append(f'<line class="axis" x1="{left}" y1="{base}" x2="{left + width}" y2="{base}"/>')
    parts.append(f'<text x="{left}" y="{top - 4}">max {peak}</text>')
    parts.append(f'<text x="{left}" y="{base + 12}">{_e(f"{lo:.6g}")}</text>')
    parts.append(f'<text x="{left + width}" y="{base + 12}" text-anchor="end">{_e(f"{hi:.6g}")}</text>')
    total_width, total_height = left * 2 + width, base + 16
    return (f'<svg class="hist" width="{total_width}" height="{total_height}" '
            f'viewBox="0 0 {total_width} {total_height}" role="img" aria-label="{_e(label)}">'
            f'{"".join(parts)}</svg>')


def _plot(feature: Mapping[str, Any], sides: Mapping[str, Any]) -> str:
    """One feature's figure: left vs right values, then the deltas; "" when its histograms are malformed."""
    hist = feature.get("histograms")
    if not isinstance(hist, Mapping):
        return ""
    values, deltas = hist.get("values") or {}, hist.get("deltas") or {}
    if not isinstance(values, Mapping) or not isinstance(deltas, Mapping):
        return ""
    edges = [_number(x) for x in values.get("edges") or []]
    delta_edges = [_number(x) for x in deltas.get("edges") or []]
    if len(edges) < 2 or len(delta_edges) < 2 or None in edges or None in delta_edges:
        return ""
    left, right = _counts(values.get("left"), len(edges) - 1), _counts(values.get("right"), len(edges) - 1)
    counts = _counts(deltas.get("counts"), len(delta_edges) - 1)
    if left is None or right is None or counts is None:
        return ""
    name = str(feature.get("name"))
    lname, rname = str(sides.get("left", "left")), str(sides.get("right", "right"))
    value_svg = _histogram_svg(edges, [("left", f"left ({lname})", left), ("right", f"right ({rname})", right)],
                               f"{name}: values, left ({lname}) vs right ({rname})")
    delta_svg = _histogram_svg(delta_edges, [("delta", "right - left", counts)],
                               f"{name}: deltas, right ({rname}) minus left ({lname})", zero_line=True)
    return (f'<figure class="plot"><figcaption><code>{_e(name)}</code> '
            f'<span class="muted">{_e(sum(left))} differing pairs</span></figcaption>'
            f'<p class="plotlabel">values<span class="swatch left"></span>left ({_e(lname)})'
            f'<span class="swatch right"></span>right ({_e(rname)})</p>{value_svg}'
            f'<p class="plotlabel">deltas<span class="swatch delta"></span>right - left</p>{delta_svg}</figure>')


def _distributions(features: Sequence[Mapping[str, Any]], sides: Mapping[str, Any], redacted: bool) -> str:
    if redacted:
        return ('<p class="muted" id="distributions">Distributions are left out of a redacted report (they '
                "are drawn from raw values).</p>")
    plots = [p for p in (_plot(f, sides) for f in features) if p]
    if not plots:
        return ('<p class="muted" id="distributions">No distributions to plot: no feature has two or more '
                "numeric differing pairs.</p>")
    more = len(plots) - _MAX_PLOTS
    note = (f'<p class="muted">{more} more features have distributions in report.json.</p>' if more > 0 else "")
    return ('<div id="distributions"><h3>Distributions of the differing pairs</h3><p>Per numeric feature, '
            "over the pairs whose values differ: the values of both sides on shared bins, and the deltas "
            "(right - left) with a dashed line at zero. Hover a bar for its bin and count.</p>"
            f'<div class="plots">{"".join(plots[:_MAX_PLOTS])}</div>{note}</div>')


def _location(example: Mapping[str, Any]) -> str:
    location = example.get("location") or {}
    parts = [f"{side}: {location[side]}" for side in ("left", "right") if location.get(side)]
    return f'<p class="muted">Location: <code>{_e("; ".join(parts))}</code></p>' if parts else ""


def _examples(report: Mapping[str, Any], out_dir: str) -> str:
    examples = report.get("examples", [])
    if not examples:
        return _section("examples", "Examples", "<p>No divergent examples.</p>")
    sides = report.get("sides", {})
    parts = []
    for example in examples:
        rows = field_rows(example.get("left"), example.get("right"))
        header = (f"<h3>key <code>{_e(key_text(example.get('key')))}</code>: stage "
                  f"<code>{_e(example.get('stage'))}</code>, cause <code>{_e(example.get('cause'))}</code></h3>")
        explanation = f"<p>{_e(example['explanation'])}</p>" if example.get("explanation") else ""
        table = _table(["field", f"left ({sides.get('left')})", f"right ({sides.get('right')})"],
                       [[_code(r.path, "field"), _value(r.left),
                         _value(r.right)] for r in rows], ["differs" if r.differs else "" for r in rows])
        command = f"<p>Reproduce: <code>{_e(show_command(out_dir, example.get('key')))}</code></p>"
        parts.append(f'<article class="example">{header}{explanation}{_location(example)}{table}{command}'
                     "</article>")
    note = "<p>Highlighted rows are the fields whose values differ between the sides.</p>"
    return _section("examples", "Examples", note + "".join(parts))


def _analyzers(analyzers: Sequence[Mapping[str, Any]]) -> str:
    if not analyzers:
        return _section("analyzers", "Analyzers", "<p>No analyzers compared.</p>")
    rows = [[_code(a.get("name")), "equal" if a.get("equal") else "differ",
             a.get("detail", "")] for a in analyzers]
    classes = ["" if a.get("equal") else "differs" for a in analyzers]
    return _section("analyzers", "Analyzers", _table(["analyzer", "outcome", "detail"], rows, classes))


def _environment(environment: Mapping[str, Any], sides: Mapping[str, Any]) -> str:
    differences = environment.get("differences", [])
    if differences:
        rows = [[_code(d.get("name")), _value(d.get("left", MISSING)),
                 _value(d.get("right", MISSING))] if isinstance(d, Mapping) else [d, "", ""]
                for d in differences]
        body = _table(["setting", f"left ({sides.get('left')})", f"right ({sides.get('right')})"], rows)
    else:
        body = "<p>No differences.</p>"
    rows_all = field_rows(environment.get("left", {}), environment.get("right", {}))
    if rows_all:
        full = _table(["setting", "left", "right"],
                      [[_code(r.path), _value(r.left), _value(r.right)]
                       for r in rows_all], ["differs" if r.differs else "" for r in rows_all])
        body += f"<details><summary>Full environments</summary>{full}</details>"
    return _section("environment", "Environment differences", body)


def _unpaired(report: Mapping[str, Any]) -> str:
    unpaired = report.get("unpaired_examples") or {}
    items = [f"<li>{_e(side.replace('_', ' '))}: "
             f"{', '.join(f'<code>{_e(key_text(k))}</code>' for k in unpaired.get(side, []))}</li>"
             for side in ("left_only", "right_only") if unpaired.get(side)]
    return _section("unpaired", "Records on one side only", f"<ul>{''.join(items)}</ul>") if items else ""


def _reproduce(report: Mapping[str, Any], out_dir: str) -> str:
    keys = [e.get("key") for e in report.get("examples", [])][:3]
    commands = [show_command(out_dir, k) for k in keys] or [show_command(out_dir, "KEY")]
    lines = "".join(f"<li><code>{_e(c)}</code></li>" for c in commands)
    redacted = ('<p class="muted">This report is redacted: its keys are key fingerprints, and '
                "<code>parity show</code> takes a record's key as captured.</p>" if report.get("redacted") else "")
    return _section("reproduce", "How to reproduce",
                    f"<p>Show one record stage by stage, both sides, and where they part:</p><ul>{lines}</ul>"
                    f"{redacted}"
                    f"<p>Render this report again: <code>{_e(f'parity report {out_dir}/report.json')} "
                    "--format html</code></p>")


def render_html(report: Mapping[str, Any], *, out_dir: str = "<dir>") -> str:
    """The report as one self-contained HTML5 page (inline CSS, no scripts, no external fetches).

    Args:
        report: the parsed report.json (CONTRACT section 5 plus parity's additions).
        out_dir: the output directory to name in the reproduce commands.
    """
    sides = report.get("sides", {})
    title = f"parity: {report.get('verdict', '')} {report.get('name') or ''}".strip()
    footer = (f'<footer class="muted"><p>{_e(report.get("format", ""))}, encoding '
              f'{_e(report.get("encoding", ""))}{", redacted" if report.get("redacted") else ""}</p></footer>')
    body = "".join([
        _verdict(report), _funnel(report), _causes(report.get("causes", [])),
        _features(report.get("features", []), sides, bool(report.get("redacted"))), _examples(report, out_dir),
        _analyzers(report.get("analyzers", [])),
        _environment(report.get("environment", {}), sides), _records(report.get("records", {}), report.get("taps")),
        _unpaired(report), _reproduce(report, out_dir), footer])
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")
