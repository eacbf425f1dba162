"""Cross-runner differential: `parity replay` of one side on the DirectRunner and on Flink, then `parity diff`
of the two fingerprint sets (both of the same side) shows zero divergence at every stage. This is the check
docs/flink.md recommends before moving a replay job to another runner."""
from __future__ import annotations

import json
import os

import pytest

from parity.cli import main

# LOOPBACK workers log "CANCELLED: Multiplexer hanging up" from their gRPC reader threads when a job ends: harmless
# (the report bytes are what is checked).
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A side that exercises every stage: event-time windows, per-zone shard aggregates, an avro coder round trip,
# a seeded split and a python transform.
CONFIG = os.path.join(ROOT, "fixtures", "scenarios", "clean_same_semantics", "parity.yaml")
SIDE = "production"


def test_replaying_a_side_on_flink_and_on_the_direct_runner_gives_sets_with_zero_divergence(
        tmp_path, flink_options, monkeypatch, capsys):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    direct, flink = str(tmp_path / "direct" / SIDE), str(tmp_path / "flink" / SIDE)
    assert main(["replay", CONFIG, "--side", SIDE, "--out", direct]) == 0
    assert main(["replay", CONFIG, "--side", SIDE, "--out", flink, "--runner", "FlinkRunner", "--",
                 *flink_options]) == 0
    for path, runner in ((direct, "DirectRunner"), (flink, "FlinkRunner")):
        with open(os.path.join(path, "manifest.json"), encoding="utf-8") as handle:
            assert json.load(handle)["runner"] == runner
    capsys.readouterr()
    # Without and with the config (the two sets carry the same side name; the config names it).
    for extra, out in (([], "diff"), (["--config", CONFIG], "diff-config")):
        assert main(["diff", direct, flink, "--out", str(tmp_path / out), *extra]) == 0, capsys.readouterr()
        with open(tmp_path / out / "report.json", encoding="utf-8") as handle:
            report = json.load(handle)
        assert report["verdict"] == "parity"
        assert report["sides"] == {"left": SIDE, "right": SIDE}
        records = report["records"]
        assert records["paired"] > 0 and records["diverged"] == 0, records
        assert records["matched"] == records["paired"], records
        assert records["left_only"] == records["right_only"] == 0, records
        assert report["first_divergence"] is None
        assert all(not stage["first_diverged"] for stage in report["stages"]), report["stages"]
        assert "parity: parity (production vs production)" in capsys.readouterr().out
