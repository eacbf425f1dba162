"""The engine diff's work files (`parity.compare.sealed`): the client unpickles only what its own job wrote."""
from __future__ import annotations

import pickle

import pytest

from parity.compare.sealed import MAC_SIZE, new_secret, opened, sealed
from parity.errors import RunnerError

RAN: list[str] = []


def _record(what: str) -> None:
    RAN.append(what)


class Planted:
    """A pickle that runs code when it is loaded: what a file planted in a shared out folder could hold."""

    def __reduce__(self):
        return _record, ("planted code ran",)


def test_a_value_sealed_with_the_runs_secret_opens_to_an_equal_value():
    secret = new_secret()
    value = {"counts": (1, 2, 3), "name": "fare"}
    assert opened(secret, sealed(secret, value, "s3://b/w/range-00.pickle"), "s3://b/w/range-00.pickle") == value


def test_a_file_planted_with_another_secret_or_none_is_refused_without_unpickling_it():
    RAN.clear()
    secret = new_secret()
    path = "s3://b/out/_diff_work/range-03.pickle"
    for blob in (sealed(new_secret(), Planted(), path), pickle.dumps(Planted()), b"", b"x" * MAC_SIZE):
        with pytest.raises(RunnerError, match=r"^s3://b/out/_diff_work/range-03.pickle: not written by this check's "
                                              r"diff job"):
            opened(secret, blob, path)
    assert RAN == []


def test_a_sealed_file_changed_after_it_was_written_is_refused():
    secret = new_secret()
    blob = bytearray(sealed(secret, {"n": 1}, "range-00.pickle"))
    blob[-2] ^= 1
    with pytest.raises(RunnerError):
        opened(secret, bytes(blob), "range-00.pickle")


def test_one_ranges_file_copied_under_another_ranges_name_is_refused():
    secret = new_secret()
    blob = sealed(secret, {"range": 3}, "/out/_diff_work/range-03.pickle")
    assert opened(secret, blob, "/elsewhere/range-03.pickle") == {"range": 3}  # the name, not the folder
    with pytest.raises(RunnerError, match="range-05.pickle: not written by this check's diff job"):
        opened(secret, blob, "/out/_diff_work/range-05.pickle")
