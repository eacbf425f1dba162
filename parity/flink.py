"""FlinkRunner defaults so that `--runner FlinkRunner` alone runs on an embedded Flink with the bundled jar."""
from __future__ import annotations

import glob
import os
from typing import Sequence

from parity.errors import RunnerError

FLINK_VERSION = "1.19"  # the Flink minor of the job server scripts/fetch_flink_jar.sh assembles
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_JARS = os.path.join(_REPO_ROOT, "vendor", "jars")


def jar_properties() -> dict[str, str]:
    """vendor/jars/flink-job-server.properties: which jar, which Flink minor, which Beam versions."""
    path = os.path.join(_JARS, "flink-job-server.properties")
    props: dict[str, str] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if "=" in line and not line.lstrip().startswith("#"):
                    key, value = line.split("=", 1)
                    props[key.strip()] = value.strip()
    return props


def flink_version() -> str:
    return jar_properties().get("flink_version", FLINK_VERSION)


def job_server_jar() -> str:
    """The Flink job-server jar fetched at install time (vendor/jars or PARITY_FLINK_JAR)."""
    explicit = os.environ.get("PARITY_FLINK_JAR")
    if explicit:
        if not os.path.isfile(explicit):
            raise RunnerError(f"PARITY_FLINK_JAR={explicit} does not exist; run scripts/fetch_flink_jar.sh")
        return explicit
    named = jar_properties().get("jar")
    if named and os.path.isfile(os.path.join(_JARS, named)):
        return os.path.join(_JARS, named)
    found = sorted(glob.glob(os.path.join(_JARS, "beam-runners-flink-*-job-server-*.jar")))
    if not found:
        raise RunnerError("no Flink job-server jar found under vendor/jars; run scripts/fetch_flink_jar.sh "
                          "(or make setup) to fetch it through Maven, or set PARITY_FLINK_JAR")
    return found[-1]


def _has(args: Sequence[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def flink_defaults(args: Sequence[str]) -> list[str]:
    """Adds `[local]`, the jar's Flink version, LOOPBACK and the bundled jar unless given."""
    args = list(args)
    if not _has(args, "--job_endpoint"):
        if not _has(args, "--flink_master"):
            args.append("--flink_master=[local]")
        if not _has(args, "--flink_job_server_jar"):
            args.append(f"--flink_job_server_jar={job_server_jar()}")
    if not _has(args, "--flink_version"):
        args.append(f"--flink_version={flink_version()}")
    if not _has(args, "--environment_type"):
        args.append("--environment_type=LOOPBACK")
    if not _has(args, "--parallelism"):
        args.append("--parallelism=1")
    return args
