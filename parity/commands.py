"""The commands behind the CLI and the Python API: replay, diff, check and show."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

from parity.compare import analyzers, engine, halves
from parity.compare.causes import CauseContext
from parity.compare.diff import DiffStream, diff_gc
from parity.compare.model_stage import ModelComparison
from parity.compare.noise import AnalysisNoise
from parity.compare.noise import judge as judge_noise
from parity.compare.tally import Tally
from parity.config import Config, SideConfig, load_config
from parity.config.inputs import run_inputs
from parity.console import children, progress
from parity.encoding import canonical
from parity.errors import FingerprintSetError, RunnerError
from parity.replay import flink, job
from parity.replay import sides_at_once as overlap
from parity.replay.gate import TransformGate
from parity.replay.pipeline import TFT_OUTPUT, FromSideGraph
from parity.report import RENDERERS
from parity.report.model import build_report
from parity.report.times import window_value_utc
from parity.sets import tap_align
from parity.sets.analyzers import ANALYZERS_FILE, FEEDS_FILE
from parity.sets.analyzers import read as read_analyzers
from parity.sets.analyzers import read_feeds
from parity.sets.fingerprint_set import FingerprintSet, read_set
from parity.stages import STAGES
from parity.storage import outdir as output
from parity.storage import urls
from parity.storage.context import Storage

SIDES_DIR = "sides"
OUTPUT_FILES = {"json": "report.json", "md": "report.md", "html": "report.html", "junit": "junit.xml"}


def replay(config: Config, side_name: str, out_dir: str, *, runner: str = "DirectRunner",
           beam_args: Sequence[str] | None = None, transform_from: str | None = None,
           reorder: bool = False, force: bool = False, gate: TransformGate | None = None) -> dict[str, Any]:
    """Replays one side as a Beam job and writes its fingerprint set to `out_dir`; returns the manifest
    (`parity.replay.job.replay_side`).

    `transform_from` (`parity replay --transform-from DIR`): the folder of the other side's replay whose graph
    a `saved: {from_side}` transform applies, when it is not the sibling of `out_dir`. `gate`: the other side
    replays at once (`parity.replay.gate`).
    """
    side = config.side(side_name)
    out_dir = urls.resolved(out_dir, "--out")
    storage = Storage.of(beam_args)
    return job.replay_side(config, side, out_dir, runner=runner, beam_args=beam_args,
                           inputs=run_inputs(config, (side_name,), storage),
                           graph=FromSideGraph.of(config, side, out_dir, transform_from, storage), reorder=reorder,
                           gate=gate, force=force)


def _replay_order(config: Config) -> list[SideConfig]:
    """Sides whose transform applies the other side's exported graph run second."""
    return sorted(config.sides, key=lambda s: 1 if s.transform and s.transform.from_side else 0)


