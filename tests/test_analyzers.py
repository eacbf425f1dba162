"""Analyzer comparison: vocabularies and statistics decide transform.analyzer; lookups and graph shape don't."""
from parity.compare import analyzers


def test_a_vocabulary_with_other_tokens_differs_and_names_them():
    entries = analyzers.compare({"vocabulary:zone": ["a", "b", "c"]}, {"vocabulary:zone": ["a", "b"]})
    assert entries[0]["equal"] is False and "left only: 'c'" in entries[0]["detail"]
    assert analyzers.analyzers_differ(entries) is True


def test_statistics_equal_within_float32_rounding_are_equal():
    entries = analyzers.compare({"constant:scale_to_z_score_sub_y": 412.2611083984375},
                                {"constant:scale_to_z_score_sub_y": 412.2611389160156})
    assert entries[0]["equal"] is True and "equal" in entries[0]["detail"]
    assert analyzers.analyzers_differ(entries) is False


def test_a_different_mean_is_an_analyzer_difference():
    entries = analyzers.compare({"constant:scale_to_z_score_sub_y": 20.9}, {"constant:scale_to_z_score_sub_y": 21.3})
    assert analyzers.analyzers_differ(entries) is True


def test_lookup_parameters_and_one_sided_constants_are_not_analyzer_differences():
    left = {"constant:compute_and_apply_vocabulary_apply_vocab_sub_x": 5, "constant:a_default_value": -1}
    right = {"constant:compute_and_apply_vocabulary_apply_vocab_sub_x": 4, "constant:b_default_value": -1}
    entries = analyzers.compare(left, right)
    assert {e["kind"] for e in entries} == {"lookup", "graph"}
    assert analyzers.analyzers_differ(entries) is False


def test_nothing_compared_is_unknown():
    assert analyzers.analyzers_differ(analyzers.compare(None, {"vocabulary:x": []})) is None
