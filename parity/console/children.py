"""parity's child processes: their environment, a request in, an outcome out, and their end.

parity starts three kinds of child: the second side of `parity check --sides-at-once`
(parity.replay.sides_at_once), the diff's second half (parity.compare.halves), and the noise replays of
`parity check --noise` (`parity replay` run again, parity.commands). Each gets `environment()`: it ends with
this process, even one killed with SIGKILL (`signals.child_env`), it imports what this process can (its
`sys.path` as PYTHONPATH: parity and the config's modules), and it gets what the caller adds (the Flink job
servers to reuse, the terminal's descriptor): this room sits below the replay, so the caller passes those in.

The first two are a `Child`: `python -m <module> SCRATCH`, its request pickled in a scratch folder of its own,
its outcome pickled there by `serve` as ("ok", value) or ("error", exception); the parent gets the value or
raises the exception, the same ParityError the work raised in the child.

    child = Child.start("the diff's second half (a child process)", "parity.compare.halves", request)
    try:
        ...                          # this process's own share
        value = child.result()       # raises the child's error
    finally:
        child.close()                # stops it if it still runs; removes its scratch folder

    # the child's module
    if __name__ == "__main__":
        sys.exit(children.serve(sys.argv[1:], work))    # work(request) -> value
"""
from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from typing import IO, Any, Callable, Mapping, Sequence

from parity.console import signals
from parity.errors import RunnerError, portable

REQUEST_FILE = "request.pickle"
RESULT_FILE = "result.pickle"
# seconds a child asked to stop has to end its work: a replay's cancel waits up to parity.replay.cancel.CANCEL_WAIT
# (60 s) for Flink to confirm it, plus a call or two
STOP_GRACE = 90.0


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child parity process: it ends with this process, imports what this
    process can, and has `extra` (PYTHONPATH in `extra` comes after this process's `sys.path`)."""
    env = signals.child_env()
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path, env.get("PYTHONPATH", "")] if p)
    return env


class Child:
    """A child process running `python -m <module> SCRATCH`, and its scratch folder (request and result)."""

    def __init__(self, what: str, fix: str, process: subprocess.Popen, scratch: str) -> None:
        self.what, self.fix = what, fix
        self.process = process
        self.scratch = scratch

    @classmethod
    def start(cls, what: str, module: str, request: Any, *, extra_env: Mapping[str, str] | None = None,
              fix: str = "", stdin: int | IO[Any] | None = subprocess.DEVNULL,
              pass_fds: Sequence[int] = ()) -> Child:
        """Starts `module`'s `serve` on `request`. `what` names the child in errors ("the diff's second half (a
        child process)"); `fix`, a sentence, says what to do when it ends without a result. `stdin`
        (subprocess.PIPE: text, for the caller to write) and `pass_fds` go to `subprocess.Popen`."""
        scratch = tempfile.mkdtemp(prefix="parity-child-")
        try:
            with open(os.path.join(scratch, REQUEST_FILE), "wb") as handle:
                pickle.dump(request, handle, protocol=pickle.HIGHEST_PROTOCOL)
            process = subprocess.Popen([sys.executable, "-m", module, scratch], env=environment(extra_env),
                                       stdin=stdin, text=True, pass_fds=tuple(pass_fds))
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        return cls(what, fix, process, scratch)

    def result(self) -> Any:
        """Waits for the child; returns the value its work returned or raises the error it raised."""
        code = self.process.wait()
        try:
            with open(os.path.join(self.scratch, RESULT_FILE), "rb") as handle:
                status, value = pickle.load(handle)
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            raise RunnerError(f"{self.what} ended with exit code {code} and no result ({type(exc).__name__}); "
                              f"its output is above" + (f". {self.fix}" if self.fix else "")) from exc
        if status == "ok":
            return value
        raise value

    def close(self) -> None:
        """Stops the child if it still runs (this process failed or is interrupted); removes its scratch folder.

        SIGTERM first, as an operator's stop would reach a `parity` process: the child's work ends the way the
        CLI's does (`serve` runs it with SIGTERM raising), so a child that submitted a Flink job cancels it and
        waits for Flink to confirm. Only a child still running after STOP_GRACE seconds is killed."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


def serve(argv: Sequence[str], work: Callable[[Any], Any]) -> int:
    """The child's side (`argv`: the scratch folder): follows its parent, runs `work` on the request and writes
    its outcome, the error included, for the parent to return or raise. Returns the exit code, 0."""
    signals.follow_parent_from_env()  # first: a child's imports may take seconds
    scratch = argv[0]
    try:
        with open(os.path.join(scratch, REQUEST_FILE), "rb") as handle:
            request = pickle.load(handle)
        with signals.handled():  # SIGTERM (`Child.close`) raises in `work`, whose clean-up then runs
            outcome: tuple[str, Any] = ("ok", work(request))
    except BaseException as exc:  # every error goes back to the parent, which raises it
        outcome = ("error", portable(exc))
    try:
        data = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # a value that does not pickle: the parent raises that instead
        data = pickle.dumps(("error", portable(exc)), protocol=pickle.HIGHEST_PROTOCOL)
    path = os.path.join(scratch, RESULT_FILE)
    with open(path + ".partial", "wb") as handle:  # whole or not at all: a child killed meanwhile left no result
        handle.write(data)
    os.replace(path + ".partial", path)
    return 0
