"""FlinkRunner defaults so that `--runner FlinkRunner` alone runs on an embedded Flink with the bundled jar.

Unless the user names a job server (`--job_endpoint`), parity starts the Beam Flink job server itself, once per
parity process and Flink master, waits for it with an upper bound (`PARITY_FLINK_START_TIMEOUT`, default 300 s;
Beam's own wait has none), passes `--job_endpoint=localhost:<port>` to Beam, and stops the JVM at exit. The job server's arguments and
port are Beam's launcher's (`parity.compat`); why parity starts, waits for and stops the JVM itself: `JobServer`.
"""
from __future__ import annotations

import atexit
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Sequence

from parity import compat
from parity.errors import RunnerError

FLINK_VERSION = "1.19"  # the Flink minor of the job server scripts/fetch_flink_jar.sh assembles
LOCAL_MASTER = "[local]"
DEFAULT_START_TIMEOUT = 300.0  # seconds; Beam's own portable tests allow 300 s too (apache/beam#22115)
ENDPOINT_PROBE_TIMEOUT = 30.0  # seconds a user-given --job_endpoint has to answer
JVM_OPTIONS = (
    "-Xmx1536m",
    # The client compiler only, and the serial collector: a job server parity starts lives for one command, and
    # a small check's job server spent most of its CPU compiling and collecting in parallel threads on the
    # machine's few cores (benchmarks/RESULTS.md, issue 44); a later -XX option in PARITY_FLINK_JVM_OPTIONS wins.
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    # What Beam's flink_runner_test.py passes on Java 17.
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
)
JVM_OPTIONS_ENV = "PARITY_FLINK_JVM_OPTIONS"  # more options for the job server's JVM, after JVM_OPTIONS
REST_ENV = "PARITY_FLINK_REST"  # where the client reaches Flink's REST API, when --flink_master does not say it
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # parity/replay/flink.py
_JARS = os.path.join(_REPO_ROOT, "vendor", "jars")
_FETCH_HINT = "run `make setup` (or scripts/fetch_flink_jar.sh) to fetch it through Maven, or set PARITY_FLINK_JAR"


def jar_properties() -> dict[str, str]:
    """vendor/jars/flink-job-server.properties: which jar, which Flink minor, which Beam versions."""
    path = os.path.join(_JARS, "flink-job-server.properties")
    props: dict[str, str] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if "=" in line and not line.lstrip().startswith("#"):
                    key, value = line.split("=", 1)
                    props[key.strip()] = value.strip()
    return props


def flink_version() -> str:
    return jar_properties().get("flink_version", FLINK_VERSION)


def job_server_jar() -> str:
    """The Flink job-server jar fetched at install time (vendor/jars or PARITY_FLINK_JAR)."""
    explicit = os.environ.get("PARITY_FLINK_JAR")
    if explicit:
        if not os.path.isfile(explicit):
            raise RunnerError(f"PARITY_FLINK_JAR={explicit} does not exist; {_FETCH_HINT.split(', or')[0]}")
        return explicit
    named = jar_properties().get("jar")
    if named and os.path.isfile(os.path.join(_JARS, named)):
        return os.path.join(_JARS, named)
    found = sorted(glob.glob(os.path.join(_JARS, "beam-runners-flink-*-job-server-*.jar")))
    if not found:
        raise RunnerError(f"no Flink job-server jar found under {_JARS}; {_FETCH_HINT}")
    return found[-1]


def start_timeout() -> float:
    return _seconds("PARITY_FLINK_START_TIMEOUT", DEFAULT_START_TIMEOUT)


def job_timeout() -> float | None:
    """PARITY_FLINK_JOB_TIMEOUT: seconds one replay job on Flink may take, or None (unset: no bound).

    Beam's EXTERNAL environment waits without end for an SDK harness that the worker pool started but that died
    before it connected (the TaskManager logs "Still waiting for startup of environment" every 2 minutes, the
    job stays RUNNING, no task fails, Flink's restart strategy never runs): only a bound ends such a job."""
    return _seconds("PARITY_FLINK_JOB_TIMEOUT", None)


def _seconds(name: str, default: float | None) -> float | None:
    """The positive number of seconds the environment variable `name` gives, or `default` when it is unset.

    Raises:
        RunnerError: it is not a positive number, naming the variable and its value.
    """
    raw = os.environ.get(name, "")
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise RunnerError(f"{name}={raw!r}: expected a number of seconds") from None
    if value <= 0:
        raise RunnerError(f"{name}={raw!r}: expected a positive number of seconds")
    return value


