"""parity's S3 file system: the operations parity's storage uses (open, create, exists, list, delete) on Beam's
own S3IO, with one Beam S3 client per thread and storage context, where Beam's S3 file system makes one per call.

Beam's `S3FileSystem` builds `S3IO(options=...)` in every call (open, create, exists, match, delete), and each
S3IO builds a new boto3 session and client, which costs far more CPU than the request itself (boto3 loads and
parses the S3 service model for every session). A replay into `s3://` opens several objects per batch, so a
large side would spend most of its CPU building clients.

`S3Store` is built per storage context (`parity.storage.context.Storage`, one tuple of pipeline options) and
calls Beam's public S3IO with the client this thread built before for it (`S3IO(client=..., options=...)`):
still Beam's own `boto3_client.Client` on Beam's own S3IO, its boto3 client built with the context's time
limits. Beam's classes are not changed and nothing is registered with Beam: a user's S3IO and Beam's
`FileSystems` in the same process are exactly as Beam makes them, and two contexts with other options in one
process (a tap in a user's job beside parity's own run) each use their own clients. Per thread, because Beam's
client keeps its current download stream (a ranged read continues it when the position follows on, and reopens
otherwise), which threads must not share.

The boto3 client inside is one per process and options (`bounded_client`), shared by the threads' Beam clients:
boto3's low-level clients are thread-safe, and building one from a new session costs that session's parse of S3's
service model, tenths of a CPU second: an SDK harness runs its bundles on threads it starts as it needs them, and
paid that for each of its threads, twice (Beam's `Client.__init__` builds one of its own, which parity replaced).
The boto3 session the clients are built from is the process's and outlives a fork: the harness zygote parses the
model once (`warm`), and its forked harnesses build their clients from its session; a forked child never uses
its parent's clients (their connections are the parent's).
"""
from __future__ import annotations

import os
import threading
from typing import Any, Iterator, Sequence

from parity import compat
from parity.storage import limits
from parity.storage.fork_lock import ForkLock

_MIME = "application/octet-stream"  # what Beam's S3 file system writes an uncompressed object as


class S3Store:
    """Beam's S3IO for one tuple of pipeline options, with this thread's client. The methods are the file-system
    calls parity makes (`parity.storage.context`); errors are Beam's and the store's, which the caller turns
    into OSError."""

    def __init__(self, options: tuple[str, ...]) -> None:
        from apache_beam.options.pipeline_options import PipelineOptions

        self._options = tuple(options)
        self._beam_options = PipelineOptions(list(options))
        self._local = threading.local()

    def _io(self) -> Any:
        s3io, boto3_client = compat.s3io_module(), compat.boto3_client_module()
        pid, client = getattr(self._local, "client", (None, None))
        if client is None or pid != os.getpid():  # a forked child's thread builds its own, as its boto3 client
            # Beam's client, around the process's boto3 client (what each method calls)
            client = compat.beam_s3_client(boto3_client, bounded_client(self._beam_options, self._options))
            self._local.client = (os.getpid(), client)
        return s3io.S3IO(client=client, options=self._beam_options)

    def client(self) -> Any:
        """This thread's Beam client (built on first use)."""
        return self._io().client

    def open(self, path: str) -> Any:
        return self._io().open(path, "rb", mime_type=_MIME)

    def create(self, path: str) -> Any:
        return self._io().open(path, "wb", mime_type=_MIME)

    def exists(self, path: str) -> bool:
        return bool(self._io().exists(path))

    def list_prefix(self, prefix: str) -> Iterator[str]:
        """Every object whose name starts with `prefix` (Beam's match of `prefix**`)."""
        return (name for name, _size in self._io().list_files(prefix))

    def delete(self, paths: Sequence[str]) -> None:
        failed = {path: error for path, error in self._io().delete_paths(list(paths)).items() if error is not None}
        if failed:
            path, error = sorted(failed.items())[0]
            raise OSError(f"{path}: delete failed ({error})")


# How long one S3 request may wait, and how often it is tried: botocore's defaults (60 s to connect, 60 s per
# read, 5 attempts in legacy mode) left an unreachable endpoint hanging a run for minutes. Each may be set
# with a pipeline option after `--` (`--s3_connect_timeout=10`), read by parity, not by Beam.
TIMEOUT_OPTIONS = {"s3_connect_timeout": 5.0, "s3_read_timeout": 8.0, "s3_max_attempts": 2}


def client_limits(options: Any) -> dict[str, float]:
    """The S3 time limits among pipeline options (`--s3_read_timeout=20`), else the defaults."""
    return limits.option_limits(options, TIMEOUT_OPTIONS)


def _limits_config(options: Any) -> Any:
    """botocore's `Config` with the S3 time limits among `options` (else the defaults)."""
    from botocore.config import Config

    bounds = client_limits(options)
    return Config(connect_timeout=bounds["s3_connect_timeout"], read_timeout=bounds["s3_read_timeout"],
                  retries={"max_attempts": int(bounds["s3_max_attempts"]), "mode": "standard"})


