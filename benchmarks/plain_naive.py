"""The plain naive contender (issue 44): the plainest per-record Beam design for a config without aggregates.

One element per record. The line is parsed once (`json.loads`); each stage is a `beam.Map` that computes the
record's value at that stage in plain Python and hashes it once, as `xxh3_64(json.dumps(value, sort_keys=True))`
(the naive contender's kernel, `benchmarks/naive.py`): input (the parsed record), window (event time and the
fixed window), shard (grouping key and shard id), coder (the side's record coder, encode + decode, parity's own
coder class), seed (the configured `sample`/`split` ops from the record key) and the side's python transform.
Then the two sides' per-record fingerprints are joined with `CoGroupByKey` and compared stage by stage; the
first differing stage is counted. Nothing else is written (no fingerprint sets, no values): only the counts.

It reads what the configs of `benchmarks/plain_check.py` use (a jsonl capture, a single key field, a fixed
window without lateness, a shard key without aggregates, sample and split seed ops, a python transform) and
refuses anything else rather than measure something different.

    python benchmarks/plain_naive.py --config WORK/parity.yaml --work DIR --result R.json
"""
from __future__ import annotations

import argparse
import glob
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

STAGES = ("input", "window", "shard", "coder", "seed", "transform")


def fp(value: Any) -> int:
    import xxhash

    return xxhash.xxh3_64_intdigest(json.dumps(value, sort_keys=True).encode())


class PlainStages:
    """The per-record stage functions of one side: one record per call, one hash per stage."""

    def __init__(self, side: Any, key_field: str):
        import xxhash

        from parity.choices import US_PER_UNIT
        from parity.replay.batch import side_field_types
        from parity.stages.coder import build_coder

        self._xxh3 = xxhash.xxh3_64_intdigest
        self.key_field = key_field
        if side.timestamp is None or side.timestamp.field is None or side.window is None \
                or side.window.type != "fixed" or side.window.lateness is not None or side.shard is None \
                or not side.shard.key_fields or side.shard.hash != "xxh3" or side.shard.aggregates \
                or side.coder is None or side.seed is None or any(op.hash != "xxh3" for _, op in side.seed.ops) \
                or side.transform is None or side.transform.kind != "python":
            raise SystemExit(f"plain_naive: side {side.name}: needs a timestamp field, a fixed window without "
                             f"lateness, shard key fields (xxh3) without aggregates, a coder, xxh3 seed ops and "
                             f"a python transform")
        self.time_field = side.timestamp.field
        self.unit_us = US_PER_UNIT[side.timestamp.unit]
        self.size_us = side.window.size_us
        self.shard_fields = list(side.shard.key_fields or ())
        self.shard_count = side.shard.count
        self.coder = build_coder(side.coder, side_field_types(side))
        self.seed = side.seed
        self.fn = side.transform.ref.resolve()

    def input(self, line: str) -> dict:
        rec = json.loads(line)
        return {"id": rec[self.key_field], "rec": rec, "fps": {"input": fp(rec)}}

    def window(self, el: dict) -> dict:
        ts = el["rec"][self.time_field] * self.unit_us
        start = ts - ts % self.size_us
        el["fps"]["window"] = fp({"timestamp_us": ts, "windows": [[start, start + self.size_us]]})
        return el

    def shard(self, el: dict) -> dict:
        rec = el["rec"]
        key = [rec[f] for f in self.shard_fields]
        shard = self._xxh3(json.dumps(key).encode()) % self.shard_count
        el["fps"]["shard"] = fp({"key": key, "shard": shard})
        return el

    def code(self, el: dict) -> dict:
        el["rec"] = self.coder.decode(self.coder.encode(el["rec"]))
        el["fps"]["coder"] = fp(el["rec"])
        return el

    def seed_ops(self, el: dict) -> dict:
        key = json.dumps([el["id"]]).encode()
        value: dict[str, Any] = {}
        for op_name, op in self.seed.ops:
            u = self._xxh3(repr((self.seed.value, op_name)).encode() + b"\x00" + key)
            if hasattr(op, "rate"):
                value[op_name] = u / 2**64 < op.rate
            else:
                point = u % sum(w for _, w in op.buckets)
                for name, weight in op.buckets:
                    if point < weight:
                        value[op_name] = name
                        break
                    point -= weight
        el["fps"]["seed"] = fp(value)
        return el

    def transform(self, el: dict) -> tuple[Any, dict]:
        fps = el["fps"]
        fps["transform"] = fp(self.fn(dict(el["rec"])))
        return el["id"], fps


def side_branch(pipeline: Any, side: Any, files: list[str], key_field: str) -> Any:
    """(key, {stage: fingerprint}) per record of one side."""
    import apache_beam as beam

    st = PlainStages(side, key_field)
    name = side.name
    return (pipeline
            | f"{name}/Files" >> beam.Create(files, reshuffle=False)
            | f"{name}/ReadLines" >> beam.io.ReadAllFromText()
            | f"{name}/Input" >> beam.Map(st.input)
            | f"{name}/Window" >> beam.Map(st.window)
            | f"{name}/Shard" >> beam.Map(st.shard)
            | f"{name}/Coder" >> beam.Map(st.code)
            | f"{name}/Seed" >> beam.Map(st.seed_ops)
            | f"{name}/Transform" >> beam.Map(st.transform))


def first_difference(item: tuple) -> Iterator[str]:
    """`matched`, `first:<stage>`, `left_only` or `right_only` for one key's joined fingerprints."""
    _, groups = item
    left, right = list(groups["l"]), list(groups["r"])
    if not left:
        yield "right_only"
        return
    if not right:
        yield "left_only"
        return
    for stage in STAGES:
        if left[0][stage] != right[0][stage]:
            yield f"first:{stage}"
            return
    yield "matched"


def side_files(side: Any) -> list[str]:
    capture = side.capture
    if capture.format != "jsonl":
        raise SystemExit(f"plain_naive: side {side.name}: reads jsonl captures only, not {capture.format}")
    return sorted(glob.glob(capture.path)) or [capture.path]


def run(config_path: str, work: str) -> dict:
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from parity.config import load_config

    config = load_config(config_path)
    keys = {side.capture.key for side in config.sides}
    if len(keys) != 1 or len(next(iter(keys)) or ()) != 1:
        raise SystemExit("plain_naive: one key field, the same on both sides")
    key_field = next(iter(keys))[0]
    summary_path = os.path.join(work, "plain-naive-summary.json")
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        left, right = (side_branch(pipeline, side, side_files(side), key_field) for side in config.sides)

        count_into({"l": left, "r": right}
                   | "Join" >> beam.CoGroupByKey()
                   | "FirstDifference" >> beam.FlatMap(first_difference), summary_path)
    return read_counts(summary_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    from parity.console.collector import loading

    with loading():  # imports before the clock, as the other contenders
        import apache_beam  # noqa: F401
        import xxhash  # noqa: F401

        import parity.config  # noqa: F401
        import parity.stages.coder  # noqa: F401
    from parity.replay.runners import replay_gc

    started = time.monotonic()
    with replay_gc():  # the collector setting parity's replays run under: the same tuning
        extra = run(args.config, args.work)
    result = {"contender": "plain_naive", "wall_s": round(time.monotonic() - started, 3), **extra}
    write_result(args.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
