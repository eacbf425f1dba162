"""parity's own S3 access (parity/storage/s3_clients.py `S3Store`, one per storage context) reuses one Beam client
per thread, on the test bed's S3 server through Beam's real S3IO: the objects read back are the ones written, two
objects read in turn from one thread each come back whole, and another thread or another context gets a Beam client
of its own; the threads' Beam clients share the process's boto3 client for their options, and a forked child
builds its own, which reads and writes the store. Two storage contexts with other endpoints and time limits in one process each reach their own store. A
user's S3IO, Beam's S3IO class and Beam's process-wide FileSystems options in the same process are left exactly as
Beam makes them, also after an in-process check and a tapped pipeline, and no parity module keeps the run's
options."""
from __future__ import annotations

import json
import os
import sys
import threading

import pytest
from apache_beam.io.aws import s3io
from apache_beam.options.pipeline_options import PipelineOptions

from parity.storage import s3_clients
from parity.storage.context import Storage
from tests.cluster import testbed as bed

pytestmark = pytest.mark.cluster

BEAMS_S3IO_INIT = s3io.S3IO.__init__  # as Beam defines it, before any test of this session used parity's storage
TRIPS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "fixtures",
                     "scenarios", "_data", "trips.jsonl")


@pytest.fixture
def s3(s3_server):
    s3_server.storage.exists("s3://parity/s3-clients/none")  # the store of the context is built and probed
    return s3_server


@pytest.fixture(scope="module")
def other_s3(tmp_path_factory):
    """A second moto S3 server: another store at another endpoint, with its own bucket `parity`."""
    server = bed.start_s3(str(tmp_path_factory.mktemp("other-s3")))
    server.client().create_bucket(Bucket="parity")
    yield server
    server.stop()


def _store(storage: Storage):
    return storage._store("s3://parity/")  # the context's S3Store (built once per options)


def test_one_context_in_one_thread_gets_the_same_client_and_beams_s3io_class_is_untouched(s3):
    store = _store(s3.storage)

    assert store.client() is store.client()
    assert _store(Storage.of(list(s3.options))) is store  # an equal context: the same store
    assert s3io.S3IO.__init__ is BEAMS_S3IO_INIT
    assert s3io.S3IO.__init__.__module__ == "apache_beam.io.aws.s3io"


def test_another_thread_or_other_s3_options_get_a_client_of_their_own(s3):
    store = _store(s3.storage)
    here = store.client()
    there = []
    thread = threading.Thread(target=lambda: there.append(store.client()))
    thread.start()
    thread.join()
    other = _store(Storage((*s3.options, "--s3_region_name=eu-west-1"))).client()

    assert there and there[0] is not here
    assert other is not here
    assert there[0].client is here.client  # the process's boto3 client for these options, shared
    assert other.client is not here.client


