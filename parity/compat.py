"""Every use of a private name of Apache Beam, in one place: each is a break on some future Beam release.

parity reaches past Beam's public API where Beam gives no public way to do what a run needs:

- `abandon_upload`: an upload that raised must not be completed (Beam's uploading streams complete the object
  when closed, so a writer that failed would leave half an object looking whole). Private:
  `filesystemio.UploaderStream._uploader`.
- `forget_metrics`: a portable `PipelineResult` keeps its first metrics answer for ever, so progress asked while
  a job runs would be the job's final count too. Private: `PipelineResult._metrics`, `._job_service`.
- `pool_settings`, `take_harness`: parity's worker pool starts harnesses with its own interpreter and keeps each
  by id (a harness Beam forgot cannot be stopped); one Beam's own StartWorker started (a `--container_executable`)
  it takes out of Beam's dict. Private: the servicer's
  `_use_process`, `_container_executable`, `_state_cache_size`, `_data_buffer_time_limit_ms`,
  `_worker_processes`.
- `s3io_module`, `boto3_client_module`: Beam's S3 file system builds a client per call; parity's own S3 store
  (`parity.storage.s3_clients.S3Store`) builds Beam's `S3IO(client=..., options=...)` with the thread's Beam
  `boto3_client.Client`, whose boto3 client (its `client` attribute) it sets to one with parity's time limits, and
  calls S3IO's `open`, `exists`, `list_files` and `delete_paths`. Beam's classes are never changed. Public
  modules, but that constructor's signature, that attribute and those methods are not a promised API.
- `beam_s3_client`: that thread's Beam `Client` is made around the process's one boto3 client with parity's
  limits, not by `Client.__init__`, which would build (and parse S3's service model for) a boto3 session and
  client of its own that parity replaces at once. Private: the download attributes `_download_request`,
  `_download_stream`, `_download_pos` that `__init__` sets.
- `flink_job_server_arguments`, `free_port`: parity launches Beam's Flink job server itself
  (`parity.replay.flink.JobServer` says why) with the arguments and the port Beam's own launcher would give it.
  Public names, but `FlinkJarJobServer` and `subprocess_server.pick_port` are not a promised API.

- `beam_process_options_kept`: Beam's `Pipeline` sets its options as the process-wide options of Beam's
  `FileSystems`, and Beam's in-process runners reset `RuntimeValueProvider`'s runtime options: a parity run in a
  user's process (a notebook's `parity.check`) puts both back as they were once its job ends. Private:
  `FileSystems._pipeline_options` (read; it is put back with the public `set_options`).

`PRIVATE_NAMES` lists them; `tests/test_compat.py` checks each on the installed Beam (the oldest and the newest
supported, through `scripts/test_profile.sh`), and that no other module of parity names one.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

PRIVATE_NAMES = ("_uploader", "_metrics", "_job_service", "_use_process", "_container_executable",
                 "_state_cache_size", "_data_buffer_time_limit_ms", "_worker_processes", "_pipeline_options",
                 "_download_request", "_download_stream", "_download_pos")


class _NoFinish:
    """An uploader that completes nothing: what an abandoned upload's stream closes."""

    def put(self, data: Any) -> None:
        pass

    def finish(self) -> None:
        pass


def abandon_upload(handle: Any) -> None:
    """Has a Beam upload stream (`FileSystems.create`'s handle, or its raw `UploaderStream`) complete nothing
    when it is closed. Other handles are left as they are."""
    from apache_beam.io import filesystemio

    raw = getattr(handle, "raw", handle)
    if isinstance(raw, filesystemio.UploaderStream):
        raw._uploader = _NoFinish()


def forget_metrics(result: Any) -> None:
    """Has a portable runner's `PipelineResult` ask the job service for its metrics afresh at the next
    `metrics()` (it caches the first answer). Other results are left as they are."""
    if hasattr(result, "_job_service"):  # apache_beam.runners.portability.portable_runner.PipelineResult
        result._metrics = None


def pool_settings(servicer: Any) -> dict[str, Any]:
    """What Beam's `BeamFnExternalWorkerPoolServicer` was started with: `use_process`, `container_executable`,
    `state_cache_size`, `data_buffer_time_limit_ms`."""
    return {"use_process": servicer._use_process, "container_executable": servicer._container_executable,
            "state_cache_size": servicer._state_cache_size,
            "data_buffer_time_limit_ms": servicer._data_buffer_time_limit_ms}


def take_harness(servicer: Any, worker_id: str) -> Any:
    """The harness process Beam's servicer keeps under `worker_id`, taken out of its dict (None when none)."""
    return servicer._worker_processes.pop(worker_id, None)


def s3io_module() -> Any:
    """Beam's `apache_beam.io.aws.s3io`, or None without its `[aws]` extra or boto3."""
    try:
        from apache_beam.io.aws import s3io
    except ImportError:
        return None
    return s3io if getattr(s3io, "BOTO3_INSTALLED", False) else None


def boto3_client_module() -> Any:
    """Beam's `apache_beam.io.aws.clients.s3.boto3_client` (whose `Client` keeps its boto3 client as `client`), or
    None without it."""
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:
        return None
    return boto3_client


def beam_s3_client(boto3_client: Any, client: Any) -> Any:
    """Beam's `boto3_client.Client` around an existing boto3 S3 `client`, in the state Beam's constructor leaves
    it (no download stream yet), without the boto3 session and client that constructor would build and parity
    would throw away: `Client.__init__` always builds its own from the options, which costs a boto3 session's
    S3 service model, parsed anew per session. Sets the download attributes `__init__` sets (private names)."""
    built = boto3_client.Client.__new__(boto3_client.Client)
    built.client = client
    built._download_request = None
    built._download_stream = None
    built._download_pos = 0
    return built


def flink_job_server_arguments(flink_master: str, job_port: int, artifact_port: int, expansion_port: int,
                               artifacts_dir: str) -> list[str]:
    """The Flink job server's own arguments (`--flink-master ... --expansion-port ...`) as Beam's launcher
    writes them: `FlinkJarJobServer.java_arguments` (apache_beam/runners/portability/flink_runner.py)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.flink_runner import FlinkJarJobServer

    # Only its java_arguments is asked: nothing is started, no jar resolved (its local_jar would download one).
    beam = FlinkJarJobServer(PipelineOptions([f"--flink_master={flink_master}"]))
    return [str(arg) for arg in beam.java_arguments(job_port, artifact_port, expansion_port, artifacts_dir)]


def free_port() -> int:
    """A free local port as Beam's launcher picks a job port (`subprocess_server.pick_port`; IPv6 on an
    IPv6-only host)."""
    from apache_beam.utils.subprocess_server import pick_port

    return int(pick_port(None)[0])


@contextlib.contextmanager
def beam_process_options_kept() -> Iterator[None]:
    """Runs the block (a pipeline built and run) and puts back Beam's process-wide options as they were before it:
    `FileSystems`' pipeline options, which `beam.Pipeline(options=...)` sets, and `RuntimeValueProvider`'s runtime
    options, which the in-process runners reset."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.value_provider import RuntimeValueProvider

    filesystems, runtime = FileSystems._pipeline_options, RuntimeValueProvider.runtime_options
    try:
        yield
    finally:
        FileSystems.set_options(filesystems)
        RuntimeValueProvider.runtime_options = runtime
