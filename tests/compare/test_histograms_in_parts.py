"""Histograms computed in parts (each part's extent, merged; each part's counts on the merged bins, summed) are
`histograms_of` all the pairs, exactly, whatever order the parts are merged in (parity.compare.engine)."""
from __future__ import annotations

import functools
import random

import pytest

from parity.compare.histograms import counts_of, extent_of, histograms_of, histograms_of_counts, summed_counts


def _in_parts(parts: list[tuple[list[float], list[float]]], order: list[int]):
    extents = {i: extent_of(left, right, i) for i, (left, right) in enumerate(parts)}
    found = [extents[i] for i in order if extents[i] is not None]
    if not found:
        return None
    extent = functools.reduce(lambda a, b: a.merged(b), found)
    counts = [counts_of(*parts[i], extent) for i in order if extents[i] is not None]
    return histograms_of_counts(extent, functools.reduce(summed_counts, counts))


def _split(left: list[float], right: list[float], cuts: list[int]) -> list[tuple[list[float], list[float]]]:
    bounds = [0, *sorted(cuts), len(left)]
    return [(left[a:b], right[a:b]) for a, b in zip(bounds, bounds[1:])]


VALUES = {
    "spread": lambda rng: rng.uniform(-1e3, 1e3),
    "signed_zeros": lambda rng: rng.choice([0.0, -0.0, 0.0, 1.5, -2.5]),
    "one_value": lambda rng: 3.0,
    "huge": lambda rng: rng.choice([1.7e308, -1.7e308, 0.0, 1.0]),
    "integers": lambda rng: float(rng.randrange(-5, 6)),
}


@pytest.mark.parametrize("kind", sorted(VALUES))
@pytest.mark.parametrize("seed", range(6))
def test_histograms_in_parts_merged_in_any_order_equal_the_whole(kind, seed):
    rng = random.Random(seed)
    value = VALUES[kind]
    n = rng.randrange(0, 400)
    left, right = [value(rng) for _ in range(n)], [value(rng) for _ in range(n)]
    parts = _split(left, right, [rng.randrange(0, n + 1) for _ in range(rng.randrange(0, 6))])
    order = list(range(len(parts)))
    rng.shuffle(order)
    whole = histograms_of(left, right)
    assert repr(_in_parts(parts, order)) == repr(whole)  # repr: -0.0 and 0.0 print apart


def test_a_signed_zero_bound_is_the_first_found_in_key_order():
    # the largest value is -0.0 on the left in the second part and 0.0 on the right in the first part: the left
    # side's values come first in `histograms_of`, so -0.0 is the last edge, whatever part is merged first
    parts = [([-1.0, -2.0], [0.0, -5.0]), ([-0.0, -3.0], [-4.0, -6.0])]
    left, right = [v for p in parts for v in p[0]], [v for p in parts for v in p[1]]
    for order in ([0, 1], [1, 0]):
        assert repr(_in_parts(parts, order)["values"]["edges"][-1]) == "-0.0"
        assert repr(_in_parts(parts, order)) == repr(histograms_of(left, right))
