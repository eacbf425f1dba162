"""The `parity` command line: argument parsing, and the one place that prints and exits.

Exit codes: 0 parity, 1 divergence, 2 no verdict (bad usage, config or input), 130 interrupted (SIGINT),
143 terminated (SIGTERM).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import TYPE_CHECKING, Sequence

from parity.choices import DIFF_ON, FORMATS, RUNNERS
from parity.storage.outdir import ERROR_LOG as LOG_FILE
from parity.storage.outdir import LIBRARIES_LOG

if TYPE_CHECKING:
    from parity.storage.context import Storage

EXIT_PARITY, EXIT_DIVERGED, EXIT_ERROR, EXIT_INTERRUPTED = 0, 1, 2, 130
_REPORT_FIELDS = {"verdict": str, "sides": dict, "records": dict, "stages": list}  # what every renderer reads
RUNNER_CHOICES = RUNNERS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 too; say how to get help
        self.print_usage(sys.stderr)
        sys.stderr.write(f"parity: error: {message}; see `parity {self.prog.split()[-1]} --help`\n")
        raise SystemExit(EXIT_ERROR)


class _Version(argparse.Action):
    """`--version`: one unwrapped line (argparse's own action wraps it to the terminal's width)."""

    def __call__(self, parser, namespace, values, option_string=None):  # type: ignore[no-untyped-def]
        from parity.replay.environment import version_text

        sys.stdout.write(version_text() + "\n")
        raise SystemExit(EXIT_PARITY)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="parity", description="Replay captured records through an offline and a production "
                                                "pipeline and report the first stage where they diverge.",
                     epilog="--debug (anywhere): print a failure's traceback on the terminal too (it is written "
                            f"to {LOG_FILE} in the out folder). -v, --verbose (anywhere): show the libraries' "
                            f"logs (TensorFlow, absl, Beam) on the terminal instead of in {LIBRARIES_LOG}; under "
                            f"report.redact only with {UNREDACTED_FLAG} too (they and user code's print() may quote "
                            f"raw values).")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print parity's version and those of Beam, TFT, TensorFlow and pyarrow, and exit")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    check = commands.add_parser("check", help="replay both sides, diff them, write every report")
    check.add_argument("config")
    check.add_argument("--out", default="parity-out", help="output folder (default: parity-out)")
    check.add_argument("--runner", default="DirectRunner", choices=RUNNER_CHOICES)
    check.add_argument("--noise", action="store_true",
                       help="replay each side twice to find nondeterministic stages")
    check.add_argument("--sides-at-once", default="auto", choices=("auto", "on", "off"),
                       help="replay the second side in a child process while the first replays (auto: on the "
                            "DirectRunner with two cores and a capture of 16 MiB or more)")
    _add_diff_on(check)
    _add_force(check)

    replay = commands.add_parser("replay", help="replay one side and write its fingerprint set")
    replay.add_argument("config")
    replay.add_argument("--side", required=True)
    replay.add_argument("--out", required=True)
    replay.add_argument("--runner", default="DirectRunner", choices=RUNNER_CHOICES)
    replay.add_argument("--reorder", action="store_true", help=argparse.SUPPRESS)  # the noise replay
    replay.add_argument("--transform-from", default=None,
                        help="fingerprint set (or TFT output dir) whose exported graph `saved: {from_side}` applies")
    _add_force(replay)

    diff = commands.add_parser("diff", help="diff two fingerprint sets and write the reports")
    diff.add_argument("left")
    diff.add_argument("right")
    diff.add_argument("--out", required=True)
    diff.add_argument("--config", default=None)
    diff.add_argument("--runner", default="DirectRunner", choices=RUNNER_CHOICES,
                      help="the runner of the diff's Beam job under --diff-on engine (default: DirectRunner)")
    _add_diff_on(diff)
    _add_force(diff)

    report = commands.add_parser("report", help="render report.json again in another format")
    report.add_argument("report_json")
    report.add_argument("--format", required=True, choices=("md", "html", "junit", "json"))
    report.add_argument("--out", default=None)

    show = commands.add_parser("show", help="one record, stage by stage, both sides")
    show.add_argument("dir")
    show.add_argument("key")

    init = commands.add_parser("init", help="write a commented starting parity.yaml from a capture")
    init.add_argument("--capture", required=True, help="the captured records: a file, a folder or a glob")
    init.add_argument("--schema", default=None, help="a TFMD schema.pbtxt (or SchemaGen's output folder)")
    init.add_argument("--offline", default=None,
                      help="the offline transform: module:fn or path/to/module.py:fn (a TFT preprocessing_fn when "
                           "named so, else a per-record Python function; tft: or python: in front says which), "
                           "or an exported TFT output folder")
    init.add_argument("--production", default=None, help="the production transform, as --offline")
    init.add_argument("--key", action="append", default=None, help="a record key field (repeat for several)")
    init.add_argument("--format", default=None, choices=FORMATS,
                      help="the capture's format (default: from the extension or the first bytes)")
    init.add_argument("--out", default="parity.yaml", help="the config to write (default: parity.yaml); "
                                                          "an existing file is never overwritten")
    return parser


def _add_diff_on(command: argparse.ArgumentParser) -> None:
    command.add_argument("--diff-on", default="auto", choices=DIFF_ON,
                         help="where the diff's per-pair work runs: engine (a Beam job on --runner, over the sets' "
                              "key ranges), local (this process), auto (default: engine when the SDK workers run "
                              "outside this process, i.e. not the DirectRunner and not LOOPBACK, or --out is a "
                              "URL); the report is the same. Sets written by taps have no key ranges: auto diffs "
                              "them here, engine refuses them")


def _add_force(command: argparse.ArgumentParser) -> None:
    command.add_argument("--force", action="store_true",
                         help="write into --out even when it is not empty and was not made by parity (parity "
                              "then removes only its own earlier outputs there)")


def _split_beam_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    argv = list(argv)
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], argv[index + 1:]
    return argv, []


def _summary(report: dict, out_dir: str) -> str:
    from parity.report.result import Report

    return Report(report, out_dir).summary()


_VERBOSE_FLAGS = ("-v", "--verbose")
# -v under report.redact shows the libraries' and user code's output only with this flag too: the user says so
UNREDACTED_FLAG = "--unredacted-output"


def _diverted(args: argparse.Namespace, beam_args: list[str]) -> int:
    """`_run` with the libraries' output (TensorFlow's C++ and absl lines, Python logging, Beam's notices) in
    a log file that ends up as libraries.log in the out folder (if the run made one), off the terminal."""
    import shutil
    import tempfile

    from parity.console import terminal

    handle, log = tempfile.mkstemp(prefix="parity-libraries-", suffix=".log")
    os.close(handle)
    try:
        with terminal.libraries_to(log):
            return _run(args, beam_args)
    finally:
        from parity.storage import outdir as output

        # under report.redact not kept: Beam logs a failed step's error and user code prints records (-v shows
        # the libraries' output on the terminal instead)
        if args.command != "init" and not _redacts(args) and output.is_claimed(args.out) and os.path.getsize(log):
            with contextlib.suppress(OSError):
                shutil.move(log, os.path.join(args.out, LIBRARIES_LOG))
        if os.path.exists(log):
            os.remove(log)




def _split_debug(argv: list[str]) -> tuple[list[str], bool]:
    """`--debug` anywhere among parity's own arguments: tracebacks on the terminal too."""
    return [arg for arg in argv if arg != "--debug"], "--debug" in argv


