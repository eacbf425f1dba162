"""The transform stage of a batch (`ApplyTransformFn`), and what prepares a batch for it: the stage values
written before a spill (`WriteStageValuesFn`) and the Arrow inputs of a `saved` graph (`SavedInputsFn`).

Every element is a `RecBatch` (parity/replay/batch.py): the records of one batch, column by column.
"""
from __future__ import annotations

import copy
import os
from typing import Any, Iterator

import apache_beam as beam

from parity.config import SideConfig
from parity.errors import UserCodeError
from parity.replay import spill
from parity.replay.batch import RecBatch, side_field_types
from parity.replay.culprit import first_failing, raised
from parity.sets.fingerprint_set import write_stage_values
from parity.stages.transform import PythonTransform, SavedTransform
from parity.storage.context import Storage


def with_arrow_inputs(batch: RecBatch, tft_input: Any, chunk: int) -> RecBatch:
    """The batch with the records that reach the transform as Arrow record batches of at most `chunk` rows
    (`transform_arrow`, `TFTInput.columnar_batch`) in place of their dicts, when every value converts
    column by column (else the batch as it is). A spilled batch then pickles a few Arrow buffers where it
    pickled a dict per record, and the graph is applied to them (`SavedTransform.apply_arrow`, which
    equals `apply` of the dicts)."""
    todo = [i for i, value in enumerate(batch.transform_inputs) if value is not None]
    records = [batch.transform_inputs[i] for i in todo]
    chunks = [tft_input.columnar_batch(records[start:start + chunk]) for start in range(0, len(records), chunk)]
    if not chunks or any(one is None for one in chunks):
        return batch
    out = copy.copy(batch)  # the same columns; only the transform inputs are replaced
    out.transform_inputs = [None if value is None else True for value in batch.transform_inputs]
    out.transform_arrow = chunks
    return out


class WriteStageValuesFn(beam.DoFn):
    """Writes a settled batch's locations and stage bytes before the transform (`write_stage_values`) and yields
    the batch without them (`input_bytes`, `locations` None, `value_bytes` empty): the step before a batch is
    spilled to wait for its transform, so that the spill carries its fingerprints but not its canonical bytes."""

    def __init__(self, out_dir: str, *, storage: Storage):
        self._out_dir = out_dir
        self._storage = storage  # the run's storage context, for a worker that writes to a URL

    def process(self, batch: RecBatch) -> Iterator[RecBatch]:
        write_stage_values(self._out_dir, batch.part, {"location": batch.locations, "input": batch.input_bytes,
                                                       **batch.value_bytes}, self._storage)
        yield batch.staged()  # the input batch is not changed: the TFT analysis reads it too


class SavedInputsFn(beam.DoFn):
    """A gated `saved` side's staged batches with their transform inputs as Arrow (`with_arrow_inputs`), once
    the graph's raw feature spec is found (its `metadata/`, which a TFT side writes before its job runs) and
    is the one the side's own field types give; until then, or when it differs, batches keep their dicts."""

    def __init__(self, field_types: dict, graph_dirs: list[str], tfmd_text: str | None = None):
        self._field_types = field_types
        self._graph_dirs = graph_dirs
        self._tfmd_text = tfmd_text

    def setup(self) -> None:
        from parity.stages.transform import TFTInput

        self._tft_input = TFTInput(self._field_types, self._tfmd_text)
        self._matches: bool | None = None  # unknown until a graph's metadata is found

    def process(self, batch: RecBatch) -> Iterator[RecBatch]:
        if self._matches is None:
            self._matches = self._graph_spec_matches()
        if not self._matches:
            yield batch
            return
        yield with_arrow_inputs(batch, self._tft_input, max(1, len(batch.transform_inputs)))

    def _graph_spec_matches(self) -> bool | None:
        import tensorflow_transform as tft
        from tensorflow_transform.tf_metadata import schema_utils

        for path in self._graph_dirs:
            if not os.path.isdir(os.path.join(path, tft.TFTransformOutput.RAW_METADATA_DIR)):
                continue
            try:
                raw = tft.TFTransformOutput(path).raw_feature_spec()
            except Exception:  # not written whole yet: look again at the next batch
                return None
            return raw == schema_utils.schema_as_feature_spec(self._tft_input.metadata.schema).feature_spec
        return None


