"""The environment a replay ran in: library versions, settings that change results, CPU numerics flags.

Nothing here names the runner, a host or a path, so report.json stays identical across runners; the runner
is recorded in the fingerprint set's manifest instead.
"""
from __future__ import annotations

import os
import platform
from importlib import metadata

PACKAGES = ("parity", "apache-beam", "tensorflow", "tensorflow-transform", "tfx-bsl", "pyarrow", "numpy",
            "protobuf")
VERSION_LINE = ("apache-beam", "tensorflow-transform", "tensorflow", "pyarrow")
VARIABLES = ("PYTHONHASHSEED", "TZ", "LC_ALL", "TF_ENABLE_ONEDNN_OPTS")
CPU_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512_vnni", "amx_tile")


def _version(package: str) -> str | None:
    if package == "parity":  # this package's own version, also when it runs from a source tree
        from parity.version import __version__

        return __version__
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def version_text() -> str:
    """`parity --version`: parity's version and those of the libraries a replay runs on (without importing
    them: their installed metadata)."""
    others = ", ".join(f"{name} {_version(name) or 'not installed'}" for name in VERSION_LINE)
    return f"parity {_version('parity')} ({others}; python {platform.python_version()})"


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    present = set(line.split(":", 1)[1].split())
                    return " ".join(f for f in CPU_FLAGS if f in present)
    except OSError:
        pass
    return ""


def environment_manifest() -> dict[str, str | None]:
    """Versions, variables and CPU flags of this process, as strings (None when absent)."""
    manifest: dict[str, str | None] = {"python": platform.python_version()}
    for package in PACKAGES:
        manifest[package] = _version(package)
    for variable in VARIABLES:
        manifest[variable] = os.environ.get(variable)
    manifest["cpu_flags"] = _cpu_flags()
    return manifest
