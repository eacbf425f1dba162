"""On Flink, `parity check --diff-on engine`'s diff runs as a Beam job on the same job server (parity.compare.engine;
`auto` chooses it where the SDK workers run outside the client, not with the LOOPBACK workers these tests use), and
its report.json is the DirectRunner's local
diff's, byte for byte: two stages with feature histograms (binned on the workers), and every record diverged."""
from __future__ import annotations

import os

import grpc
import pytest
from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

import parity

# LOOPBACK workers log "CANCELLED: Multiplexer hanging up" from their gRPC reader threads when a job ends: harmless
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = {
    "two_stage_histograms": "fixtures/golden/_configs/two_stage/parity.yaml",
    "all_diverged": "fixtures/scenarios/window_unit_ms_vs_s/parity.yaml",
}


def _job_names(endpoint: str) -> set[str]:
    """The names of the jobs the job server remembers."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
        return {job.job_name for job in stub.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=30).job_info}


def _read(path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


@pytest.mark.parametrize("config", CONFIGS.values(), ids=list(CONFIGS))
def test_a_check_on_flink_whose_diff_ran_on_the_engine_writes_the_direct_runners_local_report(
        config, tmp_path, flink_options, flink_job_endpoint):
    config_path = os.path.join(ROOT, config)
    parity.check(config_path, out_dir=tmp_path / "direct", diff_on="local")
    before = _job_names(flink_job_endpoint)
    parity.check(config_path, out_dir=tmp_path / "flink", runner="FlinkRunner", pipeline_options=flink_options,
                 diff_on="engine")
    diff_jobs = {name for name in _job_names(flink_job_endpoint) - before if name.startswith("parity-diff-")}
    assert len(diff_jobs) == 1, diff_jobs  # the diff ran on the session's job server
    assert _read(tmp_path / "flink" / "report.json") == _read(tmp_path / "direct" / "report.json")
