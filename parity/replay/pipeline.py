"""Replays one side as a Beam job and writes its fingerprint set.

The pipeline works on batches of records (`RecBatch`, column by column), never one element per record:

    ReadBatches -> [Lateness] -> [MergeWindows] -> [Aggregates] -> ApplyStages -> Transform -> WriteSet
        -> WriteBuckets (the rows by key-range bucket, each sorted, written and summarized: parity.sets.buckets)

Stages that need the whole side (lateness in arrival order, session merging, per-(window, key) aggregates,
TFT analysis) are combines whose results reach the per-batch stages as side inputs. The batches waiting for
those side inputs (the read batches before ApplyStages and the merges' and aggregates' steps; with TFT, the staged
batches before Transform) are spilled to files and only their paths travel (`parity.replay.spill`), so a side
never sits in the runner's memory (on the in-process runner, a side with none of those side-wide results stages
its batches as read, fused with the read, and spills none: `ReplaySide._staged`);
a staged batch writes its stage values first (`WriteStageValuesFn`), so that its spill is mostly fingerprints.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

import apache_beam as beam

from parity.config import Config, SideConfig
from parity.errors import (ConfigError, OutputError, ParityError, RunnerError, UserCodeError, first_line,
                           from_worker_text, without_beam_suffix)
from parity.replay import spill
from parity.replay.batch import RecBatch, side_field_types
from parity.replay.bucket_step import WriteBuckets
from parity.replay.gate import TransformGate
from parity.replay.read_step import ReadBatchesFn
from parity.replay.side_inputs import aggregate_partials, arrival_rows, concat_lists, merge_rows
from parity.replay.stages_step import ApplyStagesFn
from parity.replay.transform_step import ApplyTransformFn, SavedInputsFn, WriteStageValuesFn, with_arrow_inputs
from parity.replay.model_step import ApplyModelFn
from parity.replay.write_step import WriteBatchFn
from parity.stages import shard as shard_stage
from parity.stages import window as window_stage
from parity.stages.transform import RecordError, TFTInput
from parity.storage import urls
from parity.storage.context import Storage

BATCH_SIZE = 2000
# Records per batch when the set is written to a URL: each batch costs a few objects (its spill, written and read
# back, and its value part), and an object in a store costs a request or two where a local file costs a system
# call; larger batches make those requests a small share of the work (benchmarks/RESULTS.md has the sizes tried).
URL_BATCH_SIZE = 10_000
TFT_OUTPUT = "tft_output"
TFT_BATCH_SIZE = 1000  # rows per record batch the TFT analysis reads (the largest TFT's own batching reaches)


class ReplaySide(beam.PTransform):
    """Replays the captured records of one side through its six stages and writes its fingerprint set.

    Input: the pipeline root. Output: a PCollection of (part name, fingerprint rows), one per batch. `storage`: the
    run's storage context, which every step that reads or writes a file carries to its workers.
    """

    def __init__(self, config: Config, side: SideConfig, out_dir: str, graph: FromSideGraph | None = None,
                 batch_size: int | None = None, reorder: bool = False, gate: TransformGate | None = None,
                 spills: spill.SpillPolicy = spill.SpillPolicy.KEEP, fused_read: bool = False, *,
                 storage: Storage):
        super().__init__()
        self.storage = storage
        self.reorder = reorder  # the noise replay: other batching, files and records in reverse order
        self.config = config
        self.side = side
        self.out_dir = out_dir
        # where a `saved: {from_side}` transform finds the other side's graph (by default: beside out_dir)
        self.graph = graph or FromSideGraph.of(config, side, out_dir, storage=storage)
        self.batch_size = batch_size or batch_size_for(out_dir)
        # while the other side replays at once (`parity.replay.gate`): a TFT side says `ready` once its graph is
        # written; a `saved: {from_side}` side stages every batch, then waits for that graph
        self.gate = gate
        self.spills = spills  # what becomes of a spill file once read (`parity.replay.spill`)
        # the read fused with the stages where no side-wide result bears on them (`_staged`): only where the
        # steps run in this process, whose progress counts each batch as it goes
        self.fused_read = fused_read

    def expand(self, root: beam.pvalue.PBegin) -> beam.PCollection:
        side = self.side
        files = _capture_files(self.config, side, self.storage)
        batch_size = self.batch_size
        if self.reorder:
            files = files[::-1]
            batch_size = max(1, batch_size // 2 - 3)
        batches = (root
                   # reshuffled: a runner with workers spreads the files over them (else one reads them all)
                   | "CaptureFiles" >> beam.Create(files, reshuffle=True)
                   | "ReadBatches" >> beam.ParDo(ReadBatchesFn(side, batch_size, self.out_dir, self.reorder,
                                                                   redact=self.config.report.redact,
                                                                   storage=self.storage))
                   .with_output_types(RecBatch))
        transformed = self._transform(self._staged(batches))
        if side.model is not None:
            transformed = transformed | "Model" >> beam.ParDo(ApplyModelFn(self.out_dir, side, storage=self.storage)) \
                .with_output_types(RecBatch)
        rows = transformed | "WriteSet" >> beam.ParDo(WriteBatchFn(self.out_dir, side, storage=self.storage))
        _ = rows | "WriteBuckets" >> WriteBuckets(self.out_dir, self.storage)
        return rows

    def _staged(self, batches: beam.PCollection) -> beam.PCollection:
        """The read batches through the window, shard, coder and seed stages (`ApplyStagesFn`).

        Where the side-wide results (lateness, merged windows, aggregates) bear on the stages, they are side
        inputs: the runner cannot fuse the stages with the read, so the read batches are spilled and only their
        paths wait for those results (`parity.replay.spill`). A side with none of them whose steps run in this
        process (`self.fused_read`, the in-process DirectRunner) stages each batch as read, in the read's fused
        step: no batch is pickled to a file and loaded back. On any other runner the read stays a step of its
        own even then, so that a cluster's metrics count the records read while the later steps still hold
        them (Flink reports a fused step's counters only when its bundle ends)."""
        side = self.side
        if self.fused_read and not self._has_side_results():
            return batches | "ApplyStages" >> beam.ParDo(ApplyStagesFn(side, self.spills, storage=self.storage),
                                                         late={}, merges={}, aggregates={}) \
                .with_output_types(RecBatch)
        spilled = batches | "SpillRead" >> beam.ParDo(spill.SpillFn(self.out_dir, "read", self.storage))
        late = self._lateness(batches)
        merges = self._merges(spilled, late)
        aggregates = self._aggregates(batches, spilled, late, merges)
        return spilled | "ApplyStages" >> beam.ParDo(ApplyStagesFn(side, self.spills, storage=self.storage),
                                                     late=late, merges=merges,
                                                     aggregates=aggregates).with_output_types(RecBatch)

    def _has_side_results(self) -> bool:
        """Whether the stages take a side-wide result (lateness, merged windows, shard aggregates)."""
        return self._has_lateness() or self._has_merges() or self._has_aggregates()

    def _lateness(self, batches: beam.PCollection) -> Any:
        if not self._has_lateness():
            return beam.pvalue.AsSingleton(batches.pipeline | "NoLateness" >> beam.Create([{}]))
        spec = self.side.window.lateness  # type: ignore[union-attr]
        # Without defaults: Beam would hand the combined arrival rows of the whole side to the default's
        # step as a side input, and its state cache walks a side input object by object to weigh it.
        late = (batches
                | "ArrivalRows" >> beam.Map(arrival_rows)
                | "AllArrivals" >> beam.CombineGlobally(concat_lists).without_defaults()
                | "ReplayArrivals" >> beam.Map(lambda rows: window_stage.late_records(spec, rows)))
        return beam.pvalue.AsSingleton(late, default_value={})

    def _has_lateness(self) -> bool:
        return self.side.window is not None and self.side.window.lateness is not None

    def _has_merges(self) -> bool:
        return window_stage.is_merging(window_stage.build_windowfn(self.side.window))

    def _has_aggregates(self) -> bool:
        return self.side.shard is not None and bool(self.side.shard.aggregates)

    def _merges(self, spilled: beam.PCollection, late: Any) -> Any:
        windowfn = window_stage.build_windowfn(self.side.window)
        if not window_stage.is_merging(windowfn):
            return beam.pvalue.AsSingleton(spilled.pipeline | "NoMerging" >> beam.Create([{}]))
        merged = (spilled
                  | "ProtoWindows" >> beam.ParDo(spill.OfSpilledFn(merge_rows, storage=self.storage), late=late)
                  | "WindowsPerKey" >> beam.CombinePerKey(_union)
                  | "MergeWindows" >> beam.Map(lambda kv: (kv[0], window_stage.merge_windows(windowfn, kv[1])))
                  | "AllMerges" >> beam.combiners.ToDict())
        return beam.pvalue.AsSingleton(merged)

    def _aggregates(self, batches: beam.PCollection, spilled: beam.PCollection, late: Any, merges: Any) -> Any:
        if not self._has_aggregates():
            return beam.pvalue.AsSingleton(spilled.pipeline | "NoAggregates" >> beam.Create([{}]))
        specs = self.side.shard.aggregates
        groups = (self._partials(batches, spilled, late, merges)
                  | "CombineGroups" >> beam.CombinePerKey(lambda states: _merge_partials(specs, states))
                  | "FinishGroups" >> beam.Map(lambda kv: (kv[0], shard_stage.finish_group(specs, kv[1])))
                  | "AllGroups" >> beam.combiners.ToDict())
        return beam.pvalue.AsSingleton(groups)

    def _partials(self, batches: beam.PCollection, spilled: beam.PCollection, late: Any, merges: Any) -> Any:
        """Each batch's partial aggregate states per (window, group). Where no side input bears on them (no
        lateness, no merging windows), from the batches as read: the step fuses with the read, and no spill file
        is loaded again for it (a third of the spill loads of a TFT side). Else from the spilled batches, once
        the lateness and the merges are complete (`spill.OfSpilledFn`)."""
        if not self._has_lateness() and not self._has_merges():
            return batches | "AggregatePartials" >> beam.FlatMap(aggregate_partials, self.side, {}, {})
        return spilled | "AggregatePartials" >> beam.ParDo(
            spill.OfSpilledFn(aggregate_partials, self.side, storage=self.storage), late=late, merges=merges)

    def _transform(self, staged: beam.PCollection) -> beam.PCollection:
        spec = self.side.transform
        if spec is None or spec.kind == "python":
            return staged | "Transform" >> beam.ParDo(ApplyTransformFn(self.side, None, storage=self.storage)) \
                .with_output_types(RecBatch)
        if spec.kind == "saved" and self.graph is not None and self.gate is not None:
            return self._gated(staged, self.graph, self.gate)
        if spec.kind == "saved":
            saved = spec.path or self.graph.find()  # type: ignore[union-attr]
            return staged | "Transform" >> beam.ParDo(ApplyTransformFn(self.side, saved, storage=self.storage)) \
                .with_output_types(RecBatch)
        return self._tft(staged)

    def _gated(self, staged: beam.PCollection, graph: FromSideGraph, gate: TransformGate) -> beam.PCollection:
        """Stages every batch first (spilled), then waits for the other side's graph, then transforms."""
        types = side_field_types(self.side)
        if types is not None:  # the records as Arrow when the graph's raw features are the ones they make
            staged = staged | "SavedInputs" >> beam.ParDo(SavedInputsFn(
                types, list(graph.candidates), self.side.capture.tfmd_text)).with_output_types(RecBatch)
        spilled = (staged
                   | "WriteStageValues" >> beam.ParDo(WriteStageValuesFn(self.out_dir, storage=self.storage))
                   .with_output_types(RecBatch)
                   | "SpillStaged" >> beam.ParDo(spill.SpillFn(self.out_dir, "staged", self.storage)))
        found = (spilled
                 | "CountStaged" >> beam.combiners.Count.Globally()
                 | "AwaitGraph" >> beam.Map(await_graph, gate, graph))
        return spilled | "Transform" >> beam.ParDo(ApplyTransformFn(self.side, None, self.spills, storage=self.storage),
                                                   beam.pvalue.AsSingleton(found)).with_output_types(RecBatch)

    def _tft(self, staged: beam.PCollection) -> beam.PCollection:
        import tensorflow_transform.beam as tft_beam
        from tensorflow_transform.tf_metadata import metadata_io

        side = self.side
        types = side_field_types(side)
        if types is None:
            raise ConfigError(f"{self.config.path}: sides.{side.name}.transform.tft: a TFT transform needs "
                              f"typed inputs; add capture.schema")
        tft_input = TFTInput(types, side.capture.tfmd_text)
        metadata = tft_input.metadata
        preprocessing_fn = _with_custom_config(self.config, side)
        output_dir, temp_dir = _tft_folders(self.config, side, self.out_dir, self.storage)
        # The raw schema is known before the job runs; serving (and `saved`) reads it from metadata/.
        metadata_io.write_metadata(metadata, os.path.join(output_dir, "metadata"))
        # Record batches of a fixed size, cut from parity's own batches: float32 analyzers (scale_to_z_score's
        # mean and variance) accumulate batch by batch, and batches that followed the machine's speed (TFT's
        # adaptive batching of instance dicts) moved them by an ulp between runs.
        staged = staged | "TFTInputs" >> beam.Map(_with_tft_input, tft_input).with_output_types(RecBatch)
        record_batches = staged | "TFTRecordBatches" >> beam.FlatMap(_tft_record_batches, tft_input)
        with tft_beam.Context(temp_dir=temp_dir, force_tf_compat_v1=False,
                              desired_batch_size=TFT_BATCH_SIZE):
            try:  # TFT traces the function here, before the job runs
                transform_fn = ((record_batches, tft_input.tensor_adapter_config)
                                | "AnalyzeDataset" >> tft_beam.AnalyzeDataset(preprocessing_fn))
            except ParityError:
                raise
            except MissingCustomConfigKey as exc:
                key = exc.args[0] if exc.args else "?"
                raise UserCodeError(
                    f"{self.config.path}: sides.{side.name}.transform.custom_config has no key {key!r}, which "
                    f"preprocessing_fn '{side.transform.ref.text}' reads (TFX hands it Transform's "  # type: ignore[union-attr]
                    f"custom_config): give it as `custom_config: {{{key}: VALUE}}` next to `tft:`, with the value "
                    f"your pipeline passes") from exc
            except Exception as exc:
                raise UserCodeError(
                    f"{self.config.path}: sides.{side.name}.transform.tft: preprocessing_fn "
                    f"'{side.transform.ref.text}' raised {type(exc).__name__} while TFT traced it: "  # type: ignore[union-attr]
                    f"{first_line(exc)} (its inputs: {_input_kinds(tft_input)})") from exc
            written = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(output_dir)
        if self.gate is not None:  # the other side, gated, may go on
            _ = written | "GraphWritten" >> beam.Map(graph_written, self.gate)
        return (staged
                | "WriteStageValues" >> beam.ParDo(WriteStageValuesFn(self.out_dir, storage=self.storage))
                .with_output_types(RecBatch)
                | "SpillStaged" >> beam.ParDo(spill.SpillFn(self.out_dir, "staged", self.storage))
                | "Transform" >> beam.ParDo(ApplyTransformFn(side, output_dir, self.spills, storage=self.storage),
                                            beam.pvalue.AsSingleton(written)).with_output_types(RecBatch))


def batch_size_for(out_dir: str) -> int:
    """Records per batch of a replay writing its set to `out_dir`: URL_BATCH_SIZE on a URL, else BATCH_SIZE."""
    return URL_BATCH_SIZE if urls.is_url(out_dir) else BATCH_SIZE


TFT_TEMP = "_tft_tmp"


def _tft_folders(config: Config, side: SideConfig, out_dir: str, storage: Storage) -> tuple[str, str]:
    """Where a TFT side's graph (`tft_output`, under the set's folder) and TFT's temporary files go. Locally:
    `tft_output` and `_tft_tmp` in the set's folder, as always. On a URL set: the temporary files under Beam's
    `--temp_location` when given (`<temp_location>/parity_tft_tmp`), else `_tft_tmp` under the set's URL.

    TFT writes both with TensorFlow's own file system (tf.io.gfile), not Beam's: a URL works only where
    TensorFlow has a file system for its scheme (`gs://` in stock TensorFlow; `s3://` only with tensorflow-io,
    which has no build for TensorFlow 2.21).

    Raises:
        OutputError: TensorFlow cannot write the scheme; the message names the fix.
    """
    if not urls.is_url(out_dir):
        return os.path.join(out_dir, TFT_OUTPUT), os.path.join(out_dir, TFT_TEMP)
    from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

    temp_location = PipelineOptions(list(storage.options)).view_as(GoogleCloudOptions).temp_location
    temp_dir = urls.child(temp_location, "parity_tft_tmp") if temp_location else urls.child(out_dir, TFT_TEMP)
    output_dir = urls.child(out_dir, TFT_OUTPUT)
    for path, what in ((output_dir, "the graph it exports (tft_output, under --out)"),
                       (temp_dir, "its temporary files (under --temp_location, else --out)")):
        if not _tensorflow_has_filesystem(path):
            raise OutputError(
                f"{config.path}: sides.{side.name}.transform.tft: TensorFlow Transform writes {what} with "
                f"TensorFlow's file system, which has none for {urls.scheme(path)}:// here ({path}); give a local "
                f"--out or one on a scheme TensorFlow writes (gs://), or install a TensorFlow file system for "
                f"{urls.scheme(path)}:// (tensorflow-io, where it has a build for this TensorFlow)")
    return output_dir, temp_dir


def _tensorflow_has_filesystem(path: str) -> bool:
    """Whether tf.io.gfile has a file system for `path`'s scheme: asked of TensorFlow itself (an unknown scheme
    raises UnimplementedError; any other error, such as missing credentials, is for TFT to report)."""
    import tensorflow as tf

    try:
        tf.io.gfile.exists(path)
    except tf.errors.UnimplementedError:
        return False
    except Exception:  # noqa: BLE001 - the scheme is known; what else fails is TFT's to say, with its context
        return True
    return True


class MissingCustomConfigKey(KeyError):
    """A key a preprocessing_fn read from its custom_config that the config does not give."""


class CustomConfig(dict):
    """TFX Transform's `custom_config` as parity hands it to a preprocessing_fn: a plain dict whose missing key
    raises `MissingCustomConfigKey`, so the error can name `transform.custom_config` and the key instead of a
    bare KeyError from inside the module (a config `parity init` wrote leaves the keys for the user to fill)."""

    def __missing__(self, key: Any) -> Any:
        raise MissingCustomConfigKey(key)


def _with_custom_config(config: Config, side: SideConfig) -> Any:
    """The side's preprocessing_fn as TFX Transform calls it: with `custom_config=` (the config's mapping, else
    {}) when it has a parameter of that name, else with its inputs alone."""
    import functools
    import inspect
    import json

    spec = side.transform
    fn = spec.ref.resolve()  # type: ignore[union-attr]
    try:
        takes = "custom_config" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        takes = False
    if takes:
        custom = CustomConfig(json.loads(spec.custom_config) if spec.custom_config else {})  # type: ignore[union-attr]
        return functools.update_wrapper(functools.partial(fn, custom_config=custom), fn)
    if spec.custom_config is not None:  # type: ignore[union-attr]
        raise ConfigError(f"{config.path}: sides.{side.name}.transform.custom_config: preprocessing_fn "
                          f"'{spec.ref.text}' takes no custom_config parameter; remove custom_config or "  # type: ignore[union-attr]
                          f"add the parameter")
    return fn


def _input_kinds(tft_input: TFTInput) -> str:
    """What `preprocessing_fn` was handed, e.g. `fare: SparseTensor float32, trip_miles: Tensor float32 [N, 1]`:
    a TFX module that expects other tensors fails while traced, and this says which it got."""
    from tensorflow_transform.tf_metadata import schema_utils

    spec = schema_utils.schema_as_feature_spec(tft_input.metadata.schema).feature_spec
    kinds = []
    for name, one in sorted(spec.items()):
        if type(one).__name__ == "VarLenFeature":
            kinds.append(f"{name}: SparseTensor {one.dtype.name}")
        else:
            kinds.append(f"{name}: Tensor {one.dtype.name} [N{''.join(f', {d}' for d in one.shape)}]")
    return ", ".join(kinds)


@dataclass(frozen=True)
class FromSideGraph:
    """Where a `saved: {from_side}` transform finds the graph the other side exported, in order: that side's
    TFT output folder, then its folder itself (`parity replay --transform-from DIR`, else the sibling of the
    side's own folder named after it), looked for with the run's storage context."""

    config_path: str
    side: str
    from_side: str
    candidates: tuple[str, ...]
    storage: Storage = Storage()

    @classmethod
    def of(cls, config: Config, side: SideConfig, out_dir: str,
           transform_from: str | None = None, storage: Storage = Storage()) -> FromSideGraph | None:
        """The side's `from_side` graph's places, or None for any other transform."""
        spec = side.transform
        if spec is None or spec.kind != "saved" or spec.from_side is None:
            return None
        if transform_from is None and urls.is_url(out_dir):
            folder = urls.child(out_dir.rstrip("/").rsplit("/", 1)[0], spec.from_side)
        else:
            folder = transform_from or os.path.join(os.path.dirname(os.path.abspath(out_dir)), spec.from_side)
        return cls(config.path, side.name, spec.from_side, (urls.child(folder, TFT_OUTPUT), folder), storage)

    def find(self) -> str:
        """The first place that holds an exported graph; a ConfigError naming the last when none does."""
        for path in self.candidates:
            if self.storage.isdir(urls.child(path, "transform_fn")):
                return path
        raise ConfigError(f"{self.config_path}: sides.{self.side}.transform.saved.from_side: no exported transform "
                          f"graph of side '{self.from_side}' at {self.candidates[-1]}; replay side "
                          f"'{self.from_side}' first (parity check does) or pass --transform-from DIR")


def graph_written(unused_written: Any, gate: TransformGate) -> None:
    """A step of a TFT replay, after its graph is published: the side waiting for it may go on."""
    gate.ready()


def await_graph(unused_batches: int, gate: TransformGate, graph: FromSideGraph) -> str:
    """A step of a gated replay, once every batch is staged: waits at the gate, then finds the graph."""
    import tensorflow_transform  # noqa: F401  (seconds of imports: done while the other side replays)

    if not gate.wait():
        raise RunnerError(f"side '{graph.side}' waited for side '{graph.from_side}' to export its transform graph, "
                          f"but that replay did not finish")
    return graph.find()


def _union(windows: Iterable[Iterable]) -> set:
    result: set = set()
    for group in windows:
        result.update(group)
    return result


def _merge_partials(specs: tuple, states: Iterable[list]) -> list:
    states = list(states)
    return shard_stage.merge_group_states(specs, states) if states else []


def _with_tft_input(batch: RecBatch, tft_input: TFTInput) -> RecBatch:
    """`with_arrow_inputs` in the analysis's record batches of TFT_BATCH_SIZE rows: the analysis reads them."""
    return with_arrow_inputs(batch, tft_input, TFT_BATCH_SIZE)


def _tft_record_batches(batch: RecBatch, tft_input: TFTInput) -> Iterable[Any]:
    """The batch's records that reach the transform, as the analysis's record batches of TFT_BATCH_SIZE."""
    if batch.transform_arrow is not None:
        yield from batch.transform_arrow
        return
    todo = [i for i, value in enumerate(batch.transform_inputs) if value is not None]
    try:
        yield from tft_input.record_batches([batch.transform_inputs[i] for i in todo], TFT_BATCH_SIZE)
    except RecordError as exc:
        raise UserCodeError(f"record {batch.key_text(todo[exc.index])}: {exc}") from exc


def _capture_files(config: Config, side: SideConfig, storage: Storage) -> list[tuple[int, str, str]]:
    from parity.capture import list_capture_files

    files = list_capture_files(side.capture.path, config.base_dir, storage)
    return [(index, path, path if urls.is_url(path) else os.path.relpath(path, config.base_dir))
            for index, path in enumerate(files)]


def unwrap_pipeline_error(exc: BaseException) -> ParityError | None:
    """Finds a ParityError raised inside a DoFn, whatever the runner wrapped it in."""
    seen = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, ParityError):
            return type(current)(without_beam_suffix(str(current)))
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return from_worker_text(str(exc))  # a worker process (multi_processing, Flink) sends the traceback as text