def _error_log(args: argparse.Namespace | None, kind: str) -> str | None:
    """Where a failed run's traceback goes: the run's out folder (`check`, `replay`, `diff`) once the run made
    it its own; else, when user code failed or the error was unexpected, a file in the system's temporary
    folder; else nowhere: a bad config, input or out folder says all there is to say in its message, and
    nothing is written into a folder that is not parity's."""
    import tempfile

    from parity.storage import outdir as output

    out = getattr(args, "out", None) if args is not None and args.command in ("check", "replay", "diff") else None
    if out and output.is_claimed(out) and not _redacts(args):  # a traceback quotes values: not into the out folder
        return os.path.join(out, LOG_FILE)
    if kind == "usage":
        return None
    handle, path = tempfile.mkstemp(prefix="parity-error-", suffix=".log")
    os.close(handle)
    return path


def _redacts(args: argparse.Namespace | None) -> bool:
    """Whether the command's config sets `report.redact` (then no raw value reaches the out folder or the
    terminal: messages go through `parity.sets.redaction.redact_message`, logs stay in the temporary folder)."""
    config = getattr(args, "config", None) if args is not None else None
    if not config or args.command not in ("check", "replay", "diff"):
        return False
    cached = getattr(args, "_redacts", None)
    if cached is None:
        from parity.config import load_config

        try:
            cached = load_config(config, check_refs=False).report.redact
        except Exception:  # a config that does not load says nothing of redaction, and holds no record
            cached = False
        args._redacts = cached
    return cached


def _frames_only(exc: BaseException) -> str:
    """A traceback's frames and exception types without their messages (which can quote any value)."""
    import traceback

    parts, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        stack = traceback.StackSummary.extract(traceback.walk_tb(current.__traceback__))
        parts.append("Traceback (most recent call last):\n" + "".join(stack.format())
                     + f"{type(current).__name__}: (message withheld under report.redact)\n")
        current = current.__cause__ or current.__context__
    return "".join(reversed(parts))


