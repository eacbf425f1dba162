"""scripts/flink_cluster.sh's own bookkeeping, without Flink: a TaskManager that died leaves its pid in
flink-daemon.sh's pid file, which `stop` would later signal (another process may have that number by then);
`status` (and `stop`, `add-taskmanager`) take it out and say so (issue 45). The live TaskManager here is a
process whose command line names Flink's TaskManagerRunner, as the script recognises one."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "flink_cluster.sh")


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_status_removes_a_dead_taskmanager_from_the_pid_file_and_says_so(tmp_path):
    pid_dir = tmp_path / "run" / "pid"
    pid_dir.mkdir(parents=True)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                              "org.apache.flink.runtime.taskexecutor.TaskManagerRunner"])
    other = subprocess.Popen(["sleep", "60"])  # a live process that is no TaskManager: a reused pid
    dead = _dead_pid()
    pid_file = pid_dir / "flink-root-taskexecutor.pid"
    pid_file.write_text(f"{dead}\n{alive.pid}\n{other.pid}\n")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing answers there
    try:
        done = subprocess.run([SCRIPT, "status"], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PARITY_FLINK_RUN_DIR=str(tmp_path / "run"),
                                       PARITY_FLINK_REST_PORT=str(port)))
    finally:
        for process in (alive, other):
            process.kill()
            process.wait()
    assert done.returncode == 3, done.stderr  # no cluster answers
    assert pid_file.read_text().split() == [str(alive.pid)]
    assert f"removed TaskManager pid {dead} from {pid_file}" in done.stderr
    assert f"removed TaskManager pid {other.pid} from {pid_file}" in done.stderr
