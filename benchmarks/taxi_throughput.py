"""Taxi example: records/s of `parity check` against the bare TFT transforms of both sides, side by side.

The floor is what the two pipelines cost without parity: the offline side's TFT analyze + transform
(`AnalyzeAndTransformDataset`) and the production side's serving application of the exported graph
(`TFTransformOutput.transform_raw_features` over batches in a Beam job), on the same records with the same
aggregates attached, on the same runner (FnApiRunner). Runs alternate (floor, parity, floor, parity, ...)
so both see the same machine load; the medians are reported.

    .venv/bin/python benchmarks/taxi_throughput.py [--repeat 3] [--config pipelines/taxi/parity.yaml]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _records_with_aggregates(config_path: str) -> tuple[list[dict], dict]:
    from parity.capture import list_capture_files, read_file
    from parity.config import capture_field_types, load_config

    config = load_config(config_path)
    side = config.sides[0]
    records = []
    for path in list_capture_files(side.capture.path, config.base_dir):
        for batch in read_file(path, "jsonl", side.capture.schema_dict, 5000, path):
            records.extend(batch.records)
    groups: dict[tuple, list[float]] = {}
    for r in records:
        groups.setdefault((r["event_time"] // 3600, r["pickup_zone"]), []).append(r["fare"])
    for r in records:
        fares = groups[(r["event_time"] // 3600, r["pickup_zone"])]
        present = [f for f in fares if f is not None]
        r["trips_1h"] = len(fares)
        r["fare_mean_1h"] = sum(present) / len(present) if present else None
    return records, capture_field_types(side)


def floor_run(config_path: str, records: list[dict], types: dict, work: str) -> float:
    """Offline TFT analyze+transform, then production's serving application of the exported graph."""
    import apache_beam as beam
    import tensorflow_transform.beam as tft_beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io

    sys.path.insert(0, os.path.dirname(os.path.abspath(config_path)))
    from preprocess import preprocessing_fn

    from parity.stages.transform import SavedTransform, feature_spec, to_instance

    started = time.monotonic()
    metadata = dataset_metadata.DatasetMetadata.from_feature_spec(feature_spec(types))
    output = os.path.join(work, "tft_output")
    metadata_io.write_metadata(metadata, os.path.join(output, "metadata"))
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        with tft_beam.Context(temp_dir=os.path.join(work, "tmp"), force_tf_compat_v1=False):
            instances = pipeline | "Records" >> beam.Create(records, reshuffle=False) | beam.Map(to_instance, types)
            (transformed, _), transform_fn = (instances, metadata) | tft_beam.AnalyzeAndTransformDataset(
                preprocessing_fn)
            _ = transformed | "Count" >> beam.combiners.Count.Globally()
            _ = transform_fn | tft_beam.WriteTransformFn(output)

    class _Serve(beam.DoFn):
        def setup(self):
            self._saved = SavedTransform(output, types)

        def process(self, batch):
            yield len(self._saved.apply(batch))

    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = (pipeline | "Records" >> beam.Create(records, reshuffle=False)
             | beam.BatchElements(min_batch_size=2000, max_batch_size=2000) | beam.ParDo(_Serve())
             | beam.combiners.Count.Globally())
    return time.monotonic() - started


def parity_run(config_path: str, work: str) -> float:
    import parity

    started = time.monotonic()
    parity.check(config_path, out_dir=os.path.join(work, "parity-out"))
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=os.path.join(REPO, "pipelines", "taxi", "parity.yaml"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    records, types = _records_with_aggregates(args.config)
    floors, checks = [], []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory() as work:
            floors.append(floor_run(args.config, [dict(r) for r in records], types, work))
        with tempfile.TemporaryDirectory() as work:
            checks.append(parity_run(args.config, work))
        print(f"run {i + 1}: floor {floors[-1]:.1f} s, parity check {checks[-1]:.1f} s", flush=True)
    n = len(records)
    floor, check = statistics.median(floors), statistics.median(checks)
    result = {"records_per_side": n, "floor_seconds": round(floor, 2), "parity_seconds": round(check, 2),
              "floor_records_per_second": round(n / floor), "parity_records_per_second": round(n / check),
              "ratio_parity_over_floor": round(check / floor, 2), "repeat": args.repeat}
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)
            handle.write("\n")


if __name__ == "__main__":
    main()
