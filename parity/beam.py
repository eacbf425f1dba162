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
| `window` | `{"timestamp_us": µs, "windows": [[start_us, end_us], ...]}` from Beam's own `TimestampParam` and |
|          | `WindowParam` (global window: `[["global"]]`; no timestamp: null); `late=True` adds `"late": true` |
| `shard`, `coder`, `seed` | the element (pass `value_fn` to shape it as the replay does) |
| `transform` | the element, a dict of features: one fingerprint per feature; the stage's fingerprint is |
|             | that of `{feature: fingerprint}` |

`value_fn(element) -> value` replaces the default at any stage, and `key_fn(element) -> key` replaces
`key_fields` (one field: its value; several: the list of their values, as `capture.key` keys a replay).

Writing is per batch: each tap buffers up to `batch_size` fingerprinted elements and writes them as one part
when the buffer is full and at the end of each bundle (`finish_bundle`); a part's name is the stage, the
label and a hash of the batch's keys and fingerprints, so a retried bundle overwrites its own part.
Sampling, values and finalize: parity/tap_set.py and docs/taps.md.
"""
from __future__ import annotations

import heapq
import json
import re
from typing import Any, Callable, Sequence

import apache_beam as beam
import xxhash
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import MIN_TIMESTAMP

from parity import canonical
from parity.config import STAGES
from parity.fingerprint_set import write_quarantine_part
from parity.tap_set import (DROPPED_LATE, NOT_SEEN, SAMPLE_RULE, TAP_FORMAT, UNTAPPED, finalize_tap_set,
                            key_sampled, sample_threshold, write_tap_meta, write_tap_part,
                            write_worker_environment)

__all__ = ["DROPPED_LATE", "NOT_SEEN", "UNTAPPED", "TapStage", "finalize", "key_sampled", "sampled"]

_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")
# A record passes every tap of a job with the same key: its canonical bytes and 128-bit fingerprint are
# computed once per worker process and looked up by the taps after. One cache per exact type (1, 1.0 and
# True are equal in Python but not in the canonical encoding), holding only atomic objects, which the
# garbage collector does not track. Bounded: emptied when full.
_KEY_CACHES: dict[type, dict[Any, tuple[bytes, int]]] = {int: {}, str: {}, bytes: {}}
_KEY_CACHE_SIZE = 1 << 17
_MIN_US = MIN_TIMESTAMP.micros


def finalize(set_dir: str, **kwargs: Any) -> dict[str, Any]:
    """Merges what the taps wrote under `set_dir` into a fingerprint set (parity.tap_set.finalize_tap_set);
    run it after the pipeline has finished. Returns the manifest."""
    return finalize_tap_set(set_dir, **kwargs)


def sampled(key: Any, rate: float) -> bool:
    """Whether a record key is in the deterministic sample at `rate` (the rule every tap applies)."""
    return key_sampled(xxhash.xxh3_128_digest(canonical.encode(key)), rate)


def _callable_name(fn: Callable) -> str:
    return f"fn:{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"


class TapStage(beam.PTransform):
    """Fingerprints the elements flowing at this point of a pipeline as one parity stage.

    Args:
        stage: `input`, `window`, `shard`, `coder`, `seed` or `transform`.
        set_dir: the fingerprint set's folder (local or mounted file system), shared by every tap of the job.
        key_fields: the record key: one field (its value) or several (the list of their values); the
            config's `capture.key`. Elements must then be dicts.
        key_fn: `fn(element) -> key` instead of `key_fields` (e.g. for `(record, features)` pairs).
        value_fn: `fn(element) -> stage value` instead of the default (module doc).
        side: the side's name in reports.
        sample_rate: fraction of keys tapped, deterministic by key (parity/tap_set.py); use one rate for
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
    """

    def __init__(self, stage: str, set_dir: str, *, key_fields: Sequence[str] | str | None = None,
                 key_fn: Callable[[Any], Any] | None = None, value_fn: Callable[[Any], Any] | None = None,
                 side: str = "production", sample_rate: float = 1.0, keep_values: int | None = 1000,
                 redact: bool = False, label: str | None = None, late: bool = False, batch_size: int = 10000):
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
        folder = write_tap_meta(self.set_dir, self.meta(type(runner).__name__ if runner is not None else None))
        fn_class = _WindowTapFn if self.stage == "window" and self.value_fn is None else _TapFn
        _ = pcoll | "Fingerprint" >> beam.ParDo(fn_class(self, folder))
        return pcoll


class _TapFn(beam.DoFn):
    """Keys, samples, fingerprints and buffers elements; writes a part per full buffer and per bundle.

    The buffer is columnar (one list per column, no container per element): cheaper to fill and to write,
    and lighter on the garbage collector of a worker whose heap is full of the job's own objects.
    """

    def __init__(self, tap: TapStage, folder: str):
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

    def setup(self) -> None:
        from parity.environment import environment_manifest

        self._threshold = sample_threshold(self._rate)
        self._all = self._threshold >= 1 << 64
        # The `keep_values` smallest key fingerprints this instance has seen (negated: a max-heap), and the set
        # of them: a record is kept when its key is among them when it arrives. That is a superset of the
        # set-wide smallest `keep_values` (each of those has fewer smaller keys anywhere), which finalize keeps.
        self._heap: list[int] = []
        self._heap_keys: set[int] = set()
        write_worker_environment(self._folder, environment_manifest())

    def start_bundle(self) -> None:
        # key fps, key bytes, stage fps, features, value bytes (None when not kept)
        self._key_fps: list[bytes] = []
        self._key_bytes: list[bytes] = []
        self._fps: list[int] = []
        self._features: list = []
        self._values: list = []
        self._quarantined: list[dict] = []

    # -- per element

    def _key(self, element: Any) -> tuple[bytes, bytes] | None:
        """(key bytes, key fp), or None when the element is outside the sample or quarantined."""
        try:
            if self._key_fn is not None:
                key = self._key_fn(element)
                if key is None:
                    self._quarantine(element, "missing key: key_fn returned None")
                    return None
            else:
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
            cache = _KEY_CACHES.get(type(key))
            cached = cache.get(key) if cache is not None else None
            if cached is None:
                key_bytes = canonical.encode(key)
                cached = (key_bytes, xxhash.xxh3_128_intdigest(key_bytes))
                if cache is not None:
                    if len(cache) >= _KEY_CACHE_SIZE:
                        cache.clear()
                    cache[key] = cached
        except Exception as exc:
            self._quarantine(element, f"key: {type(exc).__name__}: {exc}")
            return None
        key_bytes, digest = cached
        if not self._all and digest >> 64 >= self._threshold:
            return None
        return key_bytes, digest.to_bytes(16, "big")  # == xxh3_128_digest(key_bytes)

    def _quarantine(self, element: Any, reason: str) -> None:
        kind = reason.split(":", 1)[0].strip()[:80]
        preview = "" if self._redact else repr(element)[:120]
        self._quarantined.append({"location": f"tap {self._stage}/{self._label}", "reason": reason,
                                  "reason_kind": kind, "preview": preview})

    def process(self, element: Any) -> None:
        keyed = self._key(element)
        if keyed is None:
            return None
        key_bytes, key_fp = keyed
        try:
            value = self._value_fn(element) if self._value_fn is not None else element
            kept = self._keeps(key_fp)
            if self._stage == "transform" and isinstance(value, dict):
                hash64 = xxhash.xxh3_64_intdigest
                fps = dict(zip(value, map(hash64, canonical.encode_many(list(value.values())))))
                fp, features = hash64(canonical.encode(fps)), tuple(sorted(fps.items()))
                data = canonical.encode(value) if kept else None
            else:
                data = canonical.encode(value)
                fp, features = xxhash.xxh3_64_intdigest(data), None
        except Exception as exc:
            self._quarantine(element, f"value: {type(exc).__name__}: {exc}")
            return None
        self._key_fps.append(key_fp)
        self._key_bytes.append(key_bytes)
        self._fps.append(fp)
        self._features.append(features)
        self._values.append(data if kept else None)
        if len(self._key_fps) >= self._batch_size:
            self._flush()
        return None  # emits nothing: the tap's branch ends here

    def _keeps(self, key_fp: bytes) -> bool:
        keep = self._keep
        if keep is None:
            return True
        if keep == 0:
            return False
        value = int.from_bytes(key_fp, "big")
        heap, members = self._heap, self._heap_keys
        if value in members:
            return True
        if len(heap) < keep:
            heapq.heappush(heap, -value)
            members.add(value)
            return True
        if value < -heap[0]:
            members.discard(-heapq.heapreplace(heap, -value))
            members.add(value)
            return True
        return False

    def finish_bundle(self) -> None:
        self._flush()

    # -- writing

    def _flush(self) -> None:
        if self._quarantined:
            entries, self._quarantined = self._quarantined, []
            digest = xxhash.xxh3_64_hexdigest(json.dumps(entries, sort_keys=True).encode())
            write_quarantine_part(self._folder, f"{self._stage}-q-{digest}", entries)
        if not self._key_fps:
            return
        self._finish_values()
        key_fps, key_bytes, fps, features, values = \
            self._key_fps, self._key_bytes, self._fps, self._features, self._values
        self._key_fps, self._key_bytes, self._fps, self._features, self._values = [], [], [], [], []
        # The part's name: the stage, the label and a hash of the batch's (key, fingerprint) pairs in sorted
        # order, so a retried bundle overwrites its own part.
        digest = xxhash.xxh3_128(b"".join(sorted(k + f.to_bytes(8, "big") for k, f in zip(key_fps, fps))))
        # The key's JSON text is left to finalize: once per record there, not once per tap here.
        write_tap_part(self._folder, f"{self._stage}-{self._label}-{digest.hexdigest()}", self._stage,
                       key_fps, fps, features if self._stage == "transform" else None,
                       None if self._redact else key_bytes, values)

    def _finish_values(self) -> None:
        """Fills the buffered fingerprints and values that wait for the end of the batch (window stage)."""


def _window(window: Any) -> list:
    return ["global"] if isinstance(window, beam_window.GlobalWindow) else [window.start.micros, window.end.micros]


class _WindowTapFn(_TapFn):
    """The window stage: the value is read from Beam's own timestamp and window of each element.

    Beam calls a DoFn that asks for `WindowParam` once per window of an element, one call after the other,
    with the same element and timestamp objects: such calls are merged into one record with all its windows.
    Values are encoded when the batch is written, once every window of its last element is known.
    """

    def start_bundle(self) -> None:
        super().start_bundle()
        self._last: Any = None
        self._kept: list[bool] = []

    def process(self, element: Any, timestamp=beam.DoFn.TimestampParam,  # type: ignore[override]
                window=beam.DoFn.WindowParam) -> None:
        last = self._last
        if last is not None and last[0] is element and last[2] is timestamp:  # the element's next window
            if last[1] is not None:
                last[1]["windows"].append(_window(window))
            return None
        if len(self._key_fps) >= self._batch_size:  # only between elements: an element's windows stay together
            self._flush()
        keyed = self._key(element)
        if keyed is None:  # quarantined or outside the sample: once, not once per window
            self._last = (element, None, timestamp)
            return None
        key_bytes, key_fp = keyed
        ts = timestamp.micros if timestamp is not None else _MIN_US
        value: dict[str, Any] = {"timestamp_us": None if ts <= _MIN_US else ts, "windows": [_window(window)]}
        if self._late:
            value["late"] = True
        self._key_fps.append(key_fp)
        self._key_bytes.append(key_bytes)
        self._fps.append(0)
        self._features.append(None)
        self._values.append(value)
        self._kept.append(self._keeps(key_fp))
        self._last = (element, value, timestamp)
        return None

    def _finish_values(self) -> None:
        self._last = None
        encode, hash64 = canonical.encode, xxhash.xxh3_64_intdigest
        for i, (value, kept) in enumerate(zip(self._values, self._kept)):
            value["windows"] = sorted(value["windows"])
            data = encode(value)
            self._fps[i] = hash64(data)
            self._values[i] = data if kept else None
        self._kept = []
