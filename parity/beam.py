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
from typing import Any, Callable, Iterator, Sequence

import apache_beam as beam
import xxhash
from apache_beam.transforms import window as beam_window
from apache_beam.utils.timestamp import MIN_TIMESTAMP

from parity import canonical
from parity.config import STAGES
from parity.fingerprint_set import PartRows, write_part, write_quarantine_part
from parity.tap_set import (DROPPED_LATE, NOT_SEEN, SAMPLE_RULE, TAP_FORMAT, UNTAPPED, finalize_tap_set,
                            key_sampled, sample_threshold, write_tap_meta, write_worker_environment)

__all__ = ["DROPPED_LATE", "NOT_SEEN", "UNTAPPED", "TapStage", "finalize", "key_sampled", "sampled"]

_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")
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
                 redact: bool = False, label: str | None = None, late: bool = False, batch_size: int = 1000):
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
    """Keys, samples, fingerprints and buffers elements; writes a part per full buffer and per bundle."""

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
        write_worker_environment(self._folder, environment_manifest())

    def start_bundle(self) -> None:
        self._rows: list[list] = []
        self._quarantined: list[dict] = []

    # -- per element

    def _key(self, element: Any) -> tuple[Any, bytes, bytes] | None:
        """(key, key bytes, key fp), or None when the element is outside the sample or quarantined."""
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
            key_bytes = canonical.encode(key)
        except Exception as exc:
            self._quarantine(element, f"key: {type(exc).__name__}: {exc}")
            return None
        key_fp = xxhash.xxh3_128_digest(key_bytes)
        if not self._all and int.from_bytes(key_fp[:8], "big") >= self._threshold:
            return None
        return key, key_bytes, key_fp

    def _quarantine(self, element: Any, reason: str) -> None:
        kind = reason.split(":", 1)[0].strip()[:80]
        preview = "" if self._redact else repr(element)[:120]
        self._quarantined.append({"location": f"tap {self._stage}/{self._label}", "reason": reason,
                                  "reason_kind": kind, "preview": preview})

    def process(self, element: Any) -> Iterator[Any]:
        keyed = self._key(element)
        if keyed is None:
            return
        try:
            value = self._value_fn(element) if self._value_fn is not None else element
            row = self._fingerprint(keyed, value)
        except Exception as exc:
            self._quarantine(element, f"value: {type(exc).__name__}: {exc}")
            return
        self._rows.append(row)
        if len(self._rows) >= self._batch_size:
            self._flush()
        return
        yield  # a generator that emits nothing: the tap's branch ends here

    def _fingerprint(self, keyed: tuple, value: Any) -> list:
        key, key_bytes, key_fp = keyed
        encode, hash64 = canonical.encode, xxhash.xxh3_64_intdigest
        data = encode(value)
        features: list = []
        if self._stage == "transform" and isinstance(value, dict):
            fps = {name: hash64(encode(v)) for name, v in value.items()}
            features = sorted(fps.items())
            fp = hash64(encode(fps))
        else:
            fp = hash64(data)
        return [key_fp, key, key_bytes, fp, features, data]

    def finish_bundle(self) -> None:
        self._flush()

    # -- writing

    def _flush(self) -> None:
        rows, self._rows = self._rows, []
        if self._quarantined:
            entries, self._quarantined = self._quarantined, []
            digest = xxhash.xxh3_64_hexdigest(json.dumps(entries, sort_keys=True).encode())
            write_quarantine_part(self._folder, f"{self._stage}-q-{digest}", entries)
        if not rows:
            return
        rows = self._finish_rows(rows)
        keep = len(rows) if self._keep is None else min(self._keep, len(rows))
        kept = set(range(len(rows))) if keep == len(rows) else \
            set(heapq.nsmallest(keep, range(len(rows)), key=lambda i: rows[i][0]))
        digest = xxhash.xxh3_128()
        for key_fp, fp in sorted((r[0], r[3]) for r in rows):
            digest.update(key_fp)
            digest.update(fp.to_bytes(8, "big"))
        part = f"{self._stage}-{self._label}-{digest.hexdigest()}"
        column = f"{self._stage}_fp"
        fp_rows, value_rows = [], []
        for index, (key_fp, _key, key_bytes, fp, features, data) in enumerate(rows):
            # The key's JSON text is left to finalize: once per record there, not once per tap here.
            fp_rows.append({"key_fp": key_fp, "key": None, column: fp, "features": features})
            value_rows.append({"key_bytes": b"" if self._redact else key_bytes, "location": "",
                               self._stage: data if index in kept else None})
        write_part(self._folder, part, PartRows(fp_rows, value_rows))

    def _finish_rows(self, rows: list[list]) -> list[list]:
        return rows


class _WindowTapFn(_TapFn):
    """The window stage: the value is read from Beam's own timestamp and window of each element.

    Beam calls a DoFn that asks for `WindowParam` once per window of an element, one call after the other:
    consecutive calls for the same element object are merged into one record with all its windows.
    """

    def start_bundle(self) -> None:
        super().start_bundle()
        self._last: Any = None

    def process(self, element: Any, timestamp=beam.DoFn.TimestampParam,  # type: ignore[override]
                window=beam.DoFn.WindowParam) -> Iterator[Any]:
        win = ["global"] if isinstance(window, beam_window.GlobalWindow) else \
            [window.start.micros, window.end.micros]
        ts = timestamp.micros if timestamp is not None else _MIN_US
        if ts <= _MIN_US:
            ts = None
        last = self._last
        if last is not None and last[0] is element and last[1] == ts:  # another window of the same element
            if last[2] is not None:
                last[2][5]["windows"].append(win)
            return
        if len(self._rows) >= self._batch_size:  # only between elements: an element's windows stay together
            self._flush()
        keyed = self._key(element)
        if keyed is None:  # quarantined or outside the sample: once, not once per window
            self._last = (element, ts, None)
            return
        value: dict[str, Any] = {"timestamp_us": ts, "windows": [win]}
        if self._late:
            value["late"] = True
        row = [keyed[2], keyed[0], keyed[1], 0, [], value]  # encoded at flush, when all windows are known
        self._rows.append(row)
        self._last = (element, ts, row)
        return
        yield

    def _finish_rows(self, rows: list[list]) -> list[list]:
        self._last = None
        encode, hash64 = canonical.encode, xxhash.xxh3_64_intdigest
        for row in rows:
            value = row[5]
            value["windows"] = sorted(value["windows"])
            data = encode(value)
            row[3] = hash64(data)
            row[5] = data
        return rows
