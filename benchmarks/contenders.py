"""The contenders of the issue-5 benchmark, each run as `python benchmarks/contenders.py NAME ...` in its own
process by benchmarks/run.py, which measures the process's peak memory (`os.wait4` rusage).

Every contender imports what it needs (Beam, TensorFlow, TFT, parity) *before* its clock starts, so the
reported `wall_s` is the contender's work, not interpreter start-up and imports (which the driver reports
separately as `process_s`). Each writes its result as JSON to `--result`.

    floor    the serial fair floor: the two sides' transforms alone, one after the other in one process, each
             side's job shaped as parity's replay of it: batches read by parity's reader and spilled as read,
             the per-(hour, zone) aggregates the transforms read computed from them as read, the batches loaded
             with their aggregates and spilled again as Arrow record batches (the offline side's also fed to
             TFT's analysis), then served through the exported graph (`SavedTransform.apply_arrow`), each spill
             file removed once read; parity's GC settings (`replay_gc`); no fingerprints, no diff. With
             --transform python: each side's python features over its spilled batches
    floor_concurrent
             the fair floor of `parity check` with both sides at once: the floor's offline side in this process
             while its production side runs in a child process that waits for the offline graph, as parity's
             check runs them; nothing waits in memory
    parity   `parity.check` on the work dir's config (its default: both sides at once where it pays)
    parity_serial
             `parity.check` with `sides_at_once="off"`: one side after the other, against the serial floor
    parity_flink
             `parity.check` with `runner="FlinkRunner"` and parity's Flink defaults: an embedded Flink
             MiniCluster in the job server the check starts (its start is in the time), LOOPBACK, parallelism 1,
             both sides' jobs at once (`--sides-at-once auto` on the embedded Flink parity starts)
    kernel   parity's fingerprinting of record batches (dicts, Arrow batches to Python lists, Arrow batches to
             Arrow arrays) vs a plain xxh3 loop over pre-encoded bytes
    export   (not timed) the two sides' final features of a parity run as tf.Example TFRecord files for TFDV
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Iterable, Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from outcome import write_result  # noqa: E402 (beside this script)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

BATCH_SIZE = 2000


def _warm_imports(tft: bool) -> None:
    """Imports everything heavy before a clock starts, under parity's collector setting for imports
    (`parity.console.collector.loading`, as the `parity` command imports its modules): every contender that runs
    here, the floors and parity alike."""
    from parity.console.collector import loading

    with loading():
        import apache_beam  # noqa: F401
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: F401

        import parity.commands  # noqa: F401
        import parity.replay.pipeline  # noqa: F401

        if tft:
            import tensorflow  # noqa: F401
            import tensorflow_transform  # noqa: F401
            import tensorflow_transform.beam  # noqa: F401


# ------------------------------------------------------------------------------------------------- floor


def read_record_batches(path: str, schema: dict, batch_size: int = BATCH_SIZE) -> Iterator[list[dict]]:
    """The capture file as lists of records, through parity's own reader (same parse and coercion cost)."""
    from parity.capture import read_file

    for batch in read_file(path, "jsonl", schema, batch_size, path):
        if batch.records:
            yield batch.records


