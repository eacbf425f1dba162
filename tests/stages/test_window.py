"""Window assignment must equal what Beam's own WindowFns assign inside a real pipeline."""
from __future__ import annotations

import random

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import window as beam_window

from parity.config import LatenessSpec, WindowSpec
from parity.stages import window as window_stage
from tests.stages.oracles import assign

HOUR = 3_600_000_000


def _timestamps(count: int = 300, seed: int = 3) -> list[int]:
    rnd = random.Random(seed)
    base = 1_700_000_000_000_000
    stamps = [base + rnd.randrange(0, 6 * HOUR) for _ in range(count)]
    stamps += [base + HOUR * 2, base + HOUR * 2 - 1, -90_000_000, -3_600_000_000, 0, 59_999_999, 60_000_000]
    return stamps


def _assert_beam_assigns(windowfn: beam_window.WindowFn, stamps: list[int], expected: list[tuple]) -> None:
    """Runs WindowInto in a real Beam pipeline and asserts each element's windows equal `expected`."""

    class _Record(beam.DoFn):
        def process(self, element, win=beam.DoFn.WindowParam):
            yield element, window_stage.to_window(win)

    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        result = (pipeline
                  | beam.Create(list(enumerate(stamps)))
                  | beam.Map(lambda kv: beam_window.TimestampedValue(kv[0], kv[1] / 1e6))
                  | beam.WindowInto(windowfn)
                  | beam.ParDo(_Record())
                  | "Rewindow" >> beam.WindowInto(beam_window.GlobalWindows()))
        assert_that(result, equal_to(expected))


def _exact_stamps(stamps: list[int]) -> list[int]:
    # Beam's TimestampedValue takes float seconds; use stamps that survive the float round trip exactly.
    from apache_beam.utils.timestamp import Timestamp

    return [Timestamp.of(s / 1e6).micros for s in stamps]


@pytest.mark.parametrize("spec", [
    WindowSpec("fixed", size_us=HOUR),
    WindowSpec("fixed", size_us=HOUR, offset_us=900_000_000),
    WindowSpec("fixed", size_us=60_000_000),
    WindowSpec("sliding", size_us=HOUR, period_us=HOUR // 4),
    WindowSpec("sliding", size_us=600_000_000, period_us=60_000_000, offset_us=30_000_000),
    WindowSpec("global"),
], ids=["fixed-1h", "fixed-1h-offset-15m", "fixed-60s", "sliding-1h-15m", "sliding-10m-1m-offset", "global"])
def test_assigned_windows_equal_beam_window_into(spec: WindowSpec) -> None:
    stamps = _exact_stamps(_timestamps())
    windowfn = window_stage.build_windowfn(spec)
    ours = [(i, w) for i, ts in enumerate(stamps) for w in assign(windowfn, ts, {})]
    assert len(ours) >= len(stamps)
    _assert_beam_assigns(window_stage.build_windowfn(spec), stamps, ours)


def test_session_windows_merge_like_beam_group_by_key() -> None:
    rnd = random.Random(5)
    gap = 600_000_000
    # Millisecond stamps: after a GroupByKey Beam's IntervalWindowCoder floors window bounds to ms
    # (catalogue W4), which parity's replay deliberately does not model.
    events = [(rnd.choice("abc"), 1_700_000_000_000_000 + rnd.randrange(0, 4 * HOUR // 1000) * 1000)
              for _ in range(200)]
    events += [("d", 0), ("d", 10 * 1_000_000), ("d", 20 * 1_000_000)]  # exactly `gap`... apart in seconds
    spec = WindowSpec("session", gap_us=10 * 1_000_000)
    for gap_spec in (WindowSpec("session", gap_us=gap), spec):
        windowfn = window_stage.build_windowfn(gap_spec)
        ours = []
        for key in sorted({k for k, _ in events}):
            protos = [w for k, ts in events if k == key for w in assign(windowfn, ts, {})]
            mapping = window_stage.merge_windows(windowfn, protos)
            ours += [(key, w) for w in sorted(set(mapping.values()))]
        assert len(ours) > 4
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            merged = (pipeline
                      | beam.Create(events)
                      | beam.Map(lambda kv: beam_window.TimestampedValue(kv, kv[1] / 1e6))
                      | beam.WindowInto(window_stage.build_windowfn(gap_spec))
                      | beam.GroupByKey()
                      | beam.ParDo(_KeyWindow())
                      | "Rewindow" >> beam.WindowInto(beam_window.GlobalWindows()))
            assert_that(merged, equal_to(ours))


class _KeyWindow(beam.DoFn):
    def process(self, element, win=beam.DoFn.WindowParam):
        yield element[0], window_stage.to_window(win)


def test_events_exactly_one_gap_apart_form_separate_sessions() -> None:
    windowfn = window_stage.build_windowfn(WindowSpec("session", gap_us=10_000_000))
    protos = [w for ts in (0, 10_000_000, 20_000_000) for w in assign(windowfn, ts, {})]
    assert sorted(set(window_stage.merge_windows(windowfn, protos).values())) == [
        (0, 10_000_000), (10_000_000, 20_000_000), (20_000_000, 30_000_000)]


def test_a_record_arriving_after_the_watermark_passed_its_window_is_late() -> None:
    spec = LatenessSpec(arrival="arrival", out_of_orderness_us=0, allowed_us=0)
    hour = (0, HOUR)
    next_hour = (HOUR, 2 * HOUR)
    arrivals = [
        (10, 100, 1, "a", [hour]),
        (20, HOUR + 5, 2, "b", [next_hour]),   # watermark moves past the first hour
        (30, 200, 3, "c", [hour]),             # arrives after: late
        (40, HOUR + 10, 4, "d", [next_hour]),  # on time
    ]
    assert window_stage.replay_lateness(spec, arrivals) == {"c": [hour]}


def test_allowed_lateness_keeps_a_record_within_it() -> None:
    spec = LatenessSpec(arrival="arrival", out_of_orderness_us=0, allowed_us=HOUR)
    arrivals = [(10, HOUR + 5, 1, "b", [(HOUR, 2 * HOUR)]), (30, 200, 3, "c", [(0, HOUR)])]
    assert window_stage.replay_lateness(spec, arrivals) == {}


def test_lateness_does_not_depend_on_read_order() -> None:
    spec = LatenessSpec(arrival="arrival", out_of_orderness_us=5, allowed_us=0)
    rnd = random.Random(9)
    arrivals = []
    for i in range(500):
        event = rnd.randrange(0, 4 * HOUR)
        start = event - event % HOUR
        arrivals.append((event + rnd.randrange(0, HOUR // 2), event, i, i, [(start, start + HOUR)]))
    shuffled = arrivals[:]
    rnd.shuffle(shuffled)
    late = window_stage.replay_lateness(spec, arrivals)
    assert late and late == window_stage.replay_lateness(spec, shuffled)