def check(config_path: str, *, out_dir: str | None = None, runner: str = "DirectRunner",
          pipeline_options: Sequence[str] | None = None, noise: bool | None = None,
          sides_at_once: str = "auto", force: bool = False, diff_on: str = "auto") -> dict[str, Any]:
    """Replays both sides, diffs them, writes every report format to `out_dir`; returns report.json's dict.

    `out_dir` is claimed first (`parity.storage.outdir.claim`): locked for this run, the reports, fingerprint sets and
    timings of an earlier run removed (a failed run leaves none), and refused when it is not empty and was not
    made by parity, unless `force`.

    `sides_at_once` (auto, on, off): replay the second side in a child process while this one replays the
    first (`parity.replay.sides_at_once`); auto does where it pays (two cores, the in-process DirectRunner, a second
    capture of 16 MiB or more; on Flink, where it has room for both sides' jobs). The fingerprint sets and the report
    are the same either way.

    `diff_on` (auto, engine, local): where the diff's per-pair work runs (`diff`).

    With `noise` (or `report.noise` in the config) each side is replayed a second time, in another process
    with another hash salt, other batching and reversed input order; stages that differ between a side's two
    replays are nondeterministic, and cross-side divergences there get the cause `seed.nondeterministic`.
    """
    # references unimported until the child (if any) has started: it spends the seconds of importing them
    # (TensorFlow, for a TFT module) importing its own, where it would wait for this process's
    out_dir = urls.resolved(out_dir or "parity-out", "--out")  # file:///x is /x; a scheme Beam lacks: refused
    config = load_config(config_path, check_refs=False)
    noise = config.report.noise if noise is None else noise
    timings: dict[str, Any] = {}
    order = _replay_order(config)
    side_dirs = [urls.child(out_dir, SIDES_DIR, side.name) for side in order]
    at_once = overlap.wanted(config, order, runner, pipeline_options, sides_at_once)
    if runner == "FlinkRunner":
        # the job server resolved once: both sides' jobs, the child's included, and the noise replays' go to it.
        # One this process starts is started once the child is (`_check_claimed`), which imports meanwhile.
        pipeline_options = flink.flink_defaults(pipeline_options or [], start=not at_once)
    if not at_once:
        config = load_config(config_path)  # its references imported and checked before anything is written
    storage = Storage.of(pipeline_options)  # every file of the run is read and written with its storage options
    with output.claim(out_dir, output.CHECK_OUTPUTS, force=force, inputs=run_inputs(config, storage=storage),
                      storage=storage) as claimed:
        # the earlier run's sides/ are gone: the child reads the graph's raw feature spec in side_dirs[0] once
        # it appears (`SavedInputsFn`), never an earlier run's
        return _check_claimed(config_path, config, out_dir, order, side_dirs, at_once, claimed, runner=runner,
                              pipeline_options=pipeline_options, noise=noise, timings=timings, diff_on=diff_on,
                              storage=storage)


def _check_claimed(config_path: str, config: Config, out_dir: str, order: list[SideConfig], side_dirs: list[str],
                   at_once: bool, claimed: output.Claim, *, runner: str, pipeline_options: Sequence[str] | None,
                   noise: bool, timings: dict[str, Any], diff_on: str, storage: Storage) -> dict[str, Any]:
    second = None
    if at_once:
        endpoint_later = runner == "FlinkRunner" and not flink.option_value(pipeline_options or [], "--job_endpoint")
        second = overlap.SecondSide.start(config, order[1], side_dirs[1], side_dirs[0], runner, lock_fd=claimed.fd,
                                          beam_args=pipeline_options, endpoint_later=endpoint_later)
        timings["sides_at_once"] = True
    # the first side's pipeline opens the child's gate where its steps run in this process; else finish() does,
    # once the first side's job has ended
    gate = second if second is not None and flink.steps_in_this_process(runner, pipeline_options) else None
    try:
        if second is not None and second.endpoint_later:
            pipeline_options = flink.flink_defaults(pipeline_options or [])  # the job server this process starts
            second.tell_endpoint(flink.option_value(pipeline_options, "--job_endpoint"))  # type: ignore[arg-type]
        if at_once:
            config = load_config(config_path)  # the same config, its references imported and checked
        for side, side_dir in zip(order, side_dirs):
            started = time.monotonic()
            if second is not None and side is order[1]:
                second.finish()  # opens the gate if the first side's pipeline did not
                started = second.started  # the child's side: from the child's start
            else:
                # a TFT first side opens the waiting child's gate as soon as its graph is written
                replay(config, side.name, side_dir, runner=runner, beam_args=pipeline_options, gate=gate)
            timings[f"replay_{side.name}_seconds"] = round(time.monotonic() - started, 3)
            if second is not None and side is order[1] and second.ended is not None:
                # the line above counts until this process had the child's result (after its own replay)
                timings[f"replay_{side.name}_own_seconds"] = round(second.ended - started, 3)
    finally:
        if second is not None:
            second.close()
    noise_result = None
    if noise:
        started = time.monotonic()
        noise_result = noise_baseline(config, out_dir, runner, pipeline_options, at_once=at_once)
        timings["noise_seconds"] = round(time.monotonic() - started, 3)
    started = time.monotonic()
    left, right = (urls.child(out_dir, SIDES_DIR, s.name) for s in config.sides)
    report = _diff_claimed(left, right, out_dir, config=config, noise=noise_result, storage=storage,
                           on=_DiffOn(diff_on, runner, pipeline_options))
    timings["diff_seconds"] = round(time.monotonic() - started, 3)
    if config.report.redact:  # the reports are written: no raw value stays in the out folder
        _remove_values(out_dir, config, storage)
    timings["runner"] = runner  # type: ignore[assignment]
    _write_json(urls.child(out_dir, output.TIMINGS), timings, storage)
    return report


