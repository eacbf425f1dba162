"""A child for tests/console/test_children.py: `python -m parity_test_child SCRATCH` (this folder on PYTHONPATH
through the helper's environment) does what its request says."""
from __future__ import annotations

import os
import signal
import sys
import time

from parity.console import children
from parity.errors import InputError


def work(request: dict) -> object:
    if request["do"] == "return":
        return {"value": request["value"], "extra": os.environ.get("PARITY_TEST_EXTRA")}
    if request["do"] == "raise":
        raise InputError("capture.jsonl: line 3: not JSON; check capture.path")
    if request["do"] == "exit":
        sys.stdout.flush()
        os._exit(3)  # before any result is written
    if request["do"] in ("sleep", "stubborn"):
        if request["do"] == "stubborn":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a child that will not stop when asked
        with open(request["started"], "w", encoding="utf-8") as handle:
            handle.write(str(os.getpid()))
        try:
            time.sleep(60)
        finally:
            with open(request["started"] + ".cleaned", "w", encoding="utf-8") as handle:
                handle.write("cleaned")  # the work's own clean-up (a replay cancels its Flink job here)
    raise ValueError(f"unknown request {request!r}")


if __name__ == "__main__":
    sys.exit(children.serve(sys.argv[1:], work))
