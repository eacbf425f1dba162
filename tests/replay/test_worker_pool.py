"""parity's SDK worker pool (parity/replay/worker_pool.py) over gRPC, as a TaskManager's EXTERNAL environment calls
it, with real harness processes: a `--container_executable` that notes its pid and sleeps stands in for the SDK
container (the pool starts it with the worker's id and endpoints, as it would start Beam's boot). Beam's own pool
fails these: its StopWorker(id) kills the harness started last under the id. Harnesses of the pool's own interpreter
are forked from its zygote (parity/replay/harness_zygote.py) unless `--harness_start spawn` says otherwise."""
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


@pytest.mark.slow  # a pool and a harness started for real, with an emptied PATH
def test_the_pool_starts_harnesses_with_its_own_interpreter_when_path_has_no_python(tmp_path):
    import sys

    process, address = _pool_process(tmp_path, "--harness_start=spawn")
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


@pytest.mark.slow  # a pool, its zygote and a forked harness started for real, with an emptied PATH
def test_the_pool_forks_harnesses_from_a_zygote_run_by_its_own_interpreter_when_path_has_no_python(tmp_path):
    import sys

    process, address = _pool_process(tmp_path)  # fork: the default
    try:
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=TIMEOUT)
            [zygote] = _children(process.pid)  # started with the pool, before any harness
            with open(f"/proc/{zygote}/cmdline", "rb") as handle:
                command = handle.read().split(b"\0")
            assert command[0].decode() == sys.executable
            assert b"parity.replay.harness_zygote" in command[2]
            stub = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)
            response = stub.StartWorker(_start_request("1-1", "localhost:1"), timeout=TIMEOUT)
            assert not response.error, response.error
            [harness] = _poll("forked harness", lambda: _children(zygote))
            assert _children(process.pid) == [zygote]
            stub.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"), timeout=TIMEOUT)
            _poll("stop of the harness", lambda: not _alive(harness))
    finally:
        process.terminate()
        process.wait(timeout=TIMEOUT)
    _poll("the zygote's end with its pool", lambda: not _alive(zygote))
    said = (tmp_path / "pool.log").read_text()
    assert f"started SDK harness 1-1: pid {harness} (forked from the zygote)" in said, said


def test_the_pool_listens_on_localhost_only_unless_told_otherwise():
    address, server = WorkerPoolServicer.start(use_process=True, port=0, harness_start="spawn")
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


def _harness_pids(worker_id: str, servicer: WorkerPoolServicer | None = None) -> list[int]:
    """The pids of this process's children that run Beam's harness for `worker_id` (the pool runs in-process), or
    with `servicer`, the live harnesses it keeps under `worker_id` (forked ones are its zygote's children)."""
    if servicer is not None:
        return [process.pid for process in servicer.harness_processes(worker_id) if _alive(process.pid)]
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


@pytest.mark.parametrize("start", ["spawn", "fork"])
def test_a_harness_killed_before_it_connects_is_started_again_under_its_worker_id_and_then_connects(start):
    """The runner waits for a harness of the id it asked for, for ever (Beam's ExternalEnvironmentFactory): before,
    a harness killed while it started hung its job until the job timeout (`make soak`: 0 of 4 start kills
    survived). The pool starts another under the same id, which connects once the runner answers."""
    import sys
    import threading

    port = _free_port()
    servicer = WorkerPoolServicer(use_process=True, python=sys.executable, harness_start=start)
    assert (servicer.zygote is not None) == (start == "fork")
    try:
        assert not servicer.StartWorker(_start_request("9-1", f"localhost:{port}"), None).error
        [first] = _poll("harness 9-1 started", lambda: _harness_pids("9-1", servicer) or None)
        os.kill(first, signal.SIGKILL)  # nothing listens on the control port yet: it had not connected
        [second] = _poll("harness 9-1 started again",
                         lambda: [p for p in _harness_pids("9-1", servicer) if p != first] or None)
        runner = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(2))
        runner.add_insecure_port(f"localhost:{port}")
        runner.start()  # the runner's control port answers: the harness connects, then finds no Control service
        try:
            _poll("the second harness's end", lambda: not _alive(second))
            _poll("its watcher's end", lambda: not [t for t in threading.enumerate()
                                                     if t.name == "parity-harness-9-1"])
            assert _harness_pids("9-1", servicer) == []  # it had connected: not started a third time
            assert _harness_pids("9-1") == []
        finally:
            runner.stop(0)
    finally:
        servicer.stop_all()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.slow
