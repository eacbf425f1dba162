"""A bounded check that the Google Cloud Storage store of a `gs://` URL answers, before Beam's client asks it.

Beam's GCS file system, on a machine with no route to the store, first looks up Google credentials five times
with exponential backoff (about 30 s when there are none), then retries every call for google-api-core's
120 s deadline: a check with a `gs://` capture or `--out` ran past 400 s without an end. parity asks once per
bucket and options, with its own limits (`--gcs_connect_timeout`, `--gcs_read_timeout`, `--gcs_max_attempts`
after `--`), and stops the run with one message naming the URL, the endpoint and what to check.

The request is one anonymous GET of the bucket's metadata. Any answer shows the store is reachable; Beam says
what a refusal means, with the run's credentials. Only when no credentials are found does a refusal (401, 403)
stop the run here: Beam would connect anonymously and be refused on every call.
"""
from __future__ import annotations

import os
import re
from typing import Any

from parity.errors import InputError
from parity.storage import limits

TIMEOUT_OPTIONS = {"gcs_connect_timeout": 5.0, "gcs_read_timeout": 8.0, "gcs_max_attempts": 2}
_DEFAULT_ENDPOINT = "https://storage.googleapis.com"
_probed: dict[tuple, InputError | None] = {}  # the outcome per bucket, options and endpoint: a store is asked once


def endpoint() -> str:
    """The endpoint Google's storage client uses: an emulator's (`STORAGE_EMULATOR_HOST`, the scheme optional),
    the `API_ENDPOINT_OVERRIDE`, or Google's."""
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        return emulator if "://" in emulator else f"http://{emulator}"
    return os.environ.get("API_ENDPOINT_OVERRIDE") or _DEFAULT_ENDPOINT


def probe(url: str, options: Any) -> None:
    """Checks once per bucket, options and endpoint, within the limits, that the store of `url` answers.

    Raises:
        InputError: no answer within the limits (no route, a closed port, a store that never answers), or a
            refusal when no credentials were found; the message names the URL, the endpoint and what to check.
    """
    bucket = url.split("://", 1)[1].split("/", 1)[0]
    where = endpoint()
    key = (bucket, tuple(options or ()), where)
    if key not in _probed:
        try:
            _ask(url, bucket, where, limits.option_limits(options, TIMEOUT_OPTIONS))
            _probed[key] = None
        except InputError as exc:
            _probed[key] = exc
    if _probed[key] is not None:
        raise _probed[key]


def _ask(url: str, bucket: str, where: str, bounds: dict[str, float]) -> None:
    import requests

    within = limits.describe(bounds, "gcs")
    credentials = _credentials_found(where)
    answer = None
    failure: Exception | None = None
    for _ in range(max(1, int(bounds["gcs_max_attempts"]))):
        try:
            answer = requests.get(f"{where.rstrip('/')}/storage/v1/b/{bucket}", params={"fields": "name"},
                                  timeout=(bounds["gcs_connect_timeout"], bounds["gcs_read_timeout"]))
            break
        except requests.RequestException as exc:
            failure = exc
    if answer is None:
        raise InputError(f"{url}: the object store at {where} did not answer within {within} ({_short(failure)}); "
                         f"check the network, the endpoint (STORAGE_EMULATOR_HOST for an emulator) and that the "
                         f"store runs; the limits are -- --gcs_connect_timeout, --gcs_read_timeout and "
                         f"--gcs_max_attempts")
    if answer.status_code in (401, 403) and not credentials:
        raise InputError(f"{url}: no Google credentials were found and {where} refused bucket {bucket} to an "
                         f"anonymous caller (HTTP {answer.status_code}); set GOOGLE_APPLICATION_CREDENTIALS to a "
                         f"key file, run `gcloud auth application-default login`, or give the workers a service "
                         f"account (-- --impersonate_service_account=...)")


def _credentials_found(where: str) -> bool:
    """Whether Google's credential lookup finds any, asked once without Beam's retries. An emulator needs none."""
    if where != _DEFAULT_ENDPOINT and os.environ.get("STORAGE_EMULATOR_HOST"):
        return True
    try:
        import google.auth
        import google.auth.exceptions
    except ImportError:  # no [gcp] extra: Beam says gs:// has no file system
        return False
    try:
        google.auth.default()
    except google.auth.exceptions.GoogleAuthError:
        return False
    return True


def _short(exc: Exception | None) -> str:
    """The failure in one line: requests wraps urllib3's retry error, whose `reason` is what happened (a name
    that does not resolve, a refused connection, a read timeout), prefixed by a connection object's repr."""
    if exc is None:
        return "no attempt made"
    reason = getattr(exc.args[0], "reason", None) if exc.args else None
    reason = reason if isinstance(reason, BaseException) else exc
    text = re.sub(r"<[^>]*>:?\s*", "", " ".join(str(reason).split()))
    return f"{type(reason).__name__}: {text}"
