"""parity's own S3 access reuses one Beam client per thread and set of S3 options (parity/storage/s3_clients.py),
on the test bed's S3 server through Beam's real S3IO: the objects read back are the ones written, two objects read
in turn from one thread each come back whole, and another thread or other options get a client of their own. A
user's S3IO and Beam's process-wide FileSystems options in the same process are left exactly as Beam makes them."""
from __future__ import annotations

import threading

import pytest
from apache_beam.io.aws import s3io
from apache_beam.options.pipeline_options import PipelineOptions

from parity.storage import s3_clients, urls

pytestmark = pytest.mark.cluster


@pytest.fixture
def s3(s3_server):
    urls.configure(s3_server.options)
    urls.exists("s3://parity/s3-clients/none")  # the first URL touched installs the reuse
    return s3_server


def test_s3io_built_from_paritys_options_in_one_thread_gets_the_same_client(s3):
    options = s3_clients.storage_options(tuple(s3.options))

    assert s3io.S3IO(options=options).client is s3io.S3IO(options=s3_clients.storage_options(tuple(s3.options))).client


def test_another_thread_or_other_s3_options_get_a_client_of_their_own(s3):
    options = s3_clients.storage_options(tuple(s3.options))
    here = s3io.S3IO(options=options).client
    there = []
    thread = threading.Thread(target=lambda: there.append(s3io.S3IO(options=options).client))
    thread.start()
    thread.join()
    other = s3io.S3IO(options=s3_clients.storage_options((*s3.options, "--s3_region_name=eu-west-1"))).client

    assert there and there[0] is not here
    assert other is not here


def test_a_users_s3io_in_the_same_process_is_built_as_beam_builds_it(s3):
    import boto3
    from apache_beam.io.aws.clients.s3 import boto3_client

    theirs = [s3io.S3IO(options=PipelineOptions(list(s3.options))).client for _ in range(2)]
    ours = s3io.S3IO(options=s3_clients.storage_options(tuple(s3.options))).client

    assert theirs[0] is not theirs[1] and ours not in theirs  # a new client per S3IO, as Beam makes them
    assert boto3_client.boto3 is boto3
    assert theirs[0].client.meta.config.connect_timeout == 60  # botocore's default, not parity's limit
    assert ours.client.meta.config.connect_timeout == s3_clients.TIMEOUT_OPTIONS["s3_connect_timeout"]


def test_parity_leaves_beams_process_wide_file_system_options_as_a_user_set_them(s3):
    from apache_beam.io.filesystems import FileSystems

    before = FileSystems._pipeline_options
    users = PipelineOptions(["--s3_region_name=users-own-region"])
    FileSystems.set_options(users)
    try:
        urls.configure([*s3.options, "--s3_read_timeout=9"])
        urls.write_bytes("s3://parity/s3-clients/options", b"written by parity")

        assert urls.read_bytes("s3://parity/s3-clients/options") == b"written by parity"
        assert FileSystems._pipeline_options is users
    finally:
        FileSystems.set_options(before)


def test_objects_read_in_turn_through_one_reused_client_come_back_whole(s3):
    first, second = bytes(range(256)) * 4000, b"second object " * 70_000
    urls.write_bytes("s3://parity/s3-clients/first", first)
    urls.write_bytes("s3://parity/s3-clients/second", second)
    read: dict[str, bytearray] = {"first": bytearray(), "second": bytearray()}

    with urls.open_read("s3://parity/s3-clients/first") as a, urls.open_read("s3://parity/s3-clients/second") as b:
        while True:  # chunks from each in turn: the shared client's download stream is reopened at each switch
            chunk_a, chunk_b = a.read(100_000), b.read(100_000)
            read["first"] += chunk_a
            read["second"] += chunk_b
            if not chunk_a and not chunk_b:
                break

    assert bytes(read["first"]) == first and bytes(read["second"]) == second
    assert urls.read_bytes("s3://parity/s3-clients/first") == first  # read again from the start


def test_asking_for_paritys_options_twice_gives_the_same_object_and_wraps_nothing_again(s3):
    init = s3io.S3IO.__init__
    first = s3_clients.storage_options(tuple(s3.options))

    assert s3_clients.storage_options(tuple(s3.options)) is first
    assert s3io.S3IO.__init__ is init
