"""The TFDV contender: `tensorflow_data_validation.DetectFeatureSkew` on the two sides' final features.

Runs in TFDV's own virtualenv (TFDV 1.16.1 pins TensorFlow 2.16; see benchmarks/README.md), so it imports
nothing from parity. The inputs are the tf.Example TFRecord files benchmarks/run.py exports from a parity
run's transform-stage values (one Example per record: its features plus `trip_id`). Timed: reading both
files, the skew detection (identifier `trip_id`, 10 sample pairs) and writing its results, on Beam's
FnApiRunner like the other contenders, with as many worker processes (multi_processing) as this process has
CPUs: the cores parity's check uses (`--workers 1`: in process, as earlier runs did). TFDV and Beam are
imported before the clock starts; the CPU seconds the harness reports include the worker processes.

    .bench-venvs/tfdv/bin/python benchmarks/tfdv_skew.py --base B.tfrecord --test T.tfrecord --work DIR \
        --result R.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="offline side's tf.Examples (TFRecord)")
    parser.add_argument("--test", required=True, help="production side's tf.Examples (TFRecord)")
    parser.add_argument("--work", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--id", default="trip_id")
    parser.add_argument("--workers", type=int, default=_cpus(),
                        help="Beam worker processes (multi_processing; default: this process's CPUs, the cores "
                             "parity's check gets); 1: in process")
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)

    import apache_beam as beam
    import tensorflow as tf
    import tensorflow_data_validation as tfdv
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from tensorflow_data_validation.api import validation_api
    from tensorflow_data_validation.skew.protos import feature_skew_results_pb2

    results_path = os.path.join(args.work, "skew_results")
    pairs_path = os.path.join(args.work, "skew_pairs")
    from apache_beam.options.pipeline_options import PipelineOptions

    # equal cores: TFDV's job gets as many worker processes as parity's check has cores (its two sides run in two)
    options = PipelineOptions([f"--direct_num_workers={args.workers}", "--direct_running_mode=multi_processing"]
                              if args.workers > 1 else [])
    started = time.monotonic()
    with beam.Pipeline(runner=FnApiRunner(), options=options) as pipeline:
        coder = beam.coders.ProtoCoder(tf.train.Example)
        base = pipeline | "ReadBase" >> beam.io.ReadFromTFRecord(args.base, coder=coder)
        test = pipeline | "ReadTest" >> beam.io.ReadFromTFRecord(args.test, coder=coder)
        skew, pairs = (base, test) | "DetectFeatureSkew" >> tfdv.DetectFeatureSkew(
            identifier_features=[args.id], sample_size=10)
        _ = skew | "WriteResults" >> validation_api.WriteFeatureSkewResultsToTFRecord(results_path)
        _ = pairs | "WritePairs" >> validation_api.WriteSkewPairsToTFRecord(pairs_path)
    wall = time.monotonic() - started

    mismatched, features, paired = {}, 0, 0
    for path in tf.io.gfile.glob(results_path + "*"):
        for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
            result = feature_skew_results_pb2.FeatureSkew.FromString(raw)
            features += 1
            paired = max(paired, result.base_count, result.test_count)
            if result.mismatch_count or result.base_only or result.test_only:
                mismatched[result.feature_name] = {"mismatch": result.mismatch_count,
                                                   "base_only": result.base_only, "test_only": result.test_only}
    out = {"contender": "tfdv", "wall_s": round(wall, 3), "tfdv_version": tfdv.__version__, "workers": args.workers,
           "outcome": {"features": features, "paired_examples": paired,
                       "features_with_skew": dict(sorted(mismatched.items()))}}
    with open(args.result, "w", encoding="utf-8") as handle:
        json.dump(out, handle, indent=2, sort_keys=True)
        handle.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
