"""`parity check --sides-at-once`: the second side replays in a child process while the first replays."""
from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import parity
from parity import commands as run
from parity.cli import main
from parity.config import load_config
from parity.errors import ConfigError, InputError, RunnerError, UserCodeError
from parity.replay import flink
from parity.replay import sides_at_once as overlap
from parity.replay.pipeline import FromSideGraph, await_graph
from parity.sets.fingerprint_set import STAGE_VALUES_DIR, VALUES_DIR, read_values

from tests import meeting_transform
from tests.set_files import fingerprint_files

REPO = Path(__file__).resolve().parents[2]
TAXI = REPO / "pipelines" / "taxi"
REPORTS = ("report.json", "report.md", "junit.xml")  # report.md names its folder in `parity show` commands


def _children_named(marker: str) -> list[str]:
    """Command lines of this process's descendants that contain `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if marker in command and parent == os.getpid():
            found.append(command)
    return found


def _taxi_copy(folder: Path, **offline_changes: str) -> Path:
    """The taxi example's config in `folder` (its modules and its model beside it), with the offline side's lines
    replaced."""
    for name in os.listdir(TAXI):
        if name.endswith(".py"):
            shutil.copy(TAXI / name, folder / name)
    shutil.copytree(TAXI / "tip_model", folder / "tip_model")  # its `model:` (contract section 8)
    text = (TAXI / "parity.yaml").read_text(encoding="utf-8")
    text = text.replace("../../fixtures/", str(REPO / "fixtures") + "/")
    for old, new in offline_changes.items():
        assert old in text
        text = text.replace(old, new, 1)
    path = folder / "parity.yaml"
    path.write_text(text, encoding="utf-8")
    return path


GATES: list[tuple[bool, bool]] = []  # (go, whether the first side's replay had returned) per gate opening


@pytest.fixture(scope="module")
def both_ways(tmp_path_factory) -> tuple[Path, Path]:
    at_once, in_turn = tmp_path_factory.mktemp("at_once"), tmp_path_factory.mktemp("in_turn")
    replay, open_gate = run.replay, overlap.SecondSide.open_gate
    returned = []

    def recorded_replay(*args, **kwargs):
        result = replay(*args, **kwargs)
        returned.append(args[1])
        return result

    def recorded_open_gate(self, go=True):
        GATES.append((go, bool(returned)))
        return open_gate(self, go)

    run.replay, overlap.SecondSide.open_gate = recorded_replay, recorded_open_gate
    try:
        parity.check(str(TAXI / "parity.yaml"), out_dir=str(at_once), sides_at_once="on")
    finally:
        run.replay, overlap.SecondSide.open_gate = replay, open_gate
    parity.check(str(TAXI / "parity.yaml"), out_dir=str(in_turn), sides_at_once="off")
    return at_once, in_turn


@pytest.mark.slow  # two whole checks, one with its second side in a child process (the scenario suites cover it too)
def test_replaying_the_second_side_in_a_child_process_gives_byte_identical_reports(both_ways):
    at_once, in_turn = both_ways
    for name in REPORTS:
        text = (at_once / name).read_text(encoding="utf-8").replace(str(at_once), str(in_turn))
        assert text == (in_turn / name).read_text(encoding="utf-8"), name
    assert (at_once / "report.json").read_bytes() == (in_turn / "report.json").read_bytes()
    report = json.loads((at_once / "report.json").read_text(encoding="utf-8"))
    assert report["verdict"] == "diverged" and report["records"]["paired"] == 3000


@pytest.mark.slow  # the module's two whole checks (the both_ways fixture), one with its second side in a child process
def test_the_gated_side_writes_the_same_fingerprint_set_and_analyzer_values(both_ways):
    at_once, in_turn = both_ways
    side = Path("sides") / "production"
    assert fingerprint_files(at_once / side) == fingerprint_files(in_turn / side)
    # the gated side spills its staged batches, so it writes their stage values apart (`stage_values/`): the
    # same columns, row for row
    parts = sorted(p.stem for p in (in_turn / side / VALUES_DIR).glob("*.parquet"))
    assert parts and parts == sorted(p.stem for p in (at_once / side / VALUES_DIR).glob("*.parquet"))
    assert sorted(p.stem for p in (at_once / side / STAGE_VALUES_DIR).glob("*.parquet")) == parts
    for part in parts:
        assert read_values(str(at_once / side), part).equals(read_values(str(in_turn / side), part)), part
    for name in ("manifest.json", "analyzers.json"):
        assert (at_once / side / name).read_bytes() == (in_turn / side / name).read_bytes(), name
    assert not (at_once / side / "_spill").exists()


@pytest.mark.slow  # the module's two whole checks (the both_ways fixture), one with its second side in a child process
def test_the_gate_opens_when_the_first_sides_graph_is_written_before_its_replay_ends(both_ways):
    # the offline side's TFT pipeline opens it right after WriteTransformFn, while it transforms its own batches
    assert GATES and GATES[0] == (True, False)


@pytest.mark.slow  # the module's two whole checks (the both_ways fixture), one with its second side in a child process
def test_timings_say_when_the_sides_replayed_at_once(both_ways):
    at_once, in_turn = both_ways
    timings = json.loads((at_once / "timings.json").read_text(encoding="utf-8"))
    assert timings["sides_at_once"] is True
    # both are measured from the start: the second side ends after the first, whose graph it waited for
    assert timings["replay_production_seconds"] >= timings["replay_offline_seconds"] > 0
    # and the child's own replay, from its start to its end, which may come before the first side's
    assert 0 < timings["replay_production_own_seconds"] <= timings["replay_production_seconds"]
    assert "sides_at_once" not in json.loads((in_turn / "timings.json").read_text(encoding="utf-8"))
    assert not _children_named("parity.replay.sides_at_once")


@pytest.mark.slow  # a whole check whose child process fails
def test_an_error_on_the_second_side_comes_back_from_the_child_as_the_same_exception(tmp_path):
    config = _taxi_copy(tmp_path)
    text = config.read_text(encoding="utf-8")
    # the production side reads its own, missing capture
    config.write_text(text.replace("    transform:\n      saved:", "    capture: {path: missing.jsonl}\n"
                                   "    transform:\n      saved:", 1), encoding="utf-8")
    with pytest.raises(InputError, match="missing.jsonl") as caught:
        parity.check(str(config), out_dir=str(tmp_path / "out"), sides_at_once="on")
    assert "check capture.path" in str(caught.value)
    assert not _children_named("parity.replay.sides_at_once")


def test_when_the_first_side_fails_its_error_is_raised_and_the_waiting_child_is_stopped(tmp_path):
    config = _taxi_copy(tmp_path, **{"tft: preprocess:preprocessing_fn": "tft: preprocess:no_such_fn"})
    with pytest.raises(UserCodeError, match="no_such_fn"):
        parity.check(str(config), out_dir=str(tmp_path / "out"), sides_at_once="on")
    assert not _children_named("parity.replay.sides_at_once")


def test_the_child_starts_before_this_process_imports_the_configs_modules(monkeypatch, tmp_path):
    config = _taxi_copy(tmp_path, **{"tft: preprocess:preprocessing_fn": "tft: preprocess_early:preprocessing_fn"})
    shutil.copy(tmp_path / "preprocess.py", tmp_path / "preprocess_early.py")
    imported_at_start = []

    def start(*args, **kwargs):
        imported_at_start.append("preprocess_early" in sys.modules)
        raise RuntimeError("stopped at the child's start")

    monkeypatch.setattr(overlap.SecondSide, "start", start)
    with pytest.raises(RuntimeError, match="child's start"):
        parity.check(str(config), out_dir=str(tmp_path / "out"), sides_at_once="on")
    assert imported_at_start == [False]
    unchecked = load_config(str(config), check_refs=False)
    assert "preprocess_early" not in sys.modules
    assert load_config(str(config)) == unchecked and "preprocess_early" in sys.modules


def _await_graph(config, side, out_dir: str) -> str:
    """The child's `AwaitGraph` step: `pipeline.await_graph` at the child's end of the gate (`ParentsWord`)."""
    graph = FromSideGraph.of(config, side, out_dir, "")
    return await_graph(3, overlap.ParentsWord(), graph)


def test_the_gate_raises_when_the_first_side_never_finished(monkeypatch, tmp_path):
    config = load_config(str(TAXI / "parity.yaml"))
    monkeypatch.setattr(sys, "stdin", io.StringIO("stop\n"))
    with pytest.raises(RunnerError, match="waited for side 'offline'"):
        _await_graph(config, config.side("production"), str(tmp_path / "production"))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # the parent is gone: end of input
    with pytest.raises(RunnerError, match="did not finish"):
        _await_graph(config, config.side("production"), str(tmp_path / "production"))


def test_the_gate_opens_on_the_parents_word_and_names_the_first_sides_graph(monkeypatch, tmp_path):
    config = load_config(str(TAXI / "parity.yaml"))
    (tmp_path / "offline" / "tft_output" / "transform_fn").mkdir(parents=True)
    monkeypatch.setattr(sys, "stdin", io.StringIO("go\n"))
    found = _await_graph(config, config.side("production"), str(tmp_path / "production"))
    assert found == str(tmp_path / "offline" / "tft_output")


def test_a_child_that_dies_without_a_result_is_a_runner_error_naming_its_side(tmp_path):
    config = load_config(str(TAXI / "parity.yaml"))
    child = overlap.SecondSide.start(config, config.side("production"), str(tmp_path / "production"),
                                     str(tmp_path / "offline"), "DirectRunner")
    child._proc.kill()  # long before its replay could end: it is still importing Beam
    try:
        with pytest.raises(RunnerError, match="side 'production' in its own process ended with exit code -9 and "
                                              "no result.*--sides-at-once off"):
            child.finish()
    finally:
        child.close()
    assert not _children_named("parity.replay.sides_at_once")


def test_auto_replays_at_once_only_where_it_pays(monkeypatch, tmp_path):
    config_path = _taxi_copy(tmp_path)
    config = load_config(str(config_path))
    order = list(config.sides)
    monkeypatch.setattr(overlap, "usable_cores", lambda: 2)
    assert not overlap.wanted(config, order, "DirectRunner", [], "auto")  # the example's capture is small
    assert overlap.wanted(config, order, "DirectRunner", [], "on")
    # on Flink both sides' jobs go to the job server together, whatever the capture's size (issue 44): on the
    # embedded Flink parity starts (a MiniCluster per job), or when asked; a user's job server whose Flink's free
    # slots cannot be read runs them one after the other (a job short of slots fails after 5 minutes)
    assert overlap.wanted(config, order, "FlinkRunner", [], "auto")
    assert not overlap.wanted(config, order, "FlinkRunner", ["--job_endpoint=localhost:1"], "auto")
    assert overlap.wanted(config, order, "FlinkRunner", ["--job_endpoint=localhost:1", "--parallelism=2"], "on")
    assert not overlap.wanted(config, order, "FlinkRunner", [], "off")
    assert not overlap.wanted(config, order, "DirectRunner", ["--direct_num_workers=2"], "on")
    assert not overlap.wanted(config, order, "DirectRunner", [], "off")
    big = tmp_path / "big.jsonl"
    with open(big, "wb") as handle:
        handle.truncate(overlap.MIN_CAPTURE_BYTES)
    text = config_path.read_text(encoding="utf-8")
    config_path.write_text(text.replace(str(REPO / "fixtures/taxi/capture/trips.jsonl"), str(big)), encoding="utf-8")
    config = load_config(str(config_path))
    assert overlap.wanted(config, list(config.sides), "DirectRunner", [], "auto")
    monkeypatch.setattr(overlap, "usable_cores", lambda: 1)
    assert not overlap.wanted(config, list(config.sides), "DirectRunner", [], "auto")
    with pytest.raises(ConfigError, match="sometimes"):
        overlap.wanted(config, order, "DirectRunner", [], "sometimes")


@pytest.mark.slow  # a whole TFT replay in a child process
def test_a_child_told_the_job_servers_endpoint_later_replays_with_it(tmp_path):
    config = load_config(str(TAXI / "parity.yaml"))
    child = overlap.SecondSide.start(config, config.side("offline"), str(tmp_path / "offline"),
                                     str(tmp_path / "none"), "DirectRunner", endpoint_later=True)
    try:
        child.tell_endpoint("localhost:1")  # Beam's portable option; the DirectRunner leaves it unused
        manifest = child.finish()
    finally:
        child.close()
    assert manifest["side"] == "offline" and manifest["records"]["read"] == 3000


def test_a_child_waiting_for_the_job_servers_endpoint_stops_naming_it_when_the_check_stops_first(tmp_path):
    config = load_config(str(TAXI / "parity.yaml"))
    child = overlap.SecondSide.start(config, config.side("offline"), str(tmp_path / "offline"),
                                     str(tmp_path / "none"), "DirectRunner", endpoint_later=True)
    try:
        child.never()  # what close() says when the job server could not be started
        with pytest.raises(RunnerError, match="side 'offline' did not get the Flink job server's endpoint"):
            child.finish()
    finally:
        child.close()


def test_the_gate_travels_with_the_steps_only_where_they_run_in_the_submitting_process():
    assert flink.steps_in_this_process("DirectRunner", [])
    assert flink.steps_in_this_process("FlinkRunner", [])  # parity's default: LOOPBACK workers
    assert flink.steps_in_this_process("FlinkRunner", ["--environment_type=loopback"])
    assert not flink.steps_in_this_process("FlinkRunner",
                                           ["--environment_type=EXTERNAL", "--environment_config=host:50000"])


@pytest.mark.slow  # two checks with noise: eight replays in six processes
def test_the_noise_replays_of_a_check_at_once_run_at_once_and_report_as_one_after_the_other(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    config = meeting_transform.write_config(str(tmp_path), noise=True)
    parity.check(config, out_dir=str(tmp_path / "off"), sides_at_once="off")
    meet = tmp_path / "meet"
    meet.mkdir()
    # each side's transform waits for the other's, in the check's replays and again in its noise replays
    monkeypatch.setenv(meeting_transform.MEET_ENV, str(meet))
    parity.check(config, out_dir=str(tmp_path / "on"), sides_at_once="on")
    assert sorted(os.listdir(meet)) == ["check-offline", "check-production", "noise-offline", "noise-production"]
    for name in REPORTS:
        assert (tmp_path / "on" / name).read_bytes() == (tmp_path / "off" / name).read_bytes().replace(
            str(tmp_path / "off").encode(), str(tmp_path / "on").encode()), name


def test_the_cli_rejects_an_unknown_sides_at_once_setting(capsys):
    assert main(["check", str(TAXI / "parity.yaml"), "--sides-at-once", "sometimes"]) == 2
    assert "--sides-at-once" in capsys.readouterr().err


def test_the_benchmark_counts_a_childs_memory_with_its_parents(tmp_path):
    spec = importlib.util.spec_from_file_location("benchmark_harness", REPO / "benchmarks" / "run.py")
    harness = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(harness)
    alone = harness._rss_kib(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import sys; x = bytearray(200 << 20); x[::4096] = b'1' * "
                              "len(x[::4096]); print('ready', flush=True); sys.stdin.readline()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        together = harness._rss_kib(os.getpid())
    finally:
        child.stdin.close()
        child.wait()
    assert together - alone > 150 << 10  # KiB: the child's 200 MiB are counted