def _report_failure(exc: BaseException, args: argparse.Namespace | None, debug: bool,
                    message: str | None = None) -> int:
    """The one place a failure is told: a one-line message naming the culprit, the traceback in a log file (and
    on the terminal with --debug), and exit 2 (a ParityError's own code). Never exit 1: that means divergence."""
    import traceback

    from parity.errors import ParityError, UserCodeError
    from parity.report.text import printable

    text = "".join(traceback.format_exception(exc))
    if message is not None:
        code = EXIT_ERROR
    elif isinstance(exc, ParityError):
        message, code = str(exc), exc.exit_code
    else:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        message = f"unexpected {type(exc).__name__}: {first}".rstrip(": ")
        code = EXIT_ERROR
    where = ""
    try:
        kind = "user" if isinstance(exc, (UserCodeError, SystemExit)) else \
            "usage" if isinstance(exc, ParityError) else "unexpected"
        path = _error_log(args, kind)
        if path is not None:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
            where = f" (traceback: {path}{'' if debug else '; --debug prints it'})"
    except OSError:
        pass
    if _redacts(args):
        from parity.sets.redaction import redact_message

        message = redact_message(message)
        text = _frames_only(exc) if debug else text  # --debug's terminal copy; the log is not in the out folder
    if debug:
        sys.stderr.write("".join(printable(line) + "\n" for line in text.splitlines()))
    sys.stderr.write(f"parity: error: {printable(message)}{where}\n")  # keys, names: no raw control bytes
    return code if code != EXIT_DIVERGED else EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    from parity.console import signals

    signals.follow_parent_from_env()  # a noise replay ends with the `parity check` that started it
    with signals.handled():  # SIGTERM ends a run as SIGINT does
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    own, beam_args = _split_beam_args(sys.argv[1:] if argv is None else argv)
    own, debug = _split_debug(own)
    verbose = any(flag in own for flag in _VERBOSE_FLAGS)
    unredacted = UNREDACTED_FLAG in own
    own = [arg for arg in own if arg not in (*_VERBOSE_FLAGS, UNREDACTED_FLAG)]
    if not verbose:
        from parity.console import terminal

        terminal.quiet_libraries()
    from parity.console import progress, signals

    progress.enable_for_cli()
    args = None
    try:
        args = build_parser().parse_args(own)
        if args.command == "init" and not verbose:  # init loads the module and TensorFlow: their lines stay off
            return _diverted(args, beam_args)
        if args.command in ("check", "replay", "diff"):
            if not verbose:
                return _diverted(args, beam_args)
            if _redacts(args) and not unredacted:  # what user code prints may be the values redaction hides
                sys.stderr.write(f"parity: -v under report.redact: the libraries' and user code's output stays off "
                                 f"the terminal (it may quote raw values); add {UNREDACTED_FLAG} to show it\n")
                return _diverted(args, beam_args)
        return _run(args, beam_args)
    except SystemExit as exc:  # argparse's usage errors, and user code calling sys.exit()
        if args is None:
            return int(exc.code or 0) if isinstance(exc.code, int) or exc.code is None else EXIT_ERROR
        return _report_failure(exc, args, debug, f"user code called sys.exit({exc.code!r}) during the run; "
                                                 f"a module or function a config names must return or raise, "
                                                 f"not exit (see the traceback for which)")
    except KeyboardInterrupt as exc:
        signum = signals.interruption(exc)
        sys.stderr.write(signals.message(signum) + "\n")
        return signals.exit_code(signum)
    except Exception as exc:  # the boundary: every error becomes a message and exit 2
        if signals.received() is not None:  # an error on the way out of an interrupted run is the interruption's
            sys.stderr.write(signals.message(signals.received()) + "\n")
            return signals.exit_code(signals.received())
        return _report_failure(exc, args, debug)


def _write_rendered(path: str, text: str, storage: Storage) -> None:
    """`parity report --out FILE`: the rendered report, or an OutputError naming the path and what is wrong."""
    from parity.errors import OutputError
    from parity.storage import urls

    folder = urls.parent(path) or "."
    try:
        if storage.isdir(path):
            raise OutputError(f"--out {path}: is a folder; `parity report --out` takes a file path, e.g. "
                              f"{urls.child(path, 'report.md')}")
        if not storage.can_create_in(folder):
            raise OutputError(f"--out {path}: the folder {folder} does not exist"
                              f"{' (it is a file)' if storage.exists(folder) else ''}; create it first or give "
                              f"another path")
        storage.write_text_in_place(path, text)
    except OSError as exc:
        raise OutputError(f"--out {path}: cannot write the report: {exc.strerror or exc}") from exc


