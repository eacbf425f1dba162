"""parity's SDK worker pool (parity/replay/worker_pool.py) over gRPC, as a TaskManager's EXTERNAL environment calls
it, with real harness processes: a `--container_executable` that notes its pid and sleeps stands in for the SDK
container (the pool starts it with the worker's id and endpoints, as it would start Beam's boot). Beam's own pool
fails these: its StopWorker(id) kills the harness started last under the id."""
from __future__ import annotations

import os
import signal
import stat
import threading
import time

import grpc
import pytest
from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2

from parity.replay.worker_pool import WorkerPoolServicer

TIMEOUT = 30.0  # seconds a harness process has to start, or a stop to take effect


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _poll(what: str, attempt):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        found = attempt()
        if found:
            return found
        time.sleep(0.02)
    raise AssertionError(f"no {what} within {TIMEOUT:g} s")


class _Pool:
    def __init__(self, folder):
        self.pids_file = folder / "pids"
        executable = folder / "harness.sh"
        executable.write_text(f'#!/bin/sh\necho $$ >> "{self.pids_file}"\nexec sleep 600\n')
        executable.chmod(executable.stat().st_mode | stat.S_IXUSR)
        address, self.server = WorkerPoolServicer.start(use_process=True, port=0,
                                                        container_executable=str(executable))
        self.channel = grpc.insecure_channel(address)
        self.stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(self.channel)

    def pids(self) -> list[int]:
        return [int(line) for line in self.pids_file.read_text().split()] if self.pids_file.exists() else []

    def start(self, worker_id: str) -> int:
        before = len(self.pids())
        endpoint = endpoints_pb2.ApiServiceDescriptor(url="localhost:1")  # never dialled by the stand-in
        response = self.stub.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
            worker_id=worker_id, control_endpoint=endpoint, logging_endpoint=endpoint, artifact_endpoint=endpoint,
            provision_endpoint=endpoint), timeout=TIMEOUT)
        assert not response.error, response.error
        return _poll(f"harness {worker_id} started", lambda: self.pids()[before:] and self.pids()[before])

    def stop(self, worker_id: str) -> None:
        response = self.stub.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id=worker_id), timeout=TIMEOUT)
        assert not response.error, response.error

    def close(self) -> None:
        self.channel.close()
        self.server.stop(0)
        for pid in self.pids():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def pool(tmp_path):
    pool = _Pool(tmp_path)
    yield pool
    pool.close()


def test_a_stop_for_a_repeated_worker_id_stops_the_older_harness_and_leaves_the_newer_running(pool):
    older = pool.start("1-1")
    newer = pool.start("1-1")  # the next job's, or a restarted attempt's, environment under the same id
    pool.stop("1-1")
    _poll("stop of the older harness", lambda: not _alive(older))
    assert _alive(newer)
    pool.stop("1-1")
    _poll("stop of the newer harness", lambda: not _alive(newer))


def test_a_stop_for_a_repeated_worker_id_reaps_the_harness_that_died_and_leaves_the_new_one_running(pool):
    died = pool.start("1-1")
    os.kill(died, signal.SIGKILL)  # as the test bed's fault drill kills a connected harness
    _poll("end of the killed harness", lambda: not _alive(died))
    restarted = pool.start("1-1")  # the restarted attempt's, before the failed attempt's stop
    pool.stop("1-1")  # returns once a harness it stops has ended
    assert _alive(restarted)


def test_a_stop_for_a_worker_id_two_live_jobs_share_stops_the_harness_that_exits_not_the_older_one(pool):
    older = pool.start("1-1")  # the first side's job's environment
    newer = pool.start("1-1")  # the second side's, at the same time, through the same pool
    # Beam's runner closes the newer job's control channel, then sends StopWorker: that harness's run() returns
    # and it exits, a moment after the stop arrives
    threading.Timer(0.5, os.kill, (newer, signal.SIGTERM)).start()
    pool.stop("1-1")
    assert not _alive(newer)
    assert _alive(older)  # the other job's harness, still at work, is left running
    pool.stop("1-1")
    _poll("stop of the older harness", lambda: not _alive(older))


def test_a_stop_for_a_worker_id_stops_only_that_ids_harness(pool):
    first, second = pool.start("1-1"), pool.start("2-1")
    pool.stop("2-1")
    _poll("stop of harness 2-1", lambda: not _alive(second))
    assert _alive(first)


def test_a_harness_that_exited_is_reaped_at_the_pools_next_call_not_left_a_zombie(pool):
    died = pool.start("1-1")
    os.kill(died, signal.SIGKILL)  # its TaskManager died too: no stop of 1-1 will come
    _poll("end of the killed harness", lambda: not _alive(died))
    assert os.path.exists(f"/proc/{died}")  # exited, not yet reaped: a zombie of the pool

    pool.start("2-1")  # any later call of the pool collects it

    assert not os.path.exists(f"/proc/{died}")


