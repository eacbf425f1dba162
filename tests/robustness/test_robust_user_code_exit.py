"""Every way user code or a graph can fail ends as a usage error, never as a verdict: `parity check` run as a real
process exits 2 with one `parity: error:` line naming the config field, the function or graph and the original
error, prints no traceback on the terminal (it goes to the out folder's log, and to the terminal with --debug),
and writes no report.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from robust_helpers import FEATURES, PYTHON, REPO, good_records, jsonl_lines, make_project, python_env

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own, TFT ones among them.
pytestmark = pytest.mark.slow

TFX = os.path.join(REPO, "fixtures", "tfx", "pipeline")

# name: (side entries merged into offline, module code, texts the error line must hold)
CASES = {
    "python_transform_raises": (
        {"transform": {"python": "{module}:features"}},
        "def features(record):\n    raise ValueError('bad fare ' + str(record['id']))\n",
        ["transform.python '{module}:features' raised ValueError: bad fare", "record "]),
    "coder_factory_raises": (
        {"coder": {"coder": "{module}:make_coder"}},
        "def make_coder():\n    raise RuntimeError('no coder today')\n",
        ["coder", "{module}:make_coder", "RuntimeError", "no coder today"]),
    "seed_function_raises": (
        {"seed": {"value": 1, "ops": {"noise": {"function": "{module}:noise"}}}},
        "def noise(record, rng):\n    raise ZeroDivisionError('seeded op')\n",
        ["seed function", "ZeroDivisionError", "seeded op"]),
    "windowfn_raises": (
        {"timestamp": {"field": "t", "unit": "s"}, "window": {"windowfn": "{module}:make_window"}},
        "def make_window():\n    raise TypeError('no window')\n",
        ["sides.offline.window.windowfn", "{module}:make_window", "TypeError", "no window"]),
    "module_raises_on_import": (
        {"transform": {"python": "{module}:features"}},
        "raise ImportError('missing dependency foo')\n",
        ["sides.offline.transform.python", "cannot import '{module}:features'", "missing dependency foo"]),
    "module_calls_sys_exit_on_import": (
        {"transform": {"python": "{module}:features"}},
        "import sys\nsys.exit(5)\n",
        ["sys.exit(5)"]),
    "preprocessing_fn_raises_while_traced": (
        {"transform": {"tft": "{module}:preprocessing_fn"}},
        "def preprocessing_fn(inputs):\n    raise KeyError('fare_amount')\n",
        ["sides.offline.transform.tft", "preprocessing_fn '{module}:preprocessing_fn' raised KeyError while TFT "
         "traced it", "fare_amount"]),
    "preprocessing_fn_fails_while_run": (
        {"transform": {"tft": "{module}:preprocessing_fn"}},
        "import tensorflow as tf\nimport tensorflow_transform as tft\n\n"
        "def preprocessing_fn(inputs):\n"
        "    check = tf.debugging.assert_less(inputs['v'], 0.0, message='v must be negative')\n"
        "    with tf.control_dependencies([check]):\n"
        "        return {'v_z': tft.scale_to_z_score(tf.identity(inputs['v']))}\n",
        ["sides.offline.transform.tft", "preprocessing_fn '{module}:preprocessing_fn' failed while TFT ran it",
         "InvalidArgumentError: assertion failed: [v must be negative]"]),
}


def _run(project_config: str, out: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "parity", "check", project_config, "--out", out, "--sides-at-once", "off",
                           *extra], capture_output=True, text=True, env=python_env(), cwd=REPO, timeout=600)


def _assert_usage_error(done: subprocess.CompletedProcess, out: str, texts: list[str]) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("parity: error: ")]
    assert len(errors) == 1, done.stderr[-3000:]
    for text in texts:
        assert text in errors[0], (text, errors[0])
    # the traceback is in the out folder once the run made it its own, else (user code that failed while the
    # config was loaded, before the run claimed its folder) in a temporary file; the line names it either way
    log = errors[0].rsplit("(traceback: ", 1)[1].split("; --debug prints it)")[0]
    if os.path.isdir(out):
        assert log == os.path.join(out, "parity-error.log")
    with open(log, encoding="utf-8") as handle:
        assert "Traceback (most recent call last)" in handle.read()
    assert not os.path.exists(os.path.join(out, "report.json"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_user_code_that_fails_exits_two_naming_the_culprit_without_a_traceback(tmp_path, case):
    side, code, texts = CASES[case]
    project = make_project(tmp_path, lines=jsonl_lines(good_records(6)), module_code=FEATURES + code)
    with open(project.config, encoding="utf-8") as handle:
        text = handle.read()
    import yaml

    document = yaml.safe_load(text)
    filled = yaml.safe_load(yaml.safe_dump(side).replace("{module}", project.module))
    document["sides"]["offline"].update(filled)
    with open(project.config, "w", encoding="utf-8") as handle:
        yaml.safe_dump(document, handle, sort_keys=False)
    done = _run(project.config, project.out)
    _assert_usage_error(done, project.out, [t.replace("{module}", project.module) for t in texts])


def test_a_graph_that_cannot_be_applied_exits_two_naming_the_graph(tmp_path):
    """A TFX Transform graph served to records of another schema: its raw feature `trip_miles` is a float, the
    capture's a string, so every batch fails in the graph."""
    lines = [b'{"trip_id": %d, "trip_miles": "far"}' % i for i in range(4)]
    project = make_project(tmp_path, lines=lines, schema={"trip_id": "int64", "trip_miles": "string"},
                           capture_spec={"key": ["trip_id"]},
                           side={"transform": {"saved": os.path.join(TFX, "Transform")}})
    done = _run(project.config, project.out)
    _assert_usage_error(done, project.out, ["the transform graph", os.path.join(TFX, "Transform", "transform_graph",
                                                                                "3")])


def test_debug_prints_the_traceback_on_the_terminal_too(tmp_path):
    project = make_project(tmp_path, lines=jsonl_lines(good_records(3)),
                           module_code="def features(record):\n    raise ValueError('loud')\n")
    done = _run(project.config, project.out, "--debug")
    assert done.returncode == 2
    assert "Traceback (most recent call last)" in done.stderr and "ValueError: loud" in done.stderr
