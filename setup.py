"""Packaging for parity. `make setup` (scripts/setup.sh) installs it into the project's .venv."""
from pathlib import Path

from setuptools import Extension, find_packages, setup

# Dependencies are ranges: the taps (parity.beam) run inside the user's own Beam job, and a `tft` side imports
# the user's tensorflow-transform, so parity installs next to the versions a team's pipelines already use. The
# lower bounds are the oldest combination CI tests (constraints-oldest.txt: apache-beam 2.59, tensorflow-transform
# 1.16 with tensorflow 2.16, tfx-bsl 1.16, pyarrow 10); `make setup` installs the newest tested pins
# (constraints.txt). No Flink job-server jar of any Beam version >= 2.53 is served by the Maven Central we reach;
# scripts/fetch_flink_jar.sh assembles one from parts (docs/flink-jar.md).
_README = Path(__file__).resolve().parent / "README.md"

# The C canonical encoder (docs/canonical-encoding.md, "Implementations"). Optional: without a C compiler the
# install still works and parity.encoding.canonical uses its pure Python encoder, which gives the same bytes, slower.
_CANONICAL_EXT = Extension(
    "parity.encoding._canonical",
    sources=["parity/encoding/_canonical.c"],
    depends=["vendor/xxhash/xxhash.h"],
    include_dirs=["vendor/xxhash"],
    extra_compile_args=["-O3"],
    optional=True,
)

setup(
    name="parity",
    version="0.1.0",
    description="Per-stage parity checks between an offline and a production Beam / tensorflow-transform pipeline",
    long_description=_README.read_text(encoding="utf-8") if _README.exists() else "",
    long_description_content_type="text/markdown",
    # templates/ holds data only (no __init__.py); listed so setuptools ships it as package data.
    packages=find_packages(include=["parity", "parity.*"]) + ["parity.report.templates"],
    ext_modules=[_CANONICAL_EXT],
    license_files=["vendor/xxhash/LICENSE"],  # the extension compiles xxHash in (BSD-2-Clause)
    include_package_data=True,
    package_data={"parity.report.templates": ["*.j2"]},  # the HTML report's Jinja2 templates
    python_requires=">=3.10",
    install_requires=[
        "apache-beam[gcp,aws]>=2.59,<3",  # Beam's FileSystems for gs:// and s3:// (boto3)
        "tensorflow-transform>=1.16,<2",
        "tensorflow>=2.16,<3",  # tensorflow-transform pins its own minor
        "tfx-bsl>=1.16,<2",
        "tensorflow-metadata>=1.16,<2",
        "pyarrow>=10",
        "xxhash>=3",
        "PyYAML>=6",
        "fastavro",
        "orjson>=3.9",  # the JSON Lines reader's parser (json decides what orjson refuses)
        "google-crc32c",  # TFRecord framing checksums
        "jinja2>=3.0",  # the HTML report's templates (autoescaping on)
    ],
    extras_require={
        # moto[server]: the cluster test bed's S3 server (tests/cluster)
        "test": ["pytest", "pytest-xdist", "hypothesis", "xmlschema", "build", "wheel", "moto[server]>=5"],
    },
    entry_points={"console_scripts": ["parity=parity.cli:main"]},
)
