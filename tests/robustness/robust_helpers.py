"""Helpers of the robustness suite: tiny self-contained projects (config, capture, transform module) and a way
to run the real CLI on them in process.

Every project gets its own transform module name, because `module:attr` references are imported by name into
the test process and a second project reusing a name would silently get the first one's module.
"""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import sys
import textwrap
from dataclasses import dataclass
from typing import Any, Iterable

import yaml

from parity.cli import main

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_MODULE_IDS = itertools.count()

FEATURES = '''
def features(record):
    value = record.get("v")
    return {"v2": None if value is None else value * 2, "zone": record.get("zone")}
'''


def unique_module(prefix: str = "robust_fn") -> str:
    """A module name no other project of this test process uses."""
    return f"{prefix}_{os.getpid()}_{next(_MODULE_IDS)}"


def good_records(count: int = 20, start: int = 0) -> list[dict]:
    """Records that fit SCHEMA: id, t (seconds), arr (arrival, seconds), v (float), zone."""
    return [{"id": start + i, "t": 1_700_000_000 + 7 * i, "arr": 1_700_000_000 + 7 * i + 2,
             "v": round(0.5 + i * 1.25, 2), "zone": "abc"[i % 3]} for i in range(count)]


def jsonl_lines(records: Iterable[dict]) -> list[bytes]:
    return [json.dumps(record).encode() for record in records]


@dataclass
class Project:
    """A config, its capture and its transform module in one folder."""

    folder: str
    config: str
    module: str

    @property
    def out(self) -> str:
        return os.path.join(self.folder, "out")

    def quarantine(self, side: str = "left") -> list[dict]:
        """The quarantine.jsonl entries of one side (`left` or `right`, or the side's name)."""
        name = {"left": "offline", "right": "production"}.get(side, side)
        path = os.path.join(self.out, "sides", name, "quarantine.jsonl")
        with open(path, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle if line.strip()]

    def report(self) -> dict:
        with open(os.path.join(self.out, "report.json"), encoding="utf-8") as handle:
            return json.load(handle)


def make_project(folder: os.PathLike | str, *, capture: bytes | None = None, capture_name: str = "cap.jsonl",
                 lines: Iterable[bytes] | None = None, capture_spec: dict | None = None,
                 side: dict | None = None, per_side: dict | None = None, config: dict | None = None,
                 module_code: str = FEATURES, schema: dict | None | bool = True) -> Project:
    """Writes a two-side project: both sides read the same capture through the same python transform.

    Args:
        capture: the capture file's bytes; or `lines`, joined with newlines.
        capture_spec: entries merged into the top-level `capture` mapping (None removes an entry).
        side: entries merged into both sides (e.g. a timestamp or window config).
        per_side: {"offline" or "production": entries merged into that side only}.
        config: entries merged into the top level of the config, after everything else (may replace `sides`).
        schema: True for the default schema, None/False for none, or a mapping.
    """
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    if capture is None:
        capture = b"".join(line + b"\n" for line in (lines if lines is not None else jsonl_lines(good_records())))
    with open(os.path.join(folder, capture_name), "wb") as handle:
        handle.write(capture)
    module = unique_module()
    with open(os.path.join(folder, f"{module}.py"), "w", encoding="utf-8") as handle:
        handle.write(textwrap.dedent(module_code))
    spec: dict[str, Any] = {"path": capture_name, "key": ["id"], "max_quarantined": 1.0}
    if schema is True:
        spec["schema"] = {"id": "int64", "t": "int64", "arr": "int64", "v": "float64", "zone": "string"}
    elif schema:
        spec["schema"] = schema
    spec.update(capture_spec or {})
    spec = {k: v for k, v in spec.items() if v is not None}  # None removes a default, e.g. max_quarantined
    body: dict[str, Any] = {"transform": {"python": f"{module}:features"}}
    body.update(side or {})
    sides = {name: dict(body, **(per_side or {}).get(name, {})) for name in ("offline", "production")}
    document: dict[str, Any] = {"version": 1, "name": "robust", "capture": spec, "sides": sides}
    document.update(config or {})
    path = os.path.join(folder, "parity.yaml")
    with open(path, "w", encoding="utf-8") as handle:
        yaml.safe_dump(document, handle, sort_keys=False)
    return Project(folder, path, module)


def run_cli(argv: list[str], capsys=None) -> tuple[int, str, str]:
    """Runs `parity ARGV` in process; returns (exit code, stdout, the `parity: error:` lines of stderr).

    Output is read through pytest's `capsys` when given, else through redirected streams (module fixtures).
    """
    os.environ["PARITY_PROGRESS"] = "off"
    if capsys is not None:
        code = main(argv)
        captured = capsys.readouterr()
        out, err = captured.out, captured.err
    else:
        out_stream, err_stream = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out_stream), contextlib.redirect_stderr(err_stream):
            code = main(argv)
        out, err = out_stream.getvalue(), err_stream.getvalue()
    errors = "\n".join(line for line in err.splitlines() if line.startswith("parity: error"))
    return code, out, errors


def check(project: Project, capsys=None, *extra: str) -> tuple[int, str, str]:
    """`parity check CONFIG --out FOLDER/out [EXTRA]`."""
    return run_cli(["check", project.config, "--out", project.out, *extra], capsys)


def accounting_holds(report: dict) -> bool:
    """CONTRACT section 5: every record read counted exactly once per side, and the paired split."""
    r = report["records"]
    return (r["left"] == r["paired"] + r["left_only"] + r["quarantined"]["left"]
            and r["right"] == r["paired"] + r["right_only"] + r["quarantined"]["right"]
            and r["paired"] == r["matched"] + r["within_tolerance"] + r["diverged"])


def file_bytes(folder: str | os.PathLike) -> dict[str, bytes]:
    """Every file under `folder` with its bytes, by path relative to it (links not followed)."""
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, folder)] = handle.read()
    return found


def python_env(**extra: str) -> dict[str, str]:
    """An environment for a `python -m parity` subprocess run from anywhere."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PARITY_PROGRESS"] = "off"
    env.update(extra)
    return env


PYTHON = sys.executable
