"""PTransforms for users' own Beam pipelines: taps that fingerprint one stage where it runs.

    import parity.beam as pb

    trips = lines | beam.Map(json.loads) | "TapInput" >> pb.TapStage("input", SET, key_fields=["trip_id"])
    ...
    pipeline.run().wait_until_finish()
    pb.finalize(SET, key=["trip_id"])          # -> SET is a fingerprint set `parity diff` reads

`TapStage` passes its input through unchanged (its output *is* its input PCollection), so it can be put after
any step. It fingerprints each element as the named stage with exactly the value a `parity replay` computes
for that stage (docs/design.md, "Stage values"), so a tapped set diffs cleanly against a replayed one:

| stage | default value of an element |
|---|---|
| `input` | the element (a record dict) |
| `window` | `{"timestamp_us": µs, "windows": [[start_us, end_us], ...]}` from Beam's own timestamp and windows |
|          | of the element (global window: `[["global"]]`; no timestamp: null); `late=True` adds `"late": true` |
| `shard`, `coder`, `seed` | the element (pass `value_fn` to shape it as the replay does) |
| `transform` | the element, a dict of features: one fingerprint per feature; the stage's fingerprint is |
|             | that of `{feature: fingerprint}` |

`value_fn(element) -> value` replaces the default at any stage, and `key_fn(element) -> key` replaces
`key_fields` (one field: its value; several: the list of their values, as `capture.key` keys a replay).

Writing is per batch: each tap buffers up to `batch_size` fingerprinted elements and writes them as one part
when the buffer is full and at the end of each bundle (`finish_bundle`); a part's name is the stage, the
label and a hash of the batch's keys and fingerprints, so a retried bundle overwrites its own part.
Sampling, values and finalize: parity/sets/tap_set.py and docs/taps.md.
"""
from __future__ import annotations

import heapq
import json
import re
from typing import Any, Callable, Iterable, Sequence

import apache_beam as beam
import numpy as np
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import MIN_TIMESTAMP

from parity.capture import reason_kind
from parity.encoding import canonical
from parity.encoding.fingerprint import (digest_hex, feature_fingerprints, fingerprint_bytes, key_fingerprint,
                                         key_fingerprint_int)
from parity.sets.fingerprint_set import write_quarantine_part
from parity.sets.tap_finalize import finalize_tap_set
from parity.sets.tap_set import (DROPPED_LATE, NOT_SEEN, SAMPLE_RULE, TAP_FORMAT, UNTAPPED, key_sampled,
                                 sample_threshold, write_tap_meta, write_tap_part, write_worker_environment)
from parity.stages import STAGES
from parity.storage.context import Storage

__all__ = ["DROPPED_LATE", "NOT_SEEN", "UNTAPPED", "TapStage", "finalize", "key_sampled", "sampled"]

_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")
# A record passes every tap of a job with the same key: its canonical bytes and 128-bit fingerprint are
# computed once per worker process and looked up by the taps after. One cache per exact type (1, 1.0 and
# True are equal in Python but not in the canonical encoding), holding only atomic objects, which the
# garbage collector does not track. Bounded: emptied when full.
_KEY_CACHES: dict[type, dict[Any, tuple[bytes, int]]] = {int: {}, str: {}, bytes: {}}
_KEY_CACHE_SIZE = 1 << 17
_MIN_US = MIN_TIMESTAMP.micros


