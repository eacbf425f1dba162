"""Progress goes to stderr: a live counter on a terminal, structured lines otherwise."""
from __future__ import annotations

import os
import pty
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = os.path.join(REPO, "fixtures", "scenarios", "window_unit_ms_vs_s", "parity.yaml")


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PARITY_PROGRESS"}
    env["PYTHONPATH"] = REPO
    return env


def test_a_non_terminal_gets_one_structured_line_per_phase(tmp_path):
    done = subprocess.run([sys.executable, "-m", "parity", "check", SCENARIO, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert done.returncode == 1
    events = [line for line in done.stderr.splitlines() if line.startswith("parity: event=")]
    assert [e.split()[1] for e in events] == ["event=replay_start", "event=replay_done"] * 2 + ["event=diff_done"]
    assert "records=240" in events[1] and "elapsed=" in events[1]
    assert "staged=240 written=240" in events[1]  # the job's Beam metrics, read back once it ended
    assert "\r" not in done.stderr


def test_a_terminal_gets_a_live_counter_that_ends_with_the_jobs_metrics(tmp_path):
    primary, replica = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "parity", "check", SCENARIO, "--out", str(tmp_path / "out")],
                               stdout=subprocess.DEVNULL, stderr=replica, env=_env())
    os.close(replica)
    chunks = []
    while True:
        try:
            data = os.read(primary, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert process.wait(timeout=300) == 1
    text = b"".join(chunks).decode("utf-8", "replace")
    assert "replaying offline: 240 records read" in text
    assert "replaying offline: 240 records read, 240 staged, 240 written" in text
    assert "replay done: side production" in text
