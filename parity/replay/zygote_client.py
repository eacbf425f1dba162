"""The pool's side of the harness zygote (`parity.replay.harness_zygote`, the zygote's side and the messages both
send): `Zygote` starts the zygote with the pool's interpreter and environment, in the pool's process group and
folder, waits for its imports, asks it for harnesses and reads its answers and exit reports on a thread of its own;
each forked harness is a `ForkedHarness`, which the pool keeps and stops as it would a `subprocess.Popen`.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time

from parity.errors import RunnerError
from parity.replay.harness_zygote import MESSAGE_BYTES, PRELOAD, HarnessRequest, send

# Seconds the pool waits for the zygote's imports, and for one fork's answer.
READY_TIMEOUT = 180.0
FORK_TIMEOUT = 30.0


class ForkedHarness:
    """A harness the zygote forked, as the pool's bookkeeping and Beam's `kill_process_gracefully` use a
    `subprocess.Popen`: `pid`, `returncode`, `poll`, `wait`, `terminate`, `kill`, `send_signal`.

    Its exit status comes from the zygote. When the zygote died first, the harness went on as an orphan, and its
    end is seen in /proc only: `returncode` is then "unknown"."""

    def __init__(self, pid: int, zygote: subprocess.Popen):
        self.pid = pid
        self.args = f"forked by the harness zygote (pid {zygote.pid})"
        self.returncode: int | str | None = None
        self._zygote = zygote  # this harness's zygote: one started again in its place is another process
        self._ended = threading.Event()
        self._start = _start_time(pid)

    def _exited(self, returncode: int | str) -> None:
        if self.returncode is None:
            self.returncode = returncode
        self._ended.set()

    def poll(self) -> int | str | None:
        if self.returncode is None and self._zygote.poll() is not None and (
                self._start is None or _start_time(self.pid) != self._start):
            self._exited("unknown")
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | str:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._ended.wait(0.2 if left is None else min(0.2, left))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _start_time(pid: int) -> str | None:
    """Process `pid`'s start time (/proc/PID/stat's 22nd field), None when it is gone or a zombie: tells a process
    from a later one with its pid."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


class ZygoteError(RunnerError):
    """The zygote could not start, or could not fork a harness: the pool starts a fresh process instead. Not an
    OSError: the pool's `except OSError` around a harness's start means the harness's own process could not start,
    and must not take a zygote's failure for one."""


class Zygote:
    """The pool's end of a zygote: `start` it, `fork` harnesses from it, `stop` it."""

    def __init__(self, python: str, modules: tuple[str, ...] = PRELOAD):
        self.python = python
        self.modules = tuple(modules)
        self.process: subprocess.Popen | None = None
        self.ready: dict = {}
        self._sock: socket.socket | None = None
        self._send_lock = threading.Lock()
        self._state = threading.Lock()
        self._answers: dict[int, dict] = {}
        self._answered = threading.Condition(self._state)
        self._children: dict[int, ForkedHarness] = {}
        self._next = 0
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None and self._reader is not None \
            and self._reader.is_alive()

    def start(self, timeout: float = READY_TIMEOUT) -> dict:
        """Starts the zygote with the pool's environment and folder and waits for its imports; returns its ready
        message (what it imported, what failed, its threads). Raises ZygoteError when it cannot fork harnesses."""
        if self._sock is not None:  # a zygote that ended: its reader has read all it said
            self._sock.close()
            self._sock = None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        code = (f"from parity.replay.harness_zygote import main; "
                f"main({theirs.fileno()}, {self.modules!r})")
        try:
            self.process = subprocess.Popen([self.python, "-c", code], close_fds=True,  # noqa: S603
                                            pass_fds=(theirs.fileno(),))
        except OSError as exc:
            ours.close()
            raise ZygoteError(f"cannot start the harness zygote with {self.python}: {exc}") from exc
        finally:
            theirs.close()
        ours.settimeout(timeout)
        try:
            data = ours.recv(MESSAGE_BYTES)
        except OSError as exc:  # socket.timeout is one
            data = b""
            why = f"no answer in {timeout:g} s ({exc})"
        else:
            why = f"it exited ({self.process.poll()})" if not data else ""
        ready = json.loads(data) if data else {"ready": False, "error": why}
        if not ready.get("ready"):
            ours.close()
            self._end_process()
            raise ZygoteError(f"the harness zygote did not start: {ready.get('error')}")
        ours.settimeout(None)
        self._sock = ours
        self.ready = ready
        if len(ready.get("threads", ())) > 1:
            self.stop()
            raise ZygoteError(f"the harness zygote runs {len(ready['threads'])} threads after its imports "
                              f"({', '.join(ready['threads'])}): forking it is not safe")
        self._reader = threading.Thread(target=self._read, args=(ours, self.process), daemon=True,
                                        name="parity-harness-zygote")
        self._reader.start()
        return ready

    def fork(self, request: HarnessRequest, timeout: float = FORK_TIMEOUT) -> ForkedHarness:
        """A harness forked for `request`; its `connected_fd` is sent to the child (the caller closes its own)."""
        if not self.running or self._sock is None:
            raise ZygoteError(f"the harness zygote (pid {self.pid}) is not running"
                              f"{'' if self.process is None else f' (exit {self.process.poll()})'}")
        with self._state:
            self._next += 1
            ask = self._next
        message = {"id": ask, "control_url": request.control_url, "worker_id": request.worker_id,
                   "state_cache_size": request.state_cache_size,
                   "data_buffer_time_limit_ms": request.data_buffer_time_limit_ms}
        fds = () if request.connected_fd is None else (request.connected_fd,)
        try:
            with self._send_lock:
                send(self._sock, message, fds)
        except OSError as exc:
            raise ZygoteError(f"cannot ask the harness zygote (pid {self.pid}) for a harness: {exc}") from exc
        deadline = time.monotonic() + timeout
        with self._answered:
            while ask not in self._answers:
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    raise ZygoteError(f"the harness zygote (pid {self.pid}) did not fork a harness"
                                      f"{'' if self._reader.is_alive() else ': it ended'}")
                self._answered.wait(min(left, 0.5))
            answer = self._answers.pop(ask)
        if "error" in answer:
            raise ZygoteError(answer["error"])
        return answer["harness"]

    def _read(self, sock: socket.socket, zygote: subprocess.Popen) -> None:
        """The zygote's answers and exit reports, until it ends."""
        try:
            while True:
                try:
                    data = sock.recv(MESSAGE_BYTES)
                except OSError:
                    data = b""
                if not data:
                    return
                message = json.loads(data)
                with self._answered:
                    if "exited" in message:
                        child = self._children.pop(message["exited"], None)
                        if child is not None:
                            child._exited(message["returncode"])
                    else:
                        if "pid" in message:
                            child = ForkedHarness(message["pid"], zygote)
                            self._children[child.pid] = child
                            message["harness"] = child
                        self._answers[message["id"]] = message
                    self._answered.notify_all()
        finally:
            with self._answered:  # the harnesses left are orphans now, their ends seen in /proc (`poll`)
                self._children.clear()
                self._answered.notify_all()

    def stop(self) -> None:
        """Ends the zygote (not its harnesses: the pool stops those by pid)."""
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        self._end_process()

    def _end_process(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
