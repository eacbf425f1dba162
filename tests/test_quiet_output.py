"""What a user sees: parity's own lines on the terminal and nothing of the libraries' logs, `--version`."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "pipelines", "taxi", "parity.yaml")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PARITY_PROGRESS", None)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env["PYTHONPATH"] = ROOT
    return env


# The slow tier (`make test`, not `make test-fast`): the demo's whole TFT check in a process of its own.
@pytest.mark.slow
def test_the_demo_prints_only_paritys_own_lines_and_the_libraries_go_to_a_log(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "parity", "check", DEMO, "--out", str(out)], capture_output=True,
                          text=True, env=_env(), cwd=ROOT, timeout=900)
    assert done.returncode == 1, done.stderr[-3000:]  # the demo's planted bug
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and all(line.startswith("parity: ") for line in lines), lines
    assert done.stdout.startswith("parity: diverged (offline vs production)\n")
    # what TensorFlow said is kept, in the out folder, not lost
    assert (out / "libraries.log").read_text(encoding="utf-8", errors="replace").strip()


# The slow tier (`make test`, not `make test-fast`): the demo's whole TFT check in a process of its own.
@pytest.mark.slow
def test_verbose_shows_the_libraries_logs_on_the_terminal(tmp_path):
    done = subprocess.run([sys.executable, "-m", "parity", "check", DEMO, "--out", str(tmp_path / "out"), "-v"],
                          capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=900)
    assert done.returncode == 1
    libraries = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("parity: ")]
    # TensorFlow's native log lines (absl's format, e.g. `I0000 00:00:... cpu_feature_guard.cc:...`); which ones it
    # writes depends on the CPU (an AMD EPYC gets no oneDNN notice)
    assert any(re.match(r"[IWEF]\d{4} ", line) for line in libraries), libraries
    assert not (tmp_path / "out" / "libraries.log").exists()


def test_version_names_parity_beam_tft_tensorflow_and_pyarrow_without_importing_them():
    code = ("import sys\nfrom parity.cli import main\ncode = main(['--version'])\n"
            "assert code == 0, code\nassert 'tensorflow' not in sys.modules and 'apache_beam' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    import parity
    from importlib import metadata

    line = done.stdout.strip()
    assert line.startswith(f"parity {parity.__version__} (")
    for package in ("apache-beam", "tensorflow-transform", "tensorflow", "pyarrow"):
        assert f"{package} {metadata.version(package)}" in line


def test_the_report_environment_carries_paritys_version_with_the_libraries():
    from parity.replay.environment import environment_manifest

    manifest = environment_manifest()
    import parity

    assert manifest["parity"] == parity.__version__
    assert {"apache-beam", "tensorflow-transform", "tensorflow", "pyarrow"} <= set(manifest)
