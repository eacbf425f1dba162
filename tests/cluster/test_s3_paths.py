"""Paths through Beam's file systems (parity.storage.context) on the test bed's S3 server: Beam's real S3 client,
with Beam's own options (`--s3_endpoint_url`, ...), no code of parity's for the store. Only the S3 server is
started here (no Flink): the replay runs on the DirectRunner."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal

import pytest
import yaml

import parity
from parity.storage import urls
from tests.cluster.testbed import JOB_TIMEOUT  # seconds one of a check's jobs may take

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = os.path.join(ROOT, "fixtures", "scenarios", "window_late_dropped")
TRIPS = os.path.join(ROOT, "fixtures", "scenarios", "_data", "trips.jsonl")


@pytest.fixture
def s3(s3_server):
    return s3_server


def test_the_path_layer_reads_writes_lists_and_deletes_objects(s3):
    base = "s3://parity/urls"
    s3.storage.write_bytes(f"{base}/a/one.jsonl", b"1\n")
    s3.storage.write_bytes(f"{base}/a/two.jsonl", b"2\n")
    s3.storage.write_bytes(f"{base}/a/deeper/three.jsonl", b"3\n")
    s3.storage.write_bytes(f"{base}/a/.hidden", b"h")
    assert s3.storage.read_bytes(f"{base}/a/one.jsonl") == b"1\n"
    assert s3.storage.isfile(f"{base}/a/one.jsonl") and not s3.storage.isfile(f"{base}/a")
    assert s3.storage.exists(f"{base}/a") and not s3.storage.exists(f"{base}/none")
    assert s3.storage.list_folder(f"{base}/a") == [f"{base}/a/one.jsonl", f"{base}/a/two.jsonl"]
    assert s3.storage.match(f"{base}/a/*.jsonl") == [f"{base}/a/one.jsonl", f"{base}/a/two.jsonl"]
    assert s3.storage.match(f"{base}/**/*.jsonl") == [f"{base}/a/deeper/three.jsonl", f"{base}/a/one.jsonl",
                                                f"{base}/a/two.jsonl"]
    s3.storage.write_bytes(f"{base}/a/one.jsonl", b"again\n")  # a retried writer replaces
    assert s3.storage.read_bytes(f"{base}/a/one.jsonl") == b"again\n"
    s3.storage.delete([f"{base}/a/one.jsonl", f"{base}/a/gone.jsonl"])
    assert not s3.storage.isfile(f"{base}/a/one.jsonl")
    with pytest.raises(OSError):
        s3.storage.read_bytes(f"{base}/a/one.jsonl")
    assert urls.join(base, "x", "y.json") == f"{base}/x/y.json"
    assert urls.join("/tmp/a", "s3://b/k") == "s3://b/k"
    assert urls.join("/tmp/a", "../b") == "/tmp/b"


def scenario_config(folder, capture_path: str, scenario: str = SCENARIO) -> str:
    """A scenario's folder (window_late_dropped's unless named) copied into `folder`, its capture at
    `capture_path`."""
    shutil.copytree(scenario, folder)
    path = os.path.join(folder, "parity.yaml")
    with open(path, encoding="utf-8") as handle:
        doc = yaml.safe_load(handle)
    doc["capture"]["path"] = capture_path
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(doc, handle, sort_keys=False)
    return path


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip"])
def test_a_capture_on_s3_gives_the_report_of_the_same_records_on_disk(s3, tmp_path, monkeypatch, gzipped):
    import gzip

    monkeypatch.setenv("PARITY_PROGRESS", "off")
    data = open(TRIPS, "rb").read()
    half = data.index(b"\n", len(data) // 2) + 1
    name = "trips.jsonl.gz" if gzipped else "trips.jsonl"
    for index, part in enumerate((data[:half], data[half:])):  # two objects, named by a glob
        s3.storage.write_bytes(f"s3://parity/capture-{name}/part-{index}-{name}", gzip.compress(part) if gzipped else part)
    local = tmp_path / "local"
    local.mkdir()
    (local / "trips.jsonl").write_bytes(data)
    on_disk = scenario_config(tmp_path / "disk", str(local / "trips.jsonl"))
    on_s3 = scenario_config(tmp_path / "s3", f"s3://parity/capture-{name}/part-*")

    parity.check(on_disk, out_dir=str(tmp_path / "out-disk"))
    parity.check(on_s3, out_dir=str(tmp_path / "out-s3"), pipeline_options=s3.options)
    disk, remote = ((tmp_path / run / "report.json").read_bytes() for run in ("out-disk", "out-s3"))
    assert remote == disk


CHECK_TIMEOUT = int(os.environ.get("PARITY_TESTBED_CHECK_TIMEOUT", "600"))  # seconds one check may take


@contextlib.contextmanager
def _deadline(seconds: int):
    """Fails a check that hangs (a job that never ends) instead of holding CI until its own limit."""
    def expired(signum, frame):
        raise TimeoutError(f"the check on the test bed did not finish within {seconds} s "
                           f"(PARITY_TESTBED_CHECK_TIMEOUT; PARITY_TESTBED_KEEP=1 keeps the logs)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _check_folders(testbed, name: str) -> tuple[str, str]:
    """The config of window_late_dropped with its capture on the test bed's S3, in a folder only the client can
    enter (mode 700), and the check's out URL. No folder is shared: the workers write the sets' parts under the
    out URL, the client reads them back from there (`_forget` removes the config's folder)."""
    import tempfile

    url = "s3://parity/cluster-capture/trips.jsonl"
    if not testbed.s3.storage.isfile(url):
        testbed.s3.storage.write_bytes(url, open(TRIPS, "rb").read())
    client = tempfile.mkdtemp(prefix="parity-cluster-client-")  # the config: the client's alone (mode 700)
    return scenario_config(os.path.join(client, "config"), url), testbed.url("cluster-out", name)


def _forget(config: str) -> None:
    shutil.rmtree(os.path.dirname(os.path.dirname(config)), ignore_errors=True)


def _report(testbed, out: str) -> bytes:
    return testbed.s3.storage.read_bytes(f"{out}/report.json")


@contextlib.contextmanager
def _job_timeout(seconds: float, rest: str):
    """parity's own bound on each Flink job (PARITY_FLINK_JOB_TIMEOUT), for the in-process check, and where parity
    reaches Flink's REST API (PARITY_FLINK_REST: the test bed's job server is not parity's own, so parity cannot
    know it otherwise) to cancel a job that ends early and to read progress."""
    names = {"PARITY_FLINK_JOB_TIMEOUT": f"{seconds:g}", "PARITY_FLINK_REST": rest}
    previous = {name: os.environ.get(name) for name in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cluster_check(testbed, name: str, while_running=None, job_timeout: float = JOB_TIMEOUT, pool=None) -> bytes:
    """`parity check` of window_late_dropped on the test bed: the capture and the out folder on S3, the Python work
    in the EXTERNAL worker pool (another user, who cannot see the client's folders) at parallelism 2; returns
    report.json.

    `while_running(out)` runs in a thread beside the check (a fault to inject), given the out location; what it
    raises is raised here. Each job ends within `job_timeout` s (parity's PARITY_FLINK_JOB_TIMEOUT: the job is
    cancelled and the check fails), the whole check within PARITY_TESTBED_CHECK_TIMEOUT; a check that fails
    leaves no job running on the test bed. `pool`: the worker pool (default: the test bed's)."""
    import threading

    config, out = _check_folders(testbed, name)
    errors: list[BaseException] = []

    def beside() -> None:
        try:
            while_running(out)
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread below
            errors.append(exc)

    thread = threading.Thread(target=beside, daemon=True) if while_running else None
    try:
        if thread:
            thread.start()
        with _deadline(CHECK_TIMEOUT), _job_timeout(job_timeout, testbed.flink.rest):
            parity.check(config, out_dir=out, runner="FlinkRunner", pipeline_options=testbed.options(pool=pool))
    except BaseException:
        testbed.flink.cancel_running()
        raise
    finally:
        _forget(config)
        if thread:
            thread.join(timeout=CHECK_TIMEOUT)
    if errors:
        raise errors[0]
    return _report(testbed, out)


def cluster_checks_at_once(testbed, names: list[str], job_timeout: float = JOB_TIMEOUT) -> list[bytes]:
    """As many `parity check`s as `names` (two at most), each its own process (`python -m parity check ...
    --runner FlinkRunner`) with its own out location and its own worker pool (`TestBed.other_pool` says why), all
    submitted to the test bed at once; their report.json files."""
    import subprocess
    import sys
    import time

    assert len(names) <= 2, "the test bed has two worker pools"
    runs = [_check_folders(testbed, name) for name in names]
    pools = [testbed.pool, testbed.other_pool]
    env = dict(os.environ, PARITY_PROGRESS="off", PYTHONPATH=ROOT, PARITY_FLINK_JOB_TIMEOUT=f"{job_timeout:g}",
               PARITY_FLINK_REST=testbed.flink.rest)
    processes = [subprocess.Popen([sys.executable, "-m", "parity", "check", config, "--out", out, "--runner",
                                   "FlinkRunner", "--", *testbed.options(pool=pool)], env=env, cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                 for (config, out), pool in zip(runs, pools)]
    deadline = time.monotonic() + CHECK_TIMEOUT
    said = []
    try:
        for process in processes:
            output, _ = process.communicate(timeout=max(deadline - time.monotonic(), 1))
            said.append(output.decode(errors="replace"))
    except subprocess.TimeoutExpired:
        for process in processes:
            process.kill()
        testbed.flink.cancel_running()
        pytest.fail(f"{len(names)} checks at once did not finish within {CHECK_TIMEOUT} s "
                    f"(PARITY_TESTBED_CHECK_TIMEOUT; PARITY_TESTBED_KEEP=1 keeps the logs)")
    finally:
        for config, _ in runs:
            _forget(config)
    for name, process, output in zip(names, processes, said):
        # 1: the scenario's planted divergence was found; 2 or more: the check failed
        assert process.returncode in (0, 1), f"check {name!r} exited {process.returncode}:\n{output[-3000:]}"
    return [_report(testbed, out) for _, out in runs]


@pytest.fixture(scope="session")
def direct_report(tmp_path_factory) -> bytes:
    """The DirectRunner's report.json for window_late_dropped, the capture on the client's own disk."""
    folder = tmp_path_factory.mktemp("direct")
    local = folder / "client"
    local.mkdir(mode=0o700)
    (local / "trips.jsonl").write_bytes(open(TRIPS, "rb").read())
    parity.check(scenario_config(folder / "config", str(local / "trips.jsonl")), out_dir=str(folder / "out"))
    return (folder / "out" / "report.json").read_bytes()


def test_on_the_cluster_the_workers_read_an_s3_capture_into_an_s3_out_and_the_report_is_the_direct_runners(
        testbed, direct_report, monkeypatch):
    """The EXTERNAL worker pool (another user) reads the capture from S3 and writes the sets' parts, spills and
    quarantine parts under the S3 out URL with the run's S3 options, which a pool's harness does not get from
    Beam: parity hands them over."""
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    assert cluster_check(testbed, "undisturbed") == direct_report
