"""The C canonical encoder (parity.encoding._canonical) against the pure Python reference (parity/encoding/canonical.py).

The reference is ``canonical._encode_py`` and ``fingerprint._REFERENCE``; the public functions are the C
ones whenever the extension is built (``canonical.IMPLEMENTATION == "c"``).
"""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from parity.encoding import canonical, fingerprint

from tests.encoding.strategies import FLOATS, HASHABLE, INTS, TEXT, nested

ROOT = Path(__file__).resolve().parents[2]
PROPERTY = settings(max_examples=2000)
FIXTURES = ROOT / "fixtures" / "canonical"
REF = fingerprint._REFERENCE
py_encode = canonical._encode_py

if canonical._native is None and os.environ.get("PARITY_PURE_PYTHON", "") in ("", "0"):
    pytest.fail("parity.encoding._canonical is not built: run `make setup` or `.venv/bin/pip install -e .` (needs a C "
                "compiler and the Python headers)", pytrace=False)
pytestmark = pytest.mark.skipif(canonical._native is None, reason="PARITY_PURE_PYTHON=1: no C encoder to compare")
native = canonical._native


def _load_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_vectors", FIXTURES / "make_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VECTORS = json.loads((FIXTURES / "vectors.json").read_text(encoding="ascii"))
SCRIPT = _load_script()


def _same_everywhere(value) -> bytes:
    """Asserts every C entry point agrees with the reference on ``value``; returns the bytes."""
    data = py_encode(value)
    fp = xxhash.xxh3_64_intdigest(data)
    assert native.encode(value) == data
    assert native.fingerprint(value) == fp
    assert native.key_fingerprint(value) == xxhash.xxh3_128_digest(data)
    assert native.encode_many([value, value]) == [data, data]
    assert native.fingerprints([value]) == [fp]
    assert native.encode_fingerprints([value]) == ([data], [fp])
    assert native.encode_columns([value, value]) == REF["encode_columns"]([value, value])
    return data


def test_the_public_functions_are_the_c_ones_when_it_is_built():
    assert canonical.IMPLEMENTATION == "c"
    assert canonical.encode is native.encode and canonical.encode_many is native.encode_many
    assert fingerprint.fingerprints is native.fingerprints
    assert fingerprint.feature_fingerprints is native.feature_fingerprints
    assert native.ENCODING_VERSION == canonical.ENCODING_VERSION


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_c_and_python_encoders_give_every_golden_vector_its_bytes(vector):
    value = SCRIPT.build_value(vector["value"])
    assert _same_everywhere(value).hex() == vector["bytes"]
    assert f"{native.fingerprint(value):016x}" == vector["xxh3_64"]


def test_golden_vectors_as_one_batch_give_the_golden_fingerprints():
    values = [SCRIPT.build_value(v["value"]) for v in VECTORS]
    assert [f"{fp:016x}" for fp in native.fingerprints(values)] == [v["xxh3_64"] for v in VECTORS]
    assert [b.hex() for b in native.encode_many(values)] == [v["bytes"] for v in VECTORS]


def test_ints_at_every_byte_boundary_and_beyond_64_bits_encode_like_python():
    edges = [0, 1, -1, 127, 128, -128, -129, 255, 256, 2**15, 2**31 - 1, -(2**31), 2**53 + 1, 2**63 - 1,
             -(2**63), 2**63, -(2**63) - 1, 2**64, 2**64 - 1, -(3**700), 10**40]
    edges += [s * (2**k + d) for k in range(0, 80) for d in (-1, 0, 1) for s in (1, -1)]
    for n in edges:
        _same_everywhere(n)
    for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        info = np.iinfo(t)
        for n in (info.min, info.max, 0):
            assert native.encode(t(n)) == py_encode(int(n))


def test_nan_negative_zero_and_infinities_follow_the_float_policy():
    for x in (float("nan"), -float("nan"), 0.0, -0.0, float("inf"), -float("inf"), 5e-324, 1.7976931348623157e308):
        _same_everywhere(x)
        _same_everywhere(np.float64(x))
        with np.errstate(over="ignore"):  # float64's largest value casts to inf
            _same_everywhere(np.float32(x))
            _same_everywhere(np.float16(x))
    assert native.encode(np.frombuffer(bytes.fromhex("ffc00001"), dtype=">f4")[0]) == bytes.fromhex("677fc00000")


