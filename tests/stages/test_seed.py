"""The seed stage: seeded ops are pure functions of (seed, op name, key bytes), unless unseeded on purpose."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.stages.seed import (
    SEED_HASHES,
    FunctionOp,
    SampleOp,
    SeedSpec,
    SplitOp,
    draw,
    seed_outputs_many,
)
from tests.stages.oracles import seed_outputs

REPO = Path(__file__).resolve().parents[2]
KEYS = [f"trip-{i}".encode() for i in range(200)]


def uniform(rng: random.Random) -> float:
    return rng.random()


def noise(record: dict[str, Any], rng: random.Random) -> float:
    return record["fare"] + rng.gauss(0.0, 1.0)


def spec_for(hash_name: str, value: int | str | None = 42) -> SeedSpec:
    return SeedSpec(value, (
        ("in_sample", SampleOp(0.5, hash=hash_name)),
        ("split", SplitOp((("train", 8), ("eval", 2)), hash=hash_name)),
        ("noise", FunctionOp(noise)),
    ))


def outputs_for(spec: SeedSpec, keys: list[bytes]) -> list[dict[str, Any]]:
    return [seed_outputs(spec, {"fare": 10.0}, key) for key in keys]


def outputs_in_subprocess(hash_name: str, python_hash_seed: str) -> list[dict[str, Any]]:
    """`outputs_for(spec_for(hash_name), KEYS)` computed in a fresh interpreter with PYTHONHASHSEED set."""
    code = (
        "import json, sys\n"
        "from tests.stages.test_seed import KEYS, outputs_for, spec_for\n"
        "json.dump(outputs_for(spec_for(sys.argv[1]), KEYS), sys.stdout)\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": python_hash_seed,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, hash_name], cwd=REPO, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.mark.parametrize("hash_name", SEED_HASHES)
def test_same_seed_and_key_give_the_same_outputs_on_every_call(hash_name: str) -> None:
    assert outputs_for(spec_for(hash_name), KEYS) == outputs_for(spec_for(hash_name), KEYS)


@pytest.mark.parametrize("hash_name", ["xxh3", "md5", "crc32"])
def test_stable_hashes_give_the_same_outputs_in_a_process_with_another_hash_seed(hash_name: str) -> None:
    here = outputs_for(spec_for(hash_name), KEYS)

    assert outputs_in_subprocess(hash_name, "12345") == json.loads(json.dumps(here))


@pytest.mark.slow  # interpreters started with several hash seeds
def test_python_hash_differs_between_processes_with_different_hash_seeds() -> None:
    first = outputs_in_subprocess("python", "1")
    second = outputs_in_subprocess("python", "2")

    assert outputs_in_subprocess("python", "1") == first  # the salt, not chance, makes the difference
    splits_differ = sum(a["split"] != b["split"] for a, b in zip(first, second))
    samples_differ = sum(a["in_sample"] != b["in_sample"] for a, b in zip(first, second))
    assert splits_differ > 40 and samples_differ > 60  # about 32% and 50% of 200 expected


def test_function_ops_see_the_same_rng_whatever_the_hash() -> None:
    noises = {h: [o["noise"] for o in outputs_for(spec_for(h), KEYS)] for h in SEED_HASHES}

    assert len({tuple(v) for v in noises.values()}) == 1
    assert len(set(noises["xxh3"])) == len(KEYS)  # one stream per key


@pytest.mark.parametrize("hash_name", SEED_HASHES)
def test_sample_rate_one_tenth_keeps_about_one_tenth_of_twenty_thousand_keys(hash_name: str) -> None:
    spec = SeedSpec(7, (("in_sample", SampleOp(0.1, hash=hash_name)),))

    kept = sum(seed_outputs(spec, {}, f"user_{i}".encode())["in_sample"] for i in range(20_000))

    assert 0.09 <= kept / 20_000 <= 0.11


@pytest.mark.parametrize("hash_name", SEED_HASHES)
def test_split_assigns_buckets_in_proportion_to_their_weights(hash_name: str) -> None:
    spec = SeedSpec("taxi", (("split", SplitOp((("train", 7), ("eval", 2), ("test", 1)), hash=hash_name)),))

    buckets = [seed_outputs(spec, {}, f"user_{i}".encode())["split"] for i in range(20_000)]

    shares = {name: buckets.count(name) / len(buckets) for name in ("train", "eval", "test")}
    assert shares == pytest.approx({"train": 0.7, "eval": 0.2, "test": 0.1}, abs=0.015)


def test_sample_rates_zero_and_one_keep_nothing_and_everything() -> None:
    spec = SeedSpec(1, (("none", SampleOp(0.0)), ("all", SampleOp(1.0))))

    outputs = [seed_outputs(spec, {}, key) for key in KEYS]

    assert all(o == {"none": False, "all": True} for o in outputs)


def test_different_seeds_give_different_outputs() -> None:
    first = outputs_for(spec_for("xxh3", 42), KEYS)
    second = outputs_for(spec_for("xxh3", "42"), KEYS)

    assert sum(a["in_sample"] != b["in_sample"] for a, b in zip(first, second)) > 60


def test_op_name_is_part_of_the_draw() -> None:
    spec = SeedSpec(42, (("a", SampleOp(0.5)), ("b", SampleOp(0.5))))

    outputs = [seed_outputs(spec, {}, key) for key in KEYS]

    assert sum(o["a"] != o["b"] for o in outputs) > 60


def test_crc32_draws_are_32_bits_and_the_others_64() -> None:
    for hash_name in SEED_HASHES:
        u, size = draw(hash_name, 42, "split", b"trip-1")
        assert size == (1 << 32 if hash_name == "crc32" else 1 << 64)
        assert 0 <= u < size


def test_xxh3_draw_matches_its_documented_bytes() -> None:
    expected = xxhash.xxh3_64_intdigest(b"(42, 'split')\x00trip-1")

    assert draw("xxh3", 42, "split", b"trip-1") == (expected, 1 << 64)


def test_seeded_function_gets_a_reproducible_rng_per_key() -> None:
    spec = SeedSpec(42, (("u", FunctionOp(lambda record, rng: uniform(rng))),))

    first = [seed_outputs(spec, {}, key)["u"] for key in KEYS]

    assert first == [seed_outputs(spec, {}, key)["u"] for key in KEYS]
    assert len(set(first)) == len(KEYS)


def test_unseeded_function_differs_between_two_calls_for_most_keys() -> None:
    spec = SeedSpec(None, (("u", FunctionOp(lambda record, rng: uniform(rng))),))

    first = [seed_outputs(spec, {}, key)["u"] for key in KEYS]
    second = [seed_outputs(spec, {}, key)["u"] for key in KEYS]

    assert sum(a != b for a, b in zip(first, second)) >= 195


def test_unseeded_sample_and_split_differ_between_two_calls() -> None:
    spec = SeedSpec(None, (("in_sample", SampleOp(0.5)), ("split", SplitOp((("a", 1), ("b", 1))))))

    first = [seed_outputs(spec, {}, key) for key in KEYS]
    second = [seed_outputs(spec, {}, key) for key in KEYS]

    assert sum(a["in_sample"] != b["in_sample"] for a, b in zip(first, second)) > 60
    assert sum(a["split"] != b["split"] for a, b in zip(first, second)) > 60


def test_user_function_exceptions_propagate_unchanged() -> None:
    def broken(record: dict[str, Any], rng: random.Random) -> None:
        raise KeyError("fare")

    with pytest.raises(KeyError, match="fare"):
        seed_outputs(SeedSpec(1, (("bad", FunctionOp(broken)),)), {}, b"k")
    with pytest.raises(KeyError, match="fare"):
        seed_outputs_many(SeedSpec(1, (("bad", FunctionOp(broken)),)), [b"k"], [{}])


def test_outputs_keep_the_ops_order() -> None:
    assert list(seed_outputs(spec_for("xxh3"), {"fare": 1.0}, b"k")) == ["in_sample", "split", "noise"]
    assert list(seed_outputs_many(spec_for("xxh3"), [b"k"], [{"fare": 1.0}])[0]) == ["in_sample", "split", "noise"]


@pytest.mark.parametrize("make, message", [
    (lambda: SampleOp(1.5), "sample rate must be a number in \\[0, 1\\]"),
    (lambda: SampleOp(0.1, hash="sha1"), "unknown hash 'sha1'; expected one of xxh3, md5, crc32, python"),
    (lambda: SplitOp(()), "at least one bucket"),
    (lambda: SplitOp((("a", 1), ("a", 2))), "unique"),
    (lambda: SplitOp((("a", 0),)), "positive integer"),
    (lambda: SplitOp((("a", 1.5),)), "positive integer"),
])
def test_invalid_ops_are_refused(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


@settings(max_examples=200, deadline=None)
@given(weights=st.lists(st.integers(1, 5), min_size=1, max_size=5),
       hash_name=st.sampled_from(["xxh3", "md5", "crc32"]), seed=st.integers(0, 10 ** 6),
       keys=st.lists(st.binary(max_size=6), max_size=20))
def test_a_batch_of_splits_gives_each_record_what_it_gets_alone(weights, hash_name, seed, keys):
    spec = SeedSpec(seed, (("split", SplitOp(tuple((f"b{i}", w) for i, w in enumerate(weights)), hash=hash_name)),
                           ("sample", SampleOp(0.5, hash=hash_name))))
    assert seed_outputs_many(spec, keys) == [seed_outputs(spec, None, key) for key in keys]
