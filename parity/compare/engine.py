"""A diff's summary as a Beam job on the replay's runner: the per-pair work where the replays ran, the client
merging small summaries.

A diff's cost is per differing pair (fetching its stage values, the tolerance tier, the cause, the tally). Two
bucketed sets (parity.sets.buckets) are 2**KEY_RANGE_BITS key ranges on disk whose pairs need nothing from each
other, so the job has one element per key range: a worker opens both sets (by path: they may be on s3://), diffs
its range (`DiffStream` over that range, a fresh `Tally`) and writes the range's `DiffSummary` into the work
folder. The client reads the summaries and merges them in key-range order (`merged_in_order`), which gives the
summary of one process reading every pair in key order (`DiffSummary.merged`): the same report, byte for byte.

A summary is small whatever the number of pairs (counts, at most `examples` examples per stage and cause, one
entry per feature) but for two things a tally gathers per differing pair:
- the (left, right) numbers behind each feature's histograms: they stay on the workers. Each range's numbers go
  on in the job: their extents are merged per feature, each range's are binned on the merged bins and the counts
  summed (parity.compare.histograms: exactly `histograms_of` all of them); the client reads one histogram per
  feature (`HISTOGRAMS`) and gives them to the merged summary (`DiffSummary.with_histograms`);
- with a model stage, `Tally.upstream` (one judgement per differing pair, which the model stage is compared
  with): each worker compares its range's model stage (the model outputs of its range's keys) and drops them; the
  client merges the ranges' model stages (`ModelComparison.merged`: counts, largest deltas, the first examples by
  key text).

The job runs on the runner and with the pipeline options of the replays (on Flink, the same job server:
`parity.replay.runners.make_options`). Pickled summaries travel through the work folder, inside the run's out
folder (the workers write where the replays wrote their sets), which is removed once they are read. Each file is
sealed with the run's secret (`parity.compare.sealed`): the client unpickles nothing another process wrote there.

    summary = engine.summarize(stream, tally, runner="FlinkRunner", pipeline_options=[...], work_dir=...)
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

import apache_beam as beam
import pyarrow as pa

from parity import compat
from parity.compare.diff import DiffStream, diff_gc, tallied
from parity.compare.histograms import Counts, Extent, counts_of, extent_of, histograms_of_counts, summed_counts
from parity.compare.model_stage import ModelComparison, ModelStage, Upstream
from parity.compare.sealed import new_secret, opened, sealed
from parity.compare.summary import DiffSummary
from parity.compare.tally import Tally
from parity.config import ToleranceSpec
from parity.console import progress
from parity.errors import FingerprintSetError, RunnerError
from parity.sets.fingerprint_set import KEY_RANGE_BITS, FingerprintSet
from parity.storage import urls
from parity.storage.context import Storage

RANGES = 1 << KEY_RANGE_BITS
HISTOGRAMS = "histograms.pickle"  # in the work folder: each feature's histograms
_NUMBERS = "numbers"  # the DoFn's tagged output: (feature, (range, lefts, rights))
_PART = re.compile(r"^range-(\d+)\.pickle$")


def wanted(diff_on: str, runner: str, out_dir: str, stream: DiffStream,
           pipeline_options: Sequence[str] | None = None) -> bool:
    """Whether the diff runs on the engine: `engine`, or `auto` when the replays' SDK workers run outside this
    process (a runner other than the in-process DirectRunner, with an environment other than LOOPBACK) or the out
    folder is a URL. Sets that are not both bucketed (a set written by taps, a set of one fingerprints file) have
    no key ranges to spread: `auto` diffs them here, and `engine` is refused for them (FingerprintSetError, exit
    2, naming the sets) rather than quietly run here.

    LOOPBACK workers (parity's default on Flink) run in this very process, so a diff job there would only add a
    job's start-up and Beam's per-element cost to the same client CPU and memory: `auto` keeps it local."""
    left, right = stream.sets
    if diff_on == "local":
        return False
    unbucketed = [fset.path for fset in (left, right) if fset.buckets is None]
    if unbucketed and diff_on == "engine":
        raise FingerprintSetError(
            f"--diff-on engine: {' and '.join(unbucketed)} {'has' if len(unbucketed) == 1 else 'have'} no key "
            f"ranges to spread over the engine's workers (a set written by taps, or of one fingerprints file, is "
            f"diffed in this process); run the diff with --diff-on local or auto")
    if unbucketed:
        return False
    if diff_on == "engine" or urls.is_url(out_dir):
        return True
    from parity.replay.flink import steps_in_this_process

    return not steps_in_this_process(runner, pipeline_options)


@dataclass(frozen=True)
class _Request:
    """What a worker needs to diff a key range, as plain picklable data: the sets by path (with the manifests and
    bucket summaries the client read), the stream's settings, an empty tally (its settings), the run's storage
    options and the work folder."""

    left: tuple[str, dict[str, Any], list[dict[str, Any]] | None]
    right: tuple[str, dict[str, Any], list[dict[str, Any]] | None]
    tolerance: ToleranceSpec
    keep: int | None
    defer: bool
    tally: Tally
    storage: Storage
    work_dir: str
    model: ModelComparison | None = None
    secret: bytes = field(default_factory=new_secret, repr=False)  # seals the files the workers write


def part_path(work_dir: str, key_range: int) -> str:
    return urls.child(work_dir, f"range-{key_range:02d}.pickle")


class _SummarizeRangeFn(beam.DoFn):
    """One key range's summary, written to the work folder (a retried range writes the same bytes again); its
    histogram numbers go on as the tagged output `_NUMBERS`."""

    def __init__(self, request: _Request) -> None:
        self._request = request

    def setup(self) -> None:
        self._request.storage.makedirs(self._request.work_dir)  # a worker's own file system (a URL needs none)

    def process(self, key_range: int) -> Iterator[Any]:
        request = self._request
        left, right = (FingerprintSet(path, manifest, buckets=buckets, storage=request.storage)
                       for path, manifest, buckets in (request.left, request.right))
        stream = DiffStream(left, right, request.tolerance, request.keep, frozenset({key_range}), request.defer)
        tally = request.tally.fresh()
        with diff_gc():
            counts = tallied(stream, tally)
            model = None if request.model is None else \
                _model_of_range(request.model, left, right, key_range, tally.upstream or {})
        numbers = tally.feature_stats.take_numbers()  # binned in the job: the summary written stays small
        # the judgements were for the range's model stage alone: the client never holds them
        summary = DiffSummary(counts, tally.frozen(upstream=False), model)
        path = part_path(request.work_dir, key_range)
        request.storage.write_bytes(path, sealed(request.secret, summary, path))
        yield key_range
        for name, (lefts, rights) in sorted(numbers.items()):
            if len(lefts):  # a feature of empty lists has no number to bin
                yield beam.pvalue.TaggedOutput(_NUMBERS, (name, (key_range, lefts, rights)))


def _model_of_range(model: ModelComparison, left: FingerprintSet, right: FingerprintSet, key_range: int,
                    upstream: dict[str, Upstream]) -> ModelStage:
    """The model stage of a key range: the model outputs of the range's keys alone, compared given the upstream
    judgements of the range's differing pairs."""
    from parity.sets.model_outputs import read_model_outputs

    keys = pa.concat_arrays([left.keys_of_range(key_range), right.keys_of_range(key_range)])
    return model.compare(read_model_outputs(left.path, left.storage, keys),
                         read_model_outputs(right.path, right.storage, keys), upstream)


def _extent(item: tuple[str, tuple[int, Any, Any]]) -> tuple[str, Extent]:
    name, (key_range, lefts, rights) = item
    return name, extent_of(lefts, rights, key_range)  # type: ignore[return-value]  # numbers are never empty


def _merged_extents(extents: Iterable[Extent]) -> Extent:
    return functools.reduce(Extent.merged, extents)


def _counts(item: tuple[str, tuple[int, Any, Any]], extents: dict[str, Extent]) -> tuple[str, Counts]:
    name, (_, lefts, rights) = item
    return name, counts_of(lefts, rights, extents[name])


def _summed(counts: Iterable[Counts]) -> Counts:
    return functools.reduce(summed_counts, counts)


def _histogram(item: tuple[str, Counts], extents: dict[str, Extent]) -> tuple[str, dict[str, Any] | None]:
    name, counts = item
    return name, histograms_of_counts(extents[name], counts)


def _write_histograms(found: dict[str, Any], request: _Request) -> None:
    path = urls.child(request.work_dir, HISTOGRAMS)
    request.storage.write_bytes(path, sealed(request.secret, dict(sorted(found.items())), path))


class SummarizeDiff(beam.PTransform):
    """PBegin -> the key ranges summarized: each range's `DiffSummary` in the work folder, and one histogram per
    feature (`HISTOGRAMS`) binned from every range's numbers there, where the ranges were tallied.

        pipeline | "SummarizeDiff" >> SummarizeDiff(request)
    """

    def __init__(self, request: _Request) -> None:
        super().__init__()
        self._request = request

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        request = self._request
        ranges = pbegin | "KeyRanges" >> beam.Create(list(range(RANGES))) | "Spread" >> beam.Reshuffle()
        tallied = ranges | "Summarize" >> beam.ParDo(_SummarizeRangeFn(request)).with_outputs(_NUMBERS,
                                                                                                 main="ranges")
        numbers = tallied[_NUMBERS]
        extents = (numbers | "Extents" >> beam.Map(_extent)
                   | "MergeExtents" >> beam.CombinePerKey(_merged_extents))
        bins = beam.pvalue.AsDict(extents)
        return (numbers | "Bin" >> beam.Map(_counts, bins)
                | "SumBins" >> beam.CombinePerKey(_summed)
                | "Histograms" >> beam.Map(_histogram, bins)
                | "Gather" >> beam.combiners.ToDict()
                | "WriteHistograms" >> beam.Map(_write_histograms, request))


def summarize(stream: DiffStream, tally: Tally, *, runner: str, pipeline_options: Sequence[str] | None,
              work_dir: str, model: ModelComparison | None = None) -> DiffSummary:
    """`stream`'s summary (the stream not iterated, `tally` empty), its key ranges diffed by a Beam job on
    `runner` with `pipeline_options`, the summaries merged here in key-range order; with `model`, its model
    stage compared on the workers too, range by range, and merged here. `work_dir` (in the out folder) holds
    the job's summaries until they are read, and is removed."""
    left, right = stream.sets
    request = _Request(_plain(left), _plain(right), stream.tolerance, stream.keep_unpaired, stream.defer_input,
                       tally.fresh(), left.storage, work_dir, model)
    storage = left.storage
    progress.event("diff_on_engine", runner=runner, key_ranges=RANGES)
    storage.delete_tree(work_dir)  # nothing of an earlier run's job is read as this one's
    storage.makedirs(work_dir)
    try:
        with compat.beam_process_options_kept():  # the pipeline sets Beam's process-wide options: put them back
            _run(request, runner, pipeline_options)
        summary = merged_in_order(_read_parts(work_dir, storage, request.secret), model)
        histograms = _opened(urls.child(work_dir, HISTOGRAMS), storage, request.secret)
    finally:
        storage.delete_tree(work_dir)
    if tally.redact:  # a redacted tally keeps no numbers and its report no histograms
        return summary
    return summary.with_histograms(histograms)


def _plain(fset: FingerprintSet) -> tuple[str, dict[str, Any], list[dict[str, Any]] | None]:
    return fset.path, fset.manifest, fset.buckets


def merged_in_order(parts: Iterable[tuple[int, DiffSummary]], model: ModelComparison | None = None) -> DiffSummary:
    """The summaries of consecutive key ranges, given in any order as (range, summary), merged in range order:
    the summary of every range read in key order (`DiffSummary.merged`); with `model`, the
    ranges' model stages merged too (`ModelComparison.merged`)."""
    ordered = [summary for _, summary in sorted(parts, key=lambda part: part[0])]
    if not ordered:
        raise ValueError("no summary to merge")
    merged = functools.reduce(DiffSummary.merged, (DiffSummary(s.counts, s.tally) for s in ordered))
    if model is None:
        return merged
    return merged.with_model(model.merged([summary.model for summary in ordered if summary.model]))


def _read_parts(work_dir: str, storage: Storage, secret: bytes) -> list[tuple[int, DiffSummary]]:
    """Every key range's summary the job wrote; RunnerError (exit 2) when one is missing."""
    names = storage.list_names(work_dir) if storage.isdir(work_dir) else []
    found = {int(match.group(1)): name for name in names if (match := _PART.match(name))}
    missing = sorted(set(range(RANGES)) - set(found))
    if missing:
        raise RunnerError(f"the diff's Beam job ended without the summaries of key ranges "
                          f"{', '.join(map(str, missing))} in {work_dir}; its workers must write where they read the "
                          f"fingerprint sets (on a cluster: an --out every worker reaches, e.g. s3://...)")
    return [(key_range, _opened(urls.child(work_dir, name), storage, secret)) for key_range, name in found.items()]


def _opened(path: str, storage: Storage, secret: bytes) -> Any:
    return opened(secret, _read(path, storage), path)


def _read(path: str, storage: Storage) -> bytes:
    try:
        return storage.read_bytes(path)
    except OSError as exc:
        raise RunnerError(f"{path}: the diff's Beam job did not write it ({exc}); its workers must write where "
                          f"they read the fingerprint sets (on a cluster: an --out every worker reaches)") from exc


def _run(request: _Request, runner: str, pipeline_options: Sequence[str] | None) -> None:
    """Runs the job to its end; a failure is a RunnerError naming the diff (or the ParityError raised in it),
    and a job that ends early (a failure, Ctrl-C) is cancelled on Flink too."""
    from parity.replay import cancel
    from parity.replay.pipeline import unwrap_pipeline_error
    from parity.replay.runners import make_options, make_runner

    args, job = list(pipeline_options or []), None
    if runner == "FlinkRunner":
        from parity.replay import flink
        from parity.replay.watch import job_name

        job = flink.option_value(args, "--job_name")
        if job is None:
            job = job_name("diff")
            args.append(f"--job_name={job}")
    options = make_options(runner, args)
    pipeline = beam.Pipeline(runner=make_runner(runner), options=options)
    _ = pipeline | "SummarizeDiff" >> SummarizeDiff(request)
    result = None
    try:
        try:
            result = pipeline.run()
            result.wait_until_finish()
        except BaseException:
            if job is not None:
                from parity.replay import flink

                given = options.get_all_options()
                cancel.end_job(result, flink.rest_source(given.get("flink_master"), given.get("job_endpoint")), job)
            raise
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        from parity.console import signals

        signals.raise_if_interrupted(exc)  # Beam turns a KeyboardInterrupt in a step into a RuntimeError
        error = unwrap_pipeline_error(exc)  # a ParityError raised in a step (a set that cannot be read)
        if error is not None:
            raise error from exc
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if not line.startswith("[while running")), "")
        raise RunnerError(f"the diff's Beam job failed on {runner}: {type(exc).__name__}: "
                          f"{last.split(' [while running', 1)[0]}") from exc
