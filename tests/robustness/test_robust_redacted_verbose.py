"""Issue 40, item 10: under `report.redact: true`, nothing user code prints reaches the terminal, `-v` or not,
unless the user says so explicitly (`--unredacted-output`). Before, `-v` put a transform's print() (a record's
raw values) on the terminal of a redacted run."""
from __future__ import annotations

import subprocess

import pytest

from robust_helpers import PYTHON, make_project, python_env

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own.
pytestmark = pytest.mark.slow

PRINTING = '''
import os, sys

def features(record):
    print("SECRET-PRINTED", record.get("zone"))
    sys.stderr.write("SECRET-STDERR\\\\n")
    os.write(1, b"SECRET-FD1\\\\n")
    return {"zone": record.get("zone")}
'''


def _run(tmp_path, *flags: str) -> str:
    project = make_project(tmp_path, module_code=PRINTING, config={"report": {"redact": True}})
    done = subprocess.run([PYTHON, "-m", "parity", "check", project.config, "--out", str(tmp_path / "out"),
                           "--sides-at-once", "off", *flags], env=python_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.mark.parametrize("flags", [(), ("-v",), ("--verbose",)], ids=["quiet", "-v", "--verbose"])
def test_a_redacted_run_shows_nothing_user_code_prints_with_or_without_verbose(tmp_path, flags):
    shown = _run(tmp_path, *flags)
    assert "SECRET" not in shown, shown[-3000:]
    if flags:
        assert "parity: -v under report.redact: the libraries' and user code's output stays off the terminal" in shown


def test_unredacted_output_shows_it_when_the_user_asks_explicitly(tmp_path):
    shown = _run(tmp_path, "-v", "--unredacted-output")
    assert "SECRET-PRINTED" in shown and "SECRET-FD1" in shown
