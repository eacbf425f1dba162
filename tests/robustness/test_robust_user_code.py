"""User code that fails: the run exits 2 naming the reference (and the record key when a record triggered it)
and the exception, so that the owner of the code knows what to fix.
"""
from __future__ import annotations

import re

import pytest

from robust_helpers import check, good_records, jsonl_lines, make_project, unique_module

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own.
pytestmark = pytest.mark.slow


def _project(tmp_path, side: dict, code: str, name: str):
    (tmp_path / f"{name}.py").write_text(code)
    return make_project(tmp_path, lines=jsonl_lines(good_records(5)), side=side)


def test_a_module_that_fails_to_import_exits_two_with_the_tracebacks_last_line(tmp_path, capsys):
    name = unique_module("broken")
    project = _project(tmp_path, {"transform": {"python": f"{name}:features"}},
                       "import os\nLIMIT = 1 / 0\n", name)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert f"{project.config}: sides.offline.transform.python: cannot import '{name}:features'" in errors
    assert "ZeroDivisionError: division by zero" in errors  # the last line of the import's traceback
    assert f"searched {tmp_path} first" in errors and "check the module name and that it imports on its own" \
        in errors


def test_a_module_that_does_not_exist_exits_two_naming_the_reference(tmp_path, capsys):
    project = make_project(tmp_path, side={"transform": {"python": "no_such_module_xyz:features"}})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "sides.offline.transform.python: cannot import 'no_such_module_xyz:features'" in errors
    assert "ModuleNotFoundError: No module named 'no_such_module_xyz'" in errors


def test_a_missing_attribute_exits_two_naming_the_module_and_attribute(tmp_path, capsys):
    name = unique_module("attrs")
    project = _project(tmp_path, {"transform": {"python": f"{name}:featurs"}}, "def features(r):\n    return {}\n",
                       name)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert f"cannot import '{name}:featurs'" in errors and f"module '{name}' has no attribute 'featurs'" in errors


def test_a_module_attr_that_is_not_callable_exits_two(tmp_path, capsys):
    name = unique_module("const")
    project = _project(tmp_path, {"transform": {"python": f"{name}:FEATURES"}}, "FEATURES = ['a', 'b']\n", name)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert f"{project.config}: sides.offline.transform.python: '{name}:FEATURES' is a list, expected a callable" \
        in errors


def test_a_transform_that_raises_exits_two_naming_the_record_key(tmp_path, capsys):
    project = make_project(tmp_path, lines=jsonl_lines(good_records(8)), module_code='''
        def features(record):
            if record["id"] == 6:
                raise KeyError("fare_amount")
            return {"v": record["v"]}
    ''')
    code, _, errors = check(project, capsys)
    assert code == 2
    assert f"record 6: transform.python '{project.module}:features' raised KeyError: 'fare_amount'" in errors


def test_a_transform_returning_a_non_dict_exits_two_saying_what_it_must_return(tmp_path, capsys):
    project = make_project(tmp_path, module_code="def features(record):\n    return [record['v']]\n")
    code, _, errors = check(project, capsys)
    assert code == 2
    assert re.search(rf"record \d+: transform\.python '{project.module}:features' returned a list, expected a dict "
                     rf"of feature name to value", errors), errors


def test_a_transform_returning_an_unencodable_value_exits_two_naming_record_and_feature(tmp_path, capsys):
    project = make_project(tmp_path, module_code="def features(record):\n    return {'when': object()}\n")
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "record 0" in errors and "'when'" in errors and "builtins.object" in errors


def test_a_windowfn_factory_returning_a_non_windowfn_exits_two(tmp_path, capsys):
    name = unique_module("wfn")
    project = _project(tmp_path, {"window": {"windowfn": f"{name}:make"}}, "def make():\n    return 3600\n", name)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert (f"{project.config}: sides.offline.window.windowfn: '{name}:make' returned a int, expected an apache_beam "
            f"WindowFn; window.windowfn must name a function taking no arguments") in errors


def test_a_windowfn_factory_that_raises_exits_two(tmp_path, capsys):
    name = unique_module("wfn_raise")
    project = _project(tmp_path, {"window": {"windowfn": f"{name}:make"}},
                       "def make():\n    raise RuntimeError('no size configured')\n", name)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert f"{project.config}: sides.offline.window.windowfn: '{name}:make' raised RuntimeError: no size configured" \
        in errors


@pytest.mark.parametrize("where", ["timestamp", "shard-key", "seed"])
def test_a_per_record_function_that_raises_exits_two_naming_the_record_key(where, tmp_path, capsys):
    name = unique_module(f"fn_{where.replace('-', '_')}")
    code_text = "def fn(record, rng=None):\n    if record['id'] == 3:\n        raise ValueError('boom')\n" \
                "    return 1\n"
    side = {"timestamp": {"timestamp": {"function": f"{name}:fn"}},
            "shard-key": {"shard": {"key": {"function": f"{name}:fn"}}},
            "seed": {"seed": {"value": 1, "ops": {"x": {"function": f"{name}:fn"}}}}}[where]
    project = _project(tmp_path, side, code_text, name)
    code, _, errors = check(project, capsys)
    assert code == 2
    what = {"timestamp": "timestamp.function raised", "shard-key": "window or shard key function raised",
            "seed": "a seed function of side 'offline' raised"}[where]
    assert f"record 3: {what}" in errors and "ValueError: boom" in errors


def test_a_coder_factory_returning_a_non_coder_exits_two_naming_the_side(tmp_path, capsys):
    name = unique_module("coder")
    project = _project(tmp_path, {"coder": {"coder": f"{name}:make"}}, "def make():\n    return 'json'\n", name)
    code, _, errors = check(project, capsys)
    assert code == 2
    assert "sides.offline.coder: cannot build the coder" in errors and "expected an apache_beam.coders.Coder" in errors


def test_a_module_only_the_client_can_import_fails_on_a_worker_naming_the_worker_and_the_fix(tmp_path, capsys,
                                                                                          monkeypatch):
    """As on a cluster whose workers lack the user's modules: the client imports the module when it checks the
    config, the DirectRunner's worker processes (multi_processing, another pid: an SDK harness each) cannot."""
    import os
    import socket
    import sys

    project = make_project(tmp_path / "project")
    client_only = tmp_path / "client_only"
    client_only.mkdir()
    os.rename(os.path.join(project.folder, f"{project.module}.py"), client_only / f"{project.module}.py")
    monkeypatch.syspath_prepend(str(client_only))  # this process's sys.path, not the workers'
    code, _, errors = check(project, capsys, "--", "--direct_num_workers=2", "--direct_running_mode=multi_processing")
    assert code == 2
    assert errors.count("parity: error:") == 1, errors
    assert (f"cannot import '{project.module}:features' on an SDK worker, not in the parity process that loaded the "
            f"config ({socket.gethostname()}:{os.getpid()}): worker host {socket.gethostname()}, pid ") in errors
    worker_pid = int(re.search(r"worker host \S+, pid (\d+)", errors).group(1))
    assert worker_pid != os.getpid()
    assert f"python {sys.executable}, sys.path [" in errors
    assert f"ModuleNotFoundError: No module named '{project.module}'" in errors
    assert "put their folder on the worker pool's PYTHONPATH" in errors and "--setup_file" in errors
