"""Both sides' replays at once: the second side in a child process while this process replays the first.

`parity check` replays the sides one after the other in one process, and the in-process DirectRunner keeps
about one core busy. With two cores or more, when captures are large enough to pay for a second interpreter
(importing Beam and TensorFlow takes a few seconds), the second side replays in a child process meanwhile.

On Flink the two sides are two jobs submitted together to one job server: the child submits the second side's
job while this process submits the first's, with the same Beam options and one job server, which `check`
resolves once (one it starts, it starts right after the child, and tells the child its endpoint on its standard
input: the child's imports overlap the JVM's start). A small check's time there is mostly each job's start-up
(submission, the job's own start on Flink, the SDK harness's start), which the two jobs then spend at the same
time; with LOOPBACK workers each side's steps also run in its own process, on its own core.

Where the steps run decides how the gate travels (`flink.steps_in_this_process`): in this process and in the child (the
DirectRunner, Flink's LOOPBACK workers), the first side's pipeline says `ready` from its step and the second
side's pipeline waits in its step, after staging. Where they run in SDK harnesses elsewhere (a worker pool:
`--environment_type=EXTERNAL`, a cluster), neither end of the gate reaches them: this process opens the gate
when the first side's job has ended, and the child waits at it before it submits the second side's job.

A second side whose `saved: {from_side}` transform applies the first side's exported graph is *gated*
(`parity.replay.gate`): it reads, stages and spills every batch, then waits at the gate (its standard input)
for this process to say that the graph is written, then applies the graph. A `SecondSide` is this process's
end of that gate: a TFT first side's pipeline says `ready` through it as soon as it has published the graph,
while it still transforms its own batches; `finish` says it for any other first side, once its replay has
ended. The child replays through `parity.replay.job`, as `parity replay` does. Its output is the same
fingerprint set, byte for byte; its error comes back as the same exception (pickled, `parity.console.children`),
so `parity check` fails the same way.

    child = SecondSide.start(config, side, out_dir, first_dir, runner)
    ... replay the first side with gate=child ...
    manifest = child.finish()      # raises the child's ParityError
    child.close()                  # stops the child if it still runs (the first side failed)
"""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from typing import Any, Sequence

from parity.config import Config, SideConfig
from parity.console import children
from parity.console.cores import usable_cores
from parity.errors import ConfigError, ParityError, RunnerError
from parity.replay import flink
from parity.replay.gate import TransformGate

# Below this many capture bytes on the second side, starting a second interpreter costs more than it saves.
MIN_CAPTURE_BYTES = 16 << 20
SETTINGS = ("auto", "on", "off")
_GO = "go"
_ENDPOINT = "endpoint"  # the first line a child started with `endpoint_later` reads: "endpoint HOST:PORT"
# the children this process has started and not closed, by token: Beam pickles a step's arguments and the
# in-process runner unpickles them here, so a SecondSide handed to a step as its gate must come back as
# itself (`__reduce__`), not as a copy that has no child
_STARTED: dict[str, "SecondSide"] = {}
_TOKENS = itertools.count()


def wanted(config: Config, order: Sequence[SideConfig], runner: str, beam_args: Sequence[str] | None,
           setting: str = "auto") -> bool:
    """Whether `parity check` should replay the second side in a child process (`setting`: auto, on, off)."""
    if setting not in SETTINGS:
        raise ConfigError(f"--sides-at-once: {setting!r} is not one of {', '.join(SETTINGS)}")
    if setting == "off" or len(order) != 2:
        return False
    if runner == "FlinkRunner":
        # two jobs on one job server: each job's start-up (seconds, whatever its size) overlaps
        return setting == "on" or _room_for_two_jobs(beam_args or [])
    if runner != "DirectRunner" or beam_args:
        return False  # Beam options may ask the DirectRunner for worker processes
    if setting == "on":
        return True
    return usable_cores() >= 2 and _capture_bytes(config, order[1]) >= MIN_CAPTURE_BYTES


