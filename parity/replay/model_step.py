"""The model stage of a batch (`ApplyModelFn`): the side's transform outputs fed to its model in one call, the
outputs written as the set's `model/<part>.parquet` (parity.sets.model_outputs). Runs on the workers, after
`ApplyTransformFn`, on whichever runner replays the side.
"""
from __future__ import annotations

from typing import Iterator

import apache_beam as beam

from parity.config import SideConfig
from parity.encoding import canonical
from parity.encoding.fingerprint import fingerprints
from parity.replay.batch import RecBatch, key_text
from parity.sets.model_outputs import write_model_part
from parity.storage.context import Storage


class ApplyModelFn(beam.DoFn):
    """Applies the side's model to the batch's transform outputs (`LoadedModel.apply`, once per batch) and
    writes them; yields the batch unchanged for the set's writer."""

    def __init__(self, out_dir: str, side: SideConfig, *, storage: Storage):
        self._out_dir = out_dir
        self._side = side
        self._storage = storage  # the run's storage context: the model and the set may be URLs

    def setup(self) -> None:
        from parity.stages.model import LoadedModel

        self._model = LoadedModel(self._side.model, self._side.name, self._storage)  # type: ignore[arg-type]

    def process(self, batch: RecBatch) -> Iterator[RecBatch]:
        values = batch.values["transform"]
        # the records that reached the transform (not dropped as late, not failed in the coder): their features
        todo = [i for i, reached in enumerate(batch.transform_inputs) if reached is not None]
        if todo:
            outputs = self._model.apply([values[i] for i in todo])
            write_model_part(self._out_dir, batch.part, [key_text(batch.keys[i]) for i in todo],
                             canonical.encode_many(outputs), fingerprints(outputs), self._storage)
        yield batch