def test_a_forked_harness_connects_and_runs_a_job_in_the_pools_process_group_and_folder(tmp_path):
    """A real job through the pool (Beam's FnApiRunner with an EXTERNAL environment asks it for a harness as a
    TaskManager does): the harness is the zygote's child, runs the job's DoFn, and has the process group and the
    working folder a fresh harness of the pool would have had."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.transforms import environments

    address, server = WorkerPoolServicer.start(use_process=True, port=0)  # fork: the default
    servicer_zygote = _poll("the zygote", lambda: [p for p in _children(os.getpid()) if b"harness_zygote" in
                                                   open(f"/proc/{p}/cmdline", "rb").read()] or None)
    out = tmp_path / "out.txt"
    try:
        runner = FnApiRunner(default_environment=environments.ExternalEnvironment(address))
        with beam.Pipeline(runner=runner) as pipeline:
            _ = (pipeline | beam.Create([1, 2, 3])
                 | beam.Map(lambda x: f"{x * 2} {os.getpid()} {os.getppid()} {os.getpgrp()} {os.getcwd()}")
                 | beam.io.WriteToText(str(out), shard_name_template=""))
    finally:
        server.stop(0)
    rows = sorted(line.split(" ", 4) for line in out.read_text().splitlines())
    assert [row[0] for row in rows] == ["2", "4", "6"]
    assert {(int(row[2]), int(row[3]), row[4]) for row in rows} == {(servicer_zygote[0], os.getpgrp(), os.getcwd())}
    assert int(rows[0][1]) not in (os.getpid(), servicer_zygote[0])  # a harness of its own, not the zygote itself


def test_a_zygote_that_died_is_started_again_at_the_next_harness_start_and_the_orphan_harness_can_still_be_stopped():
    import sys

    servicer = WorkerPoolServicer(use_process=True, python=sys.executable)
    try:
        first_zygote = servicer.zygote.pid
        assert not servicer.StartWorker(_start_request("1-1", f"localhost:{_free_port()}"), None).error
        [orphan] = _poll("harness 1-1", lambda: _harness_pids("1-1", servicer) or None)
        assert _parent(orphan) == first_zygote
        os.kill(first_zygote, signal.SIGKILL)
        _poll("the zygote's end", lambda: not servicer.zygote.running)

        assert not servicer.StartWorker(_start_request("2-1", f"localhost:{_free_port()}"), None).error

        [harness] = _poll("harness 2-1", lambda: _harness_pids("2-1", servicer) or None)
        assert servicer.zygote.pid != first_zygote and _parent(harness) == servicer.zygote.pid
        assert _alive(orphan)  # the zygote's death ends none of its harnesses
        assert not servicer.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"), None).error
        assert not _alive(orphan)
    finally:
        servicer.stop_all()


def test_a_zygote_that_cannot_start_again_is_reported_and_harnesses_start_as_fresh_processes(caplog):
    """The zygote died and its interpreter is gone from disk (the venv replaced under a running pool): its start
    again fails, and the harness is started all the same, as Beam's command, and so are the later ones."""
    import sys

    servicer = WorkerPoolServicer(use_process=True, python=sys.executable)
    try:
        zygote = servicer.zygote
        zygote.python = "/nonexistent/python"
        os.kill(zygote.pid, signal.SIGKILL)
        _poll("the zygote's end", lambda: not zygote.running)
        with caplog.at_level("ERROR", logger="parity.replay.worker_pool"):
            assert not servicer.StartWorker(_start_request("1-1", f"localhost:{_free_port()}"), None).error
        assert servicer.zygote is None
        assert "cannot start the harness zygote with /nonexistent/python" in caplog.text
        assert "SDK harnesses start as fresh processes (--harness_start spawn) from now on" in caplog.text
        [harness] = _poll("harness 1-1", lambda: _harness_pids("1-1", servicer) or None)
        assert _parent(harness) == os.getpid()
        assert not servicer.StartWorker(_start_request("2-1", f"localhost:{_free_port()}"), None).error
        [later] = _poll("harness 2-1", lambda: _harness_pids("2-1", servicer) or None)
        assert _parent(later) == os.getpid()
    finally:
        servicer.stop_all()


def _release(gate) -> bool:
    """Lets a process blocked reading the FIFO `gate` go on; False when none reads it."""
    try:
        fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no reader
        return False
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)
    return True


