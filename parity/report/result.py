"""`Report`: what `parity.check` returns. report.json's dict itself, plus what a notebook and a script want.

A `dict` subclass, so every caller that reads `report["verdict"]`, compares it with a dict or dumps it as JSON
keeps working; on top of that, Jupyter shows it as the HTML report (`_repr_html_`), and `summary()`, `causes`
and `examples` give plain Python for code.

    >>> import parity
    >>> report = parity.check("pipelines/taxi/parity.yaml", out_dir="parity-out")  # doctest: +SKIP
    >>> report                            # in Jupyter: the HTML report, inline  # doctest: +SKIP
    >>> print(report.summary())           # the lines `parity check` prints  # doctest: +SKIP
    >>> [c["cause"] for c in report.causes]  # doctest: +SKIP
    ['window.late_dropped', 'shard.membership']
"""
from __future__ import annotations

import html
import os
from typing import Any, Mapping

__all__ = ["Report"]

_FRAME_HEIGHT = 900  # pixels of the notebook frame; the page scrolls inside it


class Report(dict):
    """report.json as a dict (docs/contract.md, section 5), with `summary()`, `causes`, `examples`, `verdict` and a
    notebook view. `out_dir` is the folder the run wrote its reports and fingerprint sets to (None when
    unknown): the `parity show` commands of the HTML view name it."""

    def __init__(self, report: Mapping[str, Any], out_dir: str | None = None) -> None:
        super().__init__(report)
        self.out_dir = out_dir

    @property
    def verdict(self) -> str:
        """`parity` or `diverged`."""
        return self["verdict"]

    @property
    def causes(self) -> list[dict[str, Any]]:
        """Every (stage, cause) with its record count and explanation, earliest stage first."""
        return self.get("causes", [])

    @property
    def examples(self) -> list[dict[str, Any]]:
        """The divergent examples: key, stage, cause, both sides' stage values and the explanation."""
        return self.get("examples", [])

    def summary(self) -> str:
        """The verdict, unpaired records beyond the limit, the record counts, the first divergence and where
        the reports are, as text; control characters shown as escapes (side names come from manifests,
        explanations quote values). `parity check` and `parity diff` print it."""
        from parity.report.html import unpaired_excess
        from parity.report.text import printable

        records, sides = self["records"], self["sides"]
        quarantined = records.get("quarantined", {})
        lines = [f"parity: {self['verdict']} ({sides['left']} vs {sides['right']})"]
        impact = self.get("prediction_impact")
        if impact:  # with a model, on-call's second question first
            lines.append(f"  prediction impact: {impact['headline']}")
        excess = unpaired_excess(self)
        if excess is not None:  # keys stay in the reports: under report.redact the terminal shows no raw value
            lines.append(f"  unpaired: {excess.records} records on one side only ({excess.left_only} left only, "
                         f"{excess.right_only} right only), above tolerance.max_unpaired {excess.allowed}")
        lines.append(f"  records: {records['paired']} paired, {records['matched']} matched, "
                     f"{records['within_tolerance']} within tolerance, {records['diverged']} diverged, "
                     f"{records['left_only']} left only, {records['right_only']} right only, quarantined "
                     f"{quarantined.get('left', 0)}/{quarantined.get('right', 0)}")
        noise = self.get("analysis_noise")
        if noise:
            features = ", ".join(f"{f['name']} {f['records']}" for f in noise["features"] if f["records"])
            lines.append(f"  analysis noise: {noise['records']} records within tolerance only through it (analyzer "
                         f"outputs that differ by float rounding; per feature: {features or 'none'}); not skew")
        first = self.get("first_divergence")
        if first:
            lines.append(f"  first divergence: stage {first['stage']}, {first['records']} records, "
                         f"cause {first['cause']}: {first['explanation']}")
        if self.out_dir is not None:
            lines.append(f"  report: {os.path.join(self.out_dir, 'report.html')} "
                         "(also report.json, report.md, junit.xml)")
        return "\n".join(map(printable, lines))

    def to_html(self) -> str:
        """The whole HTML report page (the bytes of report.html)."""
        from parity.report.html import render_html

        return render_html(self, out_dir=self.out_dir if self.out_dir is not None else "<dir>")

    def _repr_html_(self) -> str:
        """Jupyter's view: the report page in a sandboxed frame, so its CSS and its Content-Security-Policy
        apply to it alone and no script can run in it (the page has none)."""
        page = html.escape(self.to_html(), quote=True)
        return (f'<iframe srcdoc="{page}" sandbox="" title="parity report" '
                f'style="width:100%;height:{_FRAME_HEIGHT}px;border:1px solid #d0d7de"></iframe>')