class JobTimeout(RunnerError):
    """A Flink job still running after PARITY_FLINK_JOB_TIMEOUT; `said(outcome)` is the message once the job's
    cancel (`parity.replay.cancel.end_job`) has said how it went."""

    def __init__(self, timeout: float, state: Any):
        self.timeout = timeout
        self.state = state
        super().__init__(self.said("it is being cancelled"))

    def said(self, outcome: str) -> str:
        return (f"the Flink job did not finish within PARITY_FLINK_JOB_TIMEOUT={self.timeout:g} s (state "
                f"{self.state}); {outcome}. A job that waits for ever without a failed task is often one whose SDK "
                f"harness died before it connected: the TaskManagers' logs then say 'Still waiting for startup of "
                f"environment'. Check the SDK worker pool (its log, its memory) and run again, or raise "
                f"PARITY_FLINK_JOB_TIMEOUT")


def bounded(result: Any, timeout: float | None) -> Any:
    """`result` (a Beam PipelineResult) whose `wait_until_finish()` waits at most `timeout` s, then raises
    JobTimeout (exit 2); None leaves it unbounded. The caller cancels the job (`parity.replay.job`: every way a
    replay ends early cancels its job, on the job server and on Flink)."""
    if timeout is None:
        return result
    wait = result.wait_until_finish

    def wait_until_finish(duration: int | None = None) -> Any:
        if duration:
            return wait(duration)
        from apache_beam.runners.runner import PipelineState

        state = wait(int(timeout * 1000))
        if PipelineState.is_terminal(state):
            return state
        raise JobTimeout(timeout, state)

    result.wait_until_finish = wait_until_finish
    return result


def _answers(endpoint: str, timeout: float) -> bool:
    """True once a Beam job service answers at `endpoint` (anything but UNAVAILABLE), as Beam's tests probe.

    Not Beam's `ExternalJobServer.start` (runners/portability/job_server.py): it waits for the channel to be
    ready until its timeout, so a dead `--job_endpoint` would take the whole 30 s; GetState fails at once."""
    import grpc
    from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        stub = beam_job_api_pb2_grpc.JobServiceStub(channel)
        try:
            stub.GetState(beam_job_api_pb2.GetJobStateRequest(job_id="[parity-probe]"), timeout=timeout)
        except grpc.RpcError as exc:
            return exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        return True


def _die_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that makes the JVM get SIGTERM when parity dies (Linux PR_SET_PDEATHSIG), or None.

    libc is loaded here, in the parent: the child between fork and exec only makes the one call. Only from the
    main thread, because the signal follows the thread that forked."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):  # best effort: atexit stops the JVM on an ordinary exit anyway
        return None

    def preexec() -> None:
        prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG

    return preexec


