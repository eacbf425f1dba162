"""One `parity check` in a fresh process, measured as the benchmarks report it: exit code, wall seconds, the
process tree's CPU seconds (`os.wait4`'s rusage of the child and the children it waited for) and report.json."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fresh_check(config: str, out_dir: str) -> tuple[int, float, float, dict]:
    """(exit code, wall seconds, CPU seconds, report.json) of `parity check config --out out_dir --force`."""
    env = {**os.environ, "PARITY_PROGRESS": "off"}
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "parity", "check", config, "--out", out_dir, "--force"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    with open(os.path.join(out_dir, "report.json"), encoding="utf-8") as handle:
        report = json.load(handle)
    return os.waitstatus_to_exitcode(status), wall, usage.ru_utime + usage.ru_stime, report
