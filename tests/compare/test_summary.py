"""A diff's summary (parity.compare.summary) and its frozen tally (parity.compare.tallied) cannot be changed once
built, and merging two of them gives a new one, leaving both as they were. Pure: the pairs are written by hand."""
from __future__ import annotations

import dataclasses
import json
import pickle
from operator import setitem

import pytest

from parity.compare.causes import CauseContext
from parity.compare.model_stage import Upstream
from parity.compare.outcomes import PairOutcome
from parity.compare.summary import DiffCounts, DiffSummary
from parity.compare.tally import Tally


def _pair(key: int, left: float, right: float, within: bool = False) -> PairOutcome:
    return PairOutcome(key=str(key), key_fp=key.to_bytes(8, "big"), differing=("transform",),
                       within=("transform",) if within else (), first_stage="transform", diverged=not within,
                       left={"transform": {"y": left, "v": [left, 1.0]}},
                       right={"transform": {"y": right, "v": [right, 1.0]}},
                       feature_deltas={"y": (within, abs(right - left))},
                       fps={"transform": (key, key + 1)})


def _summary(keys: range, model_stage: bool = False) -> DiffSummary:
    tally = Tally(CauseContext(), False, 2, track_upstream=model_stage)
    for key in keys:
        tally.add(_pair(key, float(key), float(key) + (1e-9 if key % 3 == 0 else 5.0), within=key % 3 == 0))
    return DiffSummary(DiffCounts(paired=len(keys)), tally.frozen())


def _snapshot(summary: DiffSummary) -> bytes:
    return pickle.dumps(summary, pickle.HIGHEST_PROTOCOL)


def test_a_summary_and_every_part_of_its_tally_refuse_to_be_changed():
    summary = _summary(range(10), model_stage=True)
    tally, stats = summary.tally, summary.tally.feature_stats
    before = _snapshot(summary)
    attempts = [
        lambda: setattr(summary, "tally", None),
        lambda: setattr(tally, "within", 0),
        lambda: setitem(tally.first_counts, "transform", 0),
        lambda: tally.cause_counts.clear(),
        lambda: tally.example_list.append({}),
        lambda: setitem(tally.example_list[0], "key", "x"),
        lambda: setitem(tally.example_list[0]["left"], "y", 0.0),
        lambda: tally.example_list[0]["left"]["v"].append(0.0),
        lambda: setitem(tally.upstream, "0", Upstream(True, "input")),
        lambda: setattr(tally.noise_count, "records", 1),
        lambda: setitem(tally.noise_count.features, "y", 1),
        lambda: setitem(stats.stats, "y", (0, 0, None)),
        lambda: setitem(stats.numbers["y"][0], 0, 0),
        lambda: setattr(stats, "histograms", {}),
    ]
    for attempt in attempts:
        with pytest.raises((AttributeError, TypeError, dataclasses.FrozenInstanceError)):
            attempt()
    assert tally.example_list and tally.upstream and stats.numbers["y"][0]
    assert _snapshot(summary) == before


def test_adding_to_a_tally_after_freezing_it_leaves_the_frozen_tally_as_it_was():
    tally = Tally(CauseContext(), False, 2, track_upstream=True)
    for key in range(4):
        tally.add(_pair(key, 0.0, 1.0))
    frozen = tally.frozen()
    before = pickle.dumps(frozen)
    for key in range(4, 8):
        tally.add(_pair(key, 0.0, 1.0))
    assert pickle.dumps(frozen) == before
    assert frozen.first_counts["transform"] == 4 and len(frozen.upstream) == 4


def test_merging_two_summaries_gives_a_new_one_equal_to_the_whole_and_leaves_both_inputs_unchanged():
    first, second, whole = _summary(range(0, 10)), _summary(range(10, 20)), _summary(range(20))
    before = (_snapshot(first), _snapshot(second))
    merged = first.merged(second)
    assert (_snapshot(first), _snapshot(second)) == before
    assert merged.tally is not first.tally and merged.tally is not second.tally
    for name in ("first_counts", "cause_counts", "example_list", "within", "noise_count"):
        assert getattr(merged.tally, name) == getattr(whole.tally, name), name
    names = (["v", "y"], ["v", "y"])
    assert merged.tally.feature_stats.features(names) == whole.tally.feature_stats.features(names)
    assert merged.tally.feature_stats.features(names)[1]["histograms"] is not None
    assert merged.tally.first_counts["transform"] == 6 + 7 == sum(s.tally.first_counts["transform"]
                                                                 for s in (first, second))


def test_a_summary_given_its_histograms_is_a_new_summary_and_the_old_one_keeps_its_numbers():
    summary = _summary(range(10))
    given = summary.with_histograms({"y": {"deltas": {"edges": [0.0, 1.0], "counts": [3]}}})
    names = (["y"], ["y"])
    assert given.tally.feature_stats.features(names)[0]["histograms"] == {"deltas": {"edges": [0.0, 1.0],
                                                                                     "counts": [3]}}
    assert summary.tally.feature_stats.features(names)[0]["histograms"]["deltas"]["counts"] != [3]
    with pytest.raises(ValueError):
        given.merged(summary)


def test_a_frozen_summary_pickles_and_comes_back_equal_and_frozen():
    summary = _summary(range(10), model_stage=True)
    back = pickle.loads(_snapshot(summary))
    assert back == summary
    with pytest.raises(TypeError):
        setitem(back.tally.example_list[0]["left"], "y", 0.0)


def test_a_frozen_summary_converts_with_dataclasses_asdict_and_its_counts_write_as_json():
    summary = _summary(range(10), model_stage=True)
    plain = dataclasses.asdict(summary)
    assert plain["counts"]["stage_diverged"] == dict(summary.counts.stage_diverged)
    assert plain["tally"]["first_counts"] == {"transform": 6}
    assert json.loads(json.dumps(summary.tally.first_counts)) == {"transform": 6}
    assert json.loads(json.dumps(summary.counts.stage_within)) == dict(summary.counts.stage_within)