def _remove_values(out_dir: str, config: Config, storage: Storage) -> None:
    """Under `report.redact`, each fingerprint set of the check (and of its noise replays) keeps fingerprints
    and counts only (`fingerprint_set.remove_values`): its value parts, its TFT graph and TFT's temporary files
    (vocabularies) and its analyzer outputs go."""
    from parity.sets.fingerprint_set import remove_values

    for folder in (SIDES_DIR, NOISE_DIR):
        for side in config.sides:
            set_dir = urls.child(out_dir, folder, side.name)
            if storage.isfile(urls.child(set_dir, "manifest.json")):
                remove_values(set_dir, storage, also=(TFT_OUTPUT, "_tft_tmp", ANALYZERS_FILE, FEEDS_FILE))


def cause_context(config: Config | None, left: FingerprintSet, right: FingerprintSet,
                  analyzer_entries: list[dict], nondeterministic: frozenset[str] = frozenset(),
                  redact: bool = False, analysis_noise: AnalysisNoise = AnalysisNoise()) -> CauseContext:
    lf, rf = set(left.manifest.get("features", [])), set(right.manifest.get("features", []))
    kwargs: dict[str, Any] = {
        "analyzers_differ": analyzers.analyzers_differ(analyzer_entries),
        "noise_bounded": analysis_noise.features, "noise_unbounded": analysis_noise.unbounded,
        "nondeterministic_stages": nondeterministic, "redact": redact,
        "left_env": {k: str(v) for k, v in left.manifest.get("environment", {}).items()},
        "right_env": {k: str(v) for k, v in right.manifest.get("environment", {}).items()},
        "left_only_features": frozenset(lf - rf), "right_only_features": frozenset(rf - lf),
        "left_name": left.side, "right_name": right.side,
    }
    if config is not None:
        ls, rs = config.side(left.side), config.side(right.side)
        kwargs.update(
            left_seed=ls.seed.value if ls.seed else None, right_seed=rs.seed.value if rs.seed else None,
            left_seed_hashes=tuple(sorted({op.hash for _, op in ls.seed.ops})) if ls.seed else (),
            right_seed_hashes=tuple(sorted({op.hash for _, op in rs.seed.ops})) if rs.seed else ())
    accepted = set(CauseContext.__dataclass_fields__)  # type: ignore[attr-defined]
    return CauseContext(**{k: v for k, v in kwargs.items() if k in accepted})


NOISE_DIR = "noise"


