"""One Beam S3 client per thread and set of S3 options for parity's own file access, where Beam makes one per call.

Beam's S3 file system builds `S3IO(options=...)` in every call (open, create, exists, match, delete), and each
S3IO builds a new boto3 session and client, which costs far more CPU than the request itself (boto3 loads and
parses the S3 service model for every session). A replay into `s3://` opens several objects per batch, so a
large side would spend most of its CPU building clients.

parity builds its own S3 file system with an options object of its own (`storage_options`), and Beam's S3IO,
given that very object and no client, takes the client this thread built before for it: still Beam's own
`boto3_client.Client`, on Beam's own S3IO, its boto3 client built with parity's time limits. Any other caller's
S3IO, a user's pipeline in the same process included, is built exactly as Beam builds it: the reuse and the
limits apply to parity's options objects only, and boto3 is left as it is. Per thread, because Beam's client
keeps its current download stream (a ranged read continues it when the position follows on, and reopens
otherwise), which threads must not share; an SDK harness runs its bundles on a pool of threads that it reuses,
so a thread's client is built once.
"""
from __future__ import annotations

import threading
from typing import Any

from parity import compat
from parity.storage import limits

_local = threading.local()
_installed = False
_lock = threading.Lock()

# the S3Options fields Beam's client is built from: the key of a reusable client
_FIELDS = ("s3_access_key_id", "s3_secret_access_key", "s3_session_token", "s3_endpoint_url", "s3_disable_ssl",
           "s3_region_name", "s3_api_version", "s3_verify")


_made: dict[tuple[str, ...], Any] = {}   # parity's options objects, one per tuple of pipeline options
_ours: dict[int, Any] = {}                # the same objects by id: the ones whose S3IO reuses a client


def storage_options(options: tuple[str, ...]) -> Any:
    """The `PipelineOptions` parity's own file systems are built with (`parity.storage.urls`), one object per
    tuple of options: Beam's S3IO reuses this thread's client for this object, and for no other."""
    from apache_beam.options.pipeline_options import PipelineOptions

    with _lock:
        made = _made.get(options)
        if made is None:
            made = _made[options] = PipelineOptions(list(options))
            _ours[id(made)] = made
    _reuse_clients()
    return made


def _reuse_clients() -> None:
    """Has Beam's S3IO reuse its thread's client when it is given one of parity's options objects and no client;
    given anything else it does what Beam does. Idempotent; nothing when Beam's S3 support (`apache-beam[aws]`)
    is not installed."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        s3io, boto3_client = compat.s3io_module(), compat.boto3_client_module()
        if s3io is None or boto3_client is None:  # no [aws] extra or no boto3: no s3:// at all
            return
        built = s3io.S3IO.__init__

        def __init__(self: Any, client: Any = None, options: Any = None) -> None:
            if client is None and options is not None and _ours.get(id(options)) is options:
                client = _thread_client(boto3_client.Client, options)
            built(self, client=client, options=options)

        s3io.S3IO.__init__ = __init__
        _installed = True


# How long one S3 request may wait, and how often it is tried: botocore's defaults (60 s to connect, 60 s per
# read, 5 attempts in legacy mode) left an unreachable endpoint hanging a run for minutes. Each may be set
# with a pipeline option after `--` (`--s3_connect_timeout=10`), read by parity, not by Beam.
TIMEOUT_OPTIONS = {"s3_connect_timeout": 5.0, "s3_read_timeout": 8.0, "s3_max_attempts": 2}
_run_options: tuple[str, ...] = ()  # the run's pipeline options, given by `parity.storage.urls.configure`


def use_options(options: tuple[str, ...]) -> None:
    """The run's pipeline options, whose S3 time limits the clients built from now on take."""
    global _run_options
    _run_options = tuple(options)


def client_limits(options: Any) -> dict[str, float]:
    """The S3 time limits among pipeline options (`--s3_read_timeout=20`), else the defaults."""
    return limits.option_limits(options, TIMEOUT_OPTIONS)


def _limits_config(options: Any) -> Any:
    """botocore's `Config` with the S3 time limits among `options` (else the defaults)."""
    from botocore.config import Config

    bounds = client_limits(options)
    return Config(connect_timeout=bounds["s3_connect_timeout"], read_timeout=bounds["s3_read_timeout"],
                  retries={"max_attempts": int(bounds["s3_max_attempts"]), "mode": "standard"})


def _bounded_client(options: Any) -> Any:
    """A boto3 S3 client as Beam's `boto3_client.Client` builds one from `options` (a `PipelineOptions`), with
    the run's time limits: botocore's defaults (60 s to connect, 60 s per read, 5 attempts in legacy mode) left an
    unreachable endpoint hanging a run for minutes."""
    import boto3
    from apache_beam.options.pipeline_options import S3Options

    s3 = options.view_as(S3Options)
    return boto3.session.Session().client(
        "s3", region_name=s3.s3_region_name, api_version=s3.s3_api_version, use_ssl=not s3.s3_disable_ssl,
        verify=s3.s3_verify, endpoint_url=s3.s3_endpoint_url, aws_access_key_id=s3.s3_access_key_id,
        aws_secret_access_key=s3.s3_secret_access_key, aws_session_token=s3.s3_session_token,
        config=_limits_config(_run_options))


def _thread_client(make: Any, options: Any) -> Any:
    key = _key(options)
    clients = getattr(_local, "clients", None)
    if clients is None:
        clients = _local.clients = {}
    client = clients.get(key)
    if client is None:
        client = make(options=options)
        client.client = _bounded_client(options)  # the boto3 client every method of Beam's Client calls
        clients[key] = client
    return client


def _key(options: Any) -> tuple:
    from apache_beam.options.pipeline_options import S3Options

    bounds = tuple(client_limits(_run_options).values())  # a client is built with the limits of its time

    view = options.view_as(S3Options)
    return bounds + tuple(getattr(view, name, None) for name in _FIELDS)


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
    client = _bounded_client(PipelineOptions(list(options or ())))
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

