"""One Beam S3 client per thread and set of S3 options, where Beam makes one per call.

Beam's S3 file system builds `S3IO(options=...)` in every call (open, create, exists, match, delete), and each
S3IO builds a new boto3 session and client: 0.12-0.18 CPU s each on this machine (boto3 loads and parses the S3
service model for every session), far more than the request itself. A replay into `s3://` opens several objects
per batch, so a 10M-record side would spend hours of CPU building clients (benchmarks/RESULTS.md).

`reuse_clients` has S3IO take, when it is given options and no client, the client this thread built before for
the same S3 options: still Beam's own `boto3_client.Client`, on Beam's own S3IO, with Beam's options; nothing
about the store is parity's. Per thread, because Beam's client keeps its current download stream (a ranged
read continues it when the position follows on, and reopens otherwise), which threads must not share; an SDK
harness runs its bundles on a pool of threads that it reuses, so a thread's client is built once.
"""
from __future__ import annotations

import threading
from typing import Any

_local = threading.local()
_installed = False
_lock = threading.Lock()

# the S3Options fields Beam's client is built from: the key of a reusable client
_FIELDS = ("s3_access_key_id", "s3_secret_access_key", "s3_session_token", "s3_endpoint_url", "s3_disable_ssl",
           "s3_region_name", "s3_api_version", "s3_verify")


def reuse_clients() -> None:
    """Has Beam's S3IO reuse its thread's client for the same S3 options. Idempotent; nothing when Beam's S3
    support (`apache-beam[aws]`) is not installed."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        try:
            from apache_beam.io.aws import s3io
            from apache_beam.io.aws.clients.s3 import boto3_client
        except ImportError:  # no [aws] extra: no s3:// at all
            return
        if not getattr(s3io, "BOTO3_INSTALLED", False):
            return
        built = s3io.S3IO.__init__

        def __init__(self: Any, client: Any = None, options: Any = None) -> None:
            if client is None and options is not None:
                client = _thread_client(boto3_client.Client, options)
            built(self, client=client, options=options)

        s3io.S3IO.__init__ = __init__
        _installed = True


def _thread_client(make: Any, options: Any) -> Any:
    key = _key(options)
    clients = getattr(_local, "clients", None)
    if clients is None:
        clients = _local.clients = {}
    client = clients.get(key)
    if client is None:
        client = clients[key] = make(options=options)
    return client


def _key(options: Any) -> tuple:
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options

    if isinstance(options, PipelineOptions):
        view = options.view_as(S3Options)
        return tuple(getattr(view, name, None) for name in _FIELDS)
    return tuple(options.get(name) for name in _FIELDS)
