"""What a config can make parity hold is bounded, and refused with a clear message (issue 24, item 12).

Before: a YAML "billion laughs" under `name:` was expanded by the error message's `repr()` (3.4e9 elements);
`window: {type: sliding, size: 1d, period: 1us}` put each record in 86.4e9 windows (killed at 24 GB, or, under a
memory limit, blamed a "window or shard key function" the config did not have); a 5 MB config with a 170k-field
schema never ended. Now: aliases that expand beyond `MAX_CONFIG_NODES` values are refused, a record may be in at
most `MAX_WINDOWS_PER_RECORD` windows, a config is at most `MAX_CONFIG_BYTES` and an inline schema at most
`MAX_SCHEMA_FIELDS` fields, and no message `repr()`s an unbounded value.
"""
from __future__ import annotations

import os
import resource
import subprocess
import time

import pytest
import yaml

from parity.config import validate as config_module
from parity.config import (MAX_CONFIG_BYTES, MAX_CONFIG_NODES, MAX_SCHEMA_FIELDS, MAX_WINDOWS_PER_RECORD,
                           load_config)
from robust_helpers import PYTHON, REPO, check, make_project, python_env

BASE = "version: 1\ncapture: {path: cap.jsonl}\nsides: {a: {}, b: {}}\n"


def _laughs(levels: int = 9) -> str:
    """`name:` holding a list whose aliases expand to 9**levels strings (387 million for 9)."""
    anchors = ["&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    anchors += [f"&l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return BASE + f"name: [{', '.join(anchors)}]\n"


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "parity.yaml"
    path.write_text(text)
    (tmp_path / "cap.jsonl").write_text('{"id": 1}\n')
    return str(path)


def _load_in_a_limited_process(path: str) -> subprocess.CompletedProcess:
    """`parity.config.load_config(path)` in a child with 1 GiB of address space and 120 s."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    script = ("import sys\nfrom parity.config import load_config\nfrom parity.errors import ParityError\n"
              "try:\n    load_config(sys.argv[1], check_refs=False)\nexcept ParityError as exc:\n"
              "    print(exc)\n    sys.exit(2)\n")
    return subprocess.run([PYTHON, "-c", script, path], env=python_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=120, preexec_fn=limit)


def test_a_billion_laughs_under_name_is_refused_in_a_second_with_a_short_message(tmp_path):
    path = _write(tmp_path, _laughs())
    started = time.monotonic()
    done = _load_in_a_limited_process(path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert time.monotonic() - started < 60
    message = done.stdout.strip()
    assert message.startswith(f"{path}: not valid YAML: the document's aliases (*name) expand to more than "
                              f"{MAX_CONFIG_NODES:,} values")
    assert len(message) < 400


def test_a_billion_laughs_through_the_cli_exits_two(tmp_path, capsys):
    from robust_helpers import run_cli

    path = _write(tmp_path, _laughs())
    code, out, errors = run_cli(["check", path, "--out", str(tmp_path / "out")], capsys)
    assert (code, out) == (2, "")
    assert "aliases (*name) expand to more than" in errors and len(errors) < 400
    assert not os.path.exists(tmp_path / "out")


def test_a_recursive_alias_is_refused(tmp_path, capsys):
    path = _write(tmp_path, BASE + "name: &a [1, *a]\n")
    with pytest.raises(config_module.ConfigError, match="aliases"):
        load_config(path)


def test_aliases_that_share_a_side_s_settings_still_load(tmp_path):
    text = ("version: 1\ncapture: {path: cap.jsonl}\nsides:\n  a: &side\n    window: {type: fixed, size: 1h}\n"
            "    shard: {key: [id], count: 4}\n  b: *side\n")
    config = load_config(_write(tmp_path, text))
    assert config.sides[0].window == config.sides[1].window


def test_a_value_shown_in_a_message_is_bounded_whatever_its_size():
    shared = ["lol"] * 10
    for _ in range(9):  # 10**10 strings once expanded
        shared = [shared] * 10
    started = time.monotonic()
    text = config_module._show(shared)
    assert len(text) <= 80 and time.monotonic() - started < 1
    huge = int("9" * 4000) ** 30  # 120,000 digits: str() of it raises, repr() of it is 120 kB
    assert config_module._show(huge) in ("an integer of about 119,999 digits", "an integer of about 120,000 digits")


def test_a_config_larger_than_the_limit_is_refused_before_it_is_parsed(tmp_path, capsys):
    fields = ", ".join(f"field_{i:06d}: list<string>" for i in range(170_000))  # about 5 MB
    path = _write(tmp_path, f"version: 1\ncapture: {{path: cap.jsonl, schema: {{{fields}}}}}\n"
                            f"sides: {{a: {{}}, b: {{}}}}\n")
    assert os.path.getsize(path) > 4 * MAX_CONFIG_BYTES
    started = time.monotonic()
    with pytest.raises(config_module.ConfigError) as raised:
        load_config(path)
    assert time.monotonic() - started < 5
    assert str(raised.value) == (f"{path}: the config is larger than 1 MiB; a parity config is a few kilobytes: "
                                 f"keep large schemas out of it (capture.schema may name a schema file)")


def test_an_inline_schema_above_the_field_limit_is_refused_naming_the_field(tmp_path):
    fields = ", ".join(f"f{i}: int64" for i in range(MAX_SCHEMA_FIELDS + 1))
    path = _write(tmp_path, f"version: 1\ncapture: {{path: cap.jsonl, schema: {{{fields}}}}}\n"
                            f"sides: {{a: {{}}, b: {{}}}}\n")
    with pytest.raises(config_module.ConfigError, match=r"capture.schema: 10,001 fields, above the limit of 10,000"):
        load_config(path)


def test_an_integer_beyond_pythons_digit_limit_in_a_config_exits_two(tmp_path, capsys):
    from robust_helpers import run_cli

    path = _write(tmp_path, BASE + "name: " + "9" * 5000 + "\n")
    code, _, errors = run_cli(["check", path, "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert errors.startswith(f"parity: error: {path}: not a usable YAML config: Exceeds the limit (4300 digits)")


def test_a_sliding_window_of_a_day_every_microsecond_is_refused_naming_the_window(tmp_path, capsys):
    project = make_project(tmp_path, side={"timestamp": {"field": "t", "unit": "s"},
                                           "window": {"type": "sliding", "size": "1d", "period": "1us"}})
    code, _, errors = check(project, capsys)
    assert code == 2
    assert errors == (f"parity: error: {project.config}: sides.offline.window: a sliding window of size '1d' every "
                      f"'1us' puts each record in 86,400,000,000 windows, above the limit of "
                      f"{MAX_WINDOWS_PER_RECORD:,} per record; make the period longer or the size shorter")


def test_the_most_windows_a_record_may_be_in_still_replay(tmp_path, capsys):
    project = make_project(tmp_path, side={"timestamp": {"field": "t", "unit": "s"},
                                           "window": {"type": "sliding", "size": "10000s", "period": "1s"}})
    assert check(project, capsys)[0] == 0


WINDOWFNS = '''
from apache_beam.transforms import window

def sliding():
    return window.SlidingWindows(86400, 0.000001)

class _Many(window.NonMergingWindowFn):
    def assign(self, context):
        start = context.timestamp
        return (window.IntervalWindow(start + i, start + i + 1) for i in range(10 ** 9))
    def get_window_coder(self):
        return window.IntervalWindowCoder()

def many():
    return _Many()

def features(record):
    return {"v": record.get("v")}
'''


@pytest.mark.parametrize("factory, count", [("sliding", "86,400,000,000"), ("many", "more than 10,000")])
def test_a_windowfn_putting_a_record_in_too_many_windows_exits_two_saying_so(tmp_path, capsys, factory, count):
    project = make_project(tmp_path, module_code=WINDOWFNS,
                           side={"timestamp": {"field": "t", "unit": "s"}})
    with open(project.config, encoding="utf-8") as handle:
        document = yaml.safe_load(handle)
    for side in document["sides"].values():
        side["window"] = {"windowfn": f"{project.module}:{factory}"}
    with open(project.config, "w", encoding="utf-8") as handle:
        yaml.safe_dump(document, handle)
    started = time.monotonic()
    code, _, errors = check(project, capsys)
    assert code == 2 and time.monotonic() - started < 120
    assert f"the WindowFn assigns a record to {count} windows, above the limit of 10,000 per record" in errors
    assert errors.startswith("parity: error: side 'offline': ")
    assert "shard key function" not in errors


def test_a_schema_type_that_is_not_a_string_is_refused_with_a_bounded_message(tmp_path):
    laughs = "[" + ", ".join(["&a [" + ", ".join(["int64"] * 50) + "]"] + ["*a"] * 999) + "]"  # 50,000 strings
    path = _write(tmp_path, f"version: 1\ncapture: {{path: cap.jsonl, schema: {{id: {laughs}}}}}\n"
                            f"sides: {{a: {{}}, b: {{}}}}\n")
    with pytest.raises(config_module.ConfigError) as raised:
        load_config(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: capture.schema.id: expected a type string such as int64 or list<string>, "
                              f"got [[")
    assert len(message) < 400