class JobServer:
    """A Beam Flink job server JVM (`java -jar JAR --flink-master ... --job-port P`) that parity runs.

    Of Beam's launcher it reuses the Flink job server's arguments and the port pick
    (`compat.flink_job_server_arguments`, `compat.free_port`). It launches, waits for and stops the JVM itself,
    because Beam's `SubprocessServer` (apache_beam/utils/subprocess_server.py; lines of Beam 2.77, then of
    2.59) cannot do it as parity needs:
    - its `_really_start_process` (:262-269; :198-205) pipes the JVM's output into a Python logger (2.59: its
      module's, shared with every Beam subprocess) and sets no parent-death signal: no log file for the start
      errors' tail, the port-taken check and Flink's REST address (`rest_after`);
    - its `start` waits `while True` (:226; :172), with no upper bound for PARITY_FLINK_START_TIMEOUT, and
      tries the same command on the same port 3 times, 1 s apart, on 2.77 (:204, :250), once on 2.59: no new
      port when another process took it, and a different start on each Beam;
    - its stop (`_really_stop_process`, :318; :238) is private and reaches only the processes of its `_cache`.
    """

    def __init__(self, jar: str, flink_master: str = LOCAL_MASTER, *, port: int | None = None,
                 java: str | None = None, jvm_options: Sequence[str] = JVM_OPTIONS) -> None:
        self.jar = jar
        self.flink_master = flink_master
        self.port = port or compat.free_port()
        self.java = java or os.environ.get("PARITY_JAVA") or "java"
        self.jvm_options = [*jvm_options, *shlex.split(os.environ.get(JVM_OPTIONS_ENV, ""))]
        self.start_seconds: float | None = None
        self._process: subprocess.Popen | None = None
        self._dir: str | None = None
        self.log_path: str | None = None

    @property
    def endpoint(self) -> str:
        return f"localhost:{self.port}"

    def command(self, artifacts_dir: str) -> list[str]:
        """`java JVM_OPTIONS -jar JAR` and then Beam's Flink job-server arguments with `--artifact-port 0` (any
        free port) and `--expansion-port -1` (no expansion service: parity runs no cross-language transform, and
        it is one port fewer listening on every interface, as the job and artifact ports do whatever --job-host
        says; docs/flink.md). The first part is parity's: Beam's `JavaJarJobServer.subprocess_cmd_and_endpoint`
        puts the JVM options after `-jar` on Beam 2.59 (runners/portability/job_server.py:153) and before it on
        2.77 (:178), and it resolves the jar through `local_jar`, which downloads one it does not find."""
        return [self.java, *self.jvm_options, "-jar", self.jar,
                *compat.flink_job_server_arguments(self.flink_master, self.port, 0, -1, artifacts_dir)]

    def _log_tail(self, lines: int = 8) -> str:
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, encoding="utf-8", errors="replace") as handle:
            tail = [line.rstrip() for line in handle.readlines()[-lines:] if line.strip()]
        return ("; last lines of its log:\n  " + "\n  ".join(tail)) if tail else ""

    def _port_taken(self) -> bool:
        if not self.log_path or not os.path.exists(self.log_path):
            return False
        with open(self.log_path, encoding="utf-8", errors="replace") as handle:
            return "Address already in use" in handle.read()

    def start(self, timeout: float | None = None, retry_port: bool = True) -> str:
        """Starts the JVM and waits until it answers; returns the endpoint. Raises RunnerError (exit 2)."""
        if self._process is not None and self._process.poll() is None:
            return self.endpoint
        timeout = start_timeout() if timeout is None else timeout
        if shutil.which(self.java) is None:
            raise RunnerError(f"cannot start the Flink job server: {self.java!r} is not on PATH; install a Java 17 "
                              f"runtime (Debian: apt-get install openjdk-17-jre-headless) or set PARITY_JAVA")
        if not os.path.isfile(self.jar):
            raise RunnerError(f"the Flink job-server jar {self.jar} does not exist; {_FETCH_HINT}")
        self._dir = tempfile.mkdtemp(prefix="parity-flink-")
        artifacts = os.path.join(self._dir, "artifacts")
        os.makedirs(artifacts)
        self.log_path = os.path.join(self._dir, "job-server.log")
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(  # noqa: S603 - our own command line
                self.command(artifacts), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent())
        while True:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                if self._port_taken() and retry_port:  # another process took the free port we picked
                    self.stop()
                    self.port = compat.free_port()
                    return self.start(timeout=max(timeout - (time.monotonic() - started), 1.0), retry_port=False)
                self._dir = None  # keep the log the message names
                raise RunnerError(f"the Flink job server exited with code {code} while starting "
                                  f"({self.java} -jar {self.jar}, port {self.port}, log {self.log_path})"
                                  f"{self._log_tail()}")
            remaining = timeout - (time.monotonic() - started)
            if remaining <= 0:
                self.stop(keep_log=True)
                self._dir = None  # keep the log the message names
                raise RunnerError(
                    f"the Flink job server did not answer within {timeout:g} s ({self.java} -jar {self.jar} "
                    f"--flink-master {self.flink_master}, job port {self.port}; its log: {self.log_path}). "
                    f"Check that Java 17 runs the jar and that about 2 GB of memory are free; on a slow machine "
                    f"raise PARITY_FLINK_START_TIMEOUT (seconds), or start a job server yourself and pass "
                    f"`-- --job_endpoint=localhost:PORT`{self._log_tail()}")
            if _answers(self.endpoint, timeout=min(5.0, max(remaining, 0.1))):
                break
            time.sleep(min(0.25, max(remaining, 0.0)))
        self.start_seconds = time.monotonic() - started
        return self.endpoint

    def stop(self, keep_log: bool = False) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._dir and not keep_log:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def rest_after(self, offset: int) -> str | None:
        """The REST address (`http://localhost:PORT`) the embedded Flink says in this server's log after byte
        `offset`: with `[local]`, each job runs on a MiniCluster of its own, which says it when the job starts."""
        found = self.rests_after(offset)
        return found[0] if found else None

    def rests_after(self, offset: int) -> list[str]:
        """Every REST address the embedded Flink says in this server's log after byte `offset`, in order: one per
        job started since, two when both sides' jobs run at once (`parity.replay.sides_at_once`)."""
        if not self.log_path or not os.path.exists(self.log_path):
            return []
        with open(self.log_path, "rb") as handle:
            handle.seek(offset)
            found = re.findall(rb"Rest endpoint listening at (\S+)", handle.read())
        addresses = [one.decode("ascii", "replace") for one in found]
        return [one if "://" in one else f"http://{one}" for one in addresses]

    def log_size(self) -> int:
        return os.path.getsize(self.log_path) if self.log_path and os.path.exists(self.log_path) else 0

    def __enter__(self) -> "JobServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_SERVERS: dict[tuple[str, str], JobServer] = {}
