"""What one object written and read back through Beam's S3 file system costs, with Beam's client per call and with
parity's `S3Store` reusing one client per thread (parity/storage/s3_clients.py), on the test bed's moto S3 server.

    .venv/bin/python benchmarks/s3_objects.py --objects 40 --rounds 3

Each round runs both modes in a fresh process each, in an order that alternates; a process writes `--objects`
objects of 200,000 bytes and reads them back, through Beam's own `S3FileSystem` (mode `beam`) or through a
`parity.storage.context.Storage` (mode `reuse`). Reported per object: the process's CPU seconds, the S3 server's
CPU seconds (from /proc), and wall seconds; every round is printed, with the median and the spread.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [REPO]

CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, REPO)
from apache_beam.io.aws.s3filesystem import S3FileSystem
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.options.pipeline_options import PipelineOptions
from parity.storage.context import Storage
mode, objects, port, pid = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
options = [f"--s3_endpoint_url=http://127.0.0.1:{port}", "--s3_access_key_id=testing",
           "--s3_secret_access_key=testing", "--s3_region_name=us-east-1"]
if mode == "beam":  # Beam's S3 file system: an S3IO, and so a client, per call
    fs = S3FileSystem(PipelineOptions(options))
    def write_bytes(path, data):
        with fs.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            handle.write(data)
    def read_bytes(path):
        with fs.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
            return handle.read()
else:
    storage = Storage.of(options)
    write_bytes, read_bytes = storage.write_bytes, storage.read_bytes
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
def server_cpu():
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
data = os.urandom(200_000)
write_bytes(f"s3://parity/{mode}/warm", data)  # imports and the first connection, not counted
read_bytes(f"s3://parity/{mode}/warm")
c0, s0, w0 = cpu(), server_cpu(), time.monotonic()
for i in range(objects):
    write_bytes(f"s3://parity/{mode}/o{i}", data)
for i in range(objects):
    assert read_bytes(f"s3://parity/{mode}/o{i}") == data
n = 2 * objects
print(json.dumps({"mode": mode, "client_cpu_s": (cpu() - c0) / n, "server_cpu_s": (server_cpu() - s0) / n,
                  "wall_s": (time.monotonic() - w0) / n}))
""".replace("REPO", repr(REPO))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from tests.cluster import testbed as bed

    logs = tempfile.mkdtemp(prefix="parity-s3-objects-")
    s3 = bed.start_s3(logs)
    runs: dict[str, list[dict]] = {"beam": [], "reuse": []}
    try:
        s3.client().create_bucket(Bucket="parity")
        for round_index in range(args.rounds):
            for mode in (("beam", "reuse") if round_index % 2 == 0 else ("reuse", "beam")):
                done = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.objects), str(s3.port),
                                       str(s3.process.pid)], capture_output=True, text=True, check=True)
                run = json.loads(done.stdout.strip().splitlines()[-1])
                run["round"] = round_index + 1
                runs[mode].append(run)
                print(f"round {run['round']} {mode}: per object client {run['client_cpu_s']:.4f} CPU s, "
                      f"server {run['server_cpu_s']:.4f} CPU s, wall {run['wall_s']:.4f} s", flush=True)
    finally:
        s3.stop()
    for mode, rounds in runs.items():
        for key in ("client_cpu_s", "server_cpu_s", "wall_s"):
            values = [r[key] for r in rounds]
            print(f"{mode} {key} per object: median {statistics.median(values):.4f}, spread "
                  f"{max(values) - min(values):.4f} over {len(values)} rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
