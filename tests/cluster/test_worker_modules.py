"""The config's modules on the workers (issue 45, item 3; docs/flink.md, "The config's modules on the workers"):
the recipe, a folder of the modules on the worker pool's PYTHONPATH, gives the DirectRunner's report; a pool
without them stops the check with exit 2 naming the worker, not the client's config folder.

The config is transform_feature_passthrough's (a `python` transform from the module
`sc_transform_feature_passthrough_fns`), in a folder only the client can enter (mode 700), its capture on S3.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile

import pytest

import parity
from parity.errors import UserCodeError
from tests.cluster import testbed as bed
from tests.cluster.test_s3_paths import CHECK_TIMEOUT, ROOT, TRIPS, _deadline, _job_timeout, _report, scenario_config

pytestmark = pytest.mark.cluster

SCENARIO = os.path.join(ROOT, "fixtures", "scenarios", "transform_feature_passthrough")
MODULE = "sc_transform_feature_passthrough_fns"


@pytest.fixture(scope="module")
def modules_pool(testbed_dir, testbed):
    """A worker pool with a copy of the config's module in a folder on its PYTHONPATH (the recipe)."""
    modules = os.path.join(testbed_dir, "modules")
    os.makedirs(modules, exist_ok=True)
    os.chmod(modules, 0o755)
    target = os.path.join(modules, f"{MODULE}.py")
    shutil.copy(os.path.join(SCENARIO, f"{MODULE}.py"), target)
    os.chmod(target, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
    pool = bed.start_worker_pool(os.path.join(testbed_dir, "worker-modules"), pythonpath=(modules,))
    yield pool
    pool.stop()


@pytest.fixture(scope="module")
def direct_passthrough_report(tmp_path_factory) -> bytes:
    folder = tmp_path_factory.mktemp("passthrough-direct")
    parity.check(scenario_config(str(folder / "config"), TRIPS, SCENARIO), out_dir=str(folder / "out"))
    return (folder / "out" / "report.json").read_bytes()


def _check(testbed, pool, name: str, job_timeout: float = 300) -> bytes:
    capture = "s3://parity/cluster-capture/trips.jsonl"
    if not testbed.s3.storage.isfile(capture):
        testbed.s3.storage.write_bytes(capture, open(TRIPS, "rb").read())
    client = tempfile.mkdtemp(prefix="parity-cluster-client-")  # mode 700: the workers cannot read the module here
    out = testbed.url("cluster-out", name)
    try:
        with _deadline(CHECK_TIMEOUT), _job_timeout(job_timeout, testbed.flink.rest):
            parity.check(scenario_config(os.path.join(client, "config"), capture, SCENARIO), out_dir=out, runner="FlinkRunner",
                         pipeline_options=testbed.options(pool=pool))
    except BaseException:
        testbed.flink.cancel_running()
        raise
    finally:
        shutil.rmtree(client, ignore_errors=True)
    return _report(testbed, out)


def test_the_configs_module_in_a_folder_on_the_pools_pythonpath_gives_the_direct_report(
        testbed, modules_pool, direct_passthrough_report, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    assert _check(testbed, modules_pool, "modules-on-pythonpath") == direct_passthrough_report


def test_a_module_the_workers_lack_stops_the_check_naming_the_worker_and_the_fix(testbed, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    failures_before = testbed.flink.failures()
    with pytest.raises(UserCodeError) as caught:
        _check(testbed, testbed.pool, "modules-missing")
    # the first failed attempt stops the job (parity.replay.watch.FINAL): the test bed's restart strategy would
    # have made 10 more attempts of each side's job, each failing the same way
    failed = testbed.flink.failures() - failures_before
    assert 1 <= failed <= 4, f"{failed} failed attempts: the check waited for Flink's restarts"
    said = str(caught.value)
    assert f"cannot import '{MODULE}:offline_features' on an SDK worker" in said or \
        f"cannot import '{MODULE}:production_features' on an SDK worker" in said, said
    assert f"user {testbed.pool.user}," in said
    assert "is not readable by this worker's user" in said  # the client's folder, mode 700, on the same host
    assert f"No module named '{MODULE}'" in said
    assert "put their folder on the worker pool's PYTHONPATH" in said
