"""Beam's S3 file system reuses one client per thread and set of S3 options once parity has touched a URL
(parity/storage/s3_clients.py), on the test bed's S3 server through Beam's real S3IO: the objects read back are
the ones written, two objects read in turn from one thread each come back whole, and another thread or other
options get a client of their own."""
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


def test_s3io_built_from_the_same_options_in_one_thread_gets_the_same_client(s3):
    options = PipelineOptions(list(s3.options))

    assert s3io.S3IO(options=options).client is s3io.S3IO(options=PipelineOptions(list(s3.options))).client


def test_another_thread_or_other_s3_options_get_a_client_of_their_own(s3):
    options = PipelineOptions(list(s3.options))
    here = s3io.S3IO(options=options).client
    there = []
    thread = threading.Thread(target=lambda: there.append(s3io.S3IO(options=options).client))
    thread.start()
    thread.join()
    other = s3io.S3IO(options=PipelineOptions([*s3.options, "--s3_region_name=eu-west-1"])).client

    assert there and there[0] is not here
    assert other is not here


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


def test_reusing_clients_twice_changes_nothing(s3):
    init = s3io.S3IO.__init__
    s3_clients.reuse_clients()

    assert s3io.S3IO.__init__ is init
