"""The test bed is what it claims: a job's Python work runs in the worker pool as another Unix user, with its own
HOME and TMPDIR, reaches the S3 server through Beam's S3 filesystem, and can neither read nor write the
client's folders. Without this, a cluster test could pass only because the worker shares the client's disk."""
from __future__ import annotations

import json
import os

import pytest

pytestmark = [pytest.mark.cluster,
              pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")]


def _probe_job(bed, client_file: str, client_folder: str, report_url: str) -> None:
    """One job on the cluster: its DoFn tries the client's paths and writes what it saw to S3."""
    s3_options = bed.s3.options
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    def probe(_):
        import getpass
        import tempfile

        from apache_beam.io.filesystems import FileSystems

        seen = {"uid": os.getuid(), "user": getpass.getuser(), "home": os.environ.get("HOME"),
                "tmpdir": tempfile.gettempdir()}
        try:
            with open(client_file, "rb") as handle:
                seen["read"] = "read " + repr(handle.read()[:20])
        except OSError as exc:
            seen["read"] = type(exc).__name__
        try:
            with open(os.path.join(client_folder, "from-worker"), "wb") as handle:
                handle.write(b"x")
            seen["write"] = "written"
        except OSError as exc:
            seen["write"] = type(exc).__name__
        # A harness the worker pool starts does not hand the job's options to FileSystems (sdk_worker_main
        # would): whoever writes through Beam's S3 filesystem on a worker passes them.
        from apache_beam.options.pipeline_options import PipelineOptions

        FileSystems.set_options(PipelineOptions(s3_options))
        with FileSystems.create(report_url) as out:
            out.write(json.dumps(seen, sort_keys=True).encode())
        return seen

    pipeline = beam.Pipeline(options=PipelineOptions(["--runner=PortableRunner", *bed.options(parallelism=1)]))
    _ = pipeline | beam.Create([0]) | beam.Map(probe)
    bed.finish(pipeline.run())


def test_the_worker_runs_as_another_user_and_cannot_touch_the_clients_folders(testbed, client_dir):
    client_file = client_dir / "capture.jsonl"
    client_file.write_bytes(b'{"secret": 1}\n')
    _probe_job(testbed, str(client_file), str(client_dir), testbed.url("testbed", "probe.json"))

    body = testbed.s3.client().get_object(Bucket=testbed.bucket, Key="testbed/probe.json")["Body"].read()
    seen = json.loads(body)
    assert seen["uid"] != 0 and seen["user"] == testbed.pool.user, seen
    assert seen["home"] == testbed.pool.home and seen["tmpdir"].startswith(os.path.dirname(testbed.pool.home))
    assert seen["read"] == "PermissionError", f"the worker read the client's capture: {seen}"
    assert seen["write"] == "PermissionError", f"the worker wrote into the client's folder: {seen}"
    assert not (client_dir / "from-worker").exists()
    # The same paths are the client's own: the difference is the user, not a missing file.
    assert client_file.read_bytes() == b'{"secret": 1}\n'
