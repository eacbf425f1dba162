"""The watch's reading of a Flink job's exceptions (`parity.replay.watch.flink_failure`): which failure of an
attempt stops the job at once. The whole path, on a real Flink cluster whose restart strategy would retry ten
times, is tests/cluster/test_worker_modules.py's missing-module test."""
from __future__ import annotations

from parity.errors import ConfigError, FingerprintSetError, UnimportableCode, UserCodeError, from_worker_text
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


def test_a_module_a_worker_cannot_import_is_final_and_keeps_its_message_without_beams_suffix():
    text = JAVA.format(python="parity.errors.UnimportableCode: cannot import 'fns:features' on an SDK worker (user "
                              "w, host h): No module named 'fns' [while running 'Replay[offline]/Stages']")
    error = from_worker_text(text)
    assert isinstance(error, UnimportableCode) and isinstance(error, UserCodeError)
    assert isinstance(error, watch.FINAL)
    assert str(error) == "cannot import 'fns:features' on an SDK worker (user w, host h): No module named 'fns'"


def test_user_code_that_raised_a_config_error_or_a_set_error_is_left_to_flinks_restarts():
    """A transform may raise on a resource that comes back, a graph's copy from a store may fail once: a restart
    may pass, so none of these stops the job."""
    for python, kind in (("parity.errors.UserCodeError: record 7: the transform raised OSError", UserCodeError),
                         ("parity.errors.ConfigError: sides.a.transform.saved: cannot copy", ConfigError),
                         ("parity.errors.FingerprintSetError: cannot write part 3", FingerprintSetError)):
        error = from_worker_text(JAVA.format(python=python))
        assert type(error) is kind and not isinstance(error, watch.FINAL), python


def test_the_last_error_named_in_the_text_is_the_one_and_a_class_whose_name_only_ends_like_one_is_not():
    chained = ("parity.errors.ConfigError: first\n\nThe above exception was the direct cause of the following "
               "exception:\n\nparity.errors.UnimportableCode: cannot import 'm:f'")
    assert isinstance(from_worker_text(chained), UnimportableCode)
    assert from_worker_text("botocore.exceptions.InvalidConfigError: The config profile could not be found") is None
    lost = ("java.lang.IllegalStateException: No client connected within timeout\n\tat org.apache.beam.runners."
            "fnexecution.data.GrpcDataService.send(GrpcDataService.java:170)")
    assert from_worker_text(lost) is None
