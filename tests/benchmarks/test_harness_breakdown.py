"""benchmarks/harness_breakdown.py: a py-spy stack's kind, and its raw stacks read by harness (the pool's
grandchildren only) and job, on a few stacks written as py-spy writes them."""
from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import harness_breakdown  # noqa: E402

POOL = 'process 10:"python -m parity.replay.worker_pool --service_port=1"'
ZYGOTE = 'process 11:"python -c from parity.replay.harness_zygote import main; main(10)"'


def _harness(pid: int) -> str:
    return f'process {pid}:"python -c from parity.replay.harness_zygote import main; main(10)"'


def test_a_stack_is_the_first_kind_that_matches_and_a_wait_at_its_leaf_is_idle():
    spill_upload = ["SpillFn.process (parity/replay/spill.py:51)", "write (parity/replay/spill.py:96)",
                    "S3Uploader.put (apache_beam/io/aws/s3io.py:625)"]
    client = ["load (parity/replay/spill.py:103)", "S3Store._io (parity/storage/s3_clients.py:47)",
              "bounded_client (parity/storage/s3_clients.py:103)", "loads (json/__init__.py:359)"]

    assert harness_breakdown.kind(spill_upload) == "S3: requests, Beam's upload buffer (bytes +=)"
    assert harness_breakdown.kind(client) == "S3: boto3 clients built"
    assert harness_breakdown.kind(spill_upload[:2]) == "parity: spill pickling (written and loaded)"
    assert harness_breakdown.kind([*client[:1], "Condition.wait (threading.py:331)"]) == "idle"
    assert harness_breakdown.kind([' main(10)"']) == "no Python frame (native threads)"


def test_only_the_pools_grandchildren_count_and_a_process_that_ran_the_diff_is_the_diffs(tmp_path):
    stacks = tmp_path / "stacks.txt"
    stacks.write_text("\n".join([
        f"{POOL};_take (parity/replay/worker_pool.py:323) 5",
        f"{POOL};{ZYGOTE};_preload (parity/replay/harness_zygote.py:80) 7",
        f"{POOL};{ZYGOTE};{_harness(12)};ReadBatchesFn.process (parity/replay/read_step.py:71) 3",
        f"{POOL};{ZYGOTE};{_harness(13)};_SummarizeRangeFn.process (parity/compare/engine.py:133) 2",
    ]) + "\n")

    found = harness_breakdown.read_stacks(str(stacks))
    text = harness_breakdown.report(str(stacks), None, None)

    assert set(found) == {12, 13}
    assert found[12] == {("parity: capture read and parsed", False): 3}
    assert found[13] == {("parity: diff job (sets read, pairs compared)", True): 2}
    assert "the sides' jobs: 1 harness processes, 3 busy samples" in text
    assert "the diff's job: 1 harness processes, 2 busy samples" in text
