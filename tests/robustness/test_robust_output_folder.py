"""The `--out` folder (issue 24, items 5 to 8): parity writes only there, never through a link, never into a
folder that is not its own (unless `--force`), one run at a time, never reads its own output as a capture,
and never leaves an earlier run's verdict behind a failed one.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from robust_helpers import (PYTHON, REPO, check, file_bytes, good_records, jsonl_lines, make_project, python_env,
                           run_cli)

# The slow tier (`make test`, not `make test-fast`): most of its tests run the real `parity check`
# end to end, many as a process of their own.
pytestmark = pytest.mark.slow

REPORTS = ("report.json", "report.md", "report.html", "junit.xml", "timings.json")


def _project(tmp_path, **kwargs):
    return make_project(tmp_path / "project", lines=jsonl_lines(good_records(20)), **kwargs)


# ---------------------------------------------------------------------------------------------- item 5

@pytest.mark.parametrize("link, target", [
    ("report.json", "victim/report.json"),
    ("junit.xml", "victim/junit.xml"),
    ("timings.json", "victim/timings.json"),
    ("sides/production", "victim"),
    ("sides/offline/manifest.json", "victim/manifest.json"),
    ("sides/offline/values", "victim"),
    (".parity-out", "victim/marker"),
    (".parity-lock", "victim/lock"),
])
def test_a_link_planted_inside_out_is_never_written_through(link, target, tmp_path, capsys):
    project = _project(tmp_path)
    assert check(project, capsys)[0] == 0
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    if target != "victim":
        (tmp_path / target).write_text("keep me too")
    before = file_bytes(victim)
    planted = os.path.join(project.out, link)
    if os.path.isdir(planted):
        shutil.rmtree(planted)
    elif os.path.lexists(planted):
        os.unlink(planted)
    os.symlink(str(tmp_path / target), planted)

    code, out, errors = check(project, capsys)

    assert code == 0, errors
    assert file_bytes(victim) == before, "parity wrote through a link planted in its output folder"
    assert json.loads((tmp_path / "project" / "out" / "report.json").read_text())["verdict"] == "parity"


@pytest.mark.parametrize("command", ["check", "diff", "replay"])
def test_a_folder_that_is_not_empty_and_not_made_by_parity_is_refused_unless_force(command, tmp_path, capsys):
    project = _project(tmp_path)
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    (foreign / "report.json").write_text("my own report")
    sets = tmp_path / "sets"
    if command == "diff":
        for side in ("offline", "production"):
            assert run_cli(["replay", project.config, "--side", side, "--out", str(sets / side)], capsys)[0] == 0
    argv = {"check": ["check", project.config, "--out", str(foreign)],
            "diff": ["diff", str(sets / "offline"), str(sets / "production"), "--out", str(foreign)],
            "replay": ["replay", project.config, "--side", "offline", "--out", str(foreign)]}[command]

    code, _, errors = run_cli(argv, capsys)

    assert code == 2
    assert errors == (f"parity: error: --out {foreign}: the folder is not empty and was not made by parity (it "
                      f"holds notes.txt, report.json); parity removes its earlier outputs from the folder it writes "
                      f"to: give a new or empty folder, or pass --force to write into this one")
    assert sorted(os.listdir(foreign)) == ["notes.txt", "report.json"]
    assert (foreign / "report.json").read_text() == "my own report"

    # issue 40, item 7: --force removes and overwrites only what parity wrote, never the user's report.json
    # (`replay` writes no report.json: it leaves the user's alone)
    if command != "replay":
        code, _, errors = run_cli(argv + ["--force"], capsys)
        assert code == 2
        assert errors == (f"parity: error: --out {foreign}: it holds report.json, which parity did not write there "
                          f"and would replace; parity removes or overwrites only its own files, --force or not: move "
                          f"it away or give another --out")
        assert (foreign / "report.json").read_text() == "my own report"

    (foreign / "report.json").rename(foreign / "my-report.json")
    assert run_cli(argv + ["--force"], capsys)[0] == 0
    assert (foreign / "notes.txt").read_text() == "mine"
    assert (foreign / "my-report.json").read_text() == "my own report"
    assert ".parity-out" not in os.listdir(foreign), "--force must not make the folder parity's"
    assert run_cli(argv, capsys)[0] == 2, "still not parity's folder: refused again without --force"
    assert run_cli(argv + ["--force"], capsys)[0] == 0, "what parity wrote there (.parity-written) it replaces"


def test_out_slash_is_refused_and_nothing_is_written_there(tmp_path, capsys):
    project = _project(tmp_path)
    before = sorted(os.listdir("/"))

    code, _, errors = run_cli(["check", project.config, "--out", "/"], capsys)

    assert code == 2
    assert errors.startswith("parity: error: --out /: the folder is not empty and was not made by parity")
    assert errors.endswith("pass --force to write into this one")
    assert sorted(os.listdir("/")) == before


def test_an_empty_folder_becomes_parity_s_and_is_used_again_without_force(tmp_path, capsys):
    project = _project(tmp_path)
    os.makedirs(project.out)
    assert check(project, capsys)[0] == 0
    assert os.path.isfile(os.path.join(project.out, ".parity-out")), "the folder is not marked as parity's"
    assert check(project, capsys)[0] == 0
    os.remove(os.path.join(project.out, ".parity-out"))  # as an earlier release left it: parity's names only
    assert check(project, capsys)[0] == 0


# ---------------------------------------------------------------------------------------------- item 6

def test_a_capture_glob_never_reads_parity_output_under_the_config_folder(tmp_path, capsys):
    lines = jsonl_lines(good_records(20)) + [b'{"id": "not a number"}']  # one quarantined: quarantine.jsonl
    project = make_project(tmp_path / "project", lines=lines, capture_name="cap.jsonl",
                           capture_spec={"path": "**/*.jsonl"})
    for run in range(3):
        code, _, errors = check(project, capsys)
        assert code == 0, errors
        records = project.report()["records"]
        assert (records["left"], records["right"]) == (21, 21), f"run {run + 1} read parity's own output"
        assert records["quarantined"] == {"left": 1, "right": 1}


def test_a_capture_glob_that_only_matches_parity_output_says_so(tmp_path, capsys):
    project = _project(tmp_path)
    assert check(project, capsys)[0] == 0
    other = make_project(tmp_path / "other", lines=jsonl_lines(good_records(3)),
                         capture_spec={"path": os.path.join(project.out, "**", "*.jsonl")})

    code, _, errors = check(other, capsys)

    assert code == 2
    assert "matches no file" in errors
    assert "file(s) in parity's output folders were left out" in errors


# ---------------------------------------------------------------------------------------------- item 7

BLOCKING = '''
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def features(record):
    if record["id"] == 3 and os.environ.get("PARITY_TEST_BLOCK"):
        open(os.path.join(HERE, "reached"), "w").close()
        end = time.monotonic() + 60
        while not os.path.exists(os.path.join(HERE, "release")) and time.monotonic() < end:
            time.sleep(0.01)
    return {"v": record["v"]}
'''


def test_a_second_run_into_the_same_out_is_refused_while_the_first_runs(tmp_path, capsys):
    project = _project(tmp_path, module_code=BLOCKING)
    with open(tmp_path / "first.err", "w") as err:
        first = subprocess.Popen([PYTHON, "-m", "parity", "check", project.config, "--out", project.out],
                                 cwd=REPO, env=python_env(PARITY_TEST_BLOCK="1"), stdout=subprocess.DEVNULL,
                                 stderr=err)
    try:
        end = time.monotonic() + 180
        while not os.path.exists(os.path.join(project.folder, "reached")):
            assert first.poll() is None and time.monotonic() < end, (tmp_path / "first.err").read_text()
            time.sleep(0.02)

        code, _, errors = check(project, capsys)

        assert code == 2
        assert errors == (f"parity: error: --out {project.out}: another parity run (pid {first.pid}) is writing "
                          f"into this folder; wait for it to end or give another --out")
    finally:
        (tmp_path / "project" / "release").write_text("")
        first.wait(timeout=120)
    assert first.returncode == 0, (tmp_path / "first.err").read_text()
    assert project.report()["records"]["paired"] == 20
    assert check(project, capsys)[0] == 0  # the lock ends with the run that held it


# ---------------------------------------------------------------------------------------------- item 8

def test_a_failed_check_leaves_no_report_of_an_earlier_run(tmp_path, capsys):
    project = _project(tmp_path)
    assert check(project, capsys)[0] == 0
    os.remove(os.path.join(project.folder, "cap.jsonl"))

    code, _, errors = check(project, capsys)

    assert code == 2 and "does not exist" in errors
    assert [name for name in REPORTS if os.path.exists(os.path.join(project.out, name))] == []
    assert not os.path.exists(os.path.join(project.out, "sides", "production")), "a stale fingerprint set is left"


def test_a_failed_diff_leaves_no_report_of_an_earlier_run(tmp_path, capsys):
    project = _project(tmp_path)
    assert check(project, capsys)[0] == 0
    out = project.out
    code, _, errors = run_cli(["diff", os.path.join(out, "sides", "offline"), str(tmp_path / "missing"),
                               "--out", out], capsys)

    assert code == 2, errors
    assert [name for name in REPORTS[:4] if os.path.exists(os.path.join(out, name))] == []
    assert os.path.exists(os.path.join(out, "sides", "offline", "manifest.json")), "diff keeps the sets"


def test_an_interrupted_check_leaves_no_report_of_an_earlier_run(tmp_path, capsys):
    project = _project(tmp_path, module_code=BLOCKING)
    assert check(project, capsys)[0] == 0
    with open(tmp_path / "second.err", "w") as err:
        second = subprocess.Popen([PYTHON, "-m", "parity", "check", project.config, "--out", project.out],
                                  cwd=REPO, env=python_env(PARITY_TEST_BLOCK="1"), stdout=subprocess.DEVNULL,
                                  stderr=err, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        end = time.monotonic() + 180
        while not os.path.exists(os.path.join(project.folder, "reached")):
            assert second.poll() is None and time.monotonic() < end, (tmp_path / "second.err").read_text()
            time.sleep(0.02)
        second.send_signal(signal.SIGINT)
    finally:
        (tmp_path / "project" / "release").write_text("")
        second.wait(timeout=120)
    assert second.returncode == 130, (tmp_path / "second.err").read_text()
    assert [name for name in REPORTS if os.path.exists(os.path.join(project.out, name))] == []


def test_the_outputs_a_claim_removes_name_every_file_and_folder_a_replay_and_a_check_write():
    """`parity.storage.outdir` names them as literals (it is imported by the capture listing, which must not import
    Beam or Arrow): they must stay the names the writers use."""
    from parity.sets import analyzers
    from parity.replay import spill
    from parity.storage import outdir as output
    from parity.sets.fingerprint_set import (BUCKET_FILES_DIR, BUCKETS_FILE, FINGERPRINTS, MANIFEST, PARTS_DIR,
                                             QUARANTINE, STAGE_VALUES_DIR, VALUES_DIR)
    from parity.replay.pipeline import TFT_OUTPUT
    from parity.commands import NOISE_DIR, OUTPUT_FILES, SIDES_DIR

    from parity.cli import LIBRARIES_LOG, LOG_FILE

    logs = {LOG_FILE, LIBRARIES_LOG}  # the command line's: a failure's traceback, the libraries' output
    assert set(output.SET_OUTPUTS) == {MANIFEST, FINGERPRINTS, BUCKET_FILES_DIR, BUCKETS_FILE, QUARANTINE, analyzers.ANALYZERS_FILE,
                                       analyzers.FEEDS_FILE, output.TIMINGS,
                                       VALUES_DIR, STAGE_VALUES_DIR, PARTS_DIR, spill.SPILL_DIR, "_tft_tmp",
                                       TFT_OUTPUT, *logs}
    assert set(output.REPORTS) == set(OUTPUT_FILES.values())
    assert set(output.CHECK_OUTPUTS) == {*OUTPUT_FILES.values(), output.TIMINGS, SIDES_DIR, NOISE_DIR, *logs,
                                         output.DIFF_WORK}