def test_strings_with_non_ascii_characters_and_lone_surrogates_encode_like_python():
    for s in ("", "a", "é", "e\u0301", "€uro", "\U0001f600", "\ud800", "x\udfff y", "a" * 127, "a" * 128,
              "ü" * 100, "z" * 20000, np.str_("numpy"), np.str_("é\ud800")):
        _same_everywhere(s)
        _same_everywhere({s: s})


def test_bytes_like_values_encode_like_python():
    for b in (b"", b"\x00\xff", b"x" * 300, bytearray(b"ab"), memoryview(b"cd"), np.bytes_(b"np")):
        _same_everywhere(b)


def test_dict_key_order_is_canonical_whatever_the_insertion_order():
    keys = ["b", "aa", "a", "", "é", "\ud800", "c" * 200, "c" * 129]
    value = {k: i for i, k in enumerate(keys)}
    expected = _same_everywhere(value)
    for shift in range(len(keys)):
        rotated = keys[shift:] + keys[:shift]
        assert native.encode({k: value[k] for k in rotated}) == expected
        assert native.encode({k: value[k] for k in reversed(rotated)}) == expected


def test_dicts_with_equal_keys_that_are_other_objects_share_a_cached_layout_correctly():
    first = {"".join(["ke", "y"]): 1, "other": 2}
    second = {"".join(["k", "ey"]): 3, "other": 4}
    assert native.encode(first) == py_encode(first)
    assert native.encode(second) == py_encode(second)


def test_more_key_layouts_than_the_cache_holds_all_encode_like_python():
    values = [{f"k{i}": i, f"j{i % 7}": [i], "z": None} for i in range(3000)]
    assert native.encode_many(values) == [py_encode(v) for v in values]
    assert native.encode_many(values[::-1]) == [py_encode(v) for v in values[::-1]]


def test_non_str_keys_and_mixed_keys_encode_like_python():
    for value in ({1: "x", "1": "y", b"1": "z", None: 0, True: 1, 2.5: 2, (1, 2): 3, -1: 4, 2: 5},
                  {frozenset({1}): 1, datetime.date(2024, 1, 1): 2, decimal.Decimal("1.1"): 3},
                  {np.int64(3): "a", np.float32(1.5): "b"}):
        _same_everywhere(value)


def test_dict_keys_with_equal_bytes_use_the_python_tie_rule():
    first, second = float("nan"), float("nan")
    _same_everywhere({first: 2, second: 1})
    _same_everywhere({first: [1], second: [0], 0.5: None})


def test_types_the_c_encoder_hands_to_python_encode_like_python():
    color = enum.Enum("Color", {"RED": "r"}, type=str).RED
    level = enum.IntEnum("Level", {"HIGH": 3}).HIGH
    values = [
        {1, 2, 3}, frozenset({"a", b"a"}), datetime.datetime(2024, 3, 10, 10, 34, 56, 789012),
        datetime.datetime(2024, 3, 10, tzinfo=datetime.timezone(datetime.timedelta(hours=5))),
        datetime.date(2024, 3, 10), decimal.Decimal("1.10"), np.array([[1, 2], [3, 4]], dtype=np.int32),
        np.array([1.5, float("nan")], dtype=np.float32), np.array(3.5), np.array(["a", "b"]), color, level,
        collections.namedtuple("P", "x y")(1, [2.0]), collections.OrderedDict([("b", 1), ("a", 2)]),
        collections.defaultdict(list, {"x": [1]}), True, np.bool_(False),
    ]
    for value in values:
        _same_everywhere(value)
        _same_everywhere({"nested": [value, {"again": value}]})


