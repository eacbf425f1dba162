"""`--runner FlinkRunner` defaults and the job server's start-up errors (no JVM is started here but by the
fake `java` scripts below)."""
from __future__ import annotations

import os
import shutil
import socket
import stat
import time

import pytest

from parity.replay import flink
from parity.cli import main
from parity.errors import RunnerError
from parity.replay.runners import make_options

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCENARIO = os.path.join(ROOT, "fixtures", "scenarios", "seed_value_42_vs_43", "parity.yaml")


@pytest.fixture(autouse=True)
def _no_job_servers_left(monkeypatch):
    monkeypatch.delenv("PARITY_FLINK_JOB_SERVERS", raising=False)
    monkeypatch.delenv("PARITY_FLINK_START_TIMEOUT", raising=False)
    monkeypatch.delenv("PARITY_FLINK_JAR", raising=False)
    monkeypatch.setenv("PARITY_PROGRESS", "off")
    yield
    flink.stop_job_servers()


def _option(args, name):
    values = [a.split("=", 1)[1] for a in args if a.startswith(name + "=")]
    return values[-1] if values else None


def _fake_java(tmp_path, body: str) -> str:
    path = tmp_path / "java"
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_bundled_jar_and_its_flink_minor_are_found_without_flags():
    jar = flink.job_server_jar()
    assert os.path.isfile(jar) and jar.endswith(".jar")
    assert flink.flink_version() == flink.jar_properties().get("flink_version", "1.19") == "1.19"


def test_defaults_without_starting_anything():
    args = flink.flink_defaults([], start=False)
    assert _option(args, "--flink_version") == "1.19"
    assert _option(args, "--environment_type") == "LOOPBACK"
    assert _option(args, "--parallelism") == "1"
    # No --flink_master: Beam's default [auto] defers to the job server's master ([local] when parity starts it).
    assert _option(args, "--flink_master") is None and _option(args, "--job_endpoint") is None


def test_the_users_options_win(monkeypatch):
    user = ["--flink_master=localhost:8081", "--flink_version=1.20", "--parallelism=2",
            "--environment_type=EXTERNAL", "--environment_config=localhost:50000"]
    args = flink.flink_defaults(user, start=False)
    assert args == user


def test_without_job_endpoint_parity_starts_one_job_server_per_master_and_passes_its_endpoint(monkeypatch):
    started = []
    monkeypatch.setattr(flink, "shared_job_endpoint",
                        lambda jar, master: started.append((jar, master)) or "localhost:1234")
    args = flink.flink_defaults(["--flink_master=localhost:8081"])
    assert _option(args, "--job_endpoint") == "localhost:1234"
    assert started == [(flink.job_server_jar(), "localhost:8081")]
    args = flink.flink_defaults(["--flink_job_server_jar=/x/own.jar"])
    assert started[-1] == ("/x/own.jar", "[local]")


def test_a_started_job_server_reaches_child_processes_through_their_environment_not_this_ones(monkeypatch):
    """Before, the endpoint was written into os.environ: a `parity.check` in a user's process left
    PARITY_FLINK_JOB_SERVERS set there after it returned."""
    import json

    monkeypatch.setattr(flink, "_published", {})
    monkeypatch.setenv("PARITY_FLINK_JOB_SERVERS", json.dumps({"parent.jar|[local]": "localhost:7"}))
    before = dict(os.environ)
    flink._publish("own.jar", "[local]", "localhost:9")
    assert dict(os.environ) == before
    assert json.loads(flink.child_environment()["PARITY_FLINK_JOB_SERVERS"]) == {
        "parent.jar|[local]": "localhost:7", "own.jar|[local]": "localhost:9"}
    monkeypatch.delenv("PARITY_FLINK_JOB_SERVERS")
    monkeypatch.setattr(flink, "_published", {})
    assert flink.child_environment() == {}


def test_make_options_applies_the_defaults_for_flink_only(monkeypatch):
    monkeypatch.setattr(flink, "shared_job_endpoint", lambda jar, master: "localhost:1234")
    options = make_options("FlinkRunner", []).get_all_options()
    assert options["job_endpoint"] == "localhost:1234"
    assert options["environment_type"] == "LOOPBACK" and options["parallelism"] == 1
    assert options["flink_version"] == "1.19"
    assert make_options("DirectRunner", []).get_all_options()["job_endpoint"] is None


def test_a_missing_jar_says_to_run_make_setup(monkeypatch, tmp_path):
    monkeypatch.setattr(flink, "_JARS", str(tmp_path))
    with pytest.raises(RunnerError) as error:
        flink.job_server_jar()
    assert "make setup" in str(error.value) and "fetch_flink_jar.sh" in str(error.value)
    monkeypatch.setenv("PARITY_FLINK_JAR", str(tmp_path / "nope.jar"))
    with pytest.raises(RunnerError, match="nope.jar does not exist.*make setup"):
        flink.job_server_jar()


