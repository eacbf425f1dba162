"""first_failing names the record a failed batch call failed on: the first that fails alone, in batch order."""
from __future__ import annotations

import pytest

from parity.replay.culprit import first_failing


def _inverse(value: int) -> float:
    return 1 / value


def test_the_first_item_that_raises_alone_is_named_with_what_it_raised():
    index, exc = first_failing([3, 2, 0, 5, 0], _inverse)
    assert index == 2 and isinstance(exc, ZeroDivisionError)


def test_a_batch_failure_no_item_shows_alone_names_none():
    assert first_failing([1, 2, 3], _inverse) is None
    assert first_failing([], _inverse) is None


def test_only_the_exceptions_asked_for_are_caught():
    with pytest.raises(ZeroDivisionError):
        first_failing([0], _inverse, TypeError)

    def exits(_: object) -> None:
        raise SystemExit(3)

    index, exc = first_failing(["a"], exits, (Exception, SystemExit))
    assert index == 0 and isinstance(exc, SystemExit) and exc.code == 3
