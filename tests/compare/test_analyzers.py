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


def test_each_feature_is_traced_to_the_constants_it_is_computed_from_in_tf1_and_tf2_exports():
    import os

    from parity.sets import analyzers as graph_analyzers

    root = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "tfx", "pipeline")
    expected = {"constant:bucketize_apply_buckets": ["fare_bucket_xf"],
                "constant:scale_to_z_score_sqrt_x": ["fare_xf"], "constant:scale_to_z_score_sub_y": ["fare_xf"],
                "constant:scale_to_z_score_1_sqrt_x": ["trip_miles_xf"],
                "constant:scale_to_z_score_1_sub_y": ["trip_miles_xf"]}
    for graph in ("Transform/transform_graph/3", "TransformTF2/transform_graph/4"):
        found = graph_analyzers.read_graph(os.path.join(root, graph))
        feeds, extracted = found.feeds, found.outputs
        assert {label: feeds[label] for label in expected} == expected, graph
        assert set(feeds) <= set(extracted)  # every label traced is an analyzer output the report compares
        # the vocabulary lookups' defaults feed their own feature only, never a z-score
        assert all(len(features) == 1 for features in feeds.values())