_LOCK = threading.Lock()
# Endpoints of the job servers this process (or its parent parity process) started, by "jar|master": the
# noise replays of `parity check --noise` and the second side run in child processes and reuse the parent's
# job server, given to them in their environment (`child_environment`), never in this process's own.
_INHERITED = "PARITY_FLINK_JOB_SERVERS"
_published: dict[str, str] = {}


def _inherited_endpoint(jar: str, flink_master: str) -> str | None:
    try:
        known = json.loads(os.environ.get(_INHERITED, "") or "{}")
    except ValueError:
        return None
    endpoint = known.get(f"{jar}|{flink_master}") if isinstance(known, dict) else None
    return endpoint if isinstance(endpoint, str) and _answers(endpoint, timeout=5.0) else None


def _publish(jar: str, flink_master: str, endpoint: str) -> None:
    _published[f"{jar}|{flink_master}"] = endpoint


def child_environment() -> dict[str, str]:
    """The environment entry a child parity process needs to reuse the job servers this process started or
    inherited (empty when there are none), for the caller to add to the child's environment: a library call
    leaves `os.environ` as it found it."""
    try:
        known = json.loads(os.environ.get(_INHERITED, "") or "{}")
    except ValueError:
        known = {}
    known = {**(known if isinstance(known, dict) else {}), **_published}
    return {_INHERITED: json.dumps(known, sort_keys=True)} if known else {}


def shared_job_endpoint(jar: str, flink_master: str = LOCAL_MASTER) -> str:
    """The endpoint of a job server for (jar, master): one a parent parity process started, or one this process
    starts on first use (and stops at exit)."""
    with _LOCK:
        server = _SERVERS.get((jar, flink_master))
        if server is None:
            inherited = _inherited_endpoint(jar, flink_master)
            if inherited:
                return inherited
            server = JobServer(jar, flink_master)
            _SERVERS[(jar, flink_master)] = server
            # atexit only: Beam's StopOnExitJobServer also replaces the process's SIGINT handler
            # (runners/portability/job_server.py; on 2.59 with its `stop`, :82, which takes no (signal, frame))
            atexit.register(server.stop)
        fresh = server.start_seconds is None
        endpoint = server.start()
        if fresh:
            from parity.console import progress

            progress.event("flink_job_server_started", endpoint=endpoint, flink_master=flink_master,
                           seconds=round(server.start_seconds or 0.0, 1))
        _publish(jar, flink_master, endpoint)
        return endpoint


def stop_job_servers() -> None:
    """Stops every job server this process started (atexit does it too)."""
    with _LOCK:
        for server in _SERVERS.values():
            server.stop()
        _SERVERS.clear()
        os.environ.pop(_INHERITED, None)


def rest_source(flink_master: str | None, job_endpoint: str | None,
                job: str | None = None) -> Callable[[], str | None] | None:
    """Where Flink's REST API of a job about to be submitted will answer (`parity.replay.watch` reads the job's
    counts there while it runs), as a function that returns None until it is known; None when it cannot be
    known: a user's own job server, unless its `--flink_master` is passed too.

    `PARITY_FLINK_REST` (`http://HOST:PORT`) names it where the client reaches the cluster at another address
    than the job server does (a job server in a container). Else a `--flink_master` address is the cluster's
    REST address. The embedded Flink (`[local]`) of a job server this process started says its address in the
    server's log when the job starts; with `job` (the job's name), the address whose Flink runs a job of that
    name, since another job (the other side's, submitted at the same time) may have started its own first."""
    given = os.environ.get(REST_ENV) or (flink_master if flink_master not in (None, LOCAL_MASTER, "[auto]",
                                                                              "[collection]") else None)
    if given:
        url = given.rstrip("/") if "://" in given else f"http://{given.rstrip('/')}"
        return lambda: url
    with _LOCK:
        server = next((one for one in _SERVERS.values() if one.endpoint == job_endpoint
                       and one.flink_master == LOCAL_MASTER), None)
    if server is None:
        return None
    offset = server.log_size()
    known: list[str] = []

    def address() -> str | None:
        if not known:
            found = server.rests_after(offset)
            if job is not None and len(found) > 1:
                found = [one for one in found if _runs_job(one, job)]
            if not found:
                return None
            known.append(found[0])
        return known[0]

    return address


