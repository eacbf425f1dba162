"""The batched stage functions give exactly what their one-record references give."""
from __future__ import annotations

import math
import random

import pytest
from apache_beam.transforms import window as beam_window

from parity.encoding import canonical
from parity.config import LatenessSpec, WindowSpec
from parity.stages import window as window_stage
from parity.stages.coder import AvroRecordCoder, CoderFailure, roundtrip_batch
from parity.stages.seed import FunctionOp, SampleOp, SeedSpec, SplitOp, seed_outputs_many
from tests.stages import oracles
from tests.stages.oracles import assign, seed_outputs

HOUR = 3_600_000_000


def _stamps() -> list[int]:
    rnd = random.Random(11)
    stamps = [rnd.randrange(-10 * HOUR, 10 * HOUR) for _ in range(500)]
    stamps += [1_700_000_000_000_000 + rnd.randrange(0, 6 * HOUR) for _ in range(500)]
    stamps += [0, -1, 1, HOUR, HOUR - 1, -HOUR, -HOUR - 1, 2**62, -(2**62), 59_999_999, 60_000_000]
    return stamps


@pytest.mark.parametrize("windowfn", [
    window_stage.build_windowfn(WindowSpec("fixed", size_us=HOUR)),
    window_stage.build_windowfn(WindowSpec("fixed", size_us=HOUR, offset_us=900_000_000)),
    window_stage.build_windowfn(WindowSpec("fixed", size_us=7_000_001, offset_us=13)),
    window_stage.build_windowfn(WindowSpec("sliding", size_us=HOUR, period_us=HOUR // 4)),
    window_stage.build_windowfn(WindowSpec("sliding", size_us=600_000_000, period_us=60_000_000,
                                           offset_us=30_000_000)),
    window_stage.build_windowfn(WindowSpec("sliding", size_us=1_000_003, period_us=333_331, offset_us=7)),
    window_stage.build_windowfn(WindowSpec("global")),
    window_stage.build_windowfn(WindowSpec("session", gap_us=HOUR)),
], ids=["fixed", "fixed-offset", "fixed-odd", "sliding", "sliding-offset", "sliding-odd", "global", "session"])
def test_assign_many_equals_beam_assign_per_record(windowfn: beam_window.WindowFn) -> None:
    stamps = _stamps()
    records = [{"i": i} for i in range(len(stamps))]
    assert window_stage.assign_many(windowfn, stamps, records) == \
        [assign(windowfn, ts, r) for ts, r in zip(stamps, records)]


def test_assign_many_without_timestamps_uses_beams_minimum() -> None:
    windowfn = window_stage.build_windowfn(WindowSpec("fixed", size_us=HOUR))
    assert window_stage.assign_many(windowfn, [None, 5], [{}, {}]) == \
        [assign(windowfn, None, {}), assign(windowfn, 5, {})]


@pytest.mark.parametrize("value", [42, "42", None])
def test_seed_outputs_many_equals_seed_outputs(value: int | str | None) -> None:
    ops = (("s", SampleOp(0.3)), ("t", SplitOp((("train", 8), ("eval", 2)))), ("m", SampleOp(0.5, "md5")),
           ("c", SplitOp((("a", 1), ("b", 1), ("c", 5)), "crc32")), ("p", SampleOp(0.5, "python")))
    spec = SeedSpec(value, ops)
    keys = [bytes([i % 251]) * (i % 7) + str(i).encode() for i in range(400)]
    many = seed_outputs_many(spec, keys)
    if value is None:  # unseeded: random on purpose; same shape
        assert [sorted(o) for o in many] == [sorted(seed_outputs(spec, {}, k)) for k in keys]
        return
    assert many == [seed_outputs(spec, {}, k) for k in keys]


def test_seed_outputs_many_refuses_function_ops() -> None:
    spec = SeedSpec(1, (("f", FunctionOp(lambda record, rng: rng.random())),))
    with pytest.raises(ValueError):
        seed_outputs_many(spec, [b"k"])


def _against_one_by_one(coder: AvroRecordCoder, records: list[dict]):
    """Each record with its batch round trip and its one-by-one round trip (`decode(encode(record))`); a
    record whose one-by-one round trip fails must be a CoderFailure in the batch too, and is not yielded."""
    for record, out in zip(records, roundtrip_batch(coder, records)):
        try:
            expected = coder.decode(coder.encode(record))
        except Exception:
            assert isinstance(out, CoderFailure)
            continue
        yield record, out, expected


def test_avro_batch_round_trip_equals_one_by_one() -> None:
    coder = AvroRecordCoder({"a": "int64", "b": "float32", "s": "string", "l": "list<float64>"})
    rnd = random.Random(5)
    records = [{"a": rnd.randrange(-2**40, 2**40), "b": rnd.random() * 1e6, "s": str(rnd.random()),
                "l": [rnd.random() for _ in range(i % 4)], **({"extra": i} if i % 5 == 0 else {})}
               for i in range(300)]
    records.append({"a": None, "b": None, "s": None, "l": None})
    batched = roundtrip_batch(coder, records)
    assert batched == [coder.decode(coder.encode(r)) for r in records]
    assert [list(r) for r in batched] == [list(coder.decode(coder.encode(r))) for r in records]


def test_avro_batch_round_trip_isolates_a_failing_record() -> None:
    coder = AvroRecordCoder({"a": "int64"})
    out = roundtrip_batch(coder, [{"a": 1}, {"a": "x"}, {"a": 2**70}, {"a": 3}])
    assert out[0] == {"a": 1} and out[3] == {"a": 3}
    assert isinstance(out[1], CoderFailure) and out[1].message.startswith("encode: ")
    assert isinstance(out[2], CoderFailure)


def test_late_records_equal_the_reference_replay() -> None:
    rnd = random.Random(3)
    windowfn = window_stage.build_windowfn(WindowSpec("sliding", size_us=HOUR, period_us=HOUR // 2))
    rows = []
    for i in range(3000):
        event = rnd.randrange(0, 20 * HOUR)
        arrival = event + rnd.choice([0, 1, 10, 10**6, 10**8, 2 * HOUR, 5 * HOUR])
        rows.append((arrival, event, rnd.randrange(0, 2**64), (0, i), assign(windowfn, event, {})))
    rows += [rows[10][:3] + ((1, 0),) + rows[10][4:], (rows[20][0], rows[20][1], 0, (1, 1), [window_stage.GLOBAL])]
    for spec in (LatenessSpec("arrival", 60_000_000, 0), LatenessSpec("arrival", 0, HOUR // 3),
                 LatenessSpec("arrival", 10**6, 0)):
        expected = window_stage.replay_lateness(spec, rows)
        assert expected  # the rows do plant late records
        assert window_stage.late_records(spec, rows) == expected
        assert window_stage.late_records(spec, rows[::-1]) == expected


def test_avro_batch_of_exactly_typed_records_equals_one_by_one() -> None:
    coder = AvroRecordCoder({"a": "int64", "b": "float32", "s": "string", "l": "list<float64>", "t": "bool"})
    records = [{"t": i % 2 == 0, "s": f"x{i}", "l": [i / 3] * (i % 3), "b": i / 7, "a": i * 10**12}
               for i in range(200)]
    batched = roundtrip_batch(coder, records)
    one_by_one = [coder.decode(coder.encode(r)) for r in records]
    assert batched == one_by_one and [list(r) for r in batched] == [list(r) for r in one_by_one]


def test_avro_batch_with_plain_and_nullable_columns_equals_one_by_one() -> None:
    # Columns that hold only exact types travel as plain Avro types; the others keep the null union. Either
    # way each record comes back as the one-by-one round trip gives it, failures included.
    coder = AvroRecordCoder({"a": "int64", "i": "int32", "f": "float64", "g": "float32", "s": "string",
                             "b": "bytes", "t": "bool", "l": "list<int64>"})
    rnd = random.Random(9)

    def record(i: int) -> dict:
        return {"a": rnd.randrange(-2**62, 2**62), "i": rnd.randrange(-2**31, 2**31), "f": rnd.random() * 1e9,
                "g": rnd.random(), "s": f"s{i}", "b": bytes([i % 256]), "t": i % 3 == 0,
                "l": [rnd.randrange(-9, 9) for _ in range(i % 3)]}

    batches = [
        [record(i) for i in range(50)],                                            # every column plain
        [dict(record(i), f=None if i % 7 == 0 else 1.5, l=[] if i % 2 else [1]) for i in range(50)],
        [dict(record(i), f=i, g=True if i == 3 else 0.5) for i in range(50)],      # ints in a double column
        [dict(record(i), a=2**63 if i == 4 else 1, i=2**31 - 1, l=[2**63 - 1]) for i in range(50)],
        [dict(record(i), i=True if i == 2 else 7, t=1 if i == 5 else False) for i in range(50)],
        [dict(record(i), s=None, b=None, l=None) for i in range(50)],
    ]
    for records in batches:
        for _, out, expected in _against_one_by_one(coder, records):
            assert out == expected and list(out) == list(expected)
            assert [type(v) for v in out.values()] == [type(v) for v in expected.values()]
    assert len(coder._plain_schemas) >= 3  # the batches did take different schemas


def test_late_records_take_signed_tie_breakers() -> None:
    rows = [(10, 5_000_000_000, t, (0, i), [(0, 3_600_000_000)]) for i, t in enumerate([-(2**63), -1, 0, 2**63 - 1])]
    rows += [(5, 1, 3, (1, 0), [(0, 1)])]
    spec = LatenessSpec("arrival", 0, 0)
    assert window_stage.late_records(spec, rows) == window_stage.replay_lateness(spec, rows)


def test_avro_batch_fields_not_encoded_come_back_as_the_round_trip_gives_them() -> None:
    # Fields whose Avro round trip is the identity are not encoded; the records still equal the one-by-one
    # round trip: NaN and -0.0, text beyond ASCII, lists as new lists, and a lone surrogate fails its record.
    coder = AvroRecordCoder({"f": "float64", "s": "string", "w": "list<string>", "b": "bytes", "g": "float32"})
    records = [{"f": [math.nan, -0.0, 1e308][i % 3], "s": ["é", "日本", "x"][i % 3], "w": ["a", "ü"][: i % 3],
                "b": b"\x00\xff", "g": 0.1} for i in range(30)]
    surrogate = [dict(r) for r in records]
    surrogate[4] = dict(surrogate[4], s="\ud800")
    listed = [dict(r) for r in records]
    listed[7] = dict(listed[7], w=["ok", "\udfff"])
    for batch in (records, surrogate, listed):
        for record_, got, expected in _against_one_by_one(coder, batch):
            assert canonical.encode(got) == canonical.encode(expected) and list(got) == list(expected)
            assert got["w"] is not record_["w"] and got["g"] != record_["g"]  # a new list; float32 rounded
    assert isinstance(roundtrip_batch(coder, surrogate)[4], CoderFailure)
    assert isinstance(roundtrip_batch(coder, listed)[7], CoderFailure)


def _time_or_error(read) -> object:
    """A time, or the message of the TimestampError reading it raised (or returned in its place)."""
    from parity.stages.timestamp import TimestampError

    try:
        value = read()
    except TimestampError as exc:
        return ("error", str(exc))
    return ("error", str(value)) if isinstance(value, TimestampError) else value


_TIME_VALUES = [0, 1, -1, 1_700_000_000, -2**40, 2**53 + 1, True, False, None, 1.5, -0.25, 1e300, math.nan,
                math.inf, -math.inf, "3", "2026-03-08T02:30:00", "2026-07-15T12:00:00+02:00", "2026-01-01Z",
                "not a time", [1], {"a": 1}]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns", "iso8601"])
@pytest.mark.parametrize("tz", ["UTC", "America/Chicago"])
def test_micros_many_equals_the_one_record_reference(unit: str, tz: str) -> None:
    from parity.config import TimestampSpec
    from parity.stages.timestamp import EventTime

    event_time = EventTime(TimestampSpec(field="t", unit=unit, tz=tz, function=None))
    # in ns, a list, a dict or a float that is not finite makes `to_micros` raise, not return an error: the batch
    # raises too (tested below with a timestamp function)
    records = [{"t": value} for value in _TIME_VALUES
               if not (unit == "ns" and (isinstance(value, (list, dict)) or value in (math.inf, -math.inf)
                                         or value != value))]
    records += [{}, {"other": 1}]
    rnd = random.Random(len(unit))
    ints = [{"t": rnd.randrange(-2**50, 2**50)} for _ in range(200)]  # every one an int: one pass over the batch
    for batch in (records, ints, ints + records[:1], records[::-1]):
        got = [_time_or_error(lambda value=value: value) for value in event_time.micros_many(batch)]
        assert got == [_time_or_error(lambda record=record: oracles.micros(event_time, record)) for record in batch]


def test_micros_many_of_a_timestamp_function_equals_the_one_record_reference() -> None:
    from parity.config import TimestampSpec
    from parity.stages.timestamp import EventTime, TimestampError

    event_time = EventTime(TimestampSpec(field=None, unit="s", tz="UTC", function=None))
    event_time._fn = lambda record: record["when"]
    records = [{"when": value} for value in _TIME_VALUES if not isinstance(value, (list, dict, str))]
    got = [_time_or_error(lambda value=value: value) for value in event_time.micros_many(records)]
    assert got == [_time_or_error(lambda record=record: oracles.micros(event_time, record)) for record in records]
    assert any(isinstance(value, TimestampError) for value in event_time.micros_many(records))
    with pytest.raises(KeyError):  # the function's own exception propagates, as it does one record at a time
        event_time.micros_many(records + [{}])


@pytest.mark.parametrize("value", [42, "42", None])
def test_seed_outputs_many_with_function_ops_equals_seed_outputs(value: int | str | None) -> None:
    def noise(record: dict, rng: random.Random) -> float:
        return record["fare"] + rng.random()

    spec = SeedSpec(value, (("s", SampleOp(0.3)), ("f", FunctionOp(noise)), ("t", SplitOp((("a", 8), ("b", 2)))),
                            ("g", FunctionOp(lambda record, rng: [record["fare"], rng.randrange(10**9)]))))
    keys = [str(i).encode() for i in range(300)]
    records = [{"fare": i / 7} for i in range(300)]
    many = seed_outputs_many(spec, keys, records)
    expected = [seed_outputs(spec, record, key) for record, key in zip(records, keys)]
    assert [list(o) for o in many] == [list(o) for o in expected]  # the ops' order
    if value is not None:  # unseeded: random on purpose
        assert many == expected
