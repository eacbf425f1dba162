"""Paths through Beam's FileSystems (parity.storage.urls) on the test bed's S3 server: Beam's real S3 client,
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

pytestmark = pytest.mark.cluster

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = os.path.join(ROOT, "fixtures", "scenarios", "window_late_dropped")
TRIPS = os.path.join(ROOT, "fixtures", "scenarios", "_data", "trips.jsonl")


@pytest.fixture
def s3(s3_server):
    urls.configure(s3_server.options)
    return s3_server


def test_the_path_layer_reads_writes_lists_and_deletes_objects(s3):
    base = "s3://parity/urls"
    urls.write_bytes(f"{base}/a/one.jsonl", b"1\n")
    urls.write_bytes(f"{base}/a/two.jsonl", b"2\n")
    urls.write_bytes(f"{base}/a/deeper/three.jsonl", b"3\n")
    urls.write_bytes(f"{base}/a/.hidden", b"h")
    assert urls.read_bytes(f"{base}/a/one.jsonl") == b"1\n"
    assert urls.isfile(f"{base}/a/one.jsonl") and not urls.isfile(f"{base}/a")
    assert urls.exists(f"{base}/a") and not urls.exists(f"{base}/none")
    assert urls.list_folder(f"{base}/a") == [f"{base}/a/one.jsonl", f"{base}/a/two.jsonl"]
    assert urls.match(f"{base}/a/*.jsonl") == [f"{base}/a/one.jsonl", f"{base}/a/two.jsonl"]
    assert urls.match(f"{base}/**/*.jsonl") == [f"{base}/a/deeper/three.jsonl", f"{base}/a/one.jsonl",
                                                f"{base}/a/two.jsonl"]
    urls.write_bytes(f"{base}/a/one.jsonl", b"again\n")  # a retried writer replaces
    assert urls.read_bytes(f"{base}/a/one.jsonl") == b"again\n"
    urls.delete([f"{base}/a/one.jsonl", f"{base}/a/gone.jsonl"])
    assert not urls.isfile(f"{base}/a/one.jsonl")
    with pytest.raises(OSError):
        urls.read_bytes(f"{base}/a/one.jsonl")
    assert urls.join(base, "x", "y.json") == f"{base}/x/y.json"
    assert urls.join("/tmp/a", "s3://b/k") == "s3://b/k"
    assert urls.join("/tmp/a", "../b") == "/tmp/b"


def _config(folder, capture_path: str) -> str:
    shutil.copytree(SCENARIO, folder)
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
        urls.write_bytes(f"s3://parity/capture-{name}/part-{index}-{name}", gzip.compress(part) if gzipped else part)
    local = tmp_path / "local"
    local.mkdir()
    (local / "trips.jsonl").write_bytes(data)
    on_disk = _config(tmp_path / "disk", str(local / "trips.jsonl"))
    on_s3 = _config(tmp_path / "s3", f"s3://parity/capture-{name}/part-*")

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


def cluster_check(testbed, name: str) -> bytes:
    """`parity check` of window_late_dropped on the test bed: the capture and the out folder on S3, the Python work
    in the EXTERNAL worker pool (another user, who cannot see the client's folders) at parallelism 2; returns
    report.json. No folder is shared: the workers write the sets' parts under the out URL, the client reads them
    back from there."""
    import tempfile

    urls.configure(testbed.s3.options)
    url = "s3://parity/cluster-capture/trips.jsonl"
    if not urls.isfile(url):
        urls.write_bytes(url, open(TRIPS, "rb").read())
    client = tempfile.mkdtemp(prefix="parity-cluster-client-")  # the config: the client's alone (mode 700)
    out = testbed.url("cluster-out", name)
    try:
        config = _config(os.path.join(client, "config"), url)
        with _deadline(CHECK_TIMEOUT):
            parity.check(config, out_dir=out, runner="FlinkRunner", pipeline_options=testbed.options())
    finally:
        shutil.rmtree(client, ignore_errors=True)
    return urls.read_bytes(f"{out}/report.json")


@pytest.fixture(scope="session")
def direct_report(tmp_path_factory) -> bytes:
    """The DirectRunner's report.json for window_late_dropped, the capture on the client's own disk."""
    folder = tmp_path_factory.mktemp("direct")
    local = folder / "client"
    local.mkdir(mode=0o700)
    (local / "trips.jsonl").write_bytes(open(TRIPS, "rb").read())
    parity.check(_config(folder / "config", str(local / "trips.jsonl")), out_dir=str(folder / "out"))
    return (folder / "out" / "report.json").read_bytes()


def test_on_the_cluster_the_workers_read_an_s3_capture_into_an_s3_out_and_the_report_is_the_direct_runners(
        testbed, direct_report, monkeypatch):
    """The EXTERNAL worker pool (another user) reads the capture from S3 and writes the sets' parts, spills and
    quarantine parts under the S3 out URL with the run's S3 options, which a pool's harness does not get from
    Beam: parity hands them over."""
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    assert cluster_check(testbed, "undisturbed") == direct_report
