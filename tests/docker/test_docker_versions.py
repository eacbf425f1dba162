"""docker/ takes its versions from the project's pins: Beam from constraints.txt, the Flink minor from the job server
(vendor/jars/flink-job-server.properties, else scripts/fetch_flink_jar.sh), the Flink patch release from
scripts/flink_cluster.sh, and a Python minor that setup.py accepts."""
from __future__ import annotations

import os
import re

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def _one(pattern: str, text: str, what: str) -> str:
    found = re.findall(pattern, text, flags=re.MULTILINE)
    assert len(found) == 1, f"{what}: expected one match of {pattern!r}, found {found}"
    return found[0]


BEAM = _one(r'^apache-beam==([0-9.]+)$', _read("constraints.txt"), "constraints.txt")
FLINK_MINOR = _one(r'^ASSEMBLE_FLINK_MINOR="([0-9.]+)"', _read("scripts", "fetch_flink_jar.sh"),
                   "scripts/fetch_flink_jar.sh")
MOTO = _one(r'^moto==([0-9.]+)$', _read("constraints.txt"), "constraints.txt")
FLINK_PATCH = _one(r'^VERSION="\$\{PARITY_FLINK_CLUSTER_VERSION:-([0-9.]+)\}"', _read("scripts", "flink_cluster.sh"),
                   "scripts/flink_cluster.sh")
COMPOSE = yaml.safe_load(_read("docker", "compose.yaml"))
DOCKERFILE = _read("docker", "Dockerfile")


def test_the_pins_agree_with_each_other():
    assert FLINK_PATCH.startswith(FLINK_MINOR + "."), (FLINK_PATCH, FLINK_MINOR)
    properties = os.path.join(ROOT, "vendor", "jars", "flink-job-server.properties")
    if os.path.exists(properties):  # written by make setup
        with open(properties, encoding="utf-8") as handle:
            props = dict(line.strip().split("=", 1) for line in handle if "=" in line and not line.startswith("#"))
        assert props["flink_version"] == FLINK_MINOR
        assert props["beam_python_version"] == BEAM


def test_the_worker_image_is_the_beam_sdk_image_of_the_pinned_version():
    assert _one(r"^ARG BEAM_VERSION=(\S+)$", DOCKERFILE, "Dockerfile") == BEAM
    python = _one(r"^ARG PYTHON_VERSION=(\S+)$", DOCKERFILE, "Dockerfile")
    assert _one(r"^FROM (\S+)$", DOCKERFILE, "Dockerfile") == \
        "apache/beam_python${PYTHON_VERSION}_sdk:${BEAM_VERSION}"
    minimum = _one(r'python_requires=">=([0-9.]+)"', _read("setup.py"), "setup.py")
    assert tuple(map(int, python.split("."))) >= tuple(map(int, minimum.split("."))), (python, minimum)
    assert "pip install" in DOCKERFILE and "COPY parity/" in DOCKERFILE


def test_the_compose_file_uses_the_pinned_beam_flink_and_moto_versions():
    services = COMPOSE["services"]
    assert set(services) == {"s3", "jobmanager", "taskmanager", "job-server", "worker-pool"}
    for name in ("jobmanager", "taskmanager"):
        assert services[name]["image"] == f"flink:{FLINK_PATCH}-java17", services[name]["image"]
    assert services["job-server"]["image"] == f"apache/beam_flink{FLINK_MINOR}_job_server:{BEAM}"
    assert "--flink-master=localhost:8081" in services["job-server"]["command"]
    assert services["s3"]["image"] == f"motoserver/moto:{MOTO}"  # the test bed's S3 server
    worker = services["worker-pool"]
    assert worker["build"]["dockerfile"] == "docker/Dockerfile"
    assert worker["build"]["args"]["BEAM_VERSION"] == BEAM
    assert worker["build"]["args"]["PYTHON_VERSION"] == _one(r"^ARG PYTHON_VERSION=(\S+)$", DOCKERFILE, "Dockerfile")
    assert worker["image"].endswith(f":{BEAM}")
    assert worker["entrypoint"][:3] == ["python", "-m", "parity.replay.worker_pool"]  # not Beam's: docs/flink.md
    assert "--service_port=50000" in worker["entrypoint"]


def test_the_compose_file_arranges_the_worker_pool_as_the_test_bed_does():
    """tests/cluster/testbed.py: two TaskManagers with a fixed-delay restart strategy, one EXTERNAL pool as a
    service of its own, run as another user with its own HOME and TMPDIR, every part on the host's addresses."""
    services = COMPOSE["services"]
    assert {service["network_mode"] for service in services.values()} == {"host"}
    assert services["taskmanager"]["deploy"]["replicas"] == 2
    config = yaml.safe_load(services["jobmanager"]["environment"]["FLINK_PROPERTIES"])
    assert config["restart-strategy.type"] == "fixed-delay" and config["taskmanager.numberOfTaskSlots"] == 2
    assert config["jobmanager.execution.failover-strategy"] == "full"  # as scripts/flink_cluster.sh: docs/flink.md
    assert services["taskmanager"]["environment"]["FLINK_PROPERTIES"] == \
        services["jobmanager"]["environment"]["FLINK_PROPERTIES"]
    worker = services["worker-pool"]
    assert worker["user"].split(":")[0] not in ("0", "root")
    home, tmp = worker["environment"]["HOME"], worker["environment"]["TMPDIR"]
    assert {mount.split(":")[0] for mount in worker["tmpfs"]} == {home, tmp}
    assert any(volume.endswith(":ro") for volume in worker["volumes"])  # the code: read-only
