"""The input stage of a Parquet capture: read + canonical bytes + fingerprints, with and without the columnar
encoder, side by side in one process.

    .venv/bin/python benchmarks/parquet_input.py --records 100000 --repeat 5

Writes the taxi fixture's records (`fixtures/taxi/generate.py`, through benchmarks/run.py's capture cache)
as one Parquet file, read back with the taxi schema, then times, alternated, medians of `--repeat`:

    columns  `read_file` (the Parquet reader with `parity.encoding.columnar`: each batch's bytes and fingerprints from
             its columns), as the replay's read step gets them
    dicts    the same `read_file` with the columnar encoder switched off, then `encode_fingerprints` of the
             records: the read step's path for every other capture (and before the columnar encoder)

Both give the same bytes and fingerprints (checked). Prints one JSON line.
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
if REPO not in sys.path:
    sys.path.insert(0, REPO)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--work", default=None, help="folder for the captures (default: a temporary one)")
    args = parser.parse_args(argv)

    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, os.path.join(REPO, "benchmarks"))
    from run import ensure_capture
    from parity.encoding import columnar
    from parity.capture import read_file
    from parity.config import load_config
    from parity.encoding.fingerprint import encode_fingerprints

    work = args.work or tempfile.mkdtemp(prefix="parity-parquet-input-")
    files = ensure_capture(args.records, 7, work)
    schema = load_config(os.path.join(REPO, "pipelines", "taxi", "parity.yaml")).sides[0].capture.schema_dict
    records = []
    for path in files:
        for batch in read_file(path, "jsonl", schema, 10_000, path):
            records.extend(batch.records)
    parquet = os.path.join(work, f"trips-{args.records}.parquet")
    pq.write_table(pa.Table.from_pylist(records), parquet, row_group_size=100_000)
    del records

    encode = columnar.row_encodings

    def columns() -> tuple[list, list]:
        data, fps = [], []
        for batch in read_file(parquet, "parquet", schema, 2000, "trips.parquet"):
            data += batch.encoded
            fps += batch.fingerprints
        return data, fps

    def dicts() -> tuple[list, list]:
        columnar.row_encodings = lambda *a, **k: None
        try:
            data, fps = [], []
            for batch in read_file(parquet, "parquet", schema, 2000, "trips.parquet"):
                assert batch.encoded == []
                encoded, hashed = encode_fingerprints(batch.records)
                data += encoded
                fps += hashed
            return data, fps
        finally:
            columnar.row_encodings = encode

    if columns() != dicts():
        raise AssertionError("the columnar encoder's bytes differ from the records' canonical bytes")
    times: dict[str, list[float]] = {"columns": [], "dicts": []}
    for _ in range(args.repeat):
        for name, fn in (("columns", columns), ("dicts", dicts)):
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"records": args.records, "repeat": args.repeat,
                      "seconds": {k: round(v, 3) for k, v in medians.items()},
                      "us_per_record": {k: round(v / args.records * 1e6, 3) for k, v in medians.items()},
                      "dicts_over_columns": round(medians["dicts"] / medians["columns"], 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