def noise_baseline(config: Config, out_dir: str, runner: str, beam_args: Sequence[str] | None,
                   at_once: bool = False) -> dict[str, dict[str, list[str]]]:
    """Replays each side again in a subprocess (other hash salt, batching, order) and finds what changed.

    `at_once`: the two subprocesses run at the same time, as the check's own sides did (`sides_at_once.wanted`);
    each reads only its own side's primary set (and a `saved: {from_side}` side the first side's graph, already
    written), so neither waits for the other."""
    import subprocess
    import sys
    import tempfile

    storage = Storage.of(beam_args)
    commands = []
    for side in _replay_order(config):
        again = urls.child(out_dir, NOISE_DIR, side.name)
        command = [sys.executable, "-m", "parity", "replay", config.path, "--side", side.name, "--out", again,
                   "--runner", runner, "--reorder"]
        if side.transform and side.transform.from_side:
            command += ["--transform-from", urls.child(out_dir, SIDES_DIR, side.transform.from_side)]
        if beam_args:
            command += ["--", *beam_args]
        seed = os.environ.get("PYTHONHASHSEED")
        salt = str((int(seed) + 1) % 4294967295) if seed and seed.isdigit() else "random"
        # it ends with this process, imports what it can and reuses its Flink job server; another hash salt
        env = children.environment({**flink.child_environment(), "PYTHONHASHSEED": salt})
        commands.append((side, command, env))
    running: list[tuple[SideConfig, subprocess.Popen, Any]] = []
    result: dict[str, dict[str, list[str]]] = {}
    try:
        for side, command, env in commands:
            said = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")  # read once it ends
            running.append((side, subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=said), said))
            if not at_once:
                result[side.name] = _noise_of(out_dir, storage, *running[-1])
        for side, process, said in running:
            if side.name not in result:
                result[side.name] = _noise_of(out_dir, storage, side, process, said)
    finally:
        for _side, process, said in running:
            if process.poll() is None:  # the other side's noise replay failed, or this process was interrupted
                process.kill()
                process.wait()
            said.close()
    return result


def _noise_of(out_dir: str, storage: Storage, side: SideConfig, process: Any, said: Any) -> dict[str, list[str]]:
    """Waits for a side's noise replay; the stages and features that differ between the side's two replays."""
    from parity.config import ToleranceSpec

    if process.wait() != 0:
        said.seek(0)
        raise RunnerError(f"the noise replay of side '{side.name}' failed (exit {process.returncode}): "
                          f"{(said.read().strip().splitlines() or [''])[-1]}")
    primary, again = urls.child(out_dir, SIDES_DIR, side.name), urls.child(out_dir, NOISE_DIR, side.name)
    outcome = DiffStream(read_set(primary, storage), read_set(again, storage), ToleranceSpec(), keep_unpaired=0)
    features = sorted({name for m in outcome for name in m.feature_deltas})  # counts are complete after
    return {"stages": [s for s in STAGES if outcome.stage_diverged[s]], "features": features}


def diff(left_dir: str, right_dir: str, out_dir: str, *, config: Config | None = None,
         noise: dict[str, dict[str, list[str]]] | None = None, force: bool = False,
         pipeline_options: Sequence[str] | None = None, runner: str = "DirectRunner",
         diff_on: str = "auto") -> dict[str, Any]:
    """Diffs two fingerprint sets and writes the reports; returns report.json's dict.

    Any of the three folders may be a URL (`s3://...`), read and written with Beam's storage options among
    `pipeline_options` (`--s3_endpoint_url=...`; `parity.storage.context.Storage`).

    `out_dir` is claimed first (`parity.storage.outdir.claim`): locked, the earlier reports removed, and refused when
    it is another's folder unless `force`; fingerprint sets in it (a check's `sides/`) are kept.

    `diff_on` (auto, engine, local): where the per-pair work runs. `engine`: as a Beam job on `runner` with
    `pipeline_options` (`parity.compare.engine`), the key ranges of two bucketed sets spread over its workers;
    `local`: in this process (and a child process where it pays, `parity.compare.halves`); `auto`: the engine
    when `runner` is not the DirectRunner or `out_dir` is a URL. The report is the same byte for byte.
    """
    storage = Storage.of(pipeline_options)
    left_dir, right_dir = urls.resolved(left_dir, "fingerprint set"), urls.resolved(right_dir, "fingerprint set")
    out_dir = urls.resolved(out_dir, "--out")
    with output.claim(out_dir, output.DIFF_OUTPUTS, known=output.CHECK_OUTPUTS, force=force, storage=storage):
        return _diff_claimed(left_dir, right_dir, out_dir, config=config, noise=noise, storage=storage,
                             on=_DiffOn(diff_on, runner, pipeline_options))