def test_a_forked_child_builds_a_boto3_client_of_its_own_that_reads_and_writes_the_store(s3):
    storage = s3.storage
    storage.write_bytes("s3://parity/s3-clients/before-fork", b"written by the parent")
    parents = _store(storage).client().client
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a fresh boto3 client (its parent's connections are not its own), same store
        try:
            os.close(read)
            store = _store(storage)  # the same S3Store object, inherited
            ok = {"own": store.client().client is not parents,
                  "read": storage.read_bytes("s3://parity/s3-clients/before-fork") == b"written by the parent"}
            storage.write_bytes("s3://parity/s3-clients/by-child", b"written by the child")
            os.write(write, json.dumps(ok).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        said = json.loads(handle.read() or b"{}")
    os.waitpid(pid, 0)

    assert said == {"own": True, "read": True}
    assert storage.read_bytes("s3://parity/s3-clients/by-child") == b"written by the child"
    assert _store(storage).client().client is parents  # the parent's own is kept


def test_a_users_s3io_in_the_same_process_is_built_as_beam_builds_it(s3):
    import boto3
    from apache_beam.io.aws.clients.s3 import boto3_client

    s3.storage.write_bytes("s3://parity/s3-clients/users", b"parity's")
    theirs = [s3io.S3IO(options=PipelineOptions(list(s3.options))).client for _ in range(2)]
    ours = _store(s3.storage).client()

    assert theirs[0] is not theirs[1] and ours not in theirs  # a new client per S3IO, as Beam makes them
    assert boto3_client.boto3 is boto3
    assert theirs[0].client.meta.config.connect_timeout == 60  # botocore's default, not parity's limit
    assert ours.client.meta.config.connect_timeout == s3_clients.TIMEOUT_OPTIONS["s3_connect_timeout"]


def test_two_contexts_with_other_endpoints_and_limits_each_reach_their_own_store(s3, other_s3):
    """Interleaved in one thread: neither context's options leak into the other's reads, writes or clients."""
    first = Storage((*s3.options, "--s3_read_timeout=9"))
    second = Storage((*other_s3.options, "--s3_read_timeout=3"))
    url = "s3://parity/s3-clients/same-key"

    first.write_bytes(url, b"in the first store")
    second.write_bytes(url, b"in the second store")
    first.write_bytes(f"{url}-first-only", b"1")

    assert first.read_bytes(url) == b"in the first store"
    assert second.read_bytes(url) == b"in the second store"
    assert first.isfile(f"{url}-first-only") and not second.isfile(f"{url}-first-only")
    assert other_s3.client().get_object(Bucket="parity", Key="s3-clients/same-key")["Body"].read() == \
        b"in the second store"
    assert _store(first).client().client.meta.config.read_timeout == 9
    assert _store(second).client().client.meta.config.read_timeout == 3
    assert _store(first).client().client.meta.endpoint_url == s3.endpoint
    assert _store(second).client().client.meta.endpoint_url == other_s3.endpoint


def test_parity_leaves_beams_process_wide_file_system_options_as_a_user_set_them(s3):
    from apache_beam.io.filesystems import FileSystems

    before = FileSystems._pipeline_options
    users = PipelineOptions(["--s3_region_name=users-own-region"])
    FileSystems.set_options(users)
    try:
        storage = Storage((*s3.options, "--s3_read_timeout=9"))
        storage.write_bytes("s3://parity/s3-clients/options", b"written by parity")

        assert storage.read_bytes("s3://parity/s3-clients/options") == b"written by parity"
        assert FileSystems._pipeline_options is users
    finally:
        FileSystems.set_options(before)


def test_objects_read_in_turn_through_one_reused_client_come_back_whole(s3):
    storage = s3.storage
    first, second = bytes(range(256)) * 4000, b"second object " * 70_000
    storage.write_bytes("s3://parity/s3-clients/first", first)
    storage.write_bytes("s3://parity/s3-clients/second", second)
    read: dict[str, bytearray] = {"first": bytearray(), "second": bytearray()}

    with storage.open_read("s3://parity/s3-clients/first") as a, \
            storage.open_read("s3://parity/s3-clients/second") as b:
        while True:  # chunks from each in turn: the shared client's download stream is reopened at each switch
            chunk_a, chunk_b = a.read(100_000), b.read(100_000)
            read["first"] += chunk_a
            read["second"] += chunk_b
            if not chunk_a and not chunk_b:
                break

    assert bytes(read["first"]) == first and bytes(read["second"]) == second
    assert storage.read_bytes("s3://parity/s3-clients/first") == first  # read again from the start


def _parity_module_state(options: list[str]) -> list[str]:
    """Module attributes of parity that hold a run's options: a Storage with options, the options themselves, or
    a PipelineOptions (caches keyed by options are not "current" settings and are not looked at)."""
    found = []
    for name, module in sorted(sys.modules.items()):
        if not name.startswith("parity") or module is None:
            continue
        for attr, value in vars(module).items():
            if (isinstance(value, Storage) and value.options) or isinstance(value, PipelineOptions) or \
                    (isinstance(value, (list, tuple)) and value and set(map(str, value)) & set(options)):
                found.append(f"{name}.{attr}")
    return found


def test_after_an_in_process_check_into_s3_and_a_tapped_pipeline_nothing_of_the_run_stays_in_the_process(
        s3, tmp_path, monkeypatch):
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    import parity
    from parity.beam import TapStage, finalize
    from tests.cluster.test_s3_paths import scenario_config

    monkeypatch.setenv("PARITY_PROGRESS", "off")
    before = FileSystems._pipeline_options
    capture = "s3://parity/s3-clients/capture/trips.jsonl"
    s3.storage.write_bytes(capture, open(TRIPS, "rb").read())
    out = "s3://parity/s3-clients/check"
    report = parity.check(scenario_config(tmp_path / "config", capture), out_dir=out, pipeline_options=s3.options)
    after_check = FileSystems._pipeline_options, s3io.S3IO.__init__, _parity_module_state(list(s3.options))
    with beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(s3.options)) as pipeline:
        _ = (pipeline | beam.Create([{"id": i} for i in range(5)])
             | TapStage("input", "s3://parity/s3-clients/taps", key_fields=["id"]))
    users = FileSystems._pipeline_options  # what Beam's Pipeline itself set, as for any pipeline
    manifest = finalize("s3://parity/s3-clients/taps", key=["id"], storage=s3.storage)

    assert json.loads(s3.storage.read_bytes(f"{out}/report.json"))["verdict"] == report["verdict"]
    assert after_check == (before, BEAMS_S3IO_INIT, [])
    assert manifest["records"]["fingerprinted"] == 5  # the tap wrote to the store of the pipeline's options
    assert s3io.S3IO.__init__ is BEAMS_S3IO_INIT
    assert FileSystems._pipeline_options is users
    assert _parity_module_state(list(s3.options)) == []
    from parity.storage import urls

    assert not hasattr(urls, "configure") and not hasattr(urls, "options")
    assert not hasattr(s3_clients, "use_options") and not hasattr(s3_clients, "_run_options")