def test_unsupported_values_raise_the_python_encoders_type_error():
    for bad in (object(), 1j, {"deep": [1, {"x": 1j}]}, np.array([1j]), [np.datetime64("2024-01-01")]):
        with pytest.raises(TypeError) as expected:
            py_encode(bad)
        for fn in (native.encode, native.fingerprint, native.key_fingerprint):
            with pytest.raises(TypeError) as got:
                fn(bad)
            assert str(got.value) == str(expected.value)
        with pytest.raises(TypeError, match=str(expected.value).split(" of type ")[-1]):
            native.fingerprints([1, bad])


def test_deep_nesting_raises_recursion_error_rather_than_crashing():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        native.encode(deep)
    with pytest.raises(RecursionError):
        native.fingerprints([{"a": deep}])


def test_a_callback_that_mutates_the_dict_being_encoded_does_not_crash():
    target: dict = {}

    class Sneaky(list):
        def __iter__(self):
            target.clear()
            target.update({f"new{i}": object() for i in range(50)})
            return super().__iter__()

    target.update({"a": Sneaky([1]), "b": "x" * 1000, "c": [1.0] * 10})
    assert native.encode(target)[:1] == b"d"


def test_a_callback_that_shrinks_the_batch_being_encoded_raises_instead_of_crashing():
    values: list = []

    class Sneaky(list):
        def __iter__(self):
            values.clear()
            return super().__iter__()

    values.extend([Sneaky([1]), "a", "b"])
    with pytest.raises(RuntimeError, match="changed size"):
        native.fingerprints(values)


def test_batch_functions_accept_any_iterable_and_equal_the_per_value_ones():
    values = [None, {"a": 1}, [1.5, "x"], 2**70, np.float32(3), "é"]
    data = [py_encode(v) for v in values]
    fps = [xxhash.xxh3_64_intdigest(b) for b in data]
    assert native.encode_many(iter(values)) == data
    assert native.fingerprints(tuple(values)) == fps == [native.fingerprint(v) for v in values]
    assert native.encode_fingerprints(values) == (data, fps) == REF["encode_fingerprints"](values)
    assert REF["fingerprints"](values) == fps
    assert native.fingerprints([]) == [] and native.encode_many([]) == []