@dataclass(frozen=True)
class _DiffOn:
    """Where a diff's per-pair work runs (`diff`'s `diff_on`), and the runner and options of the engine's job."""

    where: str = "auto"
    runner: str = "DirectRunner"
    pipeline_options: Sequence[str] | None = None


def _diff_claimed(left_dir: str, right_dir: str, out_dir: str, *, config: Config | None,
                  noise: dict[str, dict[str, list[str]]] | None, storage: Storage,
                  on: _DiffOn = _DiffOn()) -> dict[str, Any]:
    left, right = tap_align.align(read_set(left_dir, storage), read_set(right_dir, storage))
    if config is not None:
        names = [s.name for s in config.sides]
        if left.side not in names or right.side not in names:
            raise FingerprintSetError(f"the fingerprint sets are of sides '{left.side}' and '{right.side}', but "
                                      f"{config.path} names {', '.join(names)}")
    from parity.config import ReportSpec, ToleranceSpec

    tolerance = config.tolerance if config else ToleranceSpec()
    report_spec = config.report if config else ReportSpec()
    left_analyzers, right_analyzers = read_analyzers(left.path, storage), read_analyzers(right.path, storage)
    analyzer_entries, analysis_noise = judge_noise(
        analyzers.compare(left_analyzers, right_analyzers), left_analyzers, right_analyzers,
        read_feeds(left.path, storage), read_feeds(right.path, storage))
    # the tolerance tier takes what analysis noise explains as within (the tally tells it from the user's
    # tolerance); the tally decodes the whole input records of its examples only
    stream = DiffStream(left, right, analysis_noise.widen(tolerance), keep_unpaired=report_spec.examples,
                        defer_input=True)
    model = _model_stage(config, left, right, tolerance, report_spec.examples)
    tally = Tally(cause_context(config, left, right, analyzer_entries, redact=report_spec.redact,
                                nondeterministic=frozenset(s for n in (noise or {}).values() for s in n["stages"]),
                                analysis_noise=analysis_noise),
                  report_spec.redact, report_spec.examples, analysis_noise, tolerance,
                  track_upstream=model is not None)
    with diff_gc():
        # with a model, its stage is compared on the engine too
        if engine.wanted(on.where, on.runner, out_dir, stream, on.pipeline_options):
            summary = engine.summarize(stream, tally, runner=on.runner, pipeline_options=on.pipeline_options,
                                       work_dir=urls.child(out_dir, output.DIFF_WORK),
                                       model=model.comparison if model is not None else None)
        else:
            summary = halves.summarize(stream, tally)
            if model is not None:
                from parity.sets.model_outputs import read_model_outputs

                summary = summary.with_model(model.comparison.compare(read_model_outputs(left.path, left.storage),
                                                                      read_model_outputs(right.path, right.storage),
                                                                      summary.tally.upstream or {}))
        report = build_report(
            name=config.name if config else left.manifest.get("config_name", ""),
            sides=(left.side, right.side), summary=summary,
            quarantined=(left.manifest["records"]["quarantined"], right.manifest["records"]["quarantined"]),
            quarantine_reasons=(left.manifest.get("quarantine_reasons", {}),
                                right.manifest.get("quarantine_reasons", {})),
            tolerance=tolerance, noise=noise, analysis_noise=analysis_noise, analyzers=analyzer_entries,
            environments=(left.manifest.get("environment", {}), right.manifest.get("environment", {})),
            feature_names=(left.manifest.get("features", []), right.manifest.get("features", [])),
            decision=None if model is None else model.decision)
    _require_pairs(report, left, right)
    taps = tap_align.report_taps(left, right)
    if taps is not None:  # only when a set was written by taps: other reports stay byte for byte as they were
        report["taps"] = taps
    write_reports(report, out_dir, storage)
    progress.event("diff_done", paired=report["records"]["paired"], diverged=report["records"]["diverged"])
    return report


@dataclass(frozen=True)
class _ModelPlan:
    """How a diff compares its model stage: `comparison` (given each differing pair's judgement, the tally's
    `upstream`), and the report's `decision` (None when no side's model names one)."""

    comparison: ModelComparison
    decision: dict[str, Any] | None


