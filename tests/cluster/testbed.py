"""The cluster test bed's parts, each started by the test session and stopped at its end (tests/cluster/conftest.py):

- an S3 server (moto in server mode) on 127.0.0.1, reached through Beam's real S3 filesystem;
- the standalone Flink 1.19 cluster of scripts/flink_cluster.sh with two TaskManagers and a fixed-delay restart
  strategy, on ports of its own (the LOOPBACK cluster test in tests/flink keeps 8081);
- a Beam SDK worker pool run as another Unix user (`parityworker`), with its own HOME and TMPDIR: the Python
  work of an `--environment_type=EXTERNAL` job runs there, and the client's folders (pytest's tmp_path is
  root-owned, mode 700) are closed to it, as another host's disk would be.

Every process is started here and stopped by its own id (its process group), never by name. Faults are injected
by pid too: an SDK harness of the pool (`WorkerPool.connected`, `unconnected`: whether it has reached its
TaskManager yet, from /proc), a TaskManager (`FlinkCluster.taskmanager_serving`, `kill_taskmanager`, then
`add_taskmanager` in its place).
"""
from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FLINK_SCRIPT = os.path.join(ROOT, "scripts", "flink_cluster.sh")
WORKER_USER = os.environ.get("PARITY_TESTBED_USER", "parityworker")
S3_CREDENTIALS = ("testing", "testing", "us-east-1")  # moto takes any key; Beam needs some


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(what: str, ready, process: subprocess.Popen | None, timeout: float, log: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} while starting{_tail(log)}")
        if ready():
            return
        time.sleep(0.3)
    raise RuntimeError(f"{what} did not answer within {timeout:g} s{_tail(log)}")


def _tail(log: str | None) -> str:
    if not log or not os.path.exists(log):
        return ""
    with open(log, encoding="utf-8", errors="replace") as handle:
        return ":\n" + "".join(handle.readlines()[-20:])


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _stop(process: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM to the process group this module started (start_new_session), then SIGKILL."""
    if process.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass(frozen=True)
class S3Server:
    """moto's S3 API on 127.0.0.1:port; `options` are Beam's own S3 pipeline options for it."""
    port: int
    process: subprocess.Popen

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def options(self) -> list[str]:
        key, secret, region = S3_CREDENTIALS
        return [f"--s3_endpoint_url={self.endpoint}", f"--s3_access_key_id={key}",
                f"--s3_secret_access_key={secret}", f"--s3_region_name={region}"]

    @property
    def storage(self):
        """parity's storage context for this server (`parity.storage.context.Storage`)."""
        from parity.storage.context import Storage

        return Storage.of(self.options)

    def client(self):
        import boto3

        key, secret, region = S3_CREDENTIALS
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=key,
                            aws_secret_access_key=secret, region_name=region)

    def stop(self) -> None:
        _stop(self.process)


def start_s3(log_dir: str, timeout: float = 60) -> S3Server:
    port = free_port()
    log = os.path.join(log_dir, "moto.log")
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    try:
        _wait("the moto S3 server", ready, process, timeout, log)
    except BaseException:
        _stop(process)
        raise
    return S3Server(port, process)


def ensure_worker_user(user: str = WORKER_USER) -> pwd.struct_passwd:
    """The worker pool's Unix user, created when missing (the test bed runs as root, as CI does)."""
    try:
        return pwd.getpwnam(user)
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise RuntimeError(f"the cluster test bed needs root to create the user {user!r} (or create it first)")
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                   check=True, capture_output=True)
    return pwd.getpwnam(user)


def _open_for(entry: pwd.struct_passwd, paths: list[str]) -> list[str]:
    """Let the worker user traverse every folder above `paths` (x, never r): the interpreter of the venv may lie
    under root's home (pyenv). With setfacl, only that user gets it; without, `o+x` on the folders that lack it.
    Returns what was changed, for the session's log."""
    changed = []
    seen = set()
    for path in paths:
        folder = os.path.dirname(os.path.realpath(path))
        while folder not in seen:
            seen.add(folder)
            mode = os.stat(folder).st_mode
            if not mode & 0o001:
                if shutil.which("setfacl"):
                    subprocess.run(["setfacl", "-m", f"u:{entry.pw_name}:x", folder], check=True)
                else:
                    os.chmod(folder, (mode & 0o7777) | 0o001)
                changed.append(folder)
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
    return changed


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process `pid` holds open (its /proc fd links `socket:[N]`)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        pass
    return inodes


