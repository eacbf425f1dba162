"""The process's boto3 session and S3 clients (parity/storage/s3_clients.py) without a store: the harness
zygote's `warm` parses S3's service model once, so that a client built after it (in the zygote's forked harnesses)
parses no model file again, and it starts no thread and keeps no client; clients for the same options are one per
process, built once. Against a real store: tests/cluster/test_s3_clients.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("boto3")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_CHILD = """
import json, os, threading
import botocore.loaders
from apache_beam.options.pipeline_options import PipelineOptions
from parity.storage import s3_clients

parsed = []
load_file = botocore.loaders.JSONFileLoader.load_file
botocore.loaders.JSONFileLoader.load_file = lambda self, path: (parsed.append(os.path.basename(path)),
                                                                load_file(self, path))[1]
if WARM:
    s3_clients.warm()
warmed = list(parsed)
threads, kept = threading.active_count(), len(s3_clients._CLIENTS)
del parsed[:]
options = ["--s3_endpoint_url=http://127.0.0.1:9", "--s3_access_key_id=a", "--s3_secret_access_key=b",
           "--s3_region_name=eu-west-1"]
first = s3_clients.bounded_client(PipelineOptions(options), options)
again = s3_clients.bounded_client(PipelineOptions(options), list(options))
print(json.dumps({"warmed": warmed, "threads": threads, "kept": kept, "parsed": parsed, "same": first is again,
                  "endpoint": first.meta.endpoint_url}))
"""


def _child(warm: bool) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD.replace("WARM", repr(warm))], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=ROOT), check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_client_built_after_warm_parses_no_model_file_and_warm_starts_no_thread_and_keeps_no_client():
    warmed, cold = _child(True), _child(False)

    assert any(name.startswith("service-2") for name in warmed["warmed"])  # S3's model, parsed by warm
    assert warmed["parsed"] == [] and warmed["threads"] == 1 and warmed["kept"] == 0
    assert any(name.startswith("service-2") for name in cold["parsed"])  # without warm, the first client parses it
    assert warmed["same"] and cold["same"]  # the same options: the process's one client
    assert warmed["endpoint"] == cold["endpoint"] == "http://127.0.0.1:9"
