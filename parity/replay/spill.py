"""Disk-backed hand-off of batches between two stages of a replay.

A batch runner materialises a PCollection whose consumer must wait for a side input (the whole side's
lateness, merges, aggregates, or TFT's analysis): Beam's FnApiRunner keeps every encoded element in memory and
copies them again into its data channel, about 2.7 times the encoded size of the whole side. Spilling the
batches to files and handing on only their paths keeps one batch in memory at a time, as a streaming runner's
disk-backed shuffle would.

The folder lives in the fingerprint set's output folder (which every worker already writes its parts to, a URL
on a cluster, written with the run's storage context: `parity.storage.context`) and is removed when the replay
ends; files are written whole under a name derived from the batch (a local rename, or one upload visible once
complete), so a retried bundle rewrites the same file and a half-written one is never read.

On the in-process runner, which never retries a bundle, each file is removed as soon as it is read
(`SpillPolicy.CONSUME`): the page cache pages it held are reused by the files written next. Pages the kernel
has not handed out lately cost far more to fill than just-freed ones, and a large check writes gigabytes of
spill files, which it would otherwise hold until the end (benchmarks/RESULTS.md has the figures).
"""
from __future__ import annotations

import enum
import pickle
from typing import Any, Iterator

import apache_beam as beam

from parity.errors import RunnerError
from parity.storage import urls
from parity.storage.context import Storage

SPILL_DIR = "_spill"


def spill_dir(out_dir: str) -> str:
    return urls.child(out_dir, SPILL_DIR)


class SpillFn(beam.DoFn):
    """Writes each batch to `<out_dir>/_spill/<tag>-<part>.pkl` and yields that path."""

    def __init__(self, out_dir: str, tag: str, storage: Storage):
        self._out_dir = out_dir
        self._tag = tag
        self._storage = storage  # the run's storage context, for a worker that writes to a URL

    def setup(self) -> None:
        self._storage.makedirs(spill_dir(self._out_dir))

    def process(self, batch: Any) -> Iterator[str]:
        path = urls.child(spill_dir(self._out_dir), f"{self._tag}-{batch.part}.pkl")
        write(path, batch, self._storage)
        yield path


class OfSpilledFn(beam.DoFn):
    """Calls `fn(batch, *args, **side_inputs)` on the batch a SpillFn wrote to each path, and yields what it yields.

    For a step that reads whole batches but needs side inputs computed from the same side (the merges of session
    windows, the shard aggregates): a runner cannot fuse such a step with the read, so the batches would cross
    to it through the runner, encoded; the in-process runner holds all of them in memory, and Flink sends each
    one, several MB, through a TaskManager (a 200,000-record replay ran out of its heap and direct memory). Only
    the spill paths cross; the file is read here, and kept (the stages step reads it again once these side
    inputs are complete)."""

    def __init__(self, fn: Any, *args: Any, storage: Storage):
        self._fn = fn
        self._args = args
        self._storage = storage

    def process(self, path: str, **side_inputs: Any) -> Iterator[Any]:
        yield from self._fn(load(path, self._storage), *self._args, **side_inputs)


class SpillPolicy(enum.Enum):
    """What a step does with a spill file once it has loaded its batch."""

    KEEP = "keep"  # a runner may retry the bundle, which reads the file again
    CONSUME = "consume"  # removed at once: only where no bundle is ever retried

    @classmethod
    def for_runner(cls, runner: str) -> SpillPolicy:
        """CONSUME on the in-process DirectRunner, which never retries a bundle; KEEP elsewhere."""
        return cls.CONSUME if runner == "DirectRunner" else cls.KEEP

    def load(self, path: str, storage: Storage) -> Any:
        """The batch a SpillFn wrote to `path`, under this policy."""
        return load(path, storage, self is SpillPolicy.CONSUME)


def write(path: str, batch: Any, storage: Storage) -> None:
    """Pickles `batch` to `path`, whole (`Storage.open_write_stream`), so that a half-written spill is never
    read. A local one is not synced to the disk: a spill is read only by the replay that wrote it, whose start and
    end remove the folder (`parity.storage.outdir`'s outputs of a set hold `_spill`), so no run after a crash reads
    one; a retried bundle reads it from the page cache."""
    with storage.open_write_stream(path, durable=False) as handle:
        pickle.dump(batch, handle, protocol=pickle.HIGHEST_PROTOCOL)


def load(path: str, storage: Storage, consume: bool = False) -> Any:
    """The batch a SpillFn wrote to `path`; `consume` removes the file once read (only where no bundle is
    ever retried: a retry would find the file gone)."""
    try:
        with storage.open_read(path) as handle:
            batch = pickle.load(handle)
    except (EOFError, pickle.UnpicklingError) as exc:  # cut short: the host went down before its writeback
        raise RunnerError(f"{path}: a spilled batch that cannot be read back ({type(exc).__name__}: {exc}); "
                          f"run the check again") from exc
    if consume:
        storage.delete([path])
    return batch


def remove(out_dir: str, storage: Storage) -> None:
    storage.delete_tree(spill_dir(out_dir))
