"""What `parity diff` refuses (exit 2, with a clear message) and what it aligns, for tap sets and replay sets.

Refusals: a set of an earlier format version (fixtures/fingerprint_sets/v0, written by hand), another
canonical encoding, another key definition, other stages, an unknown tap format, no stage tapped in common,
and taps of one set that disagree (sampling, stages). Alignment: sets sampled at different rates compare on
the smaller sample.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from parity import commands as run
from parity.beam import TapStage, finalize, sampled
from parity.cli import main
from parity.config import load_config
from parity.errors import FingerprintSetError
from parity.sets import tap_align
from parity.sets.fingerprint_set import read_set

REPO = Path(__file__).resolve().parents[2]
V0_SET = REPO / "fixtures" / "fingerprint_sets" / "v0"


CONFIG = """
version: 1
name: tap-compat
capture: {path: capture.jsonl, key: [id], schema: {id: int64, t: int64, zone: string}}
sides:
  offline: {}
  production: {}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("compat")
    with open(folder / "capture.jsonl", "w", encoding="utf-8") as handle:
        for i in range(200):
            handle.write(json.dumps({"id": 1000 + 3 * i, "t": 1_700_000_000 + i, "zone": "xyz"[i % 3]}) + "\n")
    (folder / "parity.yaml").write_text(CONFIG)
    replay = folder / "replay"
    run.replay(load_config(str(folder / "parity.yaml")), "offline", str(replay))
    return {"capture": folder / "capture.jsonl", "replay": replay}


def _tap(capture: Path, set_dir: Path, stages=("input",), sample_rate: float = 1.0, rates=None,
         **settings) -> None:
    """Taps the capture's records, unchanged, as each of `stages` (a stage's value is then the record)."""
    if "key_fn" not in settings:
        settings["key_fields"] = ["id"]
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        records = pipeline | beam.io.ReadFromText(str(capture)) | beam.Map(json.loads)
        for stage in stages:
            rate = (rates or {}).get(stage, sample_rate)
            records = records | f"Tap{stage}" >> TapStage(stage, str(set_dir), sample_rate=rate, **settings)


@pytest.fixture(scope="module")
def tapped(small, tmp_path_factory) -> Path:
    taps = tmp_path_factory.mktemp("tapped") / "taps"
    _tap(small["capture"], taps)
    finalize(str(taps), side="production")
    return taps


