"""The harness zygote's preparation (parity/replay/harness_zygote.py `_preload`), in a fresh interpreter as the
pool starts it: it imports the replay's and the diff job's modules, parses S3's service model once (the warm step,
which its forked harnesses then skip), and is left with one thread, so that it may fork. The zygote with a pool and
forked harnesses: tests/replay/test_worker_pool.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_zygote_imports_the_diff_jobs_modules_and_warms_s3s_model_and_keeps_one_thread():
    code = ("import json; from parity.replay import harness_zygote as z; imported, failed = z._preload(z.PRELOAD); "
            "print(json.dumps([imported, failed, z._threads()]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    imported, failed, threads = json.loads(out.stdout.strip().splitlines()[-1])

    assert failed == {}
    assert "parity.compare.engine" in imported and "parity.replay.pipeline" in imported
    assert imported[-1] == "parity.storage.s3_clients.warm()"
    assert len(threads) == 1, threads
