"""`parity init` on a capture in S3 (the test bed's S3 server alone, no Flink): the capture is read through the
run's storage context, with Beam's S3 options given after `--`, and the config written is the one written for a
local copy of the same file, the capture's path aside."""
from __future__ import annotations

import pytest
import yaml

from parity.cli import main
from tests.test_init import EXPECTED_SCHEMAS, WRITERS, _trips

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("name", ["trips.parquet", "trips.csv"])
def test_init_on_a_capture_in_s3_writes_the_config_it_writes_for_a_local_copy(name, s3_server, tmp_path,
                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    WRITERS[name](str(tmp_path / name), _trips())
    url = f"s3://parity/init/{name}"
    s3_server.storage.write_bytes(url, (tmp_path / name).read_bytes())
    assert main(["init", "--capture", name, "--key", "trip_id", "--out", "local.yaml"]) == 0
    assert main(["init", "--capture", url, "--key", "trip_id", "--out", "s3.yaml", "--",
                 *s3_server.options]) == 0
    local, remote = ((tmp_path / out).read_text(encoding="utf-8") for out in ("local.yaml", "s3.yaml"))
    config = yaml.safe_load(remote)
    assert config["capture"]["path"] == url and config["capture"]["schema"] == EXPECTED_SCHEMAS[name]
    config["capture"]["path"] = name
    assert config == yaml.safe_load(local)
    assert _after_schema(remote) == _after_schema(local)  # the fields' notes and every commented line after them


def _after_schema(text: str) -> str:
    return text.split("\n  schema:", 1)[1].split("\n", 1)[1]