def test_encode_columns_lays_out_the_batch_bytes_offsets_and_fingerprints_as_arrow_reads_them():
    values = [None, {"a": 1}, [1.5, "x"], 2**70, np.float32(3), "é", b"", "y" * 3000]
    data, offsets, fps = native.encode_columns(values)
    assert (data, offsets, fps) == REF["encode_columns"](values)
    encoded, fingerprints = REF["encode_fingerprints"](values)
    column = pa.Array.from_buffers(pa.binary(), len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    assert column.to_pylist() == encoded
    assert pa.Array.from_buffers(pa.uint64(), len(values), [None, pa.py_buffer(fps)]).to_pylist() == fingerprints
    assert native.encode_columns([]) == REF["encode_columns"]([]) == (b"", b"\0\0\0\0", b"")
    with pytest.raises(TypeError):
        native.encode_columns([1, object()])


def test_feature_fingerprints_equal_the_per_feature_python_definition():
    features = {"fare": np.float32(5.5), "zone_id": np.int64(3), "tags": [b"a", b"b"], "z": None,
                "company_xf": np.array([0.25, 0.5], dtype=np.float32), "aa": "é", "b": {"n": 1}}
    data, pairs, combined = native.feature_fingerprints(features)
    assert (data, pairs, combined) == REF["feature_fingerprints"](features)
    assert data == py_encode(features)
    assert pairs == sorted((k, xxhash.xxh3_64_intdigest(py_encode(v))) for k, v in features.items())
    assert combined == fingerprint.combine(dict(pairs)) == xxhash.xxh3_64_intdigest(py_encode(dict(pairs)))
    assert native.feature_fingerprints({}) == REF["feature_fingerprints"]({})
    # name order (code points) differs from canonical order (length first), also beyond one-byte lengths
    names = {"b": 1, "aa": 2, "é": 3, "z" * 130: 4, "y" * 200: 5, "\ud800": 6, "\U0001f600": 7, "": 8}
    assert native.feature_fingerprints(names) == REF["feature_fingerprints"](names)
    assert [k for k, _ in native.feature_fingerprints(names)[1]] == sorted(names)
    other = collections.OrderedDict([("b", 1), ("a", 2)])  # not a plain dict: the Python definition runs
    assert native.feature_fingerprints(other) == REF["feature_fingerprints"](other)


# ------------------------------------------------------------------------------------------ properties

_NUMPY = (st.integers(-(2**63), 2**63 - 1).map(np.int64) | st.integers(0, 255).map(np.uint8)
          | st.floats(width=32).map(np.float32) | st.floats(width=16).map(np.float16) | st.floats().map(np.float64)
          | st.booleans().map(np.bool_) | TEXT.map(np.str_))
_ZONES = st.none() | st.just(datetime.timezone.utc) | st.integers(-1439, 1439).map(
    lambda m: datetime.timezone(datetime.timedelta(minutes=m)))
_OTHER = (st.datetimes(datetime.datetime(1900, 1, 1), datetime.datetime(2200, 1, 1), timezones=_ZONES) | st.dates()
          | st.decimals(allow_nan=False, places=3) | st.binary(max_size=4).map(bytearray)
          | st.lists(st.floats(width=32), max_size=3).map(lambda x: np.array(x, dtype=np.float32))
          | st.lists(st.integers(-5, 5), max_size=3).map(lambda x: np.array(x, dtype=np.int32)))
_SCALARS = st.none() | st.booleans() | INTS | FLOATS | TEXT | st.binary(max_size=20) | _NUMPY | _OTHER
_VALUES = nested(_SCALARS | st.frozensets(HASHABLE, max_size=4) | st.sets(HASHABLE, max_size=4))


@PROPERTY
@given(_VALUES)
def test_c_and_python_encoders_agree_on_nested_values_of_every_supported_type(value):
    _same_everywhere(value)


# The slow tier (`make test`, not `make test-fast`): the heaviest of the 2,000-example properties.
@pytest.mark.slow
@PROPERTY
@given(st.lists(st.tuples(TEXT | HASHABLE, _VALUES), max_size=8), st.randoms(use_true_random=False))
def test_c_encoder_bytes_do_not_depend_on_dict_insertion_order(entries, rnd):
    value = dict(entries)
    items = list(value.items())
    rnd.shuffle(items)
    shuffled = dict(items)
    assert native.encode(shuffled) == native.encode(value) == py_encode(value)


# The slow tier (`make test`, not `make test-fast`): the heaviest of the 2,000-example properties.
@pytest.mark.slow
@PROPERTY
@given(st.dictionaries(TEXT, _VALUES, max_size=8))
def test_feature_fingerprints_agree_with_the_python_definition(features):
    assert native.feature_fingerprints(features) == REF["feature_fingerprints"](features)


# ------------------------------------------------------------------------------------------- fallback


def test_pure_python_fallback_is_used_when_forced_and_still_gives_the_golden_bytes():
    script = (
        "import json, sys\n"
        "from parity.encoding import canonical, fingerprint\n"
        "assert canonical._native is None and canonical.IMPLEMENTATION == 'python'\n"
        "assert canonical.encode.__module__ == 'parity.encoding.canonical'\n"
        "assert fingerprint.fingerprints is fingerprint._REFERENCE['fingerprints']\n"
        "sys.path.insert(0, 'fixtures/canonical')\n"
        "import make_vectors\n"
        "vectors = json.load(open('fixtures/canonical/vectors.json'))\n"
        "values = [make_vectors.build_value(v['value']) for v in vectors]\n"
        "assert [b.hex() for b in canonical.encode_many(values)] == [v['bytes'] for v in vectors]\n"
        "assert [f'{x:016x}' for x in fingerprint.fingerprints(values)] == [v['xxh3_64'] for v in vectors]\n"
        "print(canonical.IMPLEMENTATION)\n"
    )
    env = dict(os.environ, PARITY_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "python"


def test_an_extension_built_for_another_encoding_version_is_not_used(monkeypatch):
    class Stale:
        ENCODING_VERSION = "parity.canonical/0"
        API_VERSION = 1

    import parity.encoding

    monkeypatch.setattr(parity.encoding, "_canonical", Stale)
    monkeypatch.delenv("PARITY_PURE_PYTHON", raising=False)
    assert canonical._load_native() is None


class _Str(str):
    pass


class Color(enum.IntEnum):
    RED = 1


_PLAIN_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
                          st.floats(allow_nan=True), st.text(max_size=5), st.binary(max_size=5))
_OTHER_LEAVES = st.sampled_from([np.float32(1.5), np.int64(3), _Str("s"), datetime.date(2024, 1, 2),
                                 decimal.Decimal("1.5"), {1, 2}, bytearray(b"x"), Color.RED])
_VALUES = st.recursive(
    st.one_of(_PLAIN_LEAVES, _OTHER_LEAVES),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=500)
@given(st.lists(_VALUES, max_size=5))
def test_c_and_python_agree_on_which_values_are_plain(values):
    assert native.plain(values) is canonical._plain_py(values)
    assert native.plain(tuple(values)) is canonical._plain_py(tuple(values))


_WIDE_LEAVES = st.one_of(_PLAIN_LEAVES, _OTHER_LEAVES, st.sampled_from([2.0 ** 63, -(2.0 ** 63), 2.0 ** 63 - 1024,
                                                                    -(2.0 ** 63) + 1024, float("inf"), 1e300]))
_WIDE_VALUES = st.recursive(
    _WIDE_LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=3).map(tuple),
                            st.dictionaries(st.one_of(st.text(max_size=3), st.floats()), inner, max_size=4)),
    max_leaves=12)