def test_a_stop_is_answered_while_a_zygote_started_again_still_imports(tmp_path, monkeypatch):
    """A zygote started again waits for its imports, up to READY_TIMEOUT: a StopWorker that comes meanwhile, for a
    harness already started, is answered while the import is still held (here until the test lets it go)."""
    import sys

    hold, waiting, gate = tmp_path / "hold", tmp_path / "waiting", tmp_path / "gate"
    os.mkfifo(gate)
    (tmp_path / "held_import.py").write_text(
        f"import os\nif os.path.exists({str(hold)!r}):\n    open({str(waiting)!r}, 'w').close()\n"
        f"    with open({str(gate)!r}, 'rb') as gate:\n        gate.read(1)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    servicer = WorkerPoolServicer(use_process=True, python=sys.executable, preload=("held_import",))
    answers = {}
    starting = threading.Thread(target=lambda: answers.update(
        start=servicer.StartWorker(_start_request("2-1", f"localhost:{_free_port()}"), None)), daemon=True)
    try:
        assert not servicer.StartWorker(_start_request("1-1", f"localhost:{_free_port()}"), None).error
        [first] = _poll("harness 1-1", lambda: _harness_pids("1-1", servicer) or None)
        hold.touch()
        os.kill(servicer.zygote.pid, signal.SIGKILL)
        _poll("the zygote's end", lambda: not servicer.zygote.running)
        starting.start()  # starts the zygote again, whose import of held_import waits at the gate
        _poll("the new zygote's held import", waiting.exists)
        stopped = threading.Event()
        threading.Thread(target=lambda: (servicer.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id="1-1"),
                                                             None), stopped.set()), daemon=True).start()

        assert stopped.wait(TIMEOUT), "the stop waited for the zygote's start"
        assert not _alive(first)
        assert starting.is_alive() and waiting.exists()  # the zygote still imports: nothing let it go yet

        assert _release(gate)
        starting.join(TIMEOUT)
        assert not starting.is_alive() and not answers["start"].error
        [second] = _poll("harness 2-1", lambda: _harness_pids("2-1", servicer) or None)
        assert _parent(second) == servicer.zygote.pid
    finally:
        _release(gate)
        if starting.is_alive():
            starting.join(TIMEOUT)
        servicer.stop_all()


def test_a_zygote_that_cannot_fork_safely_is_reported_and_harnesses_start_as_fresh_processes(tmp_path, monkeypatch,
                                                                                              caplog):
    """A preloaded module that starts a thread on import: a fork would copy a process whose other thread may hold
    a lock. The pool says so and starts each harness as Beam's command."""
    import sys

    (tmp_path / "starts_a_thread.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), *sys.path]))
    with caplog.at_level("ERROR", logger="parity.replay.worker_pool"):
        servicer = WorkerPoolServicer(use_process=True, python=sys.executable, preload=("starts_a_thread",))
    try:
        assert servicer.zygote is None
        assert "the harness zygote runs 2 threads after its imports" in caplog.text
        assert "SDK harnesses start as fresh processes (--harness_start spawn) from now on" in caplog.text
        assert not servicer.StartWorker(_start_request("1-1", f"localhost:{_free_port()}"), None).error
        [harness] = _poll("harness 1-1", lambda: _harness_pids("1-1", servicer) or None)
        assert _parent(harness) == os.getpid()
    finally:
        servicer.stop_all()


def test_a_named_harness_interpreter_gets_a_fresh_process_per_harness_not_a_fork(tmp_path):
    """`--harness_python` may name a Python with Beam only: no zygote (which imports parity), Beam's command."""
    import sys

    other = tmp_path / "python"
    other.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    other.chmod(other.stat().st_mode | stat.S_IXUSR)
    servicer = WorkerPoolServicer(use_process=True, python=str(other))
    try:
        assert servicer.harness_start == "fork" and servicer.zygote is None
        assert not servicer.StartWorker(_start_request("1-1", f"localhost:{_free_port()}"), None).error
        [harness] = _poll("harness 1-1", lambda: _harness_pids("1-1", servicer) or None)
        assert _parent(harness) == os.getpid()

        def command() -> list[bytes]:
            with open(f"/proc/{harness}/cmdline", "rb") as handle:
                return handle.read().split(b"\0")

        # Beam's command, once the script has `exec`ed the pool's Python (`/bin/sh SCRIPT -c ...` until then)
        _poll("Beam's harness command", lambda: command()[0] == sys.executable.encode())
        assert b'SdkHarness("localhost:' in command()[2]
    finally:
        servicer.stop_all()
