"""The `model` stage compared (contract section 8): the two sides' model outputs per paired record, judged with
what the stages before it concluded about the record, for the report's `model` stage and `prediction_impact`.

A record's upstream judgement comes from the diff (the tally's `upstream`: diverged at a stage, or within
tolerance; absent: every stage matched). The model stage only adds to it:
- upstream matched, outputs differ beyond tolerance or the decision differs: the record's first divergence is
  the model, cause `model.version` (equal features, different outputs: a different model, or one that does not
  give equal features equal outputs); outputs differ within tolerance only: `within_tolerance`;
- upstream within tolerance (the user's tolerance or analysis noise): its outputs' differences are what those
  feature differences explain; the judgement carries through and the record does not diverge at `model`;
- upstream diverged: the record's first divergence stays where it was; the outputs say whether it matters:
  `prediction_changed` (an output beyond tolerance, cause `model.prediction`) and `decision_flips`.
Pure: plain data in, a `ModelStage` of counts out.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from parity.compare.frozen import FrozenMap, frozen_json
from parity.config import ToleranceSpec
from parity.encoding import canonical
from parity.stages.model import DecisionSpec

VERSION = "model.version"
PREDICTION = "model.prediction"


@dataclass(frozen=True)
class Upstream:
    """What the stages before the model concluded about one paired record that differs there."""

    diverged: bool
    first_stage: str


@dataclass(frozen=True)
class OutputStats:
    """One output over the paired records: all differences (the report's `features` entry) and, of the records
    diverged upstream, the changes beyond tolerance and the largest |delta| (`prediction_impact.outputs`)."""

    mismatched: int = 0
    within_tolerance: int = 0
    max_abs_delta: float | None = None
    changed: int = 0
    impact_max_abs_delta: float | None = None

    def merged(self, other: OutputStats) -> OutputStats:
        """These statistics and another key range's: counts summed, the largest deltas kept."""
        return OutputStats(self.mismatched + other.mismatched, self.within_tolerance + other.within_tolerance,
                           _larger(self.max_abs_delta, other.max_abs_delta), self.changed + other.changed,
                           _larger(self.impact_max_abs_delta, other.impact_max_abs_delta))


@dataclass(frozen=True)
class ModelStage:
    """The model stage's counts, causes, per-output statistics, examples and prediction impact, as one frozen
    value: `outputs` is a read-only mapping and the examples frozen JSON (parity.compare.frozen; `thawed` gives
    them back as plain JSON), so a merge or the report cannot change what a key range's comparison found."""

    diverged: int = 0                   # paired records whose outputs' fingerprints differ
    first_diverged: int = 0             # ... whose first divergent stage is the model (cause model.version)
    within_tolerance: int = 0           # ... whose output differences are within tolerance or carried through
    matched_to_within: int = 0          # records every earlier stage matched, now within tolerance
    records_diverged_upstream: int = 0
    one_side_only: int = 0              # ... of which reached the model on one side only (e.g. dropped as late)
    prediction_changed: int = 0
    decision_flips: int = 0
    decision_flips_first_at_model: int = 0
    same_model: bool | None = None      # the sides' model files are the same (None: not known)
    outputs: Mapping[str, OutputStats] = field(default_factory=FrozenMap)
    version_examples: tuple[Mapping[str, Any], ...] = ()
    prediction_examples: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "outputs", FrozenMap(self.outputs))
        object.__setattr__(self, "version_examples", frozen_json(self.version_examples))
        object.__setattr__(self, "prediction_examples", frozen_json(self.prediction_examples))


@dataclass(frozen=True)
class ModelComparison:
    """How a diff's model stage is compared (`compare_models`' settings), as plain picklable data: the client
    compares the whole diff's, or each worker of the engine diff its key range's (parity.compare.engine), and
    `merged` joins those."""

    tolerance: ToleranceSpec
    decision: DecisionSpec | None
    output_names: tuple[str, ...]
    examples: int
    same_model: bool | None

    def compare(self, left: Mapping[str, tuple[int, bytes]], right: Mapping[str, tuple[int, bytes]],
                upstream: Mapping[str, Upstream]) -> ModelStage:
        return compare_models(left, right, upstream, self.tolerance, self.decision, list(self.output_names),
                              self.examples, self.same_model)

    def merged(self, stages: list[ModelStage]) -> ModelStage:
        """The model stage of the keys of several key ranges, each range's compared apart (`compare`), in any
        order: counts summed, largest deltas kept, and the first `examples` examples by key text, as
        `compare_models` keeps them over all the keys (each range kept its own first ones)."""
        counts = {name: sum(getattr(stage, name) for stage in stages) for name in _COUNTS}
        outputs = {name: OutputStats() for name in self.output_names}
        for stage in stages:
            for name, theirs in stage.outputs.items():
                outputs[name] = outputs[name].merged(theirs)
        # keys are unique (one range each): the first by key text are the first over all the keys
        version = sorted((e for stage in stages for e in stage.version_examples), key=lambda e: e["key"])
        prediction = sorted((e for stage in stages for e in stage.prediction_examples), key=lambda e: e["key"])
        return ModelStage(**counts, same_model=self.same_model, outputs=outputs,
                          version_examples=tuple(version[:self.examples]),
                          prediction_examples=tuple(prediction[:self.examples]))