def _model_stage(config: Config | None, left: FingerprintSet, right: FingerprintSet, tolerance: Any,
                 examples: int) -> _ModelPlan | None:
    """None unless both sets hold model outputs (a `model:` replayed on both sides), so reports without a model
    keep their bytes; else how the model stage is compared (`_ModelPlan`)."""
    from parity.sets.model_outputs import first_outputs, has_model_outputs
    from parity.stages.model import model_identity

    if not (has_model_outputs(left.path, left.storage) and has_model_outputs(right.path, right.storage)):
        return None
    # a model gives every record the same outputs: the first record of each side names them
    firsts = (first_outputs(left.path, left.storage), first_outputs(right.path, right.storage))
    names = sorted({name for data in firsts if data is not None
                    for name in canonical.decode(data)})
    specs = [config.side(left.side).model, config.side(right.side).model] if config is not None else [None, None]
    decision = next((spec.decision for spec in specs if spec is not None and spec.decision is not None), None)
    same = None
    if specs[0] is not None and specs[1] is not None:
        same = (model_identity(specs[0].saved), specs[0].signature, specs[0].inputs) == \
            (model_identity(specs[1].saved), specs[1].signature, specs[1].inputs)
    return _ModelPlan(ModelComparison(tolerance, decision, tuple(names), examples, same),
                       None if decision is None else {"output": decision.output, "rule": decision.rule,
                                                      **({"at": decision.at} if decision.rule == "threshold" else {})})


_KEYS_NAMED = 3  # example keys per side in the no-pairs message


def _require_pairs(report: dict[str, Any], left: FingerprintSet, right: FingerprintSet) -> None:
    """Stops (exit 2, no reports) when not one record could be paired: then there is no verdict to give, and
    "parity" would be a false pass (docs/contract.md, section 4)."""
    from parity.errors import InputError

    records = report["records"]
    if records["paired"]:
        return
    sides = []
    for label, fset in (("left", left), ("right", right)):
        read, quarantined = records[label], records["quarantined"][label]
        state = "no records" if not read else f"all {read} records quarantined (see {fset.path}/quarantine.jsonl)" \
            if read == quarantined else f"{read} records ({quarantined} quarantined)"
        sides.append(f"side '{fset.side}' ({label}) has {state}")
    why = "; ".join(sides)
    if records["left"] > records["quarantined"]["left"] and records["right"] > records["quarantined"]["right"]:
        examples = report["unpaired_examples"]
        named = "; ".join(f"{label} keys " + ", ".join(_clip(json.dumps(key)) for key in
                                                       examples[f"{label}_only"][:_KEYS_NAMED])
                          for label in ("left", "right"))  # JSON: 1 and "1" look different
        why += f"; no record key is on both sides (e.g. {named}); check that both sides replay the same records " \
               f"and that capture.key names the same fields, with the same types (1 and \"1\" differ)"
    raise InputError(f"no record could be paired, so there is no verdict: {why}")