def _pool_process(tmp_path, *flags: str, path: str = "/nonexistent-bin"):
    """`python -m parity.replay.worker_pool` in a process of its own, with PATH holding no `python` at all (as
    when an operator starts the venv's interpreter by its full path); returns (process, address)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"PATH": path, "HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen([sys.executable, "-m", "parity.replay.worker_pool", f"--service_port={port}", *flags],
                               env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "pool.log", "wb"),
                               start_new_session=True)
    return process, f"localhost:{port}"


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii") as handle:
                    if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def test_the_pool_starts_harnesses_with_its_own_interpreter_when_path_has_no_python(tmp_path):
    import sys

    process, address = _pool_process(tmp_path)
    try:
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=TIMEOUT)
            stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)
            endpoint = endpoints_pb2.ApiServiceDescriptor(url="localhost:1")  # nothing answers: it keeps trying
            response = stub.StartWorker(beam_fn_api_pb2.StartWorkerRequest(worker_id="1-1", control_endpoint=endpoint),
                                        timeout=TIMEOUT)
            assert not response.error, response.error  # Beam's pool: No such file or directory: 'python'
            harness = _poll("harness process", lambda: _children(process.pid))[0]
            with open(f"/proc/{harness}/cmdline", "rb") as handle:
                command = handle.read().split(b"\0")
            assert command[0].decode() == sys.executable
            assert b'SdkHarness("localhost:1",worker_id="1-1"' in command[2]  # the test bed reads the port from it
            stub.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"), timeout=TIMEOUT)
            _poll("stop of the harness", lambda: not _alive(harness))
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT)


def test_the_pool_listens_on_localhost_only_unless_told_otherwise():
    address, server = WorkerPoolServicer.start(use_process=True, port=0)
    try:
        port = int(address.rsplit(":", 1)[1])
        listening = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table, encoding="ascii") as handle:
                for line in handle.readlines()[1:]:
                    local, state = line.split()[1], line.split()[3]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        listening.add(local.rsplit(":", 1)[0])
        # 127.0.0.1, ::ffff:127.0.0.1 and ::1 as /proc writes them; Beam's pool listens on :: (every interface)
        assert listening and listening <= {"0100007F", "0000000000000000FFFF00000100007F",
                                          "00000000000000000000000001000000"}, listening
    finally:
        server.stop(0)


def test_a_harness_interpreter_that_does_not_exist_stops_the_pool_with_exit_two(tmp_path):
    process, _ = _pool_process(tmp_path, "--harness_python=/nonexistent/python")
    try:
        assert process.wait(timeout=TIMEOUT) == 2
    finally:
        if process.poll() is None:  # a pool that ignored the flag would serve for ever
            process.kill()
            process.wait()
    said = (tmp_path / "pool.log").read_text()
    assert said.startswith("parity: error: the harness interpreter /nonexistent/python is not an executable")


def test_a_harness_interpreter_without_beam_is_named_in_the_pools_log_at_start(tmp_path):
    process, address = _pool_process(tmp_path, "--harness_python=/bin/false")  # runs, and imports nothing
    try:
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=TIMEOUT)  # the pool serves all the same
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT)
    said = (tmp_path / "pool.log").read_text()
    assert "the harness interpreter /bin/false cannot import apache_beam and parity (exit code 1)" in said, said


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


def _harness_pids(worker_id: str) -> list[int]:
    """The pids of this process's children that run Beam's harness for `worker_id` (the pool runs in-process)."""
    found = []
    for pid in _children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().decode(errors="replace")
        except FileNotFoundError:
            continue
        if f'worker_id="{worker_id}"' in command and _alive(pid):
            found.append(pid)
    return found


def _start_request(worker_id: str, control: str):
    endpoint = endpoints_pb2.ApiServiceDescriptor(url=control)
    return beam_fn_api_pb2.StartWorkerRequest(worker_id=worker_id, control_endpoint=endpoint,
                                              logging_endpoint=endpoint, artifact_endpoint=endpoint,
                                              provision_endpoint=endpoint)


def test_a_harness_killed_before_it_connects_is_started_again_under_its_worker_id_and_then_connects():
    """The runner waits for a harness of the id it asked for, for ever (Beam's ExternalEnvironmentFactory): before,
    a harness killed while it started hung its job until the job timeout (`make soak`: 0 of 4 start kills
    survived). The pool starts another under the same id, which connects once the runner answers."""
    import sys
    import threading

    port = _free_port()
    servicer = WorkerPoolServicer(use_process=True, python=sys.executable)
    try:
        assert not servicer.StartWorker(_start_request("9-1", f"localhost:{port}"), None).error
        [first] = _poll("harness 9-1 started", lambda: _harness_pids("9-1") or None)
        os.kill(first, signal.SIGKILL)  # nothing listens on the control port yet: it had not connected
        [second] = _poll("harness 9-1 started again", lambda: [p for p in _harness_pids("9-1") if p != first] or None)
        runner = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(2))
        runner.add_insecure_port(f"localhost:{port}")
        runner.start()  # the runner's control port answers: the harness connects, then finds no Control service
        try:
            _poll("the second harness's end", lambda: not _alive(second))
            _poll("its watcher's end", lambda: not [t for t in threading.enumerate()
                                                     if t.name == "parity-harness-9-1"])
            assert _harness_pids("9-1") == []  # it had connected: not started a third time
        finally:
            runner.stop(0)
    finally:
        servicer.stop_all()
