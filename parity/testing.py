"""Helpers for pytest: assert that a config's two sides agree, failing with the report's summary.

Example:
    ```python
    from parity.testing import assert_parity

    def test_taxi_features_match_production():
        assert_parity("pipelines/taxi/parity.yaml", out_dir="parity-out")
    ```
On divergence the test fails with the Markdown summary (verdict, first divergent stage and cause, causes,
top features, a few examples and a `parity show` command); every report format is in `out_dir`.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence

__all__ = ["assert_parity"]


def assert_parity(config_path: str | os.PathLike, *, out_dir: str | os.PathLike | None = None,
                  runner: str = "DirectRunner",
                  pipeline_options: Sequence[str] | None = None) -> dict[str, Any]:
    """Runs `parity.check` and fails when the verdict is "diverged"; returns report.json's dict otherwise.

    Args:
        config_path: the parity.yaml to check.
        out_dir: where the reports and fingerprint sets go; a new temporary folder when None.
        runner: the Beam runner of the replays (DirectRunner or FlinkRunner).
        pipeline_options: Beam pipeline options passed to the runner.

    Raises:
        AssertionError: the sides diverged beyond `tolerance.max_diverged`, or more records than
            `tolerance.max_unpaired` are on one side only; the message is the report's
            Markdown summary.
        parity.ParityError: no verdict could be produced (bad config or input; exit code 2 on the CLI).
    """
    __tracebackhide__ = True  # pytest: show the caller's line, not this helper's
    from parity import check
    from parity.report import render_markdown

    out_dir = os.fspath(out_dir) if out_dir is not None else tempfile.mkdtemp(prefix="parity-")
    report = check(config_path, out_dir=out_dir, runner=runner, pipeline_options=pipeline_options)
    if report["verdict"] == "diverged":
        raise AssertionError(render_markdown(report, out_dir=out_dir))
    return report
