"""The naive contender: the straightforward Beam design most teams would write first.

One element per record at every stage; each stage is a `beam.Map` that computes the record's value at that
stage in plain Python and its fingerprint as `xxh3_64(json.dumps(value, sort_keys=True))`; side-wide results
(late records, per-(hour, zone) aggregates) are side inputs; the transforms are the SAME ones parity and the
floor run (offline: TFT `AnalyzeAndTransformDataset` of the taxi `preprocessing_fn`, with `trip_id` passed
through as an extra output so the transformed rows can be keyed; production: the exported graph applied to
batches as serving does; or the python features); finally the two sides' per-record fingerprints are joined
with `CoGroupByKey` and compared stage by stage, and the counts of first divergences are written as JSON.

So its cost is the floor plus its per-record stage replay, fingerprints and shuffle-based diff.

    python benchmarks/naive.py --config WORK/parity.yaml --files WORK/trips.jsonl --work DIR --result R.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from outcome import count_into, read_counts, write_result  # noqa: E402 (beside this script)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

STAGES = ("input", "window", "shard", "coder", "seed", "transform")
DROPPED = {"dropped": "late"}


def _default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise TypeError(type(value).__name__)


def fp(value: Any) -> int:
    import xxhash

    return xxhash.xxh3_64_intdigest(json.dumps(value, sort_keys=True, default=_default).encode())


class SideStages:
    """The per-record stage functions of one side (plain Python, one record per call)."""

    def __init__(self, side: Any):
        self.side = side
        window = side.window
        self.size_us = window.size_us if window and getattr(window, "size_us", None) else 3_600_000_000
        self.lateness = window.lateness if window else None
        self.shard_count = side.shard.count if side.shard else 1
        self.seed = side.seed
        self._coder = None

    # input
    def input(self, line: str) -> dict:
        rec = json.loads(line)
        return {"id": rec["trip_id"], "rec": rec, "fps": {"input": fp(rec)}}

    # window (proto): event time and the fixed window
    def proto_window(self, el: dict) -> dict:
        ts = el["rec"]["event_time"] * 1_000_000
        start = ts - ts % self.size_us
        el["ts"], el["win"] = ts, (start, start + self.size_us)
        el["arrival"] = el["rec"]["ingest_time"] * 1_000_000
        return el

    def window(self, el: dict, late: frozenset) -> dict:
        value: dict[str, Any] = {"timestamp_us": el["ts"], "windows": [list(el["win"])]}
        if el["id"] in late:
            value["late"] = True
            el["dropped"] = True
        el["fps"]["window"] = fp(value)
        return el

    # shard: grouping key, shard id, aggregates as side input
    def shard(self, el: dict, aggs: dict) -> dict:
        if el.get("dropped"):
            for stage in ("shard", "coder", "seed"):
                el["fps"][stage] = fp(DROPPED)
            return el
        rec = el["rec"]
        zone = rec["pickup_zone"]
        count, fare_sum, fare_n = aggs[(el["win"][0], zone)]
        attached = {"trips_1h": count, "fare_mean_1h": fare_sum / fare_n if fare_n else None}
        import xxhash

        value = {"key": zone, "shard": xxhash.xxh3_64_intdigest(json.dumps(zone).encode()) % self.shard_count,
                 "aggregates": attached}
        el["fps"]["shard"] = fp(value)
        el["rec"] = dict(rec, **attached)
        return el

    # coder: the side's record coder, encode + decode
    def coder(self, el: dict) -> dict:
        if el.get("dropped"):
            return el
        if self._coder is None:
            from parity.replay.batch import side_field_types
            from parity.stages.coder import CoderSpec, build_coder

            self._coder = build_coder(CoderSpec(type=self.side.coder.type), side_field_types(self.side))
        el["rec"] = self._coder.decode(self._coder.encode(el["rec"]))
        el["fps"]["coder"] = fp(el["rec"])
        return el

    # seed: a seeded split per record key
    def seed_stage(self, el: dict) -> dict:
        if el.get("dropped"):
            return el
        import xxhash

        key = json.dumps([el["id"]]).encode()
        value = {}
        for op_name, op in self.seed.ops:
            u = xxhash.xxh3_64_intdigest(repr((self.seed.value, op_name)).encode() + b"\x00" + key)
            point = u % sum(w for _, w in op.buckets)
            for name, weight in op.buckets:
                if point < weight:
                    value[op_name] = name
                    break
                point -= weight
        el["fps"]["seed"] = fp(value)
        return el


def _late_ids(rows: list[tuple], lateness: Any) -> frozenset:
    """Replays arrivals in order: late when the window's end is behind the watermark (Beam's rule)."""
    late, max_event = set(), None
    for arrival, event, rid, win_end in sorted(rows):
        max_event = event if max_event is None or event > max_event else max_event
        if win_end - 1 + lateness.allowed_us < max_event - lateness.out_of_orderness_us:
            late.add(rid)
    return frozenset(late)


def _agg_key(el: dict) -> tuple:
    fare = el["rec"]["fare"]
    return (el["win"][0], el["rec"]["pickup_zone"]), (1, fare or 0.0, 0 if fare is None else 1)


def _sum_states(states: Any) -> tuple:
    total = [0, 0.0, 0]
    for s in states:
        total[0] += s[0]
        total[1] += s[1]
        total[2] += s[2]
    return tuple(total)


def side_branch(pipeline: Any, side: Any, files: list[str], types: dict, work: str,
                written: Any = None) -> tuple[Any, Any, Any]:
    """(stage fingerprints per record, transform fingerprints per record, written transform_fn or None)."""
    import apache_beam as beam

    name = side.name
    st = SideStages(side)
    els = (pipeline
           | f"{name}/Files" >> beam.Create(files, reshuffle=False)
           | f"{name}/ReadLines" >> beam.io.ReadAllFromText()
           | f"{name}/Input" >> beam.Map(st.input)
           | f"{name}/ProtoWindow" >> beam.Map(st.proto_window))
    if st.lateness is not None:
        lateness = st.lateness
        late = (els
                | f"{name}/ArrivalRows" >> beam.Map(lambda e: (e["arrival"], e["ts"], e["id"], e["win"][1]))
                | f"{name}/AllArrivals" >> beam.combiners.ToList()
                | f"{name}/ReplayLateness" >> beam.Map(_late_ids, lateness))
    else:
        late = pipeline | f"{name}/NoLate" >> beam.Create([frozenset()])
    els = els | f"{name}/Window" >> beam.Map(st.window, beam.pvalue.AsSingleton(late))
    aggs = (els
            | f"{name}/OnTime" >> beam.Filter(lambda e: not e.get("dropped"))
            | f"{name}/AggKeys" >> beam.Map(_agg_key)
            | f"{name}/Aggregates" >> beam.CombinePerKey(_sum_states))
    els = (els
           | f"{name}/Shard" >> beam.Map(st.shard, beam.pvalue.AsDict(aggs))
           | f"{name}/Coder" >> beam.Map(st.coder)
           | f"{name}/Seed" >> beam.Map(st.seed_stage))
    stage_fps = els | f"{name}/StageFps" >> beam.Map(lambda e: (e["id"], e["fps"]))
    dropped = (els
               | f"{name}/Dropped" >> beam.Filter(lambda e: e.get("dropped"))
               | f"{name}/DroppedFp" >> beam.Map(lambda e: (e["id"], fp(DROPPED))))
    live = els | f"{name}/Live" >> beam.Filter(lambda e: not e.get("dropped"))
    transform_fps, new_written = _transform(pipeline, side, live, types, work, written)
    transform_fps = (transform_fps, dropped) | f"{name}/AllTransformFps" >> beam.Flatten()
    return stage_fps, transform_fps, new_written


def _transform(pipeline: Any, side: Any, live: Any, types: dict, work: str, written: Any) -> tuple[Any, Any]:
    import apache_beam as beam

    name, spec = side.name, side.transform
    if spec.kind == "python":
        fn = spec.ref.resolve()
        return live | f"{name}/Python" >> beam.Map(lambda e: (e["id"], fp(fn(dict(e["rec"]))))), None
    if spec.kind == "tft":
        import tensorflow as tf
        import tensorflow_transform.beam as tft_beam
        from tensorflow_transform.tf_metadata import metadata_io

        from parity.replay.pipeline import TFT_BATCH_SIZE
        from parity.stages.transform import TFTInput

        preprocessing_fn = spec.ref.resolve()

        def keyed_fn(inputs: dict) -> dict:
            outputs = preprocessing_fn(inputs)
            outputs["trip_id"] = tf.identity(inputs["trip_id"])
            return outputs

        tft_input = TFTInput(types)
        output = os.path.join(work, "tft_output")
        metadata_io.write_metadata(tft_input.metadata, os.path.join(output, "metadata"))
        with tft_beam.Context(temp_dir=os.path.join(work, "tft_tmp"), force_tf_compat_v1=False,
                              desired_batch_size=TFT_BATCH_SIZE):
            # the floor's (and parity's) TFT input: record batches, as TFT batches instance dicts itself
            inputs = (live
                      | f"{name}/Batch" >> beam.BatchElements(min_batch_size=TFT_BATCH_SIZE,
                                                              max_batch_size=TFT_BATCH_SIZE)
                      | f"{name}/RecordBatches" >> beam.Map(
                          lambda es: tft_input.record_batch([e["rec"] for e in es])))
            (transformed, _), transform_fn = ((inputs, tft_input.tensor_adapter_config) | f"{name}/TFT" >>
                                              tft_beam.AnalyzeAndTransformDataset(keyed_fn))
            new_written = transform_fn | f"{name}/WriteTransformFn" >> tft_beam.WriteTransformFn(output)

        def keyed(features: dict) -> tuple[int, int]:
            features = dict(features)
            trip_id = int(features.pop("trip_id"))
            return trip_id, fp(features)

        return transformed | f"{name}/TransformFp" >> beam.Map(keyed), (new_written, output)
    # saved: serving applies the offline side's exported graph to batches of records
    new_written, output = written

    class Serve(beam.DoFn):
        def setup(self) -> None:
            self._saved = None

        def process(self, batch: list[dict], _written: Any) -> Iterator[tuple[int, int]]:
            if self._saved is None:
                from parity.stages.transform import SavedTransform

                self._saved = SavedTransform(output, types)
            for features in self._saved.apply(batch):
                features = dict(features)
                trip_id = int(features.pop("trip_id"))
                yield trip_id, fp(features)

    return (live
            | f"{name}/Records" >> beam.Map(lambda e: e["rec"])
            | f"{name}/Batch" >> beam.BatchElements(min_batch_size=2000, max_batch_size=2000)
            | f"{name}/Serve" >> beam.ParDo(Serve(), beam.pvalue.AsSingleton(new_written))), None


def _compare(item: tuple) -> Iterator[str]:
    _, groups = item
    left, right = list(groups["ls"]), list(groups["rs"])
    lt, rt = list(groups["lt"]), list(groups["rt"])
    if not left:
        yield "right_only"
        return
    if not right:
        yield "left_only"
        return
    lf, rf = dict(left[0]), dict(right[0])
    lf["transform"] = lt[0] if lt else None
    rf["transform"] = rt[0] if rt else None
    for stage in STAGES:
        if lf.get(stage) != rf.get(stage):
            yield f"first:{stage}"
            return
    yield "matched"


def run(config_path: str, files: list[str], work: str, production_files: list[str] | None = None) -> dict:
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from parity.config import load_config
    from parity.replay.batch import side_field_types

    config = load_config(config_path)
    order = sorted(config.sides, key=lambda s: 1 if s.transform and s.transform.from_side else 0)
    summary_path = os.path.join(work, "naive-summary.json")
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        outs, written = {}, None
        for side in order:
            types = side_field_types(side)
            side_files = production_files if production_files and side.name == "production" else files
            stage_fps, transform_fps, new = side_branch(pipeline, side, side_files, types, work, written)
            written = new or written
            outs[side.name] = (stage_fps, transform_fps)
        left, right = config.sides[0].name, config.sides[1].name
        joined = ({"ls": outs[left][0], "lt": outs[left][1], "rs": outs[right][0], "rt": outs[right][1]}
                  | "Join" >> beam.CoGroupByKey())

        count_into(joined | "Compare" >> beam.FlatMap(_compare), summary_path)
    return read_counts(summary_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--files", nargs="+", required=True)
    parser.add_argument("--production-files", nargs="*", default=[],
                        help="the production side's capture, when it differs (a divergence sweep)")
    parser.add_argument("--work", required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    from parity.console.collector import loading

    with loading():  # imports before the clock, under the collector setting the other contenders import with
        import apache_beam  # noqa: F401

        import parity.config  # noqa: F401

        from parity.config import load_config

        if any(s.transform and s.transform.kind != "python" for s in load_config(args.config).sides):
            import tensorflow  # noqa: F401
            import tensorflow_transform.beam  # noqa: F401
    from parity.replay.runners import replay_gc

    started = time.monotonic()
    with replay_gc():  # the collector setting parity's replays and the floors run under: the same tuning
        extra = run(args.config, args.files, args.work, args.production_files)
    result = {"contender": "naive", "wall_s": round(time.monotonic() - started, 3), **extra}
    write_result(args.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
