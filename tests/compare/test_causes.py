"""Cause classification: each rule names its cause, and ambiguous divergences fall to `<stage>.unknown`."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from parity.compare.causes import (
    CAUSES,
    STAGES,
    CauseContext,
    classify,
    classify_coder,
    classify_input,
    classify_seed,
    classify_shard,
    classify_transform,
    classify_window,
    explain,
)

CTX = CauseContext()
NAMED = CauseContext(left_name="offline", right_name="production")
T_S = 1_700_000_039  # an event time, in seconds
T_US = T_S * 1_000_000
HOUR_US = 3_600_000_000
LATE = {"dropped": "late"}
CONTRACT_CAUSES = (
    "input.content", "window.timestamp_unit", "window.timestamp_shift", "window.boundary",
    "window.late_dropped", "shard.key", "shard.assignment", "shard.membership", "shard.combine_order",
    "coder.float_precision", "coder.int_precision", "coder.type", "coder.string", "coder.null", "seed.value",
    "seed.hash", "seed.nondeterministic", "transform.analyzer", "transform.feature_set", "transform.numeric",
    "transform.mapping",
)


def win(ts: int | None, *windows: list, late: bool = False) -> dict:
    value = {"timestamp_us": ts, "windows": list(windows) or [["global"]]}
    return {**value, "late": True} if late else value


def shard(key: object = ("zone-7",), sid: int = 3, **aggregates: object) -> dict:
    return {"key": list(key) if isinstance(key, tuple) else key, "shard": sid,
            "aggregates": aggregates or {"trips_1h": 4}}


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


# ------------------------------------------------------------------------------------------ the cause list


def test_causes_hold_the_contract_causes_and_one_unknown_per_stage() -> None:
    assert set(CAUSES) == set(CONTRACT_CAUSES) | {f"{s}.unknown" for s in STAGES}
    assert len(CAUSES) == len(set(CAUSES)) == 27
    assert [c.split(".")[0] for c in CAUSES] == sorted((c.split(".")[0] for c in CAUSES), key=STAGES.index)


@pytest.mark.parametrize("cause", CAUSES)
def test_every_cause_has_an_aggregate_explanation_with_its_count(cause: str) -> None:
    assert explain(cause, 3).startswith("3 records: ")
    assert explain(cause, 1).startswith("1 record: ")


def test_an_added_cause_still_gets_an_aggregate_explanation() -> None:
    assert explain("window.session_gap", 2) == (
        "2 records: diverge first at window (window.session_gap); compare an example with `parity show`")


def test_an_unknown_stage_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown stage 'sink'"):
        classify("sink", {}, {}, CTX)


# --------------------------------------------------------------------------------------------------- input


def test_different_raw_records_are_input_content_naming_the_fields() -> None:
    cause, text = classify_input({"id": 1, "fare": 1.5, "zone": "a"}, {"id": 1, "fare": 2.5}, CTX)
    assert cause == "input.content"
    assert "fare, zone" in text and "fare: 1.5 vs 2.5" in text


def test_equal_raw_records_are_not_blamed_on_content() -> None:
    assert classify_input({"id": 1}, {"id": 1}, CTX)[0] == "input.unknown"


# -------------------------------------------------------------------------------------------------- window


def test_thousandfold_timestamps_are_a_unit_mismatch() -> None:
    cause, text = classify("window", win(T_US), win(T_US * 1000), NAMED)
    assert cause == "window.timestamp_unit"
    assert text.startswith("production's event times are 1000x offline's: the sides read the timestamp in "
                           "units 1000x apart")


@pytest.mark.parametrize("factor", [1e6, 1e9, 1.005e3, 1 / 1000])
def test_timestamps_a_power_of_a_thousand_apart_within_one_percent_are_a_unit_mismatch(factor: float) -> None:
    assert classify_window(win(T_US), win(int(T_US * factor)), CTX)[0] == "window.timestamp_unit"


def test_a_ratio_two_percent_off_a_thousand_is_a_shift_not_a_unit() -> None:
    assert classify_window(win(T_US), win(int(T_US * 1020)), CTX)[0] == "window.timestamp_shift"


def test_a_whole_hour_offset_is_a_shift_that_points_at_time_zones() -> None:
    ctx = CauseContext(left_env={"TZ": "UTC"}, right_env={"TZ": "America/New_York"})
    cause, text = classify_window(win(T_US), win(T_US + HOUR_US), ctx)
    assert cause == "window.timestamp_shift"
    assert "+3600 s" in text and "time zone" in text
    assert "TZ is UTC on left, America/New_York on right" in text


def test_a_one_microsecond_offset_points_at_float_seconds() -> None:
    cause, text = classify_window(win(T_US + 2), win(T_US + 1), CTX)
    assert cause == "window.timestamp_shift"
    assert "-1 us" in text and "float seconds" in text


def test_late_on_one_side_only_is_late_dropped() -> None:
    cause, text = classify_window(win(T_US, [0, 60], late=True), win(T_US, [0, 60]), NAMED)
    assert cause == "window.late_dropped"
    assert text.startswith("dropped as late on offline but kept on production")


def test_same_time_other_windows_is_a_boundary_difference() -> None:
    t = 60_000_000
    cause, text = classify_window(win(t, [60_000_000, 120_000_000]), win(t, [0, 60_000_000]), CTX)
    assert cause == "window.boundary"
    assert "[60, 120) s (60 s)" in text and "exactly on a window edge" in text


def test_a_missing_timestamp_on_one_side_is_window_unknown() -> None:
    assert classify_window(win(None), win(T_US), CTX)[0] == "window.unknown"


def test_a_zero_timestamp_is_never_read_as_a_unit_mismatch() -> None:
    assert classify_window(win(0), win(1000), CTX)[0] == "window.timestamp_shift"


def test_equal_window_values_are_window_unknown() -> None:
    assert classify_window(win(T_US), {**win(T_US), "pane": 2}, CTX)[0] == "window.unknown"


# --------------------------------------------------------------------------------------------------- shard


def test_different_grouping_keys_are_shard_key() -> None:
    cause, text = classify_shard(shard(("Zone-7",)), shard(("zone-7",)), CTX)
    assert cause == "shard.key"
    assert "'Zone-7' on left and 'zone-7' on right" in text and "case folding" in text


def test_an_int_key_against_a_float_key_is_shard_key_of_another_type() -> None:
    cause, text = classify_shard(shard((7,)), shard((7.0,)), CTX)
    assert cause == "shard.key" and "different types" in text


def test_same_key_other_shard_is_shard_assignment() -> None:
    cause, text = classify_shard(shard(sid=3), shard(sid=11), CTX)
    assert cause == "shard.assignment"
    assert "shard 3 on left and 11 on right" in text


def test_aggregates_off_by_rounding_are_combine_order() -> None:
    cause, text = classify_shard(shard(fare_sum=0.1 + 0.2 + 0.3), shard(fare_sum=0.3 + 0.2 + 0.1), CTX)
    assert cause == "shard.combine_order"
    assert "fare_sum" in text


def test_a_tolerance_callback_can_widen_combine_order() -> None:
    left, right = shard(fare_mean=10.0), shard(fare_mean=10.001)
    assert classify_shard(left, right, CTX)[0] == "shard.membership"
    assert classify_shard(left, right, CTX, tolerance_ok=lambda n, a, b: abs(a - b) < 0.01)[0] == \
        "shard.combine_order"


def test_a_tolerance_callback_never_turns_counts_into_combine_order() -> None:
    assert classify_shard(shard(trips_1h=4), shard(trips_1h=5), CTX,
                          tolerance_ok=lambda n, a, b: True)[0] == "shard.membership"


def test_different_counts_are_shard_membership() -> None:
    cause, text = classify_shard(shard(trips_1h=4, fare_sum=10.0), shard(trips_1h=5, fare_sum=10.0), CTX)
    assert cause == "shard.membership"
    assert "trips_1h: 4 vs 5" in text


def test_an_aggregate_on_one_side_only_is_shard_unknown() -> None:
    assert classify_shard(shard(trips_1h=4), shard(trips_1h=4, fare_max=9.0), CTX)[0] == "shard.unknown"


def test_a_late_side_at_shard_is_shard_unknown() -> None:
    cause, text = classify_shard(shard(), LATE, NAMED)
    assert cause == "shard.unknown" and "dropped as late on production" in text


# --------------------------------------------------------------------------------------------------- coder


def test_float32_rounding_is_coder_float_precision() -> None:
    cause, text = classify_coder({"fare": 12.3}, {"fare": np.float32(12.3)}, NAMED)
    assert cause == "coder.float_precision"
    assert text.startswith("field fare: 12.3 on offline, 12.300000190734863 on production")


def test_a_big_id_through_a_double_is_coder_int_precision() -> None:
    big = 2**53 + 1
    assert classify_coder({"id": big}, {"id": 2**53}, CTX)[0] == "coder.int_precision"
    assert classify_coder({"id": big}, {"id": float(big)}, CTX)[0] == "coder.int_precision"


def test_small_ints_that_differ_are_not_int_precision() -> None:
    assert classify_coder({"n": 3}, {"n": 4}, CTX)[0] == "coder.unknown"


@pytest.mark.parametrize(("a", "b"), [(2, 2.0), ("zone", b"zone"), (True, 1), (0.5, np.float32(0.5))])
def test_same_value_of_another_type_is_coder_type(a: object, b: object) -> None:
    cause, text = classify_coder({"v": a}, {"v": b}, CTX)
    assert cause == "coder.type"
    assert "same value" in text


def test_a_type_difference_inside_a_list_is_found_by_position() -> None:
    cause, text = classify_coder({"tags": ["a", "b"]}, {"tags": ["a", b"b"]}, CTX)
    assert cause == "coder.type"
    assert text.startswith("field tags[1]: str on left, bytes on right")


@pytest.mark.parametrize(("a", "b", "how"), [
    ("Zu\u0308rich", "Z\u00fcrich", "NFC"), ("\uff21BC", "ABC", "NFKC"),
    ("Straße", "STRASSE", "case folding"),
])
def test_unicode_forms_and_case_are_coder_string(a: str, b: str, how: str) -> None:
    cause, text = classify_coder({"zone": a}, {"zone": b}, CTX)
    assert cause == "coder.string" and how in text


@pytest.mark.parametrize(("a", "b"), [(None, 0.0), (float("nan"), None), (None, ""), (None, [])])
def test_null_against_default_is_coder_null(a: object, b: object) -> None:
    assert classify_coder({"tip": a}, {"tip": b}, CTX)[0] == "coder.null"


def test_a_field_lost_in_the_round_trip_is_coder_null() -> None:
    cause, text = classify_coder({"id": 1, "tip": 0.0}, {"id": 1}, NAMED)
    assert cause == "coder.null"
    assert "missing on production after the round trip, 0.0 on offline" in text


def test_two_different_defaults_are_not_null_but_unknown() -> None:
    assert classify_coder({"tip": 0}, {"tip": ""}, CTX)[0] == "coder.unknown"


def test_unrelated_strings_are_coder_unknown() -> None:
    assert classify_coder({"zone": "north"}, {"zone": "south"}, CTX)[0] == "coder.unknown"


def test_the_first_differing_field_in_sorted_order_decides() -> None:
    left, right = {"b_fare": 12.3, "a_id": 7}, {"b_fare": np.float32(12.3), "a_id": 7.0}
    assert classify_coder(left, right, CTX)[0] == "coder.type"
    assert classify_coder(right, left, CTX)[0] == "coder.type"


def test_a_failed_round_trip_is_coder_unknown_with_the_message() -> None:
    cause, text = classify_coder({"id": 1}, {"error": "avro: field 'tip' is not nullable"}, NAMED)
    assert cause == "coder.unknown"
    assert text == "the coder stage failed on production: avro: field 'tip' is not nullable"


# ---------------------------------------------------------------------------------------------------- seed


def test_different_seeds_are_seed_value() -> None:
    ctx = CauseContext(left_seed=42, right_seed="42", left_seed_hashes=("xxh3",), right_seed_hashes=("xxh3",))
    cause, text = classify_seed({"split": "train"}, {"split": "eval"}, ctx)
    assert cause == "seed.value"
    assert "(left 42, right '42')" in text


def test_an_unseeded_side_is_seed_value() -> None:
    cause, text = classify_seed({"s": True}, {"s": False}, CauseContext(left_seed=7))
    assert cause == "seed.value" and "right unseeded" in text


def test_the_salted_python_hash_is_seed_hash_naming_pythonhashseed() -> None:
    ctx = CauseContext(left_seed=1, right_seed=1, left_seed_hashes=("xxh3",), right_seed_hashes=("python",),
                       left_env={"PYTHONHASHSEED": "0"})
    cause, text = classify_seed({"bucket": 3}, {"bucket": 5}, ctx)
    assert cause == "seed.hash"
    assert "PYTHONHASHSEED is 0 on left and unset on right" in text


def test_python_hash_on_both_sides_is_seed_hash() -> None:
    ctx = CauseContext(left_seed_hashes=("python",), right_seed_hashes=("python",),
                       left_env={"PYTHONHASHSEED": "1"}, right_env={"PYTHONHASHSEED": "1"})
    cause, text = classify_seed({"bucket": 3}, {"bucket": 5}, ctx)
    assert cause == "seed.hash" and "Python versions" in text


def test_different_hash_functions_are_seed_hash() -> None:
    ctx = CauseContext(left_seed_hashes=("md5",), right_seed_hashes=("crc32",))
    cause, text = classify_seed({"s": True}, {"s": False}, ctx)
    assert cause == "seed.hash" and "left hashes with md5, right with crc32" in text


def test_a_noisy_seed_stage_is_seed_nondeterministic_even_with_other_seeds() -> None:
    ctx = CauseContext(left_seed=1, right_seed=2, nondeterministic_stages=frozenset({"seed"}))
    assert classify("seed", {"s": True}, {"s": False}, ctx)[0] == "seed.nondeterministic"


def test_python_hash_without_manifests_says_to_fix_pythonhashseed() -> None:
    ctx = CauseContext(left_seed_hashes=("python",), right_seed_hashes=("python",))
    cause, text = classify_seed({"bucket": 3}, {"bucket": 5}, ctx)
    assert cause == "seed.hash"
    assert text == ("seeded outputs bucket differ: both sides use the python hash; hash() is salted per "
                    "process unless PYTHONHASHSEED is fixed on both sides")


def test_equal_seeds_and_hashes_are_seed_unknown() -> None:
    ctx = CauseContext(left_seed=1, right_seed=1, left_seed_hashes=("xxh3",), right_seed_hashes=("xxh3",))
    assert classify_seed({"s": True}, {"s": False}, ctx)[0] == "seed.unknown"


def test_an_op_on_one_side_only_is_not_blamed_on_the_seed() -> None:
    ctx = CauseContext(left_seed=1, right_seed=2)
    assert classify_seed({"s": True}, {"s": True, "split": "eval"}, ctx)[0] == "seed.unknown"


# ----------------------------------------------------------------------------------------------- transform


def test_a_feature_on_one_side_only_is_transform_feature_set() -> None:
    cause, text = classify_transform({"a": 1, "b": 2}, {"a": 1, "c": 2}, NAMED)
    assert cause == "transform.feature_set"
    assert "b only on offline; c only on production" in text


def test_run_level_one_sided_features_are_transform_feature_set() -> None:
    ctx = CauseContext(left_only_features=frozenset({"fare_z"}))
    assert classify_transform({"fare_z": 1.0}, {"fare_z": 2.0}, ctx)[0] == "transform.feature_set"


def test_differing_analyzers_are_transform_analyzer() -> None:
    ctx = CauseContext(analyzers_differ=True)
    assert classify_transform({"zone_id": 3}, {"zone_id": 4}, ctx)[0] == "transform.analyzer"


def test_small_float_deltas_are_transform_numeric_with_the_max_delta() -> None:
    left = {"fare_z": np.float32(0.5), "dist": [1.0, 2.0], "zone": "a"}
    right = {"fare_z": np.float32(0.75), "dist": [1.0, 2.125], "zone": "a"}
    cause, text = classify_transform(left, right, CauseContext(analyzers_differ=False))
    assert cause == "transform.numeric"
    assert text == "features dist, fare_z differ numerically, max |delta| 0.25 on fare_z"


def test_numeric_with_unknown_analyzers_says_they_were_not_compared() -> None:
    cause, text = classify_transform({"x": 1.0}, {"x": 1.0 + 1e-9}, CTX)
    assert cause == "transform.numeric"
    assert "float32 or batch-size" in text and "analyzers not compared" in text


def test_features_within_tolerance_are_left_out_of_the_explanation() -> None:
    left, right = {"x": 1.0, "y": 2.0}, {"x": 1.5, "y": 2.0001}
    cause, text = classify_transform(left, right, CauseContext(analyzers_differ=False),
                                     tolerance_ok=lambda name, a, b: name == "y")
    assert (cause, text) == ("transform.numeric", "features x differ numerically, max |delta| 0.5 on x")


def test_the_tolerance_callback_only_sees_numeric_pairs() -> None:
    def numeric_only(name: str, a: object, b: object) -> bool:
        assert isinstance(a, float) and isinstance(b, float)
        return True
    left, right = {"x": 1.0, "zone": "a"}, {"x": 1.5, "zone": "b"}
    cause, text = classify_transform(left, right, CTX, tolerance_ok=numeric_only)
    assert cause == "transform.mapping" and text.startswith("features zone differ (zone: 'a' on left")


def test_a_string_feature_that_differs_is_transform_mapping() -> None:
    cause, text = classify_transform({"zone": "a", "x": 1}, {"zone": "b", "x": 2}, NAMED)
    assert cause == "transform.mapping"
    assert "(zone: 'a' on offline, 'b' on production)" in text


def test_nan_against_a_number_is_mapping_not_numeric() -> None:
    assert classify_transform({"b": float("nan")}, {"b": 2.0}, CTX)[0] == "transform.mapping"


def test_a_nondeterministic_transform_is_transform_unknown() -> None:
    ctx = CauseContext(nondeterministic_stages=frozenset({"transform"}), analyzers_differ=True)
    cause, text = classify("transform", {"x": 1.0}, {"x": 2.0}, ctx)
    assert cause == "transform.unknown" and "replays of one side disagree" in text


def test_a_failed_transform_is_transform_unknown() -> None:
    assert classify_transform({"error": "boom"}, {"x": 1.0}, CTX)[0] == "transform.unknown"


# ------------------------------------------------------------------------------------------- explanations


def test_long_raw_values_are_cut_to_forty_characters() -> None:
    cause, text = classify_coder({"note": "x" * 100}, {"note": "y" * 100}, CTX)
    assert cause == "coder.unknown"
    assert "'" + "x" * 36 + "..." in text and "x" * 41 not in text


def test_redacted_explanations_carry_no_raw_values() -> None:
    ctx = CauseContext(redact=True)
    _, text = classify_coder({"zone": "north", "note": 1}, {"zone": "south", "note": 1}, ctx)
    assert "north" not in text and "south" not in text and "zone" in text


def test_explanations_are_deterministic_whatever_the_key_order() -> None:
    a = {f"f{i}": i for i in range(8)}
    b = {f"f{i}": i + 1 for i in reversed(range(8))}
    texts = {classify_input(a, b, CTX)[1], classify_input(dict(reversed(a.items())), b, CTX)[1]}
    assert texts == {"the raw records differ in f0, f1, f2, f3, f4 and 3 more (f0: 0 vs 1); "
                     "check the capture path, format and schema each side reads"}


def test_replay_noise_at_an_earlier_stage_is_noted_in_the_explanation() -> None:
    ctx = CauseContext(nondeterministic_stages=frozenset({"shard"}))
    cause, text = classify("shard", shard(sid=1), shard(sid=2), ctx)
    assert cause == "shard.assignment" and text.endswith("replays of one side also disagree at this stage")


def test_a_float32_feature_against_an_equal_double_is_transform_unknown() -> None:
    cause, text = classify_transform({"x": np.float32(0.5)}, {"x": 0.5}, CTX)
    assert cause == "transform.unknown"
    assert text == "features x differ only in numeric type (e.g. numpy.float32 vs float)"


def test_a_sub_second_offset_is_written_in_exact_seconds() -> None:
    cause, text = classify_window(win(T_US), win(T_US - 1500), CTX)
    assert cause == "window.timestamp_shift"
    assert text.startswith("right's event time is -0.0015 s from left's")


def test_a_boundary_explanation_writes_window_edges_in_whole_seconds() -> None:
    left, right = win(T_US, [T_US - 39_000_000, T_US + 21_000_000]), win(T_US, [T_US, T_US + 60_000_000])
    _, text = classify_window(left, right, CTX)
    assert "left assigns [1700000000, 1700000060) s (60 s) and right [1700000039, 1700000099) s" in text


@pytest.mark.parametrize("stage", STAGES[1:])
def test_a_failed_stage_on_one_side_is_that_stages_unknown(stage: str) -> None:
    cause, text = classify(stage, {"error": "ValueError: bad"}, {"x": 1}, NAMED)
    assert (cause, text) == (f"{stage}.unknown", f"the {stage} stage failed on offline: ValueError: bad")


@pytest.mark.parametrize("stage", STAGES)
def test_values_beyond_float_range_never_crash_a_classifier(stage: str) -> None:
    huge = 10 ** 400
    left = {"timestamp_us": huge, "windows": [["global"]]} if stage == "window" else \
        shard(v=huge) if stage == "shard" else {"v": huge}
    right = {"timestamp_us": 3, "windows": [["global"]]} if stage == "window" else \
        shard(v=1.5) if stage == "shard" else {"v": 1.5}
    cause, _ = classify(stage, left, right, CTX)
    assert cause.startswith(stage + ".")


def test_a_different_bucket_index_is_a_mapping_difference_not_numerics():
    from parity.compare.causes import CauseContext, classify_transform

    cause, _ = classify_transform({"bucket": 3, "fare": 1.5}, {"bucket": 4, "fare": 1.5}, CauseContext())
    assert cause == "transform.mapping"


def test_a_bucket_moved_by_a_noisy_boundary_is_an_analyzer_difference_and_another_feature_keeps_its_own_cause():
    from parity.compare.causes import CauseContext, classify_transform

    left, right = {"fare_bucket_xf": 2, "year_xf": 2007}, {"fare_bucket_xf": 3, "year_xf": 2007}
    noisy = CauseContext(analyzers_differ=False, noise_unbounded=frozenset({"fare_bucket_xf"}))
    assert classify_transform(left, right, noisy)[0] == "transform.analyzer"
    assert classify_transform(left, right, CauseContext(analyzers_differ=False))[0] == "transform.mapping"
    both = {"fare_bucket_xf": 3, "year_xf": 2006}  # the year differs too: its own cause names the record
    assert classify_transform(left, both, noisy)[0] == "transform.mapping"


def test_a_z_score_beyond_its_noise_bound_is_numeric_and_says_so():
    from parity.compare.causes import CauseContext, classify_transform

    context = CauseContext(analyzers_differ=False, noise_bounded=frozenset({"fare_xf"}))
    cause, text = classify_transform({"fare_xf": 1.0}, {"fare_xf": 1.001}, context)
    assert cause == "transform.numeric" and "beyond the analysis-noise bound of fare_xf" in text
