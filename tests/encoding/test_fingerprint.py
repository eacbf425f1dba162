"""Fingerprints: XXH3 of the canonical encoding v1, scalar and batched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.encoding.canonical import encode
from parity.encoding.fingerprint import (
    FINGERPRINT_ALGORITHM, KEY_FINGERPRINT_ALGORITHM, combine, fingerprint, fingerprint_bytes, fingerprints,
    key_fingerprint,
)

ROOT = Path(__file__).resolve().parents[2]
TRIP = {"trip_id": 1_000_123, "event_time": 1_700_000_000, "zone": "JFK Airport", "fare": 52.5,
        "tags": ["airport", "night"], "rate_code": None, "paid": True}


def test_fingerprint_is_xxh3_64_of_the_canonical_bytes():
    assert FINGERPRINT_ALGORITHM == "xxh3_64"
    assert fingerprint(TRIP) == xxhash.xxh3_64_intdigest(encode(TRIP))
    assert fingerprint(None) == fingerprint_bytes(b"N") == 0x1A038927DF1311D6


def test_fingerprints_are_unsigned_64_bit_ints():
    for fp in fingerprints([None, 0, -1, "x", TRIP, [1.5]]):
        assert type(fp) is int and 0 <= fp < 2**64


def test_fingerprints_of_a_batch_equal_the_fingerprint_of_each_value():
    values = [TRIP, {**TRIP, "fare": 52.50000000000001}, None, 2**80, np.float32(1.5), (1, "a"), {"b", "a"},
              np.array([1, 2]), b"\xff", "é"]
    assert fingerprints(values) == [fingerprint(v) for v in values]
    assert fingerprints([]) == []


def test_fingerprint_differs_for_values_that_python_calls_equal():
    assert len({fingerprint(v) for v in (1, 1.0, True, "1", b"1")}) == 5
    assert fingerprint(-0.0) != fingerprint(0.0)
    assert fingerprint(float("nan")) == fingerprint(float("-nan"))


def test_fingerprint_does_not_depend_on_dict_order():
    assert fingerprint(TRIP) == fingerprint(dict(reversed(list(TRIP.items()))))


def test_fingerprint_of_an_unsupported_type_raises_type_error_naming_it():
    with pytest.raises(TypeError, match="complex"):
        fingerprint({"x": 1j})
    with pytest.raises(TypeError, match="complex"):
        fingerprints([1, 1j])


def test_key_fingerprint_is_the_16_byte_xxh3_128_digest():
    assert KEY_FINGERPRINT_ALGORITHM == "xxh3_128"
    key = [1_000_123]
    assert key_fingerprint(key) == xxhash.xxh3_128_digest(encode(key))
    assert len(key_fingerprint(key)) == 16
    assert key_fingerprint([1]) != key_fingerprint([1.0]) != key_fingerprint(["1"])


def test_combine_is_the_fingerprint_of_the_dict_of_feature_fingerprints():
    fps = {"fare_z": fingerprint(np.float32(0.25)), "zone_id": fingerprint(17)}
    assert combine(fps) == fingerprint(fps)
    assert combine(fps) == combine(dict(reversed(list(fps.items()))))


def test_combine_changes_when_a_feature_is_renamed_added_or_changed():
    base = {"a": 1, "b": 2}
    variants = [base, {"a": 1, "c": 2}, {**base, "c": 3}, {"a": 1, "b": 3}, {}]
    assert len({combine(fps) for fps in variants}) == 5


def test_fingerprint_is_stable_across_processes_with_other_hash_seeds():
    script = ("from parity.encoding.fingerprint import fingerprint\n"
              "print(fingerprint({'s': {'a', 'b', 'c', 'd'}, 'x': 1.5}))\n")
    outputs = set()
    for seed in ("3", "4"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                              check=True)
        outputs.add(int(done.stdout))
    assert outputs == {fingerprint({"s": {"a", "b", "c", "d"}, "x": 1.5})}


@settings(max_examples=500)
@given(st.lists(st.dictionaries(st.text(max_size=5), st.integers() | st.floats() | st.text(), max_size=6),
                max_size=10))
def test_batched_fingerprints_always_match_the_scalar_ones(values):
    assert fingerprints(values) == [fingerprint(v) for v in values]