def test_a_missing_jar_exits_2_from_the_cli(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(flink, "_JARS", str(tmp_path))
    assert main(["check", SCENARIO, "--out", str(tmp_path / "out"), "--runner", "FlinkRunner"]) == 2
    assert "make setup" in capsys.readouterr().err


def test_a_job_server_that_does_not_answer_in_time_is_a_clear_exit_2_error(monkeypatch, tmp_path, capsys):
    jar = tmp_path / "job-server.jar"
    jar.write_bytes(b"not really a jar")
    monkeypatch.setenv("PARITY_JAVA", _fake_java(tmp_path, "exec sleep 60"))
    monkeypatch.setenv("PARITY_FLINK_START_TIMEOUT", "1.5")
    started = time.monotonic()
    code = main(["check", SCENARIO, "--out", str(tmp_path / "out"), "--runner", "FlinkRunner", "--",
                 f"--flink_job_server_jar={jar}"])
    assert code == 2
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert "did not answer within 1.5 s" in err, err
    shutil.rmtree(os.path.dirname(err.split("its log: ")[1].split(")")[0]), ignore_errors=True)
    assert str(jar) in err and "job port" in err and "PARITY_FLINK_START_TIMEOUT" in err and "--job_endpoint" in err
    # The sleeping stand-in for the JVM was stopped.
    port = int(err.split("job port ")[1].split(";")[0])
    with socket.socket() as sock:
        assert sock.connect_ex(("localhost", port)) != 0


def test_a_job_server_that_exits_while_starting_shows_its_log(monkeypatch, tmp_path):
    jar = tmp_path / "job-server.jar"
    jar.write_bytes(b"x")
    java = _fake_java(tmp_path, "echo 'Error: Invalid or corrupt jarfile' >&2; exit 1")
    server = flink.JobServer(str(jar), java=java)
    with pytest.raises(RunnerError, match=r"(?s)exited with code 1 while starting.*corrupt jarfile") as error:
        server.start(timeout=20)
    assert error.value.exit_code == 2
    assert server.log_path and os.path.exists(server.log_path)  # kept: the message names it
    shutil.rmtree(os.path.dirname(server.log_path))


def test_a_job_port_another_process_took_is_tried_once_more_on_a_new_port(tmp_path):
    jar = tmp_path / "job-server.jar"
    jar.write_bytes(b"x")
    server = flink.JobServer(str(jar), java=str(tmp_path / "java"))
    first = server.port
    _fake_java(tmp_path, 'while [ $# -gt 0 ]; do [ "$1" = --job-port ] && port=$2; shift; done\n'
                         f'if [ "$port" = {first} ]; then echo "java.net.BindException: Address already in use"\n'
                         '  exit 1\nfi\necho "started again on $port"; exit 3')
    with pytest.raises(RunnerError, match=r"(?s)exited with code 3 while starting.*started again on") as error:
        server.start(timeout=20)
    assert server.port != first and f"started again on {server.port}" in str(error.value)
    shutil.rmtree(os.path.dirname(server.log_path))


def test_the_job_server_runs_parity_java_options_then_beams_flink_arguments():
    server = flink.JobServer("/x/job-server.jar", "localhost:8081", port=8099, java="/opt/java")
    assert server.command("/tmp/artifacts") == [
        "/opt/java", *flink.JVM_OPTIONS, "-jar", "/x/job-server.jar", "--flink-master", "localhost:8081",
        "--artifacts-dir", "/tmp/artifacts", "--job-port", "8099", "--artifact-port", "0", "--expansion-port", "-1"]


def test_no_java_on_path_is_a_clear_error(tmp_path):
    jar = tmp_path / "job-server.jar"
    jar.write_bytes(b"x")
    with pytest.raises(RunnerError, match="not on PATH; install a Java 17"):
        flink.JobServer(str(jar), java=str(tmp_path / "no-java")).start(timeout=5)


def test_a_bad_start_timeout_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("PARITY_FLINK_START_TIMEOUT", "soon")
    with pytest.raises(RunnerError, match="PARITY_FLINK_START_TIMEOUT"):
        flink.start_timeout()


def test_a_users_job_endpoint_that_does_not_answer_is_a_clear_error(tmp_path, capsys):
    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = sock.getsockname()[1]
    code = main(["check", SCENARIO, "--out", str(tmp_path / "out"), "--runner", "FlinkRunner", "--",
                 f"--job_endpoint=localhost:{port}"])
    assert code == 2
    assert f"--job_endpoint=localhost:{port}: no Beam job server answers there" in capsys.readouterr().err


@pytest.mark.parametrize("raw", ["soon", "0", "-5"])
def test_a_bad_job_timeout_stops_the_run_before_its_job_is_submitted(monkeypatch, raw):
    from parity.replay.runners import make_runner

    monkeypatch.setenv("PARITY_FLINK_JOB_TIMEOUT", raw)
    with pytest.raises(RunnerError, match="PARITY_FLINK_JOB_TIMEOUT"):
        make_runner("FlinkRunner")


def test_without_a_job_timeout_a_flink_job_is_waited_for_without_bound(monkeypatch):
    monkeypatch.delenv("PARITY_FLINK_JOB_TIMEOUT", raising=False)
    assert flink.job_timeout() is None
    monkeypatch.setenv("PARITY_FLINK_JOB_TIMEOUT", "90")
    assert flink.job_timeout() == 90.0
