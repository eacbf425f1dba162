"""A model stage compared key range by key range and merged (`ModelComparison.merged`, as the engine diff's
workers do) is the model stage compared over every key at once, whatever order the ranges come in."""
from __future__ import annotations

import dataclasses
import random

import pytest

from parity.compare.model_stage import ModelComparison, Upstream
from parity.config import ToleranceSpec
from parity.encoding import canonical
from parity.encoding.fingerprint import fingerprint
from parity.stages.model import DecisionSpec


def _outputs(values: dict[str, float]) -> dict[str, tuple[int, bytes]]:
    found = {}
    for key, p in values.items():
        out = {"p": [p, 1 - p], "logit": p * 4 - 2}
        found[key] = (fingerprint(out), canonical.encode(out))
    return found


@pytest.mark.parametrize("seed", range(5))
def test_the_model_stage_of_key_ranges_merged_in_any_order_is_the_whole_model_stage(seed):
    rng = random.Random(seed)
    keys = [str(i) for i in range(300)]
    left = {k: round(rng.random(), 3) for k in keys if rng.random() > 0.05}
    right = {k: (v if rng.random() < 0.5 else round(rng.random(), 3)) for k, v in left.items() if rng.random() > 0.05}
    upstream = {k: Upstream(rng.random() < 0.6, rng.choice(["input", "transform"])) for k in keys
                if rng.random() < 0.4}
    model = ModelComparison(ToleranceSpec(), DecisionSpec("p"), ("logit", "p"), 3, False)
    lo, ro = _outputs(left), _outputs(right)
    whole = model.compare(lo, ro, upstream)
    ranges: dict[int, list[str]] = {}
    for k in keys:
        ranges.setdefault(rng.randrange(16), []).append(k)
    parts = [model.compare({k: lo[k] for k in part if k in lo}, {k: ro[k] for k in part if k in ro},
                           {k: upstream[k] for k in part if k in upstream}) for part in ranges.values()]
    rng.shuffle(parts)
    merged = model.merged(parts)
    assert whole.diverged and whole.version_examples and whole.prediction_examples  # each part of it exercised
    assert dataclasses.asdict(merged) == dataclasses.asdict(whole)


def test_a_model_stage_cannot_be_changed_and_a_merge_leaves_its_parts_as_they_were():
    import pickle

    model = ModelComparison(ToleranceSpec(), DecisionSpec("p"), ("logit", "p"), 3, False)
    left, right = _outputs({"1": 0.2, "2": 0.9}), _outputs({"1": 0.7, "2": 0.9})
    part = model.compare(left, right, {})
    before = dataclasses.asdict(part)
    with pytest.raises(dataclasses.FrozenInstanceError):
        part.diverged = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        part.outputs["p"] = part.outputs["logit"]  # type: ignore[index]
    with pytest.raises(TypeError):
        part.version_examples[0]["left"]["p"] = 0.0  # type: ignore[index]
    merged = model.merged([part, part])
    assert merged.diverged == 2 * part.diverged == 2
    assert dataclasses.asdict(part) == before
    # a worker of the engine diff sends its key range's stage pickled: it comes back equal, and still frozen
    back = pickle.loads(pickle.dumps(part))
    assert back == part and dataclasses.asdict(back) == before
    with pytest.raises(TypeError):
        back.outputs.clear()