def _agg_partials(records: list[dict]) -> Iterator[tuple[tuple[int, str], tuple[int, float, int]]]:
    """Per (event hour, pickup zone): (trips, fare sum, fares present) of one batch."""
    groups: dict[tuple[int, str], list] = {}
    for r in records:
        state = groups.setdefault((r["event_time"] // 3600, r["pickup_zone"]), [0, 0.0, 0])
        state[0] += 1
        if r["fare"] is not None:
            state[1] += r["fare"]
            state[2] += 1
    for key, state in groups.items():
        yield key, tuple(state)


def _sum_states(states: Iterable[tuple]) -> tuple:
    total = [0, 0.0, 0]
    for s in states:
        total[0] += s[0]
        total[1] += s[1]
        total[2] += s[2]
    return tuple(total)


def _attach(records: list[dict], aggs: dict) -> list[dict]:
    out = []
    for r in records:
        count, fare_sum, fare_n = aggs[(r["event_time"] // 3600, r["pickup_zone"])]
        r = dict(r)
        r["trips_1h"] = count
        r["fare_mean_1h"] = fare_sum / fare_n if fare_n else None
        out.append(r)
    return out


def _spill(value: Any, folder: str, label: str) -> str:
    """Spills `value` to a new file in `folder` with parity's own writer (`parity.replay.spill.write`) and returns
    its path: a batch waiting for a side input (the side's aggregates, the offline graph) waits on disk, as
    parity's do, not in the runner's memory."""
    from parity.replay import spill
    from parity.storage.context import Storage

    path = os.path.join(folder, f"{label}-{os.getpid()}-{next(_SPILLS)}.pickle")
    spill.write(path, value, Storage())
    return path


def _unspill(path: str) -> Any:
    """A spilled value, its file removed once read, as parity loads its spills on the in-process runner
    (`SpillPolicy.CONSUME`)."""
    from parity.replay import spill
    from parity.storage.context import Storage

    return spill.load(path, Storage(), consume=True)


_SPILLS = itertools.count()
STAGED = "staged"  # the label of the batches spilled to wait for the graph


def _spilled_batches(pipeline: Any, files: list[str], schema: dict, folder: str, label: str) -> tuple[Any, Any]:
    """A side's record batches, spilled as read (only their paths go on), and the per-(hour, zone) aggregates
    from the batches as read: both steps fuse with the read, as parity's replay computes its aggregates from
    its batches as read and spills them for its stages (`parity.replay.pipeline`)."""
    import apache_beam as beam

    os.makedirs(folder, exist_ok=True)
    batches = (pipeline
               | f"{label}Files" >> beam.Create(files, reshuffle=False)
               | f"{label}Read" >> beam.FlatMap(read_record_batches, schema))
    paths = batches | f"{label}SpillRead" >> beam.Map(_spill, folder, "read")
    aggs = (batches
            | f"{label}Partials" >> beam.FlatMap(_agg_partials)
            | f"{label}Combine" >> beam.CombinePerKey(_sum_states))
    return paths, beam.pvalue.AsDict(aggs)


def _load_attached(path: str, aggs: dict) -> list[dict]:
    return _attach(_unspill(path), aggs)


def _spill_columnar(records: list[dict], tft_input: Any, folder: str) -> str:
    """A batch with its aggregates, as the Arrow record batch the serving graph reads (the records themselves
    where a value does not fit the raw schema), spilled to wait for the graph."""
    batch = tft_input.columnar_batch(records)
    return _spill(batch if batch is not None else records, folder, STAGED)


def _serve(output: str, types: dict) -> Any:
    """A DoFn that applies the exported graph to each spilled batch, as parity's transform stage does
    (`SavedTransform.apply_arrow`), and yields the number of records served; a side input (the written graph's
    folder) only makes it wait for the graph."""
    import apache_beam as beam

    from parity.stages.transform import SavedTransform

    class Serve(beam.DoFn):
        def setup(self) -> None:
            self._saved = SavedTransform(output, types)

        def process(self, path, *_graph):  # no hints: Beam checks *args hints
            batch = _unspill(path)
            yield len(self._saved.apply(batch) if isinstance(batch, list) else self._saved.apply_arrow([batch]))

    return Serve()


def _offline_tft(config_path: str, files: list[str], work: str, graph_ready: Any = None) -> tuple[str, dict, int]:
    """The offline side's TFT job as parity runs it: batches spilled as read and the aggregates computed from
    them as read; the spilled batches loaded with their aggregates, fed to TFT's analysis as record batches of
    TFT_BATCH_SIZE rows built by column, and spilled again as Arrow record batches; once the graph is written
    to `work/tft_output` (and `graph_ready(_)` has run, where given), each spilled batch served through it.
    Returns the graph's folder, the side's field types and the records served."""
    import apache_beam as beam
    import tensorflow_transform.beam as tft_beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from tensorflow_transform.tf_metadata import metadata_io

    from parity.config import capture_field_types, load_config
    from parity.replay.pipeline import TFT_BATCH_SIZE
    from parity.stages.transform import TFTInput

    config = load_config(config_path)
    side = config.sides[0]
    schema, types = side.capture.schema_dict, capture_field_types(side)
    sys.path.insert(0, os.path.dirname(os.path.abspath(config_path)))
    from preprocess import preprocessing_fn

    tft_input = TFTInput(types)
    output = os.path.join(work, "tft_output")
    folder = os.path.join(work, "offline-spill")
    served = os.path.join(work, "offline.served")
    metadata_io.write_metadata(tft_input.metadata, os.path.join(output, "metadata"))
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        paths, aggs = _spilled_batches(pipeline, files, schema, folder, "Offline")
        attached = paths | "Attach" >> beam.Map(_load_attached, aggs)
        with tft_beam.Context(temp_dir=os.path.join(work, "tmp"), force_tf_compat_v1=False,
                              desired_batch_size=TFT_BATCH_SIZE):
            inputs = attached | "RecordBatches" >> beam.FlatMap(tft_input.record_batches, TFT_BATCH_SIZE)
            transform_fn = (inputs, tft_input.tensor_adapter_config) | tft_beam.AnalyzeDataset(preprocessing_fn)
            written = transform_fn | tft_beam.WriteTransformFn(output)
        if graph_ready is not None:
            _ = written | "GraphReady" >> beam.Map(graph_ready)
        _ = (attached
             | "SpillStaged" >> beam.Map(_spill_columnar, tft_input, folder)
             | "Serve" >> beam.ParDo(_serve(output, types), beam.pvalue.AsSingleton(written))
             | "Count" >> beam.CombineGlobally(sum)
             | "Served" >> beam.Map(_write_count, served))
    return output, types, _read_count(served)


def _write_count(count: int, path: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(f"{count}\n")


def _read_count(path: str) -> int:
    with open(path, encoding="utf-8") as handle:
        return int(handle.read())


def floor_tft(config_path: str, files: list[str], work: str, production_files: list[str] | None = None) -> dict:
    """The serial floor: the offline side's TFT job (`_offline_tft`), then the production side's
    (`floor_production`, its graph already there), one after the other in this process."""
    from parity.replay.runners import replay_gc

    started = time.monotonic()
    with replay_gc():
        _output, _types, offline_served = _offline_tft(config_path, files, work)
        offline = time.monotonic() - started
        _graph_ready(work)
        production = floor_production(config_path, production_files or files, work)
    return {"timings": {"offline_tft_seconds": round(offline, 3),
                        "production_serving_seconds": round(time.monotonic() - started - offline, 3)},
            "served": {"offline": offline_served, "production": production["served"]}}


GRAPH_READY = "GRAPH_READY"


def _graph_ready(work: str) -> None:
    with open(os.path.join(work, GRAPH_READY), "w", encoding="utf-8") as handle:
        handle.write("ready\n")


def floor_tft_concurrent(config_path: str, files: list[str], work: str,
                         production_files: list[str] | None = None) -> dict:
    """The offline side here while `floor_production` serves the production side in a child process."""
    from parity.replay.runners import replay_gc

    started = time.monotonic()
    child_result = os.path.join(work, "production.result.json")
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "floor_production", "--config", config_path,
                              "--work", work, "--result", child_result, "--files", *(production_files or files)])
    try:
        with replay_gc():  # the gate: the production child serves from the graph's writing on
            _output, _types, offline_served = _offline_tft(config_path, files, work, lambda _: _graph_ready(work))
    finally:
        if not os.path.exists(os.path.join(work, GRAPH_READY)):
            _graph_ready(work)  # a failed offline job must not leave the child waiting
    offline = time.monotonic() - started
    if child.wait() != 0:
        raise RuntimeError(f"the production side of the concurrent floor failed (exit {child.returncode})")
    with open(child_result, encoding="utf-8") as handle:
        production = json.load(handle)
    return {"timings": {"offline_tft_seconds": round(offline, 3),
                        "production_own_seconds": production["wall_s"],
                        "production_waited_seconds": production["waited_s"],
                        "both_seconds": round(time.monotonic() - started, 3)},
            "served": {"offline": offline_served, "production": production["served"]}}


def floor_production(config_path: str, files: list[str], work: str) -> dict:
    """The production side as parity replays it, gated: batches spilled as read and their aggregates computed as
    read; loaded with their aggregates and spilled again as Arrow record batches; then, once the offline graph
    is ready (`GRAPH_READY` in `work`), each served through it. Nothing waits in memory."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from parity.config import capture_field_types, load_config
    from parity.replay.runners import replay_gc
    from parity.stages.transform import TFTInput

    config = load_config(config_path)
    side = config.sides[1]
    schema, types = side.capture.schema_dict, capture_field_types(side)
    folder = os.path.join(work, "production-spill")
    output = os.path.join(work, "tft_output")
    served = os.path.join(work, "production.served")
    marker = os.path.join(work, GRAPH_READY)
    tft_input = TFTInput(types)
    started = time.monotonic()
    with replay_gc():
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            paths, aggs = _spilled_batches(pipeline, files, schema, folder, "Production")
            _ = (paths
                 | "Attach" >> beam.Map(_load_attached, aggs)
                 | "SpillStaged" >> beam.Map(_spill_columnar, tft_input, folder))
        waiting = time.monotonic()
        while not os.path.exists(marker):
            time.sleep(0.05)
        waited = time.monotonic() - waiting
        staged_paths = sorted(os.path.join(folder, name) for name in os.listdir(folder)
                              if name.startswith(f"{STAGED}-"))
        with beam.Pipeline(runner=FnApiRunner()) as pipeline:
            _ = (pipeline
                 | beam.Create(staged_paths, reshuffle=False)
                 | "Serve" >> beam.ParDo(_serve(output, types))
                 | "Count" >> beam.CombineGlobally(sum)
                 | "Served" >> beam.Map(_write_count, served))
    return {"wall_s": round(time.monotonic() - started - waited, 3), "waited_s": round(waited, 3),
            "served": _read_count(served)}


def floor_python(config_path: str, files: list[str], work: str, production_files: list[str] | None = None) -> dict:
    """Each side's python features over its records (two jobs, as parity replays two sides)."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from parity.config import load_config
    from parity.replay.runners import replay_gc

    config = load_config(config_path)
    schema = config.sides[0].capture.schema_dict
    sys.path.insert(0, os.path.dirname(os.path.abspath(config_path)))
    from python_features import python_features

    def features(path: str, aggs: dict) -> Iterator[int]:
        yield len([python_features(r) for r in _load_attached(path, aggs)])

    timings = {}
    for side in config.sides:
        started = time.monotonic()
        with replay_gc(), beam.Pipeline(runner=FnApiRunner()) as pipeline:
            side_files = production_files if production_files and side.name == "production" else files
            paths, aggs = _spilled_batches(pipeline, side_files, schema, os.path.join(work, f"{side.name}-spill"),
                                           side.name)
            _ = (paths | "Features" >> beam.FlatMap(features, aggs)
                 | "Count" >> beam.CombineGlobally(sum))
        timings[f"{side.name}_seconds"] = round(time.monotonic() - started, 3)
    return {"timings": timings}


# ------------------------------------------------------------------------------------------------ parity


def parity_check(config_path: str, work: str, sides_at_once: str = "auto", runner: str = "DirectRunner") -> dict:
    import parity

    report = parity.check(config_path, out_dir=work, sides_at_once=sides_at_once, runner=runner)
    with open(os.path.join(work, "timings.json"), encoding="utf-8") as handle:
        timings = json.load(handle)
    return {"timings": timings, "records": report.get("records", {})}


# ------------------------------------------------------------------------------------------------ kernel


def _stage_values(records: list[dict]) -> list[dict[str, Any]]:
    """Per record, the six stage values parity fingerprints for the taxi config (as WriteBatchFn sees them)."""
    import numpy as np
    import xxhash

    sys.path.insert(0, os.path.join(REPO, "pipelines", "taxi"))
    from python_features import python_features

    from parity.encoding import canonical

    out = []
    for r in records:
        hour = r["event_time"] // 3600 * 3600 * 1_000_000
        aggs = {"trips_1h": 17, "fare_mean_1h": 14.25}
        coder = dict(r, **aggs)
        feats = {k: (np.float32(v) if isinstance(v, float) else v)
                 for k, v in python_features(coder).items() if v is not None}
        zone = r["pickup_zone"]
        out.append({
            "key_bytes": canonical.encode([r["trip_id"]]),
            "values": {
                "input": r,
                "window": {"timestamp_us": r["event_time"] * 1_000_000,
                           "windows": [[hour, hour + 3_600_000_000]]},
                "shard": {"key": zone, "shard": xxhash.xxh3_64_intdigest(canonical.encode(zone)) % 16,
                          "aggregates": aggs},
                "coder": coder,
                "seed": {"in_eval": "train"},
                "transform": feats,
            }})
    return out


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return value.decode("latin-1")
    raise TypeError(type(value).__name__)


def c_xxh3_loop(build_dir: str) -> Callable[[bytes, Any, int, Any], None]:
    """benchmarks/native/xxh3_loop.c compiled (once per source) with the system C compiler against the vendored
    xxHash header, as a ctypes function `xxh3_many(buffer, offsets, n, out)`."""
    import ctypes
    import hashlib

    source = os.path.join(REPO, "benchmarks", "native", "xxh3_loop.c")
    header = os.path.join(REPO, "vendor", "xxhash", "xxhash.h")
    with open(source, "rb") as handle:
        tag = hashlib.sha256(handle.read()).hexdigest()[:12]
    library = os.path.join(build_dir, f"xxh3_loop-{tag}.so")
    if not os.path.exists(library):
        os.makedirs(build_dir, exist_ok=True)
        subprocess.run(["cc", "-O3", "-shared", "-fPIC", "-I", os.path.dirname(header), source, "-o",
                        library + ".tmp"], check=True)
        os.replace(library + ".tmp", library)
    fn = ctypes.CDLL(library).xxh3_many
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p]
    fn.restype = None
    return fn


def kernel(files: list[str], schema_config: str, max_records: int, repeat: int) -> dict:
    """Records/s of parity's fingerprint kernels against plain xxh3 over pre-encoded bytes (same process,
    alternated, medians of `repeat` rounds)."""
    import xxhash

    from parity.encoding import canonical
    from parity.config import load_config
    from parity.stages import STAGES
    from parity.encoding.fingerprint import encode_fingerprints, feature_fingerprints, fingerprints

    schema = load_config(schema_config).sides[0].capture.schema_dict
    records: list[dict] = []
    for path in files:
        for batch in read_record_batches(path, schema):
            records.extend(batch[: max_records - len(records)])
            if len(records) >= max_records:
                break
        if len(records) >= max_records:
            break
    n = len(records)
    h64, h128, dumps = xxhash.xxh3_64_intdigest, xxhash.xxh3_128_digest, json.dumps
    # Pre-encoded outside the timed loops: each record's canonical bytes, the bytes the kernels hash (so the
    # plain loop computes the kernels' very fingerprints), and its sorted JSON, the baseline of earlier runs
    # (longer: 290 bytes a taxi record against 242, so every one takes xxh3's long-input path).
    record_bytes = canonical.encode_many(records)
    json_bytes = [dumps(r, sort_keys=True).encode() for r in records]
    if fingerprints(records) != [h64(b) for b in record_bytes]:
        raise AssertionError("the kernel's fingerprints differ from xxh3 of the records' canonical bytes")
    staged = _stage_values(records)
    stage_bytes = []
    for item in staged:
        values = item["values"]
        row = [item["key_bytes"]]
        row += [dumps(values[s], sort_keys=True, default=_json_default).encode() for s in STAGES]
        row += [dumps(v, default=_json_default).encode() for v in values["transform"].values()]
        stage_bytes.append(row)
    hashes_per_record = len(stage_bytes[0]) if stage_bytes else 0

    def plain_record() -> None:
        [h64(b) for b in record_bytes]

    # The C loop: the same bytes packed in one buffer with offsets (numpy), hashed by benchmarks/native/xxh3_loop.c
    # in one thread; its fingerprints are checked against the kernels'.
    import numpy as np

    xxh3_many = c_xxh3_loop(os.path.join(os.path.dirname(os.path.abspath(schema_config)), "native-build"))
    packed = b"".join(record_bytes)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(b) for b in record_bytes], out=offsets[1:])
    c_out = np.zeros(n, dtype=np.uint64)
    xxh3_many(packed, offsets.ctypes.data, n, c_out.ctypes.data)
    if c_out.tolist() != [h64(b) for b in record_bytes]:
        raise AssertionError("the C loop's fingerprints differ from xxh3 of the records' canonical bytes")

    def c_record() -> None:
        xxh3_many(packed, offsets.ctypes.data, n, c_out.ctypes.data)

    def plain_json_record() -> None:
        [h64(b) for b in json_bytes]

    def parity_record() -> None:
        fingerprints(records)

    def encode_many_record() -> None:
        [h64(b) for b in canonical.encode_many(records)]

    def json_record() -> None:
        [h64(dumps(r, sort_keys=True).encode()) for r in records]

    def plain_stages() -> None:
        for row in stage_bytes:
            [h64(b) for b in row]

    stage_batches = []  # per batch of BATCH_SIZE: key bytes, records, and each computed stage's column
    for start in range(0, n, BATCH_SIZE):
        chunk = staged[start:start + BATCH_SIZE]
        stage_batches.append(([item["key_bytes"] for item in chunk], records[start:start + BATCH_SIZE],
                              {s: [item["values"][s] for item in chunk] for s in STAGES[1:]}))

    def parity_stages() -> None:
        # What a replay does to fingerprint a batch, without the Parquet write: the read encodes the records
        # (canonical.encode_many), WriteBatchFn (parity/replay/write_step.py) hashes key and input bytes, one
        # encode_fingerprints call per stage column, feature_fingerprints per transform value.
        for key_bytes, chunk, columns in stage_batches:
            [h128(b) for b in key_bytes]
            [h64(b) for b in canonical.encode_many(chunk)]
            for stage, values in columns.items():
                if stage == "transform":
                    [feature_fingerprints(v) for v in values]
                else:
                    encode_fingerprints(values)

    # The same records as Arrow record batches of BATCH_SIZE rows (built outside the timed loop, as the
    # Parquet reader gets them from the file): parity.encoding.columnar encodes and hashes each batch's rows from
    # its columns, which is what the read step uses for a Parquet capture (parity/capture/parquet.py).
    import pyarrow as pa

    from parity.encoding import columnar

    arrow_batches = [pa.RecordBatch.from_pylist(records[start:start + BATCH_SIZE])
                     for start in range(0, n, BATCH_SIZE)]
    if columnar.row_encodings(arrow_batches[0][:1]) != encode_fingerprints(arrow_batches[0][:1].to_pylist()):
        raise AssertionError("the Arrow kernel's bytes differ from the records' canonical bytes")

    def arrow_record() -> None:
        for batch in arrow_batches:
            columnar.row_encodings(batch)

    cases = {"plain_xxh3_record": plain_record, "plain_xxh3_json_record": plain_json_record,
             "c_xxh3_record": c_record,
             "parity_fingerprints_record": parity_record,
             "parity_arrow_batch_record": arrow_record,
             "parity_encode_many_record": encode_many_record, "json_dumps_xxh3_record": json_record,
             "plain_xxh3_stages": plain_stages, "parity_writebatch_stages": parity_stages}
    # A warm-up run of each case sets how many runs one sample takes: at least 0.1 s, so that the fast loops
    # (a few ms each) are not timed on one short run each.
    loops: dict[str, int] = {}
    for name, fn in cases.items():
        started = time.perf_counter()
        fn()
        loops[name] = max(1, math.ceil(0.1 / max(time.perf_counter() - started, 1e-6)))
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            started = time.perf_counter()
            for _ in range(loops[name]):
                fn()
            times[name].append((time.perf_counter() - started) / loops[name])
    medians = {k: statistics.median(v) for k, v in times.items()}
    return {"records": n, "hashes_per_record_stages": hashes_per_record, "encoder": canonical.IMPLEMENTATION,
            "runs_per_sample": loops,
            "seconds": {k: round(v, 6) for k, v in medians.items()},
            "records_per_second": {k: round(n / v) if v else None for k, v in medians.items()},
            "ratio_record": round(medians["plain_xxh3_record"] / medians["parity_fingerprints_record"], 4),
            # against the C loop, one thread each: what the replay's two kernels cost over hashing alone
            "ratio_c_record": round(medians["c_xxh3_record"] / medians["parity_fingerprints_record"], 4),
            "ratio_c_arrow": round(medians["c_xxh3_record"] / medians["parity_arrow_batch_record"], 4),
            "ratio_stages": round(medians["plain_xxh3_stages"] / medians["parity_writebatch_stages"], 4),
            "ratio_arrow": round(medians["plain_xxh3_record"] / medians["parity_arrow_batch_record"], 4),
            "repeat": repeat}


