"""What a Beam job server says of its jobs (its job service, `GetJobs` and `GetStateStream`), with the server's own
timestamps: read by the Flink tests and by benchmarks/flink_sides.py, to tell whether two jobs ran at once without
a wall clock around them."""
from __future__ import annotations

from typing import Any

import grpc
from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

_ENDED = (beam_job_api_pb2.JobState.DONE, beam_job_api_pb2.JobState.FAILED, beam_job_api_pb2.JobState.CANCELLED)


def job_ids(endpoint: str) -> set[str]:
    """The jobs the job server remembers (its history keeps the last 10)."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
        return {info.job_id for info in stub.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=30).job_info}


def job_states(endpoint: str, known: set[str]) -> list[dict[str, Any]]:
    """The jobs of the job server not in `known`: id, name and each state with the server's timestamp (seconds),
    up to the state that ends the job."""
    jobs = []
    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
        for info in stub.GetJobs(beam_job_api_pb2.GetJobsRequest(), timeout=30).job_info:
            if info.job_id in known:
                continue
            states = []
            for event in stub.GetStateStream(beam_job_api_pb2.GetJobStateRequest(job_id=info.job_id), timeout=30):
                states.append({"state": beam_job_api_pb2.JobState.Enum.Name(event.state),
                               "t": event.timestamp.seconds + event.timestamp.nanos / 1e9})
                if event.state in _ENDED:
                    break
            jobs.append({"job_id": info.job_id, "name": info.job_name, "states": states})
    return jobs