def finalize(set_dir: str, *, storage_options: Sequence[str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Merges what the taps wrote under `set_dir` into a fingerprint set (parity.sets.tap_finalize.finalize_tap_set);
    run it after the pipeline has finished. Returns the manifest. A URL `set_dir` is read and written with
    `storage_options` (the taps' own, e.g. `["--s3_endpoint_url=..."]`), or with `storage=` a
    `parity.storage.context.Storage`."""
    if storage_options is not None:
        kwargs["storage"] = Storage.of(storage_options)
    return finalize_tap_set(set_dir, **kwargs)


def sampled(key: Any, rate: float) -> bool:
    """Whether a record key is in the deterministic sample at `rate` (the rule every tap applies)."""
    return key_sampled(key_fingerprint(key), rate)


_STORE_PREFIXES = ("s3_", "gcs_")  # the options a store's client reads (Beam's S3Options, parity's limits)


def _store_options(options: Any) -> tuple[str, ...]:
    """The object-store options among a pipeline's options (`--s3_endpoint_url=...`), as `--name=value` strings;
    none when the pipeline has no options object."""
    if options is None:
        return ()
    found = options.get_all_options(drop_default=True, retain_unknown_options=True)
    return tuple(f"--{name}" if value is True else f"--{name}={value}" for name, value in sorted(found.items())
                 if name.startswith(_STORE_PREFIXES) and value not in (None, False)
                 and not isinstance(value, (list, dict)))


def _callable_name(fn: Callable) -> str:
    return f"fn:{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"


class TapStage(beam.PTransform):
    """Fingerprints the elements flowing at this point of a pipeline as one parity stage.

    Args:
        set_dir: the fingerprint set's folder, shared by every tap of the job: a local or mounted path, or a URL
            Beam's FileSystems support (`s3://...`, written with `storage_options`).
        key_fields: the record key: one field (its value) or several (the list of their values); the
            config's `capture.key`. Elements must then be dicts.
        key_fn: `fn(element) -> key` instead of `key_fields` (e.g. for `(record, features)` pairs).
        value_fn: `fn(element) -> stage value` instead of the default (module doc).
        side: the side's name in reports.
        sample_rate: fraction of keys tapped, deterministic by key (parity/sets/tap_set.py); use one rate for
            every tap of a set.
        keep_values: keep the canonical values of this many records (the smallest key fingerprints) for
            `parity show` and cause classification; None keeps all, 0 none.
        redact: keep no values at all, and record keys as their fingerprints only.
        label: names the tap's folder (default: the stage; `window-late` for `late=True`); two taps of one
            stage need two labels.
        late: the elements here are the ones the pipeline drops as late (e.g. its late-data output): their
            window value is marked late and every later stage gets `{"dropped": "late"}`, as in a replay.
            Window stage only.
        batch_size: elements per written part at most.
        storage_options: the pipeline options a URL `set_dir` is written with (`["--s3_endpoint_url=..."]`,
            parity's `--s3_read_timeout=...`); default: the pipeline's own `s3_*` and `gcs_*` options. The tap
            carries them to its workers; nothing process-wide is set (Beam's FileSystems and S3IO are left as
            they are), so taps with other options in one process each write with their own.
    """

    def __init__(self, stage: str, set_dir: str, *, key_fields: Sequence[str] | str | None = None,
                 key_fn: Callable[[Any], Any] | None = None, value_fn: Callable[[Any], Any] | None = None,
                 side: str = "production", sample_rate: float = 1.0, keep_values: int | None = 1000,
                 redact: bool = False, label: str | None = None, late: bool = False, batch_size: int = 10000,
                 storage_options: Sequence[str] | None = None):
        super().__init__()
        if stage not in STAGES:
            raise ValueError(f"TapStage: unknown stage {stage!r}; expected one of {', '.join(STAGES)}")
        if isinstance(key_fields, str):
            key_fields = [key_fields]
        if (key_fields is None) == (key_fn is None):
            raise ValueError("TapStage: pass exactly one of key_fields (the config's capture.key) or key_fn")
        if key_fields is not None and not key_fields:
            raise ValueError("TapStage: key_fields must name at least one field")
        sample_threshold(sample_rate)  # validates
        if keep_values is not None and (isinstance(keep_values, bool) or not isinstance(keep_values, int)
                                        or keep_values < 0):
            raise ValueError(f"TapStage: keep_values must be a count >= 0 or None, got {keep_values!r}")
        if late and stage != "window":
            raise ValueError("TapStage: late=True taps the records a pipeline drops as late: stage 'window' only")
        if batch_size < 1:
            raise ValueError(f"TapStage: batch_size must be >= 1, got {batch_size}")
        self.stage = stage
        self.set_dir = set_dir
        self.key_fields = list(key_fields) if key_fields is not None else None
        self.key_fn = key_fn
        self.value_fn = value_fn
        self.side = side
        self.sample_rate = sample_rate
        self.keep_values = 0 if redact else keep_values
        self.redact = redact
        self.late = late
        self.batch_size = batch_size
        self.storage_options = None if storage_options is None else tuple(storage_options)
        self.tap_label = _LABEL.sub("_", label) if label else (f"{stage}-late" if late else stage)

    def meta(self, runner: str | None = None) -> dict[str, Any]:
        return {"tap_format": TAP_FORMAT, "encoding": canonical.ENCODING_VERSION, "stage": self.stage,
                "label": self.tap_label, "side": self.side,
                "key": self.key_fields if self.key_fields is not None else _callable_name(self.key_fn),
                "key_fields": self.key_fields is not None, "sample_rate": self.sample_rate,
                "sample_rule": SAMPLE_RULE, "keep_values": self.keep_values, "redact": self.redact,
                "late": self.late, "value_fn": _callable_name(self.value_fn) if self.value_fn else None,
                "runner": runner}

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        runner = getattr(pcoll.pipeline, "runner", None)
        storage = Storage.of(self.storage_options if self.storage_options is not None
                             else _store_options(getattr(pcoll.pipeline, "options", None)))
        folder = write_tap_meta(self.set_dir, self.meta(type(runner).__name__ if runner is not None else None),
                                storage)
        fn_class = _WindowTapFn if self.stage == "window" and self.value_fn is None else _TapFn
        _ = pcoll | "Fingerprint" >> beam.ParDo(fn_class(self, folder, storage))
        return pcoll


class _TapFn(beam.DoFn):
    """Keys, samples, fingerprints and buffers elements; writes a part per full buffer and per bundle.

    The per-element path is kept short: Beam calls it once per element of the job at every tap, so each
    attribute lookup, call and container it makes is paid millions of times. The buffer is one flat list of
    atomic objects, four per record (key fp, key bytes, fingerprint, value bytes or None), split into columns
    when written: no container per element, so the garbage collector, which scans every container a worker
    holds (the job's own heap included) whenever enough of them have been made, is seldom woken.
    """

    def __init__(self, tap: TapStage, folder: str, storage: Storage):
        self._stage = tap.stage
        self._label = tap.tap_label
        self._folder = folder
        self._key_fields = tap.key_fields
        self._key_fn = tap.key_fn
        self._value_fn = tap.value_fn
        self._rate = tap.sample_rate
        self._keep = tap.keep_values
        self._redact = tap.redact
        self._late = tap.late
        self._batch_size = tap.batch_size
        self._storage = storage  # the tap's storage context, for a worker that writes to a URL

    def setup(self) -> None:
        from parity.replay.environment import environment_manifest

        # Sampling on the key's 128-bit fingerprint d as an int: d >> 64 < threshold iff d < threshold << 64.
        self._limit = sample_threshold(self._rate) << 64
        # A single key field is read inline; other keys go through _slow_key.
        self._field = self._key_fields[0] if self._key_fields is not None and len(self._key_fields) == 1 \
            else None
        self._limit_rows = 4 * self._batch_size
        self._transform = self._stage == "transform"
        # The `keep_values` smallest key fingerprints this instance has seen (negated: a max-heap), and the set
        # of them: a record is kept when its key is among them when it arrives. That is a superset of the
        # set-wide smallest `keep_values` (each of those has fewer smaller keys anywhere), which finalize keeps.
        # `_bound` is the largest key the heap would keep (every key while it is not full): a key above it is
        # not kept, decided by one comparison.
        self._heap: list[int] = []
        self._heap_keys: set[int] = set()
        self._bound = -1 if self._keep == 0 else 1 << 128
        write_worker_environment(self._folder, environment_manifest(), self._storage)

    def start_bundle(self) -> None:
        self._rows: list = []  # key fp, key bytes, stage fp, value bytes (None when not kept): 4 per record
        # transform stage: per record its feature count (-1: the value is not a dict), and the flat
        # (name, fingerprint) pairs of all records, sorted by name within each record
        self._feature_counts: list[int] = []
        self._feature_names: list[str] = []
        self._feature_fps: list[int] = []
        self._quarantined: list[dict] = []

    # -- per element

    def _entry(self, element: Any) -> tuple[bytes, bytes, int] | None:
        """(key bytes, key fp, key fp as an int) of an element, or None when it is quarantined."""
        field = self._field
        if field is not None and type(element) is dict:
            key = element.get(field)
            if key is None:
                self._quarantine(element, f"missing key field '{field}': key_fields names it; the record "
                                          f"lacks it or it is null")
                return None
        else:
            key = self._slow_key(element)
            if key is None:
                return None
        cache = _KEY_CACHES.get(type(key))
        if cache is not None:
            entry = cache.get(key)
            if entry is not None:
                return entry
        try:
            key_bytes = canonical.encode(key)
        except Exception as exc:
            self._quarantine(element, f"key: {type(exc).__name__}: {exc}")
            return None
        digest = key_fingerprint_int(key_bytes)
        entry = (key_bytes, digest.to_bytes(16, "big"), digest)  # == key_fingerprint_bytes(key_bytes)
        if cache is not None:
            if len(cache) >= _KEY_CACHE_SIZE:
                cache.clear()
            cache[key] = entry
        return entry

    def _slow_key(self, element: Any) -> Any:
        """The key of an element through key_fn or several key fields; None after quarantining it."""
        try:
            if self._key_fn is not None:
                key = self._key_fn(element)
                if key is None:
                    self._quarantine(element, "missing key: key_fn returned None")
                return key
            fields = self._key_fields
            if not isinstance(element, dict):
                self._quarantine(element, f"not a record: a {type(element).__name__}, and key_fields "
                                          f"{fields} need a dict (pass key_fn)")
                return None
            if len(fields) == 1:  # type: ignore[arg-type]
                key = element.get(fields[0])  # type: ignore[index]
                missing = [fields[0]] if key is None else []  # type: ignore[index]
            else:
                key = [element.get(f) for f in fields]  # type: ignore[union-attr]
                missing = [f for f, v in zip(fields, key) if v is None]  # type: ignore[arg-type]
            if missing:
                self._quarantine(element, f"missing key field '{missing[0]}': key_fields names it; the "
                                          f"record lacks it or it is null")
                return None
            return key
        except Exception as exc:
            self._quarantine(element, f"key: {type(exc).__name__}: {exc}")
            return None

    def _quarantine(self, element: Any, reason: str) -> None:
        preview = "" if self._redact else repr(element)[:120]
        self._quarantined.append({"location": f"tap {self._stage}/{self._label}", "reason": reason,
                                  "reason_kind": reason_kind(reason), "preview": preview})

    def process(self, element: Any) -> Iterable[Any] | None:  # outputs nothing; Beam 2.78 refuses `-> None`
        entry = self._entry(element)
        if entry is None or entry[2] >= self._limit:  # quarantined, or outside the sample
            return
        key_bytes, key_fp, digest = entry
        try:
            value = element if self._value_fn is None else self._value_fn(element)
            if self._transform and type(value) is dict:
                self._process_features(value, key_bytes, key_fp, digest)
                return
            data = canonical.encode(value)
        except Exception as exc:
            self._quarantine(element, f"value: {type(exc).__name__}: {exc}")
            return
        rows = self._rows
        rows += (key_fp, key_bytes, fingerprint_bytes(data),
                 data if digest <= self._bound and self._keeps(digest) else None)
        if self._transform:
            self._feature_counts.append(-1)
        if len(rows) >= self._limit_rows:
            self._flush()
        return  # emits nothing: the tap's branch ends here

    def _process_features(self, value: dict, key_bytes: bytes, key_fp: bytes, digest: int) -> None:
        """The transform stage: a fingerprint per feature; the stage's is that of {feature: fingerprint}
        (`feature_fingerprints`, as the replay computes it)."""
        data, pairs, fp = feature_fingerprints(value)
        kept = digest <= self._bound and self._keeps(digest)
        rows = self._rows
        rows += (key_fp, key_bytes, fp, data if kept else None)
        self._feature_counts.append(len(pairs))
        if pairs:
            names, fps = zip(*pairs)
            self._feature_names += names
            self._feature_fps += fps
        if len(rows) >= self._limit_rows:
            self._flush()

    def _keeps(self, value: int) -> bool:
        """Whether the record of this key fingerprint keeps its value (called only when value <= _bound)."""
        keep = self._keep
        if keep is None:
            return True
        heap, members = self._heap, self._heap_keys
        if value in members:
            return True
        if len(heap) < keep:
            heapq.heappush(heap, -value)
            members.add(value)
        else:
            members.discard(-heapq.heapreplace(heap, -value))
            members.add(value)
        if len(heap) >= keep:
            self._bound = -heap[0]
        return True

    def finish_bundle(self) -> None:
        self._flush()

    # -- writing

    def _flush(self) -> None:
        if self._quarantined:
            entries, self._quarantined = self._quarantined, []
            digest = f"{fingerprint_bytes(json.dumps(entries, sort_keys=True).encode()):016x}"
            write_quarantine_part(self._folder, f"{self._stage}-q-{digest}", entries, self._storage)
        if not self._rows:
            return
        self._finish_values()
        rows, self._rows = self._rows, []
        key_fps, key_bytes, fps, values = rows[0::4], rows[1::4], rows[2::4], rows[3::4]
        features = None
        if self._transform:
            features = (self._feature_counts, self._feature_names, self._feature_fps)
            self._feature_counts, self._feature_names, self._feature_fps = [], [], []
        write_tap_part(self._folder, f"{self._stage}-{self._label}-{part_digest(key_fps, fps)}", self._stage,
                       key_fps, fps, features, None if self._redact else key_bytes, values, self._storage)

    def _finish_values(self) -> None:
        """Fills the buffered fingerprints and values that wait for the end of the batch (window stage)."""


def _window(window: Any) -> list:
    return ["global"] if isinstance(window, beam_window.GlobalWindow) else [window.start.micros, window.end.micros]


class _WindowTapFn(_TapFn):
    """The window stage: the value is read from Beam's own timestamp and windows of each element.

    It asks Beam for the element's `WindowedValueParam` (its timestamp and all its windows in one call)
    rather than `WindowParam`, for which Beam calls a DoFn once per window, through its slower per-window
    path. When a step before the tap did split an element by window (a DoFn reading `WindowParam` that
    emits the same object in each of its windows), Beam delivers the parts one after the other with the same
    element and timestamp objects: they are merged into one record with all its windows.
    A record's row holds its timestamp and whether its value is kept until the batch is written; its values
    are then built and encoded together, once every window of its last element is known.
    """

    def start_bundle(self) -> None:
        super().start_bundle()
        self._last: Any = None
        self._windows: list[list] = []  # per record, its windows ([start_us, end_us] or ["global"])
        self._window_lists: dict[Any, list] = {}  # a window -> the one-window list of it, shared

    if hasattr(beam.DoFn, "WindowedValueParam"):
        def process(self, element: Any, windowed=beam.DoFn.WindowedValueParam) -> Iterable[Any] | None:  # type: ignore[override]
            self._windowed(element, windowed.timestamp, windowed.windows)
    else:  # older Beam (e.g. 2.59) has no WindowedValueParam: a call per window, merged by `_windowed`
        def process(self, element: Any, timestamp=beam.DoFn.TimestampParam,  # type: ignore[override]
                    window=beam.DoFn.WindowParam) -> Iterable[Any] | None:
            self._windowed(element, timestamp, (window,))

    def _windowed(self, element: Any, timestamp: Any, windows: Any) -> None:
        last = self._last
        if last is not None and last[0] is element and last[2] is timestamp:  # the element's other windows
            i = last[1]
            if i is not None:
                self._windows[i] = self._windows[i] + [_window(w) for w in windows]  # never a shared list
            return
        if len(self._rows) >= self._limit_rows:  # only between elements: an element's windows stay together
            self._flush()
        entry = self._entry(element)
        if entry is None or entry[2] >= self._limit:  # quarantined or outside the sample
            self._last = (element, None, timestamp)
            return
        if len(windows) == 1:
            listed = self._window_lists.get(windows[0])
            if listed is None:
                if len(self._window_lists) >= 4096:
                    self._window_lists.clear()
                listed = self._window_lists[windows[0]] = [_window(windows[0])]
        else:
            listed = [_window(w) for w in windows]
        digest = entry[2]
        ts = timestamp.micros if timestamp is not None else _MIN_US
        rows = self._rows
        rows += (entry[1], entry[0], None if ts <= _MIN_US else ts, digest <= self._bound and self._keeps(digest))
        self._last = (element, len(self._windows), timestamp)
        self._windows.append(listed)
        return

    def _finish_values(self) -> None:
        self._last = None
        rows, windows = self._rows, self._windows
        self._windows = []
        if self._late:
            values = [{"timestamp_us": ts, "windows": w if len(w) == 1 else sorted(w), "late": True}
                      for ts, w in zip(rows[2::4], windows)]
        else:
            values = [{"timestamp_us": ts, "windows": w if len(w) == 1 else sorted(w)}
                      for ts, w in zip(rows[2::4], windows)]
        data = canonical.encode_many(values)
        rows[2::4] = list(map(fingerprint_bytes, data))
        rows[3::4] = [d if kept else None for d, kept in zip(data, rows[3::4])]


def part_digest(key_fps: list[bytes], fps: list[int]) -> str:
    """The hex digest that names a part: xxh3_128 of its (key fp, fingerprint) pairs, 24 bytes each
    (fingerprint big-endian), in sorted order, so a retried bundle overwrites its own part."""
    n = len(key_fps)
    keys = np.frombuffer(b"".join(key_fps), dtype=">u8").reshape(n, 2)
    pairs = np.empty((n, 3), dtype=">u8")
    pairs[:, :2] = keys
    pairs[:, 2] = np.fromiter(fps, dtype=np.uint64, count=n)
    # the byte order of the 24-byte strings is the order of their three big-endian words
    pairs = pairs[np.lexsort((pairs[:, 2], pairs[:, 1], pairs[:, 0]))]
    return digest_hex(pairs.tobytes())