class ApplyTransformFn(beam.DoFn):
    """The transform stage of a batch: a python function, an exported TFT graph, or a pass-through."""

    def __init__(self, side: SideConfig, saved_dir: str | None, spills: spill.SpillPolicy | None = None, *,
                 storage: Storage):
        self._side = side
        # None for a gated `saved` transform (`parity.replay.gate`): the graph's folder comes as the side input
        self._saved_dir = saved_dir
        self._spills = spills  # batches come as spill files, loaded under this policy (with TFT, while the
        # analysis runs); None: batches come whole
        self._storage = storage  # the run's storage context: spill files and a `saved` graph may be URLs

    def setup(self) -> None:
        spec = self._side.transform
        self._python = PythonTransform(spec.ref.resolve(), spec.ref.text) \
            if spec is not None and spec.kind == "python" else None  # type: ignore[union-attr]
        self._saved = SavedTransform(self._saved_dir, side_field_types(self._side), self._side.capture.tfmd_text,
                                     self._storage) if self._saved_dir else None

    def process(self, batch, *side_inputs):  # no hints: Beam checks *args hints
        if self._spills is not None:
            batch = self._spills.load(batch, self._storage)
        if self._saved is None and side_inputs:
            # the gated `saved` transform: the graph's folder arrives as a side input once it exists
            self._saved_dir = side_inputs[0]
            self._saved = SavedTransform(self._saved_dir, side_field_types(self._side), self._side.capture.tfmd_text,
                                         self._storage)
        inputs = batch.transform_inputs
        todo = [i for i, value in enumerate(inputs) if value is not None]
        if self._saved is not None:
            outputs = self._apply_saved(batch, todo)
        elif self._python is not None:
            outputs = self._apply_python(batch, todo)
        else:
            outputs = [dict(inputs[i]) for i in todo]
        values = batch.values["transform"]
        for i, features in zip(todo, outputs):
            values[i] = features
        yield batch

    def _apply_python(self, batch: RecBatch, todo: list[int]) -> list[dict]:
        """The python transform of the records `todo` of the batch, all at once (`PythonTransform.apply_many`).
        When that raises, the function runs again on each record alone, in order, to name the one it fails on
        (`first_failing`), with the message the record would get alone."""
        python = self._python
        inputs = batch.transform_inputs
        records = inputs if len(todo) == len(inputs) else [inputs[i] for i in todo]
        try:
            return python.apply_many(records)  # type: ignore[union-attr]
        except (Exception, SystemExit) as batch_exc:  # sys.exit() in a step: Beam's "SystemExit: 0", unnamed
            found = first_failing(records, python.apply_one, (Exception, SystemExit))  # type: ignore[union-attr]
            n, exc = found if found is not None else (None, batch_exc)
            where = f"record {batch.key_text(todo[n])}: " if n is not None else ""
            if isinstance(exc, UserCodeError):
                raise UserCodeError(f"{where}{exc}") from exc
            raise UserCodeError(f"{where}transform.python '{self._side.transform.ref.text}' "  # type: ignore[union-attr]
                                f"{raised(exc)}") from exc

    def _apply_saved(self, batch: RecBatch, todo: list[int]) -> list[dict]:
        saved = self._saved
        inputs = batch.transform_inputs
        arrow = batch.transform_arrow
        try:
            if arrow is not None:
                return saved.apply_arrow(arrow)  # type: ignore[union-attr]
            return saved.apply([inputs[i] for i in todo])  # type: ignore[union-attr,misc]
        except UserCodeError:
            raise
        except Exception as batch_exc:
            if arrow is not None:
                rows = [one.slice(j, 1) for one in arrow for j in range(one.num_rows)]
                found = first_failing(rows, lambda row: saved.apply_arrow([row]))  # type: ignore[union-attr]
            else:
                found = first_failing([inputs[i] for i in todo],
                                      lambda record: saved.apply([record]))  # type: ignore[union-attr]
            if found is not None:
                n, exc = found
                raise UserCodeError(f"record {batch.key_text(todo[n])}: the transform graph "
                                    f"{self._saved_dir} raised {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
            raise UserCodeError(f"the transform graph {self._saved_dir} raised on a batch: "
                                f"{type(batch_exc).__name__}: {batch_exc}") from batch_exc
