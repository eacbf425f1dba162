"""Each private name of Apache Beam that parity uses (`parity/compat.py`) still means what parity relies on, on
the installed Beam: `scripts/test_profile.sh` runs this file on the oldest supported Beam and on TFX's pins, and
the main suite on the newest. And no other module of parity names one of them."""
from __future__ import annotations

import ast
import inspect
import socket
import subprocess
from pathlib import Path

import pytest

from parity import compat

PACKAGE = Path(compat.__file__).resolve().parent


class _Recorder:
    """A Beam `Uploader` (put, finish) that records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def put(self, data) -> None:
        self.calls.append("put")

    def finish(self) -> None:
        self.calls.append("finish")


def test_an_abandoned_upload_completes_nothing_when_its_stream_is_closed():
    from apache_beam.io import filesystemio

    for wrapped in (False, True):  # FileSystems.create hands out a BufferedWriter over the UploaderStream
        uploader = _Recorder()
        stream = filesystemio.UploaderStream(uploader)
        handle = __import__("io").BufferedWriter(stream) if wrapped else stream
        handle.write(b"half an object")
        compat.abandon_upload(handle)
        handle.close()
        assert "finish" not in uploader.calls, uploader.calls
    completed = _Recorder()
    filesystemio.UploaderStream(completed).close()  # the guard: without abandon_upload, closing completes
    assert completed.calls == ["finish"]


def test_a_portable_result_caches_its_metrics_in_the_field_forget_metrics_clears():
    from apache_beam.runners.portability.portable_runner import PipelineResult

    source = inspect.getsource(PipelineResult)
    assert "self._metrics = None" in source and "self._job_service" in source
    metrics = inspect.getsource(PipelineResult.metrics)
    assert "if not self._metrics:" in metrics or "if self._metrics is None" in metrics, metrics

    class _Portable:  # the two fields forget_metrics reads and writes, as PipelineResult holds them
        _job_service = object()
        _metrics = "the first answer"

    result = _Portable()
    compat.forget_metrics(result)
    assert result._metrics is None
    direct = type("DirectResult", (), {"_metrics": "kept"})()
    compat.forget_metrics(direct)  # not a portable result: left as it is
    assert direct._metrics == "kept"


def test_the_worker_pool_servicer_keeps_its_settings_and_harnesses_where_compat_reads_them():
    from apache_beam.portability.api import beam_fn_api_pb2
    from apache_beam.runners.worker import worker_pool_main

    servicer = worker_pool_main.BeamFnExternalWorkerPoolServicer(
        use_process=True, container_executable=None, state_cache_size=7, data_buffer_time_limit_ms=11)
    assert compat.pool_settings(servicer) == {"use_process": True, "container_executable": None,
                                              "state_cache_size": 7, "data_buffer_time_limit_ms": 11}
    container = worker_pool_main.BeamFnExternalWorkerPoolServicer(
        use_process=True, container_executable="/bin/true", state_cache_size=0, data_buffer_time_limit_ms=-1)
    assert not container.StartWorker(beam_fn_api_pb2.StartWorkerRequest(worker_id="worker-1"), None).error
    process = compat.take_harness(container, "worker-1")
    assert isinstance(process, subprocess.Popen) and process.wait() == 0
    process.stdout.close()  # Beam pipes a harness's stdout
    assert compat.take_harness(container, "worker-1") is None


def test_beams_s3_modules_have_the_constructor_the_methods_and_the_client_attribute_parity_uses():
    s3io, boto3_client = compat.s3io_module(), compat.boto3_client_module()
    if s3io is None:
        pytest.skip("this Beam has no [aws] extra: parity's S3 store is never built")
    parameters = list(inspect.signature(s3io.S3IO.__init__).parameters)
    assert parameters[:3] == ["self", "client", "options"], parameters
    for method, first in (("open", ["self", "filename", "mode"]), ("exists", ["self", "path"]),
                          ("list_files", ["self", "path"]), ("delete_paths", ["self", "paths"])):
        assert list(inspect.signature(getattr(s3io.S3IO, method)).parameters)[:len(first)] == first, method
    assert "options" in inspect.signature(boto3_client.Client.__init__).parameters
    from apache_beam.options.pipeline_options import PipelineOptions

    built = boto3_client.Client(options=PipelineOptions(["--s3_region_name=us-east-1"]))  # builds, asks nothing
    assert hasattr(built.client, "get_object") and hasattr(built.client, "put_object")


def test_a_beam_s3_client_around_a_given_boto3_client_has_the_attributes_beams_constructor_sets():
    boto3_client = compat.boto3_client_module()
    if boto3_client is None:
        pytest.skip("this Beam has no [aws] extra: parity's S3 store is never built")
    from apache_beam.options.pipeline_options import PipelineOptions

    beams = boto3_client.Client(options=PipelineOptions(["--s3_region_name=us-east-1"]))
    given = object()
    ours = compat.beam_s3_client(boto3_client, given)

    assert type(ours) is boto3_client.Client and ours.client is given
    assert {name: value for name, value in vars(ours).items() if name != "client"} == \
        {name: value for name, value in vars(beams).items() if name != "client"}  # no download stream yet
    assert set(vars(ours)) == set(vars(beams))


def test_beams_process_wide_options_that_a_pipeline_sets_are_put_back_when_the_block_ends():
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.options.value_provider import RuntimeValueProvider

    users, runtime = PipelineOptions(["--s3_region_name=users-own"]), {"users": "own"}
    before = FileSystems._pipeline_options, RuntimeValueProvider.runtime_options
    FileSystems.set_options(users)
    RuntimeValueProvider.runtime_options = runtime
    try:
        with compat.beam_process_options_kept():
            options = PipelineOptions(["--s3_region_name=the-runs"])
            with beam.Pipeline(runner="DirectRunner", options=options) as pipeline:
                _ = pipeline | beam.Create([1, 2]) | beam.Map(lambda x: x)
            assert FileSystems._pipeline_options is not users  # Beam's Pipeline set its own: the block undoes it
        assert FileSystems._pipeline_options is users
        assert RuntimeValueProvider.runtime_options is runtime
    finally:
        FileSystems.set_options(before[0])
        RuntimeValueProvider.runtime_options = before[1]


def test_beams_flink_launcher_gives_the_job_server_arguments_and_the_port_parity_launches_it_with():
    assert compat.flink_job_server_arguments("[local]", 8099, 0, -1, "/tmp/artifacts") == [
        "--flink-master", "[local]", "--artifacts-dir", "/tmp/artifacts", "--job-port", "8099",
        "--artifact-port", "0", "--expansion-port", "-1"]
    port = compat.free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("localhost", port))  # free, as Beam picked it


def _private_names_outside_compat() -> list[str]:
    names = set(compat.PRIVATE_NAMES)
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "compat.py" and path.parent == PACKAGE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in names:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    return found


def test_no_module_but_compat_names_a_private_beam_attribute():
    assert _private_names_outside_compat() == []
