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
"""
from __future__ import annotations

import argparse
import atexit
import logging
import subprocess
import threading
import time

from apache_beam.runners.worker import worker_pool_main

_LOGGER = logging.getLogger("parity.replay.worker_pool")  # not `__main__` under `python -m`


class WorkerPoolServicer(worker_pool_main.BeamFnExternalWorkerPoolServicer):
    """Beam's servicer with every harness kept by id in start order (Beam's `_worker_processes` stays empty)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._harnesses: dict[str, list[subprocess.Popen]] = {}
        atexit.register(self.stop_all)  # Beam's own exit hook sees only its (empty) dict

    def StartWorker(self, start_worker_request, context):  # noqa: N802 (gRPC's name)
        worker_id = start_worker_request.worker_id
        self._reap()
        with self._lock:  # Beam's StartWorker puts the process under the id: take it before another start can
            response = super().StartWorker(start_worker_request, context)
            process = self._worker_processes.pop(worker_id, None)
            if process is not None:
                self._harnesses.setdefault(worker_id, []).append(process)
        if process is not None:
            _LOGGER.info("started SDK harness %s: pid %d", worker_id, process.pid)
        return response

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
        and whether it had exited."""
        with self._lock:
            started = self._harnesses.get(worker_id)
            if not started:
                return None, False
            exited = [process for process in started if process.poll() is not None]
            process = exited[0] if exited else started[0]
            started.remove(process)
            if not started:
                del self._harnesses[worker_id]
            return process, bool(exited)

    def stop_all(self) -> None:
        with self._lock:
            processes = [process for started in self._harnesses.values() for process in started]
            self._harnesses.clear()
        for process in processes:
            worker_pool_main.kill_process_gracefully(process)


def main(argv: list[str] | None = None) -> None:
    """Beam's `worker_pool_main.main` with this servicer: the same flags, started by Beam's `start`."""
    parser = argparse.ArgumentParser(prog="python -m parity.replay.worker_pool")
    parser.add_argument("--container_executable", type=str, default=None,
                        help="Executable that implements the Beam SDK container contract.")
    parser.add_argument("--service_port", type=int, required=True, dest="port",
                        help="Bind port for the worker pool service.")
    args, _ = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    address, server = WorkerPoolServicer.start(use_process=True, **vars(args))
    _LOGGER.info("parity's worker pool at %s, executable %s", address, args.container_executable)
    try:
        while True:
            time.sleep(60 * 60 * 24)
    except KeyboardInterrupt:
        server.stop(0)


if __name__ == "__main__":
    main()
