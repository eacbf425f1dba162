"""Which record made a batch call fail: the one place a replay step goes back over a failed batch.

Every stage runs on a whole batch at once. When that call raises, a message must still name the record (its
key), so the step calls the same stage again on each record alone, in batch order, until one raises.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence


def first_failing(items: Sequence[Any], fn: Callable[[Any], Any],
                  catch: type[BaseException] | tuple[type[BaseException], ...] = Exception,
                  ) -> tuple[int, BaseException] | None:
    """The index of the first item on which `fn` (called with that item alone) raises one of `catch`, and what
    it raised; None when every item passes (a failure of the batch that no record shows alone).

    `fn` is the batch's own code on one item, e.g. `lambda record: stage_many([record])`, so that the record
    named is the one the batch failed on.
    """
    for index, item in enumerate(items):
        try:
            fn(item)
        except catch as exc:
            return index, exc
    return None