def _clip(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def write_reports(report: dict[str, Any], out_dir: str, storage: Storage = Storage()) -> None:
    """Writes every format with `storage`; the Markdown and HTML name `out_dir` as given (relative stays relative)
    in their `parity show` commands, so a fixed command line gives the same bytes."""
    from parity.report import render_html, render_markdown

    storage.makedirs(out_dir)
    texts = {name: render_markdown(report, out_dir=out_dir) if fmt == "md" else
             render_html(report, out_dir=out_dir) if fmt == "html" else RENDERERS[fmt](report)
             for fmt, name in OUTPUT_FILES.items()}
    written: list[str] = []
    try:  # all of them or none: CI must never publish one format of a run that failed while writing the next
        for name, text in texts.items():
            storage.write_text(urls.child(out_dir, name), text)
            written.append(urls.child(out_dir, name))
    except BaseException:
        for path in written:
            storage.remove(path)
        raise


def _write_json(path: str, data: Any, storage: Storage) -> None:
    storage.write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _find_sets(path: str, storage: Storage) -> tuple[FingerprintSet, FingerprintSet]:
    sides_dir = urls.child(path, SIDES_DIR)
    if not storage.isdir(sides_dir):
        raise FingerprintSetError(f"{path}: no {SIDES_DIR}/ folder; pass the --out folder of `parity check`")
    report_path = urls.child(path, "report.json")
    names = storage.list_names(sides_dir)
    if storage.exists(report_path):
        sides = json.loads(storage.read_text(report_path)).get("sides", {})
        names = [sides.get("left"), sides.get("right")]
    if len(names) != 2:
        raise FingerprintSetError(f"{sides_dir}: expected two fingerprint sets, found {names}")
    return read_set(urls.child(sides_dir, names[0]), storage), read_set(urls.child(sides_dir, names[1]), storage)


def _show_model(result: dict[str, Any], left: FingerprintSet, right: FingerprintSet, key_json: str) -> None:
    """`show`'s `model` stage, the last, when the sets hold model outputs (a `model:` was replayed)."""
    from parity.sets.model_outputs import has_model_outputs, outputs_of_key

    if not (has_model_outputs(left.path, left.storage) or has_model_outputs(right.path, right.storage)):
        return
    entry: dict[str, Any] = {"stage": "model"}
    for label, fset in (("left", left), ("right", right)):
        found = outputs_of_key(fset.path, key_json, fset.storage)
        entry[label] = None if found is None else {"fingerprint": f"{found[0]:016x}",
                                                   "value": canonical.to_json(found[1])}
    entry["equal"] = bool(entry["left"] and entry["right"] and
                          entry["left"]["fingerprint"] == entry["right"]["fingerprint"])
    if not entry["equal"] and result["first_divergence"] is None:
        result["first_divergence"] = "model"
    result["stages"].append(entry)


def show(path: str, key: str, storage: Storage = Storage()) -> dict[str, Any]:
    """One record, stage by stage, on both sides: values, fingerprints, and where they part (the check's folder
    `path` read with `storage`)."""
    left, right = _find_sets(path, storage)
    try:
        key_value = json.loads(key)
    except ValueError:
        key_value = key
    key_json = json.dumps(canonical.to_json(key_value), ensure_ascii=False, sort_keys=True)
    result: dict[str, Any] = {"key": canonical.to_json(key_value), "sides": [left.side, right.side],
                              "stages": [], "first_divergence": None}
    rows = [fset.row_of_key(key_json) for fset in (left, right)]  # streamed: a set is never held whole
    if rows == [None, None]:
        raise FingerprintSetError(f"key {key} is on neither side of {path}; keys are JSON, e.g. 123 or "
                                  f"\"abc\" or [1, \"a\"]")
    values = []
    for fset, row in zip((left, right), rows):
        if row is None:
            values.append(None)
            continue
        ref = (row["part"], row["row"])
        values.append((row, fset.values([ref])[ref]))
    for stage in STAGES:
        entry: dict[str, Any] = {"stage": stage}
        for label, item in zip(("left", "right"), values):
            if item is None:
                entry[label] = None
                continue
            fp_row, value_row = item
            entry[label] = {"fingerprint": f"{fp_row[f'{stage}_fp']:016x}",
                            "value": canonical.to_json(value_row[stage])}
            if stage == "window" and (utc := window_value_utc(entry[label]["value"])) is not None:
                entry[label]["utc"] = utc  # the event time and window bounds as ISO-8601, beside the µs
        entry["equal"] = bool(entry["left"] and entry["right"] and
                              entry["left"]["fingerprint"] == entry["right"]["fingerprint"])
        if not entry["equal"] and result["first_divergence"] is None:
            result["first_divergence"] = stage
        result["stages"].append(entry)
    _show_model(result, left, right, key_json)
    for label, item in zip(("left_location", "right_location"), values):
        result[label] = item[1]["location"] if item else None
    return result
