"""The HTML report: self-contained, read top to bottom, and every captured string shown as text, never run."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from sample_reports import HOSTILE, IMG, SCRIPT, STAGES, clean_report, diverged_report, hostile_report

from parity.report import render_html

CSP = ('<meta http-equiv="Content-Security-Policy" '
       "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">")
ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "header", "footer", "section", "article",
                "details", "summary", "h1", "h2", "h3", "p", "span", "strong", "code", "a", "div", "ul", "li",
                "table", "thead", "tbody", "tr", "th", "td"}
ALLOWED_ATTRIBUTES = {"lang", "charset", "http-equiv", "content", "name", "class", "id", "style", "href"}


class _Page(HTMLParser):
    """Tags with their attributes, the visible text, and example table rows with their classes."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    return parser


def _assert_only_safe_markup(page: str) -> None:
    for tag, attrs in _parse(page).elements:
        assert tag in ALLOWED_TAGS, tag
        assert set(attrs) <= ALLOWED_ATTRIBUTES, (tag, attrs)
        assert attrs.get("href") is None or attrs["href"].startswith("#")
        assert attrs.get("style") is None or re.fullmatch(r"width:\d+\.\d%", attrs["style"] or "")


def test_page_is_self_contained_with_a_csp_and_no_scripts_or_urls() -> None:
    for report in (clean_report(), diverged_report()):
        page = render_html(report)
        assert page.startswith("<!DOCTYPE html>")
        assert CSP in page
        assert "http://" not in page and "https://" not in page
        assert not re.search(r"<(script|link|iframe|object|embed|img)\b", page, re.IGNORECASE)
        assert "src=" not in page.replace("img src=x", "")
        _assert_only_safe_markup(page)


def test_hostile_example_strings_appear_escaped_and_never_as_markup() -> None:
    page = render_html(diverged_report())
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<script" not in page and "<img" not in page
    assert page.count("onerror=") == page.count("&lt;img src=x onerror=")
    assert not any("onerror" in attrs for _, attrs in _parse(page).elements)
    text = "".join(_parse(page).text)
    assert SCRIPT in text and IMG in text  # shown to the reader as text


def test_every_string_in_the_report_is_escaped_wherever_it_lands() -> None:
    report = hostile_report()
    assert "event_time_us" + HOSTILE in report["examples"][0]["left"]
    page = render_html(report)
    _assert_only_safe_markup(page)
    assert "<script" not in page and "<img" not in page
    assert page.count("&lt;script&gt;alert(2)&lt;/script&gt;") > 40


def test_verdict_and_first_divergence_come_first_then_the_sections_in_reading_order() -> None:
    page = render_html(diverged_report())
    header = page[page.index("<header"):page.index("</header>")]
    assert "diverged" in header and "<strong>window</strong>" in header
    assert "<code>window.timestamp_unit</code>" in header and "factor of 1000" in header
    order = ["<header", 'id="funnel"', 'id="causes"', 'id="features"', 'id="examples"', 'id="analyzers"',
             'id="environment"', 'id="reproduce"']
    positions = [page.index(marker) for marker in order]
    assert positions == sorted(positions)


def test_clean_report_says_no_record_diverged() -> None:
    page = render_html(clean_report())
    assert '<header class="verdict parity">' in page
    assert "No paired record diverged." in page
    assert "No divergent examples." in page


def test_funnel_has_a_row_per_stage_with_bars_proportional_to_diverged_records() -> None:
    page = render_html(diverged_report())
    funnel = page[page.index('id="funnel"'):page.index('id="causes"')]
    assert re.findall(r"<tr><td><code>(\w+)</code></td>", funnel) == list(STAGES)
    assert re.findall(r'style="width:([\d.]+)%"', funnel) == ["0.0", "7.0", "7.0", "7.0", "7.0", "10.0"]