def _verdict_code(report: dict) -> int:
    return EXIT_PARITY if report["verdict"] == "parity" else EXIT_DIVERGED


def _run(args: argparse.Namespace, beam_args: list[str]) -> int:
    from parity.console.collector import loading

    with loading():  # Beam, Arrow, numpy: seconds of imports
        from parity import commands as run
        from parity.config import load_config
        from parity.console import terminal
        from parity.replay.runners import check_beam_args
        from parity.report.text import printable_json

    check_beam_args(beam_args)  # before anything is written
    from parity.storage import urls
    from parity.storage.context import Storage

    storage = Storage.of(beam_args)  # URLs (s3://...) among the paths use Beam's storage options given after --
    if args.command in ("check", "replay", "diff") and args.out:
        args.out = urls.resolved(args.out, "--out")  # file:///x is /x everywhere the command names it

    if args.command == "check":
        with terminal.user_output_to_stderr():  # stdout: the summary alone
            report = run.check(args.config, out_dir=args.out, runner=args.runner, pipeline_options=beam_args,
                               noise=True if args.noise else None, sides_at_once=args.sides_at_once,
                               force=args.force, diff_on=args.diff_on)
        print(_summary(report, args.out))
        return _verdict_code(report)
    if args.command == "replay":
        with terminal.user_output_to_stderr():
            manifest = run.replay(load_config(args.config), args.side, args.out, runner=args.runner,
                                  beam_args=beam_args, transform_from=args.transform_from, reorder=args.reorder,
                                  force=args.force)
        records = manifest["records"]
        print(f"parity: replayed side {args.side}: {records['fingerprinted']} records fingerprinted, "
              f"{records['quarantined']} quarantined -> {args.out}")
        return EXIT_PARITY
    if args.command == "diff":
        with terminal.user_output_to_stderr():
            config = load_config(args.config) if args.config else None
            report = run.diff(args.left, args.right, args.out, config=config, force=args.force,
                              pipeline_options=beam_args, runner=args.runner, diff_on=args.diff_on)
        print(_summary(report, args.out))
        return _verdict_code(report)
    if args.command == "report":
        from parity.errors import InputError
        from parity.report import RENDERERS

        try:
            report = json.loads(storage.read_text(args.report_json))
        except RecursionError as exc:  # json's decoder recurses once per level
            raise InputError(f"{args.report_json}: not a parity report: its JSON is nested too deeply for "
                             f"Python's recursion limit ({sys.getrecursionlimit():,}); a report.json is a few "
                             f"levels deep") from exc
        except (OSError, ValueError) as exc:
            raise InputError(f"{args.report_json}: cannot read a report.json: {exc}") from exc
        if not isinstance(report, dict) or report.get("format") != "parity.report/1":
            raise InputError(f"{args.report_json}: not a parity report (format parity.report/1)")
        for name, kind in _REPORT_FIELDS.items():
            if not isinstance(report.get(name), kind):
                raise InputError(f"{args.report_json}: field '{name}' is missing or not a {kind.__name__}; "
                                 f"not a complete parity report: write it again with `parity check` or `parity diff`")
        try:
            if args.format in ("md", "html"):  # name the report's own folder in `parity show` commands
                folder = urls.parent(args.report_json) or "."
                text = RENDERERS[args.format](report, out_dir=folder)
            else:
                text = RENDERERS[args.format](report)
        except (KeyError, TypeError, AttributeError, ValueError, IndexError, RecursionError) as exc:
            raise InputError(f"{args.report_json}: not a complete parity report ({type(exc).__name__}: {exc}); "
                             f"write it again with `parity check` or `parity diff`") from exc
        if args.out:
            _write_rendered(args.out, text, storage)
        else:  # to a terminal: control characters in captured strings shown, never sent
            sys.stdout.write(printable_json(text) if args.format == "json" else text)
        return EXIT_PARITY
    if args.command == "init":
        from parity.init_config import InitOptions, init_config

        path = init_config(InitOptions(capture=args.capture, out=args.out, schema=args.schema, offline=args.offline,
                                       production=args.production, key=tuple(args.key or ()), format=args.format),
                           storage)
        print(f"parity: wrote {path}; check it, then run `parity check {path}`")
        return EXIT_PARITY
    result = run.show(args.dir, args.key, storage)
    print(printable_json(json.dumps(result, indent=2, ensure_ascii=False)))  # captured values: no raw controls
    return EXIT_PARITY if result["first_divergence"] is None else EXIT_DIVERGED


if __name__ == "__main__":
    raise SystemExit(main())
