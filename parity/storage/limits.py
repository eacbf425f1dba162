"""parity's own time limits for object stores, given as pipeline options after `--` (`--s3_read_timeout=20`,
`--gcs_connect_timeout=3`): read by parity, ignored by Beam (which drops options it does not know).

Beam's clients wait minutes on a store that does not answer (botocore's 60 s per read, five times, inside
Beam's own retries; google-api-core's 120 s retry deadline on every GCS call, after four credential
lookups with backoff). parity bounds the one request it makes of each bucket before Beam's clients start, and
the S3 clients Beam builds.
"""
from __future__ import annotations

from typing import Any, Mapping


def option_limits(options: Any, defaults: Mapping[str, float]) -> dict[str, float]:
    """The limits named in `defaults` as given among pipeline options (`--s3_read_timeout=20`), else the
    defaults. A value that does not parse keeps the default, as Beam ignores what it cannot parse."""
    limits = dict(defaults)
    for option in options or ():
        name, _, value = str(option).lstrip("-").partition("=")
        if name in limits and value:
            try:
                limits[name] = type(defaults[name])(value)
            except ValueError:
                pass
    return limits


def describe(limits: Mapping[str, float], prefix: str) -> str:
    """`2 attempt(s), 5 s to connect and 8 s to answer each`: how long a request was given."""
    return (f"{limits[prefix + '_max_attempts']:g} attempt(s), {limits[prefix + '_connect_timeout']:g} s to connect "
            f"and {limits[prefix + '_read_timeout']:g} s to answer each")
