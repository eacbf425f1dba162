"""parity.testing.assert_parity: passes on a clean pair, fails with the Markdown summary on a divergence."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from parity.testing import assert_parity

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIOS = os.path.join(ROOT, "fixtures", "scenarios")


def test_assert_parity_returns_the_report_of_a_clean_pair(tmp_path) -> None:
    report = assert_parity(os.path.join(SCENARIOS, "clean_same_semantics", "parity.yaml"), out_dir=str(tmp_path))
    assert report["verdict"] == "parity" and report["records"]["diverged"] == 0
    assert (tmp_path / "report.html").exists() and (tmp_path / "junit.xml").exists()


def test_assert_parity_fails_with_the_markdown_summary_naming_the_first_divergent_stage(tmp_path) -> None:
    config = os.path.join(SCENARIOS, "window_unit_ms_vs_s", "parity.yaml")
    with pytest.raises(AssertionError) as failure:
        assert_parity(config, out_dir=str(tmp_path))
    message = str(failure.value)
    assert message.startswith("**diverged** window-unit-ms-vs-s")
    assert "first divergence: stage `window`" in message and "`window.timestamp_unit`" in message
    assert f"parity show {tmp_path}" in message
    with open(tmp_path / "report.md", encoding="utf-8") as handle:
        assert message == handle.read()  # the summary parity check wrote, word for word


def test_assert_parity_writes_to_a_new_temporary_folder_by_default() -> None:
    with pytest.raises(AssertionError) as failure:
        assert_parity(os.path.join(SCENARIOS, "window_unit_ms_vs_s", "parity.yaml"))
    out_dir = str(failure.value).rsplit("parity show ", 1)[1].split(" ")[0]
    try:
        assert os.path.dirname(out_dir) == tempfile.gettempdir()
        assert os.path.basename(out_dir).startswith("parity-")
        assert os.path.exists(os.path.join(out_dir, "report.json"))
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
