"""One side's replay as a Beam job: the pipeline run on a runner, its errors said as parity's, the set finalized.

`parity replay`, each side of `parity check` and the child process of `parity.replay.sides_at_once` replay a
side through here.
"""
from __future__ import annotations

import json
import re
import time
from typing import Any, Callable, Sequence

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from parity import compat
from parity.config import Config, SideConfig
from parity.console import progress, signals
from parity.errors import ParityError, RunnerError, UserCodeError
from parity.replay import cancel, spill
from parity.replay.counters import STAGED, WRITTEN
from parity.replay.environment import environment_manifest
from parity.replay.flink import JobTimeout
from parity.replay.gate import TransformGate
from parity.replay.pipeline import TFT_OUTPUT, FromSideGraph, ReplaySide, unwrap_pipeline_error
from parity.replay.runners import make_options, make_runner, replay_gc
from parity.replay.watch import Watch, job_name
from parity.sets import analyzers
from parity.sets.fingerprint_set import finalize
from parity.stages.transform import local_graph
from parity.storage import outdir as output
from parity.storage import urls
from parity.storage.context import Storage


def replay_side(config: Config, side: SideConfig, out_dir: str, *, runner: str = "DirectRunner",
                beam_args: Sequence[str] | None = None, graph: FromSideGraph | None = None, reorder: bool = False,
                gate: TransformGate | None = None, force: bool = False,
                inputs: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """Replays one side as a Beam job and writes its fingerprint set to `out_dir`; returns the manifest.

    `out_dir` is claimed first (`parity.storage.outdir.claim`): locked, an earlier set's files removed, and
    refused when it is another's folder unless `force`, or when it holds one of `inputs` (`(path, what)` of
    the files the run reads, `parity.config.inputs.run_inputs`).

    `graph`: where a `saved: {from_side}` transform finds the other side's graph (`FromSideGraph.of`; by
    default beside `out_dir`). `gate`: the other side replays at the same time (`parity.replay.gate`); a TFT
    side says `ready` through it once its graph is written, and a `saved: {from_side}` side stages every batch,
    then waits at it, since its transform alone needs that graph. Every file is read and written with the storage
    context of `beam_args` (`Storage.of`: their `--s3_endpoint_url=...`), which the job's steps carry.
    """
    storage = Storage.of(beam_args)
    graph = graph or FromSideGraph.of(config, side, out_dir, storage=storage)
    _check_windowfn(config, side)
    with output.claim(out_dir, output.SET_OUTPUTS, force=force, inputs=inputs, storage=storage):
        return _replay_claimed(config, side, out_dir, runner=runner, beam_args=beam_args, graph=graph,
                               reorder=reorder, gate=gate, storage=storage)


def _replay_claimed(config: Config, side: SideConfig, out_dir: str, *, runner: str,
                    beam_args: Sequence[str] | None, graph: FromSideGraph | None, reorder: bool,
                    gate: TransformGate | None, storage: Storage) -> dict[str, Any]:
    waits = gate is not None and graph is not None  # the graph is looked for once the gate opens
    saved_dir = None if waits or graph is None else graph.find()
    progress.event("replay_start", side=side.name, runner=runner)
    progress.begin(side.name)
    started = time.monotonic()
    # from the pipeline's construction on: TFT traces the preprocessing function there; Beam's process-wide options,
    # which the pipeline sets, are put back when the job ends (a user's process is left as it was)
    with replay_gc(), compat.beam_process_options_kept():
        beam_args, job = _flink_job(side, runner, beam_args)
        options = make_options(runner, beam_args)
        pipeline = beam.Pipeline(runner=make_runner(runner), options=options)
        _ = pipeline | f"Replay[{side.name}]" >> ReplaySide(config, side, out_dir, graph, reorder=reorder,
                                                            gate=gate, spills=spill.SpillPolicy.for_runner(runner),
                                                            fused_read=runner == "DirectRunner", storage=storage)
        rest = _flink_rest(options, job) if job else None
        earlier = _jobs_before(rest, job)
        result = watch = None
        try:
            try:
                result = pipeline.run()
                watch = Watch(side.name, result, rest=rest, job=job, earlier=earlier)
                with watch:
                    result.wait_until_finish()
                if watch.failure is not None and not _done(result):  # stopped by the watch, which said why
                    raise watch.failure
            except BaseException as exc:  # a timeout, Ctrl-C or SIGTERM, a failure: no job of it goes on running
                if job is None:
                    raise
                outcome = cancel.end_job(result, rest, job)
                progress.event("flink_job_ended_early", side=side.name, job=job, outcome=outcome)
                if isinstance(exc, JobTimeout):
                    raise RunnerError(exc.said(outcome)) from exc
                if watch is not None and watch.failure is not None:
                    raise watch.failure from exc
                raise
            counts = watch.final() or {}
        except ParityError as exc:  # raised in a step: Beam appended its " [while running ...]" to the message
            raise unwrap_pipeline_error(exc) from exc  # type: ignore[misc]
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            signals.raise_if_interrupted(exc)  # Beam turns a KeyboardInterrupt in a step into a RuntimeError
            error = unwrap_pipeline_error(exc)
            if error is not None:
                raise error from exc
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            last = next((line for line in reversed(lines) if not line.startswith("[while running")), "")
            step = re.search(r"\[while running '(?:Replay\[[^\]]*\]/)?([^']*)'\]", str(exc))
            last = last.split(" [while running", 1)[0]  # Beam's suffix: the step is named below instead
            op_error = _tensorflow_error(exc) if side.transform and side.transform.kind == "tft" else None
            if op_error is not None:
                raise UserCodeError(f"{config.path}: sides.{side.name}.transform.tft: preprocessing_fn "
                                    f"'{side.transform.ref.text}' failed while TFT ran it on the replayed "  # type: ignore[union-attr]
                                    f"records: {op_error}") from exc
            where = f" in its step {step.group(1)}" if step else ""
            raise RunnerError(f"the replay of side '{side.name}' failed on {runner}{where}: {type(exc).__name__}: "
                              f"{last}") from exc  # a worker's traceback text ends with the real error
        finally:
            spill.remove(out_dir, storage)
    key = list(side.capture.key) if side.capture.key else "input"
    manifest = finalize(out_dir, {"side": side.name, "key": key, "config_name": config.name,
                                  "environment": environment_manifest(), "runner": runner}, storage)
    _check_quarantine_share(side, out_dir, manifest)
    if waits:
        saved_dir = graph.find()  # type: ignore[union-attr]
    graph_dir = urls.child(out_dir, TFT_OUTPUT) if side.transform and side.transform.kind == "tft" else \
        side.transform.path or saved_dir if side.transform and side.transform.kind == "saved" else None
    if graph_dir:
        local = local_graph(graph_dir, storage)  # a URL's graph: its local copy
        analyzers.write(out_dir, analyzers.read_graph(local), storage)
    timings = {"replay_seconds": round(time.monotonic() - started, 3)}
    storage.write_text(urls.child(out_dir, output.TIMINGS), json.dumps(timings, indent=2, sort_keys=True) + "\n")
    progress.event("replay_done", side=side.name, records=manifest["records"]["read"],
                   quarantined=manifest["records"]["quarantined"],
                   **{what.removeprefix("records_"): counts[what] for what in (STAGED, WRITTEN) if what in counts},
                   seconds=round(time.monotonic() - started, 1))
    return manifest


def _flink_job(side: SideConfig, runner: str, beam_args: Sequence[str] | None) -> tuple[list[str], str | None]:
    """The Beam arguments, and the name of the side's Flink job (`parity.replay.watch.job_name`, added to them
    unless the user gave `--job_name`): the watch finds the job by it in Flink's REST API. None on other
    runners."""
    args = list(beam_args or [])
    if runner != "FlinkRunner":
        return args, None
    from parity.replay import flink

    job = flink.option_value(args, "--job_name")
    if job is None:
        job = job_name(side.name)
        args.append(f"--job_name={job}")
    return args, job


def _jobs_before(rest: Callable[[], str | None] | None, job: str | None) -> frozenset[str]:
    """The Flink jobs already named `job` before its submission (a user's own `--job_name` run before), whose
    exceptions and counts are not this run's; none when the REST address is not known yet (an embedded Flink,
    which starts with the job) or does not answer."""
    if rest is None or job is None:
        return frozenset()
    try:
        address = rest()
        return frozenset(cancel.jobs_named(address, job)) if address else frozenset()
    except Exception:  # noqa: BLE001 - no answer: the watch reads the latest job of the name, as without it
        return frozenset()


def _done(result: Any) -> bool:
    from apache_beam.runners.runner import PipelineState

    return getattr(result, "state", None) == PipelineState.DONE


def _flink_rest(options: PipelineOptions, job: str) -> Callable[[], str | None] | None:
    """Where Flink's REST API of the job `job` submitted with `options` answers
    (`parity.replay.flink.rest_source`)."""
    from parity.replay import flink

    given = options.get_all_options()
    return flink.rest_source(given.get("flink_master"), given.get("job_endpoint"), job)


def _tensorflow_error(exc: BaseException) -> str | None:
    """`Type: message` of the TensorFlow op error a failed job's error came from (the user's graph, not the
    runner), the deepest in its chain; or, from a worker process, from its traceback text; None otherwise."""
    found = None
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if type(current).__module__.startswith("tensorflow"):
            found = f"{type(current).__name__}: {_op_message(current)}"
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    if found is None:
        match = re.search(r"tensorflow\.python\.framework\.errors_impl\.(\w+): ([^\n]*)", str(exc))
        if match:
            found = f"{match.group(1)}: {match.group(2).strip()}"
    return found[:500] if found else None


def _op_message(exc: BaseException) -> str:
    """An op error's own message: its first line, or for a graph execution error the line that says what
    failed (TensorFlow puts the node's traceback between the two)."""
    lines = [line.strip() for line in str(getattr(exc, "message", exc)).splitlines() if line.strip()]
    if lines and lines[0].rstrip(":") == "Graph execution error":
        said = [line for line in lines[1:] if not line.startswith(("Detected at node", "File ", "[[", "<stack"))
                and not line.endswith(("(most recent call last):", ":"))]
        if said:
            return said[0]
    return lines[0] if lines else "(no message)"


def _check_windowfn(config: Config, side: SideConfig) -> None:
    """Calls a side's `window.windowfn` factory once before the job, so that a factory that raises or returns
    something else stops the run naming the config, the side and the field (not from inside a Beam worker)."""
    from parity.stages.window import build_windowfn

    if side.window is None or side.window.windowfn is None:
        return
    try:
        build_windowfn(side.window)
    except ParityError as exc:
        message = str(exc).removeprefix("window.windowfn ")
        raise type(exc)(f"{config.path}: sides.{side.name}.window.windowfn: {message}; window.windowfn must name "
                        f"a function taking no arguments that returns an apache_beam WindowFn") from exc


def _check_quarantine_share(side: SideConfig, out_dir: str, manifest: dict[str, Any]) -> None:
    """Stops the run (exit 2) when too much of a side's capture could not be read."""
    from parity.errors import InputError

    records = manifest["records"]
    if not records["read"]:
        raise InputError(f"side '{side.name}': the capture {side.capture.path!r} holds no records (its files are "
                         f"empty or blank); point capture.path at the captured records")
    share = records["quarantined"] / records["read"]
    if share > side.capture.max_quarantined:
        reasons = ", ".join(f"{k} ({v})" for k, v in sorted(manifest["quarantine_reasons"].items(),
                                                          key=lambda kv: (-kv[1], kv[0]))[:3])
        raise InputError(
            f"side '{side.name}': {records['quarantined']} of {records['read']} records ({share:.1%}) were "
            f"quarantined, above capture.max_quarantined {side.capture.max_quarantined:g}; most common: "
            f"{reasons}; each is listed with its location in {urls.child(out_dir, 'quarantine.jsonl')}. "
            f"Fix the capture or the schema, or raise capture.max_quarantined")
