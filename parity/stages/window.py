"""The `window` stage: what a config says of it (`WindowSpec`, `LatenessSpec`), window assignment with Beam's own
WindowFns (`assign_many`, its one batch function), merging, and lateness replay.

Windows are plain tuples so they hash, sort and pickle cheaply: `(start_us, end_us)` for an interval
window and `("global",)` for the global window.

Beam is imported in the functions that use it, not with the module: the config imports the specs from here, and
loading a config does not import Beam.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from parity.errors import UserCodeError
from parity.stages.reference import Reference

if TYPE_CHECKING:
    from apache_beam.transforms import window as beam_window

WINDOW_TYPES = ("fixed", "sliding", "session", "global")
MAX_WINDOWS_PER_RECORD = 10_000       # windows a sliding window puts one record in (size / period)


@dataclass(frozen=True)
class LatenessSpec:
    """A side's `window.lateness:`: the field holding each record's arrival time, how far the watermark trails
    the largest event time seen (`out_of_orderness`) and how late a record may still be (`allowed`)."""

    arrival: str
    out_of_orderness_us: int
    allowed_us: int


@dataclass(frozen=True)
class WindowSpec:
    """A side's `window:`: a built-in window's type and durations, or a user `windowfn` factory."""

    type: str  # fixed | sliding | session | global | windowfn
    size_us: int = 0
    period_us: int = 0
    offset_us: int = 0
    gap_us: int = 0
    windowfn: Reference | None = None
    lateness: LatenessSpec | None = None


# The value of each stage after the window of a record its side dropped as late (the replay and the taps alike)
DROPPED_LATE = {"dropped": "late"}

Window = tuple
GLOBAL: Window = ("global",)


class TooManyWindowsError(UserCodeError):
    """A WindowFn assigns one record to more than MAX_WINDOWS_PER_RECORD windows (e.g. sliding 1d every 1us):
    replaying it would hold that many windows, aggregates and fingerprints per record."""


def _too_many(count: int | None) -> TooManyWindowsError:
    how_many = f"{count:,}" if count is not None else f"more than {MAX_WINDOWS_PER_RECORD:,}"
    return TooManyWindowsError(f"the WindowFn assigns a record to {how_many} windows, above the limit of "
                               f"{MAX_WINDOWS_PER_RECORD:,} per record; use fewer windows per record (e.g. a "
                               f"sliding window with a longer period)")


def build_windowfn(spec: WindowSpec | None) -> beam_window.WindowFn:
    """The Beam WindowFn a side's window config denotes (global when the side has none)."""
    from apache_beam.transforms import window as beam_window
    from apache_beam.utils.timestamp import Duration, Timestamp

    if spec is None or spec.type == "global":
        return beam_window.GlobalWindows()
    if spec.type == "fixed":
        return beam_window.FixedWindows(Duration(micros=spec.size_us), Timestamp(micros=spec.offset_us))
    if spec.type == "sliding":
        return beam_window.SlidingWindows(Duration(micros=spec.size_us), Duration(micros=spec.period_us),
                                          Timestamp(micros=spec.offset_us))
    if spec.type == "session":
        return beam_window.Sessions(Duration(micros=spec.gap_us))
    factory = spec.windowfn.resolve()  # type: ignore[union-attr]
    try:
        windowfn = factory()
    except Exception as exc:
        raise UserCodeError(f"window.windowfn '{spec.windowfn.text}' raised "  # type: ignore[union-attr]
                            f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(windowfn, beam_window.WindowFn):
        raise UserCodeError(f"window.windowfn '{spec.windowfn.text}' returned a "  # type: ignore[union-attr]
                            f"{type(windowfn).__name__}, expected an apache_beam WindowFn")
    return windowfn


def to_window(beam_win: Any) -> Window:
    """A Beam window as a plain tuple."""
    from apache_beam.transforms import window as beam_window

    if isinstance(beam_win, beam_window.GlobalWindow):
        return GLOBAL
    return (beam_win.start.micros, beam_win.end.micros)


def to_beam_window(win: Window) -> Any:
    from apache_beam.transforms import window as beam_window
    from apache_beam.utils.timestamp import Timestamp

    if win == GLOBAL:
        return beam_window.GlobalWindow()
    return beam_window.IntervalWindow(Timestamp(micros=win[0]), Timestamp(micros=win[1]))


def assign_many(windowfn: beam_window.WindowFn, timestamps: Sequence[int | None],
                records: Sequence[dict]) -> list[list[Window]]:
    """The windows Beam's `windowfn` assigns to each record with its event time (None: Beam's minimum
    timestamp), each list sorted.

    Raises:
        TooManyWindowsError: a record would be in more than MAX_WINDOWS_PER_RECORD windows.
        Exception: whatever a user WindowFn raises, unchanged; the caller finds the record (one-record
            batches) and names it.
    """
    from apache_beam.transforms import window as beam_window
    from apache_beam.utils.timestamp import MIN_TIMESTAMP, Timestamp

    if isinstance(windowfn, beam_window.SlidingWindows):  # Beam's assign builds the whole list: check first
        _check_sliding(windowfn)
    arithmetic = _built_in_windows(windowfn, timestamps)
    if arithmetic is not None:
        return arithmetic
    out = []
    for timestamp_us, record in zip(timestamps, records):
        ts = MIN_TIMESTAMP if timestamp_us is None else Timestamp(micros=timestamp_us)
        context = beam_window.WindowFn.AssignContext(ts, element=record)
        windows = list(itertools.islice(windowfn.assign(context), MAX_WINDOWS_PER_RECORD + 1))
        if len(windows) > MAX_WINDOWS_PER_RECORD:
            raise _too_many(None)
        out.append(sorted(to_window(w) for w in windows))
    return out


def _built_in_windows(windowfn: beam_window.WindowFn,
                      timestamps: Sequence[int | None]) -> list[list[Window]] | None:
    """`assign_many` for Beam's built-in global, fixed and sliding WindowFns (every record stamped for the last
    two): their `assign` in integer arithmetic on µs, without a Timestamp object per record. None for any
    other WindowFn, which `assign_many` calls."""
    from apache_beam.transforms import window as beam_window

    kind = type(windowfn)
    if kind is beam_window.GlobalWindows:
        return [[GLOBAL] for _ in timestamps]
    if kind is beam_window.FixedWindows and None not in timestamps:
        size, offset = windowfn.size.micros, windowfn.offset.micros
        out = []
        for ts in timestamps:
            start = ts - (ts - offset) % size  # Python's % is floored, like Beam's Duration modulus
            out.append([(start, start + size)])
        return out
    if kind is beam_window.SlidingWindows and None not in timestamps:
        size, period, offset = windowfn.size.micros, windowfn.period.micros, windowfn.offset.micros
        out = []
        for ts in timestamps:
            start = ts - (ts - offset) % period
            out.append(sorted((s, s + size) for s in range(start, ts - size, -period)))
        return out
    return None


def _check_sliding(windowfn: beam_window.SlidingWindows) -> None:
    per_record = -(-windowfn.size.micros // windowfn.period.micros)
    if per_record > MAX_WINDOWS_PER_RECORD:
        raise _too_many(per_record)


def is_merging(windowfn: beam_window.WindowFn) -> bool:
    return bool(windowfn.is_merging())


@functools.cache
def _merge_context() -> type:
    """The MergeContext that records which window each proto-window merges into (a class made once, on first
    use, since its base is Beam's)."""
    from apache_beam.transforms import window as beam_window

    class _MergeContext(beam_window.WindowFn.MergeContext):
        def __init__(self, windows: Iterable[Any]):
            super().__init__(windows)
            self.merged: dict[Any, Any] = {}

        def merge(self, to_be_merged: Iterable[Any], merge_result: Any) -> None:
            for win in to_be_merged:
                self.merged[win] = merge_result

    return _MergeContext


def merge_windows(windowfn: beam_window.WindowFn, windows: Iterable[Window]) -> dict[Window, Window]:
    """Maps each proto-window of one grouping key to the window Beam's `windowfn.merge` makes of it."""
    beam_windows = [to_beam_window(w) for w in sorted(set(windows))]
    context = _merge_context()(beam_windows)
    windowfn.merge(context)
    return {to_window(w): to_window(context.merged.get(w, w)) for w in beam_windows}


def windows_per_group(rids: Sequence[Any], windows: Sequence[list[Window]], group_bytes: Sequence[bytes],
                      late: Mapping[Any, list[Window]]) -> dict[bytes, set[Window]]:
    """The proto-windows of each grouping key in a batch (its records' windows but those each record is late
    for): what a merging WindowFn merges, per key (`merge_windows`, once every batch's are together)."""
    groups: dict[bytes, set[Window]] = {}
    for rid, record_windows, group in zip(rids, windows, group_bytes):
        expired = late.get(rid, ()) if late else ()
        groups.setdefault(group, set()).update(w for w in record_windows if w not in expired)
    return groups


def final_windows(windows: list[Window], expired: Iterable[Window] | None, group_bytes: bytes,
                  merges: Mapping[bytes, Mapping[Window, Window]]) -> list[Window]:
    """The windows a record is in after lateness (`expired`: the windows it was late for) and merging
    (`merges`: each grouping key's proto-windows mapped to the windows they merged into)."""
    kept = [w for w in windows if w not in expired] if expired else windows
    if merges and kept:
        mapping = merges.get(group_bytes, {})
        kept = sorted({mapping.get(w, w) for w in kept})
    return kept


def window_value(timestamp_us: int | None, window_lists: list[list], expired: Sequence[Window] | None,
                 dropped: bool) -> dict[str, Any]:
    """The window stage's value of a record: its event time and windows, and `late` when its side dropped it
    (late for each of its windows) or the windows it was late for (`late_windows`) when it kept some."""
    value: dict[str, Any] = {"timestamp_us": timestamp_us, "windows": window_lists}
    if dropped:
        value["late"] = True
    elif expired:
        value["late_windows"] = [list(w) for w in expired]
    return value


def on_time_window_values(timestamps: Sequence[int | None], window_lists: Sequence[list[list]]) -> list[dict]:
    """`window_value` of each record of a batch that is on time for all of its windows (one per record, paired
    by position): its event time and window lists, built in one comprehension rather than a call per record."""
    return [{"timestamp_us": timestamp_us, "windows": lists} for timestamp_us, lists in zip(timestamps, window_lists)]


def max_timestamp_us(win: Window) -> int:
    """Beam's `window.max_timestamp()`: the end minus one microsecond (global: +inf)."""
    return 2**63 - 1 if win == GLOBAL else win[1] - 1


def replay_lateness(spec: LatenessSpec,
                    arrivals: Sequence[tuple[int, int, int, Any, Sequence[Window]]]) -> dict[Any, list[Window]]:
    """Replays the records in arrival order and finds the windows each record is late for.

    Each arrival is `(arrival_us, event_us, tie_breaker, record_id, windows)`. The watermark after a record
    arrives is the largest event time seen so far minus `out_of_orderness`; a window is expired for a record
    when `window.max_timestamp() + allowed < watermark` (Beam's late-data dropping rule). Ties in arrival
    time are broken by event time and then `tie_breaker` (the input fingerprint), so the result does not
    depend on the order the records were read in.

    Returns `{record_id: [expired windows]}` for the records with at least one expired window.
    """
    late: dict[Any, list[Window]] = {}
    max_event = None
    for arrival_us, event_us, _, record_id, windows in sorted(arrivals, key=lambda a: a[:3]):
        if max_event is None or event_us > max_event:
            max_event = event_us
        watermark = max_event - spec.out_of_orderness_us
        expired = [w for w in windows if max_timestamp_us(w) + spec.allowed_us < watermark]
        if expired:
            late[record_id] = expired
    return late


_SAFE = 1 << 61  # times (µs) within ±2**61 leave numpy's int64 room for the watermark arithmetic


def late_records(spec: LatenessSpec,
                 arrivals: Sequence[tuple[int, int, int, Any, Sequence[Window]]]) -> dict[Any, list[Window]]:
    """`replay_lateness` with numpy: the same result, the sort and the running watermark in compiled code.

    Falls back to `replay_lateness` when a time or duration is beyond ±2**61 µs (73,000 years) or the tie
    breakers fit neither int64 nor uint64.
    """
    import numpy as np

    if not arrivals:
        return {}
    if not (0 <= spec.out_of_orderness_us < _SAFE and 0 <= spec.allowed_us < _SAFE):
        return replay_lateness(spec, arrivals)
    try:
        arrival = np.array([a[0] for a in arrivals], dtype=np.int64)
        event = np.array([a[1] for a in arrivals], dtype=np.int64)
        ties = [a[2] for a in arrivals]
        try:
            tie = np.array(ties, dtype=np.int64)
        except OverflowError:
            tie = np.array(ties, dtype=np.uint64)
    except (OverflowError, TypeError, ValueError):
        return replay_lateness(spec, arrivals)
    if (np.abs(arrival) >= _SAFE).any() or (np.abs(event) >= _SAFE).any():
        return replay_lateness(spec, arrivals)
    # Each record's earliest window end: it can only be late once the watermark passes that.
    ends = [min(min((max_timestamp_us(w) for w in a[4]), default=_SAFE), _SAFE) for a in arrivals]
    if min(ends) <= -_SAFE:
        return replay_lateness(spec, arrivals)
    first_expiry = np.array(ends, dtype=np.int64)
    order = np.lexsort((tie, event, arrival))  # the last key sorts first: (arrival, event, tie breaker)
    watermark = np.maximum.accumulate(event[order]) - spec.out_of_orderness_us
    candidates = np.flatnonzero(first_expiry[order] + spec.allowed_us < watermark)
    late: dict[Any, list[Window]] = {}
    for position in candidates.tolist():
        _, _, _, record_id, windows = arrivals[order[position]]
        limit = int(watermark[position])
        expired = [w for w in windows if max_timestamp_us(w) + spec.allowed_us < limit]
        if expired:
            late[record_id] = expired
    return late
