"""The SDK worker pool to run beside each TaskManager for `--environment_type=EXTERNAL`:
`python -m parity.replay.worker_pool --service_port=50000`, Beam's own pool (`apache_beam.runners.worker.
worker_pool_main`, the same flags and harness command) with one change, in StopWorker.

Beam's servicer keeps the harness processes in a dict by worker id: StartWorker overwrites the entry, StopWorker
pops it and kills that process. Worker ids repeat: each job numbers its environments `1-1`, `2-1`, ... on each
TaskManager, so an id comes again with the next job, and from two TaskManagers that share a pool (a job restarted
after a TaskManager died starts `1-1` on the other one). Whenever a StopWorker(id) comes after the next
StartWorker(id), Beam's pool kills the new harness: one not yet connected leaves its TaskManager waiting for it
without end ("Still waiting for startup of environment"), one connected fails its tasks and a restart follows.

Here every harness started under an id is kept, in start order, and StopWorker(id) reaps one that has already
exited if there is one (the failed attempt's), else stops the oldest. Reaping a dead one rather than stopping a live
one errs on the safe side: a harness whose environment its TaskManager closes exits by itself when its control
stream ends (the log then shows it `had exited (0)` at a later stop). Two harnesses alive under one id (two jobs at
once through one pool) are still told apart by nothing but their age: keep a pool per concurrent job
(docs/flink.md). Starts and stops are logged with the id and pid (at INFO, which `main` shows; Beam's pool shows only
warnings).

Two more changes. A harness is started with the pool's own interpreter (`sys.executable`), where Beam's pool runs
a bare `python` from PATH: without the venv's bin first on PATH that failed (`No such file or directory:
'python'`), and with another Python first the harness could not import Beam or the user's modules and its job
waited until the job timeout. `--harness_python` (or `PARITY_HARNESS_PYTHON`) names another interpreter, and
`--container_executable` a Beam SDK container's `boot`, as in Beam's pool. And the pool listens on `localhost`
unless `--bind_address` says otherwise (Beam's binds every interface, `[::]`): a harness runs whatever code a
client that reaches the pool hands it, so the pool must not answer beyond the host unless the operator asks.

Last, a harness of the pool's own interpreter is forked from a process that has imported Beam's harness and
parity's worker modules once, at the pool's start (`harness_zygote`), not started as a fresh interpreter that
imports them again: `--harness_start spawn` (or PARITY_HARNESS_START) starts fresh ones, as Beam's pool does, and
so does a pool whose `--harness_python` names another interpreter (which may have Beam only).
"""
from __future__ import annotations

import argparse
import atexit
import logging
import os
import subprocess
import sys
import threading
import time
from typing import Sequence

from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.worker import worker_pool_main

from parity import compat
from parity.replay import harness_zygote, zygote_client

_LOGGER = logging.getLogger("parity.replay.worker_pool")  # not `__main__` under `python -m`
PYTHON_ENV = "PARITY_HARNESS_PYTHON"  # the interpreter the harnesses run, when --harness_python is not given
START_ENV = "PARITY_HARNESS_START"  # how harnesses start, when --harness_start is not given
HARNESS_STARTS = ("fork", "spawn")
DEFAULT_BIND = "localhost"


def harness_python(given: str | None = None) -> str:
    """The interpreter the pool starts harnesses with: `given` (--harness_python), else PARITY_HARNESS_PYTHON, else
    the pool's own, which has Beam and parity (a bare `python` from PATH may be another)."""
    return given or os.environ.get(PYTHON_ENV) or sys.executable


def harness_start_mode(given: str | None = None) -> str:
    """`fork` (from the pool's zygote, parity.replay.harness_zygote) or `spawn` (a fresh interpreter per harness):
    `given` (--harness_start), else PARITY_HARNESS_START, else fork."""
    start = (given or os.environ.get(START_ENV) or "fork").strip().lower()
    if start not in HARNESS_STARTS:
        raise ValueError(f"harness start {start!r}: expected one of {', '.join(HARNESS_STARTS)}")
    return start


def forks(python: str, start: str) -> bool:
    """Whether harnesses run by `python` are forked: `start` says fork and `python` is the pool's own interpreter
    (the zygote imports parity; another interpreter, which may have Beam only, gets a fresh process each time)."""
    return start == "fork" and os.path.abspath(python) == os.path.abspath(sys.executable)