def bounded_client(pipeline_options: Any, options: Sequence[str]) -> Any:
    """This process's boto3 S3 client for `options` (`pipeline_options` the same options, parsed), built once as
    Beam's `boto3_client.Client` builds one, with the time limits among `options`: botocore's defaults (60 s to
    connect, 60 s per read, 5 attempts in legacy mode) left an unreachable endpoint hanging a run for minutes.
    Shared by the process's threads (a boto3 low-level client is thread-safe)."""
    key = tuple(options)
    client = _CLIENTS.get(key)
    if client is not None:
        return client
    from apache_beam.options.pipeline_options import S3Options

    s3 = pipeline_options.view_as(S3Options)
    with _LOCK:  # a boto3 session is not thread-safe: one thread builds from it at a time
        client = _CLIENTS.get(key)
        if client is None:
            client = _CLIENTS[key] = _session().client(
                "s3", region_name=s3.s3_region_name, api_version=s3.s3_api_version, use_ssl=not s3.s3_disable_ssl,
                verify=s3.s3_verify, endpoint_url=s3.s3_endpoint_url, aws_access_key_id=s3.s3_access_key_id,
                aws_secret_access_key=s3.s3_secret_access_key, aws_session_token=s3.s3_session_token,
                config=_limits_config(options))
    return client


def warm() -> None:
    """Parses S3's service model into the process's boto3 session (by building a client that is not kept, with
    placeholder credentials: no credential look-up, no request, no thread): a process forked after this builds
    its clients without parsing it again. For the harness zygote (`parity.replay.harness_zygote`)."""
    with _LOCK:
        _session().client("s3", region_name="us-east-1", aws_access_key_id="parity-warm",
                          aws_secret_access_key="parity-warm")


def _session() -> Any:
    """The process's boto3 session (built on first use, under `_LOCK`), whose loader keeps the models it parsed."""
    global _SESSION
    if _SESSION is None:
        import boto3

        _SESSION = boto3.session.Session()
    return _SESSION


_SESSION: Any = None
_CLIENTS: dict[tuple[str, ...], Any] = {}  # options -> this process's boto3 client for them
_LOCK = ForkLock()  # new and free in a forked child


def _forked() -> None:
    """In a forked child: the parent's clients (and their connections) are not the child's. The session, its parsed
    models, stays."""
    _CLIENTS.clear()


os.register_at_fork(after_in_child=_forked)


_probed: dict[tuple, Exception | None] = {}  # the outcome per bucket and options: a store is asked once


def probe(url: str, options: Any) -> None:
    """Checks once per bucket and options, within the client limits, that the S3 store of `url` answers:
    one HEAD of the bucket with a client of the run's options, outside Beam's retries (which wait minutes on
    an endpoint that does not answer). Any answer, an error status included, passes; Beam says what it means.

    Raises:
        InputError: no answer within the limits (the endpoint is unreachable or silent), or no credentials;
            the message names the URL, the endpoint and what to check.
    """
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options

    bucket = url.split("://", 1)[1].split("/", 1)[0]
    key = (bucket, tuple(options or ()))
    if key in _probed:
        if _probed[key] is not None:
            raise _probed[key]
        return
    boto3_client = compat.boto3_client_module()
    try:
        import botocore.exceptions as errors
    except ImportError:
        boto3_client = None
    if boto3_client is None:  # no [aws] extra: Beam says s3:// has no file system
        return
    from parity.errors import InputError

    s3 = PipelineOptions(list(options or ())).view_as(S3Options)
    endpoint = s3.s3_endpoint_url or f"the AWS S3 endpoint of region {s3.s3_region_name or 'us-east-1 (default)'}"
    within = limits.describe(client_limits(options), "s3")
    client = bounded_client(PipelineOptions(list(options or ())), tuple(options or ()))
    try:
        _probed[key] = _ask(client, bucket, url, endpoint, within, errors)
    except InputError as exc:
        _probed[key] = exc
        raise


def _ask(client: Any, bucket: str, url: str, endpoint: str, within: str, errors: Any) -> None:
    """`probe`'s one request; raises InputError when the store gave no answer."""
    from parity.errors import InputError

    try:
        client.head_bucket(Bucket=bucket)
    except errors.NoCredentialsError as exc:
        raise InputError(f"{url}: no credentials for S3 ({exc}); check -- --s3_access_key_id=... "
                         f"--s3_secret_access_key=... or the AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY variables "
                         f"(or an AWS profile)") from None
    except (errors.EndpointConnectionError, errors.ConnectTimeoutError, errors.ReadTimeoutError,
            errors.ConnectionClosedError) as exc:
        raise InputError(f"{url}: the object store at {endpoint} did not answer within {within} ({exc}); check "
                         f"the network, the endpoint (-- --s3_endpoint_url=...) and that the store runs; the limits "
                         f"are -- --s3_connect_timeout, --s3_read_timeout and --s3_max_attempts") from None
    except errors.ClientError:
        pass  # it answered (403, 404, ...): reachable
    except errors.BotoCoreError as exc:
        raise InputError(f"{url}: cannot use the object store at {endpoint}: {exc}; check -- --s3_endpoint_url "
                         f"and the credentials") from None

