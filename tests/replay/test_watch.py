"""The watch's reading of a Flink job's exceptions (`parity.replay.watch.flink_failure`): which failure of an
attempt stops the job at once. The whole path, on a real Flink cluster whose restart strategy would retry ten
times, is tests/cluster/test_worker_modules.py's missing-module test."""
from __future__ import annotations

from parity.errors import ConfigError, FingerprintSetError, UserCodeError, from_worker_text
from parity.replay import watch

# The shape of a stack trace in Flink's exception history for a failed Beam task: Java's exception, with the SDK
# harness's Python traceback as its message's text
JAVA = ("java.lang.RuntimeException: Error received from SDK harness for instruction 7: Traceback (most recent "
        "call last):\n  File \"apache_beam/runners/common.py\", line 1495, in process\n{python}\n"
        "\tat org.apache.beam.runners.fnexecution.control.FnApiControlClient$ResponseStreamObserver.onNext"
        "(FnApiControlClient.java:180)\n")


def test_the_exception_history_comes_before_the_deprecated_root_exception_and_empty_texts_are_left_out():
    answer = {"root-exception": "root", "exceptionHistory": {"entries": [{"stacktrace": "first"},
                                                                         {"stacktrace": ""}, {"stacktrace": "last"}]}}
    assert watch.exception_texts(answer) == ["first", "last", "root"]
    assert watch.exception_texts({"root-exception": None, "exceptionHistory": {"entries": []}}) == []
    assert watch.exception_texts({}) == []


def test_a_user_code_error_in_a_harness_traceback_is_final_and_keeps_its_message_without_beams_suffix():
    text = JAVA.format(python="parity.errors.UserCodeError: cannot import 'fns:features' on an SDK worker (user "
                              "w, host h): No module named 'fns' [while running 'Replay[offline]/Stages']")
    error = from_worker_text(text)
    assert isinstance(error, UserCodeError) and isinstance(error, watch.FINAL)
    assert str(error) == "cannot import 'fns:features' on an SDK worker (user w, host h): No module named 'fns'"


def test_a_config_error_is_final_but_a_set_that_cannot_be_written_or_a_lost_harness_is_left_to_flinks_restarts():
    assert isinstance(from_worker_text(JAVA.format(python="parity.errors.ConfigError: sides.a.shard: no key")),
                      ConfigError)
    set_error = from_worker_text(JAVA.format(python="parity.errors.FingerprintSetError: cannot write part 3"))
    assert isinstance(set_error, FingerprintSetError) and not isinstance(set_error, watch.FINAL)
    lost = ("java.lang.IllegalStateException: No client connected within timeout\n\tat org.apache.beam.runners."
            "fnexecution.data.GrpcDataService.send(GrpcDataService.java:170)")
    assert from_worker_text(lost) is None
