"""Feature distributions: the histograms in report.json and their inline SVG drawing in the HTML report."""
from __future__ import annotations

import copy
import re
from html.parser import HTMLParser

from sample_reports import HOSTILE, diverged_report

from parity.report import render_html, render_json
from parity.compare.histograms import HISTOGRAM_BINS, histograms


def test_fewer_than_two_numeric_pairs_give_no_histograms() -> None:
    assert histograms([]) is None
    assert histograms([(1.0, 2.0)]) is None


def test_values_share_bins_over_both_sides_and_deltas_are_right_minus_left() -> None:
    pairs = [(float(i), float(i) + 0.5 * (i % 3)) for i in range(40)]
    result = histograms(pairs)
    assert result is not None
    values, deltas = result["values"], result["deltas"]
    assert len(values["edges"]) == HISTOGRAM_BINS + 1 == 21
    assert len(values["left"]) == len(values["right"]) == len(deltas["counts"]) == HISTOGRAM_BINS
    assert values["edges"][0] == 0.0 and values["edges"][-1] == 39.0  # min and max of both sides
    assert sum(values["left"]) == sum(values["right"]) == sum(deltas["counts"]) == 40
    assert deltas["edges"][0] == 0.0 and deltas["edges"][-1] == 1.0
    assert deltas["counts"][0] == 14 and deltas["counts"][10] == 13 and deltas["counts"][-1] == 13
    assert values["left"][-1] == 2 and values["right"][-1] == 3  # 38, 39 (left); 37.5, 39, 39 (right)


def test_a_single_value_range_is_widened_by_half_a_unit() -> None:
    result = histograms([(3.0, 4.0), (3.0, 4.0), (4.0, 3.0)])
    assert result is not None
    assert result["deltas"]["edges"][0] == -1.0 and result["deltas"]["edges"][-1] == 1.0
    same = histograms([(2.0, 5.0), (2.0, 5.0)])
    assert same is not None
    assert same["deltas"]["edges"][0] == 2.5 and same["deltas"]["edges"][-1] == 3.5
    assert same["deltas"]["counts"][HISTOGRAM_BINS // 2] == 2 and sum(same["deltas"]["counts"]) == 2


def test_edges_are_rounded_to_six_significant_digits_and_counts_are_deterministic() -> None:
    pairs = [(1 / 3 + i * 1e-3, 1 / 3 + i * 1e-3 + 1e-9 * i) for i in range(25)]
    first, second = histograms(pairs), histograms(list(pairs))
    assert first == second
    assert first is not None
    for edge in first["values"]["edges"] + first["deltas"]["edges"]:
        assert edge == float(f"{edge:.6g}")
    huge = histograms([(-1.7e308, 1.7e308), (1.7e308, -1.7e308)])  # deltas overflow a float: clamped
    assert huge is not None and sum(huge["deltas"]["counts"]) == 2


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attributes: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes.extend(name for name, _ in attrs)


def _with_histograms(name: str) -> dict:
    report = copy.deepcopy(diverged_report())
    report["features"][0]["name"] = name
    report["features"][0]["histograms"] = histograms([(i * 0.1, i * 0.1 + (i % 4 - 1.5)) for i in range(30)])
    return report


def test_the_html_draws_left_right_and_delta_histograms_as_inline_svg() -> None:
    page = render_html(_with_histograms("fare_z"))
    features = page[page.index('id="features"'):page.index('id="examples"')]
    assert features.count("<svg") == 2 and '<figure class="plot">' in features
    assert 'fill="#0969da"' in features and 'fill="#e16f24"' in features and 'fill="#8250df"' in features
    assert "30 differing pairs" in features and 'class="zero"' in features
    assert "http://" not in page and "<script" not in page  # inline SVG needs no xmlns URL
    parser = _Tags()
    parser.feed(features)
    assert set(parser.tags) & {"svg", "rect", "line", "text", "title", "figure", "figcaption"} >= {
        "svg", "rect", "line", "text", "figure"}
    assert not [a for a in parser.attributes if a.startswith("on") or a in ("href", "src", "xlink:href")]


def test_a_hostile_feature_name_is_escaped_in_the_plot_labels() -> None:
    page = render_html(_with_histograms(HOSTILE))
    assert "<script" not in page and "<img" not in page
    assert re.search(r'aria-label="[^"]*&lt;script&gt;alert\(2\)', page)
    assert "<figcaption><code>&#x27;&quot;&gt;&lt;script&gt;" in page


def test_malformed_histograms_are_not_drawn_and_do_not_break_the_page() -> None:
    report = _with_histograms("fare_z")
    report["features"][0]["histograms"]["values"]["left"] = ["<script>", 1]
    assert "<svg" not in render_html(report)
    report["features"][0]["histograms"] = {"values": "<script>alert(1)</script>", "deltas": None}
    page = render_html(report)
    assert "<svg" not in page and "<script" not in page


def test_a_redacted_report_says_the_distributions_are_left_out() -> None:
    report = _with_histograms("fare_z")
    report["redacted"] = True
    page = render_html(report)
    assert "<svg" not in page and "left out of a redacted report" in page


def test_histograms_keep_report_json_stable() -> None:
    report = _with_histograms("fare_z")
    assert render_json(report) == render_json(copy.deepcopy(report))