def _room_for_two_jobs(beam_args: Sequence[str]) -> bool:
    """Whether Flink can run both sides' jobs at once: an embedded Flink that parity starts (each job gets a
    MiniCluster of its own), or a cluster whose REST API says it has the slots of both free. A job that finds too
    few free slots waits for them, and fails after Flink's slot request timeout (5 minutes by default): a long
    first side would fail the second. A user's job server with no REST address known (`--flink_master`,
    PARITY_FLINK_REST): one after the other."""
    master = flink.option_value(beam_args, "--flink_master")
    endpoint = flink.option_value(beam_args, "--job_endpoint")
    rest = flink.rest_source(master, endpoint)
    if rest is None or (master in (None, flink.LOCAL_MASTER, "[auto]") and not os.environ.get(flink.REST_ENV)):
        return endpoint is None or flink.started_here(endpoint)
    address = rest()
    parallelism = int(flink.option_value(beam_args, "--parallelism") or 1)
    free = flink.free_slots(address) if address else None
    return free is not None and free >= 2 * parallelism


def _capture_bytes(config: Config, side: SideConfig) -> int:
    from parity.capture import list_capture_files

    try:
        return sum(os.path.getsize(path) for path in list_capture_files(side.capture.path, config.base_dir))
    except (OSError, ParityError):
        return 0  # the replay itself stops on a missing capture, naming it, in its turn


