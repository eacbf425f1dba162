"""The zygote's side of SDK harnesses forked from one process that has already imported Beam's harness and parity
(a "zygote"), for parity's worker pool (`parity.replay.worker_pool`, `--harness_start fork`, the default).

A harness the pool starts as a fresh `python -c "...SdkHarness(...).run()"` pays its interpreter's start and the
imports of Beam's SDK worker, and, once its job's DoFns unpickle, of parity's replay, stage and encoding modules and
pyarrow, and a check on a cluster starts several harnesses per TaskManager. The zygote
pays them once, when the pool starts; each StartWorker forks a child of it that runs `SdkHarness(...).run()` with
the arguments the fresh process would have had, and shares the imported modules' memory with its siblings until
it writes to it.

The zygote (`main`) talks to the pool over a Unix socket pair: a request names the harness's control URL, worker
id, state cache size and data buffer time limit, and carries the pipe end the harness writes one byte to once it
has connected (the pool's `connected_fd`); the answer is the child's pid, and the zygote reports each child's exit
status when it reaps it. A child is the zygote's, not the pool's: the pool learns of its end from these reports
only. This module is the zygote's side of that protocol, with the messages both sides send (`HarnessRequest`,
`send`); the pool's side, which starts the zygote and asks it for harnesses, is `parity.replay.zygote_client`.

Fork safety: a process forked while another thread holds a lock keeps that lock held for ever. The zygote imports
grpc but makes no channel or server (gRPC's fork notes: objects made after the fork are safe without
GRPC_ENABLE_FORK_SUPPORT), and runs no thread when it forks: the two libraries that start threads on import here,
OpenBLAS (through numpy) and Arrow's jemalloc (its background purging thread), are told not to by
OPENBLAS_NUM_THREADS=1 and JE_ARROW_MALLOC_CONF=background_thread:false while the zygote imports them (the
environment is put back after the imports: the harnesses and what they start see the pool's). So in a forked
harness numpy's BLAS runs single-threaded and Arrow's allocator purges inline. The zygote counts its threads before
every fork and refuses to fork with more than one (the pool then starts that harness as a fresh process).

What a fork shares that a fresh process would not have: the hash seed (PYTHONHASHSEED) of the zygote, and modules
as they were when the pool started (a parity or Beam upgraded on disk needs the pool restarted; the job's own
modules are imported in each harness, as before). `random` reseeds itself in a forked child, and numpy's global
random state is reseeded (`_reseed`); the hash seed is the zygote's in every harness (docs/flink.md).
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
from dataclasses import dataclass

# What a parity job's harness imports, imported once in the zygote: Beam's SDK worker (grpc, Beam's runners,
# numpy), parity's replay steps, stages, encoders and sets (through parity.replay.pipeline), the diff's job
# (parity.compare.engine: a check whose diff runs on the engine), pyarrow, orjson, xxhash.
# Not tensorflow: a pool cannot know whether its jobs use it, a zygote that imported it for jobs that do not would
# hold its memory for nothing, and its import may start threads (`--harness_preload` adds it, docs/flink.md).
PRELOAD = ("apache_beam.runners.worker.sdk_worker", "parity.replay.pipeline", "parity.compare.engine", "pyarrow",
           "orjson", "xxhash")
# Done once in the zygote after the imports, when its module was imported: botocore's parse of S3's service model,
# which each harness of a run on s3:// would otherwise do again (`parity.storage.s3_clients.warm`).
WARM = (("parity.storage.s3_clients", "warm"),)
REQUIRED = "apache_beam.runners.worker.sdk_worker"
# Set while the zygote imports: no thread is started by these libraries' loading.
NO_THREADS_ENV = {"OPENBLAS_NUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
# The largest message either side sends (a JSON object; a ready message lists the modules imported).
MESSAGE_BYTES = 1 << 16


def _threads() -> list[str]:
    """The names of this process's threads (the kernel's, /proc/self/task/*/comm)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm", encoding="utf-8", errors="replace") as handle:
                names.append(handle.read().strip())
        except OSError:
            continue
    return names


def _preload(modules: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """Imports `modules` with NO_THREADS_ENV set, then does the WARM steps of the modules imported; (imported and
    warmed, {failed: why}). The environment is put back."""
    kept = {name: os.environ.get(name) for name in NO_THREADS_ENV}
    os.environ.update(NO_THREADS_ENV)
    imported, failed = [], {}
    try:
        for module in modules:
            try:
                __import__(module)
                imported.append(module)
            except Exception as exc:  # a module a job may not need: its harnesses import it, or fail, themselves
                failed[module] = f"{type(exc).__name__}: {exc}"
        for module, name in WARM:
            if module in sys.modules:
                try:
                    getattr(sys.modules[module], name)()
                    imported.append(f"{module}.{name}()")
                except Exception as exc:  # noqa: BLE001 - the harnesses do it themselves, as without a zygote
                    failed[f"{module}.{name}()"] = f"{type(exc).__name__}: {exc}"
    finally:
        for name, value in kept.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return imported, failed


@dataclass(frozen=True)
class HarnessRequest:
    """A forked harness's arguments: those of Beam's harness command (`worker_pool.harness_command`)."""
    control_url: str
    worker_id: str
    state_cache_size: int
    data_buffer_time_limit_ms: int
    connected_fd: int | None = None


def send(sock: socket.socket, message: dict, fds: tuple[int, ...] = ()) -> None:
    """One message of the protocol, as JSON, with `fds` passed along (the pool's `connected_fd`)."""
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def serve(fd: int, modules: tuple[str, ...] = PRELOAD) -> HarnessRequest | None:
    """The zygote's loop on the pool's socket `fd`: imports `modules`, says so, then forks a child per request and
    reports each child's exit. Returns in a forked child only (its request, for `main` to run); in the zygote it
    returns None once the pool closes its end."""
    sock = socket.socket(fileno=fd)
    imported, failed = _preload(modules)
    if REQUIRED not in imported:
        send(sock, {"ready": False, "error": failed.get(REQUIRED, "not imported")})
        return None
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    os.set_blocking(wake_read, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd hears of each child's end
    interrupt = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C of the pool's group: the pool ends, and so
    # does the zygote when its socket closes; its harnesses get the pool's Ctrl-C as before
    signal.set_wakeup_fd(wake_write)
    send(sock, {"ready": True, "imported": imported, "failed": failed, "threads": _threads()})
    while True:
        readable, _, _ = select.select([sock, wake_read], [], [])
        if wake_read in readable:
            while True:
                try:
                    if not os.read(wake_read, 512):
                        break
                except BlockingIOError:
                    break
            if not _report_exits(sock):  # the pool ended
                return None
        if sock in readable:
            try:
                data, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, 1)
            except ConnectionError:
                data, fds = b"", []
            if not data:  # the pool ended: its children go on as they would have (they are not ours to stop)
                return None
            request = json.loads(data)
            connected = fds[0] if fds else None
            threads = _threads()
            if len(threads) > 1:
                send(sock, {"id": request["id"], "error": f"the zygote runs {len(threads)} threads "
                                                           f"({', '.join(threads)}): a fork is not safe"})
                if connected is not None:
                    os.close(connected)
                continue
            for stream in (sys.stdout, sys.stderr):  # nothing of the zygote's written twice, by a child too
                stream.flush()
            pid = os.fork()
            if pid == 0:  # the harness: nothing of the zygote's loop is left open in it
                _reseed()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                signal.signal(signal.SIGINT, interrupt)
                for own in (wake_read, wake_write):
                    os.close(own)
                sock.close()
                return HarnessRequest(request["control_url"], request["worker_id"], int(request["state_cache_size"]),
                                      int(request["data_buffer_time_limit_ms"]), connected)
            if connected is not None:
                os.close(connected)
            send(sock, {"id": request["id"], "pid": pid})


def _reseed() -> None:
    """A forked harness's own numpy global random state, as a fresh interpreter would draw (Python's `random`
    reseeds itself at a fork): unseeded draws of a user's code must not repeat across harnesses."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _report_exits(sock: socket.socket) -> bool:
    """Reaps every child that has ended and tells the pool its exit code; False when the pool is gone."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return True
        try:
            send(sock, {"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})
        except OSError:
            return False


def run_harness(request: HarnessRequest) -> None:
    """What Beam's harness command runs (`worker_pool.harness_command`), in the forked child."""
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    sys.argv = ["-c"]  # as in `python -c`
    harness = SdkHarness(request.control_url, worker_id=request.worker_id, state_cache_size=request.state_cache_size,
                         data_buffer_time_limit_ms=request.data_buffer_time_limit_ms)
    if request.connected_fd is not None:
        os.write(request.connected_fd, b"c")
        os.close(request.connected_fd)
    harness.run()


def main(fd: int, modules: tuple[str, ...] = PRELOAD) -> None:
    """The zygote process (`python -c "from parity.replay.harness_zygote import main; main(FD)"`); in each forked
    child it runs the harness and returns, and the interpreter then ends as `python -c` would."""
    request = serve(fd, modules)
    if request is not None:
        run_harness(request)