def _tcp_sockets() -> list[tuple[int, int, str, str]]:
    """(local port, remote port, state, inode) of every TCP socket of the host (/proc/net/tcp and tcp6); state 01
    is ESTABLISHED, 0A is LISTEN."""
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as handle:
                lines = handle.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            rows.append((int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16), fields[3],
                         fields[9]))
    return rows


def _connected(pid: int) -> bool:
    """True once process `pid` holds an ESTABLISHED TCP connection (an SDK harness: to its runner)."""
    inodes = _socket_inodes(pid)
    return bool(inodes) and any(state == "01" and inode in inodes for _, _, state, inode in _tcp_sockets())


def _listener(port: int, pids: list[int]) -> int | None:
    """Which of `pids` listens on `port`."""
    inodes = {inode for local, _, state, inode in _tcp_sockets() if local == port and state == "0A"}
    return next((pid for pid in pids if inodes & _socket_inodes(pid)), None)


def _is_zygote(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return b"parity.replay.harness_zygote" in handle.read()
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    """The live child processes of `pid`: an exited one its parent has not reaped yet (a zombie) is not one, and
    killing it would kill nothing."""
    out = subprocess.run(["ps", "-o", "pid=,stat=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(child) for child, state in (line.split() for line in out.stdout.splitlines() if line.strip())
            if not state.startswith("Z")]


@dataclass(frozen=True)
class WorkerPool:
    """parity's SDK worker pool (`parity.replay.worker_pool`, Beam's with StopWorker safe against repeated worker
    ids) as `user`: `--environment_config` for EXTERNAL jobs."""
    port: int
    user: str
    home: str
    process: subprocess.Popen
    log: str

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    @property
    def options(self) -> list[str]:
        return ["--environment_type=EXTERNAL", f"--environment_config={self.address}"]

    def children(self) -> list[int]:
        """The pids of the SDK harnesses the pool runs now: the child processes of the pool (which is itself the
        child of `runuser`, the process this module started) and of its zygote (`--harness_start fork`, the
        default: parity/replay/harness_zygote.py), the zygote itself left out."""
        found = []
        for pool in _children(self.process.pid):
            for child in _children(pool):
                if _is_zygote(child):
                    found.extend(_children(child))
                else:
                    found.append(child)
        return found

    def connected(self) -> list[int]:
        """The SDK harnesses that have connected to their TaskManager (an ESTABLISHED TCP connection): those
        whose death fails a task. One that dies before it connects is never noticed (docs/flink.md)."""
        return [pid for pid in self.children() if _connected(pid)]

    def unconnected(self) -> list[int]:
        return [pid for pid in self.children() if not _connected(pid)]

    @staticmethod
    def control_port(harness: int) -> int | None:
        """The port of the TaskManager's control service a harness was started for (from its command line,
        `SdkHarness("localhost:PORT", ...)`; a forked harness has its zygote's command line: None)."""
        try:
            with open(f"/proc/{harness}/cmdline", "rb") as handle:
                command = handle.read().decode(errors="replace")
        except OSError:
            return None
        found = re.search(r'SdkHarness\("[^":]*:(\d+)"', command)
        return int(found.group(1)) if found else None

    def stop(self) -> None:
        _stop(self.process)


def start_worker_pool(base: str, timeout: float = 60, harness_python: str | None = None,
                      pythonpath: tuple[str, ...] = (), harness_start: str | None = None) -> WorkerPool:
    """`base` is a folder of the worker user's own (HOME and TMPDIR under it), outside the client's folders.
    `harness_python`: what the pool runs as each harness's interpreter (default: its own), e.g. `/bin/false` for
    harnesses that die on start, before they connect. `pythonpath`: folders put before the repository on the pool's
    PYTHONPATH (the config's modules, shipped to the workers as docs/flink.md says). `harness_start`: the pool's
    `--harness_start` (fork or spawn; default: the pool's, fork)."""
    entry = ensure_worker_user()
    python = sys.executable
    opened = _open_for(entry, [python, os.path.realpath(python), os.path.join(ROOT, "parity", "__init__.py")])
    home = os.path.join(base, "home")
    tmp = os.path.join(base, "tmp")
    for folder in (base, home, tmp):
        os.makedirs(folder, exist_ok=True)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        os.chmod(folder, 0o700)
    port = free_port()
    log = os.path.join(base, "worker_pool.log")
    env = {
        # Not the venv's bin: parity's pool starts each SDK harness with its own interpreter, not a `python` from
        # PATH (there is none in /usr/bin here; Beam's pool failed without the venv's bin first on PATH).
        "PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": tmp, "USER": entry.pw_name,
        "LANG": "C.UTF-8", "PYTHONPATH": os.pathsep.join((*pythonpath, ROOT)),  # ROOT: this checkout's parity
        "PYTHONDONTWRITEBYTECODE": "1",  # the repository is not the worker's to write
    }
    with open(log, "wb") as out:
        os.chown(log, entry.pw_uid, entry.pw_gid)
        process = subprocess.Popen(
            # runuser resets HOME to the passwd entry's: `env` sets the pool's own again.
            [shutil.which("runuser") or "/usr/sbin/runuser", "-u", entry.pw_name, "--", "/usr/bin/env", f"HOME={home}", python, "-m", "parity.replay.worker_pool",
             f"--service_port={port}", *([f"--harness_python={harness_python}"] if harness_python else []),
             *([f"--harness_start={harness_start}"] if harness_start else [])],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=home,
            start_new_session=True)
    try:
        _wait(f"the SDK worker pool (as {entry.pw_name}, opened {opened or 'nothing'})",
              lambda: _port_open(port), process, timeout, log)
    except BaseException:
        _stop(process)
        raise
    return WorkerPool(port, entry.pw_name, home, process, log)


@dataclass(frozen=True)
class FlinkCluster:
    """scripts/flink_cluster.sh with two TaskManagers, on its own REST and RPC ports and run folder."""
    rest_port: int
    env: dict

    @property
    def master(self) -> str:
        return f"localhost:{self.rest_port}"

    @property
    def rest(self) -> str:
        """Flink's REST API, as parity's PARITY_FLINK_REST names it."""
        return f"http://{self.master}"

    def script(self, command: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run([FLINK_SCRIPT, command], capture_output=True, text=True, env=self.env,
                              timeout=timeout)

    def overview(self) -> dict:
        import json

        with urllib.request.urlopen(f"http://{self.master}/overview", timeout=10) as response:
            return json.load(response)

    def get(self, path: str) -> dict:
        import json

        with urllib.request.urlopen(f"http://{self.master}{path}", timeout=10) as response:
            return json.load(response)

    def failures(self) -> int:
        """How many task failures Flink recorded (and recovered from, or not) over all jobs so far."""
        jobs = self.get("/jobs/overview")["jobs"]
        return sum(len(self.get(f"/jobs/{job['jid']}/exceptions").get("exceptionHistory", {}).get("entries", []))
                   for job in jobs)

    def taskmanager_pids(self) -> list[int]:
        """The TaskManagers' pids, from the pid file flink-daemon.sh keeps in the run folder."""
        pid_dir = os.path.join(self.env["PARITY_FLINK_RUN_DIR"], "pid")
        pids = []
        for name in sorted(os.listdir(pid_dir)):
            if "taskexecutor" in name:
                with open(os.path.join(pid_dir, name), encoding="utf-8") as handle:
                    pids += [int(line) for line in handle.read().split()]
        return pids

    def jobs(self) -> dict[str, str]:
        """Every job the cluster knows: id -> state (RUNNING, FINISHED, CANCELED, ...)."""
        return {job["id"]: job["status"] for job in self.get("/jobs")["jobs"]}

    def cancel_running(self) -> list[str]:
        """Cancels every job still running (after a test that failed half-way), so later tests get the slots."""
        running = [jid for jid, state in self.jobs().items() if state in ("RUNNING", "RESTARTING", "CREATED")]
        for jid in running:
            request = urllib.request.Request(f"http://{self.master}/jobs/{jid}?mode=cancel", method="PATCH")
            with urllib.request.urlopen(request, timeout=10):
                pass
        return running

    def taskmanager_ids(self) -> set[str]:
        return {tm["id"] for tm in self.get("/taskmanagers")["taskmanagers"]}

    def taskmanager_serving(self, harness: int) -> int | None:
        """The pid of the TaskManager whose control service `harness` was started for (its command line's port),
        or for a forked harness, the one that listens on a port it is connected to (every service a harness
        reaches is its TaskManager's)."""
        port = WorkerPool.control_port(harness)
        if port is not None:
            return _listener(port, self.taskmanager_pids())
        inodes = _socket_inodes(harness)
        remote = {port for _, port, state, inode in _tcp_sockets() if state == "01" and inode in inodes}
        return next((pid for pid in (_listener(port, self.taskmanager_pids()) for port in sorted(remote))
                     if pid is not None), None)

    def processing(self, harnesses: list[int]) -> list[int]:
        """Those of `harnesses` connected to the three services of a TaskManager a harness uses (control, state
        and data; which port is which is not told): processing bundles. A harness killed between its control and
        its data connection leaves its tasks waiting 3 minutes for the data client (Beam's GrpcDataService, "No
        client connected within timeout") before they fail; two connections are control and state at times."""
        sockets = _tcp_sockets()
        taskmanager_inodes = set().union(*(_socket_inodes(pid) for pid in self.taskmanager_pids()))
        serving = {local for local, _, state, inode in sockets if state == "0A" and inode in taskmanager_inodes}
        found = []
        for harness in harnesses:
            inodes = _socket_inodes(harness)
            remote = {port for _, port, state, inode in sockets if state == "01" and inode in inodes}
            if len(remote & serving) >= 3:
                found.append(harness)
        return found

    def kill_taskmanager(self, pid: int, timeout: float = 30) -> None:
        """SIGKILLs one TaskManager; the script's `status` must then take its pid out of flink-daemon.sh's pid file
        (so that `stop` never signals that number again: another process may get it) and say so."""
        os.kill(pid, signal.SIGKILL)
        _wait(f"TaskManager {pid} to exit", lambda: not os.path.exists(f"/proc/{pid}"), None, timeout)
        done = self.script("status", timeout=60)
        if f"removed TaskManager pid {pid} " not in done.stderr or pid in self.taskmanager_pids():
            raise AssertionError(f"scripts/flink_cluster.sh status left the killed TaskManager {pid} in its pid "
                                 f"file: {done.stderr[-2000:]}")

    def add_taskmanager(self, before: set[str], timeout: float = 120) -> None:
        """Starts a TaskManager in place of a killed one and waits until the cluster lists as many as it started
        with: the survivors of `before` (the ids before the kill) and one new. A killed TaskManager stays
        listed until its heartbeats fail."""
        done = self.script("add-taskmanager", timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/flink_cluster.sh add-taskmanager (exit {done.returncode}):\n"
                               f"{done.stderr[-3000:]}")
        want = int(self.env["PARITY_FLINK_TASKMANAGERS"])

        def replaced() -> bool:
            now = self.taskmanager_ids()
            return len(now) == want and len(now - before) == 1

        _wait("the TaskManager started in place of the killed one", replaced, None, timeout)

    def stop(self) -> None:
        self.script("stop", timeout=120)


def start_flink(run_dir: str, taskmanagers: int = 2, failover_strategy: str | None = None) -> FlinkCluster:
    """`failover_strategy`: Flink's `jobmanager.execution.failover-strategy` (the script's default, `full`, unless
    given: the soak tries `region`, Flink's own default, with it)."""
    rest, rpc = free_port(), free_port()
    # A killed TaskManager is noticed after 2 missed heartbeats 2 s apart (Flink's default: up to 50 s), and
    # the restarts that land on its slots before then each use an attempt: 10 attempts, not 3.
    env = dict(os.environ, PARITY_FLINK_RUN_DIR=run_dir, PARITY_FLINK_REST_PORT=str(rest),
               PARITY_FLINK_RPC_PORT=str(rpc), PARITY_FLINK_TASKMANAGERS=str(taskmanagers),
               PARITY_FLINK_SLOTS="2", PARITY_FLINK_RESTART_ATTEMPTS="10", PARITY_FLINK_HEARTBEAT_INTERVAL="2000",
               PARITY_FLINK_HEARTBEAT_TIMEOUT="20000")
    if failover_strategy:
        env["PARITY_FLINK_FAILOVER_STRATEGY"] = failover_strategy
    cluster = FlinkCluster(rest, env)
    done = cluster.script("start")
    if done.returncode != 0:
        cluster.stop()
        raise RuntimeError(f"scripts/flink_cluster.sh start (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return cluster


JOB_TIMEOUT = float(os.environ.get("PARITY_TESTBED_JOB_TIMEOUT", "300"))  # seconds one test bed job may take


@dataclass(frozen=True)
class TestBed:
    """The started test bed (`start_testbed`): what the cluster tests and scripts/soak_harness.py run checks on."""
    __test__ = False  # not a test class, whatever pytest thinks of the name

    s3: S3Server
    flink: FlinkCluster
    pool: WorkerPool
    job_endpoint: str
    bucket: str
    # A second pool, as the same user, for a check that runs at the same time as another: a pool knows its
    # harnesses by worker id, which every job numbers from 1 on each TaskManager; parity's pool stops the oldest
    # live harness under an id, which with two live jobs may be the other job's, and that job may then wait for
    # ever (docs/flink.md, "Concurrent jobs and one worker pool").
    other_pool: WorkerPool
    stops: tuple = ()  # what start_testbed started, in start order (not the S3 server: its caller's)
    extra_options: tuple = ()  # Beam options every job gets after the test bed's own (the soak's --beam-option)

    def options(self, parallelism: int = 2, pool: WorkerPool | None = None) -> list[str]:
        """Beam options for a job on the test bed: its job server, the worker pool, and Beam's S3 options."""
        return [f"--job_endpoint={self.job_endpoint}", *(pool or self.pool).options, f"--parallelism={parallelism}",
                *self.s3.options, *self.extra_options]

    def finish(self, result, timeout: float = JOB_TIMEOUT) -> None:
        """Waits for a Beam job on the test bed; one that has not ended in `timeout` s is cancelled and fails
        the test (an SDK harness that cannot start leaves a Flink job waiting for ever)."""
        import pytest
        from apache_beam.runners.runner import PipelineState

        state = result.wait_until_finish(duration=int(timeout * 1000))
        if not PipelineState.is_terminal(state):
            result.cancel()
            pytest.fail(f"the job did not finish within {timeout:g} s (state {state}); worker pool log: "
                        f"{self.pool.log}")
        assert state == PipelineState.DONE, state

    def url(self, *parts: str) -> str:
        return "s3://" + "/".join((self.bucket, *parts))

    def stop(self) -> None:
        for stop in reversed(self.stops):
            stop()


def start_testbed(base: str, s3: S3Server, failover_strategy: str | None = None) -> TestBed:
    """The worker pools, the Flink cluster and a Beam job server for it, under `base`, beside `s3` (which has the
    bucket `parity`); on a failure, what had started is stopped and the error raised."""
    from parity.replay.flink import JobServer, job_server_jar

    stops: list = []
    try:
        jar = job_server_jar()  # before anything starts: a missing jar fails at once
        pool = start_worker_pool(os.path.join(base, "worker"))
        stops.append(pool.stop)
        other_pool = start_worker_pool(os.path.join(base, "worker-other"))
        stops.append(other_pool.stop)
        flink = start_flink(os.path.join(base, "flink"), failover_strategy=failover_strategy)
        stops.append(flink.stop)
        server = JobServer(jar, flink.master)
        server.start()
        stops.append(server.stop)
    except BaseException:
        for stop in reversed(stops):
            stop()
        raise
    return TestBed(s3, flink, pool, server.endpoint, "parity", other_pool, tuple(stops))
