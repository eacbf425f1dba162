"""Where a `parity check`'s wall time goes, written as JSON lines to $PARITY_PHASES (benchmarks/flink_sides.py).

Put on PYTHONPATH by the benchmark only: every parity process of the check (the check itself, its second-side child,
its noise replays) inherits PYTHONPATH, so each appends its own events. Beam's portable runner and parity's progress
events are wrapped when their modules are first imported (an import hook), so the probe imports nothing at start-up
and a process's import time stays what it is without it. Each event: the process id, what, the wall clock (seconds
since the epoch: one clock for every process of the machine, and the job server's state events' clock).
"""
from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.util
import json
import os
import sys
import threading
import time

_PATH = os.environ.get("PARITY_PHASES")
_LOCK = threading.Lock()


def record(what: str, **fields) -> None:
    line = json.dumps({"pid": os.getpid(), "what": what, "t": time.time(), "thread": threading.current_thread().name,
                       **fields}, default=str)
    with _LOCK, open(_PATH, "a", encoding="utf-8") as handle:  # type: ignore[arg-type]
        handle.write(line + "\n")


def _timed(name: str, function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        record(f"{name}_start")
        try:
            return function(*args, **kwargs)
        finally:
            record(f"{name}_end")
    return wrapper


def _patch_portable(module) -> None:
    module.JobServiceHandle.prepare = _timed("job_prepare", module.JobServiceHandle.prepare)
    module.JobServiceHandle.stage = _timed("artifact_staging", module.JobServiceHandle.stage)
    module.JobServiceHandle.run = _timed("job_run_request", module.JobServiceHandle.run)
    module.PortableRunner.create_job_service = _timed("job_service_connect", module.PortableRunner.create_job_service)
    module.PortableRunner.start_and_replace_loopback_environments = staticmethod(_timed(
        "loopback_pool_start", module.PortableRunner.start_and_replace_loopback_environments))
    module.PortableRunner.run_portable_pipeline = _timed("submit", module.PortableRunner.run_portable_pipeline)
    module.PipelineResult.wait_until_finish = _timed("job_wait", module.PipelineResult.wait_until_finish)


def _patch_pipeline(module) -> None:
    init = module.Pipeline.__init__

    @functools.wraps(init)
    def built(self, *args, **kwargs):
        record("pipeline_construct_start")
        return init(self, *args, **kwargs)

    module.Pipeline.__init__ = built
    module.Pipeline.run = _timed("pipeline_run", module.Pipeline.run)


def _patch_progress(module) -> None:
    event = module.event

    @functools.wraps(event)
    def recorded(name, **fields):
        record(f"parity:{name}", **fields)
        return event(name, **fields)

    module.event = recorded


def _patch_pool(module) -> None:
    servicer = module.BeamFnExternalWorkerPoolServicer
    servicer.StartWorker = _timed("harness_start_worker", servicer.StartWorker)


def _patch_harness(module) -> None:
    module.SdkHarness.__init__ = _timed("harness_connect", module.SdkHarness.__init__)


_PATCHES = {"apache_beam.runners.worker.worker_pool_main": _patch_pool,
            "apache_beam.runners.worker.sdk_worker": _patch_harness,
            "apache_beam.runners.portability.portable_runner": _patch_portable,
            "apache_beam.pipeline": _patch_pipeline, "parity.console.progress": _patch_progress}


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


if _PATH:
    record("process_start", argv=sys.argv[1:4] if len(sys.argv) > 1 else sys.orig_argv[1:5])
    sys.meta_path.insert(0, _Hook())
    atexit.register(lambda: record("process_exit"))