class SecondSide(TransformGate):
    """A child process replaying one side (`python -m parity.replay.sides_at_once SCRATCH`), with its result;
    the first side's end of the child's gate (`ready`, `never`)."""

    def __init__(self, side: SideConfig, child: children.Child):
        self.side = side
        self._child = child
        self._proc = child.process  # its standard input is the gate
        self.started = time.monotonic()
        self.ended: float | None = None  # when the child's replay ended (CLOCK_MONOTONIC: one clock per machine)
        self._gate_open = False
        self._lock = threading.Lock()  # the gate opens from a pipeline step's thread or from check()
        self._token = f"{os.getpid()}-{next(_TOKENS)}"
        self.endpoint_later = False  # whether the child waits for the job server's endpoint (`tell_endpoint`)
        _STARTED[self._token] = self

    def __reduce__(self) -> tuple:
        return _started, (self._token,)

    @classmethod
    def start(cls, config: Config, side: SideConfig, out_dir: str, first_dir: str, runner: str,
              lock_fd: int | None = None, beam_args: Sequence[str] | None = None,
              endpoint_later: bool = False) -> "SecondSide":
        """Starts the child. `lock_fd`, the output folder's lock (`parity.storage.outdir`), is inherited by the child:
        the folder stays locked until both processes have ended, however they end. `beam_args`: the run's Beam
        options, the same for both sides (on Flink, with the job server's `--job_endpoint` in them). With
        `endpoint_later`, this process starts the Flink job server once the child is started, and `tell_endpoint`s
        it: the child's seconds of imports overlap the JVM's start. The child reads it before its replay starts."""
        request = {"config": config.path, "side": side.name, "out": out_dir, "transform_from": first_dir,
                   "runner": runner, "beam_args": list(beam_args or []), "endpoint_later": endpoint_later}
        env = flink.child_environment()  # the child reuses this process's Flink job server
        from parity.console import terminal

        fd = terminal.terminal_fd()  # the child's libraries log where ours do; its own lines reach the terminal
        if fd is not None:
            env[terminal.TERMINAL_FD_ENV] = str(fd)
        child = children.Child.start(
            f"the replay of side '{side.name}' in its own process", "parity.replay.sides_at_once", request,
            extra_env=env, fix="Run `parity check --sides-at-once off` to replay the sides one after the other",
            stdin=subprocess.PIPE, pass_fds=[one for one in (lock_fd, fd) if one is not None])
        second = cls(side, child)
        second.endpoint_later = endpoint_later
        return second

    def tell_endpoint(self, endpoint: str) -> None:
        """Tells a child started with `endpoint_later` the job server's endpoint: the first line of its standard
        input, before the gate's word."""
        with self._lock:
            if self._gate_open:
                return  # the child is being stopped
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write(f"{_ENDPOINT} {endpoint}\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass  # the child has ended already; finish() says how

    def wait(self) -> bool:
        raise TypeError("the child waits at its gate; this process only opens it")

    def ready(self) -> None:
        self.open_gate()

    def never(self) -> None:
        self.open_gate(go=False)

    def open_gate(self, go: bool = True) -> None:
        """Tells a gated child that the first side's graph is written (or, with go=False, that it never will be)."""
        with self._lock:
            if self._gate_open:
                return
            self._gate_open = True
            try:
                assert self._proc.stdin is not None
                self._proc.stdin.write((_GO if go else "stop") + "\n")
                self._proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass  # the child has ended already; finish() says how

    def finish(self) -> dict[str, Any]:
        """Waits for the child; returns its side's manifest or raises the error its replay raised."""
        self.ready()
        manifest, self.ended = self._child.result()
        return manifest

    def close(self) -> None:
        """Stops the child if it still runs (the first side failed, or this process is interrupted)."""
        _STARTED.pop(self._token, None)
        self.never()
        self._child.close()


def _started(token: str) -> SecondSide:
    """The started child a pickled SecondSide names (in the process that started it)."""
    try:
        return _STARTED[token]
    except KeyError:
        raise RunnerError("a child replay's gate was unpickled outside the process that started the child, or "
                          "after it was closed; run `parity check --sides-at-once off`") from None


class ParentsWord(TransformGate):
    """The child's end of its gate: the parent's one line on standard input (`go`, else the graph will never
    be written; end of input when the parent is gone)."""

    def wait(self) -> bool:
        return sys.stdin.readline().strip() == _GO

    def ready(self) -> None:
        raise TypeError("the parent opens the child's gate; the child only waits at it")

    def never(self) -> None:
        raise TypeError("the parent opens the child's gate; the child only waits at it")


def _replay(request: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """The child's work: the side's manifest, and when its replay ended (CLOCK_MONOTONIC)."""
    from parity.console.collector import loading

    with loading():
        from parity.config import load_config
        from parity.console import terminal
        from parity.replay.job import replay_side
        from parity.replay.pipeline import FromSideGraph

    terminal.quiet_libraries()
    terminal.adopt_terminal_from_env()  # progress to the parent's terminal; libraries to its log (fd 2)
    # references unimported: the parent imports and checks them all (and stops this process if one is bad);
    # this side imports its own when its steps start
    config = load_config(request["config"], check_refs=False)
    side = config.side(request["side"])
    graph = FromSideGraph.of(config, side, request["out"], request["transform_from"])
    runner, beam_args = request["runner"], request.get("beam_args") or []
    if request.get("endpoint_later"):  # the parent starts the job server while this process imports
        said = sys.stdin.readline().split()
        if len(said) != 2 or said[0] != _ENDPOINT:
            raise RunnerError(f"the replay of side '{side.name}' did not get the Flink job server's endpoint: the "
                              f"check stopped before its job server answered")
        beam_args = [*beam_args, f"--job_endpoint={said[1]}"]
    gate = None
    if graph is not None:  # a gate for a side that waits for the first side's graph only
        if flink.steps_in_this_process(runner, beam_args):
            gate = ParentsWord()  # its pipeline waits at it, once every batch is staged
        elif not ParentsWord().wait():  # its steps run elsewhere: it waits here, before its job is submitted
            raise RunnerError(f"side '{side.name}' waited for side '{graph.from_side}' to export its transform "
                              f"graph, but that replay did not finish")
    manifest = replay_side(config, side, request["out"], runner=runner, beam_args=beam_args, graph=graph, gate=gate)
    return manifest, time.monotonic()


if __name__ == "__main__":
    code = children.serve(sys.argv[1:], _replay)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the result is on disk; tearing down Beam's and TensorFlow's threads took seconds