# ------------------------------------------------------------------------------------------------ export


def export_examples(parity_out: str, dest: str) -> dict:
    """Writes each side's final features (parity's transform stage values) as tf.Examples with a trip_id
    feature: `dest/<side>.tfrecord`. Records without features (dropped as late, errors) are left out."""
    import glob

    import numpy as np
    import tensorflow as tf

    from parity.encoding import canonical
    from parity.sets.fingerprint_set import read_values

    counts = {}
    os.makedirs(dest, exist_ok=True)
    for side_dir in sorted(glob.glob(os.path.join(parity_out, "sides", "*"))):
        side = os.path.basename(side_dir)
        written = 0
        with tf.io.TFRecordWriter(os.path.join(dest, f"{side}.tfrecord")) as writer:
            for path in sorted(glob.glob(os.path.join(side_dir, "values", "*.parquet"))):
                part = os.path.basename(path)[:-len(".parquet")]
                table = read_values(side_dir, part, ["key_bytes", "transform"])
                for key_bytes, data in zip(table.column("key_bytes").to_pylist(),
                                           table.column("transform").to_pylist()):
                    value = canonical.decode(data) if data is not None else None
                    if not isinstance(value, dict) or set(value) in ({"dropped"}, {"error"}):
                        continue
                    key = canonical.decode(key_bytes)
                    feature = {"trip_id": tf.train.Feature(int64_list=tf.train.Int64List(
                        value=[int(key[0] if isinstance(key, list) else key)]))}
                    for name, v in value.items():
                        items = v if isinstance(v, list) else [v]
                        if any(isinstance(x, (float, np.floating)) for x in items):
                            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(
                                value=[float(x) for x in items]))
                        elif all(isinstance(x, (int, bool, np.integer)) for x in items):
                            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(
                                value=[int(x) for x in items]))
                        else:
                            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(
                                value=[str(x).encode() for x in items]))
                    example = tf.train.Example(features=tf.train.Features(feature=feature))
                    writer.write(example.SerializeToString())
                    written += 1
        counts[side] = written
    return {"examples": counts}


