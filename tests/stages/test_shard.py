"""Aggregates are exact and order-independent unless a side asks for sequential float combining."""
import random

from parity.config import AggregateSpec
from parity.stages import shard


def _aggregate(spec, values, chunks):
    states = []
    for chunk in chunks:
        agg = shard.Aggregator((spec,))
        for i in chunk:
            agg.add(("g",), {"x": values[i]}, (i, i))
        states.append(agg.groups[("g",)])
    return shard.finish_group((spec,), shard.merge_group_states((spec,), states))["s"]


def test_exact_float_sums_do_not_depend_on_batching_or_order():
    rnd = random.Random(4)
    values = [rnd.uniform(-1e6, 1e6) * 10 ** rnd.randint(-8, 8) for _ in range(500)]
    spec = AggregateSpec("s", "sum", "x")
    order = list(range(500))
    first = _aggregate(spec, values, [order[:100], order[100:]])
    rnd.shuffle(order)
    second = _aggregate(spec, values, [order[:333], order[333:]])
    assert first == second == __import__("math").fsum(values)


def test_sequential_sums_round_like_a_streaming_combiner_and_can_differ_from_exact():
    values = [1e16, 1.0, -1e16, 1.0]
    exact = _aggregate(AggregateSpec("s", "sum", "x"), values, [[0, 1, 2, 3]])
    sequential = _aggregate(AggregateSpec("s", "sum", "x", "sequential"), values, [[2, 3], [0, 1]])
    assert exact == 2.0
    assert sequential == ((1e16 + 1.0) + -1e16) + 1.0 != exact


def test_mean_of_ints_is_a_float_and_min_max_distinct_ignore_nulls():
    values = [3, None, 5, 5, 1]
    assert _aggregate(AggregateSpec("s", "mean", "x"), values, [[0, 1], [2, 3, 4]]) == 3.5
    assert _aggregate(AggregateSpec("s", "min", "x"), values, [[0, 1], [2, 3, 4]]) == 1
    assert _aggregate(AggregateSpec("s", "max", "x"), values, [[0, 1], [2, 3, 4]]) == 5
    assert _aggregate(AggregateSpec("s", "distinct_count", "x"), values, [[0, 1], [2, 3, 4]]) == 3
    assert _aggregate(AggregateSpec("s", "count", None), values, [[0, 1], [2, 3, 4]]) == 5