_COUNTS = ("diverged", "first_diverged", "within_tolerance", "matched_to_within", "records_diverged_upstream",
           "one_side_only", "prediction_changed", "decision_flips", "decision_flips_first_at_model")


def compare_models(left: Mapping[str, tuple[int, bytes]], right: Mapping[str, tuple[int, bytes]],
                   upstream: Mapping[str, Upstream], tolerance: ToleranceSpec, decision: DecisionSpec | None,
                   output_names: list[str], examples: int, same_model: bool | None) -> ModelStage:
    """Compares each key on both sides' model outputs, (fingerprint, canonical bytes) per key text (see the module
    docstring), in key order."""
    n: Counter[str] = Counter()
    outputs = {name: _OutputCounts() for name in output_names}
    version_examples: list[dict] = []
    prediction_examples: list[dict] = []
    both = set(left) & set(right)
    for key, up in upstream.items():
        if up.diverged and key not in both:  # dropped before the model on a side: no prediction there
            n["records_diverged_upstream"] += 1
            n["one_side_only"] += key in left or key in right
    for key in sorted(both):
        (lfp, lraw), (rfp, rraw) = left[key], right[key]
        up = upstream.get(key)
        diverged_upstream = up is not None and up.diverged
        n["records_diverged_upstream"] += diverged_upstream
        if lfp == rfp:
            continue
        n["diverged"] += 1
        lout, rout = canonical.decode(lraw), canonical.decode(rraw)  # only a differing pair's values are read
        deltas = {name: _delta(lout.get(name), rout.get(name), tolerance, name) for name in output_names}
        beyond = any(not ok for ok, _ in deltas.values())
        flip = decision is not None and decision.decide(lout[decision.output]) != decision.decide(
            rout[decision.output])
        carried = up is not None and not up.diverged
        first_here = up is None and (beyond or flip)
        for name, (ok, delta) in deltas.items():
            if not (ok and delta == 0.0 and lout.get(name) == rout.get(name)):
                outputs[name].add(ok, delta, carried, diverged_upstream)
        example = {"key": key, "left": lout, "right": rout}
        if first_here:
            n["first_diverged"] += 1
            n["decision_flips_first_at_model"] += flip
            if len(version_examples) < examples:
                version_examples.append(example)
        elif up is None or carried:
            n["within_tolerance"] += 1
            n["matched_to_within"] += up is None
        if diverged_upstream:
            n["prediction_changed"] += beyond
            n["decision_flips"] += flip
            if (beyond or flip) and len(prediction_examples) < examples:
                prediction_examples.append({**example, "upstream": up.first_stage})  # type: ignore[union-attr]
    return ModelStage(**{name: n[name] for name in _COUNTS}, same_model=same_model,
                      outputs={name: counts.frozen() for name, counts in outputs.items()},
                      version_examples=tuple(version_examples), prediction_examples=tuple(prediction_examples))


class _OutputCounts:
    """One output's `OutputStats` while `compare_models` counts them."""

    def __init__(self) -> None:
        self.mismatched = self.within_tolerance = self.changed = 0
        self.max_abs_delta: float | None = None
        self.impact_max_abs_delta: float | None = None

    def add(self, ok: bool, delta: float | None, carried: bool, diverged_upstream: bool) -> None:
        """One record whose values of this output differ: within tolerance (`ok`), or carried through from a
        judgement upstream, or a mismatch; and, of a record diverged upstream, a change when beyond tolerance."""
        if ok or carried:
            self.within_tolerance += 1
        else:
            self.mismatched += 1
        self.max_abs_delta = _larger(self.max_abs_delta, delta)
        if diverged_upstream:
            self.changed += not ok
            self.impact_max_abs_delta = _larger(self.impact_max_abs_delta, delta)

    def frozen(self) -> OutputStats:
        return OutputStats(self.mismatched, self.within_tolerance, self.max_abs_delta, self.changed,
                           self.impact_max_abs_delta)


def _delta(a: Any, b: Any, tolerance: ToleranceSpec, name: str) -> tuple[bool, float | None]:
    """(within tolerance, largest |a - b|) of one output's two values; a missing or non-numeric pair is beyond."""
    if a is None or b is None:
        return a == b, None
    x, y = np.asarray(a, np.float64).reshape(-1), np.asarray(b, np.float64).reshape(-1)
    if x.shape != y.shape:
        return False, None
    tol = tolerance.for_feature(name)
    with np.errstate(invalid="ignore"):
        diff = np.abs(x - y)
        both_nan = np.isnan(x) & np.isnan(y)
        ok = bool(np.all(both_nan | (diff <= tol.abs + tol.rel * np.abs(y))))
    finite = diff[np.isfinite(diff)]
    delta = float(finite.max()) if finite.size else (0.0 if both_nan.all() else math.inf)
    return ok, delta


def _larger(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None or b > a else a
