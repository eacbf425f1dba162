"""The seam between a replay that exports a transform graph and a replay that applies it, run at once.

A side whose `saved: {from_side}` transform applies the other side's exported graph can read, stage and spill
all its batches while that side still replays; only its transform needs the graph. The two replays meet at a
gate: the exporting one says `ready()` once its graph is written (or `never()` when it will not be), the
applying one `wait()`s after staging. The pipeline knows only this interface; `parity.replay.sides_at_once`
implements it across a parent and its child process.

A gate handed to a pipeline step travels with the step, pickled: an implementation must pickle to something
that still reaches the other end.
"""
from __future__ import annotations

import abc


class TransformGate(abc.ABC):
    """The two ends of the wait for an exported graph; each replay holds one end and calls its verbs only:
    the exporting side `ready` or `never`, the applying side `wait`."""

    @abc.abstractmethod
    def wait(self) -> bool:
        """Blocks until the graph is written (True) or never will be (False)."""

    @abc.abstractmethod
    def ready(self) -> None:
        """The graph is written: the waiting side may go on. Saying it twice is harmless."""

    @abc.abstractmethod
    def never(self) -> None:
        """The graph will not be written (the exporting replay failed). After `ready`, nothing."""
