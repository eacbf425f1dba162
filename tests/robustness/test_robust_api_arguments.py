"""Issue 40, item 4: `parity.check` called as a notebook user calls it: `pathlib.Path` arguments work, and a bad
argument is a ConfigError naming it, never SystemExit (which ended the kernel) nor a bare TypeError/ValueError.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import textwrap

import pytest

import parity
from robust_helpers import PYTHON, make_project, python_env


def test_check_takes_pathlib_paths_for_the_config_and_the_out_folder(tmp_path):
    project = make_project(tmp_path / "p")
    out = tmp_path / "out"
    report = parity.check(pathlib.Path(project.config), out_dir=out, sides_at_once="off")
    assert report["verdict"] == "parity"
    assert (out / "report.json").is_file()


def test_a_bad_beam_option_in_a_notebook_raises_a_parity_error_and_the_kernel_goes_on(tmp_path):
    # before: Beam's argparse printed its usage and raised SystemExit(2), which a notebook kernel does not survive
    project = make_project(tmp_path / "p")
    code = textwrap.dedent(f"""
        import parity
        try:
            parity.check({project.config!r}, out_dir={str(tmp_path / 'out')!r},
                         pipeline_options=["--direct_num_workers=abc"])
        except parity.ParityError as exc:
            print(type(exc).__name__, exc)
        print("the kernel goes on")
    """)
    done = subprocess.run([PYTHON, "-c", code], env=python_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ConfigError parity.check: pipeline_options: argument --direct_num_workers: invalid int value: 'abc'; pass "
        "options Beam's PipelineOptions accept (e.g. --direct_num_workers=2), or remove them",
        "the kernel goes on"]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("arguments, message", [
    ({"config_path": None}, "parity.check: config_path: expected a path (a str or os.PathLike such as "
                            "pathlib.Path), got None (NoneType)"),
    ({"config_path": 5}, "parity.check: config_path: expected a path"),
    ({"config_path": b"parity.yaml"}, "parity.check: config_path: expected a path"),
    ({"out_dir": 7}, "parity.check: out_dir: expected a path (a str or os.PathLike such as pathlib.Path, or None), "
                     "got 7 (int)"),
    ({"pipeline_options": "--direct_num_workers=2"}, "parity.check: pipeline_options: expected a list of option "
                                                     "strings such as ['--direct_num_workers=2'], got "
                                                     "'--direct_num_workers=2' (str)"),
    ({"pipeline_options": 2}, "parity.check: pipeline_options: expected a list of option strings"),
    ({"pipeline_options": ["--direct_num_workers", 2]}, "parity.check: pipeline_options[1]: expected an option "
                                                        "string such as '--direct_num_workers=2', got 2 (int)"),
    ({"runner": "Dataflow"}, "parity.check: runner: expected one of DirectRunner, FlinkRunner, got 'Dataflow'"),
    ({"sides_at_once": True}, "parity.check: sides_at_once: expected one of auto, on, off, got True"),
    ({"noise": "yes"}, "parity.check: noise: expected True or False or None, got 'yes'"),
    ({"force": 1}, "parity.check: force: expected True or False, got 1"),
], ids=["config-none", "config-int", "config-bytes", "out-int", "options-a-string", "options-an-int",
        "options-holding-an-int", "runner-unknown", "sides-at-once-bool", "noise-string", "force-int"])
def test_a_bad_argument_raises_config_error_naming_it_before_anything_is_written(tmp_path, arguments, message):
    project = make_project(tmp_path / "p")
    call = {"config_path": project.config, "out_dir": str(tmp_path / "out"), **arguments}
    with pytest.raises(parity.ConfigError) as raised:
        parity.check(call.pop("config_path"), **call)
    assert str(raised.value).startswith(message)
    assert not os.path.exists(tmp_path / "out")