def _edited_copy(source: Path, target: Path, **changes) -> Path:
    shutil.copytree(source, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest.update(changes)
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target


def _refused(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert main(["diff", *argv]) == 2
    return capsys.readouterr().err


def test_a_set_of_an_earlier_format_version_is_refused_clearly(small, tmp_path, capsys):
    for args in ((str(V0_SET), str(small["replay"])), (str(small["replay"]), str(V0_SET))):
        err = _refused(capsys, *args, "--out", str(tmp_path / "out"))
        assert str(V0_SET) in err
        assert "'parity.fingerprints/0' is not 'parity.fingerprints/1'" in err
        assert "re-run" in err
    assert not (tmp_path / "out" / "report.json").exists()


def test_a_tapped_set_of_the_current_format_diffs_with_a_replay(small, tapped, tmp_path):
    left, right = tap_align.write_views(str(small["replay"]), str(tapped), str(tmp_path / "views"))
    assert main(["diff", left, right, "--out", str(tmp_path / "diff")]) == 0
    report = json.loads((tmp_path / "diff" / "report.json").read_text())
    assert report["records"]["matched"] == 200
    assert read_set(left).manifest["stages_compared"] == ["input"]


def test_diff_on_engine_refuses_a_set_written_by_taps_naming_it_where_auto_diffs_it_here(small, tapped, tmp_path,
                                                                                       capsys):
    err = _refused(capsys, str(small["replay"]), str(tapped), "--out", str(tmp_path / "engine"), "--diff-on", "engine")
    assert str(tapped) in err and "no key ranges" in err and "--diff-on local or auto" in err
    assert not (tmp_path / "engine" / "report.json").exists()
    assert main(["diff", str(small["replay"]), str(tapped), "--out", str(tmp_path / "auto"), "--diff-on", "auto"]) == 0
    assert json.loads((tmp_path / "auto" / "report.json").read_text())["records"]["matched"] == 200


def test_parity_diff_compares_only_the_stages_tapped_by_itself(small, tapped, tmp_path):
    assert main(["diff", str(small["replay"]), str(tapped), "--out", str(tmp_path)]) == 0


def test_another_canonical_encoding_is_refused(small, tapped, tmp_path, capsys):
    other = _edited_copy(tapped, tmp_path / "enc", encoding="parity.canonical/0")
    err = _refused(capsys, str(small["replay"]), str(other), "--out", str(tmp_path / "out"))
    assert "canonical encoding 'parity.canonical/0'" in err and "cannot be compared" in err


def test_another_key_definition_is_refused(small, tmp_path, capsys):
    taps = tmp_path / "taps"
    _tap(small["capture"], taps, key_fn=lambda r: r["id"])
    manifest = finalize(str(taps))
    assert manifest["key"].startswith("fn:")  # a key function is not the config's capture.key
    err = _refused(capsys, str(small["replay"]), str(taps), "--out", str(tmp_path / "out"))
    assert "different key definition" in err and "['id']" in err


def test_other_stages_are_refused(small, tapped, tmp_path, capsys):
    other = _edited_copy(tapped, tmp_path / "stages",
                         stages=["input", "window", "shard", "coder", "seed", "transform", "sink"])
    err = _refused(capsys, str(small["replay"]), str(other), "--out", str(tmp_path / "out"))
    assert "different stages" in err


def test_align_refuses_an_unknown_tap_format_and_sets_without_a_stage_in_common(small, tapped, tmp_path):
    future = _edited_copy(tapped, tmp_path / "future", tap_format="parity.taps/2")
    with pytest.raises(FingerprintSetError, match="tap format 'parity.taps/2' is not 'parity.taps/1'"):
        tap_align.align(read_set(str(small["replay"])), read_set(str(future)))
    window_only = _edited_copy(tapped, tmp_path / "window_only", stages_tapped=["window"])
    with pytest.raises(FingerprintSetError, match="no tapped stage in common"):
        tap_align.align(read_set(str(window_only)), read_set(str(tapped)))
    bad = _edited_copy(tapped, tmp_path / "bad", stages_tapped=["input", "sink"])
    with pytest.raises(FingerprintSetError, match="stages_tapped"):
        tap_align.align(read_set(str(small["replay"])), read_set(str(bad)))


def test_parity_diff_refuses_an_unknown_tap_format_and_no_stage_in_common(small, tapped, tmp_path, capsys):
    future = _edited_copy(tapped, tmp_path / "future", tap_format="parity.taps/2")
    assert "parity.taps/2" in _refused(capsys, str(small["replay"]), str(future), "--out", str(tmp_path / "a"))
    window_only = _edited_copy(tapped, tmp_path / "window_only", stages_tapped=["window"])
    err = _refused(capsys, str(window_only), str(tapped), "--out", str(tmp_path / "b"))
    assert "no tapped stage in common" in err


def test_finalize_refuses_taps_that_would_half_tap_a_key(small, tmp_path):
    taps = tmp_path / "taps"
    _tap(small["capture"], taps, stages=("input", "shard"), rates={"input": 0.1, "shard": 0.2})
    with pytest.raises(FingerprintSetError, match="disagree on sample_rate"):
        finalize(str(taps))


def test_finalize_refuses_stages_it_was_not_given_taps_of(small, tmp_path):
    taps = tmp_path / "taps"
    _tap(small["capture"], taps, stages=("input", "coder"))
    with pytest.raises(FingerprintSetError, match="stages_tapped says"):
        finalize(str(taps), stages_tapped=["input", "coder", "transform"])
    with pytest.raises(FingerprintSetError, match="no taps wrote here"):
        finalize(str(tmp_path / "empty"))


def test_sets_sampled_at_two_rates_compare_on_the_smaller_sample(small, tmp_path):
    sets = {}
    for rate in (0.5, 0.3):
        sets[rate] = tmp_path / f"taps-{rate}"
        _tap(small["capture"], sets[rate], sample_rate=rate)
        finalize(str(sets[rate]), side=f"rate-{rate}")
    left, right = tap_align.write_views(str(sets[0.5]), str(sets[0.3]), str(tmp_path / "views"))
    assert main(["diff", left, right, "--out", str(tmp_path / "diff")]) == 0
    records = json.loads((tmp_path / "diff" / "report.json").read_text())["records"]
    expected = sum(1 for i in range(200) if sampled(1000 + 3 * i, 0.3))
    assert records["paired"] == records["left"] == records["right"] == expected
    assert records["left_only"] == records["right_only"] == 0