# -------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender", choices=["floor", "floor_concurrent", "floor_production", "parity",
                                              "parity_serial", "parity_flink", "kernel", "export"])
    parser.add_argument("--config", required=True, help="the work dir's parity.yaml")
    parser.add_argument("--files", nargs="*", default=[], help="capture files")
    parser.add_argument("--production-files", nargs="*", default=[],
                        help="the production side's capture, when it differs (a divergence sweep)")
    parser.add_argument("--work", required=True, help="scratch folder of this run")
    parser.add_argument("--result", required=True, help="write the result JSON here")
    parser.add_argument("--transform", choices=["tft", "python"], default="tft")
    parser.add_argument("--kernel-records", type=int, default=200_000)
    parser.add_argument("--kernel-repeat", type=int, default=5)
    parser.add_argument("--parity-out", default=None, help="export: the parity run's out dir")
    args = parser.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    if args.contender in ("floor", "floor_concurrent", "floor_production", "parity", "parity_serial",
                          "parity_flink"):
        _warm_imports(tft=args.transform == "tft" or args.contender.startswith("floor_"))
    if args.contender == "floor_production":  # the concurrent floor's child: its own result (wall and wait)
        result = floor_production(args.config, args.files, args.work)
        with open(args.result, "w", encoding="utf-8") as handle:
            json.dump(result, handle)
        return 0
    started = time.monotonic()
    if args.contender == "floor":
        extra = (floor_tft if args.transform == "tft" else floor_python)(args.config, args.files, args.work,
                                                                         args.production_files)
    elif args.contender == "floor_concurrent":
        if args.transform != "tft":
            raise SystemExit("floor_concurrent is the TFT floor (the python variant has no graph to wait for)")
        extra = floor_tft_concurrent(args.config, args.files, args.work, args.production_files)
    elif args.contender == "parity":
        extra = parity_check(args.config, args.work)
    elif args.contender == "parity_serial":
        extra = parity_check(args.config, args.work, sides_at_once="off")
    elif args.contender == "parity_flink":  # parity's Flink defaults: an embedded MiniCluster, its job server
        extra = parity_check(args.config, args.work, runner="FlinkRunner")  # started by the check (timed)
    elif args.contender == "kernel":
        extra = kernel(args.files, args.config, args.kernel_records, args.kernel_repeat)
    else:
        extra = export_examples(args.parity_out, args.work)
    wall = time.monotonic() - started
    result = {"contender": args.contender, "wall_s": round(wall, 3), **extra}
    write_result(args.result, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
