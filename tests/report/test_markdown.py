"""The Markdown summary: verdict, a row per stage, the causes, a few examples, and nothing a viewer would run."""
from __future__ import annotations

import re
from html.parser import HTMLParser

from markdown_it import MarkdownIt
from sample_reports import IMG, SCRIPT, STAGES, clean_report, diverged_report, hostile_report

from parity.report import render_markdown


class _Tables(HTMLParser):
    """Tables of rendered Markdown as lists of rows of cell texts, and every tag seen."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.tags: set[str] = set()
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.add(tag)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _parse(markdown: str) -> _Tables:
    # html enabled, as on GitHub: raw HTML in the Markdown would come through as tags
    parser = _Tables()
    parser.feed(MarkdownIt("commonmark").enable("table").render(markdown))
    return parser


def _table_with_header(tables: list[list[list[str]]], first_header: str, second: str) -> list[list[str]]:
    return next(t for t in tables if t[0][:2] == [first_header, second])


def test_clean_report_starts_with_the_parity_verdict_and_says_nothing_diverged() -> None:
    text = render_markdown(clean_report())
    assert text.startswith("**parity** taxi-hourly:")
    assert "first divergence: none" in text
    assert "**diverged**" not in text
    assert "**causes**" not in text and "**examples**" not in text


def test_clean_report_funnel_has_one_row_per_stage_in_order() -> None:
    funnel = _table_with_header(_parse(render_markdown(clean_report())).tables, "stage", "diverged")
    assert funnel[0] == ["stage", "diverged", "first diverged"]
    assert [row[0] for row in funnel[1:]] == list(STAGES)
    assert all(row[1:] == ["0", "0"] for row in funnel[1:])


def test_diverged_report_names_the_first_divergence_with_its_cause_and_explanation() -> None:
    text = render_markdown(diverged_report())
    assert text.startswith("**diverged** taxi-hourly:")
    first = next(line for line in text.splitlines() if line.startswith("first divergence:"))
    assert "`window`" in first and "7 records" in first and "`window.timestamp_unit`" in first
    assert "factor of 1000" in first


def test_diverged_report_funnel_and_causes_tables_carry_the_counts() -> None:
    tables = _parse(render_markdown(diverged_report())).tables
    funnel = _table_with_header(tables, "stage", "diverged")
    assert [row for row in funnel[1:] if row[0] in ("window", "transform")] == [
        ["window", "7", "7"], ["transform", "10", "3"]]
    causes = _table_with_header(tables, "stage", "cause")
    assert [(row[1], row[2]) for row in causes[1:]] == [
        ("window.timestamp_unit", "5"), ("window.boundary", "2"), ("transform.mapping", "3")]


def test_pipes_and_newlines_in_data_do_not_break_table_rows() -> None:
    text = render_markdown(diverged_report())
    assert "a\\|b\\nc" in text  # the JSON text of "a|b\nc", pipe escaped
    assert "different window \\| " in text
    for table in _parse(text).tables:
        assert len({len(row) for row in table}) == 1, table
    causes = _table_with_header(_parse(text).tables, "stage", "cause")
    assert causes[2][3] == f"same event time, different window | {IMG}"


def test_hostile_strings_reach_the_reader_as_text_never_as_html() -> None:
    parsed = _parse(render_markdown(diverged_report()))
    assert parsed.tags <= {"p", "strong", "code", "em", "table", "thead", "tbody", "tr", "th", "td"}
    cells = [cell for table in parsed.tables for row in table for cell in row]
    assert f'"{SCRIPT}"' in cells and f'"\\{IMG}"' in cells


def test_every_string_in_the_report_stays_text_and_keeps_tables_intact() -> None:
    text = render_markdown(hostile_report())
    parsed = _parse(text)
    assert parsed.tags <= {"p", "strong", "code", "em", "table", "thead", "tbody", "tr", "th", "td"}
    for table in parsed.tables:
        assert len({len(row) for row in table}) == 1, table
    html = MarkdownIt("commonmark").enable("table").render(text)
    assert html.count("<strong>") == 4  # our own labels: verdict, causes, top features, examples
    tokens = [t for block in MarkdownIt("commonmark").enable("table").parse(text) for t in block.children or []]
    in_code = sum(t.content.count("@all") for t in tokens if t.type == "code_inline")
    assert in_code > 0
    assert len(re.findall(r"(?<!\\)@all", text)) == in_code  # no @-mention outside code spans


def test_examples_show_at_most_three_one_per_cause_with_only_the_differing_fields() -> None:
    text = render_markdown(diverged_report())
    assert "**examples** (3 of 4)" in text
    assert "key `k4`" not in text  # a second example of a cause already shown
    tables = [t for t in _parse(text).tables if t[0][0] == "field"]
    assert len(tables) == 3
    assert [row[0] for row in tables[1][1:]] == ["windows"]  # event_time_us and zone are equal
    assert [row[0] for row in tables[2][1:]] == ["extra", "fare_z", "meta.note", "tag", "zone_id"]
    extra = tables[2][1]
    assert extra[1] == "missing" and len(extra[2]) == 120 and extra[2].endswith("...")
    assert tables[2][5][1:] == ["1", "1.0"]  # same number, different type


def test_unicode_values_stay_readable() -> None:
    report = diverged_report()
    report["examples"][1]["right"]["zone"] = "Zürich – 東京"
    assert '`"Zürich – 東京"`' in render_markdown(report)


def test_top_features_are_ranked_by_mismatched_and_capped_at_ten() -> None:
    report = diverged_report()
    report["features"] = [{"name": f"f{i:02d}", "stage": "transform", "mismatched": i, "within_tolerance": 0,
                           "max_abs_delta": None} for i in range(15)]
    features = _table_with_header(_parse(render_markdown(report)).tables, "feature", "mismatched")
    assert [row[0] for row in features[1:]] == [f"f{i:02d}" for i in range(14, 4, -1)]


def test_reproduce_line_shows_the_parity_show_command_for_an_example_key() -> None:
    text = render_markdown(diverged_report(), out_dir="parity-out")
    assert text.rstrip().splitlines()[-1] == "reproduce: `parity show parity-out '<script>alert(1)</script>'`"
    assert re.search(r"reproduce: `parity show <dir> KEY`", render_markdown(clean_report()))


def _noise_report() -> dict:
    report = clean_report()
    report["analysis_noise"] = {
        "cause": "transform.analysis_noise", "records": 7, "explanation": "7 records differ only by analysis noise",
        "analyzers": ["constant:scale_to_z_score_sqrt_x"], "unbounded": ["fare_bucket_xf"],
        "features": [{"name": "fare_xf", "abs": 1e-07, "rel": 5e-07, "records": 7,
                      "analyzers": ["constant:scale_to_z_score_sqrt_x", "constant:scale_to_z_score_sub_y"],
                      "why": "scale_to_z_score: mean 8.0 vs 8.0, variance 2.0 vs 2.0000002 " + SCRIPT}]}
    return report


def test_analysis_noise_gets_a_table_of_each_features_bound_and_the_unbounded_ones() -> None:
    text = render_markdown(_noise_report())
    parsed = _Tables()
    parsed.feed(MarkdownIt().enable("table").render(text))
    noise = next(t for t in parsed.tables if t[0][:2] == ["feature", "bound on |delta|"])
    assert noise[1][:3] == ["fare_xf", "1e-07 + 5e-07 × |y|", "7"]
    assert noise[2][:2] == ["fare_bucket_xf", "none (diverges)"]
    assert "analysis noise" in text and "transform.analysis_noise" in text
    assert "script" not in parsed.tags


def test_a_report_without_analysis_noise_has_no_such_section() -> None:
    assert "analysis noise" not in render_markdown(clean_report())