@settings(max_examples=500)
@given(_WIDE_VALUES)
def test_c_and_python_agree_on_which_values_hold_a_float_beyond_int64(value):
    assert native.wide_float(value) is canonical._wide_float_py(value)


def test_a_wide_float_is_one_outside_the_open_int64_range_in_a_dict_or_list_value_at_any_depth():
    for wide in (2.0 ** 63, -(2.0 ** 63), 1e19, float("inf"), float("-inf"), float("nan")):
        for holder in ({"a": wide}, [wide], {"a": [{"b": [wide]}]}, wide):
            assert native.wide_float(holder) and canonical._wide_float_py(holder), (holder,)
    for narrow in (2.0 ** 63 - 1024, -(2.0 ** 63) + 1024, 0.0, -0.0, 5.5, 2 ** 70, "1e19"):
        for holder in ({"a": narrow}, [narrow], {"a": [{"b": [narrow]}]}):
            assert not native.wide_float(holder) and not canonical._wide_float_py(holder), (holder,)
    # keys, tuples, sets and subclasses are not walked: json gives none of them
    for unseen in ({1e19: 1}, {"a": (1e19,)}, {"a": {1e19}}):
        assert not native.wide_float(unseen) and not canonical._wide_float_py(unseen)
    deep: list = [1e19]
    for _ in range(5000):
        deep = [deep]
    assert native.wide_float(deep) and canonical._wide_float_py(deep)  # C: "maybe" past 4,096 levels


def test_plain_values_are_exact_builtins_at_most_128_containers_deep():
    assert native.plain([{"a": [1, 2.5, None, True, "x", b"y", (1, "z")]}, 7, -0.0, float("nan"), 2**90])
    for other in (np.float32(1.5), _Str("s"), datetime.datetime(2024, 1, 1), {1}, bytearray(b"x"),
                  collections.OrderedDict(a=1), Color.RED):
        assert not native.plain([{"a": [other]}]) and not canonical._plain_py([{"a": [other]}])
    deep: list = []
    for _ in range(canonical.MAX_PLAIN_DEPTH - 1):
        deep = [deep]
    assert native.plain([deep]) and canonical._plain_py([deep])  # 128 containers: the deepest plain value
    assert not native.plain([[deep]]) and not canonical._plain_py([[deep]])
    cycle: list = []
    cycle.append(cycle)
    assert not native.plain([cycle]) and not canonical._plain_py([cycle])
    with pytest.raises(TypeError):
        native.plain(iter([1]))