def steps_in_this_process(runner: str, args: Sequence[str] | None) -> bool:
    """Whether a job's steps run in the process that submits it: the in-process DirectRunner's, and LOOPBACK
    workers' (parity's default on Flink, `flink_defaults`); not a worker pool's (EXTERNAL), PROCESS or DOCKER
    harnesses (DOCKER: Beam's portable default)."""
    if runner == "DirectRunner":
        return True
    environment = option_value(args or [], "--environment_type")
    if environment is None:
        environment = "LOOPBACK" if runner == "FlinkRunner" else "DOCKER"
    return environment.upper() == "LOOPBACK"


def started_here(endpoint: str) -> bool:
    """Whether `endpoint` is a job server on an embedded Flink (`[local]`) that this process or its parent parity
    process started (`shared_job_endpoint`)."""
    with _LOCK:
        if any(server.endpoint == endpoint and server.flink_master == LOCAL_MASTER for server in _SERVERS.values()):
            return True
    known = json.loads(child_environment().get(_INHERITED, "{}"))
    return any(key.endswith(f"|{LOCAL_MASTER}") and value == endpoint for key, value in known.items())


def free_slots(rest: str) -> int | None:
    """The task slots free on the Flink cluster whose REST API is at `rest` (`/overview`), or None when it does
    not answer."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{rest.rstrip('/')}/overview", timeout=5.0) as response:  # noqa: S310
            return int(json.loads(response.read())["slots-available"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _runs_job(rest: str, name: str) -> bool:
    """Whether the Flink whose REST API is at `rest` lists a job named `name` (False when it does not answer)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{rest.rstrip('/')}/jobs/overview", timeout=5.0) as response:  # noqa: S310
            jobs = json.loads(response.read()).get("jobs", ())
    except (OSError, ValueError):
        return False
    return any(one.get("name") == name for one in jobs)


def _has(args: Sequence[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def option_value(args: Sequence[str], name: str) -> str | None:
    """The last value of `--name=value` or `--name value` in Beam-style arguments."""
    found = None
    for index, arg in enumerate(args):
        if arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
        elif arg == name and index + 1 < len(args):
            found = args[index + 1]
    return found


def flink_defaults(args: Sequence[str], *, start: bool = True) -> list[str]:
    """The user's Beam arguments plus parity's FlinkRunner defaults; the user's own options win.

    Defaults: the jar's Flink version, LOOPBACK SDK workers, parallelism 1. Without `--job_endpoint`, parity
    starts the job server (the bundled jar, or `--flink_job_server_jar`) for `--flink_master` (default `[local]`,
    an embedded Flink MiniCluster) and adds `--job_endpoint`; `start=False` only computes the options. Beam's
    `--flink_master` is not added: Beam's default `[auto]` makes the job server use the master it was started
    with (a `[local]` option would override the master of a user's job server). A user's `--job_endpoint` must
    answer at once.
    """
    args = list(args)
    if not _has(args, "--flink_version"):
        args.append(f"--flink_version={flink_version()}")
    if not _has(args, "--environment_type"):
        args.append("--environment_type=LOOPBACK")
    if not _has(args, "--parallelism"):
        args.append("--parallelism=1")
    endpoint = option_value(args, "--job_endpoint")
    if endpoint is None:
        jar = option_value(args, "--flink_job_server_jar") or job_server_jar()
        master = option_value(args, "--flink_master") or LOCAL_MASTER
        if start:
            args.append(f"--job_endpoint={shared_job_endpoint(jar, master)}")
    elif start and endpoint != "embed" and not _answers(endpoint, timeout=ENDPOINT_PROBE_TIMEOUT):
        raise RunnerError(f"--job_endpoint={endpoint}: no Beam job server answers there; start one (see "
                          f"docs/flink.md) or leave out --job_endpoint and parity starts the bundled one")
    return args
