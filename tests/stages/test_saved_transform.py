"""SavedTransform: the serving application of an exported TFT graph (the bundled taxi offline side's)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from parity import commands as run
from parity.config import load_config
from parity.replay.batch import side_field_types
from parity.stages.transform import SavedTransform

REPO = Path(__file__).resolve().parents[2]
TAXI_CONFIG = REPO / "pipelines" / "taxi" / "parity.yaml"
CAPTURE = REPO / "fixtures" / "taxi" / "capture" / "trips.jsonl"


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> tuple[str, dict]:
    config = load_config(str(TAXI_CONFIG))
    out = tmp_path_factory.mktemp("offline") / "offline"
    run.replay(config, "offline", str(out))
    side = next(s for s in config.sides if s.name == "offline")
    return str(out / "tft_output"), side_field_types(side)


def _records(count: int) -> list[dict]:
    with open(CAPTURE, encoding="utf-8") as handle:
        rows = [json.loads(line) for _, line in zip(range(count), handle)]
    # the shard stage's aggregates, which the graph reads as raw features
    return [{**row, "trips_1h": 3, "fare_mean_1h": 9.5} for row in rows]


def test_the_graph_is_applied_with_numpys_summarized_reprs_and_the_print_options_are_restored(graph, monkeypatch):
    # TensorFlow formats every input tensor into the message of a signature binding it discards; numpy prints
    # up to 1,000 values in full, which made a 1,000-row batch five times slower to transform than 2,000 rows
    path, types = graph
    transform = SavedTransform(path, types)
    transform.setup()
    reprs = []
    real = transform._output.transform_raw_features

    def spy(inputs, **kwargs):
        reprs.append(repr(np.arange(1000)))
        return real(inputs, **kwargs)

    monkeypatch.setattr(transform._output, "transform_raw_features", spy)
    records = _records(1000)
    features = transform.apply(records)
    assert len(reprs) == 1 and "..." in reprs[0] and len(reprs[0]) < 100
    assert "..." not in repr(np.arange(1000))  # the caller's print options are untouched
    assert len(features) == 1000
    assert set(features[0]) >= {"fare_z", "company_id", "miles_bucket", "trips_1h"}
    assert [f["trips_1h"] for f in features] == [3] * 1000