# Starts of one worker id after the first, for harnesses that died before they connected: a harness that cannot
# start at all (an interpreter without Beam) is not started for ever.
MAX_RESTARTS = 3
# Seconds a stop of a worker id under which several harnesses are alive waits for one of them to exit (`_take`).
STOP_GRACE = 3.0


def harness_command(python: str, control_url: str, worker_id: str, state_cache_size: int,
                    data_buffer_time_limit_ms: int, connected_fd: int | None = None) -> list[str]:
    """Beam's harness command (`worker_pool_main`'s StartWorker, process mode) with `python` for its `python`.

    With `connected_fd`, the harness writes one byte to that pipe once its control channel to the runner is up
    (`SdkHarness.__init__` returns then) and closes it: the pool learns whether a harness that died had connected.
    No import of parity: `--harness_python` may name an interpreter that has Beam only."""
    harness = (f'SdkHarness("{control_url}",worker_id="{worker_id}",state_cache_size={int(state_cache_size)},'
               f"data_buffer_time_limit_ms={int(data_buffer_time_limit_ms)})")  # Beam's text, quotes and all
    if connected_fd is None:
        return [python, "-c", f"from apache_beam.runners.worker.sdk_worker import SdkHarness; {harness}.run()"]
    return [python, "-c", "import os; from apache_beam.runners.worker.sdk_worker import SdkHarness; "
                          f"h = {harness}; os.write({connected_fd}, b'c'); os.close({connected_fd}); h.run()"]


