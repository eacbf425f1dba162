"""parity as a package: an sdist and a wheel build, and the wheel installed into a fresh virtualenv is a working
`parity` (its own files, the C encoder built in), not this checkout's editable install."""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


# The slow tier (`make test`, not `make test-fast`): builds an sdist and a wheel and installs it into a fresh
# virtualenv.
@pytest.mark.slow
def test_the_wheel_built_from_the_sdist_installs_a_working_parity_into_a_fresh_virtualenv(tmp_path):
    dist = tmp_path / "dist"
    # sdist first, then the wheel from the unpacked sdist: what `python -m build` does, so the sdist is complete
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), ROOT])
    (sdist,) = glob.glob(str(dist / "parity-*.tar.gz"))
    (wheel,) = glob.glob(str(dist / "parity-*.whl"))
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"parity/encoding/_canonical.c", "vendor/xxhash/xxhash.h", "setup.py", "README.md", "parity/capture/tfmd.py",
            "parity/report/templates/page.html.j2"} <= names
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert any(name.startswith("parity/encoding/_canonical") and name.endswith(".so") for name in names), \
        "the wheel lacks the C encoder (a C compiler is on this machine)"
    assert "parity/cli.py" in names and "parity/capture/tfrecord.py" in names
    assert {f"parity/report/templates/{name}.html.j2" for name in ("page", "body", "macros")} <= names

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # the dependencies (TensorFlow and Beam: gigabytes) come from this environment's site-packages, after the
    # fresh one's own; parity itself only from the wheel
    with open(os.path.join(site, "zz_parity_dependencies.pth"), "w", encoding="utf-8") as handle:
        handle.write(sysconfig.get_paths()["purelib"] + "\n")
    _run([python, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", wheel])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = _run([python, "-c", "import parity, parity.encoding.canonical as c; print(parity.__file__, c.IMPLEMENTATION)"],
                 cwd=elsewhere, env=env).stdout.split()
    assert where[0].startswith(site), where
    assert where[1] == "c", "the installed wheel does not load its C encoder"
    version = _run([str(venv / "bin" / "parity"), "--version"], cwd=elsewhere, env=env).stdout
    assert version.startswith("parity 0.1.0 (apache-beam ")
    config = os.path.join(ROOT, "fixtures", "scenarios", "clean_same_semantics", "parity.yaml")
    done = _run([str(venv / "bin" / "parity"), "check", config, "--out", str(tmp_path / "out")], cwd=elsewhere,
                env=env)
    assert done.stdout.startswith("parity: parity ")