def test_examples_highlight_exactly_the_fields_whose_values_differ() -> None:
    page = render_html(diverged_report())
    articles = page.split('<article class="example">')[1:]
    assert len(articles) == 4

    def fields(article: str, differs: bool) -> list[str]:
        rows = re.findall(r'<tr( class="differs")?><td class="field"><code>([^<]*)</code>', article)
        return [name for cls, name in rows if bool(cls) == differs]

    assert fields(articles[1], True) == ["windows"]
    assert fields(articles[1], False) == ["event_time_us", "zone"]
    assert fields(articles[2], True) == ["extra", "fare_z", "meta.note", "tag", "zone_id"]
    assert fields(articles[2], False) == ["meta.same"]
    assert '<span class="missing">(missing)</span>' in articles[2]


def test_tables_list_causes_features_analyzers_and_environment_differences() -> None:
    page = render_html(diverged_report())
    causes = page[page.index('id="causes"'):page.index('id="features"')]
    assert causes.count("<tr>") == 4  # header and three causes
    assert "<code>transform.mapping</code></td><td class=\"num\">3</td>" in causes
    features = page[page.index('id="features"'):page.index('id="examples"')]
    assert features.index("fare_z") < features.index("hour")
    assert "TODO" not in features and "<svg" not in features  # the sample has no histograms to draw
    assert "No distributions to plot" in features
    analyzers = page[page.index('id="analyzers"'):page.index('id="environment"')]
    assert '<tr class="differs"><td><code>vocabulary:zone</code></td><td>differ</td>' in analyzers
    environment = page[page.index('id="environment"'):page.index('id="records"')]
    assert "<code>apache_beam</code>" in environment and "2.56.0" in environment


def test_reproduce_section_gives_parity_show_commands_for_example_keys() -> None:
    page = render_html(diverged_report(), out_dir="parity-out")
    reproduce = page[page.index('id="reproduce"'):]
    assert "parity show parity-out &#x27;&lt;script&gt;alert(1)&lt;/script&gt;&#x27;" in reproduce
    assert "parity show parity-out k4" not in reproduce  # three keys at most
    assert "parity show &lt;dir&gt; KEY" in render_html(clean_report())


def test_a_report_of_production_taps_gets_a_taps_section_and_a_line_in_the_header() -> None:
    report = diverged_report()
    report["taps"] = {"stages_compared": ["input", "window"], "sample_rate": 0.25,
                      "outside_sample": {"left": 31, "right": 2}}
    page = render_html(report)
    _assert_only_safe_markup(page)
    header = page[page.index("<header"):page.index("</header>")]
    assert "sample rate 0.25, 2 of 6 stages (see <a href=\"#taps\">taps</a>)" in header
    taps = page[page.index('<section id="taps">'):]
    taps = taps[:taps.index("</section>")]
    assert "<td>stages compared</td><td><code>input</code>, <code>window</code></td>" in taps
    assert ("<td>stages not compared (untapped on a side)</td><td><code>shard</code>, <code>coder</code>, "
            "<code>seed</code>, <code>transform</code></td>") in taps
    assert '<td>sample rate</td><td class="num">0.25</td>' in taps
    assert '<td>left out as outside the sample on the left</td><td class="num">31</td>' in taps
    assert '<td>left out as outside the sample on the right</td><td class="num">2</td>' in taps
    assert page.index('id="records"') < page.index('id="taps"') < page.index('id="reproduce"')
    assert 'id="taps"' not in render_html(diverged_report()) and "#taps" not in render_html(diverged_report())


def test_analysis_noise_gets_its_own_section_with_each_features_bound_escaped() -> None:
    from test_markdown import _noise_report

    page = render_html(_noise_report())
    section = page.split('<section id="analysis-noise">', 1)[1].split("</section>", 1)[0]
    assert "<code>fare_xf</code>" in section and "1e-07 + 5e-07 × |y|" in section
    assert "none (diverges)" in section and "<script>" not in section
    assert '<section id="analysis-noise">' not in render_html(clean_report())