class WorkerPoolServicer(worker_pool_main.BeamFnExternalWorkerPoolServicer):
    """Beam's servicer with every harness kept by id in start order (Beam's own dict of them stays empty).

    With `harness_start` fork (the default) and the pool's own interpreter, harnesses are forked from a zygote
    started here, once (`harness_zygote`, with `preload` modules imported beside its own list); a zygote that
    cannot start is logged and harnesses start as fresh processes; one that died is started again at the next
    start of a harness, and if that fails the same follows.

    The pool's lock guards the harnesses kept by id, and nothing slow: a harness is started (or forked) outside
    it, and a zygote is started again and forked from under a lock of its own, so a StopWorker is not held up by a
    zygote that waits for its imports (up to `zygote_client.READY_TIMEOUT`)."""

    def __init__(self, *args, python: str | None = None, harness_start: str | None = None,
                 preload: Sequence[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.python = harness_python(python)
        self.harness_start = harness_start_mode(harness_start)
        self._lock = threading.Lock()
        self._zygote_lock = threading.Lock()  # one start of the zygote at a time, and no fork while it starts
        self._harnesses: dict[str, list[subprocess.Popen]] = {}
        self.zygote: zygote_client.Zygote | None = None
        settings = compat.pool_settings(self)
        if settings["use_process"] and not settings["container_executable"] \
                and forks(self.python, self.harness_start):
            modules = tuple(dict.fromkeys((*harness_zygote.PRELOAD, *preload)))
            self.zygote = zygote_client.Zygote(self.python, modules)
            self._start_zygote(again=False)
        atexit.register(self.stop_all)  # Beam's own exit hook sees only its (empty) dict

    def _start_zygote(self, again: bool) -> bool:
        """Starts the zygote (`again`: in place of one that ended); on failure logs why, and harnesses start as
        fresh processes from then on."""
        ended = self.zygote.process.poll() if again and self.zygote.process is not None else None
        try:
            ready = self.zygote.start()
        except zygote_client.ZygoteError as exc:
            _LOGGER.error("%s%s: SDK harnesses start as fresh processes (--harness_start spawn) from now on",
                          f"the harness zygote had ended ({ended}); " if again else "", exc)
            self.zygote = None
            return False
        if ready.get("failed"):
            _LOGGER.warning("the harness zygote could not import %s: harnesses import them themselves",
                            "; ".join(f"{module} ({why})" for module, why in ready["failed"].items()))
        _LOGGER.info("%sharness zygote pid %d: SDK harnesses are forked from it (imported %s)",
                     f"the harness zygote had ended ({ended}); started another, " if again else "",
                     self.zygote.pid, ", ".join(ready.get("imported", ())))
        return True

    def StartWorker(self, start_worker_request, context):  # noqa: N802 (gRPC's name)
        worker_id = start_worker_request.worker_id
        self._reap()
        settings = compat.pool_settings(self)
        if settings["use_process"] and not settings["container_executable"]:
            return self._start_harness(start_worker_request)
        with self._lock:  # Beam's StartWorker puts the process under the id: take it before another start can
            response = super().StartWorker(start_worker_request, context)
            process = compat.take_harness(self, worker_id)
            if process is not None:
                self._harnesses.setdefault(worker_id, []).append(process)
        if process is not None:
            _LOGGER.info("started SDK harness %s: pid %d", worker_id, process.pid)
        return response

    def _start_harness(self, request):
        """Beam's process-mode start with `self.python`, outside the pool's lock (a zygote started again first
        waits for its imports); the harness's stdout goes where the pool's does (Beam pipes it and never reads it:
        a harness that printed 64 KB would block). It is kept under its id before its watcher starts, which starts
        it again under the same id if it dies before it connects (`_watch`)."""
        try:
            process, connected = self._launch(request)
        except OSError as exc:
            _LOGGER.error("cannot start SDK harness %s with %s: %s", request.worker_id, self.python, exc)
            return beam_fn_api_pb2.StartWorkerResponse(
                error=f"parity's worker pool cannot start an SDK harness with {self.python}: {exc}; start the pool "
                      f"with the interpreter that has parity and Beam, or pass --harness_python")
        with self._lock:
            self._harnesses.setdefault(request.worker_id, []).append(process)
        self._start_watch(request, process, connected, restarts=0)
        _LOGGER.info("started SDK harness %s: pid %d%s", request.worker_id, process.pid, _how(process))
        return beam_fn_api_pb2.StartWorkerResponse()

    def _start_watch(self, request, process: subprocess.Popen, connected: int, restarts: int) -> None:
        threading.Thread(target=self._watch, args=(request, process, connected, restarts), daemon=True,
                         name=f"parity-harness-{request.worker_id}").start()

    def _launch(self, request) -> tuple[subprocess.Popen, int]:
        """A harness process for `request` (forked from the zygote when there is one, else a fresh interpreter)
        and the read end of the pipe it says it connected on, for its watcher."""
        settings = compat.pool_settings(self)
        connected, write_end = os.pipe()
        try:
            process = self._fork(request, settings, write_end)
            if process is None:
                command = harness_command(self.python, request.control_endpoint.url, request.worker_id,
                                          settings["state_cache_size"], settings["data_buffer_time_limit_ms"],
                                          write_end)
                process = subprocess.Popen(command, close_fds=True, pass_fds=(write_end,))  # noqa: S603
        except BaseException:
            os.close(connected)
            raise
        finally:
            os.close(write_end)
        return process, connected

    def _fork(self, request, settings: dict, connected_fd: int) -> zygote_client.ForkedHarness | None:
        """A harness forked from the zygote (started again first if it ended), or None: no zygote, or it failed
        (logged; the caller starts a fresh process)."""
        with self._zygote_lock:  # a start waits for the zygote another start is starting, not for the pool's lock
            if self.zygote is None:
                return None
            if not self.zygote.running and not self._start_zygote(again=True):
                return None
            try:
                return self.zygote.fork(harness_zygote.HarnessRequest(
                    request.control_endpoint.url, request.worker_id, int(settings["state_cache_size"]),
                    int(settings["data_buffer_time_limit_ms"]), connected_fd))
            except zygote_client.ZygoteError as exc:
                # stopped, not left: a fork it still had queued would start a second harness under this id, which
                # no StopWorker knows of
                _LOGGER.error("cannot fork SDK harness %s from the harness zygote (%s): the zygote is stopped, and "
                              "this harness and the later ones start as fresh processes", request.worker_id, exc)
                self.zygote.stop()
                self.zygote = None
                return None

    def _watch(self, request, process: subprocess.Popen, connected: int, restarts: int) -> None:
        """Starts another harness under the same id when `process` exits before it connected to its runner.

        The runner (Beam's ExternalEnvironmentFactory in the TaskManager) sent StartWorker and then waits for a
        harness of that id to connect, for ever: the worker pool API has no way to tell it the harness died, so
        a harness killed while it started hung its job until the job timeout. One that had connected is never
        started again: its runner sees it gone (its task fails and Flink restarts it with a new environment)."""
        try:
            said = os.read(connected, 1)  # b"c" once connected; b"" when the harness exited without saying so
        finally:
            os.close(connected)
        if said:
            return
        process.wait()
        worker_id = request.worker_id
        with self._lock:
            if process not in self._harnesses.get(worker_id, ()):  # stopped: StopWorker took it
                return
        if restarts >= MAX_RESTARTS:
            _LOGGER.error("SDK harness %s (pid %d) exited (%s) before it connected, for the %d time: not started "
                          "again; its job waits until PARITY_FLINK_JOB_TIMEOUT", worker_id, process.pid,
                          process.returncode, restarts + 1)
            return
        try:
            again, connected = self._launch(request)  # outside the pool's lock, as StartWorker's
        except OSError as exc:
            _LOGGER.error("cannot start SDK harness %s again with %s: %s", worker_id, self.python, exc)
            return
        with self._lock:
            kept = self._harnesses.get(worker_id, [])
            replaced = process in kept
            if replaced:
                kept[kept.index(process)] = again
        if not replaced:  # a stop took the dead harness while this one started: none would ever stop this one
            os.close(connected)
            worker_pool_main.kill_process_gracefully(again)
            return
        self._start_watch(request, again, connected, restarts + 1)
        _LOGGER.warning("SDK harness %s (pid %d) exited (%s) before it connected to its runner, which waits for that "
                        "id: started it again, pid %d%s", worker_id, process.pid, process.returncode, again.pid,
                        _how(again))

    @classmethod
    def start(cls, use_process: bool = False, port: int = 0, state_cache_size: int = 0,
              data_buffer_time_limit_ms: int = -1, container_executable: str | None = None,
              bind_address: str = DEFAULT_BIND, python: str | None = None, harness_start: str | None = None,
              preload: Sequence[str] = ()):
        """Beam's `start`, listening on `bind_address` (Beam's: every interface) with harnesses run by `python`,
        started as `harness_start` says; returns (`host:port`, the gRPC server)."""
        import grpc
        from apache_beam.portability.api import beam_fn_api_pb2_grpc
        from apache_beam.utils import thread_pool_executor

        server = grpc.server(thread_pool_executor.shared_unbounded_instance(),
                             options=[("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)])
        host = f"[{bind_address}]" if ":" in bind_address and not bind_address.startswith("[") else bind_address
        bound = server.add_insecure_port(f"{host}:{port}")
        if not bound:
            raise OSError(f"cannot listen on {host}:{port}")
        pool = cls(use_process=use_process, container_executable=container_executable,
                   state_cache_size=state_cache_size, data_buffer_time_limit_ms=data_buffer_time_limit_ms,
                   python=python, harness_start=harness_start, preload=preload)
        beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
        server.start()
        return f"{host}:{bound}", server

    def StopWorker(self, stop_worker_request, context):  # noqa: N802 (gRPC's name)
        worker_id = stop_worker_request.worker_id
        self._reap()
        process, exited = self._take(worker_id)
        if process is None:
            _LOGGER.info("stop of SDK harness %s: none runs under that id", worker_id)
        elif exited:
            _LOGGER.info("stop of SDK harness %s: pid %d had exited (%s), reaped", worker_id, process.pid,
                         process.returncode)
        else:
            _LOGGER.info("stopping SDK harness %s: pid %d", worker_id, process.pid)
            worker_pool_main.kill_process_gracefully(process)
        return super().StopWorker(stop_worker_request, context)  # Beam's: thread-mode harnesses

    def harness_processes(self, worker_id: str) -> list:
        """The harnesses kept under `worker_id`, oldest first (each a `subprocess.Popen` or a
        `zygote_client.ForkedHarness`), live or exited and not yet stopped."""
        with self._lock:
            return list(self._harnesses.get(worker_id, ()))

    def _reap(self) -> None:
        """Collects the exit of every kept harness that has exited (`poll`), so that none lingers as a zombie until a
        stop of its id, which may never come (its TaskManager died, or a stop went to an older harness); each stays
        kept, with its exit code, for `_take`."""
        with self._lock:
            for started in self._harnesses.values():
                for process in started:
                    process.poll()

    def _take(self, worker_id: str) -> tuple[subprocess.Popen | None, bool]:
        """The harness a stop of `worker_id` is for, no longer kept: the first that has exited, else the oldest;
        and whether it had exited.

        With several alive under the id (two jobs at once through this pool: both sides of `parity check`), it
        waits up to STOP_GRACE for one to exit first: Beam's runner closes an environment's control channel before
        it sends StopWorker (`ExternalEnvironmentFactory`'s `close`), so the harness the stop is for is the one whose
        `run()` has just returned; the oldest may be the other job's, still at work."""
        deadline = time.monotonic() + STOP_GRACE
        while True:
            with self._lock:
                started = self._harnesses.get(worker_id)
                if not started:
                    return None, False
                exited = [process for process in started if process.poll() is not None]
                if exited or len(started) == 1 or time.monotonic() >= deadline:
                    process = exited[0] if exited else started[0]
                    started.remove(process)
                    if not started:
                        del self._harnesses[worker_id]
                    return process, bool(exited)
            time.sleep(0.02)

    def stop_all(self) -> None:
        """Stops every harness, then the zygote."""
        with self._lock:
            processes = [process for started in self._harnesses.values() for process in started]
            self._harnesses.clear()
        for process in processes:
            worker_pool_main.kill_process_gracefully(process)
        zygote = self.zygote  # not under its lock: a start of it may wait for its imports (it ends with the pool)
        if zygote is not None:
            zygote.stop()


def _how(process) -> str:
    return " (forked from the zygote)" if isinstance(process, zygote_client.ForkedHarness) else ""


def _check_harness_python(python: str, timeout: float = 120) -> None:
    """Logs an error when `python` cannot import Beam and parity: its harnesses would die before they connect,
    and their jobs wait until the job timeout ("A job that never ends" in docs/flink.md). The pool still starts
    (an operator may be about to fix the environment)."""
    try:
        done = subprocess.run([python, "-c", "import apache_beam, parity"], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _LOGGER.error("the harness interpreter %s could not be tried (%s): harnesses may die on start", python, exc)
        return
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        _LOGGER.error("the harness interpreter %s cannot import apache_beam and parity (%s): every harness will die "
                      "before it connects and its job waits until PARITY_FLINK_JOB_TIMEOUT; start the pool with "
                      "the Python that has them, or pass --harness_python", python, said)


def main(argv: Sequence[str] | None = None) -> None:
    """Beam's `worker_pool_main.main` with this servicer: Beam's flags, and `--harness_python`, `--bind_address`."""
    parser = argparse.ArgumentParser(prog="python -m parity.replay.worker_pool")
    parser.add_argument("--container_executable", type=str, default=None,
                        help="Executable that implements the Beam SDK container contract (instead of a Python "
                             "harness).")
    parser.add_argument("--service_port", type=int, required=True, dest="port",
                        help="Bind port for the worker pool service.")
    parser.add_argument("--harness_python", type=str, default=None, dest="python",
                        help=f"The interpreter that runs the SDK harnesses (default: ${PYTHON_ENV}, else this "
                             f"pool's own: {sys.executable}).")
    parser.add_argument("--harness_start", choices=HARNESS_STARTS, default=None,
                        help=f"fork: each harness is forked from a process that has imported Beam's harness and "
                             f"parity once (with this pool's own interpreter only); spawn: a fresh interpreter per "
                             f"harness, as Beam's pool (default: ${START_ENV}, else fork).")
    parser.add_argument("--harness_preload", type=str, default="", dest="preload",
                        help="Modules, comma-separated, the fork zygote imports besides its own list (e.g. "
                             "tensorflow,tensorflow_transform for jobs that use them).")
    parser.add_argument("--bind_address", type=str, default=DEFAULT_BIND,
                        help="The address the pool listens on (default: localhost; 0.0.0.0 or :: for every "
                             "interface, for TaskManagers on other hosts).")
    args, _ = parser.parse_known_args(argv)
    args.preload = tuple(module.strip() for module in args.preload.split(",") if module.strip())
    python = harness_python(args.python)
    try:
        start = harness_start_mode(args.harness_start)
    except ValueError as exc:
        sys.stderr.write(f"parity: error: {exc} (--harness_start or {START_ENV})\n")
        raise SystemExit(2) from None
    if not args.container_executable and not os.access(python, os.X_OK):
        sys.stderr.write(f"parity: error: the harness interpreter {python} is not an executable file; pass "
                         f"--harness_python (or set {PYTHON_ENV}) to the Python that has parity and Beam\n")
        raise SystemExit(2)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.container_executable and not forks(python, start):  # a zygote that cannot import them says so
        _check_harness_python(python)
    address, server = WorkerPoolServicer.start(use_process=True, **vars(args))
    _LOGGER.info("parity's worker pool at %s, harnesses run by %s", address,
                 args.container_executable or python)  # and forked or not: the servicer said so at its start
    try:
        while True:
            time.sleep(60 * 60 * 24)
    except KeyboardInterrupt:
        server.stop(0)


if __name__ == "__main__":
    main()
